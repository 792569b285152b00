/* Element-wise, normalisation and attention ops (f32). One copy of each op, used by all stages.
 * Semantics follow PyTorch's (eps placement, biased variance, tanh-GELU, ...). */
#ifndef CVX_OPS_H
#define CVX_OPS_H

#include <stddef.h>

/* y = LayerNorm(x) over the last dim: (x - mean) / sqrt(var + eps) * w + b. w, b may be NULL.
 * In place allowed (y == x). x: [rows, dim]. */
void cvx_layernorm(float *y, const float *x, int rows, int dim, const float *w, const float *b, float eps);
/* T5 RMS norm: x * rsqrt(mean(x²) + eps) * w. */
void cvx_rmsnorm(float *y, const float *x, int rows, int dim, const float *w, float eps);
/* GroupNorm on [C, S] (channels outer, S = all spatial/temporal positions): groups of C/G
 * channels share mean/var over (C/G)·S values. w, b: [C] or NULL. In place allowed. */
void cvx_groupnorm(float *y, const float *x, int C, size_t S, int groups, const float *w, const float *b,
                   float eps);
/* The statistics of cvx_groupnorm: per group g, mean[g] and inv[g] = 1/sqrt(var + eps) (biased
 * variance, two passes in double, 8 lanes), so callers can fuse the normalisation into their
 * own pass: y = x·(inv·w) + (b − mean·inv·w), as cvx_groupnorm does. */
void cvx_groupnorm_stats(const float *x, int C, size_t S, int groups, float eps, float *mean, float *inv);
/* Reference: the same statistics with one serial double sum per pass. */
void cvx_groupnorm_stats_ref(const float *x, int C, size_t S, int groups, float eps, float *mean, float *inv);

void cvx_silu(float *x, size_t n);
/* 0.5x(1+tanh(√(2/π)(x+0.044715x³))), computed as x·σ(2u) with a vectorised exp (same
 * function, no cancellation in 1 + tanh u for negative x). */
void cvx_gelu_tanh(float *x, size_t n);
/* nn.GELU() (erf form): 0.5x(1+erf(x/√2)), erf in double. */
void cvx_gelu_erf(float *x, size_t n);
/* Rotary embedding on interleaved pairs (diffusers apply_rotary_emb, use_real, unbind dim -1):
 * for each of ntok rows of x (stride ld) and each head, x'[2j] = x[2j]·cos[2j] − x[2j+1]·sin[2j],
 * x'[2j+1] = x[2j+1]·cos[2j+1] + x[2j]·sin[2j+1]; cos_t, sin_t [ntok, hd] (each frequency twice). */
void cvx_rope_interleaved(float *x, int ntok, int heads, int hd, int ld, const float *cos_t, const float *sin_t);
void cvx_add(float *y, const float *x, size_t n);            /* y += x */
void cvx_scale(float *y, float s, size_t n);                 /* y *= s */
void cvx_softmax_rows(float *x, int rows, int cols);         /* in place, numerically stable */

/* Multi-head attention, row-major token layouts with a row stride:
 *   q: [Sq, ld_q] with head h at columns h*hd .. h*hd+hd-1; k, v: [Skv, ld_kv]; out: [Sq, ld_o].
 *   out_h = softmax(scale · q_h k_hᵀ + bias_h) v_h, bias: [heads, Sq, Skv] or NULL.
 * Tiled over keys with an online softmax: memory O(tile), never the [Sq, Skv] matrix
 * (except the caller's bias). out may be q itself (same ld): each job reads its own block of
 * q before writing the same block of out.
 * cvx_attention uses AVX2/FMA micro-kernels when head_dim % 16 == 0 (common/attention.c),
 * else cvx_attention_tiled, the portable version built on cvx_sgemm (common/attention_tiled.c).
 * cvx_attention_isa(avx512 != 0, ...) runs the AVX-512 form of the same kernels (the caller has
 * checked the CPU: cvx_kernels_avx512): the same bits as cvx_attention, at twice the vector width. */
void cvx_attention(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                   int Sq, int Skv, int heads, int hd, float scale, const float *bias);
void cvx_attention_isa(int avx512, const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                       int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias);
void cvx_attention_tiled(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                         int Sq, int Skv, int heads, int hd, float scale, const float *bias);
/* Straightforward reference (full score matrix per head) for tests. */
void cvx_attention_ref(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                       int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias);

/* The one latent permute: frames-major [F, C, hw] -> channels-major [C, F, hw] (the pipeline's
 * layout -> the VAE's / the stage-2 file's). Frames f0 .. F-1 of src are kept (f0 drops
 * CogVideoX1.5's leading padding frames): dst [C, F − f0, hw]. */
void cvx_permute_fc_to_cf(const float *src, int F, int C, size_t hw, int f0, float *dst);

/* The one linspace: torch.linspace on the CPU bit for bit (PyTorch 1.13). Values before steps/2
 * count up from start, the rest down from end; the kernel fills `vec` lanes at a time, each
 * lane as base + lane·step with base from the lane-0 index, and the tail (steps % (2·vec)) one
 * by one. vec = 1 is the scalar kernel. f64 (double tensors) and f32 (float32 tensors). */
void cvx_linspace_f64(double start, double end, int steps, int vec, double *out);
void cvx_linspace_f32(float start, float end, int steps, int vec, float *out);

/* diffusers get_timestep_embedding (max_period 10000, scale 1): out [n, dim] from t [n] in
 * float32 as PyTorch computes it; [cos | sin] when flip_sin_to_cos. (Every transformer's and the LTX
 * VAE's time embedder.) */
void cvx_timestep_sinusoid(float *out, const float *t, int n, int dim, int flip_sin_to_cos, double freq_shift);

/* Relative L2 error ‖a−b‖ / ‖b‖ (double accumulation); used by tests and debug tooling. */
double cvx_rel_l2(const float *a, const float *b, size_t n);

#endif
