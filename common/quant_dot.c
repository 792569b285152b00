/* The int8 path of the quantized linear (gemm_quant.h): activations quantized per row as ggml's
 * vec_dot does, weight rows unpacked per tile into unsigned 8-bit codes, integer dot products.
 *
 * Every weight type is brought to one form: W[k] = s[g]·u[k] + m[g] with u an unsigned code
 * (0..255) and one float scale s and offset m per sub-block g of G = 16 or 32 values (the type's own
 * scales: Q4_K's 6-bit sub-block scales times d, Q6_K's int8 scales times d, Q8_0's d with the codes
 * shifted by +128 and m = -128·d, ...). With activations x[k] ≈ dx[g]·q[k] (int8 codes q):
 *     y = Σ_g ( s[g]·dx[g]·Σ_{k∈g} u[k]·q[k]  +  m[g]·(dx[g]·Σ_{k∈g} q[k]) ),
 * the inner sums exact in int32 (vpdpbusd: unsigned × signed bytes, four per 32-bit lane).
 *
 * Layout: a tile of W is panels of 16 output rows; a panel holds the codes as [K/4][16 rows][4]
 * (one 64-byte vector per 4 k: lane i = row i) followed by [K/G][s[16], m[16]] floats. The AVX-512
 * kernel computes 4 activation rows × 2 panels (8 zmm int32 accumulators, 8 f32 ones); per 4 k it
 * loads 2 weight vectors and issues 8 vpdpbusd with the activation bytes broadcast. */
#include "gemm_quant.h"
#include "error.h"
#include "quant.h"
#include "quant_impl.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum { PANEL = 16, TILE_PANELS = 4, MBLOCK = 256, RM_MAX = 4, RN_MAX = 2, KCHUNK = 256 };

static int is_k_type(cvx_dtype t) {
    return t == CVX_Q2_K || t == CVX_Q3_K || t == CVX_Q4_K || t == CVX_Q5_K || t == CVX_Q6_K;
}

int cvx_q8_group(cvx_dtype t) { return t == CVX_Q2_K || t == CVX_Q3_K || t == CVX_Q6_K ? 16 : 32; }

/* ---------------------------------------------------------------- activations */

static int8_t clamp_code(float v, int lo, int hi) { return (int8_t)(v >= (float)lo ? (v <= (float)hi ? v : hi) : lo); }

void cvx_q8_quantize_row(cvx_dtype t, const float *x, int K, int8_t *q, float *d, float *ds) {
    const int G = cvx_q8_group(t);
    if (is_k_type(t)) {   /* quantize_row_q8_K_ref */
        for (int b = 0; b < K; b += CVX_QK_K) {
            float max = 0, amax = 0, dd = 0;
            for (int j = 0; j < CVX_QK_K; j++)
                if (fabsf(x[b + j]) > amax) { amax = fabsf(x[b + j]); max = x[b + j]; }
            if (amax == 0) {
                memset(q + b, 0, CVX_QK_K);
            } else {
                const float iscale = -127.f / max;
                for (int j = 0; j < CVX_QK_K; j++) {
                    int v = qi_nearest_int(iscale * x[b + j]);
                    q[b + j] = (int8_t)(v < -127 ? -127 : v > 127 ? 127 : v);
                }
                dd = 1 / iscale;
            }
            for (int g = b / G; g < (b + CVX_QK_K) / G; g++) d[g] = dd;
        }
    } else {   /* quantize_row_q8_0_ref (q8_1 has the same codes) */
        for (int b = 0; b < K; b += CVX_QK) {
            float amax = 0;
            for (int j = 0; j < CVX_QK; j++)   /* ggml's MAX, except that a NaN is ignored */
                if (fabsf(x[b + j]) > amax) amax = fabsf(x[b + j]);
            const float dd = amax / 127, id = dd ? 1.0f / dd : 0.0f;
            for (int j = 0; j < CVX_QK; j++) q[b + j] = clamp_code(roundf(x[b + j] * id), -127, 127);
            d[b / CVX_QK] = cvx_f16_to_f32(cvx_f32_to_f16(dd));   /* the block stores d as f16 */
        }
    }
    for (int g = 0; g < K / G; g++) {
        int sum = 0;
        for (int j = 0; j < G; j++) sum += q[g * G + j];
        ds[g] = d[g] * (float)sum;
    }
}

#if defined(__x86_64__)
/* Horizontal max of 8 floats (exact in any order). */
static inline __attribute__((target("avx2,fma"))) float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* Eight codes (int32) stored as int8 at q. */
static inline __attribute__((target("avx2,fma"))) void store_codes8(int8_t *q, __m256i v) {
    __m128i p = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    p = _mm_packs_epi16(p, p);
    _mm_storel_epi64((__m128i *)q, p);
}

/* The same codes and scales as cvx_q8_quantize_row, bit for bit (NaN and infinities included): the
 * maxima ignore NaN as the scalar comparisons do, roundf is truncation plus the half step, the
 * q8_K rounding is ggml's nearest_int bit trick on 8 lanes. */
static __attribute__((target("avx2,fma"))) void quantize_row_avx2(cvx_dtype t, const float *x, int K, int8_t *q,
                                                                  float *d, float *ds) {
    const int G = cvx_q8_group(t);
    const __m256 sign = _mm256_set1_ps(-0.0f), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    if (is_k_type(t)) {
        for (int b = 0; b < K; b += CVX_QK_K) {
            __m256 am = _mm256_setzero_ps();
            for (int j = 0; j < CVX_QK_K; j += 8) am = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + b + j)), am);
            const float amax = hmax8(am);
            float dd = 0;
            if (amax == 0) {
                memset(q + b, 0, CVX_QK_K);
            } else {
                float max = 0;   /* the first value of largest magnitude, as the scalar scan picks it */
                for (int j = 0; j < CVX_QK_K; j++)
                    if (fabsf(x[b + j]) == amax) { max = x[b + j]; break; }
                const float iscale = -127.f / max;
                const __m256 is = _mm256_set1_ps(iscale), magic = _mm256_set1_ps(12582912.f);
                const __m256i mant = _mm256_set1_epi32(0x007fffff), off = _mm256_set1_epi32(0x00400000);
                const __m256i ilo = _mm256_set1_epi32(-127), ihi = _mm256_set1_epi32(127);
                for (int j = 0; j < CVX_QK_K; j += 8) {
                    __m256 v = _mm256_add_ps(_mm256_mul_ps(is, _mm256_loadu_ps(x + b + j)), magic);
                    __m256i i = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(v), mant), off);
                    store_codes8(q + b + j, _mm256_min_epi32(_mm256_max_epi32(i, ilo), ihi));
                }
                dd = 1 / iscale;
            }
            for (int g = b / G; g < (b + CVX_QK_K) / G; g++) d[g] = dd;
        }
    } else {
        const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
        for (int b = 0; b < K; b += CVX_QK) {
            __m256 am = _mm256_setzero_ps();
            for (int j = 0; j < CVX_QK; j += 8) am = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + b + j)), am);
            const float amax = hmax8(am), dd = amax / 127, id = dd ? 1.0f / dd : 0.0f;
            const __m256 idv = _mm256_set1_ps(id);
            for (int j = 0; j < CVX_QK; j += 8) {
                const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + b + j), idv);
                __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
                const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, r));
                const __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign), one);   /* ±1 */
                r = _mm256_add_ps(r, _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ), step));
                r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);   /* NaN -> -127 as clamp_code */
                store_codes8(q + b + j, _mm256_cvttps_epi32(r));
            }
            d[b / CVX_QK] = cvx_f16_to_f32(cvx_f32_to_f16(dd));
        }
    }
    for (int g = 0; g < K / G; g++) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(q + g * G));
        __m256i s16 = _mm256_cvtepi8_epi16(v);
        if (G == 32) s16 = _mm256_add_epi16(s16, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + g * G + 16))));
        __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        ds[g] = d[g] * (float)_mm_cvtsi128_si32(h);
    }
}
#endif

void cvx_q8_quantize_row_fast(const cvx_cpu_features *cpu, cvx_dtype t, const float *x, int K, int8_t *q, float *d,
                              float *ds) {
#if defined(__x86_64__)
    if (cpu->avx2) {
        quantize_row_avx2(t, x, K, q, d, ds);
        return;
    }
#endif
    (void)cpu;
    cvx_q8_quantize_row(t, x, K, q, d, ds);
}

/* ---------------------------------------------------------------- weights */

void cvx_q8_unpack_row(cvx_dtype t, const void *row, int K, uint8_t *u, float *s, float *m) {
    const uint8_t *b = row;
    switch (t) {
    case CVX_Q8_0:
        for (int i = 0; i < K / 32; i++, b += 34, u += 32) {
            const float d = qi_f16(b);
            for (int j = 0; j < 32; j++) u[j] = (uint8_t)((int8_t)b[2 + j] + 128);
            s[i] = d, m[i] = -128.0f * d;
        }
        break;
    case CVX_Q4_0: case CVX_Q4_1:
        for (int i = 0; i < K / 32; i++, u += 32) {
            const int one = t == CVX_Q4_1;
            const uint8_t *qs = b + 2 + 2 * one;
            const float d = qi_f16(b);
            for (int j = 0; j < 16; j++) u[j] = qs[j] & 0xf, u[j + 16] = qs[j] >> 4;
            s[i] = d, m[i] = one ? qi_f16(b + 2) : -8.0f * d;
            b += one ? 20 : 18;
        }
        break;
    case CVX_Q5_0: case CVX_Q5_1:
        for (int i = 0; i < K / 32; i++, u += 32) {
            const int one = t == CVX_Q5_1;
            const uint32_t qh = qi_u32(b + 2 + 2 * one);
            const uint8_t *qs = b + 6 + 2 * one;
            const float d = qi_f16(b);
            for (int j = 0; j < 16; j++) {
                u[j] = (uint8_t)((qs[j] & 0xf) | ((qh >> j) & 1) << 4);
                u[j + 16] = (uint8_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
            }
            s[i] = d, m[i] = one ? qi_f16(b + 2) : -16.0f * d;
            b += one ? 24 : 22;
        }
        break;
    case CVX_Q2_K:
        for (int i = 0; i < K / 256; i++, b += 84) {
            const float d = qi_f16(b + 80), dmin = qi_f16(b + 82);
            const uint8_t *q = b + 16;
            int is = 0;
            for (int h = 0; h < 2; h++, q += 32)
                for (int shift = 0; shift < 8; shift += 2)
                    for (int half = 0; half < 2; half++, is++, u += 16) {
                        const uint8_t sc = b[is];
                        for (int l = 0; l < 16; l++) u[l] = (q[l + 16 * half] >> shift) & 3;
                        *s++ = d * (float)(sc & 0xf), *m++ = -(dmin * (float)(sc >> 4));
                    }
        }
        break;
    case CVX_Q3_K:
        for (int i = 0; i < K / 256; i++, b += 110) {
            const float d = qi_f16(b + 108);
            const uint8_t *hm = b, *q = b + 32;
            int sc[16], is = 0;
            qi_q3_K_scales(b + 96, sc);
            uint8_t bit = 1;
            for (int h = 0; h < 2; h++, q += 32)
                for (int shift = 0; shift < 8; shift += 2, bit <<= 1)
                    for (int half = 0; half < 2; half++, u += 16) {
                        const float dl = d * (float)sc[is++];
                        for (int l = 0; l < 16; l++) {
                            const int k = l + 16 * half;   /* value ((q >> shift) & 3) - (hm ? 0 : 4), plus 4 */
                            u[l] = (uint8_t)(((q[k] >> shift) & 3) + ((hm[k] & bit) ? 4 : 0));
                        }
                        *s++ = dl, *m++ = -4.0f * dl;
                    }
        }
        break;
    case CVX_Q4_K: case CVX_Q5_K:
        for (int i = 0; i < K / 256; i++) {
            const int five = t == CVX_Q5_K;
            const float d = qi_f16(b), dmin = qi_f16(b + 2);
            const uint8_t *qh = b + 16, *ql = b + 16 + 32 * five;
            for (int c = 0; c < 4; c++, ql += 32, u += 64) {
                for (int half = 0; half < 2; half++) {
                    uint8_t sc, mn;
                    qi_scale_min_k4(2 * c + half, b + 4, &sc, &mn);
                    *s++ = d * (float)sc, *m++ = -(dmin * (float)mn);
                }
                for (int l = 0; l < 32; l++) {
                    u[l] = (uint8_t)((ql[l] & 0xf) + (five && (qh[l] >> (2 * c) & 1) ? 16 : 0));
                    u[l + 32] = (uint8_t)((ql[l] >> 4) + (five && (qh[l] >> (2 * c + 1) & 1) ? 16 : 0));
                }
            }
            b += five ? 176 : 144;
        }
        break;
    case CVX_Q6_K:
        for (int i = 0; i < K / 256; i++, b += 210) {
            const float d = qi_f16(b + 208);
            const uint8_t *ql = b, *qh = b + 128;
            const int8_t *sc = (const int8_t *)(b + 192);
            for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, u += 128) {
                for (int l = 0; l < 32; l++) {
                    u[l] = (uint8_t)((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4);
                    u[l + 32] = (uint8_t)((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4);
                    u[l + 64] = (uint8_t)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
                    u[l + 96] = (uint8_t)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
                }
                for (int g = 0; g < 8; g++) {   /* 16 values each, scale sc[g], codes minus 32 */
                    const float dl = d * (float)sc[g];
                    *s++ = dl, *m++ = -32.0f * dl;
                }
            }
        }
        break;
    default:
        CVX_CHECK(!"cvx_q8_unpack_row: not a block type");
    }
}

/* ---------------------------------------------------------------- packing */

typedef struct {
    int K, G, NG;
    size_t panel_bytes;   /* K·16 code bytes + NG·32 floats, rounded up to 64 */
    int offset;           /* symmetric types (m = -offset·s: Q8_0, Q4_0, Q5_0, Q3_K, Q6_K): the code offset; 0: W has mins */
    int per256;           /* the activations have one scale per 256 (q8_K: the K types) */
    int s16;              /* AVX2: int16 pair sums one lane holds before widening, 0: Q8_0's signed path */
} q8_geom;

/* The code offset of a symmetric type (its W = s·(u - offset)), 0 for types with mins. */
static int sym_offset(cvx_dtype t) {
    switch (t) {
    case CVX_Q8_0: return 128;
    case CVX_Q4_0: return 8;
    case CVX_Q5_0: return 16;
    case CVX_Q3_K: return 4;
    case CVX_Q6_K: return 32;
    default: return 0;
    }
}

/* The largest code cvx_q8_unpack_row gives the type. */
static int max_code(cvx_dtype t) {
    switch (t) {
    case CVX_Q2_K: return 3;
    case CVX_Q3_K: return 7;
    case CVX_Q4_0: case CVX_Q4_1: case CVX_Q4_K: return 15;
    case CVX_Q5_0: case CVX_Q5_1: case CVX_Q5_K: return 31;
    case CVX_Q6_K: return 63;
    default: return 255;
    }
}

static q8_geom geom_of(cvx_dtype t, int K) {
    q8_geom g = {K, cvx_q8_group(t), K / cvx_q8_group(t), 0, sym_offset(t), is_k_type(t), 0};
    /* an int16 lane holds 32767 / (2·127·largest code) pair sums (4-bit codes 8, 5-bit 4, 6-bit 2),
     * at most a sub-block's G/4 steps, a power of two; codes ≥ 128 take the signed path */
    const int top = max_code(t), fit = top < 128 ? 32767 / (2 * 127 * top) : 0;
    for (int s = 8; s >= 2 && !g.s16; s /= 2)
        if (fit >= s && g.G / 4 >= s) g.s16 = s;
    g.panel_bytes = ((size_t)K * PANEL + (size_t)g.NG * 2 * PANEL * sizeof(float) + 63) & ~(size_t)63;
    return g;
}

/* Panels of the W rows [n0, n0 + 16·np) (rows ≥ N zero) into pack; tmp holds one unpacked row. */
static void pack_tile(const cvx_tensor *W, const q8_geom *g, int n0, int np, uint8_t *pack, uint8_t *tmp) {
    const int N = (int)W->shape[0];
    const size_t row_bytes = (size_t)g->K / (size_t)cvx_dtype_block(W->dtype) * cvx_dtype_block_bytes(W->dtype);
    float *s = (float *)(tmp + ((g->K + 63) & ~63)), *m = s + g->NG;
    for (int p = 0; p < np; p++) {
        uint8_t *codes = pack + (size_t)p * g->panel_bytes;
        float *sc = (float *)(codes + (size_t)g->K * PANEL);
        for (int i = 0; i < PANEL; i++) {
            const int n = n0 + p * PANEL + i;
            if (n < N) cvx_q8_unpack_row(W->dtype, (const uint8_t *)W->data + (size_t)n * row_bytes, g->K, tmp, s, m);
            else memset(tmp, 0, (size_t)g->K), memset(s, 0, sizeof(float) * 2 * (size_t)g->NG);
            for (int k4 = 0; k4 < g->K / 4; k4++) memcpy(codes + ((size_t)k4 * PANEL + i) * 4, tmp + 4 * k4, 4);
            for (int gg = 0; gg < g->NG; gg++) sc[gg * 2 * PANEL + i] = s[gg], sc[gg * 2 * PANEL + PANEL + i] = m[gg];
        }
    }
}

/* The quantized activations of all rows. */
typedef struct {
    int8_t *q;      /* [M][K] */
    float *d, *ds;  /* [M][NG] */
    int32_t *nsum;  /* [M][NG] -offset·Σ codes of the sub-block (symmetric types: the int32 accumulators' start) */
    float *qsum;    /* [M][NG] Σ codes of the sub-block */
} q8_act;

/* ---------------------------------------------------------------- kernels */

/* C[r·ldc + c·16 + i] += the sub-blocks [g0, g1) of the product of activation row r0 + r and row i
 * of panel c (r < rm ≤ 4, c < rn ≤ 2). */
typedef void (*q8_kernel_fn)(int rm, int rn, const q8_act *a, int r0, const q8_geom *g, const uint8_t *panel, int g0,
                             int g1, float *C, int ldc);

static void kernel_scalar(int rm, int rn, const q8_act *a, int r0, const q8_geom *g, const uint8_t *panel, int g0,
                          int g1, float *C, int ldc) {
    for (int r = 0; r < rm; r++)
        for (int c = 0; c < rn; c++) {
            const uint8_t *codes = panel + (size_t)c * g->panel_bytes;
            const float *sc = (const float *)(codes + (size_t)g->K * PANEL);
            const int8_t *q = a->q + (size_t)(r0 + r) * g->K;
            const float *d = a->d + (size_t)(r0 + r) * g->NG, *ds = a->ds + (size_t)(r0 + r) * g->NG;
            for (int i = 0; i < PANEL; i++) {
                float f = C[(size_t)r * ldc + c * PANEL + i];
                for (int gg = g0; gg < g1; gg++) {
                    int32_t acc = 0;
                    for (int k = gg * g->G; k < (gg + 1) * g->G; k++) acc += codes[((size_t)(k / 4) * PANEL + i) * 4 + k % 4] * q[k];
                    f += (float)acc * (sc[gg * 2 * PANEL + i] * d[gg]);
                    f += sc[gg * 2 * PANEL + PANEL + i] * ds[gg];
                }
                C[(size_t)r * ldc + c * PANEL + i] = f;
            }
        }
}

#if defined(__x86_64__)
#define AVX2_FN __attribute__((target("avx2,fma")))
#define VNNI_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

/* AVX2 (no VNNI): per 4 k a 32-byte vector holds 8 rows' 4 codes; vpmaddubsw multiplies the
 * unsigned codes by 4 activation bytes (broadcast) and adds pairs into int16, vpmaddwd by ones adds
 * those into the int32 sums. An int16 pair sum cannot saturate for codes < 128 (2·127·127 < 32768),
 * and S16 of them fit one int16 lane before it is widened (by the type's largest code: 4-bit codes
 * 8, 5-bit 4, Q6_K's 6-bit 2; at most a sub-block). Q8_0's codes reach 255: it multiplies |w|
 * (w = u - 128) by sign(x, w) (ggml's trick: |w| ≤ 128, |x| ≤ 127) and adds 128·Σx back. Every
 * kernel's int32 sums are Σ u·x over the sub-block, exactly; the float epilogue is the old AVX2
 * kernel's, so the results are bit for bit its. 2 rows × 1 panel; C is updated per sub-block (the
 * float sums stay out of the registers the integer loop needs). */
static inline __attribute__((always_inline)) AVX2_FN void avx2_body(const int RM, const int G, const int S16,
                                                                     const int SIGNED, const q8_act *a, int r0,
                                                                     const q8_geom *g, const uint8_t *codes, int g0,
                                                                     int g1, float *C, int ldc) {
    const float *sc = (const float *)(codes + (size_t)g->K * PANEL);
    const size_t K = (size_t)g->K;
    const int8_t *xr = a->q + (size_t)r0 * K;
    const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
    for (int gg = g0; gg < g1; gg++) {
        const uint8_t *w0 = codes + (size_t)gg * G * PANEL;
        const int8_t *x0 = xr + (size_t)gg * G;
        __m256i acc[2][2];
#pragma GCC unroll 8
        for (int s = 0; s < G / 4; s += S16) {
            __m256i p[2][2];
#pragma GCC unroll 8
            for (int t = 0; t < S16; t++) {
                __m256i w[2] = {_mm256_loadu_si256((const __m256i *)(w0 + (size_t)(s + t) * 64)),
                                _mm256_loadu_si256((const __m256i *)(w0 + (size_t)(s + t) * 64 + 32))}, u[2];
                for (int c = 0; c < 2; c++) {
                    if (SIGNED) w[c] = _mm256_xor_si256(w[c], flip);   /* u - 128 as int8 */
                    u[c] = SIGNED ? _mm256_abs_epi8(w[c]) : w[c];
                }
#pragma GCC unroll 4
                for (int r = 0; r < RM; r++) {
                    int32_t x4;
                    memcpy(&x4, x0 + (size_t)r * K + 4 * (s + t), 4);
                    const __m256i xb = _mm256_set1_epi32(x4);
                    for (int c = 0; c < 2; c++) {
                        const __m256i m = _mm256_maddubs_epi16(u[c], SIGNED ? _mm256_sign_epi8(xb, w[c]) : xb);
                        p[r][c] = t ? _mm256_add_epi16(p[r][c], m) : m;
                    }
                }
            }
            for (int r = 0; r < RM; r++)
                for (int c = 0; c < 2; c++) {
                    const __m256i m = _mm256_madd_epi16(p[r][c], ones);
                    acc[r][c] = s ? _mm256_add_epi32(acc[r][c], m) : m;
                }
        }
        const __m256 s0 = _mm256_loadu_ps(sc + gg * 2 * PANEL), s1 = _mm256_loadu_ps(sc + gg * 2 * PANEL + 8);
        const __m256 m0 = _mm256_loadu_ps(sc + gg * 2 * PANEL + 16), m1 = _mm256_loadu_ps(sc + gg * 2 * PANEL + 24);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const size_t i = (size_t)(r0 + r) * g->NG + gg;
            if (SIGNED) {   /* Σ u·x = Σ w·x + 128·Σx (qsum: Σx, an exact integer) */
                const __m256i n = _mm256_set1_epi32(128 * (int32_t)a->qsum[i]);
                acc[r][0] = _mm256_add_epi32(acc[r][0], n), acc[r][1] = _mm256_add_epi32(acc[r][1], n);
            }
            const __m256 d = _mm256_set1_ps(a->d[i]), ds = _mm256_set1_ps(a->ds[i]);
            float *Cr = C + (size_t)r * ldc;
            __m256 f0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][0]), _mm256_mul_ps(s0, d), _mm256_loadu_ps(Cr));
            __m256 f1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][1]), _mm256_mul_ps(s1, d), _mm256_loadu_ps(Cr + 8));
            _mm256_storeu_ps(Cr, _mm256_fmadd_ps(m0, ds, f0));
            _mm256_storeu_ps(Cr + 8, _mm256_fmadd_ps(m1, ds, f1));
        }
    }
}

/* The variants: sub-block G, and {S16, SIGNED} by the largest code of the type. */
#define AVX2_VARIANT(NAME, G, S16, SIGNED)                                                                        \
    static AVX2_FN void avx2_##NAME(int rm, const q8_act *a, int r0, const q8_geom *g, const uint8_t *codes,     \
                                    int g0, int g1, float *C, int ldc) {                                         \
        if (rm == 2) avx2_body(2, G, S16, SIGNED, a, r0, g, codes, g0, g1, C, ldc);                             \
        else avx2_body(1, G, S16, SIGNED, a, r0, g, codes, g0, g1, C, ldc);                                     \
    }
AVX2_VARIANT(g32_signed, 32, 1, 1)
AVX2_VARIANT(g32_s4, 32, 4, 0)
AVX2_VARIANT(g32_s8, 32, 8, 0)
AVX2_VARIANT(g16_signed, 16, 1, 1)
AVX2_VARIANT(g16_s2, 16, 2, 0)
AVX2_VARIANT(g16_s4, 16, 4, 0)

static AVX2_FN void kernel_avx2(int rm, int rn, const q8_act *a, int r0, const q8_geom *g, const uint8_t *panel,
                                int g0, int g1, float *C, int ldc) {
    typedef void (*fn)(int, const q8_act *, int, const q8_geom *, const uint8_t *, int, int, float *, int);
    const fn body = g->G == 32 ? (g->s16 == 8 ? avx2_g32_s8 : g->s16 == 4 ? avx2_g32_s4 : avx2_g32_signed)
                               : (g->s16 == 4 ? avx2_g16_s4 : g->s16 == 2 ? avx2_g16_s2 : avx2_g16_signed);
    for (int c = 0; c < rn; c++)
        for (int r = 0; r < rm; r += 2)
            body(r + 1 < rm ? 2 : 1, a, r0 + r, g, panel + (size_t)c * g->panel_bytes, g0, g1,
                 C + (size_t)r * ldc + c * PANEL, ldc);
}

/* AVX512-VNNI: RM rows × RN panels, int32 accumulators per sub-block of G (a constant: the loop
 * unrolls). SYM (symmetric weight types): the accumulators start at -offset·Σq, so they end as
 * Σ (u - offset)·q exactly and no offset term is needed. PER256 (K types, one activation scale per
 * 256 = per call, KCHUNK): the sub-blocks accumulate s·acc (+ m·Σq) and d is applied once. */
static inline __attribute__((always_inline)) VNNI_FN void vnni_body(const int RM, const int RN, const int G,
                                                                     const int SYM, const int PER256, const q8_act *a,
                                                                     int r0, const q8_geom *g, const uint8_t *panel,
                                                                     int g0, int g1, float *C, int ldc) {
    const size_t pb = g->panel_bytes;
    const int NG = g->NG;
    const float *sc0 = (const float *)(panel + (size_t)g->K * PANEL), *sc1 = (const float *)((const uint8_t *)sc0 + pb);
    __m512 f[RM_MAX][RN_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 2
        for (int c = 0; c < RN; c++) f[r][c] = PER256 ? _mm512_setzero_ps() : _mm512_loadu_ps(C + (size_t)r * ldc + c * PANEL);
    const int8_t *xr = a->q + (size_t)r0 * g->K;
    const size_t K = (size_t)g->K, ro = (size_t)r0 * NG;
    for (int gg = g0; gg < g1; gg++) {
        __m512i acc[RM_MAX][RN_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const __m512i init = SYM ? _mm512_set1_epi32(a->nsum[ro + (size_t)r * NG + gg]) : _mm512_setzero_si512();
#pragma GCC unroll 2
            for (int c = 0; c < RN; c++) acc[r][c] = init;
        }
        const uint8_t *w0 = panel + (size_t)gg * G * PANEL;
        const int8_t *x0 = xr + (size_t)gg * G;
#pragma GCC unroll 8
        for (int s = 0; s < G / 4; s++) {
            __m512i w[RN_MAX];
#pragma GCC unroll 2
            for (int c = 0; c < RN; c++) w[c] = _mm512_load_si512((const void *)(w0 + c * pb + (size_t)s * 64));
#pragma GCC unroll 4
            for (int r = 0; r < RM; r++) {
                int32_t x4;
                memcpy(&x4, x0 + r * K + 4 * s, 4);
                const __m512i xb = _mm512_set1_epi32(x4);
#pragma GCC unroll 2
                for (int c = 0; c < RN; c++) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], w[c], xb);
            }
        }
        __m512 sv[RN_MAX], mv[RN_MAX];
#pragma GCC unroll 2
        for (int c = 0; c < RN; c++) {
            const float *sc = c ? sc1 : sc0;
            sv[c] = _mm512_load_ps(sc + gg * 2 * PANEL);
            mv[c] = SYM ? sv[c] : _mm512_load_ps(sc + gg * 2 * PANEL + PANEL);
        }
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const size_t i = ro + (size_t)r * NG + gg;
            if (PER256) {
                const __m512 qs = _mm512_set1_ps(a->qsum[i]);
#pragma GCC unroll 2
                for (int c = 0; c < RN; c++) {
                    f[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][c]), sv[c], f[r][c]);
                    if (!SYM) f[r][c] = _mm512_fmadd_ps(mv[c], qs, f[r][c]);
                }
            } else {
                const __m512 d = _mm512_set1_ps(a->d[i]), ds = _mm512_set1_ps(a->ds[i]);
#pragma GCC unroll 2
                for (int c = 0; c < RN; c++) {
                    f[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][c]), _mm512_mul_ps(sv[c], d), f[r][c]);
                    if (!SYM) f[r][c] = _mm512_fmadd_ps(mv[c], ds, f[r][c]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) {
        float *Cr = C + (size_t)r * ldc;
        const __m512 d = _mm512_set1_ps(PER256 ? a->d[ro + (size_t)r * NG + g0] : 0.0f);
#pragma GCC unroll 2
        for (int c = 0; c < RN; c++)
            _mm512_storeu_ps(Cr + c * PANEL, PER256 ? _mm512_fmadd_ps(f[r][c], d, _mm512_loadu_ps(Cr + c * PANEL)) : f[r][c]);
    }
}

/* The kinds: {G, SYM, PER256} = 0: Q8_0/Q4_0/Q5_0, 1: Q4_1/Q5_1, 2: Q4_K/Q5_K, 3: Q3_K/Q6_K, 4: Q2_K. */
#define VNNI_VARIANT(RM, RN, KIND, G, SYM, P)                                                                     \
    static VNNI_FN void vnni_##KIND##_##RM##_##RN(const q8_act *a, int r0, const q8_geom *g, const uint8_t *panel, \
                                                  int g0, int g1, float *C, int ldc) {                            \
        vnni_body(RM, RN, G, SYM, P, a, r0, g, panel, g0, g1, C, ldc);                                            \
    }
#define VNNI_KIND(KIND, G, SYM, P)                                                                                \
    VNNI_VARIANT(1, 1, KIND, G, SYM, P) VNNI_VARIANT(2, 1, KIND, G, SYM, P) VNNI_VARIANT(3, 1, KIND, G, SYM, P)  \
    VNNI_VARIANT(4, 1, KIND, G, SYM, P) VNNI_VARIANT(1, 2, KIND, G, SYM, P) VNNI_VARIANT(2, 2, KIND, G, SYM, P)  \
    VNNI_VARIANT(3, 2, KIND, G, SYM, P) VNNI_VARIANT(4, 2, KIND, G, SYM, P)
VNNI_KIND(0, 32, 1, 0)
VNNI_KIND(1, 32, 0, 0)
VNNI_KIND(2, 32, 0, 1)
VNNI_KIND(3, 16, 1, 1)
VNNI_KIND(4, 16, 0, 1)
#define VNNI_ROW(KIND)                                                                                            \
    {{vnni_##KIND##_1_1, vnni_##KIND##_2_1, vnni_##KIND##_3_1, vnni_##KIND##_4_1},                                \
     {vnni_##KIND##_1_2, vnni_##KIND##_2_2, vnni_##KIND##_3_2, vnni_##KIND##_4_2}}

static void kernel_vnni(int rm, int rn, const q8_act *a, int r0, const q8_geom *g, const uint8_t *panel, int g0,
                        int g1, float *C, int ldc) {
    typedef void (*fn)(const q8_act *, int, const q8_geom *, const uint8_t *, int, int, float *, int);
    static const fn table[5][RN_MAX][RM_MAX] = {VNNI_ROW(0), VNNI_ROW(1), VNNI_ROW(2), VNNI_ROW(3), VNNI_ROW(4)};
    const int kind = !g->per256 ? (g->offset ? 0 : 1) : g->G == 32 ? 2 : g->offset ? 3 : 4;
    table[kind][rn - 1][rm - 1](a, r0, g, panel, g0, g1, C, ldc);
}
#endif

static q8_kernel_fn pick_kernel(const cvx_cpu_features *cpu, cvx_q8_kernel force) {
#if defined(__x86_64__)
    if (force == CVX_Q8K_AUTO && cpu->avx512_vnni) return kernel_vnni;
    if (force != CVX_Q8K_SCALAR && cpu->avx2) return kernel_avx2;
#endif
    (void)cpu, (void)force;
    return kernel_scalar;
}

const char *cvx_q8_kernel_name(const cvx_cpu_features *cpu, cvx_q8_kernel force) {
    q8_kernel_fn k = pick_kernel(cpu, force);
#if defined(__x86_64__)
    if (k == kernel_vnni) return "avx512-vnni";
    if (k == kernel_avx2) return "avx2";
#endif
    return "scalar";
}

/* ---------------------------------------------------------------- the GEMM */

/* One thread's: the packed tile, one unpacked row, the output tile C [MBLOCK][TILE_PANELS·16]. */
static size_t per_thread_bytes(const q8_geom *g) {
    return (TILE_PANELS * g->panel_bytes + ((size_t)g->K + 63) / 64 * 64 + 2 * sizeof(float) * g->NG + 64 +
            sizeof(float) * MBLOCK * TILE_PANELS * PANEL + 64 + 63) & ~(size_t)63;
}

size_t cvx_q8_scratch_bytes(cvx_dtype t, int M, int K, int threads) {
    const q8_geom g = geom_of(t, K);
    const size_t act = (size_t)M * K + 4 * sizeof(float) * (size_t)M * g.NG;
    return act + 64 * 6 + (size_t)threads * per_thread_bytes(&g);
}

static uint8_t *align64(uint8_t *p) { return (uint8_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

int cvx_q8_run(const cvx_cpu_features *cpu, cvx_q8_kernel force, const float *x, int M, int K, const cvx_tensor *W,
               const float *bias, float *y, void *buf) {
    if (!cvx_dtype_is_quant(W->dtype) || W->ndim != 2 || W->shape[1] != K || K % cvx_dtype_block(W->dtype))
        return cvx_error("%s: int8 linear: weight '%s' (%s) must be 2-D [N, %d] of a block type with whole blocks per row",
                         W->file, W->name, cvx_dtype_name(W->dtype), K);
    const int N = (int)W->shape[0];
    if (M <= 0 || N <= 0) return 0;
    const q8_geom g = geom_of(W->dtype, K);
    const q8_kernel_fn kern = pick_kernel(cpu, force);
    uint8_t *p = align64(buf);
    q8_act a;
    a.q = (int8_t *)p, p = align64(p + (size_t)M * K);
    a.d = (float *)p, p = align64(p + sizeof(float) * (size_t)M * g.NG);
    a.ds = (float *)p, p = align64(p + sizeof(float) * (size_t)M * g.NG);
    a.nsum = (int32_t *)p, p = align64(p + sizeof(int32_t) * (size_t)M * g.NG);
    a.qsum = (float *)p, p = align64(p + sizeof(float) * (size_t)M * g.NG);
    uint8_t *thread_bufs = p;
    const size_t per_thread = per_thread_bytes(&g);

#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) {
        int8_t *q = a.q + (size_t)r * K;
        cvx_q8_quantize_row_fast(cpu, W->dtype, x + (size_t)r * K, K, q, a.d + (size_t)r * g.NG, a.ds + (size_t)r * g.NG);
        for (int gg = 0; gg < g.NG; gg++) {   /* Σ codes per sub-block (exact in int32 and in float) */
            int32_t sum = 0;
            for (int j = 0; j < g.G; j++) sum += q[gg * g.G + j];
            a.nsum[(size_t)r * g.NG + gg] = -g.offset * sum;
            a.qsum[(size_t)r * g.NG + gg] = (float)sum;
        }
    }

    const int tile_n = TILE_PANELS * PANEL, n_tiles = (N + tile_n - 1) / tile_n, m_blocks = (M + MBLOCK - 1) / MBLOCK;
    const int kc_groups = KCHUNK / g.G;   /* sub-blocks per K chunk: its slice of the tile stays in L1 */
#pragma omp parallel
    {
        uint8_t *pack = thread_bufs + (size_t)omp_get_thread_num() * per_thread;
        uint8_t *tmp = pack + TILE_PANELS * g.panel_bytes;
        float *C = (float *)(tmp + (((size_t)K + 63) & ~(size_t)63) + 2 * sizeof(float) * g.NG + 64);
        C = (float *)(((uintptr_t)C + 63) & ~(uintptr_t)63);
        int cur = -1, np = 0;
#pragma omp for schedule(static)
        for (int task = 0; task < n_tiles * m_blocks; task++) {
            const int nt = task / m_blocks, mb = task % m_blocks, n0 = nt * tile_n;
            if (nt != cur) {
                np = (N - n0 + PANEL - 1) / PANEL;
                np = np < TILE_PANELS ? np : TILE_PANELS;
                pack_tile(W, &g, n0, np, pack, tmp);
                cur = nt;
            }
            const int m0 = mb * MBLOCK, m_end = m0 + MBLOCK < M ? m0 + MBLOCK : M, ldc = TILE_PANELS * PANEL;
            memset(C, 0, sizeof(float) * (size_t)(m_end - m0) * ldc);
            for (int g0 = 0; g0 < g.NG; g0 += kc_groups) {
                const int g1 = g0 + kc_groups < g.NG ? g0 + kc_groups : g.NG;
                for (int r0 = m0; r0 < m_end; r0 += RM_MAX) {
                    const int rm = m_end - r0 < RM_MAX ? m_end - r0 : RM_MAX;
                    for (int c0 = 0; c0 < np; c0 += RN_MAX) {
                        const int rn = np - c0 < RN_MAX ? np - c0 : RN_MAX;
                        kern(rm, rn, &a, r0, &g, pack + (size_t)c0 * g.panel_bytes, g0, g1,
                             C + (size_t)(r0 - m0) * ldc + c0 * PANEL, ldc);
                    }
                }
            }
            const int nv = N - n0 < np * PANEL ? N - n0 : np * PANEL;
            for (int r = m0; r < m_end; r++) {
                float *yr = y + (size_t)r * N + n0;
                const float *cr = C + (size_t)(r - m0) * ldc;
                for (int j = 0; j < nv; j++) yr[j] = cr[j] + (bias ? bias[n0 + j] : 0.0f);
            }
        }
    }
    return 0;
}

int cvx_q8_linear(const cvx_cpu_features *cpu, cvx_q8_kernel force, const float *x, int M, int K, const cvx_tensor *W,
                  const float *bias, float *y) {
    if (!cvx_dtype_is_quant(W->dtype)) return cvx_q8_run(cpu, force, x, M, K, W, bias, y, NULL);
    void *buf = cvx_alloc_aligned_at(cvx_q8_scratch_bytes(W->dtype, M, K, omp_get_max_threads()), __FILE__, __LINE__);
    int rc = cvx_q8_run(cpu, force, x, M, K, W, bias, y, buf);
    free(buf);
    return rc;
}
