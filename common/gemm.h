/* Matrix products and the thread setting every stage shares.
 *
 * One thread pool: OpenMP. OpenBLAS is linked in its OpenMP build when available, so BLAS
 * calls and our own `#pragma omp` loops use the same threads and never oversubscribe. */
#ifndef CVX_GEMM_H
#define CVX_GEMM_H

#include "context.h"
#include "safetensors.h"


/* Row-major C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C. trans: 0 = as stored, 1 = transposed.
 * A pure kernel (OpenBLAS): no context, no counting; ops that call it count into their ctx. */
void cvx_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);
/* The op form of cvx_sgemm: counts 2·M·N·K into ctx->flops and dispatches on the context:
 * oneDNN matmul at ctx->precision (f32, or bf16 operands with f32 accumulation) when alpha = 1;
 * alpha != 1 runs cvx_sgemm (f32 only). Use this from model and op code. */
void cvx_gemm(cvx_ctx *ctx, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);
/* C = beta·C + bias[N] (NULL = none) + op(A)·op(B), every element one FMA chain started at
 * beta·C + bias and run over k = 0..K−1 (common/gemm_fixed.c): the same bits at any thread count,
 * partition, row count or CPU. The f32 GEMM of f32 mode on every CPU (gemm_fast.h).
 * cvx_sgemm_fixed runs the AVX2 tiles; _isa(avx512 = 1) the AVX-512 ones (only where the CPU has
 * avx512f: cvx_kernels_avx512), same bits. _ref: the scalar chain (fmaf), equal bits, for tests. */
void cvx_sgemm_fixed(int trans_a, int trans_b, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                     const float *bias, float beta, float *C, int ldc);
void cvx_sgemm_fixed_isa(int avx512, int trans_a, int trans_b, int M, int N, int K, const float *A, int lda,
                         const float *B, int ldb, const float *bias, float beta, float *C, int ldc);
void cvx_sgemm_fixed_ref(int trans_a, int trans_b, int M, int N, int K, const float *A, int lda, const float *B,
                         int ldb, const float *bias, float beta, float *C, int ldc);
/* A packed once, many products: op(A)[M, K] (a weight) stored in the layout the tiles of
 * cvx_sgemm_fixed_isa(avx512, ..) read for M rows — its K blocks, each the micro-panels of mr rows
 * [⌈M/mr⌉][kc][mr] with zero rows past M; the layout is a function of (avx512, M, K) only — then
 * cvx_sgemm_fixed_packed skips the per-block packing of A: the same chains, the same bits as
 * cvx_sgemm_fixed_isa(avx512, ta, tb, M, N, K, A, lda, B, ...). Ap: cvx_sgemm_fixed_packed_floats
 * floats (cvx_alloc_f32). _pack_a packs the block op(A)[i0 .. i0+m−1, k0 .. k0+kn−1] (A holds just
 * that block: op(A)[i0 + r, k0 + c] = A's (r, c)) into its place in Ap — i0 a multiple of
 * cvx_sgemm_fixed_packed_mr, m too unless the rows end at M; any columns — so a weight can be packed
 * in pieces as it is made (whole: i0 = k0 = 0, m = M, kn = K).
 * _ref: the scalar chains (fmaf) reading the packed layout, for tests. */
size_t cvx_sgemm_fixed_packed_floats(int avx512, int M, int K);
int cvx_sgemm_fixed_packed_mr(int avx512, int M);
void cvx_sgemm_fixed_pack_a(int avx512, int ta, int M, int K, int i0, int m, int k0, int kn, const float *A, int lda,
                            float *Ap);
void cvx_sgemm_fixed_packed(int avx512, int tb, int M, int N, int K, const float *Ap, const float *B, int ldb,
                            const float *bias, float beta, float *C, int ldc);
void cvx_sgemm_fixed_packed_ref(int avx512, int tb, int M, int N, int K, const float *Ap, const float *B, int ldb,
                                const float *bias, float beta, float *C, int ldc);
/* Reference triple loop (double accumulation) for tests of the fast path. */
void cvx_sgemm_ref(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);

/* PyTorch nn.Linear: y[M,N] = x[M,K] · W[N,K]ᵀ + b[N].
 * W (and b, which may be NULL) in any float storage dtype; non-f32 weights are widened
 * into ctx's weight scratch just before the product (never the whole model at once).
 * Adds 2·M·N·K to ctx->flops. Runs cvx_linear_p (gemm_fast.h) at ctx->precision: a bf16 W is
 * read in place in bf16 mode, widened one matrix at a time in f32 mode.
 * LoRA: when ctx->lora holds adapters of W (common/lora.h), a fused layer runs its merged copies
 * of W and b, an unfused one adds y += s·B(A·x) (+ s'·diff_b) per adapter after the base product. */
void cvx_linear(cvx_ctx *ctx, const float *x, int M, int K, const cvx_tensor *W, const cvx_tensor *b, float *y);

/* W as f32: zero-copy for aligned F32, else widened into ctx->weights (valid until the next
 * call on this context). */
const float *cvx_weight_f32(cvx_ctx *ctx, const cvx_tensor *t);

/* The op form of cvx_attention (ops.h; same arguments): f32 → cvx_attention, bf16 →
 * cvx_attention_bf16 (q, k, v and the probabilities rounded to bf16, f32 softmax/accumulation). */
void cvx_attention_ctx(cvx_ctx *ctx, const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                       int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias);
/* The transformers' attention (stage 2, both families): cvx_attention_ctx's kernels chosen by
 * cvx_ctx_attention (the precision's by default; --attention f32|bf16|int8), int8 =
 * cvx_attention_int8. The other models' attention (T5, CLIP, the VAE's) stays cvx_attention_ctx. */
void cvx_attention_transformer(cvx_ctx *ctx, const float *q, int ld_q, const float *k, const float *v, int ld_kv,
                               float *out, int ld_o, int Sq, int Skv, int heads, int hd, float scale,
                               const float *bias);

/* Count f FLOPs on ctx (thread-safe against the ops' own OpenMP loops). */
void cvx_flops_add(cvx_ctx *ctx, double f);

#endif
