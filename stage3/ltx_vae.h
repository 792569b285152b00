/* AutoencoderKLLTXVideo (LTX-Video 0.9.0 and the 0.9.5+ timestep-conditioned decoder; diffusers
 * 0.35.2 autoencoder_kl_ltx.py), read from a diffusers `vae/` directory. Weights stay mmapped;
 * convolutions run through stage3/vae_conv.c (common/conv.h).
 *
 * Layouts are channel-major, one sample: latents z[C, F, h, w] (unpacked, denormalised: see
 * stage2/ltx_pack.h), video[3, T, H, W] with T = 8(F − 1) + 1, H = 32h, W = 32w.
 *
 * Decoder: conv_in → mid block → up blocks (conv_in resnet when the width changes, depth-to-space
 * up-sampler with its optional residual, resnets) → RMS norm (→ timestep modulation) → SiLU →
 * conv_out → unpatchify 4×4. Every resnet: RMS norm over channels (eps 1e-8, no affine)
 * (→ timestep modulation) → SiLU → conv → the same → conv, plus the (LayerNorm + 1×1 conv)
 * shortcut. The published decoders are not causal (decoder_causal false): their 3×3×3 convs
 * replicate the first and the last frame, so a video decodes whole (no exact chunking by frames).
 * Encoder: patchify 4×4 → conv_in → down blocks → mid block → RMS norm → SiLU → conv_out
 * (causal convs: the first frame replicated twice in front); the last output channel is
 * repeated to make the 2C moments (latent_dist: stage3/latent_dist.h). */
#ifndef CVX_STAGE3_LTX_VAE_H
#define CVX_STAGE3_LTX_VAE_H

#include <stddef.h>

#include "context.h"
#include "safetensors.h"

#define LTX_VAE_MAX_BLOCKS 8

typedef struct {
    int in_channels, out_channels, latent_channels;
    int patch_size, patch_size_t;
    double resnet_norm_eps;
    double scaling_factor;
    int timestep_conditioning;
    /* encoder */
    int n_down;                                            /* down blocks */
    int block_out_channels[LTX_VAE_MAX_BLOCKS];
    int layers_per_block[LTX_VAE_MAX_BLOCKS + 1];          /* n_down + 1 (the last: mid block) */
    int spatio_temporal_scaling[LTX_VAE_MAX_BLOCKS];
    int down_095;                                          /* LTXVideo095DownBlock3D (else LTXVideoDownBlock3D) */
    int downsample_type[LTX_VAE_MAX_BLOCKS];               /* 0 conv, 1 spatial, 2 temporal, 3 spatiotemporal */
    int encoder_causal;
    /* decoder (as configured, i.e. encoder order: reversed when built) */
    int n_up;
    int decoder_block_out_channels[LTX_VAE_MAX_BLOCKS];
    int decoder_layers_per_block[LTX_VAE_MAX_BLOCKS + 1];
    int decoder_spatio_temporal_scaling[LTX_VAE_MAX_BLOCKS];
    int upsample_residual[LTX_VAE_MAX_BLOCKS];
    int upsample_factor[LTX_VAE_MAX_BLOCKS];
    int decoder_causal;
} ltx_vae_config;

typedef struct ltx_vae ltx_vae;

/* config.json (upstream defaults for absent scalar keys; the block lists block_out_channels,
 * down_block_types, layers_per_block, decoder_block_out_channels, decoder_layers_per_block must be
 * present, as in every published config); variants not supported are refused naming the key
 * (decoder_inject_noise: the 0.9.1 decoder). -1 + cvx_error. */
int ltx_vae_config_load(const char *config_json, ltx_vae_config *c);
/* Config + weights of a diffusers `vae/` directory, every tensor shape-checked here.
 * ctx: borrowed, or NULL for a private one. NULL + cvx_error. */
ltx_vae *ltx_vae_load(const char *vae_dir, cvx_ctx *ctx);
/* The same from a config.json and a weights file with diffusers' names or the original LTX-Video
 * single file's (its "vae." tensors; the same file may hold the transformer): stage3/ltx_vae_names.c. */
ltx_vae *ltx_vae_load_file(const char *config_json, const char *weights, cvx_ctx *ctx);
/* Which names the opened weights use; the original ones renamed to diffusers' (cvx_weights_rename),
 * the layout told as upstream tells it (the encoder's conv_out input width 2048: 0.9.5+; the
 * decoder's last_time_embedder: 0.9.1; else 0.9.0). -1 + cvx_error for a file with no LTX VAE. */
int ltx_vae_original_layout(cvx_weights *w);
/* diffusers' name of the original single file's `name` for layout `variant` (90, 91, 95) into out:
 * 1, or 0 when upstream drops it (not a "vae." key, the per_channel_statistics it removes). */
int ltx_vae_original_name(const char *name, int variant, char *out, size_t n);
void ltx_vae_free(ltx_vae *v);
const ltx_vae_config *ltx_vae_get_config(const ltx_vae *v);
/* The checkpoint's latents_mean / latents_std buffers [latent_channels] (f32, owned by v). */
const float *ltx_vae_latents_mean(const ltx_vae *v);
const float *ltx_vae_latents_std(const ltx_vae *v);

/* vae.decode(z, temb): z[latent_channels, F, h, w] → video[out_channels, 8(F − 1) + 1, 32h, 32w]
 * (not clamped). timestep: the decode timestep (the pipelines' decode_timestep; the decoder
 * multiplies it by its timestep_scale_multiplier) for a timestep-conditioned decoder, ignored
 * otherwise. -1 + cvx_error on bad sizes. */
int ltx_vae_decode(ltx_vae *v, const float *z, int F, int h, int w, float timestep, float *video);

/* The pipelines' decoder input of a timestep-conditioned VAE: (1 − s)·z + s·noise (float32),
 * s = decode_noise_scale. n floats; out may alias z. */
void ltx_vae_decode_input(const float *z, const float *noise, size_t n, float s, float *out);

/* vae.encode(video).latent_dist's parameters: video[in_channels, T, H, W] with T = 8k + 1 and
 * H, W multiples of 32 → moments[2·latent_channels, F, h, w] (the encoder's last channel
 * repeated for the logvar half). -1 + cvx_error on bad sizes. */
int ltx_vae_encode(ltx_vae *v, const float *video, int T, int H, int W, float *moments);

#endif
