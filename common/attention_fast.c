/* Tiled online-softmax attention tuned for long video sequences (see attention_fast.h).
 * Per job (head h, query tile of Q_TILE rows) and key tile of K_TILE keys:
 *   s = scale · q kᵀ (sgemm), m' = max(m, rowmax s), p = exp(s − m'), l = l·e^(m−m') + Σp,
 *   acc = acc·e^(m−m') + p·v (sgemm, beta 1); at the end out = acc / l. */
#include "attention_fast.h"
#include "error.h"
#include "gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

enum { Q_TILE = 128, K_TILE = 1024 };

#define EXP_LO (-87.0f)
#define EXP_HI (88.3762626647949f)

static inline float exp_scalar(float x) {
    x = x < EXP_LO ? EXP_LO : (x > EXP_HI ? EXP_HI : x);
    return expf(x);
}

#ifdef __AVX2__
/* Cephes expf: n = round(x·log2 e), r = x − n·ln 2 (two-part constant), e^r by a degree-6
 * polynomial, times 2^n. */
static inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(EXP_LO), hi = _mm256_set1_ps(EXP_HI);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
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

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
#endif

void cvx_exp_inplace(float *x, int n) {
    int j = 0;
#ifdef __AVX2__
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, exp8(_mm256_loadu_ps(x + j)));
#endif
    for (; j < n; j++) x[j] = exp_scalar(x[j]);
}

static float row_max(const float *s, int n) {
    int j = 0;
    float mx = -INFINITY;
#ifdef __AVX2__
    if (n >= 8) {
        __m256 vm = _mm256_loadu_ps(s);
        for (j = 8; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + j));
        mx = hmax8(vm);
    }
#endif
    for (; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

/* s[j] = exp(s[j] − mx) in place; returns Σ s[j]. */
static float exp_sub_sum(float *s, int n, float mx) {
    int j = 0;
    float sum = 0;
#ifdef __AVX2__
    __m256 vs = _mm256_setzero_ps(), vmx = _mm256_set1_ps(mx);
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmx));
        _mm256_storeu_ps(s + j, e);
        vs = _mm256_add_ps(vs, e);
    }
    sum = hsum8(vs);
#endif
    for (; j < n; j++) { s[j] = exp_scalar(s[j] - mx); sum += s[j]; }
    return sum;
}

static void attention_job(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                          int nq, int Skv, int hd, float scale, const float *bias, int ld_bias, float *scores,
                          float *acc, float *m, float *l) {
    for (int i = 0; i < nq; i++) { m[i] = -INFINITY; l[i] = 0; }
    for (int k0 = 0; k0 < Skv; k0 += K_TILE) {
        int nk = Skv - k0 < K_TILE ? Skv - k0 : K_TILE;
        /* scores[nq, nk] = scale · q k_tileᵀ */
        cvx_sgemm(0, 1, nq, nk, hd, scale, q, ld_q, k + (size_t)k0 * ld_kv, ld_kv, 0.0f, scores, nk);
        for (int i = 0; i < nq; i++) {
            float *s = scores + (size_t)i * nk;
            if (bias) {
                const float *br = bias + (size_t)i * ld_bias + k0;
                for (int j = 0; j < nk; j++) s[j] += br[j];
            }
            float mx = row_max(s, nk);
            if (mx < m[i]) mx = m[i];
            float corr = k0 ? expf(m[i] - mx) : 0.0f;
            l[i] = l[i] * corr + exp_sub_sum(s, nk, mx);
            m[i] = mx;
            if (k0) {
                float *a = acc + (size_t)i * hd;
                for (int d = 0; d < hd; d++) a[d] *= corr;
            }
        }
        /* acc[nq, hd] (+)= p[nq, nk] · v_tile[nk, hd] */
        cvx_sgemm(0, 0, nq, hd, nk, 1.0f, scores, nk, v + (size_t)k0 * ld_kv, ld_kv, k0 ? 1.0f : 0.0f, acc, hd);
    }
    for (int i = 0; i < nq; i++) {
        float inv = 1.0f / l[i];
        for (int d = 0; d < hd; d++) out[(size_t)i * ld_o + d] = acc[(size_t)i * hd + d] * inv;
    }
}

void cvx_attention_fast(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                        int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    int qtiles = (Sq + Q_TILE - 1) / Q_TILE, jobs = heads * qtiles;
    int kt = Skv < K_TILE ? Skv : K_TILE;
#pragma omp parallel
    {
        float *scores = cvx_alloc_f32((size_t)Q_TILE * kt);
        float *acc = cvx_alloc_f32((size_t)Q_TILE * hd);
        float m[Q_TILE], l[Q_TILE];
#pragma omp for schedule(dynamic, 1)
        for (int job = 0; job < jobs; job++) {
            int h = job / qtiles, q0 = (job % qtiles) * Q_TILE, nq = Sq - q0 < Q_TILE ? Sq - q0 : Q_TILE;
            const float *b = bias ? bias + ((size_t)h * Sq + q0) * Skv : NULL;
            attention_job(q + (size_t)q0 * ld_q + (size_t)h * hd, ld_q, k + (size_t)h * hd, v + (size_t)h * hd, ld_kv,
                          out + (size_t)q0 * ld_o + (size_t)h * hd, ld_o, nq, Skv, hd, scale, b, Skv, scores, acc, m, l);
        }
        free(scores);
        free(acc);
    }
}
