/* The command lines of stage 2 and stage 3: every flag's destination and the one flag table
 * (common/cli.h) each program parses, in --help's order. In a library, not in main.c, so that a
 * test can walk the tables (tests/common_flags.c: every row the MPI ranks must agree on is in
 * the agreement, cvx_flags_each_agreed; the rows that may differ per rank are the listed ones). */
#ifndef CVX_PIPELINE_ARGS_H
#define CVX_PIPELINE_ARGS_H

#include <stdio.h>

#include "cli.h"
#include "lora.h"
#include "dtype.h"
#include "pipeline/cvx.h"
#include "stage2/cache.h"
#include "stage2/preview.h"

#define CVX_ARGS_MAX_FLAGS 64
#define CVX_ARGS_MAX_TIMESTEPS 1000
#define CVX_ARGS_MAX_OPTIONS 16   /* rows of cvx_family_options (pipeline/family.h) */

/* The LoRA flags of stage 2, an adapters table (one row each, pipeline/args.c): the flag, the
 * transformer it attaches to (0 every one; 1 the high-noise expert `transformer`, 2 the low-noise
 * `transformer_2`: Wan 2.2 A14B's, cvx_model_params.lora_experts, refused by a model of one
 * transformer in pipeline/adapters.c), its tag in the joined list ("high:") and its --help lines.
 * The flag rows and stage 2's --help iterate it. */
typedef struct {
    const char *name;   /* "lora_high"; NULL ends the table */
    int expert;
    const char *tag;    /* prefix of its values in cvx_lora_list.joined ("" for --lora) */
    const char *help;
} cvx_lora_flag;
#define CVX_LORA_FLAGS 3
extern const cvx_lora_flag cvx_lora_flags[CVX_LORA_FLAGS + 1];

/* --lora FILE[:WEIGHT] (and the other rows of cvx_lora_flags), repeatable: the adapters in the
 * order given; `given` joins every value given (what the MPI ranks agree on). */
typedef struct {
    cvx_lora_spec spec[CVX_MAX_LORAS];
    int expert[CVX_MAX_LORAS];   /* 0 --lora, 1 --lora_high, 2 --lora_low (cvx_model_params.lora_experts) */
    char path[CVX_MAX_LORAS][4096];
    int n;
    char joined[CVX_MAX_LORAS * 512];
    const char *given[CVX_LORA_FLAGS];   /* per row of cvx_lora_flags: `joined` once given */
    struct cvx_lora_dest {               /* the flag rows' destinations: the list and the row */
        void *list;
        const cvx_lora_flag *row;
    } dest[CVX_LORA_FLAGS];
} cvx_lora_list;

typedef struct {
    const char *input_dir, *output_dir, *model_id, *model_dir, *precision_arg, *coeffs_arg, *threshold_arg;
    cvx_lora_list loras;
    int lora_fuse;
    const char *quantize, *transformer_out;   /* --quantize TYPE --transformer_out FILE.gguf */
    int int8, pure;
    const char *wfile[4];   /* --transformer, --text_encoder, --vae, --transformer_2 single weight files */
    int threads, verbosity, resume, checkpoint_every, stop_after, cfg_parallel, sp_degree;
    int prompt_index;   /* --prompt_index N: stage1_embeddings_NNNN in, files numbered alike out (0: none) */
    cvx_sample_params sp;   /* the sampling flags (defaults: 50 steps, seed 42, the model's guidance);
                             * the family options' flags are made from their table, after the others */
    int option_int[CVX_ARGS_MAX_OPTIONS];   /* an integer family option as given (--fps), 0: not given */
    double timesteps[CVX_ARGS_MAX_TIMESTEPS];   /* --timesteps T1,T2,...: sp.timesteps points here */
    const char *timesteps_arg, *cond_noise_arg;   /* --timesteps, --image_cond_noise_scale as given */
    cvx_dtype out_dtype;
    double teacache_coeffs[5], cache_threshold;
    cvx_cache_kind cache_kind;
    cvx_preview_mode preview_mode;
    cvx_attention_mode attention;   /* --attention auto|f32|bf16|int8 */
    cvx_flag flags[CVX_ARGS_MAX_FLAGS];   /* {0}-terminated; rows point into this struct */
} cvx_stage2_args;
/* The defaults and the table (a points into itself: do not copy it after this). */
void cvx_stage2_args_init(cvx_stage2_args *a, const char *default_dir);
/* After cvx_flags_parse and the ranks' agreement on the flags: the integer family options given
 * (--fps) into their cvx_sample_params fields. */
void cvx_stage2_args_finish(cvx_stage2_args *a);
/* stage 2's --help lines of the family options placed after the flag `after` (their rows' help_after). */
void cvx_stage2_options_help(FILE *f, const char *after);
/* stage 2's --help lines of the LoRA flags (cvx_lora_flags). */
void cvx_stage2_lora_help(FILE *f);

typedef struct {
    const char *input_dir, *latents_arg, *output_arg, *model_id, *model_dir, *png_dir, *sheet, *frames_out,
        *precision_arg;
    const char *wfile[3];
    int fps, crf, threads, verbosity, overwrite;
    int prompt_index;   /* --prompt_index N: the files of stage 2's run with that number (0: none) */
    cvx_decode_params dp;   /* the stage-3 family options' flags are made from their table (decode_set: after
                             * cvx_stage3_args_finish) */
    const char *option_given[CVX_ARGS_MAX_OPTIONS];   /* a stage-3 family option as given (NULL: not given) */
    cvx_flag flags[CVX_ARGS_MAX_FLAGS];
} cvx_stage3_args;
void cvx_stage3_args_init(cvx_stage3_args *a, const char *default_dir);
/* After cvx_flags_parse: the stage-3 family options given into dp.decode_set (their rows' set_bit). */
void cvx_stage3_args_finish(cvx_stage3_args *a);
/* stage 3's --help lines of the family options placed after the flag `after` (cvx_decode_options). */
void cvx_stage3_options_help(FILE *f, const char *after);

#endif
