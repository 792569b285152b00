/* cvx_attention_bf16: attention with bf16 operands and f32 accumulation, online softmax in f32.
 *
 * Rounding points (the contract the reference and both kernels share): q, k, v are rounded to
 * bf16 (RNE); s = scale · Σ_d q·k accumulated in f32; bias added in f32; the running max m, the
 * exponentials p = e^(s−m), their sum l and the rescaling of the accumulator stay f32; p is rounded
 * to bf16 for the PV product, which accumulates in f32; out = acc / l.
 *
 * The K and V of a group of HG heads are packed once (shared by all threads, two buffers alternating
 * between groups), in tiles of KT keys:
 *   kp[d/2][j] = (k[j,d], k[j,d+1]) as bf16 pairs   (vdpbf16ps multiplies pairs along d)
 *   vp[j/2][c] = (v[j,c], v[j+1,c]) as bf16 pairs   (pairs along the keys for PV)
 * Job = (head, block of QB query rows); per key tile, groups of 6 query rows run QK (6 × 64 scores
 * per block: 24 accumulators, 4 loads of k and 6 broadcasts of q per 24 vdpbf16ps), the row max, one
 * fused pass e^(s−m) → Σ and bf16 pairs of p, then PV (6 × 64 outputs; the rescale by e^(m_old−m) is
 * folded into the accumulator load, the division by l into the last tile's store). The 6 × 256 scores
 * stay in L1 from QK to PV. Portable path (no AVX512_BF16, or hd % 32 ≠ 0): the same packing read as
 * f32, groups of QS rows, plain loops. Both paths give the same bits as the kernel this replaced
 * (commit 5a77dc2; bench_attention prints a hash of the output). */
#include "error.h"
#include "gemm_fast.h"
#include "ops.h"
#include "vecmath.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* QB query rows per job, QS per portable group, KT keys per tile; packed K/V of a group of heads: up to
 * PACK_BYTES per buffer (at least one head) — few barriers at short sequences, little memory at long. */
enum { QB = 256, QS = 48, KT = 256, PACK_BYTES = 8 << 20 };

static inline uint16_t rb(float x) { return cvx_f32_to_bf16(x); }
static inline float lo_f(uint32_t p) { return cvx_bf16_to_f32((uint16_t)p); }
static inline float hi_f(uint32_t p) { return cvx_bf16_to_f32((uint16_t)(p >> 16)); }

typedef struct {
    uint32_t *qp;   /* [QB][hd/2] q rows as bf16 pairs */
    float *s;       /* [QS][KT] scores, then p */
    uint32_t *pp;   /* [QS][KT/2] p rows as bf16 pairs; staging rows while packing K/V */
    float *acc, *m, *l;
} scratch_bf16;

/* ---- the two products: portable (AVX2, the build's baseline) ----
 * A bf16 pair widened to f32 is two bit operations (hi: the upper half as is; lo: shifted up), and a
 * product of two bf16 values is exact in f32, so s + a1·hi + a0·lo in this order gives the same bits
 * as vdpbf16ps's pair step on every machine; 8 lanes along the keys (QK) or the channels (PV). */

static inline __m256 hi8(__m256i p) { return _mm256_castsi256_ps(_mm256_and_si256(p, _mm256_set1_epi32((int)0xFFFF0000u))); }
static inline __m256 lo8(__m256i p) { return _mm256_castsi256_ps(_mm256_slli_epi32(p, 16)); }

/* d[0..n) = d + a1·hi(w) + a0·lo(w), element-wise over packed pairs w */
static void pair_axpy(float *d, const uint32_t *w, int n, float a0, float a1) {
    const __m256 va0 = _mm256_set1_ps(a0), va1 = _mm256_set1_ps(a1);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256i p = _mm256_loadu_si256((const __m256i *)(w + j));
        __m256 x = _mm256_add_ps(_mm256_loadu_ps(d + j), _mm256_mul_ps(va1, hi8(p)));
        _mm256_storeu_ps(d + j, _mm256_add_ps(x, _mm256_mul_ps(va0, lo8(p))));
    }
    for (; j < n; j++) d[j] = d[j] + a1 * hi_f(w[j]) + a0 * lo_f(w[j]);
}

static void qk_portable(int ns, const uint32_t *qp, int hd, const uint32_t *kp, int nkp, float scale, float *s) {
    int hp = hd / 2;
    for (int r = 0; r < ns; r++) {
        float *sr = s + (size_t)r * nkp;
        for (int j = 0; j < nkp; j++) sr[j] = 0;
        for (int p = 0; p < hp; p++) {
            uint32_t a = qp[(size_t)r * hp + p];
            pair_axpy(sr, kp + (size_t)p * nkp, nkp, lo_f(a), hi_f(a));
        }
        for (int j = 0; j < nkp; j++) sr[j] *= scale;
    }
}

static void pv_portable(int ns, const uint32_t *pp, int nkp, const uint32_t *vp, int hd, float *acc) {
    int np = nkp / 2;
    for (int r = 0; r < ns; r++) {
        float *a = acc + (size_t)r * hd;
        for (int jp = 0; jp < np; jp++) {
            uint32_t pr = pp[(size_t)r * np + jp];
            pair_axpy(a, vp + (size_t)jp * hd, hd, lo_f(pr), hi_f(pr));
        }
    }
}

/* ---- the two products: AVX512_BF16 ---- */

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* s[r, j..j+16·NC) = scale · Σ_p dot(q pair p of row r, kp[p][j..]) for R ≤ 6 rows, NC ≤ 4 chunks of
 * 16 columns: 6 × 4 accumulators, 4 loads of k and 6 broadcasts of q per 24 vdpbf16ps. */
TGT ALWAYS_INLINE void qk_block(int R, int NC, const uint32_t *qp, int hp, const uint32_t *kp, int nkp, float scale,
                                float *s) {
    __m512 c[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) c[r][n] = _mm512_setzero_ps();
    for (int p = 0; p < hp; p++) {
        __m512bh b[4];
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) b[n] = (__m512bh)_mm512_loadu_si512(kp + (size_t)p * nkp + 16 * n);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512bh a = (__m512bh)_mm512_set1_epi32((int)qp[(size_t)r * hp + p]);
#pragma GCC unroll 4
            for (int n = 0; n < NC; n++) c[r][n] = _mm512_dpbf16_ps(c[r][n], a, b[n]);
        }
    }
    __m512 vs = _mm512_set1_ps(scale);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) _mm512_storeu_ps(s + (size_t)r * nkp + 16 * n, _mm512_mul_ps(c[r][n], vs));
}

/* acc[r, c..c+16·NC) = acc·corr[r] (or 0 when first) + Σ_jp dot(p pair jp of row r, vp[jp][c..]) for R ≤ 6
 * rows, NC ≤ 4 chunks of 16 columns (the online-softmax rescale folded into the accumulator load); with inv
 * (the last key tile) out[r, c..] = acc · inv[r] instead of storing acc. */
TGT ALWAYS_INLINE void pv_block(int R, int NC, const uint32_t *pp, int np, const uint32_t *vp, int hd, float *acc,
                                const float *corr, int first, const float *inv, float *out, int ld_o) {
    __m512 c[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++)
            c[r][n] = first ? _mm512_setzero_ps()
                            : _mm512_mul_ps(_mm512_loadu_ps(acc + (size_t)r * hd + 16 * n), _mm512_set1_ps(corr[r]));
    for (int jp = 0; jp < np; jp++) {
        __m512bh b[4];
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) b[n] = (__m512bh)_mm512_loadu_si512(vp + (size_t)jp * hd + 16 * n);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512bh a = (__m512bh)_mm512_set1_epi32((int)pp[(size_t)r * np + jp]);
#pragma GCC unroll 4
            for (int n = 0; n < NC; n++) c[r][n] = _mm512_dpbf16_ps(c[r][n], a, b[n]);
        }
    }
    if (inv) {   /* last key tile: out = acc · (1/l) */
#pragma GCC unroll 6
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int n = 0; n < NC; n++)
                _mm512_storeu_ps(out + (size_t)r * ld_o + 16 * n, _mm512_mul_ps(c[r][n], _mm512_set1_ps(inv[r])));
        return;
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) _mm512_storeu_ps(acc + (size_t)r * hd + 16 * n, c[r][n]);
}

#define ROWS_DISPATCH(F, R, ...) \
    switch (R) { \
    case 6: F(6, __VA_ARGS__); break; case 5: F(5, __VA_ARGS__); break; case 4: F(4, __VA_ARGS__); break; \
    case 3: F(3, __VA_ARGS__); break; case 2: F(2, __VA_ARGS__); break; default: F(1, __VA_ARGS__); break; }

/* One group of R ≤ 6 query rows against a key tile of nkp (a multiple of 32) keys. */
TGT static void qk_avx512(int R, const uint32_t *qp, int hd, const uint32_t *kp, int nkp, float scale, float *s) {
    int hp = hd / 2;
    for (int j = 0; j < nkp; j += 64) {
        if (j + 64 <= nkp) ROWS_DISPATCH(qk_block, R, 4, qp, hp, kp + j, nkp, scale, s + j)
        else ROWS_DISPATCH(qk_block, R, 2, qp, hp, kp + j, nkp, scale, s + j)
    }
}

TGT static void pv_avx512(int R, const uint32_t *pp, int nkp, const uint32_t *vp, int hd, float *acc, const float *corr,
                          int first, const float *inv, float *out, int ld_o) {
    int np = nkp / 2;
    for (int c = 0; c < hd; c += 64) {
        if (c + 64 <= hd) ROWS_DISPATCH(pv_block, R, 4, pp, np, vp + c, hd, acc + c, corr, first, inv, out + c, ld_o)
        else ROWS_DISPATCH(pv_block, R, 2, pp, np, vp + c, hd, acc + c, corr, first, inv, out + c, ld_o)
    }
}

/* ---- packing and the online softmax (shared by both paths, AVX2 baseline) ---- */

/* d[i] = bf16(x[i]) for i < n (RNE, NaN kept NaN: identical to cvx_f32_to_bf16), zero to n_pad. */
static void to_bf16_row(const float *x, int n, uint16_t *d, int n_pad) {
    int i = 0;
#ifdef __AVX2__
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), qnan = _mm256_set1_epi32(0x40);
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int h = 0; h < 2; h++) {
            __m256 v = _mm256_loadu_ps(x + i + 8 * h);
            __m256i b = _mm256_castps_si256(v);
            __m256i rnd = _mm256_add_epi32(b, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(b, 16), one)));
            rnd = _mm256_srli_epi32(rnd, 16);
            __m256i nan = _mm256_or_si256(_mm256_srli_epi32(b, 16), qnan);
            r[h] = _mm256_blendv_epi8(rnd, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
        }
        /* packus interleaves 128-bit halves: a0-3 b0-3 a4-7 b4-7; permute back to a0-7 b0-7 */
        __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256((__m256i *)(d + i), pk);
    }
#endif
    for (; i < n; i++) d[i] = rb(x[i]);
    for (; i < n_pad; i++) d[i] = 0;
}

static float row_max(const float *s, int n, float mx) {
    int j = 0;
#ifdef __AVX2__
    if (n >= 8) {
        __m256 vm = _mm256_loadu_ps(s);
        for (j = 8; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + j));
        float t[8];
        _mm256_storeu_ps(t, vm);
        for (int i = 0; i < 8; i++) mx = t[i] > mx ? t[i] : mx;
    }
#endif
    for (; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

/* s[j] = e^(s[j] − mx); returns Σ s[j] (8 partial sums, then the tail). */
static float exp_sub_sum(float *s, int n, float mx) {
    int j = 0;
    float sum = 0;
#ifdef __AVX2__
    __m256 vs = _mm256_setzero_ps(), vmx = _mm256_set1_ps(mx);
    for (; j + 8 <= n; j += 8) {
        __m256 e = cvx_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmx));
        _mm256_storeu_ps(s + j, e);
        vs = _mm256_add_ps(vs, e);
    }
    float t[8];
    _mm256_storeu_ps(t, vs);
    for (int i = 0; i < 8; i++) sum += t[i];
#endif
    for (; j < n; j++) {
        float x = s[j] - mx;
        s[j] = expf(x < -87.0f ? -87.0f : x);
        sum += s[j];
    }
    return sum;
}

/* ---- the same three row operations on 16 lanes (AVX-512 path); same exp polynomial as cvx_exp8 ---- */

/* e^x for x ≤ 0 or NaN (x = s − max: never above 0), bit-identical to cvx_exp8 there: the upper clamp
 * is a no-op and scalef(y, n) = y·2^n is the same correctly rounded product as y · (float)2^n. */
TGT static inline __m512 exp16_nonpos(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));   /* NaN → −87, as cvx_exp8 */
    __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, fx);
}

TGT static float row_max16(const float *s, int n, float mx) {
    __m512 vm = _mm512_set1_ps(mx);
    int j = 0;
    for (; j + 16 <= n; j += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(s + j));
    if (j < n) vm = _mm512_mask_max_ps(vm, (__mmask16)((1u << (n - j)) - 1), vm, _mm512_maskz_loadu_ps((__mmask16)((1u << (n - j)) - 1), s + j));
    return _mm512_reduce_max_ps(vm);
}

/* d[j] = bf16(e^(s[j] − mx)) (vcvtne2ps2bf16: RNE) for j < n, zero up to n_pad (a multiple of 32); returns
 * Σ e^(s[j] − mx) in f32, summed in 16 lanes in the order of j, then reduced: one pass over the row. */
TGT static float exp_sum_pack16(const float *s, int n, float mx, uint16_t *d, int n_pad) {
    __m512 vs = _mm512_setzero_ps(), vmx = _mm512_set1_ps(mx);
    for (int j = 0; j < n_pad; j += 32) {
        int r0 = n - j, r1 = n - j - 16;
        __mmask16 k0 = r0 >= 16 ? 0xffff : r0 <= 0 ? 0 : (__mmask16)((1u << r0) - 1);
        __mmask16 k1 = r1 >= 16 ? 0xffff : r1 <= 0 ? 0 : (__mmask16)((1u << r1) - 1);
        __m512 e0 = _mm512_maskz_mov_ps(k0, exp16_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(k0, s + j), vmx)));
        vs = _mm512_mask_add_ps(vs, k0, vs, e0);
        __m512 e1 = _mm512_maskz_mov_ps(k1, exp16_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(k1, s + j + 16), vmx)));
        vs = _mm512_mask_add_ps(vs, k1, vs, e1);
        _mm512_storeu_si512(d + j, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
    }
    return _mm512_reduce_add_ps(vs);
}

/* Pack keys k0..k0+nk of one head (nkp = nk rounded up to 32, zero past nk):
 *   kp[d/2][j] = (k[j,d], k[j,d+1]),  vp[j/2][c] = (v[j,c], v[j+1,c]);  row: 2·hd bf16 of staging. */
static void pack_kv_tile(const float *k, const float *v, int ld_kv, int nk, int nkp, int hd, uint32_t *kp, uint32_t *vp,
                         uint16_t *row) {
    int hp = hd / 2;
    for (int j = 0; j < nkp; j++) {   /* keys past nk: zero (their scores are never read) */
        const uint32_t *kr = (const uint32_t *)row;
        if (j < nk) to_bf16_row(k + (size_t)j * ld_kv, hd, row, hd);
        for (int p = 0; p < hp; p++) kp[(size_t)p * nkp + j] = j < nk ? kr[p] : 0;
    }
    for (int jp = 0; jp < nkp / 2; jp++) {   /* interleave two bf16 rows of v into pairs */
        int j = 2 * jp;
        uint16_t *r0 = row, *r1 = row + hd;
        if (j < nk) to_bf16_row(v + (size_t)j * ld_kv, hd, r0, hd);
        else memset(r0, 0, 2 * (size_t)hd);
        if (j + 1 < nk) to_bf16_row(v + (size_t)(j + 1) * ld_kv, hd, r1, hd);
        else memset(r1, 0, 2 * (size_t)hd);
        uint32_t *vr = vp + (size_t)jp * hd;
        for (int c = 0; c < hd; c++) vr[c] = (uint32_t)r0[c] | (uint32_t)r1[c] << 16;
    }
}

/* nq ≤ QB query rows of one head against its packed keys: tile t of kp is [hd/2][nkp] at t·hd/2·KT, of vp
 * [nkp/2][hd] at t·KT/2·hd. Per key tile, groups of G query rows (6 on AVX-512: the group's scores
 * stay in L1 from QK through the softmax to PV; 48 portable) run QK, the online softmax, PV. */
static void attention_job(int fast, const float *q, int ld_q, const uint32_t *kp_h, const uint32_t *vp_h, float *out,
                          int ld_o, int nq, int Skv, int hd, float scale, const float *bias, size_t ld_bias,
                          scratch_bf16 *w) {
    int hp = hd / 2, G = fast ? 6 : QS;
    float *m = w->m, *l = w->l, *acc = w->acc, corr[QS], inv[QS];
    for (int i = 0; i < nq; i++) {   /* a bf16 row of q is its hd/2 pairs */
        m[i] = -INFINITY;
        l[i] = 0;
        to_bf16_row(q + (size_t)i * ld_q, hd, (uint16_t *)(w->qp + (size_t)i * hp), hd);
    }
    if (!fast) memset(acc, 0, sizeof(float) * (size_t)nq * hd);   /* the AVX-512 PV starts from zero itself */
    for (int k0 = 0; k0 < Skv; k0 += KT) {
        int nk = Skv - k0 < KT ? Skv - k0 : KT, nkp = (nk + 31) & ~31, np = nkp / 2;
        const uint32_t *kp = kp_h + (size_t)(k0 / KT) * hp * KT, *vp = vp_h + (size_t)(k0 / KT) * (KT / 2) * hd;
        for (int i0 = 0; i0 < nq; i0 += G) {
            int ns = nq - i0 < G ? nq - i0 : G;
            float *s = w->s;
            if (fast) qk_avx512(ns, w->qp + (size_t)i0 * hp, hd, kp, nkp, scale, s);
            else qk_portable(ns, w->qp + (size_t)i0 * hp, hd, kp, nkp, scale, s);
            for (int r = 0; r < ns; r++) {
                int i = i0 + r;
                float *sr = s + (size_t)r * nkp;
                if (bias) {
                    const float *br = bias + (size_t)i * ld_bias + k0;
                    for (int j = 0; j < nk; j++) sr[j] += br[j];
                }
                float mx = fast ? row_max16(sr, nk, m[i]) : row_max(sr, nk, m[i]);
                corr[r] = k0 == 0 ? 0.0f : expf(m[i] - mx);
                uint16_t *prow = (uint16_t *)(w->pp + (size_t)r * np);   /* p row = its pairs */
                if (fast) l[i] = l[i] * corr[r] + exp_sum_pack16(sr, nk, mx, prow, nkp);
                else {
                    l[i] = l[i] * corr[r] + exp_sub_sum(sr, nk, mx);
                    to_bf16_row(sr, nk, prow, nkp);
                    float *a = acc + (size_t)i * hd;
                    for (int d = 0; k0 && d < hd; d++) a[d] *= corr[r];
                }
                m[i] = mx;
            }
            if (fast) {
                int last = k0 + KT >= Skv;
                for (int r = 0; last && r < ns; r++) inv[r] = 1.0f / l[i0 + r];
                pv_avx512(ns, w->pp, nkp, vp, hd, acc + (size_t)i0 * hd, corr, k0 == 0, last ? inv : NULL,
                          out + (size_t)i0 * ld_o, ld_o);
            } else pv_portable(ns, w->pp, nkp, vp, hd, acc + (size_t)i0 * hd);
        }
    }
    for (int i = 0; !fast && i < nq; i++) {   /* the AVX-512 PV wrote out at the last key tile */
        float inv = 1.0f / l[i];
        for (int d = 0; d < hd; d++) out[(size_t)i * ld_o + d] = acc[(size_t)i * hd + d] * inv;
    }
}

/* Jobs: per group of HG heads, their K/V packed once (tiles shared out between the threads), then their
 * blocks of QB query rows. Two packed buffers alternate between groups, so no thread waits at the end of
 * a group's blocks: the barrier after packing group g+1 is what guarantees every block of group g−1 (same
 * buffer as g+1) is done. Packed memory: 2 buffers · HG heads · (K + V) · Skv·hd bf16 (HG: PACK_BYTES). */
void cvx_attention_bf16(const cvx_kernels *kc, const float *q, int ld_q, const float *k, const float *v, int ld_kv,
                        float *out, int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    if (Sq <= 0 || Skv <= 0) return;
    CVX_CHECK(hd % 2 == 0);
    int fast = cvx_kernels_bf16_native(kc) && cvx_kernels_cpu(kc)->avx512_bf16 && hd % 32 == 0;
    int qblocks = (Sq + QB - 1) / QB, ntiles = (Skv + KT - 1) / KT;
    size_t per_head = (size_t)ntiles * KT * hd / 2;   /* uint32 pairs of K (and as many of V) per head */
    size_t fit = PACK_BYTES / (2 * sizeof(uint32_t) * per_head);
    int HG = fit < 1 ? 1 : fit > (size_t)heads ? heads : (int)fit, groups = (heads + HG - 1) / HG;
    uint32_t *kvp = cvx_malloc(sizeof(uint32_t) * 4 * HG * per_head);   /* [2 buffers][HG heads][K, V][per_head] */
#pragma omp parallel
    {
        scratch_bf16 w;
        w.qp = cvx_malloc(sizeof(uint32_t) * (size_t)QB * hd / 2);
        w.s = cvx_alloc_f32((size_t)QS * KT);
        w.pp = cvx_malloc(sizeof(uint32_t) * (size_t)(QS * KT / 2 > hd ? QS * KT / 2 : hd));
        w.acc = cvx_alloc_f32((size_t)QB * hd);
        w.m = cvx_alloc_f32(QB);
        w.l = cvx_alloc_f32(QB);
        for (int g = 0; g < groups; g++) {
            int h0 = g * HG, ng = heads - h0 < HG ? heads - h0 : HG;
            uint32_t *buf = kvp + (size_t)(g % 2) * 2 * HG * per_head;   /* head h0+hh: K at 2·hh, V at 2·hh+1 */
#pragma omp for schedule(static)
            for (int ht = 0; ht < ng * ntiles; ht++) {
                int hh = ht / ntiles, h = h0 + hh, t = ht % ntiles, nk = Skv - t * KT < KT ? Skv - t * KT : KT;
                uint32_t *kp_h = buf + (size_t)2 * hh * per_head, *vp_h = kp_h + per_head;
                pack_kv_tile(k + (size_t)t * KT * ld_kv + (size_t)h * hd, v + (size_t)t * KT * ld_kv + (size_t)h * hd,
                             ld_kv, nk, (nk + 31) & ~31, hd, kp_h + (size_t)t * KT * hd / 2,
                             vp_h + (size_t)t * KT * hd / 2, (uint16_t *)w.pp);
            }
#pragma omp for schedule(dynamic, 1) nowait
            for (int job = 0; job < ng * qblocks; job++) {
                int hh = job / qblocks, h = h0 + hh, q0 = (job % qblocks) * QB, nq = Sq - q0 < QB ? Sq - q0 : QB;
                const uint32_t *kp_h = buf + (size_t)2 * hh * per_head, *vp_h = kp_h + per_head;
                const float *b = bias ? bias + ((size_t)h * Sq + q0) * Skv : NULL;
                attention_job(fast, q + (size_t)q0 * ld_q + (size_t)h * hd, ld_q, kp_h, vp_h,
                              out + (size_t)q0 * ld_o + (size_t)h * hd, ld_o, nq, Skv, hd, scale, b, (size_t)Skv, &w);
            }
        }
        free(w.qp); free(w.s); free(w.pp); free(w.acc); free(w.m); free(w.l);
    }
    free(kvp);
}

void cvx_attention_bf16_ref(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                            int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    double *s = cvx_malloc(sizeof(double) * (size_t)Skv);
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < Sq; i++) {
            const float *qi = q + (size_t)i * ld_q + (size_t)h * hd;
            double mx = -INFINITY, l = 0;
            for (int j = 0; j < Skv; j++) {
                const float *kj = k + (size_t)j * ld_kv + (size_t)h * hd;
                double acc = 0;
                for (int d = 0; d < hd; d++) acc += (double)cvx_bf16_to_f32(rb(qi[d])) * cvx_bf16_to_f32(rb(kj[d]));
                s[j] = (double)scale * acc + (bias ? bias[((size_t)h * Sq + i) * Skv + j] : 0.0);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < Skv; j++) {
                s[j] = exp(s[j] - mx);
                l += s[j];
            }
            for (int d = 0; d < hd; d++) {
                double acc = 0;
                for (int j = 0; j < Skv; j++)
                    acc += (double)cvx_bf16_to_f32(rb((float)s[j])) *
                           cvx_bf16_to_f32(rb(v[(size_t)j * ld_kv + (size_t)h * hd + d]));
                out[(size_t)i * ld_o + (size_t)h * hd + d] = (float)(acc / l);
            }
        }
    free(s);
}
