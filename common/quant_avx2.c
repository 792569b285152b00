/* Fast dequantizers (AVX2) for the types real checkpoints use most: Q8_0, Q4_K, Q6_K. They do
 * the reference's float32 operations per element (multiply, then subtract: no FMA), so their
 * output is bit-identical to quant.c / quant_k.c (tests/common_quant.c checks every block).
 * Without AVX2 they are the reference. */
#include "quant_impl.h"

#ifdef __AVX2__
#include <immintrin.h>

/* 8 bytes at p widened to 8 floats (unsigned / signed). */
static inline __m256 u8x8_ps(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
static inline __m256 i8x8_ps(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

void cvx_q8_0_to_f32_fast(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / CVX_QK; i++, b += 34, y += CVX_QK) {
        const __m256 d = _mm256_set1_ps(qi_f16(b));
        for (int j = 0; j < CVX_QK; j += 8) _mm256_storeu_ps(y + j, _mm256_mul_ps(i8x8_ps(b + 2 + j), d));
    }
}

void cvx_q4_K_to_f32_fast(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    const __m128i lo4 = _mm_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / CVX_QK_K; i++, b += 144) {
        const float d = qi_f16(b), min = qi_f16(b + 2);
        const uint8_t *s = b + 4, *q = b + 16;
        for (int c = 0; c < 4; c++, q += 32, y += 64) {
            /* get_scale_min_k4 for sub-blocks 2c and 2c+1 */
            int j = 2 * c;
            uint8_t sc1 = j < 4 ? s[j] & 63 : (uint8_t)((s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4);
            uint8_t m1 = j < 4 ? s[j + 4] & 63 : (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
            j++;
            uint8_t sc2 = j < 4 ? s[j] & 63 : (uint8_t)((s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4);
            uint8_t m2 = j < 4 ? s[j + 4] & 63 : (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
            const __m256 d1 = _mm256_set1_ps(d * (float)sc1), mm1 = _mm256_set1_ps(min * (float)m1);
            const __m256 d2 = _mm256_set1_ps(d * (float)sc2), mm2 = _mm256_set1_ps(min * (float)m2);
            for (int h = 0; h < 32; h += 16) {
                const __m128i v = _mm_loadu_si128((const __m128i *)(q + h));
                uint8_t lo[16], hi[16];
                _mm_storeu_si128((__m128i *)lo, _mm_and_si128(v, lo4));
                _mm_storeu_si128((__m128i *)hi, _mm_and_si128(_mm_srli_epi16(v, 4), lo4));
                for (int k = 0; k < 16; k += 8) {
                    _mm256_storeu_ps(y + h + k, _mm256_sub_ps(_mm256_mul_ps(d1, u8x8_ps(lo + k)), mm1));
                    _mm256_storeu_ps(y + 32 + h + k, _mm256_sub_ps(_mm256_mul_ps(d2, u8x8_ps(hi + k)), mm2));
                }
            }
        }
    }
}

void cvx_q6_K_to_f32_fast(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    const __m256i m4 = _mm256_set1_epi32(0xf), m3 = _mm256_set1_epi32(3), k32 = _mm256_set1_epi32(32);
    for (int64_t i = 0; i < n / CVX_QK_K; i++, b += 210) {
        const float d = qi_f16(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l += 8) {
                const int is = l / 16;
                const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l)));
                const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l + 32)));
                const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + l)));
                const __m256i q1 = _mm256_sub_epi32(
                    _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi32(_mm256_and_si256(e, m3), 4)), k32);
                const __m256i q2 = _mm256_sub_epi32(
                    _mm256_or_si256(_mm256_and_si256(c, m4),
                                    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 2), m3), 4)), k32);
                const __m256i q3 = _mm256_sub_epi32(
                    _mm256_or_si256(_mm256_srli_epi32(a, 4),
                                    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 4), m3), 4)), k32);
                const __m256i q4 = _mm256_sub_epi32(
                    _mm256_or_si256(_mm256_srli_epi32(c, 4),
                                    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 6), m3), 4)), k32);
                _mm256_storeu_ps(y + l, _mm256_mul_ps(_mm256_set1_ps(d * (float)sc[is]), _mm256_cvtepi32_ps(q1)));
                _mm256_storeu_ps(y + l + 32, _mm256_mul_ps(_mm256_set1_ps(d * (float)sc[is + 2]), _mm256_cvtepi32_ps(q2)));
                _mm256_storeu_ps(y + l + 64, _mm256_mul_ps(_mm256_set1_ps(d * (float)sc[is + 4]), _mm256_cvtepi32_ps(q3)));
                _mm256_storeu_ps(y + l + 96, _mm256_mul_ps(_mm256_set1_ps(d * (float)sc[is + 6]), _mm256_cvtepi32_ps(q4)));
            }
    }
}

#else /* no AVX2: the references */

void cvx_q8_0_to_f32_fast(const void *src, float *y, int64_t n) { cvx_q8_0_to_f32(src, y, n); }
void cvx_q4_K_to_f32_fast(const void *src, float *y, int64_t n) { cvx_q4_K_to_f32(src, y, n); }
void cvx_q6_K_to_f32_fast(const void *src, float *y, int64_t n) { cvx_q6_K_to_f32(src, y, n); }

#endif
