/* LoRA adapters: low-rank deltas of a model's linear layers, read from the LoRA files users have
 * and applied the way diffusers 0.33.1 + peft 0.15.2 apply them (docs/usage.md "LoRA").
 *
 * An adapter set is built once, after the model is loaded, from the model's table of linear
 * layers (cvx_lora_target: the diffusers module name, the original checkpoint's name, and the
 * weight/bias tensors the model hands to cvx_linear). It is attached to the compute context
 * (ctx->lora); cvx_linear(ctx, x, M, K, W, b, y) then finds the adapters of W by its pointer and
 *   unfused (default): y = W x + b, then for each adapter a: y += s_a · B_a (A_a x) + s'_a · diff_b_a
 *                      (two small products at ctx->precision, f32 accumulation; no copy of W);
 *   fused:             runs W' = W + Σ_a s_a · B_a A_a and b' = b + Σ_a s'_a · diff_b_a instead,
 *                      private copies (in W's storage dtype) of the touched layers only.
 * Layers no adapter touches run exactly as without LoRA.
 *
 * File formats (keys of one adapted Linear; the file is a safetensors file):
 *   diffusers / PEFT  transformer.<module>.lora_A.weight, .lora_B.weight (+ .lora_B.bias); also
 *                     lora_down/lora_up, and keys without the "transformer." prefix
 *   original / ComfyUI / Kijai (Wan)  diffusion_model.<original module>.lora_down|lora_A.weight,
 *                     .lora_up|lora_B.weight, .alpha, .diff_b (bias delta)
 *   kohya / musubi    lora_unet_<module with '_' for '.'>.lora_down.weight, .lora_up.weight, .alpha
 * Scales, per adapter of weight w (set_adapters' weight) and module of rank r:
 *   s  = w · lora_alpha / r · fold        s' = w · lora_alpha / r (the bias delta)
 *   lora_alpha: from the file's lora_adapter_metadata when present (diffusers >= 0.34: transformer.
 *     lora_alpha, alpha_pattern, r, rank_pattern, use_rslora → lora_alpha / sqrt(r)); else, as
 *     diffusers' get_peft_kwargs, the rank of the FIRST lora_B of the file — in sorted key order
 *     for diffusers keys, in the target table's order (= diffusers' converter order) for the
 *     others — for every module: a mixed-rank file scales a module of another rank by r_first / r.
 *   fold: alpha / r for the original and kohya formats (diffusers' converters fold it into the
 *     weights), 1 when the module has no .alpha; diffusers-format files' .alpha keys are ignored
 *     (as diffusers does).
 * Keys diffusers does not apply are not applied here either (full-weight .diff deltas, norm
 * .diff/.diff_b, DoRA's dora_scale); text-encoder keys are ignored (one info line). */
#ifndef CVX_LORA_H
#define CVX_LORA_H

#include <stddef.h>

#include "context.h"
#include "safetensors.h"

#define CVX_LORA_NAME 128

/* One linear layer of a model that adapters may target. */
typedef struct cvx_lora_target {
    char name[CVX_LORA_NAME];    /* diffusers module name: "transformer_blocks.0.attn1.to_q" */
    char alias[CVX_LORA_NAME];   /* the original checkpoint's name ("blocks.0.self_attn.q"), "" if none */
    const cvx_tensor *w;         /* [out, in], the pointer the model passes to cvx_linear */
    const cvx_tensor *b;         /* [out] or NULL */
    int prefix_only;             /* 1: "diffusion_model.<name>" keys are diffusers keys under another
                                  * prefix (LTX-Video's converter only strips it): diffusers' semantics,
                                  * no alpha folding */
} cvx_lora_target;

/* One adapter to load: a file and its set_adapters weight. */
typedef struct {
    const char *path;
    double weight;
} cvx_lora_spec;

/* "FILE[:WEIGHT]" (the --lora flag): the weight is the part after the last ':' when it is a finite
 * number, else 1.0 and the whole argument is the file (a path holding ':'). 0, or -1 + cvx_error:
 * empty, too long, a directory, or FILE:W where FILE exists and W is not a finite number ("abc",
 * "nan", "inf", "1e400", "1,5", ""). */
int cvx_lora_spec_parse(const char *arg, char *path, size_t path_n, double *weight);

typedef struct cvx_lora_set cvx_lora_set;
typedef struct cvx_lora_layer cvx_lora_layer;

/* Read the n files and map them onto the model's targets (the family names the model in
 * messages: "CogVideoX"). fuse: merge into private copies of the touched weights now.
 * Prints one info line per file (layers, rank, format), one warning line listing the keys that
 * match no layer (count and the first few), one info line for text-encoder keys and keys diffusers
 * does not apply. NULL + cvx_error (one line naming the file and key) for: an unreadable file, a
 * LoRA for another model family or size (no key matches, a shape mismatch), a lora_A without its
 * lora_B, DoRA. */
cvx_lora_set *cvx_lora_load(const cvx_lora_spec *specs, int n, const cvx_lora_target *targets, int n_targets,
                            const char *family, int fuse);
void cvx_lora_free(cvx_lora_set *s);

/* ---- what cvx_linear calls (common/gemm.c) ---- */
/* The adapters of weight W, NULL when none (or s NULL). */
const cvx_lora_layer *cvx_lora_find(const cvx_lora_set *s, const cvx_tensor *W);
/* Fused layer: *W, *b become the merged copies (b stays when neither had a bias). */
void cvx_lora_fused(const cvx_lora_layer *l, const cvx_tensor **W, const cvx_tensor **b);
/* Unfused layer: y[M, N] += Σ_a s_a · (x[M, K] A_aᵀ) B_aᵀ (+ s'_a · diff_b_a) at ctx->precision (the
 * same matrix kernels as the base product, f32 accumulation). Nothing for a fused layer. */
void cvx_lora_apply(cvx_ctx *ctx, const cvx_lora_layer *l, const float *x, int M, int K, float *y);

/* ---- inspection (tests, messages) ---- */
typedef struct {
    const char *module;          /* the target's diffusers name */
    int adapter;                 /* index into the specs */
    int rank;
    double scale, bias_scale;    /* s and s' above */
    int has_bias;
} cvx_lora_term_info;
int cvx_lora_term_count(const cvx_lora_set *s);
void cvx_lora_term_at(const cvx_lora_set *s, int i, cvx_lora_term_info *out);
int cvx_lora_layer_count(const cvx_lora_set *s);   /* targets with at least one adapter */
int cvx_lora_is_fused(const cvx_lora_set *s);
/* The merged weight / bias of target `W` (fused sets), NULL when W is not adapted (bias: or has none). */
const cvx_tensor *cvx_lora_fused_weight(const cvx_lora_set *s, const cvx_tensor *W);
const cvx_tensor *cvx_lora_fused_bias(const cvx_lora_set *s, const cvx_tensor *W);
/* Bytes of the private merged copies (fused sets). */
size_t cvx_lora_fused_bytes(const cvx_lora_set *s);

#endif
