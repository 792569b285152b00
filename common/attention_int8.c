/* cvx_attention_int8: SageAttention-style attention (Zhang et al. 2024, "SageAttention: accurate 8-bit
 * attention"), opt-in: q and k quantised to int8 for QKᵀ, softmax and PV as cvx_attention_bf16.
 *
 * Rounding points (the contract the reference and every path share):
 *   - K smoothed: per head and channel, μ_d = (f32) mean over the Skv keys of k[·,d] (summed in double,
 *     in key order); k'[j,d] = k[j,d] − μ_d (f32). Exact under softmax: q·μ is the same for every key
 *     of a query row, a constant added to the row's scores. It takes out the channel offsets K carries
 *     in real models, which would otherwise set the int8 range and leave the varying part few levels.
 *   - blocks: K in blocks of KBLK = 64 keys, q in blocks of QBLK = 128 query rows (SageAttention's
 *     defaults), per head, counted from key / row 0 (independent of threads and jobs): scale =
 *     absmax/127 over the block's rows × hd values, code = round-half-even(x · (127/absmax)) clamped to
 *     ±127 (an all-zero block: codes 0, scale 0);
 *   - scores (base 2): s₂ = (float)Σ_d cq·ck · ((scale_q · (scale·log2 e)) · scale_k), the integer sum
 *     exact in int32 (|Σ| ≤ 127²·hd < 2^24, so its conversion to float is exact too); bias as the bf16
 *     kernel (f32, ·log2 e);
 *   - then cvx_attn_softmax_pv (attention_impl.h): the online softmax in f32, p and v rounded to bf16,
 *     PV accumulated in f32 (vdpbf16ps where the CPU has AVX512_BF16 and hd % 32 = 0, else the
 *     portable products, which give the same bits).
 * So every QK path gives the same integer sums and the same output bits; they differ from the
 * reference (double softmax and PV sums) as the bf16 kernel does from its own.
 *
 * QK paths (chosen per call from the CPU, or forced through cvx_kernels_set_qdot's q8_kernel, as the
 * quantized linears are): K codes packed per tile of KT keys in blocks of 16 keys, [j/16][d/4][16][4]
 * (one 64-byte line: 16 keys × 4 channels; hd padded to a multiple of 4 with zero codes):
 *   avx512-vnni: vpdpbusd (u8 × s8, four products per int32 lane) with q offset to unsigned
 *                (q + 128 = q ^ 0x80) and the sum started at −128·Σ_d ck[j,d] (per key, packed
 *                beside the codes): 6 rows × 64 keys = 24 zmm accumulators;
 *   avx2:        vpmaddubsw(|q|, sign(k, q)) + vpmaddwd(·, 1): the sign moved onto k so the u8
 *                operand is |q| ≤ 127 and a pair sum ≤ 2·127·127 = 32258 cannot saturate int16;
 *                4 rows × 16 keys;
 *   scalar:      plain loops over the same layout.
 *
 * cvx_attention_int8_pv8 (--attention int8pv) replaces the softmax and PV too: its own online softmax
 * (one exp2 polynomial, 16 lanes or scalar, the same bits), p in u8 per row and key tile, V in s8 per
 * channel, PV by vpdpbusd or scalar loops (exact integer sums): rounding points at "int8 PV" below. */
#include "attention_impl.h"
#include "error.h"
#include "gemm_fast.h"
#include "gemm_quant.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* QB query rows per job (a multiple of QBLK), KT keys per tile (a multiple of KBLK and of 32);
 * packed K/V of a group of heads up to PACK_BYTES per buffer (at least one head). */
enum { QB = 256, QBLK = 128, KBLK = 64, KT = 256, KB = 16, PACK_BYTES = 8 << 20 };
#define LOG2E 1.44269504088896341f

typedef enum { QK_SCALAR = 0, QK_AVX2 = 1, QK_VNNI = 2 } qk_path;

/* ---- quantisation (shared by the reference and the kernels) ---- */

/* round half to even through the float adder; exact for |v| ≤ 2^22 (here |v| ≤ 127) */
static inline int8_t rne_code(float v) {
    v = v >= -127.0f ? (v <= 127.0f ? v : 127.0f) : -127.0f;   /* NaN → −127 */
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (int8_t)((i & 0x007fffff) - 0x00400000);
}

/* mean[d] = (f32) Σ_j k[j,d] / Skv, summed in double in key order. */
static void k_mean(const float *k, int ld_kv, int Skv, int hd, float *mean) {
    double *acc = cvx_malloc(sizeof(double) * (size_t)hd);
    for (int d = 0; d < hd; d++) acc[d] = 0;
    for (int j = 0; j < Skv; j++)
        for (int d = 0; d < hd; d++) acc[d] += k[(size_t)j * ld_kv + d];
    for (int d = 0; d < hd; d++) mean[d] = (float)(acc[d] / Skv);
    free(acc);
}

/* One block of n rows × hd values (row r at x + r·ld, minus sub[d] when sub): codes [n][ldc] (zero
 * from hd to ldc); returns the block's scale absmax/127. */
static float quant_block(const float *x, int ld, int n, int hd, const float *sub, int8_t *codes, int ldc) {
    float mx = 0;
    for (int r = 0; r < n; r++)
        for (int d = 0; d < hd; d++) {
            float a = fabsf(sub ? x[(size_t)r * ld + d] - sub[d] : x[(size_t)r * ld + d]);
            mx = a > mx || a != a ? a : mx;   /* a NaN (Inf) makes the scale NaN (Inf): every score of */
        }                                      /* the block non-finite, as in f32 (issue 37) */
    float inv = mx > 0 && mx < INFINITY ? 127.0f / mx : 0.0f;
    for (int r = 0; r < n; r++) {
        for (int d = 0; d < hd; d++)
            codes[(size_t)r * ldc + d] = rne_code((sub ? x[(size_t)r * ld + d] - sub[d] : x[(size_t)r * ld + d]) * inv);
        for (int d = hd; d < ldc; d++) codes[(size_t)r * ldc + d] = 0;
    }
    return mx / 127.0f;
}

/* ---- the packed K of a head: per tile t, codes at t·KT·hd4·4, scales at t·KT/KBLK, Σ codes at t·KT ---- */

typedef struct {
    int8_t *kq;      /* [tiles][KT/16][hd4][16][4] */
    float *ks;       /* [tiles][KT/KBLK] */
    int32_t *ksum;   /* [tiles][KT] */
    uint32_t *vp;    /* [tiles][KT/2][hd] bf16 pairs (bf16 PV) */
    const float *mean;
    int8_t *vq;      /* [tiles][KT/4][hd16][4] V codes (int8 PV) */
    const float *vs; /* [hd16] V scale per channel (int8 PV) */
} head_pack;

/* Keys k0.. of one tile (nk real, nkp = nk rounded up to 32: codes zero past nk): smoothed, quantised
 * per KBLK, packed; codes: KBLK·hd4·4 bytes of staging. */
static void pack_k_tile(const float *k, int ld_kv, int nk, int nkp, int hd, const float *mean, int8_t *kq, float *ks,
                        int32_t *ksum, int8_t *codes) {
    int hd4 = (hd + 3) / 4, ldc = 4 * hd4;
    for (int b0 = 0; b0 < nkp; b0 += KBLK) {
        int n = nk - b0 < KBLK ? (nk - b0 > 0 ? nk - b0 : 0) : KBLK, nb = nkp - b0 < KBLK ? nkp - b0 : KBLK;
        ks[b0 / KBLK] = n > 0 ? quant_block(k + (size_t)b0 * ld_kv, ld_kv, n, hd, mean, codes, ldc) : 0.0f;
        memset(codes + (size_t)n * ldc, 0, (size_t)(nb - n) * ldc);
        for (int j = 0; j < nb; j++) {
            const int8_t *c = codes + (size_t)j * ldc;
            int jj = b0 + j, s = 0;
            int8_t *dst = kq + (size_t)(jj / KB) * hd4 * 4 * KB + (jj % KB) * 4;
            for (int d4 = 0; d4 < hd4; d4++) memcpy(dst + (size_t)d4 * 4 * KB, c + 4 * d4, 4);
            for (int d = 0; d < ldc; d++) s += c[d];
            ksum[jj] = s;
        }
    }
}

/* ---- QKᵀ: s[r][j] = (float)Σ cq·ck · (qs[r] · ks[j / KBLK]) for ns rows and the nkp keys of a tile ---- */

/* q codes of the job's rows: qc [rows][hd4·4] signed; qx [rows][hd4·4] |q| (AVX2) or q ^ 0x80 (VNNI) */
typedef struct {
    const int8_t *qc;
    const uint8_t *qx;
    const float *qs;
    int hd4;
} qrows;

static void qk_scalar(int ns, const qrows *q, const int8_t *kq, const float *ks, int nkp, float *s) {
    int hd4 = q->hd4;
    for (int r = 0; r < ns; r++)
        for (int j = 0; j < nkp; j++) {
            const int8_t *kb = kq + (size_t)(j / KB) * hd4 * 4 * KB + (j % KB) * 4, *qr = q->qc + (size_t)r * 4 * hd4;
            int32_t dot = 0;
            for (int d4 = 0; d4 < hd4; d4++)
                for (int t = 0; t < 4; t++) dot += (int32_t)qr[4 * d4 + t] * kb[(size_t)d4 * 4 * KB + t];
            s[(size_t)r * nkp + j] = (float)dot * (q->qs[r] * ks[j / KBLK]);
        }
}

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* 4 code bytes as one int32 (to broadcast) */
static inline int32_t ld4(const void *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return x;
}
#define AVX2_FN __attribute__((target("avx2,fma")))

/* R ≤ 4 rows × one block of 16 keys: 8 int32 accumulators. */
ALWAYS_INLINE AVX2_FN void qk_avx2_block(int R, const qrows *q, int r0, const int8_t *kb, float ksc, int nkp,
                                         float *s) {
    const int hd4 = q->hd4;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i c[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) c[r][0] = c[r][1] = _mm256_setzero_si256();
    const int8_t *qc = q->qc + (size_t)r0 * 4 * hd4;
    const uint8_t *qa = q->qx + (size_t)r0 * 4 * hd4;
    for (int d4 = 0; d4 < hd4; d4++) {
        __m256i k0 = _mm256_loadu_si256((const __m256i *)(kb + (size_t)d4 * 64));
        __m256i k1 = _mm256_loadu_si256((const __m256i *)(kb + (size_t)d4 * 64 + 32));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m256i a = _mm256_set1_epi32(ld4(qa + 4 * ((size_t)r * hd4 + d4)));
            __m256i sg = _mm256_set1_epi32(ld4(qc + 4 * ((size_t)r * hd4 + d4)));
            __m256i p0 = _mm256_maddubs_epi16(a, _mm256_sign_epi8(k0, sg));
            __m256i p1 = _mm256_maddubs_epi16(a, _mm256_sign_epi8(k1, sg));
            c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(p0, ones));
            c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(p1, ones));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        __m256 f = _mm256_set1_ps(q->qs[r0 + r] * ksc);
        _mm256_storeu_ps(s + (size_t)r * nkp, _mm256_mul_ps(_mm256_cvtepi32_ps(c[r][0]), f));
        _mm256_storeu_ps(s + (size_t)r * nkp + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(c[r][1]), f));
    }
}

static AVX2_FN void qk_avx2(int ns, const qrows *q, const int8_t *kq, const float *ks, int nkp, float *s) {
    const size_t bstride = (size_t)q->hd4 * 4 * KB;
    for (int r0 = 0; r0 < ns; r0 += 4) {
        int R = ns - r0 < 4 ? ns - r0 : 4;
        float *sr = s + (size_t)r0 * nkp;
        for (int j = 0; j < nkp; j += KB) {
            const int8_t *kb = kq + (size_t)(j / KB) * bstride;
            float ksc = ks[j / KBLK];
            switch (R) {
            case 4: qk_avx2_block(4, q, r0, kb, ksc, nkp, sr + j); break;
            case 3: qk_avx2_block(3, q, r0, kb, ksc, nkp, sr + j); break;
            case 2: qk_avx2_block(2, q, r0, kb, ksc, nkp, sr + j); break;
            default: qk_avx2_block(1, q, r0, kb, ksc, nkp, sr + j); break;
            }
        }
    }
}

#define VNNI_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

/* R ≤ 6 rows × NC ≤ 4 blocks of 16 keys (one KBLK block when NC = 4): 24 zmm accumulators, started
 * at −128·Σ ck per key, so that Σ (cq + 128)·ck ends as Σ cq·ck. */
ALWAYS_INLINE VNNI_FN void qk_vnni_block(int R, int NC, const qrows *q, int r0, const int8_t *kb, size_t bstride,
                                         const int32_t *ksum, float ksc, int nkp, float *s) {
    const int hd4 = q->hd4;
    __m512i c[6][4];
#pragma GCC unroll 4
    for (int n = 0; n < NC; n++) {
        __m512i init = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_loadu_si512(ksum + 16 * n), 7));
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) c[r][n] = init;
    }
    const uint8_t *qu = q->qx + (size_t)r0 * 4 * hd4;
    for (int d4 = 0; d4 < hd4; d4++) {
        __m512i b[4];
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) b[n] = _mm512_loadu_si512(kb + n * bstride + (size_t)d4 * 64);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512i a = _mm512_set1_epi32(ld4(qu + 4 * ((size_t)r * hd4 + d4)));
#pragma GCC unroll 4
            for (int n = 0; n < NC; n++) c[r][n] = _mm512_dpbusd_epi32(c[r][n], a, b[n]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        __m512 f = _mm512_set1_ps(q->qs[r0 + r] * ksc);
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++)
            _mm512_storeu_ps(s + (size_t)r * nkp + 16 * n, _mm512_mul_ps(_mm512_cvtepi32_ps(c[r][n]), f));
    }
}

#define VNNI_ROWS(NC, ...) \
    switch (R) { \
    case 6: qk_vnni_block(6, NC, __VA_ARGS__); break; case 5: qk_vnni_block(5, NC, __VA_ARGS__); break; \
    case 4: qk_vnni_block(4, NC, __VA_ARGS__); break; case 3: qk_vnni_block(3, NC, __VA_ARGS__); break; \
    case 2: qk_vnni_block(2, NC, __VA_ARGS__); break; default: qk_vnni_block(1, NC, __VA_ARGS__); break; }

static VNNI_FN void qk_vnni(int ns, const qrows *q, const int8_t *kq, const int32_t *ksum, const float *ks, int nkp,
                            float *s) {
    const size_t bstride = (size_t)q->hd4 * 4 * KB;
    for (int r0 = 0; r0 < ns; r0 += 6) {
        int R = ns - r0 < 6 ? ns - r0 : 6;
        float *sr = s + (size_t)r0 * nkp;
        for (int j = 0; j < nkp; j += KBLK) {   /* nkp % 64 = 32: the last block is 32 keys */
            const int8_t *kb = kq + (size_t)(j / KB) * bstride;
            if (j + KBLK <= nkp) VNNI_ROWS(4, q, r0, kb, bstride, ksum + j, ks[j / KBLK], nkp, sr + j)
            else VNNI_ROWS(2, q, r0, kb, bstride, ksum + j, ks[j / KBLK], nkp, sr + j)
        }
    }
}

/* ---- int8 PV (SageAttention2's idea: P in u8 with a per-row scale, V in s8 per channel) ----
 * V: per head and channel, scale_v[d] = absmax over the Skv keys / 127 (NaN if the channel holds a
 * NaN, so that it reaches the output), codes RNE clamped ±127, packed per tile [j/4][d][4] (hd padded
 * to hd16, a multiple of 16, with zero codes). P: per row and key tile, p = exp2(s − m) (exp2_p8:
 * the same polynomial and fmaf in every path), pmax = max p over the tile's keys, code = RNE(p ·
 * 255/pmax) in u8; acc[r,d] = acc·α + (float)Σ_j cp·cv · ((pmax/255) · scale_v[d]) (fmaf), the integer
 * sums exact in int32 (255·127·256 < 2^31); l sums the f32 p (16 lanes, then in lane order). */

/* u8 code of 0 ≤ v ≤ 255 (RNE through the float adder) */
static inline uint8_t rne_u8(float v) {
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (uint8_t)((i & 0x007fffff) - 0x00400000);
}

/* V scales of one head: vs[d] = absmax_d / 127 (NaN through), zero on the padding up to hd16 */
static void v_scales(const float *v, int ld_kv, int Skv, int hd, int hd16, float *vs) {
    for (int d = 0; d < hd16; d++) vs[d] = 0;
    for (int j = 0; j < Skv; j++)
        for (int d = 0; d < hd; d++) {
            float a = fabsf(v[(size_t)j * ld_kv + d]);
            vs[d] = a > vs[d] || a != a ? a : vs[d];
        }
    for (int d = 0; d < hd; d++) vs[d] = vs[d] / 127.0f;
}

/* the nkp keys of a tile (codes zero past nk) into vq [nkp/4][hd16][4] */
static void pack_v8_tile(const float *v, int ld_kv, int nk, int nkp, int hd, int hd16, const float *vs, int8_t *vq) {
    memset(vq, 0, (size_t)nkp * hd16);
    for (int j = 0; j < nk; j++)
        for (int d = 0; d < hd; d++) {
            float inv = vs[d] > 0 ? 1.0f / vs[d] : 0.0f;
            vq[((size_t)(j / 4) * hd16 + d) * 4 + j % 4] = rne_code(v[(size_t)j * ld_kv + d] * inv);
        }
}

/* 2^x for x ≤ 0 (NaN through, below −150: 0): n = round(x), f = x − n in [−½, ½], Cephes' exp2f
 * polynomial by fmaf, times 2^n. The vector form (VNNI path) gives the same bits. */
static const float EXP2_C[6] = {1.535336188319500e-4f, 1.339887440266574e-3f, 9.618437357674640e-3f,
                                5.550332471162809e-2f, 2.402264791363012e-1f, 6.931472028550421e-1f};
static inline float exp2_p8(float x) {
    if (x != x) return x;
    x = x > -150.0f ? x : -150.0f;
    float n = nearbyintf(x), f = x - n, p = EXP2_C[0];
    for (int i = 1; i < 6; i++) p = fmaf(p, f, EXP2_C[i]);
    p = fmaf(p, f, 1.0f);
    return ldexpf(p, (int)n);
}

/* Online softmax of ns rows against one tile: s [ns][nkp] base-2 scores (bias added here), m, l, acc
 * [ns][hd16] updated (first: set); p codes into pc [ns][nkp], their scales pmax/255 into psc. */
static void softmax_p8(int ns, float *s, int nk, int nkp, int first, const float *bias, size_t ld_bias, float *m,
                       float *l, float *acc, int hd16, uint8_t *pc, float *psc) {
    for (int r = 0; r < ns; r++) {
        float *sr = s + (size_t)r * nkp;
        int nan = 0;
        float mx = -INFINITY;
        for (int j = 0; j < nk; j++) {
            if (bias) sr[j] = fmaf(bias[(size_t)r * ld_bias + j], LOG2E, sr[j]);
            nan |= sr[j] != sr[j];
            mx = sr[j] > mx ? sr[j] : mx;
        }
        float mn = first || mx > m[r] ? mx : m[r];
        float alpha = first ? 0.0f : mn == -INFINITY ? 1.0f : exp2_p8(m[r] - mn);
        float lane[16] = {0}, pmax = 0;
        for (int j = 0; j < nkp; j++) {
            float p = j < nk && mn != -INFINITY ? exp2_p8(sr[j] - mn) : 0.0f;
            sr[j] = p;
            lane[j % 16] += p;
            pmax = p > pmax ? p : pmax;
        }
        float sum = 0;
        for (int t = 0; t < 16; t++) sum += lane[t];
        l[r] = nan ? NAN : first ? sum : l[r] * alpha + sum;
        m[r] = mn;
        float *ar = acc + (size_t)r * hd16;
        for (int d = 0; d < hd16; d++) ar[d] = first ? 0.0f : ar[d] * alpha;
        float inv = pmax > 0 ? 255.0f / pmax : 0.0f;
        for (int j = 0; j < nkp; j++) pc[(size_t)r * nkp + j] = rne_u8(sr[j] * inv);
        psc[r] = pmax / 255.0f;
    }
}

static void pv8_scalar(int ns, const uint8_t *pc, const float *psc, int nkp, const int8_t *vq, const float *vs,
                       int hd16, float *acc) {
    for (int r = 0; r < ns; r++)
        for (int d = 0; d < hd16; d++) {
            int32_t dot = 0;
            for (int j = 0; j < nkp; j++)
                dot += (int32_t)pc[(size_t)r * nkp + j] * vq[((size_t)(j / 4) * hd16 + d) * 4 + j % 4];
            acc[(size_t)r * hd16 + d] = fmaf((float)dot, psc[r] * vs[d], acc[(size_t)r * hd16 + d]);
        }
}

/* R ≤ 6 rows × NC ≤ 4 blocks of 16 channels: Σ_j cp[r,j]·cv[j,d] by vpdpbusd (u8 p × s8 v). */
ALWAYS_INLINE VNNI_FN void pv8_vnni_block(int R, int NC, const uint8_t *pc, const float *psc, int nkp,
                                          const int8_t *vq, const float *vs, int hd16, int d0, float *acc) {
    __m512i c[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) c[r][n] = _mm512_setzero_si512();
    for (int j4 = 0; j4 < nkp / 4; j4++) {
        __m512i b[4];
        const int8_t *vb = vq + ((size_t)j4 * hd16 + d0) * 4;
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) b[n] = _mm512_loadu_si512(vb + 64 * n);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512i a = _mm512_set1_epi32(ld4(pc + (size_t)r * nkp + 4 * j4));
#pragma GCC unroll 4
            for (int n = 0; n < NC; n++) c[r][n] = _mm512_dpbusd_epi32(c[r][n], a, b[n]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        __m512 ps = _mm512_set1_ps(psc[r]);
#pragma GCC unroll 4
        for (int n = 0; n < NC; n++) {
            float *ar = acc + (size_t)r * hd16 + d0 + 16 * n;
            __m512 f = _mm512_mul_ps(ps, _mm512_loadu_ps(vs + d0 + 16 * n));
            _mm512_storeu_ps(ar, _mm512_fmadd_ps(_mm512_cvtepi32_ps(c[r][n]), f, _mm512_loadu_ps(ar)));
        }
    }
}

/* exp2_p8 on 16 lanes (the same bits: roundscale = nearbyintf, scalef = ldexpf, both exact-rounded) */
static inline VNNI_FN __m512 exp2_p8_16(__m512 x) {
    __m512 xc = _mm512_max_ps(_mm512_set1_ps(-150.0f), x);   /* NaN: x itself */
    __m512 n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), f = _mm512_sub_ps(xc, n);
    __m512 p = _mm512_set1_ps(EXP2_C[0]);
    for (int i = 1; i < 6; i++) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_C[i]));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* softmax_p8 on 16 lanes: the same bits (max exact in any order, the sums in the same 16 lanes). */
static VNNI_FN void softmax_p8_vnni(int ns, float *s, int nk, int nkp, int first, const float *bias, size_t ld_bias,
                                    float *m, float *l, float *acc, int hd16, uint8_t *pc, float *psc) {
    const __m512 log2e = _mm512_set1_ps(LOG2E);
    for (int r = 0; r < ns; r++) {
        float *sr = s + (size_t)r * nkp;
        __mmask16 nan = 0;
        __m512 vmx = _mm512_set1_ps(-INFINITY);
        for (int j = 0; j < nkp; j += 16) {
            __mmask16 in = j + 16 <= nk ? 0xFFFF : j < nk ? (__mmask16)((1u << (nk - j)) - 1) : 0;
            __m512 x = _mm512_loadu_ps(sr + j);
            if (bias) x = _mm512_mask_fmadd_ps(_mm512_maskz_loadu_ps(in, bias + (size_t)r * ld_bias + j), in, log2e, x);
            x = _mm512_mask_blend_ps(in, _mm512_set1_ps(-INFINITY), x);
            _mm512_storeu_ps(sr + j, x);
            nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
            vmx = _mm512_max_ps(vmx, x);
        }
        float mx = _mm512_reduce_max_ps(vmx);
        float mn = first || mx > m[r] ? mx : m[r];
        float alpha = first ? 0.0f : mn == -INFINITY ? 1.0f : exp2_p8(m[r] - mn);
        __m512 vsum = _mm512_setzero_ps(), vpm = _mm512_setzero_ps(), vmn = _mm512_set1_ps(mn);
        for (int j = 0; j < nkp; j += 16) {
            __mmask16 in = j + 16 <= nk ? 0xFFFF : j < nk ? (__mmask16)((1u << (nk - j)) - 1) : 0;
            if (mn == -INFINITY) in = 0;
            __m512 p = _mm512_maskz_mov_ps(in, exp2_p8_16(_mm512_sub_ps(_mm512_loadu_ps(sr + j), vmn)));
            _mm512_storeu_ps(sr + j, p);
            vsum = _mm512_add_ps(vsum, p);
            vpm = _mm512_max_ps(vpm, p);
        }
        float lane[16], sum = 0, pmax = _mm512_reduce_max_ps(vpm);
        _mm512_storeu_ps(lane, vsum);
        for (int t = 0; t < 16; t++) sum += lane[t];
        l[r] = nan ? NAN : first ? sum : l[r] * alpha + sum;
        m[r] = mn;
        float *ar = acc + (size_t)r * hd16;
        __m512 va = _mm512_set1_ps(alpha);
        for (int d = 0; d < hd16; d += 16)
            _mm512_storeu_ps(ar + d, first ? _mm512_setzero_ps() : _mm512_mul_ps(_mm512_loadu_ps(ar + d), va));
        __m512 inv = _mm512_set1_ps(pmax > 0 ? 255.0f / pmax : 0.0f);
        for (int j = 0; j < nkp; j += 16)
            _mm_storeu_si128((__m128i *)(pc + (size_t)r * nkp + j),
                             _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(sr + j), inv))));
        psc[r] = pmax / 255.0f;
    }
}

#define PV8_ROWS(NC, ...) \
    switch (R) { \
    case 6: pv8_vnni_block(6, NC, __VA_ARGS__); break; case 5: pv8_vnni_block(5, NC, __VA_ARGS__); break; \
    case 4: pv8_vnni_block(4, NC, __VA_ARGS__); break; case 3: pv8_vnni_block(3, NC, __VA_ARGS__); break; \
    case 2: pv8_vnni_block(2, NC, __VA_ARGS__); break; default: pv8_vnni_block(1, NC, __VA_ARGS__); break; }

static VNNI_FN void pv8_vnni(int ns, const uint8_t *pc, const float *psc, int nkp, const int8_t *vq, const float *vs,
                             int hd16, float *acc) {
    for (int r0 = 0; r0 < ns; r0 += 6) {
        int R = ns - r0 < 6 ? ns - r0 : 6;
        const uint8_t *p = pc + (size_t)r0 * nkp;
        float *a = acc + (size_t)r0 * hd16;
        for (int d0 = 0; d0 < hd16; d0 += 64) {
            int nc = (hd16 - d0) / 16;
            if (nc >= 4) PV8_ROWS(4, p, psc + r0, nkp, vq, vs, hd16, d0, a)
            else if (nc == 3) PV8_ROWS(3, p, psc + r0, nkp, vq, vs, hd16, d0, a)
            else if (nc == 2) PV8_ROWS(2, p, psc + r0, nkp, vq, vs, hd16, d0, a)
            else PV8_ROWS(1, p, psc + r0, nkp, vq, vs, hd16, d0, a)
        }
    }
}

/* ---- jobs ---- */

typedef struct {
    int8_t *qc;
    uint8_t *qx;
    float *qs, *s, *acc, *m, *l, *psc;   /* acc [QB][hd16]; psc: int8 PV's p scales */
    uint32_t *pp;                        /* bf16 p pairs, or int8 PV's p codes */
    int8_t *codes;   /* staging: max(QBLK, KBLK) rows of hd4·4 codes */
} scratch_i8;

/* nq ≤ QB query rows (the first at a multiple of QBLK) of one head against its packed keys. */
static void attention_job(qk_path path, int fast, int pv8, const float *q, int ld_q, const head_pack *hpk,
                          float *out, int ld_o, int nq, int Skv, int hd, float scale2, const float *bias, size_t ld_bias,
                          scratch_i8 *w) {
    int hd4 = (hd + 3) / 4, ldc = 4 * hd4, hd16 = (hd + 15) & ~15, G = fast ? CVX_ATTN_GROUP_FAST : CVX_ATTN_GROUP;
    for (int b0 = 0; b0 < nq; b0 += QBLK) {   /* q quantised per block of QBLK rows */
        int n = nq - b0 < QBLK ? nq - b0 : QBLK;
        float sq = quant_block(q + (size_t)b0 * ld_q, ld_q, n, hd, NULL, w->qc + (size_t)b0 * ldc, ldc);
        for (int r = 0; r < n; r++) w->qs[b0 + r] = sq * scale2;
    }
    for (size_t i = 0; i < (size_t)nq * ldc; i++)
        w->qx[i] = path == QK_VNNI ? (uint8_t)(w->qc[i] ^ 0x80) : (uint8_t)abs(w->qc[i]);
    for (int i = 0; i < nq; i++) w->m[i] = -INFINITY, w->l[i] = 0;
    if (!fast) memset(w->acc, 0, sizeof(float) * (size_t)nq * hd);
    for (int k0 = 0; k0 < Skv; k0 += KT) {
        int t = k0 / KT, nk = Skv - k0 < KT ? Skv - k0 : KT, nkp = (nk + 31) & ~31, last = k0 + KT >= Skv;
        const int8_t *kq = hpk->kq + (size_t)t * KT * ldc;
        const float *ks = hpk->ks + (size_t)t * (KT / KBLK);
        const int32_t *ksum = hpk->ksum + (size_t)t * KT;
        const uint32_t *vp = hpk->vp + (size_t)t * (KT / 2) * hd;
        for (int i0 = 0; i0 < nq; i0 += G) {
            int ns = nq - i0 < G ? nq - i0 : G;
            qrows qr = {w->qc + (size_t)i0 * ldc, w->qx + (size_t)i0 * ldc, w->qs + i0, hd4};
            if (path == QK_VNNI) qk_vnni(ns, &qr, kq, ksum, ks, nkp, w->s);
            else if (path == QK_AVX2) qk_avx2(ns, &qr, kq, ks, nkp, w->s);
            else qk_scalar(ns, &qr, kq, ks, nkp, w->s);
            if (pv8) {
                const int8_t *vq = hpk->vq + (size_t)t * KT * hd16;
                uint8_t *pc = (uint8_t *)w->pp;
                if (path == QK_VNNI)
                    softmax_p8_vnni(ns, w->s, nk, nkp, k0 == 0, bias ? bias + (size_t)i0 * ld_bias + k0 : NULL,
                                    ld_bias, w->m + i0, w->l + i0, w->acc + (size_t)i0 * hd16, hd16, pc, w->psc);
                else
                    softmax_p8(ns, w->s, nk, nkp, k0 == 0, bias ? bias + (size_t)i0 * ld_bias + k0 : NULL, ld_bias,
                               w->m + i0, w->l + i0, w->acc + (size_t)i0 * hd16, hd16, pc, w->psc);
                if (path == QK_VNNI) pv8_vnni(ns, pc, w->psc, nkp, vq, hpk->vs, hd16, w->acc + (size_t)i0 * hd16);
                else pv8_scalar(ns, pc, w->psc, nkp, vq, hpk->vs, hd16, w->acc + (size_t)i0 * hd16);
                continue;
            }
            cvx_attn_softmax_pv(fast, ns, w->s, nk, nkp, k0 == 0, last, bias ? bias + (size_t)i0 * ld_bias + k0 : NULL,
                                ld_bias, w->m + i0, w->l + i0, w->pp, vp, hd, w->acc + (size_t)i0 * hd,
                                out + (size_t)i0 * ld_o, ld_o);
        }
    }
    if (!pv8) cvx_attn_finish(fast, nq, w->l, w->acc, hd, out, ld_o);
    else
        for (int i = 0; i < nq; i++)
            for (int d = 0; d < hd; d++) out[(size_t)i * ld_o + d] = w->acc[(size_t)i * hd16 + d] / w->l[i];
}

static qk_path pick_path(const cvx_cpu_features *cpu, const cvx_kernels *kc) {
    cvx_q8_kernel force = kc ? (cvx_q8_kernel)cvx_kernels_q8_kernel(kc) : CVX_Q8K_AUTO;
    if (force == CVX_Q8K_AUTO && cpu->avx512_vnni) return QK_VNNI;
    if (force != CVX_Q8K_SCALAR && cpu->avx2) return QK_AVX2;
    return QK_SCALAR;
}

const char *cvx_attention_int8_path(const cvx_kernels *kc) {
    cvx_cpu_features cpu;
    if (kc) cpu = *cvx_kernels_cpu(kc);
    else cvx_cpu_detect(&cpu);
    qk_path p = pick_path(&cpu, kc);
    return p == QK_VNNI ? "avx512-vnni" : p == QK_AVX2 ? "avx2" : "scalar";
}

/* As cvx_attention_bf16: per group of HG heads, their K (smoothed, quantised) and V packed once into
 * one of two alternating buffers, then their blocks of QB query rows. */
static void attention_int8(const cvx_kernels *kc, int pv8, const float *q, int ld_q, const float *k, const float *v,
                           int ld_kv, float *out, int ld_o, int Sq, int Skv, int heads, int hd, float scale,
                           const float *bias) {
    if (Sq <= 0 || Skv <= 0) return;
    CVX_CHECK(hd % 2 == 0);
    cvx_cpu_features cpu;
    if (kc) cpu = *cvx_kernels_cpu(kc);
    else cvx_cpu_detect(&cpu);
    const qk_path path = pick_path(&cpu, kc);
    const int fast = !pv8 && (kc ? cvx_kernels_bf16_native(kc) : 1) && cpu.avx512_bf16 && hd % 32 == 0;
    const float scale2 = scale * LOG2E;
    const int hd4 = (hd + 3) / 4, hd16 = (hd + 15) & ~15, ntiles = (Skv + KT - 1) / KT, qblocks = (Sq + QB - 1) / QB;
    const size_t nkeys = (size_t)ntiles * KT;
    /* bytes per head: codes, scales, Σ codes, V pairs (bf16 PV) or codes and scales (int8 PV), mean */
    const size_t vbytes = pv8 ? nkeys * hd16 + sizeof(float) * hd16 : sizeof(uint32_t) * nkeys / 2 * hd;
    const size_t per_head = nkeys * 4 * hd4 + sizeof(float) * (nkeys / KBLK) + sizeof(int32_t) * nkeys + vbytes +
                            sizeof(float) * hd;
    size_t fit = PACK_BYTES / per_head;
    int HG = fit < 1 ? 1 : fit > (size_t)heads ? heads : (int)fit, groups = (heads + HG - 1) / HG;
    int8_t *kq = cvx_malloc(2 * (size_t)HG * nkeys * 4 * hd4);
    float *ks = cvx_alloc_f32(2 * (size_t)HG * (nkeys / KBLK)), *mean = cvx_alloc_f32(2 * (size_t)HG * hd);
    int32_t *ksum = cvx_malloc(sizeof(int32_t) * 2 * (size_t)HG * nkeys);
    uint32_t *vp = pv8 ? NULL : cvx_malloc(sizeof(uint32_t) * 2 * (size_t)HG * (nkeys / 2) * hd);
    int8_t *vq = pv8 ? cvx_malloc(2 * (size_t)HG * nkeys * hd16) : NULL;
    float *vs = pv8 ? cvx_alloc_f32(2 * (size_t)HG * hd16) : NULL;
#pragma omp parallel
    {
        scratch_i8 w;
        w.qc = cvx_malloc((size_t)QB * 4 * hd4);
        w.qx = cvx_malloc((size_t)QB * 4 * hd4);
        w.qs = cvx_alloc_f32(QB);
        w.s = cvx_alloc_f32((size_t)CVX_ATTN_GROUP * KT);
        w.pp = cvx_malloc(sizeof(uint32_t) * (size_t)(CVX_ATTN_GROUP * KT / 2 > hd ? CVX_ATTN_GROUP * KT / 2 : hd));
        w.acc = cvx_alloc_f32((size_t)QB * hd16);
        w.psc = cvx_alloc_f32(CVX_ATTN_GROUP);
        w.m = cvx_alloc_f32(QB);
        w.l = cvx_alloc_f32(QB);
        w.codes = cvx_malloc((size_t)(QBLK > KBLK ? QBLK : KBLK) * 4 * hd4);
        for (int g = 0; g < groups; g++) {
            int h0 = g * HG, ng = heads - h0 < HG ? heads - h0 : HG;
            size_t slot = (size_t)(g % 2) * HG;   /* head h0+hh in slot + hh */
#pragma omp for schedule(static)
            for (int hh = 0; hh < ng; hh++) {
                k_mean(k + (size_t)(h0 + hh) * hd, ld_kv, Skv, hd, mean + (slot + hh) * hd);
                if (pv8) v_scales(v + (size_t)(h0 + hh) * hd, ld_kv, Skv, hd, hd16, vs + (slot + hh) * hd16);
            }
#pragma omp for schedule(static)
            for (int ht = 0; ht < ng * ntiles; ht++) {
                int hh = ht / ntiles, h = h0 + hh, t = ht % ntiles, nk = Skv - t * KT < KT ? Skv - t * KT : KT;
                size_t hs = slot + hh, j0 = hs * nkeys + (size_t)t * KT;
                pack_k_tile(k + (size_t)t * KT * ld_kv + (size_t)h * hd, ld_kv, nk, (nk + 31) & ~31, hd,
                            mean + hs * hd, kq + j0 * 4 * hd4, ks + j0 / KBLK, ksum + j0, w.codes);
                if (pv8)
                    pack_v8_tile(v + (size_t)t * KT * ld_kv + (size_t)h * hd, ld_kv, nk, (nk + 31) & ~31, hd, hd16,
                                 vs + hs * hd16, vq + (hs * nkeys + (size_t)t * KT) * hd16);
                else
                    cvx_attn_pack_v_tile(v + (size_t)t * KT * ld_kv + (size_t)h * hd, ld_kv, nk, (nk + 31) & ~31, hd,
                                         vp + (hs * nkeys + (size_t)t * KT) / 2 * hd, (uint16_t *)w.pp);
            }
#pragma omp for schedule(dynamic, 1) nowait
            for (int job = 0; job < ng * qblocks; job++) {
                int hh = job / qblocks, h = h0 + hh, q0 = (job % qblocks) * QB, nq = Sq - q0 < QB ? Sq - q0 : QB;
                size_t hs = slot + hh;
                head_pack hpk = {kq + hs * nkeys * 4 * hd4, ks + hs * (nkeys / KBLK), ksum + hs * nkeys,
                                 pv8 ? NULL : vp + hs * (nkeys / 2) * hd, mean + hs * hd,
                                 pv8 ? vq + hs * nkeys * hd16 : NULL, pv8 ? vs + hs * hd16 : NULL};
                const float *b = bias ? bias + ((size_t)h * Sq + q0) * Skv : NULL;
                attention_job(path, fast, pv8, q + (size_t)q0 * ld_q + (size_t)h * hd, ld_q, &hpk,
                              out + (size_t)q0 * ld_o + (size_t)h * hd, ld_o, nq, Skv, hd, scale2, b, (size_t)Skv, &w);
            }
        }
        free(w.qc); free(w.qx); free(w.qs); free(w.s); free(w.pp); free(w.acc); free(w.psc); free(w.m); free(w.l);
        free(w.codes);
    }
    free(kq); free(ks); free(mean); free(ksum); free(vp); free(vq); free(vs);
}

void cvx_attention_int8(const cvx_kernels *kc, const float *q, int ld_q, const float *k, const float *v, int ld_kv,
                        float *out, int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    attention_int8(kc, 0, q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
}

void cvx_attention_int8_pv8(const cvx_kernels *kc, const float *q, int ld_q, const float *k, const float *v, int ld_kv,
                            float *out, int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    attention_int8(kc, 1, q, ld_q, k, v, ld_kv, out, ld_o, Sq, Skv, heads, hd, scale, bias);
}

/* ---- reference ---- */

static inline float rbf(float x) { return cvx_bf16_to_f32(cvx_f32_to_bf16(x)); }

void cvx_attention_int8_ref(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                            int Sq, int Skv, int heads, int hd, float scale, const float *bias, int smooth_k) {
    if (Sq <= 0 || Skv <= 0) return;
    const float scale2 = scale * LOG2E;
    int8_t *kc = cvx_malloc((size_t)Skv * hd), *qc = cvx_malloc((size_t)Sq * hd);
    float *ks = cvx_alloc_f32((size_t)(Skv + KBLK - 1) / KBLK), *qs = cvx_alloc_f32((size_t)(Sq + QBLK - 1) / QBLK),
          *mean = cvx_alloc_f32((size_t)hd);
    double *s = cvx_malloc(sizeof(double) * (size_t)Skv);
    for (int h = 0; h < heads; h++) {
        const float *kh = k + (size_t)h * hd, *qh = q + (size_t)h * hd;
        if (smooth_k) k_mean(kh, ld_kv, Skv, hd, mean);
        for (int j = 0; j < Skv; j += KBLK)
            ks[j / KBLK] = quant_block(kh + (size_t)j * ld_kv, ld_kv, Skv - j < KBLK ? Skv - j : KBLK, hd,
                                       smooth_k ? mean : NULL, kc + (size_t)j * hd, hd);
        for (int i = 0; i < Sq; i += QBLK)
            qs[i / QBLK] = quant_block(qh + (size_t)i * ld_q, ld_q, Sq - i < QBLK ? Sq - i : QBLK, hd, NULL,
                                       qc + (size_t)i * hd, hd);
        for (int i = 0; i < Sq; i++) {
            double mx = -INFINITY, l = 0;
            float qsc = qs[i / QBLK] * scale2;
            for (int j = 0; j < Skv; j++) {
                int32_t dot = 0;
                for (int d = 0; d < hd; d++) dot += (int32_t)qc[(size_t)i * hd + d] * kc[(size_t)j * hd + d];
                s[j] = (double)((float)dot * (qsc * ks[j / KBLK])) +
                       (bias ? (double)bias[((size_t)h * Sq + i) * Skv + j] * LOG2E : 0.0);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < Skv; j++) {
                s[j] = exp2(s[j] - mx);
                l += s[j];
            }
            for (int d = 0; d < hd; d++) {
                double acc = 0;
                for (int j = 0; j < Skv; j++)
                    acc += (double)rbf((float)s[j]) * rbf(v[(size_t)j * ld_kv + (size_t)h * hd + d]);
                out[(size_t)i * ld_o + (size_t)h * hd + d] = (float)(acc / l);
            }
        }
    }
    free(kc); free(qc); free(ks); free(qs); free(mean); free(s);
}

/* The int8 PV's reference: the scores as cvx_attention_int8_ref (smoothed K), the softmax in double
 * against the row's global maximum, p quantised per key tile of KT keys (its max / 255) and V per
 * channel as the kernel does, the integer sums per tile, everything else in double. */
void cvx_attention_int8_pv8_ref(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                                int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    if (Sq <= 0 || Skv <= 0) return;
    const float scale2 = scale * LOG2E;
    const int hd16 = (hd + 15) & ~15;
    int8_t *kc = cvx_malloc((size_t)Skv * hd), *qc = cvx_malloc((size_t)Sq * hd), *vc = cvx_malloc((size_t)Skv * hd);
    float *ks = cvx_alloc_f32((size_t)(Skv + KBLK - 1) / KBLK), *qs = cvx_alloc_f32((size_t)(Sq + QBLK - 1) / QBLK),
          *mean = cvx_alloc_f32((size_t)hd), *vs = cvx_alloc_f32((size_t)hd16);
    double *s = cvx_malloc(sizeof(double) * (size_t)Skv), *acc = cvx_malloc(sizeof(double) * (size_t)hd);
    uint8_t *pc = cvx_malloc((size_t)Skv);
    for (int h = 0; h < heads; h++) {
        const float *kh = k + (size_t)h * hd, *qh = q + (size_t)h * hd, *vh = v + (size_t)h * hd;
        k_mean(kh, ld_kv, Skv, hd, mean);
        for (int j = 0; j < Skv; j += KBLK)
            ks[j / KBLK] = quant_block(kh + (size_t)j * ld_kv, ld_kv, Skv - j < KBLK ? Skv - j : KBLK, hd, mean,
                                       kc + (size_t)j * hd, hd);
        for (int i = 0; i < Sq; i += QBLK)
            qs[i / QBLK] = quant_block(qh + (size_t)i * ld_q, ld_q, Sq - i < QBLK ? Sq - i : QBLK, hd, NULL,
                                       qc + (size_t)i * hd, hd);
        v_scales(vh, ld_kv, Skv, hd, hd16, vs);
        for (int j = 0; j < Skv; j++)
            for (int d = 0; d < hd; d++)
                vc[(size_t)j * hd + d] = rne_code(vh[(size_t)j * ld_kv + d] * (vs[d] > 0 ? 1.0f / vs[d] : 0.0f));
        for (int i = 0; i < Sq; i++) {
            double mx = -INFINITY, l = 0;
            float qsc = qs[i / QBLK] * scale2;
            for (int j = 0; j < Skv; j++) {
                int32_t dot = 0;
                for (int d = 0; d < hd; d++) dot += (int32_t)qc[(size_t)i * hd + d] * kc[(size_t)j * hd + d];
                s[j] = (double)((float)dot * (qsc * ks[j / KBLK])) +
                       (bias ? (double)bias[((size_t)h * Sq + i) * Skv + j] * LOG2E : 0.0);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < Skv; j++) {
                s[j] = exp2(s[j] - mx);
                l += s[j];
            }
            for (int d = 0; d < hd; d++) acc[d] = 0;
            for (int t0 = 0; t0 < Skv; t0 += KT) {
                int nk = Skv - t0 < KT ? Skv - t0 : KT;
                double pmax = 0;
                for (int j = t0; j < t0 + nk; j++) pmax = s[j] > pmax ? s[j] : pmax;
                for (int j = t0; j < t0 + nk; j++) pc[j] = pmax > 0 ? rne_u8((float)(s[j] / pmax * 255.0)) : 0;
                for (int d = 0; d < hd; d++) {
                    int32_t dot = 0;
                    for (int j = t0; j < t0 + nk; j++) dot += (int32_t)pc[j] * vc[(size_t)j * hd + d];
                    acc[d] += (double)dot * (pmax / 255.0) * vs[d];
                }
            }
            for (int d = 0; d < hd; d++) out[(size_t)i * ld_o + (size_t)h * hd + d] = (float)(acc[d] / l);
        }
    }
    free(kc); free(qc); free(vc); free(ks); free(qs); free(mean); free(vs); free(s); free(acc); free(pc);
}
