/* The denoising loop every family shares (diffusers' pipelines' __call__ from the prompt
 * embeddings on): initial noise from the seed, the step plan (stage2/plan.h: the expert, the
 * guidance and the cache resets of each step), the scheduler step, step caching, MPI splits, and
 * checkpoint / resume of the loop state. It drives the plan's denoisers (stage2/denoiser.h) and a
 * scheduler (stage2/scheduler.h), passes each branch's conditioning through unopened, and knows
 * no model family.
 *
 * Latents are in the family's loop layout (CogVideoX: [1, F, C, h, w] with 1.5's padding frame;
 * Wan: [1, C, F, h, w]); the family converts them to the stage-2 file layout. */
#ifndef CVX_STAGE2_SAMPLER_H
#define CVX_STAGE2_SAMPLER_H

#include <stddef.h>
#include <stdint.h>
#include "rng.h"
#include "safetensors.h"
#include "stage2/scheduler.h"
#include "stage2/denoiser.h"
#include "stage2/plan.h"

struct cvx_dist;

/* What one step of the loop did, for an observer (the API hands it on as cvx_step_info). */
typedef struct {
    int step, n_steps;            /* loop step (0-based) of the steps the loop runs */
    double timestep;              /* the value the model got */
    double guidance;              /* the guidance scale used (dynamic CFG: this step's), 1 without CFG */
    int cache;                    /* step cache: 1 computed, 0 skipped; -1 without caching */
    double seconds;               /* the step's wall time */
    const float *latents;         /* after the step, the loop layout, numel floats */
    size_t numel;
    int expert;                   /* the plan's expert that ran */
} cvx_loop_step;

/* The request as the loop and the families' stage-2 code read it: the API's resolved
 * cvx_sample_params (pipeline/sample.c fills it; model code does not include the API header). */
typedef struct {
    int frames, height, width;    /* the video size in pixels */
    int num_inference_steps;
    double guidance_scale;        /* <= 1: no CFG */
    int use_dynamic_cfg;
    uint64_t seed;
    double cache_threshold;       /* step caching (cvx_loop_params.cache_kind): <= 0 off */
    int deepcache_start, deepcache_end, deepcache_interval;   /* deepcache's schedule (stage2/cache.h) */
    struct cvx_dist *cfg_dist, *sp_dist, *world_dist;   /* MPI groups, NULL = none (see below) */
    /* called after every step (every rank), NULL = none */
    void (*on_step)(void *user, const cvx_loop_step *info);
    void *on_step_user;
} cvx_loop_request;

/* The loop's parameters: the request (defaults resolved by cvx_sample_resolve) and what the family
 * and the pipeline derive from it. */
typedef struct {
    /* video size, steps, seed, the MPI groups (cfg_dist: a group of
     * 2 ranks, rank 0 computing the unconditional branch, rank 1 the conditional one, the predictions
     * exchanged once per step, every rank then running the same scheduler step, only world rank 0
     * writing checkpoints; sp_dist: Ulysses sequence parallelism, the ranks sharing each forward;
     * world_dist: every rank of the run, which agree on failures), cache_threshold (the guidance
     * and the TeaCache window are the plan's) */
    const cvx_loop_request *req;
    int vae_scale_spatial;              /* 2^(len(vae block_out_channels) − 1), 8 for CogVideoX */
    int vae_scale_temporal;             /* vae temporal_compression_ratio, 4 */
    /* progress of the loop (NULL: the default bar on stderr) */
    void (*progress)(void *user, const char *label, int done, int total);
    void *progress_user;
    /* image-to-video / video-to-video (all zero for text-to-video) */
    const float *cond;                   /* I2V: extra input channels (the family puts them in its branch
                                          * conditioning: cvx_text_cond.channels), NULL */
    const float *image_tokens;           /* extra context tokens (Wan I2V CLIP; the family's likewise), NULL */
    int image_L;
    const float *init_latents;           /* initial latents [1, F, C, h, w] instead of randn from the seed */
    const cvx_generator *init_generator; /* with init_latents: the generator after the draws that made them */
    int t_start;                         /* V2V: the loop runs timesteps[t_start:] (upstream get_timesteps) */
    int noise_dtype;                    /* cvx_dtype of the initial noise (CVX_F32 = 0, CVX_BF16, CVX_F16) */
    /* step caching (stage2/cache.h): CVX_CACHE_* (0 = none; the threshold is the request's), the
     * TeaCache coefficients in use */
    int cache_kind;
    double teacache_coefficients[5];
} cvx_loop_params;

/* For the size errors' suggestions: the multiple of m at or below v (at least m). */
static inline int cvx_multiple_below(int v, int m) { return v > m ? v / m * m : m; }

typedef struct {
    int frames;          /* latent frames the loop runs on, padding included */
    int pad_frames;      /* leading frames dropped at the end (CogVideoX1.5: 0 or 1) */
    int channels_major;  /* the loop layout is [C, F, h, w] (Wan), else [F, C, h, w] (CogVideoX) */
    int channels, height, width;
    size_t numel;        /* frames · channels · height · width (batch 1) */
} cvx_latent_shape;



/* Guidance scale at timestep t: the static scale g, or with dynamic upstream's
 * 1 + g·(1 − cos(π·((n − t)/n)^5))/2 (t the timestep value, n the steps that run), in double. */
double cvx_guidance_at(double g, int dynamic, int n, double t);
/* CFG is used when guidance_scale > 1 (as upstream: then the batch is [negative; positive]). */
int cvx_uses_cfg(double guidance_scale);

/* ---- checkpoint / resume ---- */
/* The run settings a checkpoint belongs to, as (key, value) strings; stored in the checkpoint
 * metadata as "run.<key>" and compared one by one on resume (a run.<key> of the checkpoint that
 * the run lacks is refused too). */
#define CVX_FP_MAX 64
typedef struct cvx_fingerprint {
    int n;
    char key[CVX_FP_MAX][48];
    char value[CVX_FP_MAX][1024];
} cvx_fingerprint;
void cvx_fingerprint_set(cvx_fingerprint *fp, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef struct {
    const char *path;                      /* checkpoint file; NULL = no checkpoints */
    int every;                             /* write after every K-th step; 0 = never */
    int resume;                            /* continue from `path` (must exist and match) */
    int stop_after_steps;                  /* debugging: stop once this many steps are done
                                            * (after writing a checkpoint); 0 = run to the end */
    const cvx_fingerprint *fingerprint;
} cvx_checkpointing;

/* Called after every step with the latents ([1, F, C, h, w]); step counts from 0. */
typedef void (*cvx_step_hook)(void *ctx, int step, const float *latents, const cvx_latent_shape *shape);

typedef struct {
    int steps_done;      /* == num_inference_steps when finished */
    int resumed_from;    /* steps already done in the checkpoint, 0 for a fresh run */
    double seconds;      /* time spent in the loop in this process */
    /* step caching over the whole run (a resumed run included); 0 without caching */
    int64_t cache_steps_computed, cache_steps_skipped, cache_blocks_skipped;
    cvx_generator gen;   /* the generator after the loop (steps_done == num_inference_steps) */
} cvx_sample_result;

/* Run the loop over the plan (its experts, guidance, cache resets, timesteps per step; n_steps =
 * num_inference_steps − t_start). cond[0], cond[1]: the unconditional (negative) and conditional
 * (prompt) branch's conditioning, the family's, handed to the denoiser as in.cond (cond[0] unused
 * without guidance). latents: numel floats, receives the final latents (the loop layout, padding
 * included). The scheduler must come fresh from cvx_scheduler_init (timesteps are set here).
 * Returns 0 (check result->steps_done < n for a stop_after_steps stop), -1 + cvx_error. */
int cvx_sample_loop(const cvx_sample_plan *plan, cvx_scheduler *s, const cvx_loop_params *p,
                    const cvx_latent_shape *shape, const void *const cond[2], const cvx_checkpointing *ck,
                    cvx_step_hook hook, void *hook_ctx, float *latents, cvx_sample_result *result);

#endif
