/* The HunyuanVideo-1.5 family's state in the model handle (pipeline/family_hunyuan15.c, the row) and
 * its image-to-video conditioning (pipeline/hunyuan15_conditioning.c). For the pipeline's own files. */
#ifndef CVX_PIPELINE_FAMILY_HUNYUAN15_H
#define CVX_PIPELINE_FAMILY_HUNYUAN15_H

#include "pipeline/components.h"
#include "pipeline/conditioning.h"
#include "stage1/clip_image_processor.h"
#include "stage1/clip_vision.h"
#include "stage1/hunyuan15_inputs.h"
#include "stage2/guidance.h"
#include "stage2/hunyuan15.h"
#include "stage2/hunyuan15_family.h"
#include "stage3/hunyuan15_vae.h"

typedef struct {
    hv15_config tcfg;                /* transformer/config.json (when m->has_denoiser_config) */
    hv15_vae_config vcfg;            /* vae/config.json, or the real model's defaults */
    cvx_guider guider;               /* guider/guider_config.json (upstream defaults when absent) */
    double window[2];                /* the guider's start, stop: CFG on steps int(start·N) <= i < int(stop·N) */
    hv15_text_encoders te;           /* the MLLM and ByT5 (tokenizer/, text_encoder/, *_2/) */
    hv15_transformer *transformer;
    hv15_vae *vae;
    clip_vision *siglip;             /* image_encoder/ (I2V) */
    clip_image_processor proc;       /* feature_extractor/ */
} hv15_state;

/* One run's HunyuanVideo-1.5 state (cvx_sample_run.fam_run, freed by hv15_run_free). */
typedef struct {
    double *sigmas;          /* linspace(1, 0, N + 1)[:-1] (the scheduler borrows them) */
    hv15_branch branch[2];   /* [0] negative, [1] prompt */
} hv15_run;
void hv15_run_free(void *run);

/* The VAE half a step needs (VAE_PART_DECODER: stage 3, VAE_PART_ENCODER: the I2V condition): the
 * other half's tensors are not read. -1 + cvx_error */
int hv15_family_vae(cvx_model *m, int part);
/* stage 1: the image -> its conditioning (SigLIP embeddings, the VAE's latent distribution) */
int hv15_encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                             cvx_conditioning *out);
/* stage 2 (the run's shape set): the condition channels and image tokens of both branches */
int hv15_prepare_i2v(cvx_model *m, const hv15_config *c, const cvx_conditioning *ic, cvx_sample_run *run);
/* stage 2: the branches' conditioning (branch[0] the negative prompt's, [1] the prompt's: the four
 * text tensors, the image tokens and channels of hv15_prepare_i2v), run->branch pointing at them */
int hv15_prepare_branches(const cvx_sample_params *p, const cvx_embeddings *emb, cvx_sample_run *run,
                          hv15_branch branch[2]);

#endif
