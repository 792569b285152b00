/* The stage-2 checkpoint, a unit the sampler calls: the settings a run belongs to (the
 * fingerprint, stored as run.<key> metadata and compared on resume) and the loop state's file
 * (latents, step, the generator's state, the scheduler's and the step cache's state, sealed with
 * a content hash). Format: docs/file-formats.md "stage2_checkpoint.safetensors". */
#ifndef CVX_STAGE2_CHECKPOINT_H
#define CVX_STAGE2_CHECKPOINT_H

#include "rng.h"
#include "stage2/cache.h"
#include "stage2/sampler.h"
#include "stage2/scheduler.h"

/* Write the loop state after `steps_done` steps (and the plan's record, cvx_plan_describe) to
 * ck->path (a temp renamed into place).
 * -1 + cvx_error naming the file. */
int cvx_checkpoint_write(const cvx_checkpointing *ck, const cvx_sample_plan *plan, const cvx_latent_shape *sh,
                         const float *latents, int steps_done, const cvx_scheduler *s, const cvx_generator *g,
                         cvx_cache *cache);
/* Load ck->path into the loop state after checking its seal, that it belongs to this run (the
 * fingerprint), to this plan (its record) and its step range (1..n_steps). -1 + one cvx_error
 * line naming what differs. */
int cvx_checkpoint_read(const cvx_checkpointing *ck, const cvx_sample_plan *plan, const cvx_latent_shape *sh,
                        int n_steps, cvx_scheduler *s, float *latents, int *steps_done, cvx_generator *g,
                        cvx_cache *cache);

#endif
