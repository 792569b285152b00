/* The CogVideoXPipeline denoising loop (diffusers 0.32.2, text-to-video): latent shape rules,
 * initial noise from the seed, classifier-free guidance (static or dynamic), the scheduler
 * step, and checkpoint / resume of the loop state.
 *
 * Latents here are in the pipeline's layout [1, F, C, h, w] (frames before channels), F
 * including CogVideoX1.5's padding frame; cogvideox_latents_to_output gives the stage-2 file
 * layout [1, C, T, h, w] without it. */
#ifndef CVX_STAGE2_SAMPLER_H
#define CVX_STAGE2_SAMPLER_H

#include <stddef.h>
#include <stdint.h>
#include "rng.h"
#include "safetensors.h"
#include "stage2/scheduler.h"
#include "stage2/transformer.h"

typedef struct {
    int frames, height, width;          /* video size in pixels */
    int num_inference_steps;
    double guidance_scale;
    int use_dynamic_cfg;
    uint64_t seed;
    int vae_scale_spatial;              /* 2^(len(vae block_out_channels) − 1), 8 for CogVideoX */
    int vae_scale_temporal;             /* vae temporal_compression_ratio, 4 */
    /* progress of the loop (NULL: the default bar on stderr) */
    void (*progress)(void *user, const char *label, int done, int total);
    void *progress_user;
    /* image-to-video / video-to-video (all zero for text-to-video) */
    int i2v;                             /* the transformer input is [latents, image_latents] on the channel axis */
    const float *image_latents;          /* I2V: [1, F, C, h, w], F the loop's (padding included) */
    const float *init_latents;           /* initial latents [1, F, C, h, w] instead of randn from the seed */
    const cvx_generator *init_generator; /* with init_latents: the generator after the draws that made them */
    int t_start;                         /* V2V: the loop runs timesteps[t_start:] (upstream get_timesteps) */
    /* CFG-parallel (docs/distributed.md): a group of 2 ranks, rank 0 computing the unconditional
     * branch, rank 1 the conditional one, the predictions exchanged once per step; NULL = both
     * branches batched here. Every rank then runs the same scheduler step; only world rank 0
     * writes checkpoints. */
    struct cvx_dist *cfg_dist;
    /* Ulysses sequence parallelism (cogvideox_set_sp): the ranks that share each forward; NULL =
     * none. world_dist: every rank of the run, which agree on failures (NULL: the CFG group). */
    struct cvx_dist *sp_dist, *world_dist;
    int noise_dtype;                    /* cvx_dtype of the initial noise (CVX_F32 = 0, CVX_BF16, CVX_F16) */
    /* step caching (stage2/cache.h): COGVIDEOX_CACHE_* (0 = none), threshold (<= 0 = off),
     * TeaCache coefficients (NULL = the published set for the model) */
    int cache_kind;
    double cache_threshold;
    const double *teacache_coefficients;
} cogvideox_sample_params;

typedef struct {
    int frames;          /* latent frames the loop runs on, padding included */
    int pad_frames;      /* leading frames dropped at the end (CogVideoX1.5: 0 or 1) */
    int channels, height, width;
    size_t numel;        /* frames · channels · height · width (batch 1) */
} cogvideox_latent_shape;

/* Latent shape for a request, validating the sizes against the model first (frames 4k+1,
 * height/width multiples of vae_scale·patch_size, ...). -1 + a clear cvx_error naming the flag. */
int cogvideox_latent_shape_for(const cogvideox_config *c, const cogvideox_sample_params *p, cogvideox_latent_shape *out);

/* The embeddings must be [1, max_text_seq_length, text_embed_dim] F32-convertible floats, both
 * the same shape. `file` names the file in messages. */
int cogvideox_check_embeddings(const cogvideox_config *c, const cvx_tensor *prompt, const cvx_tensor *negative,
                               const char *file);

/* Guidance scale at timestep t: the static scale, or with use_dynamic_cfg upstream's
 * 1 + g·(1 − cos(π·((n − t)/n)^5))/2 (t the timestep value, n the step count), in double. */
double cogvideox_guidance_at(const cogvideox_sample_params *p, int64_t t);
/* CFG is used when guidance_scale > 1 (as upstream: then the batch is [negative; positive]). */
int cogvideox_uses_cfg(const cogvideox_sample_params *p);

/* ---- checkpoint / resume ---- */
/* The run settings a checkpoint belongs to, as (key, value) strings; stored in the checkpoint
 * metadata as "run.<key>" and compared one by one on resume. */
#define COGVIDEOX_FP_MAX 32
typedef struct {
    int n;
    char key[COGVIDEOX_FP_MAX][48];
    char value[COGVIDEOX_FP_MAX][1024];
} cogvideox_fingerprint;
void cogvideox_fingerprint_set(cogvideox_fingerprint *fp, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef struct {
    const char *path;                      /* checkpoint file; NULL = no checkpoints */
    int every;                             /* write after every K-th step; 0 = never */
    int resume;                            /* continue from `path` (must exist and match) */
    int stop_after_steps;                  /* debugging: stop once this many steps are done
                                            * (after writing a checkpoint); 0 = run to the end */
    const cogvideox_fingerprint *fingerprint;
} cogvideox_checkpointing;

/* Called after every step with the latents ([1, F, C, h, w]); step counts from 0. */
typedef void (*cogvideox_step_hook)(void *ctx, int step, const float *latents, const cogvideox_latent_shape *shape);

typedef struct {
    int steps_done;      /* == num_inference_steps when finished */
    int resumed_from;    /* steps already done in the checkpoint, 0 for a fresh run */
    double seconds;      /* time spent in the loop in this process */
    /* step caching over the whole run (a resumed run included); 0 without caching */
    int64_t cache_steps_computed, cache_steps_skipped, cache_blocks_skipped;
} cogvideox_sample_result;

/* Run the loop. prompt / negative: [L, text_embed_dim] float (negative unused without CFG).
 * latents: numel floats, receives the final latents [1, F, C, h, w] (padding included).
 * The scheduler must come fresh from cogvideox_scheduler_init (timesteps are set here).
 * Returns 0 (check result->steps_done < n for a stop_after_steps stop), -1 + cvx_error. */
int cogvideox_sample(cogvideox_transformer *m, cogvideox_scheduler *s, const cogvideox_sample_params *p,
                     const cogvideox_latent_shape *shape, const float *prompt, const float *negative, int L,
                     const cogvideox_checkpointing *ck, cogvideox_step_hook hook, void *hook_ctx, float *latents,
                     cogvideox_sample_result *result);

/* Video-to-video (upstream get_timesteps): init_timestep = min(int(n·strength), n), t_start =
 * max(n − init_timestep, 0); the loop runs the last n − t_start timesteps. -1 + cvx_error when
 * strength is not in (0, 1] or keeps no step. */
int cogvideox_strength_t_start(int n, double strength, int *t_start);
/* scheduler.add_noise (CogVideoXDDIM/DPMScheduler): ā_t rounded to float32 first, then
 * out = √ā·x0 + √(1−ā)·noise in float32, as upstream. */
void cogvideox_add_noise(const cogvideox_scheduler *s, int64_t t, const float *x0, const float *noise, size_t n,
                         float *out);

/* [1, F, C, h, w] (padding first) -> [1, C, F − pad, h, w], the stage-2 file layout. */
void cogvideox_latents_to_output(const float *latents, const cogvideox_latent_shape *shape, float *out);

#endif
