/* The library API of cogvideox.c (every model family: CogVideoX, Wan, ...): one model handle, three calls.
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
 * flags, the files between stages (pipeline/stage_files.h), printing. See docs/api.md. */
#ifndef CVX_PIPELINE_CVX_H
#define CVX_PIPELINE_CVX_H

#include <stddef.h>
#include <stdint.h>

#include "context.h"
#include "lora.h"

#define CVX_MAX_LORAS 16

typedef struct cvx_model cvx_model;

/* Progress of a long call: `done` of `total` units of the phase `label` ("T5 layers",
 * "denoising", "vae decode"). NULL: the default progress bar on stderr (silent when quiet). */
typedef void (*cvx_progress_fn)(void *user, const char *label, int done, int total);

typedef struct {
    const char *model;          /* diffusers directory or ORG/NAME hub id */
    /* single-file weights used instead of the directory's (the directory still gives the configs
     * and the tokenizer), NULL = the directory's: transformer (Wan: diffusers or original/ComfyUI
     * key names; CogVideoX: diffusers names) and text encoder (HF or llama.cpp names) as
     * .safetensors or GGUF (ggml block-quantized weights stay quantized); VAE (Wan only) */
    const char *transformer_file, *text_encoder_file, *vae_file;
    /* the second of two experts (diffusers' transformer_2, the low-noise one) as a single file, beside
     * transformer_file's high-noise one. Generic: any two-expert model (pipeline/expert_set.h); Wan 2.2
     * A14B's today (ComfyUI's *_low_noise_14B_* or city96's *-LowNoise-*.gguf) */
    const char *transformer_2_file;
    /* the second text encoder's single file, NULL = the directory's text_encoder_2/. Generic: diffusers'
     * name for any pipeline with two text encoders (HunyuanVideo-1.5's ByT5 today: ComfyUI's
     * byt5_small_glyphxl_fp16.safetensors, HF T5 names) */
    const char *text_encoder_2_file;
    /* LoRA adapters on the transformer (common/lora.h), active in every transformer call (both CFG
     * branches, all steps); weights combine as diffusers' set_adapters. At most CVX_MAX_LORAS. */
    const cvx_lora_spec *loras;
    int n_loras;
    /* [n_loras] or NULL (all 0): 0 puts loras[i] on every transformer; 1 / 2 only on the first /
     * second of two experts (Wan 2.2 A14B's high-noise / low-noise: --lora_high / --lora_low) */
    const int *lora_experts;
    int lora_fuse;              /* merge them into private copies of the touched layers (faster steps,
                                 * more memory) instead of the low-rank path beside the weights */
    int threads;                /* 0 = all cores */
    cvx_precision precision;    /* CVX_PRECISION_F32 (default: golden-exact) or CVX_PRECISION_BF16 (bf16
                                 * operands, f32 accumulation; cvx_precision_parse resolves "auto" per kind of work) */
    int int8;                   /* GGUF block-quantized weights: int8 dot products with the activations
                                 * rounded to int8 per row (cvx_ctx_set_int8); 0: dequantized tiles */
    cvx_attention_mode attention; /* the transformer's attention: CVX_ATTENTION_AUTO (0, the precision's
                                 * kernel), F32, BF16 or INT8 (opt-in SageAttention-style int8 QKᵀ;
                                 * cvx_ctx_set_attention); in the sampling fingerprint when not the
                                 * precision's kernel */
} cvx_model_params;

/* What cvx_model_open read: the resolved paths and the model's defaults. */
typedef struct {
    const char *name;           /* as given */
    const char *dir;            /* resolved directory */
    const char *family;         /* the model family ("CogVideoX", "Wan") */
    const char *pipeline_class; /* model_index.json's _class_name, NULL when the directory has none */
    int frames, height, width, fps;          /* default video size */
    int vae_scale_spatial, vae_scale_temporal;
    /* video-to-video: the latent frame count must be a multiple of this (CogVideoX1.5: patch_size_t,
     * as upstream raises otherwise); 0 or 1: any count */
    int v2v_latent_frames_multiple;
    double vae_scaling_factor;
    int latent_channels;
    int text_len, text_dim;     /* embeddings the transformer takes: [L, D] */
    double guidance_scale;      /* the pipeline's default guidance (CogVideoX 6, Wan 5) */
    const char *scheduler;      /* the scheduler config's type name ("ddim", "dpm"), NULL if unknown */
} cvx_model_info;

/* NULL + cvx_error when the model cannot be found or a config present is invalid. Components
 * missing from the directory are reported by the first call that needs them. */
cvx_model *cvx_model_open(const cvx_model_params *p);
void cvx_model_close(cvx_model *m);
/* Write the model's transformer (its directory's weights, or cvx_model_params.transformer_file, F32/
 * BF16/F16) as a GGUF file with city96's rules (stage2/quantize.h): `type` a llama.cpp file type
 * (Q8_0, Q4_K_M, ...) or a block type (q4_k: pure), pure = llama-quantize --pure. One info line
 * says what was written. 0, or -1 + cvx_error. */
int cvx_model_write_gguf(cvx_model *m, const char *type, int pure, const char *out_path);
const cvx_model_info *cvx_model_get_info(const cvx_model *m);
cvx_ctx *cvx_model_ctx(cvx_model *m);

/* ---- encode: text -> T5 embeddings ---- */
typedef struct {
    const char *prompt;
    const char *negative_prompt;  /* NULL = "" */
    int max_sequence_length;      /* 0 = 226 (the pipeline's) */
    /* (image / video conditioning: cvx_encode_conditioning below) */
} cvx_encode_params;

/* The conditioning stage 1 makes, per CFG branch (the prompt's and the negative prompt's), is the
 * family's named tensors (its row's cond_slots, pipeline/family.h): prompt_embeds [L, D] in every
 * family (cvx_embeddings), and in a family with several text encoders or attention masks more
 * (cvx_cond_set, cvx_sample_params.cond_more). */
typedef struct {
    float *prompt, *negative;     /* [L, D] each: prompt_embeds / negative_prompt_embeds */
    int L, D;
} cvx_embeddings;

#define CVX_MAX_COND_TENSORS 8
typedef struct {
    const char *name;             /* the family's slot name (static): "prompt_embeds_2" */
    float *prompt, *negative;     /* [L, D] each; a mask [L] of 0/1 values with D = 1 */
    int L, D;
    int is_mask;                  /* an attention mask (I64 in the file) */
} cvx_cond_tensor;
typedef struct cvx_cond_set {
    int n;                        /* in the family's slot order after prompt_embeds */
    cvx_cond_tensor t[CVX_MAX_COND_TENSORS];
} cvx_cond_set;
void cvx_cond_set_free(cvx_cond_set *c);
void cvx_embeddings_free(cvx_embeddings *e);
/* d_model of the text encoder (the D of its embeddings); maps it. -1 + cvx_error. */
int cvx_encoder_dim(cvx_model *m);

int cvx_encode(cvx_model *m, const cvx_encode_params *p, cvx_progress_fn progress, void *user, cvx_embeddings *out);
/* n texts -> out [n, L, D], batched; labels[i] (may be NULL) names text i in warnings
 * ("the prompt on line 3"). The building block of cvx_encode and of stage1's --prompts_file. */
int cvx_encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                     cvx_progress_fn progress, void *user, float *out);
/* The family's further conditioning tensors (its cond_slots after prompt_embeds: a second text
 * encoder, attention masks) of the same n texts: out->t[k].prompt [n, L_k, D_k] (negative NULL),
 * out->n = 0 for a family without (CogVideoX, Wan 2.1). Free with cvx_cond_set_free. */
int cvx_encode_texts_more(cvx_model *m, const char *const *texts, const char *const *labels, int n,
                          cvx_progress_fn progress, void *user, cvx_cond_set *out);

/* ---- sample: embeddings -> latents (the denoising loop) ---- */
/* What one step of the loop did, for an observer (stage 2's stage2_steps.json, pipeline/steps_record.h). */
typedef struct cvx_step_info {
    int step, n_steps;            /* loop step (0-based) of the steps the loop runs */
    double timestep;              /* the value the model got */
    double guidance;              /* the guidance scale used (dynamic CFG: this step's), 1 without CFG */
    int cache;                    /* step cache: 1 computed, 0 skipped; -1 without caching */
    double seconds;               /* the step's wall time */
    const float *latents;         /* after the step, the family's loop layout, numel floats */
    size_t numel;
    int expert;                   /* the transformer that ran (Wan 2.2 A14B: 0 high noise, 1 low noise), else 0 */
} cvx_step_info;

typedef struct cvx_sample_params {
    int frames, height, width;    /* 0 = the model's default */
    int num_inference_steps;      /* 0 = 50 */
    double guidance_scale;        /* <= 1 disables CFG; < 0 = the model's default (cvx_model_info) */
    double guidance_scale_2;      /* Wan 2.2 A14B: the low-noise expert's guidance; 0 = the model's default
                                   * (a family option, in cvx_family_options) */
    int use_dynamic_cfg;          /* CogVideoX: the cosine guidance schedule (a family option, in cvx_family_options) */
    uint64_t seed;
    const char *scheduler;        /* "ddim" / "dpm" / NULL = the scheduler config's */
    double flow_shift;            /* > 0: the flow schedulers' shift (UniPC flow_shift, Euler shift) instead of the
                                   * config's, as from_pretrained(..., flow_shift=S); 0 = the config's */
    /* checkpointing (NULL path = none); see stage2/sampler.h */
    const char *checkpoint_path;
    int checkpoint_every, resume, stop_after_steps;
    const struct cvx_fingerprint *fingerprint;   /* the run's settings (cvx_sample_fingerprint), NULL = none */
    /* image-to-video / video-to-video: the encoded image or video (cvx_encode_conditioning or
     * cvx_conditioning_read), NULL = text-to-video. Its size is the video size (height/width
     * 0 or equal); V2V: its frame count too. */
    const struct cvx_conditioning *conditioning;
    /* the family's conditioning tensors after prompt_embeds (its cond_slots: a second text encoder,
     * attention masks), NULL = none (CogVideoX, Wan 2.1 have none) */
    const struct cvx_cond_set *cond_more;
    double strength;              /* V2V: 0 = 0.8 (upstream's default); in (0, 1] */
    struct cvx_dist *cfg_dist;    /* CFG-parallel group of 2 MPI ranks (common/dist.h), NULL = none */
    struct cvx_dist *sp_dist;     /* Ulysses sequence-parallel group (--sp N; its size divides the heads), NULL = none */
    struct cvx_dist *world_dist;  /* every rank of the run (they agree on failures), NULL = the CFG group */
    const char *noise_dtype;      /* dtype of the initial latents and DPM step noise draws, as torch.randn(dtype=):
                                   * "f32" / "bf16" / "fp16"; NULL = follow the model's precision (bf16 → "bf16",
                                   * as a diffusers pipeline loaded in bf16 does); resolved to the canonical name */
    /* step caching (docs/caching.md): "none" / "teacache" / "fbcache" / "deepcache" (NULL = none); a
     * threshold <= 0 turns teacache / fbcache off (deepcache has none: 0); teacache_coefficients
     * NULL = the published set for the model */
    const char *cache;
    double cache_threshold;
    /* deepcache: full steps before start, from end on and every interval-th from start, the others
     * run the last block on the kept streams; interval 0 (a zeroed request) = the seed project's
     * 11, 45, 4 for all three (cvx_sample_default_params and stage 2's flags start from those) */
    int deepcache_start, deepcache_end, deepcache_interval;
    const double *teacache_coefficients;
    /* the family options: fields only some families use, each a row of the one table
     * cvx_family_options (pipeline/family.c: its flag, help, file keys, refusal); a family refuses
     * one its row does not take (guidance_scale_2 and use_dynamic_cfg above are two more) */
    int teacache_ret_steps;       /* Wan: TeaCache4Wan2.1's use_ret_steps variant (its e0 rule and coefficients)
                                   * (a family option, in cvx_family_options) */
    double guidance_rescale;      /* LTX-Video: diffusers' guidance_rescale φ (rescale_noise_cfg), 0 = none
                                   * (a family option, in cvx_family_options) */
    double frame_rate;            /* LTX-Video: the frame rate of the rotary positions (8/frame_rate), 0 = the
                                   * model's fps (a family option, in cvx_family_options: stage 2's --fps) */
    /* explicit timesteps [n_timesteps] (descending, in (0, num_train_timesteps]), as the pipeline's
     * timesteps= argument (LTX-Video's distilled schedules); NULL = the scheduler's own spacing.
     * num_inference_steps 0 = n_timesteps, else it must equal it. Generic in kind (diffusers'
     * retrieve_timesteps(timesteps=) of any pipeline); a family option (its CVX_OPTION_OWN row in
     * cvx_family_options[]: LTX-Video alone wires it, the others refuse it); a list, so a field here */
    const double *timesteps;
    int n_timesteps;
    /* LTX-Video condition pipeline: image_cond_noise_scale (the hard conditions re-noised each step);
     * used when image_cond_noise_set, else the pipeline's 0.15. Family-specific: a family option (its
     * CVX_OPTION_OWN row in cvx_family_options[] refuses it elsewhere); a field with its given-bit
     * because 0 is a meaningful value */
    double image_cond_noise_scale;
    int image_cond_noise_set;
    /* live preview: after every preview_every-th step (0 = never) a contact sheet of the x0
     * estimate to preview_path; preview "latent" (linear sketch, default) or "vae" (frame 0 decoded) */
    int preview_every;
    const char *preview;
    const char *preview_path;
    /* called after every step (every rank) with what it did; NULL = none */
    void (*on_step)(void *user, const cvx_step_info *info);
    void *on_step_user;
} cvx_sample_params;

typedef struct {
    float *data;                  /* [1, C, T, h, w], the stage-2 file layout (1.5's padding dropped) */
    int C, T, h, w;
    int steps_done;               /* position in the schedule: < num_inference_steps after a
                                   * stop_after_steps stop (V2V: the skipped steps included) */
    int steps_skipped;            /* V2V: the first steps --strength skips (never run), else 0 */
    int resumed_from;
    double seconds;               /* in the loop */
    const char *scheduler;        /* the one used ("ddim" / "dpm") */
    const char *family;           /* the model family that made them ("CogVideoX", "Wan") */
    /* step caching over the whole run (resumed part included); 0 without */
    long long cache_steps_computed, cache_steps_skipped, cache_blocks_skipped;
    double teacache_coefficients[5];   /* the set used (TeaCache) */
    int previews;                 /* previews written, and the time they took */
    double preview_seconds;
    /* the generator's state after the loop (a cvx_generator, common/rng.h; owned), NULL when the
     * run ended early: what a decode that draws noise continues from (LTX-Video 0.9.5+) */
    void *generator;
} cvx_latents;
void cvx_latents_free(cvx_latents *l);
/* Steps run by this process (not the ones V2V's strength skips, not those of a resumed checkpoint):
 * what seconds covers. */
int cvx_latents_steps_ran(const cvx_latents *l);
/* The steps part of a summary, counting steps run: "4 steps dpm"; V2V "2 of 4 steps dpm (strength
 * 0.6 skips the first 2)"; then ", resumed after K" (K the loop steps the checkpoint had). */
void cvx_latents_steps_text(const cvx_latents *l, const cvx_sample_params *resolved, char *buf, size_t n);

/* Checks the request (sizes, embeddings) before any work: -1 + cvx_error naming the flag. */
int cvx_sample(cvx_model *m, const cvx_sample_params *p, const cvx_embeddings *emb, cvx_progress_fn progress,
               void *user, cvx_latents *out);
/* A request holding the model's defaults (its frames, height, width and guidance, 50 steps, the
 * scheduler config's scheduler, seed 0, no conditioning): what a caller edits instead of the
 * sentinels (0 and guidance_scale < 0 still mean "the model's default"). */
cvx_sample_params cvx_sample_default_params(const cvx_model *m);
/* The settings cvx_sample would use (defaults filled in), for printing and the fingerprint. */
int cvx_sample_resolve(cvx_model *m, const cvx_sample_params *p, cvx_sample_params *resolved);

/* ---- decode: latents -> frames ---- */
typedef enum { CVX_TILING_AUTO = 0, CVX_TILING_ON, CVX_TILING_OFF } cvx_tiling;
typedef struct {
    cvx_tiling tiling;
    int tile_height, tile_width;  /* tile size in pixels, 0 = vae sample size / 2 */
    /* MPI ranks (common/dist.h) sharing a tiled decode; rank 0 gets the frames (the others get
     * data[b] = NULL). An untiled decode runs on rank 0 alone. NULL = this process alone. */
    struct cvx_dist *dist;
    /* LTX-Video 0.9.5+ (timestep-conditioned VAE): decode_set bit 1: decode_timestep given, bit 2:
     * decode_noise_scale given (else the model's recommended values, 0.05 and 0.025; a timestep
     * given alone is also the noise scale, as upstream's None); the decode noise continues the
     * sampler's generator (cvx_latents.generator, NULL: none) */
    int decode_set;
    double decode_timestep, decode_noise_scale;
    const void *generator;
} cvx_decode_params;

typedef struct {
    float **data;                 /* [B] of [3, T, H, W] in [-1, 1] (before post-processing) */
    int B, T, H, W;
    int tiled;
} cvx_frames;
void cvx_frames_free(cvx_frames *f);

/* The checks of a decode of h×w latents that need no weights (the tile sizes give the frame
 * size): -1 + cvx_error. cvx_decode makes them too; a program calls this before the long work. */
int cvx_decode_check(cvx_model *m, const cvx_decode_params *p, int h, int w);
/* z: [B, C, T, h, w] raw latents (as stage 2 writes them; × 1/scaling_factor here). A NaN/Inf in
 * z or in the decoded frames is an error naming the tensor and index. `label` names z in messages (a file name). */
int cvx_decode(cvx_model *m, const cvx_decode_params *p, const float *z, int B, int C, int T, int h, int w,
               const char *label, cvx_progress_fn progress, void *user, cvx_frames *out);

/* ---- conditioning: an image (I2V) or a video (V2V) -> the VAE encoder's latent distribution ----
 * Stage 1 encodes it (decode with libav, resize with Pillow's LANCZOS when the size differs, VAE
 * encode: frame batches, tiles when an untiled encode would be large) and keeps the latent
 * distribution's mean and std, so the seed stays a stage-2 setting: cvx_sample draws the encoder
 * sample mean + std·randn with the seeded generator first, then the noise (upstream's order). */
/* CVX_MODE_COND: conditions, images or videos at frame indices with strengths. Generic in kind
 * (keyframe conditioning; LTXConditionPipeline's today: a row with takes_conditions, the others
 * refuse stage 1's --condition) */
typedef enum { CVX_MODE_T2V = 0, CVX_MODE_I2V, CVX_MODE_V2V, CVX_MODE_COND } cvx_mode;
const char *cvx_mode_name(cvx_mode mode);   /* "t2v", "i2v", "v2v", "condition" */

#define CVX_MAX_CONDITIONS 16
/* One condition of the condition pipeline (stage 1 --condition PATH:FRAME:STRENGTH). */
typedef struct {
    const char *path;             /* an image, or a video file / directory of frames */
    int frame_index;              /* the pixel frame it conditions (0: the start) */
    double strength;              /* in [0, 1]; 1 = a hard condition */
} cvx_condition_spec;

typedef struct {
    const char *image;            /* I2V: an image file (PNG/JPEG/... anything libav decodes) */
    const char *video;            /* V2V: a video file or a directory of frame images */
    int max_frames;               /* V2V: the first N frames (0 = all); Wan I2V: the video's frame count (0 =
                                   * the model's), which the encoded condition depends on */
    int height, width;            /* target size, 0 = the model's default */
    /* LTX-Video's condition pipeline (mode CVX_MODE_COND; image and video NULL): the conditions in
     * order; max_frames is then the video's frame count (0 = the model's) */
    const cvx_condition_spec *conditions;
    int n_conditions;
} cvx_conditioning_params;

/* What stage 1 kept of one condition (CVX_MODE_COND): its latent frames are T of the
 * conditioning's mean / std, after the earlier conditions' (along T). */
typedef struct {
    int frame_index, T, frames;   /* frames: the pixel frames encoded (1 for an image) */
    double strength;
} cvx_condition_item;

typedef struct cvx_conditioning {
    cvx_mode mode;
    float *mean, *std;            /* [C, T, h, w] each: latent_dist of the encoded pixels */
    int C, T, h, w;
    float *image_embeds;          /* Wan I2V: the CLIP image encoder's penultimate hidden states [image_L, image_D] */
    int image_L, image_D;
    int frames, height, width;    /* the pixel frames encoded and their (target) size (CVX_MODE_COND: the
                                   * video's frame count) */
    int n_items;                  /* CVX_MODE_COND: the conditions (mean / std: theirs along T, in order) */
    cvx_condition_item items[CVX_MAX_CONDITIONS];
} cvx_conditioning;
void cvx_conditioning_free(cvx_conditioning *c);

/* Checks the inputs (readable, non-empty, a size the model takes, the model type fits the mode)
 * before the VAE encoder is mapped. -1 + cvx_error. */
int cvx_encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                            cvx_conditioning *out);

#endif
