/* T5 v1.1 encoder (transformers T5EncoderModel) as CogVideoX uses it (no attention mask), and
 * UMT5 (UMT5EncoderModel) as Wan uses it: the same blocks, but every block has its own relative
 * position bias, and the pipeline passes the attention mask. One model type for both. */
#ifndef CVX_STAGE1_T5_H
#define CVX_STAGE1_T5_H

#include <stdint.h>

#include "context.h"
#include "progress.h"
#include "safetensors.h"

/* Hyper-parameters, all from text_encoder/config.json. */
typedef struct {
    int d_model, d_kv, num_heads, d_ff, num_layers, vocab_size;
    int num_buckets, max_distance;   /* relative_attention_num_buckets / _max_distance */
    float eps;                       /* layer_norm_epsilon */
    int per_block_bias;              /* UMT5 (model_type "umt5"): a relative_attention_bias in every
                                        block; T5: block 0's is shared. -1 from t5_config_load when
                                        the config has no model_type: t5_build decides from the weights */
} t5_config;

/* One encoder block's weights (mmapped, storage dtype). */
typedef struct {
    const cvx_tensor *q, *k, *v, *o;           /* layer.0.SelfAttention: [inner, D] / o: [D, inner] */
    const cvx_tensor *wi_0, *wi_1, *wo;        /* layer.1.DenseReluDense: [d_ff, D] / wo: [D, d_ff] */
    float *ln_attn, *ln_ff;                    /* layer.{0,1}.layer_norm.weight widened: [D] */
    float *rel_bias;                           /* UMT5 blocks > 0: this block's relative_attention_bias
                                                  widened [buckets, heads]; NULL: the model's (block 0's) */
} t5_block;

typedef struct {
    t5_config cfg;
    cvx_weights *weights;
    const cvx_tensor *embed;                   /* shared.weight or encoder.embed_tokens.weight: [vocab, D] */
    float *rel_bias;                           /* block 0 relative_attention_bias widened: [buckets, heads] */
    float *final_ln;                           /* encoder.final_layer_norm.weight: [D] */
    t5_block *blocks;                          /* [num_layers] */
    cvx_ctx *ctx;                              /* compute context (borrowed unless owns_ctx) */
    int owns_ctx;
    int llama_names;                           /* the file uses llama.cpp's names (GGUF: token_embd.weight, ...) */
} t5_model;

/* Read text_encoder/config.json (-1 + error naming the file and key). */
int t5_config_load(t5_config *cfg, const char *config_path);
/* Open the weights in `text_encoder_dir` (config.json + one .safetensors or a sharded index)
 * and look up / shape-check every tensor once. -1 + error; nothing to free on failure.
 * ctx: the compute context to run on (borrowed), or NULL for a private one (freed by t5_free). */
int t5_build(t5_model *m, const char *text_encoder_dir, cvx_ctx *ctx);
/* The same from a weights path (a .safetensors file, e.g. ComfyUI's umt5_xxl_fp16.safetensors, an
 * index .json, a directory, or a GGUF file such as city96's t5-v1_1-xxl-encoder / umt5-xxl-encoder
 * *.gguf) and a separate config.json. The tensor names are HF's (encoder.block.N..., shared.weight
 * or encoder.embed_tokens.weight) or llama.cpp's (token_embd.weight, enc.blk.N.attn_q.weight, ...:
 * t5_llama_name's table); block-quantized weights stay quantized (cvx_linear reads them). */
int t5_build_file(t5_model *m, const char *weights_path, const char *config_path, cvx_ctx *ctx);
void t5_free(t5_model *m);
/* llama.cpp's name of an HF T5 encoder tensor ("encoder.block.3.layer.1.DenseReluDense.wi_0.weight" ->
 * "enc.blk.3.ffn_gate.weight"; gguf-py's TensorNameMap for arch t5encoder, as ComfyUI-GGUF maps it back). */
void t5_llama_name(const char *hf, char *out, size_t n);

/* T5's bucketed relative position (bidirectional): rel = key_pos - query_pos. */
int t5_relative_position_bucket(int rel, int num_buckets, int max_distance);
/* The position bias for S tokens from a relative_attention_bias table [buckets, heads] (the
 * model's, or a UMT5 block's own): bias[h][i][j] = table[bucket(j - i)][h]. [heads, S, S] */
void t5_position_bias(const t5_model *m, const float *table, int S, float *bias);
/* The table block `blk` uses: its own (UMT5) or the model's (block 0's). */
const float *t5_block_bias_table(const t5_model *m, const t5_block *blk);

/* Activations of one forward for M = B*S tokens, allocated once per t5_encode. */
typedef struct {
    float *h;                /* normed input [M, D] */
    float *q, *k, *v, *a;    /* [M, inner] */
    float *y;                /* block output before the residual add [M, D] */
    float *g, *u;            /* feed-forward gate / up [M, d_ff] */
    float *mb, *kk, *vv;     /* a masked sequence's kept bias columns [heads, S, S] and keys,
                                values [S, inner] (allocated on first use) */
} t5_scratch;

void t5_scratch_alloc(t5_scratch *s, const t5_config *cfg, int M);
void t5_scratch_free(t5_scratch *s);

/* Blocks, exposed for tests. x: [B*S, D] residual stream, updated in place. bias: the block's
 * position bias [heads, S, S]; mask: [B, S] (0 = padding) or NULL. A masked key gets exactly
 * zero weight, as upstream's finfo(float32).min added to its scores (and a sequence whose keys
 * are all masked averages them all, as upstream). */
void t5_attention(const t5_model *m, const t5_block *blk, float *x, int B, int S, const float *bias,
                  const int64_t *mask, t5_scratch *s);
void t5_feed_forward(const t5_model *m, const t5_block *blk, float *x, int B, int S, t5_scratch *s);
void t5_layer(const t5_model *m, const t5_block *blk, float *x, int B, int S, const float *bias, const int64_t *mask,
              t5_scratch *s);
/* x[i] = embedding row ids[i] (no scaling), M ids. -1 + error for an id outside the table. */
int t5_embed(const t5_model *m, const int64_t *ids, int M, float *x);

/* last_hidden_state for B sequences of S token ids each (each sequence independent).
 * ids: [B, S]; out: [B, S, D]. Ids outside the embedding table: -1 + error.
 * `progress` (may be NULL) advances by one per layer. */
int t5_encode(const t5_model *m, const int64_t *ids, int B, int S, float *out, cvx_progress *progress);
/* The same with an attention mask [B, S] (1 = token, 0 = padding; NULL = all ones): what
 * UMT5EncoderModel(input_ids, attention_mask).last_hidden_state gives (T5 checkpoints too). */
int umt5_encode(const t5_model *m, const int64_t *ids, const int64_t *mask, int B, int S, float *out,
                cvx_progress *progress);
/* WanPipeline._get_t5_prompt_embeds after tokenizing: per sequence b, rows < seq_lens[b] are
 * last_hidden_state (with the mask 1 on exactly those rows), rows seq_lens[b]..L-1 exact zeros.
 * The encoder runs on the max(seq_lens) first tokens only, which gives the same rows: masked
 * padding never reaches an unmasked row. ids: [B, L]; seq_lens in [1, L]; out: [B, L, D]. */
int umt5_prompt_embeds(const t5_model *m, const int64_t *ids, const int64_t *seq_lens, int B, int L, float *out,
                       cvx_progress *progress);

#endif
