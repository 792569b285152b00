/* The latent distribution (latent_dist.h). */
#include "latent_dist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "rng_lowp.h"

/* DiagonalGaussianDistribution clamps logvar to this range. */
#define LOGVAR_MIN -30.0f
#define LOGVAR_MAX 20.0f

void vae_latent_dist(const float *moments, int lc, size_t S, float *mean, float *logvar, float *std) {
    const size_t n = (size_t)lc * S;
    if (mean) memcpy(mean, moments, sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        float lv = moments[n + i];
        lv = lv < LOGVAR_MIN ? LOGVAR_MIN : lv > LOGVAR_MAX ? LOGVAR_MAX : lv;   /* torch.clamp */
        if (logvar) logvar[i] = lv;
        if (std) std[i] = expf(0.5f * lv);
    }
}

void vae_latent_sample(const float *mean, const float *std, size_t n, cvx_generator *g, float *out) {
    vae_latent_sample_as(mean, std, n, g, CVX_F32, out);   /* CVX_F32 cannot fail */
}

int vae_latent_sample_as(const float *mean, const float *std, size_t n, cvx_generator *g, cvx_dtype dtype,
                         float *out) {
    float *eps = cvx_alloc_f32(n);
    /* randn_tensor(mean.shape, generator, dtype=parameters.dtype) */
    int rc = cvx_randn_as(g, dtype, eps, n);
    if (!rc)
        for (size_t i = 0; i < n; i++) out[i] = mean[i] + std[i] * eps[i];
    free(eps);
    return rc;
}
