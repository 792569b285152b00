/* What stage 2's transformer loaders share (LTX-Video, Wan, HunyuanVideo-1.5): the weights opened
 * and checked to be the family's, the context to run on, the config.json of a transformer
 * directory, and the attention projections of a DiT block. */
#ifndef CVX_TRANSFORMER_LOAD_H
#define CVX_TRANSFORMER_LOAD_H

#include "context.h"
#include "safetensors.h"

#include <stddef.h>
#include <stdint.h>

/* One attention: to_q, to_k, to_v, to_out.0 (weights [D, D], biases [D]) and the RMSNorm weights
 * over all heads, norm_q and norm_k ([D], f32 copies). */
typedef struct {
    const cvx_tensor *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b;
    float *norm_q, *norm_k;
} cvx_attn_weights;

/* A tensor by its diffusers name, shape-checked: NULL + cvx_error when it is missing or misshapen.
 * user: the loader's own (a family's key mapping over cvx_weights_get). */
typedef const cvx_tensor *(*cvx_weights_getter)(const void *user, const char *name, const int64_t *shape, int ndim);

/* cvx_weights_get as a getter (user: the cvx_weights). */
const cvx_tensor *cvx_weights_getter_plain(const void *w, const char *name, const int64_t *shape, int ndim);

/* `prefix`.to_q / to_k / to_v / to_out.0 .weight [D, D] and .bias [D], `prefix`.norm_q / norm_k
 * .weight [D], in that order: 0, or -1 + cvx_error at the first missing or misshapen one (what was
 * copied is freed by cvx_attn_weights_free). */
int cvx_attn_weights_load(cvx_weights_getter get, const void *user, const char *prefix, int64_t D,
                          cvx_attn_weights *a);
void cvx_attn_weights_free(cvx_attn_weights *a);

/* The weights at path (a file or a directory, as cvx_weights_open) checked to be `family`'s
 * (cvx_weights_check_arch: arch is its GGUF general.architecture): NULL + cvx_error otherwise,
 * nothing left open. */
cvx_weights *cvx_weights_open_family(const char *path, const char *arch, const char *family);

/* ctx when given, else a new context on cvx_threads() threads that the caller owns (*owns = 1). */
cvx_ctx *cvx_ctx_or_new(cvx_ctx *ctx, int *owns);

/* "<dir>/config.json" into path[n]: 0, or -1 + cvx_error when it does not fit. */
int cvx_dir_config_json(char *path, size_t n, const char *dir);

#endif
