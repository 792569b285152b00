/* Classifier-free guidance as diffusers' pipelines and guiders combine the two branches. */
#ifndef CVX_STAGE2_GUIDANCE_H
#define CVX_STAGE2_GUIDANCE_H

#include <stddef.h>

/* One step's guidance (the per-step plan's, stage2/plan.h). */
typedef struct {
    double scale;      /* out = uncond + scale·(cond − uncond); <= 1: no guidance, the conditional branch's
                        * prediction as it is (upstream runs that branch alone: the same bytes) */
    int dynamic;       /* CogVideoX's use_dynamic_cfg: the scale at timestep t is cvx_guidance_at(scale, 1,
                        * n, t), n the steps the loop runs */
    double rescale;    /* guidance_rescale φ (diffusers rescale_noise_cfg, HunyuanVideo's guider); 0 = none */
} cvx_guider;

/* out = uncond + g·(cond − uncond), float32 as PyTorch computes `noise_uncond + guidance_scale *
 * (noise_pred - noise_uncond)` (g, a Python float, rounded to float32 first). n floats; out may
 * alias uncond or cond. */
void cvx_cfg_combine(const float *uncond, const float *cond, double g, size_t n, float *out);

/* diffusers rescale_noise_cfg on out (the combined prediction, n floats) given cond: σ_c = std(cond),
 * σ_o = std(out) (unbiased, in double), out = φ·out·(σ_c/σ_o) + (1 − φ)·out in float32. φ 0: nothing. */
void cvx_cfg_rescale(const float *cond, double phi, size_t n, float *out);

#endif
