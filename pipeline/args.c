/* The flag tables of stage 2 and stage 3 (args.h). CVX_PER_RANK marks what may differ between
 * MPI ranks; every other row is agreed on by the ranks before any work (pipeline/parallel.c). */
#include "pipeline/args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "pipeline/family.h"
#include "stage2/cache.h"
#include "stage2/preview.h"

static int parse_cache(const char *v, void *kind) { return cvx_cache_parse_kind(v, kind); }
static int parse_coeffs(const char *v, void *c) { return cvx_teacache_parse_coefficients(v, c); }
static int parse_preview(const char *v, void *mode) { return cvx_preview_parse_mode(v, mode); }

/* --timesteps T1,T2,...: numbers (the order and range are cvx_sample_resolve's checks) */
static int parse_timesteps(const char *v, void *dest) {
    cvx_stage2_args *a = dest;
    int n = 0;
    for (const char *p = v;; n++) {
        char *end;
        if (n == CVX_ARGS_MAX_TIMESTEPS) return cvx_error("--timesteps: at most %d values", CVX_ARGS_MAX_TIMESTEPS);
        a->timesteps[n] = strtod(p, &end);
        if (end == p || (*end && *end != ','))
            return cvx_error("--timesteps: '%s' is not a comma-separated list of numbers", v);
        if (!*end) break;
        p = end + 1;
    }
    a->sp.timesteps = a->timesteps, a->sp.n_timesteps = n + 1;
    return 0;
}
/* --image_cond_noise_scale S: a number >= 0, marked as given (the pipeline's 0.15 otherwise) */
static int parse_cond_noise(const char *v, void *dest) {
    cvx_sample_params *sp = dest;
    char *end;
    const double x = strtod(v, &end);
    if (end == v || *end || !(x >= 0 && x <= 1e6))
        return cvx_error("--image_cond_noise_scale: '%s' is not a number in [0, 1e6]", v);
    sp->image_cond_noise_scale = x, sp->image_cond_noise_set = 1;
    return 0;
}

static void copy_table(cvx_flag *dst, const cvx_flag *src, size_t n) {
    CVX_CHECK(n <= CVX_ARGS_MAX_FLAGS);
    memcpy(dst, src, n * sizeof *src);
}

const cvx_lora_flag cvx_lora_flags[CVX_LORA_FLAGS + 1] = {
    {"lora", 0, "",
     "  --lora FILE[:WEIGHT]        a LoRA adapter on the transformer (repeatable; weight default 1, combined as\n"
     "                              diffusers' set_adapters). Keys: diffusers/PEFT, original Wan / ComfyUI /\n"
     "                              Kijai (lora_down/up + alpha, diff_b), kohya lora_unet_; scaled as diffusers\n"
     "                              does (docs/usage.md \"LoRA\"). Applied beside the weights (y += s·B(A·x));\n"
     "                              recorded in generation_config.json and the checkpoint (--resume refuses another set)\n"
     "                              Wan 2.2 A14B: on both experts (re-attached at the switch)\n"},
    {"lora_high", 1, "high:",
     "  --lora_high FILE[:WEIGHT]   Wan 2.2 A14B: a LoRA on the high-noise expert (transformer) only\n"},
    {"lora_low", 2, "low:",
     "  --lora_low FILE[:WEIGHT]    Wan 2.2 A14B: a LoRA on the low-noise expert (transformer_2) only (the\n"
     "                              lightx2v Wan 2.2 distill LoRAs ship such a pair)\n"},
    {0},
};

/* One value of a LoRA flag row (dest: its cvx_lora_dest) appended to the list. */
static int parse_lora(const char *v, void *dest) {
    const struct cvx_lora_dest *d = dest;
    cvx_lora_list *l = d->list;
    if (l->n == CVX_MAX_LORAS) return cvx_error("--lora: at most %d adapters", CVX_MAX_LORAS);
    if (cvx_lora_spec_parse(v, l->path[l->n], sizeof l->path[l->n], &l->spec[l->n].weight)) return -1;
    l->spec[l->n].path = l->path[l->n];
    size_t k = strlen(l->joined);
    snprintf(l->joined + k, sizeof l->joined - k, "%s%s%s", k ? " " : "", d->row->tag, v);
    l->given[d->row - cvx_lora_flags] = l->joined;
    l->expert[l->n] = d->row->expert;
    l->n++;
    return 0;
}

void cvx_stage2_args_init(cvx_stage2_args *a, const char *default_dir) {
    memset(a, 0, sizeof *a);
    a->input_dir = default_dir;
    a->verbosity = 1, a->checkpoint_every = 1, a->sp_degree = 1;
    /* steps 0: 50, or as many as --timesteps gives (cvx_sample_resolve); guidance -1: the model's */
    a->sp = (cvx_sample_params){.num_inference_steps = 0, .guidance_scale = -1, .seed = 42,
                                .deepcache_start = CVX_DEEPCACHE_START, .deepcache_end = CVX_DEEPCACHE_END,
                                .deepcache_interval = CVX_DEEPCACHE_INTERVAL};
    a->out_dtype = CVX_F32;
    a->cache_kind = CVX_CACHE_NONE;
    static const cvx_flag_choice dtypes[] = {
        {"f32", CVX_F32}, {"float32", CVX_F32}, {"bf16", CVX_BF16}, {"bfloat16", CVX_BF16}, {0}};
    static const cvx_flag_choice attentions[] = {{"auto", CVX_ATTENTION_AUTO}, {"f32", CVX_ATTENTION_F32},
                                                 {"bf16", CVX_ATTENTION_BF16}, {"int8", CVX_ATTENTION_INT8},
                                                 {"int8pv", CVX_ATTENTION_INT8PV}, {0}};
    cvx_sample_params *sp = &a->sp;
    const cvx_flag flags[] = {   /* --help's order (stage2/usage.h) */
        CVX_FLAG_STR_("input_dir", &a->input_dir, CVX_PER_RANK), CVX_FLAG_STR_("output_dir", &a->output_dir, CVX_PER_RANK),
        CVX_FLAG_INT_("num_inference_steps", &sp->num_inference_steps, 1, 1000000),
        CVX_FLAG_NUM_("guidance_scale", &sp->guidance_scale, 0, 1e6),
        CVX_FLAG_U64_("seed", &sp->seed),
        CVX_FLAG_INT_("height", &sp->height, 1, 65536), CVX_FLAG_INT_("width", &sp->width, 1, 65536),
        CVX_FLAG_INT_("frames", &sp->frames, 1, 65536),
        CVX_FLAG_STR_("model_id", &a->model_id, CVX_PER_RANK), CVX_FLAG_STR_("model_dir", &a->model_dir, CVX_PER_RANK),
        CVX_FLAG_STR_("scheduler", &sp->scheduler), CVX_FLAG_INT_("threads", &a->threads, 0, 4096, CVX_PER_RANK),
        CVX_FLAG_BOOL_("resume", &a->resume, 1), CVX_FLAG_INT_("checkpoint_every", &a->checkpoint_every, 0, 1000000),
        CVX_FLAG_CHOICE_("output_dtype", &a->out_dtype, dtypes, "f32 or bf16"),
        CVX_FLAG_BOOL_("quiet", &a->verbosity, 0, CVX_PER_RANK), CVX_FLAG_BOOL_("verbose", &a->verbosity, 2, CVX_PER_RANK),
        CVX_FLAG_INT_("stop_after_steps", &a->stop_after, 0, 1000000), CVX_FLAG_HELP_(),
        CVX_FLAG_NUM_("strength", &sp->strength, 1e-9, 1), CVX_FLAG_BOOL_("cfg_parallel", &a->cfg_parallel, 1),
        CVX_FLAG_INT_("sp", &a->sp_degree, 1, 4096), CVX_FLAG_STR_("precision", &a->precision_arg),
        CVX_FLAG_CHOICE_("attention", &a->attention, attentions, "auto, f32, bf16, int8 or int8pv"),
        CVX_FLAG_STR_("noise_dtype", &sp->noise_dtype), CVX_FLAG_PARSE_("cache", parse_cache, &a->cache_kind, &sp->cache),
        CVX_FLAG_NUM_("cache_threshold", &a->cache_threshold, -1e6, 1e6, .given = &a->threshold_arg),
        CVX_FLAG_PARSE_("teacache_coefficients", parse_coeffs, a->teacache_coeffs, &a->coeffs_arg),
        CVX_FLAG_INT_("deepcache_start", &sp->deepcache_start, 0, 1000000),
        CVX_FLAG_INT_("deepcache_end", &sp->deepcache_end, 0, 1000000),
        CVX_FLAG_INT_("deepcache_interval", &sp->deepcache_interval, 1, 1000000),
        CVX_FLAG_INT_("preview_every", &sp->preview_every, 0, 1000000),
        CVX_FLAG_PARSE_("preview", parse_preview, &a->preview_mode, &sp->preview),
        CVX_FLAG_STR_("transformer", &a->wfile[0]), CVX_FLAG_STR_("text_encoder", &a->wfile[1]),
        CVX_FLAG_STR_("vae", &a->wfile[2]), CVX_FLAG_STR_("transformer_2", &a->wfile[3]),
        CVX_FLAG_BOOL_("lora_fuse", &a->lora_fuse, 1), CVX_FLAG_NUM_("flow_shift", &sp->flow_shift, 1e-6, 1e6),
        CVX_FLAG_BOOL_("int8", &a->int8, 1), CVX_FLAG_STR_("quantize", &a->quantize),
        CVX_FLAG_STR_("transformer_out", &a->transformer_out, CVX_PER_RANK), CVX_FLAG_BOOL_("pure", &a->pure, 1),
        CVX_FLAG_INT_("prompt_index", &a->prompt_index, 1, 9999),
        /* the family options parsed by their own rows (CVX_OPTION_OWN: a list, a value with a given-flag) */
        CVX_FLAG_PARSE_("timesteps", parse_timesteps, a, &a->timesteps_arg),
        CVX_FLAG_PARSE_("image_cond_noise_scale", parse_cond_noise, sp, &a->cond_noise_arg)};
    const size_t n = sizeof flags / sizeof flags[0];
    copy_table(a->flags, flags, n);
    cvx_flag *f = a->flags + n;
    for (int i = 0; cvx_lora_flags[i].name; i++, f++) {   /* then the LoRA flags, from their table */
        a->loras.dest[i] = (struct cvx_lora_dest){&a->loras, &cvx_lora_flags[i]};
        *f = (cvx_flag)CVX_FLAG_PARSE_(cvx_lora_flags[i].name, parse_lora, &a->loras.dest[i], &a->loras.given[i]);
    }
    /* then a row per family option, from its table */
    for (int i = 0; cvx_family_options[i].name; i++) {
        const cvx_family_option *o = &cvx_family_options[i];
        CVX_CHECK(i < CVX_ARGS_MAX_OPTIONS && f - a->flags < CVX_ARGS_MAX_FLAGS - 1);
        if (o->type == CVX_OPTION_OWN) continue;   /* its own row above */
        void *field = cvx_family_option_field(o, sp);
        *f = o->type == CVX_OPTION_BOOL ? (cvx_flag)CVX_FLAG_BOOL_(o->name, field, 1)
             : o->type == CVX_OPTION_INT
                 ? (cvx_flag)CVX_FLAG_INT_(o->name, &a->option_int[i], (long long)o->lo, (long long)o->hi)
                 : (cvx_flag)CVX_FLAG_NUM_(o->name, field, o->lo, o->hi);
        f++;
    }
    *f = (cvx_flag){0};
}

void cvx_stage2_args_finish(cvx_stage2_args *a) {
    for (int i = 0; cvx_family_options[i].name; i++)
        if (cvx_family_options[i].type == CVX_OPTION_INT)
            *(double *)cvx_family_option_field(&cvx_family_options[i], &a->sp) = a->option_int[i];
}

void cvx_stage2_options_help(FILE *f, const char *after) {
    for (const cvx_family_option *o = cvx_family_options; o->name; o++)
        if (o->help_after && !strcmp(o->help_after, after)) fputs(o->help, f);
}

void cvx_stage2_lora_help(FILE *f) {
    for (const cvx_lora_flag *l = cvx_lora_flags; l->name; l++) fputs(l->help, f);
}

void cvx_stage3_args_init(cvx_stage3_args *a, const char *default_dir) {
    memset(a, 0, sizeof *a);
    a->input_dir = default_dir;
    a->crf = 18, a->verbosity = 1;
    a->dp = (cvx_decode_params){.tiling = CVX_TILING_AUTO};
    static const cvx_flag_choice tilings[] = {
        {"auto", CVX_TILING_AUTO}, {"on", CVX_TILING_ON}, {"off", CVX_TILING_OFF}, {0}};
    /* the files are per rank (rank 0 writes; the latents and the VAE are compared by content) */
    const cvx_flag flags[] = {
        CVX_FLAG_STR_("input_dir", &a->input_dir, CVX_PER_RANK), CVX_FLAG_STR_("latents", &a->latents_arg, CVX_PER_RANK),
        CVX_FLAG_STR_("output_video", &a->output_arg, CVX_PER_RANK), CVX_FLAG_INT_("fps", &a->fps, 1, 240),
        CVX_FLAG_STR_("model_id", &a->model_id, CVX_PER_RANK), CVX_FLAG_STR_("model_dir", &a->model_dir, CVX_PER_RANK),
        CVX_FLAG_CHOICE_("tiling", &a->dp.tiling, tilings, "auto, on or off"),
        CVX_FLAG_INT_("tile_sample_min_height", &a->dp.tile_height, 8, 1 << 16),
        CVX_FLAG_INT_("tile_sample_min_width", &a->dp.tile_width, 8, 1 << 16), CVX_FLAG_INT_("crf", &a->crf, 0, 51),
        CVX_FLAG_STR_("png_dir", &a->png_dir, CVX_PER_RANK), CVX_FLAG_STR_("contact_sheet", &a->sheet, CVX_PER_RANK),
        CVX_FLAG_STR_("output_frames", &a->frames_out, CVX_PER_RANK), CVX_FLAG_BOOL_("overwrite", &a->overwrite, 1, CVX_PER_RANK),
        CVX_FLAG_INT_("threads", &a->threads, 0, 1024, CVX_PER_RANK),
        CVX_FLAG_BOOL_("quiet", &a->verbosity, 0, CVX_PER_RANK), CVX_FLAG_BOOL_("verbose", &a->verbosity, 2, CVX_PER_RANK),
        CVX_FLAG_HELP_(), CVX_FLAG_STR_("precision", &a->precision_arg), CVX_FLAG_STR_("transformer", &a->wfile[0]),
        CVX_FLAG_STR_("text_encoder", &a->wfile[1]), CVX_FLAG_STR_("vae", &a->wfile[2]),
        CVX_FLAG_INT_("prompt_index", &a->prompt_index, 1, 9999)};
    const size_t n = sizeof flags / sizeof flags[0];
    copy_table(a->flags, flags, n);
    cvx_flag *f = a->flags + n;   /* then a row per stage-3 family option, from its table */
    for (int i = 0; cvx_decode_options[i].name; i++, f++) {
        const cvx_decode_option *o = &cvx_decode_options[i];
        CVX_CHECK(o->type == CVX_OPTION_NUM && i < CVX_ARGS_MAX_OPTIONS && f - a->flags < CVX_ARGS_MAX_FLAGS - 1);
        *f = (cvx_flag)CVX_FLAG_NUM_(o->name, (char *)&a->dp + o->offset, o->lo, o->hi, .given = &a->option_given[i]);
    }
    *f = (cvx_flag){0};
}

void cvx_stage3_args_finish(cvx_stage3_args *a) {
    for (int i = 0; cvx_decode_options[i].name; i++)
        if (a->option_given[i]) a->dp.decode_set |= cvx_decode_options[i].set_bit;
}

void cvx_stage3_options_help(FILE *f, const char *after) {
    for (const cvx_decode_option *o = cvx_decode_options; o->name; o++)
        if (o->help_after && !strcmp(o->help_after, after)) fputs(o->help, f);
}
