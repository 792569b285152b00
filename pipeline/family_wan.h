/* The Wan family's state in the model handle (pipeline/family_wan.c, the row) and the conditioning
 * its row calls (pipeline/wan_conditioning.c: stage 1's image / video encode, stage 2's I2V, V2V
 * and TI2V preparation). For the pipeline's own files. */
#ifndef CVX_PIPELINE_FAMILY_WAN_H
#define CVX_PIPELINE_FAMILY_WAN_H

#include "pipeline/components.h"
#include "pipeline/conditioning.h"
#include "pipeline/expert_set.h"
#include "stage1/clip_image_processor.h"
#include "stage1/clip_vision.h"
#include "stage2/wan.h"
#include "stage2/wan_family.h"
#include "stage3/wan_vae.h"

typedef struct {
    wan_config tcfg;                 /* transformer/config.json (when m->has_denoiser_config) */
    wan_vae_config vcfg;             /* vae/config.json, or AutoencoderKLWan's defaults */
    cvx_t5_encoder te;               /* UMT5-XXL */
    cvx_expert_set experts;          /* the transformer (A14B: two experts, one mapped at a time) */
    wan_vae *vae;
    wan_pipeline_config pc;          /* Wan 2.2's model_index.json keys: TI2V, A14B's experts */
    const wan_variant *variant;      /* the defaults of the model's variant (wan_variant_for) */
    int cond_channels, teacache_e0;  /* the run's denoiser settings (wan_denoiser_init) */
    float *ti2v_cond;                /* TI2V I2V: the image's normalised latents [C, 1, h, w] of the last run */
    clip_vision *clip;
    clip_image_processor proc;
} wan_state;

/* stage 1: an image (I2V, TI2V) or a video (V2V) -> its conditioning (cvx_conditioning_encode) */
int wan_encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                            cvx_conditioning *out);
/* stage 2 (the run's shape set): V2V's initial latents; I2V's condition channels and image tokens;
 * TI2V's per-token timesteps over the plan and, for I2V (c not NULL), the image's latent frame 0 */
int wan_prepare_v2v(cvx_model *m, const cvx_conditioning *c, const cvx_sample_params *p, cvx_scheduler *sched,
                    cvx_sample_run *run);
int wan_prepare_i2v(cvx_model *m, const cvx_conditioning *c, cvx_sample_run *run);
int wan_prepare_ti2v(cvx_model *m, const cvx_conditioning *c, cvx_sample_run *run);

#endif
