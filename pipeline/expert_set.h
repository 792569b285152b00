/* A model's transformers as a set of experts, one mapped at a time (pipeline/expert_set.c): one
 * transformer (`transformer/` or --transformer's file), or two (diffusers' `transformer` and
 * `transformer_2`, the high-noise and the low-noise expert: --transformer / --transformer_2,
 * cvx_expert_paths). A row declares how to map and unmap one and how to make its denoiser; the set
 * does the rest: the memory check, unmapping the resident expert (its LoRA set first) before
 * mapping another, the LoRA set of the expert (--lora_high / --lora_low), and the sampler's
 * expert provider (stage2/plan.h) over the set. Not part of the API. */
#ifndef CVX_PIPELINE_EXPERT_SET_H
#define CVX_PIPELINE_EXPERT_SET_H

#include "pipeline/components.h"
#include "pipeline/family.h"

typedef struct {
    const char *model;    /* the log line's model name: "Wan 2.2 A14B" */
    const char *advice;   /* the memory check's way out (cvx_weights_fit_memory) */
    /* map the transformer at src (src->file: a single weights file with src->cfg, else src->dir): the
     * transformer, or NULL + cvx_error */
    void *(*load)(const cvx_component_src *src, cvx_ctx *ctx);
    void (*unload)(void *transformer);
    /* the denoiser over a mapped expert (the row's settings of the run: in m->fam) */
    void (*denoiser_init)(cvx_model *m, void *transformer, cvx_denoiser *d);
} cvx_expert_spec;

typedef struct {
    const cvx_expert_spec *spec;
    int n;            /* 1, or 2 (transformer, transformer_2) */
    void *resident;   /* the mapped expert's transformer (NULL: none) */
    int index;        /* its number */
} cvx_expert_set;

/* Make expert i resident (the other unmapped first; m->lora_expert set for a set of two). -1 + cvx_error */
int cvx_expert_set_load(cvx_expert_set *e, cvx_model *m, int i);
/* The resident expert, else expert 0 mapped: what LoRA targets and a one-expert run use. */
int cvx_expert_set_load_current(cvx_expert_set *e, cvx_model *m);
/* Unmap the resident expert, the model's LoRA set first (it points into the weights). */
void cvx_expert_set_unload(cvx_expert_set *e, cvx_model *m);
/* Unmap it at close (the LoRA set is the model's to free). */
void cvx_expert_set_free(cvx_expert_set *e);
/* run->experts becomes a provider over the set (its run state in run->fam_run): acquire maps the
 * expert, re-attaches the LoRA set when the expert changed, makes its denoiser; release unmaps. */
void cvx_expert_set_provide(cvx_expert_set *e, cvx_model *m, cvx_sample_run *run);

#endif
