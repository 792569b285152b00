/* The denoising loop (sampler.h): prepare_latents, the CFG loop with the scheduler step, and a
 * checkpoint of the loop state so a run of hours can be killed and resumed bit for bit. */
#include "sampler.h"
#include "checkpoint.h"
#include "guidance.h"

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


double cvx_guidance_at(double g, int dynamic, int n, double t) {
    if (!dynamic) return g;
    /* upstream uses the timestep value, not the step index: (n − t)/n is negative */
    double x = pow(((double)n - t) / (double)n, 5.0);
    return 1.0 + g * ((1.0 - cos(M_PI * x)) / 2.0);
}

int cvx_uses_cfg(double guidance_scale) { return guidance_scale > 1.0; }

int cvx_sample_loop(cvx_denoiser *m, cvx_scheduler *s, const cvx_loop_params *p,
                     const cvx_latent_shape *sh, const float *prompt, const float *negative, int L,
                     const cvx_checkpointing *ck, cvx_step_hook hook, void *hook_ctx, float *latents,
                     cvx_sample_result *result) {
    const cvx_sample_params *r = p->req;
    const size_t n = sh->numel, D = (size_t)m->text_dim;
    const int cfg = cvx_uses_cfg(r->guidance_scale);
    /* CFG-parallel: this rank's forward computes one branch (its rank: 0 uncond, 1 cond);
     * sequence parallelism: the ranks of sd share each forward; all: every rank of the run */
    cvx_dist *cd = r->cfg_dist && cvx_dist_size(r->cfg_dist) > 1 ? r->cfg_dist : NULL;
    cvx_dist *sd = r->sp_dist && cvx_dist_size(r->sp_dist) > 1 ? r->sp_dist : NULL;
    cvx_dist *all = r->world_dist && cvx_dist_size(r->world_dist) > 1 ? r->world_dist : cd;
    const int B = cfg && !cd ? 2 : 1, writer = !all || cvx_dist_world_rank(all) == 0;
    memset(result, 0, sizeof(*result));
    if (cvx_scheduler_set_timesteps(s, r->num_inference_steps)) return -1;
    CVX_CHECK(s->state == NULL);   /* a scheduler serves one run */
    CVX_CHECK(p->t_start >= 0 && p->t_start < r->num_inference_steps);
    /* V2V: the loop runs timesteps[t_start:] (the scheduler keeps num_inference_steps for its step
     * size); i counts the steps of the loop, t_start + i is the schedule's index */
    const int n_steps = r->num_inference_steps - p->t_start, t0i = p->t_start;
    s->begin = t0i;
    if (m->type->prepare(m, sh->frames, sh->height, sh->width)) return -1;
    CVX_CHECK(m->n_latent == n && m->n_out == n);
    if (s->type->init(s, n)) return -1;
    if (ck && ck->stop_after_steps < 0) return cvx_error("--stop_after_steps must be >= 0");

    /* alike on every rank: agreed, so that rank 0 alone reports it */
    int bad = cd && (!cfg || cvx_dist_size(cd) != 2)
                  ? cvx_error("--cfg_parallel: needs classifier-free guidance (guidance_scale > 1) and 2 ranks per "
                              "group, got guidance_scale %g and %d", r->guidance_scale, cvx_dist_size(cd))
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
    if (cvx_cache_init(&cache, p->cache_kind, r->cache_threshold, p->teacache_coefficients, n_steps, m->num_layers))
        goto done;
    if (r->teacache_ret_steps) cvx_cache_set_teacache_window(&cache, 5, 0);
    /* the whole CFG batch's decisions on every rank; each keeps the residuals of its share */
    cvx_cache_set_layout(&cache, &(cvx_cache_layout){r->world_dist && cvx_dist_size(r->world_dist) > 1
                                                                     ? r->world_dist : cd ? cd : sd,
                                                                 cfg ? 2 : 1, cd ? 2 : 1, sd ? cvx_dist_size(sd) : 1});
    CVX_CHECK(cache.lnb == B);

    cvx_generator gen;
    int start = 0;
    if (ck && ck->path && ck->resume) {
        int rrc = cvx_checkpoint_read(ck, sh, n_steps, s, latents, &start, &gen, &cache);
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
            cvx_generator_seed(&gen, r->seed);
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
        const double t = s->timesteps[t0i + i], t_step = cvx_time();
        /* dynamic CFG counts the steps that run, as upstream */
        const double g = cvx_guidance_at(r->guidance_scale, r->use_dynamic_cfg, n_steps, t);
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
        if (cfg) cvx_cfg_combine(out, out + n, g, n, pred);
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
        cvx_debug("step %d/%d t=%g guidance %.6g", done_steps, n_steps, t, g);
        if (hook) hook(hook_ctx, i, latents, sh);
        if (r->on_step)
            r->on_step(r->on_step_user, &(cvx_step_info){i, n_steps, t, cfg ? g : 1.0,
                                                           cvx_cache_active(&cache) ? cache.last_compute : -1,
                                                           cvx_time() - t_step, latents, n});

        int stop = ck && ck->stop_after_steps > 0 && done_steps == ck->stop_after_steps && done_steps < n_steps;
        if (ck && ck->path && done_steps < n_steps &&
            (stop || (ck->every > 0 && done_steps % ck->every == 0))) {
            /* the cache's shares go to the writer first (collective); the others send only */
            int wrc = writer ? cvx_checkpoint_write(ck, sh, latents, done_steps, s, &gen, &cache)
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
