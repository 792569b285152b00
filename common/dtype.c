/* dtype names and float conversions. bf16 → f32 is a shift; f32 → bf16 rounds to nearest
 * even exactly as PyTorch's c10::BFloat16 constructor (NaN stays a quiet NaN). */
#include "dtype.h"

#include <math.h>
#ifdef __F16C__
#include <immintrin.h>
#endif
#include <string.h>

static const struct { const char *name; size_t size; } k_dtypes[CVX_DTYPE_COUNT] = {
    [CVX_F32] = {"F32", 4}, [CVX_F16] = {"F16", 2}, [CVX_BF16] = {"BF16", 2}, [CVX_F64] = {"F64", 8},
    [CVX_I64] = {"I64", 8}, [CVX_I32] = {"I32", 4}, [CVX_U8] = {"U8", 1},    [CVX_BOOL] = {"BOOL", 1},
};

size_t cvx_dtype_size(cvx_dtype t) { return (unsigned)t < CVX_DTYPE_COUNT ? k_dtypes[t].size : 0; }
const char *cvx_dtype_name(cvx_dtype t) { return (unsigned)t < CVX_DTYPE_COUNT ? k_dtypes[t].name : "?"; }
int cvx_dtype_is_float(cvx_dtype t) { return t == CVX_F32 || t == CVX_F16 || t == CVX_BF16 || t == CVX_F64; }

int cvx_dtype_parse(const char *name, cvx_dtype *out) {
    for (int i = 0; i < CVX_DTYPE_COUNT; i++)
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
    default: memset(dst, 0, n * 4); break;  /* callers check cvx_dtype_is_float first */
    }
}
