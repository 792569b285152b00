/* Conv weights transformed once per context (common/conv_wcache.c, cvx_conv_weights /
 * cvx_conv3d_tensor) give the bits of the per-call transform:
 *   - which layout a conv runs (cvx_conv_algo_for: F(4×4) only on frames of ≥ 32 of its tiles);
 *   - one conv, every layout (shifted GEMMs, Winograd F(2×2), F(4×4)), f32 and bf16 mode, f32 and
 *     bf16 weight tensors: cvx_conv3d_tensor (first call makes the entry, second reads it) ==
 *     the public per-call functions, byte for byte; a weight rewritten at the same address is made
 *     again; the budget (0: nothing kept; too small: one weight kept, then per-call);
 *   - whole decodes of the HunyuanVideo-1.5, Wan 2.2 and LTX-Video 0.9.5 golden VAEs, f32 and bf16:
 *     a context that keeps the weights (decoding twice) == one with budget 0, byte for byte; the
 *     kept weights are dropped when the VAE is freed. */
#include "golden_harness.h"

#include "conv.h"
#include "dtype.h"
#include "gemm.h"
#include "gemm_fast.h"
#include "stage3/hunyuan15_vae.h"
#include "stage3/ltx_vae.h"
#include "stage3/wan_vae.h"

static uint64_t g_rng = 777;
static float frand(void) { return tu_frand(&g_rng); }

static cvx_ctx *new_ctx(cvx_precision p, cvx_conv_algo algo, size_t budget) {
    cvx_ctx *ctx = cvx_ctx_new(0);
    assert_int_equal(cvx_ctx_set_precision(ctx, p), 0);
    ctx->conv_algo = algo;
    cvx_conv_wcache_set_budget(ctx, budget);
    return ctx;
}

/* The per-call path: the weights transformed into a fresh buffer, the public conv. */
static void conv_per_call(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const cvx_tensor *w,
                          const float *b, int Cout, int kt, int kh, int kw, float *y) {
    const int taps = kt * kh * kw;
    const int wino = (int)cvx_conv_algo_for(ctx, kh, kw, Hp - kh + 1, Wp - kw + 1);
    float *U = cvx_alloc_f32((size_t)(wino == 4 ? 36 * kt : wino == 2 ? 16 * kt : taps) * Cout * Cin);
    if (wino == 4) {
        cvx_conv_winograd4_weights(ctx, w, Cout, Cin, kt, U);
        cvx_conv3d_winograd4(ctx, xp, Cin, Tp, Hp, Wp, U, b, Cout, kt, y);
    } else if (wino == 2) {
        cvx_conv_winograd_weights(ctx, w, Cout, Cin, kt, U);
        cvx_conv3d_winograd(ctx, xp, Cin, Tp, Hp, Wp, U, b, Cout, kt, y);
    } else {
        cvx_conv_pack_weights(ctx, w, Cout, Cin, taps, U);
        cvx_conv3d_padded(ctx, xp, Cin, Tp, Hp, Wp, U, b, Cout, kt, kh, kw, y);
    }
    free(U);
}

static void assert_same_bits(const float *a, const float *b, size_t n, const char *what) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    print_message("  %s: %zu of %zu floats differ\n", what, bad, n);
    if (bad) fail_msg("%s: %zu floats differ from the per-call transform", what, bad);
}

/* Every layout, precision and weight dtype on one grid (13×18: F(2×2) where F(4×4) is asked for;
 * 26×34: 48 tiles, F(4×4)). */
static void check_conv(int Cin, int Cout, int Tp, int Hp, int Wp) {
    const int shapes[3][3] = {{3, 3, 3}, {1, 3, 3}, {3, 1, 1}};   /* kt, kh, kw */
    const cvx_conv_algo algos[3] = {CVX_CONV_DIRECT, CVX_CONV_WINOGRAD2, CVX_CONV_WINOGRAD4};
    float *xp = cvx_alloc_f32((size_t)Cin * Tp * Hp * Wp), *b = cvx_alloc_f32((size_t)Cout);
    for (size_t i = 0; i < (size_t)Cin * Tp * Hp * Wp; i++) xp[i] = frand();
    for (int i = 0; i < Cout; i++) b[i] = frand();
    for (int prec = 0; prec < 2; prec++)
        for (int a = 0; a < 3; a++)
            for (int sh = 0; sh < 3; sh++)
                for (int wdt = 0; wdt < 2; wdt++) {
                    const int kt = shapes[sh][0], kh = shapes[sh][1], kw = shapes[sh][2], taps = kt * kh * kw;
                    const size_t nw = (size_t)Cout * Cin * taps, ny = (size_t)Cout * (Tp - kt + 1) * (Hp - kh + 1) * (Wp - kw + 1);
                    float *wf = cvx_alloc_f32(nw);
                    for (size_t i = 0; i < nw; i++) wf[i] = frand();
                    uint16_t *wb = cvx_malloc(nw * 2);
                    for (size_t i = 0; i < nw; i++) wb[i] = cvx_f32_to_bf16(wf[i]);
                    cvx_tensor t = {.name = "w", .dtype = wdt ? CVX_BF16 : CVX_F32, .ndim = 1, .shape = {(int64_t)nw},
                                    .numel = (int64_t)nw, .data = wdt ? (void *)wb : (void *)wf,
                                    .nbytes = nw * (wdt ? 2 : 4)};
                    cvx_ctx *ref = new_ctx((cvx_precision)prec, algos[a], 0), *kept = new_ctx((cvx_precision)prec, algos[a], (size_t)1 << 30);
                    cvx_ctx *none = new_ctx((cvx_precision)prec, algos[a], 0);
                    float *y0 = cvx_alloc_f32(ny), *y1 = cvx_alloc_f32(ny), *y2 = cvx_alloc_f32(ny), *y3 = cvx_alloc_f32(ny);
                    conv_per_call(ref, xp, Cin, Tp, Hp, Wp, &t, b, Cout, kt, kh, kw, y0);
                    cvx_conv3d_tensor(kept, xp, Cin, Tp, Hp, Wp, &t, b, Cout, kt, kh, kw, y1);   /* makes the entry */
                    cvx_conv3d_tensor(kept, xp, Cin, Tp, Hp, Wp, &t, b, Cout, kt, kh, kw, y2);   /* reads it */
                    cvx_conv3d_tensor(none, xp, Cin, Tp, Hp, Wp, &t, b, Cout, kt, kh, kw, y3);   /* budget 0 */
                    char what[96];
                    snprintf(what, sizeof what, "%s algo %d kernel %dx%dx%d %s weights", prec ? "bf16" : "f32",
                             (int)algos[a], kt, kh, kw, wdt ? "bf16" : "f32");
                    assert_same_bits(y1, y0, ny, what);
                    assert_same_bits(y2, y0, ny, what);
                    assert_same_bits(y3, y0, ny, what);
                    assert_int_equal(cvx_conv_wcache_count(kept), 1);
                    assert_true(cvx_conv_wcache_bytes(kept) > 0);
                    assert_int_equal(cvx_conv_wcache_count(none), 0);
                    /* the same tensor, other bytes at the same address: made again, not served stale */
                    for (size_t i = 0; i < nw; i++) wf[i] = -wf[i] * 0.5f;
                    for (size_t i = 0; i < nw; i++) wb[i] = cvx_f32_to_bf16(wf[i]);
                    conv_per_call(ref, xp, Cin, Tp, Hp, Wp, &t, b, Cout, kt, kh, kw, y0);
                    cvx_conv3d_tensor(kept, xp, Cin, Tp, Hp, Wp, &t, b, Cout, kt, kh, kw, y1);
                    assert_same_bits(y1, y0, ny, "rewritten weight");
                    assert_int_equal(cvx_conv_wcache_count(kept), 1);
                    cvx_ctx_free(ref), cvx_ctx_free(kept), cvx_ctx_free(none);
                    free(y0), free(y1), free(y2), free(y3), free(wf), free(wb);
                }
    free(xp), free(b);
}

static void test_conv(void **s) {
    (void)s;
    for (int big = 0; big < 2; big++) check_conv(24, 20, 4, big ? 26 : 13, big ? 34 : 18);
}

/* A budget for one weight: the first is kept, the second is transformed at every call (same bits). */
static void test_budget(void **s) {
    (void)s;
    const int Cin = 16, Cout = 16, Tp = 3, Hp = 10, Wp = 10, kt = 3;
    const size_t nw = (size_t)Cout * Cin * kt * 9, ny = (size_t)Cout * (Hp - 2) * (Wp - 2);
    float *xp = cvx_alloc_f32((size_t)Cin * Tp * Hp * Wp), *w1 = cvx_alloc_f32(nw), *w2 = cvx_alloc_f32(nw);
    for (size_t i = 0; i < (size_t)Cin * Tp * Hp * Wp; i++) xp[i] = frand();
    for (size_t i = 0; i < nw; i++) w1[i] = frand(), w2[i] = frand();
    cvx_tensor t1 = {.name = "w1", .dtype = CVX_F32, .ndim = 1, .shape = {(int64_t)nw}, .numel = (int64_t)nw, .data = w1,
                     .nbytes = nw * 4};
    cvx_tensor t2 = t1;
    t2.name = "w2", t2.data = w2;
    cvx_ctx *ref = new_ctx(CVX_PRECISION_F32, CVX_CONV_WINOGRAD2, 0);
    /* F(2×2) layout of one weight: packed for the f32 tiles (Cout rounded up to the panel height) */
    const int isa = cvx_conv_gemm_isa(ref);
    const size_t one = (isa >= 0 ? cvx_conv_packed_floats(isa, CVX_CONV_WINOGRAD2, Cout, Cin, kt, 9 * kt)
                                 : (size_t)16 * Cout * kt * Cin) * sizeof(float);
    cvx_ctx *ctx = new_ctx(CVX_PRECISION_F32, CVX_CONV_WINOGRAD2, one + one / 2);
    float *y = cvx_alloc_f32(ny), *yr = cvx_alloc_f32(ny);
    cvx_conv3d_tensor(ctx, xp, Cin, Tp, Hp, Wp, &t1, NULL, Cout, kt, 3, 3, y);
    assert_int_equal(cvx_conv_wcache_count(ctx), 1);
    assert_int_equal(cvx_conv_wcache_bytes(ctx), one);
    for (int rep = 0; rep < 2; rep++) {   /* over the budget: per call (one warning line), still right */
        cvx_conv3d_tensor(ctx, xp, Cin, Tp, Hp, Wp, &t2, NULL, Cout, kt, 3, 3, y);
        conv_per_call(ref, xp, Cin, Tp, Hp, Wp, &t2, NULL, Cout, kt, 3, 3, yr);
        assert_same_bits(y, yr, ny, "over budget");
        assert_int_equal(cvx_conv_wcache_count(ctx), 1);
    }
    cvx_conv3d_tensor(ctx, xp, Cin, Tp, Hp, Wp, &t1, NULL, Cout, kt, 3, 3, y);   /* the kept one still read */
    conv_per_call(ref, xp, Cin, Tp, Hp, Wp, &t1, NULL, Cout, kt, 3, 3, yr);
    assert_same_bits(y, yr, ny, "kept under budget");
    cvx_ctx_release_scratch(ctx);   /* drops the kept weights */
    assert_int_equal(cvx_conv_wcache_count(ctx), 0);
    cvx_ctx_free(ctx), cvx_ctx_free(ref);
    free(xp), free(w1), free(w2), free(y), free(yr);
}

/* cvx_conv_pack_weights_gemm (made a panel of output channels at a time) == the row-major transforms
 * packed whole by cvx_sgemm_fixed_pack_a, every layout, both tile sets (row counts across a panel). */
static void test_packed_layout(void **s) {
    (void)s;
    cvx_ctx *ctx = new_ctx(CVX_PRECISION_F32, CVX_CONV_WINOGRAD4, 0);
    const int wide = ctx->kernels && cvx_kernels_avx512(ctx->kernels);
    const int kt = 3, couts[] = {5, 13, 30, 7}, cins[] = {20, 20, 20, 300};   /* 300: two pieces of input channels */
    for (int isa = 0; isa <= wide; isa++)
        for (int c = 0; c < 4; c++)
            for (int a = 0; a < 3; a++) {
                const int Cout = couts[c], Cin = cins[c], taps = 9 * kt;
                const cvx_conv_algo algo = a == 0 ? CVX_CONV_DIRECT : a == 1 ? CVX_CONV_WINOGRAD2 : CVX_CONV_WINOGRAD4;
                const int n = a == 0 ? taps : a == 1 ? 16 : 36, K = a == 0 ? Cin : kt * Cin;
                const size_t nw = (size_t)Cout * Cin * taps, per = cvx_sgemm_fixed_packed_floats(isa, Cout, K);
                float *wt = cvx_alloc_f32(nw), *rm = cvx_alloc_f32((size_t)n * Cout * K);
                for (size_t i = 0; i < nw; i++) wt[i] = frand();
                cvx_tensor t = {.name = "w", .dtype = CVX_F32, .ndim = 1, .shape = {(int64_t)nw}, .numel = (int64_t)nw,
                                .data = wt, .nbytes = nw * 4};
                assert_int_equal(cvx_conv_packed_floats(isa, algo, Cout, Cin, kt, taps), n * per);
                float *pk = cvx_calloc(n * per, sizeof(float)), *want = cvx_calloc(n * per, sizeof(float));
                cvx_conv_pack_weights_gemm(ctx, &t, algo, Cout, Cin, kt, taps, isa, pk);
                if (a == 0) cvx_conv_pack_weights(ctx, &t, Cout, Cin, taps, rm);
                else if (a == 1) cvx_conv_winograd_weights(ctx, &t, Cout, Cin, kt, rm);
                else cvx_conv_winograd4_weights(ctx, &t, Cout, Cin, kt, rm);
                for (int xi = 0; xi < n; xi++)
                    cvx_sgemm_fixed_pack_a(isa, 0, Cout, K, 0, Cout, 0, K, rm + (size_t)xi * Cout * K, K, want + xi * per);
                assert_same_bits(pk, want, n * per, "packed layout");
                free(wt), free(rm), free(pk), free(want);
            }
    cvx_ctx_free(ctx);
}

/* F(4×4) gives way to F(2×2) on frames of fewer than 32 of its tiles; other kernels: shifted GEMMs. */
static void test_algo_for(void **s) {
    (void)s;
    cvx_ctx *w4 = new_ctx(CVX_PRECISION_F32, CVX_CONV_WINOGRAD4, 0), *w2 = new_ctx(CVX_PRECISION_F32, CVX_CONV_WINOGRAD2, 0);
    assert_int_equal(cvx_conv_algo_for(w4, 3, 3, 8, 8), CVX_CONV_WINOGRAD2);
    assert_int_equal(cvx_conv_algo_for(w4, 3, 3, 16, 16), CVX_CONV_WINOGRAD2);     /* 16 tiles */
    assert_int_equal(cvx_conv_algo_for(w4, 3, 3, 16, 28), CVX_CONV_WINOGRAD2);     /* 28 */
    assert_int_equal(cvx_conv_algo_for(w4, 3, 3, 16, 29), CVX_CONV_WINOGRAD4);     /* 4 × 8 = 32 */
    assert_int_equal(cvx_conv_algo_for(w4, 3, 3, 30, 53), CVX_CONV_WINOGRAD4);
    assert_int_equal(cvx_conv_algo_for(w4, 1, 1, 64, 64), CVX_CONV_DIRECT);
    assert_int_equal(cvx_conv_algo_for(w4, 3, 1, 64, 64), CVX_CONV_DIRECT);
    assert_int_equal(cvx_conv_algo_for(w2, 3, 3, 64, 64), CVX_CONV_WINOGRAD2);
    w2->conv_algo = CVX_CONV_DIRECT;
    assert_int_equal(cvx_conv_algo_for(w2, 3, 3, 64, 64), CVX_CONV_DIRECT);
    cvx_ctx_free(w4), cvx_ctx_free(w2);
}

/* ------------------------------------------------------------------ whole decodes */

/* Load the case's VAE on ctx, decode its latents into video (and again into video2 when given:
 * the second time every conv reads kept weights), *kept = weights the context keeps before the
 * VAE is freed (which drops them). */
typedef struct {
    int (*decode)(cvx_ctx *ctx, float *video, float *video2, int *kept);
    size_t n;                                    /* floats of video */
    const char *name;
} decode_case;

static void check_decode(const decode_case *d) {
    for (int prec = 0; prec < 2; prec++) {
        cvx_ctx *kept = cvx_ctx_new(0), *none = cvx_ctx_new(0);
        assert_int_equal(cvx_ctx_set_precision(kept, (cvx_precision)prec), 0);
        assert_int_equal(cvx_ctx_set_precision(none, (cvx_precision)prec), 0);
        cvx_conv_wcache_set_budget(none, 0);
        float *a = cvx_alloc_f32(d->n), *b = cvx_alloc_f32(d->n), *c = cvx_alloc_f32(d->n);
        int count_none, count;
        assert_int_equal(d->decode(none, a, NULL, &count_none), 0);
        assert_int_equal(d->decode(kept, b, c, &count), 0);
        print_message("  %s %s: %d conv weights kept\n", d->name, prec ? "bf16" : "f32", count);
        assert_true(count > 0);
        assert_int_equal(count_none, 0);
        assert_int_equal(cvx_conv_wcache_count(kept), 0);   /* dropped with the VAE (borrowed context) */
        char what[64];
        snprintf(what, sizeof what, "%s %s first decode", d->name, prec ? "bf16" : "f32");
        assert_same_bits(b, a, d->n, what);
        snprintf(what, sizeof what, "%s %s second decode", d->name, prec ? "bf16" : "f32");
        assert_same_bits(c, a, d->n, what);
        free(a), free(b), free(c);
        cvx_ctx_free(kept), cvx_ctx_free(none);
    }
}

#define HV15_CASE "tests/data/golden_hv15/vae_decode"
static int hv15_decode(cvx_ctx *ctx, float *video, float *video2, int *kept) {
    gh_case c;
    gh_open(&c, HV15_CASE);
    hv15_vae *v = hv15_vae_load(HV15_CASE "/model/vae", ctx);
    if (!v) fail_msg("%s", cvx_last_error());
    const cvx_tensor *lt = gh_tensor(&c, "f2.latents");
    float *z = cvx_tensor_f32_dup(lt);
    hv15_vae_unscale(v, z, (size_t)lt->numel, z);
    const int F = (int)lt->shape[2], h = (int)lt->shape[3], w = (int)lt->shape[4];
    int rc = hv15_vae_decode(v, z, F, h, w, NULL, video);
    if (!rc && video2) rc = hv15_vae_decode(v, z, F, h, w, NULL, video2);
    *kept = cvx_conv_wcache_count(ctx);
    free(z);
    hv15_vae_free(v);
    gh_close(&c);
    return rc;
}

static void test_decode_hv15(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, HV15_CASE);
    size_t n;
    free(gh_f32(&c, &n, "f2.decoded"));
    gh_close(&c);
    check_decode(&(decode_case){hv15_decode, n, "HunyuanVideo-1.5 f2"});
}

#define WAN22_CASE "tests/data/golden_wan22/vae22_decode"
typedef struct {
    float *video;
    int T;
} wan_out;
static int wan_frames(void *user, const float *frames, int t0, int n, int H, int W) {
    wan_out *o = user;
    const size_t hw = (size_t)H * W;
    for (int ch = 0; ch < 3; ch++)
        memcpy(o->video + ((size_t)ch * o->T + t0) * hw, frames + (size_t)ch * n * hw, sizeof(float) * n * hw);
    return 0;
}
static int wan22_decode(cvx_ctx *ctx, float *video, float *video2, int *kept) {
    gh_case c;
    gh_open(&c, WAN22_CASE);
    wan_vae *v = wan_vae_load(WAN22_CASE "/model/vae", ctx);
    if (!v) fail_msg("%s", cvx_last_error());
    const cvx_tensor *lt = gh_tensor(&c, "f2.latents");
    const int F = (int)lt->shape[2];
    float *lat = cvx_tensor_f32_dup(lt);
    wan_out o = {video, wan_vae_decoded_frames(v, F)};
    int rc = wan_vae_decode(v, lat, F, (int)lt->shape[3], (int)lt->shape[4], NULL, wan_frames, &o, NULL);
    o.video = video2;
    if (!rc && video2) rc = wan_vae_decode(v, lat, F, (int)lt->shape[3], (int)lt->shape[4], NULL, wan_frames, &o, NULL);
    *kept = cvx_conv_wcache_count(ctx);
    free(lat);
    wan_vae_free(v);
    gh_close(&c);
    return rc;
}

static void test_decode_wan22(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, WAN22_CASE);
    const cvx_tensor *lt = gh_tensor(&c, "f2.latents");
    const int F = (int)lt->shape[2], h = (int)lt->shape[3], w = (int)lt->shape[4];
    gh_close(&c);
    cvx_ctx *ctx = cvx_ctx_new(0);
    wan_vae *v = wan_vae_load(WAN22_CASE "/model/vae", ctx);
    if (!v) fail_msg("%s", cvx_last_error());
    const size_t n = (size_t)3 * wan_vae_decoded_frames(v, F) * (h * v->spatial_ratio) * (w * v->spatial_ratio);
    wan_vae_free(v);
    cvx_ctx_free(ctx);
    check_decode(&(decode_case){wan22_decode, n, "Wan 2.2 f2"});
}

#define LTX_CASE "tests/data/golden_ltx/vae095_decode_encode"
static int ltx_decode(cvx_ctx *ctx, float *video, float *video2, int *kept) {
    gh_case c;
    gh_open(&c, LTX_CASE);
    ltx_vae *v = ltx_vae_load(LTX_CASE "/model/vae", ctx);
    if (!v) fail_msg("%s", cvx_last_error());
    size_t nz;
    float *z = gh_f32(&c, &nz, "f2.z"), *noise = gh_f32(&c, NULL, "f2.dt0.decode_noise"), *in = cvx_alloc_f32(nz);
    ltx_vae_decode_input(z, noise, nz, 0.025f, in);
    int rc = ltx_vae_decode(v, in, 2, 2, 2, 0.05f, video);
    if (!rc && video2) rc = ltx_vae_decode(v, in, 2, 2, 2, 0.05f, video2);
    *kept = cvx_conv_wcache_count(ctx);
    free(z), free(noise), free(in);
    ltx_vae_free(v);
    gh_close(&c);
    return rc;
}

static void test_decode_ltx(void **s) {
    (void)s;
    check_decode(&(decode_case){ltx_decode, (size_t)3 * 9 * 64 * 64, "LTX-Video 0.9.5 f2"});
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv),         cmocka_unit_test(test_budget), cmocka_unit_test(test_packed_layout),     cmocka_unit_test(test_algo_for),     cmocka_unit_test(test_decode_hv15),
        cmocka_unit_test(test_decode_wan22), cmocka_unit_test(test_decode_ltx),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
