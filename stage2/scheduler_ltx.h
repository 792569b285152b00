/* The LTX-Video scheduler type "ltx" (stage2/scheduler_ltx.c): LTXPipeline's use of
 * FlowMatchEulerDiscreteScheduler over stage2/ltx_schedule.h. The LTX family picks it (its
 * scheduler_config is FlowMatchEulerDiscreteScheduler with LTX's dynamic-shift keys, which the
 * generic euler refuses). */
#ifndef CVX_STAGE2_SCHEDULER_LTX_H
#define CVX_STAGE2_SCHEDULER_LTX_H

#include <stdint.h>

#include "stage2/scheduler.h"

/* not in cvx_schedulers[] (not a --scheduler choice): cvx_scheduler_find knows it by name */
extern const cvx_scheduler_type cvx_scheduler_ltx;
int cvx_scheduler_is_ltx(const cvx_scheduler *s);
/* The latent token count F·H·W the 0.9.0 dynamic shift (calculate_shift → mu) uses; set before
 * cvx_scheduler_set_timesteps (the loop sets them again: the value sticks). */
void ltx_scheduler_set_seq_len(cvx_scheduler *s, int64_t seq_len);
/* Explicit timesteps [n] (borrowed; LTXConditionPipeline's distilled lists), NULL: the sigmas. */
void ltx_scheduler_set_list(cvx_scheduler *s, const double *timesteps, int n);
/* LTXImageToVideoPipeline: steps leave the first `keep` of every channel's per_channel floats
 * (latents [C, F, h, w]: keep = h·w, latent frame 0) as they were. */
void ltx_scheduler_keep_first(cvx_scheduler *s, int C, size_t per_channel, size_t keep);
/* LTXConditionPipeline (latents: packed tokens [tokens, C]): every step is the per-token step of
 * −v at min(t, (1 − mask)·1000) followed by the keep-select (stage2/ltx_schedule.h); with
 * noise_scale > 0 it then re-noises the hard conditions for the next step (init + noise_scale·
 * randn·(t_next/1000)², the randn drawn from the loop's generator: upstream's draw at the start of
 * the next step; step 0's is the caller's). mask and init borrowed. */
void ltx_scheduler_set_condition(cvx_scheduler *s, const float *mask, const float *init, int tokens, int C,
                                 float noise_scale);
/* sigmas [N + 1] of the last set_timesteps */
const float *ltx_scheduler_sigmas(const cvx_scheduler *s);

#endif
