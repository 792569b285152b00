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

/* The loop's current expert: its denoiser prepared for the grid and on the SP group. */
typedef struct {
    const cvx_sample_plan *plan;
    const cvx_latent_shape *sh;
    cvx_dist *sd;                 /* sequence parallelism, NULL = off */
    int cur;                      /* the resident expert, -1 = none */
    cvx_denoiser *m;
    double comm0_s, comm0_bytes;  /* its exchange counters when acquired */
    double comm_s, comm_bytes;    /* of the experts released so far */
} expert_slot;

static void expert_release(expert_slot *x) {
    if (x->cur < 0) return;
    double t, b;
    x->m->type->comm(x->m, &t, &b);
    x->comm_s += t - x->comm0_s, x->comm_bytes += b - x->comm0_bytes;
    if (x->sd) x->m->type->set_sp(x->m, NULL);
    x->plan->experts->release(x->plan->experts, x->cur);
    x->cur = -1, x->m = NULL;
}

/* Make expert e resident: acquire, prepare for the grid, join the SP group. `all`: every rank of
 * the run agrees (a failure on one rank stops all). */
static int expert_switch(expert_slot *x, int e, cvx_dist *all) {
    expert_release(x);
    cvx_denoiser *m = NULL;
    int bad = x->plan->experts->acquire(x->plan->experts, e, &m);
    if (!bad) {
        bad = m->type->prepare(m, x->sh->frames, x->sh->height, x->sh->width);
        if (!bad) CVX_CHECK(m->n_latent == x->sh->numel && m->n_out == x->sh->numel);
    }
    if (!bad && x->sd) bad = m->type->set_sp(m, x->sd);   /* the head count must divide */
    if (all ? cvx_dist_agree(all, bad) : bad) {
        if (m && x->sd) m->type->set_sp(m, NULL);
        if (m) x->plan->experts->release(x->plan->experts, e);
        return -1;
    }
    x->cur = e, x->m = m;
    m->type->comm(m, &x->comm0_s, &x->comm0_bytes);
    return 0;
}

int cvx_sample_loop(const cvx_sample_plan *plan, cvx_scheduler *s, const cvx_loop_params *p,
                    const cvx_latent_shape *sh, const void *const cond[2], const cvx_checkpointing *ck,
                    cvx_step_hook hook, void *hook_ctx, float *latents, cvx_sample_result *result) {
    const cvx_loop_request *r = p->req;
    const size_t n = sh->numel;
    const int cfg = cvx_plan_uses_cfg(plan);
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
    CVX_CHECK(plan->n_steps == n_steps && plan->experts && plan->experts->n >= 1);
    for (int i = 0; i < n_steps; i++) CVX_CHECK(plan->steps[i].expert >= 0 && plan->steps[i].expert < plan->experts->n);
    s->begin = t0i;
    if (s->type->init(s, n)) return -1;
    if (ck && ck->stop_after_steps < 0) return cvx_error("--stop_after_steps must be >= 0");

    /* alike on every rank: agreed, so that rank 0 alone reports it */
    int bad = cd && (!cfg || cvx_dist_size(cd) != 2)
                  ? cvx_error("--cfg_parallel: needs classifier-free guidance (guidance_scale > 1) and 2 ranks per "
                              "group, got guidance_scale %g and %d", r->guidance_scale, cvx_dist_size(cd))
                  : 0;
    if (all ? cvx_dist_agree(all, bad) : bad) return -1;

    /* this rank's branches: negative first, as upstream's torch.cat([negative, prompt]) */
    const void *conds[2] = {cond[0], cond[1]};
    if (cd) conds[0] = cond[cvx_dist_rank(cd) == 0 ? 0 : 1];
    else if (!cfg) conds[0] = cond[1];
    float *out = cvx_alloc_f32((size_t)(cfg ? 2 : 1) * n);   /* [2|1, F, C, h, w] model output (both branches) */
    float *branch = cd ? cvx_alloc_f32(n) : NULL;     /* [1, F, C, h, w] this rank's branch (CFG-parallel) */
    float *pred = cvx_alloc_f32(n), *prev = cvx_alloc_f32(n);
    float *t_tok = plan->n_t ? cvx_alloc_f32(plan->n_t) : NULL;   /* per-token timesteps of a step */
    int rc = -1;
    expert_slot ex = {plan, sh, sd, -1, NULL, 0, 0, 0, 0};
    cvx_cache cache;
    memset(&cache, 0, sizeof cache);
    cvx_generator gen;
    int start = 0;
    /* the cache (its block count is the expert's, set below), the loop state, then the expert of
     * the first step to run (a resumed run's) */
    if (cvx_cache_init(&cache, p->cache_kind, r->cache_threshold, p->teacache_coefficients, n_steps, 0)) goto done;
    cvx_cache_set_teacache_window(&cache, plan->teacache_first, plan->teacache_last);
    if (cache.kind == CVX_CACHE_DEEPCACHE &&
        cvx_cache_set_deepcache(&cache, r->deepcache_start, r->deepcache_end, r->deepcache_interval))
        goto done;
    /* the whole CFG batch's decisions on every rank; each keeps the residuals of its share */
    cvx_cache_set_layout(&cache, &(cvx_cache_layout){r->world_dist && cvx_dist_size(r->world_dist) > 1
                                                                     ? r->world_dist : cd ? cd : sd,
                                                                 cfg ? 2 : 1, cd ? 2 : 1, sd ? cvx_dist_size(sd) : 1});
    CVX_CHECK(cache.lnb == B);

    if (ck && ck->path && ck->resume) {
        int rrc = cvx_checkpoint_read(ck, plan, sh, n_steps, s, latents, &start, &gen, &cache);
        if (all) rrc = cvx_dist_agree(all, rrc);   /* every rank reads it; any failure stops all */
        if (rrc) goto done;
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
    }
    if (expert_switch(&ex, plan->steps[start].expert, all)) goto done;
    bad = cvx_cache_use_layers(&cache, ex.m->num_layers);   /* alike on every rank */
    if (all ? cvx_dist_agree(all, bad) : bad) goto done;
    if (ck && ck->path && ck->resume) cvx_info("resuming from %s after step %d of %d", ck->path, start, n_steps);
    else if (writer && ck && ck->path && cvx_is_file(ck->path))
        cvx_warn("%s exists and will be overwritten by this new run (pass --resume to continue it instead)", ck->path);
    result->resumed_from = start;
    if (ck && ck->path && ck->every > 0)
        cvx_info("checkpoint every %d step%s to %s (an interrupted run continues with --resume)", ck->every,
                 ck->every == 1 ? "" : "s", ck->path);

    cvx_progress bar;
    cvx_progress_start_cb(&bar, "denoising", n_steps - start, p->progress, p->progress_user);
    double t0 = cvx_time(), comm_s = 0;
    int done_steps = start;
    for (int i = start; i < n_steps; i++) {
        const cvx_plan_step *ps = &plan->steps[i];
        const double t = s->timesteps[t0i + i], t_step = cvx_time();
        if (ps->expert != ex.cur) {   /* a switch: the next expert resident, its cache fresh */
            cvx_debug("step %d/%d: expert %d", i + 1, n_steps, ps->expert);
            if (expert_switch(&ex, ps->expert, all)) goto done;
            bad = cvx_cache_use_layers(&cache, ex.m->num_layers);
            if (all ? cvx_dist_agree(all, bad) : bad) goto done;
        }
        if (ps->cache_reset) cvx_cache_reset(&cache);
        cvx_denoiser *m = ex.m;
        /* dynamic CFG counts the steps that run, as upstream */
        const double g = cvx_guidance_at(ps->guide.scale, ps->guide.dynamic, n_steps, t);
        /* this rank's CFG branches, one forward each (with step caching: one decision for the batch) */
        cvx_denoise_input in = {.x = latents, .t = t};
        if (ps->t_scale) {   /* per-token timesteps: t_scale[k]·t in float32, as mask * t upstream */
            for (size_t k = 0; k < plan->n_t; k++) t_tok[k] = ps->t_scale[k] * (float)t;
            in.t_tokens = t_tok, in.n_t = plan->n_t;
        }
        int frc = cvx_cache_step(m, &cache, i, &in, conds, cd ? branch : out);
        if (frc) cvx_error_prefix("step %d/%d (t=%g)", i + 1, n_steps, t);
        /* under MPI: agree (a rank failing alone stops all); CFG-parallel: out = [uncond, cond] */
        double tc = cvx_time();
        if (all) frc = cvx_dist_agree(all, frc);
        if (cd && !frc) frc = cvx_dist_allgather(cd, branch, n * sizeof(float), out);
        comm_s += cvx_time() - tc;   /* includes waiting for the slower rank */
        if (frc) goto done;
        const int guided = cfg && cvx_guider_active(&ps->guide);
        /* guided: [uncond, cond] combined; else the conditional branch (as it is, or rescaled) */
        cvx_guider_apply(&ps->guide, g, guided ? out : NULL, cfg ? out + n : out, n, pred);

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
            r->on_step(r->on_step_user, &(cvx_loop_step){i, n_steps, t, guided ? g : 1.0,
                                                           cvx_cache_active(&cache) ? cache.last_compute : -1,
                                                           cvx_time() - t_step, latents, n, ps->expert});

        int stop = ck && ck->stop_after_steps > 0 && done_steps == ck->stop_after_steps && done_steps < n_steps;
        if (ck && ck->path && done_steps < n_steps &&
            (stop || (ck->every > 0 && done_steps % ck->every == 0))) {
            /* the cache's shares go to the writer first (collective); the others send only */
            int wrc = writer ? cvx_checkpoint_write(ck, plan, sh, latents, done_steps, s, &gen, &cache)
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
        expert_release(&ex);   /* its exchange counters added */
        cvx_info("sequence parallelism (%d ranks): %.2f MB sent per step by each rank; %.3f s of %.2f s in the "
                 "exchanges (%.2f %%, with waiting for the other ranks)", cvx_dist_size(sd),
                 ex.comm_bytes / 1e6 / (done_steps - start), ex.comm_s, result->seconds,
                 100.0 * ex.comm_s / (result->seconds > 0 ? result->seconds : 1));
    }
    result->cache_steps_computed = cache.steps_computed;
    result->cache_steps_skipped = cache.steps_skipped;
    result->cache_blocks_skipped = cvx_cache_blocks_skipped(&cache);
    result->gen = gen;
    rc = 0;
done:
    expert_release(&ex);
    cvx_cache_free(&cache);
    free(out); free(pred); free(prev); free(branch); free(t_tok);
    return rc;
}
