/* The flow-matching schedulers of Wan 2.1 (diffusers 0.33.1, PyTorch 1.13), number for number:
 *
 *   UniPCMultistepScheduler (scheduler_unipc.c) configured for flow matching: use_flow_sigmas,
 *     prediction_type flow_prediction, predict_x0, solver_type bh2 (or bh1), solver_order 1 or 2,
 *     lower_order_final, flow_shift, final_sigmas_type zero|sigma_min, disable_corrector.
 *   FlowMatchEulerDiscreteScheduler (scheduler_euler.c) with a static `shift`.
 *
 * Numerics as upstream: the sigma grid is built in float64 (numpy) and rounded to float32; each
 * step's scalars are 0-d float32 tensors (log and expm1 correctly rounded, the corrector's 2×2
 * solve as LAPACK does it on the transposed matrix) and the element-wise arithmetic is float32
 * in upstream's operation order: bit-exact on every golden chain and e2e loop.
 *
 * Use (T2V):
 *   flow_scheduler s;  flow_scheduler_load(&s, "scheduler/scheduler_config.json", FLOW_FROM_CONFIG, 0);
 *   flow_scheduler_set_timesteps(&s, 50);
 *   flow_state *st = flow_state_new(&s, n);
 *   for (i = 0; i < s.num_inference_steps; i++) {
 *       v = model(x, s.timesteps[i]);            // + CFG (guidance.h)
 *       flow_step(&s, st, i, v, x, n, x_next);   // x_next may not alias x or v
 *   }
 * V2V: t_start = flow_v2v_t_start(N, strength); flow_begin(&s, st, t_start);
 *   flow_add_noise(&s, t_start, init, noise, n, x); then steps i = t_start .. N-1.
 * Checkpoints: flow_state_save after k steps; a fresh state + flow_state_load continues bit for bit. */
#ifndef CVX_STAGE2_SCHEDULER_FLOW_H
#define CVX_STAGE2_SCHEDULER_FLOW_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "safetensors.h"

typedef enum { FLOW_UNIPC = 0, FLOW_EULER = 1 } flow_kind;
#define FLOW_FROM_CONFIG (-1)     /* flow_scheduler_init: the kind is the config's _class_name */
#define FLOW_MAX_ORDER 2          /* UniPC solver_order supported: 1..2 (Wan uses 2) */
#define FLOW_MAX_DISABLED 64

typedef struct {
    flow_kind kind;
    int num_train_timesteps;
    double shift;                 /* UniPC flow_shift / Euler shift */
    /* UniPC */
    int solver_order;             /* 1 or 2 */
    int lower_order_final;
    int bh1;                      /* solver_type bh1 (B(h) = hh) instead of bh2 (B(h) = expm1(hh)) */
    int final_sigma_min;          /* final_sigmas_type "sigma_min" (last sigma repeated) instead of "zero" */
    int n_disable_corrector;
    int disable_corrector[FLOW_MAX_DISABLED];
    /* Euler: the training schedule's ends (float32 values, as Python floats upstream) */
    double sigma_min, sigma_max;
    /* set by flow_scheduler_set_timesteps */
    int num_inference_steps;      /* N */
    double *sigmas_f64;           /* [N]   the shifted float64 grid, before rounding to float32 */
    float *sigmas;                /* [N+1] float32, sigmas[N] = 0 (UniPC sigma_min: sigmas[N-1]) */
    float *timesteps;             /* [N]   the timestep handed to the model: UniPC (float)int64(σ·T),
                                   *       Euler float32 σ·T (fractional); T = num_train_timesteps */
    int64_t *timesteps_int;       /* [N]   UniPC: int64(σ64·T) (truncation); Euler: NULL */
} flow_scheduler;

/* The per-run state (upstream's attributes). */
typedef struct {
    size_t n;                     /* floats per latent */
    int begin_index;              /* first step index of the run (t_start for V2V) */
    int step_index;               /* the index the next flow_step must have */
    int lower_order_nums;         /* UniPC warm-up counter (restarts at each run) */
    int this_order;               /* UniPC: the last predictor's order = the next corrector's */
    int has_last_sample;          /* UniPC: last_sample holds a sample (no corrector before) */
    float *model_outputs[FLOW_MAX_ORDER];  /* UniPC: x0 predictions m, [solver_order-1] the newest */
    float *last_sample;           /* UniPC: the (corrected) sample the last predictor started from */
    const float *x0;              /* view: the x0 estimate of the last step (UniPC: the newest m;
                                   * Euler: x − σ·v, kept in scratch); NULL before the first step
                                   * (and for Euler after flow_state_load) */
    float *scratch;
} flow_state;

/* Class names and the short names: "unipc" / "UniPCMultistepScheduler", "euler" /
 * "FlowMatchEulerDiscreteScheduler". -1 when unknown (no error recorded). */
int flow_kind_find(const char *name);
const char *flow_kind_name(flow_kind k);        /* "unipc" | "euler" */
const char *flow_kind_class(flow_kind k);       /* diffusers class name */

/* Build from a parsed scheduler_config.json. kind: FLOW_UNIPC / FLOW_EULER to override the
 * config's `_class_name`, or FLOW_FROM_CONFIG. shift_override > 0 replaces the config's
 * flow_shift / shift (what `from_pretrained(..., flow_shift=s)` does), 0 = keep.
 * A config of the other class (override) gives its shift key as fallback (Euler reads `shift`,
 * else `flow_shift`; UniPC `flow_shift`, else `shift`) and, for UniPC, flow defaults
 * (flow_prediction, use_flow_sigmas). -1 + cvx_error naming the file and key on values this
 * implementation does not support (karras/exponential/beta sigmas, thresholding, solver_p,
 * solver_order > 2, dynamic shifting, ...). */
int flow_scheduler_init(flow_scheduler *s, const cvx_config *cfg, int kind, double shift_override);
/* Load `path` (a scheduler_config.json) and init. */
int flow_scheduler_load(flow_scheduler *s, const char *path, int kind, double shift_override);
void flow_scheduler_free(flow_scheduler *s);

/* The N-step schedule (sigmas_f64, sigmas, timesteps, timesteps_int). -1 + error for N < 1 or
 * N > 100000, and when the first two timesteps are equal (UniPC, N ≳ 500 at shift 3: upstream
 * would start at step 1 and index past its sigmas). A state made before must be reset
 * (flow_state_reset) for a new run. */
int flow_scheduler_set_timesteps(flow_scheduler *s, int n);
/* The same from explicit sigmas [n] (set_timesteps(sigmas=...); Euler only, -1 + error for UniPC):
 * numpy float32 as upstream — σ = float32(sigmas), shifted in float32, timesteps = σ·T, σ_n = 0. */
int flow_scheduler_set_sigmas(flow_scheduler *s, int n, const double *sigmas);

/* The sigmas HunyuanVideo-1.5's pipelines pass to flow_scheduler_set_sigmas: np.linspace(1, 0,
 * n + 1)[:-1] (float64). out [n]. */
void flow_linear_sigmas(int n, double *out);

/* ---- per-run state ---- */
flow_state *flow_state_new(const flow_scheduler *s, size_t n);
void flow_state_free(flow_state *st);
/* Back to "before the first step" (upstream's set_timesteps resets): begin_index 0. */
void flow_state_reset(flow_state *st);

/* Start the run at step index t_start (V2V; 0 = the whole schedule). Upstream finds the index
 * from the timestep value (index_for_timestep): a timestep equal to the next one would make it
 * start one later and run past the schedule's end; that case is refused (-1 + error naming the
 * step count). Must precede the first step. */
int flow_begin(const flow_scheduler *s, flow_state *st, int t_start);

/* WanVideoToVideoPipeline: t_start = N − min(int(N·strength), N), clamped to ≥ 0. */
int flow_v2v_t_start(int num_inference_steps, double strength);

/* Forward process at step index i: out = (1 − σ_i)·x0 + σ_i·noise (float32; UniPC add_noise
 * and Euler scale_noise give the same bits). out may alias x0 or noise. (Upstream's
 * WanVideoToVideoPipeline fails with the Euler scheduler: it calls `self.scheduelr.scale_noise`.) */
void flow_add_noise(const flow_scheduler *s, int i, const float *x0, const float *noise, size_t n, float *out);

/* One step at schedule index i (must be st->step_index: begin_index for the first step, then
 * consecutive): sample (x at σ_i) and the model output (flow velocity v, CFG applied) →
 * prev (x at σ_{i+1}). n floats; prev must not alias the inputs. */
void flow_step(const flow_scheduler *s, flow_state *st, int i, const float *model_output, const float *sample,
               size_t n, float *prev);

/* The x0 estimate of the last step (n floats) for previews; NULL before the first step. */
const float *flow_x0(const flow_state *st);
/* UniPC: the sample the last predictor started from, after the corrector (upstream's
 * last_sample); NULL before the first step and for Euler. */
const float *flow_corrected_sample(const flow_scheduler *s, const flow_state *st);
/* The predictor order of the last UniPC step (1 for Euler). */
int flow_last_order(const flow_scheduler *s, const flow_state *st);

/* ---- checkpoints ----
 * Tensors (latent-shaped ones with the caller's `shape`, any layout):
 *   scheduler.state   I64 [8]  kind, N, begin_index, step_index, lower_order_nums, this_order,
 *                              has_last_sample, solver_order
 *   scheduler.sigmas  F32 [N+1] (checked on load: the same schedule)
 *   UniPC also: scheduler.model_outputs.{k} F32 shape for k < solver_order (k = solver_order−1 the
 *   newest; zeros until filled) and scheduler.last_sample F32 shape.
 * Euler's x0 preview is not kept: after a load flow_x0 is NULL until the next step (UniPC: the
 * newest model output). */
int flow_state_save(const flow_scheduler *s, const flow_state *st, cvx_st_writer *w, int ndim, const int64_t *shape);
/* Restore into a state made by flow_state_new for the same scheduler, schedule and n; `path`
 * names the file in messages. -1 + cvx_error when a tensor is missing, of the wrong dtype or
 * size, or was written for another scheduler, schedule or state. */
int flow_state_load(const flow_scheduler *s, flow_state *st, const cvx_safetensors *f, const char *path);

/* ---- shared by scheduler_unipc.c / scheduler_euler.c ---- */
/* numpy.linspace(start, stop, num) (float64, endpoint): i·step + start, the last value stop. */
void flow_np_linspace(double start, double stop, int num, double *out);
/* Kind-specific parts (implemented in scheduler_unipc.c / scheduler_euler.c). */
int flow_unipc_config(flow_scheduler *s, const cvx_config *cfg, int native, double shift_override);
int flow_euler_config(flow_scheduler *s, const cvx_config *cfg, int native, double shift_override);
void flow_unipc_set_timesteps(flow_scheduler *s, int n);
void flow_euler_set_timesteps(flow_scheduler *s, int n);
void flow_unipc_step(const flow_scheduler *s, flow_state *st, const float *model_output, const float *sample,
                     size_t n, float *prev);
void flow_euler_step(const flow_scheduler *s, flow_state *st, const float *model_output, const float *sample,
                     size_t n, float *prev);

#endif
