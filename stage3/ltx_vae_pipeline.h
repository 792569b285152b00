/* LTX-Video's VAE as its pipelines call it (diffusers 0.35.2): the encoder's latent distribution of
 * an image or video (the image-to-video and condition pipelines' conditions) and the tile sizes of
 * a decode from the flags. */
#ifndef CVX_STAGE3_LTX_VAE_PIPELINE_H
#define CVX_STAGE3_LTX_VAE_PIPELINE_H

#include "stage3/ltx_vae.h"
#include "stage3/ltx_vae_tiles.h"

/* vae.encode(video).latent_dist of video [3, T, H, W] in [-1, 1] (T = 8k + 1): *mean, *std
 * [C, (T − 1)/8 + 1, H/32, W/32] (allocated). -1 + cvx_error, nothing allocated. */
int ltx_vae_encode_dist(ltx_vae *v, const float *video, int T, int H, int W, float **mean, float **std);

/* Upstream's tiling (ltx_vae_tiling_default) with --tile_sample_min_height / _width (0: upstream's
 * 512) over it: a size given strides at 7/8 of it in multiples of 32 (448 for 512), at least 32. */
void ltx_vae_tiling_for(int tile_height, int tile_width, ltx_vae_tiling *t);

#endif
