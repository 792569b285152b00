/* WanTransformer3DModel (Wan 2.1 T2V-1.3B / T2V-14B / I2V-14B, diffusers 0.33.1; Wan 2.2 TI2V-5B
 * with per-token timesteps and each A14B expert, diffusers 0.35.2), read from a
 * diffusers `transformer/` directory (config.json + diffusion_pytorch_model*.safetensors) or from
 * one single-file checkpoint with the original Wan / ComfyUI key names. build / forward / free as
 * stage2/cogvideox.c: weights stay mmapped in their storage dtype, f32 compute (or bf16
 * operands in the linears and attention products when the context says so).
 *
 * Layouts: latents [B, C, F, H, W] (channels before frames, unlike CogVideoX). */
#ifndef CVX_STAGE2_WAN_H
#define CVX_STAGE2_WAN_H

#include <stddef.h>
#include <stdint.h>

#include "context.h"

typedef struct {
    int num_attention_heads, attention_head_dim;   /* inner dim D = heads · head_dim */
    int num_layers;
    int in_channels, out_channels;
    int text_dim, freq_dim, ffn_dim;
    int patch_t, patch_h, patch_w;                 /* config "patch_size": [t, h, w] */
    int image_dim;                                 /* 0: text-to-video (null in the config) */
    int added_kv_proj_dim;                         /* 0 when null */
    int rope_max_seq_len;                          /* positions per axis of the rotary tables */
    int cross_attn_norm;                           /* norm2 (LayerNorm with affine) before attn2 */
    double eps;                                    /* LayerNorm / RMSNorm eps of the blocks */
    /* qk_norm: only "rms_norm_across_heads" (every Wan 2.1 checkpoint) is accepted */
} wan_config;

typedef struct wan_transformer wan_transformer;

/* Read a WanTransformer3DModel config.json (upstream defaults for absent keys, ranges and
 * combinations checked). -1 + cvx_error naming the file and key. */
int wan_config_load(const char *config_json, wan_config *c);

/* Load config.json and map the weights of a diffusers `transformer/` directory (one file, or
 * sharded with an index.json). Every tensor is looked up and shape-checked here: a bad
 * checkpoint fails at load time with one clear message. NULL + cvx_error.
 * ctx: the compute context (borrowed), or NULL for a private one (freed with the model). */
wan_transformer *wan_load(const char *transformer_dir, cvx_ctx *ctx);
/* The same from a config.json and one weights file (or index.json / directory) whose key names
 * are the diffusers ones or the original Wan / ComfyUI ones (blocks.N.self_attn.q.weight, ...,
 * with or without a "model.diffusion_model." prefix): detected from the file. */
wan_transformer *wan_load_file(const char *config_json, const char *weights, cvx_ctx *ctx);
void wan_free(wan_transformer *m);
const wan_config *wan_get_config(const wan_transformer *m);
cvx_ctx *wan_ctx(const wan_transformer *m);
/* 1 when the weights use the original Wan / ComfyUI key names. */
int wan_original_names(const wan_transformer *m);
/* The original Wan / ComfyUI name of the tensor diffusers calls `dname` (diffusers'
 * convert_wan_transformer_to_diffusers read backwards; names without a mapping are unchanged). */
void wan_original_name(const char *dname, char *out, size_t n);
/* city96's GGUF rules for Wan (stage2/quantize.h): arch "wan", original names, what stays unquantized. */
extern const struct cvx_gguf_rules wan_gguf_rules;

/* The model's linear layers for LoRA adapters (common/lora.h): diffusers module names, the
 * original Wan / ComfyUI names as aliases (the one name table of wan_load.c), the weight/bias
 * tensors the forward passes to cvx_linear; in the order of diffusers' converter of original-name
 * LoRAs. *out is allocated (free()); returns the count. */
struct cvx_lora_target;
int wan_lora_targets(const wan_transformer *m, struct cvx_lora_target **out);

/* Tokens of one batch element for a latent grid: (F/p_t)·(H/p_h)·(W/p_w). */
int wan_num_tokens(const wan_config *c, int F, int H, int W);
/* The rotary table of the grid of F × H × W latents, as upstream's WanRotaryPosEmbed gives it:
 * cos and sin of the angle of each token (f, h, w) and complex pair j < head_dim/2, float64,
 * [S, head_dim/2] each. -1 + cvx_error when the grid exceeds rope_max_seq_len per axis. */
int wan_rope_tables(const wan_transformer *m, int F, int H, int W, double *cos_out, double *sin_out);

/* One forward pass (flow velocity).
 *   x        [B, C_in, F, H, W]   (I2V: cat([latents, condition], dim=1), C_in = 2z + 4)
 *   text     [B, L, text_dim]     (all L rows are attended to; no mask, as upstream)
 *   image    [B, L_img, image_dim] CLIP image embeddings for I2V models (L_img = 257 with the
 *            real image encoder), NULL for T2V models
 *   timestep [B]                  as float (UniPC's integer timesteps are exact in float)
 *   out      [B, C_out, F, H, W]
 * -1 + cvx_error for sizes or inputs the model cannot take. */
int wan_forward(wan_transformer *m, const float *x, int B, int F, int H, int W, const float *text, int L,
                const float *image, int L_img, const float *timestep, float *out);
/* The same with one timestep per token, timestep [B, S] (S = wan_num_tokens, tokens (f, h, w)):
 * Wan 2.2 TI2V's expand_timesteps (diffusers 0.35.2: temb [B, S, D], timestep_proj [B, S, 6D],
 * each block's and the output's modulation per token). All tokens equal = wan_forward up to
 * rounding. -1 + cvx_error also for a non-finite timestep. */
int wan_forward_per_token(wan_transformer *m, const float *x, int B, int F, int H, int W, const float *text, int L,
                          const float *image, int L_img, const float *timestep, float *out);

/* The forward in three pieces, for step caching and tests: wan_forward = embed, blocks(0,
 * num_layers), finalize, with the same float operations. wan_fwd holds one forward's sizes
 * and buffers between the pieces. Two may be alive at once (CFG branches under step caching):
 * each owns its embeddings, but h is the model's one buffer, so the caller keeps a copy of the
 * first one's h (and points f->h at it) before the second embed, as stage2/cache.c does. */
typedef struct {
    int B, F, H, W, L, L_img;
    int pf, ph, pw;                   /* grid after patching */
    int S, D;                         /* S = pf·ph·pw tokens per batch element, D inner dim */
    float *h;                         /* [B, S, D] residual stream (the model's buffer, valid until the next forward) */
    float *temb;                      /* [U, D] time embeddings (what norm_out's modulation adds), owned */
    float *tproj;                     /* [U, 6, D] timestep_proj (what each block's modulation adds), owned */
    int U;                            /* their rows: B (row b for element b), or with per-token
                                       * timesteps the distinct values among the B·S */
    int *t_row;                       /* [B, S] per-token timesteps: each token's row of temb / tproj
                                       * (owned); NULL: one timestep per element */
    float *ctx_txt;                   /* [B, L, D] projected text, owned */
    float *ctx_img;                   /* [B, L_img, D] projected image embeddings (I2V), owned, else NULL */
    float *ws;                        /* the model's scratch */
    size_t ws_floats, chunk;          /* chunk: rows per piece of the row-wise parts */
    size_t row0, nrows;               /* tokens of each batch element the blocks compute here: 0, S;
                                       * under sequence parallelism this rank's range */
    double t_start;
} wan_fwd;
/* Checks, time/text/image embeddings and the patch embedding into f->h. -1 + cvx_error
 * (nothing to free). */
int wan_forward_embed(wan_transformer *m, const float *x, int B, int F, int H, int W, const float *text, int L,
                      const float *image, int L_img, const float *timestep, wan_fwd *f);
/* The same with per-token timesteps [B, S] (wan_forward_per_token). */
int wan_forward_embed_per_token(wan_transformer *m, const float *x, int B, int F, int H, int W, const float *text,
                                int L, const float *image, int L_img, const float *timestep, wan_fwd *f);
/* Blocks first .. first + count − 1 on f->h. */
void wan_forward_blocks(wan_transformer *m, wan_fwd *f, int first, int count);
/* norm_out with its modulation, proj_out, unpatchify: out [B, C_out, F, H, W]; frees f's buffers. */
void wan_forward_finalize(wan_transformer *m, wan_fwd *f, float *out);
/* Frees f's buffers without finishing (error paths). */
void wan_forward_abort(wan_fwd *f);

/* Wan 2.2 A14B's expert per step (WanPipeline / WanImageToVideoPipeline, diffusers 0.35.2):
 * `transformer` (the high-noise expert) while t >= boundary_ratio · num_train_timesteps, else
 * `transformer_2`. Upstream compares the int64 timestep tensor with that Python float, which
 * torch does in float32: (float)t >= (float)(ratio · N). 1 = high noise. */
int wan_expert_is_high_noise(int64_t t, double boundary_ratio, int num_train_timesteps);
/* boundary_ratio must be in (0, 1): -1 + cvx_error naming `what` (e.g. a config path) otherwise. */
int wan_boundary_check(double boundary_ratio, const char *what);

/* Wan 2.2 TI2V image-to-video (WanImageToVideoPipeline with expand_timesteps, diffusers 0.35.2):
 * the image alone is VAE-encoded (mode, normalised) into condition [C, 1, h, w], and
 * first_frame_mask m [F, h, w] is 0 on latent frame 0 and 1 elsewhere.
 * wan_ti2v_first_frame_mask: m. */
void wan_ti2v_first_frame_mask(int F, int h, int w, float *m);
/* (1 − m)·condition + m·latents with condition broadcast over the frames, as upstream computes it
 * (f32): the transformer input of every step, and the final latents after the loop. latents,
 * out [C, F, h, w] (out may equal latents). */
void wan_ti2v_apply_condition(const float *latents, const float *condition, int C, int F, int h, int w, float *out);
/* The step's per-token timesteps (m[0,0][:, ::2, ::2]·t).flatten() -> ts [F·⌈h/2⌉·⌈w/2⌉] (tokens
 * (f, h, w); frame 0's at 0, the rest (float)t, the f32 product of the mask and the int64 t). */
void wan_ti2v_timesteps(int64_t t, int F, int h, int w, float *ts);

/* Ulysses sequence parallelism (docs/distributed.md), as cogvideox_set_sp: the forwards that
 * follow run on the ranks of `sp` (borrowed; NULL or one rank: off), one batch element per
 * forward. Each rank keeps its token range (cvx_dist_split_range(S, sp, rank)) through the
 * per-token parts (norms, projections, cross-attention, feed-forward); self-attention runs on
 * heads/sp heads over all tokens (all-to-alls around it); the proj_out rows are gathered at the
 * end, so every rank returns the same prediction. Every rank must call the forwards together.
 * -1 + cvx_error when the group size does not divide the head count. Call it after loading. */
struct cvx_dist;
int wan_set_sp(wan_transformer *m, struct cvx_dist *sp);
/* The same check on a config alone (before loading). */
int wan_sp_check(const wan_config *c, int sp);

/* Memory knob (tests use it to exercise several pieces on tiny models): the row-wise parts run
 * in pieces of chunk_rows tokens (default: the tokens of one element / 4, at least 256). 0 = default. */
void wan_set_chunking(wan_transformer *m, int chunk_rows);

/* Wall time and FLOPs (multiply-add = 2) since the last reset, as cogvideox_get_stats. */
typedef struct {
    double t_total, t_linear, t_attention;
    double flop_linear, flop_attention;
    double t_comm, bytes_sent;        /* sequence parallelism: in the exchanges, sent by this rank */
} wan_stats;
wan_stats wan_get_stats(const wan_transformer *m);
void wan_reset_stats(wan_transformer *m);

#endif
