/* common/conv: the shifted-GEMM 3D/2D convolution, the 1×1×1 convolution and the fused
 * nearest-upsample-into-padded-buffer against their simple references; PyTorch's nearest
 * index rule on non-integer ratios. */
#include "testutil.h"
#include "conv.h"
#include "dtype.h"

static uint64_t g_rng = 12345;
static float *rand_buf(size_t n) { return tu_rand_buf(&g_rng, n); }

/* Winograd scratch budget of the contexts check_conv makes (0: the default). */
static size_t g_budget;

/* Fast conv vs reference for one shape; also through bf16 weights (packed at use). */
static void check_conv(int Cin, int Cout, int Tp, int Hp, int Wp, int kt, int kh, int kw) {
    cvx_ctx *ctx = cvx_ctx_new(0);
    if (g_budget) ctx->winograd_budget = g_budget;
    int T = Tp - kt + 1, H = Hp - kh + 1, W = Wp - kw + 1, taps = kt * kh * kw;
    float *xp = rand_buf((size_t)Cin * Tp * Hp * Wp), *w = rand_buf((size_t)Cout * Cin * taps),
          *b = rand_buf((size_t)Cout);
    float *y = cvx_alloc_f32((size_t)Cout * T * H * W), *yr = cvx_alloc_f32((size_t)Cout * T * H * W);
    cvx_tensor t = {.name = "w", .dtype = CVX_F32, .ndim = 1, .shape = {(int64_t)Cout * Cin * taps},
                    .numel = (int64_t)Cout * Cin * taps, .data = w, .nbytes = sizeof(float) * Cout * Cin * taps};
    float *wpk = cvx_alloc_f32((size_t)taps * Cout * Cin);
    cvx_conv_pack_weights(ctx, &t, Cout, Cin, taps, wpk);
    cvx_conv3d_padded(ctx, xp, Cin, Tp, Hp, Wp, wpk, b, Cout, kt, kh, kw, y);
    cvx_conv3d_padded_ref(xp, Cin, Tp, Hp, Wp, w, b, Cout, kt, kh, kw, yr);
    print_message("  conv Cin %d Cout %d grid %dx%dx%d kernel %dx%dx%d\n", Cin, Cout, Tp, Hp, Wp, kt, kh, kw);
    ASSERT_REL_L2(y, yr, (size_t)Cout * T * H * W, 1e-6);
    if (kh == 3 && kw == 3) {   /* Winograd F(2×2, 3×3): odd and even sizes, time taps */
        float *U = cvx_alloc_f32((size_t)kt * 16 * Cout * Cin), *yw = cvx_alloc_f32((size_t)Cout * T * H * W);
        cvx_conv_winograd_weights(ctx, &t, Cout, Cin, kt, U);
        cvx_conv3d_winograd(ctx, xp, Cin, Tp, Hp, Wp, U, b, Cout, kt, yw);
        ASSERT_REL_L2(yw, yr, (size_t)Cout * T * H * W, 2e-6);
        free(U);
        U = cvx_alloc_f32((size_t)kt * 36 * Cout * Cin);   /* F(4×4, 3×3) */
        cvx_conv_winograd4_weights(ctx, &t, Cout, Cin, kt, U);
        cvx_conv3d_winograd4(ctx, xp, Cin, Tp, Hp, Wp, U, b, Cout, kt, yw);
        ASSERT_REL_L2(yw, yr, (size_t)Cout * T * H * W, 5e-6);
        free(U), free(yw);
    }
    /* bf16 storage: packing widens; the result equals the f32 conv on the rounded weights. */
    uint16_t *wb = cvx_malloc(sizeof(uint16_t) * Cout * Cin * taps);
    cvx_f32_to_bf16_n(w, wb, (size_t)Cout * Cin * taps);
    cvx_bf16_to_f32_n(wb, w, (size_t)Cout * Cin * taps);
    cvx_tensor tb = t;
    tb.dtype = CVX_BF16, tb.data = wb, tb.nbytes = sizeof(uint16_t) * Cout * Cin * taps;
    cvx_conv_pack_weights(ctx, &tb, Cout, Cin, taps, wpk);
    cvx_conv3d_padded(ctx, xp, Cin, Tp, Hp, Wp, wpk, b, Cout, kt, kh, kw, y);
    cvx_conv3d_padded_ref(xp, Cin, Tp, Hp, Wp, w, b, Cout, kt, kh, kw, yr);
    ASSERT_REL_L2(y, yr, (size_t)Cout * T * H * W, 1e-6);
    assert_true(ctx->flops > 0);   /* every GEMM counted on the context */
    free(wb), free(xp), free(w), free(b), free(y), free(yr), free(wpk);
    cvx_ctx_free(ctx);
}

static void test_conv3d(void **s) {
    (void)s;
    check_conv(5, 7, 6, 9, 11, 3, 3, 3);     /* causal 3×3×3 on a padded grid */
    check_conv(16, 8, 3, 5, 4, 3, 3, 3);     /* tiny frames */
    check_conv(4, 6, 4, 10, 7, 1, 3, 3);     /* Conv2d 3×3 per frame (kt = 1) */
    check_conv(3, 2, 3, 4, 5, 1, 1, 1);      /* 1×1×1 through the same path */
    check_conv(8, 40, 5, 34, 3, 3, 3, 3);    /* narrow width */
}

/* Winograd with several blocks of tile rows (the scratch budget forces R < tile rows). */
static void test_winograd_blocks(void **s) {
    (void)s;
    g_budget = 16 * 20 * (7 * 5 + 6 * 3) * 3;   /* 3 tile rows per block */
    check_conv(7, 6, 5, 41, 39, 3, 3, 3);
    g_budget = 0;
}

/* Frame-group splitting: Cout·Hp·Wp large enough that frames are processed in groups. */
static void test_conv3d_frame_groups(void **s) {
    (void)s;
    check_conv(2, 64, 6, 258, 260, 3, 3, 3);
}

static void test_conv1x1(void **s) {
    (void)s;
    const int Cin = 13, Cout = 9;
    const size_t N = 777;
    float *x = rand_buf(Cin * N), *w = rand_buf((size_t)Cout * Cin), *b = rand_buf(Cout);
    float *y = cvx_alloc_f32(Cout * N), *yr = cvx_alloc_f32(Cout * N);
    cvx_ctx *ctx = cvx_ctx_new(0);
    cvx_conv1x1(ctx, x, Cin, N, w, b, Cout, y);
    cvx_conv1x1_ref(x, Cin, N, w, b, Cout, yr);
    ASSERT_REL_L2(y, yr, Cout * N, 1e-6);
    cvx_conv1x1(ctx, x, Cin, N, w, NULL, Cout, y);
    cvx_conv1x1_ref(x, Cin, N, w, NULL, Cout, yr);
    ASSERT_REL_L2(y, yr, Cout * N, 1e-6);
    free(x), free(w), free(b), free(y), free(yr);
    cvx_ctx_free(ctx);
}

/* PyTorch nearest: exact 2× and identity fast paths, float scale otherwise. Values from
 * torch.nn.functional.interpolate(torch.arange(n)[None,None].float(), size=m). */
static void test_nearest_index(void **s) {
    (void)s;
    for (int o = 0; o < 8; o++) assert_int_equal(cvx_nearest_index(o, 4, 8), o / 2);
    for (int o = 0; o < 5; o++) assert_int_equal(cvx_nearest_index(o, 5, 5), o);
    /* 3 -> 7: scale 3/7: floor(o·0.428571) = 0 0 0 1 1 2 2 */
    const int e37[7] = {0, 0, 0, 1, 1, 2, 2};
    for (int o = 0; o < 7; o++) assert_int_equal(cvx_nearest_index(o, 3, 7), e37[o]);
    /* 5 -> 3 (down): scale 5/3: 0 1 3 */
    const int e53[3] = {0, 1, 3};
    for (int o = 0; o < 3; o++) assert_int_equal(cvx_nearest_index(o, 5, 3), e53[o]);
    /* 2 -> 8 (×4): 0 0 0 0 1 1 1 1 */
    for (int o = 0; o < 8; o++) assert_int_equal(cvx_nearest_index(o, 2, 8), o / 4);
}

/* Fused upsample-into-padded-buffer == upsample then pad. */
static void test_upsample_padded(void **s) {
    (void)s;
    const int C = 3, Ti = 3, Hi = 4, Wi = 5, To = 5, Ho = 8, Wo = 10, ph = 1, pw = 1, Td = 7, t0 = 2;
    float *x = rand_buf((size_t)C * Ti * Hi * Wi);
    float *up = cvx_alloc_f32((size_t)C * To * Ho * Wo);
    size_t np = (size_t)C * Td * (Ho + 2) * (Wo + 2);
    float *a = cvx_alloc_f32(np), *b = cvx_alloc_f32(np);
    for (size_t i = 0; i < np; i++) a[i] = b[i] = 7.0f;   /* untouched frames must stay */
    cvx_upsample_nearest(x, C, Ti, Hi, Wi, up, To, Ho, Wo);
    cvx_pad_frames(a, Td, t0, up, C, To, 0, To, Ho, Wo, ph, pw);
    cvx_upsample_nearest_padded(x, C, Ti, Hi, Wi, NULL, To, Ho, Wo, b, Td, t0, ph, pw);
    assert_memory_equal(a, b, np * sizeof(float));
    /* explicit frame map (the VAE's first-frame rule: 0, 1, 1, 2, 2) */
    const int tmap[5] = {0, 1, 1, 2, 2};
    cvx_upsample_nearest_padded(x, C, Ti, Hi, Wi, tmap, To, Ho, Wo, b, Td, t0, ph, pw);
    for (int c = 0; c < C; c++)
        for (int t = 0; t < To; t++)
            for (int y = 0; y < Ho; y++)
                for (int xx = 0; xx < Wo; xx++)
                    assert_true(b[(((size_t)c * Td + t0 + t) * (Ho + 2) + y + 1) * (Wo + 2) + xx + 1] ==
                                x[(((size_t)c * Ti + tmap[t]) * Hi + y / 2) * Wi + xx / 2]);
    for (int c = 0; c < C; c++)   /* zero border */
        assert_true(b[(((size_t)c * Td + t0) * (Ho + 2)) * (Wo + 2)] == 0.0f);
    free(x), free(up), free(a), free(b);
    /* a size that is not 2× (the general gather path), wider padding */
    const int Ho2 = 7, Wo2 = 6, ph2 = 2, pw2 = 3, Hp2 = Ho2 + 2 * ph2, Wp2 = Wo2 + 2 * pw2;
    x = rand_buf((size_t)C * Ti * Hi * Wi);
    up = cvx_alloc_f32((size_t)C * To * Ho2 * Wo2);
    np = (size_t)C * To * Hp2 * Wp2;
    a = cvx_alloc_f32(np), b = cvx_alloc_f32(np);
    cvx_upsample_nearest(x, C, Ti, Hi, Wi, up, To, Ho2, Wo2);
    cvx_pad_frames(a, To, 0, up, C, To, 0, To, Ho2, Wo2, ph2, pw2);
    cvx_upsample_nearest_padded(x, C, Ti, Hi, Wi, NULL, To, Ho2, Wo2, b, To, 0, ph2, pw2);
    assert_memory_equal(a, b, np * sizeof(float));
    free(x), free(up), free(a), free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv3d),
        cmocka_unit_test(test_conv3d_frame_groups),
        cmocka_unit_test(test_winograd_blocks),
        cmocka_unit_test(test_conv1x1),
        cmocka_unit_test(test_nearest_index),
        cmocka_unit_test(test_upsample_padded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
