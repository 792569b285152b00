/* cvx_sgemm_fixed: an f32 GEMM whose every element is one FMA chain, started at beta·C + bias and
 * running over k = 0 .. K−1 in order — the same bits whatever the thread count, the partition of
 * the work, or the number of rows in the call (rows split across MPI ranks, a batch of one or two).
 *
 * Why: a threaded BLAS splits the K sum across threads when M·N is small for the thread count,
 * and even single-threaded its kernels pick their k order from the block shape (measured with
 * OpenBLAS 0.3.21 and oneDNN 2.6's jit sgemm on AVX2: 226×640×4096 differs between 1 and 3
 * threads, and between a 256-row and a 32-row call of the same rows). The CPUs whose oneDNN
 * f32 matmul is always this one (common/gemm_fast.c): oneDNN's brgemm on AVX-512 CPUs ran its own k
 * order, so an AVX-512 CPU and an AVX2 one gave different bits.
 *
 * Three tile sets, one set of chains: AVX2 6×16 tiles (ymm) and, on CPUs with AVX-512, 6×64 tiles
 * (zmm, cvx_sgemm_fixed_isa; 12×32 in calls under 1,024 rows). A chain is the same sequence of fmaf whatever the vector width holding
 * it, so both give the same bits (tests/common_f32_portable.c compares them); only the blocking
 * differs.
 *
 * The loops are the classic ones (Goto/BLIS) inside each job: columns in NC blocks; K in KC
 * blocks, the B panel packed [n/NR][KC][NR]; rows in MC blocks, the A block packed [MC/MR][KC][MR]
 * when A is transposed (or pre-packed by the caller), else its rows read in place (the broadcasts
 * take A[i, k] from the MR rows as stored: no copy of the activations); a register tile per (MR
 * rows, NR columns) starting its chains (first K block: beta·C + bias in the tile, a vector at a
 * time) or reading C, running them over the KC block and writing C (a chain spilled to memory and
 * reloaded is exact). The threads take jobs — a grid of row groups × column groups — dynamically,
 * each packing its own panels: no barrier but the last, so a thread slowed by other work on the
 * machine holds nobody up. The partition changes nothing but the speed. The scalar reference
 * (cvx_sgemm_fixed_ref) makes the same chains with fmaf: equal bits. */
#include "gemm.h"
#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* AVX2: KC: a 384×16 B micro-panel (24 KB) stays in L1; MC: a 96×384 A block (144 KB) in L2. Measured
 * on a 2-core AVX2 EPYC at 2 threads: 0.83–1.0 of oneDNN's jit sgemm on the 2b / T5 linears (KC 256:
 * 0.80–0.95, KC 512: 0.88–1.0 with a micro-panel filling L1).
 * AVX-512, two blockings (measured on a 2-core Cascade Lake Xeon per CPU-second beside oneDNN's
 * brgemm, docs/performance.md "f32 on any x86-64 CPU"):
 * - W_*: 6×64 tiles (24 zmm accumulators, 6 broadcasts and 4 loads per 24 FMAs), B micro-panel
 *   outer: the best at the transformer's 2,432+ rows (12×32 there: 0.95 of it);
 * - S_*, calls of fewer than S_ROWS rows (T5's 226): 12×32 tiles (12 broadcasts and 2 loads per 24
 *   FMAs), the A micro-panel (12×384, 18 KB) in L1 in the outer loop and the B panel (384×384,
 *   576 KB) streaming from L2 under it, the BLIS order: 1.1 of the 6×64 tiles at 226×10240×4096.
 * The B micro-panel loads prefetch PF rows ahead (from L2): without it a 6×64 tile alone reaches 0.70
 * of the FMA peak, with it 0.95–1.0 (best of 15 rounds on the shared machine).
 * Measured there (perf, cpu-clock) before A was read in place and the chain start moved into the
 * tiles, at 2432×1920×1920: the tiles 65 % of the time, pack_b 15 %, a scalar pass starting the
 * chains over C 9.6 %, pack_a 7.2 %; after: the tiles 83 %, pack_b 7 %, macro 6 % (mostly waiting
 * on the prefetches of the next tile's C, which still pay: without them 0.91 of the speed). A
 * K block of 64–192 with the B micro-panel in L1 and the C block in L2 (rows outer of K) ran at
 * 0.82–0.90 of this blocking; KC 256–768 and MC 96–384 within the noise of it. */
enum { MR = 6, NR = 16, KC = 384, MC = 96, NC = 3072 };
enum { W_MR = 6, W_NV = 4, W_KC = 512, W_MC = 192, W_NC = 3072 };
enum { S_MR = 12, S_NV = 2, S_KC = 384, S_MC = 192, S_NC = 384, S_ROWS = 1024 };
enum { PF = 8, EDGE = 16 * 4 * 12 };   /* the largest tile (12×32 or 6×64 floats) */

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

/* The A layout of the tiles a call of M rows takes (avx512: the AVX-512 tile sets; a build without
 * AVX2 packs as the AVX2 tiles): mr-row micro-panels, K in blocks of kcb. */
static void a_blocking(int avx512, int M, int *mr, int *kcb) {
#if defined(__AVX2__) && defined(__FMA__)
    const int w = avx512 != 0, s = w && M < S_ROWS;
#else
    const int w = 0, s = 0;
    (void)avx512, (void)M;
#endif
    *mr = s ? S_MR : w ? W_MR : MR;
    *kcb = s ? S_KC : w ? W_KC : KC;
}

/* Floats before K block k0 of a packed A of M rows: k0 · (M rounded up to mr). */
static size_t a_block_at(int mr, int M, int k0) { return (size_t)k0 * (size_t)((M + mr - 1) / mr * mr); }

int cvx_sgemm_fixed_packed_mr(int avx512, int M) {
    int mr, kcb;
    a_blocking(avx512, M, &mr, &kcb);
    return mr;
}

size_t cvx_sgemm_fixed_packed_floats(int avx512, int M, int K) {
    int mr, kcb;
    a_blocking(avx512, M, &mr, &kcb);
    return a_block_at(mr, M, K > 0 ? K : 0);
}

/* Element (i, k) of a packed A: K block k0, its micro-panel i / mr, [kc][mr] inside it. */
static inline float packed_at(const float *Ap, int mr, int kcb, int M, int K, int i, int k) {
    const int k0 = k / kcb * kcb, kc = K - k0 < kcb ? K - k0 : kcb;
    return Ap[a_block_at(mr, M, k0) + (size_t)(i / mr) * mr * kc + (size_t)(k - k0) * mr + i % mr];
}

void cvx_sgemm_fixed_packed_ref(int avx512, int tb, int M, int N, int K, const float *Ap, const float *B, int ldb,
                                const float *bias, float beta, float *C, int ldc) {
    int mr, kcb;
    a_blocking(avx512, M, &mr, &kcb);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float *c = C + (size_t)i * ldc + j, acc = chain_start(*c, beta, bias, j);
            for (int k = 0; k < K; k++) acc = fmaf(packed_at(Ap, mr, kcb, M, K, i, k), B_AT(k, j), acc);
            *c = acc;
        }
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define AVX512 __attribute__((target("avx512f")))

static inline int imin(int a, int b) { return a < b ? a : b; }

/* inside a parallel region (a nested region would run on this thread anyway) */
static inline int in_parallel(void) {
#ifdef _OPENMP
    return omp_in_parallel();
#else
    return 0;
#endif
}

/* One call's operands: C[M, N] = beta·C + bias + op(A)[M, K] · op(B)[K, N], and the tile set. */
typedef struct {
    int ta, tb, M, N, K;
    const float *A, *B, *bias;
    int lda, ldb, ldc;
    float beta;
    float *C;
    int wide;              /* 1: the AVX-512 tiles */
    int rows_outer;        /* macro(): row tiles in the outer loop */
    int mr, nr, kcb, mcb, ncb;  /* tile rows and columns, K block, row block, column block */
    const float *ap;       /* A pre-packed (cvx_sgemm_fixed_pack_a) or NULL: packed per block */
    int ia;                /* A read in place (rows as stored: !ta, not pre-packed) */
} problem;

/* r[0..7] (8 rows of 8) := their transpose */
ALWAYS_INLINE void transpose8(__m256 r[8]) {
    __m256 t[8], s[8];
    for (int q = 0; q < 8; q += 2) {
        t[q] = _mm256_unpacklo_ps(r[q], r[q + 1]);
        t[q + 1] = _mm256_unpackhi_ps(r[q], r[q + 1]);
    }
    for (int q = 0; q < 8; q += 4) {
        s[q] = _mm256_shuffle_ps(t[q], t[q + 2], 0x44);
        s[q + 1] = _mm256_shuffle_ps(t[q], t[q + 2], 0xEE);
        s[q + 2] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0x44);
        s[q + 3] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0xEE);
    }
    for (int q = 0; q < 4; q++) {
        r[q] = _mm256_permute2f128_ps(s[q], s[q + 4], 0x20);
        r[q + 4] = _mm256_permute2f128_ps(s[q], s[q + 4], 0x31);
    }
}

/* op(B)[k0 .. + kc, j0 .. + n) as nr-column micro-panels [n/nr][kc][nr], zeros past n. A weight
 * [N, K] (tb) is transposed 8×8 at a time; rows of B are copied. */
static void pack_b(const problem *p, int k0, int kc, int j0, int n, float *bp) {
    const int ldb = p->ldb, nr = p->nr;
    for (int jt = 0; jt < n; jt += nr) {
        float *d = bp + (size_t)jt * kc;
        const int w = imin(nr, n - jt);
        if (p->tb && w == nr) {
            for (int h = 0; h < nr; h += 8) {
                const float *s = p->B + (size_t)(j0 + jt + h) * ldb + k0;
                int k = 0;
                for (; k + 8 <= kc; k += 8) {
                    __m256 r[8];
                    for (int q = 0; q < 8; q++) r[q] = _mm256_loadu_ps(s + (size_t)q * ldb + k);
                    transpose8(r);
                    for (int q = 0; q < 8; q++) _mm256_storeu_ps(d + (size_t)(k + q) * nr + h, r[q]);
                }
                for (; k < kc; k++)
                    for (int q = 0; q < 8; q++) d[(size_t)k * nr + h + q] = s[(size_t)q * ldb + k];
            }
        } else if (!p->tb && w == nr) {
            for (int k = 0; k < kc; k++) {
                const float *s = p->B + (size_t)(k0 + k) * ldb + j0 + jt;
                for (int h = 0; h < nr; h += 8) _mm256_storeu_ps(d + (size_t)k * nr + h, _mm256_loadu_ps(s + h));
            }
        } else {
            const float *B = p->B;
            const int tb = p->tb;
            for (int l = 0; l < nr; l++)
                for (int k = 0; k < kc; k++) d[(size_t)k * nr + l] = l < w ? B_AT(k0 + k, j0 + jt + l) : 0.0f;
        }
    }
}

/* op(A)[i0 .. + m, k0 .. + kc] as mr-row micro-panels [m/mr][kc][mr], zeros past m; rows in
 * groups of up to 8 (mr = 6: one group of 6; mr = 12: 8 + 4) transposed 8×8. */
static void pack_a(const problem *p, int i0, int m, int k0, int kc, float *ap) {
    const int lda = p->lda, mr = p->mr;
    for (int it = 0; it < m; it += mr) {
        float *d = ap + (size_t)it * kc;
        const int R = imin(mr, m - it);
        if (!p->ta && R == mr) {
            const float *s = p->A + (size_t)(i0 + it) * lda + k0;
            int k = 0;
            for (; k + 8 <= kc; k += 8)
                for (int g = 0; g < mr; g += 8) {
                    const int rows = imin(8, mr - g);
                    __m256 r[8];
                    for (int q = 0; q < 8; q++)
                        r[q] = q < rows ? _mm256_loadu_ps(s + (size_t)(g + q) * lda + k) : _mm256_setzero_ps();
                    transpose8(r);
                    for (int q = 0; q < 8; q++) {   /* rows g .. g + rows of column k + q */
                        float *o = d + (size_t)(k + q) * mr + g;
                        if (rows == 8) {
                            _mm256_storeu_ps(o, r[q]);
                        } else {
                            _mm_storeu_ps(o, _mm256_castps256_ps128(r[q]));
                            if (rows == 6) _mm_storel_pi((__m64 *)(o + 4), _mm256_extractf128_ps(r[q], 1));
                        }
                    }
                }
            for (; k < kc; k++)
                for (int q = 0; q < mr; q++) d[(size_t)k * mr + q] = s[(size_t)q * lda + k];
        } else {
            const float *A = p->A;
            const int ta = p->ta;
            for (int k = 0; k < kc; k++)
                for (int q = 0; q < mr; q++) d[(size_t)k * mr + q] = q < R ? A_AT(i0 + it + q, k0 + k) : 0.0f;
        }
    }
}

/* One tile's A, C and chain start. A: packed (a[k·mr + r]) or, with in-place A (the tile functions'
 * ia), op(A)'s rows as stored (a[r·lda + k]). first: the chains start in this K block, from
 * beta·C + bias (bias at the tile's first column; chain_start's two roundings, 16 lanes at a time),
 * else they continue from C. */
typedef struct {
    const float *a;
    size_t lda;
    float *c;
    size_t ldc;
    int first;
    float beta;
    const float *bias;
} tile_io;

/* AVX2: c[r, 0..15] += Σ_k a[r, k] · bp[k, 0..15] for R ≤ 6 rows, k in order. */
ALWAYS_INLINE void tile(int R, int ia, const tile_io *t, const float *bp, int kc) {
    __m256 c0[MR], c1[MR];
    const float *ap = t->a;
    float *c = t->c;
    const size_t ldc = t->ldc, lda = t->lda;
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        if (!t->first) {
            c0[r] = _mm256_loadu_ps(c + r * ldc);
            c1[r] = _mm256_loadu_ps(c + r * ldc + 8);
            continue;
        }
        c0[r] = c1[r] = _mm256_setzero_ps();
        if (t->beta != 0.0f) {
            c0[r] = _mm256_mul_ps(_mm256_set1_ps(t->beta), _mm256_loadu_ps(c + r * ldc));
            c1[r] = _mm256_mul_ps(_mm256_set1_ps(t->beta), _mm256_loadu_ps(c + r * ldc + 8));
        }
        if (t->bias) {
            c0[r] = _mm256_add_ps(c0[r], _mm256_loadu_ps(t->bias));
            c1[r] = _mm256_add_ps(c1[r], _mm256_loadu_ps(t->bias + 8));
        }
    }
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(bp + (size_t)k * NR), b1 = _mm256_loadu_ps(bp + (size_t)k * NR + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m256 av = _mm256_broadcast_ss(ia ? ap + r * lda + k : ap + (size_t)k * MR + r);
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

#define TILE_R(f, ia, R, ...)                                                                              \
    case R:                                                                                                \
        if (ia) f(R, 1, __VA_ARGS__);                                                                      \
        else f(R, 0, __VA_ARGS__);                                                                         \
        break;

static void tile_r(int R, int ia, const tile_io *t, const float *bp, int kc) {
    switch (R) {
    TILE_R(tile, ia, 6, t, bp, kc)
    TILE_R(tile, ia, 5, t, bp, kc)
    TILE_R(tile, ia, 4, t, bp, kc)
    TILE_R(tile, ia, 3, t, bp, kc)
    TILE_R(tile, ia, 2, t, bp, kc)
    default: TILE_R(tile, ia, 1, t, bp, kc)
    }
}

/* AVX-512: c[r, 0 .. 16·NV) += Σ_k a[r, k] · bp[k, ..] for R ≤ mr rows (bp: [kc][16·NV]), k in
 * order — the AVX2 tile's chains, 16 to a register instead of 8. */
ALWAYS_INLINE AVX512 void tile_w(int R, int ia, int mr, int NV, const tile_io *t, const float *bp, int kc) {
    __m512 acc[12][4];
    const int nr = 16 * NV;
    const float *ap = t->a;
    float *c = t->c;
    const size_t ldc = t->ldc, lda = t->lda;
#pragma GCC unroll 12
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            if (!t->first) {
                acc[r][v] = _mm512_loadu_ps(c + r * ldc + 16 * v);
                continue;
            }
            acc[r][v] = _mm512_setzero_ps();
            if (t->beta != 0.0f) acc[r][v] = _mm512_mul_ps(_mm512_set1_ps(t->beta), _mm512_loadu_ps(c + r * ldc + 16 * v));
            if (t->bias) acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_loadu_ps(t->bias + 16 * v));
        }
    for (int k = 0; k < kc; k++) {
        __m512 b[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            b[v] = _mm512_loadu_ps(bp + (size_t)k * nr + 16 * v);
            _mm_prefetch((const char *)(bp + (size_t)(k + PF) * nr + 16 * v), _MM_HINT_T0);
        }
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            __m512 av = _mm512_set1_ps(ia ? ap[r * lda + k] : ap[(size_t)k * mr + r]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}

#define TILE_6x64(R, ia, ...) tile_w(R, ia, W_MR, W_NV, __VA_ARGS__)
#define TILE_12x32(R, ia, ...) tile_w(R, ia, S_MR, S_NV, __VA_ARGS__)

/* R rows of a 6×64 (mr = 6) or 12×32 (mr = 12) tile */
static AVX512 void tile_wr(int R, int mr, int ia, const tile_io *t, const float *bp, int kc) {
    if (mr == W_MR) switch (R) {
        TILE_R(TILE_6x64, ia, 6, t, bp, kc)
        TILE_R(TILE_6x64, ia, 5, t, bp, kc)
        TILE_R(TILE_6x64, ia, 4, t, bp, kc)
        TILE_R(TILE_6x64, ia, 3, t, bp, kc)
        TILE_R(TILE_6x64, ia, 2, t, bp, kc)
        default: TILE_R(TILE_6x64, ia, 1, t, bp, kc)
        }
    else switch (R) {
        TILE_R(TILE_12x32, ia, 12, t, bp, kc)
        TILE_R(TILE_12x32, ia, 11, t, bp, kc)
        TILE_R(TILE_12x32, ia, 10, t, bp, kc)
        TILE_R(TILE_12x32, ia, 9, t, bp, kc)
        TILE_R(TILE_12x32, ia, 8, t, bp, kc)
        TILE_R(TILE_12x32, ia, 7, t, bp, kc)
        TILE_R(TILE_12x32, ia, 6, t, bp, kc)
        TILE_R(TILE_12x32, ia, 5, t, bp, kc)
        TILE_R(TILE_12x32, ia, 4, t, bp, kc)
        TILE_R(TILE_12x32, ia, 3, t, bp, kc)
        TILE_R(TILE_12x32, ia, 2, t, bp, kc)
        default: TILE_R(TILE_12x32, ia, 1, t, bp, kc)
        }
}

/* C[i0 .. + m, j0 .. + n) over the K block k0 .. + kc from the packed panels (A: apack, or in place
 * with p->ia), tile by tile (order: below). Tiles reaching past column N run on a copy. first: the
 * chains start here (C := beta·C + bias). */
static void macro(const problem *p, int i0, int m, int j0, int n, int k0, int kc, const float *apack,
                  const float *bpack) {
    const int first = k0 == 0;
    float edge[EDGE];
    const int ldc = p->ldc, mr = p->mr, nr = p->nr;
    /* the tiles: rows fastest (the B micro-panel reused under the A block) or, with rows_outer (the
     * 12×32 tiles), columns fastest (the A micro-panel stays in L1, the B panel streams from L2) */
    const int rows_fast = !p->rows_outer;
    int ni, nj;
    for (int it = 0, jt = 0; rows_fast ? jt < n : it < m; it = ni, jt = nj) {
        /* the next tile */
        if (rows_fast) ni = it + mr < m ? it + mr : 0, nj = it + mr < m ? jt : jt + nr;
        else ni = jt + nr < n ? it : it + mr, nj = jt + nr < n ? jt + nr : 0;
        const int w = imin(nr, n - jt), R = imin(mr, m - it);
        float *c = p->C + (size_t)(i0 + it) * ldc + j0 + jt;
        if (first && w < nr)   /* the edge tile's chains start here, the tile continues them */
            for (int r = 0; r < R; r++)
                for (int q = 0; q < w; q++)
                    c[(size_t)r * ldc + q] = chain_start(c[(size_t)r * ldc + q], p->beta, p->bias, j0 + jt + q);
        /* the next tile's C rows: its loads would otherwise wait on memory (a prefetch never faults) */
        if (ni < m && nj < n) {
            const float *cn = p->C + (size_t)(i0 + ni) * ldc + j0 + nj;
            for (int r = 0; r < mr && ni + r < m; r++)
                for (int q = 0; q < nr; q += 16) _mm_prefetch((const char *)(cn + (size_t)r * ldc + q), _MM_HINT_T0);
            for (int r = 0; r < mr && ni + r < m; r++)
                _mm_prefetch((const char *)(cn + (size_t)r * ldc + nr - 1), _MM_HINT_T0);
        }
        tile_io t = {p->ia ? p->A + (size_t)(i0 + it) * p->lda + k0 : apack + (size_t)it * kc, (size_t)p->lda, c,
                     (size_t)ldc, first, p->beta, p->bias ? p->bias + j0 + jt : NULL};
        if (w < nr) {
            for (int r = 0; r < R; r++) memcpy(edge + r * nr, c + (size_t)r * ldc, sizeof(float) * w);
            t.c = edge, t.ldc = (size_t)nr, t.first = 0;
        }
        const float *bp = bpack + (size_t)jt * kc;
        if (p->wide) tile_wr(R, mr, p->ia, &t, bp, kc);
        else tile_r(R, p->ia, &t, bp, kc);
        if (w < nr)
            for (int r = 0; r < R; r++) memcpy(c + (size_t)r * ldc, edge + r * nr, sizeof(float) * w);
    }
}

/* One job: the elements C[r0 .. r1, c0 .. c1), all of K — the Goto/BLIS loops (columns in NC
 * blocks, K in kcb blocks packing B, rows in mcb blocks packing A) on this thread's own buffers. */
static void job(const problem *p, int r0, int r1, int c0, int c1, float *bpack, float *apack) {
    /* AVX-512: row blocks of equal size (≤ mcb, whole tiles): a short last block would reuse each
     * B micro-panel for few tiles after it has left the caches */
    const int nb = (r1 - r0 + p->mcb - 1) / p->mcb,
              mb = p->wide ? ((r1 - r0 + nb - 1) / nb + p->mr - 1) / p->mr * p->mr : p->mcb;
    for (int j0 = c0; j0 < c1; j0 += p->ncb) {
        const int n = imin(p->ncb, c1 - j0);
        for (int k0 = 0; k0 < p->K; k0 += p->kcb) {
            const int kc = imin(p->kcb, p->K - k0);
            pack_b(p, k0, kc, j0, n, bpack);
            for (int i0 = r0; i0 < r1; i0 += mb) {
                const int m = imin(mb, r1 - i0);
                const float *ab = p->ap ? p->ap + a_block_at(p->mr, p->M, k0) + (size_t)i0 * kc : apack;
                if (!p->ap && !p->ia) pack_a(p, i0, m, k0, kc, apack);
                macro(p, i0, m, j0, n, k0, kc, ab, bpack);
            }
        }
    }
}

/* The jobs: a grid of row groups × column groups, at least 4 per thread where the shape has them
 * (taken dynamically: a thread slowed by other work takes fewer). Each job packs its own panels,
 * so B is packed (read and written) once per row group and A read once per column group — packed
 * (cost 2), in place (1: read only) or pre-packed (0.5: read, already dense): the grid minimises
 * 2·rg·N + a_cost·cg·M. The partition never changes a chain, only the speed. */
static void split(int M, int N, int mr, int nr, int nth, double a_cost, int *rg, int *cg) {
    const int mt = (M + mr - 1) / mr, nt = (N + nr - 1) / nr, want = nth > 1 ? 4 * nth : 1;
    double best = 0;
    int best_jobs = 0;
    *rg = *cg = 1;
    for (int c = 1; c <= imin(nt, want); c++) {
        const int r = imin(mt, (want + c - 1) / c), jobs = r * c;
        const double cost = 2.0 * r * N + a_cost * c * M;
        if (best_jobs == 0 || (jobs >= want && best_jobs < want) ||
            ((jobs >= want) == (best_jobs >= want) && (cost < best || (cost == best && jobs > best_jobs)))) {
            best = cost, best_jobs = jobs, *rg = r, *cg = c;
        }
    }
}

/* The call's problem: operands, tile set and blocking (a_blocking's for A). */
static problem setup(int avx512, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                     const float *bias, float beta, float *C, int ldc, const float *ap) {
    const int w = avx512 != 0, s = w && M < S_ROWS;
    problem p = {ta, tb, M, N, K, A, B, bias, lda, ldb, ldc, beta, C, w, s,
                 0, s ? 16 * S_NV : w ? 16 * W_NV : NR, 0, s ? S_MC : w ? W_MC : MC, s ? S_NC : w ? W_NC : NC, ap,
                 !ap && !ta};
    a_blocking(avx512, M, &p.mr, &p.kcb);
    /* A in place only under tiles of ≤ 8 rows: the rows of a weight-sized K (4,096 floats: 16 KB
     * apart) fall in one L1 set of 8 ways, and 12 of them evict each other (226×10240×4096 ran at
     * 0.94–0.97 of packing A) */
    p.ia = p.ia && p.mr <= 8;
    return p;
}

static void run(const problem *pp) {
    const problem p = *pp;
    const int M = p.M, N = p.N, K = p.K;
    const int par = (double)M * N * K > 1e6 && !in_parallel();   /* a call per thread: one job */
#ifdef _OPENMP
    const int nth = par ? omp_get_max_threads() : 1;
#else
    const int nth = 1;
#endif
    int rg, cg;
    split(M, N, p.mr, p.nr, nth, p.ap ? 0.5 : p.ia ? 1.0 : 2.0, &rg, &cg);
    /* group g of n items in units of u: [start(g), start(g + 1)) */
    const int mt = (M + p.mr - 1) / p.mr, nt = (N + p.nr - 1) / p.nr, rows = (mt + rg - 1) / rg * p.mr,
              cols = (nt + cg - 1) / cg * p.nr, jobs = rg * cg;
#pragma omp parallel if (par && jobs > 1)
    {
        float *bpack = cvx_alloc_f32((size_t)p.kcb * imin(p.ncb, cols));
        float *apack = p.ap || p.ia ? NULL : cvx_alloc_f32((size_t)p.mcb * p.kcb);
#pragma omp for schedule(dynamic, 1)
        for (int jb = 0; jb < jobs; jb++) {
            const int r0 = jb / cg * rows, c0 = jb % cg * cols;
            if (r0 < M && c0 < N) job(&p, r0, imin(M, r0 + rows), c0, imin(N, c0 + cols), bpack, apack);
        }
        free(apack);
        free(bpack);
    }
}

void cvx_sgemm_fixed_isa(int avx512, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                         int ldb, const float *bias, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        cvx_sgemm_fixed_ref(ta, tb, M, N, 0, A, lda, B, ldb, bias, beta, C, ldc);
        return;
    }
    const problem p = setup(avx512, ta, tb, M, N, K, A, lda, B, ldb, bias, beta, C, ldc, NULL);
    run(&p);
}

void cvx_sgemm_fixed_pack_a(int avx512, int ta, int M, int K, int i0, int m, int k0, int kn, const float *A, int lda,
                            float *Ap) {
    if (m <= 0 || kn <= 0) return;
    const problem p = setup(avx512, ta, 0, M, 1, K, A, lda, NULL, 0, NULL, 0.0f, NULL, 0, NULL);
    CVX_CHECK(i0 >= 0 && i0 % p.mr == 0 && i0 + m <= M && (m % p.mr == 0 || i0 + m == M) && k0 >= 0 &&
              k0 + kn <= K);
    const int panels = (m + p.mr - 1) / p.mr, kend = k0 + kn;
    /* each (K block ∩ [k0, kend), micro-panel) piece written once, by one thread: pack_a on one
     * panel writes its column k at k·mr, so a piece starting inside a block is packed in place */
#pragma omp parallel for collapse(2) schedule(static) if ((double)m * kn > 1e5 && !in_parallel())
    for (int b0 = k0 / p.kcb * p.kcb; b0 < kend; b0 += p.kcb)
        for (int q = 0; q < panels; q++) {
            const int lo = b0 > k0 ? b0 : k0, hi = imin(b0 + p.kcb, kend), kc = imin(p.kcb, K - b0), r = q * p.mr;
            pack_a(&p, r, imin(p.mr, m - r), lo - k0, hi - lo,
                   Ap + a_block_at(p.mr, M, b0) + (size_t)(i0 + r) * kc + (size_t)(lo - b0) * p.mr);
        }
}

void cvx_sgemm_fixed_packed(int avx512, int tb, int M, int N, int K, const float *Ap, const float *B, int ldb,
                            const float *bias, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        cvx_sgemm_fixed_ref(0, tb, M, N, 0, NULL, 1, B, ldb, bias, beta, C, ldc);
        return;
    }
    const problem p = setup(avx512, 0, tb, M, N, K, NULL, 1, B, ldb, bias, beta, C, ldc, Ap);
    run(&p);
}

#else   /* no AVX2/FMA at build time: the reference, rows in parallel */

void cvx_sgemm_fixed_isa(int avx512, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                         int ldb, const float *bias, float beta, float *C, int ldc) {
    (void)avx512;
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < M; i++)
        cvx_sgemm_fixed_ref(ta, tb, 1, N, K, ta ? A + i : A + (size_t)i * lda, lda, B, ldb, bias, beta,
                            C + (size_t)i * ldc, ldc);
}

void cvx_sgemm_fixed_pack_a(int avx512, int ta, int M, int K, int i0, int m, int k0, int kn, const float *A, int lda,
                            float *Ap) {
    int mr, kcb;
    a_blocking(avx512, M, &mr, &kcb);
    CVX_CHECK(i0 >= 0 && i0 % mr == 0 && i0 + m <= M && (m % mr == 0 || i0 + m == M) && k0 >= 0 && k0 + kn <= K);
    const int rows = m > 0 ? (m + mr - 1) / mr * mr : 0;
    for (int k = k0; k < k0 + kn; k++) {
        const int b0 = k / kcb * kcb, kc = K - b0 < kcb ? K - b0 : kcb;
        float *blk = Ap + a_block_at(mr, M, b0) + (size_t)i0 * kc;
        for (int i = 0; i < rows; i++)
            blk[(size_t)(i / mr) * mr * kc + (size_t)(k - b0) * mr + i % mr] = i < m ? A_AT(i, k - k0) : 0.0f;
    }
}

void cvx_sgemm_fixed_packed(int avx512, int tb, int M, int N, int K, const float *Ap, const float *B, int ldb,
                            const float *bias, float beta, float *C, int ldc) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int j = 0; j < N; j++)   /* columns in parallel: the packed rows are not independent slices */
        cvx_sgemm_fixed_packed_ref(avx512, tb, M, 1, K, Ap, tb ? B + (size_t)j * ldb : B + j, ldb,
                                   bias ? bias + j : NULL, beta, C + j, ldc);
}

#endif

void cvx_sgemm_fixed(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                     const float *bias, float beta, float *C, int ldc) {
    cvx_sgemm_fixed_isa(0, ta, tb, M, N, K, A, lda, B, ldb, bias, beta, C, ldc);
}
