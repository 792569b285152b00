/* What a file of a staged run is, for the debugging tools (cvx-inspect, cvx-compare): a stage
 * file (stage-1 embeddings / conditioning, stage-2 latents / checkpoint, stage-3 output frames,
 * our own or the staged TPU pipeline's), generation_config.json, stage2_steps.json, a video or a
 * folder of frames, or model weights (a model directory, a safetensors / sharded / GGUF file).
 * The files are read with the project's readers (common/safetensors.h, weights, config); this
 * module only names what they hold. */
#ifndef CVX_TOOLS_RUNFILE_H
#define CVX_TOOLS_RUNFILE_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

typedef enum {
    RF_EMBEDDINGS,    /* stage1_embeddings.safetensors (prompt_embeds, negative_prompt_embeds) */
    RF_CONDITIONING,  /* stage1_conditioning.safetensors (latent_mean, latent_std, image_embeds) */
    RF_LATENTS,       /* stage2_latents.safetensors (latents [B, C, T, H, W]) */
    RF_CHECKPOINT,    /* stage2_checkpoint.safetensors (latents in the loop layout, step, generator) */
    RF_FRAMES,        /* stage 3 --output_frames (frames F32 [B, 3, T, H, W] in [-1, 1]) */
    RF_TENSORS,       /* another safetensors file that is not model weights */
    RF_WEIGHTS,       /* model weights: safetensors, *.safetensors.index.json, GGUF */
    RF_MODEL_DIR,     /* a diffusers model directory (model_index.json or a component config.json) */
    RF_GENCONFIG,     /* generation_config.json */
    RF_STEPS,         /* stage2_steps.json */
    RF_VIDEO,         /* a video file (MP4, ...) or a folder of frame images */
    RF_RUN_DIR,       /* a run directory (stage files, generation_config.json) */
} rf_kind;

const char *rf_kind_name(rf_kind k);   /* "stage-2 latents", ... */

typedef struct {
    rf_kind kind;
    char path[4096];
    cvx_safetensors *st;      /* stage files and RF_TENSORS */
    char family[32];          /* "CogVideoX", "Wan", "" when the file does not say */
    char family_from[96];     /* how the family was found ("metadata model_family", "model_id's model", ...) */
    char mode[8];             /* t2v / i2v / v2v, "" unknown */
    int step, n_steps;        /* checkpoints: steps done of n; latents: n (steps run) */
    int staged_tpu;           /* written by the staged TPU pipeline (its metadata, no model_family) */
    int frames_major;         /* the 5-D tensors are [B, F, C, H, W] (a CogVideoX checkpoint) */
} rf_file;

/* Classify path (opening stage files; the others are read by their users). -1 + cvx_error when
 * it does not exist or is not readable as what its name or content says. */
int rf_open(const char *path, rf_file *f);
void rf_close(rf_file *f);

/* The family a model directory or hub id would load as ("" + 0 when it cannot be opened). */
int rf_model_family(const char *model, char *family, size_t n);

/* For a safetensors file: the tensor's dtype as the producer computed it, from metadata
 * dtype_info (the staged TPU pipeline stores bf16 embeddings widened to F32 and says "bfloat16"
 * there); NULL when not recorded. */
const char *rf_dtype_info(const rf_file *f, const char *tensor, char *buf, size_t n);

/* The run-directory files the tools know, in pipeline order. */
extern const char *const rf_run_files[];

#endif
