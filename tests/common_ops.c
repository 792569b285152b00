/* Every common op against a plain reference: GEMM vs triple loop, tiled attention vs full
 * softmax, norms and activations vs double-precision formulas, dtype conversions vs known bits. */
#include "testutil.h"
#include "cpu.h"
#include "dtype.h"
#include "gemm.h"
#include "vecmath.h"

#include <math.h>

static uint32_t g_lcg = 12345;
static float frand(void) {  /* deterministic uniform in [-1, 1) */
    g_lcg = g_lcg * 1664525u + 1013904223u;
    return (float)((g_lcg >> 8) * (1.0 / 8388608.0)) * 2.0f - 1.0f;
}
static float *rand_buf(size_t n, float scale) {
    float *p = cvx_alloc_f32(n);
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}

static void test_sgemm_vs_reference(void **state) {
    (void)state;
    const int M = 37, N = 29, K = 53;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *A = rand_buf((size_t)M * K, 1), *B = rand_buf((size_t)K * N, 1);
            float *C = rand_buf((size_t)M * N, 1), *R = cvx_alloc_f32((size_t)M * N);
            memcpy(R, C, sizeof(float) * M * N);
            int lda = ta ? M : K, ldb = tb ? K : N;
            cvx_sgemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.25f, C, N);
            cvx_sgemm_ref(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.25f, R, N);
            ASSERT_REL_L2(C, R, (size_t)M * N, 1e-6);
            free(A); free(B); free(C); free(R);
        }
}

/* cvx_sgemm_fixed: bit-equal to its scalar chain (fmaf), at 1, 2 and 3 threads, and row by row
 * whatever rows a call holds (a split into two calls: what MPI ranks do); close to the double
 * reference. Shapes cross every edge: rows not a multiple of 6, columns of 16 or 64, K of 256. */
static void test_sgemm_fixed(void **state) {
    (void)state;
    const int shapes[][3] = {{1, 1, 1}, {5, 17, 3}, {13, 70, 257}, {37, 129, 600}, {400, 65, 31}, {7, 3, 0},
                              {100, 3100, 20}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int v = 0; v < 8; v++) {
            const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], ta = v & 1, tb = (v >> 1) & 1;
            const int lda = ta ? M : K, ldb = tb ? K : N;
            const float beta = (v & 4) ? 0.25f : 0.0f;
            float *A = rand_buf((size_t)M * K + 1, 1), *B = rand_buf((size_t)K * N + 1, 1), *bias = rand_buf(N, 1);
            float *C0 = rand_buf((size_t)M * N, 1), *C = cvx_alloc_f32((size_t)M * N), *R = cvx_alloc_f32((size_t)M * N);
            memcpy(R, C0, sizeof(float) * M * N);
            cvx_sgemm_fixed_ref(ta, tb, M, N, K, A, lda, B, ldb, (v & 2) ? bias : NULL, beta, R, N);
            for (int th = 1; th <= 3; th++) {
                cvx_set_threads(th);
                memcpy(C, C0, sizeof(float) * M * N);
                cvx_sgemm_fixed(ta, tb, M, N, K, A, lda, B, ldb, (v & 2) ? bias : NULL, beta, C, N);
                assert_memory_equal(C, R, sizeof(float) * M * N);
            }
            const int m1 = M / 3;   /* rows [0, m1) and [m1, M) in two calls */
            memcpy(C, C0, sizeof(float) * M * N);
            cvx_sgemm_fixed(ta, tb, m1, N, K, A, lda, B, ldb, (v & 2) ? bias : NULL, beta, C, N);
            cvx_sgemm_fixed(ta, tb, M - m1, N, K, ta ? A + m1 : A + (size_t)m1 * lda, lda, B, ldb,
                            (v & 2) ? bias : NULL, beta, C + (size_t)m1 * N, N);
            assert_memory_equal(C, R, sizeof(float) * M * N);
            if (!(v & 2)) {   /* against the double-accumulated reference */
                memcpy(C, C0, sizeof(float) * M * N);
                cvx_sgemm_ref(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, N);
                ASSERT_REL_L2(R, C, (size_t)M * N, 1e-6);
            }
            free(A); free(B); free(bias); free(C0); free(C); free(R);
        }
    cvx_set_threads(0);
}

/* "auto" is decided in one place, per kind of work: the VAEs (convolutions) in f32, the matmul
 * work in bf16 exactly when the CPU has bf16 units; the names and a bad one. */
static void test_precision_auto(void **state) {
    (void)state;
    cvx_cpu_features f;
    cvx_cpu_detect(&f);
    const cvx_precision mm = f.avx512_bf16 || f.amx_bf16 ? CVX_PRECISION_BF16 : CVX_PRECISION_F32;
    cvx_precision p;
    assert_int_equal(cvx_precision_auto(CVX_WORK_MATMUL), mm);
    assert_int_equal(cvx_precision_auto(CVX_WORK_CONV), CVX_PRECISION_F32);
    assert_int_equal(cvx_precision_parse("auto", CVX_WORK_MATMUL, &p), 0);
    assert_int_equal(p, mm);
    assert_int_equal(cvx_precision_parse("auto", CVX_WORK_CONV, &p), 0);
    assert_int_equal(p, CVX_PRECISION_F32);
    assert_int_equal(cvx_precision_parse("bfloat16", CVX_WORK_CONV, &p), 0);
    assert_int_equal(p, CVX_PRECISION_BF16);
    assert_int_equal(cvx_precision_parse("f16", CVX_WORK_MATMUL, &p), -1);
    assert_non_null(strstr(cvx_last_error(), "f32, bf16, auto"));
}

/* nn.Linear with BF16 weights = the same product on the widened weights. */
static void test_linear_bf16(void **state) {
    (void)state;
    const int M = 5, K = 24, N = 10;
    float *x = rand_buf((size_t)M * K, 1), *wf = rand_buf((size_t)N * K, 1), *bf = rand_buf(N, 1);
    uint16_t wb[N * K], bb[N];
    cvx_f32_to_bf16_n(wf, wb, (size_t)N * K);
    cvx_f32_to_bf16_n(bf, bb, N);
    cvx_tensor W = {.name = "w", .dtype = CVX_BF16, .ndim = 2, .shape = {N, K}, .numel = N * K, .data = wb};
    cvx_tensor b = {.name = "b", .dtype = CVX_BF16, .ndim = 1, .shape = {N}, .numel = N, .data = bb};
    float y[M * N], r[M * N];
    cvx_ctx *ctx = cvx_ctx_new(0);
    cvx_linear(ctx, x, M, K, &W, &b, y);
    assert_true(ctx->flops == 2.0 * M * N * K);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = cvx_bf16_to_f32(bb[j]);
            for (int k = 0; k < K; k++) acc += (double)x[i * K + k] * cvx_bf16_to_f32(wb[j * K + k]);
            r[i * N + j] = (float)acc;
        }
    ASSERT_REL_L2(y, r, M * N, 1e-6);
    /* F32 weights are used in place, without bias */
    cvx_tensor Wf = {.name = "w", .dtype = CVX_F32, .ndim = 2, .shape = {N, K}, .numel = N * K, .data = wf};
    assert_ptr_equal(cvx_weight_f32(ctx, &Wf), wf);
    cvx_linear(ctx, x, M, K, &Wf, NULL, y);
    cvx_sgemm_ref(0, 1, M, N, K, 1, x, K, wf, K, 0, r, N);
    ASSERT_REL_L2(y, r, M * N, 1e-6);
    cvx_ctx_free(ctx);
    free(x); free(wf); free(bf);
}

static void check_attention(int Sq, int Skv, int heads, int hd, int with_bias, int pad) {
    int ld_q = heads * hd + pad, ld_kv = heads * hd + 2 * pad, ld_o = heads * hd + pad;
    float *q = rand_buf((size_t)Sq * ld_q, 2), *k = rand_buf((size_t)Skv * ld_kv, 2), *v = rand_buf((size_t)Skv * ld_kv, 1);
    float *bias = with_bias ? rand_buf((size_t)heads * Sq * Skv, 3) : NULL;
    float *o = cvx_alloc_f32((size_t)Sq * ld_o), *r = cvx_alloc_f32((size_t)Sq * ld_o);
    memset(o, 0, sizeof(float) * Sq * ld_o);
    memset(r, 0, sizeof(float) * Sq * ld_o);
    float scale = 1.0f / sqrtf((float)hd);
    cvx_attention(q, ld_q, k, v, ld_kv, o, ld_o, Sq, Skv, heads, hd, scale, bias);
    cvx_attention_ref(q, ld_q, k, v, ld_kv, r, ld_o, Sq, Skv, heads, hd, scale, bias);
    print_message("  Sq=%d Skv=%d heads=%d hd=%d bias=%d\n", Sq, Skv, heads, hd, with_bias);
    ASSERT_REL_L2(o, r, (size_t)Sq * ld_o, 1e-6);
    /* the portable sgemm path too (cvx_attention takes the AVX2 kernels when hd % 16 == 0) */
    memset(o, 0, sizeof(float) * Sq * ld_o);
    cvx_attention_tiled(q, ld_q, k, v, ld_kv, o, ld_o, Sq, Skv, heads, hd, scale, bias);
    ASSERT_REL_L2(o, r, (size_t)Sq * ld_o, 1e-6);
    if (ld_o == ld_q) {  /* out aliasing q */
        float *qa = cvx_alloc_f32((size_t)Sq * ld_q);
        memcpy(qa, q, sizeof(float) * Sq * ld_q);
        cvx_attention_tiled(qa, ld_q, k, v, ld_kv, qa, ld_q, Sq, Skv, heads, hd, scale, bias);
        for (int i = 0; i < Sq; i++)  /* compare the attention columns only */
            for (int c = 0; c < heads * hd; c++) o[(size_t)i * ld_o + c] = qa[(size_t)i * ld_q + c];
        ASSERT_REL_L2(o, r, (size_t)Sq * ld_o, 1e-6);
        free(qa);
    }
    free(q); free(k); free(v); free(bias); free(o); free(r);
}

static void test_attention_vs_reference(void **state) {
    (void)state;
    check_attention(7, 7, 2, 8, 0, 0);
    check_attention(130, 1100, 3, 16, 0, 5);   /* several query and key tiles, ragged ends, strides */
    check_attention(226, 226, 4, 8, 1, 0);     /* T5-like: additive position bias */
    check_attention(1, 600, 1, 64, 1, 3);
}

static void test_norms(void **state) {
    (void)state;
    const int rows = 6, dim = 40;
    float *x = rand_buf(rows * dim, 3), *w = rand_buf(dim, 1), *b = rand_buf(dim, 1);
    float y[rows * dim], r[rows * dim];
    for (int i = 0; i < rows; i++) x[i * dim] += 10.0f * i;  /* non-zero means */
    cvx_layernorm(y, x, rows, dim, w, b, 1e-5f);
    for (int i = 0; i < rows; i++) {
        double m = 0, v = 0;
        for (int j = 0; j < dim; j++) m += x[i * dim + j];
        m /= dim;
        for (int j = 0; j < dim; j++) v += (x[i * dim + j] - m) * (x[i * dim + j] - m);
        v /= dim;
        for (int j = 0; j < dim; j++) r[i * dim + j] = (float)((x[i * dim + j] - m) / sqrt(v + 1e-5) * w[j] + b[j]);
    }
    ASSERT_REL_L2(y, r, rows * dim, 1e-6);
    cvx_rmsnorm(y, x, rows, dim, w, 1e-6f);
    for (int i = 0; i < rows; i++) {
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)x[i * dim + j] * x[i * dim + j];
        for (int j = 0; j < dim; j++) r[i * dim + j] = (float)(x[i * dim + j] / sqrt(ss / dim + 1e-6) * w[j]);
    }
    ASSERT_REL_L2(y, r, rows * dim, 1e-6);
    /* GroupNorm: 8 channels, 4 groups, S = 15 */
    const int C = 8, G = 4, S = 15;
    float *gx = rand_buf(C * S, 2), gy[C * S], gr[C * S];
    cvx_groupnorm(gy, gx, C, S, G, w, b, 1e-6f);
    for (int g = 0; g < G; g++) {
        double m = 0, v = 0;
        int n = (C / G) * S;
        for (int i = 0; i < n; i++) m += gx[g * n + i];
        m /= n;
        for (int i = 0; i < n; i++) v += (gx[g * n + i] - m) * (gx[g * n + i] - m);
        v /= n;
        for (int i = 0; i < n; i++) {
            int c = (g * n + i) / S;
            gr[g * n + i] = (float)((gx[g * n + i] - m) / sqrt(v + 1e-6) * w[c] + b[c]);
        }
    }
    ASSERT_REL_L2(gy, gr, C * S, 1e-6);
    free(x); free(w); free(b); free(gx);
}

/* The 8-lane group statistics against one serial double sum per pass, on sizes with a
 * vector part and a tail, and an offset mean (the two-pass variance must not cancel). */
static void test_groupnorm_stats(void **state) {
    (void)state;
    const int C = 12, G = 3;
    const size_t S = 1037;
    float *x = rand_buf((int)(C * S), 9);
    for (size_t i = 0; i < C * S; i++) x[i] += 100.0f;
    float m[3], v[3], mr[3], vr[3];
    cvx_groupnorm_stats(x, C, S, G, 1e-6f, m, v);
    cvx_groupnorm_stats_ref(x, C, S, G, 1e-6f, mr, vr);
    for (int g = 0; g < G; g++) {
        assert_true(fabsf(m[g] - mr[g]) <= 1e-6f * fabsf(mr[g]));
        assert_true(fabsf(v[g] - vr[g]) <= 1e-6f * fabsf(vr[g]));
    }
    free(x);
}

static void test_activations(void **state) {
    (void)state;
    const int n = 1000;
    float *x = rand_buf(n, 6), y[n], r[n];
    memcpy(y, x, sizeof y);
    cvx_silu(y, n);
    for (int i = 0; i < n; i++) r[i] = (float)(x[i] / (1.0 + exp(-(double)x[i])));
    ASSERT_REL_L2(y, r, n, 1e-6);
    memcpy(y, x, sizeof y);
    cvx_gelu_tanh(y, n);
    for (int i = 0; i < n; i++) {
        double v = x[i];
        r[i] = (float)(0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    }
    ASSERT_REL_L2(y, r, n, 1e-6);
    memcpy(y, x, sizeof y);
    cvx_gelu_erf(y, n);   /* nn.GELU(): x·Φ(x), Φ through erfc here */
    for (int i = 0; i < n; i++) r[i] = (float)(0.5 * x[i] * erfc(-(double)x[i] / sqrt(2.0)));
    ASSERT_REL_L2(y, r, n, 1e-6);
    memcpy(y, x, sizeof y);
    cvx_softmax_rows(y, 10, 100);
    for (int i = 0; i < 10; i++) {
        double s = 0, m = -1e30;
        for (int j = 0; j < 100; j++) m = fmax(m, x[i * 100 + j]);
        for (int j = 0; j < 100; j++) s += exp(x[i * 100 + j] - m);
        for (int j = 0; j < 100; j++) r[i * 100 + j] = (float)(exp(x[i * 100 + j] - m) / s);
    }
    ASSERT_REL_L2(y, r, n, 1e-6);
    free(x);
}

/* cvx_rope_interleaved: each pair (x[2j], x[2j+1]) of each head, read as a complex number, times
 * e^{iθ} of its row and pair (stride ld > heads·hd: the columns past the heads stay). */
static void test_rope_interleaved(void **state) {
    (void)state;
    const int ntok = 7, heads = 3, hd = 8, ld = heads * hd + 5;
    float *x = rand_buf(ntok * ld, 2), *y = cvx_alloc_f32(ntok * ld), *r = cvx_alloc_f32(ntok * ld);
    float *cs = cvx_alloc_f32(ntok * hd), *sn = cvx_alloc_f32(ntok * hd);
    memcpy(y, x, sizeof(float) * ntok * ld);
    memcpy(r, x, sizeof(float) * ntok * ld);
    for (int t = 0; t < ntok; t++)
        for (int j = 0; j < hd / 2; j++) {
            double a = 0.37 * t * (j + 1);
            cs[t * hd + 2 * j] = cs[t * hd + 2 * j + 1] = (float)cos(a);
            sn[t * hd + 2 * j] = sn[t * hd + 2 * j + 1] = (float)sin(a);
            for (int h = 0; h < heads; h++) {
                const float *v = x + t * ld + h * hd + 2 * j;
                double re = v[0], im = v[1], c = cs[t * hd + 2 * j], s = sn[t * hd + 2 * j];
                r[t * ld + h * hd + 2 * j] = (float)(re * c - im * s);
                r[t * ld + h * hd + 2 * j + 1] = (float)(im * c + re * s);
            }
        }
    cvx_rope_interleaved(y, ntok, heads, hd, ld, cs, sn);
    ASSERT_REL_L2(y, r, (size_t)ntok * ld, 1e-6);
    free(x); free(y); free(cs); free(sn); free(r);
}

static void test_dtype_conversions(void **state) {
    (void)state;
    /* f32 -> bf16 round to nearest even, as torch: bits chosen to hit ties both ways */
    struct { uint32_t f; uint16_t h; } cases[] = {
        {0x3f800000, 0x3f80}, {0x3f808000, 0x3f80} /* tie, even stays */, {0x3f818000, 0x3f82} /* tie, odd rounds up */,
        {0x3f808001, 0x3f81}, {0x3f807fff, 0x3f80}, {0x7f800000, 0x7f80} /* inf */, {0xff800000, 0xff80},
        {0x7f7fffff, 0x7f80} /* max float rounds to inf */, {0x80000000, 0x8000}, {0x00000001, 0x0000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float f;
        memcpy(&f, &cases[i].f, 4);
        assert_int_equal(cvx_f32_to_bf16(f), cases[i].h);
    }
    assert_int_equal(cvx_f32_to_bf16(NAN) & 0x7fc0, 0x7fc0);
    assert_true(isnan(cvx_bf16_to_f32(cvx_f32_to_bf16(NAN))));
    assert_true(cvx_bf16_to_f32(0x3fc0) == 1.5f);
    /* f16 -> f32: normal, subnormal, inf, negative zero */
    assert_true(cvx_f16_to_f32(0x3c00) == 1.0f);
    assert_true(cvx_f16_to_f32(0xc000) == -2.0f);
    assert_true(cvx_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(cvx_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    assert_true(cvx_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
    assert_true(isinf(cvx_f16_to_f32(0x7c00)));
    assert_true(isnan(cvx_f16_to_f32(0x7e00)));
    assert_true(signbit(cvx_f16_to_f32(0x8000)));
    /* the vector f16 path equals the scalar one on all 65536 bit patterns (NaNs: stay NaN) */
    uint16_t *all = malloc(65536 * sizeof(uint16_t));
    float *vec = malloc(65536 * sizeof(float));
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    cvx_f16_to_f32_n(all, vec, 65536);
    for (int i = 0; i < 65536; i++) {
        float sc = cvx_f16_to_f32((uint16_t)i);
        if (isnan(sc)) assert_true(isnan(vec[i]));
        else if (memcmp(&sc, &vec[i], 4) != 0) fail_msg("f16 0x%04x: vector %g != scalar %g", i, vec[i], sc);
    }
    free(all);
    free(vec);
    /* unaligned widening goes through the same values */
    unsigned char raw[1 + 2 * 4];
    uint16_t vals[4] = {0x3f80, 0x4000, 0xbf80, 0x0000};
    memcpy(raw + 1, vals, sizeof vals);
    float out[4];
    cvx_to_f32_n(CVX_BF16, raw + 1, out, 4);
    assert_true(out[0] == 1.0f && out[1] == 2.0f && out[2] == -1.0f && out[3] == 0.0f);
    cvx_dtype d;
    assert_int_equal(cvx_dtype_parse("BF16", &d), 0);
    assert_int_equal(d, CVX_BF16);
    assert_int_equal(cvx_dtype_parse("bf16", &d), -1);
    assert_int_equal(cvx_dtype_size(CVX_I64), 8);
}

/* The one SiLU (issue 9): the threaded cvx_silu gives the bytes of one cvx_silu_serial call
 * (what the VAE decoder runs per row) for every length, both stay within a few ulp of the
 * scalar reference x / (1 + e^−x), and the extremes behave (0 → 0, large → x, very negative → −0). */
static void test_one_silu(void **state) {
    (void)state;
    const size_t lens[] = {1, 7, 8, 9, 15, 16, 17, 4095, 4096, 4097, 8200, 10007};
    float *x = rand_buf(10007, 8);
    float *a = malloc(sizeof(float) * 10007), *b = malloc(sizeof(float) * 10007);
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        size_t n = lens[k];
        memcpy(a, x, sizeof(float) * n);
        memcpy(b, x, sizeof(float) * n);
        cvx_silu(a, n);
        cvx_silu_serial(b, n);
        assert_memory_equal(a, b, sizeof(float) * n);
    }
    double worst = 0;
    for (size_t i = 0; i < 10007; i++) {
        double r = x[i] / (1.0 + exp(-(double)x[i]));
        if (fabs(r) > 1e-30) worst = fmax(worst, fabs(a[i] - r) / fabs(r));
    }
    print_message("  silu: worst relative error vs double reference %.3g\n", worst);
    assert_true(worst < 4e-7);   /* a few float ulp */
    float e[16] = {0.0f, 100.0f, -100.0f, 20.0f, -20.0f, 1.0f, -1.0f, 88.0f,
                   -88.0f, 89.0f, -89.0f, 0.5f, -0.5f, 3.0f, -3.0f, 1e-20f};
    float f[16];
    memcpy(f, e, sizeof e);
    cvx_silu_serial(f, 16);   /* all in the 8-lane path */
    assert_true(f[0] == 0.0f && f[1] == 100.0f && f[3] == 20.0f && f[15] == 1e-20f * 0.5f);
    assert_true(f[2] <= 0.0f && f[2] > -1e-30f && f[10] <= 0.0f && f[10] > -1e-30f);
    memcpy(f, e, sizeof e);
    cvx_silu_serial(f, 3);    /* the scalar tail */
    assert_true(f[0] == 0.0f && f[1] == 100.0f && f[2] <= 0.0f && f[2] > -1e-30f);
    free(x), free(a), free(b);
}

int main(void) {
    cvx_set_threads(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgemm_vs_reference),
        cmocka_unit_test(test_sgemm_fixed),
        cmocka_unit_test(test_precision_auto),
        cmocka_unit_test(test_linear_bf16),
        cmocka_unit_test(test_attention_vs_reference),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_groupnorm_stats),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_one_silu),
        cmocka_unit_test(test_rope_interleaved),
        cmocka_unit_test(test_dtype_conversions),
    };
    return cmocka_run_group_tests_name("common_ops", tests, NULL, NULL);
}
