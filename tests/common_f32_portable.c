/* f32 mode gives the same bits on every x86-64 CPU (docs/performance.md, "f32 on any x86-64 CPU"):
 * every f32 kernel that takes a compute context runs twice, on this CPU's own path and with the
 * context forced to act as an AVX2-only CPU (CVX_KPATH_AVX2), and the outputs must be equal bit
 * for bit — GEMMs of odd sizes and both transposes (also equal to the scalar fmaf chains of
 * cvx_sgemm_fixed_ref, the order every path follows), linears over bf16 weights, attention at head
 * dims 64/128 and an odd one, odd lengths, the 3×3×3 / Winograd F(2×2) / F(4×4) / 1×1 convolutions
 * and the VAE's stride-2 conv; NaN in an operand reaches the output of the GEMM and a conv. The context-free kernels
 * (norms, softmax, exp, GELU, SiLU, the f32 attention, RoPE in the model files) have no CPU
 * dispatch: a scan of the sources pins that AVX-512 code lives only in the files allowed to have
 * it. Without AVX-512 the cross-path comparisons are skipped (and say so); the rest runs. */
#include "testutil.h"
#include "conv.h"
#include "gemm.h"
#include "gemm_fast.h"
#include "stage3/vae_conv.h"

#include <math.h>

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float *rand_buf(size_t n) { return tu_rand_buf(&g_rng, n); }

/* Two contexts: [0] this CPU's path, [1] acting as an AVX2-only CPU. */
typedef struct {
    cvx_ctx *ctx[2];
    int wide;   /* this CPU has AVX-512: the two paths differ */
} paths;

static paths open_paths(void) {
    paths p;
    for (int i = 0; i < 2; i++) {
        p.ctx[i] = cvx_ctx_new(0);
        ASSERT_NONNULL(p.ctx[i]->kernels);
    }
    cvx_kernels_force(p.ctx[1]->kernels, CVX_KPATH_AVX2);
    p.wide = cvx_kernels_avx512(p.ctx[0]->kernels);
    assert_int_equal(cvx_kernels_avx512(p.ctx[1]->kernels), 0);
    if (!p.wide) print_message("  this CPU has no AVX-512: the AVX-512/AVX2 comparison is skipped\n");
    return p;
}

static void close_paths(paths *p) {
    for (int i = 0; i < 2; i++) cvx_ctx_free(p->ctx[i]);
}

static void compare_paths(const paths *p, const char *what, const float *a, const float *b, size_t n) {
    if (p->wide) tu_assert_same_bits(what, a, b, n);
}

/* ---- GEMM ---- */

typedef struct {
    int M, N, K, ta, tb, bias;
    float beta;
} gemm_case;

static const gemm_case GEMMS[] = {
    {1, 1, 1, 0, 0, 0, 0},        {1, 33, 5, 0, 1, 1, 0},      {7, 13, 5, 1, 0, 0, 1},
    {6, 64, 8, 0, 1, 0, 0},       {13, 65, 9, 1, 1, 1, 0.5f},  {37, 45, 77, 1, 0, 0, 0},
    {64, 130, 257, 0, 1, 1, 0},   {97, 200, 513, 0, 0, 1, 1},  {226, 640, 384, 1, 1, 0, 1},
    {100, 1920, 64, 0, 1, 1, 0},  {385, 70, 1000, 0, 1, 0, 0}, {300, 257, 777, 1, 1, 1, 0.25f},
    {64, 640, 1920, 0, 1, 1, 0},   /* a 2b linear's K: oneDNN's brgemm (the old AVX-512 f32 path) differs here */
    /* from 1024 rows the AVX-512 path blocks as 6×64 tiles (12×32 below): both blockings */
    {1031, 77, 530, 0, 1, 1, 0},  {1100, 130, 390, 1, 0, 0, 0.5f},
    /* the last tile of a row narrower than 64 columns: 1, 2 and 3 vectors of the 6×64 tile */
    {1040, 100, 300, 0, 1, 1, 0}, {1027, 90, 257, 1, 0, 0, 0.5f}, {1030, 40, 129, 0, 0, 1, 0},
};

static void gemm_case_run(const paths *p, const gemm_case *c) {
    const int lda = c->ta ? c->M + 3 : c->K + 1, ldb = c->tb ? c->K + 2 : c->N + 5, ldc = c->N + 4;
    float *A = rand_buf((size_t)(c->ta ? c->K : c->M) * lda), *B = rand_buf((size_t)(c->tb ? c->N : c->K) * ldb),
          *bias = c->bias ? rand_buf((size_t)c->N) : NULL, *C0 = rand_buf((size_t)c->M * ldc);
    float *out[2], *ref = cvx_alloc_f32((size_t)c->M * ldc);
    memcpy(ref, C0, sizeof(float) * (size_t)c->M * ldc);
    cvx_sgemm_fixed_ref(c->ta, c->tb, c->M, c->N, c->K, A, lda, B, ldb, bias, c->beta, ref, ldc);
    char what[128];
    snprintf(what, sizeof what, "GEMM %dx%dx%d ta %d tb %d bias %d beta %g", c->M, c->N, c->K, c->ta, c->tb, c->bias,
             (double)c->beta);
    for (int i = 0; i < 2; i++) {
        out[i] = cvx_alloc_f32((size_t)c->M * ldc);
        memcpy(out[i], C0, sizeof(float) * (size_t)c->M * ldc);
        cvx_mat a = {A, CVX_F32, lda, c->ta}, b = {B, CVX_F32, ldb, c->tb};
        ASSERT_OK(cvx_matmul(p->ctx[i]->kernels, CVX_PRECISION_F32, c->M, c->N, c->K, a, b, bias, c->beta, out[i], ldc));
        /* every path is the scalar chain: each element fmaf over k = 0..K−1 from beta·C + bias */
        tu_assert_same_bits(what, out[i], ref, (size_t)c->M * ldc);
    }
    compare_paths(p, what, out[0], out[1], (size_t)c->M * ldc);
    free(A), free(B), free(bias), free(C0), free(ref), free(out[0]), free(out[1]);
}

static void test_gemm(void **state) {
    (void)state;
    paths p = open_paths();
    for (size_t i = 0; i < sizeof GEMMS / sizeof GEMMS[0]; i++) gemm_case_run(&p, &GEMMS[i]);
    /* the tile sets directly, at a size that takes both threads */
    const int M = 211, N = 301, K = 517;
    float *A = rand_buf((size_t)M * K), *B = rand_buf((size_t)N * K), *c0 = cvx_alloc_f32((size_t)M * N),
          *c1 = cvx_alloc_f32((size_t)M * N);
    cvx_sgemm_fixed_isa(0, 0, 1, M, N, K, A, K, B, K, NULL, 0.0f, c0, N);
    if (p.wide) {
        cvx_sgemm_fixed_isa(1, 0, 1, M, N, K, A, K, B, K, NULL, 0.0f, c1, N);
        tu_assert_same_bits("cvx_sgemm_fixed_isa 211x301x517", c1, c0, (size_t)M * N);
    }
    free(A), free(B), free(c0), free(c1);
    close_paths(&p);
}

/* nn.Linear over bf16 and f32 weights (f32 mode widens bf16), through each context */
static void test_linear(void **state) {
    (void)state;
    paths p = open_paths();
    const int M = 77, K = 96, N = 136;
    float *x = rand_buf((size_t)M * K), *w = rand_buf((size_t)N * K), *b = rand_buf((size_t)N);
    uint16_t *wb = cvx_malloc(2 * (size_t)N * K);
    cvx_f32_to_bf16_n(w, wb, (size_t)N * K);
    for (int dt = 0; dt < 2; dt++) {
        cvx_tensor W = {.name = "w", .dtype = dt ? CVX_BF16 : CVX_F32, .ndim = 2, .shape = {N, K},
                        .numel = (int64_t)N * K, .data = dt ? (void *)wb : (void *)w, .file = "test"};
        cvx_tensor B = {.name = "b", .dtype = CVX_F32, .ndim = 1, .shape = {N}, .numel = N, .data = b, .file = "test"};
        float *y[2];
        for (int i = 0; i < 2; i++) {
            y[i] = cvx_alloc_f32((size_t)M * N);
            cvx_linear(p.ctx[i], x, M, K, &W, &B, y[i]);
        }
        compare_paths(&p, dt ? "linear, bf16 weights" : "linear, f32 weights", y[0], y[1], (size_t)M * N);
        free(y[0]), free(y[1]);
    }
    free(x), free(w), free(b), free(wb);
    close_paths(&p);
}

/* ---- attention ---- */

static void attention_case(const paths *p, int Sq, int Skv, int heads, int hd, int with_bias) {
    const int ld = heads * hd + 3;
    float *q = rand_buf((size_t)Sq * ld), *k = rand_buf((size_t)Skv * ld), *v = rand_buf((size_t)Skv * ld);
    float *bias = with_bias ? rand_buf((size_t)heads * Sq * Skv) : NULL, *ref = cvx_alloc_f32((size_t)Sq * ld);
    const float scale = 1.0f / sqrtf((float)hd);
    cvx_attention_ref(q, ld, k, v, ld, ref, ld, Sq, Skv, heads, hd, scale, bias);
    float *o[2];
    char what[128];
    snprintf(what, sizeof what, "attention Sq %d Skv %d heads %d hd %d bias %d", Sq, Skv, heads, hd, with_bias);
    print_message("  %s\n", what);
    for (int i = 0; i < 2; i++) {
        o[i] = cvx_alloc_f32((size_t)Sq * ld);
        memset(o[i], 0, sizeof(float) * (size_t)Sq * ld);
        cvx_attention_transformer(p->ctx[i], q, ld, k, v, ld, o[i], ld, Sq, Skv, heads, hd, scale, bias);
        for (int s = 0; s < Sq; s++)   /* against the double reference, head columns only */
            for (int c = 0; c < heads * hd; c++) {
                float d = o[i][(size_t)s * ld + c] - ref[(size_t)s * ld + c];
                if (!(fabsf(d) <= 1e-5f)) fail_msg("%s: (%d, %d) is %g, reference %g", what, s, c,
                                                   (double)o[i][(size_t)s * ld + c], (double)ref[(size_t)s * ld + c]);
            }
    }
    compare_paths(p, what, o[0], o[1], (size_t)Sq * ld);
    free(q), free(k), free(v), free(bias), free(ref), free(o[0]), free(o[1]);
}

static void test_attention(void **state) {
    (void)state;
    paths p = open_paths();
    attention_case(&p, 77, 77, 2, 64, 0);
    attention_case(&p, 130, 601, 2, 64, 1);
    attention_case(&p, 513, 129, 1, 128, 0);
    attention_case(&p, 45, 37, 3, 72, 0);   /* hd % 16 != 0: the tiled version on the fixed GEMM */
    attention_case(&p, 33, 530, 2, 40, 1);
    close_paths(&p);
}

/* ---- convolutions ---- */

static void conv_case(const paths *p, int Cin, int Cout, int Tp, int Hp, int Wp, int kt) {
    const int T = Tp - kt + 1, H = Hp - 2, W = Wp - 2, taps = kt * 9;
    const size_t ny = (size_t)Cout * T * H * W;
    float *xp = rand_buf((size_t)Cin * Tp * Hp * Wp), *w = rand_buf((size_t)Cout * Cin * taps), *b = rand_buf((size_t)Cout);
    cvx_tensor t = {.name = "w", .dtype = CVX_F32, .ndim = 1, .shape = {(int64_t)Cout * Cin * taps},
                    .numel = (int64_t)Cout * Cin * taps, .data = w, .nbytes = sizeof(float) * Cout * Cin * taps,
                    .file = "test"};
    float *ref = cvx_alloc_f32(ny), *y[3][2];
    cvx_conv3d_padded_ref(xp, Cin, Tp, Hp, Wp, w, b, Cout, kt, 3, 3, ref);
    char what[160];
    for (int i = 0; i < 2; i++) {
        cvx_ctx *ctx = p->ctx[i];
        float *wpk = cvx_alloc_f32((size_t)taps * Cout * Cin), *U = cvx_alloc_f32((size_t)kt * 36 * Cout * Cin);
        for (int a = 0; a < 3; a++) y[a][i] = cvx_alloc_f32(ny);
        cvx_conv_pack_weights(ctx, &t, Cout, Cin, taps, wpk);
        cvx_conv3d_padded(ctx, xp, Cin, Tp, Hp, Wp, wpk, b, Cout, kt, 3, 3, y[0][i]);
        cvx_conv_winograd_weights(ctx, &t, Cout, Cin, kt, U);
        cvx_conv3d_winograd(ctx, xp, Cin, Tp, Hp, Wp, U, b, Cout, kt, y[1][i]);
        cvx_conv_winograd4_weights(ctx, &t, Cout, Cin, kt, U);
        cvx_conv3d_winograd4(ctx, xp, Cin, Tp, Hp, Wp, U, b, Cout, kt, y[2][i]);
        for (int a = 0; a < 3; a++) ASSERT_REL_L2(y[a][i], ref, ny, 1e-5);
        free(wpk), free(U);
    }
    static const char *const algo[3] = {"direct", "Winograd F(2x2)", "Winograd F(4x4)"};
    for (int a = 0; a < 3; a++) {
        snprintf(what, sizeof what, "conv %s Cin %d Cout %d grid %dx%dx%d kt %d", algo[a], Cin, Cout, Tp, Hp, Wp, kt);
        compare_paths(p, what, y[a][0], y[a][1], ny);
        free(y[a][0]), free(y[a][1]);
    }
    free(xp), free(w), free(b), free(ref);
}

static void test_conv(void **state) {
    (void)state;
    paths p = open_paths();
    conv_case(&p, 16, 24, 5, 11, 14, 3);   /* 3×3×3, odd and even sizes */
    conv_case(&p, 33, 17, 1, 9, 8, 1);     /* 2D 3×3 */
    /* 1×1×1 */
    const int Cin = 40, Cout = 24;
    const size_t N = 333;
    float *x = rand_buf((size_t)Cin * N), *w = rand_buf((size_t)Cout * Cin), *b = rand_buf((size_t)Cout), *y[2];
    for (int i = 0; i < 2; i++) {
        y[i] = cvx_alloc_f32((size_t)Cout * N);
        cvx_conv1x1(p.ctx[i], x, Cin, N, w, b, Cout, y[i]);
    }
    compare_paths(&p, "conv 1x1x1", y[0], y[1], (size_t)Cout * N);
    free(x), free(w), free(b), free(y[0]), free(y[1]);
    /* the VAE's stride-2 2D conv (Wan's downsampling) */
    const int C2 = 12, O2 = 20, T2 = 2, H2 = 13, W2 = 16, Ho = (H2 - 2) / 2 + 1, Wo = (W2 - 2) / 2 + 1;
    float *x2 = rand_buf((size_t)C2 * T2 * H2 * W2), *w2 = rand_buf((size_t)O2 * C2 * 9), *b2 = rand_buf((size_t)O2);
    cvx_tensor tw = {.name = "w", .dtype = CVX_F32, .ndim = 4, .shape = {O2, C2, 3, 3}, .numel = (int64_t)O2 * C2 * 9,
                     .data = w2, .nbytes = sizeof(float) * O2 * C2 * 9, .file = "test"};
    cvx_tensor tb = {.name = "b", .dtype = CVX_F32, .ndim = 1, .shape = {O2}, .numel = O2, .data = b2,
                     .nbytes = sizeof(float) * O2, .file = "test"};
    const size_t n2 = (size_t)O2 * T2 * Ho * Wo;
    float *r2 = cvx_alloc_f32(n2), *y2[2];
    vae_conv2d_s2_ref(x2, C2, T2, H2, W2, w2, b2, O2, r2);
    for (int i = 0; i < 2; i++) {
        vae_conv c = {.w = &tw, .b = &tb, .cin = C2, .cout = O2, .kt = 1, .kh = 3, .kw = 3, .cache_id = -1,
                      .ctx = p.ctx[i]};
        y2[i] = cvx_alloc_f32(n2);
        vae_conv2d_s2(&c, x2, T2, H2, W2, y2[i]);
        ASSERT_REL_L2(y2[i], r2, n2, 1e-5);
    }
    compare_paths(&p, "VAE stride-2 conv", y2[0], y2[1], n2);
    free(x2), free(w2), free(b2), free(r2), free(y2[0]), free(y2[1]);
    close_paths(&p);
}

/* A NaN in an operand reaches the output on both paths (never swallowed by a kernel). */
static void test_nan(void **state) {
    (void)state;
    paths p = open_paths();
    const int M = 20, N = 70, K = 33;
    float *A = rand_buf((size_t)M * K), *B = rand_buf((size_t)N * K), *C = cvx_alloc_f32((size_t)M * N);
    A[5 * K + 7] = NAN;
    for (int i = 0; i < 2; i++) {
        cvx_mat a = {A, CVX_F32, K, 0}, b = {B, CVX_F32, K, 1};
        ASSERT_OK(cvx_matmul(p.ctx[i]->kernels, CVX_PRECISION_F32, M, N, K, a, b, NULL, 0.0f, C, N));
        for (int j = 0; j < N; j++)
            if (!isnan(C[5 * N + j])) fail_msg("GEMM path %d: C[5, %d] = %g despite a NaN in A's row 5", i, j, (double)C[5 * N + j]);
        for (int j = 0; j < N; j++)
            if (isnan(C[4 * N + j])) fail_msg("GEMM path %d: C[4, %d] is NaN", i, j);
    }
    /* a convolution (on the same GEMM): a NaN input pixel reaches every output it touches */
    const int Cin = 8, Cout = 5, Hp = 10, Wp = 12, H = Hp - 2, W = Wp - 2;
    float *xp = rand_buf((size_t)Cin * Hp * Wp), *wc = rand_buf((size_t)Cout * Cin * 9), *y = cvx_alloc_f32((size_t)Cout * H * W),
          *wpk = cvx_alloc_f32((size_t)9 * Cout * Cin);
    xp[(size_t)2 * Hp * Wp + 5 * Wp + 6] = NAN;   /* channel 2, row 5, column 6 of the padded grid */
    cvx_tensor t = {.name = "w", .dtype = CVX_F32, .ndim = 1, .shape = {(int64_t)Cout * Cin * 9},
                    .numel = (int64_t)Cout * Cin * 9, .data = wc, .nbytes = sizeof(float) * Cout * Cin * 9, .file = "test"};
    for (int i = 0; i < 2; i++) {
        cvx_conv_pack_weights(p.ctx[i], &t, Cout, Cin, 9, wpk);
        cvx_conv3d_padded(p.ctx[i], xp, Cin, 1, Hp, Wp, wpk, NULL, Cout, 1, 3, 3, y);
        for (int co = 0; co < Cout; co++)   /* outputs (4..5, 5..6) see the padded pixel (5, 6) */
            if (!isnan(y[((size_t)co * H + 4) * W + 5]) || isnan(y[((size_t)co * H + 0) * W + 0]))
                fail_msg("conv path %d: output channel %d does not carry the NaN (or carries it too far)", i, co);
    }
    free(xp), free(wc), free(y), free(wpk);
    free(A), free(B), free(C);
    close_paths(&p);
}

/* AVX-512 code (and CPU-feature dispatch) only where it may be: the f32 GEMM's tile sets and the
 * f32 attention's zmm kernels (same chains: equal bits, asserted here and in tests/common_attention.c), the
 * Winograd transforms' AVX-512 builds (common/conv.c, common/conv_weights.c: the same element-wise
 * expressions, no FMA contraction; equal bits asserted by test_conv here and tests/stage3_vae_wcache.c),
 * bf16/int8 kernels (free to differ), CPU detection, the kernels' context, the x264
 * instruction-set list of the MP4 writer (stage3/video.c: not f32 arithmetic). Every other
 * file compiles at the AVX2 baseline only, so its bits are the binary's, not the CPU's. */
static void test_no_dispatch_elsewhere(void **state) {
    (void)state;
    static const char *const allowed[] = {"common/gemm_fixed.c",  "common/gemm_fast.c", "common/attention.c",
                                          "common/attention_bf16.c", "common/conv.c", "common/conv_weights.c",
                                          "common/attention_int8.c", "common/quant_dot.c", "common/quant_avx2.c",
                                          "common/cpu.c",         "common/context.c",   "stage3/video.c"};
    static const char *const marks[] = {"_mm512_", "__m512", "((target", "target_clones", "__builtin_cpu_supports",
                                        "cpuid", ".avx512", "->avx512"};
    static const char *const dirs[] = {"common", "stage1", "stage2", "stage3", "pipeline"};
    int files = 0;
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        DIR *dp = opendir(dirs[d]);
        ASSERT_NONNULL(dp);
        struct dirent *e;
        while ((e = readdir(dp))) {
            size_t n = strlen(e->d_name);
            if (n < 3 || strcmp(e->d_name + n - 2, ".c")) continue;
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
            int ok = 0;
            for (size_t a = 0; a < sizeof allowed / sizeof allowed[0]; a++) ok |= !strcmp(path, allowed[a]);
            files++;
            if (ok) continue;
            size_t len;
            char *src = cvx_read_file(path, &len);
            ASSERT_NONNULL(src);
            for (size_t m = 0; m < sizeof marks / sizeof marks[0]; m++)
                if (strstr(src, marks[m]))
                    fail_msg("%s contains '%s': f32 kernels must not depend on the CPU beyond the AVX2 baseline "
                             "(or add the file to the allowed list with its reason)", path, marks[m]);
            free(src);
        }
        closedir(dp);
    }
    assert_true(files > 50);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),      cmocka_unit_test(test_linear), cmocka_unit_test(test_attention),
        cmocka_unit_test(test_conv),      cmocka_unit_test(test_nan),
        cmocka_unit_test(test_no_dispatch_elsewhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
