/* The CogVideoX family's state in the model handle (pipeline/family_cogvideox.c, the row): its configs
 * and the components loaded on first use, and the conditioning the row calls
 * (pipeline/cogvideox_conditioning.c). For the pipeline's own files and tests. */
#ifndef CVX_PIPELINE_FAMILY_COGVIDEOX_H
#define CVX_PIPELINE_FAMILY_COGVIDEOX_H

#include "pipeline/internal.h"
#include "pipeline/conditioning.h"
#include "pipeline/components.h"
#include "stage2/cogvideox.h"
#include "stage3/cogvideox_vae.h"
#include "stage3/cogvideox_vae_encoder.h"

typedef struct {
    cogvideox_config tcfg;           /* transformer/config.json (when m->has_denoiser_config) */
    cogvideox_vae_decoder vcfg;                /* vae/config.json, config fields only (when m->has_vae_config) */
    int vae_loaded, enc_loaded;
    cvx_t5_encoder te;               /* T5 v1.1 */
    cogvideox_transformer *transformer;
    cogvideox_vae_decoder vae;
    cogvideox_vae_encoder enc;                 /* I2V / V2V conditioning */
} cogvideox_state;

/* m's CogVideoX state, NULL when m is of another family. */
cogvideox_state *cogvideox_state_of(cvx_model *m);

/* The VAE's decoder (enc 0) or encoder (enc 1), from vae/ (a single VAE file is refused at open),
 * loaded once. -1 + cvx_error */
int cogvideox_family_vae(cvx_model *m, int enc);

/* pipeline/cogvideox_conditioning.c: stage 1's image (I2V) or video (V2V) -> its conditioning */
int cogvideox_encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress,
                                  void *user, cvx_conditioning *out);

/* prepare_latents of the CogVideoX I2V / V2V pipelines on the loop's latent shape: the buffers sp
 * points to afterwards (image latents, initial latents, the generator after the draws). */
int cogvideox_prepare_conditioned(cvx_model *m, const cvx_conditioning *c, cvx_scheduler *sched, double strength,
                                  cvx_loop_params *sp, const cvx_latent_shape *sh, cvx_prepared *out);

#endif
