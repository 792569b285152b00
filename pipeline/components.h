/* Parts a family row composes instead of copying (pipeline/components.c, component_t5.c):
 * locating a component's weights (its diffusers directory, or a single file a flag gives) with the
 * memory check, a T5-family text encoder (T5 v1.1 for CogVideoX and LTX-Video, UMT5 for Wan) with
 * the batched encoding of n texts, and the decode skeleton (latents checked, one decode per batch
 * item, frames checked). Not part of the API. */
#ifndef CVX_PIPELINE_COMPONENTS_H
#define CVX_PIPELINE_COMPONENTS_H

#include "pipeline/internal.h"
#include "stage1/clip_vision.h"
#include "stage1/t5.h"
#include "stage1/t5_tokenizer.h"

/* ---- a component's weights ---- */
typedef struct {
    const char *file;    /* the single weights file (the flag's value), or NULL: the directory */
    char dir[4200];      /* <model dir>/<comp> (checked to exist when file is NULL) */
    char cfg[4300];      /* <dir>/config.json; with a single file "" when absent and not required */
} cvx_component_src;
/* Where `comp`'s weights are: `file` ("" or NULL: none) given by `flag` ("--transformer"), with
 * comp/config.json beside it (need_cfg: its absence is an error naming the flag), else the
 * directory <model>/<comp>/ with its config.json. advice: the memory check's way out
 * (cvx_weights_fit_memory; NULL: no check). 0, or -1 + one cvx_error line. */
int cvx_component_find(const cvx_model *m, const char *comp, const char *flag, const char *file, int need_cfg,
                       const char *advice, cvx_component_src *out);

/* A row's table of the components it maps from their directory or a flag's single file, one row each:
 * the generic code finds the weights (cvx_component_find: the memory check once), maps them into
 * the row's state (m->fam) at `slot` once, and frees them at close. Terminated by a NULL comp. */
#define CVX_NO_FILE ((size_t)-1)
typedef struct cvx_component {
    const char *comp, *flag;   /* the folder and the flag of its single file: "vae", "--vae" */
    size_t file;               /* offsetof(cvx_model, vae_file): the flag's value; CVX_NO_FILE: the folder only */
    int need_cfg;              /* a single file needs <comp>/config.json beside it (else src->cfg "": the defaults) */
    const char *advice;        /* the memory check's way out (NULL: no check) */
    void *(*load)(const cvx_component_src *src, cvx_ctx *ctx);   /* NULL + cvx_error */
    void (*unload)(void *component);
    size_t slot;               /* offsetof(the row's state, its pointer) */
    /* the transformer: its linear layers for LoRA adapters (common/lora.h; cvx_family_lora_targets) */
    int (*lora_targets)(void *component, cvx_lora_target **out);
} cvx_component;
/* Component `comp` of the table mapped (later calls: 0 at once). -1 + cvx_error */
int cvx_component_load(cvx_model *m, const cvx_component *table, const char *comp);
/* The mapped component `comp` (NULL: not mapped). */
void *cvx_component_get(const cvx_model *m, const cvx_component *table, const char *comp);
/* Every mapped component of the table unmapped (the row's close). */
void cvx_components_free(cvx_model *m, const cvx_component *table);

/* ---- a T5-family text encoder: tokenizer/spiece.model + text_encoder/ (or --text_encoder's
 * single file with text_encoder/config.json) ---- */
typedef struct cvx_t5_style {
    const char *name;                            /* "T5", "UMT5": the log line, the bar ("T5 layers") */
    int (*clean)(const char *in, char **out);    /* prompt preparation (Wan's prompt_clean); NULL: as is */
    /* 1: UMT5 with the attention mask, rows past each prompt's length exact zeros
     * (umt5_prompt_embeds: WanPipeline); 0: the encoder over the padding too, no mask (t5_encode:
     * CogVideoXPipeline, LTXPipeline); 2: the encoder with the attention mask, every row as it comes
     * out (umt5_encode: LTXConditionPipeline's Mochi-style _get_t5_prompt_embeds) */
    int masked;
    int (*masked_fn)(const cvx_model *m);   /* optional: `masked` decided per model/run (LTX: by pipeline class) */
} cvx_t5_style;
typedef struct {
    int loaded;
    t5_tokenizer tok;
    t5_model t5;
} cvx_t5_encoder;
/* Maps the encoder once (later calls return 0 at once). -1 + cvx_error */
int cvx_t5_load(cvx_t5_encoder *e, cvx_model *m, const cvx_t5_style *st);
void cvx_t5_free(cvx_t5_encoder *e);
/* One text -> ids [L], mask [L] (padding to L, truncation; the length warning names `label`). */
int cvx_t5_tokenize(const cvx_t5_encoder *e, const char *text, const char *label, int L, int64_t *ids, int64_t *mask);
/* The tokenizer's attention masks of n texts (after the style's prompt cleaning) as the cond tensor
 * `name` [n, L] (0/1 floats; LTX-Video's prompt_attention_mask): *out set. Loads the encoder first. */
int cvx_t5_mask_tensor(cvx_t5_encoder *e, cvx_model *m, const cvx_t5_style *st, const char *name,
                       const char *const *texts, const char *const *labels, int n, int L, cvx_cond_tensor *out);
/* n texts -> out [n, L, d_model] in batches of a few sequences (progress: "<name> layers"); a
 * non-finite row is an error naming the text's label. Loads the encoder first. */
int cvx_t5_encode_texts(cvx_t5_encoder *e, cvx_model *m, const cvx_t5_style *st, const char *const *texts,
                        const char *const *labels, int n, int L, cvx_progress_fn progress, void *user, float *out);

/* ---- stage 2 ---- */
/* A row's latents_out when the loop's layout is the file's [1, C, T, h, w]: a copy. */
void cvx_latents_out_copy(cvx_model *m, const cvx_latent_shape *sh, const float *latents, cvx_latents *out);

/* ---- the decode skeleton ---- */
/* The latents a decode gets: C = the VAE's `key` (latent_channels, z_dim) `expect_C`, a non-empty
 * shape, finite values. vae: "the Wan VAE" (messages: "<vae> of <model dir> expects <key> = N"). */
int cvx_decode_check_latents(const cvx_model *m, const char *vae, const char *key, int expect_C, const float *z,
                             int B, int C, int T, int h, int w, const char *label);
/* --tiling as stage 3's VAE tiling plans take it: 1 on, -1 off, 0 auto */
static inline int cvx_tiling_mode(const cvx_decode_params *p) {
    return p->tiling == CVX_TILING_ON ? 1 : p->tiling == CVX_TILING_OFF ? -1 : 0;
}
/* One batch item: z [C, T, h, w] -> *frames [3, *To, *Ho, *Wo] (allocated; NULL on a rank that holds
 * none), the bar advanced. 0, or -1 + cvx_error. */
typedef int (*cvx_decode_item_fn)(void *user, const float *z, cvx_progress *bar, float **frames, int *To, int *Ho,
                                  int *Wo);
typedef struct {
    cvx_decode_item_fn item;
    void *user;
    int steps_per_item;   /* the bar's units per item */
    int all_ranks;        /* every rank decodes (tiles spread over the ranks); 0: rank 0 alone */
    int To, Ho, Wo;       /* the frames' size (an item may report another: the one rank 0 got is kept) */
    int tiled;
} cvx_decode_plan;
/* out: per batch item the plan's decode (rank 0 holds the frames), then every frame finite (the
 * error names the label and the item). out freed on error. */
int cvx_decode_items(const cvx_decode_params *p, const cvx_decode_plan *plan, const float *z, int B, int C, int T,
                     int h, int w, const char *label, cvx_progress_fn progress, void *user, cvx_frames *out);

/* ---- an image encoder (CLIP for Wan I2V, SigLIP for HunyuanVideo-1.5 I2V): image_encoder/ and the
 * preprocessor_config.json in the folder `processor` ("image_processor", "feature_extractor") ----
 * Maps it once (*enc set: 0 at once). -1 + cvx_error */
int cvx_image_encoder_load(cvx_model *m, const char *processor, clip_image_processor *proc, clip_vision **enc);

#endif
