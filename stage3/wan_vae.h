/* Wan VAE (diffusers AutoencoderKLWan): the Wan 2.1 VAE (0.33.1) and the Wan 2.2 VAE (0.35.2,
 * is_residual + patch_size), decoder and encoder, f32 (golden-exact) or bf16.
 *
 * Decoder (sizes from vae/config.json; dims = base_dim·[dim_mult[-1]] + base_dim·dim_mult[::-1]):
 * post_quant_conv (1×1×1) → conv_in (causal 3×3×3) → mid block (residual block, single-head
 * attention per frame, residual block) → up blocks (num_res_blocks+1 residual blocks, input dim
 * halved after the first block; all but the last end in a resampler: upsample3d — a causal (3,1,1)
 * time conv doubling the frames, then nearest ×2 + Conv2d 3×3 halving the channels — where
 * temperal_downsample[::-1] says so, else upsample2d) → RMS norm → SiLU → conv_out (causal, 3 ch).
 * Encoder: conv_in → per level num_res_blocks residual blocks + (but the last) downsample2d
 * (ZeroPad2d(0,1,0,1) + Conv2d 3×3 stride 2) or downsample3d (+ a (3,1,1) stride-2 time conv) →
 * mid block → RMS norm → SiLU → conv_out (2·z_dim) → quant_conv (1×1×1).
 * Every norm is WanRMS_norm: x / max(‖x‖₂ over channels, 1e-12) · √C · gamma.
 *
 * Wan 2.2 (is_residual, patch_size p): the video enters the encoder patchified ([3·p², T, H/p, W/p],
 * channel c·p² + pw·p + ph) and leaves the decoder the same way (unpatchify, then the clamp). Each
 * encoder level is a WanResidualDownBlock (its resnets + down-sampler, plus AvgDown3D of the
 * level's input: zero frames in front to a multiple of ft, then ft·fs·fs neighbours folded into
 * channels and groups of consecutive channels averaged), each decoder level a WanResidualUpBlock
 * (num_res_blocks+1 resnets without the input halving, an up-sampler keeping the channels, plus
 * DupUp3D of the level's input on the up-sampling levels: channels repeated and unfolded into
 * ft·fs·fs neighbours; on latent frame 0 its first ft − 1 frames are dropped).
 *
 * Streaming as upstream: the decoder runs once per latent frame (latent frame 0 → 1 video frame,
 * each later one → temporal_ratio frames) and the encoder on frame 0, then on chunks of 4 frames,
 * each causal conv carrying its last 2 input frames (zeros before the first chunk), so memory is
 * flat in the video length. Layouts are channel-major, one sample: latents [z_dim, F, h, w] (as
 * stage 2 writes them, [B, C, F, H, W] per batch entry), video [3, T, H, W] in [−1, 1]. */
#ifndef CVX_STAGE3_WAN_VAE_H
#define CVX_STAGE3_WAN_VAE_H

#include <stddef.h>

#include "context.h"
#include "progress.h"
#include "rng.h"
#include "safetensors.h"
#include "vae_conv.h"

#define WAN_VAE_MAX_LEVELS 8
#define WAN_VAE_MAX_Z 64
/* AutoencoderKLWan._encode: frame 0 alone, then chunks of this many frames (a constant of the
 * model code, not config). */
#define WAN_VAE_ENCODE_CHUNK 4

typedef struct {
    int base_dim, z_dim, num_res_blocks, n_mult;
    int decoder_base_dim;                           /* later diffusers' decoder_base_dim (default base_dim) */
    int dim_mult[WAN_VAE_MAX_LEVELS];
    int n_temporal;                                 /* entries of temperal_downsample (>= n_mult − 1) */
    int temperal_downsample[WAN_VAE_MAX_LEVELS];    /* the decoder reads it reversed, as upstream */
    float latents_mean[WAN_VAE_MAX_Z], latents_std[WAN_VAE_MAX_Z];
    int is_residual;                                /* Wan 2.2: residual down / up blocks */
    int patch_size;                                 /* 1 (config null) or the Wan 2.2 VAE's 2 */
    int in_channels, out_channels;                  /* 3·patch_size² */
} wan_vae_config;

typedef struct {               /* WanRMS_norm (bias=False) */
    const cvx_tensor *gamma;   /* [C, 1, 1, 1] (images=False) or [C, 1, 1] */
    int dim;
} wan_rms_norm_w;

typedef struct {               /* WanResidualBlock */
    wan_rms_norm_w norm1, norm2;
    vae_conv conv1, conv2;     /* causal 3×3×3 */
    vae_conv shortcut;         /* 1×1×1 when cin != cout, else w == NULL */
    int cin, cout;
} wan_resblock_w;

typedef struct {               /* WanAttentionBlock: one head over the H·W positions of each frame */
    wan_rms_norm_w norm;
    cvx_tensor qkv_w, proj_w;  /* 2-D views [3C, C] / [C, C] of the 1×1 Conv2d weights */
    const cvx_tensor *qkv_b, *proj_b;
    int dim;
} wan_attn_w;

typedef struct {               /* WanMidBlock (num_layers 1) */
    wan_resblock_w res[2];
    wan_attn_w attn;
} wan_mid_w;

typedef enum { WAN_RESAMPLE_NONE = 0, WAN_UPSAMPLE_2D, WAN_UPSAMPLE_3D, WAN_DOWNSAMPLE_2D, WAN_DOWNSAMPLE_3D } wan_resample_mode;

typedef struct {               /* WanResample */
    wan_resample_mode mode;
    int dim;
    vae_conv resample;         /* resample.1: Conv2d 3×3 (up: dim → dim/2, padding 1; down: dim → dim, stride 2) */
    vae_conv time_conv;        /* 3d modes: (3,1,1) conv (up: dim → 2·dim, causal; down: dim → dim, stride 2) */
    int cache_id;              /* downsample3d: slot of its carried last frame */
} wan_resample_w;

typedef struct {               /* a decoder WanUpBlock, or one encoder level of down_blocks */
    wan_resblock_w *resnets;
    int num_resnets;
    wan_resample_w resample;
    /* is_residual: the level's shortcut from its input (encoder AvgDown3D, decoder DupUp3D);
     * sc_ft == 0: none (2.1 levels, the decoder's last level) */
    int sc_ft, sc_fs, sc_in, sc_out;
} wan_level_w;

typedef struct wan_vae {
    wan_vae_config cfg;
    int spatial_ratio;         /* pixels per latent sample: patch_size · 2^(n_mult − 1) */
    int decoder_ratio;         /* the decoder's own ratio (to patchified samples): 2^(n_mult − 1) */
    int temporal_ratio;        /* video frames per later latent frame: 2^(temporal up-samplers) */
    int original_names;        /* weights with the original Wan key names (ComfyUI single file) */
    void *weights;             /* cvx_weights * */
    cvx_ctx *ctx;              /* compute context (borrowed or owned) */
    int owns_ctx;
    /* decoder */
    vae_conv post_quant_conv, dec_conv_in, dec_conv_out;
    wan_mid_w dec_mid;
    wan_level_w up[WAN_VAE_MAX_LEVELS];
    wan_rms_norm_w dec_norm_out;
    int dec_caches;
    /* encoder */
    vae_conv enc_conv_in, enc_conv_out, quant_conv;
    wan_level_w down[WAN_VAE_MAX_LEVELS];
    wan_mid_w enc_mid;
    wan_rms_norm_w enc_norm_out;
    int enc_caches;
} wan_vae;

/* ---- loading ---- */
/* A diffusers directory: config.json + diffusion_pytorch_model.safetensors (or a sharded index).
 * ctx: the compute context (borrowed), or NULL for a private one. NULL + cvx_error on failure. */
wan_vae *wan_vae_load(const char *vae_dir, cvx_ctx *ctx);
/* One weights file with either the diffusers names or the original Wan names (ComfyUI's
 * wan_2.1_vae.safetensors: encoder.conv1, encoder.downsamples.N.residual.K, middle.N, head.N,
 * decoder.upsamples.N, conv1 / conv2 = quant_conv / post_quant_conv; the Wan 2.2 VAE's
 * wan2.2_vae.safetensors with a 2.2 config: wan_vae_original_key_config); config_json NULL: the
 * AutoencoderKLWan defaults (= Wan 2.1). */
wan_vae *wan_vae_load_file(const char *config_json, const char *weights, cvx_ctx *ctx);
void wan_vae_free(wan_vae *v);
/* config.json (path NULL: upstream defaults) -> c, every key range-checked. -1 + cvx_error. */
int wan_vae_config_load(wan_vae_config *c, const char *path);
/* The checkpoint name of a diffusers-named tensor in the original Wan naming (num_res_blocks of
 * the model decides the decoder's flat upsamples index); NULL when it has none. */
const char *wan_vae_original_key(const char *name, int num_res_blocks, char *buf, size_t n);
/* The same for the VAE of config c: the Wan 2.1 table, or with is_residual (the Wan 2.2 VAE) the
 * one of Wan2.2_VAE.pth / ComfyUI's wan2.2_vae.safetensors (encoder.downsamples.I.downsamples.J,
 * decoder.upsamples.I.upsamples.J: diffusers' convert_vae_22 read backwards). */
const char *wan_vae_original_key_config(const wan_vae_config *c, const char *name, char *buf, size_t n);

/* ---- sizes ---- */
int wan_vae_decoded_frames(const wan_vae *v, int F);                  /* 1 + temporal_ratio·(F − 1) */
/* Latent shape of a video of T frames (T = 1 + 4k; upstream ignores frames past the last full
 * chunk) of H×W pixels; -1 + cvx_error when too small for the down-samplers. */
int wan_vae_encoded_shape(const wan_vae *v, int T, int H, int W, int *F, int *h, int *w);

/* ---- decoding ---- */
/* Spatial tiling as diffusers >= 0.34 AutoencoderKLWan.tiled_decode (not in 0.33.1): latent tiles
 * of min/spatial_ratio advancing by stride/spatial_ratio, each decoded alone over all frames
 * (own caches), blended with the tiles above and to the left over min − stride samples, each
 * keeping stride × stride samples, then clamped (the clamp 0.36 added; 0.34/0.35 returned the
 * blend unclamped). Sizes in samples (multiples of spatial_ratio). Tiles run one after the other
 * over the whole video (upstream's order): the working set is one tile's, plus the decoded video
 * and one row of tiles held for the blending. */
typedef struct {
    int min_h, min_w;          /* tile_sample_min_height / _width (upstream 256) */
    int stride_h, stride_w;    /* tile_sample_stride_height / _width (upstream 192) */
} wan_vae_tiling;
void wan_vae_tiling_default(wan_vae_tiling *t);
/* -1 + cvx_error unless the sizes are multiples of spatial_ratio with 0 < stride <= min. */
int wan_vae_tiling_check(const wan_vae *v, const wan_vae_tiling *t);
/* Does upstream tile an h×w latent (w > min_w/r or h > min_h/r)? */
int wan_vae_tiling_applies(const wan_vae *v, int h, int w, const wan_vae_tiling *t);
/* Decoder calls of a decode (progress bars): F, times the tiles when tiled. */
int wan_vae_decode_steps(const wan_vae *v, int F, int h, int w, const wan_vae_tiling *t);

/* Rough peak bytes of a decode of F latent frames h×w (tiling NULL or not applying: untiled,
 * flat in F; tiled: one tile's working set + the decoded video held until the last tile) — for
 * choosing tiling. Calibrated on bench_wan_vae at the real Wan 2.1 dims (within ~20 % of the
 * measured peak RSS: untiled 480×832 6.73 vs 6.88 GB, tiled 256/192 2.30 vs 2.31 GB). */
double wan_vae_estimate_peak_bytes(const wan_vae *v, int F, int h, int w, const wan_vae_tiling *t);

/* Receives video frames t0 .. t0+n−1 as frames[3, n, H, W] (valid during the call); nonzero stops
 * the decode, which then fails with the callback's cvx_error prefixed. */
typedef int (*wan_vae_frames_fn)(void *user, const float *frames, int t0, int n, int H, int W);

/* What WanPipeline does after its loop: z = latents / (1/latents_std) + latents_mean per channel
 * (std inverted first, as upstream). latents, z: [z_dim, F, h, w]; z may equal latents. */
void wan_vae_unnormalize(const wan_vae *v, const float *latents, int F, int h, int w, float *z);
/* vae.decode(z).sample: the decoder per latent frame, frames handed to cb as they are decoded
 * (untiled: 1 frame, then temporal_ratio per latent frame; tiled: the same batches after the last
 * tile) clamped to [−1, 1] when `clamp` (upstream always clamps; 0 gives the raw decoder output).
 * tiling NULL or not applying: whole frames. -1 + cvx_error (bad shape or tiling, cb stopped). */
int wan_vae_decode_z(const wan_vae *v, const float *z, int F, int h, int w, const wan_vae_tiling *tiling, int clamp,
                     wan_vae_frames_fn cb, void *user, cvx_progress *p);
/* wan_vae_unnormalize + wan_vae_decode_z(clamp): latents as stage 2 writes them -> frames in [−1, 1]. */
int wan_vae_decode(const wan_vae *v, const float *latents, int F, int h, int w, const wan_vae_tiling *tiling,
                   wan_vae_frames_fn cb, void *user, cvx_progress *p);

/* ---- encoding ---- */
/* vae.encode(video).latent_dist: video [3, T, H, W] in [−1, 1] -> mean, logvar [z_dim, F, h, w]
 * (wan_vae_encoded_shape; logvar clamped to [−30, 20]). Progress ticks once per chunk. */
int wan_vae_encode(const wan_vae *v, const float *video, int T, int H, int W, float *mean, float *logvar,
                   cvx_progress *p);
/* The pipelines' normalisation of an encoded latent: (x − latents_mean) · (1/latents_std). */
void wan_vae_normalize(const wan_vae *v, const float *x, int F, int h, int w, float *out);
/* The same from the config alone (x, out [z_dim, F, h, w]; out may equal x). */
void wan_latents_normalize(const wan_vae_config *cfg, const float *x, int F, int h, int w, float *out);
/* latent_dist.sample(generator): mean + exp(logvar/2) · torch.randn(n, generator=g). */
void wan_vae_sample(const float *mean, const float *logvar, size_t n, cvx_generator *g, float *out);

/* ---- around the VAE, as the Wan pipelines use it (stage3/wan_vae_pipeline.c) ---- */
/* The decode's tiling: t = the defaults with tile_h / tile_w (0: upstream's; stride 3/4 of the
 * size); tiled (1) when mode > 0 (on) and tiling applies, mode 0 (auto) when also the untiled
 * decode's estimated peak is over auto_budget bytes; mode < 0: off (0). */
int wan_vae_choose_tiling(const wan_vae *v, int mode, int tile_h, int tile_w, int F, int h, int w, double auto_budget,
                          wan_vae_tiling *t);
/* The same, checked (wan_vae_tiling_check) and logged with the latents' shape [B, C, F, h, w] (the
 * tile size, or the untiled estimated peak): tiled 1 / untiled 0, or -1 + cvx_error. */
int wan_vae_plan_decode(const wan_vae *v, int mode, int tile_h, int tile_w, int B, int F, int h, int w,
                        double auto_budget, wan_vae_tiling *t);
/* wan_vae_decode into one video [3, decoded_frames, h·r, w·r] (allocated); NULL + cvx_error. */
float *wan_vae_decode_video(const wan_vae *v, const float *latents, int F, int h, int w, const wan_vae_tiling *tiling,
                            cvx_progress *p);
/* wan_vae_encode's progress ticks for a video of T frames. */
int wan_vae_encode_steps(int T);
/* wan_vae_encode, the std exp(logvar / 2) kept instead of logvar: mean, std [z_dim, F, h, w]. */
int wan_vae_encode_dist(const wan_vae *v, const float *video, int T, int H, int W, float *mean, float *std,
                        cvx_progress *p);
/* WanImageToVideoPipeline.prepare_latents' condition: [mask (WAN_I2V_MASK_CHANNELS, 1 on latent
 * frame 0), the encoded image-then-zeros video's mean normalised] = [4 + z_dim, F, h, w]
 * (allocated). */
#define WAN_I2V_MASK_CHANNELS 4
float *wan_i2v_condition(const wan_vae_config *cfg, const float *mean, int F, int h, int w);

/* ---- blocks (exposed for tests); x [C, T, H, W]. The tensors they return are feature maps of the
 * model's context pool (vae_fmap_get on v->ctx, the convs' ctx: give them back with vae_fmap_put);
 * an x they consume must come from that pool too ---- */
/* WanRMS_norm over the channels of x[C, S] (then SiLU when `silu`); out may equal x. */
void wan_rms_norm(const wan_rms_norm_w *n, const float *x, size_t S, float *out, int silu);
/* WanResidualBlock: a new [cout, T, H, W]; x is left as is. */
float *wan_resblock(const wan_resblock_w *r, vae_cache *cache, const float *x, int T, int H, int W);
/* WanAttentionBlock, frame by frame, in place on x[C, T, H, W]. */
void wan_attention_block(const wan_attn_w *a, cvx_ctx *ctx, float *x, int T, int H, int W);
/* WanMidBlock; consumes x, returns the new tensor. */
float *wan_mid_block(const wan_mid_w *m, cvx_ctx *ctx, vae_cache *cache, float *x, int T, int H, int W);
/* The decoder on latent frame z[z_dim, 1, h, w] (post_quant_conv included) -> [out_channels, *T_out,
 * h·decoder_ratio, w·decoder_ratio] (unclamped, still patchified). first: the first latent frame of
 * the video (upsample3d skips its time conv; DupUp3D drops its leading frames). */
float *wan_decoder_forward(const wan_vae *v, vae_cache *cache, const float *z, int h, int w, int first, int *T_out);
/* The encoder on one (patchified) chunk x[in_channels, T, H, W] (quant_conv included) -> moments [2·z_dim, *T_out, *h_out, *w_out].
 * first: the video's first chunk (downsample3d only stores it). */
float *wan_encoder_forward(const wan_vae *v, vae_cache *cache, const float *x, int T, int H, int W, int first,
                           int *T_out, int *h_out, int *w_out);

/* patchify / unpatchify (p = patch_size): x[C, T, H, W] <-> y[C·p², T, H/p, W/p] with
 * y[c·p² + pw·p + ph, t, h, w] = x[c, t, h·p + ph, w·p + pw]. */
void wan_vae_patchify(const float *x, int C, int T, int H, int W, int p, float *y);
void wan_vae_unpatchify(const float *y, int C, int T, int H, int W, int p, float *x);
/* AvgDown3D(cin → cout, ft, fs) on x[cin, T, H, W] -> y[cout, ceil(T/ft), H/fs, W/fs]. */
void wan_avg_down3d(const float *x, int cin, int cout, int ft, int fs, int T, int H, int W, float *y);
/* DupUp3D(cin → cout, ft, fs) on x[cin, T, H, W], added to y[cout, T·ft − drop, H·fs, W·fs]
 * (drop = ft − 1 on the first chunk, else 0). */
void wan_dup_up3d_add(const float *x, int cin, int cout, int ft, int fs, int T, int H, int W, int first, float *y);

#endif
