/* The CogVideoX pipeline as a library: one model handle, three calls.
 *
 *   cvx_model *m = cvx_model_open(&(cvx_model_params){.model = "zai-org/CogVideoX-2b"});
 *   cvx_encode(m, &encode_params, progress, user, &emb);      text      -> embeddings
 *   cvx_sample(m, &sample_params, &emb, progress, user, &lat) embeddings -> latents
 *   cvx_decode(m, &decode_params, &lat, progress, user, &vid) latents   -> frames
 *
 * cvx_model_open resolves the model (a diffusers directory or a hub id in the local HF cache)
 * once and reads the configs once, including the model-specific defaults (CogVideoX1.5's
 * 768×1360 at 16 fps, the VAE scale factors). The weights of a component are mapped on the first
 * call that needs it, so a program running one stage maps only that stage's weights.
 *
 * Every call returns 0, or -1 with the reason in cvx_last_error() (error.h; per thread). The
 * handle owns one compute context (context.h): two handles run independently in one process.
 * A handle runs one call at a time. The stage programs (stage{1,2,3}/main.c) are thin wrappers:
 * flags, the files between stages, printing. See docs/api.md. */
#ifndef CVX_PIPELINE_COGVIDEOX_H
#define CVX_PIPELINE_COGVIDEOX_H

#include <stddef.h>
#include <stdint.h>

#include "context.h"

typedef struct cvx_model cvx_model;

/* Progress of a long call: `done` of `total` units of the phase `label` ("T5 layers",
 * "denoising", "vae decode"). NULL: the default progress bar on stderr (silent when quiet). */
typedef void (*cvx_progress_fn)(void *user, const char *label, int done, int total);

typedef struct {
    const char *model;          /* diffusers directory or ORG/NAME hub id */
    int threads;                /* 0 = all cores */
    cvx_precision precision;    /* CVX_PRECISION_F32 (bf16 later) */
} cvx_model_params;

/* What cvx_model_open read: the resolved paths and the model's defaults. */
typedef struct {
    const char *name;           /* as given */
    const char *dir;            /* resolved directory */
    int is_15;                  /* CogVideoX1.5 (the transformer has patch_size_t) */
    int frames, height, width, fps;          /* default video size */
    int vae_scale_spatial, vae_scale_temporal;
    double vae_scaling_factor;
    int latent_channels;
    int text_len, text_dim;     /* embeddings the transformer takes: [L, D] */
    const char *scheduler;      /* the scheduler config's type name ("ddim", "dpm"), NULL if unknown */
} cvx_model_info;

/* NULL + cvx_error when the model cannot be found or a config present is invalid. Components
 * missing from the directory are reported by the first call that needs them. */
cvx_model *cvx_model_open(const cvx_model_params *p);
void cvx_model_close(cvx_model *m);
const cvx_model_info *cvx_model_get_info(const cvx_model *m);
cvx_ctx *cvx_model_ctx(cvx_model *m);

/* ---- encode: text -> T5 embeddings ---- */
typedef struct {
    const char *prompt;
    const char *negative_prompt;  /* NULL = "" */
    int max_sequence_length;      /* 0 = 226 (the pipeline's) */
    /* (image conditioning for I2V goes here: an image input encoded by the VAE encoder) */
} cvx_encode_params;

typedef struct {
    float *prompt, *negative;     /* [L, D] each */
    int L, D;
} cvx_embeddings;
void cvx_embeddings_free(cvx_embeddings *e);
/* d_model of the text encoder (the D of its embeddings); maps it. -1 + cvx_error. */
int cvx_encoder_dim(cvx_model *m);

int cvx_encode(cvx_model *m, const cvx_encode_params *p, cvx_progress_fn progress, void *user, cvx_embeddings *out);
/* n texts -> out [n, L, D], batched; labels[i] (may be NULL) names text i in warnings
 * ("the prompt on line 3"). The building block of cvx_encode and of stage1's --prompts_file. */
int cvx_encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                     cvx_progress_fn progress, void *user, float *out);

/* ---- sample: embeddings -> latents (the denoising loop) ---- */
typedef struct {
    int frames, height, width;    /* 0 = the model's default */
    int num_inference_steps;      /* 0 = 50 */
    double guidance_scale;        /* <= 1 disables CFG */
    int use_dynamic_cfg;
    uint64_t seed;
    const char *scheduler;        /* "ddim" / "dpm" / NULL = the scheduler config's */
    /* checkpointing (NULL path = none); see stage2/sampler.h */
    const char *checkpoint_path;
    int checkpoint_every, resume, stop_after_steps;
    const void *fingerprint;      /* const cogvideox_fingerprint *, NULL = none */
    /* (I2V / V2V come next: conditioning latents and their frame count go here) */
    /* step caching (docs/caching.md): "none" / "teacache" / "fbcache" (NULL = none); a threshold
     * <= 0 turns it off; teacache_coefficients NULL = the published set for the model */
    const char *cache;
    double cache_threshold;
    const double *teacache_coefficients;
    /* live preview: after every preview_every-th step (0 = never) a contact sheet of the x0
     * estimate to preview_path; preview "latent" (linear sketch, default) or "vae" (frame 0 decoded) */
    int preview_every;
    const char *preview;
    const char *preview_path;
} cvx_sample_params;

typedef struct {
    float *data;                  /* [1, C, T, h, w], the stage-2 file layout (1.5's padding dropped) */
    int C, T, h, w;
    int steps_done;               /* < num_inference_steps after a stop_after_steps stop */
    int resumed_from;
    double seconds;               /* in the loop */
    const char *scheduler;        /* the one used ("ddim" / "dpm") */
    /* step caching over the whole run (resumed part included); 0 without */
    long long cache_steps_computed, cache_steps_skipped, cache_blocks_skipped;
    double teacache_coefficients[5];   /* the set used (TeaCache) */
    int previews;                 /* previews written, and the time they took */
    double preview_seconds;
} cvx_latents;
void cvx_latents_free(cvx_latents *l);

/* Checks the request (sizes, embeddings) before any work: -1 + cvx_error naming the flag. */
int cvx_sample(cvx_model *m, const cvx_sample_params *p, const cvx_embeddings *emb, cvx_progress_fn progress,
               void *user, cvx_latents *out);
/* The settings cvx_sample would use (defaults filled in), for printing and the fingerprint. */
int cvx_sample_resolve(cvx_model *m, const cvx_sample_params *p, cvx_sample_params *resolved);

/* ---- decode: latents -> frames ---- */
typedef enum { CVX_TILING_AUTO = 0, CVX_TILING_ON, CVX_TILING_OFF } cvx_tiling;
typedef struct {
    cvx_tiling tiling;
    int tile_height, tile_width;  /* tile size in pixels, 0 = vae sample size / 2 */
} cvx_decode_params;

typedef struct {
    float **data;                 /* [B] of [3, T, H, W] in [-1, 1] (before post-processing) */
    int B, T, H, W;
    int tiled;
} cvx_frames;
void cvx_frames_free(cvx_frames *f);

/* z: [B, C, T, h, w] raw latents (as stage 2 writes them; NaN replaced by 0 with a warning,
 * × 1/scaling_factor here). `label` names z in messages (a file name). */
int cvx_decode(cvx_model *m, const cvx_decode_params *p, const float *z, int B, int C, int T, int h, int w,
               const char *label, cvx_progress_fn progress, void *user, cvx_frames *out);

/* ---- the files between the stages (stage{1,2,3} programs; docs/file-formats.md) ---- */
#include "dtype.h"
#include "safetensors.h"

/* stage1_embeddings.safetensors: prompt_embeds / negative_prompt_embeds [1, L, D] F32 + metadata. */
int cvx_embeddings_write(const char *path, const float *prompt, const float *negative, int L, int D,
                         const char *prompt_text, const char *negative_text, const char *model_id);
/* The embeddings in an opened stage-1 file, checked against the model's transformer (shape,
 * dtype; messages name `st`'s path) and widened to f32. */
int cvx_embeddings_from_file(cvx_model *m, const cvx_safetensors *st, cvx_embeddings *out);
/* The non-empty lines of a prompts file (trailing \r dropped); *buf owns the strings. NULL +
 * cvx_error when unreadable or without a prompt. */
typedef struct {
    const char *text;
    int line;                     /* line number in the file (0 for a --prompt) */
} cvx_prompt_item;
cvx_prompt_item *cvx_read_prompts_file(const char *path, char **buf, int *count);
/* generation_config.json after stage 1 (prompt or prompts_file, negative_prompt, model_id). */
int cvx_genconfig_record_encode(const char *path, const char *prompt, const char *prompts_file,
                                const char *negative, const char *model_id);

/* The run settings a stage-2 checkpoint belongs to (model, embeddings file hash, every resolved
 * setting); fp: a cogvideox_fingerprint (stage2/sampler.h). */
int cvx_sample_fingerprint(cvx_model *m, const cvx_sample_params *resolved, const char *embeddings_path, void *fp);
/* The model to use: --model_dir / --model_id if given, else generation_config.json's model_id
 * at gc_path, else the file's model_id metadata (st may be NULL); *out NULL if none. -1 +
 * cvx_error when gc_path is not valid JSON. */
int cvx_recorded_model(const char *model_dir, const char *model_id, const char *gc_path, const cvx_safetensors *st,
                       char *buf, size_t n, const char **out);
/* stage2_latents.safetensors: latents [1, C, T, h, w] in `dtype` + metadata of the run. */
int cvx_latents_write(const char *path, const cvx_latents *l, const cvx_sample_params *resolved, cvx_dtype dtype,
                      const char *model_id);
/* generation_config.json after stage 2: the run's settings (stage 1's keys carried over from
 * in_path when out_path is new). */
int cvx_genconfig_record_sample(const char *out_path, const char *in_path, const cvx_sample_params *resolved,
                                int fps, const char *scheduler, const char *model_id);

/* generation_config.json: the step-cache settings and counts of the run (cache, cache_threshold,
 * teacache_coefficients, cache_steps_computed / _skipped, cache_blocks_skipped). */
int cvx_genconfig_record_cache(const char *out_path, const cvx_sample_params *resolved, const cvx_latents *l);

/* Raw latents [B, C, T, h, w] of a stage-2 file as f32 (*z, free()), checked against the VAE;
 * *meta_frames = its num_frames metadata (0 if absent). */
int cvx_latents_read(cvx_model *m, const char *path, float **z, int dims[5], long *meta_frames);
/* The decoder output as tensor 'decoded' [B, 3, T, H, W] F32 (metadata: the latents' path). */
int cvx_frames_write(const char *path, const cvx_frames *f, const char *latents_path);

#endif
