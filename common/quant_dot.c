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

enum { PANEL = 16, TILE_PANELS = 4, MBLOCK = 256, RM_MAX = 4, RN_MAX = 2 };

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
            for (int j = 0; j < CVX_QK; j++) amax = amax > fabsf(x[b + j]) ? amax : fabsf(x[b + j]);
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
} q8_geom;

static q8_geom geom_of(cvx_dtype t, int K) {
    q8_geom g = {K, cvx_q8_group(t), K / cvx_q8_group(t), 0};
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

/* The quantized activations of all rows. xe (AVX2 kernel only): per row and 4 k, the codes as
 * 16-bit pairs (q0, q2) and (q1, q3) for vpmaddwd. */
typedef struct {
    int8_t *q;      /* [M][K] */
    float *d, *ds;  /* [M][NG] */
    int32_t *xe;    /* [M][K/4][2] or NULL */
} q8_act;

/* ---------------------------------------------------------------- kernels */

/* out[r][c·16 + i] = Σ over K for activation row r and panel c's row i (rm ≤ 4, rn ≤ 2). */
typedef void (*q8_kernel_fn)(int rm, int rn, const q8_act *a, int r0, const q8_geom *g, const uint8_t *panel,
                             float out[RM_MAX][RN_MAX * PANEL]);

static void kernel_scalar(int rm, int rn, const q8_act *a, int r0, const q8_geom *g, const uint8_t *panel,
                          float out[RM_MAX][RN_MAX * PANEL]) {
    for (int r = 0; r < rm; r++)
        for (int c = 0; c < rn; c++) {
            const uint8_t *codes = panel + (size_t)c * g->panel_bytes;
            const float *sc = (const float *)(codes + (size_t)g->K * PANEL);
            const int8_t *q = a->q + (size_t)(r0 + r) * g->K;
            const float *d = a->d + (size_t)(r0 + r) * g->NG, *ds = a->ds + (size_t)(r0 + r) * g->NG;
            for (int i = 0; i < PANEL; i++) {
                float f = 0;
                for (int gg = 0; gg < g->NG; gg++) {
                    int32_t acc = 0;
                    for (int k = gg * g->G; k < (gg + 1) * g->G; k++) acc += codes[((size_t)(k / 4) * PANEL + i) * 4 + k % 4] * q[k];
                    f += (float)acc * (sc[gg * 2 * PANEL + i] * d[gg]);
                    f += sc[gg * 2 * PANEL + PANEL + i] * ds[gg];
                }
                out[r][c * PANEL + i] = f;
            }
        }
}

#if defined(__x86_64__)
#define AVX2_FN __attribute__((target("avx2,fma")))
#define VNNI_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

static inline __attribute__((always_inline)) AVX2_FN void avx2_body(const int RM, const q8_act *a, int r0,
                                                                     const q8_geom *g, const uint8_t *codes,
                                                                     float *out0, float *out1, float *out2, float *out3) {
    const float *sc = (const float *)(codes + (size_t)g->K * PANEL);
    float *outs[4] = {out0, out1, out2, out3};
    __m256 f[4][2];
    for (int r = 0; r < 4; r++) f[r][0] = f[r][1] = _mm256_setzero_ps();
    const __m256i lo_mask = _mm256_set1_epi32(0x00ff00ff);
    for (int gg = 0; gg < g->NG; gg++) {
        __m256i acc[4][2];
        for (int r = 0; r < 4; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
        for (int k4 = gg * g->G / 4; k4 < (gg + 1) * g->G / 4; k4++) {
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)(codes + (size_t)k4 * 64));
            const __m256i w1 = _mm256_loadu_si256((const __m256i *)(codes + (size_t)k4 * 64 + 32));
            const __m256i w0l = _mm256_and_si256(w0, lo_mask), w0h = _mm256_srli_epi16(w0, 8);
            const __m256i w1l = _mm256_and_si256(w1, lo_mask), w1h = _mm256_srli_epi16(w1, 8);
#pragma GCC unroll 4
            for (int r = 0; r < RM; r++) {
                const int32_t *xe = a->xe + ((size_t)(r0 + r) * (g->K / 4) + k4) * 2;
                const __m256i xev = _mm256_set1_epi32(xe[0]), xov = _mm256_set1_epi32(xe[1]);
                acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_add_epi32(_mm256_madd_epi16(w0l, xev),
                                                                         _mm256_madd_epi16(w0h, xov)));
                acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_add_epi32(_mm256_madd_epi16(w1l, xev),
                                                                         _mm256_madd_epi16(w1h, xov)));
            }
        }
        const __m256 s0 = _mm256_loadu_ps(sc + gg * 2 * PANEL), s1 = _mm256_loadu_ps(sc + gg * 2 * PANEL + 8);
        const __m256 m0 = _mm256_loadu_ps(sc + gg * 2 * PANEL + 16), m1 = _mm256_loadu_ps(sc + gg * 2 * PANEL + 24);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const __m256 d = _mm256_set1_ps(a->d[(size_t)(r0 + r) * g->NG + gg]);
            const __m256 ds = _mm256_set1_ps(a->ds[(size_t)(r0 + r) * g->NG + gg]);
            f[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][0]), _mm256_mul_ps(s0, d), f[r][0]);
            f[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][1]), _mm256_mul_ps(s1, d), f[r][1]);
            f[r][0] = _mm256_fmadd_ps(m0, ds, f[r][0]);
            f[r][1] = _mm256_fmadd_ps(m1, ds, f[r][1]);
        }
    }
    for (int r = 0; r < RM; r++) _mm256_storeu_ps(outs[r], f[r][0]), _mm256_storeu_ps(outs[r] + 8, f[r][1]);
}

static AVX2_FN void kernel_avx2(int rm, int rn, const q8_act *a, int r0, const q8_geom *g, const uint8_t *panel,
                                float out[RM_MAX][RN_MAX * PANEL]) {
    for (int c = 0; c < rn; c++) {
        const uint8_t *codes = panel + (size_t)c * g->panel_bytes;
        for (int r = 0; r < rm; r += 2) {
            float *o0 = out[r] + c * PANEL, *o1 = r + 1 < rm ? out[r + 1] + c * PANEL : NULL;
            if (o1) avx2_body(2, a, r0 + r, g, codes, o0, o1, NULL, NULL);
            else avx2_body(1, a, r0 + r, g, codes, o0, NULL, NULL, NULL);
        }
    }
}

static inline __attribute__((always_inline)) VNNI_FN void vnni_body(const int RM, const int RN, const q8_act *a,
                                                                     int r0, const q8_geom *g, const uint8_t *panel,
                                                                     float out[RM_MAX][RN_MAX * PANEL]) {
    const size_t pb = g->panel_bytes;
    const float *sc0 = (const float *)(panel + (size_t)g->K * PANEL), *sc1 = (const float *)((const uint8_t *)sc0 + pb);
    __m512 f[RM_MAX][RN_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 2
        for (int c = 0; c < RN; c++) f[r][c] = _mm512_setzero_ps();
    const int8_t *xr[RM_MAX];
    for (int r = 0; r < RM; r++) xr[r] = a->q + (size_t)(r0 + r) * g->K;
    for (int gg = 0; gg < g->NG; gg++) {
        __m512i acc[RM_MAX][RN_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++)
#pragma GCC unroll 2
            for (int c = 0; c < RN; c++) acc[r][c] = _mm512_setzero_si512();
        for (int k = gg * g->G; k < (gg + 1) * g->G; k += 4) {
            __m512i w[RN_MAX];
#pragma GCC unroll 2
            for (int c = 0; c < RN; c++) w[c] = _mm512_load_si512((const void *)(panel + c * pb + (size_t)k * PANEL));
#pragma GCC unroll 4
            for (int r = 0; r < RM; r++) {
                int32_t x4;
                memcpy(&x4, xr[r] + k, 4);
                const __m512i xb = _mm512_set1_epi32(x4);
#pragma GCC unroll 2
                for (int c = 0; c < RN; c++) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], w[c], xb);
            }
        }
        __m512 s[RN_MAX], m[RN_MAX];
#pragma GCC unroll 2
        for (int c = 0; c < RN; c++) {
            const float *sc = c ? sc1 : sc0;
            s[c] = _mm512_load_ps(sc + gg * 2 * PANEL);
            m[c] = _mm512_load_ps(sc + gg * 2 * PANEL + PANEL);
        }
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const __m512 d = _mm512_set1_ps(a->d[(size_t)(r0 + r) * g->NG + gg]);
            const __m512 ds = _mm512_set1_ps(a->ds[(size_t)(r0 + r) * g->NG + gg]);
#pragma GCC unroll 2
            for (int c = 0; c < RN; c++) {
                f[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][c]), _mm512_mul_ps(s[c], d), f[r][c]);
                f[r][c] = _mm512_fmadd_ps(m[c], ds, f[r][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 2
        for (int c = 0; c < RN; c++) _mm512_storeu_ps(out[r] + c * PANEL, f[r][c]);
}

#define VNNI_VARIANT(RM, RN)                                                                                      \
    static VNNI_FN void vnni_##RM##_##RN(const q8_act *a, int r0, const q8_geom *g, const uint8_t *panel,        \
                                         float out[RM_MAX][RN_MAX * PANEL]) {                                    \
        vnni_body(RM, RN, a, r0, g, panel, out);                                                                  \
    }
VNNI_VARIANT(1, 1) VNNI_VARIANT(2, 1) VNNI_VARIANT(3, 1) VNNI_VARIANT(4, 1)
VNNI_VARIANT(1, 2) VNNI_VARIANT(2, 2) VNNI_VARIANT(3, 2) VNNI_VARIANT(4, 2)

static void kernel_vnni(int rm, int rn, const q8_act *a, int r0, const q8_geom *g, const uint8_t *panel,
                        float out[RM_MAX][RN_MAX * PANEL]) {
    typedef void (*fn)(const q8_act *, int, const q8_geom *, const uint8_t *, float[RM_MAX][RN_MAX * PANEL]);
    static const fn table[RN_MAX][RM_MAX] = {{vnni_1_1, vnni_2_1, vnni_3_1, vnni_4_1},
                                             {vnni_1_2, vnni_2_2, vnni_3_2, vnni_4_2}};
    table[rn - 1][rm - 1](a, r0, g, panel, out);
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

static size_t per_thread_bytes(const q8_geom *g) {
    return (TILE_PANELS * g->panel_bytes + ((size_t)g->K + 63) / 64 * 64 + 2 * sizeof(float) * g->NG + 64 + 63) &
           ~(size_t)63;
}

size_t cvx_q8_scratch_bytes(cvx_dtype t, int M, int K, int threads) {
    const q8_geom g = geom_of(t, K);
    const size_t act = (size_t)M * K + 2 * sizeof(float) * (size_t)M * g.NG + 2 * sizeof(int32_t) * (size_t)M * (K / 4);
    return act + 64 * 5 + (size_t)threads * per_thread_bytes(&g);
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
#if defined(__x86_64__)
    const int need_xe = kern == kernel_avx2;
#else
    const int need_xe = 0;
#endif
    uint8_t *p = align64(buf);
    q8_act a;
    a.q = (int8_t *)p, p = align64(p + (size_t)M * K);
    a.d = (float *)p, p = align64(p + sizeof(float) * (size_t)M * g.NG);
    a.ds = (float *)p, p = align64(p + sizeof(float) * (size_t)M * g.NG);
    a.xe = need_xe ? (int32_t *)p : NULL, p = align64(p + 2 * sizeof(int32_t) * (size_t)M * (K / 4));
    uint8_t *thread_bufs = p;
    const size_t per_thread = per_thread_bytes(&g);

#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) {
        int8_t *q = a.q + (size_t)r * K;
        cvx_q8_quantize_row(W->dtype, x + (size_t)r * K, K, q, a.d + (size_t)r * g.NG, a.ds + (size_t)r * g.NG);
        if (need_xe)
            for (int k4 = 0; k4 < K / 4; k4++) {
                const int8_t *v = q + 4 * k4;
                a.xe[((size_t)r * (K / 4) + k4) * 2] = (int32_t)((uint32_t)(uint16_t)v[0] | (uint32_t)(uint16_t)v[2] << 16);
                a.xe[((size_t)r * (K / 4) + k4) * 2 + 1] = (int32_t)((uint32_t)(uint16_t)v[1] | (uint32_t)(uint16_t)v[3] << 16);
            }
    }

    const int tile_n = TILE_PANELS * PANEL, n_tiles = (N + tile_n - 1) / tile_n, m_blocks = (M + MBLOCK - 1) / MBLOCK;
#pragma omp parallel
    {
        uint8_t *pack = thread_bufs + (size_t)omp_get_thread_num() * per_thread;
        uint8_t *tmp = pack + TILE_PANELS * g.panel_bytes;
        int cur = -1, np = 0;
        float out[RM_MAX][RN_MAX * PANEL];
#pragma omp for schedule(static)
        for (int task = 0; task < n_tiles * m_blocks; task++) {
            const int nt = task / m_blocks, mb = task % m_blocks, n0 = nt * tile_n;
            if (nt != cur) {
                np = (N - n0 + PANEL - 1) / PANEL;
                np = np < TILE_PANELS ? np : TILE_PANELS;
                pack_tile(W, &g, n0, np, pack, tmp);
                cur = nt;
            }
            const int m_end = (mb + 1) * MBLOCK < M ? (mb + 1) * MBLOCK : M;
            for (int r0 = mb * MBLOCK; r0 < m_end; r0 += RM_MAX) {
                const int rm = m_end - r0 < RM_MAX ? m_end - r0 : RM_MAX;
                for (int c0 = 0; c0 < np; c0 += RN_MAX) {
                    const int rn = np - c0 < RN_MAX ? np - c0 : RN_MAX;
                    kern(rm, rn, &a, r0, &g, pack + (size_t)c0 * g.panel_bytes, out);
                    const int nb = n0 + c0 * PANEL, nv = N - nb < rn * PANEL ? N - nb : rn * PANEL;
                    for (int r = 0; r < rm; r++) {
                        float *yr = y + (size_t)(r0 + r) * N + nb;
                        for (int j = 0; j < nv; j++) yr[j] = out[r][j] + (bias ? bias[nb + j] : 0.0f);
                    }
                }
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
