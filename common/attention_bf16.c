/* cvx_attention_bf16: attention with bf16 operands and f32 accumulation, online softmax in f32.
 *
 * Rounding points (the contract the reference and both kernels share): q, k, v are rounded to
 * bf16 (RNE); s = scale · Σ_d q·k accumulated in f32; bias added in f32; the running max m, the
 * exponentials p = e^(s−m), their sum l and the rescaling of the accumulator stay f32; p is rounded
 * to bf16 for the PV product, which accumulates in f32; out = acc / l.
 * The kernels run the softmax in base 2: log2(e) is folded into the scale (the scores are
 * s₂ = (scale·log2 e)·Σ q·k + log2 e·bias), so p = 2^(s₂−m₂) costs one exp2 (round, a degree-5
 * polynomial on [−½, ½], relative error ≤ 2.5e-7, times 2^n) instead of exp's range reduction.
 * The values are those of base e within f32 rounding; the errors against the double reference
 * (tests/common_attention.c, unchanged tolerances) and against f32 attention are unchanged.
 *
 * The K and V of a group of HG heads are packed once (shared by all threads, two buffers alternating
 * between groups), in tiles of KT keys:
 *   kp[d/2][j] = (k[j,d], k[j,d+1]) as bf16 pairs   (vdpbf16ps multiplies pairs along d), stored in
 *                blocks of 64 keys, [j/64][d/2][j%64] (each QK block reads 32·hd contiguous bytes)
 *   vp[j/2][c] = (v[j,c], v[j+1,c]) as bf16 pairs   (pairs along the keys for PV)
 * Job = (head, block of QB query rows); per key tile, groups of 6 query rows run QK (6 × 64 scores per
 * block: 24 accumulators, 4 loads of k and 6 broadcasts of q per 24 vdpbf16ps), the softmax, then PV
 * (6 × 64 outputs, the division by l folded into the last tile's store). The softmax of the AVX-512
 * path, no bias:
 *   - first key tile: two passes: the scores stored (6 × 256, in L1), the row max, then one pass
 *     2^(s₂−m) → Σ and bf16 pairs of p;
 *   - later tiles: fused into QK's epilogue against the max m the rows already have: x = s₂ − m,
 *     p = 2^x, Σp, max x and the bf16 pairs straight from the accumulators — no score store, no max
 *     pass, and m stays, so PV adds to its accumulator without a rescale. p may exceed 1 here (up to
 *     2^X_MAX; f32 and bf16 keep their relative precision); a tile whose scores climb more than
 *     X_MAX bits above m is redone the two-pass way (new max, rescale by 2^(m_old−m)).
 * With a bias (T5) every tile runs the two-pass way. Without AVX512_BF16 (or hd % 32 ≠ 0) and hd % 16 = 0:
 * the f32 kernels of attention.c on operands rounded at the same points (cvx_attn_f32_bf16, base e:
 * a product of two bf16 values is exact in f32, so widening costs nothing but the rounding; 4-5× the
 * portable loops below). Portable path (the rest: hd % 16 ≠ 0, and the int8 kernel's softmax/PV):
 * the same packing read as f32, groups of QS rows, the two-pass way, plain loops (its products give
 * the bits vdpbf16ps would). Before the base-2 softmax (commit 95accd8 and earlier) both paths gave
 * the bits of commit 5a77dc2; bench_attention prints a hash of the output. Which thread runs which
 * job never changes a result (tests/common_threads.c). */
#include "error.h"
#include "gemm_fast.h"
#include "ops.h"
#include "vecmath.h"
#include "attention_impl.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* QB query rows per job, QS per portable group, KT keys per tile; packed K/V of a group of heads: up to
 * PACK_BYTES per buffer (at least one head) — few barriers at short sequences, little memory at long. */
enum { QB = 256, QS = CVX_ATTN_GROUP, KT = 256, PACK_BYTES = 8 << 20 };
#define LOG2E 1.44269504088896341f
/* The fused softmax keeps a row's max from earlier key tiles while its new scores stay within X_MAX bits
 * above it (p ≤ 2^X_MAX: far from f32 / bf16 overflow); beyond, the tile is redone with the new max. */
#define X_MAX 24.0f

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
        for (int jb = 0; jb < nkp; jb += 64) {   /* blocks of 64 keys (the last may be 32) */
            int bw = nkp - jb < 64 ? nkp - jb : 64;
            const uint32_t *kb = kp + (size_t)jb * hp;
            for (int p = 0; p < hp; p++) {
                uint32_t a = qp[(size_t)r * hp + p];
                pair_axpy(sr + jb, kb + (size_t)p * bw, bw, lo_f(a), hi_f(a));
            }
        }
        for (int j = 0; j < nkp; j++) sr[j] *= scale;
    }
}

/* acc[r][c0..c0+8·NC) over R ≤ 4 rows in registers: for each key pair jp in order,
 * acc = acc + p₁·hi(v) + p₀·lo(v) (the order of pair_axpy, so the same bits: a product of two bf16 values
 * is exact in f32 unless it falls below 2^-126, so fma(a, b, c) = c + a·b rounded once, as the separate
 * multiply and add give (a subnormal product may differ in its last bits: vdpbf16ps flushes those); p:
 * the rows' bf16 p as f32 (p[r][2jp] = p₀, p[r][2jp+1] = p₁). */
static inline __attribute__((always_inline)) void pv_rows(int R, int NC, const float *p, int ldp, int np,
                                                          const uint32_t *vp, int hd, float *acc) {
    __m256 c[4][2], h[2], l[2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int n = 0; n < NC; n++) c[r][n] = _mm256_loadu_ps(acc + (size_t)r * hd + 8 * n);
    for (int jp = 0; jp < np; jp++) {
#pragma GCC unroll 2
        for (int n = 0; n < NC; n++) {
            __m256i w = _mm256_loadu_si256((const __m256i *)(vp + (size_t)jp * hd + 8 * n));
            h[n] = hi8(w), l[n] = lo8(w);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m256 a0 = _mm256_broadcast_ss(p + (size_t)r * ldp + 2 * jp), a1 = _mm256_broadcast_ss(p + (size_t)r * ldp + 2 * jp + 1);
#pragma GCC unroll 2
            for (int n = 0; n < NC; n++) c[r][n] = _mm256_fmadd_ps(a0, l[n], _mm256_fmadd_ps(a1, h[n], c[r][n]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int n = 0; n < NC; n++) _mm256_storeu_ps(acc + (size_t)r * hd + 8 * n, c[r][n]);
}

#define PV_ROWS(NC, ...) \
    switch (R) { \
    case 4: pv_rows(4, NC, __VA_ARGS__); break; case 3: pv_rows(3, NC, __VA_ARGS__); break; \
    case 2: pv_rows(2, NC, __VA_ARGS__); break; default: pv_rows(1, NC, __VA_ARGS__); break; }

/* acc[r] += Σ_jp p-pair(r, jp) · vp[jp] for ns rows: blocks of 4 rows × 16 (then 8) columns in registers,
 * the columns past a multiple of 8 one at a time; p [ns][nkp] the rows' bf16-rounded p as f32. */
static void pv_portable(int ns, const float *p, int nkp, const uint32_t *vp, int hd, float *acc) {
    int np = nkp / 2, c8 = hd & ~7;
    for (int r0 = 0; r0 < ns; r0 += 4) {
        int R = ns - r0 < 4 ? ns - r0 : 4;
        const float *pr = p + (size_t)r0 * nkp;
        float *ar = acc + (size_t)r0 * hd;
        int c = 0;
        for (; c + 16 <= c8; c += 16) PV_ROWS(2, pr, nkp, np, vp + c, hd, ar + c)
        if (c < c8) PV_ROWS(1, pr, nkp, np, vp + c, hd, ar + c)
    }
    for (int r = 0; c8 < hd && r < ns; r++)
        for (int jp = 0; jp < np; jp++) {
            float a0 = p[(size_t)r * nkp + 2 * jp], a1 = p[(size_t)r * nkp + 2 * jp + 1];
            for (int c = c8; c < hd; c++)
                acc[(size_t)r * hd + c] = acc[(size_t)r * hd + c] + a1 * hi_f(vp[(size_t)jp * hd + c]) +
                                          a0 * lo_f(vp[(size_t)jp * hd + c]);
        }
}

/* ---- the two products: AVX512_BF16 ---- */

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* 2^x (x = s₂ − max: ≤ 0 in the two-pass softmax, ≤ X_MAX in the fused one; or NaN): x clamped to
 * [−126, ·], a NaN kept (2^NaN = NaN: a NaN score makes the row's output NaN, which the sampler's
 * check names, instead of a weight of 2^−126; issue 37), n = round(x) (half to even), f = x − n ∈ [−½, ½], 2^f = 1 + f·q(f) (degree 5,
 * fitted to the relative error: ≤ 2.5e-7), times 2^n: a normal float, so the product is correctly
 * rounded. The 1-, 8- and 16-lane versions (FMAs; vscalefps on AVX-512) give the same bits. */
#define EXP2_C5 1.3216848794e-03f
#define EXP2_C4 9.6667973398e-03f
#define EXP2_C3 5.5508345648e-02f
#define EXP2_C2 2.4022317586e-01f
#define EXP2_C1 6.9314693740e-01f

/* 2^x on 16 lanes: exp2_nonpos8's operations, vscalefps for the product with 2^n. */
TGT static inline __m512 exp2_16(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-126.0f), x);   /* NaN stays: vmaxps returns its second operand */
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    __m512 y = _mm512_set1_ps(EXP2_C5);
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(EXP2_C4));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(EXP2_C3));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(EXP2_C2));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(EXP2_C1));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

/* c[r][n] = Σ_p dot(q pair p of row r, kp[p][16n..16n+16)) for R ≤ 6 rows, NC ≤ 4 chunks of 16 keys:
 * 6 × 4 accumulators, 4 loads of k and 6 broadcasts of q per 24 vdpbf16ps. */
TGT ALWAYS_INLINE void qk_dots(int R, int NC, const uint32_t *qp, int hp, const uint32_t *kp, int kst, __m512 c[6][4]) {
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) c[r][n] = _mm512_setzero_ps();
    for (int p = 0; p < hp; p++) {
        __m512bh b[4];
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) b[n] = (__m512bh)_mm512_loadu_si512(kp + (size_t)p * kst + 16 * n);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512bh a = (__m512bh)_mm512_set1_epi32((int)qp[(size_t)r * hp + p]);
#pragma GCC unroll 4
            for (int n = 0; n < NC; n++) c[r][n] = _mm512_dpbf16_ps(c[r][n], a, b[n]);
        }
    }
}

/* s[r, j..j+16·NC) = scale · (the dots of qk_dots): the scores of the two-pass softmax. */
TGT ALWAYS_INLINE void qk_block(int R, int NC, const uint32_t *qp, int hp, const uint32_t *kp, int nkp, float scale,
                                float *s) {
    __m512 c[6][4];
    qk_dots(R, NC, qp, hp, kp, 16 * NC, c);
    __m512 vs = _mm512_set1_ps(scale);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) _mm512_storeu_ps(s + (size_t)r * nkp + 16 * n, _mm512_mul_ps(c[r][n], vs));
}

/* The products of qk_block fused with the softmax of a key tile after the first (no bias): the rows keep
 * the maxima m (base 2) of the earlier tiles, and the epilogue takes each score from its accumulator to
 *   x = s₂ − m = fma(acc, scale₂, −m),  p = 2^x (lanes of keys past `valid`: 0),
 *   Σp and max x per row in 16 lanes (vsum, vmax: summed in the order of the keys), p as bf16 into the
 *   row's pairs (pp, nkp bf16 per row) — the scores are never stored, no separate max and exp passes.
 * A row whose max x exceeds X_MAX (its scores grew by more than X_MAX bits since m) is redone by the
 * caller the two-pass way, before anything of this tile is used. */
TGT ALWAYS_INLINE void qk_exp_block(int R, int NC, const uint32_t *qp, int hp, const uint32_t *kp, int nkp,
                                    float scale, const float *m, int valid, uint16_t *pp, __m512 *vsum, __m512 *vmax) {
    __m512 c[6][4];
    qk_dots(R, NC, qp, hp, kp, 16 * NC, c);
    /* the raw scores to L1 first: the exp below then has the registers to itself (no spills) */
    __m512 sc[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) sc[r][n] = c[r][n];
    const __m512 vs = _mm512_set1_ps(scale);
    if (valid >= 16 * NC) {   /* every key real (all but the last block of the last tile) */
        for (int r = 0; r < R; r++) {
            const __m512 nm = _mm512_set1_ps(-m[r]);
            __m512 sum = vsum[r], mx = vmax[r];
            for (int n = 0; n < NC; n += 2) {
                __m512 x0 = _mm512_fmadd_ps(sc[r][n], vs, nm), x1 = _mm512_fmadd_ps(sc[r][n + 1], vs, nm);
                mx = _mm512_max_ps(mx, _mm512_max_ps(x0, x1));
                __m512 e0 = exp2_16(x0), e1 = exp2_16(x1);
                sum = _mm512_add_ps(_mm512_add_ps(sum, e0), e1);
                _mm512_storeu_si512(pp + (size_t)r * nkp + 16 * n, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
            }
            vsum[r] = sum, vmax[r] = mx;
        }
        return;
    }
    for (int r = 0; r < R; r++) {   /* keys past `valid`: p = 0, not in the max */
        const __m512 nm = _mm512_set1_ps(-m[r]);
        __m512 sum = vsum[r], mx = vmax[r];
        for (int n = 0; n < NC; n += 2) {
            int v0 = valid - 16 * n, v1 = v0 - 16;
            __mmask16 k0 = v0 >= 16 ? 0xffff : v0 <= 0 ? 0 : (__mmask16)((1u << v0) - 1);
            __mmask16 k1 = v1 >= 16 ? 0xffff : v1 <= 0 ? 0 : (__mmask16)((1u << v1) - 1);
            __m512 x0 = _mm512_fmadd_ps(sc[r][n], vs, nm), x1 = _mm512_fmadd_ps(sc[r][n + 1], vs, nm);
            mx = _mm512_mask_max_ps(mx, k0, mx, x0);
            mx = _mm512_mask_max_ps(mx, k1, mx, x1);
            __m512 e0 = _mm512_maskz_mov_ps(k0, exp2_16(x0)), e1 = _mm512_maskz_mov_ps(k1, exp2_16(x1));
            sum = _mm512_add_ps(_mm512_add_ps(sum, e0), e1);
            _mm512_storeu_si512(pp + (size_t)r * nkp + 16 * n, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
        }
        vsum[r] = sum, vmax[r] = mx;
    }
}

/* acc[r, c..c+16·NC) = acc·corr[r] (0 when first; acc itself when corr is NULL) + Σ_jp dot(p pair jp of row r,
 * vp[jp][c..]) for R ≤ 6 rows, NC ≤ 4 chunks of 16 columns (the online-softmax rescale folded into the
 * accumulator load); with inv (the last key tile) out[r, c..] = acc · inv[r] instead of storing acc. */
TGT ALWAYS_INLINE void pv_block(int R, int NC, const uint32_t *pp, int np, const uint32_t *vp, int hd, float *acc,
                                const float *corr, int first, const float *inv, float *out, int ld_o) {
    __m512 c[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++)
            c[r][n] = first  ? _mm512_setzero_ps()
                      : corr ? _mm512_mul_ps(_mm512_loadu_ps(acc + (size_t)r * hd + 16 * n), _mm512_set1_ps(corr[r]))
                             : _mm512_loadu_ps(acc + (size_t)r * hd + 16 * n);
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
        if (j + 64 <= nkp) ROWS_DISPATCH(qk_block, R, 4, qp, hp, kp + (size_t)j * hp, nkp, scale, s + j)
        else ROWS_DISPATCH(qk_block, R, 2, qp, hp, kp + (size_t)j * hp, nkp, scale, s + j)
    }
}

/* The fused QK + softmax of qk_exp_block over a key tile of nkp keys (nk real) for R ≤ 6 rows; vsum, vmax
 * start at 0 and −∞ (16 lanes per row). */
TGT static void qk_exp_avx512(int R, const uint32_t *qp, int hd, const uint32_t *kp, int nkp, int nk, float scale,
                              const float *m, uint16_t *pp, __m512 *vsum, __m512 *vmax) {
    int hp = hd / 2;
    for (int j = 0; j < nkp; j += 64) {
        if (j + 64 <= nkp)
            ROWS_DISPATCH(qk_exp_block, R, 4, qp, hp, kp + (size_t)j * hp, nkp, scale, m, nk - j, pp + j, vsum, vmax)
        else ROWS_DISPATCH(qk_exp_block, R, 2, qp, hp, kp + (size_t)j * hp, nkp, scale, m, nk - j, pp + j, vsum, vmax)
    }
}

/* One tile of the fused path for a group of R ≤ 6 rows: 1 with p in pp and l += Σp, or 0 (nothing changed)
 * when a row's scores exceed its max by more than X_MAX bits. */
TGT static int fused_tile(int R, const uint32_t *qp, int hd, const uint32_t *kp, int nkp, int nk, float scale,
                          const float *m, uint16_t *pp, float *l) {
    __m512 vsum[6], vmax[6];
    for (int r = 0; r < R; r++) vsum[r] = _mm512_setzero_ps(), vmax[r] = _mm512_set1_ps(-INFINITY);
    qk_exp_avx512(R, qp, hd, kp, nkp, nk, scale, m, pp, vsum, vmax);
    for (int r = 0; r < R; r++)
        if (!(_mm512_reduce_max_ps(vmax[r]) <= X_MAX)) return 0;   /* NaN too: the two-pass way decides */
    for (int r = 0; r < R; r++) l[r] += _mm512_reduce_add_ps(vsum[r]);
    return 1;
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

/* Prefetch the n floats of row x (a row of q, k or v some rows ahead: rows of a head sit a row stride of
 * heads·hd floats apart, usually a page or more, where the hardware prefetchers do not follow). */
static inline void prefetch_row(const float *x, int n) {
    for (int i = 0; i < n; i += 16) __builtin_prefetch(x + i);
}
enum { PF_ROWS = 6 };   /* rows ahead */

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

/* x[i] = (float)d[i] for i < n (a bf16 widened: its bits in the upper half). */
static void bf16_to_f32_row(const uint16_t *d, float *x, int n);

void cvx_attn_round_bf16_row(float *x, int n) {
    uint16_t b[256];
    for (int i = 0; i < n; i += 256) {
        int c = n - i < 256 ? n - i : 256;
        to_bf16_row(x + i, c, b, c);
        bf16_to_f32_row(b, x + i, c);
    }
}


static void bf16_to_f32_row(const uint16_t *d, float *x, int n) {
    int i = 0;
#ifdef __AVX2__
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(x + i),
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(d + i))), 16));
#endif
    for (; i < n; i++) x[i] = cvx_bf16_to_f32(d[i]);
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

/* exp2 on one lane (see EXP2_C5) */
static inline float exp2_nonpos1(float x) {
    if (x != x) return x;   /* NaN stays NaN */
    x = x > -126.0f ? x : -126.0f;
    float n = nearbyintf(x), f = x - n;
    float y = fmaf(fmaf(fmaf(fmaf(fmaf(EXP2_C5, f, EXP2_C4), f, EXP2_C3), f, EXP2_C2), f, EXP2_C1), f, 1.0f);
    return ldexpf(y, (int)n);
}

#ifdef __AVX2__
static inline __m256 exp2_nonpos8(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-126.0f), x);   /* NaN stays: vmaxps returns its second operand */
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n);
    __m256 y = _mm256_set1_ps(EXP2_C5);
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(EXP2_C4));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(EXP2_C3));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(EXP2_C2));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(EXP2_C1));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
#endif

/* d[i] = 2^x[i] for i < n. */
static void exp2_rows(float *d, const float *x, int n) {
    int i = 0;
#ifdef __AVX2__
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, exp2_nonpos8(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++) d[i] = exp2_nonpos1(x[i]);
}

/* s[j] = 2^(s[j] − mx); returns Σ s[j] (8 partial sums, then the tail). */
static float exp2_sub_sum(float *s, int n, float mx) {
    int j = 0;
    float sum = 0;
#ifdef __AVX2__
    __m256 vs = _mm256_setzero_ps(), vmx = _mm256_set1_ps(mx);
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp2_nonpos8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmx));
        _mm256_storeu_ps(s + j, e);
        vs = _mm256_add_ps(vs, e);
    }
    float t[8];
    _mm256_storeu_ps(t, vs);
    for (int i = 0; i < 8; i++) sum += t[i];
#endif
    for (; j < n; j++) {
        s[j] = exp2_nonpos1(s[j] - mx);
        sum += s[j];
    }
    return sum;
}

/* ---- the same row operations on 16 lanes (AVX-512 path) ---- */

TGT static float row_max16(const float *s, int n, float mx) {
    __m512 vm = _mm512_set1_ps(mx);
    int j = 0;
    for (; j + 16 <= n; j += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(s + j));
    if (j < n) vm = _mm512_mask_max_ps(vm, (__mmask16)((1u << (n - j)) - 1), vm, _mm512_maskz_loadu_ps((__mmask16)((1u << (n - j)) - 1), s + j));
    return _mm512_reduce_max_ps(vm);
}

/* d[j] = bf16(2^(s[j] − mx)) (vcvtne2ps2bf16: RNE) for j < n, zero up to n_pad (a multiple of 32); returns
 * Σ 2^(s[j] − mx) in f32, summed in 16 lanes in the order of j, then reduced: one pass over the row. */
TGT static float exp2_sum_pack16(const float *s, int n, float mx, uint16_t *d, int n_pad) {
    __m512 vs = _mm512_setzero_ps(), vmx = _mm512_set1_ps(mx);
    for (int j = 0; j < n_pad; j += 32) {
        int r0 = n - j, r1 = n - j - 16;
        __mmask16 k0 = r0 >= 16 ? 0xffff : r0 <= 0 ? 0 : (__mmask16)((1u << r0) - 1);
        __mmask16 k1 = r1 >= 16 ? 0xffff : r1 <= 0 ? 0 : (__mmask16)((1u << r1) - 1);
        __m512 e0 = _mm512_maskz_mov_ps(k0, exp2_16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k0, s + j), vmx)));
        vs = _mm512_mask_add_ps(vs, k0, vs, e0);
        __m512 e1 = _mm512_maskz_mov_ps(k1, exp2_16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k1, s + j + 16), vmx)));
        vs = _mm512_mask_add_ps(vs, k1, vs, e1);
        _mm512_storeu_si512(d + j, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
    }
    return _mm512_reduce_add_ps(vs);
}

/* Pack keys k0..k0+nk of one head (nkp = nk rounded up to 32, zero past nk):
 *   kp[d/2][j] = (k[j,d], k[j,d+1]) in blocks of 64 keys (the last of the tile 32 when nkp % 64 = 32):
 *   block jb at jb·hd/2, kp[jb + (d/2)·bw + j − jb] (bw its width); row: hd bf16 of staging. */
static void pack_k_tile(const float *k, int ld_kv, int nk, int nkp, int hd, uint32_t *kp, uint16_t *row) {
    int hp = hd / 2;
    for (int j = 0; j < nkp; j++) {   /* keys past nk: zero (their scores are never read) */
        const uint32_t *kr = (const uint32_t *)row;
        if (j + PF_ROWS < nk) prefetch_row(k + (size_t)(j + PF_ROWS) * ld_kv, hd);
        if (j < nk) to_bf16_row(k + (size_t)j * ld_kv, hd, row, hd);
        int jb = j & ~63, bw = nkp - jb < 64 ? nkp - jb : 64;
        uint32_t *kb = kp + (size_t)jb * hp + (j - jb);
        for (int p = 0; p < hp; p++) kb[(size_t)p * bw] = j < nk ? kr[p] : 0;
    }
}

/* vp[j/2][c] = (v[j,c], v[j+1,c]) for the nkp keys of a tile (zero past nk); row: 2·hd bf16 of staging. */
void cvx_attn_pack_v_tile(const float *v, int ld_kv, int nk, int nkp, int hd, uint32_t *vp, uint16_t *row) {
    for (int jp = 0; jp < nkp / 2; jp++) {   /* interleave two bf16 rows of v into pairs */
        int j = 2 * jp;
        uint16_t *r0 = row, *r1 = row + hd;
        for (int t = j + PF_ROWS; t < j + PF_ROWS + 2 && t < nk; t++) prefetch_row(v + (size_t)t * ld_kv, hd);
        if (j < nk) to_bf16_row(v + (size_t)j * ld_kv, hd, r0, hd);
        else memset(r0, 0, 2 * (size_t)hd);
        if (j + 1 < nk) to_bf16_row(v + (size_t)(j + 1) * ld_kv, hd, r1, hd);
        else memset(r1, 0, 2 * (size_t)hd);
        uint32_t *vr = vp + (size_t)jp * hd;
        for (int c = 0; c < hd; c++) vr[c] = (uint32_t)r0[c] | (uint32_t)r1[c] << 16;
    }
}

static void pack_kv_tile(const float *k, const float *v, int ld_kv, int nk, int nkp, int hd, uint32_t *kp, uint32_t *vp,
                         uint16_t *row) {
    pack_k_tile(k, ld_kv, nk, nkp, hd, kp, row);
    cvx_attn_pack_v_tile(v, ld_kv, nk, nkp, hd, vp, row);
}

/* The two-pass online softmax and PV of a group of ns rows (≤ 6 when fast, ≤ QS) against one key tile
 * (attention_impl.h). */
void cvx_attn_softmax_pv(int fast, int ns, float *s, int nk, int nkp, int first, int last, const float *bias,
                         size_t ld_bias, float *m, float *l, uint32_t *pp, const uint32_t *vp, int hd, float *acc,
                         float *out, int ld_o) {
    CVX_CHECK(ns <= (fast ? CVX_ATTN_GROUP_FAST : QS));
    int np = nkp / 2;
    float mx[QS], dm[QS], corr[QS], inv[QS];   /* the rows' new maxima; m_old − m_new for the rescale factors */
    for (int r = 0; r < ns; r++) {
        float *sr = s + (size_t)r * nkp;
        if (bias) {   /* in base 2 like the scores */
            const float *br = bias + (size_t)r * ld_bias;
            for (int j = 0; j < nk; j++) sr[j] += br[j] * LOG2E;
        }
        mx[r] = fast ? row_max16(sr, nk, m[r]) : row_max(sr, nk, m[r]);
        dm[r] = m[r] - mx[r];
    }
    exp2_rows(corr, dm, ns);   /* corr = 2^(m_old − m_new), one vector for the group */
    for (int r = 0; r < ns; r++) {
        float *sr = s + (size_t)r * nkp;
        if (first) corr[r] = 0.0f;
        uint16_t *prow = (uint16_t *)(pp + (size_t)r * np);   /* p row = its pairs */
        if (fast) l[r] = l[r] * corr[r] + exp2_sum_pack16(sr, nk, mx[r], prow, nkp);
        else {
            l[r] = l[r] * corr[r] + exp2_sub_sum(sr, nk, mx[r]);
            to_bf16_row(sr, nk, prow, nkp);
            bf16_to_f32_row(prow, sr, nkp);   /* p as PV reads it */
            float *a = acc + (size_t)r * hd;
            for (int d = 0; !first && d < hd; d++) a[d] *= corr[r];
        }
        m[r] = mx[r];
    }
    if (fast) {
        for (int r = 0; last && r < ns; r++) inv[r] = 1.0f / l[r];
        pv_avx512(ns, pp, nkp, vp, hd, acc, corr, first, last ? inv : NULL, out, ld_o);
    } else pv_portable(ns, s, nkp, vp, hd, acc);
}

void cvx_attn_finish(int fast, int nq, const float *l, const float *acc, int hd, float *out, int ld_o) {
    for (int i = 0; !fast && i < nq; i++) {   /* the AVX-512 PV wrote out at the last key tile */
        float inv = 1.0f / l[i];
        for (int d = 0; d < hd; d++) out[(size_t)i * ld_o + d] = acc[(size_t)i * hd + d] * inv;
    }
}

/* nq ≤ QB query rows of one head against its packed keys: tile t of kp is nkp·hd/2 pairs at t·hd/2·KT, of vp
 * [nkp/2][hd] at t·KT/2·hd. Per key tile, groups of G query rows (6 on AVX-512: the group's scores
 * stay in L1 from QK through the softmax to PV; 48 portable) run QK, the online softmax, PV. */
static void attention_job(int fast, const float *q, int ld_q, const uint32_t *kp_h, const uint32_t *vp_h, float *out,
                          int ld_o, int nq, int Skv, int hd, float scale, const float *bias, size_t ld_bias,
                          scratch_bf16 *w) {
    int hp = hd / 2, G = fast ? 6 : QS;
    float *m = w->m, *l = w->l, *acc = w->acc, inv[QS];
    for (int i = 0; i < nq; i++) {   /* a bf16 row of q is its hd/2 pairs */
        m[i] = -INFINITY;
        l[i] = 0;
        if (i + PF_ROWS < nq) prefetch_row(q + (size_t)(i + PF_ROWS) * ld_q, hd);
        to_bf16_row(q + (size_t)i * ld_q, hd, (uint16_t *)(w->qp + (size_t)i * hp), hd);
    }
    if (!fast) memset(acc, 0, sizeof(float) * (size_t)nq * hd);   /* the AVX-512 PV starts from zero itself */
    for (int k0 = 0; k0 < Skv; k0 += KT) {
        int nk = Skv - k0 < KT ? Skv - k0 : KT, nkp = (nk + 31) & ~31;
        const uint32_t *kp = kp_h + (size_t)(k0 / KT) * hp * KT, *vp = vp_h + (size_t)(k0 / KT) * (KT / 2) * hd;
        for (int i0 = 0; i0 < nq; i0 += G) {
            int ns = nq - i0 < G ? nq - i0 : G, last = k0 + KT >= Skv;
            if (fast && !bias && k0 > 0 &&
                fused_tile(ns, w->qp + (size_t)i0 * hp, hd, kp, nkp, nk, scale, m + i0, (uint16_t *)w->pp, l + i0)) {
                for (int r = 0; last && r < ns; r++) inv[r] = 1.0f / l[i0 + r];
                pv_avx512(ns, w->pp, nkp, vp, hd, acc + (size_t)i0 * hd, NULL, 0, last ? inv : NULL,
                          out + (size_t)i0 * ld_o, ld_o);
                continue;
            }
            float *s = w->s;   /* the two-pass way: scores, max, then p */
            if (fast) qk_avx512(ns, w->qp + (size_t)i0 * hp, hd, kp, nkp, scale, s);
            else qk_portable(ns, w->qp + (size_t)i0 * hp, hd, kp, nkp, scale, s);
            cvx_attn_softmax_pv(fast, ns, s, nk, nkp, k0 == 0, last, bias ? bias + (size_t)i0 * ld_bias + k0 : NULL,
                                ld_bias, m + i0, l + i0, w->pp, vp, hd, acc + (size_t)i0 * hd, out + (size_t)i0 * ld_o,
                                ld_o);
        }
    }
    cvx_attn_finish(fast, nq, l, acc, hd, out, ld_o);
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
#if defined(__AVX2__) && defined(__FMA__)
    if (!fast && hd % 16 == 0) {   /* no bf16 units: the f32 kernels on bf16-rounded operands */
        cvx_attn_f32_bf16(kc && cvx_kernels_avx512(kc), q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
        return;
    }
#endif
    const float scale2 = scale * LOG2E;   /* the scores in base 2 */
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
                              out + (size_t)q0 * ld_o + (size_t)h * hd, ld_o, nq, Skv, hd, scale2, b, (size_t)Skv, &w);
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
