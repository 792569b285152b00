/* The family table and the choice of a model's family (pipeline/family.h). */
#include "pipeline/internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fileio.h"

/* Every family, NULL-terminated: adding one is its file and its line here. */
const cvx_family *const cvx_families[] = {&cvx_family_cogvideox, &cvx_family_wan, &cvx_family_hunyuan15, &cvx_family_ltx,
                                          NULL};

static int timesteps_set(const cvx_sample_params *r) { return r->n_timesteps != 0; }
static int cond_noise_set(const cvx_sample_params *r) { return r->image_cond_noise_set; }

#define OPT(field) offsetof(cvx_sample_params, field)
/* Each option's row (family.h): its order is each file's order of the options after one anchor. */
const cvx_family_option cvx_family_options[] = {
    {"guidance_scale_2", CVX_OPTION_NUM, OPT(guidance_scale_2), 0, 1e6, .set_above_zero = 1,
     .help = "  --guidance_scale_2 G        Wan 2.2 A14B: the low-noise expert's guidance (transformer_2, the steps\n"
             "                              below boundary_ratio; default the model's: 3 T2V, 3.5 I2V); CFG is on iff\n"
             "                              --guidance_scale > 1, as diffusers\n",
     .key = "guidance_scale_2", .help_after = "guidance_scale", .fp_after = "guidance_scale",
     .genconfig_after = "guidance_scale",
     .refusal = "--guidance_scale_2 is Wan 2.2 A14B's (the low-noise expert's guidance)"},
    {"use_dynamic_cfg", CVX_OPTION_BOOL, OPT(use_dynamic_cfg),
     .help = "  --use_dynamic_cfg           cosine schedule of the guidance scale (recommended with dpm)\n",
     .key = "use_dynamic_cfg", .record_unset = 1, .help_after = "guidance_scale", .fp_after = "guidance_scale",
     .meta_after = "dtype_info", .genconfig_after = "fps",
     .refusal = "--use_dynamic_cfg is CogVideoX's (WanPipeline has no dynamic guidance)"},
    {"guidance_rescale", CVX_OPTION_NUM, OPT(guidance_rescale), 0, 1,
     .help = "  --guidance_rescale R        LTX-Video, HunyuanVideo-1.5 (over its guider config's): rescale the\n"
             "                              guided prediction toward the conditional one's std (diffusers\n"
             "                              guidance_rescale, in [0, 1]; default 0)\n",
     .key = "guidance_rescale", .help_after = "guidance_scale", .fp_after = "scheduler",
     .refusal = "--guidance_rescale is LTX-Video's and HunyuanVideo-1.5's (this pipeline has no guidance rescale)"},
    /* every family takes --fps (stage 3's frame rate, generation_config.json's generic "fps"); LTX-Video's
     * rotary positions use it as their frame_rate */
    {"fps", CVX_OPTION_INT, OPT(frame_rate), 1, 1000, .set_above_zero = 1,
     .help = "  --fps N                     recorded for stage3 (default: the model's: 8 for CogVideoX,\n"
             "                              16 for CogVideoX1.5 and Wan 2.1; LTX-Video 25, also its rotary\n"
             "                              positions' frame_rate)\n",
     .key = "frame_rate", .help_after = "strength", .fp_after = "scheduler"},
    {"teacache_ret_steps", CVX_OPTION_BOOL, OPT(teacache_ret_steps),
     .help = "  --teacache_ret_steps        Wan: TeaCache4Wan2.1's use_ret_steps variant (compares\n"
             "                              timestep_proj; the first 5 steps always computed)\n",
     .key = "teacache_ret_steps", .help_after = "teacache_coefficients", .fp_after = "teacache_coefficients",
     .genconfig_after = "teacache_coefficients",
     .refusal = "--teacache_ret_steps: TeaCache publishes its use_ret_steps variant for Wan 2.1 only"},
    /* parsed and recorded by their own code (a list; a value whose 0 is meaningful): the row holds the
     * help, the set rule and the refusal */
    {"timesteps", CVX_OPTION_OWN, .is_set = timesteps_set,
     .refusal = "--timesteps: this model's scheduler takes no explicit timesteps (LTX-Video's does)"},
    {"image_cond_noise_scale", CVX_OPTION_OWN, .is_set = cond_noise_set,
     .refusal = "--image_cond_noise_scale is LTX-Video's condition pipeline's (give stage 1 --condition)"},
    {0},
};
#undef OPT

#define DOPT(field) offsetof(cvx_decode_params, field)
/* Stage 3's rows (family.h): LTX-Video 0.9.5+'s timestep-conditioned VAE */
const cvx_decode_option cvx_decode_options[] = {
    {"decode_timestep", CVX_OPTION_NUM, DOPT(decode_timestep), 0, 1, .set_bit = 1,
     .help = "  --decode_timestep T          LTX-Video 0.9.5+ VAE: the decoder's timestep (default 0.05)\n",
     .help_after = "fps",
     .refusal = "--decode_timestep is LTX-Video's (its timestep-conditioned VAE's decode timestep)"},
    {"decode_noise_scale", CVX_OPTION_NUM, DOPT(decode_noise_scale), 0, 1, .set_bit = 2,
     .help = "  --decode_noise_scale S       LTX-Video 0.9.5+ VAE: decodes (1-S)·z + S·noise, the noise drawn\n"
             "                               from stage 2's generator after the loop (default 0.025; with\n"
             "                               --decode_timestep alone: T)\n",
     .help_after = "fps",
     .refusal = "--decode_noise_scale is LTX-Video's (its timestep-conditioned VAE's decode noise)"},
    {0},
};
#undef DOPT

void *cvx_family_option_field(const cvx_family_option *o, cvx_sample_params *r) { return (char *)r + o->offset; }

double cvx_family_option_value(const cvx_family_option *o, const cvx_sample_params *r) {
    const void *v = (const char *)r + o->offset;
    return o->type == CVX_OPTION_BOOL ? *(const int *)v : *(const double *)v;
}

int cvx_family_option_is_set(const cvx_family_option *o, const cvx_sample_params *r) {
    if (o->type == CVX_OPTION_OWN) return o->is_set(r);
    const double v = cvx_family_option_value(o, r);
    return o->set_above_zero ? v > 0 : v != 0;
}

/* Is `name` ("decode_timestep") among a row's flags ("--decode_timestep", NULL-terminated)? */
static int row_lists(const char *const *flags, const char *name) {
    for (int k = 0; flags && flags[k]; k++)
        if (!strcmp(flags[k] + 2, name)) return 1;
    return 0;
}

int cvx_family_check_options(const cvx_family *f, const cvx_sample_params *r) {
    for (const cvx_family_option *o = cvx_family_options; o->name; o++) {
        if (o->refusal && cvx_family_option_is_set(o, r) && !row_lists(f->options, o->name))
            return cvx_error("%s", o->refusal);
    }
    return 0;
}

int cvx_family_check_decode_options(const cvx_family *f, const cvx_decode_params *p) {
    for (const cvx_decode_option *o = cvx_decode_options; o->name; o++)
        if ((p->decode_set & o->set_bit) && !row_lists(f->decode_options, o->name)) return cvx_error("%s", o->refusal);
    return 0;
}

/* The class a component's config.json names: diffusers' `_class_name`, else transformers'
 * `architectures[0]`; "" when the file is absent or names none. */
static void component_class(const char *dir, const char *component, char *cls, size_t n) {
    char path[4200];
    cvx_config c;
    const char *name = NULL;
    int k = 0;
    cls[0] = 0;
    snprintf(path, sizeof path, "%s/%s/config.json", dir, component);
    if (!cvx_is_file(path) || cvx_config_load(&c, path)) {
        cvx_clear_error();
        return;
    }
    if (cvx_cfg_str(&c, "_class_name", &name) && (cvx_clear_error(), cvx_cfg_str_array(&c, "architectures", &name, 1, &k) || k < 1))
        name = NULL;
    cvx_clear_error();
    if (name) snprintf(cls, n, "%s", name);
    cvx_config_free(&c);
}

/* The directory's component of a component_classes entry ("vae/AutoencoderKLWan"): its config
 * names that class. */
static int has_component(const char *dir, const char *entry) {
    const char *slash = strchr(entry, '/');
    char component[64], cls[256];
    CVX_CHECK(slash && (size_t)(slash - entry) < sizeof component);
    snprintf(component, sizeof component, "%.*s", (int)(slash - entry), entry);
    component_class(dir, component, cls, sizeof cls);
    return cls[0] && !strcmp(cls, slash + 1);
}

/* The rows that list `entry` (a "component/Class" some row names), as "A and B" into names;
 * their count. */
static int rows_listing(const char *entry, const cvx_family **first, char *names, size_t n) {
    int count = 0;
    names[0] = 0;
    for (int f = 0; cvx_families[f]; f++)
        for (int k = 0; cvx_families[f]->component_classes[k]; k++)
            if (!strcmp(cvx_families[f]->component_classes[k], entry)) {
                if (!count++) *first = cvx_families[f];
                snprintf(names + strlen(names), n - strlen(names), "%s%s", count > 1 ? " and " : "",
                         cvx_families[f]->name);
                break;
            }
    return count;
}

/* A directory without model_index.json (components only) is the family of its transformer (each
 * row's first component_classes entry); without a transformer config, of a component that one row
 * alone lists (the rows' entries by position, a row before the rows after it). A directory whose
 * components several rows share (a T5 text encoder alone: CogVideoX's and LTX-Video's, whose
 * stage 1 differ in text length and mask) serves stage 1 only (stage 2 and 3 need the transformer
 * or the VAE): the first row that lists it, the candidates and the way to choose named in a --verbose
 * line (docs/architecture.md). */
static const cvx_family *family_of_components(const char *dir) {
    for (int f = 0; cvx_families[f]; f++)
        if (has_component(dir, cvx_families[f]->component_classes[0])) return cvx_families[f];
    const cvx_family *shared = NULL;
    char shared_entry[128] = "", shared_names[256] = "";
    for (int pos = 1;; pos++) {
        int any = 0;
        for (int f = 0; cvx_families[f]; f++) {
            const char *const *cc = cvx_families[f]->component_classes;
            int k = 0;
            while (k < pos && cc[k]) k++;
            if (!cc[k]) continue;
            any = 1;
            if (!has_component(dir, cc[k])) continue;
            const cvx_family *first = NULL;
            char names[256];
            if (rows_listing(cc[k], &first, names, sizeof names) == 1) return first;
            if (!shared) {   /* the first shared one names the candidates */
                shared = first;
                snprintf(shared_entry, sizeof shared_entry, "%s", cc[k]);
                snprintf(shared_names, sizeof shared_names, "%s", names);
            }
        }
        if (!any) break;
    }
    if (shared) {
        cvx_debug("%s: no model_index.json and no transformer config; its %s is a component of %s: read as %s's "
                  "(a model_index.json naming the pipeline, or the transformer's config.json, chooses)", dir,
                  shared_entry, shared_names, shared->name);
        return shared;
    }
    char list[2048] = "";
    for (int f = 0; cvx_families[f]; f++)
        for (int k = 0; cvx_families[f]->component_classes[k]; k++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "",
                     cvx_families[f]->component_classes[k]);
    cvx_error("%s: not a model this program runs: no model_index.json, and no component's config.json "
              "(its _class_name or architectures) names a supported class (looked for: %s)", dir, list);
    return NULL;
}

const cvx_family *cvx_family_for(const char *dir, char *cls, size_t cls_n) {
    char path[4200];
    cls[0] = 0;
    snprintf(path, sizeof path, "%s/model_index.json", dir);
    if (!cvx_is_file(path)) return family_of_components(dir);
    cvx_config c;
    const char *name;
    if (cvx_config_load(&c, path)) return NULL;
    if (cvx_cfg_str(&c, "_class_name", &name)) {
        cvx_config_free(&c);
        return NULL;
    }
    snprintf(cls, cls_n, "%s", name);
    cvx_config_free(&c);
    for (int f = 0; cvx_families[f]; f++)
        for (int k = 0; cvx_families[f]->classes[k]; k++)
            if (!strcmp(cls, cvx_families[f]->classes[k])) return cvx_families[f];
    char list[1024] = "";
    for (int f = 0; cvx_families[f]; f++)
        for (int k = 0; cvx_families[f]->classes[k]; k++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "",
                     cvx_families[f]->classes[k]);
    cvx_error("%s: key '_class_name' is \"%s\", a pipeline this program does not run (supported: %s)", path, cls,
              list);
    return NULL;
}

void cvx_sample_run_defaults(cvx_sample_run *r, const cvx_embeddings *emb) {
    const cvx_loop_params *lp = &r->loop;
    if (!r->branch[0]) {
        for (int b = 0; b < 2; b++)
            r->text_cond[b] = (cvx_text_cond){.text = b ? emb->prompt : emb->negative, .L = emb->L,
                                              .image = lp->image_tokens, .L_img = lp->image_L, .channels = lp->cond};
        r->branch[0] = &r->text_cond[0], r->branch[1] = &r->text_cond[1];
    }
    if (!r->plan.steps) {
        if (!r->experts.n) cvx_single_expert(&r->experts, &r->den);
        const cvx_guider g = {.scale = lp->req->guidance_scale, .dynamic = lp->req->use_dynamic_cfg};
        cvx_plan_init(&r->plan, lp->req->num_inference_steps - lp->t_start, &g, &r->experts);
    }
}

void cvx_sample_run_free(cvx_sample_run *r) {
    cvx_plan_free(&r->plan);
    if (r->fam_run_free) r->fam_run_free(r->fam_run);
    cvx_denoiser_free(&r->den);
    free(r->init);
    free(r->cond);
    free(r->image_tokens);
    memset(r, 0, sizeof *r);
}
