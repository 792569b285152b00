/* LTX-Video's VAE as its pipelines call it (diffusers 0.35.2): the encoder's latent distribution of
 * an image or video (the image-to-video and condition pipelines' conditions), the decode settings
 * and tile sizes from the flags, and one decode. */
#ifndef CVX_STAGE3_LTX_VAE_PIPELINE_H
#define CVX_STAGE3_LTX_VAE_PIPELINE_H

#include "stage3/ltx_vae.h"
#include "stage3/ltx_vae_tiles.h"
#include "rng.h"

/* vae.encode(video).latent_dist of video [3, T, H, W] in [-1, 1] (T = 8k + 1): *mean, *std
 * [C, (T − 1)/8 + 1, H/32, W/32] (allocated). -1 + cvx_error, nothing allocated. */
int ltx_vae_encode_dist(ltx_vae *v, const float *video, int T, int H, int W, float **mean, float **std);

/* Upstream's tiling (ltx_vae_tiling_default) with --tile_sample_min_height / _width (0: upstream's
 * 512) over it: a size given strides at 7/8 of it in multiples of 32 (448 for 512), at least 32. */
void ltx_vae_tiling_for(int tile_height, int tile_width, ltx_vae_tiling *t);

/* LTXPipeline's decode settings of decode_set (bit 1: decode_timestep given, bit 2: decode_noise_scale
 * given): a timestep-conditioned (0.9.5+) VAE defaults to the model cards' 0.05 / 0.025, a timestep
 * without a noise scale takes the timestep as the scale (upstream's None); else 0 / 0. */
void ltx_vae_decode_settings(const ltx_vae_config *vc, int decode_set, double timestep, double noise_scale,
                             double *dt, double *ds);

/* --tiling auto: tile a decode of latents [T, h, w] whose video is above 64 M floats (121 frames of
 * 768×512 are 143 M) */
int ltx_vae_tiling_auto(int T, int h, int w);

/* LTXPipeline's decode input in place: z = (1 − s)·z + s·noise, noise = randn_tensor(latents.shape)
 * from gen (the sampler's generator after the loop), n floats: the whole batch at once */
void ltx_vae_add_decode_noise(float *z, size_t n, float s, cvx_generator *gen);

/* one batch item of a decode: latents [C, T, h, w] (denormalised, the decode noise mixed in) →
 * *frames [3, 8(T − 1) + 1, 32h, 32w] (allocated by ltx_vae_decode_item); tiled set when tiles ran;
 * progress (may be NULL): one update per tile decoded (ltx_vae_tile_count) */
typedef struct {
    ltx_vae *v;
    const ltx_vae_tiling *tiling;   /* NULL: untiled */
    int T, h, w, tiled;
    float timestep;
} ltx_vae_decode_job;
int ltx_vae_decode_item(ltx_vae_decode_job *job, const float *z, float **frames, cvx_progress *progress);

#endif
