/* Vectorised exp, SiLU and tanh-GELU (see vecmath.h). */
#include "vecmath.h"
#include "ops.h"

#include <math.h>

static inline float exp_clamped(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.3762626647949f ? 88.3762626647949f : x);
    return expf(x);
}

void cvx_exp_inplace(float *x, size_t n) {
    size_t j = 0;
#ifdef __AVX2__
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, cvx_exp8(_mm256_loadu_ps(x + j)));
#endif
    for (; j < n; j++) x[j] = exp_clamped(x[j]);
}

void cvx_silu_serial(float *x, size_t n) {
    size_t i = 0;
#ifdef __AVX2__
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 e = cvx_exp8(_mm256_sub_ps(zero, v));
        _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
    }
#endif
    for (; i < n; i++) x[i] = x[i] / (1.0f + expf(-x[i]));   /* libm expf, unclamped */
}

static inline float gelu1(float v) {
    float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return v / (1.0f + exp_clamped(-2.0f * u));
}

/* GELU (tanh approximation) as x·σ(2u) = x / (1 + e^(−2u)), u = √(2/π)(x + 0.044715x³). */
void cvx_gelu_tanh(float *x, size_t n) {
    const size_t chunk = 4096;
    size_t nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        size_t i = c * chunk, end = i + chunk < n ? i + chunk : n;
#ifdef __AVX2__
        const __m256 k0 = _mm256_set1_ps(0.7978845608028654f), k1 = _mm256_set1_ps(0.044715f),
                     m2 = _mm256_set1_ps(-2.0f), one = _mm256_set1_ps(1.0f);
        for (; i + 8 <= end; i += 8) {
            __m256 v = _mm256_loadu_ps(x + i);
            __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
            __m256 u = _mm256_mul_ps(k0, _mm256_add_ps(v, _mm256_mul_ps(k1, v3)));
            __m256 e = cvx_exp8(_mm256_mul_ps(m2, u));
            _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
        }
#endif
        for (; i < end; i++) x[i] = gelu1(x[i]);
    }
}
