/* CogVideoX VAE decoder (diffusers 0.32.2 AutoencoderKLCogVideoX.decode), f32.
 *
 * Structure (every size from vae/config.json): conv_in (causal 3×3×3) → mid block (2 ResNets)
 * → up blocks (layers_per_block+1 ResNets each, an up-sampler in all but the last: space ×2,
 * and time ×2 in the first log2(temporal_compression_ratio) blocks) → norm_out (SpatialNorm3D)
 * → SiLU → conv_out. Every norm is a SpatialNorm3D conditioned on the decoder input latent zq.
 *
 * Tensors are channel-major per sample: [C, T, H, W]. Decoding runs on chunks of latent
 * frames (2, the first one 3 when the count is odd) carrying each causal convolution's last
 * kt−1 input frames to the next chunk, exactly as upstream (the chunk boundaries decide the
 * GroupNorm statistics), so memory does not grow with the video length. */
#ifndef CVX_STAGE3_VAE_H
#define CVX_STAGE3_VAE_H

#include <stddef.h>

#include "context.h"
#include "progress.h"
#include "safetensors.h"
#include "vae_conv.h"   /* vae_conv, vae_cache, the causal convolution */

#define COGVIDEOX_VAE_MAX_BLOCKS 8

typedef struct {               /* CogVideoXSpatialNorm3D */
    const cvx_tensor *norm_w, *norm_b;   /* GroupNorm affine [C] */
    vae_conv conv_y, conv_b;             /* 1×1×1 convs zq_channels -> C */
    int channels;
} cogvideox_vae_spatial_norm_w;

typedef struct {               /* CogVideoXResnetBlock3D (decoder flavour: spatial norms, no temb) */
    cogvideox_vae_spatial_norm_w norm1, norm2;
    vae_conv conv1, conv2;
    vae_conv shortcut;         /* 1×1×1 when cin != cout, else w == NULL */
    int cin, cout;
} cogvideox_vae_resnet_w;

typedef struct {               /* CogVideoXUpBlock3D */
    cogvideox_vae_resnet_w *resnets;
    int num_resnets;
    int has_upsampler, compress_time;
    vae_conv upsampler;        /* Conv2d 3×3, padding 1 */
} cogvideox_vae_up_block_w;

typedef struct {
    /* config */
    int latent_channels, out_channels, num_blocks, layers_per_block, groups;
    int block_out[COGVIDEOX_VAE_MAX_BLOCKS];
    double norm_eps, scaling_factor;
    int temporal_compression_ratio, temporal_levels, spatial_ratio;
    int sample_height, sample_width;
    int use_post_quant_conv, invert_scale_latents;
    /* weights (mmapped) */
    void *weights;             /* cvx_weights * */
    vae_conv post_quant_conv, conv_in, conv_out;
    cogvideox_vae_resnet_w mid[2];
    cogvideox_vae_up_block_w up[COGVIDEOX_VAE_MAX_BLOCKS];
    cogvideox_vae_spatial_norm_w norm_out;
    int num_caches;
    cvx_ctx *ctx;              /* compute context (scratch, counters, conv algorithm) */
    int owns_ctx;
} cogvideox_vae_decoder;

/* Load vae/config.json and the weights from `vae_dir`; every tensor looked up and
 * shape-checked. -1 + cvx_error naming the file/key/tensor on failure. ctx: the compute
 * context to run on (borrowed), or NULL for a private one (default settings, freed by cogvideox_vae_free). */
int cogvideox_vae_load(cogvideox_vae_decoder *d, const char *vae_dir, cvx_ctx *ctx);
void cogvideox_vae_free(cogvideox_vae_decoder *d);
/* Only the config part of cogvideox_vae_load (the sizes and factors of d; no weights, nothing to free). */
int cogvideox_vae_config_load(cogvideox_vae_decoder *d, const char *config_path);

/* ---- blocks (exposed for tests); inputs are [C, T, H, W], outputs feature maps of d->ctx's pool
 * (vae_fmap_get: give them back with vae_fmap_put(d->ctx, ·)); an input a block consumes (the
 * up / mid blocks' x) must come from that pool too ---- */
/* The conditioning latent of the current chunk: [zc, Tz, h, w]. */
typedef struct { const float *z; int C, T, H, W; } cogvideox_vae_zq;
/* SpatialNorm3D: out = GroupNorm(f) · conv_y(zq↑) + conv_b(zq↑) (then SiLU when `silu`).
 * zq↑ = nearest resize to f's size, first frame apart when f has an odd count > 1.
 * out may equal f. */
void cogvideox_vae_spatial_norm(const cogvideox_vae_decoder *d, const cogvideox_vae_spatial_norm_w *n, const cogvideox_vae_zq *zq, const float *f,
                      float *out, int T, int H, int W, int silu);
float *cogvideox_vae_resnet_block(const cogvideox_vae_decoder *d, const cogvideox_vae_resnet_w *r, vae_cache *cache, const cogvideox_vae_zq *zq,
                        const float *x, int T, int H, int W);
/* Up-sampler: nearest ×2 in space (and in time when compress_time, with the first-frame rule),
 * then Conv2d 3×3 per frame. *T is updated. */
float *cogvideox_vae_upsampler(const cogvideox_vae_up_block_w *b, const float *x, int C, int *T, int *H, int *W);
float *cogvideox_vae_up_block(const cogvideox_vae_decoder *d, const cogvideox_vae_up_block_w *b, vae_cache *cache, const cogvideox_vae_zq *zq, float *x,
                    int *C, int *T, int *H, int *W);
float *cogvideox_vae_mid_block(const cogvideox_vae_decoder *d, vae_cache *cache, const cogvideox_vae_zq *zq, float *x, int T, int H, int W);
/* The decoder on one chunk z[latent_channels, T, h, w] -> [out_channels, T', h·r, w·r]. */
float *cogvideox_vae_decoder_forward(const cogvideox_vae_decoder *d, vae_cache *cache, const float *z, int T, int h, int w, int *T_out);

/* Output frames for a chunk of n latent frames, and for a whole latent of T frames. */
int cogvideox_vae_chunk_frames(const cogvideox_vae_decoder *d, int n);
int cogvideox_vae_output_frames(const cogvideox_vae_decoder *d, int T);

/* Chunked decode of one sample z[lc, T, h, w] (already × 1/scaling_factor) into
 * out[out_channels, cogvideox_vae_output_frames(T), h·r, w·r]. Progress ticks once per chunk. */
void cogvideox_vae_decode_chunked(const cogvideox_vae_decoder *d, const float *z, int T, int h, int w, float *out, cvx_progress *p);

/* Tiled decode (upstream tiled_decode with tile_sample_min_height/width = tsh/tsw, overlap
 * factors 1/6 and 1/5). Returns a new [out_channels, T', H', W'] buffer; H', W' can exceed
 * 8h, 8w when the tile sizes are inconsistent, as upstream. */
float *cogvideox_vae_decode_tiled(const cogvideox_vae_decoder *d, const float *z, int T, int h, int w, int tsh, int tsw, int *T_out,
                        int *H_out, int *W_out, cvx_progress *p);
/* The same with the tiles spread over the ranks of `dist` (common/dist.h; NULL or one rank: as
 * above): tile k (row-major) is decoded by rank k mod size, all tiles are gathered on rank 0,
 * which blends them in the same order as above, so the result is the same bytes. Rank 0 returns
 * the video; the other ranks return NULL with *T_out = *H_out = *W_out = 0. Rank 0 holds all
 * decoded tiles at once (~1.4× the video's floats). A failed exchange stops every rank. */
struct cvx_dist;
float *cogvideox_vae_decode_tiled_dist(const cogvideox_vae_decoder *d, const float *z, int T, int h, int w, int tsh, int tsw,
                             struct cvx_dist *dist, int *T_out, int *H_out, int *W_out, cvx_progress *p);
/* Does upstream tile this latent (h > tile_latent_min_height or w > ..._width)? */
int cogvideox_vae_tiling_applies(const cogvideox_vae_decoder *d, int h, int w, int tsh, int tsw);
/* -1 + error when tiles of tsh×tsw samples would not advance (latent stride 0). */
int cogvideox_vae_tiling_check(const cogvideox_vae_decoder *d, int tsh, int tsw);
/* The frame size (*H × *W samples) a tiled decode of an h×w latent stitches to: upstream's rule,
 * each tile keeping at most tile − blend samples, which is r·h × r·w only when that equals the tile
 * stride (the default tile sizes do; golden vae_2b f3_tiled_inconsistent shows a larger frame
 * otherwise). -1 + error when the tiles would not advance. */
int cogvideox_vae_tiled_size(const cogvideox_vae_decoder *d, int h, int w, int tsh, int tsw, long *H, long *W);
/* -1 + one error naming the flag (--tile_sample_min_height/_width), the frame size the tiles
 * would give and the nearest tile sizes that fit, unless the tiles stitch to r·h × r·w. */
int cogvideox_vae_tiling_check_size(const cogvideox_vae_decoder *d, int h, int w, int tsh, int tsw);
/* Number of decoder calls (chunks × tiles) for progress bars. */
int cogvideox_vae_decode_steps(const cogvideox_vae_decoder *d, int T, int h, int w, int tiled, int tsh, int tsw);
/* Rough peak bytes of an untiled decode of an h×w latent (for --tiling auto). */
double cogvideox_vae_estimate_peak_bytes(const cogvideox_vae_decoder *d, int h, int w);

/* How the 3×3 spatial part of the convolutions is computed: d->ctx->conv_algo, CVX_CONV_WINOGRAD4
 * (default, 4× fewer multiplies), CVX_CONV_WINOGRAD2 (2.25×) or CVX_CONV_DIRECT (shifted GEMMs).
 * Counters for benchmarks: d->ctx->conv_flops (multiply-add = 2, nominal direct-convolution
 * count: no padding waste, Winograd savings not subtracted) and d->ctx->conv_seconds (wall time
 * inside the convolutions, padded input ready -> output). */

/* The tiling of a decode of h×w latents (stage3/cogvideox_vae_pipeline.c): tile sizes tile_h /
 * tile_w (0: sample size / 2); tiled when mode > 0 (on) or mode 0 (auto) with the untiled
 * estimate over auto_budget bytes, and tiling applies (mode < 0: off); `why` says why a decode
 * stays untiled (the log line). -1 + cvx_error for tile sizes that cannot give the frame size
 * (upstream's stitching makes a larger or smaller video, issue 21). */
int cogvideox_vae_plan_tiling(const cogvideox_vae_decoder *d, int mode, int tile_h, int tile_w, int h, int w,
                              double auto_budget, int *tiled, int *tsh, int *tsw, char *why, size_t n);

/* What the pipeline decodes: 1 / scaling_factor · latents [C, T, h, w] (as stage 2 writes them),
 * then the tiles of tsh×tsw samples spread over the ranks of dist (tiled; rank 0 returns the
 * video) or the whole in frame chunks (rank 0 alone) -> [3, *To, *Ho, *Wo]; NULL on the other
 * ranks. */
float *cogvideox_vae_decode_video(const cogvideox_vae_decoder *d, const float *latents, int T, int h, int w, int tiled,
                                  int tsh, int tsw, struct cvx_dist *dist, int *To, int *Ho, int *Wo, cvx_progress *p);

#endif
