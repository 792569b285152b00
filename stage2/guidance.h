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

/* diffusers' ClassifierFreeGuidance guider (guider/guider_config.json; HunyuanVideo-1.5):
 * CFG is on at step i of N when enabled, start·N <= i < stop·N (int truncation) and the scale is not
 * isclose to 1 (0 with use_original_formulation); then pred = base + g·(cond − uncond) with base =
 * uncond (cond with use_original_formulation), float32; off: pred = cond (one model call, and the
 * pipeline encodes no negative prompt). guidance_rescale > 0 is refused at load. */
typedef struct {
    double guidance_scale, guidance_rescale, start, stop;
    int use_original_formulation, enabled;
} cvx_cfg_guider;
/* Read a guider_config.json (upstream defaults for absent keys). -1 + cvx_error naming the key. */
int cvx_cfg_guider_load(cvx_cfg_guider *g, const char *path);
/* 1 when step i of n runs both branches. */
int cvx_cfg_guider_enabled(const cvx_cfg_guider *g, int i, int n);
/* The guided prediction at step i of n; uncond is not read when CFG is off there. out may alias. */
void cvx_cfg_guider_apply(const cvx_cfg_guider *g, int i, int n, const float *cond, const float *uncond, size_t count,
                          float *out);

/* diffusers rescale_noise_cfg on out (the combined prediction, n floats) given cond: σ_c = std(cond),
 * σ_o = std(out) (unbiased, in double), out = φ·out·(σ_c/σ_o) + (1 − φ)·out in float32. φ 0: nothing. */
void cvx_cfg_rescale(const float *cond, double phi, size_t n, float *out);

#endif
