/* The denoising loop (sampler.h): prepare_latents, the CFG loop with the scheduler step, and a
 * checkpoint of the loop state so a run of hours can be killed and resumed bit for bit. */
#include "sampler.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "cache.h"
#include "error.h"
#include "fileio.h"
#include "ops.h"
#include "progress.h"
#include "validate.h"
#include "rng_lowp.h"

/* v2: the content hash (issue 21); a v1 checkpoint (no hash) is refused by name */
#define CHECKPOINT_FORMAT "cogvideox.c stage2 checkpoint v2"
#define CHECKPOINT_SEAL "content_xxh64"

double cvx_guidance_at(const cvx_loop_params *p, double t) {
    if (!p->use_dynamic_cfg) return p->guidance_scale;
    double n = p->num_inference_steps;
    /* upstream uses the timestep value, not the step index: (n − t)/n is negative */
    double x = pow(((double)p->num_inference_steps - (double)t) / n, 5.0);
    return 1.0 + p->guidance_scale * ((1.0 - cos(M_PI * x)) / 2.0);
}

int cvx_uses_cfg(const cvx_loop_params *p) { return p->guidance_scale > 1.0; }

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
 * tensors: latents F32 [1, F, C, h, w]; step I64 [1] (steps done); generator U8
 * [sizeof(cvx_generator)] (the POD state byte for byte); whatever the scheduler's save_state adds
 * (DPM: old_pred_original_sample F32 [1, F, C, h, w]).
 * metadata: format, steps_done, run.<key> for every fingerprint entry, and content_xxh64: the
 * hash of all of the above (cvx_stw_seal), checked before anything is used: one flipped bit in
 * the latents, or a step set to the total, resumed with exit 0 and wrong latents (issue 21). */
static int checkpoint_write(const cvx_checkpointing *ck, const cvx_latent_shape *sh, const float *latents,
                            int steps_done, const cvx_scheduler *s, const cvx_generator *g,
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
static int checkpoint_read(const cvx_checkpointing *ck, const cvx_latent_shape *sh, int n_steps,
                           cvx_scheduler *s, float *latents, int *steps_done, cvx_generator *g,
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
        if (!v || strcmp(v, ck->fingerprint->value[i]) != 0) {
            cvx_error("--resume: %s was written with %s=%s but this run has %s=%s (resume with the same settings, "
                      "or run without --resume to start over)",
                      path, ck->fingerprint->key[i], v ? v : "(missing)", ck->fingerprint->key[i],
                      ck->fingerprint->value[i]);
            goto done;
        }
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

/* Classifier-free guidance: pred = u + g·(c − u), float32 as upstream (g rounded to float). */
static void guide(float *pred, const float *uncond, const float *cond, size_t n, double g) {
    float gf = (float)g;
    for (size_t i = 0; i < n; i++) pred[i] = uncond[i] + gf * (cond[i] - uncond[i]);
}

int cvx_sample_loop(cvx_denoiser *m, cvx_scheduler *s, const cvx_loop_params *p,
                     const cvx_latent_shape *sh, const float *prompt, const float *negative, int L,
                     const cvx_checkpointing *ck, cvx_step_hook hook, void *hook_ctx, float *latents,
                     cvx_sample_result *result) {
    const size_t n = sh->numel, D = (size_t)m->text_dim;
    const int cfg = cvx_uses_cfg(p);
    /* CFG-parallel: this rank's forward computes one branch (its rank: 0 uncond, 1 cond);
     * sequence parallelism: the ranks of sd share each forward; all: every rank of the run */
    cvx_dist *cd = p->cfg_dist && cvx_dist_size(p->cfg_dist) > 1 ? p->cfg_dist : NULL;
    cvx_dist *sd = p->sp_dist && cvx_dist_size(p->sp_dist) > 1 ? p->sp_dist : NULL;
    cvx_dist *all = p->world_dist && cvx_dist_size(p->world_dist) > 1 ? p->world_dist : cd;
    const int B = cfg && !cd ? 2 : 1, writer = !all || cvx_dist_world_rank(all) == 0;
    memset(result, 0, sizeof(*result));
    if (cvx_scheduler_set_timesteps(s, p->num_inference_steps)) return -1;
    CVX_CHECK(s->state == NULL);   /* a scheduler serves one run */
    CVX_CHECK(p->t_start >= 0 && p->t_start < p->num_inference_steps);
    /* V2V: the loop runs timesteps[t_start:] (the scheduler keeps num_inference_steps for its step
     * size); i counts the steps of the loop, t_start + i is the schedule's index */
    const int n_steps = p->num_inference_steps - p->t_start, t0i = p->t_start;
    s->begin = t0i;
    cvx_loop_params pg = *p;   /* dynamic CFG counts the steps that run, as upstream */
    pg.num_inference_steps = n_steps;
    if (m->type->prepare(m, sh->frames, sh->height, sh->width)) return -1;
    CVX_CHECK(m->n_latent == n && m->n_out == n);
    if (s->type->init(s, n)) return -1;
    if (ck && ck->stop_after_steps < 0) return cvx_error("--stop_after_steps must be >= 0");

    /* alike on every rank: agreed, so that rank 0 alone reports it */
    int bad = cd && (!cfg || cvx_dist_size(cd) != 2)
                  ? cvx_error("--cfg_parallel: needs classifier-free guidance (guidance_scale > 1) and 2 ranks per "
                              "group, got guidance_scale %g and %d", p->guidance_scale, cvx_dist_size(cd))
                  : 0;
    if (!bad && sd) bad = m->type->set_sp(m, sd);   /* the head count must divide */
    if (all ? cvx_dist_agree(all, bad) : bad) {
        if (sd) m->type->set_sp(m, NULL);
        return -1;
    }
    double comm0_s, comm0_bytes;   /* the exchanges of sequence parallelism, from here */
    m->type->comm(m, &comm0_s, &comm0_bytes);

    /* text batch: negative first, as upstream's torch.cat([negative, prompt]) */
    float *text = cvx_malloc((size_t)B * L * D * sizeof(float));
    if (cd) {
        memcpy(text, cvx_dist_rank(cd) == 0 ? negative : prompt, (size_t)L * D * sizeof(float));
    } else if (cfg) {
        memcpy(text, negative, (size_t)L * D * sizeof(float));
        memcpy(text + (size_t)L * D, prompt, (size_t)L * D * sizeof(float));
    } else {
        memcpy(text, prompt, (size_t)L * D * sizeof(float));
    }
    float *out = cvx_alloc_f32((size_t)(cfg ? 2 : 1) * n);   /* [2|1, F, C, h, w] model output (both branches) */
    float *branch = cd ? cvx_alloc_f32(n) : NULL;     /* [1, F, C, h, w] this rank's branch (CFG-parallel) */
    float *pred = cvx_alloc_f32(n), *prev = cvx_alloc_f32(n);
    int rc = -1;
    cvx_cache cache;
    if (cvx_cache_init(&cache, p->cache_kind, p->cache_threshold, p->teacache_coefficients, n_steps, m->num_layers))
        goto done;
    if (p->teacache_ret_steps) cvx_cache_set_teacache_window(&cache, 5, 0);
    /* the whole CFG batch's decisions on every rank; each keeps the residuals of its share */
    cvx_cache_set_layout(&cache, &(cvx_cache_layout){p->world_dist && cvx_dist_size(p->world_dist) > 1
                                                                     ? p->world_dist : cd ? cd : sd,
                                                                 cfg ? 2 : 1, cd ? 2 : 1, sd ? cvx_dist_size(sd) : 1});
    CVX_CHECK(cache.lnb == B);

    cvx_generator gen;
    int start = 0;
    if (ck && ck->path && ck->resume) {
        int rrc = checkpoint_read(ck, sh, n_steps, s, latents, &start, &gen, &cache);
        if (all) rrc = cvx_dist_agree(all, rrc);   /* every rank reads it; any failure stops all */
        if (rrc) goto done;
        cvx_info("resuming from %s after step %d of %d", ck->path, start, n_steps);
    } else {
        /* prepare_latents: randn([1, F, C, h, w]) from the seeded generator, its first use;
         * × init_noise_sigma (1.0) */
        if (p->init_latents) {   /* I2V / V2V: drawn by the caller (encoder sample first) */
            memcpy(latents, p->init_latents, n * sizeof(float));
            gen = *p->init_generator;
        } else {
            cvx_generator_seed(&gen, p->seed);
            if (cvx_randn_as(&gen, (cvx_dtype)p->noise_dtype, latents, n)) goto done;   /* torch.randn(dtype=) */
        }
        if (writer && ck && ck->path && cvx_is_file(ck->path))
            cvx_warn("%s exists and will be overwritten by this new run (pass --resume to continue it instead)",
                     ck->path);
    }
    result->resumed_from = start;
    if (ck && ck->path && ck->every > 0)
        cvx_info("checkpoint every %d step%s to %s (an interrupted run continues with --resume)", ck->every,
                 ck->every == 1 ? "" : "s", ck->path);

    cvx_progress bar;
    cvx_progress_start_cb(&bar, "denoising", n_steps - start, p->progress, p->progress_user);
    double t0 = cvx_time(), comm_s = 0;
    int done_steps = start;
    for (int i = start; i < n_steps; i++) {
        const double t = s->timesteps[t0i + i];
        /* this rank's CFG branches, one forward each (with step caching: one decision for the batch) */
        cvx_denoise_input in = {.x = latents, .cond = p->cond, .text = text, .L = L, .image = p->image_tokens,
                                .L_img = p->image_L, .t = t};
        int frc = cvx_cache_step(m, &cache, i, &in, (size_t)L * D, cd ? branch : out);
        if (frc) cvx_error_prefix("step %d/%d (t=%g)", i + 1, n_steps, t);
        /* under MPI: agree (a rank failing alone stops all); CFG-parallel: out = [uncond, cond] */
        double tc = cvx_time();
        if (all) frc = cvx_dist_agree(all, frc);
        if (cd && !frc) frc = cvx_dist_allgather(cd, branch, n * sizeof(float), out);
        comm_s += cvx_time() - tc;   /* includes waiting for the slower rank */
        if (frc) goto done;
        if (cfg) guide(pred, out, out + n, n, cvx_guidance_at(&pg, t));
        else memcpy(pred, out, n * sizeof(float));

        s->type->step(s, t0i + i, pred, latents, n, &gen, prev);
        memcpy(latents, prev, n * sizeof(float));
        done_steps = i + 1;
        /* a diverged step (NaN/Inf in a weight or an input) stops here, before the checkpoint
         * write: the last good checkpoint stays, and no NaN latents are written (issue 14) */
        if (cvx_check_finite(latents, n, "latents")) {
            cvx_error_prefix("step %d/%d (t=%g): the denoising diverged", done_steps, n_steps, t);
            goto done;
        }
        cvx_debug("step %d/%d t=%g guidance %.6g", done_steps, n_steps, t, cvx_guidance_at(&pg, t));
        if (hook) hook(hook_ctx, i, latents, sh);

        int stop = ck && ck->stop_after_steps > 0 && done_steps == ck->stop_after_steps && done_steps < n_steps;
        if (ck && ck->path && done_steps < n_steps &&
            (stop || (ck->every > 0 && done_steps % ck->every == 0))) {
            /* the cache's shares go to the writer first (collective); the others send only */
            int wrc = writer ? checkpoint_write(ck, sh, latents, done_steps, s, &gen, &cache)
                             : cvx_cache_save(&cache, NULL);
            if (all) wrc = cvx_dist_agree(all, wrc);
            if (wrc) goto done;
        }
        cvx_progress_update(&bar, done_steps - start);
        if (stop) break;
    }
    if (done_steps == n_steps) cvx_progress_finish(&bar);
    else if (bar.is_tty && bar.printed && cvx_verbosity() >= 1) fputc('\n', stderr);   /* stopped early */
    result->steps_done = done_steps;
    result->seconds = cvx_time() - t0;
    if (cd && done_steps > start)
        cvx_info("CFG-parallel: %.2f MB sent per step by each rank; %.3f s of %.2f s in the exchange (%.2f %%, with "
                 "waiting for the other rank)", n * sizeof(float) / 1e6, comm_s, result->seconds,
                 100.0 * comm_s / (result->seconds > 0 ? result->seconds : 1));
    if (sd && done_steps > start) {
        double t_comm, sent;
        m->type->comm(m, &t_comm, &sent);
        sent -= comm0_bytes, t_comm -= comm0_s;
        cvx_info("sequence parallelism (%d ranks): %.2f MB sent per step by each rank; %.3f s of %.2f s in the "
                 "exchanges (%.2f %%, with waiting for the other ranks)", cvx_dist_size(sd),
                 sent / 1e6 / (done_steps - start), t_comm, result->seconds,
                 100.0 * t_comm / (result->seconds > 0 ? result->seconds : 1));
    }
    result->cache_steps_computed = cache.steps_computed;
    result->cache_steps_skipped = cache.steps_skipped;
    result->cache_blocks_skipped = cvx_cache_blocks_skipped(&cache);
    rc = 0;
done:
    if (sd) m->type->set_sp(m, NULL);
    cvx_cache_free(&cache);
    free(text); free(out); free(pred); free(prev); free(branch);
    return rc;
}
