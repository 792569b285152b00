/* The scheduler interface the sampler drives, and the table of schedulers.
 *
 * A scheduler owns its noise schedule (DDPM-style ā for CogVideoX's DDIM/DPM, flow-matching
 * sigmas for Wan's UniPC/Euler), the timestep values handed to the model, add_noise (V2V), the
 * scaling of the initial noise, its per-run state and that state's checkpoint form. The sampler
 * (stage2/sampler.c) knows none of this: it calls the type's functions through cvx_scheduler.
 *
 * Adding a scheduler: one file (scheduler_<name>.c) with a cvx_scheduler_type, and its line in
 * cvx_schedulers[] (scheduler.c). docs/architecture.md has the checklist. */
#ifndef CVX_STAGE2_SCHEDULER_H
#define CVX_STAGE2_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "rng.h"
#include "safetensors.h"

typedef struct cvx_scheduler cvx_scheduler;

typedef struct cvx_scheduler_type {
    const char *name;          /* the --scheduler name: "ddim" */
    const char *class_name;    /* diffusers' _class_name: "CogVideoXDDIMScheduler" */
    const char *family;        /* "ddpm" (ā schedule, integer timesteps) or "flow" (sigmas): a run refuses a
                                * scheduler of another kind than the model's own scheduler_config */
    /* read the type's keys of scheduler_config.json into s->sched (and anything else it needs);
     * -1 + cvx_error naming the file and key */
    int (*configure)(cvx_scheduler *s, const cvx_config *cfg);
    void (*free_sched)(void *sched);
    /* n inference steps: s->timesteps[0 .. n−1] (descending, the model's timestep values) and
     * s->num_inference_steps; with s->sigmas, from those sigmas (a type without explicit sigmas
     * refuses them); -1 + cvx_error for an n the schedule cannot take */
    int (*set_timesteps)(cvx_scheduler *s, int n);
    /* allocate s->state for latents of n floats (timesteps already set; the loop starts at index
     * s->begin: V2V); -1 + cvx_error when the run cannot start there */
    int (*init)(cvx_scheduler *s, size_t n);
    /* loop step at index i (s->begin <= i < num_inference_steps, timestep s->timesteps[i]):
     * sample -> prev (n floats, no aliasing). g: the run's generator (stochastic schedulers draw
     * from it exactly as upstream) */
    void (*step)(cvx_scheduler *s, int i, const float *model_output, const float *sample, size_t n,
                 cvx_generator *g, float *prev);
    /* V2V: the noised start at index i: out = add_noise(x0, noise, timesteps[i]) */
    void (*add_noise)(const cvx_scheduler *s, int i, const float *x0, const float *noise, size_t n, float *out);
    /* add the state to a checkpoint (shape: the latents' 5-d shape) / restore it (`path` for
     * messages; -1 + cvx_error when it is missing or wrong) */
    int (*save_state)(const cvx_scheduler *s, cvx_st_writer *w, const int64_t shape[5]);
    int (*load_state)(cvx_scheduler *s, const cvx_safetensors *st, const char *path, size_t n);
    void (*free_state)(void *state);
    /* the x0 estimate (pred_original_sample, n floats) of the last step, for previews */
    const float *(*x0)(const cvx_scheduler *s);
} cvx_scheduler_type;

struct cvx_scheduler {
    const cvx_scheduler_type *type;
    char config_path[4096];         /* the scheduler_config.json it came from (messages) */
    int num_inference_steps;
    double *timesteps;              /* [num_inference_steps]: the value the model gets at each step */
    int begin;                      /* the first index the loop runs (V2V's t_start), 0 otherwise */
    int noise_dtype;                /* cvx_dtype of stochastic step noise (CVX_F32 = 0, CVX_BF16, CVX_F16):
                                     * upstream draws it in the latents' dtype */
    double flow_shift;              /* > 0: the shift a flow scheduler uses instead of its config's (set before
                                     * configure, cvx_scheduler_load_shift) */
    /* explicit sigmas (upstream's set_timesteps(sigmas=...), retrieve_timesteps(sigmas=)): [n_sigmas]
     * before the shift, as the pipeline passes them (HunyuanVideo-1.5: linspace(1, 0, N + 1)[:-1]);
     * NULL = the schedule's own. Borrowed; set before the loop (cvx_scheduler_set_sigmas) */
    const double *sigmas;
    int n_sigmas;
    void *sched;                    /* the type's configuration and schedule (configure) */
    void *state;                    /* the type's per-run state (init) */
};

/* Every scheduler, NULL-terminated: the one table the --scheduler names come from. */
extern const cvx_scheduler_type *const cvx_schedulers[];
extern const cvx_scheduler_type cvx_scheduler_ddim, cvx_scheduler_dpm, cvx_scheduler_unipc, cvx_scheduler_euler;

/* A scheduler by --scheduler name or diffusers class name; NULL + cvx_error listing the table. */
const cvx_scheduler_type *cvx_scheduler_find(const char *name);
/* A scheduler by its --scheduler name only; NULL + "--scheduler must be one of ddim, dpm, ..., got 'x'". */
const cvx_scheduler_type *cvx_scheduler_by_flag(const char *name);
/* The table's names joined by sep ("ddim|dpm" for "|") into buf, for usage and messages. */
void cvx_scheduler_names(char *buf, size_t cap, const char *sep);

/* Build from a parsed scheduler_config.json. The type is the config's `_class_name` unless
 * `override` (NULL for none) is given; an override of another family than the config's own
 * class is refused. -1 + cvx_error naming the file and key on unsupported values. */
int cvx_scheduler_init(cvx_scheduler *s, const cvx_config *cfg, const cvx_scheduler_type *override);
/* Load `path` (a scheduler_config.json) and init. */
int cvx_scheduler_load(cvx_scheduler *s, const char *path, const cvx_scheduler_type *override);
/* The same with flow_shift > 0 replacing a flow scheduler's shift (UniPC flow_shift, Euler shift:
 * what from_pretrained(..., flow_shift=S) does); 0 = the config's. A DDPM-kind scheduler refuses a
 * shift (one error line). */
int cvx_scheduler_load_shift(cvx_scheduler *s, const char *path, const cvx_scheduler_type *override, double flow_shift);
void cvx_scheduler_free(cvx_scheduler *s);
/* type->set_timesteps, after freeing the previous ones; begin = 0. With explicit sigmas n must be
 * n_sigmas. */
int cvx_scheduler_set_timesteps(cvx_scheduler *s, int n);
/* Explicit sigmas (borrowed) for every following set_timesteps: n = n_sigmas steps. Euler only
 * (the others refuse them in set_timesteps). */
void cvx_scheduler_set_sigmas(cvx_scheduler *s, const double *sigmas, int n_sigmas);

/* Video-to-video (upstream get_timesteps): init_timestep = min(int(n·strength), n), t_start =
 * max(n − init_timestep, 0); the loop runs the last n − t_start timesteps. -1 + cvx_error when
 * strength is not in (0, 1] or keeps no step. */
int cvx_strength_t_start(int n, double strength, int *t_start);

#endif
