/* The model handle: resolve once, read the configs once, load components on first use. */
#include "pipeline/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "model.h"
#include "stage2/scheduler.h"

/* The scheduler config's type name ("ddim", "dpm", ...), or "" when absent or unknown (cvx_sample
 * reports it then, with the file's message). */
static void read_scheduler_name(const char *dir, char *out, size_t n) {
    char path[4200];
    cvx_config c;
    const char *cls;
    out[0] = 0;
    if (snprintf(path, sizeof path, "%s/scheduler/scheduler_config.json", dir) >= (int)sizeof path ||
        !cvx_is_file(path) || cvx_config_load(&c, path))
        return;
    if (!cvx_cfg_str(&c, "_class_name", &cls)) {
        const cvx_scheduler_type *t = cvx_scheduler_find(cls);
        if (t) snprintf(out, n, "%s", t->name);
    }
    cvx_config_free(&c);
    cvx_clear_error();
}

cvx_model *cvx_model_open(const cvx_model_params *p) {
    if (!p->model || !p->model[0]) {
        cvx_error("no model given");
        return NULL;
    }
    if (p->precision != CVX_PRECISION_F32 && p->precision != CVX_PRECISION_BF16) {
        cvx_error("compute precision %d is not one of f32, bf16", (int)p->precision);
        return NULL;
    }
    cvx_model *m = cvx_calloc(1, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", p->model);
    if (cvx_model_resolve(p->model, m->dir, sizeof m->dir)) goto fail;
    cvx_debug("model %s -> %s", m->name, m->dir);
    snprintf(m->transformer_file, sizeof m->transformer_file, "%s", p->transformer_file ? p->transformer_file : "");
    snprintf(m->text_encoder_file, sizeof m->text_encoder_file, "%s", p->text_encoder_file ? p->text_encoder_file : "");
    snprintf(m->vae_file, sizeof m->vae_file, "%s", p->vae_file ? p->vae_file : "");
    snprintf(m->transformer_2_file, sizeof m->transformer_2_file, "%s",
             p->transformer_2_file ? p->transformer_2_file : "");
    snprintf(m->text_encoder_2_file, sizeof m->text_encoder_2_file, "%s", p->text_encoder_2_file ? p->text_encoder_2_file : "");
    if (cvx_model_set_loras(m, p)) goto fail;
    if (!(m->family = cvx_family_for(m->dir, m->pipeline_class, sizeof m->pipeline_class))) goto fail;
    if (cvx_family_open(m)) goto fail;
    read_scheduler_name(m->dir, m->scheduler_name, sizeof m->scheduler_name);
    m->info.name = m->name;
    m->info.dir = m->dir;
    m->info.family = m->family->name;
    m->info.pipeline_class = m->pipeline_class[0] ? m->pipeline_class : NULL;
    if (!m->info.scheduler) m->info.scheduler = m->scheduler_name[0] ? m->scheduler_name : NULL;   /* LTX names its own */
    m->ctx = cvx_ctx_new(p->threads);
    if (cvx_ctx_set_precision(m->ctx, p->precision)) {
        cvx_ctx_free(m->ctx);
        goto fail;
    }
    cvx_ctx_set_int8(m->ctx, p->int8);
    if (cvx_ctx_set_attention(m->ctx, p->attention)) {
        cvx_ctx_free(m->ctx);
        goto fail;
    }
    return m;
fail:
    cvx_model_drop_loras(m);
    if (m->family) cvx_family_close(m);
    free(m);
    return NULL;
}

void cvx_model_close(cvx_model *m) {
    if (!m) return;
    cvx_model_drop_loras(m);   /* detached before the transformer it targets is freed */
    cvx_family_close(m);
    cvx_ctx_free(m->ctx);
    free(m);
}

const cvx_model_info *cvx_model_get_info(const cvx_model *m) { return &m->info; }
cvx_ctx *cvx_model_ctx(cvx_model *m) { return m->ctx; }

void cvx_progress_begin(cvx_progress *bar, const char *label, int total, cvx_progress_fn fn, void *user) {
    cvx_progress_start_cb(bar, label, total, fn, user);
}
