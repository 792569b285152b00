/* Vectorised element-wise math (AVX2+FMA when the compiler targets it, scalar otherwise):
 * exp for softmax and the tanh-GELU, which as libm calls cost as much as the products around
 * them. Accuracy: a few ulp (see tests/common_attention.c). */
#ifndef CVX_VECMATH_H
#define CVX_VECMATH_H

#include <stddef.h>

#ifdef __AVX2__
#include <immintrin.h>

/* Cephes expf on 8 lanes: n = round(x·log2 e), r = x − n·ln2 (two-part constant), e^r by a
 * degree-6 polynomial, times 2^n. Inputs are clamped to [-87, 88.37] (no denormals, no inf). */
static inline __m256 cvx_exp8(__m256 x) {
    /* the constant first: vmaxps/vminps return their second operand when one is NaN, so a NaN x
     * stays NaN (it used to become e^-87 ≈ 0: a NaN score vanished from a softmax, issue 37) */
    x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(n));
}

/* cvx_exp8 on 16 lanes (AVX-512 F, for callers that checked the CPU): the same operations lane by
 * lane, so the same bits. */
__attribute__((target("avx512f"))) static inline __m512 cvx_exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.3762626647949f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));
    __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    __m512i n = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(n));
}
#endif

/* x[i] = exp(x[i]) (clamped to [-87, 88.37] first). */
void cvx_exp_inplace(float *x, size_t n);

/* SiLU x·σ(x) = x / (1 + e^−x) over x[0..n) on the calling thread: 8 lanes at a time with
 * cvx_exp8, the n % 8 tail with libm expf. The one SiLU kernel: cvx_silu (ops.h) runs it over
 * threads in chunks of a multiple of 8, the VAE decoder calls it per row inside its own
 * parallel loop. An element's value depends only on which path it takes (lane or tail). */
void cvx_silu_serial(float *x, size_t n);

/* (cvx_gelu_tanh and cvx_silu, declared in ops.h, live in vecmath.c / ops.c over these kernels.) */

#endif
