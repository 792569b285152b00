/* LTXVideoTransformer3DModel (LTX-Video 0.9.x, 2B and 13B; diffusers 0.35.2 transformer_ltx.py),
 * read from a diffusers `transformer/` directory (config.json + diffusion_pytorch_model*.safetensors).
 * Weights stay mmapped in their storage dtype; the linears run through cvx_linear (f32, or bf16
 * operands / GGUF as the context says).
 *
 * Layout: packed tokens. Latents [B, C, F, H, W] enter as x [B, S, C] with S = F·H·W and
 * x[b, (f·H + h)·W + w, c] = latents[b, c, f, h, w] (stage2/ltx_pack.h); the output is packed
 * the same way. Patch sizes are 1 in every LTX checkpoint (others are rejected). */
#ifndef CVX_STAGE2_LTX_H
#define CVX_STAGE2_LTX_H

#include <stddef.h>

#include "context.h"
#include "safetensors.h"

typedef struct {
    int in_channels, out_channels;
    int num_attention_heads, attention_head_dim;   /* inner dim D = heads · head_dim */
    int num_layers;
    int cross_attention_dim;                       /* must equal D (attn2 keys come from the projected caption) */
    int caption_channels;                          /* T5 width (4096 for T5-XXL) */
    double norm_eps;                               /* norm1 / norm2 RMSNorm (no affine) */
} ltx_config;

typedef struct ltx_transformer ltx_transformer;

/* Read a config.json (upstream defaults for absent keys; unsupported variants rejected by key).
 * -1 + cvx_error naming the file and key. */
int ltx_config_load(const char *config_json, ltx_config *c);
/* Config + weights of a diffusers `transformer/` directory (one file or sharded), every tensor
 * looked up and shape-checked here. ctx: borrowed, or NULL for a private one. NULL + cvx_error. */
ltx_transformer *ltx_load(const char *transformer_dir, cvx_ctx *ctx);
/* The same from a config.json and a weights file (or directory, index.json, GGUF) with diffusers'
 * names or the original LTX-Video single file's (ltx-video-2b-v0.9*.safetensors, the 13B files:
 * "model.diffusion_model." keys beside the VAE's "vae." ones): stage2/ltx_names.c. */
ltx_transformer *ltx_load_file(const char *config_json, const char *weights, cvx_ctx *ctx);
/* Which names the opened weights use; the original ones renamed to diffusers' (cvx_weights_rename).
 * -1 + cvx_error for a file that is no LTX-Video transformer. */
int ltx_original_layout(cvx_weights *w);
/* city96's GGUF rules for this model ("ltxv"): stage2/quantize.h, stage2/ltx_names.c. */
extern const struct cvx_gguf_rules ltx_gguf_rules;
/* The linear layers for LoRA adapters (common/lora.h): diffusers module names, which LTX-Video's
 * ComfyUI / trainer LoRAs use too behind "diffusion_model."; *out allocated, returns the count. */
struct cvx_lora_target;
int ltx_lora_targets(const ltx_transformer *m, struct cvx_lora_target **out);
void ltx_free(ltx_transformer *m);
const ltx_config *ltx_get_config(const ltx_transformer *m);
cvx_ctx *ltx_ctx(const ltx_transformer *m);

/* ---- rotary positions (LTXVideoRotaryPosEmbed, base 20 frames × 2048 × 2048, theta 10000) ----
 * The model reads one normalised coordinate triple per token: coords [3, S] (rows f, h, w).
 *
 * ltx_rope_coords_grid: the rope_interpolation_scale path (LTXPipeline, LTXImageToVideoPipeline):
 * token (f, h, w) of an F × H × W grid gets (f·scale[0]/20, h·scale[1]/2048, w·scale[2]/2048)
 * in float32 as upstream; the pipelines pass scale = (8/frame_rate, 32, 32).
 * ltx_rope_coords_video: the video_coords path (LTXConditionPipeline): video_coords [3, S] of one
 * batch element (pixel coordinates: frame index / frame_rate, h·32, w·32) divided by (20, 2048, 2048). */
void ltx_rope_coords_grid(int F, int H, int W, const float scale[3], float *coords);
void ltx_rope_coords_video(const float *video_coords, int S, float *coords);
/* The cos / sin tables [S, D] upstream builds from coords [3, S] for inner dim D: the first D % 6
 * channels cos 1 / sin 0, then per frequency k < D/6 the f, h, w angles
 * 10000^linspace(0, 1, D/6)[k]·π/2·(2·coord − 1), each repeated twice. */
void ltx_rope_tables(int D, const float *coords, int S, float *cos_out, float *sin_out);

/* One forward pass (flow velocity) over B batch elements of S packed tokens.
 *   x        [B, S, in_channels]
 *   text     [B, L, caption_channels]   T5 output (all L rows, padding included)
 *   mask     [B, L] 1 = attend, 0 = masked (upstream's additive (1 − mask)·−10000); NULL = all.
 *            Masked keys are left out of the softmax (exp(−10000) is 0 in f32: the same result);
 *            a row with every key masked attends to all of them, as the shifted softmax does.
 *   timestep [B, T] with T = 1 (one per element) or T = S (per token, the condition pipeline)
 *   coords   [B, 3, S] normalised rotary coordinates (ltx_rope_coords_*)
 *   out      [B, S, out_channels]
 * -1 + cvx_error for sizes or inputs the model cannot take. */
int ltx_forward(ltx_transformer *m, const float *x, int B, int S, const float *text, const float *mask, int L,
                const float *timestep, int T, const float *coords, float *out);

/* The same forward in pieces (step caching, stage2/cache.h): embed (proj_in, the time embedding,
 * the caption projection), blocks first .. first + count − 1, finalize (norm_out, its modulation,
 * proj_out; frees the buffers). embed + blocks(0, num_layers) + finalize gives the bytes of
 * ltx_forward, and so does any split of the blocks. Forwards may be alive at once; they run one
 * after the other. */
typedef struct {
    int B, S, T, L, D;
    size_t chunk;
    float *h;          /* [B, S, D] residual stream: the forward's own buffer, or a caller's copy it
                        * pointed h at between pieces (the pieces that follow run on it) */
    float *h_own;      /* the forward's own [B, S, D] (freed at the end) */
    float *temb;       /* [B·T, 6D] */
    float *emb;        /* [B·T, D] embedded timestep */
    float *ctx_txt;    /* [B, L, D] projected caption */
    float *cos, *sin;  /* [S, D] rotary tables of the element being run */
    const float *coords, *mask;   /* borrowed: live until finalize */
    float *ws;         /* scratch */
    float *pr1, *pr2;  /* [B, S, D] attention outputs kept for the probe, else NULL */
    size_t r0, rn;     /* this rank's token rows (sequence parallelism; else 0, S) */
    int out_normed;    /* h went through norm_out and its modulation (ltx_forward_output_norm, or a caller
                        * that wrote such a stream): finalize runs proj_out only */
} ltx_fwd;
/* -1 + cvx_error as ltx_forward (nothing to free). */
int ltx_forward_embed(ltx_transformer *m, const float *x, int B, int S, const float *text, const float *mask, int L,
                      const float *timestep, int T, const float *coords, ltx_fwd *f);
void ltx_forward_blocks(ltx_transformer *m, ltx_fwd *f, int first, int count);
void ltx_forward_finalize(ltx_transformer *m, ltx_fwd *f, float *out);
void ltx_forward_abort(ltx_fwd *f);
/* TeaCache4LTX-Video's probe: block 0's modulated input norm1(h)·(1 + scale_msa) + shift_msa (the
 * bytes its self-attention computes) on this rank's rows of h after embed, out [B, rn, D]. */
void ltx_forward_block0_input(ltx_transformer *m, const ltx_fwd *f, float *out);
/* The first part of finalize: norm_out and its modulation on this rank's rows of h, in place;
 * finalize then runs proj_out only (TeaCache4LTX-Video's residual spans this). */
void ltx_forward_output_norm(ltx_transformer *m, ltx_fwd *f);

/* Tests and debugging: called with each intermediate of the next forwards as upstream's module
 * outputs ("proj_in" [B, S, D], "time_embed.0" temb [B·T, 6D], "time_embed.1" embedded timestep
 * [B·T, D], "caption_projection" [B, L, D], "rope.0" / "rope.1" [B, S, D], "blocks.{i}.attn1" /
 * "blocks.{i}.attn2" (the attention modules' outputs) and "blocks.{i}" [B, S, D], "norm_out"
 * [B, S, D] before the modulation). NULL: off. */
typedef void (*ltx_probe_fn)(void *user, const char *name, const float *x, size_t n);
void ltx_set_probe(ltx_transformer *m, ltx_probe_fn fn, void *user);

/* Ulysses sequence parallelism over the ranks of sp (NULL or one rank: off): each rank runs the
 * row-wise parts on its share of the tokens (cvx_dist_split_range), self-attention on its share of
 * the heads (all tokens), and every rank gets the whole output. Batch 1, no probes. -1 +
 * cvx_error when the ranks do not divide the heads. The exchanges' time and bytes sent add up in
 * ltx_comm_stats. */
struct cvx_dist;
int ltx_set_sp(ltx_transformer *m, struct cvx_dist *sp);
void ltx_comm_stats(const ltx_transformer *m, double *seconds, double *bytes_sent);

/* Memory knob: the row-wise parts (norms, projections, feed-forward) run in pieces of chunk_rows
 * tokens (default 1024). 0 = default. Results do not depend on it. */
void ltx_set_chunking(ltx_transformer *m, int chunk_rows);

#endif
