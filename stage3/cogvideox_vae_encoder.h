/* CogVideoX VAE encoder (diffusers 0.32.2 AutoencoderKLCogVideoX.encode), f32.
 *
 * Structure (every size from vae/config.json): conv_in (causal 3×3×3) → down blocks
 * (layers_per_block ResNets each, a down-sampler in all but the last: an average over frame
 * pairs in the first log2(temporal_compression_ratio) blocks, then a (0,1,0,1) zero pad and a
 * Conv2d 3×3 stride 2) → mid block (2 ResNets) → norm_out (GroupNorm) → SiLU → conv_out
 * (2 × latent_channels: the moments) → quant_conv when use_quant_conv.
 * Every norm is a plain GroupNorm over the whole frame batch (unlike the decoder's SpatialNorm3D).
 *
 * Frames run in batches of num_sample_frames_batch_size (8; the first batch also takes the
 * F % 8 leftover frames) with each causal convolution's last kt−1 input frames carried to the
 * next batch, exactly as upstream _encode, so memory does not grow with the video length.
 * Layouts: pixels [3, F, H, W] in [-1, 1]; moments / mean / logvar / std [lc, T, h, w]. */
#ifndef CVX_STAGE3_VAE_ENCODER_H
#define CVX_STAGE3_VAE_ENCODER_H

#include <stddef.h>

#include "progress.h"
#include "dtype.h"
#include "rng.h"
#include "cogvideox_vae.h"
#include "latent_dist.h"   /* vae_latent_dist / vae_latent_sample */

/* Upstream's num_sample_frames_batch_size: a constant of the model code, not config. */
#define COGVIDEOX_VAE_SAMPLE_FRAMES_PER_BATCH 8

typedef struct {               /* CogVideoXResnetBlock3D, encoder flavour: GroupNorm, no temb */
    const cvx_tensor *norm1_w, *norm1_b, *norm2_w, *norm2_b;   /* [cin], [cout] */
    vae_conv conv1, conv2;
    vae_conv shortcut;         /* 1×1×1 when cin != cout, else w == NULL */
    int cin, cout;
} cogvideox_vae_enc_resnet_w;

typedef struct {               /* CogVideoXDownBlock3D */
    cogvideox_vae_enc_resnet_w *resnets;
    int num_resnets;
    int has_downsampler, compress_time;
    vae_conv downsampler;      /* CogVideoXDownsample3D's Conv2d 3×3, stride 2, padding 0 */
} cogvideox_vae_down_block_w;

typedef struct {
    /* config */
    int in_channels, latent_channels, num_blocks, layers_per_block, groups;
    int block_out[COGVIDEOX_VAE_MAX_BLOCKS];
    double norm_eps, scaling_factor;
    int temporal_levels, spatial_ratio;
    int sample_height, sample_width;
    int use_quant_conv, invert_scale_latents;
    /* weights (mmapped) */
    void *weights;             /* cvx_weights * */
    vae_conv conv_in, conv_out, quant_conv;
    cogvideox_vae_down_block_w down[COGVIDEOX_VAE_MAX_BLOCKS];
    cogvideox_vae_enc_resnet_w mid[2];
    const cvx_tensor *norm_out_w, *norm_out_b;
    int num_caches;
    cvx_ctx *ctx;              /* compute context (scratch, counters, conv algorithm) */
    int owns_ctx;
} cogvideox_vae_encoder;

/* Load vae/config.json and the encoder weights (encoder.*, quant_conv.*) from `vae_dir`;
 * every tensor looked up and shape-checked against the config. -1 + cvx_error on failure. */
int cogvideox_vae_encoder_load(cogvideox_vae_encoder *e, const char *vae_dir, cvx_ctx *ctx);   /* ctx NULL: a private one */
void cogvideox_vae_encoder_free(cogvideox_vae_encoder *e);

/* ---- blocks (exposed for tests); inputs [C, T, H, W], outputs feature maps of e->ctx's pool
 * (vae_fmap_get: give them back with vae_fmap_put(e->ctx, ·)) ---- */
float *cogvideox_vae_enc_resnet_block(const cogvideox_vae_encoder *e, const cogvideox_vae_enc_resnet_w *r, vae_cache *cache, const float *x, int T,
                            int H, int W);
/* Down-sampler: frame-pair average when compress_time (an odd count keeps its first frame
 * alone), then pad right/bottom by one zero and Conv2d 3×3 stride 2 per frame. *T, *H, *W updated. */
float *cogvideox_vae_downsampler(const cogvideox_vae_down_block_w *b, const float *x, int C, int *T, int *H, int *W);
/* (The down-sampler's Conv2d is vae_conv2d_s2, vae_conv.h.) */
/* The encoder on one frame batch x[in_channels, T, H, W] -> moments [2·lc, T', h, w]. */
float *cogvideox_vae_encoder_forward(const cogvideox_vae_encoder *e, vae_cache *cache, const float *x, int T, int H, int W, int *T_out,
                           int *h_out, int *w_out);

/* Latent frames / size for F frames of H×W pixels. */
int cogvideox_vae_encoded_frames(const cogvideox_vae_encoder *e, int F);
int cogvideox_vae_encoded_size(const cogvideox_vae_encoder *e, int n);
/* Number of encoder calls (frame batches × tiles) for progress bars. */
int cogvideox_vae_encode_steps(const cogvideox_vae_encoder *e, int F, int H, int W, int tiled, int tsh, int tsw);

/* Batched encode of x[in_channels, F, H, W] -> moments[2·lc, T, h, w] (T, h, w from the two
 * functions above). Progress ticks once per frame batch. */
void cogvideox_vae_encode_batched(const cogvideox_vae_encoder *e, const float *x, int F, int H, int W, float *moments, cvx_progress *p);

/* Upstream tiled_encode with tile_sample_min_height/width = tsh/tsw (overlap factors 1/6 and
 * 1/5, latent tiles blended and cropped as upstream). Returns new moments [2·lc, T, h', w']. */
int cogvideox_vae_encode_tiling_applies(const cogvideox_vae_encoder *e, int H, int W, int tsh, int tsw);
int cogvideox_vae_encode_tiling_check(const cogvideox_vae_encoder *e, int tsh, int tsw);
float *cogvideox_vae_encode_tiled(const cogvideox_vae_encoder *e, const float *x, int F, int H, int W, int tsh, int tsw, int *T_out,
                        int *h_out, int *w_out, cvx_progress *p);

/* Rough peak bytes of an untiled encode of F frames of H×W (input pixels, the largest ResNet's
 * live tensors at full resolution and the carried causal-conv caches; weights and the
 * convolution scratch, ~0.4 GB for the real VAE, not included) — for choosing tiling. */
double cogvideox_vae_encode_estimate_peak_bytes(const cogvideox_vae_encoder *e, int F, int H, int W);

/* The encode of F frames H×W as the pipeline runs it (stage3/cogvideox_vae_pipeline.c): tiles of
 * sample size / 2 when tiling applies and the untiled estimate is over `budget` bytes (-1 +
 * cvx_error for a VAE whose tiles do not fit), the progress steps; then video x [3, F, H, W] ->
 * the latent distribution's mean and std [lc, T, h, w] (allocated). */
typedef struct {
    int tiled, tsh, tsw, steps;
} cogvideox_vae_encode_tiles;
int cogvideox_vae_encode_tiles_for(const cogvideox_vae_encoder *e, int F, int H, int W, double budget,
                                   cogvideox_vae_encode_tiles *t);
void cogvideox_vae_encode_dist(const cogvideox_vae_encoder *e, const cogvideox_vae_encode_tiles *t, const float *x,
                               int F, int H, int W, float **mean, float **std, int *T, int *h, int *w, cvx_progress *p);

#endif
