/* The per-step plan of a denoising run: what the family decides for each step of the loop, so
 * that the sampler (stage2/sampler.c) runs any family's schedule of experts and guidance without
 * knowing it. A family's sample_setup fills it (pipeline/family.h); the default plan is one
 * expert, one guidance for all steps, the step cache's usual window:
 *
 *   step i:  expert   which transformer runs (Wan 2.2 A14B: 0 = high noise, 1 = low noise);
 *                     a change of expert releases the previous one and acquires the next
 *                     (the provider maps it and attaches its LoRA set; the sampler re-runs
 *                     prepare and set_sp)
 *            guide    the step's guidance (scale, CogVideoX's dynamic CFG, rescale); scale <= 1:
 *                     the conditional branch alone (a guider's step window is such steps)
 *            cache_reset  the step cache starts over at this step (the first step of an expert)
 *            t_scale  per-token timesteps: token k gets t_scale[k]·t (float32), NULL: scalar t
 *                     (Wan 2.2 TI2V: 0 on the first latent frame's tokens, 1 elsewhere)
 *
 * The plan's position (the expert of every step) goes into the checkpoint when there is more
 * than one expert, so that a resume refuses a checkpoint of another plan. */
#ifndef CVX_STAGE2_PLAN_H
#define CVX_STAGE2_PLAN_H

#include <stddef.h>

#include "stage2/denoiser.h"
#include "stage2/guidance.h"

#define CVX_PLAN_MAX_EXPERTS 4

typedef struct {
    int expert;              /* 0 .. experts->n − 1 */
    cvx_guider guide;
    int cache_reset;
    const float *t_scale;    /* [plan n_t] or NULL (borrowed: the family's run owns it) */
} cvx_plan_step;

/* The transformers of a run, resident one at a time. */
typedef struct cvx_expert_provider {
    int n;                   /* experts (1 .. CVX_PLAN_MAX_EXPERTS) */
    /* make expert i resident (map its weights, attach its LoRA set) and give its denoiser, valid
     * until release(i); the sampler calls prepare and set_sp on it. -1 + cvx_error */
    int (*acquire)(struct cvx_expert_provider *p, int i, cvx_denoiser **out);
    /* done with expert i (the sampler has undone set_sp): the provider may unmap it */
    void (*release)(struct cvx_expert_provider *p, int i);
    void *user;
    cvx_denoiser *single;    /* cvx_single_expert's denoiser */
} cvx_expert_provider;

typedef struct cvx_sample_plan {
    int n_steps;                     /* the steps the loop runs (num_inference_steps − t_start) */
    cvx_plan_step *steps;            /* [n_steps] */
    size_t n_t;                      /* tokens of the per-token timesteps (0: none) */
    int teacache_first, teacache_last;   /* TeaCache's always-computed first / last steps (1, 1;
                                          * TeaCache4Wan2.1's use_ret_steps: 5, 0) */
    cvx_expert_provider *experts;
} cvx_sample_plan;

/* n_steps steps of expert 0 with guidance g, no reset, scalar timesteps; TeaCache window 1, 1;
 * `experts` borrowed. */
void cvx_plan_init(cvx_sample_plan *pl, int n_steps, const cvx_guider *g, cvx_expert_provider *experts);
void cvx_plan_free(cvx_sample_plan *pl);
/* The boundary switch of Wan 2.2 A14B (WanPipeline with boundary_ratio): the steps whose timestep
 * (timesteps[i], the loop's own, i.e. from t_start on) is below boundary_t run expert `expert`
 * with guidance g, the step cache reset at the first of them. */
void cvx_plan_switch_below(cvx_sample_plan *pl, const double *timesteps, double boundary_t, int expert,
                           const cvx_guider *g);
/* diffusers' ClassifierFreeGuidance guider over the plan's steps (all of the run: n_steps = N):
 * `guider` with `scale` (the request's: isclose to 1 is 1 unless `original`) on the steps of its
 * window (cvx_guider_window_has), the no-guidance scale (1, 0 with `original`) on the others;
 * rescale > 0 overrides the guider's rescale on every step. */
void cvx_plan_guider_window(cvx_sample_plan *pl, const cvx_guider *guider, const double window[2], double scale,
                            double rescale);
/* Any step with guidance (cvx_guider_active): the run has two branches. */
int cvx_plan_uses_cfg(const cvx_sample_plan *pl);
/* "experts 0,0,1,1; resets 2" (the checkpoint's record of the plan); "" for one expert without resets. */
void cvx_plan_describe(const cvx_sample_plan *pl, char *buf, size_t n);

/* A provider of one denoiser (d borrowed): acquire gives d, release does nothing. */
void cvx_single_expert(cvx_expert_provider *p, cvx_denoiser *d);

#endif
