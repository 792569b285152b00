/* Classifier-free guidance as diffusers' pipelines and guiders combine the two branches. */
#ifndef CVX_STAGE2_GUIDANCE_H
#define CVX_STAGE2_GUIDANCE_H

#include <stddef.h>

/* One step's guidance (the per-step plan's, stage2/plan.h): the pipelines' CFG and diffusers'
 * ClassifierFreeGuidance guider (guider/guider_config.json, HunyuanVideo-1.5) alike. */
typedef struct {
    double scale;      /* out = uncond + scale·(cond − uncond); <= 1: no guidance, the conditional branch's
                        * prediction as it is (upstream runs that branch alone: the same bytes) */
    int dynamic;       /* CogVideoX's use_dynamic_cfg: the scale at timestep t is cvx_guidance_at(scale, 1,
                        * n, t), n the steps the loop runs */
    double rescale;    /* guidance_rescale φ (diffusers rescale_noise_cfg); 0 = none */
    int original;      /* the guider's use_original_formulation: out = cond + scale·(cond − uncond), no
                        * guidance when scale is isclose to 0 (instead of <= 1) */
    int rescale_unguided;   /* rescale the conditional-only prediction too (ClassifierFreeGuidance.forward
                             * applies rescale_noise_cfg whether or not CFG ran; the pipelines only with it) */
} cvx_guider;

/* The step runs both branches: original ? scale not isclose to 0 : scale > 1. */
int cvx_guider_active(const cvx_guider *g);
/* The step's prediction (scale: g->scale or dynamic CFG's value at this step), float32 as PyTorch:
 * active (uncond given): base + scale·(cond − uncond), base = uncond (cond with `original`), then
 * rescale_noise_cfg with φ = rescale; not active (uncond NULL): cond, rescaled only with
 * rescale_unguided. n floats; out may alias cond or uncond. */
void cvx_guider_apply(const cvx_guider *g, double scale, const float *uncond, const float *cond, size_t n, float *out);

/* out = uncond + g·(cond − uncond), float32 as PyTorch computes `noise_uncond + guidance_scale *
 * (noise_pred - noise_uncond)` (g, a Python float, rounded to float32 first). n floats; out may
 * alias uncond or cond. */
void cvx_cfg_combine(const float *uncond, const float *cond, double g, size_t n, float *out);

/* diffusers' ClassifierFreeGuidance guider from guider/guider_config.json (upstream defaults for
 * absent keys: guidance_scale 7.5, guidance_rescale 0, use_original_formulation false, start 0,
 * stop 1, enabled true) into g (scale, rescale, original, rescale_unguided) and its step window
 * [start, stop) as fractions of the steps; enabled false: g->scale is the no-guidance value (1, or
 * 0 with original). Any other key with a value other than its default, a start/stop out of
 * upstream's ranges (0 <= start < 1, start <= stop <= 1), guidance_rescale < 0, a non-finite
 * number: -1 + one cvx_error naming the file and key. */
int cvx_guider_load(const char *path, cvx_guider *g, double window[2]);
/* Step i of n lies in the guider's window: int(start·n) <= i < int(stop·n) (Python's int()). */
int cvx_guider_window_has(const double window[2], int i, int n);

/* diffusers rescale_noise_cfg on out (the combined prediction, n floats) given cond: σ_c = std(cond),
 * σ_o = std(out) (unbiased, accumulated in double, each rounded to float32 as torch.std of a float32
 * tensor), out = φ·out·(σ_c/σ_o) + (1 − φ)·out in float32. φ 0: nothing. */
void cvx_cfg_rescale(const float *cond, double phi, size_t n, float *out);

#endif
