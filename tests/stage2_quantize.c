/* Writing GGUF files (common/gguf_writer.c) and making them from checkpoints (stage2/quantize.h,
 * stage2 --quantize):
 *   - round trip of every ggml type: written, read back by the reader, the bytes are
 *     quantize_row_*_ref's and dequantize to what ggml's dequantizer gives; comfy.gguf.orig_shape;
 *     the writer's refusals;
 *   - the CogVideoX golden file (golden_adapters/e2e_gguf_cogvideox_q8_0: made by gguf-py +
 *     llama.cpp's quantizer from the f32 transformer beside it): every tensor byte-identical;
 *   - Wan from original names with ComfyUI's prefix (Q4_K_M: the lcpp.patch bumps, F32/F16 storage,
 *     the 5-D patch embedding after its bias) and from diffusers names (written with the original
 *     ones): each file's forward equals the forward of a safetensors twin holding its dequantized
 *     weights, so names, shapes and data all round-trip through the loader;
 *   - the CLI: stage2 --quantize writes a file the transformer loads; bad arguments, one line. */
#include "golden_harness.h"

#include "fileio.h"
#include "gguf.h"
#include "quant.h"
#include "stage2/cogvideox_family.h"
#include "stage2/quantize.h"
#include "stage2/cogvideox.h"
#include "stage2/wan.h"

#define GA "tests/data/golden_adapters"
#define GG "tests/data/golden_gguf"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 52)) * 2.0f - 1.0f;
}

/* ------------------------------------------------------------------ writer round trip */

static void test_writer_roundtrip(void **state) {
    (void)state;
    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/all.gguf", dir);
    const int rows = 3, K = 512, nt = cvx_quant_count();
    float *x = cvx_alloc_f32((size_t)rows * K);
    for (int i = 0; i < rows * K; i++) x[i] = frand() * (i % 53 == 0 ? 3.0f : 0.3f);
    void *q[32];
    cvx_gguf_writer *w = cvx_ggufw_new();
    ASSERT_OK(cvx_ggufw_kv_str(w, "general.architecture", "test"));
    ASSERT_OK(cvx_ggufw_kv_u32(w, "general.file_type", 7));
    ASSERT_OK(cvx_ggufw_kv_arr_i32(w, "comfy.gguf.orig_shape.F16", (const int32_t[]){3, 2, 256}, 3));
    for (int t = 0; t < nt; t++) {
        const cvx_quant_traits *tr = cvx_quant_at(t);
        size_t rb = (size_t)K / tr->block * tr->type_size;
        q[t] = cvx_malloc(rb * rows);
        for (int r = 0; r < rows; r++) tr->from_f32_ref(x + (size_t)r * K, (char *)q[t] + rb * r, K);
        assert_int_equal(cvx_ggufw_tensor(w, tr->name, 2, (const int64_t[]){rows, K}, tr->dtype, q[t]), t);
    }
    /* refusals: a name longer than 127 bytes (city96's GGML_MAX_NAME), rows that are not whole blocks, a name twice */
    char longname[160];
    memset(longname, 'a', 128), longname[128] = 0;
    assert_int_equal(cvx_ggufw_tensor(w, longname, 1, (const int64_t[]){32}, CVX_F32, x), -1);
    assert_int_equal(cvx_ggufw_tensor(w, "bad", 2, (const int64_t[]){2, 100}, CVX_Q4_K, x), -1);
    assert_non_null(strstr(cvx_last_error(), "not whole Q4_K blocks"));
    assert_int_equal(cvx_ggufw_tensor(w, "F32", 1, (const int64_t[]){32}, CVX_F32, x), -1);
    assert_int_equal(cvx_ggufw_tensor(w, "i64", 1, (const int64_t[]){4}, CVX_I64, x), -1);
    ASSERT_OK(cvx_ggufw_write(w, path, NULL, NULL));
    cvx_ggufw_free(w);

    cvx_gguf *g = cvx_gguf_open(path);
    ASSERT_NONNULL(g);
    assert_int_equal(cvx_gguf_tensor_count(g), nt);
    assert_string_equal(cvx_gguf_get_str(g, "general.architecture"), "test");
    cvx_weights *ws = cvx_weights_open(path);
    ASSERT_NONNULL(ws);
    float *got = cvx_alloc_f32((size_t)rows * K), *want = cvx_alloc_f32((size_t)rows * K);
    for (int t = 0; t < nt; t++) {
        const cvx_quant_traits *tr = cvx_quant_at(t);
        const cvx_gguf_tensor *gt = cvx_gguf_find(g, tr->name);
        ASSERT_NONNULL(gt);
        assert_int_equal(gt->ggml_type, tr->ggml_type);
        assert_true(gt->ne[0] == K && gt->ne[1] == rows);
        assert_int_equal(gt->offset % 32, 0);
        assert_memory_equal(gt->t.data, q[t], gt->t.nbytes);   /* quantize_row_*_ref's bytes */
        const cvx_tensor *wt = cvx_weights_find(ws, tr->name);
        for (int r = 0; r < rows; r++) tr->to_f32_ref((char *)q[t] + gt->t.nbytes / rows * r, want + (size_t)r * K, K);
        cvx_tensor_to_f32(wt, got);
        assert_memory_equal(got, want, sizeof(float) * rows * K);
        if (tr->dtype == CVX_F16) {   /* comfy.gguf.orig_shape gives the model's shape back */
            assert_int_equal(wt->ndim, 3);
            assert_true(wt->shape[0] == 3 && wt->shape[1] == 2 && wt->shape[2] == 256);
        } else {
            assert_int_equal(wt->ndim, 2);
        }
        free(q[t]);
    }
    cvx_weights_close(ws);
    cvx_gguf_close(g);
    free(x), free(got), free(want);
    tu_rmrf(dir);
}

/* ------------------------------------------------------------------ CogVideoX: the golden bytes */

static void test_cogvideox_golden_bytes(void **state) {
    (void)state;
    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/cog.gguf", dir);
    cvx_weights *src = cvx_weights_open(GA "/e2e_gguf_cogvideox_q8_0/model/transformer");
    ASSERT_NONNULL(src);
    unsigned ft;
    int pure;
    ASSERT_OK(cvx_quantize_parse_type("q8_0", &ft, &pure));
    assert_int_equal(ft, 7);
    assert_int_equal(pure, 0);
    cvx_quantize_stats st;
    ASSERT_OK(cvx_quantize_to_gguf(src, &cogvideox_gguf_rules, ft, 1, path, &st));
    cvx_gguf *mine = cvx_gguf_open(path), *gold = cvx_gguf_open(GA "/e2e_gguf_cogvideox_q8_0/cogvideox-Q8_0.gguf");
    ASSERT_NONNULL(mine);
    ASSERT_NONNULL(gold);
    assert_int_equal(cvx_gguf_tensor_count(mine), cvx_gguf_tensor_count(gold));
    assert_int_equal(cvx_gguf_kv_count(mine), cvx_gguf_kv_count(gold));
    for (int i = 0; i < cvx_gguf_kv_count(gold); i++) assert_string_equal(cvx_gguf_kv_key(mine, i), cvx_gguf_kv_key(gold, i));
    uint32_t a, b;
    ASSERT_OK(cvx_gguf_get_u32(mine, "general.file_type", &a));
    ASSERT_OK(cvx_gguf_get_u32(gold, "general.file_type", &b));
    assert_int_equal(a, b);
    assert_string_equal(cvx_gguf_get_str(mine, "general.architecture"), cvx_gguf_get_str(gold, "general.architecture"));
    int quantized = 0;
    for (int i = 0; i < cvx_gguf_tensor_count(gold); i++) {
        const cvx_gguf_tensor *gt = cvx_gguf_tensor_at(gold, i), *mt = cvx_gguf_find(mine, gt->t.name);
        if (!mt) fail_msg("tensor %s missing from ours", gt->t.name);
        assert_int_equal(mt->ggml_type, gt->ggml_type);
        assert_int_equal(mt->n_dims, gt->n_dims);
        assert_memory_equal(mt->ne, gt->ne, sizeof(int64_t) * (size_t)gt->n_dims);
        if (memcmp(mt->t.data, gt->t.data, gt->t.nbytes)) fail_msg("tensor %s: bytes differ", gt->t.name);
        quantized += cvx_dtype_is_quant(gt->t.dtype);
    }
    print_message("  %d tensors (%d Q8_0) byte-identical to the golden file\n", cvx_gguf_tensor_count(gold), quantized);
    assert_int_equal(st.quantized, quantized);
    cvx_gguf_close(mine), cvx_gguf_close(gold);
    cvx_weights_close(src);
    tu_rmrf(dir);
}

/* ------------------------------------------------------------------ Wan */

/* A safetensors file with every tensor of `weights` as F32 under `prefix` + its name. */
static void write_f32_twin(const char *weights, const char *out, const char *prefix) {
    cvx_weights *w = cvx_weights_open(weights);
    ASSERT_NONNULL(w);
    cvx_st_writer *sw = cvx_stw_new();
    float **bufs = calloc((size_t)cvx_weights_count(w), sizeof *bufs);
    for (int i = 0; i < cvx_weights_count(w); i++) {
        const cvx_tensor *t = cvx_weights_at(w, i);
        char name[256];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        bufs[i] = cvx_tensor_f32_dup(t);
        ASSERT_OK(cvx_stw_add_f32(sw, name, CVX_F32, t->ndim, t->shape, bufs[i]));
    }
    ASSERT_OK(cvx_stw_write(sw, out));
    cvx_stw_free(sw);
    for (int i = 0; i < cvx_weights_count(w); i++) free(bufs[i]);
    free(bufs);
    cvx_weights_close(w);
}

/* wan_load_file(cfg, gguf) and of its dequantized twin: the same forward (to GEMM rounding). */
static void check_wan_twin(const char *cfg, const char *gguf, const char *dir, int B, int F, int H, int W, int L) {
    char twin[256];
    snprintf(twin, sizeof twin, "%s/twin.safetensors", dir);
    write_f32_twin(gguf, twin, "");
    wan_transformer *a = wan_load_file(cfg, gguf, NULL), *b = wan_load_file(cfg, twin, NULL);
    ASSERT_NONNULL(a);
    ASSERT_NONNULL(b);
    const wan_config *c = wan_get_config(a);
    const size_t nx = (size_t)B * c->in_channels * F * H * W, nt = (size_t)B * L * c->text_dim,
                 ny = (size_t)B * c->out_channels * F * H * W;
    float *x = cvx_alloc_f32(nx), *text = cvx_alloc_f32(nt), *ya = cvx_alloc_f32(ny), *yb = cvx_alloc_f32(ny);
    for (size_t i = 0; i < nx; i++) x[i] = frand();
    for (size_t i = 0; i < nt; i++) text[i] = frand();
    const float t[2] = {700.0f, 90.0f};
    ASSERT_OK(wan_forward(a, x, B, F, H, W, text, L, NULL, 0, t, ya));
    ASSERT_OK(wan_forward(b, x, B, F, H, W, text, L, NULL, 0, t, yb));
    ASSERT_REL_L2(ya, yb, ny, 1e-6);
    free(x), free(text), free(ya), free(yb);
    wan_free(a), wan_free(b);
}

/* From original names with ComfyUI's prefix (the golden Wan dequantized), Q4_K_M. */
static void test_wan_original_q4_k_m(void **state) {
    (void)state;
    char dir[64], src[128], out[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(src, sizeof src, "%s/comfy.safetensors", dir);
    snprintf(out, sizeof out, "%s/wan-Q4_K_M.gguf", dir);
    write_f32_twin(GG "/wan/wan-Q4_K_S.gguf", src, "model.diffusion_model.");
    cvx_weights *w = cvx_weights_open(src);
    ASSERT_NONNULL(w);
    unsigned ft;
    int pure;
    ASSERT_OK(cvx_quantize_parse_type("Q4_K_M", &ft, &pure));
    cvx_quantize_stats st;
    ASSERT_OK(cvx_quantize_to_gguf(w, &wan_gguf_rules, ft, pure, out, &st));
    cvx_weights_close(w);
    cvx_gguf *g = cvx_gguf_open(out);
    ASSERT_NONNULL(g);
    assert_string_equal(cvx_gguf_get_str(g, "general.architecture"), "wan");
    int n_q4 = 0, n_q6 = 0;
    for (int i = 0; i < cvx_gguf_tensor_count(g); i++) {
        const cvx_gguf_tensor *t = cvx_gguf_tensor_at(g, i);
        const char *n = t->t.name;
        assert_null(strstr(n, "model.diffusion_model."));
        cvx_dtype want = t->n_dims == 1 || t->t.numel <= 1024 || strstr(n, ".modulation") || t->n_dims > 4 ? CVX_F32
                                                                                                            : CVX_F16;
        if (t->n_dims == 2 && strstr(n, "blocks.") && (strstr(n, "_attn.") || strstr(n, ".ffn.")) && strstr(n, "weight"))
            want = strstr(n, ".v.weight") || strstr(n, ".ffn.2.weight") ? CVX_Q6_K : CVX_Q4_K;
        if (t->t.dtype != want) fail_msg("%s is %s, expected %s", n, cvx_dtype_name(t->t.dtype), cvx_dtype_name(want));
        n_q4 += want == CVX_Q4_K, n_q6 += want == CVX_Q6_K;
        if (!strcmp(n, "patch_embedding.weight"))   /* fix_5d_tensors.py: right after its bias */
            assert_string_equal(cvx_gguf_tensor_at(g, i - 1)->t.name, "patch_embedding.bias");
    }
    assert_int_equal(n_q4, 14);
    assert_int_equal(n_q6, 6);
    assert_int_equal(st.quantized, 20);
    cvx_gguf_close(g);
    check_wan_twin(GG "/wan/model/transformer/config.json", out, dir, 1, 2, 4, 6, 5);
    tu_rmrf(dir);
}

/* From diffusers names: written with the original ones (rows of 48 are not blocks: F16 fallback). */
static void test_wan_diffusers_names(void **state) {
    (void)state;
    char dir[64], out[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(out, sizeof out, "%s/wan.gguf", dir);
    const char *model = "tests/data/golden_wan/transformer_1.3b/model/transformer";
    cvx_weights *w = cvx_weights_open(model);
    ASSERT_NONNULL(w);
    cvx_quantize_stats st;
    ASSERT_OK(cvx_quantize_to_gguf(w, &wan_gguf_rules, 7, 0, out, &st));
    cvx_weights_close(w);
    assert_int_equal(st.quantized, 0);
    assert_int_equal(st.fallback_f16, 20);
    cvx_gguf *g = cvx_gguf_open(out);
    ASSERT_NONNULL(g);
    assert_non_null(cvx_gguf_find(g, "head.modulation"));
    assert_non_null(cvx_gguf_find(g, "blocks.1.cross_attn.o.weight"));
    assert_null(cvx_gguf_find(g, "scale_shift_table"));
    cvx_gguf_close(g);
    char cfg[256];
    snprintf(cfg, sizeof cfg, "%s/config.json", model);
    check_wan_twin(cfg, out, dir, 2, 1, 4, 4, 3);
    tu_rmrf(dir);
}

/* ------------------------------------------------------------------ the CLI */

static void test_cli(void **state) {
    (void)state;
    char dir[64], cmd[2048], s2[256], err[4096], out[128];
    tu_mkdtemp(dir, sizeof dir);
    tu_program(s2, sizeof s2, "stage2");
    snprintf(out, sizeof out, "%s/q.gguf", dir);
    snprintf(cmd, sizeof cmd, "%s --model_dir " GA "/e2e_gguf_cogvideox_q8_0/model --quantize Q4_K_M --transformer_out %s",
             s2, out);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc) fail_msg("%s\n%s", cmd, err);
    print_message("  %s", err);
    assert_non_null(strstr(err, "gguf cogvideox Q4_K_M"));
    cogvideox_transformer *m = cogvideox_load_file(GA "/e2e_gguf_cogvideox_q8_0/model/transformer/config.json", out, NULL);
    ASSERT_NONNULL(m);
    cogvideox_free(m);

    snprintf(cmd, sizeof cmd, "%s --model_dir " GA "/e2e_gguf_cogvideox_q8_0/model --quantize Q7_X --transformer_out %s",
             s2, out);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "--quantize Q7_X: expected a llama.cpp file type"));
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    snprintf(cmd, sizeof cmd, "%s --model_dir " GA "/e2e_gguf_cogvideox_q8_0/model --quantize Q8_0", s2);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "go together"));
    /* from a GGUF: refused, quantize from the unquantized checkpoint */
    snprintf(cmd, sizeof cmd, "%s --model_dir " GA "/e2e_gguf_cogvideox_q8_0/model --transformer %s --quantize Q8_0 "
             "--transformer_out %s/r.gguf", s2, out, dir);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "is a GGUF file already"));
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_roundtrip),   cmocka_unit_test(test_cogvideox_golden_bytes),
        cmocka_unit_test(test_wan_original_q4_k_m), cmocka_unit_test(test_wan_diffusers_names),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
