/* encode: text -> embeddings (the family's prompt preparation and text encoder). */
#include "pipeline/internal.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "validate.h"


void cvx_embeddings_free(cvx_embeddings *e) {
    free(e->prompt);
    free(e->negative);
    memset(e, 0, sizeof *e);
}

void cvx_cond_set_free(cvx_cond_set *c) {
    for (int i = 0; i < c->n; i++) {
        free(c->t[i].prompt);
        free(c->t[i].negative);
    }
    memset(c, 0, sizeof *c);
}

int cvx_encoder_dim(cvx_model *m) { return m->family->text_dim(m); }

int cvx_encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                     cvx_progress_fn progress, void *user, float *out) {
    if (L < 1 || L > 65536) return cvx_error("max_sequence_length %d: expected 1..65536", L);
    cvx_ctx_use(m->ctx);
    return m->family->encode_texts(m, texts, labels, n, L, progress, user, out);
}

int cvx_encode_texts_more(cvx_model *m, const char *const *texts, const char *const *labels, int n,
                          cvx_progress_fn progress, void *user, cvx_cond_set *out) {
    memset(out, 0, sizeof *out);
    if (!m->family->encode_more) return 0;
    cvx_ctx_use(m->ctx);
    if (m->family->encode_more(m, texts, labels, n, progress, user, out)) {
        cvx_cond_set_free(out);
        return -1;
    }
    return 0;
}

int cvx_encode(cvx_model *m, const cvx_encode_params *p, cvx_progress_fn progress, void *user, cvx_embeddings *out) {
    memset(out, 0, sizeof *out);
    if (!p->prompt) return cvx_error("no prompt given");
    const int D = cvx_encoder_dim(m);
    if (D < 0) return -1;
    const int L = p->max_sequence_length ? p->max_sequence_length : m->info.text_len;
    /* the negative prompt first, as stage 1 has always batched them */
    const char *texts[2] = {p->negative_prompt ? p->negative_prompt : "", p->prompt};
    const char *labels[2] = {"the negative prompt", "the prompt"};
    float *both = cvx_alloc_f32((size_t)2 * L * D);   // [2, L, D]
    if (cvx_encode_texts(m, texts, labels, 2, L, progress, user, both)) {
        free(both);
        return -1;
    }
    out->L = L, out->D = D;
    out->negative = cvx_alloc_f32((size_t)L * D);
    out->prompt = cvx_alloc_f32((size_t)L * D);
    memcpy(out->negative, both, (size_t)L * D * sizeof(float));
    memcpy(out->prompt, both + (size_t)L * D, (size_t)L * D * sizeof(float));
    free(both);
    return 0;
}
