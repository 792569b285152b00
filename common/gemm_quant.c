/* nn.Linear over a ggml block-quantized W (gemm_quant.h): the dispatch, the dequantized-tile path
 * and the references. The int8 path is common/quant_dot.c. */
#include "gemm_quant.h"
#include "error.h"
#include "gemm.h"
#include "quant.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* A tile of dequantized rows holds at most this many bytes (f32: 2M values; Wan-14B's ffn.2 rows of
 * 13824 give tiles of 144 rows), so a quantized matrix is never widened whole. */
enum { TILE_BYTES = 8 << 20, TILE_ALIGN_ROWS = 16 };

static int check_weight(const cvx_tensor *W, int K) {
    if (!cvx_dtype_is_quant(W->dtype))
        return cvx_error("%s: tensor '%s' has dtype %s, expected a GGUF block type", W->file, W->name,
                         cvx_dtype_name(W->dtype));
    if (W->ndim != 2 || W->shape[1] != K || K % cvx_dtype_block(W->dtype))
        return cvx_error("%s: linear weight '%s' (%s) has shape [%lld, %lld], expected [N, %d] with rows of whole "
                         "%d-value blocks", W->file, W->name, cvx_dtype_name(W->dtype), (long long)W->shape[0],
                         W->ndim == 2 ? (long long)W->shape[1] : -1LL, K, cvx_dtype_block(W->dtype));
    return 0;
}

static size_t row_bytes(const cvx_tensor *W, int K) {
    return (size_t)K / (size_t)cvx_dtype_block(W->dtype) * cvx_dtype_block_bytes(W->dtype);
}

/* y[:, n0..n0+nb) for each tile of nb rows of W, dequantized (f32, or bf16 when the GEMM reads bf16
 * natively) into scratch, then one GEMM with C's row stride N. */
static int linear_dequant(cvx_kernels *kc, cvx_precision p, const float *x, int M, int K, const cvx_tensor *W,
                          const float *bias, float *y) {
    const int N = (int)W->shape[0];
    const cvx_quant_traits *tr = cvx_quant_of(W->dtype);
    const size_t rb = row_bytes(W, K);
    const int bf16 = kc && p == CVX_PRECISION_BF16 && cvx_kernels_bf16_native(kc);
    const size_t es = bf16 ? 2 : 4;
    int NB = (int)(TILE_BYTES / ((size_t)K * es)) / TILE_ALIGN_ROWS * TILE_ALIGN_ROWS;
    NB = NB < TILE_ALIGN_ROWS ? TILE_ALIGN_ROWS : NB;
    NB = NB > N ? N : NB;
    const int threads = omp_get_max_threads();
    const size_t tile_bytes = ((size_t)NB * K * es + 63) & ~(size_t)63,
                 bytes = tile_bytes + (bf16 ? sizeof(float) * (size_t)K * threads : 0);
    void *owned = kc ? NULL : cvx_alloc_aligned_at(bytes, __FILE__, __LINE__);
    unsigned char *tile = kc ? cvx_kernels_scratch(kc, 0, bytes) : owned;
    float *rowbuf = (float *)(tile + tile_bytes);   /* bf16: one f32 row per thread */
    /* bf16: x rounded to bf16 once for all tiles (cvx_matmul would convert it per call) */
    const void *xa = x;
    if (bf16) {
        uint16_t *xb = cvx_kernels_scratch(kc, 2, sizeof(uint16_t) * (size_t)M * K);
        cvx_f32_to_bf16_fast(x, xb, (size_t)M * K);
        xa = xb;
    }
    int rc = 0;
    for (int n0 = 0; n0 < N && !rc; n0 += NB) {
        const int nb = N - n0 < NB ? N - n0 : NB;
#pragma omp parallel for schedule(static)
        for (int i = 0; i < nb; i++) {
            const unsigned char *src = (const unsigned char *)W->data + (size_t)(n0 + i) * rb;
            if (!bf16) {
                tr->to_f32(src, (float *)tile + (size_t)i * K, K);
            } else {
                float *t = rowbuf + (size_t)omp_get_thread_num() * K;
                tr->to_f32(src, t, K);
                cvx_f32_to_bf16_n(t, (uint16_t *)tile + (size_t)i * K, (size_t)K);
            }
        }
        if (kc) {
            cvx_mat a = {xa, bf16 ? CVX_BF16 : CVX_F32, K, 0}, b = {tile, bf16 ? CVX_BF16 : CVX_F32, K, 1};   /* B = tileᵀ */
            rc = cvx_matmul(kc, p, M, nb, K, a, b, bias ? bias + n0 : NULL, 0.0f, y + n0, N);
        } else {
            cvx_sgemm_fixed(0, 1, M, nb, K, x, K, (const float *)tile, K, bias ? bias + n0 : NULL, 0.0f, y + n0, N);
        }
    }
    free(owned);
    return rc;
}

int cvx_linear_quant(cvx_kernels *kc, cvx_precision p, cvx_qdot qdot, const float *x, int M, int K,
                     const cvx_tensor *W, const float *bias, float *y) {
    if (check_weight(W, K)) return -1;
    if (M <= 0 || W->shape[0] <= 0) return 0;
    if (qdot != CVX_QDOT_INT8) return linear_dequant(kc, p, x, M, K, W, bias, y);
    cvx_cpu_features cpu;
    if (kc) cpu = *cvx_kernels_cpu(kc);
    else cvx_cpu_detect(&cpu);
    const cvx_q8_kernel force = kc ? (cvx_q8_kernel)cvx_kernels_q8_kernel(kc) : CVX_Q8K_AUTO;
    const size_t bytes = cvx_q8_scratch_bytes(W->dtype, M, K, omp_get_max_threads());
    void *owned = kc ? NULL : cvx_alloc_aligned_at(bytes, __FILE__, __LINE__);
    int rc = cvx_q8_run(&cpu, force, x, M, K, W, bias, y, kc ? cvx_kernels_scratch(kc, 1, bytes) : owned);
    free(owned);
    return rc;
}

int cvx_linear_quant_ref(cvx_qdot qdot, const float *x, int M, int K, const cvx_tensor *W, const float *bias,
                         float *y) {
    if (check_weight(W, K)) return -1;
    const int N = (int)W->shape[0], G = cvx_q8_group(W->dtype);
    const cvx_quant_traits *tr = cvx_quant_of(W->dtype);
    float *w = cvx_alloc_f32((size_t)K), *xs = cvx_alloc_f32((size_t)M * K);
    if (qdot == CVX_QDOT_INT8) {   /* the activations as the int8 path sees them: d[g]·q[k] */
        int8_t *q = cvx_malloc((size_t)K);
        float *d = cvx_alloc_f32((size_t)K / G), *ds = cvx_alloc_f32((size_t)K / G);
        for (int m = 0; m < M; m++) {
            cvx_q8_quantize_row(W->dtype, x + (size_t)m * K, K, q, d, ds);
            for (int k = 0; k < K; k++) xs[(size_t)m * K + k] = d[k / G] * (float)q[k];
        }
        free(q), free(d), free(ds);
    } else {
        memcpy(xs, x, sizeof(float) * (size_t)M * K);
    }
    for (int n = 0; n < N; n++) {
        tr->to_f32_ref((const unsigned char *)W->data + (size_t)n * row_bytes(W, K), w, K);
        for (int m = 0; m < M; m++) {
            double acc = bias ? bias[n] : 0.0;
            for (int k = 0; k < K; k++) acc += (double)xs[(size_t)m * K + k] * w[k];
            y[(size_t)m * N + n] = (float)acc;
        }
    }
    free(w), free(xs);
    return 0;
}
