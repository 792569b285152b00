/* The model handle's insides, shared by the pipeline's files (not part of the API). */
#ifndef CVX_PIPELINE_INTERNAL_H
#define CVX_PIPELINE_INTERNAL_H

#include "pipeline/cogvideox.h"
#include "model.h"
#include "progress.h"
#include "stage1/t5.h"
#include "stage1/tokenizer.h"
#include "stage2/transformer.h"
#include "stage3/vae.h"
#include "stage3/vae_encoder.h"

struct cvx_model {
    cvx_model_info info;
    char name[4096], dir[4096];
    cvx_ctx *ctx;
    /* configs, read once by cvx_model_open (has_*: the component's config was found) */
    int has_transformer, has_vae;
    cogvideox_config tcfg;
    vae_decoder vcfg;                /* config fields only */
    char scheduler_name[32];
    /* components, loaded on first use */
    int t5_loaded, vae_loaded;
    t5_tokenizer tok;
    t5_model t5;
    cogvideox_transformer *transformer;
    vae_decoder vae;
    int enc_loaded;                  /* the VAE encoder (I2V / V2V conditioning), on first use */
    vae_encoder enc;
};

int cvx_model_load_t5(cvx_model *m);
int cvx_model_load_transformer(cvx_model *m);
int cvx_model_load_vae(cvx_model *m);
int cvx_model_load_vae_encoder(cvx_model *m);   /* pipeline/conditioning.c */
/* generation_config.json updates (a json_object of keys; null values clear) -> path, directly
 * (set NULL) or into the output set; a set's second update of the same file renders over its
 * pending temp, so every key of a run is committed with the data it describes (pipeline/files.c). */
struct json_object;
int cvx_genconfig_put(cvx_outset *set, const char *path, struct json_object *upd);
/* A progress bar reporting to fn (NULL: the default bar). */
void cvx_progress_begin(cvx_progress *bar, const char *label, int total, cvx_progress_fn fn, void *user);

#endif
