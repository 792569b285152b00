/* safetensors reader/writer and sharded weights: golden model files, a sharded BF16 copy,
 * a table of malformed files (each must give an error naming the file, never a crash),
 * writer round trip. */
#include "testutil.h"
#include "dtype.h"
#include "fileio.h"

#include <dirent.h>

#define TRANSFORMER_2B GOLDEN "/transformer_2b/model/transformer/diffusion_pytorch_model.safetensors"
#define SHARDED_2B "tests/data/sharded_2b"

static void test_read_golden_model(void **state) {
    (void)state;
    cvx_safetensors *st = tu_open(TRANSFORMER_2B);
    assert_true(cvx_st_count(st) > 10);
    assert_string_equal(cvx_st_metadata(st, "format"), "pt");
    assert_null(cvx_st_metadata(st, "nope"));
    const cvx_tensor *t = cvx_st_find(st, "patch_embed.proj.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, CVX_F32);
    assert_int_equal(t->ndim, 4);
    assert_int_equal(t->shape[0], 48);  /* inner dim D = 3 heads x 16 */
    assert_int_equal(t->shape[1], 4);   /* in_channels */
    assert_int_equal(t->numel, 48 * 4 * 2 * 2);
    assert_int_equal(t->nbytes, (size_t)t->numel * 4);
    assert_null(cvx_st_find(st, "no.such.tensor"));
    /* every tensor is findable by name and lies inside the file */
    for (int i = 0; i < cvx_st_count(st); i++) {
        const cvx_tensor *a = cvx_st_tensor(st, i);
        assert_ptr_equal(cvx_st_find(st, a->name), a);
    }
    cvx_st_close(st);
}

/* The sharded BF16 copy holds every tensor of the original, rounded to bf16 exactly as
 * PyTorch's .to(torch.bfloat16) does, each in the shard its index names. */
static void test_sharded_bf16_matches_original(void **state) {
    (void)state;
    cvx_safetensors *orig = tu_open(TRANSFORMER_2B);
    cvx_weights *w = cvx_weights_open(SHARDED_2B);
    ASSERT_NONNULL(w);
    assert_int_equal(cvx_weights_count(w), cvx_st_count(orig));
    assert_non_null(strstr(cvx_weights_path(w), "index.json"));
    int shards_seen[2] = {0, 0};
    for (int i = 0; i < cvx_st_count(orig); i++) {
        const cvx_tensor *a = cvx_st_tensor(orig, i);
        const cvx_tensor *b = cvx_weights_get(w, a->name, a->shape, a->ndim);
        ASSERT_NONNULL(b);
        assert_int_equal(b->dtype, CVX_BF16);
        shards_seen[strstr(b->file, "00001-of") ? 0 : 1] = 1;
        float *fa = cvx_tensor_f32_dup(a), *fb = cvx_tensor_f32_dup(b);
        for (int64_t k = 0; k < a->numel; k++) {
            float want = cvx_bf16_to_f32(cvx_f32_to_bf16(fa[k]));
            if (fb[k] != want) fail_msg("%s[%lld]: %g != %g", a->name, (long long)k, fb[k], want);
        }
        free(fa);
        free(fb);
    }
    assert_true(shards_seen[0] && shards_seen[1]);
    /* shape check names file, tensor, both shapes */
    assert_null(cvx_weights_get(w, "norm_final.weight", CVX_SHAPE(47)));
    assert_non_null(strstr(cvx_last_error(), "norm_final.weight"));
    assert_non_null(strstr(cvx_last_error(), "[48]"));
    assert_non_null(strstr(cvx_last_error(), "[47]"));
    assert_null(cvx_weights_get(w, "missing.weight", CVX_SHAPE(1)));
    assert_non_null(strstr(cvx_last_error(), "missing.weight"));
    cvx_weights_close(w);
    cvx_st_close(orig);
}

static void test_weights_open_forms(void **state) {
    (void)state;
    cvx_weights *w = cvx_weights_open(GOLDEN "/transformer_2b/model/transformer");  /* directory, one file */
    ASSERT_NONNULL(w);
    assert_non_null(cvx_weights_find(w, "proj_out.weight"));
    cvx_weights_close(w);
    w = cvx_weights_open(TRANSFORMER_2B);  /* the file itself */
    ASSERT_NONNULL(w);
    cvx_weights_close(w);
    w = cvx_weights_open(SHARDED_2B "/diffusion_pytorch_model.safetensors.index.json");  /* the index */
    ASSERT_NONNULL(w);
    cvx_weights_close(w);
    assert_null(cvx_weights_open("tests/data/does-not-exist"));
    assert_non_null(strstr(cvx_last_error(), "does-not-exist"));
    assert_null(cvx_weights_open("tests"));  /* a directory with no weights */
    assert_non_null(strstr(cvx_last_error(), "no .safetensors"));
}

/* Broken sharded checkpoints: a missing shard, an index that lies, a bad weight_map. */
static void test_sharded_errors(void **state) {
    (void)state;
    char dir[256], cmd[1024], idx[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "cp %s/*.safetensors %s/*.json '%s'/", SHARDED_2B, SHARDED_2B, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(idx, sizeof idx, "%s/diffusion_pytorch_model.safetensors.index.json", dir);

    snprintf(cmd, sizeof cmd, "sed -i 's/00002-of-00002/00003-of-00002/' '%s'", idx);
    assert_int_equal(system(cmd), 0);
    assert_null(cvx_weights_open(dir));
    assert_non_null(strstr(cvx_last_error(), "00003-of-00002"));
    assert_non_null(strstr(cvx_last_error(), "missing"));

    /* The fixture keeps norm_final.weight in shard 2 (see its index); claim shard 1. */
    const char *lie = "{\"weight_map\": {\"norm_final.weight\": \"diffusion_pytorch_model-00001-of-00002.safetensors\"}}";
    tu_write(idx, lie, strlen(lie));
    cvx_weights *w = cvx_weights_open(dir);
    assert_null(w);
    assert_non_null(strstr(cvx_last_error(), "does not hold"));

    const char *bad = "{\"weight_map\": [1, 2]}";
    tu_write(idx, bad, strlen(bad));
    assert_null(cvx_weights_open(dir));
    assert_non_null(strstr(cvx_last_error(), "weight_map"));

    const char *escape = "{\"weight_map\": {\"a\": \"../x.safetensors\"}}";
    tu_write(idx, escape, strlen(escape));
    assert_null(cvx_weights_open(dir));
    assert_non_null(strstr(cvx_last_error(), "same directory"));
    tu_rmrf(dir);
}

/* ---- malformed files ---- */

/* Build "<u64 len><header><data>" in buf; returns its size. */
static size_t build_file(unsigned char *buf, const char *header, size_t data_len, uint64_t len_override) {
    size_t hl = strlen(header);
    uint64_t n = len_override ? len_override : hl;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < data_len; i++) buf[8 + hl + i] = (unsigned char)i;
    return 8 + hl + data_len;
}

typedef struct {
    const char *what, *header;
    size_t data_len;
    uint64_t len_override;
    size_t cut;             /* bytes removed from the end */
    const char *expect;     /* substring of the error */
} bad_case;

static const bad_case k_bad[] = {
    {"valid control", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0, 0, NULL},
    {"too short", "", 0, 0, 0, "too short"},
    {"truncated data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, 0, 8, "outside the data section"},
    {"header length past EOF", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 4000, 0, "past the end"},
    {"huge header length", "{}", 0, (uint64_t)1 << 40, 0, "exceeds"},
    {"offsets out of range", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 8, 0, 0, "outside the data section"},
    {"negative offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, 0, 0, "outside the data section"},
    {"reversed offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8, 0, 0, "outside the data section"},
    {"overlapping", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, 0, 0, "overlap"},
    {"unknown dtype", "{\"a\":{\"dtype\":\"F8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, 0, 0, "unknown dtype"},
    {"shape/offset mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, 0, 0, "needs 12"},
    {"bad JSON", "{\"a\":{\"dtype\":\"F32\",", 0, 0, 0, "not valid JSON"},
    {"not an object", "[1,2,3]", 0, 0, 0, "not a JSON object"},
    {"negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, 0, 0, "out of range"},
    {"non-integer dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, 0, 0, "not an integer"},
    {"overflowing shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,0]}}", 0, 0, 0, "overflows"},
    {"too many dims", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, 0, 0, "dimensions"},
    {"offsets arity", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, 0, 0, "data_offsets"},
    {"missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0, "dtype"},
    {"entry not object", "{\"a\":5}", 0, 0, 0, "not an object"},
    {"metadata not strings", "{\"__metadata__\":{\"k\":1}}", 0, 0, 0, "not a string"},
    {"trailing garbage", "{}xyz", 0, 0, 0, "trailing"},
};

static void test_malformed_table(void **state) {
    (void)state;
    unsigned char *buf = malloc(1 << 16);
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        const bad_case *c = &k_bad[i];
        size_t n = strcmp(c->what, "too short") == 0 ? 5 : build_file(buf, c->header, c->data_len, c->len_override);
        n -= c->cut;
        cvx_clear_error();
        cvx_safetensors *st = cvx_st_open_memory(buf, n, "bad.safetensors");
        if (!c->expect) {
            if (!st) fail_msg("%s: unexpected error: %s", c->what, cvx_last_error());
            cvx_st_close(st);
            continue;
        }
        if (st) fail_msg("case '%s' was accepted", c->what);
        const char *e = cvx_last_error();
        print_message("  %-24s -> %s\n", c->what, e);
        if (!strstr(e, c->expect)) fail_msg("case '%s': error '%s' lacks '%s'", c->what, e, c->expect);
        if (!strstr(e, "bad.safetensors")) fail_msg("case '%s': error '%s' does not name the file", c->what, e);
    }
    /* An empty F32 tensor at an unaligned offset, viewed with an empty scratch (found by fuzzing:
     * widening 0 elements into a NULL scratch called memcpy(NULL, ...)). */
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}";
    size_t n0 = build_file(buf, hdr, 0, 0);
    cvx_safetensors *st0 = cvx_st_open_memory(buf, n0, "empty.safetensors");
    ASSERT_NONNULL(st0);
    float *scratch = NULL;
    size_t cap = 0;
    (void)cvx_tensor_f32_view(cvx_st_find(st0, "a"), &scratch, &cap);
    free(scratch);
    cvx_st_close(st0);
    /* The same checks through the file path (mmap), for a truncated real model file. */
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/trunc.safetensors", dir);
    size_t len;
    char *whole = cvx_read_file(TRANSFORMER_2B, &len);
    ASSERT_NONNULL(whole);
    tu_write(path, whole, len - 1000);
    assert_null(cvx_st_open(path));
    assert_non_null(strstr(cvx_last_error(), "trunc.safetensors"));
    tu_write(path, whole, 0);
    assert_null(cvx_st_open(path));
    assert_null(cvx_st_open("tests/data/nope.safetensors"));
    assert_non_null(strstr(cvx_last_error(), "nope.safetensors"));
    free(whole);
    free(buf);
    tu_rmrf(dir);
}

/* ---- writer ---- */

static void test_writer_round_trip(void **state) {
    (void)state;
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/out.safetensors", dir);
    float f[6] = {1.0f, -2.5f, 3.14159f, 1e-8f, -0.0f, 65504.0f};
    int64_t ids[3] = {0, 1, -7};
    uint8_t bytes[5] = {1, 2, 3, 254, 255};
    cvx_st_writer *w = cvx_stw_new();
    ASSERT_OK(cvx_stw_add_f32(w, "f32", CVX_F32, 2, (int64_t[]){2, 3}, f));
    ASSERT_OK(cvx_stw_add_f32(w, "bf16", CVX_BF16, 1, (int64_t[]){6}, f));
    ASSERT_OK(cvx_stw_add(w, "ids", CVX_I64, 1, (int64_t[]){3}, ids));
    ASSERT_OK(cvx_stw_add(w, "bytes", CVX_U8, 1, (int64_t[]){5}, bytes));
    ASSERT_OK(cvx_stw_add(w, "empty", CVX_F32, 2, (int64_t[]){0, 4}, f));
    assert_int_equal(cvx_stw_add(w, "f32", CVX_F32, 1, (int64_t[]){1}, f), -1);  /* duplicate name */
    ASSERT_OK(cvx_stw_metadata(w, "prompt", "a \"quoted\" prompt\nwith ünïcode"));
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);

    /* no temp file left behind */
    DIR *d = opendir(dir);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) if (e->d_name[0] != '.') files++;
    closedir(d);
    assert_int_equal(files, 1);

    cvx_safetensors *st = tu_open(path);
    assert_int_equal(cvx_st_count(st), 5);
    assert_string_equal(cvx_st_metadata(st, "prompt"), "a \"quoted\" prompt\nwith ünïcode");
    const cvx_tensor *t = cvx_st_find(st, "f32");
    assert_int_equal(t->ndim, 2);
    assert_memory_equal(t->data, f, sizeof f);
    float back[6];
    cvx_tensor_to_f32(cvx_st_find(st, "bf16"), back);
    for (int i = 0; i < 6; i++) assert_true(back[i] == cvx_bf16_to_f32(cvx_f32_to_bf16(f[i])));
    assert_memory_equal(cvx_st_find(st, "ids")->data, ids, sizeof ids);
    assert_memory_equal(cvx_st_find(st, "bytes")->data, bytes, sizeof bytes);
    assert_int_equal(cvx_st_find(st, "empty")->numel, 0);
    cvx_st_close(st);

    /* unwritable destination: error names the path, nothing created */
    w = cvx_stw_new();
    ASSERT_OK(cvx_stw_add_f32(w, "x", CVX_F32, 1, (int64_t[]){6}, f));
    snprintf(path, sizeof path, "%s/no/such/dir/out.safetensors", dir);
    assert_int_equal(cvx_stw_write(w, path), -1);
    assert_non_null(strstr(cvx_last_error(), "no/such/dir"));
    cvx_stw_free(w);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_golden_model),
        cmocka_unit_test(test_sharded_bf16_matches_original),
        cmocka_unit_test(test_weights_open_forms),
        cmocka_unit_test(test_sharded_errors),
        cmocka_unit_test(test_malformed_table),
        cmocka_unit_test(test_writer_round_trip),
    };
    return cmocka_run_group_tests_name("common_safetensors", tests, NULL, NULL);
}
