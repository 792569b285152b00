/* dtype names and float conversions. bf16 → f32 is a shift; f32 → bf16 rounds to nearest
 * even exactly as PyTorch's c10::BFloat16 constructor (NaN stays a quiet NaN). The block-quantized
 * types take their name and geometry from the traits table of quant.c (one row per type). */
#include "dtype.h"
#include "error.h"
#include "quant.h"

#include <math.h>
#ifdef __F16C__
#include <immintrin.h>
#endif
#include <string.h>

/* The element types (safetensors dtypes); the block types have no row here (quant.c has them). */
static const struct { const char *name; size_t size; } k_dtypes[CVX_Q4_0] = {
    [CVX_F32] = {"F32", 4}, [CVX_F16] = {"F16", 2}, [CVX_BF16] = {"BF16", 2}, [CVX_F64] = {"F64", 8},
    [CVX_I64] = {"I64", 8}, [CVX_I32] = {"I32", 4}, [CVX_U8] = {"U8", 1},    [CVX_BOOL] = {"BOOL", 1},
    [CVX_F8_E4M3] = {"F8_E4M3", 1},
};

int cvx_dtype_is_quant(cvx_dtype t) { return t >= CVX_Q4_0 && t < CVX_DTYPE_COUNT; }
int cvx_dtype_is_safetensors(cvx_dtype t) { return (unsigned)t < CVX_Q4_0; }
size_t cvx_dtype_size(cvx_dtype t) { return cvx_dtype_is_safetensors(t) ? k_dtypes[t].size : 0; }
const char *cvx_dtype_name(cvx_dtype t) {
    if (cvx_dtype_is_safetensors(t)) return k_dtypes[t].name;
    return cvx_dtype_is_quant(t) ? cvx_quant_of(t)->name : "?";
}
int cvx_dtype_is_float(cvx_dtype t) { return t == CVX_F32 || t == CVX_F16 || t == CVX_BF16 || t == CVX_F64; }
int cvx_dtype_to_f32_ok(cvx_dtype t) { return cvx_dtype_is_float(t) || t == CVX_F8_E4M3 || cvx_dtype_is_quant(t); }
int cvx_dtype_block(cvx_dtype t) { return cvx_dtype_is_quant(t) ? cvx_quant_of(t)->block : 1; }
size_t cvx_dtype_block_bytes(cvx_dtype t) {
    return cvx_dtype_is_quant(t) ? (size_t)cvx_quant_of(t)->type_size : cvx_dtype_size(t);
}

int cvx_dtype_nbytes(cvx_dtype t, uint64_t n, uint64_t *out) {
    uint64_t blk = (uint64_t)cvx_dtype_block(t), bb = cvx_dtype_block_bytes(t);
    if (bb == 0 || n % blk != 0) return -1;
    uint64_t nb = n / blk;
    if (nb > (UINT64_MAX >> 1) / bb) return -1;
    *out = nb * bb;
    return 0;
}

int cvx_dtype_parse(const char *name, cvx_dtype *out) {
    for (int i = 0; i < CVX_Q4_0; i++)
        if (strcmp(name, k_dtypes[i].name) == 0) { *out = (cvx_dtype)i; return 0; }
    return -1;
}

float cvx_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float cvx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    if (exp == 0) {
        if (mant == 0) u = sign;
        else {  /* subnormal: normalise */
            int e = -1;
            do { e++; mant <<= 1; } while (!(mant & 0x400));
            u = sign | (uint32_t)(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | mant << 13;
    } else {
        u = sign | (exp + 127 - 15) << 23 | mant << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t cvx_f32_to_bf16(float f) {
    if (isnan(f)) return 0x7fc0;
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

uint16_t cvx_f32_to_f16(float f) {
    uint32_t x = f2u(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u;           /* NaN -> quiet NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00u;          /* >= 65520 rounds to inf */
    if (ax >= 0x38800000u) {                               /* normal half (>= 2^-14) */
        uint32_t r = ax - 0x38000000u;                     /* rebias exponent 127 -> 15 */
        r += 0x0fffu + ((r >> 13) & 1u);                   /* round to nearest even on 13 bits */
        return sign | (uint16_t)(r >> 13);
    }
    /* subnormal half: value / 2^-24 rounded to an integer (may round up to the smallest normal) */
    uint32_t e = ax >> 23;
    if (e < 102) return sign;                              /* < 2^-25: rounds to zero */
    uint32_t m = (ax & 0x007fffffu) | 0x00800000u;         /* value = m * 2^(e - 150) */
    uint32_t shift = 126 - e;                              /* 14 .. 24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return sign | (uint16_t)q;
}

float cvx_f8e4m3_to_f32(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80) << 24, e = (b >> 3) & 0xf, m = b & 7, u;
    if (e == 15 && m == 7) u = sign | 0x7ff00000u;                   /* NaN, as c10 widens it */
    else if (e == 0) {
        float v = (float)m * 0x1p-9f;                                /* subnormal: m/8 * 2^-6, exact */
        return sign ? -v : v;
    } else u = sign | (e + 120) << 23 | m << 20;                     /* rebias 7 -> 127 */
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void cvx_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
    uint32_t *d = (uint32_t *)dst;
#pragma omp simd
    for (size_t i = 0; i < n; i++) d[i] = (uint32_t)src[i] << 16;
}

void cvx_f16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
#ifdef __F16C__
    /* hardware conversion, exact for every value (NaNs stay NaN) */
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = cvx_f16_to_f32(src[i]);
}

void cvx_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = cvx_f32_to_bf16(src[i]);
}

void cvx_to_f32_n(cvx_dtype t, const void *src, float *dst, size_t n) {
    const unsigned char *s = src;
    if (n == 0) return;  /* dst may be NULL for empty tensors */
    switch (t) {
    case CVX_F32: memcpy(dst, src, n * 4); break;
    case CVX_BF16:
        if (((uintptr_t)src & 1) == 0) cvx_bf16_to_f32_n(src, dst, n);
        else for (size_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, s + 2 * i, 2); dst[i] = cvx_bf16_to_f32(h); }
        break;
    case CVX_F16:
        if (((uintptr_t)src & 1) == 0) cvx_f16_to_f32_n(src, dst, n);
        else for (size_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, s + 2 * i, 2); dst[i] = cvx_f16_to_f32(h); }
        break;
    case CVX_F64:
        for (size_t i = 0; i < n; i++) { double d; memcpy(&d, s + 8 * i, 8); dst[i] = (float)d; }
        break;
    case CVX_F8_E4M3:
        for (size_t i = 0; i < n; i++) dst[i] = cvx_f8e4m3_to_f32(s[i]);
        break;
    default:
        if (cvx_dtype_is_quant(t)) {
            const cvx_quant_traits *q = cvx_quant_of(t);
            CVX_CHECK(n % (size_t)q->block == 0);
            q->to_f32(src, dst, (int64_t)n);
        } else memset(dst, 0, n * 4);  /* callers check cvx_dtype_to_f32_ok first */
        break;
    }
}
