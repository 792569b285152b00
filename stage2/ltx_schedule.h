/* LTX-Video's schedule math (diffusers 0.35.2 FlowMatchEulerDiscreteScheduler as the LTX
 * pipelines call it, and pipeline_ltx_condition.py), number for number with numpy 1.24 / PyTorch:
 *
 *   0.9.0 / 0.9.1 (use_dynamic_shifting): sigmas_in = linspace(1, 1/N, N) (float64) → float32;
 *     mu = calculate_shift(F·H·W latent tokens, base/max_image_seq_len, base/max_shift); exponential
 *     time shift e^mu / (e^mu + (1/σ − 1)) in float32; then stretch_shift_to_terminal(shift_terminal);
 *     timesteps = σ·1000 (fractional). N = 1 gives NaN, as upstream.
 *   0.9.5+ LTXPipeline: the same sigmas with the static shift (1: unshifted).
 *   LTXConditionPipeline: custom timesteps (linear_quadratic_schedule(N)·1000, or the distilled
 *     lists): σ = float32(t)/1000, then the static shift; timesteps = the given values (float32).
 *
 * Every table has sigmas [N + 1] (sigmas[N] = 0) and timesteps [N]. */
#ifndef CVX_STAGE2_LTX_SCHEDULE_H
#define CVX_STAGE2_LTX_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int num_train_timesteps;          /* 1000 */
    double shift;                     /* static shift (when not dynamic) */
    int use_dynamic_shifting;
    double base_shift, max_shift;     /* calculate_shift's ends (upstream defaults 0.5, 1.15) */
    int64_t base_image_seq_len, max_image_seq_len;   /* 256, 4096 by default */
    double shift_terminal;            /* 0 = null */
} ltx_sched_config;

/* Read a scheduler_config.json of FlowMatchEulerDiscreteScheduler (upstream defaults for absent
 * keys). Options LTX never uses (karras / exponential / beta sigmas, invert_sigmas, stochastic
 * sampling, time_shift_type "linear") are refused: -1 + cvx_error naming the file and key. */
int ltx_sched_config_load(const char *path, ltx_sched_config *c);

/* calculate_shift: mu = seq·m + b, m = (max_shift − base_shift)/(max_seq − base_seq),
 * b = base_shift − m·base_seq (float64). The pipelines pass the config's values, falling back to
 * 256 / 4096 / 0.5 / 1.15 (what ltx_sched_config_load fills in for absent keys). */
double ltx_calculate_shift(int64_t seq_len, const ltx_sched_config *c);

/* LTXPipeline / LTXImageToVideoPipeline: set_timesteps(sigmas = linspace(1, 1/N, N), mu).
 * mu is used only with use_dynamic_shifting. -1 + cvx_error for N < 1 or N > 100000. */
int ltx_schedule_sigmas(const ltx_sched_config *c, int N, double mu, float *sigmas, float *timesteps);

/* LTXConditionPipeline: set_timesteps(timesteps = t_in [N]) (the distilled lists, or
 * ltx_linear_quadratic_timesteps). Only without dynamic shifting (upstream needs mu otherwise):
 * -1 + cvx_error. */
int ltx_schedule_timesteps(const ltx_sched_config *c, int N, const double *t_in, float *sigmas, float *timesteps);

/* linear_quadratic_schedule(N, threshold_noise, linear_steps): σ [N] (float64 math, a float32
 * tensor); linear_steps ≤ 0 = N // 2 (the default); threshold 0.025 by default. N = 1: [1].
 * The condition pipeline's default timesteps are σ·1000 in float32 (ltx_linear_quadratic_timesteps). */
void ltx_linear_quadratic_schedule(int N, double threshold_noise, int linear_steps, float *sigma);
void ltx_linear_quadratic_timesteps(int N, double threshold_noise, int linear_steps, float *timesteps);

/* The explicit timesteps [N] (allocated) of a run: `given` (--timesteps) copied, or (NULL) the
 * condition pipeline's default ltx_linear_quadratic_timesteps(N, 0.025, N // 2) widened to double. */
double *ltx_timestep_list(int N, const double *given);

/* The image-to-video pipeline's per-token timestep scale (1 − mask) [tokens] (allocated): 0 on the
 * first `first` tokens (latent frame 0), 1 elsewhere. */
float *ltx_first_frame_t_scale(size_t tokens, size_t first);

/* One Euler step at index i: prev = x + (σ_{i+1} − σ_i)·v (float32), n floats. */
void ltx_step(const float *sigmas, int i, const float *v, const float *x, size_t n, float *prev);

/* The per-token step (step(..., per_token_timesteps)) over `tokens` tokens of C channels:
 * σ_tok = ptt/1000; next = the largest schedule σ (sigmas [N + 1], the final 0 included)
 * below σ_tok − 1e-6 (0 when none); prev = x + (σ_tok − next)·model_output. The condition
 * pipeline passes model_output = −noise_pred. */
void ltx_step_per_token(const float *sigmas, int N, const float *ptt, const float *model_output, const float *x,
                        int tokens, int C, float *prev);

/* The condition pipeline's per-token timesteps: ptt = min(t, (1 − mask)·1000) [tokens]. */
void ltx_per_token_timesteps(float t, const float *mask, int tokens, float *ptt);

/* The condition pipeline after its step: out = denoised where t/1000 − 1e-6 < 1 − mask (per
 * token), else x (conditioning tokens kept). out may alias x or denoised. */
void ltx_condition_select(float t, const float *mask, const float *denoised, const float *x, int tokens, int C,
                          float *out);

#endif
