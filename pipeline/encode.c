/* encode: text -> T5 embeddings (CogVideoXPipeline._get_t5_prompt_embeds). */
#include "pipeline/internal.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "validate.h"

#define MAX_BATCH 4   /* sequences per encoder pass: the widened weights serve them all */
#define DEFAULT_MAX_SEQUENCE_LENGTH 226

void cvx_embeddings_free(cvx_embeddings *e) {
    free(e->prompt);
    free(e->negative);
    memset(e, 0, sizeof *e);
}

int cvx_encoder_dim(cvx_model *m) { return cvx_model_load_t5(m) ? -1 : m->t5.cfg.d_model; }

/* ids [L] of one text, padded/truncated as upstream; a warning names `label` when truncated. */
static int tokenize(const t5_tokenizer *tok, const char *text, int L, int64_t *ids, const char *label) {
    int64_t *mask = cvx_malloc((size_t)L * sizeof *mask);
    int n_raw;
    int rc = t5_tokenize(tok, text, L, ids, mask, &n_raw);
    free(mask);
    if (rc) return -1;
    if (n_raw > L)
        cvx_warn("%s is %d tokens long; truncated to max_sequence_length %d (the rest is ignored, as upstream)",
                 label ? label : "a text", n_raw, L);
    else
        cvx_debug("%s: %d tokens", label ? label : "a text", n_raw);
    return 0;
}

int cvx_encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                     cvx_progress_fn progress, void *user, float *out) {
    if (L < 1 || L > 65536) return cvx_error("max_sequence_length %d: expected 1..65536", L);
    if (cvx_model_load_t5(m)) return -1;
    const int D = m->t5.cfg.d_model, n_batches = (n + MAX_BATCH - 1) / MAX_BATCH;
    int64_t *ids = cvx_malloc((size_t)MAX_BATCH * L * sizeof *ids);
    cvx_progress bar;
    cvx_progress_begin(&bar, "T5 layers", n_batches * m->t5.cfg.num_layers, progress, user);
    int rc = -1;
    for (int s0 = 0; s0 < n; s0 += MAX_BATCH) {
        const int nb = n - s0 < MAX_BATCH ? n - s0 : MAX_BATCH;
        for (int b = 0; b < nb; b++)
            if (tokenize(&m->tok, texts[s0 + b], L, ids + (size_t)b * L, labels ? labels[s0 + b] : NULL)) goto done;
        if (t5_encode(&m->t5, ids, nb, L, out + (size_t)s0 * L * D, &bar)) goto done;   // [nb, L, D]
        /* a NaN here (a damaged weight) would only surface later, as a NaN video */
        for (int b = 0; b < nb; b++)
            if (cvx_check_finite(out + (size_t)(s0 + b) * L * D, (size_t)L * D, "embeddings")) {
                cvx_error_prefix("%s", labels ? labels[s0 + b] : "a text");
                goto done;
            }
    }
    cvx_progress_finish(&bar);
    rc = 0;
done:
    free(ids);
    return rc;
}

int cvx_encode(cvx_model *m, const cvx_encode_params *p, cvx_progress_fn progress, void *user, cvx_embeddings *out) {
    memset(out, 0, sizeof *out);
    if (!p->prompt) return cvx_error("no prompt given");
    if (cvx_model_load_t5(m)) return -1;
    const int L = p->max_sequence_length ? p->max_sequence_length : DEFAULT_MAX_SEQUENCE_LENGTH;
    const int D = m->t5.cfg.d_model;
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
