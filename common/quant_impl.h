/* Private to quant*.c: the row codecs the traits table of quant.c points at, and the byte
 * helpers they share. Block fields are read and written bytewise (little-endian), so blocks may
 * sit at any address. */
#ifndef CVX_QUANT_IMPL_H
#define CVX_QUANT_IMPL_H

#include <stdint.h>
#include <string.h>
#include "dtype.h"

#define CVX_QK 32    /* elements per block of Q4_0 .. Q8_0 */
#define CVX_QK_K 256 /* elements per super-block of the K types */

static inline float qi_f16(const uint8_t *p) { return cvx_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
static inline void qi_put_f16(uint8_t *p, float f) {
    uint16_t h = cvx_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}
static inline uint32_t qi_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
/* ggml's nearest_int: round to nearest (ties to even) through the float adder; exact for
 * |f| <= 2^22, meaningless (but defined) beyond. */
static inline int qi_nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* A float -> int cast (truncation toward zero) of v in [lo, hi]; outside that range, or NaN, where
 * ggml's cast is undefined behaviour, the nearest bound (lo for NaN). Same value as the cast
 * wherever ggml's is defined. */
static inline int qi_trunc(float v, int lo, int hi) { return v >= (float)lo ? (v <= (float)hi ? (int)v : hi) : lo; }

/* 6-bit scale and min of sub-block j of Q4_K/Q5_K (ggml get_scale_min_k4). */
static inline void qi_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xf) | (q[j - 4] >> 6) << 4);
        *m = (uint8_t)((q[j + 4] >> 4) | (q[j] >> 6) << 4);
    }
}
/* The 16 signed 6-bit scales of a Q3_K super-block (scales[12] at s), minus 32 as ggml uses them. */
static inline void qi_q3_K_scales(const uint8_t *s, int *out) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? s[j] & 0xf : s[j - 8] >> 4, hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (lo | hi << 4) - 32;
    }
}

/* quant_k.c: the K types (super-blocks of 256) */
void cvx_q2_K_to_f32(const void *src, float *dst, int64_t n);
void cvx_q3_K_to_f32(const void *src, float *dst, int64_t n);
void cvx_q4_K_to_f32(const void *src, float *dst, int64_t n);
void cvx_q5_K_to_f32(const void *src, float *dst, int64_t n);
void cvx_q6_K_to_f32(const void *src, float *dst, int64_t n);
void cvx_q2_K_from_f32(const float *src, void *dst, int64_t n);
void cvx_q3_K_from_f32(const float *src, void *dst, int64_t n);
void cvx_q4_K_from_f32(const float *src, void *dst, int64_t n);
void cvx_q5_K_from_f32(const float *src, void *dst, int64_t n);
void cvx_q6_K_from_f32(const float *src, void *dst, int64_t n);

/* quant_avx2.c: fast dequantizers, bit-identical to the references (the references themselves
 * when not built with AVX2). */
void cvx_q8_0_to_f32_fast(const void *src, float *dst, int64_t n);
void cvx_q4_K_to_f32_fast(const void *src, float *dst, int64_t n);
void cvx_q6_K_to_f32_fast(const void *src, float *dst, int64_t n);
/* references of quant.c the fast ones fall back to */
void cvx_q8_0_to_f32(const void *src, float *dst, int64_t n);

#endif
