/* The model handle's insides, shared by the pipeline's files (not part of the API). */
#ifndef CVX_PIPELINE_INTERNAL_H
#define CVX_PIPELINE_INTERNAL_H

#include "pipeline/cvx.h"
#include "pipeline/stage_files.h"
#include "model.h"
#include "progress.h"
#include "pipeline/family.h"

struct cvx_model {
    cvx_model_info info;
    char name[4096], dir[4096];
    char pipeline_class[128];        /* model_index.json's _class_name ("" without the file) */
    cvx_ctx *ctx;
    const cvx_family *family;        /* picked once by cvx_model_open (pipeline/family.h) */
    void *fam;                       /* the family's state: its configs and loaded components */
    int has_denoiser_config, has_vae_config;   /* the transformer's / the VAE's config was found */
    char transformer_file[4096], text_encoder_file[4096], vae_file[4096];   /* cvx_model_params' ("" = none) */
    char transformer_2_file[4096];   /* cvx_model_params' (Wan 2.2 A14B's low-noise expert; "" = none) */
    char text_encoder_2_file[4096];
    char scheduler_name[32];         /* the scheduler config's type ("ddim"), "" if absent or unknown */
    /* LoRA adapters (cvx_model_params'; pipeline/adapters.c) */
    cvx_lora_spec loras[CVX_MAX_LORAS];
    char *lora_paths[CVX_MAX_LORAS];
    char lora_xxh64[CVX_MAX_LORAS][17];   /* "" until hashed */
    int lora_experts[CVX_MAX_LORAS];   /* cvx_model_params' (0 every transformer, 1 / 2 one expert) */
    int n_loras, lora_fuse;
    cvx_lora_set *lora;              /* attached to ctx once the transformer is loaded */
    int lora_expert;                 /* the loaded expert + 1 (the family sets it; 0: a model of one
                                      * transformer): the specs of expert 0 and of this one attach */
};

/* pipeline/adapters.c: keep the LoRA specs (cvx_model_open), attach them to the loaded transformer
 * (cvx_sample, after the family's sample_setup), drop them (cvx_model_close); the files' hashes
 * for the checkpoint fingerprint and generation_config.json. */
int cvx_model_set_loras(cvx_model *m, const cvx_model_params *p);
int cvx_model_attach_loras(cvx_model *m);
/* The set detached and built again on the transformer loaded now (lora_targets): what an expert
 * provider's acquire calls after mapping another expert (stage2/plan.h). */
int cvx_model_reattach_loras(cvx_model *m);
void cvx_model_drop_loras(cvx_model *m);
int cvx_model_lora_hash(cvx_model *m, int i);   /* m->lora_xxh64[i] filled (once); -1 + cvx_error */
int cvx_lora_fingerprint(cvx_model *m, void *fp);

/* pipeline/components.c: parts a family row composes. The weights at `path` (a file, or a
 * directory's .safetensors / .gguf files) fit in 85 % of the memory (else mmapped they would page
 * from disk for hours): 0, or -1 + one cvx_error line naming the sizes and `advice` ("a quantized
 * file (...)"); CVX_ALLOW_LARGE_WEIGHTS=1 lets anything through. */
int cvx_weights_fit_memory(const char *path, const char *advice);
/* <model dir>/<comp>/<file> into out (a component's file of a diffusers directory) */
void cvx_component_path(const cvx_model *m, const char *comp, const char *file, char *out, size_t n);
/* Expert `expert` of a two-expert model (0: diffusers' `transformer`, 1: `transformer_2`): its
 * config.json (the directory's <comp>/config.json) and its weights, the single file given for it
 * (--transformer / --transformer_2) or else the component directory. -1 + cvx_error when the
 * config is missing or only one of the experts was given as a file while the other is not in the
 * directory either (names the flag to add). */
int cvx_expert_paths(const cvx_model *m, int expert, char *cfg, size_t cn, char *weights, size_t wn);

/* generation_config.json updates (a json_object of keys; null values clear) -> path, directly
 * (set NULL) or into the output set; a set's second update of the same file renders over its
 * pending temp, so every key of a run is committed with the data it describes (pipeline/files.c). */
struct json_object;
int cvx_genconfig_put(cvx_outset *set, const char *path, struct json_object *upd);
/* A progress bar reporting to fn (NULL: the default bar). */
void cvx_progress_begin(cvx_progress *bar, const char *label, int total, cvx_progress_fn fn, void *user);

#endif
