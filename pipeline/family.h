/* Model families: one row per family (CogVideoX, Wan 2.1, ...) in the one table cvx_families[]
 * (pipeline/family.c). A row binds the family's model code in the stage folders — its text
 * encoder and prompt preparation (stage1/), its denoiser (stage2/), its VAE (stage3/) — to the
 * pipeline's three calls. The generic pipeline files (encode.c, sample.c, decode.c, files.c,
 * conditioning.c) call only these; the family is picked once, by cvx_model_open, from
 * model_index.json's `_class_name` (docs/architecture.md "Add a model family"). */
#ifndef CVX_PIPELINE_FAMILY_H
#define CVX_PIPELINE_FAMILY_H

#include "pipeline/cvx.h"
#include "progress.h"
#include "stage2/denoiser.h"
#include "stage2/preview.h"
#include "stage2/sampler.h"
#include "stage2/scheduler.h"

struct cvx_component;   /* pipeline/components.h */
struct cvx_t5_style;

/* One tensor of the conditioning a family's stage 1 writes per branch (stage1_embeddings.safetensors:
 * "<name>" for the prompt, "negative_<name>" for the negative prompt), in the row's cond_slots.
 * The files are written, read and checked from this list (pipeline/files.c); the first slot is
 * prompt_embeds, F32 [1, L, D], in every family. */
typedef struct {
    const char *name;      /* "prompt_embeds", "prompt_embeds_mask", "prompt_embeds_2", ... */
    int is_mask;           /* an attention mask [1, L] (I64 in the file, 1 = a real token; 0/1 floats in
                            * cvx_embeddings, D = 1), else float embeddings [1, L, D] (F32 in the file,
                            * any float dtype read and widened) */
    /* the shape rule (cvx_cond_slot_dims): L and D are the model's, these say, in messages, what fixes
     * them (%d: the value) */
    const char *L_rule;    /* "sequence length must be the transformer's max_text_seq_length %d" */
    const char *D_rule;    /* "text_embed_dim %d of the transformer" */
    /* the length and width: a fixed value (> 0), else the int at this offset of the row's state
     * (m->fam: offsetof(cogvideox_state, tcfg.text_embed_dim), a config's key); a mask's D is 1 */
    int L, D;
    size_t L_at, D_at;
} cvx_cond_slot;
/* Slot `slot`'s expected L and D (D = 1 for a mask) for the model (the row's cond_slots). */
void cvx_cond_slot_dims(const cvx_model *m, int slot, int *L, int *D);

/* What cvx_sample needs from the family for one run (filled by sample_setup, freed by
 * cvx_sample_run_free). */
typedef struct {
    cvx_latent_shape shape;      /* the loop's latent shape (the family's layout) */
    cvx_loop_params loop;        /* the loop's parameters */
    /* the per-step plan (stage2/plan.h: expert, guidance, cache reset, timesteps of each step)
     * over `experts`; cvx_sample_run_defaults makes the one-expert plan over `den` */
    cvx_sample_plan plan;
    cvx_expert_provider experts;
    cvx_denoiser den;            /* the transformer behind the denoiser interface (one-expert families) */
    /* the branches' conditioning the denoiser gets (in.cond): [0] unconditional (negative), [1]
     * conditional; cvx_sample_run_defaults points them at text_cond (slot 0 of the embeddings, the
     * I2V channels and image tokens); a family with its own conditioning type keeps it in fam_run */
    const void *branch[2];
    cvx_text_cond text_cond[2];
    void *fam_run;               /* the family's own per-run state (several experts, its conditioning) */
    void (*fam_run_free)(void *fam_run);
    float *init;                 /* I2V / V2V: initial latents (NULL: randn from the seed in the loop) */
    float *cond;                 /* I2V: the extra input channels (loop.cond points here) */
    float *image_tokens;         /* I2V (Wan): the image embeddings the transformer attends to */
    cvx_generator gen;           /* with init: the generator after the draws that made it */
    cvx_latent_rgb preview_rgb;  /* the family's latent → RGB preview table */
} cvx_sample_run;
void cvx_sample_run_free(cvx_sample_run *r);
/* The defaults of what a sample_setup leaves unset (a family calls it at its end, then adjusts):
 * the plan (one expert, `den`; the request's guidance, use_dynamic_cfg included, on every step
 * from loop.t_start) and the branches (text_cond from the embeddings' first slot, loop.cond as
 * the channels, loop.image_tokens). */
void cvx_sample_run_defaults(cvx_sample_run *r, const cvx_embeddings *emb);

/* A family option: a field of cvx_sample_params that only some families use, one row of the one
 * table cvx_family_options[] (pipeline/family.c). The row is the option's single source: the
 * stage-2 flag (pipeline/args.c), its --help lines (stage2/usage.h), the sampling fingerprint and
 * the latents file's metadata and generation_config.json (pipeline/files.c) iterate the table, and
 * cvx_family_check_options refuses a set option that the model's row (cvx_family.options) does not
 * list. Adding a family option: its field in cvx_sample_params and its row here.
 *
 * Where a file records it: right after the generic key named by *_after (the row's place among
 * the generic lines, so that files keep their key order), NULL = not recorded there. An anchor
 * that a file writes only sometimes (teacache_coefficients: with a cache) records the option only
 * then. */
typedef enum {
    CVX_OPTION_BOOL,   /* an int field (0/1); the flag takes no value and stores 1 */
    CVX_OPTION_INT,    /* a double field; the flag takes an integer in [lo, hi] */
    CVX_OPTION_NUM,    /* a double field; the flag takes a finite number in [lo, hi] */
    CVX_OPTION_OWN,    /* parsed by its own flag row in pipeline/args.c and recorded by its own lines in
                        * files.c (a list: --timesteps; a value whose 0 is meaningful, with a given-flag:
                        * --image_cond_noise_scale); the row gives is_set and the refusal */
} cvx_option_type;

typedef struct {
    const char *name;        /* the flag without "--" ("use_dynamic_cfg"); NULL ends the table */
    cvx_option_type type;
    size_t offset;           /* offsetof(cvx_sample_params, field) */
    double lo, hi;           /* INT, NUM: the flag's accepted range */
    int set_above_zero;      /* set when the value is > 0, else when != 0; unset (0) is "off" or
                              * "the model's default" */
    const char *help;        /* its lines in stage 2's --help */
    const char *key;         /* its key in the fingerprint, the latents metadata, generation_config.json */
    int record_unset;        /* recorded when unset too (BOOL: "false"); else only when set */
    const char *help_after, *fp_after, *meta_after, *genconfig_after;   /* see above */
    const char *refusal;     /* the error line for a model whose row does not list it; NULL: every
                              * family takes it (the ones without a use ignore it) */
    int (*is_set)(const cvx_sample_params *r);   /* CVX_OPTION_OWN: the request sets it */
} cvx_family_option;
extern const cvx_family_option cvx_family_options[];   /* terminated by a NULL name */

/* The option's value in r as a double (BOOL: 0 or 1), whether it is set, and where it lives. */
double cvx_family_option_value(const cvx_family_option *o, const cvx_sample_params *r);
int cvx_family_option_is_set(const cvx_family_option *o, const cvx_sample_params *r);
void *cvx_family_option_field(const cvx_family_option *o, cvx_sample_params *r);

/* A stage-3 family option: a field of cvx_decode_params that only some families' VAEs use, one row of
 * the one table cvx_decode_options[] (pipeline/family.c), its single source: stage 3's flag and
 * the given-bit it sets (pipeline/args.c), its --help lines (stage3/usage.h) and the refusal
 * (cvx_decode_check and cvx_decode refuse a given option that the model's row, its
 * decode_options, does not list). Adding one: its field in cvx_decode_params and its row. */
typedef struct {
    const char *name;        /* the flag without "--" ("decode_timestep"); NULL ends the table */
    cvx_option_type type;    /* CVX_OPTION_NUM: a double field, the flag takes a finite number in [lo, hi] */
    size_t offset;           /* offsetof(cvx_decode_params, field) */
    double lo, hi;
    int set_bit;             /* the bit of cvx_decode_params.decode_set that marks it given (not given:
                              * the model's value) */
    const char *help;        /* its lines in stage 3's --help, after the flag help_after's */
    const char *help_after;
    const char *key;         /* its key where a file records it; NULL: none does (stage 3 writes the video) */
    const char *refusal;     /* the error line for a model whose row does not list it */
} cvx_decode_option;
extern const cvx_decode_option cvx_decode_options[];   /* terminated by a NULL name */

/* A row's mode rule (check_mode as data, cvx_check_model_mode): a model of kind `kind` (the row's
 * mode_kind; CVX_KIND_ANY: every kind) refuses the modes in `modes` (bits 1 << cvx_mode) with the
 * error line `refusal`, a printf format taking the model directory (%s), then the two numbers
 * mode_kind gave (%d, %d), as many of them, in that order, as it names. NULL refusal ends the table. */
#define CVX_KIND_ANY (-2)
typedef struct {
    int kind;
    unsigned modes;
    const char *refusal;
} cvx_mode_rule;

typedef struct cvx_family {
    const char *name;              /* "CogVideoX" */
    const char *const *classes;    /* the model_index.json `_class_name`s it serves, NULL-terminated */
    /* a directory without model_index.json (components only) is the family's when a component's
     * config.json names one of these classes ("transformer/WanTransformer3DModel": the component
     * folder, then its `_class_name` or transformers' `architectures[0]`), NULL-terminated, the
     * transformer first (cvx_family_for: what decides between families) */
    const char *const *component_classes;

    /* ---- the row's state (m->fam), made by cvx_family_open and freed by cvx_family_close ---- */
    size_t state_size;             /* sizeof the family's state struct */
    /* the configs read into the state: transformer/config.json when present (m->has_denoiser_config),
     * vae/config.json (m->has_vae_config; path NULL when absent: the defaults, or nothing). -1 + cvx_error */
    int (*read_denoiser_config)(const char *path, void *state);
    int (*read_vae_config)(const char *path, void *state);
    /* the rest of open: the family's other configs and checks, then m->info (its defaults: size,
     * frames, fps, text length, guidance). -1 + cvx_error */
    int (*fill_info)(cvx_model *m);
    /* the components it maps on first use (pipeline/components.h: cvx_component rows, NULL-comp
     * terminated), unmapped at close; the one with lora_targets is the transformer LoRA targets */
    const struct cvx_component *parts;
    /* a T5-family text encoder (pipeline/components.h): its style and its cvx_t5_encoder's offset in
     * the state (text_dim, encode_texts: cvx_family_t5_text_dim / cvx_family_t5_encode_texts) */
    const struct cvx_t5_style *t5_style;
    size_t t5_slot;
    void (*free_more)(cvx_model *m);   /* optional: what the state holds beyond parts and the T5 encoder */

    /* ---- stage 1 ---- */
    /* the conditioning tensors per branch and their shapes, NULL-name-terminated (the first:
     * prompt_embeds) */
    const cvx_cond_slot *cond_slots;
    int (*text_dim)(cvx_model *m);   /* the embeddings' width (maps the text encoder); -1 + cvx_error */
    /* n texts -> out [n, L, D]: prompt preparation, tokenizer, text encoder (progress: `bar`) */
    int (*encode_texts)(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                        cvx_progress_fn progress, void *user, float *out);
    /* optional (NULL: the family has prompt_embeds only): n texts -> the further cond_slots in
     * order, out->t[k] = {slot name, prompt [n, L_k, D_k] (a mask: 0/1 floats, D 1), NULL, L_k, D_k,
     * is_mask}, out->n set (stage 1 writes text i's rows beside text 0's, the negative prompt's) */
    int (*encode_more)(cvx_model *m, const char *const *texts, const char *const *labels, int n,
                       cvx_progress_fn progress, void *user, cvx_cond_set *out);
    /* an image (I2V) or video (V2V) -> the conditioning stage 2 reads */
    int (*encode_conditioning)(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                               cvx_conditioning *out);
    /* the modes the model takes: the first rule of mode_rules for its kind that names the mode
     * refuses it (NULL: every mode); mode_kind (NULL: kind 0) gives the kind from the model's
     * configs and the rule's two numbers, or -1: no rule applies (no transformer config: the call
     * that needs the transformer reports it) */
    const cvx_mode_rule *mode_rules;
    int (*mode_kind)(cvx_model *m, int arg[2]);
    /* encode_conditioning takes conditions (CVX_MODE_COND, stage 1 --condition: LTX-Video) */
    int takes_conditions;

    /* ---- stage 2 ---- */
    /* the family options (cvx_family_options) it takes, as their flags ("--use_dynamic_cfg"),
     * NULL-terminated */
    const char *const *options;
    /* the checks cvx_sample_resolve runs before any work (sequence-parallel split, ...) */
    int (*check_sample)(cvx_model *m, const cvx_sample_params *resolved);
    /* set up one run: latent shape, the family's loop parameters (run->loop comes with the request,
     * the noise dtype, cache kind and progress filled in: the family adds conditioning, initial
     * latents, t_start and TeaCache coefficients), the denoiser(s), the branches' conditioning and
     * the step plan (cvx_sample_run_defaults, then the family's changes: TeaCache window, experts)
     * (the scheduler `s` is fresh, its timesteps set for resolved->num_inference_steps) */
    int (*sample_setup)(cvx_model *m, const cvx_sample_params *resolved, const cvx_embeddings *emb, cvx_scheduler *s,
                        cvx_sample_run *run);
    /* the loaded transformer's linear layers for LoRA adapters (common/lora.h; *out allocated):
     * the count, or -1 + cvx_error */
    int (*lora_targets)(cvx_model *m, cvx_lora_target **out);
    /* the loop's latents -> the stage-2 file layout [1, C, T, h, w] (into out->data, allocated) */
    void (*latents_out)(cvx_model *m, const cvx_latent_shape *sh, const float *latents, cvx_latents *out);

    /* ---- stage 3 ---- */
    int (*decode)(cvx_model *m, const cvx_decode_params *p, const float *z, int B, int C, int T, int h, int w,
                  const char *label, cvx_progress_fn progress, void *user, cvx_frames *out);
    /* optional (NULL: none): the decode's checks that need no weights, before the long work
     * (cvx_decode_check; CogVideoX: tile sizes that cannot give the frame size) */
    int (*check_decode)(cvx_model *m, const cvx_decode_params *p, int h, int w);
    /* the decode draws noise continuing the sampler's generator (LTX-Video 0.9.5+): stage 2 hands
     * it over (cvx_latents.generator, the latents file's 'generator_state') */
    int decode_uses_generator;
    /* the stage-3 options (cvx_decode_options) it takes, as their flags ("--decode_timestep"),
     * NULL-terminated (NULL: none) */
    const char *const *decode_options;

    /* ---- making a GGUF of the transformer (stage2/quantize.h; NULL: not supported) ---- */
    const struct cvx_gguf_rules *gguf_rules;
} cvx_family;

/* Every option of the table set in r is one the row takes: 0, or -1 + the option's refusal. */
int cvx_family_check_options(const cvx_family *f, const cvx_sample_params *r);

/* Every stage-3 option of the table given in p (its decode_set bit) is one the row takes: 0, or -1
 * + the option's refusal. */
int cvx_family_check_decode_options(const cvx_family *f, const cvx_decode_params *p);

/* The generic slots of a row (pipeline/row.c). open: the state (state_size) with the configs
 * read (read_*_config, fill_info), -1 + cvx_error (the caller closes); close: the T5 encoder, the
 * parts and free_more's, then the state. */
int cvx_family_open(cvx_model *m);
void cvx_family_close(cvx_model *m);
/* text_dim and encode_texts of a row with a T5-family text encoder (t5_style, t5_slot) */
int cvx_family_t5_text_dim(cvx_model *m);
int cvx_family_t5_encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                               cvx_progress_fn progress, void *user, float *out);
/* lora_targets of a row whose transformer is the part with lora_targets: mapped, then asked */
int cvx_family_lora_targets(cvx_model *m, cvx_lora_target **out);

/* The table (pipeline/family.c), NULL-terminated. */
extern const cvx_family *const cvx_families[];
extern const cvx_family cvx_family_cogvideox, cvx_family_wan, cvx_family_hunyuan15, cvx_family_ltx;

/* The family of a model directory: model_index.json's `_class_name` (its value into cls, "" when
 * the file is absent), else, from its components' configs, the family of its transformer, else
 * of a component one row alone lists, else of a component several rows share (a T5 text encoder
 * alone, which only stage 1 can use: the first row listing it, named with the candidates in a
 * --verbose line). No default family: NULL + one cvx_error naming the directory or class and the
 * supported ones. */
const cvx_family *cvx_family_for(const char *dir, char *cls, size_t cls_n);

#endif
