/* GGUF reader (common/gguf.h): the golden files of tests/data/golden_gguf (made by gguf-py and
 * llama-quantize: every tensor's name, type, ne, offset and size as case.json lists them, the
 * metadata, sampled rows dequantized bit-exactly), a synthetic file with every metadata type and
 * general.alignment = 64, and a table of malformed files (each a single clear error naming the
 * file, never a crash; the truncation sweep cuts the real file at every header byte). */
#include "golden_harness.h"
#include "gguf.h"
#include "quant.h"

#define GG "tests/data/golden_gguf"

/* ---------------------------------------------------------------- building GGUF images */

typedef struct {
    unsigned char *p;
    size_t n, cap;
} gbuf;

static void gb_bytes(gbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void gb_le(gbuf *b, uint64_t v, int n) {
    unsigned char t[8];
    for (int i = 0; i < n; i++) t[i] = (unsigned char)(v >> 8 * i);
    gb_bytes(b, t, (size_t)n);
}
static void gb_u32(gbuf *b, uint32_t v) { gb_le(b, v, 4); }
static void gb_u64(gbuf *b, uint64_t v) { gb_le(b, v, 8); }
static void gb_str(gbuf *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}
static void gb_pad(gbuf *b, size_t align) {
    while (b->n % align) gb_le(b, 0, 1);
}
static void gb_header(gbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
static void gb_kv_u32(gbuf *b, const char *key, uint32_t v) {
    gb_str(b, key);
    gb_u32(b, CVX_GGUF_U32);
    gb_u32(b, v);
}
static void gb_tensor(gbuf *b, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off) {
    gb_str(b, name);
    gb_u32(b, nd);
    for (uint32_t i = 0; i < nd; i++) gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, off);
}

/* ---------------------------------------------------------------- the golden files */

/* Open case/<file>, check every tensor case.json lists (type, ne, torch shape, absolute data
 * offset, byte size, f64 sum and sum of squares of the whole dequantized tensor) and the sampled
 * rows of dequant_samples.safetensors bit-exactly. */
static void check_golden_file(const char *case_dir, int want_dims_max) {
    gh_case c;
    gh_open(&c, case_dir);
    json_object *files = gh_json(&c, "files");
    assert_int_equal(gh_len(files), 1);
    json_object *f = gh_at(files, 0);
    char path[512], sp[512];
    snprintf(path, sizeof path, "%s/%s", case_dir, gh_str(gh_get(f, "file")));
    snprintf(sp, sizeof sp, "%s/dequant_samples.safetensors", case_dir);
    cvx_safetensors *samples = tu_open(sp);
    const char *ft = gh_str(gh_get(f, "ftype"));

    cvx_gguf *g = cvx_gguf_open(path);
    ASSERT_NONNULL(g);
    assert_int_equal(cvx_gguf_version(g), 3);
    assert_int_equal(cvx_gguf_alignment(g), 32);
    assert_int_equal(cvx_gguf_data_offset(g) % 32, 0);
    /* metadata: exactly the three keys of case.json */
    json_object *kv = gh_get(f, "kv");
    assert_int_equal(cvx_gguf_kv_count(g), json_object_object_length(kv));
    assert_string_equal(cvx_gguf_get_str(g, "general.architecture"), gh_str(gh_get(kv, "general.architecture")));
    uint32_t u;
    ASSERT_OK(cvx_gguf_get_u32(g, "general.quantization_version", &u));
    assert_int_equal(u, gh_int(gh_get(kv, "general.quantization_version")));
    ASSERT_OK(cvx_gguf_get_u32(g, "general.file_type", &u));
    assert_int_equal(u, gh_int(gh_get(f, "general.file_type")));
    assert_int_equal(cvx_gguf_kv_type(g, cvx_gguf_find_key(g, "general.file_type")), CVX_GGUF_U32);

    json_object *tl = gh_get(f, "tensors");
    assert_int_equal(cvx_gguf_tensor_count(g), (int)gh_len(tl));
    int max_dims = 0, n_sampled = 0, types_seen[64] = {0};
    size_t n_values = 0;
    for (size_t i = 0; i < gh_len(tl); i++) {
        json_object *e = gh_at(tl, i);
        const char *name = gh_str(gh_get(e, "name"));
        const cvx_gguf_tensor *gt = cvx_gguf_find(g, name);
        if (!gt) fail_msg("%s: tensor '%s' not found", path, name);
        assert_ptr_equal(gt, cvx_gguf_tensor_at(g, (int)i));  /* file order = case.json order */
        const cvx_quant_traits *q = cvx_quant_by_ggml(gt->ggml_type);
        ASSERT_NONNULL(q);
        assert_string_equal(q->name, gh_str(gh_get(e, "type")));
        assert_int_equal(gt->t.dtype, q->dtype);
        types_seen[gt->ggml_type] = 1;
        json_object *ne = gh_get(e, "ne"), *ts = gh_get(e, "torch_shape");
        assert_int_equal(gt->n_dims, (int)gh_len(ne));
        assert_int_equal(gt->t.ndim, (int)gh_len(ts));
        for (int d = 0; d < gt->n_dims; d++) {
            assert_int_equal(gt->ne[d], gh_int(gh_at(ne, (size_t)d)));
            assert_int_equal(gt->t.shape[d], gh_int(gh_at(ts, (size_t)d)));
        }
        if (gt->n_dims > max_dims) max_dims = gt->n_dims;
        assert_int_equal(gt->t.nbytes, gh_int(gh_get(e, "nbytes")));
        assert_int_equal(cvx_gguf_data_offset(g) + gt->offset, gh_int(gh_get(e, "data_offset_in_file")));
        assert_int_equal(gt->offset % 32, 0);
        assert_string_equal(gt->t.file, path);
        /* the whole tensor dequantized (through the dtype layer): f64 sum and sum of squares */
        float *v = cvx_tensor_f32_dup(&gt->t);
        double s = 0, s2 = 0;
        for (int64_t k = 0; k < gt->t.numel; k++) { s += v[k]; s2 += (double)v[k] * v[k]; }
        double ws = gh_num(gh_get(e, "deq_sum_f64")), ws2 = gh_num(gh_get(e, "deq_sumsq_f64"));
        if (fabs(s - ws) > 1e-9 * (fabs(ws) + 1) || fabs(s2 - ws2) > 1e-9 * ws2)
            fail_msg("%s: tensor '%s': sum %.17g / sum of squares %.17g, expected %.17g / %.17g", path, name, s, s2, ws,
                     ws2);
        n_values += (size_t)gt->t.numel;
        /* sampled rows (quantized tensors): bit-exact */
        json_object *rows;
        if (json_object_object_get_ex(e, "sample_rows", &rows)) {
            char key[256];
            snprintf(key, sizeof key, "%s/%s", ft, name);
            const cvx_tensor *st = cvx_st_find(samples, key);
            if (!st) fail_msg("%s: no sampled rows '%s'", sp, key);
            float *want = cvx_tensor_f32_dup(st);
            const int64_t row = gt->ne[0];
            for (size_t r = 0; r < gh_len(rows); r++) {
                int64_t ri = gh_int(gh_at(rows, r));
                for (int64_t k = 0; k < row; k++)
                    if (memcmp(&v[ri * row + k], &want[(int64_t)r * row + k], 4) != 0)
                        fail_msg("%s: tensor '%s' row %lld value %lld: %.9g, expected %.9g (bit-exact)", path, name,
                                 (long long)ri, (long long)k, v[ri * row + k], want[(int64_t)r * row + k]);
            }
            free(want);
            n_sampled++;
        }
        free(v);
    }
    assert_null(cvx_gguf_find(g, "no.such.tensor"));
    assert_int_equal(max_dims, want_dims_max);
    print_message("  %s: %d tensors (%zu values, sums match), %d quantized tensors' sampled rows bit-exact, types:",
                  path, cvx_gguf_tensor_count(g), n_values, n_sampled);
    for (int t = 0; t < 64; t++)
        if (types_seen[t]) print_message(" %s", cvx_ggml_type_name((uint32_t)t));
    print_message("\n");

    /* the same image parsed from memory gives the same tensors */
    size_t len;
    char *img = cvx_read_file(path, &len);
    ASSERT_NONNULL(img);
    cvx_gguf *m = cvx_gguf_open_memory(img, len, "mem");
    ASSERT_NONNULL(m);
    assert_int_equal(cvx_gguf_tensor_count(m), cvx_gguf_tensor_count(g));
    for (int i = 0; i < cvx_gguf_tensor_count(g); i++) {
        const cvx_gguf_tensor *a = cvx_gguf_tensor_at(g, i), *b = cvx_gguf_tensor_at(m, i);
        assert_string_equal(a->t.name, b->t.name);
        assert_int_equal(a->t.nbytes, b->t.nbytes);
        assert_int_equal(memcmp(a->t.data, b->t.data, a->t.nbytes), 0);
        assert_int_equal((const char *)b->t.data - img, cvx_gguf_data_offset(m) + b->offset);
    }
    cvx_gguf_close(m);
    free(img);
    cvx_gguf_close(g);
    cvx_st_close(samples);
    gh_close(&c);
}

static void test_golden_cogvideox(void **state) {
    (void)state;
    check_golden_file(GG "/cogvideox", 4);
}

static void test_golden_wan(void **state) {
    (void)state;
    check_golden_file(GG "/wan", 5);
    /* README's examples: the data section at 4352; the 5-D patch embedding and the modulation */
    cvx_gguf *g = cvx_gguf_open(GG "/wan/wan-Q4_K_S.gguf");
    ASSERT_NONNULL(g);
    assert_int_equal(cvx_gguf_tensor_count(g), 69);
    assert_int_equal(cvx_gguf_data_offset(g), 4352);
    const cvx_gguf_tensor *pe = cvx_gguf_find(g, "patch_embedding.weight");
    ASSERT_NONNULL(pe);
    const int64_t ne[5] = {2, 2, 1, 16, 256}, shape[5] = {256, 16, 1, 2, 2};
    assert_int_equal(pe->n_dims, 5);
    assert_memory_equal(pe->ne, ne, sizeof ne);
    assert_memory_equal(pe->t.shape, shape, sizeof shape);
    assert_int_equal(pe->t.dtype, CVX_F32);
    const cvx_gguf_tensor *mod = cvx_gguf_find(g, "blocks.0.modulation");
    ASSERT_NONNULL(mod);
    assert_int_equal(mod->t.ndim, 3);
    assert_int_equal(mod->t.shape[0], 1);
    assert_int_equal(mod->t.shape[1], 6);
    assert_int_equal(mod->t.shape[2], 256);
    const cvx_gguf_tensor *q = cvx_gguf_find(g, "blocks.0.self_attn.q.weight");
    ASSERT_NONNULL(q);
    assert_int_equal(q->t.dtype, CVX_Q4_K);
    assert_int_equal(q->t.nbytes, 256 * 144);  /* 256 rows of one super-block */
    assert_ptr_equal(cvx_gguf_get(g, "blocks.0.self_attn.q.weight", CVX_SHAPE(256, 256)), q);
    assert_ptr_equal(cvx_gguf_get(g, "patch_embedding.weight", CVX_SHAPE(256, -1, 1, 2, 2)), pe);
    cvx_clear_error();
    assert_null(cvx_gguf_get(g, "blocks.0.self_attn.q.weight", CVX_SHAPE(256, 512)));
    assert_string_equal(cvx_last_error(), GG "/wan/wan-Q4_K_S.gguf: tensor 'blocks.0.self_attn.q.weight' has shape "
                                          "[256, 256], expected [256, 512]");
    assert_null(cvx_gguf_get(g, "blocks.9.self_attn.q.weight", CVX_SHAPE(256, 256)));
    assert_string_equal(cvx_last_error(), GG "/wan/wan-Q4_K_S.gguf: tensor 'blocks.9.self_attn.q.weight' is missing");
    assert_int_equal(cvx_gguf_kv_type(g, 99), CVX_GGUF_TYPE_COUNT);
    assert_int_equal(cvx_gguf_kv_count_of(g, -1), 0);
    cvx_gguf_close(g);
}

/* ---------------------------------------------------------------- a synthetic file */

static void test_synthetic_every_kv_type(void **state) {
    (void)state;
    gbuf b = {0};
    gb_header(&b, 2, 3, 16);  /* version 2 reads like 3 */
    gb_str(&b, "u8"); gb_u32(&b, CVX_GGUF_U8); gb_le(&b, 200, 1);
    gb_str(&b, "i8"); gb_u32(&b, CVX_GGUF_I8); gb_le(&b, 0xfe, 1);
    gb_str(&b, "u16"); gb_u32(&b, CVX_GGUF_U16); gb_le(&b, 65535, 2);
    gb_str(&b, "i16"); gb_u32(&b, CVX_GGUF_I16); gb_le(&b, 0x8000, 2);
    gb_kv_u32(&b, "general.alignment", 64);
    gb_str(&b, "i32"); gb_u32(&b, CVX_GGUF_I32); gb_u32(&b, (uint32_t)-7);
    float f = 1.5f;
    uint32_t fb;
    memcpy(&fb, &f, 4);
    gb_str(&b, "f32"); gb_u32(&b, CVX_GGUF_F32); gb_u32(&b, fb);
    gb_str(&b, "flag"); gb_u32(&b, CVX_GGUF_BOOL); gb_le(&b, 1, 1);
    gb_str(&b, "name"); gb_u32(&b, CVX_GGUF_STRING); gb_str(&b, "tiny");
    gb_str(&b, "u64"); gb_u32(&b, CVX_GGUF_U64); gb_u64(&b, 1ull << 40);
    gb_str(&b, "i64"); gb_u32(&b, CVX_GGUF_I64); gb_u64(&b, (uint64_t)INT64_MIN);
    double d = -0.25;
    uint64_t db;
    memcpy(&db, &d, 8);
    gb_str(&b, "f64"); gb_u32(&b, CVX_GGUF_F64); gb_u64(&b, db);
    gb_str(&b, "shape"); gb_u32(&b, CVX_GGUF_ARRAY); gb_u32(&b, CVX_GGUF_I32); gb_u64(&b, 3);
    gb_u32(&b, 3); gb_u32(&b, (uint32_t)-2); gb_u32(&b, 5);
    gb_str(&b, "tokens"); gb_u32(&b, CVX_GGUF_ARRAY); gb_u32(&b, CVX_GGUF_STRING); gb_u64(&b, 3);
    gb_str(&b, "a"); gb_str(&b, ""); gb_str(&b, "ccc");
    gb_str(&b, "empty"); gb_u32(&b, CVX_GGUF_ARRAY); gb_u32(&b, CVX_GGUF_STRING); gb_u64(&b, 0);
    gb_str(&b, "big"); gb_u32(&b, CVX_GGUF_ARRAY); gb_u32(&b, CVX_GGUF_U64); gb_u64(&b, 1); gb_u64(&b, UINT64_MAX);
    const uint64_t ne_w[2] = {32, 2}, ne_s[1] = {3}, ne_k[2] = {256, 1};
    gb_tensor(&b, "w", 2, ne_w, CVX_GGML_Q8_0, 0);      /* 2 rows x 34 bytes = 68 */
    gb_tensor(&b, "s", 1, ne_s, CVX_GGML_F16, 128);      /* next multiple of 64 after 68 */
    gb_tensor(&b, "k", 2, ne_k, CVX_GGML_Q4_K, 192);
    gb_pad(&b, 64);
    size_t data = b.n;
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 17) * 0.125f - 1.0f;
    unsigned char blk[2 * 34 + 144];
    cvx_quant_of(CVX_Q8_0)->from_f32_ref(x, blk, 64);
    gb_bytes(&b, blk, 68);
    gb_pad(&b, 64);
    const uint16_t h[3] = {0x3c00, 0xc000, 0x3800};  /* 1, -2, 0.5 */
    gb_bytes(&b, h, 6);
    gb_pad(&b, 64);
    cvx_quant_of(CVX_Q4_K)->from_f32_ref(x, blk, 256);
    gb_bytes(&b, blk, 144);

    cvx_gguf *g = cvx_gguf_open_memory(b.p, b.n, "synthetic.gguf");
    ASSERT_NONNULL(g);
    assert_int_equal(cvx_gguf_version(g), 2);
    assert_int_equal(cvx_gguf_alignment(g), 64);
    assert_int_equal(cvx_gguf_data_offset(g), data);
    assert_int_equal(cvx_gguf_kv_count(g), 16);
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    int flag;
    ASSERT_OK(cvx_gguf_get_u32(g, "u8", &u32)); assert_int_equal(u32, 200);
    ASSERT_OK(cvx_gguf_get_i32(g, "i8", &i32)); assert_int_equal(i32, -2);
    ASSERT_OK(cvx_gguf_get_u32(g, "u16", &u32)); assert_int_equal(u32, 65535);
    ASSERT_OK(cvx_gguf_get_i32(g, "i16", &i32)); assert_int_equal(i32, -32768);
    ASSERT_OK(cvx_gguf_get_i32(g, "i32", &i32)); assert_int_equal(i32, -7);
    ASSERT_OK(cvx_gguf_get_i64(g, "i32", &i64)); assert_int_equal(i64, -7);
    ASSERT_OK(cvx_gguf_get_u64(g, "u64", &u64)); assert_int_equal(u64, 1ull << 40);
    ASSERT_OK(cvx_gguf_get_i64(g, "i64", &i64)); assert_true(i64 == INT64_MIN);
    ASSERT_OK(cvx_gguf_get_f32(g, "f32", &f32)); assert_true(f32 == 1.5f);
    ASSERT_OK(cvx_gguf_get_f32(g, "f64", &f32)); assert_true(f32 == -0.25f);
    ASSERT_OK(cvx_gguf_get_bool(g, "flag", &flag)); assert_int_equal(flag, 1);
    assert_string_equal(cvx_gguf_get_str(g, "name"), "tiny");
    assert_int_equal(cvx_gguf_kv_type(g, cvx_gguf_find_key(g, "tokens")), CVX_GGUF_ARRAY);
    assert_int_equal(cvx_gguf_kv_arr_type(g, cvx_gguf_find_key(g, "tokens")), CVX_GGUF_STRING);
    assert_int_equal(cvx_gguf_kv_count_of(g, cvx_gguf_find_key(g, "tokens")), 3);
    assert_string_equal(cvx_gguf_get_arr_str(g, "tokens", 0), "a");
    assert_string_equal(cvx_gguf_get_arr_str(g, "tokens", 1), "");
    assert_string_equal(cvx_gguf_get_arr_str(g, "tokens", 2), "ccc");
    int64_t sh[4];
    size_t n;
    ASSERT_OK(cvx_gguf_get_arr_i64(g, "shape", sh, 4, &n));
    assert_int_equal(n, 3);
    assert_true(sh[0] == 3 && sh[1] == -2 && sh[2] == 5);
    cvx_gguf_type et;
    const void *raw;
    ASSERT_OK(cvx_gguf_get_arr(g, "empty", &et, &u64, &raw));
    assert_int_equal(et, CVX_GGUF_STRING);
    assert_int_equal(u64, 0);
    assert_null(raw);
    ASSERT_OK(cvx_gguf_get_arr(g, "shape", &et, &u64, &raw));
    assert_int_equal(et, CVX_GGUF_I32);
    assert_non_null(raw);
    assert_string_equal(cvx_gguf_type_name(CVX_GGUF_STRING), "string");
    /* getter errors: one line naming the file and the key, the value and what was expected */
    static const struct { const char *what, *expect; } errs[] = {
        {"missing", "synthetic.gguf: key 'nope' is missing"},
        {"u32 of -7", "synthetic.gguf: key 'i32' = -7, out of range for u32"},
        {"i32 of 2^40", "synthetic.gguf: key 'u64' = 1099511627776, out of range for i32"},
        {"u32 of a string", "synthetic.gguf: key 'name' has type string, expected u32"},
        {"str of a u32", "synthetic.gguf: key 'general.alignment' has type u32, expected string"},
        {"f32 of a bool", "synthetic.gguf: key 'flag' has type bool, expected f32"},
        {"bool of a u8", "synthetic.gguf: key 'u8' has type u8, expected bool"},
        {"arr_str of ints", "synthetic.gguf: key 'shape' is an array of i32, expected an array of string"},
        {"arr_str past the end", "synthetic.gguf: key 'tokens': element 3 of an array of 3"},
        {"arr_i64 cap", "synthetic.gguf: key 'shape' has 3 elements, expected at most 2"},
        {"arr_i64 of u64 max", "synthetic.gguf: key 'big': element 0 = 18446744073709551615 exceeds int64"},
        {"arr of a scalar", "synthetic.gguf: key 'u8' has type u8, expected an array"},
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        cvx_clear_error();
        int rc = 0;
        switch (i) {
        case 0: rc = cvx_gguf_get_u32(g, "nope", &u32); break;
        case 1: rc = cvx_gguf_get_u32(g, "i32", &u32); break;
        case 2: rc = cvx_gguf_get_i32(g, "u64", &i32); break;
        case 3: rc = cvx_gguf_get_u32(g, "name", &u32); break;
        case 4: rc = cvx_gguf_get_str(g, "general.alignment") ? 0 : -1; break;
        case 5: rc = cvx_gguf_get_f32(g, "flag", &f32); break;
        case 6: rc = cvx_gguf_get_bool(g, "u8", &flag); break;
        case 7: rc = cvx_gguf_get_arr_str(g, "shape", 0) ? 0 : -1; break;
        case 8: rc = cvx_gguf_get_arr_str(g, "tokens", 3) ? 0 : -1; break;
        case 9: rc = cvx_gguf_get_arr_i64(g, "shape", sh, 2, &n); break;
        case 10: rc = cvx_gguf_get_arr_i64(g, "big", sh, 4, &n); break;
        default: rc = cvx_gguf_get_arr(g, "u8", &et, &u64, &raw); break;
        }
        assert_int_equal(rc, -1);
        if (strcmp(cvx_last_error(), errs[i].expect) != 0)
            fail_msg("%s: error '%s', expected '%s'", errs[i].what, cvx_last_error(), errs[i].expect);
    }
    /* tensors: offsets honour the alignment of 64; data decodes */
    const cvx_gguf_tensor *w = cvx_gguf_find(g, "w"), *s = cvx_gguf_find(g, "s"), *k = cvx_gguf_find(g, "k");
    ASSERT_NONNULL(w);
    ASSERT_NONNULL(s);
    ASSERT_NONNULL(k);
    assert_int_equal(w->t.nbytes, 68);
    assert_int_equal(w->t.shape[0], 2);
    assert_int_equal(w->t.shape[1], 32);
    assert_ptr_equal(s->t.data, b.p + data + 128);
    float sv[3], wv[64], want[64];
    cvx_tensor_to_f32(&s->t, sv);
    assert_true(sv[0] == 1.0f && sv[1] == -2.0f && sv[2] == 0.5f);
    cvx_tensor_to_f32(&w->t, wv);
    cvx_quant_of(CVX_Q8_0)->to_f32_ref(b.p + data, want, 64);
    assert_memory_equal(wv, want, sizeof wv);
    for (int i = 0; i < 64; i++) assert_true(fabsf(wv[i] - x[i]) <= 1.0f / 127 + 1e-6f);
    float kv[256];
    cvx_tensor_to_f32(&k->t, kv);
    for (int i = 0; i < 256; i++) assert_true(fabsf(kv[i] - x[i]) < 0.1f);
    cvx_gguf_close(g);
    free(b.p);
}

/* ---------------------------------------------------------------- malformed files */

/* A small valid file whose pieces each bad case replaces: one key, one Q8_0 tensor [2, 32]. */
typedef struct {
    uint32_t version, kv_type, n_dims, ggml_type, align, arr_type;
    uint64_t n_tensors, n_kv, key_len, name_len, ne0, ne1, ne2, offset, arr_count;
    const char *key, *name, *name2;
    int dup_key, truncate_data, two_tensors;
} spec;

static gbuf build(const spec *s) {
    gbuf b = {0};
    gb_header(&b, s->version, s->n_tensors, s->n_kv);
    if (s->n_kv >= 1) {
        gb_u64(&b, s->key_len ? s->key_len : strlen(s->key));
        gb_bytes(&b, s->key, strlen(s->key));
        gb_u32(&b, s->kv_type);
        if (s->kv_type == CVX_GGUF_ARRAY) {
            gb_u32(&b, s->arr_type);
            gb_u64(&b, s->arr_count);
        }
        gb_u32(&b, s->align);
    }
    if (s->dup_key) gb_kv_u32(&b, s->key, 1);
    const uint64_t ne[9] = {s->ne0, s->ne1, s->ne2 ? s->ne2 : 1, 1, 1, 1, 1, 1, 1};
    if (s->name_len) {  /* a name whose length runs past the end */
        gb_u64(&b, s->name_len);
        gb_bytes(&b, s->name, strlen(s->name));
    } else if (s->n_tensors >= 1) {
        gb_tensor(&b, s->name, s->n_dims, ne, s->ggml_type, s->offset);
    }
    if (s->two_tensors) gb_tensor(&b, s->name2, s->n_dims, ne, s->ggml_type, 32);
    gb_pad(&b, 32);
    unsigned char zero[128] = {0};
    gb_bytes(&b, zero, s->truncate_data ? 40 : 128);
    return b;
}

static const spec k_good = {.version = 3, .kv_type = CVX_GGUF_U32, .n_dims = 2, .ggml_type = CVX_GGML_Q8_0,
                            .align = 32, .n_tensors = 1, .n_kv = 1, .ne0 = 32, .ne1 = 2,
                            .key = "general.alignment", .name = "w", .name2 = "w2"};

typedef struct {
    const char *what, *expect;
    void (*edit)(spec *s);
} bad_case;

static void e_none(spec *s) { (void)s; }
static void e_version1(spec *s) { s->version = 1; }
static void e_version4(spec *s) { s->version = 4; }
static void e_bigendian(spec *s) { s->version = 0x03000000; }
static void e_offset_range(spec *s) { s->offset = 1u << 20; }
static void e_misaligned(spec *s) { s->offset = 4; }
static void e_unknown_type(spec *s) { s->ggml_type = 99; }
static void e_unsupported_type(spec *s) { s->ggml_type = 16; }
static void e_dims9(spec *s) { s->n_dims = 9; }
static void e_overflow_dims(spec *s) { s->ne0 = 1ull << 32; s->ne1 = 1ull << 32; s->ggml_type = CVX_GGML_F32; }
static void e_negative_dim(spec *s) { s->ne1 = ~0ull; }
static void e_zero_between(spec *s) { s->n_dims = 3; s->ne0 = 1ull << 40; s->ne1 = 0; s->ne2 = 1ull << 40; s->ggml_type = CVX_GGML_F32; }
static void e_block_multiple(spec *s) { s->ne0 = 48; }
static void e_key_len(spec *s) { s->key_len = 1ull << 40; }
static void e_key_len_near(spec *s) { s->key_len = 300; }
static void e_name_len(spec *s) { s->name_len = 1ull << 62; }
static void e_align_pow2(spec *s) { s->align = 48; }
static void e_align_zero(spec *s) { s->align = 0; }
static void e_align_type(spec *s) { s->kv_type = CVX_GGUF_I32; }
static void e_kv_type(spec *s) { s->kv_type = 13; }
static void e_nested(spec *s) { s->key = "x"; s->kv_type = CVX_GGUF_ARRAY; s->arr_type = CVX_GGUF_ARRAY; s->arr_count = 1; }
static void e_arr_count(spec *s) { s->key = "x"; s->kv_type = CVX_GGUF_ARRAY; s->arr_type = CVX_GGUF_U64; s->arr_count = 1ull << 61; }
static void e_str_arr_count(spec *s) { s->key = "x"; s->kv_type = CVX_GGUF_ARRAY; s->arr_type = CVX_GGUF_STRING; s->arr_count = 1ull << 40; }
static void e_empty_key(spec *s) { s->key = ""; }
static void e_dup_key(spec *s) { s->dup_key = 1; s->n_kv = 2; }
static void e_dup_tensor(spec *s) { s->two_tensors = 1; s->n_tensors = 2; s->name2 = "w"; s->ne0 = 32; s->ne1 = 0; }
static void e_overlap(spec *s) { s->two_tensors = 1; s->n_tensors = 2; }
static void e_truncated_data(spec *s) { s->truncate_data = 1; }
static void e_many_tensors(spec *s) { s->n_tensors = 1ull << 50; }
static void e_many_kv(spec *s) { s->n_kv = 1ull << 50; }
static void e_nul_name(spec *s) { s->name = "a\0b"; }

static const bad_case k_bad[] = {
    {"valid control", NULL, e_none},
    {"bad version 1", "GGUF version 1, expected 2 or 3", e_version1},
    {"bad version 4", "GGUF version 4, expected 2 or 3", e_version4},
    {"big-endian", "big-endian", e_bigendian},
    {"offset out of range", "tensor 'w': 68 bytes at data offset 1048576 run past the end of the file", e_offset_range},
    {"misaligned data", "tensor 'w' has data offset 4, expected a multiple of the alignment 32", e_misaligned},
    {"unknown type", "tensor 'w' has ggml type 99 (unknown), expected one of F32, F16, Q4_0", e_unknown_type},
    {"unsupported type", "tensor 'w' has ggml type 16 (IQ2_XXS), expected one of", e_unsupported_type},
    {"n_dims 9", "tensor 'w' has 9 dimensions, at most 8 supported", e_dims9},
    {"overflowing dims", "tensor 'w': element count of shape [4294967296, 4294967296] overflows int64", e_overflow_dims},
    {"huge dims around a zero (fuzz)", "tensor 'w': element count of shape [1099511627776, 0, 1099511627776] overflows "
                                       "int64", e_zero_between},
    {"negative dim", "tensor 'w': ne[1] = 18446744073709551615 is negative as int64", e_negative_dim},
    {"row not a multiple of the block", "tensor 'w' of type Q8_0 has rows of 48 elements, expected a multiple of its "
                                        "block size 32", e_block_multiple},
    {"key length beyond the file", "key 0: its name: string length 1099511627776 runs past the end of the file", e_key_len},
    {"key length a bit beyond", "key 0: its name: string length 300 runs past the end of the file", e_key_len_near},
    {"tensor name length beyond the file", "tensor 0: its name: string length 4611686018427387904 runs past the end",
     e_name_len},
    {"alignment not a power of 2", "key 'general.alignment' = 48, expected a power of 2", e_align_pow2},
    {"alignment 0", "key 'general.alignment' = 0, expected a power of 2", e_align_zero},
    {"alignment type", "key 'general.alignment' has type i32, expected u32", e_align_type},
    {"unknown value type", "key 'general.alignment' has value type 13, expected 0..12", e_kv_type},
    {"nested array", "key 'x' is an array of element type 9", e_nested},
    {"array count beyond the file", "key 'x': 2305843009213693952 values of u64 (8 bytes each) run past the end", e_arr_count},
    {"string array count", "key 'x': 1099511627776 strings cannot fit", e_str_arr_count},
    {"empty key", "key 0 is empty", e_empty_key},
    {"duplicate key", "key 'general.alignment' appears twice", e_dup_key},
    {"duplicate tensor", "tensor 'w' appears twice", e_dup_tensor},
    {"overlapping tensors", "tensors 'w' and 'w2' overlap in the data section", e_overlap},
    {"truncated data", "tensor 'w': 68 bytes at data offset 0 run past the end of the file", e_truncated_data},
    {"huge tensor count", "header says 1125899906842624 tensors, more than the", e_many_tensors},
    {"huge key count", "header says 1125899906842624 key/values, more than the", e_many_kv},
    {"NUL in a tensor name", "tensor 0: name contains a NUL byte", e_nul_name},
};

static void expect_error(const char *what, const unsigned char *buf, size_t n, const char *expect) {
    cvx_clear_error();
    cvx_gguf *g = cvx_gguf_open_memory(buf, n, "bad.gguf");
    if (!expect) {
        if (!g) fail_msg("%s: unexpected error: %s", what, cvx_last_error());
        cvx_gguf_close(g);
        return;
    }
    if (g) fail_msg("case '%s' was accepted", what);
    const char *e = cvx_last_error();
    print_message("  %-34s -> %s\n", what, e);
    if (!strstr(e, expect)) fail_msg("case '%s': error '%s' lacks '%s'", what, e, expect);
    if (strncmp(e, "bad.gguf: ", 10) != 0) fail_msg("case '%s': error '%s' does not start with the file", what, e);
    if (strchr(e, '\n')) fail_msg("case '%s': error spans several lines", what);
}

static void test_malformed_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        spec s = k_good;
        k_bad[i].edit(&s);
        gbuf b;
        if (k_bad[i].edit == e_nul_name) {  /* a name with an embedded NUL: written by hand */
            b = (gbuf){0};
            gb_header(&b, 3, 1, 0);
            gb_u64(&b, 3);
            gb_bytes(&b, "a\0b", 3);
            gb_u32(&b, 1);
            gb_u64(&b, 32);
            gb_u32(&b, CVX_GGML_Q8_0);
            gb_u64(&b, 0);
            gb_pad(&b, 32);
            unsigned char z[34] = {0};
            gb_bytes(&b, z, 34);
        } else {
            b = build(&s);
        }
        unsigned char *exact = malloc(b.n);  /* exact size: ASan sees any read past the end */
        memcpy(exact, b.p, b.n);
        expect_error(k_bad[i].what, exact, b.n, k_bad[i].expect);
        free(exact);
        free(b.p);
    }
    unsigned char bad_magic[32] = "GGML\3\0\0\0";
    expect_error("bad magic", bad_magic, sizeof bad_magic, "not a GGUF file: magic 'GGML' (0x4c4d4747), expected 'GGUF'");
    expect_error("3 bytes", (const unsigned char *)"GGU", 3, "file of 3 bytes is too short for a GGUF header");
    expect_error("empty", (const unsigned char *)"", 0, "file of 0 bytes is too short");
    unsigned char hdr_only[10] = "GGUF\3\0\0\0\0\0";
    expect_error("truncated counts", hdr_only, sizeof hdr_only, "truncated: the tensor count needs 8 bytes at byte 8");
}

/* The real file cut at every byte of its header and at a few places in its data: each prefix
 * fails with an error naming the file (truncation, or a tensor past the end), none crashes; a
 * file opened by path reports the path. */
static void test_truncation_sweep(void **state) {
    (void)state;
    const char *path = GG "/cogvideox/cogvideox-Q4_0.gguf";
    size_t len;
    char *img = cvx_read_file(path, &len);
    ASSERT_NONNULL(img);
    cvx_gguf *g = cvx_gguf_open_memory(img, len, "x");
    ASSERT_NONNULL(g);
    size_t header = cvx_gguf_data_offset(g);
    cvx_gguf_close(g);
    int n = 0;
    for (size_t cut = 0; cut < len; cut += cut < header + 64 ? 1 : 4099) {
        unsigned char *p = malloc(cut ? cut : 1);
        memcpy(p, img, cut);
        cvx_clear_error();
        cvx_gguf *t = cvx_gguf_open_memory(p, cut, "cut.gguf");
        if (t) fail_msg("prefix of %zu bytes (of %zu) was accepted", cut, len);
        const char *e = cvx_last_error();
        if (strncmp(e, "cut.gguf: ", 10) != 0 || !(strstr(e, "truncated") || strstr(e, "past the end") ||
                                                    strstr(e, "too short") || strstr(e, "more than")))
            fail_msg("prefix of %zu bytes: unexpected error '%s'", cut, e);
        free(p);
        n++;
    }
    print_message("  %d prefixes of %s (header %zu bytes) refused\n", n, path, header);
    /* by path: a truncated copy on disk */
    char dir[64], tp[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(tp, sizeof tp, "%s/short.gguf", dir);
    tu_write(tp, img, len - 1);
    cvx_clear_error();
    assert_null(cvx_gguf_open(tp));
    assert_non_null(strstr(cvx_last_error(), tp));
    assert_non_null(strstr(cvx_last_error(), "past the end of the file"));
    cvx_clear_error();
    snprintf(tp, sizeof tp, "%s/missing.gguf", dir);
    assert_null(cvx_gguf_open(tp));
    assert_non_null(strstr(cvx_last_error(), "cannot open"));
    assert_null(cvx_gguf_open(dir));
    assert_non_null(strstr(cvx_last_error(), "a directory, not a file"));   /* cvx_open_input: what it is */
    tu_rmrf(dir);
    free(img);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_cogvideox),
        cmocka_unit_test(test_golden_wan),
        cmocka_unit_test(test_synthetic_every_kv_type),
        cmocka_unit_test(test_malformed_table),
        cmocka_unit_test(test_truncation_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
