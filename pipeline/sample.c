/* sample: embeddings -> latents (the CogVideoXPipeline denoising loop, stage2/sampler.c). */
#include "pipeline/internal.h"
#include "pipeline/conditioning.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "validate.h"
#include "rng_lowp.h"
#include "stage2/cache.h"
#include "stage2/preview.h"
#include "stage2/sampler.h"
#include "stage2/scheduler.h"
#include "stage3/video.h"

#define DEFAULT_STEPS 50

void cvx_latents_free(cvx_latents *l) {
    free(l->data);
    free(l->generator);
    memset(l, 0, sizeof *l);
}

int cvx_latents_steps_ran(const cvx_latents *l) {
    const int from = l->resumed_from > l->steps_skipped ? l->resumed_from : l->steps_skipped;
    return l->steps_done - from;
}

void cvx_latents_steps_text(const cvx_latents *l, const cvx_sample_params *r, char *buf, size_t n) {
    const int total = r->num_inference_steps, k = l->steps_skipped;
    size_t len;
    if (k > 0)
        snprintf(buf, n, "%d of %d steps %s (strength %g skips the first %d)", total - k, total, l->scheduler,
                 r->strength, k);
    else snprintf(buf, n, "%d step%s %s", total, total == 1 ? "" : "s", l->scheduler);
    len = strlen(buf);
    if (l->resumed_from && len < n) snprintf(buf + len, n - len, ", resumed after %d", l->resumed_from - k);
}

cvx_sample_params cvx_sample_default_params(const cvx_model *m) {
    const cvx_model_info *i = &m->info;
    return (cvx_sample_params){.frames = i->frames, .height = i->height, .width = i->width,
                               .num_inference_steps = DEFAULT_STEPS, .guidance_scale = i->guidance_scale,
                               .scheduler = i->scheduler, .deepcache_start = CVX_DEEPCACHE_START,
                               .deepcache_end = CVX_DEEPCACHE_END, .deepcache_interval = CVX_DEEPCACHE_INTERVAL};
}

int cvx_sample_resolve(cvx_model *m, const cvx_sample_params *p, cvx_sample_params *r) {
    *r = *p;
    if (!m->has_denoiser_config) {
        char dir[4200];
        return cvx_model_component(m->dir, "transformer", "config.json", dir, sizeof dir);
    }
    const cvx_model_info *i = &m->info;
    /* I2V / V2V: the size (V2V: the frame count) stage 1 encoded */
    if (r->conditioning && cvx_sample_conditioning_sizes(r->conditioning, r)) return -1;
    if (!r->frames) r->frames = i->frames;
    if (!r->height) r->height = i->height;
    if (!r->width) r->width = i->width;
    if (r->n_timesteps) {   /* explicit timesteps: strictly descending, >= 0, one per step */
        if (!r->timesteps || r->n_timesteps < 1) return cvx_error("--timesteps: no values");
        if (r->num_inference_steps && r->num_inference_steps != r->n_timesteps)
            return cvx_error("--timesteps gives %d values, --num_inference_steps is %d (give one of them, or equal "
                             "counts)", r->n_timesteps, r->num_inference_steps);
        for (int k = 0; k < r->n_timesteps; k++)
            if (!(r->timesteps[k] >= 0) || !isfinite(r->timesteps[k]) || (k && !(r->timesteps[k] < r->timesteps[k - 1])))
                return cvx_error("--timesteps: value %d is %g, expected finite values >= 0 in strictly descending order",
                                 k + 1, r->timesteps[k]);
        r->num_inference_steps = r->n_timesteps;
    }
    if (!r->num_inference_steps) r->num_inference_steps = DEFAULT_STEPS;
    if (r->guidance_scale < 0) r->guidance_scale = i->guidance_scale;
    if (!r->scheduler) r->scheduler = i->scheduler;
    if (!(r->flow_shift >= 0) || !isfinite(r->flow_shift))
        return cvx_error("--flow_shift must be a positive number, got %g", r->flow_shift);
    const cvx_scheduler_type *st = r->flow_shift > 0 && r->scheduler ? cvx_scheduler_find(r->scheduler) : NULL;
    if (st && strcmp(st->family, "flow") != 0)
        return cvx_error("--flow_shift %g: the %s scheduler has no flow shift (it is for the flow-matching schedulers "
                         "of Wan: unipc, euler)", r->flow_shift, st->name);
    cvx_clear_error();   /* an unknown name is reported where the scheduler is loaded */
    if (!r->conditioning && r->strength) return cvx_error("--strength is for video-to-video (give stage 1 a --video)");
    if (!r->noise_dtype) r->noise_dtype = m->ctx->precision == CVX_PRECISION_BF16 ? "bf16" : "f32";
    cvx_dtype nd;
    if (cvx_noise_dtype_parse(r->noise_dtype, &nd)) return cvx_error_prefix("--noise_dtype");
    r->noise_dtype = nd == CVX_BF16 ? "bf16" : nd == CVX_F16 ? "fp16" : "f32";   /* canonical name */
    cvx_cache_kind ck;
    if (!r->cache) r->cache = "none";
    if (cvx_cache_parse_kind(r->cache, &ck)) return -1;
    if (ck == CVX_CACHE_DEEPCACHE) {
        if (r->cache_threshold != 0)
            return cvx_error("--cache_threshold %g: deepcache has no threshold (its steps are --deepcache_start, "
                             "--deepcache_end, --deepcache_interval)", r->cache_threshold);
        if (!r->deepcache_interval)   /* a zeroed request: the seed project's schedule */
            r->deepcache_start = CVX_DEEPCACHE_START, r->deepcache_end = CVX_DEEPCACHE_END,
            r->deepcache_interval = CVX_DEEPCACHE_INTERVAL;
        cvx_cache dc = {0};
        if (cvx_cache_set_deepcache(&dc, r->deepcache_start, r->deepcache_end, r->deepcache_interval)) return -1;
    } else if (ck == CVX_CACHE_NONE || !(r->cache_threshold > 0)) {
        r->cache = "none", r->cache_threshold = 0;
    }
    if (cvx_family_check_options(m->family, r) || m->family->check_sample(m, r)) return -1;
    cvx_preview_mode pm;
    if (!r->preview) r->preview = "latent";
    if (cvx_preview_parse_mode(r->preview, &pm)) return -1;
    if (r->preview_every < 0) return cvx_error("--preview_every must be >= 0, got %d", r->preview_every);
    if (r->preview_every > 0 && !r->preview_path) return cvx_error("preview_every set without a preview_path");
    return 0;
}

/* --preview vae: latent frame 0 through the model's VAE, silently. */
static void quiet_progress(void *user, const char *label, int done, int total) {
    (void)user, (void)label, (void)done, (void)total;
}
static int preview_decode(void *user, const float *z, int C, int h, int w, float **rgb, int *T, int *H, int *W) {
    cvx_frames f;
    cvx_decode_params dp = {0};
    if (cvx_decode(user, &dp, z, 1, C, 1, h, w, "preview latents", quiet_progress, NULL, &f)) return -1;
    *rgb = f.data[0], *T = f.T, *H = f.H, *W = f.W;
    f.data[0] = NULL;
    cvx_frames_free(&f);
    return 0;
}

/* The conditioning tensors fit the family's slots: their count and width D (the length L is the
 * stage-1 file's rule, cvx_embeddings_from_file; the API takes other lengths where the model does). */
static int check_cond(cvx_model *m, const cvx_embeddings *emb, const cvx_cond_set *more) {
    const cvx_cond_slot *slots = m->family->cond_slots;
    CVX_CHECK(slots);   /* every row declares its conditioning */
    int n = 1;
    while (slots[n].name) n++;
    if ((more ? more->n : 0) != n - 1)
        return cvx_error("the %s conditioning has %d tensor%s per branch, %d given", m->family->name, n,
                         n == 1 ? "" : "s", 1 + (more ? more->n : 0));
    for (int i = 0; i < n; i++) {
        int L, D;
        const int gl = i ? more->t[i - 1].L : emb->L, gd = i ? more->t[i - 1].D : emb->D;
        cvx_cond_slot_dims(m, i, &L, &D);
        if (gd != D) return cvx_error("%s [%d, %d], expected [L, %d]", slots[i].name, gl, gd, D);
    }
    return 0;
}

/* cvx_sample_resolve, then the model type against the mode (T2V / I2V / V2V). */
static int resolve_for_sample(cvx_model *m, const cvx_sample_params *p, cvx_sample_params *r) {
    if (cvx_sample_resolve(m, p, r)) return -1;
    return cvx_check_model_mode(m, r->conditioning ? r->conditioning->mode : CVX_MODE_T2V);
}

/* The scheduler of the model's scheduler_config.json, its type overridden by `name`, its flow shift
 * by flow_shift (> 0). */
static int load_scheduler(cvx_model *m, const char *name, double flow_shift, cvx_scheduler *s, char *path, size_t n) {
    char dir[4200];
    const cvx_scheduler_type *override = NULL;
    if (name && !(override = cvx_scheduler_find(name))) return -1;
    if (cvx_model_component(m->dir, "scheduler", "scheduler_config.json", dir, sizeof dir)) return -1;
    snprintf(path, n, "%s/scheduler_config.json", dir);
    return cvx_scheduler_load_shift(s, path, override, flow_shift);
}

/* The request's on_step observer behind the loop's: the step as the API's cvx_step_info. */
typedef struct {
    void (*fn)(void *user, const cvx_step_info *info);
    void *user;
} step_relay;
static void relay_step(void *user, const cvx_loop_step *s) {
    const step_relay *r = user;
    r->fn(r->user, &(cvx_step_info){s->step, s->n_steps, s->timestep, s->guidance, s->cache, s->seconds, s->latents,
                                    s->numel, s->expert});
}

int cvx_sample(cvx_model *m, const cvx_sample_params *params, const cvx_embeddings *emb, cvx_progress_fn progress,
               void *user, cvx_latents *out) {
    memset(out, 0, sizeof *out);
    cvx_ctx_use(m->ctx);
    cvx_sample_params p;
    if (resolve_for_sample(m, params, &p)) return -1;
    char sched_cfg[4300];
    cvx_scheduler sched;
    if (load_scheduler(m, p.scheduler, params->flow_shift, &sched, sched_cfg, sizeof sched_cfg)) return -1;
    if (p.flow_shift > 0) cvx_info("flow shift %g (--flow_shift, instead of %s's)", p.flow_shift, sched_cfg);
    int rc = -1;
    cvx_sample_run run = {0};
    cvx_dtype nd;
    if (cvx_noise_dtype_parse(p.noise_dtype, &nd)) goto done;
    sched.noise_dtype = (int)nd;
    if (cvx_scheduler_set_timesteps(&sched, p.num_inference_steps)) goto done;   /* the step count, before any work */
    if (check_cond(m, emb, p.cond_more) || cvx_embeddings_finite(emb, p.cond_more)) goto done;
    cvx_cache_kind kind;
    if (cvx_cache_parse_kind(p.cache, &kind)) goto done;
    /* the request as the loop reads it; the family adds its part (shape, conditioning, coefficients) */
    step_relay relay = {p.on_step, p.on_step_user};
    const cvx_loop_request req = {.frames = p.frames, .height = p.height, .width = p.width,
                                  .num_inference_steps = p.num_inference_steps, .guidance_scale = p.guidance_scale,
                                  .use_dynamic_cfg = p.use_dynamic_cfg, .seed = p.seed,
                                  .cache_threshold = p.cache_threshold, .deepcache_start = p.deepcache_start,
                                  .deepcache_end = p.deepcache_end, .deepcache_interval = p.deepcache_interval,
                                  .cfg_dist = p.cfg_dist, .sp_dist = p.sp_dist,
                                  .world_dist = p.world_dist, .on_step = p.on_step ? relay_step : NULL,
                                  .on_step_user = &relay};
    cvx_loop_params *sp = &run.loop;
    *sp = (cvx_loop_params){.req = &req, .vae_scale_spatial = m->info.vae_scale_spatial,
                            .vae_scale_temporal = m->info.vae_scale_temporal, .progress = progress,
                            .progress_user = user, .noise_dtype = (int)nd, .cache_kind = kind};
    if (m->family->sample_setup(m, &p, emb, &sched, &run) || cvx_model_attach_loras(m)) goto done;
    const cvx_latent_shape *sh = &run.shape;

    cvx_checkpointing ck = {p.checkpoint_path, p.checkpoint_every, p.resume, p.stop_after_steps,
                            p.fingerprint};
    cvx_sample_result res;
    memcpy(out->teacache_coefficients, sp->teacache_coefficients, sizeof(double) * 5);
    if (kind == CVX_CACHE_DEEPCACHE)
        cvx_info("step cache deepcache: full steps before %d, from %d on and every %d from %d; the others run the "
                 "last block on the kept streams", p.deepcache_start, p.deepcache_end, p.deepcache_interval,
                 p.deepcache_start);
    else if (kind != CVX_CACHE_NONE)
        cvx_info("step cache %s, threshold %g%s", p.cache, p.cache_threshold, kind == CVX_CACHE_TEACACHE ?
                 (p.teacache_coefficients ? ", given coefficients" : ", the model's published coefficients") : "");
    cvx_preview pv = {.path = p.preview_path, .every = p.preview_every, .n_steps = p.num_inference_steps,
                      .rgb = &run.preview_rgb, .sched = &sched, .decode = preview_decode,
                      .decode_user = m, .write_sheet = video_write_contact_sheet};
    if (p.preview_every > 0 && cvx_preview_parse_mode(p.preview, &pv.mode)) goto done;
    float *latents = cvx_alloc_f32(sh->numel);   // the family's loop layout
    if (cvx_sample_loop(&run.plan, &sched, sp, sh, run.branch, &ck, p.preview_every > 0 ? cvx_preview_hook : NULL,
                        &pv, latents, &res)) {
        free(latents);
        goto done;
    }
    m->family->latents_out(m, sh, latents, out);   // [1, C, T, h, w]
    free(latents);
    /* schedule positions; V2V's skipped steps are steps_skipped (summaries count steps run) */
    out->steps_done = sp->t_start + res.steps_done;
    out->steps_skipped = sp->t_start;
    out->resumed_from = res.resumed_from ? sp->t_start + res.resumed_from : 0;
    out->seconds = res.seconds;
    out->scheduler = sched.type->name;   /* a static table entry: outlives sched */
    out->family = m->family->name;       /* likewise */
    out->cache_steps_computed = res.cache_steps_computed;
    out->cache_steps_skipped = res.cache_steps_skipped;
    out->cache_blocks_skipped = res.cache_blocks_skipped;
    if (m->family->decode_uses_generator && out->steps_done == p.num_inference_steps) {
        out->generator = cvx_malloc(sizeof res.gen);
        memcpy(out->generator, &res.gen, sizeof res.gen);
    }
    out->previews = pv.written;
    out->preview_seconds = pv.seconds;
    rc = 0;
done:
    cvx_sample_run_free(&run);
    cvx_scheduler_free(&sched);
    return rc;
}
