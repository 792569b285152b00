/* The DDPM-style noise schedule of CogVideoXDDIMScheduler and CogVideoXDPMScheduler (diffusers
 * 0.32.2), shared by scheduler_ddim.c and scheduler_dpm.c: ā from the betas, integer timesteps.
 *
 * Numerics as upstream: the noise schedule (alphas_cumprod) is float64; each step's scalar
 * coefficients are computed in float64 and rounded to float32 before the element-wise float32
 * arithmetic on the latents (PyTorch's 0-d float64 tensor × float32 tensor).
 * (beta_schedule "linear" / "squaredcos_cap_v2" have a float32 schedule upstream; ā is built in
 * float32 here too, but the step coefficients are then computed in float64 — not bit-exact for
 * those schedules, which no CogVideoX checkpoint uses.) */
#ifndef CVX_STAGE2_SCHEDULER_DDPM_H
#define CVX_STAGE2_SCHEDULER_DDPM_H

#include "stage2/scheduler.h"

typedef enum { DDPM_PRED_EPSILON = 0, DDPM_PRED_V_PREDICTION, DDPM_PRED_SAMPLE } ddpm_prediction_type;
typedef enum { DDPM_SPACING_LINSPACE = 0, DDPM_SPACING_LEADING, DDPM_SPACING_TRAILING } ddpm_timestep_spacing;

typedef struct {
    int num_train_timesteps;
    ddpm_prediction_type prediction_type;
    ddpm_timestep_spacing timestep_spacing;
    int steps_offset;
    double *alphas_cumprod;         /* [num_train_timesteps], ā_t */
    double final_alpha_cumprod;     /* ā used when the previous timestep is < 0 */
    /* set by set_timesteps */
    int num_inference_steps;
    int64_t *timesteps;             /* [num_inference_steps], descending */
    int noise_dtype;                /* DPM's step noise draw: cvx_dtype (the scheduler's noise_dtype) */
} ddpm_schedule;

/* The schedule of a DDPM-family scheduler (s->sched). */
static inline ddpm_schedule *ddpm_of(const cvx_scheduler *s) { return (ddpm_schedule *)s->sched; }

/* The cvx_scheduler_type members both DDPM schedulers share (scheduler_ddpm.c). */
int ddpm_configure(cvx_scheduler *s, const cvx_config *cfg);
void ddpm_free(void *sched);
int ddpm_set_timesteps_type(cvx_scheduler *s, int n);
/* scheduler.add_noise (CogVideoXDDIM/DPMScheduler) at timesteps[i]: ā_t rounded to float32
 * first, then out = √ā·x0 + √(1−ā)·noise in float32, as upstream. */
void ddpm_add_noise_type(const cvx_scheduler *s, int i, const float *x0, const float *noise, size_t n, float *out);

/* Build from a parsed config (no type lookup). -1 + cvx_error naming the file and key. */
int ddpm_schedule_init(ddpm_schedule *d, const cvx_config *cfg);
void ddpm_schedule_free(ddpm_schedule *d);
/* ā at a previous timestep (final_alpha_cumprod when prev_t < 0). */
double ddpm_alpha_prev(const ddpm_schedule *s, int64_t prev_t);
/* x0 from the model output for the prediction type; coefficients f64 → f32, arithmetic f32. */
void ddpm_predict_x0(const ddpm_schedule *s, double a_t, const float *model_output, const float *sample, size_t n,
                     float *x0);
/* The inference timesteps for n steps (spacing + steps_offset as upstream). -1 + error when
 * n < 1 or n > num_train_timesteps. */
int ddpm_set_timesteps(ddpm_schedule *s, int n);
/* Both steps use prev_t = t − num_train_timesteps // num_inference_steps (not the next list entry). */
int64_t ddpm_prev_timestep(const ddpm_schedule *s, int64_t t);
void ddpm_add_noise(const ddpm_schedule *s, int64_t t, const float *x0, const float *noise, size_t n, float *out);

/* DDIM (eta = 0, deterministic). Arrays of n floats; prev and x0 may be NULL / must not alias
 * the inputs. x0 = predicted original sample. */
void ddpm_ddim_step(const ddpm_schedule *s, const float *model_output, int64_t t, const float *sample, size_t n,
                    float *prev, float *x0);
/* How many latent-shaped normal draws a DPM step makes: 1, or 2 when it is second order
 * (an old x0 is given and prev_t ≥ 0). Upstream draws even when the noise weight is 0. */
int ddpm_dpm_num_draws(const ddpm_schedule *s, int has_old_x0, int64_t t);
/* DPM step with explicit noise (noise2 used only for a second-order step; may be NULL
 * otherwise). old_x0 = the previous step's x0 or NULL; t_back = the previous (larger) timestep,
 * or -1 for none (first step). */
void ddpm_dpm_step_with_noise(const ddpm_schedule *s, const float *model_output, const float *old_x0, int64_t t,
                              int64_t t_back, const float *sample, size_t n, const float *noise1, const float *noise2,
                              float *prev, float *x0);
/* DPM step drawing its noise from `g` exactly as upstream (ddpm_dpm_num_draws draws of n
 * normals, dtype s->noise_dtype). `noise_scratch` holds n floats (it ends up holding the noise used). */
void ddpm_dpm_step(const ddpm_schedule *s, const float *model_output, const float *old_x0, int64_t t, int64_t t_back,
                   const float *sample, size_t n, cvx_generator *g, float *noise_scratch, float *prev, float *x0);

#endif
