/* The family table and the choice of a model's family (pipeline/family.h). */
#include "pipeline/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fileio.h"

/* Every family, NULL-terminated: adding one is its file and its line here. */
const cvx_family *const cvx_families[] = {&cvx_family_cogvideox, &cvx_family_wan, &cvx_family_hunyuan15, &cvx_family_ltx,
                                          NULL};

static int dynamic_cfg_set(const cvx_sample_params *r) { return r->use_dynamic_cfg != 0; }
static int ret_steps_set(const cvx_sample_params *r) { return r->teacache_ret_steps != 0; }
static int guidance_2_set(const cvx_sample_params *r) { return r->guidance_scale_2 > 0; }
static int rescale_set(const cvx_sample_params *r) { return r->guidance_rescale != 0; }

const cvx_family_option cvx_family_options[] = {
    {"--use_dynamic_cfg", dynamic_cfg_set, "--use_dynamic_cfg is CogVideoX's (WanPipeline has no dynamic guidance)"},
    {"--teacache_ret_steps", ret_steps_set,
     "--teacache_ret_steps: TeaCache publishes its use_ret_steps variant for Wan 2.1 only"},
    {"--guidance_scale_2", guidance_2_set, "--guidance_scale_2 is Wan 2.2 A14B's (the low-noise expert's guidance)"},
    {"--guidance_rescale", rescale_set, "--guidance_rescale is LTX-Video's and HunyuanVideo-1.5's (this pipeline has no guidance rescale)"},
    {0},
};

int cvx_family_check_options(const cvx_family *f, const cvx_sample_params *r) {
    for (const cvx_family_option *o = cvx_family_options; o->flag; o++) {
        if (!o->is_set(r)) continue;
        int k = 0;
        while (f->options && f->options[k] && strcmp(f->options[k], o->flag) != 0) k++;
        if (!f->options || !f->options[k]) return cvx_error("%s", o->refusal);
    }
    return 0;
}

const cvx_family *cvx_family_for(const char *dir, char *cls, size_t cls_n) {
    char path[4200];
    cls[0] = 0;
    snprintf(path, sizeof path, "%s/model_index.json", dir);
    if (cvx_is_file(path)) {
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
    /* no model_index.json (a bare directory of components): the family of its transformer's class */
    snprintf(path, sizeof path, "%s/transformer/config.json", dir);
    cvx_config c;
    const char *tcls = NULL;
    const cvx_family *found = cvx_families[0];   /* as before families: the call that needs a component checks it */
    if (cvx_is_file(path) && !cvx_config_load(&c, path)) {
        if (!cvx_cfg_str(&c, "_class_name", &tcls))
            for (int f = 0; cvx_families[f]; f++)
                if (!strcmp(tcls, cvx_families[f]->transformer_class)) found = cvx_families[f];
        cvx_config_free(&c);
    }
    cvx_clear_error();
    return found;
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
