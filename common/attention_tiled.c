/* Portable multi-head attention (any head_dim, any CPU): an online softmax over key tiles
 * (flash-attention style), the tile products through cvx_sgemm_fixed (the same bits on every CPU).
 * per (head, query tile) we keep running max m, running sum l and an unnormalised output
 * accumulator; the [Sq, Skv] score matrix never exists. Each tile product is an sgemm. */
#include "error.h"
#include "gemm.h"
#include "ops.h"
#include "vecmath.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { Q_TILE = 128, K_TILE = 512 };

/* s[j] = exp(s[j] - mx); returns the sum. */
static float exp_shift_sum(float *s, int n, float mx) {
    for (int j = 0; j < n; j++) s[j] -= mx;
    cvx_exp_inplace(s, (size_t)n);
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) sum += s[j];
    return sum;
}

static float row_max(const float *s, int n, float init) {
    float mx = init;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

/* One (head, query tile): out rows = softmax(scale·q kᵀ + bias) v. */
static void attention_tile(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                           int ld_o, int nq, int Skv, int hd, float scale, const float *bias, int ld_bias,
                           float *scores, float *acc, float *m, float *l) {
    for (int i = 0; i < nq; i++) { m[i] = -INFINITY; l[i] = 0; }
    memset(acc, 0, sizeof(float) * (size_t)nq * hd);
    for (int k0 = 0; k0 < Skv; k0 += K_TILE) {
        int nk = Skv - k0 < K_TILE ? Skv - k0 : K_TILE;
        /* scores[nq, nk] = scale · (q k_tileᵀ) */
        cvx_sgemm_fixed(0, 1, nq, nk, hd, q, ld_q, k + (size_t)k0 * ld_kv, ld_kv, NULL, 0.0f, scores, nk);
        for (int i = 0; i < nq; i++) {
            float *s = scores + (size_t)i * nk;
            for (int j = 0; j < nk; j++) s[j] *= scale;
            if (bias) {
                const float *br = bias + (size_t)i * ld_bias + k0;
                for (int j = 0; j < nk; j++) s[j] += br[j];
            }
            float mx = row_max(s, nk, m[i]);
            float corr = expf(m[i] - mx);
            float sum = exp_shift_sum(s, nk, mx);
            l[i] = l[i] * corr + sum;
            m[i] = mx;
            float *a = acc + (size_t)i * hd;
            for (int d = 0; d < hd; d++) a[d] *= corr;
        }
        /* acc[nq, hd] += p[nq, nk] · v_tile[nk, hd] */
        cvx_sgemm_fixed(0, 0, nq, hd, nk, scores, nk, v + (size_t)k0 * ld_kv, ld_kv, NULL, 1.0f, acc, hd);
    }
    for (int i = 0; i < nq; i++) {
        float inv = 1.0f / l[i];
        for (int d = 0; d < hd; d++) out[(size_t)i * ld_o + d] = acc[(size_t)i * hd + d] * inv;
    }
}

void cvx_attention_tiled(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                   int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    int qtiles = (Sq + Q_TILE - 1) / Q_TILE, jobs = heads * qtiles;
#pragma omp parallel
    {
        float *scores = cvx_alloc_f32((size_t)Q_TILE * K_TILE);
        float *acc = cvx_alloc_f32((size_t)Q_TILE * hd);
        float m[Q_TILE], l[Q_TILE];
#pragma omp for schedule(dynamic, 1)
        for (int job = 0; job < jobs; job++) {
            int h = job / qtiles, q0 = (job % qtiles) * Q_TILE, nq = Sq - q0 < Q_TILE ? Sq - q0 : Q_TILE;
            const float *b = bias ? bias + ((size_t)h * Sq + q0) * Skv : NULL;
            attention_tile(q + (size_t)q0 * ld_q + (size_t)h * hd, ld_q, k + (size_t)h * hd, v + (size_t)h * hd,
                           ld_kv, out + (size_t)q0 * ld_o + (size_t)h * hd, ld_o, nq, Skv, hd, scale, b, Skv, scores,
                           acc, m, l);
        }
        free(scores);
        free(acc);
    }
}

void cvx_attention_ref(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                       int Sq, int Skv, int heads, int hd, float scale, const float *bias) {
    float *s = cvx_alloc_f32((size_t)Sq * Skv);
    for (int h = 0; h < heads; h++) {
        for (int i = 0; i < Sq; i++)
            for (int j = 0; j < Skv; j++) {
                double acc = 0;
                for (int d = 0; d < hd; d++)
                    acc += (double)q[(size_t)i * ld_q + h * hd + d] * k[(size_t)j * ld_kv + h * hd + d];
                s[(size_t)i * Skv + j] = (float)(acc * scale) + (bias ? bias[((size_t)h * Sq + i) * Skv + j] : 0.0f);
            }
        cvx_softmax_rows(s, Sq, Skv);
        for (int i = 0; i < Sq; i++)
            for (int d = 0; d < hd; d++) {
                double acc = 0;
                for (int j = 0; j < Skv; j++) acc += (double)s[(size_t)i * Skv + j] * v[(size_t)j * ld_kv + h * hd + d];
                out[(size_t)i * ld_o + h * hd + d] = (float)acc;
            }
    }
    free(s);
}
