/* HunyuanVideo15Transformer3DModel (HunyuanVideo-1.5 480p/720p T2V and I2V; diffusers v0.36.0
 * transformer_hunyuan_video15.py), read from a diffusers `transformer/` directory (config.json +
 * diffusion_pytorch_model*.safetensors). Weights stay mmapped in their storage dtype; the linears
 * run through cvx_linear (f32, or bf16 operands / GGUF weights when the context says so).
 *
 * Layouts: latents [B, C, F, H, W]. The model input is cat[latents, cond_latents, mask] along C
 * (in_channels = 2·latent + 1); the output is the velocity [B, out_channels, F, H, W].
 *
 * The forward (one copy of each part, callable piece by piece for tests and step caching):
 *   embed    time embedding, patch embedding, the token refiner over the MLLM text, the ByT5 and
 *            image projections, the cond-type embeddings and the per-sample reordering of the
 *            text stream [valid image | valid ByT5 | valid MLLM | invalid ...]
 *   blocks   double-stream blocks on the video stream h [B, S, D] and the text stream
 *   finalize norm_out (AdaLayerNormContinuous), proj_out, unpatchify. */
#ifndef CVX_STAGE2_HUNYUAN15_H
#define CVX_STAGE2_HUNYUAN15_H

#include <stddef.h>

#include "context.h"
#include "safetensors.h"

struct cvx_dist;

typedef struct {
    int in_channels, out_channels;
    int num_attention_heads, attention_head_dim;   /* D = heads · head_dim */
    int num_layers, num_refiner_layers;
    double mlp_ratio;                              /* feed-forward width = (int)(D · mlp_ratio) */
    int patch_size, patch_size_t;
    int text_embed_dim;                            /* MLLM (Qwen2.5-VL) hidden width */
    int text_embed_2_dim;                          /* ByT5 d_model */
    int image_embed_dim;                           /* SigLIP hidden width */
    int byt5_proj_dim;                             /* context_embedder_2's inner width, read from the weights
                                                    * (2048 in every real checkpoint) */
    double rope_theta;
    int rope_axes_dim[3];                          /* t, h, w; sum = head_dim */
    int target_size;                               /* pixels (pipeline default size), informational */
    int use_meanflow;                              /* refused: the MeanFlow super-resolution models */
    int i2v;                                       /* task_type "i2v" */
} hv15_config;

typedef struct hv15_transformer hv15_transformer;

/* Read a HunyuanVideo15Transformer3DModel config.json (upstream defaults for absent keys, ranges
 * checked). -1 + cvx_error naming the file and key. */
int hv15_config_load(const char *config_json, hv15_config *c);
/* Load config.json and map the weights of a diffusers `transformer/` directory; every tensor is
 * looked up and shape-checked here. ctx: borrowed, or NULL for a private one. NULL + cvx_error. */
hv15_transformer *hv15_load(const char *transformer_dir, cvx_ctx *ctx);
/* The same from a config.json and a weights file (or directory / index.json, or GGUF), with
 * diffusers' names or the original ones (Tencent's / ComfyUI's hunyuanvideo1.5_*.safetensors, with
 * or without "model.diffusion_model."): the table in stage2/hunyuan15_names.c. */
hv15_transformer *hv15_load_file(const char *config_json, const char *weights, cvx_ctx *ctx);
void hv15_free(hv15_transformer *m);
const hv15_config *hv15_get_config(const hv15_transformer *m);
cvx_ctx *hv15_ctx(const hv15_transformer *m);

/* The model's linear layers for LoRA adapters (common/lora.h): diffusers module names, the
 * original HunyuanVideo-1.5 (Tencent) names as aliases where the layer is one tensor there
 * (diffusers' scripts/convert_hunyuan_video1_5_to_diffusers.py read backwards; the refiner's fused
 * self_attn_qkv and the final layer's swapped modulation have none), the weight/bias tensors the
 * forward passes to cvx_linear. *out is allocated (free()); returns the count. */
struct cvx_lora_target;
/* Which names the opened weights use; the original ones renamed to diffusers' (cvx_weights_rename;
 * the refiner's fused qkv split, the final modulation's halves swapped): stage2/hunyuan15_names.c.
 * -1 + cvx_error for a file that is no HunyuanVideo-1.5 transformer (a HunyuanVideo 1.0 one named). */
int hv15_original_layout(cvx_weights *w, const hv15_config *c);
/* city96's GGUF rules for this model ("hyvid"): stage2/quantize.h, stage2/hunyuan15_names.c. */
extern const struct cvx_gguf_rules hv15_gguf_rules;
int hv15_lora_targets(const hv15_transformer *m, struct cvx_lora_target **out);

/* The conditioning of one forward (B batch elements). Masks are 0/1 floats as the pipeline hands
 * them to the transformer; any mask pattern is accepted (the pipelines' are right-padded).
 *   text  [B, L, text_embed_dim]   + text_mask [B, L]     (Qwen2.5-VL hidden states, L = 1000)
 *   text2 [B, L2, text_embed_2_dim] + text2_mask [B, L2]  (ByT5, L2 = 256; mask all 0 without glyphs)
 *   image [B, L_img, image_embed_dim] (SigLIP, L_img = 729), or NULL: text-to-video. As upstream, an
 *         image tensor of zeros everywhere (the T2V pipeline's) also means text-to-video: the image
 *         tokens are masked out. L_img counts the image rows of the text stream either way.
 *   timestep [B] (σ·1000, fractional) */
typedef struct {
    const float *text, *text_mask;
    int L;
    const float *text2, *text2_mask;
    int L2;
    const float *image;
    int L_img;
    const float *timestep;
} hv15_cond;

/* The staged pipeline's conditioning tensors of one branch, as stage 1 writes them (prefix "" or
 * "negative_"): <prefix>prompt_embeds [1, L, text_embed_dim] and <prefix>prompt_embeds_mask [1, L],
 * <prefix>prompt_embeds_2 [1, L2, text_embed_2_dim] and <prefix>prompt_embeds_mask_2 [1, L2] (float
 * embeddings; masks float or integer), image_embeds [1, L_img, image_embed_dim] or NULL. -1 +
 * cvx_error naming `file`, the tensor, its shape / dtype and what this transformer expects (an
 * embeddings file of another model, a glyph tensor of the wrong width, ...). */
int hv15_check_conditioning(const hv15_config *c, const char *prefix, const cvx_tensor *embeds, const cvx_tensor *mask,
                            const cvx_tensor *embeds2, const cvx_tensor *mask2, const cvx_tensor *image,
                            const char *file);

/* One forward's state between the pieces. Several may be alive at once (CFG branches under step
 * caching): each owns its streams; the blocks' scratch is the model's, so the pieces of different
 * forwards run one after the other, never concurrently. */
typedef struct {
    int B, F, H, W;
    int pf, ph, pw, S, D;      /* patch grid, S = pf·ph·pw video tokens per element */
    int Lt;                    /* text stream rows per element: L_img + L2 + L */
    int *n_valid;              /* [B] valid rows of each element's text stream (a prefix after reordering) */
    int t2v;                   /* the image tokens are masked out */
    int row0, nrows;           /* the video rows the blocks compute on this rank (all S without --sp) */
    float *h;                  /* [B, S, D] video stream, owned */
    float *txt;                /* [B, Lt, D] text stream (reordered; invalid rows as upstream), owned */
    float *temb;               /* [B, D] time embedding, owned */
    float *rope_cos, *rope_sin;   /* [S, head_dim] each, owned */
    double t_start;
} hv15_fwd;

/* Checks, embeddings and the reordered text stream. -1 + cvx_error (nothing to free). */
int hv15_forward_embed(hv15_transformer *m, const float *x, int B, int F, int H, int W, const hv15_cond *cond,
                       hv15_fwd *f);
/* Blocks first .. first + count − 1. The invalid text rows never reach a valid token or the output;
 * they are computed only when hv15_set_full_text is on (tests compare the whole text stream). */
void hv15_forward_blocks(hv15_transformer *m, hv15_fwd *f, int first, int count);
/* norm_out, proj_out, unpatchify: out [B, out_channels, F, H, W]; frees f's buffers. */
void hv15_forward_finalize(hv15_transformer *m, hv15_fwd *f, float *out);
void hv15_forward_abort(hv15_fwd *f);
/* embed + blocks(0, num_layers) + finalize. */
int hv15_forward(hv15_transformer *m, const float *x, int B, int F, int H, int W, const hv15_cond *cond, float *out);

/* Ulysses sequence parallelism (docs/distributed.md), as wan_set_sp: the forwards that follow run
 * on the ranks of `sp` (borrowed; NULL or one rank: off), one batch element per forward. Each rank
 * keeps its range of the video rows (cvx_dist_split_range(S, sp, rank)) through the blocks and
 * the whole text stream (computed alike on every rank); the joint attention runs heads/sp heads
 * over all video rows and the text (all-to-alls for the video rows, this rank's head columns of
 * the text, an all-gather of the text's heads after); the proj_out rows are gathered at the end,
 * so every rank returns the whole prediction. hv15_sp_check: sp must divide the heads. */
int hv15_sp_check(const hv15_config *c, int sp);
int hv15_set_sp(hv15_transformer *m, struct cvx_dist *sp);

/* Compute the padded (masked-out) rows of the text stream too (default off: they do not change
 * the output). */
void hv15_set_full_text(hv15_transformer *m, int on);

/* The parts of the embedding, for tests:
 *   hv15_time_embed: temb [B, D] of timestep [B] (sinusoid 256 [cos | sin] → Linear → SiLU → Linear)
 *   hv15_token_refiner: context_embedder (refiner) output [B, L, D] (before cond_type_embed)
 *   hv15_byt5_projection: context_embedder_2 on rows [n, text_embed_2_dim] → [n, D]
 *   hv15_image_projection: image_embedder on rows [n, image_embed_dim] → [n, D]
 *   hv15_rope_tables: cos, sin [S, head_dim] of the grid F×H×W (patched) as float32
 * -1 + cvx_error for bad inputs (refiner: a text mask with no valid token). */
void hv15_time_embed(hv15_transformer *m, const float *timestep, int B, float *temb);
int hv15_token_refiner(hv15_transformer *m, const float *text, const float *mask, int B, int L,
                       const float *timestep, float *out);
void hv15_byt5_projection(hv15_transformer *m, const float *x, int n, float *out);
void hv15_image_projection(hv15_transformer *m, const float *x, int n, float *out);
int hv15_rope_tables(const hv15_config *c, int F, int H, int W, float *cos_out, float *sin_out);

/* Wall time and FLOPs (multiply-add = 2) since the last reset. */
typedef struct {
    double t_total, t_linear, t_attention;
    double flop_linear, flop_attention;
} hv15_stats;
hv15_stats hv15_get_stats(const hv15_transformer *m);
void hv15_reset_stats(hv15_transformer *m);

#endif
