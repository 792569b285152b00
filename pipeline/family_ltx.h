/* The LTX-Video family's state in the model handle (pipeline/family_ltx.c, the row), its run state and
 * the conditioning its row calls (pipeline/ltx_conditioning.c: stage 1's image and conditions,
 * stage 2's I2V and condition-pipeline preparation). For the pipeline's own files. */
#ifndef CVX_PIPELINE_FAMILY_LTX_H
#define CVX_PIPELINE_FAMILY_LTX_H

#include "pipeline/components.h"
#include "pipeline/conditioning.h"
#include "stage2/ltx.h"
#include "stage2/ltx_cond.h"
#include "stage2/ltx_family.h"
#include "stage3/ltx_vae.h"

typedef struct {
    ltx_config tcfg;           /* transformer/config.json (when m->has_denoiser_config) */
    ltx_vae_config vcfg;       /* vae/config.json (when m->has_vae_config) */
    cvx_t5_encoder te;         /* T5 v1.1 */
    ltx_transformer *transformer;
    ltx_vae *vae;
    /* the last sample_setup's condition pipeline: packed latents with this many extra frames first */
    int cond_latents, cond_extra_frames;
    int condition_pipeline;    /* conditions encoded: the text encoder takes the mask (masked_encoder) */
} ltx_state;

/* One run's LTX state (cvx_sample_run.fam_run, freed by ltx_run_free). */
typedef struct {
    ltx_text_cond cond[2];   /* [0] negative, [1] prompt */
    float *t_scale;          /* I2V: [S] 0 on latent frame 0's tokens, 1 elsewhere */
    double *list;            /* explicit timesteps [n_list] (--timesteps, the condition pipeline's default) */
    int n_list;
    ltx_condition_run cr;    /* the condition pipeline's tokens, mask, coordinates (tokens 0: off) */
} ltx_run;

void ltx_run_free(void *run);

/* model_index.json names LTXConditionPipeline */
int ltx_condition_class(const cvx_model *m);
/* stage 1: an image (I2V; LTXConditionPipeline: a condition at frame 0) or conditions -> the conditioning */
int ltx_encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                            cvx_conditioning *out);
/* stage 2 (the run's shape set): I2V's initial latents and kept first frame; the condition
 * pipeline's packed tokens (the shape becomes theirs), its initial latents and scheduler condition */
int ltx_prepare_i2v(cvx_model *m, const cvx_conditioning *c, cvx_scheduler *sched, cvx_sample_run *run);
int ltx_prepare_condition(cvx_model *m, const cvx_sample_params *p, const cvx_conditioning *c, cvx_scheduler *sched,
                          cvx_sample_run *run, ltx_run *lr);

#endif
