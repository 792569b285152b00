/* LTX-Video's latent layout (diffusers 0.35.2 pipeline_ltx.py, patch sizes 1) as pure functions.
 *
 * Latents of a video of `frames` × height × width pixels are [B, C, F, H, W] with F = (frames − 1)/8 + 1,
 * H = height/32, W = width/32 (drawn unpacked by randn_tensor); the transformer and the T2V / I2V
 * loops use packed tokens [B, S, C], S = F·H·W: packed[b, (f·H + h)·W + w, c] = x[b, c, f, h, w]. */
#ifndef CVX_STAGE2_LTX_PACK_H
#define CVX_STAGE2_LTX_PACK_H

#include <stddef.h>

/* The latent grid of a video: -1 + cvx_error unless frames = 8k + 1 and height, width are
 * positive multiples of 32 (what the pipelines' check_inputs and the VAE need). */
int ltx_latent_grid(int frames, int height, int width, int *F, int *H, int *W);

/* _pack_latents: x [B, C, F, H, W] → out [B, F·H·W, C]. out must not alias x. */
void ltx_pack_latents(const float *x, int B, int C, int F, int H, int W, float *out);
/* _unpack_latents: tokens [B, F·H·W, C] → out [B, C, F, H, W]. out must not alias tokens. */
void ltx_unpack_latents(const float *tokens, int B, int C, int F, int H, int W, float *out);

/* _normalize_latents on [B, C, F, H, W]: (x − mean_c)·scaling / std_c (float32, upstream's order).
 * _denormalize_latents: x·std_c / scaling + mean_c. In place allowed. n_per = F·H·W. */
void ltx_normalize_latents(float *x, int B, int C, size_t n_per, const float *mean, const float *std, float scaling);
void ltx_denormalize_latents(float *x, int B, int C, size_t n_per, const float *mean, const float *std, float scaling);

#endif
