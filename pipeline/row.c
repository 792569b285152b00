/* The generic slots of a family row (pipeline/family.h), driven by the row's data: its state
 * opened and closed (the state's size, its config readers, its component table, its T5 encoder),
 * the T5 text slots, the LoRA targets of its transformer part, the conditioning slots' shapes. */
#include "pipeline/components.h"

#include <stdlib.h>

#include "error.h"
#include "fileio.h"

/* <comp>/config.json's path; 1 when it is there */
static int config_path(cvx_model *m, const char *comp, char *path, size_t n) {
    cvx_component_path(m, comp, "config.json", path, n);
    return cvx_is_file(path);
}

int cvx_family_open(cvx_model *m) {
    const cvx_family *f = m->family;
    char path[4300];
    m->fam = cvx_calloc(1, f->state_size);
    if ((m->has_denoiser_config = config_path(m, "transformer", path, sizeof path)) &&
        f->read_denoiser_config(path, m->fam))
        return -1;
    m->has_vae_config = config_path(m, "vae", path, sizeof path);
    if (f->read_vae_config(m->has_vae_config ? path : NULL, m->fam)) return -1;
    return f->fill_info(m);
}

static cvx_t5_encoder *t5_of(const cvx_model *m) { return (cvx_t5_encoder *)((char *)m->fam + m->family->t5_slot); }

void cvx_family_close(cvx_model *m) {
    const cvx_family *f = m->family;
    if (!m->fam) return;
    if (f->t5_style) cvx_t5_free(t5_of(m));
    if (f->free_more) f->free_more(m);
    if (f->parts) cvx_components_free(m, f->parts);
    free(m->fam);
    m->fam = NULL;
}

int cvx_family_t5_text_dim(cvx_model *m) {
    cvx_t5_encoder *e = t5_of(m);
    return cvx_t5_load(e, m, m->family->t5_style) ? -1 : e->t5.cfg.d_model;
}

int cvx_family_t5_encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                               cvx_progress_fn progress, void *user, float *out) {
    return cvx_t5_encode_texts(t5_of(m), m, m->family->t5_style, texts, labels, n, L, progress, user, out);
}

int cvx_family_lora_targets(cvx_model *m, cvx_lora_target **out) {
    const cvx_component *c = m->family->parts;
    while (c->comp && !c->lora_targets) c++;
    CVX_CHECK(c->comp);   /* a row pointing here lists its transformer with lora_targets */
    if (cvx_component_load(m, m->family->parts, c->comp)) return -1;
    return c->lora_targets(cvx_component_get(m, m->family->parts, c->comp), out);
}

static int state_int(const cvx_model *m, int fixed, size_t at) {
    return fixed > 0 ? fixed : *(const int *)((const char *)m->fam + at);
}

void cvx_cond_slot_dims(const cvx_model *m, int slot, int *L, int *D) {
    const cvx_cond_slot *s = &m->family->cond_slots[slot];
    *L = state_int(m, s->L, s->L_at);
    *D = s->is_mask ? 1 : state_int(m, s->D, s->D_at);
}
