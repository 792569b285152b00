/* Matrix products and the thread setting every stage shares.
 *
 * One thread pool: OpenMP. OpenBLAS is linked in its OpenMP build when available, so BLAS
 * calls and our own `#pragma omp` loops use the same threads and never oversubscribe. */
#ifndef CVX_GEMM_H
#define CVX_GEMM_H

#include "safetensors.h"

/* n <= 0: all cores. Sets OpenMP and OpenBLAS thread counts. */
void cvx_set_threads(int n);
int cvx_threads(void);

/* Row-major C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C. trans: 0 = as stored, 1 = transposed. */
void cvx_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);
/* Reference triple loop (double accumulation) for tests of the fast path. */
void cvx_sgemm_ref(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);

/* PyTorch nn.Linear: y[M,N] = x[M,K] · W[N,K]ᵀ + b[N].
 * W (and b, which may be NULL) in any float storage dtype; non-f32 weights are widened
 * into a reused scratch buffer just before the product (never the whole model at once). */
void cvx_linear(const float *x, int M, int K, const cvx_tensor *W, const cvx_tensor *b, float *y);

/* The shared widening scratch used by cvx_linear (grows, never shrinks; freed at exit). */
const float *cvx_weight_f32(const cvx_tensor *t);   /* zero-copy for aligned F32 */
void cvx_gemm_release_scratch(void);

/* FLOP counter (multiply-add = 2) for benchmarks; counts every cvx_sgemm/cvx_linear. */
double cvx_flops_linear(void);
void cvx_flops_reset(void);
void cvx_flops_add(double f);

#endif
