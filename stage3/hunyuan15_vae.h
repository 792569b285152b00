/* HunyuanVideo-1.5 VAE (diffusers v0.36.0 AutoencoderKLHunyuanVideo15): decoder and encoder, f32.
 *
 * Decoder (block_out_channels reversed, n levels): conv_in (causal 3×3×3) + the latent channels
 * repeat-interleaved to its width → mid block (resnet, frame-causal single-head attention, resnet)
 * → up blocks (layers_per_block+1 resnets; the first log2(spatial_ratio) levels end in a DCAE
 * upsampler: conv to factor·C_out channels rearranged channel-to-space (×2 in h, w, and ×2 in time
 * on the first log2(temporal_ratio) levels, the video's first frame only in space) plus a
 * repeat-interleaved channel-to-space shortcut) → RMS norm → SiLU → conv_out (3 channels).
 * Encoder: conv_in → down blocks (layers_per_block resnets; the first log2(spatial_ratio) levels
 * end in the mirror space-to-channel downsampler, temporal from level log2(spatial/temporal), its
 * shortcut a channel-group mean) → mid block → RMS norm → SiLU → conv_out (2·latent) + the group
 * mean of its input. Every conv is causal in time with replicate padding (time and space); every
 * norm is x / max(‖x‖₂ over channels, 1e-12) · √C · gamma.
 *
 * Streaming: the decoder runs on latent frame 0, then on each later latent frame (1 → 4 video
 * frames), the encoder on video frame 0, then on chunks of 4 frames; the causal convs carry their
 * last 2 input frames and the mid-block attention its keys/values (a token attends to every token
 * of its own and earlier frames), so the result is upstream's whole-video pass, with the working set
 * of one chunk (plus the latent-resolution keys/values). Layouts are channel-major, one sample:
 * latents [latent_channels, F, h, w], video [3, T, H, W] in [−1, 1], T = 1 + temporal_ratio·(F − 1). */
#ifndef CVX_STAGE3_HUNYUAN15_VAE_H
#define CVX_STAGE3_HUNYUAN15_VAE_H

#include <stddef.h>

#include "context.h"
#include "rng.h"
#include "safetensors.h"
#include "vae_parts.h"

#define HV15_VAE_MAX_LEVELS 8

typedef struct {
    int in_channels, out_channels, latent_channels;
    int n_levels, block_out_channels[HV15_VAE_MAX_LEVELS];
    int layers_per_block;
    int spatial_ratio, temporal_ratio;             /* powers of two */
    int downsample_match_channel, upsample_match_channel;
    double scaling_factor;
} hv15_vae_config;

typedef struct hv15_vae hv15_vae;

/* config.json (path NULL: upstream defaults = the real model) -> c, range-checked. -1 + cvx_error. */
int hv15_vae_config_load(hv15_vae_config *c, const char *path);
/* A diffusers `vae/` directory (config.json + weights), both halves. ctx: borrowed, or NULL for a
 * private one. NULL + cvx_error naming the missing / mis-shaped tensor. */
hv15_vae *hv15_vae_load(const char *vae_dir, cvx_ctx *ctx);
/* The same from a config.json and a weights file with diffusers' names or the original ones
 * (ComfyUI's hunyuanvideo15_vae_fp16.safetensors): stage3/hunyuan15_vae_names.c. */
hv15_vae *hv15_vae_load_file(const char *config_json, const char *weights, cvx_ctx *ctx);
/* The same loading only `parts` (vae_parts: VAE_PART_DECODER to decode, VAE_PART_ENCODER to
 * encode): the other half's tensors are neither looked up nor read (may be absent or damaged). */
hv15_vae *hv15_vae_load_parts(const char *vae_dir, cvx_ctx *ctx, int parts);
hv15_vae *hv15_vae_load_file_parts(const char *config_json, const char *weights, cvx_ctx *ctx, int parts);
/* Load the halves of `parts` that v lacks (one model first decoding, then encoding). 0, or -1 +
 * cvx_error naming the missing / mis-shaped tensor (v keeps the halves it had). */
int hv15_vae_load_more(hv15_vae *v, int parts);
int hv15_vae_parts_loaded(const hv15_vae *v);   /* the vae_parts loaded */
/* Which names the opened weights use; the original ones renamed to diffusers' (cvx_weights_rename).
 * -1 + cvx_error for a file that is no HunyuanVideo-1.5 VAE. */
int hv15_vae_original_layout(cvx_weights *w);
void hv15_vae_free(hv15_vae *v);
const hv15_vae_config *hv15_vae_get_config(const hv15_vae *v);

/* Spatial tiling as upstream's tiled_decode / tiled_encode (enable_tiling): tiles of min samples
 * (min / spatial_ratio latents) every min·(1 − overlap) (in the input's units), blended over
 * min·overlap (output units), each keeping min − blend. Upstream: 256, 0.25. Used when the input
 * exceeds one tile (as upstream). */
typedef struct {
    int min_h, min_w;          /* tile_sample_min_height / _width */
    double overlap;            /* tile_overlap_factor */
} hv15_vae_tiling;
void hv15_vae_tiling_default(hv15_vae_tiling *t);

int hv15_vae_decoded_frames(const hv15_vae *v, int F);   /* 1 + temporal_ratio·(F − 1) */

/* vae.decode(z).sample without clamp: z [latent_channels, F, h, w] (the pipeline divides the
 * latents by scaling_factor first: hv15_vae_unscale) → video [3, T, 16h, 16w] (caller-allocated).
 * tiling NULL: untiled. -1 + cvx_error (also when v lacks its decoder). */
int hv15_vae_decode(const hv15_vae *v, const float *z, int F, int h, int w, const hv15_vae_tiling *tiling,
                    float *video);
/* z = latents / scaling_factor (in place allowed). */
void hv15_vae_unscale(const hv15_vae *v, const float *latents, size_t n, float *z);

/* vae.encode(video).latent_dist: video [3, T, H, W] (T = 1 + 4k, H, W multiples of the spatial
 * ratio) → the moments [2·latent_channels, F, h, w] (caller-allocated; vae_latent_dist splits
 * them: stage3/latent_dist.h). tiling NULL: untiled. -1 + cvx_error (also when v lacks its encoder). */
int hv15_vae_encode(const hv15_vae *v, const float *video, int T, int H, int W, const hv15_vae_tiling *tiling,
                    float *moments);
/* Latent shape of a T×H×W video; -1 + cvx_error when the sizes do not fit the model. */
int hv15_vae_encoded_shape(const hv15_vae *v, int T, int H, int W, int *F, int *h, int *w);

#endif
