/* The LTX-Video family's conditioning (pipeline/family_ltx.h): stage 1 encodes the image of
 * LTXImageToVideoPipeline or the conditions of LTXConditionPipeline (their latent distributions);
 * stage 2 prepares the run from them as the two pipelines' prepare_latents do. */
#include "pipeline/family_ltx.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "rng_lowp.h"
#include "stage2/ltx_pack.h"
#include "stage2/scheduler_ltx.h"
#include "stage3/ltx_vae_pipeline.h"

#define DEFAULT_COND_NOISE_SCALE 0.15   /* LTXConditionPipeline.__call__'s image_cond_noise_scale */

static ltx_state *S(const cvx_model *m) { return m->fam; }

int ltx_condition_class(const cvx_model *m) {
    const char *pc = m->info.pipeline_class;
    return pc && !strcmp(pc, "LTXConditionPipeline");
}

/* ---- stage 1 ---- */
static int vae_encode(void *m, const float *px, int n, int H, int W, float **mean, float **std) {
    return ltx_vae_encode_dist(S(m)->vae, px, n, H, W, mean, std);
}

/* LTXConditionPipeline's conditions, encoded in order (cvx_conditions_encode); the file keeps
 * their latent distributions along T (stage 2 draws the samples from the seeded generator). */
static int encode_conditions(cvx_model *m, const cvx_conditioning_params *p, cvx_conditioning *out) {
    const int H = p->height ? p->height : m->info.height, W = p->width ? p->width : m->info.width;
    const int frames = p->max_frames ? p->max_frames : m->info.frames;
    int F, h, w;
    if (ltx_latent_grid(frames, H, W, &F, &h, &w) || cvx_component_load(m, m->family->parts, "vae")) return -1;
    const cvx_conditions_vae vae = {"the LTX VAE", vae_encode, m};
    if (cvx_conditions_encode(m, p, &vae, frames, H, W, ltx_vae_get_config(S(m)->vae)->latent_channels, h, w, out))
        return -1;
    S(m)->condition_pipeline = 1;
    return 0;
}

/* LTXImageToVideoPipeline.prepare_latents' encoder half: the image resized to the video size,
 * [-1, 1], vae.encode(image[:, :, None]).latent_dist (mean, std; stage 2 draws the sample). */
static int check_i2v(cvx_model *m, const cvx_conditioning_params *p, cvx_mode mode, int H, int W) {
    (void)m, (void)p, (void)mode;
    int F, h, w;
    return ltx_latent_grid(1, H, W, &F, &h, &w);
}

static int encode_i2v(cvx_model *m, const cvx_conditioning_params *p, cvx_mode mode, const float *px, int T, int H,
                      int W, const char *src, cvx_progress_fn progress, void *user, cvx_conditioning *out) {
    (void)p, (void)mode, (void)T, (void)progress, (void)user;
    if (cvx_component_load(m, m->family->parts, "vae")) return -1;
    cvx_info("encoding %s: %dx%d with the LTX VAE", src, W, H);
    if (ltx_vae_encode_dist(S(m)->vae, px, 1, H, W, &out->mean, &out->std)) return -1;
    out->C = ltx_vae_get_config(S(m)->vae)->latent_channels, out->T = 1, out->h = H / 32, out->w = W / 32;
    out->frames = 1;
    return 0;
}

/* video-to-video is refused by the mode rule before check_size would run */
static const cvx_media_encoder MEDIA = {check_i2v, NULL, NULL, NULL, encode_i2v};

int ltx_encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                            cvx_conditioning *out) {
    if (p->n_conditions) return encode_conditions(m, p, out);
    if (p->image && !p->video && ltx_condition_class(m)) {   /* LTXConditionPipeline(image=): frame 0, strength 1 */
        const cvx_condition_spec c = {p->image, 0, 1.0};
        cvx_conditioning_params q = *p;
        q.image = NULL, q.conditions = &c, q.n_conditions = 1;
        return encode_conditions(m, &q, out);
    }
    return cvx_conditioning_encode(m, p, &MEDIA, progress, user, out);
}

/* ---- stage 2 ---- */
void ltx_run_free(void *p) {
    ltx_run *r = p;
    if (r) {
        free(r->t_scale), free(r->list);
        ltx_condition_run_free(&r->cr);
    }
    free(r);
}

/* LTXImageToVideoPipeline.prepare_latents: the image latent (latent_dist.sample, the generator's
 * first draw; normalised) in latent frame 0, the noise (the second draw) elsewhere; the steps
 * leave frame 0 and its tokens get timestep 0. */
int ltx_prepare_i2v(cvx_model *m, const cvx_conditioning *c, cvx_scheduler *sched, cvx_sample_run *run) {
    const cvx_latent_shape *sh = &run->shape;
    const size_t hw = (size_t)sh->height * sh->width;
    if (cvx_conditioning_fits(c, sh->channels, 1, sh->height, sh->width, "image-to-video", "") ||
        cvx_component_load(m, m->family->parts, "vae"))
        return -1;
    const ltx_vae *v = S(m)->vae;
    cvx_generator_seed(&run->gen, run->loop.req->seed);
    if (ltx_i2v_prepare(c->mean, c->std, sh->channels, sh->frames, sh->height, sh->width, ltx_vae_latents_mean(v),
                        ltx_vae_latents_std(v), (float)ltx_vae_get_config(v)->scaling_factor, &run->gen,
                        (cvx_dtype)run->loop.noise_dtype, &run->init))
        return -1;
    run->loop.init_latents = run->init, run->loop.init_generator = &run->gen;
    ltx_scheduler_keep_first(sched, sh->channels, hw * sh->frames, hw);
    return 0;
}

/* LTXConditionPipeline.prepare_latents (stage2/ltx_cond.h) and its loop: the latents become packed
 * tokens (the extra condition tokens first: the loop's shape has their frames in front), step 0's
 * re-noising of the hard conditions drawn here, the later ones by the scheduler's steps. */
int ltx_prepare_condition(cvx_model *m, const cvx_sample_params *p, const cvx_conditioning *c, cvx_scheduler *sched,
                          cvx_sample_run *run, ltx_run *lr) {
    cvx_latent_shape *sh = &run->shape;
    const int C = sh->channels, F = sh->frames, h = sh->height, w = sh->width;
    const size_t hw = (size_t)h * w;
    if (c->C != C || c->h != h || c->w != w)
        return cvx_error("the conditions' latents [%d, %d, %d, %d] do not fit the video's [%d, %d, %d, %d]", c->C, c->T,
                         c->h, c->w, C, F, h, w);
    if (cvx_component_load(m, m->family->parts, "vae")) return -1;
    ltx_condition items[CVX_MAX_CONDITIONS];
    for (int k = 0; k < c->n_items; k++)
        items[k] = (ltx_condition){NULL, NULL, c->items[k].T, c->items[k].frame_index, (float)c->items[k].strength};
    const ltx_vae *v = S(m)->vae;
    const float scale = (float)(p->image_cond_noise_set ? p->image_cond_noise_scale : DEFAULT_COND_NOISE_SCALE);
    cvx_generator_seed(&run->gen, p->seed);
    if (ltx_condition_start(c->mean, c->std, c->T, items, c->n_items, C, F, h, w,
                            p->frame_rate > 0 ? p->frame_rate : m->info.fps, ltx_vae_latents_mean(v),
                            ltx_vae_latents_std(v), (float)ltx_vae_get_config(v)->scaling_factor, &run->gen,
                            (cvx_dtype)run->loop.noise_dtype, (float)sched->timesteps[0], scale, &lr->cr, &run->init))
        return -1;
    const int T = lr->cr.tokens;
    *sh = (cvx_latent_shape){.frames = T / (int)hw, .channels = C, .height = h, .width = w,
                             .numel = (size_t)T * C, .channels_major = 1};
    run->loop.init_latents = run->init, run->loop.init_generator = &run->gen;
    ltx_scheduler_set_condition(sched, lr->cr.mask, lr->cr.latents, T, C, scale);
    S(m)->cond_extra_frames = lr->cr.extra / (int)hw;
    cvx_info("conditions: %d, %d extra tokens, image_cond_noise_scale %g", c->n_items, lr->cr.extra, scale);
    return 0;
}
