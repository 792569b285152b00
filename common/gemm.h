/* Matrix products and the thread setting every stage shares.
 *
 * One thread pool: OpenMP. OpenBLAS is linked in its OpenMP build when available, so BLAS
 * calls and our own `#pragma omp` loops use the same threads and never oversubscribe. */
#ifndef CVX_GEMM_H
#define CVX_GEMM_H

#include "context.h"
#include "safetensors.h"

/* n <= 0: all cores. Sets the OpenMP and OpenBLAS thread counts, which those libraries keep
 * process-wide (cvx_ctx_new calls this); cvx_threads() reads OpenMP's back. */
void cvx_set_threads(int n);
int cvx_threads(void);

/* Row-major C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C. trans: 0 = as stored, 1 = transposed.
 * A pure kernel (OpenBLAS): no context, no counting; ops that call it count into their ctx. */
void cvx_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);
/* The op form of cvx_sgemm: counts 2·M·N·K into ctx->flops and dispatches on the context
 * (f32 only yet). Use this from model and op code. */
void cvx_gemm(cvx_ctx *ctx, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);
/* Reference triple loop (double accumulation) for tests of the fast path. */
void cvx_sgemm_ref(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);

/* PyTorch nn.Linear: y[M,N] = x[M,K] · W[N,K]ᵀ + b[N].
 * W (and b, which may be NULL) in any float storage dtype; non-f32 weights are widened
 * into ctx's weight scratch just before the product (never the whole model at once).
 * Adds 2·M·N·K to ctx->flops. The place precision / CPU-feature dispatch goes. */
void cvx_linear(cvx_ctx *ctx, const float *x, int M, int K, const cvx_tensor *W, const cvx_tensor *b, float *y);

/* W as f32: zero-copy for aligned F32, else widened into ctx->weights (valid until the next
 * call on this context). */
const float *cvx_weight_f32(cvx_ctx *ctx, const cvx_tensor *t);

/* Count f FLOPs on ctx (thread-safe against the ops' own OpenMP loops). */
void cvx_flops_add(cvx_ctx *ctx, double f);

#endif
