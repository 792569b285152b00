/* Qwen2.5-VL's text model (transformers Qwen2_5_VLTextModel, 4.57) on text only, as
 * HunyuanVideo-1.5 uses it for its prompt (golden_hv15 README section 1), and the Qwen2-VL chat
 * template for a [system, user] conversation.
 *
 *   x = embed_tokens(ids)                                            hidden_states[0]
 *   per layer: x += o_proj(attention(input_layernorm(x)))            hidden_states[l + 1]
 *              x += down_proj(silu(gate_proj(h)) · up_proj(h)), h = post_attention_layernorm(x)
 *   norm(x) after the last layer                                     hidden_states[L]
 * attention: q/k/v projections with bias, o_proj without; GQA (K/V heads repeated, repeat_kv);
 * multimodal RoPE on text: the three position rows (t, h, w) are all 0..S-1, so mrope_section
 * picks the same angles everywhere and it is plain RoPE (θ = rope_theta, rotate_half layout,
 * cos/sin of [freqs, freqs]); the mask is causal & key padding (transformers' sdpa path: a query
 * row with no allowed key attends to every key, the torch < 2.5 fix); RMSNorm (rms_norm_eps).
 * Linears through cvx_linear (storage dtype, bf16/GGUF in place); the embedding is read one row
 * per token from the mmapped table, so a 7B checkpoint runs mmapped. */
#ifndef CVX_STAGE1_QWEN2_5_VL_H
#define CVX_STAGE1_QWEN2_5_VL_H

#include <stdint.h>

#include "bpe.h"
#include "context.h"
#include "safetensors.h"

typedef struct {
    int hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim, vocab_size;
    float rms_norm_eps;
    double rope_theta;
    int mrope_section[3];     /* rope_scaling.mrope_section, sum = head_dim / 2 (checked) */
} qwen_config;

typedef struct {
    const cvx_tensor *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w;   /* self_attn: [H·hd, D], [KV·hd, D], [D, H·hd] */
    const cvx_tensor *gate, *up, *down;                          /* mlp: [I, D], [I, D], [D, I] */
    float *ln_in, *ln_post;                                      /* input / post_attention_layernorm [D] */
} qwen_layer;

typedef struct {
    qwen_config cfg;
    cvx_weights *weights;
    const cvx_tensor *embed;  /* embed_tokens.weight [vocab, D] */
    float *norm;              /* norm.weight [D], NULL when not loaded */
    qwen_layer *layers;       /* [n_loaded] */
    int n_loaded;             /* layers looked up (num_layers, or fewer: qwen_load's max_layers) */
    char prefix[64];
    int llama_names;          /* llama.cpp's names (a GGUF: token_embd.weight, blk.N.attn_q.weight, ...) */
    cvx_ctx *ctx;             /* borrowed unless owns_ctx */
    int owns_ctx;
} qwen_model;

/* config.json (a Qwen2_5_VLTextConfig, or a full Qwen2_5_VLConfig whose "text_config" holds it /
 * whose top level does). -1 + error naming the file and key. */
int qwen_config_load(qwen_config *c, const char *config_path);
/* Open text_encoder_dir (config.json + safetensors, single or sharded, or a GGUF with HF names).
 * Tensor names: "layers.N....", "embed_tokens.weight", "norm.weight" (Qwen2_5_VLTextModel as saved),
 * or the same under "model." / "language_model." / "model.language_model." (full checkpoints, ComfyUI's
 * qwen_2.5_vl_7b*.safetensors), or llama.cpp's (qwen_llama_name: a GGUF of the language model).
 * Only the first max_layers layers are looked up (-1: all; the pipeline needs L - 2), and norm
 * only when all are. ctx: compute context (borrowed) or NULL for a private one. */
int qwen_load(qwen_model *m, const char *text_encoder_dir, int max_layers, cvx_ctx *ctx);
/* The same from a weights path (file, index .json, directory or GGUF) and a separate config.json. */
int qwen_load_file(qwen_model *m, const char *weights_path, const char *config_path, int max_layers, cvx_ctx *ctx);
void qwen_free(qwen_model *m);
/* llama.cpp's name of a tensor of the text model ("layers.3.self_attn.q_proj.bias" ->
 * "blk.3.attn_q.bias", "embed_tokens.weight" -> "token_embd.weight"; gguf-py's qwen2vl map). */
void qwen_llama_name(const char *hf, char *out, size_t n);

/* cos / sin tables [S, head_dim] for positions 0..S-1 (float32 as transformers computes them). */
void qwen_rope_tables(const qwen_config *c, int S, float *cos, float *sin);

/* Per-sequence scratch, allocated once per forward. */
typedef struct {
    float *h, *q, *k, *v, *a, *y, *g, *u;  /* [S, D], [S, H·hd], [S, KV·hd] x2, [S, H·hd], [S, D], [S, I] x2 */
    float *bias;              /* [S, S] additive mask (0 / -inf) */
    float *cos, *sin;         /* [S, head_dim] */
    int S;
} qwen_scratch;

void qwen_scratch_alloc(qwen_scratch *s, const qwen_config *c, int S);
void qwen_scratch_free(qwen_scratch *s);
/* The additive mask of one sequence: key j allowed for query i when j <= i and mask[j] != 0
 * (mask NULL: all ones); a row with no allowed key allows all. Fills s->bias. */
void qwen_build_mask(const int64_t *mask, int S, float *bias);

/* x[i] = embed_tokens row ids[i]. -1 + error for an id outside the table. */
int qwen_embed(const qwen_model *m, const int64_t *ids, int S, float *x);
/* One decoder layer on one sequence x [S, D] in place (s->bias, s->cos, s->sin prepared). */
void qwen_layer_forward(const qwen_model *m, const qwen_layer *l, float *x, qwen_scratch *s);
/* hidden_states[index] of one sequence (index in [0, n_loaded]; index == num_layers applies the final
 * norm): ids, mask [S]; out [S, D]. -1 + error (index out of range, a bad id). */
int qwen_hidden_state(const qwen_model *m, const int64_t *ids, const int64_t *mask, int S, int index, float *out);

/* ---- the Qwen2-VL chat template, [system, user] + add_generation_prompt ----
 * "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
 * (malloc'ed). */
char *qwen_chat_render(const char *system, const char *user);
/* apply_chat_template(conversation, add_generation_prompt=True, tokenize=True, padding="max_length",
 * max_length, truncation=True): the rendered text tokenized (no special tokens added), the first
 * max_len ids kept, right-padded with the pad token; mask 1 on the real ids. ids, mask: [max_len];
 * *n_raw (may be NULL): the untruncated length. */
int qwen_chat_tokens(const bpe_tokenizer *t, const char *system, const char *user, int max_len, int64_t *ids,
                     int64_t *mask, int *n_raw);

/* ---- HunyuanVideo-1.5's use (HunyuanVideo15Pipeline._get_mllm_prompt_embeds) ---- */
extern const char *const hv15_system_message;   /* the pipeline's system message, verbatim */
#define HV15_MLLM_CROP_START 108                 /* prompt_template_encode_start_idx */
#define HV15_MLLM_MAX_LENGTH 1000                /* tokenizer_max_length (padding to 1108) */
#define HV15_MLLM_SKIP_LAYERS 2                  /* hidden_states[-(2 + 1)] */
/* The pipeline's prompt tokens: conversation [system message, prompt or " "], padded/truncated to
 * crop_start + max_length. ids, mask: [crop_start + max_length]. */
int hv15_mllm_tokens(const bpe_tokenizer *t, const char *prompt, int64_t *ids, int64_t *mask, int *n_raw);
/* prompt_embeds [max_length, D] = hidden_states[L - 3][crop_start:], prompt_embeds_mask
 * [max_length] = mask[crop_start:] for one prompt (m loaded with at least L - 2 layers). */
int hv15_mllm_prompt_embeds(const qwen_model *m, const bpe_tokenizer *t, const char *prompt, float *embeds,
                            int64_t *mask);

#endif
