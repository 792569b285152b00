/* CLIP vision encoder (transformers CLIPVisionModel, 4.46), as Wan 2.1 image-to-video uses it, and
 * SigLIP's (SiglipVisionModel, as HunyuanVideo-1.5 image-to-video uses it: last_hidden_state) — the
 * same encoder layers; SigLIP's embeddings have a patch bias and no class token or pre-layernorm,
 * and its last_hidden_state goes through post_layernorm. CLIP:
 * the penultimate hidden state hidden_states[-2] of the ViT, [tokens, hidden] with
 * tokens = (image_size / patch_size)² + 1 (257 for 224 px, patch 14), no post-layernorm.
 *
 *   x = cat(class_embedding, Conv2d_p×p,stride p,no bias(pixels) as tokens) + position_embedding
 *   x = pre_layrnorm(x)                                  hidden_states[0]
 *   per layer: x += out_proj(attention(layer_norm1(x)))  (q, k, v with bias, scale hd^-½)
 *              x += fc2(act(fc1(layer_norm2(x))))        hidden_states[l + 1]
 * act = hidden_act from config.json: "gelu" (erf; the Wan ViT-H/14), "quick_gelu" (x·σ(1.702x);
 * OpenAI CLIP), "gelu_new" / "gelu_pytorch_tanh" (tanh approximation).
 *
 * Weights (vision_model.* of CLIPVisionModel / CLIPVisionModelWithProjection / CLIPModel
 * checkpoints; visual_projection and post_layernorm are not used) are mmapped in their storage
 * dtype; the linears run through cvx_linear at ctx->precision. */
#ifndef CVX_STAGE1_CLIP_VISION_H
#define CVX_STAGE1_CLIP_VISION_H

#include "context.h"
#include "stage1/clip_image_processor.h"
#include "safetensors.h"

typedef enum { CLIP_ACT_GELU, CLIP_ACT_QUICK_GELU, CLIP_ACT_GELU_TANH } clip_activation;

/* Hyper-parameters, all from image_encoder/config.json (its "vision_config" object when the
 * file is a full CLIPConfig). */
typedef struct {
    int hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
    int num_channels, image_size, patch_size;
    float layer_norm_eps;
    clip_activation act;
    int grid, tokens;            /* derived: image_size / patch_size, grid² (+ 1 class token for CLIP) */
    int siglip;                  /* SigLIP (model_type siglip*): no class token, patch bias, no
                                    pre-layernorm, post_layernorm on last_hidden_state */
} clip_vision_config;

/* One encoder layer's weights (mmapped, storage dtype; norms widened to f32). */
typedef struct {
    const cvx_tensor *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b;   /* self_attn: [D, D], [D] */
    const cvx_tensor *fc1_w, *fc1_b, *fc2_w, *fc2_b;                   /* mlp: [I, D], [I]; [D, I], [D] */
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;                              /* layer_norm1/2: [D] */
} clip_vision_layer;

typedef struct clip_vision {
    clip_vision_config cfg;
    cvx_weights *weights;
    cvx_tensor patch_w;          /* embeddings.patch_embedding.weight viewed as [D, C·p·p] */
    const cvx_tensor *patch_b;   /* SigLIP: embeddings.patch_embedding.bias [D] */
    float *class_emb;            /* CLIP: [D] */
    float *pos_emb;              /* [tokens, D] */
    float *pre_ln_w, *pre_ln_b;  /* CLIP: pre_layrnorm [D] */
    float *post_ln_w, *post_ln_b;/* SigLIP: post_layernorm [D] */
    clip_vision_layer *layers;   /* [num_hidden_layers] */
    cvx_ctx *ctx;                /* borrowed unless owns_ctx */
    int owns_ctx;
} clip_vision;

/* Read config.json (-1 + error naming the file and key). */
int clip_vision_config_load(clip_vision_config *cfg, const char *config_path);

/* Open `image_encoder_dir` (config.json + model.safetensors, single or sharded) and look up /
 * shape-check every tensor. ctx: the compute context (borrowed), or NULL for a private one.
 * NULL + cvx_error on failure. */
clip_vision *clip_vision_load(const char *image_encoder_dir, cvx_ctx *ctx);
void clip_vision_free(clip_vision *m);

/* Activations of one forward, allocated once per call. */
typedef struct {
    float *h;                /* normed input [S, D] */
    float *q, *k, *v, *a;    /* [S, D] */
    float *y;                /* block output before the residual add [S, D] */
    float *u;                /* mlp hidden [S, I] */
    float *patches;          /* [grid², C·p·p] */
} clip_vision_scratch;

void clip_vision_scratch_alloc(clip_vision_scratch *s, const clip_vision_config *cfg);
void clip_vision_scratch_free(clip_vision_scratch *s);

/* Blocks, exposed for tests. x: [S, D] residual stream (S = tokens), updated in place. */
void clip_vision_embeddings(const clip_vision *m, const float *pixels, float *x, clip_vision_scratch *s);
void clip_attention(const clip_vision *m, const clip_vision_layer *l, float *x, clip_vision_scratch *s);
void clip_mlp(const clip_vision *m, const clip_vision_layer *l, float *x, clip_vision_scratch *s);
void clip_encoder_layer(const clip_vision *m, const clip_vision_layer *l, float *x, clip_vision_scratch *s);
/* The activation of the config on n values in place. */
void clip_activation_apply(clip_activation act, float *x, size_t n);

/* hidden_states[index] of CLIPVisionModel(pixel_values, output_hidden_states=True) for one
 * image: index 0 = the embeddings after pre_layrnorm, index l = the output of layer l − 1,
 * 0 <= index <= num_hidden_layers (only the first `index` layers run).
 * pixels: [C, image_size, image_size] (clip_image_preprocess); out: [tokens, D]. */
int clip_vision_hidden_state(clip_vision *m, const float *pixels, int index, float *out);
/* The Wan image embedding: hidden_states[-2] (num_hidden_layers − 1 layers). out: [tokens, D]. */
int clip_vision_encode(clip_vision *m, const float *pixels, float *out);
/* The same from an RGB8 image w×h through the image processor (WanImageToVideoPipeline.encode_image):
 * [tokens, hidden_size] (allocated), or NULL + cvx_error. */
float *clip_vision_encode_rgb8(clip_vision *m, const clip_image_processor *p, const uint8_t *rgb, int w, int h);
/* last_hidden_state: every layer, then (SigLIP) post_layernorm; HunyuanVideo-1.5's image_embeds. */
int clip_vision_last_hidden_state(clip_vision *m, const float *pixels, float *out);
/* The same from an RGB8 image w×h through the image processor: [tokens, hidden_size] (allocated),
 * or NULL + cvx_error. */
float *clip_vision_last_hidden_state_rgb8(clip_vision *m, const clip_image_processor *p, const uint8_t *rgb, int w,
                                          int h);

#endif
