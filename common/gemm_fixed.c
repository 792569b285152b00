/* cvx_sgemm_fixed: an f32 GEMM whose every element is one FMA chain over k = 0 .. K−1 from zero,
 * then × alpha, + bias, + beta·C — the same bits whatever the thread count, the tiling, or the
 * number of rows in the call (rows split across MPI ranks, a batch of one or two).
 *
 * Why: a threaded BLAS splits the K sum across threads when M·N is small for the thread count,
 * and even single-threaded its kernels pick their k order from the block shape (measured with
 * OpenBLAS 0.3.21 and oneDNN 2.6's jit sgemm on AVX2: 226×640×4096 differs between 1 and 3
 * threads, and between a 256-row and a 32-row call of the same rows). The CPUs whose oneDNN
 * matmul is brgemm (AVX-512) keep it; this is the f32 GEMM elsewhere (common/gemm_fast.c).
 *
 * Jobs = (block of MB rows, block of NC columns), any thread, any order. Per job and K block of
 * KC: the B panel packed [NC/NR][KC][NR] (zero beyond N), then 6×16 register tiles over the
 * rows (A read in place: packing it measured slower), accumulating in a job-local [MB, NC] buffer (spilling the chain to memory and back is
 * exact). The scalar reference (cvx_sgemm_fixed_ref) makes the same chain with fmaf: equal bits. */
#include "gemm.h"
#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MR = 6, NR = 16, NC = 64, KC = 256, MB = 384 };

/* element (i, k) of op(A) and (k, j) of op(B) */
#define A_AT(i, k) (ta ? A[(size_t)(k) * lda + (i)] : A[(size_t)(i) * lda + (k)])
#define B_AT(k, j) (tb ? B[(size_t)(j) * ldb + (k)] : B[(size_t)(k) * ldb + (j)])

static inline float finish(float acc, float alpha, const float *bias, int j, float beta, const float *c) {
    float v = alpha == 1.0f ? acc : alpha * acc;
    if (bias) v += bias[j];
    if (beta != 0.0f) v += beta * *c;
    return v;
}

void cvx_sgemm_fixed_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                         int ldb, const float *bias, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc = fmaf(A_AT(i, k), B_AT(k, j), acc);
            float *c = C + (size_t)i * ldc + j;
            *c = finish(acc, alpha, bias, j, beta, c);
        }
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* acc[r, 0..15] (= 0 when first) += Σ_k a[r·rs + k·cs] · bp[k, 0..15] for R ≤ 6 rows, k in order. */
ALWAYS_INLINE void tile(int R, const float *a, size_t rs, size_t cs, const float *bp, int kc, float *acc, int first) {
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        c0[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + r * NC);
        c1[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + r * NC + 8);
    }
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(bp + (size_t)k * NR), b1 = _mm256_loadu_ps(bp + (size_t)k * NR + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m256 av = _mm256_broadcast_ss(a + r * rs + (size_t)k * cs);
            c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(acc + r * NC, c0[r]);
        _mm256_storeu_ps(acc + r * NC + 8, c1[r]);
    }
}

static void tile_r(int R, const float *a, size_t rs, size_t cs, const float *bp, int kc, float *acc, int first) {
    switch (R) {
    case 6: tile(6, a, rs, cs, bp, kc, acc, first); break;
    case 5: tile(5, a, rs, cs, bp, kc, acc, first); break;
    case 4: tile(4, a, rs, cs, bp, kc, acc, first); break;
    case 3: tile(3, a, rs, cs, bp, kc, acc, first); break;
    case 2: tile(2, a, rs, cs, bp, kc, acc, first); break;
    default: tile(1, a, rs, cs, bp, kc, acc, first); break;
    }
}

/* One job: rows i0 .. i0+m, columns j0 .. j0+n of C. bp: [NC/NR][KC][NR], acc: [MB][NC]. */
static void job(int ta, int tb, int m, int n, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                const float *bias, float beta, float *C, int ldc, int i0, int j0, float *bp, float *acc) {
    const size_t rs = ta ? 1 : (size_t)lda, cs = ta ? (size_t)lda : 1;
    const int nt = (n + NR - 1) / NR;
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int kc = K - k0 < KC ? K - k0 : KC;
        for (int t = 0; t < nt; t++)   /* pack op(B)[k0.., j0 + t·NR ..], zero past n */
            for (int k = 0; k < kc; k++) {
                float *d = bp + ((size_t)t * KC + k) * NR;
                for (int l = 0; l < NR; l++) {
                    int jl = t * NR + l;
                    d[l] = jl < n ? B_AT(k0 + k, j0 + jl) : 0.0f;
                }
            }
        for (int i = 0; i < m; i += MR) {
            const int R = m - i < MR ? m - i : MR;
            const float *a = A + (i0 + i) * rs + (size_t)k0 * cs;
            for (int t = 0; t < nt; t++)
                tile_r(R, a, rs, cs, bp + (size_t)t * KC * NR, kc, acc + (size_t)i * NC + t * NR, k0 == 0);
        }
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float *c = C + (size_t)(i0 + i) * ldc + j0 + j;
            *c = finish(K > 0 ? acc[(size_t)i * NC + j] : 0.0f, alpha, bias ? bias + j0 : NULL, j, beta, c);
        }
}

void cvx_sgemm_fixed(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, const float *bias, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    const int tm = (M + MB - 1) / MB, tn = (N + NC - 1) / NC;
#pragma omp parallel if ((double)M * N * K > 1e6)
    {
        float *bp = cvx_alloc_f32((size_t)NC * KC), *acc = cvx_alloc_f32((size_t)MB * NC);
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < tm * tn; t++) {
            const int i0 = t / tn * MB, j0 = t % tn * NC;
            job(ta, tb, M - i0 < MB ? M - i0 : MB, N - j0 < NC ? N - j0 : NC, K, alpha, A, lda, B, ldb, bias, beta, C,
                ldc, i0, j0, bp, acc);
        }
        free(bp);
        free(acc);
    }
}

#else   /* no AVX2/FMA at build time: the reference, rows in parallel */

void cvx_sgemm_fixed(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, const float *bias, float beta, float *C, int ldc) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < M; i++)
        cvx_sgemm_fixed_ref(ta, tb, 1, N, K, alpha, ta ? A + i : A + (size_t)i * lda, lda, B, ldb, bias, beta,
                            C + (size_t)i * ldc, ldc);
}

#endif
