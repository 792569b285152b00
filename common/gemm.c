/* The GEMM ops on a compute context (oneDNN through gemm_fast.h, dispatched on ctx->precision),
 * the pure OpenBLAS sgemm, nn.Linear over weights of any float dtype. */
#include "gemm.h"
#include "error.h"
#include "gemm_fast.h"
#include "lora.h"
#include "ops.h"

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

void cvx_flops_add(cvx_ctx *ctx, double f) {
#pragma omp atomic
    ctx->flops += f;
}

void cvx_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
}

void cvx_gemm(cvx_ctx *ctx, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    cvx_flops_add(ctx, 2.0 * M * N * K);
    if (alpha == 1.0f && ctx->kernels) {   /* oneDNN f32 (~1.8x OpenBLAS) or bf16 */
        CVX_CHECK(cvx_gemm_p(ctx->kernels, ctx->precision, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C,
                             ldc) == 0);
        return;
    }
    /* no oneDNN: the fixed chains (f32); alpha != 1 (no caller in the models): OpenBLAS, f32 only. */
    CVX_CHECK(ctx->precision == CVX_PRECISION_F32 || !ctx->kernels);
    if (alpha == 1.0f) cvx_sgemm_fixed(trans_a, trans_b, M, N, K, A, lda, B, ldb, NULL, beta, C, ldc);
    else cvx_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void cvx_sgemm_ref(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                float a = trans_a ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                float b = trans_b ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                acc += (double)a * b;
            }
            C[(size_t)i * ldc + j] = (float)(alpha * acc + (beta != 0 ? beta * C[(size_t)i * ldc + j] : 0));
        }
}

/* Widening scratch shared by all linear layers of a context: one matrix at a time is ever f32.
 * (A GGUF block type is widened here only on the path without oneDNN, cvx_linear's last resort.) */
const float *cvx_weight_f32(cvx_ctx *ctx, const cvx_tensor *t) {
    if (t->dtype == CVX_F32 && ((uintptr_t)t->data & 3) == 0) return t->data;
    CVX_CHECK(cvx_dtype_to_f32_ok(t->dtype));   /* float, F8_E4M3, GGUF block types */
    size_t n = (size_t)t->numel;
    float *dst = cvx_scratch_get(&ctx->weights, n);
    /* Widen in parallel chunks: for bf16 this is memory-bound, two threads nearly double it. */
    const unsigned char *src = t->data;
    /* chunks of whole blocks (65536 is a multiple of every block size) */
    size_t bb = cvx_dtype_block_bytes(t->dtype), blk = (size_t)cvx_dtype_block(t->dtype), chunk = 1 << 16;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < (n + chunk - 1) / chunk; c++) {
        size_t lo = c * chunk, len = n - lo < chunk ? n - lo : chunk;
        cvx_to_f32_n(t->dtype, src + lo / blk * bb, dst + lo, len);
    }
    return dst;
}

/* The base product y = x Wᵀ + b. */
static void linear_base(cvx_ctx *ctx, const float *x, int M, int K, const cvx_tensor *W, const cvx_tensor *b,
                        float *y) {
    CVX_CHECK(W->ndim == 2 && W->shape[1] == K);
    int N = (int)W->shape[0];
    if (ctx->kernels) {
        /* W read in place when the kernel can (bf16 W in bf16 mode, f32 W in f32 mode), else
         * converted one matrix at a time in the kernels' scratch. */
        cvx_flops_add(ctx, 2.0 * M * N * K);
        CVX_CHECK(cvx_linear_p(ctx->kernels, ctx->precision, x, M, K, W, b, y) == 0);
        return;
    }
    if (b) {
        CVX_CHECK(b->numel == N);
        /* Bias first, then accumulate the product on top (beta = 1). */
        if (b->dtype == CVX_F32 && ((uintptr_t)b->data & 3) == 0) {
            const float *bv = b->data;
#pragma omp parallel for schedule(static)
            for (int i = 0; i < M; i++) memcpy(y + (size_t)i * N, bv, sizeof(float) * (size_t)N);
        } else {
            cvx_to_f32_n(b->dtype, b->data, y, (size_t)N);
            for (int i = 1; i < M; i++) memcpy(y + (size_t)i * N, y, sizeof(float) * (size_t)N);
        }
    }
    const float *w = cvx_weight_f32(ctx, W);
    cvx_gemm(ctx, 0, 1, M, N, K, 1.0f, x, K, w, K, b ? 1.0f : 0.0f, y, N);
}

void cvx_linear(cvx_ctx *ctx, const float *x, int M, int K, const cvx_tensor *W, const cvx_tensor *b, float *y) {
    /* LoRA (common/lora.h), before: a fused layer runs its merged copies instead of W, b */
    const cvx_lora_layer *lora = ctx->lora ? cvx_lora_find(ctx->lora, W) : NULL;
    if (lora) cvx_lora_fused(lora, &W, &b);
    linear_base(ctx, x, M, K, W, b, y);
    /* LoRA, after: an unfused layer adds its low-rank terms y += s·B(A·x) (+ s'·diff_b) */
    if (lora) cvx_lora_apply(ctx, lora, x, M, K, y);
}

void cvx_attention_ctx(cvx_ctx *ctx, const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                       int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    if (ctx->precision == CVX_PRECISION_BF16 && ctx->kernels)
        cvx_attention_bf16(ctx->kernels, q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
    else
        cvx_attention_isa(ctx->kernels && cvx_kernels_avx512(ctx->kernels), q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv,
                          heads, hd, scale, bias);
}

void cvx_attention_transformer(cvx_ctx *ctx, const float *q, int ld_q, const float *k, const float *v, int ld_kv,
                               float *out, int ld_o, int Sq, int Skv, int heads, int hd, float scale,
                               const float *bias) {
    switch (cvx_ctx_attention(ctx)) {
    case CVX_ATTENTION_INT8:
        cvx_attention_int8(ctx->kernels, q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
        break;
    case CVX_ATTENTION_INT8PV:
        cvx_attention_int8_pv8(ctx->kernels, q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
        break;
    case CVX_ATTENTION_BF16:
        cvx_attention_bf16(ctx->kernels, q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
        break;
    default:
        cvx_attention_isa(ctx->kernels && cvx_kernels_avx512(ctx->kernels), q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv,
                          heads, hd, scale, bias);
        break;
    }
}
