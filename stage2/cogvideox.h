/* CogVideoXTransformer3DModel (CogVideoX-2b, -5b, 1.5-5B), read from a diffusers
 * `transformer/` directory: config.json + diffusion_pytorch_model*.safetensors.
 * build / forward / free, as llama2.c: weights stay mmapped in their storage dtype. */
#ifndef CVX_STAGE2_COGVIDEOX_H
#define CVX_STAGE2_COGVIDEOX_H

#include <stdint.h>

#include "context.h"

typedef struct {
    int num_attention_heads, attention_head_dim;   /* inner dim D = heads * head_dim */
    int num_layers;
    int in_channels, out_channels;
    int text_embed_dim, time_embed_dim;
    int patch_size, patch_size_t;                  /* patch_size_t = 0 when null (1.0 models) */
    int sample_height, sample_width, sample_frames;  /* latent sizes from the config */
    int temporal_compression_ratio;
    int max_text_seq_length;
    int use_rotary_positional_embeddings;
    int use_learned_positional_embeddings;
    int ofs_embed_dim;                             /* 0 when null */
    int flip_sin_to_cos, freq_shift;
    double norm_eps;
    double spatial_interpolation_scale, temporal_interpolation_scale;
    int attention_bias, norm_elementwise_affine, patch_bias;  /* upstream defaults: true */
} cogvideox_config;

typedef struct cogvideox_transformer cogvideox_transformer;

/* Read a transformer config.json (required keys checked, upstream defaults for the rest).
 * -1 + cvx_error naming the file and key. */
int cogvideox_config_load(const char *path, cogvideox_config *c);

/* Load config.json and map the weights of a diffusers `transformer/` directory (single file or
 * sharded with an index.json). Every tensor is looked up and shape-checked here, so a bad
 * checkpoint fails at load time with one clear message. NULL + cvx_error on failure.
 * ctx: the compute context to run on (borrowed), or NULL for a private one (freed with the model). */
cogvideox_transformer *cogvideox_load(const char *transformer_dir, cvx_ctx *ctx);
/* The same from a config.json and a weights path of any form cvx_weights_open takes: a diffusers
 * directory, a single .safetensors file, or a GGUF file with diffusers tensor names (block-quantized
 * weights stay quantized in memory; cvx_linear reads them). */
cogvideox_transformer *cogvideox_load_file(const char *config_json, const char *weights, cvx_ctx *ctx);
cvx_ctx *cogvideox_ctx(const cogvideox_transformer *m);
void cogvideox_free(cogvideox_transformer *m);
const cogvideox_config *cogvideox_get_config(const cogvideox_transformer *m);

/* The model's linear layers for LoRA adapters (common/lora.h): diffusers module names
 * ("transformer_blocks.0.attn1.to_q", ...) and the weight/bias tensors the forward passes to
 * cvx_linear. *out is allocated (free()); returns the count. */
struct cvx_lora_target;
int cogvideox_lora_targets(const cogvideox_transformer *m, struct cvx_lora_target **out);

/* Rotary tables [num_video_tokens, head_dim] for a latent grid of F frames × H × W (latent
 * pixels, before patching), built as CogVideoXPipeline builds them (1.0: crop-region grid from
 * the config's sample size; 1.5: integer grid). Only for models with rotary embeddings. */
int cogvideox_rope_tables(const cogvideox_config *c, int F, int H, int W, float *cos_out, float *sin_out);
/* Number of video tokens for a latent grid: (F / patch_size_t) · (H / p) · (W / p). */
int cogvideox_num_video_tokens(const cogvideox_config *c, int F, int H, int W);

/* One forward pass (v-prediction).
 *   x        [B, F, C_in, H, W]   latents (pipeline layout, frames before channels)
 *   text     [B, L, text_embed_dim]
 *   timestep [B]
 *   rope_cos, rope_sin: tables from cogvideox_rope_tables, or NULL for sin-cos models
 *   out      [B, F, C_out, H, W]
 * -1 + cvx_error for sizes the model cannot take. */
int cogvideox_forward(cogvideox_transformer *m, const float *x, int B, int F, int H, int W, const float *text,
                      int L, const int64_t *timestep, const float *rope_cos, const float *rope_sin, float *out);
/* The same with the `ofs` input of models with ofs_embed_dim (CogVideoX1.5 I2V): ofs[n_ofs],
 * n_ofs = 1 (broadcast over the batch, as the pipeline's `latents.new_full((1,), 2.0)`) or B.
 * cogvideox_forward passes the pipeline's value 2.0 for such models. */
int cogvideox_forward_ex(cogvideox_transformer *m, const float *x, int B, int F, int H, int W, const float *text,
                         int L, const int64_t *timestep, const float *ofs, int n_ofs, const float *rope_cos,
                         const float *rope_sin, float *out);

/* The forward in three pieces, for step caching (stage2/cache.c) and tests:
 * cogvideox_forward_ex = embed, blocks(0, num_layers), finalize, with the same float operations.
 * cogvideox_fwd holds one forward's sizes and buffers between the pieces. */
typedef struct {
    int B, F, H, W, L, N, S, D, E;    /* S = L + N tokens (text first), D inner dim, E time_embed_dim */
    float *h;                         /* [B, S, D] residual stream (the model's buffer, valid until the next forward) */
    float *emb;                       /* [B, E] time(+ofs) embedding before SiLU (TeaCache's `emb`), owned */
    float *temb;                      /* [B, E] silu(emb), what norm1/norm2/norm_out take, owned */
    const float *rope_cos, *rope_sin;
    float *ws;                        /* the model's scratch */
    size_t ws_floats;
    int stacked;
    size_t row0, nrows;               /* the rows of h the blocks compute here: 0, B·S; under sequence
                                       * parallelism this rank's token range of the one batch element */
    double t_start;
} cogvideox_fwd;
/* Checks (as cogvideox_forward_ex), time embedding, patch (+ positional) embedding into f->h.
 * -1 + cvx_error (nothing to free). */
int cogvideox_forward_embed(cogvideox_transformer *m, const float *x, int B, int F, int H, int W, const float *text,
                            int L, const int64_t *timestep, const float *ofs, int n_ofs, const float *rope_cos,
                            const float *rope_sin, cogvideox_fwd *f);
/* Blocks first .. first + count − 1 on f->h. */
void cogvideox_forward_blocks(cogvideox_transformer *m, cogvideox_fwd *f, int first, int count);
/* norm_final/norm_out, proj_out, unpatchify: out [B, F, C_out, H, W]; frees f's buffers. */
void cogvideox_forward_finalize(cogvideox_transformer *m, cogvideox_fwd *f, float *out);
/* Frees f's buffers without finishing (error paths). */
void cogvideox_forward_abort(cogvideox_fwd *f);

/* Ulysses sequence parallelism (docs/distributed.md): the forwards that follow run on the ranks
 * of `sp` (a group of common/dist.h, borrowed; NULL or one rank: off), one batch element per
 * forward. Each rank keeps its token range (cvx_dist_split_range(S, sp, rank)) through the
 * per-token parts; attention runs on heads/sp heads over all tokens (two all-to-alls around it);
 * the video rows are gathered before norm_out, so every rank returns the same prediction. Every
 * rank of the group must call the forwards together; a failed exchange stops the run
 * (cvx_dist_die). -1 + cvx_error when the group size does not divide the head count. */
struct cvx_dist;
int cogvideox_set_sp(cogvideox_transformer *m, struct cvx_dist *sp);
/* The same check on a config alone (before loading): sp must divide num_attention_heads. */
int cogvideox_sp_check(const cogvideox_config *c, int sp);

/* Memory/speed knob (tests use it to exercise the long-video path on tiny models): batches of
 * up to stack_rows rows (B·S) go through attention together (default 16384); longer ones one
 * batch element at a time, norm1/to_out in chunks of chunk_rows rows (default S/4). 0 = default. */
void cogvideox_set_chunking(cogvideox_transformer *m, int stack_rows, int chunk_rows);

/* Wall time and FLOPs (multiply-add = 2) spent in the forwards since the last reset, split into
 * the linear layers and the attention core (q·kᵀ, softmax, ·v); for benchmarks. */
typedef struct {
    double t_total, t_linear, t_attention;
    double flop_linear, flop_attention;
    double t_comm, bytes_sent;        /* sequence parallelism: in the exchanges (waiting included), sent by this rank */
} cogvideox_stats;
cogvideox_stats cogvideox_get_stats(const cogvideox_transformer *m);
void cogvideox_reset_stats(cogvideox_transformer *m);

#endif
