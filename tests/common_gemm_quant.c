/* The linear over GGUF block-quantized weights (common/gemm_quant.h), every block type:
 *  - the int8 path's pieces: activations quantized as ggml's quantize_row_q8_0_ref (same codes and
 *    f16 scale as the Q8_0 quantizer) / q8_K, weight rows unpacked to s·u + m = ggml's dequantized
 *    value;
 *  - the dequantized-tile path through cvx_linear (f32: against the double reference over the
 *    dequantized weights; bf16; without oneDNN), shapes that are not multiples of the tiles;
 *  - the int8 kernels (AVX512-VNNI, AVX2, scalar) against their reference (the same int8
 *    activations, double sums), and the int8 path's distance to the dequantized product. */
#include "testutil.h"
#include "context.h"
#include "cpu.h"
#include "gemm.h"
#include "gemm_quant.h"
#include "quant.h"

#include <math.h>

static const cvx_dtype TYPES[] = {CVX_Q8_0, CVX_Q4_0, CVX_Q4_1, CVX_Q5_0, CVX_Q5_1,
                                  CVX_Q2_K, CVX_Q3_K, CVX_Q4_K, CVX_Q5_K, CVX_Q6_K};
#define NTYPES ((int)(sizeof TYPES / sizeof TYPES[0]))

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) {   /* xorshift, uniform in [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / (double)(1ull << 52)) * 2.0f - 1.0f;
}

/* A quantized weight [N, K] made from random values (a few rows with outliers), as a tensor. */
typedef struct {
    cvx_tensor t;
    void *data;
    float *deq;   /* its dequantized values [N, K] */
} qweight;

static void make_weight(qweight *w, cvx_dtype type, int N, int K) {
    const cvx_quant_traits *tr = cvx_quant_of(type);
    const size_t rb = (size_t)K / tr->block * tr->type_size;
    float *src = cvx_alloc_f32((size_t)N * K);
    for (size_t i = 0; i < (size_t)N * K; i++) src[i] = 0.05f * frand() + (i % 97 == 0 ? 0.4f * frand() : 0.0f);
    w->data = cvx_malloc(rb * (size_t)N);
    w->deq = cvx_alloc_f32((size_t)N * K);
    for (int n = 0; n < N; n++) {
        tr->from_f32_ref(src + (size_t)n * K, (char *)w->data + rb * n, K);
        tr->to_f32_ref((char *)w->data + rb * n, w->deq + (size_t)n * K, K);
    }
    free(src);
    memset(&w->t, 0, sizeof w->t);
    w->t.name = "w", w->t.file = "test", w->t.dtype = type, w->t.ndim = 2;
    w->t.shape[0] = N, w->t.shape[1] = K, w->t.numel = (int64_t)N * K;
    w->t.data = w->data, w->t.nbytes = rb * (size_t)N;
}

static void free_weight(qweight *w) { free(w->data), free(w->deq); }

static float *rand_x(int M, int K) {
    float *x = cvx_alloc_f32((size_t)M * K);
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = frand() * (i % 31 == 0 ? 4.0f : 1.0f);
    return x;
}

static void test_activation_quantization(void **state) {
    (void)state;
    const int K = 512;
    float *x = rand_x(1, K);
    int8_t q[512];
    float d[32], ds[32];
    /* q8_0: the codes and the f16 scale of ggml's Q8_0 quantizer */
    unsigned char blocks[512 / 32 * 34];
    cvx_quant_of(CVX_Q8_0)->from_f32_ref(x, blocks, K);
    cvx_q8_quantize_row(CVX_Q4_0, x, K, q, d, ds);
    for (int b = 0; b < K / 32; b++) {
        assert_true(d[b] == cvx_f16_to_f32((uint16_t)(blocks[34 * b] | blocks[34 * b + 1] << 8)));
        assert_memory_equal(q + 32 * b, blocks + 34 * b + 2, 32);
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += q[32 * b + j];
        assert_true(ds[b] == d[b] * (float)sum);
    }
    /* q8_K: per 256, codes in [-127, 127], the largest magnitude at ±127, d·q within d/2 of x */
    cvx_q8_quantize_row(CVX_Q6_K, x, K, q, d, ds);
    for (int b = 0; b < K / 256; b++) {
        int amax = 0;
        for (int j = 0; j < 256; j++) {
            const int v = q[256 * b + j] < 0 ? -q[256 * b + j] : q[256 * b + j];
            amax = v > amax ? v : amax;
            assert_true(fabsf(d[16 * b] * q[256 * b + j] - x[256 * b + j]) <= fabsf(d[16 * b]) * 0.5001f);
        }
        assert_int_equal(amax, 127);
        for (int g = 16 * b; g < 16 * (b + 1); g++) assert_true(d[g] == d[16 * b]);
    }
    /* the AVX2 quantizer gives the same bytes: random values, exact halves (ties), NaN, infinities */
    cvx_cpu_features cpu;
    cvx_cpu_detect(&cpu);
    for (int variant = 0; variant < 4; variant++) {
        for (int k = 0; k < K; k++)
            x[k] = variant == 0 ? frand()
                 : variant == 1 ? (float)(k % 64 - 32) * 0.5f   /* many x/d at exactly .5 */
                 : variant == 2 ? (k == 7 ? NAN : k == 300 ? -INFINITY : frand())
                                : (k == 40 ? NAN : frand() * 1e-30f);
        static const cvx_dtype kinds[] = {CVX_Q8_0, CVX_Q4_1, CVX_Q4_K, CVX_Q6_K};
        for (size_t t = 0; t < sizeof kinds / sizeof kinds[0]; t++) {
            int8_t q2[512];
            float d2[32], ds2[32];
            const int G = cvx_q8_group(kinds[t]);
            cvx_q8_quantize_row(kinds[t], x, K, q, d, ds);
            cvx_q8_quantize_row_fast(&cpu, kinds[t], x, K, q2, d2, ds2);
            assert_memory_equal(q, q2, K);
            assert_memory_equal(d, d2, sizeof(float) * (K / G));
            assert_memory_equal(ds, ds2, sizeof(float) * (K / G));
        }
    }
    /* zeros: zero codes and scale */
    memset(x, 0, sizeof(float) * K);
    cvx_q8_quantize_row(CVX_Q4_K, x, K, q, d, ds);
    for (int k = 0; k < K; k++) assert_int_equal(q[k], 0);
    assert_true(d[0] == 0 && ds[0] == 0);
    free(x);
}

static void test_unpack(void **state) {
    (void)state;
    const int K = 512;
    for (int t = 0; t < NTYPES; t++) {
        qweight w;
        make_weight(&w, TYPES[t], 3, K);
        const int G = cvx_q8_group(TYPES[t]);
        uint8_t u[512];
        float s[32], m[32];
        for (int n = 0; n < 3; n++) {
            cvx_q8_unpack_row(TYPES[t], (const char *)w.data + w.t.nbytes / 3 * n, K, u, s, m);
            double worst = 0;
            for (int k = 0; k < K; k++) {
                const float want = w.deq[(size_t)n * K + k], got = s[k / G] * (float)u[k] + m[k / G];
                const double scale = fabs(s[k / G]) * 256 + fabs(m[k / G]) + 1e-30;
                worst = fmax(worst, fabs(got - want) / scale);
            }
            if (worst > 2e-7) fail_msg("%s row %d: s*u + m differs from ggml's value by %.3g of the block's range",
                                       cvx_dtype_name(TYPES[t]), n, worst);
        }
        free_weight(&w);
    }
}

/* cvx_linear on a context: the dequantized tiles in f32 / bf16, and int8. */
static void test_linear_paths(void **state) {
    (void)state;
    const int M = 37, N = 83, K = 768;
    cvx_ctx *ctx = cvx_ctx_new(2);
    ASSERT_NONNULL(ctx->kernels);
    float *x = rand_x(M, K), *bias = rand_x(1, N), *y = cvx_alloc_f32((size_t)M * N),
          *ref = cvx_alloc_f32((size_t)M * N), *ref8 = cvx_alloc_f32((size_t)M * N);
    cvx_tensor bt = {.name = "b", .file = "test", .dtype = CVX_F32, .ndim = 1, .shape = {N}, .numel = N,
                     .data = bias, .nbytes = sizeof(float) * N};
    for (int t = 0; t < NTYPES; t++) {
        qweight w;
        make_weight(&w, TYPES[t], N, K);
        print_message("%s:\n", cvx_dtype_name(TYPES[t]));
        ASSERT_OK(cvx_linear_quant_ref(CVX_QDOT_DEQUANT, x, M, K, &w.t, bias, ref));
        ASSERT_OK(cvx_linear_quant_ref(CVX_QDOT_INT8, x, M, K, &w.t, bias, ref8));

        cvx_ctx_set_int8(ctx, 0);
        ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_F32));
        cvx_linear(ctx, x, M, K, &w.t, &bt, y);
        ASSERT_REL_L2(y, ref, (size_t)M * N, 1e-6);
        ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_BF16));
        cvx_linear(ctx, x, M, K, &w.t, &bt, y);
        ASSERT_REL_L2(y, ref, (size_t)M * N, 8e-3);
        ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_F32));

        /* without oneDNN: the tiles through OpenBLAS */
        ASSERT_OK(cvx_linear_quant(NULL, CVX_PRECISION_F32, CVX_QDOT_DEQUANT, x, M, K, &w.t, bias, y));
        ASSERT_REL_L2(y, ref, (size_t)M * N, 1e-6);

        cvx_ctx_set_int8(ctx, 1);
        cvx_linear(ctx, x, M, K, &w.t, &bt, y);
        ASSERT_REL_L2(y, ref8, (size_t)M * N, 1e-6);
        double e = cvx_rel_l2(y, ref, (size_t)M * N);
        print_message("  int8 vs dequantized weights: rel L2 %.3g\n", e);
        assert_true(e < 2e-2 && e > 0);
        free_weight(&w);
    }
    cvx_ctx_free(ctx);
    free(x), free(bias), free(y), free(ref), free(ref8);
}

/* Each int8 kernel against the reference, with row/column counts around the register blocks. */
static void test_int8_kernels(void **state) {
    (void)state;
    cvx_cpu_features cpu;
    cvx_cpu_detect(&cpu);
    static const cvx_q8_kernel kernels[] = {CVX_Q8K_AUTO, CVX_Q8K_AVX2, CVX_Q8K_SCALAR};
    static const int shapes[][3] = {{1, 16, 256}, {5, 33, 512}, {260, 70, 256}, {4, 128, 1024}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *x = rand_x(M, K), *y = cvx_alloc_f32((size_t)M * N), *ref = cvx_alloc_f32((size_t)M * N);
        for (int t = 0; t < NTYPES; t++) {
            qweight w;
            make_weight(&w, TYPES[t], N, K);
            ASSERT_OK(cvx_linear_quant_ref(CVX_QDOT_INT8, x, M, K, &w.t, NULL, ref));
            for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
                ASSERT_OK(cvx_q8_linear(&cpu, kernels[k], x, M, K, &w.t, NULL, y));
                double e = cvx_rel_l2(y, ref, (size_t)M * N);
                if (!(e <= 1e-6))
                    fail_msg("%s %s M=%d N=%d K=%d: rel L2 %.3g vs the reference", cvx_dtype_name(TYPES[t]),
                             cvx_q8_kernel_name(&cpu, kernels[k]), M, N, K, e);
            }
            free_weight(&w);
        }
        free(x), free(y), free(ref);
    }
    char buf[128];
    print_message("  cpu: %s; int8 kernel: %s\n", cvx_cpu_describe(&cpu, buf, sizeof buf),
                  cvx_q8_kernel_name(&cpu, CVX_Q8K_AUTO));
}

/* The int16 sums of the AVX2 kernel at their worst case: weights at the type's largest code and
 * activations all ±127 of one sign, so every pair sum is as large as it gets (a saturating sum
 * would be far off the reference). The rows reach each type's largest code (checked). */
static void test_int8_extremes(void **state) {
    (void)state;
    cvx_cpu_features cpu;
    cvx_cpu_detect(&cpu);
    const int M = 2, N = 16, K = 512;
    float *x = cvx_alloc_f32((size_t)M * K), *src = cvx_alloc_f32((size_t)N * K);
    for (int k = 0; k < K; k++) x[k] = 1.0f, x[K + k] = -1.0f;   /* codes +127, -127 */
    for (int n = 0; n < N; n++)   /* the block's extreme first (it sets the scale), then its opposite sign */
        for (int k = 0; k < K; k++) {
            const float sgn = n % 2 ? -1.0f : 1.0f, big = k % 32 == 0 ? -1.0f : 0.875f + 0.0078125f * (float)(n / 2);
            src[(size_t)n * K + k] = n % 4 < 2 ? sgn * big : sgn;
        }
    float *y = cvx_alloc_f32((size_t)M * N), *ref = cvx_alloc_f32((size_t)M * N);
    for (int t = 0; t < NTYPES; t++) {
        const cvx_quant_traits *tr = cvx_quant_of(TYPES[t]);
        const size_t rb = (size_t)K / tr->block * tr->type_size;
        unsigned char *data = cvx_malloc(rb * N);
        for (int n = 0; n < N; n++) tr->from_f32_ref(src + (size_t)n * K, data + rb * n, K);
        if (TYPES[t] == CVX_Q6_K)   /* ggml's quantizer stops at 61 here: odd rows as raw blocks of code 63 */
            for (int n = 1; n < N; n += 2)
                for (size_t b = 0; b < rb; b += tr->type_size) {
                    unsigned char *blk = data + rb * n + b;   /* ql[128], qh[64], int8 scales[16], f16 d */
                    memset(blk, 0xff, 192), memset(blk + 192, 1, 16), blk[208] = 0x00, blk[209] = 0x3c;
                }
        uint8_t u[512], top = 0;
        float sc[32], mn[32];
        for (int n = 0; n < N; n++) {
            cvx_q8_unpack_row(TYPES[t], data + rb * n, K, u, sc, mn);
            for (int k = 0; k < K; k++) top = u[k] > top ? u[k] : top;
        }
        const int want_top = TYPES[t] == CVX_Q8_0 ? 255 : TYPES[t] == CVX_Q6_K ? 63 : TYPES[t] == CVX_Q2_K ? 3
                           : TYPES[t] == CVX_Q3_K ? 7 : TYPES[t] == CVX_Q5_0 || TYPES[t] == CVX_Q5_1 || TYPES[t] == CVX_Q5_K ? 31 : 15;
        if (top != want_top) fail_msg("%s: largest code %d, expected %d", cvx_dtype_name(TYPES[t]), top, want_top);
        cvx_tensor w = {.name = "w", .file = "test", .dtype = TYPES[t], .ndim = 2, .shape = {N, K},
                        .numel = (int64_t)N * K, .data = data, .nbytes = rb * N};
        ASSERT_OK(cvx_linear_quant_ref(CVX_QDOT_INT8, x, M, K, &w, NULL, ref));
        ASSERT_OK(cvx_q8_linear(&cpu, CVX_Q8K_AVX2, x, M, K, &w, NULL, y));
        const double e = cvx_rel_l2(y, ref, (size_t)M * N);
        if (!(e <= 1e-6)) fail_msg("%s at the largest codes: rel L2 %.3g vs the reference", cvx_dtype_name(TYPES[t]), e);
        free(data);
    }
    free(x), free(src), free(y), free(ref);
}

static void test_bad_weight(void **state) {
    (void)state;
    qweight w;
    make_weight(&w, CVX_Q4_K, 4, 256);
    float x[512], y[16];
    memset(x, 0, sizeof x);
    w.t.shape[1] = 128;   /* a row that is not whole blocks */
    assert_int_equal(cvx_linear_quant(NULL, CVX_PRECISION_F32, CVX_QDOT_DEQUANT, x, 1, 128, &w.t, NULL, y), -1);
    assert_non_null(strstr(cvx_last_error(), "whole 256-value blocks"));
    w.t.shape[1] = 256, w.t.dtype = CVX_F32;
    assert_int_equal(cvx_linear_quant(NULL, CVX_PRECISION_F32, CVX_QDOT_INT8, x, 1, 256, &w.t, NULL, y), -1);
    assert_non_null(strstr(cvx_last_error(), "expected a GGUF block type"));
    free_weight(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activation_quantization), cmocka_unit_test(test_unpack),
        cmocka_unit_test(test_linear_paths), cmocka_unit_test(test_int8_kernels), cmocka_unit_test(test_int8_extremes),
        cmocka_unit_test(test_bad_weight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
