/* Classifier-free guidance as diffusers' pipelines combine the two branches. */
#ifndef CVX_STAGE2_GUIDANCE_H
#define CVX_STAGE2_GUIDANCE_H

#include <stddef.h>

/* out = uncond + g·(cond − uncond), float32 as PyTorch computes `noise_uncond + guidance_scale *
 * (noise_pred - noise_uncond)` (g, a Python float, rounded to float32 first). n floats; out may
 * alias uncond or cond. */
void cvx_cfg_combine(const float *uncond, const float *cond, double g, size_t n, float *out);

#endif
