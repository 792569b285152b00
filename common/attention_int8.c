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
 *   scalar:      plain loops over the same layout. */
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
    uint32_t *vp;    /* [tiles][KT/2][hd] bf16 pairs */
    const float *mean;
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

/* ---- jobs ---- */

typedef struct {
    int8_t *qc;
    uint8_t *qx;
    float *qs, *s, *acc, *m, *l;
    uint32_t *pp;
    int8_t *codes;   /* staging: max(QBLK, KBLK) rows of hd4·4 codes */
} scratch_i8;

/* nq ≤ QB query rows (the first at a multiple of QBLK) of one head against its packed keys. */
static void attention_job(qk_path path, int fast, const float *q, int ld_q, const head_pack *hpk, float *out, int ld_o,
                          int nq, int Skv, int hd, float scale2, const float *bias, size_t ld_bias, scratch_i8 *w) {
    int hd4 = (hd + 3) / 4, ldc = 4 * hd4, G = fast ? CVX_ATTN_GROUP_FAST : CVX_ATTN_GROUP;
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
            cvx_attn_softmax_pv(fast, ns, w->s, nk, nkp, k0 == 0, last, bias ? bias + (size_t)i0 * ld_bias + k0 : NULL,
                                ld_bias, w->m + i0, w->l + i0, w->pp, vp, hd, w->acc + (size_t)i0 * hd,
                                out + (size_t)i0 * ld_o, ld_o);
        }
    }
    cvx_attn_finish(fast, nq, w->l, w->acc, hd, out, ld_o);
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
void cvx_attention_int8(const cvx_kernels *kc, const float *q, int ld_q, const float *k, const float *v, int ld_kv,
                        float *out, int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    if (Sq <= 0 || Skv <= 0) return;
    CVX_CHECK(hd % 2 == 0);
    cvx_cpu_features cpu;
    if (kc) cpu = *cvx_kernels_cpu(kc);
    else cvx_cpu_detect(&cpu);
    const qk_path path = pick_path(&cpu, kc);
    const int fast = (kc ? cvx_kernels_bf16_native(kc) : 1) && cpu.avx512_bf16 && hd % 32 == 0;
    const float scale2 = scale * LOG2E;
    const int hd4 = (hd + 3) / 4, ntiles = (Skv + KT - 1) / KT, qblocks = (Sq + QB - 1) / QB;
    const size_t nkeys = (size_t)ntiles * KT;
    /* bytes per head: codes, scales, Σ codes, V pairs, mean */
    const size_t per_head = nkeys * 4 * hd4 + sizeof(float) * (nkeys / KBLK) + sizeof(int32_t) * nkeys +
                            sizeof(uint32_t) * nkeys / 2 * hd + sizeof(float) * hd;
    size_t fit = PACK_BYTES / per_head;
    int HG = fit < 1 ? 1 : fit > (size_t)heads ? heads : (int)fit, groups = (heads + HG - 1) / HG;
    int8_t *kq = cvx_malloc(2 * (size_t)HG * nkeys * 4 * hd4);
    float *ks = cvx_alloc_f32(2 * (size_t)HG * (nkeys / KBLK)), *mean = cvx_alloc_f32(2 * (size_t)HG * hd);
    int32_t *ksum = cvx_malloc(sizeof(int32_t) * 2 * (size_t)HG * nkeys);
    uint32_t *vp = cvx_malloc(sizeof(uint32_t) * 2 * (size_t)HG * (nkeys / 2) * hd);
#pragma omp parallel
    {
        scratch_i8 w;
        w.qc = cvx_malloc((size_t)QB * 4 * hd4);
        w.qx = cvx_malloc((size_t)QB * 4 * hd4);
        w.qs = cvx_alloc_f32(QB);
        w.s = cvx_alloc_f32((size_t)CVX_ATTN_GROUP * KT);
        w.pp = cvx_malloc(sizeof(uint32_t) * (size_t)(CVX_ATTN_GROUP * KT / 2 > hd ? CVX_ATTN_GROUP * KT / 2 : hd));
        w.acc = cvx_alloc_f32((size_t)QB * hd);
        w.m = cvx_alloc_f32(QB);
        w.l = cvx_alloc_f32(QB);
        w.codes = cvx_malloc((size_t)(QBLK > KBLK ? QBLK : KBLK) * 4 * hd4);
        for (int g = 0; g < groups; g++) {
            int h0 = g * HG, ng = heads - h0 < HG ? heads - h0 : HG;
            size_t slot = (size_t)(g % 2) * HG;   /* head h0+hh in slot + hh */
#pragma omp for schedule(static)
            for (int hh = 0; hh < ng; hh++) k_mean(k + (size_t)(h0 + hh) * hd, ld_kv, Skv, hd, mean + (slot + hh) * hd);
#pragma omp for schedule(static)
            for (int ht = 0; ht < ng * ntiles; ht++) {
                int hh = ht / ntiles, h = h0 + hh, t = ht % ntiles, nk = Skv - t * KT < KT ? Skv - t * KT : KT;
                size_t hs = slot + hh, j0 = hs * nkeys + (size_t)t * KT;
                pack_k_tile(k + (size_t)t * KT * ld_kv + (size_t)h * hd, ld_kv, nk, (nk + 31) & ~31, hd,
                            mean + hs * hd, kq + j0 * 4 * hd4, ks + j0 / KBLK, ksum + j0, w.codes);
                cvx_attn_pack_v_tile(v + (size_t)t * KT * ld_kv + (size_t)h * hd, ld_kv, nk, (nk + 31) & ~31, hd,
                                     vp + (hs * nkeys + (size_t)t * KT) / 2 * hd, (uint16_t *)w.pp);
            }
#pragma omp for schedule(dynamic, 1) nowait
            for (int job = 0; job < ng * qblocks; job++) {
                int hh = job / qblocks, h = h0 + hh, q0 = (job % qblocks) * QB, nq = Sq - q0 < QB ? Sq - q0 : QB;
                size_t hs = slot + hh;
                head_pack hpk = {kq + hs * nkeys * 4 * hd4, ks + hs * (nkeys / KBLK), ksum + hs * nkeys,
                                 vp + hs * (nkeys / 2) * hd, mean + hs * hd};
                const float *b = bias ? bias + ((size_t)h * Sq + q0) * Skv : NULL;
                attention_job(path, fast, q + (size_t)q0 * ld_q + (size_t)h * hd, ld_q, &hpk,
                              out + (size_t)q0 * ld_o + (size_t)h * hd, ld_o, nq, Skv, hd, scale2, b, (size_t)Skv, &w);
            }
        }
        free(w.qc); free(w.qx); free(w.qs); free(w.s); free(w.pp); free(w.acc); free(w.m); free(w.l); free(w.codes);
    }
    free(kq); free(ks); free(mean); free(ksum); free(vp);
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
