/* The VAEs' latent distribution (diffusers DiagonalGaussianDistribution), shared by the
 * CogVideoX and Wan encoders: moments [2·lc, ...] -> mean / logvar / std, and sampling with a
 * torch-exact generator. */
#ifndef CVX_COMMON_LATENT_DIST_H
#define CVX_COMMON_LATENT_DIST_H

#include <stddef.h>

#include "dtype.h"
#include "rng.h"

/* DiagonalGaussianDistribution(moments): mean = first lc channels, logvar = the rest clamped to
 * [−30, 20], std = exp(0.5·logvar). Each output [lc, S] (S = T·h·w); any may be NULL. */
void vae_latent_dist(const float *moments, int lc, size_t S, float *mean, float *logvar, float *std);
/* latent_dist.sample(generator): mean + std · torch.randn(n, generator=g); out may equal mean. */
void vae_latent_sample(const float *mean, const float *std, size_t n, cvx_generator *g, float *out);
/* The same with the randn drawn in `dtype` (CVX_F32 / CVX_BF16 / CVX_F16, common/rng_lowp.h), as
 * a VAE loaded in that dtype draws it (DiagonalGaussianDistribution.sample: dtype=parameters.dtype).
 * -1 + cvx_error for another dtype. */
int vae_latent_sample_as(const float *mean, const float *std, size_t n, cvx_generator *g, cvx_dtype dtype,
                         float *out);

#endif
