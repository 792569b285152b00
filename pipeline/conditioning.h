/* The conditioning's pipeline-internal half (not part of the API; pipeline/cvx.h has the
 * public calls): what cvx_sample and the files need from pipeline/conditioning.c. */
#ifndef CVX_PIPELINE_CONDITIONING_H
#define CVX_PIPELINE_CONDITIONING_H

#include "pipeline/internal.h"
#include "rng.h"
#include "stage2/sampler.h"
#include "stage2/scheduler.h"

/* The model's transformer fits the mode (the family's rule: CogVideoX I2V needs in_channels = 2 ×
 * out_channels, T2V and V2V equal ones). -1 + one clear cvx_error naming the model, the mode and what fits. */
int cvx_check_model_mode(cvx_model *m, cvx_mode mode);

/* cvx_sample_resolve's part: the video size from the conditioning (V2V: its frame count and the
 * default strength). -1 + cvx_error when a flag contradicts it. */
int cvx_sample_conditioning_sizes(const cvx_conditioning *c, cvx_sample_params *r);

/* prepare_latents of the I2V / V2V pipelines: the buffers the loop's parameters point to
 * afterwards (image latents, initial latents, the generator after the draws). */
typedef struct {
    float *image_latents;      /* I2V: [F, C, h, w] */
    float *init;               /* [F, C, h, w] */
    cvx_generator gen;
} cvx_prepared;
void cvx_prepared_free(cvx_prepared *p);

/* xxh64 of the mode, mean and std: identifies the conditioning in the checkpoint fingerprint. */
uint64_t cvx_conditioning_hash(const cvx_conditioning *c);

#endif
