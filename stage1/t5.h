/* T5 v1.1 encoder (transformers T5EncoderModel), as CogVideoX uses it: no attention mask. */
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
} t5_config;

/* One encoder block's weights (mmapped, storage dtype). */
typedef struct {
    const cvx_tensor *q, *k, *v, *o;           /* layer.0.SelfAttention: [inner, D] / o: [D, inner] */
    const cvx_tensor *wi_0, *wi_1, *wo;        /* layer.1.DenseReluDense: [d_ff, D] / wo: [D, d_ff] */
    float *ln_attn, *ln_ff;                    /* layer.{0,1}.layer_norm.weight widened: [D] */
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
} t5_model;

/* Read text_encoder/config.json (-1 + error naming the file and key). */
int t5_config_load(t5_config *cfg, const char *config_path);
/* Open the weights in `text_encoder_dir` (config.json + one .safetensors or a sharded index)
 * and look up / shape-check every tensor once. -1 + error; nothing to free on failure.
 * ctx: the compute context to run on (borrowed), or NULL for a private one (freed by t5_free). */
int t5_build(t5_model *m, const char *text_encoder_dir, cvx_ctx *ctx);
void t5_free(t5_model *m);

/* T5's bucketed relative position (bidirectional): rel = key_pos - query_pos. */
int t5_relative_position_bucket(int rel, int num_buckets, int max_distance);
/* The shared position bias for S tokens: bias[h][i][j] = rel_bias[bucket(j - i)][h]. [heads, S, S] */
void t5_position_bias(const t5_model *m, int S, float *bias);

/* Activations of one forward for M = B*S tokens, allocated once per t5_encode. */
typedef struct {
    float *h;                /* normed input [M, D] */
    float *q, *k, *v, *a;    /* [M, inner] */
    float *y;                /* block output before the residual add [M, D] */
    float *g, *u;            /* feed-forward gate / up [M, d_ff] */
} t5_scratch;

void t5_scratch_alloc(t5_scratch *s, const t5_config *cfg, int M);
void t5_scratch_free(t5_scratch *s);

/* Blocks, exposed for tests. x: [B*S, D] residual stream, updated in place. */
void t5_attention(const t5_model *m, const t5_block *blk, float *x, int B, int S, const float *bias, t5_scratch *s);
void t5_feed_forward(const t5_model *m, const t5_block *blk, float *x, int B, int S, t5_scratch *s);
void t5_layer(const t5_model *m, const t5_block *blk, float *x, int B, int S, const float *bias, t5_scratch *s);

/* last_hidden_state for B sequences of S token ids each (each sequence independent).
 * ids: [B, S]; out: [B, S, D]. Ids outside the embedding table: -1 + error.
 * `progress` (may be NULL) advances by one per layer. */
int t5_encode(const t5_model *m, const int64_t *ids, int B, int S, float *out, cvx_progress *progress);

#endif
