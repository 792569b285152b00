/* oneDNN's bf16 convolution primitive (common/conv_onednn.c, cvx_conv3d_onednn_bf16) against the
 * f32 reference convolution at several shapes and kernel sizes, and the VAEs decoding with it
 * ($CVX_VAE_CONV=onednn in bf16 mode, stage3/vae_conv.c) against the f32 goldens within the bf16
 * bounds the other bf16 tests state (0.04 relative L2 for a decode): CogVideoX, Wan 2.1,
 * HunyuanVideo-1.5. On a CPU without bf16 units
 * oneDNN emulates bf16 on AVX-512: the same numbers, not the speed. */
#include "testutil.h"

#include <stdlib.h>

#include "conv.h"
#include "gemm_fast.h"
#include "golden_harness.h"
#include "pipeline/cogvideox.h"
#include "stage3/hunyuan15_vae.h"
#include "stage3/wan_vae.h"

#define TOL_CONV_BF16 1e-2      /* as precision_bf16's direct / F(2×2) bf16 convs */
#define TOL_DECODED_BF16 0.04   /* bf16 VAE decode vs f32 golden (precision_bf16, stage3_wan_vae) */

static void fill(float *p, size_t n, uint64_t *r) {
    for (size_t i = 0; i < n; i++) {
        *r = *r * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = (float)((double)(*r >> 11) / 9007199254740992.0 * 2 - 1);
    }
}

static void test_conv_shapes(void **state) {
    (void)state;
    static const struct { int Cin, Cout, kt, kh, kw, Tp, Hp, Wp, bias; } S[] = {
        {24, 20, 3, 3, 3, 5, 11, 14, 1},   /* a causal 3×3×3 conv, channels not multiples of 16 */
        {32, 32, 1, 3, 3, 2, 10, 9, 1},    /* kt = 1 (2-D per frame) */
        {16, 48, 3, 1, 1, 4, 6, 7, 0},     /* time-only kernel, no bias */
        {3, 16, 3, 3, 3, 3, 8, 8, 1},      /* conv_in-like: 3 input channels */
        {17, 5, 2, 3, 5, 4, 7, 9, 1},      /* odd everything */
    };
    uint64_t r = 11;
    for (size_t s = 0; s < sizeof S / sizeof *S; s++) {
        const int Cin = S[s].Cin, Cout = S[s].Cout, kt = S[s].kt, kh = S[s].kh, kw = S[s].kw;
        const int Tp = S[s].Tp, Hp = S[s].Hp, Wp = S[s].Wp;
        const size_t nx = (size_t)Cin * Tp * Hp * Wp, nw = (size_t)Cout * Cin * kt * kh * kw,
                     ny = (size_t)Cout * (Tp - kt + 1) * (Hp - kh + 1) * (Wp - kw + 1);
        float *xp = cvx_alloc_f32(nx), *w = cvx_alloc_f32(nw), *b = cvx_alloc_f32((size_t)Cout);
        fill(xp, nx, &r), fill(w, nw, &r), fill(b, (size_t)Cout, &r);
        float *yr = cvx_alloc_f32(ny), *y = cvx_alloc_f32(ny);
        cvx_conv3d_padded_ref(xp, Cin, Tp, Hp, Wp, w, S[s].bias ? b : NULL, Cout, kt, kh, kw, yr);
        cvx_tensor t = {.name = "w", .dtype = CVX_F32, .ndim = 1, .shape = {(int64_t)nw}, .numel = (int64_t)nw,
                        .data = w, .nbytes = sizeof(float) * nw, .file = "(test)"};
        cvx_ctx *ctx = cvx_ctx_new(0);
        ASSERT_NONNULL(ctx);
        if (cvx_conv3d_onednn_bf16(ctx, xp, Cin, Tp, Hp, Wp, &t, S[s].bias ? b : NULL, Cout, kt, kh, kw, y))
            fail_msg("%s", cvx_last_error());
        assert_true(ctx->flops > 0);
        double e = cvx_rel_l2(y, yr, ny);
        print_message("  %2d->%-2d k %dx%dx%d in %dx%dx%d: oneDNN bf16 vs f32 reference rel L2 = %.3e\n", Cin, Cout,
                      kt, kh, kw, Tp, Hp, Wp, e);
        assert_true(e <= TOL_CONV_BF16);
        assert_true(e > 0);   /* bf16 operands: not the f32 numbers */
        cvx_ctx_free(ctx);
        free(xp), free(w), free(b), free(yr), free(y);
    }
}

/* The context's cache: a weight is reordered once (same output, no new bytes on the second call),
 * a second shape reuses it if the layout matches, another weight tensor adds its own copy. */
static void test_cache(void **state) {
    (void)state;
    const int Cin = 32, Cout = 16, kt = 3, Tp = 4, Hp = 9, Wp = 10;
    const size_t nx = (size_t)Cin * Tp * Hp * Wp, nw = (size_t)Cout * Cin * kt * 9,
                 ny = (size_t)Cout * (Tp - 2) * (Hp - 2) * (Wp - 2);
    uint64_t r = 5;
    float *xp = cvx_alloc_f32(nx), *w = cvx_alloc_f32(nw), *w2 = cvx_alloc_f32(nw), *b = cvx_alloc_f32((size_t)Cout);
    fill(xp, nx, &r), fill(w, nw, &r), fill(w2, nw, &r), fill(b, (size_t)Cout, &r);
    cvx_tensor t = {.name = "w", .dtype = CVX_F32, .ndim = 1, .shape = {(int64_t)nw}, .numel = (int64_t)nw,
                    .data = w, .nbytes = sizeof(float) * nw, .file = "(test)"};
    cvx_tensor t2 = t;
    t2.data = w2;
    float *y[3] = {cvx_alloc_f32(ny), cvx_alloc_f32(ny), cvx_alloc_f32(ny)}, *yr = cvx_alloc_f32(ny);
    cvx_ctx *ctx = cvx_ctx_new(0);
    ASSERT_NONNULL(ctx);
    ASSERT_OK(cvx_conv3d_onednn_bf16(ctx, xp, Cin, Tp, Hp, Wp, &t, b, Cout, kt, 3, 3, y[0]));
    const size_t bytes = cvx_conv_onednn_bytes(ctx->conv_onednn);
    assert_true(bytes >= nw * 2);   /* bf16, maybe padded */
    ASSERT_OK(cvx_conv3d_onednn_bf16(ctx, xp, Cin, Tp, Hp, Wp, &t, b, Cout, kt, 3, 3, y[1]));
    assert_int_equal(cvx_conv_onednn_bytes(ctx->conv_onednn), bytes);
    assert_memory_equal(y[0], y[1], sizeof(float) * ny);
    ASSERT_OK(cvx_conv3d_onednn_bf16(ctx, xp, Cin, Tp, Hp, Wp, &t2, b, Cout, kt, 3, 3, y[2]));
    assert_int_equal(cvx_conv_onednn_bytes(ctx->conv_onednn), 2 * bytes);
    cvx_conv3d_padded_ref(xp, Cin, Tp, Hp, Wp, w2, b, Cout, kt, 3, 3, yr);
    ASSERT_REL_L2(y[2], yr, ny, TOL_CONV_BF16);
    cvx_ctx_free(ctx);
    free(xp), free(w), free(w2), free(b), free(y[0]), free(y[1]), free(y[2]), free(yr);
}

/* golden [1, T, C, h, w] -> ours [1, C, T, h, w] */
static float *to_ctw(const cvx_tensor *t) {
    int64_t T = t->shape[1], C = t->shape[2], HW = t->shape[3] * t->shape[4];
    float *src = cvx_tensor_f32_dup(t), *dst = cvx_alloc_f32(t->numel);
    for (int64_t f = 0; f < T; f++)
        for (int64_t c = 0; c < C; c++) memcpy(dst + (c * T + f) * HW, src + (f * C + c) * HW, sizeof(float) * HW);
    free(src);
    return dst;
}

/* CogVideoX VAE (e2e_2b's) decoding the golden final latents in bf16, Winograd F(2×2) bf16 or
 * oneDNN's conv: both within the bound of the f32 golden frames, and not the same numbers (the
 * oneDNN path really ran). */
static float *cog_decode(const cvx_tensor *lt, size_t *n) {
    cvx_model *m = cvx_model_open(
        &(cvx_model_params){.model = GOLDEN "/e2e_2b/model", .precision = CVX_PRECISION_BF16});
    ASSERT_NONNULL(m);
    float *z = to_ctw(lt);
    cvx_decode_params dp = {.tiling = CVX_TILING_AUTO};
    cvx_frames fr;
    if (cvx_decode(m, &dp, z, 1, (int)lt->shape[2], (int)lt->shape[1], (int)lt->shape[3], (int)lt->shape[4], NULL,
                   NULL, NULL, &fr))
        fail_msg("%s", cvx_last_error());
    *n = (size_t)3 * fr.T * fr.H * fr.W;
    float *out = cvx_alloc_f32(*n);
    memcpy(out, fr.data[0], sizeof(float) * *n);
    cvx_frames_free(&fr);
    cvx_model_close(m);
    free(z);
    return out;
}

static void test_cogvideox_vae(void **state) {
    (void)state;
    cvx_safetensors *f = tu_open(GOLDEN "/e2e_2b/expected.safetensors");
    const cvx_tensor *lt = cvx_st_find(f, "final_latents"), *dt = cvx_st_find(f, "decoded");
    size_t n0, n1;
    unsetenv("CVX_VAE_CONV");
    float *wino = cog_decode(lt, &n0);
    setenv("CVX_VAE_CONV", "onednn", 1);
    float *dnn = cog_decode(lt, &n1);
    unsetenv("CVX_VAE_CONV");
    assert_int_equal(n0, (size_t)dt->numel);
    assert_int_equal(n1, (size_t)dt->numel);
    float *want = cvx_tensor_f32_dup(dt);
    double ew = cvx_rel_l2(wino, want, n0), ed = cvx_rel_l2(dnn, want, n1);
    print_message("  CogVideoX bf16 decode vs f32 golden: Winograd F(2x2) %.3e, oneDNN conv %.3e (bound %.2f)\n", ew,
                  ed, TOL_DECODED_BF16);
    assert_true(ed <= TOL_DECODED_BF16);
    assert_true(cvx_rel_l2(dnn, wino, n0) > 0);
    free(want), free(wino), free(dnn);
    cvx_st_close(f);
}

typedef struct {
    float *video;   /* [3, T, H, W] */
    int T, H, W, next_t0;
} collect;

static int collect_frames(void *user, const float *frames, int t0, int n, int H, int W) {
    collect *c = user;
    if (t0 != c->next_t0 || t0 + n > c->T || H != c->H || W != c->W) fail_msg("frames %d+%d (%dx%d) out of order", t0, n, H, W);
    const size_t f = (size_t)H * W;
    for (int ch = 0; ch < 3; ch++)
        memcpy(c->video + ((size_t)ch * c->T + t0) * f, frames + (size_t)ch * n * f, sizeof(float) * n * f);
    c->next_t0 += n;
    return 0;
}

static float *wan_decode(const wan_vae *v, const float *z, int F, int h, int w) {
    collect c = {.T = wan_vae_decoded_frames(v, F), .H = h * v->spatial_ratio, .W = w * v->spatial_ratio};
    c.video = cvx_alloc_f32((size_t)3 * c.T * c.H * c.W);
    ASSERT_OK(wan_vae_decode_z(v, z, F, h, w, NULL, 0, collect_frames, &c, NULL));
    assert_int_equal(c.next_t0, c.T);
    return c.video;
}

/* Wan 2.1 VAE (golden_wan vae_decode, 5 latent frames) in bf16 with oneDNN's conv. */
static void test_wan_vae(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, "tests/data/golden_wan/vae_decode");
    wan_vae *v = wan_vae_load("tests/data/golden_wan/vae_decode/model/vae", NULL);
    ASSERT_NONNULL(v);
    ASSERT_OK(cvx_ctx_set_precision(v->ctx, CVX_PRECISION_BF16));
    const cvx_tensor *lt = gh_tensor(&c, "f5.latents");
    const int F = (int)lt->shape[2], h = (int)lt->shape[3], w = (int)lt->shape[4];
    float *z = gh_f32(&c, NULL, "f5.z");
    size_t nd;
    float *want = gh_f32(&c, &nd, "f5.decoded_unclamped");
    setenv("CVX_VAE_CONV", "onednn", 1);
    float *got = wan_decode(v, z, F, h, w);
    unsetenv("CVX_VAE_CONV");
    assert_true(cvx_conv_onednn_bytes(v->ctx->conv_onednn) > 0);   /* the oneDNN path ran */
    double e = cvx_rel_l2(got, want, nd);
    print_message("  Wan bf16 decode f5 with oneDNN conv vs f32 golden: rel L2 = %.3e (bound %.2f)\n", e,
                  TOL_DECODED_BF16);
    assert_true(e <= TOL_DECODED_BF16);
    free(want), free(got), free(z);
    gh_close(&c);
    wan_vae_free(v);
}

/* HunyuanVideo-1.5 VAE (golden_hv15 vae_decode, 5 latent frames; replicate-padded causal convs) in
 * bf16 with oneDNN's conv. */
static void test_hv15_vae(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, "tests/data/golden_hv15/vae_decode");
    cvx_ctx *ctx = cvx_ctx_new(0);
    ASSERT_NONNULL(ctx);
    ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_BF16));
    hv15_vae *v = hv15_vae_load("tests/data/golden_hv15/vae_decode/model/vae", ctx);
    ASSERT_NONNULL(v);
    const cvx_tensor *lt = gh_tensor(&c, "f5.latents");
    const int F = (int)lt->shape[2], h = (int)lt->shape[3], w = (int)lt->shape[4];
    const int r = hv15_vae_get_config(v)->spatial_ratio;
    const size_t n = (size_t)3 * hv15_vae_decoded_frames(v, F) * h * r * w * r;
    float *lat = cvx_tensor_f32_dup(lt), *z = cvx_alloc_f32(lt->numel), *got = cvx_alloc_f32(n);
    hv15_vae_unscale(v, lat, (size_t)lt->numel, z);
    setenv("CVX_VAE_CONV", "onednn", 1);
    const double f0 = ctx->flops;
    ASSERT_OK(hv15_vae_decode(v, z, F, h, w, NULL, got));
    unsetenv("CVX_VAE_CONV");
    assert_true(ctx->flops > f0);
    assert_true(cvx_conv_onednn_bytes(ctx->conv_onednn) > 0);   /* the oneDNN path ran */
    size_t nd;
    float *want = gh_f32(&c, &nd, "f5.decoded");
    assert_int_equal(nd, n);
    double e = cvx_rel_l2(got, want, n);
    print_message("  HunyuanVideo-1.5 bf16 decode f5 with oneDNN conv vs f32 golden: rel L2 = %.3e (bound %.2f)\n", e,
                  TOL_DECODED_BF16);
    assert_true(e <= TOL_DECODED_BF16);
    free(want), free(got), free(z), free(lat);
    gh_close(&c);
    hv15_vae_free(v);
    cvx_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_shapes),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_cogvideox_vae),
        cmocka_unit_test(test_wan_vae),
        cmocka_unit_test(test_hv15_vae),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
