/* Normalisations and element-wise activations (f32 in, f32 out, statistics in double). */
#include "ops.h"
#include "vecmath.h"

#include <stdlib.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "error.h"

#include <math.h>
#include <stddef.h>

void cvx_layernorm(float *y, const float *x, int rows, int dim, const float *w, const float *b, float eps) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        float *yr = y + (size_t)r * dim;
        double mean = 0, var = 0;
        for (int i = 0; i < dim; i++) mean += xr[i];
        mean /= dim;
        for (int i = 0; i < dim; i++) { double d = xr[i] - mean; var += d * d; }
        var /= dim;
        float m = (float)mean, inv = (float)(1.0 / sqrt(var + eps));
        for (int i = 0; i < dim; i++) {
            float v = (xr[i] - m) * inv;
            if (w) v *= w[i];
            if (b) v += b[i];
            yr[i] = v;
        }
    }
}

void cvx_rmsnorm(float *y, const float *x, int rows, int dim, const float *w, float eps) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        float *yr = y + (size_t)r * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / dim + eps));
        for (int i = 0; i < dim; i++) yr[i] = (xr[i] * inv) * (w ? w[i] : 1.0f);
    }
}

/* Σ x and Σ (x − m)² over n floats in double, in 8 independent lanes (AVX2: two 4-double
 * vectors) so the sums are not one serial chain of dependent adds. */
static double sum_f64(const float *x, size_t n) {
    size_t i = 0;
    double s = 0;
#ifdef __AVX2__
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
    double l[4];
    _mm256_storeu_pd(l, _mm256_add_pd(a0, a1));
    s = (l[0] + l[1]) + (l[2] + l[3]);
#endif
    for (; i < n; i++) s += x[i];
    return s;
}

static double sumsq_dev_f64(const float *x, size_t n, double m) {
    size_t i = 0;
    double s = 0;
#ifdef __AVX2__
    const __m256d mv = _mm256_set1_pd(m);
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), mv);
        __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), mv);
        a0 = _mm256_add_pd(a0, _mm256_mul_pd(d0, d0));
        a1 = _mm256_add_pd(a1, _mm256_mul_pd(d1, d1));
    }
    double l[4];
    _mm256_storeu_pd(l, _mm256_add_pd(a0, a1));
    s = (l[0] + l[1]) + (l[2] + l[3]);
#endif
    for (; i < n; i++) { double d = x[i] - m; s += d * d; }
    return s;
}

void cvx_groupnorm_stats(const float *x, int C, size_t S, int groups, float eps, float *mean, float *inv) {
    const int cpg = C / groups;
    const size_t n = (size_t)cpg * S;
#pragma omp parallel for schedule(static)
    for (int g = 0; g < groups; g++) {
        const float *xg = x + (size_t)g * n;
        double m = sum_f64(xg, n) / (double)n;
        double var = sumsq_dev_f64(xg, n, m) / (double)n;
        mean[g] = (float)m, inv[g] = (float)(1.0 / sqrt(var + eps));
    }
}

void cvx_groupnorm_stats_ref(const float *x, int C, size_t S, int groups, float eps, float *mean, float *inv) {
    const int cpg = C / groups;
    const size_t n = (size_t)cpg * S;
    for (int g = 0; g < groups; g++) {
        const float *xg = x + (size_t)g * n;
        double m = 0, var = 0;
        for (size_t i = 0; i < n; i++) m += xg[i];
        m /= (double)n;
        for (size_t i = 0; i < n; i++) { double d = xg[i] - m; var += d * d; }
        var /= (double)n;
        mean[g] = (float)m, inv[g] = (float)(1.0 / sqrt(var + eps));
    }
}

void cvx_groupnorm(float *y, const float *x, int C, size_t S, int groups, const float *w, const float *b,
                   float eps) {
    const int cpg = C / groups;
    float *mean = cvx_malloc(sizeof(float) * 2 * (size_t)groups), *inv = mean + groups;
    cvx_groupnorm_stats(x, C, S, groups, eps, mean, inv);
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        const int g = c / cpg;
        float sc = inv[g] * (w ? w[c] : 1.0f), sh = (b ? b[c] : 0.0f) - mean[g] * sc;
        const float *xc = x + (size_t)c * S;
        float *yc = y + (size_t)c * S;
        for (size_t i = 0; i < S; i++) yc[i] = xc[i] * sc + sh;
    }
    free(mean);
}

/* The one SiLU kernel (vecmath.c) over threads: chunks are multiples of 8, so every element
 * takes the same path (lane or tail) as in one cvx_silu_serial call over all n. */
void cvx_silu(float *x, size_t n) {
    const size_t chunk = 4096;
    size_t nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) cvx_silu_serial(x + c * chunk, c + 1 < nchunks ? chunk : n - c * chunk);
}

void cvx_gelu_erf(float *x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = (float)(0.5 * x[i] * (1.0 + erf((double)x[i] * M_SQRT1_2)));
}

void cvx_rope_interleaved(float *x, int ntok, int heads, int hd, int ld, const float *cos_t, const float *sin_t) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < ntok; t++)
        for (int hh = 0; hh < heads; hh++) {
            float *v = x + (size_t)t * ld + (size_t)hh * hd;
            const float *cs = cos_t + (size_t)t * hd, *sn = sin_t + (size_t)t * hd;
            for (int i = 0; i < hd; i += 2) {
                float a = v[i], b = v[i + 1];
                v[i] = a * cs[i] - b * sn[i];
                v[i + 1] = b * cs[i + 1] + a * sn[i + 1];
            }
        }
}

void cvx_add(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void cvx_scale(float *y, float s, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] *= s;
}

void cvx_softmax_rows(float *x, int rows, int cols) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        float *xr = x + (size_t)r * cols, m = -INFINITY;
        for (int i = 0; i < cols; i++) m = xr[i] > m ? xr[i] : m;
        double s = 0;
        for (int i = 0; i < cols; i++) { xr[i] = expf(xr[i] - m); s += xr[i]; }
        float inv = (float)(1.0 / s);
        for (int i = 0; i < cols; i++) xr[i] *= inv;
    }
}

double cvx_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

void cvx_permute_fc_to_cf(const float *src, int F, int C, size_t hw, int f0, float *dst) {
    const int T = F - f0;
    for (int c = 0; c < C; c++)
        for (int f = 0; f < T; f++)
            memcpy(dst + ((size_t)c * T + f) * hw, src + ((size_t)(f + f0) * C + c) * hw, hw * sizeof(float));
}

void cvx_linspace_f64(double start, double end, int steps, int vec, double *out) {
    if (steps == 1) { out[0] = start; return; }
    double step = (end - start) / (double)(steps - 1);
    int halfway = steps / 2;
    int vec_end = steps - steps % (2 * vec);
    for (int idx = 0; idx < steps; idx++) {
        if (idx < vec_end) {
            int base_idx = idx - idx % vec, lane = idx % vec;
            double base = base_idx < halfway ? start + step * base_idx : end - step * (steps - base_idx - 1);
            out[idx] = base + lane * step;
        } else {
            out[idx] = idx < halfway ? start + step * idx : end - step * (steps - idx - 1);
        }
    }
}

void cvx_linspace_f32(float start, float end, int steps, int vec, float *out) {
    if (steps == 1) { out[0] = start; return; }
    float step = (end - start) / (float)(steps - 1);
    int halfway = steps / 2;
    int vec_end = steps - steps % (2 * vec);
    for (int idx = 0; idx < steps; idx++) {
        if (idx < vec_end) {
            int base_idx = idx - idx % vec, lane = idx % vec;
            float base = base_idx < halfway ? start + step * (float)base_idx
                                            : end - step * (float)(steps - base_idx - 1);
            out[idx] = base + (float)lane * step;
        } else {
            out[idx] = idx < halfway ? start + step * (float)idx : end - step * (float)(steps - idx - 1);
        }
    }
}

