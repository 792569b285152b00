/* A model's transformers as a set of experts, one mapped at a time (pipeline/expert_set.h). */
#include "pipeline/expert_set.h"

#include <stdlib.h>

#include "error.h"
#include "model.h"

void cvx_expert_set_free(cvx_expert_set *e) {
    if (e->resident) e->spec->unload(e->resident);
    e->resident = NULL;
}

void cvx_expert_set_unload(cvx_expert_set *e, cvx_model *m) {
    if (!e->resident) return;
    if (m->ctx) m->ctx->lora = NULL;
    cvx_lora_free(m->lora);
    m->lora = NULL;
    cvx_expert_set_free(e);
}

int cvx_expert_set_load(cvx_expert_set *e, cvx_model *m, int i) {
    if (e->resident && e->index == i) return 0;
    cvx_expert_set_unload(e, m);   /* one expert resident at a time: the other is unmapped first */
    e->index = i;
    m->lora_expert = e->n > 1 ? i + 1 : 0;   /* --lora_high / --lora_low */
    cvx_component_src src = {0};
    if (e->n > 1) {   /* each expert from its directory or its --transformer[_2] file */
        if (cvx_expert_paths(m, i, src.cfg, sizeof src.cfg, src.dir, sizeof src.dir) ||
            cvx_weights_fit_memory(src.dir, e->spec->advice))
            return -1;
        src.file = src.dir;   /* a directory or a file: the loader's file form reads either */
    } else if (cvx_component_find(m, "transformer", "--transformer", m->transformer_file, 1, e->spec->advice, &src)) {
        return -1;
    }
    e->resident = e->spec->load(&src, m->ctx);
    return e->resident ? 0 : -1;
}

int cvx_expert_set_load_current(cvx_expert_set *e, cvx_model *m) {
    return cvx_expert_set_load(e, m, e->resident ? e->index : 0);
}

typedef struct {
    cvx_expert_set *set;
    cvx_model *m;
    cvx_denoiser den;
} expert_run;

static int acquire(cvx_expert_provider *p, int i, cvx_denoiser **out) {
    expert_run *r = p->user;
    cvx_expert_set *e = r->set;
    cvx_info("%s: %s expert (%s)", e->spec->model, i ? "low-noise" : "high-noise", i ? "transformer_2" : "transformer");
    const int changed = !e->resident || e->index != i;
    if (cvx_expert_set_load(e, r->m, i) || (changed && cvx_model_reattach_loras(r->m))) return -1;
    cvx_denoiser_free(&r->den);
    e->spec->denoiser_init(r->m, e->resident, &r->den);
    *out = &r->den;
    return 0;
}

static void release(cvx_expert_provider *p, int i) {
    (void)i;
    expert_run *r = p->user;
    cvx_expert_set_unload(r->set, r->m);   /* munmap: the next expert maps into the freed memory */
}

static void run_free(void *p) {
    expert_run *r = p;
    if (r) cvx_denoiser_free(&r->den);
    free(r);
}

void cvx_expert_set_provide(cvx_expert_set *e, cvx_model *m, cvx_sample_run *run) {
    expert_run *r = cvx_calloc(1, sizeof *r);
    r->set = e, r->m = m;
    run->fam_run = r, run->fam_run_free = run_free;
    run->experts = (cvx_expert_provider){.n = e->n, .acquire = acquire, .release = release, .user = r};
}
