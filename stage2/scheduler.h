/* CogVideoXDDIMScheduler and CogVideoXDPMScheduler (diffusers 0.32.2), built from a diffusers
 * `scheduler/scheduler_config.json`.
 *
 * Numerics as upstream: the noise schedule (alphas_cumprod) is float64; each step's scalar
 * coefficients are computed in float64 and rounded to float32 before the element-wise float32
 * arithmetic on the latents (PyTorch's 0-d float64 tensor × float32 tensor).
 * (beta_schedule "linear" / "squaredcos_cap_v2" have a float32 schedule upstream; ā is built in
 * float32 here too, but the step coefficients are then computed in float64 — not bit-exact for
 * those schedules, which no CogVideoX checkpoint uses.) */
#ifndef CVX_STAGE2_SCHEDULER_H
#define CVX_STAGE2_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "rng.h"
#include "safetensors.h"

typedef struct cogvideox_scheduler cogvideox_scheduler;

/* The interface every scheduler implements (one file each: scheduler_ddim.c, scheduler_dpm.c).
 * The sampler calls only these; a third scheduler is one new file plus a line in
 * cogvideox_schedulers[] (scheduler.c). Per-run state (DPM's previous x0, scratch) lives in
 * s->state, created by init and freed by cogvideox_scheduler_free. */
typedef struct {
    const char *name;          /* the --scheduler name: "ddim" */
    const char *class_name;    /* diffusers' _class_name: "CogVideoXDDIMScheduler" */
    /* allocate s->state for latents of n floats (timesteps already set) */
    void (*init)(cogvideox_scheduler *s, size_t n);
    /* loop step i (timestep s->timesteps[i]): sample -> prev (n floats, no aliasing).
     * g: the run's generator (stochastic schedulers draw from it exactly as upstream) */
    void (*step)(cogvideox_scheduler *s, int i, const float *model_output, const float *sample, size_t n,
                 cvx_generator *g, float *prev);
    /* add the state after `steps_done` steps to a checkpoint (shape: the latents' [1, F, C, h, w]) */
    int (*save_state)(const cogvideox_scheduler *s, cvx_st_writer *w, const int64_t shape[5]);
    /* restore it from a checkpoint (`path` for messages); -1 + cvx_error when it is missing or wrong */
    int (*load_state)(cogvideox_scheduler *s, const cvx_safetensors *st, const char *path, size_t n);
    void (*free_state)(void *state);
    /* the x0 estimate (pred_original_sample, n floats) of the last step, for previews */
    const float *(*x0)(const cogvideox_scheduler *s);
} cogvideox_scheduler_type;

extern const cogvideox_scheduler_type cogvideox_scheduler_ddim, cogvideox_scheduler_dpm;
/* Every scheduler, NULL-terminated: the one table the --scheduler names come from. */
extern const cogvideox_scheduler_type *const cogvideox_schedulers[];
typedef enum {
    COGVIDEOX_PRED_EPSILON = 0,
    COGVIDEOX_PRED_V_PREDICTION,
    COGVIDEOX_PRED_SAMPLE
} cogvideox_prediction_type;
typedef enum {
    COGVIDEOX_SPACING_LINSPACE = 0,
    COGVIDEOX_SPACING_LEADING,
    COGVIDEOX_SPACING_TRAILING
} cogvideox_timestep_spacing;

struct cogvideox_scheduler {
    const cogvideox_scheduler_type *type;
    int num_train_timesteps;
    cogvideox_prediction_type prediction_type;
    cogvideox_timestep_spacing timestep_spacing;
    int steps_offset;
    double *alphas_cumprod;         /* [num_train_timesteps], ā_t */
    double final_alpha_cumprod;     /* ā used when the previous timestep is < 0 */
    /* set by cogvideox_scheduler_set_timesteps */
    int num_inference_steps;
    int64_t *timesteps;             /* [num_inference_steps], descending */
    void *state;                    /* the type's per-run state (type->init) */
    int noise_dtype;                /* cvx_dtype of the DPM step noise draw (CVX_F32 = 0, CVX_BF16, CVX_F16):
                                     * upstream draws it in the latents' dtype (randn_tensor(dtype=sample.dtype)) */
};

/* A scheduler by --scheduler name or diffusers class name; NULL + cvx_error listing the table. */
const cogvideox_scheduler_type *cogvideox_scheduler_find(const char *name);
/* A scheduler by its --scheduler name only; NULL + "--scheduler must be ddim or dpm, got 'x'". */
const cogvideox_scheduler_type *cogvideox_scheduler_by_flag(const char *name);
/* The table's names joined by sep ("ddim|dpm" for "|") into buf, for usage and messages. */
void cogvideox_scheduler_names(char *buf, size_t cap, const char *sep);

/* Build from a parsed scheduler_config.json. The type is the config's `_class_name` unless
 * `override` (NULL for none) is given. -1 + cvx_error naming the file and key on unsupported
 * values. */
int cogvideox_scheduler_init(cogvideox_scheduler *s, const cvx_config *cfg, const cogvideox_scheduler_type *override);
/* Load `path` (a scheduler_config.json) and init. */
int cogvideox_scheduler_load(cogvideox_scheduler *s, const char *path, const cogvideox_scheduler_type *override);
void cogvideox_scheduler_free(cogvideox_scheduler *s);

/* ---- shared by the implementations ---- */
/* ā at a previous timestep (final_alpha_cumprod when prev_t < 0). */
double cogvideox_alpha_prev(const cogvideox_scheduler *s, int64_t prev_t);
/* x0 from the model output for the prediction type; coefficients f64 → f32, arithmetic f32. */
void cogvideox_predict_x0(const cogvideox_scheduler *s, double a_t, const float *model_output, const float *sample,
                          size_t n, float *x0);

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
