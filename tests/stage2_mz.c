/* CogVideoX transformers from the Q4_0 safetensors layout of MinusZone's / Kijai's
 * CogVideoX_5b_*GGUF_Q4_0.safetensors (docs/models.md): `<module>.Q4_0_qweight` U8 rows of ggml
 * Q4_0 blocks, the other tensors fp8 (F8_E4M3) or F16, through cogvideox_load_file (what
 * `--transformer FILE` runs). The fixture tests/data/mz/cogvideox-mz-Q4_0.safetensors is
 * scripts/make_mz_fixture.py's rewrite of tests/data/golden_gguf/cogvideox/cogvideox-Q4_0.gguf in
 * the real files' layout (attention and feed-forward weights Q4_0, their biases F16, the rest F8).
 *   - its qweights are the GGUF's Q4_0 bytes, read in place as Q4_0 weights;
 *   - its forward (f32 and bf16) equals, within 1e-6 relative L2 (measured: the same bits), the
 *     same model with its F8/F16 tensors widened to F32 (a file written here): fp8 and f16 weights
 *     are widened exactly; its distance to the GGUF model (fp8 rounding of the other weights) is
 *     printed;
 *   - the GGUF rewritten with every tensor's bytes kept (Q4_0 as qweights, F32/F16 as they are)
 *     gives the GGUF's output bit for bit in f32, bf16 and int8;
 *   - bad files and configs: one clear error line each. */
#include "golden_harness.h"

#include "fileio.h"
#include "stage2/cogvideox.h"

#define GG "tests/data/golden_gguf/cogvideox"
#define CFG GG "/model/transformer/config.json"
#define GGUF GG "/cogvideox-Q4_0.gguf"
#define MZ "tests/data/mz/cogvideox-mz-Q4_0.safetensors"
#define QW_FF2 "transformer_blocks.1.ff.net.2.Q4_0_qweight"

typedef enum { RUN_F32, RUN_BF16, RUN_INT8 } run_mode;

/* The forward of the transformer in `weights` (config CFG) on the golden inputs, in a new array. */
static float *forward(const char *weights, const gh_forward *g, run_mode mode, size_t *n) {
    cvx_ctx *ctx = cvx_ctx_new(2);
    if (mode == RUN_BF16) ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_BF16));
    if (mode == RUN_INT8) cvx_ctx_set_int8(ctx, 1);
    cogvideox_transformer *m = cogvideox_load_file(CFG, weights, ctx);
    ASSERT_NONNULL(m);
    *n = (size_t)g->B * g->F * cogvideox_get_config(m)->out_channels * g->H * g->W;
    float *out = cvx_alloc_f32((int64_t)*n);
    ASSERT_OK(cogvideox_forward(m, g->x, g->B, g->F, g->H, g->W, g->text, g->L, g->t, g->cos, g->sin, out));
    cogvideox_free(m);
    cvx_ctx_free(ctx);
    return out;
}

/* The qweights are shown as `<module>.weight` Q4_0 tensors whose bytes are the GGUF's. */
static void test_qweights_in_place(void **state) {
    (void)state;
    cvx_weights *mz = cvx_weights_open(MZ), *gg = cvx_weights_open(GGUF);
    ASSERT_NONNULL(mz);
    ASSERT_NONNULL(gg);
    int nq = 0, nf8 = 0, nf16 = 0;
    for (int i = 0; i < cvx_weights_count(mz); i++) {
        const cvx_tensor *t = cvx_weights_at(mz, i);
        assert_ptr_equal(cvx_weights_find(mz, t->name), t);
        nf8 += t->dtype == CVX_F8_E4M3, nf16 += t->dtype == CVX_F16;
        if (t->dtype != CVX_Q4_0) continue;
        const cvx_tensor *q = cvx_weights_find(gg, t->name);
        ASSERT_NONNULL(q);
        assert_int_equal(q->dtype, CVX_Q4_0);
        assert_int_equal(t->ndim, 2);
        assert_memory_equal(t->shape, q->shape, 2 * sizeof *t->shape);
        assert_int_equal(t->nbytes, q->nbytes);
        assert_memory_equal(t->data, q->data, q->nbytes);
        nq++;
    }
    assert_int_equal(nq, 12);   /* 2 layers × (to_q, to_k, to_v, to_out.0, ff.net.0.proj, ff.net.2) */
    assert_int_equal(nf16, 12);
    assert_int_equal(nf8, 40);
    assert_null(cvx_weights_find(mz, QW_FF2));   /* known by its view's name only */
    char desc[256];
    cvx_weights_describe(mz, desc, sizeof desc);
    print_message("  %s\n", desc);
    assert_string_equal(desc, "safetensors: 12 F16, 40 F8_E4M3, 12 Q4_0");
    cvx_weights_close(mz);
    cvx_weights_close(gg);
}

/* The golden case with its forward inputs, and a fresh directory for a rewritten weights file. */
typedef struct {
    gh_case c;
    gh_forward g;
    char tmp[64], path[128];
} mz_run;

static void mz_run_open(mz_run *r, const char *file) {
    gh_open(&r->c, GG);
    gh_forward_load(&r->c, &r->g);
    tu_mkdtemp(r->tmp, sizeof r->tmp);
    snprintf(r->path, sizeof r->path, "%s/%s", r->tmp, file);
}

static void mz_run_close(mz_run *r) {
    gh_forward_free(&r->g);
    gh_close(&r->c);
    tu_rmrf(r->tmp);
}

/* The fixture against the same values stored as F32 (qweights copied), and against the GGUF. */
static void test_fp8_layout_forward(void **state) {
    (void)state;
    mz_run r;
    mz_run_open(&r, "f32.safetensors");
    const char *ref = r.path;
    cvx_safetensors *st = tu_open(MZ);
    cvx_st_writer *w = cvx_stw_new();
    for (int i = 0; i < cvx_st_count(st); i++) {
        const cvx_tensor *t = cvx_st_tensor(st, i);
        if (t->dtype == CVX_U8) {
            ASSERT_OK(cvx_stw_add(w, t->name, t->dtype, t->ndim, t->shape, t->data));
        } else {
            float *v = cvx_tensor_f32_dup(t);
            ASSERT_OK(cvx_stw_add_f32(w, t->name, CVX_F32, t->ndim, t->shape, v));
            free(v);
        }
    }
    ASSERT_OK(cvx_stw_write(w, ref));
    cvx_stw_free(w);
    cvx_st_close(st);

    size_t n;
    const run_mode modes[2] = {RUN_F32, RUN_BF16};
    for (int k = 0; k < 2; k++) {
        float *got = forward(MZ, &r.g, modes[k], &n), *want = forward(ref, &r.g, modes[k], &n);
        const double d = cvx_rel_l2(got, want, n);
        print_message("  %s: fp8/f16 file vs its values as F32: rel L2 %.2e (%s)\n", k ? "bf16" : "f32 ", d,
                      memcmp(got, want, n * sizeof *got) ? "not bit-identical" : "bit-identical");
        assert_true(d <= 1e-6);
        if (k == 0) {
            float *gg = gh_f32(&r.c, NULL, "output.Q4_0");
            const double dq = cvx_rel_l2(got, gg, n);
            print_message("  the fp8 rounding of the non-Q4_0 weights moves the output %.2e from the GGUF "
                          "model's\n", dq);
            assert_true(dq > 1e-4 && dq < 0.2);   /* the file is the GGUF model, rounded: near, not equal */
            free(gg);
        }
        free(got), free(want);
    }
    mz_run_close(&r);
}

/* The GGUF as qweights + its F32/F16 tensors unchanged: the GGUF's output bits in every mode. */
static void test_same_bits_as_gguf(void **state) {
    (void)state;
    mz_run r;
    mz_run_open(&r, "cogvideox-Q4_0.safetensors");
    const char *asis = r.path;
    assert_int_equal(tu_write_qweights(GGUF, asis), 0);
    const char *names[3] = {"f32", "bf16", "int8"};
    for (int k = 0; k < 3; k++) {
        size_t n;
        float *got = forward(asis, &r.g, (run_mode)k, &n), *want = forward(GGUF, &r.g, (run_mode)k, &n);
        assert_memory_equal(got, want, n * sizeof *got);
        print_message("  %-4s: the same %zu output values as the GGUF file, bit for bit\n", names[k], n);
        if (k == 0) {
            float *gguf = gh_f32(&r.c, NULL, "output.Q4_0");
            ASSERT_REL_L2(got, gguf, n, 1e-5);
            free(gguf);
        }
        free(got), free(want);
    }
    mz_run_close(&r);
}

/* ------------------------------------------------------------------ bad files */

/* cogvideox_load_file(cfg or CFG, weights): NULL and one error line holding `want`. */
static void expect_error(const char *cfg, const char *weights, const char *want) {
    cogvideox_transformer *m = cogvideox_load_file(cfg ? cfg : CFG, weights, NULL);
    if (m) fail_msg("loaded a bad file (expected an error with '%s')", want);
    const char *err = cvx_last_error();
    print_message("  error: %s\n", err);
    if (!strstr(err, want)) fail_msg("error '%s' does not say '%s'", err, want);
    assert_null(strchr(err, '\n'));
}

/* The fixture with tensor `drop` replaced by (name, dtype, shape) of zero bytes, loaded. */
static void expect_edit_error(const char *dir, const char *cfg, const char *drop, const char *name, cvx_dtype dtype,
                              int64_t rows, int64_t cols, const char *want) {
    char path[128];
    snprintf(path, sizeof path, "%s/edit.safetensors", dir);
    void *zero = calloc((size_t)(rows * cols), 4);
    tu_st_copy_edit(MZ, path, drop, name, dtype, 2, (const int64_t[]){rows, cols}, zero);
    free(zero);
    expect_error(cfg, path, want);
}

static void test_bad_files(void **state) {
    (void)state;
    char tmp[64], path[128], cfg[128];
    tu_mkdtemp(tmp, sizeof tmp);
    /* a qweight of the wrong byte count: 15 blocks a row where the config's K = 512 needs 16 */
    expect_edit_error(tmp, NULL, QW_FF2, QW_FF2, CVX_U8, 128, 270,
                      "tensor '" QW_FF2 "' has shape [128, 270] U8 (34560 bytes), expected [128, 288] U8 (36864 "
                      "bytes): the Q4_0 blocks of the config's [128, 512]");
    /* rows that are not whole 18-byte blocks */
    expect_edit_error(tmp, NULL, QW_FF2, QW_FF2, CVX_U8, 128, 280,
                      "tensor '" QW_FF2 "' is U8 [128, 280], expected U8 [out_features, in_features / 32 * 18]");
    /* a qweight that is not bytes */
    expect_edit_error(tmp, NULL, QW_FF2, QW_FF2, CVX_F16, 128, 144,
                      "tensor '" QW_FF2 "' is F16 [128, 144], expected U8");
    /* the weight stored twice */
    expect_edit_error(tmp, NULL, NULL, "transformer_blocks.1.ff.net.2.weight", CVX_F32, 128, 512,
                      "holds both 'transformer_blocks.1.ff.net.2.weight' and '" QW_FF2 "'");
    /* a scale_weight (ComfyUI's scaled fp8) of two values beside the fp8 proj_out.weight */
    expect_edit_error(tmp, NULL, NULL, "proj_out.scale_weight", CVX_F32, 1, 2,
                      "tensor 'proj_out.scale_weight' is F32 with 2 elements, expected one float (a per-tensor scale)");
    /* a qweight where the config wants a conv kernel */
    expect_edit_error(tmp, NULL, "patch_embed.proj.weight", "patch_embed.proj.Q4_0_qweight", CVX_U8, 128, 18,
                      "tensor 'patch_embed.proj.Q4_0_qweight' (U8 [128, 18]) holds Q4_0 blocks of a [128, 32] linear "
                      "weight, expected [128, 4, 2, 2]");
    /* K = 48 (the config's text_embed_dim) is not a multiple of the Q4_0 block */
    size_t nc;
    char *text = cvx_read_file(CFG, &nc), *at = strstr(text, "\"text_embed_dim\": 64");
    assert_non_null(at);
    at[18] = '4', at[19] = '8';
    snprintf(cfg, sizeof cfg, "%s/config.json", tmp);
    tu_write(cfg, text, nc);
    free(text);
    expect_edit_error(tmp, cfg, "patch_embed.text_proj.weight", "patch_embed.text_proj.Q4_0_qweight", CVX_U8, 128,
                      36, "holds Q4_0 blocks, but the config's shape [128, 48] has 48 columns, not a multiple of the "
                      "32-value Q4_0 block");

    size_t n;
    unsigned char *img = (unsigned char *)cvx_read_file(MZ, &n), *hdr_end = NULL;
    ASSERT_NONNULL(img);
    /* truncated inside a qweight */
    cvx_safetensors *st = cvx_st_open_memory(img, n, "mem");
    ASSERT_NONNULL(st);
    const cvx_tensor *q = cvx_st_find(st, QW_FF2);
    const size_t cut = (size_t)((const unsigned char *)q->data - img) + q->nbytes / 2;
    cvx_st_close(st);
    snprintf(path, sizeof path, "%s/truncated.safetensors", tmp);
    tu_write(path, img, cut);
    expect_error(NULL, path, "tensor '" QW_FF2 "': data_offsets");
    /* a dtype no reader knows (fp8 e5m2) */
    uint64_t hl;
    memcpy(&hl, img, 8);
    hdr_end = img + 8 + hl;
    unsigned char *f8 = (unsigned char *)strstr((char *)img + 8, "F8_E4M3");
    assert_true(f8 && f8 < hdr_end);
    memcpy(f8, "F8_E5M2", 7);
    snprintf(path, sizeof path, "%s/e5m2.safetensors", tmp);
    tu_write(path, img, n);
    expect_error(NULL, path, "unknown dtype 'F8_E5M2'");
    free(img);
    tu_rmrf(tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qweights_in_place),
        cmocka_unit_test(test_fp8_layout_forward),
        cmocka_unit_test(test_same_bits_as_gguf),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
