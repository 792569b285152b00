/* CogVideoXDDIMScheduler and CogVideoXDPMScheduler (diffusers 0.32.2), built from a diffusers
 * `scheduler/scheduler_config.json`.
 *
 * Numerics as upstream: the noise schedule (alphas_cumprod) is float64; each step's scalar
 * coefficients are computed in float64 and rounded to float32 before the element-wise float32
 * arithmetic on the latents (PyTorch's 0-d float64 tensor × float32 tensor).
 * (beta_schedule "linear" / "squaredcos_cap_v2" have a float32 schedule upstream; ā is built in
 * float32 here too, but the step coefficients are then computed in float64 — not bit-exact for
 * those schedules, which no CogVideoX checkpoint uses.) */
#ifndef COGVIDEOX_SCHEDULER_H
#define COGVIDEOX_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "rng.h"

typedef enum { COGVIDEOX_DDIM = 0, COGVIDEOX_DPM = 1 } cogvideox_scheduler_kind;
typedef enum { PRED_EPSILON = 0, PRED_V_PREDICTION, PRED_SAMPLE } cogvideox_prediction_type;
typedef enum { SPACING_LINSPACE = 0, SPACING_LEADING, SPACING_TRAILING } cogvideox_timestep_spacing;

typedef struct {
    cogvideox_scheduler_kind kind;
    int num_train_timesteps;
    cogvideox_prediction_type prediction_type;
    cogvideox_timestep_spacing timestep_spacing;
    int steps_offset;
    double *alphas_cumprod;         /* [num_train_timesteps], ā_t */
    double final_alpha_cumprod;     /* ā used when the previous timestep is < 0 */
    /* set by cogvideox_scheduler_set_timesteps */
    int num_inference_steps;
    int64_t *timesteps;             /* [num_inference_steps], descending */
} cogvideox_scheduler;

/* "ddim" / "dpm" or the diffusers class names. -1 + cvx_error otherwise. */
int cogvideox_scheduler_parse_kind(const char *name, cogvideox_scheduler_kind *out);
const char *cogvideox_scheduler_kind_name(cogvideox_scheduler_kind k);   /* "ddim" / "dpm" */

/* Build from a parsed scheduler_config.json. The class is the config's `_class_name` unless
 * `kind_override` (a cogvideox_scheduler_kind, or -1 for none) is given. -1 + cvx_error naming
 * the file and key on unsupported values. */
int cogvideox_scheduler_init(cogvideox_scheduler *s, const cvx_config *cfg, int kind_override);
/* Load `path` (a scheduler_config.json) and init. */
int cogvideox_scheduler_load(cogvideox_scheduler *s, const char *path, int kind_override);
void cogvideox_scheduler_free(cogvideox_scheduler *s);

/* The inference timesteps for n steps (spacing + steps_offset as upstream). -1 + error when
 * n < 1 or n > num_train_timesteps. */
int cogvideox_scheduler_set_timesteps(cogvideox_scheduler *s, int n);

/* Both steps use prev_t = t − num_train_timesteps // num_inference_steps (not the next list
 * entry). */
int64_t cogvideox_scheduler_prev_timestep(const cogvideox_scheduler *s, int64_t t);

/* DDIM (eta = 0, deterministic). Arrays of n floats; prev and x0 may be NULL / must not alias
 * the inputs. x0 = predicted original sample. */
void cogvideox_ddim_step(const cogvideox_scheduler *s, const float *model_output, int64_t t, const float *sample,
                         size_t n, float *prev, float *x0);

/* How many latent-shaped normal draws a DPM step makes: 1, or 2 when it is second order
 * (an old x0 is given and prev_t ≥ 0). Upstream draws even when the noise weight is 0. */
int cogvideox_dpm_num_draws(const cogvideox_scheduler *s, int has_old_x0, int64_t t);

/* DPM step with explicit noise (noise2 used only for a second-order step; may be NULL
 * otherwise). old_x0 = the previous step's x0 or NULL; t_back = the previous (larger) timestep,
 * or -1 for none (first step). */
void cogvideox_dpm_step_with_noise(const cogvideox_scheduler *s, const float *model_output, const float *old_x0,
                                   int64_t t, int64_t t_back, const float *sample, size_t n, const float *noise1,
                                   const float *noise2, float *prev, float *x0);

/* DPM step drawing its noise from `g` exactly as upstream (cogvideox_dpm_num_draws draws of n
 * normals). `noise_scratch` holds n floats (it ends up holding the noise that was used). */
void cogvideox_dpm_step(const cogvideox_scheduler *s, const float *model_output, const float *old_x0, int64_t t,
                        int64_t t_back, const float *sample, size_t n, cvx_generator *g, float *noise_scratch,
                        float *prev, float *x0);

#endif
