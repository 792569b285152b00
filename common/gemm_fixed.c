/* cvx_sgemm_fixed: an f32 GEMM whose every element is one FMA chain, started at beta·C + bias and
 * running over k = 0 .. K−1 in order — the same bits whatever the thread count, the partition of
 * the work, or the number of rows in the call (rows split across MPI ranks, a batch of one or two).
 *
 * Why: a threaded BLAS splits the K sum across threads when M·N is small for the thread count,
 * and even single-threaded its kernels pick their k order from the block shape (measured with
 * OpenBLAS 0.3.21 and oneDNN 2.6's jit sgemm on AVX2: 226×640×4096 differs between 1 and 3
 * threads, and between a 256-row and a 32-row call of the same rows). The CPUs whose oneDNN
 * matmul is brgemm (AVX-512) keep it; this is the f32 GEMM elsewhere (common/gemm_fast.c).
 *
 * The loops are the classic ones (Goto/BLIS): columns in NC blocks; K in KC blocks, the B panel
 * packed [NC/NR][KC][NR] once per block and shared by the threads; rows in MC blocks, each
 * thread packing its A block [MC/MR][KC][MR]; a 6×16 register tile per (MR rows, NR columns)
 * reading C, running its chains over the KC block and writing C (a chain spilled to memory and
 * reloaded is exact). The partition among threads changes nothing but the speed. The scalar
 * reference (cvx_sgemm_fixed_ref) makes the same chains with fmaf: equal bits. */
#include "gemm.h"
#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* KC: a 384×16 B micro-panel (24 KB) stays in L1; MC: a 96×384 A block (144 KB) in L2. Measured on
 * a 2-core AVX2 EPYC at 2 threads: 0.83–1.0 of oneDNN's jit sgemm on the 2b / T5 linears (KC 256:
 * 0.80–0.95, KC 512: 0.88–1.0 with a micro-panel filling L1). */
enum { MR = 6, NR = 16, KC = 384, MC = 96, NC = 3072 };

/* element (i, k) of op(A) and (k, j) of op(B) */
#define A_AT(i, k) (ta ? A[(size_t)(k) * lda + (i)] : A[(size_t)(i) * lda + (k)])
#define B_AT(k, j) (tb ? B[(size_t)(j) * ldb + (k)] : B[(size_t)(k) * ldb + (j)])

/* The chain's start: beta·C + bias (0 when beta = 0 and no bias). */
static inline float chain_start(float c, float beta, const float *bias, int j) {
    float v = beta != 0.0f ? beta * c : 0.0f;
    return bias ? v + bias[j] : v;
}

void cvx_sgemm_fixed_ref(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                         const float *bias, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float *c = C + (size_t)i * ldc + j, acc = chain_start(*c, beta, bias, j);
            for (int k = 0; k < K; k++) acc = fmaf(A_AT(i, k), B_AT(k, j), acc);
            *c = acc;
        }
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* c[r, 0..15] += Σ_k ap[k, r] · bp[k, 0..15] for R ≤ 6 rows, k in order. */
ALWAYS_INLINE void tile(int R, const float *ap, const float *bp, int kc, float *c, size_t ldc) {
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        c0[r] = _mm256_loadu_ps(c + r * ldc);
        c1[r] = _mm256_loadu_ps(c + r * ldc + 8);
    }
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(bp + (size_t)k * NR), b1 = _mm256_load_ps(bp + (size_t)k * NR + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m256 av = _mm256_broadcast_ss(ap + (size_t)k * MR + r);
            c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(c + r * ldc, c0[r]);
        _mm256_storeu_ps(c + r * ldc + 8, c1[r]);
    }
}

static void tile_r(int R, const float *ap, const float *bp, int kc, float *c, size_t ldc) {
    switch (R) {
    case 6: tile(6, ap, bp, kc, c, ldc); break;
    case 5: tile(5, ap, bp, kc, c, ldc); break;
    case 4: tile(4, ap, bp, kc, c, ldc); break;
    case 3: tile(3, ap, bp, kc, c, ldc); break;
    case 2: tile(2, ap, bp, kc, c, ldc); break;
    default: tile(1, ap, bp, kc, c, ldc); break;
    }
}

/* One (row block, column range) of one K block: A packed here, B already packed. Tiles reaching
 * past column N run on a 6×16 copy. first: the chains start here (C := beta·C + bias). */
static void block(int ta, int m, int i0, int nt0, int nt1, int n, int j0, int k0, int kc, const float *A, int lda,
                  const float *bpack, const float *bias, float beta, float *C, int ldc, int first, float *apack) {
    for (int i = 0; i < m; i += MR)   /* pack op(A)[i0 + i .. + MR, k0 .. + kc] as [kc][MR] */
        for (int r = 0; r < MR; r++) {
            float *d = apack + (size_t)i * KC + r;
            if (i + r < m)
                for (int k = 0; k < kc; k++) d[(size_t)k * MR] = A_AT(i0 + i + r, k0 + k);
            else
                for (int k = 0; k < kc; k++) d[(size_t)k * MR] = 0.0f;
        }
    float edge[MR * NR];
    for (int t = nt0; t < nt1; t++) {
        const int jj = t * NR, w = n - jj < NR ? n - jj : NR;
        for (int i = 0; i < m; i += MR) {
            const int R = m - i < MR ? m - i : MR;
            float *c = C + (size_t)(i0 + i) * ldc + j0 + jj;
            if (first)
                for (int r = 0; r < R; r++)
                    for (int q = 0; q < w; q++)
                        c[(size_t)r * ldc + q] = chain_start(c[(size_t)r * ldc + q], beta, bias, j0 + jj + q);
            const float *ap = apack + (size_t)i * KC, *bp = bpack + (size_t)t * KC * NR;
            /* the next tile's C rows (below, or the top of the next columns): its loads would
             * otherwise wait on memory (a prefetch never faults) */
            const int ni = i + MR < m ? i + MR : 0, nt_ = i + MR < m ? t : t + 1;
            if (nt_ < nt1) {
                const float *cn = C + (size_t)(i0 + ni) * ldc + j0 + nt_ * NR;
                for (int r = 0; r < MR && ni + r < m; r++) {
                    _mm_prefetch((const char *)(cn + (size_t)r * ldc), _MM_HINT_T0);
                    _mm_prefetch((const char *)(cn + (size_t)r * ldc + 15), _MM_HINT_T0);
                }
            }
            if (w == NR) {
                tile_r(R, ap, bp, kc, c, (size_t)ldc);
            } else {
                for (int r = 0; r < R; r++) memcpy(edge + r * NR, c + (size_t)r * ldc, sizeof(float) * w);
                tile_r(R, ap, bp, kc, edge, NR);
                for (int r = 0; r < R; r++) memcpy(c + (size_t)r * ldc, edge + r * NR, sizeof(float) * w);
            }
        }
    }
}

void cvx_sgemm_fixed(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                     const float *bias, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        cvx_sgemm_fixed_ref(ta, tb, M, N, 0, A, lda, B, ldb, bias, beta, C, ldc);
        return;
    }
    float *bpack = cvx_alloc_f32((size_t)KC * (NC < N ? NC : (N + NR - 1) / NR * NR));
    const int mb = (M + MC - 1) / MC;
#pragma omp parallel if ((double)M * N * K > 1e6)
    {
        float *apack = cvx_alloc_f32((size_t)MC * KC);
#ifdef _OPENMP
        const int nth = omp_get_num_threads();
#else
        const int nth = 1;
#endif
        for (int j0 = 0; j0 < N; j0 += NC) {
            const int n = N - j0 < NC ? N - j0 : NC, nt = (n + NR - 1) / NR;
            /* jobs: row blocks × column groups, enough of them for the threads (the split is free:
             * it never changes a chain) */
            const int groups = mb >= 2 * nth ? 1 : (2 * nth + mb - 1) / mb < nt ? (2 * nth + mb - 1) / mb : nt;
            for (int k0 = 0; k0 < K; k0 += KC) {
                const int kc = K - k0 < KC ? K - k0 : KC;
#pragma omp for schedule(static)
                for (int t = 0; t < nt; t++)   /* pack op(B)[k0 .. + kc, j0 + t·NR .. + NR], zero past N */
                    for (int l = 0; l < NR; l++) {
                        float *d = bpack + (size_t)t * KC * NR + l;
                        const int j = t * NR + l;
                        if (j < n)
                            for (int k = 0; k < kc; k++) d[(size_t)k * NR] = B_AT(k0 + k, j0 + j);
                        else
                            for (int k = 0; k < kc; k++) d[(size_t)k * NR] = 0.0f;
                    }
#pragma omp for schedule(dynamic, 1)
                for (int job = 0; job < mb * groups; job++) {
                    const int ib = job / groups, g = job % groups, i0 = ib * MC;
                    block(ta, M - i0 < MC ? M - i0 : MC, i0, nt * g / groups, nt * (g + 1) / groups, n, j0, k0, kc,
                          A, lda, bpack, bias, beta, C, ldc, k0 == 0, apack);
                }
            }
        }
        free(apack);
    }
    free(bpack);
}

#else   /* no AVX2/FMA at build time: the reference, rows in parallel */

void cvx_sgemm_fixed(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                     const float *bias, float beta, float *C, int ldc) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < M; i++)
        cvx_sgemm_fixed_ref(ta, tb, 1, N, K, ta ? A + i : A + (size_t)i * lda, lda, B, ldb, bias, beta,
                            C + (size_t)i * ldc, ldc);
}

#endif
