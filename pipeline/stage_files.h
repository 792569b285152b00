/* The files between the stages (docs/file-formats.md): what the three programs read and write
 * around the API calls of pipeline/cvx.h — stage1_embeddings / stage1_conditioning /
 * stage2_latents .safetensors and generation_config.json, written into output sets that are
 * committed as a unit. Not needed by a program that only calls the API. */
#ifndef CVX_PIPELINE_STAGE_FILES_H
#define CVX_PIPELINE_STAGE_FILES_H

#include "pipeline/cvx.h"

#include "dtype.h"
#include "safetensors.h"
#include "fileio.h"

/* stage1_embeddings.safetensors: prompt_embeds / negative_prompt_embeds [1, L, D] F32 + metadata. */
int cvx_embeddings_write(const char *path, const float *prompt, const float *negative, int L, int D,
                         const char *prompt_text, const char *negative_text, const char *model_id);
/* The same for every conditioning tensor of the family (its cond_slots; the first is prompt_embeds):
 * per slot "<name>" then "negative_<name>", F32 (a mask: I64), dtype_info naming them all. */
int cvx_cond_write_set(cvx_outset *set, const char *path, const cvx_embeddings *e, const cvx_cond_set *more,
                       const char *prompt_text, const char *negative_text, const char *model_id);
/* The embeddings in an opened stage-1 file: prompt_embeds / negative_prompt_embeds (the family's
 * first cond_slot), checked against the slot's shape (cvx_cond_slot_dims; dtype; messages name `st`'s
 * path and the rule) and widened to f32. */
int cvx_embeddings_from_file(cvx_model *m, const cvx_safetensors *st, cvx_embeddings *out);
/* The family's further cond_slots likewise (a mask's integers as 0/1 floats); out->n 0 for a
 * family of one (CogVideoX, Wan 2.1). */
int cvx_cond_more_from_file(cvx_model *m, const cvx_safetensors *st, cvx_cond_set *out);
/* Every value of every tensor finite (more may be NULL): -1 + cvx_error naming the tensor and index. */
int cvx_embeddings_finite(const cvx_embeddings *e, const cvx_cond_set *more);
/* The non-blank lines of a prompts file (trailing \r dropped; each a valid prompt: UTF-8, no
 * control characters, else an error naming the line); *buf owns the strings. NULL +
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
 * setting); fp: a cvx_fingerprint (stage2/sampler.h). */
int cvx_sample_fingerprint(cvx_model *m, const cvx_sample_params *resolved, const char *embeddings_path,
                           struct cvx_fingerprint *fp);
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
/* generation_config.json: "loras" ([{file, weight, xxh64}] in order, null without) and "lora_fuse". */
int cvx_genconfig_record_lora_set(cvx_outset *set, const char *path, cvx_model *m);
/* generation_config.json: `key` ("stage1_precision", ...) = m's compute precision ("f32"/"bf16");
 * with "stage2_precision" also "stage2_attention" = the transformer's attention kernel ("f32"/"bf16"/"int8"). */
int cvx_genconfig_record_precision(const char *path, const char *key, const cvx_model *m);

/* The writers above into an output set (fileio.h: every file of the set is renamed into place
 * only once all are written; add generation_config.json last). The genconfig forms record the
 * xxh64 of the data file of the set (cvx_file_xxh64 of its temp; NULL: none) under
 * "stage1_embeddings_xxh64" / "stage2_latents_xxh64", which the next stage checks; the stage-1
 * form also that of a stage1_conditioning.safetensors in the set ("stage1_conditioning_xxh64").
 * Keys an earlier run recorded that this run replaces become null (the other prompt form, a hash
 * of a file this run did not write; stage 1: stage2_latents_xxh64, so that stage 3 refuses the
 * latents of the earlier inputs until stage 2 runs again). */
int cvx_embeddings_write_set(cvx_outset *set, const char *path, const float *prompt, const float *negative, int L,
                             int D, const char *prompt_text, const char *negative_text, const char *model_id);
int cvx_genconfig_record_encode_set(cvx_outset *set, const char *path, const char *prompt, const char *prompts_file,
                                    const char *negative, const char *model_id, const char *emb_xxh64);
int cvx_latents_write_set(cvx_outset *set, const char *path, const cvx_latents *l, const cvx_sample_params *resolved,
                          cvx_dtype dtype, const char *model_id);
int cvx_genconfig_record_sample_set(cvx_outset *set, const char *out_path, const char *in_path,
                                    const cvx_sample_params *resolved, int fps, const char *scheduler,
                                    const char *model_id, const char *lat_xxh64);
/* stage1_conditioning.safetensors: latent_mean / latent_std [1, C, T, h, w] F32 + metadata (mode,
 * frames, height, width, source, model_id). */
int cvx_conditioning_write(const char *path, const cvx_conditioning *c, const char *source, const char *model_id);
/* The same into an output set (add it before generation_config.json: cvx_genconfig_record_encode_set
 * then records its xxh64 as "stage1_conditioning_xxh64", which stage 2 checks). */
int cvx_conditioning_write_set(cvx_outset *set, const char *path, const cvx_conditioning *c, const char *source,
                               const char *model_id);
/* Read and check against the model (latent channels, the transformer fits the mode). */
int cvx_conditioning_read(cvx_model *m, const char *path, cvx_conditioning *out);
/* generation_config.json after stage 1: mode ("t2v"/"i2v"/"v2v"/"condition"), image, video or conditions
 * (the --condition values), conditioning_frames. */
int cvx_genconfig_record_conditioning(const char *path, const cvx_conditioning *c, const char *source);
/* The same, and the precision and cache records below, into an output set: each renders over the
 * set's pending generation_config.json, so that all of a run's keys are committed with its data. */
int cvx_genconfig_record_conditioning_set(cvx_outset *set, const char *path, const cvx_conditioning *c,
                                          const char *source);
int cvx_genconfig_record_precision_set(cvx_outset *set, const char *path, const char *key, const cvx_model *m);

/* generation_config.json: the step-cache settings and counts of the run (cache, cache_threshold,
 * teacache_coefficients, cache_steps_computed / _skipped, cache_blocks_skipped). */
int cvx_genconfig_record_cache(const char *out_path, const cvx_sample_params *resolved, const cvx_latents *l);
int cvx_genconfig_record_cache_set(cvx_outset *set, const char *out_path, const cvx_sample_params *resolved,
                                   const cvx_latents *l);

/* Raw latents [B, C, T, h, w] of a stage-2 file as f32 (*z, free()), checked against the VAE;
 * *meta_frames = its num_frames metadata (0 if absent). */
int cvx_latents_read(cvx_model *m, const char *path, float **z, int dims[5], long *meta_frames);
/* The sampler's generator after the loop (metadata 'generator_state', written for a family whose
 * decode draws noise: LTX-Video) as *gen (free()), NULL when absent; -1 + cvx_error when malformed. */
int cvx_latents_read_generator(const char *path, void **gen);
/* The decoder output as tensor 'decoded' [B, 3, T, H, W] F32 (metadata: the latents' path); a
 * temp of `set` (NULL: written in place at once). */
int cvx_frames_write(cvx_outset *set, const char *path, const cvx_frames *f, const char *latents_path);

/* The single weight file a stage read instead of the model directory's (which = "transformer" or
 * "text_encoder"): "<which>_file" (its real path) and "<which>_weights" (what it holds, e.g. "gguf
 * wan Q4_K_M: 40 F32, 9 F16, 14 Q4_K, 6 Q6_K"), null when the directory's weights were used; for
 * the transformer also "int8_dot" (cvx_model_params.int8). which = "transformer_2" (Wan 2.2 A14B's
 * --transformer_2): recorded only when that file was given. */
int cvx_genconfig_record_weights_set(cvx_outset *set, const char *path, const char *which, const cvx_model *m);

#endif
