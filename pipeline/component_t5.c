/* A T5-family text encoder as a family row composes it (pipeline/components.h): the SentencePiece
 * tokenizer and the encoder of a diffusers directory (or --text_encoder's single file), and the
 * batched encoding of n texts as the pipelines' _get_t5_prompt_embeds: padding to max_length,
 * truncation, then T5 over every row (CogVideoX, LTX-Video) or UMT5 with the attention mask and
 * the rows past the prompt zeroed (Wan). */
#include "pipeline/components.h"

#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "model.h"
#include "validate.h"

#define MAX_BATCH 4   /* sequences per encoder pass: the widened weights serve them all */

int cvx_t5_load(cvx_t5_encoder *e, cvx_model *m, const cvx_t5_style *st) {
    if (e->loaded) return 0;
    char tok_dir[4200];
    if (cvx_model_component(m->dir, "tokenizer", "spiece.model", tok_dir, sizeof tok_dir)) return -1;
    cvx_component_src src;
    if (cvx_component_find(m, "text_encoder", "--text_encoder", m->text_encoder_file, 1, NULL, &src) ||
        t5_tokenizer_load(&e->tok, tok_dir))
        return -1;
    if (src.file ? t5_build_file(&e->t5, src.file, src.cfg, m->ctx) : t5_build(&e->t5, src.dir, m->ctx)) {
        t5_tokenizer_free(&e->tok);
        return -1;
    }
    e->loaded = 1;
    const t5_config *c = &e->t5.cfg;
    cvx_info("%s encoder: %d layers, d_model %d, %d heads x %d, d_ff %d (%s)", st->name, c->num_layers, c->d_model,
             c->num_heads, c->d_kv, c->d_ff, cvx_weights_path(e->t5.weights));
    return 0;
}

void cvx_t5_free(cvx_t5_encoder *e) {
    if (!e->loaded) return;
    t5_free(&e->t5);
    t5_tokenizer_free(&e->tok);
    e->loaded = 0;
}

int cvx_t5_tokenize(const cvx_t5_encoder *e, const char *text, const char *label, int L, int64_t *ids, int64_t *mask) {
    int n_raw, at_least;
    if (t5_tokenize_counted(&e->tok, text, L, ids, mask, &n_raw, &at_least)) return -1;
    t5_report_length(label, n_raw, at_least, L);
    return 0;
}

/* Batch item b's ids (after the style's prompt cleaning) and its length (the mask's ones). */
static int tokenize_one(const cvx_t5_encoder *e, const cvx_t5_style *st, const char *text, const char *label, int L,
                        int64_t *ids, int64_t *mask, int64_t *seq_len) {
    char *clean = NULL;
    if (st->clean && st->clean(text, &clean)) return -1;
    const int rc = cvx_t5_tokenize(e, clean ? clean : text, label, L, ids, mask);
    free(clean);
    *seq_len = 0;
    for (int k = 0; k < L; k++) *seq_len += mask[k];
    return rc;
}

int cvx_t5_mask_tensor(cvx_t5_encoder *e, cvx_model *m, const cvx_t5_style *st, const char *name,
                       const char *const *texts, const char *const *labels, int n, int L, cvx_cond_tensor *out) {
    if (cvx_t5_load(e, m, st)) return -1;
    int64_t *ids = cvx_malloc((size_t)L * sizeof *ids), *mask = cvx_malloc((size_t)L * sizeof *mask), len;
    float *f = cvx_alloc_f32((size_t)n * L);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = tokenize_one(e, st, texts[i], labels ? labels[i] : NULL, L, ids, mask, &len);
        for (int k = 0; k < L && !rc; k++) f[(size_t)i * L + k] = (float)mask[k];
    }
    free(ids);
    free(mask);
    if (rc) {
        free(f);
        return -1;
    }
    *out = (cvx_cond_tensor){.name = name, .prompt = f, .L = L, .D = 1, .is_mask = 1};
    return 0;
}

int cvx_t5_encode_texts(cvx_t5_encoder *e, cvx_model *m, const cvx_t5_style *st, const char *const *texts,
                        const char *const *labels, int n, int L, cvx_progress_fn progress, void *user, float *out) {
    if (cvx_t5_load(e, m, st)) return -1;
    const int D = e->t5.cfg.d_model, n_batches = (n + MAX_BATCH - 1) / MAX_BATCH;
    int64_t *ids = cvx_malloc((size_t)MAX_BATCH * L * sizeof *ids), *mask = cvx_malloc((size_t)MAX_BATCH * L * sizeof *mask);
    int64_t seq_lens[MAX_BATCH];
    char bar_label[64];
    snprintf(bar_label, sizeof bar_label, "%s layers", st->name);
    cvx_progress bar;
    cvx_progress_begin(&bar, bar_label, n_batches * e->t5.cfg.num_layers, progress, user);
    int rc = -1;
    for (int s0 = 0; s0 < n; s0 += MAX_BATCH) {
        const int nb = n - s0 < MAX_BATCH ? n - s0 : MAX_BATCH;
        for (int b = 0; b < nb; b++)
            if (tokenize_one(e, st, texts[s0 + b], labels ? labels[s0 + b] : NULL, L, ids + (size_t)b * L,
                             mask + (size_t)b * L, &seq_lens[b]))
                goto done;
        float *o = out + (size_t)s0 * L * D;   // [nb, L, D]
        const int masked = st->masked_fn ? st->masked_fn(m) : st->masked;
        if (masked == 2 ? umt5_encode(&e->t5, ids, mask, nb, L, o, &bar)
            : masked    ? umt5_prompt_embeds(&e->t5, ids, seq_lens, nb, L, o, &bar)
                        : t5_encode(&e->t5, ids, nb, L, o, &bar))
            goto done;
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
    free(mask);
    return rc;
}
