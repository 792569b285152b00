/* CogVideoXTransformer3DModel on edited golden models: learned positional and ofs embeddings,
 * load-time errors, the bf16 sharded path, table basics. The golden forwards and rotary tables
 * themselves are rows of tests/golden_cases.c. */
#include "golden_harness.h"

#include <dirent.h>

#include "stage2/cogvideox_rope.h"
#include "stage2/cogvideox.h"

/* A transformer golden case opened with the one loader: the case and its forward's tensors. */
typedef struct {
    gh_case c;
    gh_forward f;
} golden_case;

static void case_open(golden_case *g, const char *name) {
    gh_open(&g->c, name);
    gh_forward_load(&g->c, &g->f);
}

static void case_close(golden_case *g) {
    gh_forward_free(&g->f);
    gh_close(&g->c);
}

/* ------------------------------------------------------------------ error paths */

static char tmpdir[256];

static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cvx_s2t_XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
}

static void rm_tmpdir(void) {
    DIR *d = opendir(tmpdir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') { snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name); unlink(p); }
    closedir(d);
    rmdir(tmpdir);
}

static void write_text(const char *name, const char *text) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    return b;
}

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[3];
    const float *data;
} extra_tensor;

/* Copy a golden model's tensors to tmpdir as `store`, skipping `skip`, reshaping `bad` to [7],
 * adding `extra`, in `shards` files (+ index.json when > 1). */
static void write_model_ex(const char *case_dir, cvx_dtype store, const char *skip, const char *bad, int shards,
                           int n_extra, const extra_tensor *extra) {
    char sp[1024];
    snprintf(sp, sizeof sp, "%s/model/transformer/diffusion_pytorch_model.safetensors", case_dir);
    cvx_safetensors *src = cvx_st_open(sp);
    assert_non_null(src);
    int n = cvx_st_count(src);
    cvx_st_writer *w[2] = {cvx_stw_new(), shards > 1 ? cvx_stw_new() : NULL};
    char index[65536];
    int len = snprintf(index, sizeof index, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < n; i++) {
        const cvx_tensor *t = cvx_st_tensor(src, i);
        if (skip && !strcmp(t->name, skip)) continue;
        float *d = cvx_tensor_f32_dup(t);
        int k = shards > 1 ? i % 2 : 0;
        int64_t bad_shape[1] = {7};
        if (bad && !strcmp(t->name, bad)) assert_int_equal(cvx_stw_add_f32(w[k], t->name, store, 1, bad_shape, d), 0);
        else assert_int_equal(cvx_stw_add_f32(w[k], t->name, store, t->ndim, t->shape, d), 0);
        free(d);
        len += snprintf(index + len, sizeof index - len, "%s\"%s\": \"diffusion_pytorch_model-0000%d-of-00002.safetensors\"",
                        len > 40 ? ", " : "", t->name, k + 1);
    }
    for (int i = 0; i < n_extra; i++) {
        assert_int_equal(cvx_stw_add_f32(w[0], extra[i].name, store, extra[i].ndim, extra[i].shape, extra[i].data), 0);
        len += snprintf(index + len, sizeof index - len,
                        ", \"%s\": \"diffusion_pytorch_model-00001-of-00002.safetensors\"", extra[i].name);
    }
    char p[1024];
    if (shards > 1) {
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/diffusion_pytorch_model-0000%d-of-00002.safetensors", tmpdir, k + 1);
            assert_int_equal(cvx_stw_write(w[k], p), 0);
            cvx_stw_free(w[k]);
        }
        snprintf(index + len, sizeof index - len, "}}");
        write_text("diffusion_pytorch_model.safetensors.index.json", index);
    } else {
        snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors", tmpdir);
        assert_int_equal(cvx_stw_write(w[0], p), 0);
        cvx_stw_free(w[0]);
    }
    cvx_st_close(src);
}

static void write_model(cvx_dtype store, const char *skip, const char *bad, int shards) {
    write_model_ex(GOLDEN "/transformer_2b", store, skip, bad, shards, 0, NULL);
}

static void copy_config_from(const char *case_dir, const char *replace_from, const char *replace_to) {
    char p[1024];
    snprintf(p, sizeof p, "%s/model/transformer/config.json", case_dir);
    char *cfg = read_all(p);
    if (replace_from) {
        char *at = strstr(cfg, replace_from);
        assert_non_null(at);
        char buf[8192];
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - cfg), cfg, replace_to, at + strlen(replace_from));
        write_text("config.json", buf);
    } else {
        write_text("config.json", cfg);
    }
    free(cfg);
}

static void copy_config(const char *replace_from, const char *replace_to) {
    copy_config_from(GOLDEN "/transformer_2b", replace_from, replace_to);
}

static void expect_load_error(const char *must1, const char *must2);

/* Config edits for the variant tests: several "from"→"to" replacements on a golden config. */
static void edit_config(const char *case_dir, int n, const char *const *from, const char *const *to) {
    char p[1024];
    snprintf(p, sizeof p, "%s/model/transformer/config.json", case_dir);
    char *cfg = read_all(p), buf[8192];
    for (int i = 0; i < n; i++) {
        char *at = strstr(cfg, from[i]);
        assert_non_null(at);
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - cfg), cfg, to[i], at + strlen(from[i]));
        free(cfg);
        cfg = strdup(buf);
    }
    write_text("config.json", cfg);
    free(cfg);
}

static float *forward_tmp(golden_case *g, const float *ofs, int n_ofs) {
    cogvideox_transformer *m = cogvideox_load(tmpdir, NULL);
    if (!m) fail_msg("%s", cvx_last_error());
    size_t n = (size_t)g->f.B * g->f.F * g->f.C * g->f.H * g->f.W;
    float *out = malloc(sizeof(float) * n);
    if (cogvideox_forward_ex(m, g->f.x, g->f.B, g->f.F, g->f.H, g->f.W, g->f.text, g->f.L, g->f.t, ofs, n_ofs, g->f.cos, g->f.sin, out))
        fail_msg("%s", cvx_last_error());
    cogvideox_free(m);
    return out;
}

/* Learned positional embeddings (CogVideoX-5b-I2V style), on the 5b case with the pipeline's
 * stored rope tables: a zero table gives the golden output exactly as without it; a non-zero
 * table is added; another latent size is refused as upstream refuses it. */
static void test_learned_positional(void **s) {
    (void)s;
    golden_case g;
    case_open(&g, GOLDEN "/transformer_5b");
    make_tmpdir();
    const char *from[] = {"\"use_learned_positional_embeddings\": false", "\"sample_height\": 14", "\"sample_width\": 12"};
    const char *to[] = {"\"use_learned_positional_embeddings\": true", "\"sample_height\": 6", "\"sample_width\": 8"};
    edit_config(GOLDEN "/transformer_5b", 3, from, to);
    int S = 226 + 36, D = 48;   /* sample grid 3 frames (sample_frames 9) × 3 × 4 */
    float *table = calloc((size_t)S * D, sizeof(float));
    extra_tensor ex = {"patch_embed.pos_embedding", 3, {1, S, D}, table};
    write_model_ex(GOLDEN "/transformer_5b", CVX_F32, NULL, NULL, 1, 1, &ex);
    size_t n = (size_t)g.f.B * g.f.F * g.f.C * g.f.H * g.f.W;
    float *out = forward_tmp(&g, NULL, 0);
    double rel0 = cvx_rel_l2(out, g.f.out, n);
    free(out);
    for (size_t i = 0; i < (size_t)S * D; i++) table[i] = 0.05f * (float)((i * 7919) % 200 - 100) / 100.0f;
    write_model_ex(GOLDEN "/transformer_5b", CVX_F32, NULL, NULL, 1, 1, &ex);
    out = forward_tmp(&g, NULL, 0);
    double rel1 = cvx_rel_l2(out, g.f.out, n);
    printf("  learned table zero: rel L2 %.3g; non-zero: %.3g (must differ)\n", rel0, rel1);
    assert_true(rel0 <= 1e-5 && rel1 > 1e-3);
    free(out);
    cogvideox_transformer *m = cogvideox_load(tmpdir, NULL);
    assert_non_null(m);
    float *xo = calloc(2 * 3 * 4 * 8 * 8, sizeof(float)), *o = malloc(sizeof(float) * 2 * 3 * 4 * 8 * 8);
    assert_int_equal(cogvideox_forward(m, xo, 2, 3, 8, 8, g.f.text, 226, g.f.t, g.f.cos, g.f.sin, o), -1);
    assert_non_null(strstr(cvx_last_error(), "learned positional"));
    free(xo); free(o);
    cogvideox_free(m);
    /* the table is required when the config asks for it */
    write_model_ex(GOLDEN "/transformer_5b", CVX_F32, NULL, NULL, 1, 0, NULL);
    expect_load_error("patch_embed.pos_embedding", "missing");
    free(table);
    rm_tmpdir();
    case_close(&g);
}

/* ofs embedding (CogVideoX1.5 I2V style) on the 5b case: with linear_2 zero it adds nothing
 * (golden output); with a bias it changes the output; ofs given once or per batch element agree. */
static void test_ofs_embedding(void **s) {
    (void)s;
    golden_case g;
    case_open(&g, GOLDEN "/transformer_5b");
    make_tmpdir();
    const char *from[] = {"\"ofs_embed_dim\": null"};
    const char *to[] = {"\"ofs_embed_dim\": 20"};
    edit_config(GOLDEN "/transformer_5b", 1, from, to);
    float w1[400], b1[20], w2[400] = {0}, b2[20] = {0};
    for (int i = 0; i < 400; i++) w1[i] = 0.1f * (float)((i * 37) % 21 - 10) / 10.0f;
    for (int i = 0; i < 20; i++) b1[i] = 0.01f * i;
    extra_tensor ex[4] = {{"ofs_embedding.linear_1.weight", 2, {20, 20}, w1}, {"ofs_embedding.linear_1.bias", 1, {20}, b1},
                          {"ofs_embedding.linear_2.weight", 2, {20, 20}, w2}, {"ofs_embedding.linear_2.bias", 1, {20}, b2}};
    write_model_ex(GOLDEN "/transformer_5b", CVX_F32, NULL, NULL, 1, 4, ex);
    size_t n = (size_t)g.f.B * g.f.F * g.f.C * g.f.H * g.f.W;
    float ofs1[1] = {2.0f}, ofs2[2] = {2.0f, 2.0f};
    float *out = forward_tmp(&g, ofs1, 1);
    double rel0 = cvx_rel_l2(out, g.f.out, n);
    free(out);
    for (int i = 0; i < 400; i++) w2[i] = 0.05f * (float)((i * 13) % 11 - 5) / 5.0f;
    write_model_ex(GOLDEN "/transformer_5b", CVX_F32, NULL, NULL, 1, 4, ex);
    float *o1 = forward_tmp(&g, ofs1, 1), *o2 = forward_tmp(&g, ofs2, 2), *o3 = forward_tmp(&g, NULL, 0);
    double rel1 = cvx_rel_l2(o1, g.f.out, n);
    printf("  ofs embedding zero: rel L2 %.3g; non-zero: %.3g (must differ)\n", rel0, rel1);
    assert_true(rel0 <= 1e-5 && rel1 > 1e-4);
    assert_memory_equal(o1, o2, n * sizeof(float));
    assert_memory_equal(o1, o3, n * sizeof(float));   /* default ofs = 2.0, as the I2V pipelines pass */
    free(o1); free(o2); free(o3);
    rm_tmpdir();
    case_close(&g);
}

static void expect_load_error(const char *must1, const char *must2) {
    cogvideox_transformer *m = cogvideox_load(tmpdir, NULL);
    assert_null(m);
    const char *e = cvx_last_error();
    printf("  expected error: %s\n", e);
    assert_non_null(strstr(e, must1));
    if (must2) assert_non_null(strstr(e, must2));
}

static void test_missing_tensor(void **s) {
    (void)s;
    make_tmpdir();
    copy_config(NULL, NULL);
    write_model(CVX_F32, "transformer_blocks.1.attn1.norm_k.bias", NULL, 1);
    expect_load_error("transformer_blocks.1.attn1.norm_k.bias", "diffusion_pytorch_model.safetensors");
    rm_tmpdir();
}

static void test_wrong_shape(void **s) {
    (void)s;
    make_tmpdir();
    copy_config(NULL, NULL);
    write_model(CVX_F32, NULL, "transformer_blocks.0.ff.net.2.weight", 1);
    expect_load_error("transformer_blocks.0.ff.net.2.weight", "[48, 192]");
    rm_tmpdir();
}

static void test_bad_config(void **s) {
    (void)s;
    make_tmpdir();
    write_model(CVX_F32, NULL, NULL, 1);
    copy_config("\"num_attention_heads\": 3", "\"num_attention_heads\": \"three\"");
    expect_load_error("num_attention_heads", "config.json");
    copy_config("\"num_attention_heads\": 3", "\"num_attention_heads\": 0");
    expect_load_error("num_attention_heads", "out of range");   /* validate.h, before any size is used */
    copy_config("\"activation_fn\": \"gelu-approximate\"", "\"activation_fn\": \"relu\"");
    expect_load_error("activation_fn", "relu");
    copy_config("\"num_attention_heads\": 3", "\"num_attention_heads\": 4");   /* weights disagree with config */
    expect_load_error("has shape", "expected");
    copy_config("\"in_channels\": 4", "\"in_channels\": 4,");                 /* broken JSON */
    expect_load_error("config.json", NULL);
    rm_tmpdir();
}

/* Sizes the model cannot take fail with a message, not a crash. */
static void test_forward_errors(void **s) {
    (void)s;
    cogvideox_transformer *m = cogvideox_load(GOLDEN "/transformer_1.5/model/transformer", NULL);
    if (!m) fail_msg("%s", cvx_last_error());
    float x[1] = {0}, out[1];
    int64_t t[2] = {1, 1};
    assert_int_equal(cogvideox_forward(m, x, 2, 3, 6, 8, x, 226, t, x, x, out), -1);   /* odd F for patch_size_t 2 */
    assert_non_null(strstr(cvx_last_error(), "patch_size_t"));
    assert_int_equal(cogvideox_forward(m, x, 2, 4, 7, 8, x, 226, t, x, x, out), -1);   /* H not a multiple of p */
    assert_non_null(strstr(cvx_last_error(), "multiples of patch_size"));
    assert_int_equal(cogvideox_forward(m, x, 2, 4, 6, 8, x, 226, t, NULL, NULL, out), -1);
    assert_non_null(strstr(cvx_last_error(), "rope"));
    float cs[16 * 1000], sn[16 * 1000];
    assert_int_equal(cogvideox_rope_tables(cogvideox_get_config(m), 4, 40, 8, cs, sn), -1);   /* grid > sample grid */
    assert_non_null(strstr(cvx_last_error(), "exceeds"));
    cogvideox_free(m);
    m = cogvideox_load(GOLDEN "/transformer_2b/model/transformer", NULL);
    if (!m) fail_msg("%s", cvx_last_error());
    assert_int_equal(cogvideox_forward(m, x, 2, 3, 6, 8, x, 100, t, NULL, NULL, out), -1);   /* sin-cos needs L = 226 */
    assert_non_null(strstr(cvx_last_error(), "max_text_seq_length"));
    cogvideox_free(m);
}

/* bf16 weights in two shards + index.json: loads, runs, and stays close to the f32 result. */
static void test_bf16_sharded(void **s) {
    (void)s;
    golden_case g;
    case_open(&g, GOLDEN "/transformer_2b");
    make_tmpdir();
    copy_config(NULL, NULL);
    write_model(CVX_BF16, NULL, NULL, 2);
    cogvideox_transformer *m = cogvideox_load(tmpdir, NULL);
    if (!m) fail_msg("%s", cvx_last_error());
    size_t n = (size_t)g.f.B * g.f.F * g.f.C * g.f.H * g.f.W;
    float *out = malloc(sizeof(float) * n);
    if (cogvideox_forward(m, g.f.x, g.f.B, g.f.F, g.f.H, g.f.W, g.f.text, g.f.L, g.f.t, NULL, NULL, out)) fail_msg("%s", cvx_last_error());
    double rel = cvx_rel_l2(out, g.f.out, n);
    printf("  bf16 sharded weights: rel L2 vs f32 golden %.3g\n", rel);
    assert_true(rel > 0 && rel <= 2e-2);   /* bf16 rounding of the weights (8-bit mantissa) */
    free(out);
    cogvideox_free(m);
    rm_tmpdir();
    case_close(&g);
}

/* Table values that do not need torch: the timestep sinusoid at t = 0 is [1…, 0…] (cos first),
 * linspace endpoints, the README's crop example. */
static void test_positional_basics(void **s) {
    (void)s;
    float t0 = 0, e[8];
    cvx_timestep_sinusoid(e, &t0, 1, 8, 1, 0);
    for (int i = 0; i < 4; i++) { assert_true(e[i] == 1.0f); assert_true(e[4 + i] == 0.0f); }
    float ls[40];
    cvx_linspace_f32(2.0f, 4.5f, 40, 1, ls);
    assert_true(ls[0] == 2.0f && ls[39] == 4.5f);
    for (int i = 1; i < 40; i++) assert_true(ls[i] > ls[i - 1]);
    int crop[4];
    cogvideox_crop_region(3, 4, 6, 7, crop);   /* transformer_5b: grid 3×4, base 7×6 → (2,0)-(6,6) */
    assert_int_equal(crop[0], 2); assert_int_equal(crop[1], 0);
    assert_int_equal(crop[2], 6); assert_int_equal(crop[3], 6);
    cogvideox_crop_region(30, 45, 45, 30, crop);   /* 480×720 on the real 5b config: the full grid */
    assert_int_equal(crop[0], 0); assert_int_equal(crop[1], 0);
    assert_int_equal(crop[2], 30); assert_int_equal(crop[3], 45);
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_positional_basics),
        cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_wrong_shape),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_forward_errors),
        cmocka_unit_test(test_bf16_sharded),
        cmocka_unit_test(test_learned_positional),
        cmocka_unit_test(test_ofs_embedding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
