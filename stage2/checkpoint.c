/* The stage-2 checkpoint (checkpoint.h): the run's fingerprint and the loop state's file. */
#include "checkpoint.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fileio.h"
#include "validate.h"

/* v2: the content hash (issue 21); a v1 checkpoint (no hash) is refused by name */
#define CHECKPOINT_FORMAT "cogvideox.c stage2 checkpoint v2"
#define CHECKPOINT_SEAL "content_xxh64"

void cvx_fingerprint_set(cvx_fingerprint *fp, const char *key, const char *fmt, ...) {
    int i = 0;
    while (i < fp->n && strcmp(fp->key[i], key) != 0) i++;
    CVX_CHECK(i < CVX_FP_MAX && strlen(key) < sizeof fp->key[0]);
    if (i == fp->n) fp->n++;
    snprintf(fp->key[i], sizeof fp->key[i], "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fp->value[i], sizeof fp->value[i], fmt, ap);
    va_end(ap);
}

/* ---- checkpoint file: stage2_checkpoint.safetensors ----
 * (metadata "plan": the step plan's experts and cache resets, cvx_plan_describe, when it has
 * more than one expert or a reset; absent otherwise)
 * tensors: latents F32 [1, F, C, h, w]; step I64 [1] (steps done); generator U8
 * [sizeof(cvx_generator)] (the POD state byte for byte); whatever the scheduler's save_state adds
 * (DPM: old_pred_original_sample F32 [1, F, C, h, w]).
 * metadata: format, steps_done, run.<key> for every fingerprint entry, and content_xxh64: the
 * hash of all of the above (cvx_stw_seal), checked before anything is used: one flipped bit in
 * the latents, or a step set to the total, resumed with exit 0 and wrong latents (issue 21). */
int cvx_checkpoint_write(const cvx_checkpointing *ck, const cvx_sample_plan *plan, const cvx_latent_shape *sh,
                         const float *latents, int steps_done, const cvx_scheduler *s, const cvx_generator *g,
                         cvx_cache *cache) {
    cvx_st_writer *w = cvx_stw_new();
    int64_t shape[5] = {1, sh->frames, sh->channels, sh->height, sh->width};
    int64_t step = steps_done, one = 1, gbytes = (int64_t)sizeof(*g);
    char buf[32], key[64];
    int rc = cvx_stw_add(w, "latents", CVX_F32, 5, shape, latents);
    rc |= cvx_stw_add(w, "step", CVX_I64, 1, &one, &step);
    rc |= s->type->save_state(s, w, shape);
    rc |= cvx_stw_add(w, "generator", CVX_U8, 1, &gbytes, g);
    rc |= cvx_cache_save(cache, w);
    rc |= cvx_stw_metadata(w, "format", CHECKPOINT_FORMAT);
    snprintf(buf, sizeof buf, "%d", steps_done);
    rc |= cvx_stw_metadata(w, "steps_done", buf);
    char desc[4096];
    cvx_plan_describe(plan, desc, sizeof desc);   /* a plan of several experts: which runs when */
    if (desc[0]) rc |= cvx_stw_metadata(w, "plan", desc);
    for (int i = 0; ck->fingerprint && i < ck->fingerprint->n; i++) {
        snprintf(key, sizeof key, "run.%s", ck->fingerprint->key[i]);
        rc |= cvx_stw_metadata(w, key, ck->fingerprint->value[i]);
    }
    rc |= cvx_stw_seal(w, CHECKPOINT_SEAL);   /* last: the hash of everything above */
    if (rc == 0) rc = cvx_stw_write(w, ck->path);
    cvx_stw_free(w);
    return rc ? cvx_error_prefix("writing checkpoint %s", ck->path) : 0;
}

/* Load a checkpoint into the loop state after checking it belongs to this run. */
int cvx_checkpoint_read(const cvx_checkpointing *ck, const cvx_sample_plan *plan, const cvx_latent_shape *sh,
                        int n_steps, cvx_scheduler *s, float *latents, int *steps_done, cvx_generator *g,
                        cvx_cache *cache) {
    const char *path = ck->path;
    if (!cvx_is_file(path))
        return cvx_error("--resume: no checkpoint at %s (run without --resume to start a new run)", path);
    cvx_safetensors *st = cvx_st_open(path);
    if (!st) return -1;
    int rc = -1;
    const char *fmt = cvx_st_metadata(st, "format");
    if (!fmt || strcmp(fmt, CHECKPOINT_FORMAT) != 0) {
        cvx_error("%s: not a stage2 checkpoint of this program (metadata 'format' is %s%s%s, expected \"%s\")%s", path,
                  fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "", CHECKPOINT_FORMAT,
                  fmt && !strcmp(fmt, "cogvideox.c stage2 checkpoint v1")
                      ? ": written by an older build without a content hash; run without --resume to start over"
                      : "");
        goto done;
    }
    if (cvx_st_check_seal(st, CHECKPOINT_SEAL)) {   /* nothing of a changed file is used */
        cvx_error_prefix("--resume");
        goto done;
    }
    for (int i = 0; ck->fingerprint && i < ck->fingerprint->n; i++) {
        char key[64];
        snprintf(key, sizeof key, "run.%s", ck->fingerprint->key[i]);
        const char *v = cvx_st_metadata(st, key);
        const char *k = ck->fingerprint->key[i], *now = ck->fingerprint->value[i];
        const size_t kl = strlen(k);
        if (v && strcmp(v, now) != 0 && kl > 9 && !strcmp(k + kl - 9, "_identity")) {   /* weights changed in place */
            cvx_error("--resume: the %.*s weights changed since %s was written (then: %s; now: %s): resuming would mix "
                      "two models in one video (run without --resume to start over)", (int)(kl - 9), k, path, v, now);
            goto done;
        }
        if (!v || strcmp(v, now) != 0) {
            if (v)
                cvx_error("--resume: %s was written with %s=%s but this run has %s=%s (resume with the same settings, "
                          "or run without --resume to start over)", path, k, v, k, now);
            else   /* a setting recorded only when not its default (--attention, --flow_shift, a LoRA...) */
                cvx_error("--resume: %s was written with no %s setting (its default) but this run has %s=%s (resume "
                          "with the same settings, or run without --resume to start over)", path, k, k, now);
            goto done;
        }
    }
    /* the plan's experts and cache resets step by step (a plan of one expert records none) */
    char desc[4096];
    cvx_plan_describe(plan, desc, sizeof desc);
    const char *rec = cvx_st_metadata(st, "plan");
    if (strcmp(rec ? rec : "", desc) != 0) {
        cvx_error("--resume: %s was written with the step plan \"%s\" but this run's is \"%s\" (resume with the same "
                  "settings, or run without --resume to start over)", path, rec ? rec : "", desc);
        goto done;
    }
    /* and no setting the checkpoint's run had that this one lacks (a LoRA, a transformer file) */
    for (int i = 0; ck->fingerprint && i < cvx_st_metadata_count(st); i++) {
        const char *key, *v;
        int j = 0;
        cvx_st_metadata_at(st, i, &key, &v);
        if (strncmp(key, "run.", 4) != 0) continue;
        while (j < ck->fingerprint->n && strcmp(ck->fingerprint->key[j], key + 4) != 0) j++;
        if (j == ck->fingerprint->n) {
            cvx_error("--resume: %s was written with %s=%s but this run has no %s (resume with the same settings, or "
                      "run without --resume to start over)", path, key + 4, v, key + 4);
            goto done;
        }
    }
    int64_t shape[5] = {1, sh->frames, sh->channels, sh->height, sh->width};
    char want[96], got[96];
    cvx_shape_str(5, shape, want, sizeof want);
    const cvx_tensor *tl = cvx_st_find(st, "latents"), *ts = cvx_st_find(st, "step");
    const cvx_tensor *tg = cvx_st_find(st, "generator");
    if (!tl || tl->dtype != CVX_F32 || tl->numel != (int64_t)sh->numel || tl->ndim != 5 ||
        memcmp(tl->shape, shape, sizeof shape) != 0) {
        cvx_error("%s: tensor 'latents' %s, expected F32 %s", path,
                  tl ? cvx_shape_str(tl->ndim, tl->shape, got, sizeof got) : "is missing", want);
        goto done;
    }
    if (!ts || ts->dtype != CVX_I64 || ts->numel != 1) {
        cvx_error("%s: tensor 'step' missing or not I64 [1]", path);
        goto done;
    }
    int64_t step;
    memcpy(&step, ts->data, sizeof step);
    /* a checkpoint is written after a step that is not the last: 1 .. n_steps - 1 */
    const char *meta_step = cvx_st_metadata(st, "steps_done");
    char step_text[32];
    snprintf(step_text, sizeof step_text, "%lld", (long long)step);
    if (step < 1 || step >= n_steps || !meta_step || strcmp(meta_step, step_text) != 0) {
        cvx_error("%s: step %lld (metadata steps_done %s) out of range 1..%d: a checkpoint is written after a step "
                  "that is not the last", path, (long long)step, meta_step ? meta_step : "missing", n_steps - 1);
        goto done;
    }
    if (!tg || tg->dtype != CVX_U8 || tg->numel != (int64_t)sizeof(*g)) {
        cvx_error("%s: tensor 'generator' missing or not U8 [%zu] (checkpoint from another build?)", path, sizeof(*g));
        goto done;
    }
    if (cvx_generator_restore(g, tg->data, (size_t)tg->nbytes)) {   /* size, copy, validate */
        cvx_error_prefix("%s: tensor 'generator'", path);
        goto done;
    }
    if (s->type->load_state(s, st, path, sh->numel)) goto done;
    memcpy(latents, tl->data, sh->numel * sizeof(float));   /* the file's data may be unaligned */
    if (cvx_check_finite(latents, sh->numel, "latents")) {
        cvx_error_prefix("%s", path);
        goto done;
    }
    if (cvx_cache_load(cache, st, path)) goto done;
    *steps_done = (int)step;
    rc = 0;
done:
    cvx_st_close(st);
    return rc;
}

