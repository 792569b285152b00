/* HunyuanVideo-1.5's VAE as its pipelines call it (diffusers v0.36.0): the I2V image's latent
 * distribution, the tiling of a decode from the flags, and the decode of one batch item. */
#ifndef CVX_STAGE3_HUNYUAN15_VAE_PIPELINE_H
#define CVX_STAGE3_HUNYUAN15_VAE_PIPELINE_H

#include "stage3/hunyuan15_vae.h"

/* vae.encode(image[:, :, None]).latent_dist of image [3, 1, H, W] in [-1, 1] (untiled): *mean,
 * *std [latent_channels, *F = 1, *h, *w] (allocated). -1 + cvx_error, nothing allocated. */
int hv15_vae_encode_image_dist(const hv15_vae *v, const float *image, int H, int W, float **mean, float **std, int *F,
                               int *h, int *w);

/* Upstream's tiling (hv15_vae_tiling_default) with --tile_sample_min_height / _width (0: upstream's). */
void hv15_vae_tiling_for(int tile_height, int tile_width, hv15_vae_tiling *t);

/* latents / scaling_factor, vae.decode: latents [latent_channels, T, h, w] → video [3,
 * hv15_vae_decoded_frames(T), 16h, 16w] into *frames (allocated here, also on failure: the
 * caller frees). tiling NULL: untiled. -1 + cvx_error. */
int hv15_vae_decode_latents(const hv15_vae *v, const hv15_vae_tiling *tiling, const float *latents, int T, int h, int w,
                            float **frames);

#endif
