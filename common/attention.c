/* cvx_attention: tiled online-softmax attention with its own AVX2/FMA micro-kernels; other
 * head sizes and CPUs without AVX2/FMA go to the portable cvx_attention_tiled.
 *
 * Job = (head h, block of QB query rows); for each key tile of up to KT keys:
 *   kt = k_tileᵀ packed [KT/16][hd][16] once per job and tile (so q·kᵀ needs no other packing),
 *   for each sub-tile of QS query rows:
 *     s = scale · q kᵀ                     (6×16 register-blocked kernel over hd)
 *     m' = max(m, rowmax s), p = e^(s−m'), l = l·e^(m−m') + Σp, acc ·= e^(m−m')
 *     acc += p · v_tile                    (6×16 kernel over the keys, v tile copied contiguous)
 *   out = acc / l.
 * OpenBLAS calls on these small shapes spent much of their time packing; here only the k and
 * v tiles are copied, once per job (prefetched: rows a page apart). On AVX-512 CPUs
 * (cvx_attention_isa) the same chains run in zmm kernels (6 rows × 64 keys, 6 rows × 64 columns)
 * over L1-sized chunks of the tile, with a 16-lane exp: equal bits (see the AVX-512 section).
 * The same jobs on bf16-rounded operands are the bf16 attention of CPUs without bf16 units
 * (cvx_attn_f32_bf16, attention_impl.h). */
#include "error.h"
#include "ops.h"
#include "vecmath.h"
#include "attention_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { QB = 512, QS = 48, KT = 512 };

#if defined(__AVX2__) && defined(__FMA__)

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* s[r, j..j+15] = scale · Σ_d q[r, d] · kt[d, j..j+15] for R ≤ 6 rows. */
ALWAYS_INLINE void qk_block(int R, const float *q, int ld_q, const float *kt, int ldkt, int hd, float scale, float *s,
                            int lds) {
    __m256 c0[6], c1[6];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) c0[r] = c1[r] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m256 b0 = _mm256_loadu_ps(kt + (size_t)d * ldkt), b1 = _mm256_loadu_ps(kt + (size_t)d * ldkt + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m256 a = _mm256_broadcast_ss(q + (size_t)r * ld_q + d);
            c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
        }
    }
    __m256 vs = _mm256_set1_ps(scale);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(s + (size_t)r * lds, _mm256_mul_ps(c0[r], vs));
        _mm256_storeu_ps(s + (size_t)r * lds + 8, _mm256_mul_ps(c1[r], vs));
    }
}

/* acc[r, 0..15] += Σ_j p[r, j] · v[j, 0..15] for R ≤ 6 rows (acc = ... when first). */
ALWAYS_INLINE void pv_block(int R, const float *p, int ldp, const float *v, int ld_v, int nk, float *acc, int ld_acc,
                            int first) {
    __m256 c0[6], c1[6];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) c0[r] = c1[r] = _mm256_setzero_ps();
    for (int j = 0; j < nk; j++) {
        __m256 b0 = _mm256_loadu_ps(v + (size_t)j * ld_v), b1 = _mm256_loadu_ps(v + (size_t)j * ld_v + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m256 a = _mm256_broadcast_ss(p + (size_t)r * ldp + j);
            c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        float *a = acc + (size_t)r * ld_acc;
        if (!first) {
            c0[r] = _mm256_add_ps(c0[r], _mm256_loadu_ps(a));
            c1[r] = _mm256_add_ps(c1[r], _mm256_loadu_ps(a + 8));
        }
        _mm256_storeu_ps(a, c0[r]);
        _mm256_storeu_ps(a + 8, c1[r]);
    }
}

/* Dispatch on the row count so every R gets a fully unrolled, register-resident kernel. */
static void qk_rows(int R, const float *q, int ld_q, const float *kt, int ldkt, int hd, float scale, float *s, int lds) {
    switch (R) {
    case 6: qk_block(6, q, ld_q, kt, ldkt, hd, scale, s, lds); break;
    case 5: qk_block(5, q, ld_q, kt, ldkt, hd, scale, s, lds); break;
    case 4: qk_block(4, q, ld_q, kt, ldkt, hd, scale, s, lds); break;
    case 3: qk_block(3, q, ld_q, kt, ldkt, hd, scale, s, lds); break;
    case 2: qk_block(2, q, ld_q, kt, ldkt, hd, scale, s, lds); break;
    default: qk_block(1, q, ld_q, kt, ldkt, hd, scale, s, lds); break;
    }
}

static void pv_rows(int R, const float *p, int ldp, const float *v, int ld_v, int nk, float *acc, int ld_acc, int first) {
    switch (R) {
    case 6: pv_block(6, p, ldp, v, ld_v, nk, acc, ld_acc, first); break;
    case 5: pv_block(5, p, ldp, v, ld_v, nk, acc, ld_acc, first); break;
    case 4: pv_block(4, p, ldp, v, ld_v, nk, acc, ld_acc, first); break;
    case 3: pv_block(3, p, ldp, v, ld_v, nk, acc, ld_acc, first); break;
    case 2: pv_block(2, p, ldp, v, ld_v, nk, acc, ld_acc, first); break;
    default: pv_block(1, p, ldp, v, ld_v, nk, acc, ld_acc, first); break;
    }
}
static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

static float row_max(const float *s, int n, float mx) {
    int j = 0;
    if (n >= 8) {
        __m256 vm = _mm256_loadu_ps(s);
        for (j = 8; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + j));
        float v = hmax8(vm);
        mx = v > mx ? v : mx;
    }
    for (; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

/* s[j] = e^(s[j] − mx); returns Σ s[j]. */
static float exp_sub_sum(float *s, int n, float mx) {
    int j = 0;
    __m256 vs = _mm256_setzero_ps(), vmx = _mm256_set1_ps(mx);
    for (; j + 8 <= n; j += 8) {
        __m256 e = cvx_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmx));
        _mm256_storeu_ps(s + j, e);
        vs = _mm256_add_ps(vs, e);
    }
    float sum = hsum8(vs);
    for (; j < n; j++) {
        float x = s[j] - mx;
        s[j] = expf(x < -87.0f ? -87.0f : x);
        sum += s[j];
    }
    return sum;
}

/* The k tile transposed in panels of 16 keys: kt[j / 16][d][j % 16] = k[j, d] for j < nk (rows
 * of stride ld), zero-padded to nkp keys; 8×8 blocks transposed in registers. A panel is read
 * front to back by qk_block (hd × 16 floats): a plain [hd, nkp] layout put its rows 2 KB apart
 * (nkp = 512), all in two L1 sets, and every load came from L2. */
/* Rows of a head sit a row stride apart (a page or more), where the hardware prefetchers do not
 * follow: the packing prefetches the rows PF_ROWS ahead. */
enum { PF_ROWS = 32 };
static inline void prefetch_rows(const float *x, int ld, int n, int hd) {
    for (int i = 0; i < n; i++)
        for (int d = 0; d < hd; d += 16) __builtin_prefetch(x + (size_t)i * ld + d);
}

static void pack_kt(float *kt, int nkp, const float *k, int ld, int nk, int hd) {
    (void)nkp;
    int j = 0;
    prefetch_rows(k, ld, nk < PF_ROWS ? nk : PF_ROWS, hd);
    for (; j + 8 <= nk; j += 8) {
        if (j + PF_ROWS < nk) prefetch_rows(k + (size_t)(j + PF_ROWS) * ld, ld, nk - j - PF_ROWS < 8 ? nk - j - PF_ROWS : 8, hd);
        float *panel = kt + (size_t)(j / 16) * hd * 16 + j % 16;
        for (int d = 0; d < hd; d += 8) {
            __m256 r[8], t[8], u[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(k + (size_t)(j + i) * ld + d);
            for (int i = 0; i < 8; i += 2) {
                t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
                t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
            }
            for (int i = 0; i < 8; i += 4) {
                u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
                u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
                u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
                u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
            }
            for (int i = 0; i < 4; i++) {
                _mm256_storeu_ps(panel + (size_t)(d + i) * 16, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
                _mm256_storeu_ps(panel + (size_t)(d + i + 4) * 16, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
            }
        }
    }
    for (; j < nk; j++)
        for (int d = 0; d < hd; d++) kt[(size_t)(j / 16) * hd * 16 + (size_t)d * 16 + j % 16] = k[(size_t)j * ld + d];
    for (; j < nkp; j++)
        for (int d = 0; d < hd; d++) kt[(size_t)(j / 16) * hd * 16 + (size_t)d * 16 + j % 16] = 0.0f;
}

typedef struct {
    float *kt, *vt, *s, *acc, *m, *l, *t, *qr;
} job_scratch;

/* The k tile packed (kᵀ, [nkp/16][hd][16]) and the v tile copied to rows [nk, hd] of stride ldv (with a
 * row stride like 3072 floats every row would fall in the same L1 sets); bf16: both rounded to bf16. */
static void pack_tile(job_scratch *w, const float *k, const float *v, int ld_kv, int nk, int nkp, int hd, int ldv,
                      int bf16) {
    pack_kt(w->kt, nkp, k, ld_kv, nk, hd);
    prefetch_rows(v, ld_kv, nk < PF_ROWS ? nk : PF_ROWS, hd);
    for (int j = 0; j < nk; j++) {
        if (j + PF_ROWS < nk) prefetch_rows(v + (size_t)(j + PF_ROWS) * ld_kv, ld_kv, 1, hd);
        memcpy(w->vt + (size_t)j * ldv, v + (size_t)j * ld_kv, sizeof(float) * hd);
        if (bf16) cvx_attn_round_bf16_row(w->vt + (size_t)j * ldv, hd);
    }
    if (bf16) cvx_attn_round_bf16_row(w->kt, nkp * hd);
}

/* copy or bf16: the job's nq rows of q copied to qr [nq, hd] (contiguous: rows a page apart would share
 * L1 sets), rounded to bf16 when bf16; read before out is written (out may be q). */
static const float *job_q(const float *q, int *ld_q, int nq, int hd, int copy, int bf16, job_scratch *w) {
    if (!copy && !bf16) return q;
    for (int i = 0; i < nq; i++) {
        memcpy(w->qr + (size_t)i * hd, q + (size_t)i * *ld_q, sizeof(float) * hd);
        if (bf16) cvx_attn_round_bf16_row(w->qr + (size_t)i * hd, hd);
    }
    *ld_q = hd;
    return w->qr;
}

/* One job: nq ≤ QB query rows of one head against all Skv keys. q, k, v, out point at the
 * head's first column; bias (or NULL) at [nq, Skv] with row stride ld_bias. */
static void attention_job(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                          int nq, int Skv, int hd, float scale, const float *bias, size_t ld_bias, int bf16,
                          job_scratch *w) {
    float *m = w->m, *l = w->l, *acc = w->acc;
    q = job_q(q, &ld_q, nq, hd, 0, bf16, w);
    for (int i = 0; i < nq; i++) { m[i] = -INFINITY; l[i] = 0; }
    for (int k0 = 0; k0 < Skv; k0 += KT) {
        int nk = Skv - k0 < KT ? Skv - k0 : KT, nkp = (nk + 15) & ~15, first = k0 == 0;
        pack_tile(w, k + (size_t)k0 * ld_kv, v + (size_t)k0 * ld_kv, ld_kv, nk, nkp, hd, hd, bf16);
        for (int i0 = 0; i0 < nq; i0 += QS) {
            int ns = nq - i0 < QS ? nq - i0 : QS;
            float *s = w->s;                                                    /* [ns, nkp] */
            for (int r = 0; r < ns; r += 6)
                for (int j = 0; j < nkp; j += 16)
                    qk_rows(ns - r < 6 ? ns - r : 6, q + (size_t)(i0 + r) * ld_q, ld_q, w->kt + (size_t)j * hd, 16, hd,
                            scale, s + (size_t)r * nkp + j, nkp);
            for (int r = 0; r < ns; r++) {
                int i = i0 + r;
                float *sr = s + (size_t)r * nkp;
                if (bias) {
                    const float *br = bias + (size_t)i * ld_bias + k0;
                    for (int j = 0; j < nk; j++) sr[j] += br[j];
                }
                float mx = row_max(sr, nk, m[i]);
                float corr = first ? 0.0f : expf(m[i] - mx);
                l[i] = l[i] * corr + exp_sub_sum(sr, nk, mx);
                if (bf16) cvx_attn_round_bf16_row(sr, nk);   /* p as PV reads it; l keeps the sum of the exact p */
                m[i] = mx;
                if (!first) {
                    float *a = acc + (size_t)i * hd;
                    for (int d = 0; d < hd; d++) a[d] *= corr;
                }
            }
            for (int r = 0; r < ns; r += 6)
                for (int c = 0; c < hd; c += 16)
                    pv_rows(ns - r < 6 ? ns - r : 6, s + (size_t)r * nkp, nkp, w->vt + c, hd, nk,
                            acc + (size_t)(i0 + r) * hd + c, hd, first);
        }
    }
    for (int i = 0; i < nq; i++) {
        float inv = 1.0f / l[i];
        for (int d = 0; d < hd; d++) out[(size_t)i * ld_o + d] = acc[(size_t)i * hd + d] * inv;
    }
}

/* ---- AVX-512 (CPUs with avx512f, chosen per call) ----
 * The same chains as above — every s[r, j] and acc[r, c] one FMA sequence over d or j in the same
 * order, every p the same operations (cvx_exp16 = cvx_exp8 lane by lane, libm expf for a row's
 * n % 8 tail), every row sum in 8 lanes in the order of j — so the bits equal the AVX2 kernels'
 * (tests/common_attention.c); only the vector width and the loop order differ. The loops run over
 * L1-sized chunks of the packed tile outermost and the 6-row groups of a sub-tile innermost: the
 * 6-row kernels read about 21 bytes of k or v per cycle, more than L2 delivers, so each chunk is
 * read from L2 once per QS rows instead of once per 6.
 * qk: 6 rows × NP ≤ 2 key panels of 16 (one zmm per panel), pv: 6 rows × NV ≤ 4 × 16 output columns. */
#define AVX512_INLINE static inline __attribute__((always_inline, target("avx512f")))
#define AVX512 __attribute__((target("avx512f")))

enum { PV_KC = 64 };   /* keys per PV chunk: 64 keys × 64 columns of v = 16 KB */

#define ROWS_DISPATCH(F, R, ...) \
    switch (R) { \
    case 6: F(6, __VA_ARGS__); break; case 5: F(5, __VA_ARGS__); break; case 4: F(4, __VA_ARGS__); break; \
    case 3: F(3, __VA_ARGS__); break; case 2: F(2, __VA_ARGS__); break; default: F(1, __VA_ARGS__); break; }

/* s[r, 16p..16p+16) = scale · Σ_d q[r, d] · kt[p][d][0..16) for R ≤ 6 rows, NP ≤ 4 panels. */
AVX512_INLINE void qk_block512(int R, int NP, const float *q, int ld_q, const float *kt, int hd, float scale, float *s,
                               int lds) {
    __m512 c[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++) c[r][p] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 b[4];
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++) b[p] = _mm512_loadu_ps(kt + (size_t)p * hd * 16 + (size_t)d * 16);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512 a = _mm512_set1_ps(q[(size_t)r * ld_q + d]);
#pragma GCC unroll 4
            for (int p = 0; p < NP; p++) c[r][p] = _mm512_fmadd_ps(a, b[p], c[r][p]);
        }
    }
    __m512 vs = _mm512_set1_ps(scale);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++) _mm512_storeu_ps(s + (size_t)r * lds + p * 16, _mm512_mul_ps(c[r][p], vs));
}

/* One chunk of nk keys of the PV product for R ≤ 6 rows × NV·16 columns: x = (start ? 0 : t) +
 * Σ_j p[r, j] · v[j, ·], one FMA chain per element in the order of j (continued across the chunks of
 * a tile through t: the chain of the unchunked kernel); at the tile's last chunk (end) acc = x (first
 * key tile) or x + acc, else t = x. t and acc: row stride ld. */
AVX512_INLINE void pv_block512(int R, int NV, const float *p, int ldp, const float *v, int ld_v, int nk, float *t,
                               float *acc, int ld, int start, int end, int first) {
    __m512 c[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) c[r][u] = start ? _mm512_setzero_ps() : _mm512_loadu_ps(t + (size_t)r * ld + u * 16);
    for (int j = 0; j < nk; j++) {
        __m512 b[4];
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) b[u] = _mm512_loadu_ps(v + (size_t)j * ld_v + u * 16);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512 a = _mm512_set1_ps(p[(size_t)r * ldp + j]);
#pragma GCC unroll 4
            for (int u = 0; u < NV; u++) c[r][u] = _mm512_fmadd_ps(a, b[u], c[r][u]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) {
            float *a = acc + (size_t)r * ld + u * 16;
            if (!end) _mm512_storeu_ps(t + (size_t)r * ld + u * 16, c[r][u]);
            else _mm512_storeu_ps(a, first ? c[r][u] : _mm512_add_ps(c[r][u], _mm512_loadu_ps(a)));
        }
}

/* s [ns, nkp] = scale · q kᵀ: per chunk of 64 keys (hd·64 floats of kt, in L1 or nearly), every 6-row group
 * (the chunk's last keys in panels of 32 and 16). */
static AVX512 void qk_tile512(int ns, const float *q, int ld_q, const float *kt, int nkp, int hd, float scale, float *s,
                              int lds) {
    for (int j = 0; j < nkp;) {
        int np = nkp - j >= 64 ? 4 : nkp - j >= 32 ? 2 : 1;
        for (int r = 0; r < ns; r += 6) {
            int R = ns - r < 6 ? ns - r : 6;
            const float *qr = q + (size_t)r * ld_q, *kj = kt + (size_t)j * hd;
            float *sr = s + (size_t)r * lds + j;
            if (np == 4) ROWS_DISPATCH(qk_block512, R, 4, qr, ld_q, kj, hd, scale, sr, lds)
            else if (np == 2) ROWS_DISPATCH(qk_block512, R, 2, qr, ld_q, kj, hd, scale, sr, lds)
            else ROWS_DISPATCH(qk_block512, R, 1, qr, ld_q, kj, hd, scale, sr, lds)
        }
        j += 16 * np;
    }
}

/* acc [ns, hd] (+)= p [ns, nk] · v [nk, hd]: per block of 64 (then 32, 16) columns and chunk of PV_KC
 * keys (in L1), every 6-row group; t [ns, hd]: the chains between chunks. */
static AVX512 void pv_tile512(int ns, const float *p, int ldp, const float *v, int ldv, int hd, int nk, float *acc,
                              float *t, int first) {
    for (int c = 0; c < hd;) {
        int nv = hd - c >= 64 ? 4 : hd - c >= 32 ? 2 : 1;
        for (int j0 = 0; j0 < nk; j0 += PV_KC) {
            int nc = nk - j0 < PV_KC ? nk - j0 : PV_KC, start = j0 == 0, end = j0 + PV_KC >= nk;
            for (int r = 0; r < ns; r += 6) {
                int R = ns - r < 6 ? ns - r : 6;
                const float *pr = p + (size_t)r * ldp + j0, *vj = v + (size_t)j0 * ldv + c;
                float *tr = t + (size_t)r * hd + c, *ar = acc + (size_t)r * hd + c;
                if (nv == 4) ROWS_DISPATCH(pv_block512, R, 4, pr, ldp, vj, ldv, nc, tr, ar, hd, start, end, first)
                else if (nv == 2) ROWS_DISPATCH(pv_block512, R, 2, pr, ldp, vj, ldv, nc, tr, ar, hd, start, end, first)
                else ROWS_DISPATCH(pv_block512, R, 1, pr, ldp, vj, ldv, nc, tr, ar, hd, start, end, first)
            }
        }
        c += 16 * nv;
    }
}

/* row_max on 16 lanes, 4 vectors at a time (a max is exact in any order). */
static AVX512 float row_max512(const float *s, int n, float mx) {
    __m512 vm[4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++) vm[u] = _mm512_set1_ps(mx);
    int j = 0;
    for (; j + 64 <= n; j += 64)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) vm[u] = _mm512_max_ps(vm[u], _mm512_loadu_ps(s + j + 16 * u));
    for (; j + 16 <= n; j += 16) vm[0] = _mm512_max_ps(vm[0], _mm512_loadu_ps(s + j));
    if (j < n) {
        __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
        vm[1] = _mm512_mask_max_ps(vm[1], k, vm[1], _mm512_maskz_loadu_ps(k, s + j));
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(vm[0], vm[1]), _mm512_max_ps(vm[2], vm[3])));
}

/* exp_sub_sum for R ≤ 2 rows (s rows at s + r·lds, maxima mx[r], sums to sum[r]) with exp_sub_sum's bits:
 * 16 lanes of cvx_exp16 at a time added to a row's 8 partial sums (low half, then high half: the order
 * of j), one 8-lane step, the same reduction, the same tail. Two rows at once: each row's sums are one
 * chain of dependent adds, too slow alone. */
AVX512_INLINE void exp_sub_sum512(int R, float *s, int lds, int n, const float *mx, float *sum) {
    int j = 0;
    __m256 vs[2];
    __m512 vmx[2];
    for (int r = 0; r < R; r++) vs[r] = _mm256_setzero_ps(), vmx[r] = _mm512_set1_ps(mx[r]);
    for (; j + 16 <= n; j += 16)
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            float *x = s + (size_t)r * lds + j;
            __m512 e = cvx_exp16(_mm512_sub_ps(_mm512_loadu_ps(x), vmx[r]));
            _mm512_storeu_ps(x, e);
            vs[r] = _mm256_add_ps(vs[r], _mm512_castps512_ps256(e));
            vs[r] = _mm256_add_ps(vs[r], _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
        }
    for (int r = 0; r < R; r++) {
        float *x = s + (size_t)r * lds;
        int i = j;
        if (i + 8 <= n) {
            __m256 e = cvx_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm512_castps512_ps256(vmx[r])));
            _mm256_storeu_ps(x + i, e);
            vs[r] = _mm256_add_ps(vs[r], e);
            i += 8;
        }
        sum[r] = hsum8(vs[r]);
        for (; i < n; i++) {
            float y = x[i] - mx[r];
            x[i] = expf(y < -87.0f ? -87.0f : y);
            sum[r] += x[i];
        }
    }
}

/* x[0..n) *= a (n a multiple of 16). */
static AVX512 void scale_row512(float *x, int n, float a) {
    __m512 va = _mm512_set1_ps(a);
    for (int d = 0; d < n; d += 16) _mm512_storeu_ps(x + d, _mm512_mul_ps(_mm512_loadu_ps(x + d), va));
}

/* attention_job with the AVX-512 kernels (hd a multiple of 16). */
static AVX512 void attention_job512(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                                    int ld_o, int nq, int Skv, int hd, float scale, const float *bias, size_t ld_bias,
                                    int bf16, job_scratch *w) {
    float *m = w->m, *l = w->l, *acc = w->acc;
    q = job_q(q, &ld_q, nq, hd, 1, bf16, w);
    for (int i = 0; i < nq; i++) { m[i] = -INFINITY; l[i] = 0; }
    for (int k0 = 0; k0 < Skv; k0 += KT) {
        int nk = Skv - k0 < KT ? Skv - k0 : KT, nkp = (nk + 15) & ~15, first = k0 == 0;
        int lds = nkp + 16, ldv = hd + 16;   /* s, vt rows padded off 2 KB / 512 B strides (L1 sets) */
        pack_tile(w, k + (size_t)k0 * ld_kv, v + (size_t)k0 * ld_kv, ld_kv, nk, nkp, hd, ldv, bf16);
        for (int i0 = 0; i0 < nq; i0 += QS) {
            int ns = nq - i0 < QS ? nq - i0 : QS;
            float *s = w->s;   /* [ns, lds] */
            qk_tile512(ns, q + (size_t)i0 * ld_q, ld_q, w->kt, nkp, hd, scale, s, lds);
            for (int r = 0; r < ns; r += 2) {   /* the online softmax, two rows at a time */
                int R = ns - r < 2 ? ns - r : 2;
                float mx[2], corr[2], sum[2];
                for (int u = 0; u < R; u++) {
                    int i = i0 + r + u;
                    float *sr = s + (size_t)(r + u) * lds;
                    if (bias) {
                        const float *br = bias + (size_t)i * ld_bias + k0;
                        int j = 0;
                        for (; j + 16 <= nk; j += 16)
                            _mm512_storeu_ps(sr + j, _mm512_add_ps(_mm512_loadu_ps(sr + j), _mm512_loadu_ps(br + j)));
                        for (; j < nk; j++) sr[j] += br[j];
                    }
                    mx[u] = row_max512(sr, nk, m[i]);
                    corr[u] = first ? 0.0f : expf(m[i] - mx[u]);
                }
                if (R == 2) exp_sub_sum512(2, s + (size_t)r * lds, lds, nk, mx, sum);
                else exp_sub_sum512(1, s + (size_t)r * lds, lds, nk, mx, sum);
                for (int u = 0; u < R; u++) {
                    int i = i0 + r + u;
                    if (bf16) cvx_attn_round_bf16_row(s + (size_t)(r + u) * lds, nk);
                    l[i] = l[i] * corr[u] + sum[u];
                    m[i] = mx[u];
                    if (!first) scale_row512(acc + (size_t)i * hd, hd, corr[u]);
                }
            }
            pv_tile512(ns, s, lds, w->vt, ldv, hd, nk, acc + (size_t)i0 * hd, w->t, first);
        }
    }
    for (int i = 0; i < nq; i++) {
        __m512 inv = _mm512_set1_ps(1.0f / l[i]);
        for (int d = 0; d < hd; d += 16)
            _mm512_storeu_ps(out + (size_t)i * ld_o + d, _mm512_mul_ps(_mm512_loadu_ps(acc + (size_t)i * hd + d), inv));
    }
}

/* Jobs = (head, block of QB query rows), dynamically shared out: which thread runs a job never
 * changes its bits. bf16: q, k, v and p rounded to bf16 (attention_impl.h). */
static void attention_run(int avx512, int bf16, const float *q, int ld_q, const float *k, const float *v, int ld_kv,
                          float *out, int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    int qblocks = (Sq + QB - 1) / QB, jobs = heads * qblocks;
#pragma omp parallel
    {
        job_scratch w;
        w.kt = cvx_alloc_f32((size_t)hd * KT);
        w.vt = cvx_alloc_f32((size_t)(hd + 16) * KT);
        w.s = cvx_alloc_f32((size_t)QS * (KT + 16));
        w.acc = cvx_alloc_f32((size_t)QB * hd);
        w.m = cvx_alloc_f32(QB);
        w.l = cvx_alloc_f32(QB);
        w.t = cvx_alloc_f32((size_t)QS * hd);
        w.qr = bf16 || avx512 ? cvx_alloc_f32((size_t)QB * hd) : NULL;
#pragma omp for schedule(dynamic, 1)
        for (int job = 0; job < jobs; job++) {
            int h = job / qblocks, q0 = (job % qblocks) * QB, nq = Sq - q0 < QB ? Sq - q0 : QB;
            const float *b = bias ? bias + ((size_t)h * Sq + q0) * Skv : NULL;
            const float *qj = q + (size_t)q0 * ld_q + (size_t)h * hd, *kj = k + (size_t)h * hd, *vj = v + (size_t)h * hd;
            float *oj = out + (size_t)q0 * ld_o + (size_t)h * hd;
            if (avx512) attention_job512(qj, ld_q, kj, vj, ld_kv, oj, ld_o, nq, Skv, hd, scale, b, (size_t)Skv, bf16, &w);
            else attention_job(qj, ld_q, kj, vj, ld_kv, oj, ld_o, nq, Skv, hd, scale, b, (size_t)Skv, bf16, &w);
        }
        free(w.kt); free(w.vt); free(w.s); free(w.acc); free(w.m); free(w.l); free(w.t); free(w.qr);
    }
}

void cvx_attention_isa(int avx512, const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                       int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    if (hd % 16 || Sq <= 0 || Skv <= 0) cvx_attention_tiled(q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
    else attention_run(avx512, 0, q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
}

void cvx_attn_f32_bf16(int avx512, const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                       int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    CVX_CHECK(hd % 16 == 0);
    if (Sq > 0 && Skv > 0) attention_run(avx512, 1, q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
}

void cvx_attention(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                        int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    cvx_attention_isa(0, q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
}

#else /* no AVX2/FMA: the portable tiled version */

void cvx_attention_isa(int avx512, const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                       int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    (void)avx512;
    cvx_attention_tiled(q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
}

void cvx_attention(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                        int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    cvx_attention_tiled(q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
}

#endif
