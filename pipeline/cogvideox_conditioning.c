/* The CogVideoX family's conditioning (pipeline/family_cogvideox.h): stage 1 encodes the image
 * (CogVideoXImageToVideoPipeline) or the video (CogVideoXVideoToVideoPipeline) with the VAE's
 * encoder (frame batches, tiles when large); stage 2 prepares the run from the latent
 * distribution as their prepare_latents do. */
#include "pipeline/family_cogvideox.h"

#include <string.h>

#include "error.h"
#include "ops.h"
#include "rng_lowp.h"
#include "stage2/cogvideox_family.h"
#include "stage3/cogvideox_vae_pipeline.h"

/* An untiled encode estimated above this is tiled (the decoder's budget). */
#define ENCODE_TILING_BUDGET (6.0 * 1024 * 1024 * 1024)

static cogvideox_state *S(const cvx_model *m) { return m->fam; }

/* ---- stage 1 ---- */
/* The latent shape the transformer will run on, checking the size (and for V2V the frame
 * count) against the model as stage 2 will: the errors come before anything is encoded. */
static int shape_t2v(const void *m, const cvx_loop_params *lp, cvx_latent_shape *sh) {
    return cogvideox_latent_shape_for(&S(m)->tcfg, lp, 0, sh);
}
static int shape_i2v(const void *m, const cvx_loop_params *lp, cvx_latent_shape *sh) {
    return cogvideox_latent_shape_for(&S(m)->tcfg, lp, 1, sh);
}
static int check_size(cvx_model *m, cvx_mode mode, int frames, int height, int width) {
    cvx_latent_shape sh;
    if (cvx_check_latent_size(m, frames, height, width, mode == CVX_MODE_I2V ? shape_i2v : shape_t2v, m, &sh)) return -1;
    if (mode == CVX_MODE_V2V && sh.pad_frames)   /* upstream raises instead of padding */
        return cvx_error("--video: %d frames make %d latent frames, not a multiple of patch_size_t %d (CogVideoX1.5 "
                         "video-to-video): use %d or %d frames", frames, sh.frames - sh.pad_frames,
                         S(m)->tcfg.patch_size_t, frames - m->info.vae_scale_temporal,
                         frames + m->info.vae_scale_temporal);
    return 0;
}

static int check(cvx_model *m, const cvx_conditioning_params *p, cvx_mode mode, int H, int W) {
    if (mode == CVX_MODE_I2V && p->max_frames)
        return cvx_error("--frames %d with --image: CogVideoX encodes the image alone; give the frame count to stage 2",
                         p->max_frames);
    char tdir[4200];   /* the mode and size checks read the transformer's config (not its weights) */
    if (!m->has_denoiser_config && cvx_model_component(m->dir, "transformer", "config.json", tdir, sizeof tdir))
        return cvx_error_prefix("--%s: the model's transformer config is needed to check the mode and size",
                                p->image ? "image" : "video");
    if (H < 1 || W < 1) return cvx_error("no --height/--width given and the model has no default size");
    return mode == CVX_MODE_I2V && check_size(m, mode, m->info.frames ? m->info.frames : 1, H, W) ? -1 : 0;
}

/* encode: frame batches, tiles when an untiled encode would be large */
static int encode_vae(cvx_model *m, const cvx_conditioning_params *p, cvx_mode mode, const float *px, int F, int H,
                      int W, const char *src, cvx_progress_fn progress, void *user, cvx_conditioning *out) {
    (void)p, (void)mode;
    cogvideox_vae_encode_tiles t;
    if (cogvideox_family_vae(m, 1) || cogvideox_vae_encode_tiles_for(&S(m)->enc, F, H, W, ENCODE_TILING_BUDGET, &t)) return -1;
    cvx_info("encoding %s: %d frame%s %dx%d with %s/vae%s", src, F, F == 1 ? "" : "s", W, H, m->dir,
             t.tiled ? " in tiles" : "");
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae encode", t.steps, progress, user);
    cogvideox_vae_encode_dist(&S(m)->enc, &t, px, F, H, W, &out->mean, &out->std, &out->T, &out->h, &out->w, &bar);
    cvx_progress_finish(&bar);
    out->C = S(m)->enc.latent_channels;
    out->frames = F;
    return 0;
}

static const cvx_media_encoder MEDIA = {check, check_size, NULL, NULL, encode_vae};

int cogvideox_encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                                  cvx_conditioning *out) {
    return cvx_conditioning_encode(m, p, &MEDIA, progress, user, out);
}

/* ---- stage 2 ---- */
/* V2V: the encoder sample × vae_scaling_factor (whatever invert_scale_latents says, as upstream),
 * [C, T, hw] -> the loop's [T, C, hw] */
typedef struct {
    float k;
    int C, T;
    size_t hw;
} v2v_scale;

static void v2v_to_x0(void *user, float *sample, float *x0) {
    const v2v_scale *v = user;
    for (size_t i = 0; i < (size_t)v->C * v->T * v->hw; i++) sample[i] *= v->k;
    cvx_permute_fc_to_cf(sample, v->C, v->T, v->hw, 0, x0);
}

int cogvideox_prepare_conditioned(cvx_model *m, const cvx_conditioning *c, cvx_scheduler *sched, double strength,
                                  cvx_loop_params *sp, const cvx_latent_shape *sh, cvx_prepared *out) {
    memset(out, 0, sizeof *out);
    const size_t hw = (size_t)sh->height * sh->width, chw = (size_t)sh->channels * hw;
    if (c->C != sh->channels || c->h != sh->height || c->w != sh->width)
        return cvx_error("conditioning latents [%d, %d, %d, %d] do not fit the latent grid [%d, %d, %d] "
                         "(channels, height, width)", c->C, c->T, c->h, c->w, sh->channels, sh->height, sh->width);
    if (c->mode == CVX_MODE_I2V && c->T != 1)
        return cvx_error("image-to-video conditioning has %d latent frames, expected 1", c->T);
    if (c->mode == CVX_MODE_V2V && (c->T != sh->frames || sh->pad_frames))
        return cvx_error("video-to-video conditioning has %d latent frames, the loop %d", c->T, sh->frames);
    const double sf = m->info.vae_scaling_factor;
    if (c->mode == CVX_MODE_V2V) {
        v2v_scale v = {(float)sf, c->C, c->T, hw};
        return cvx_prepare_v2v(c, sched, strength, sh->numel, sp, &out->gen, &out->init, v2v_to_x0, &v);
    }
    /* I2V: latent_dist.sample(generator), the generator's first draws (in --noise_dtype, as the
     * pipeline's dtype draws them), × vae_scaling_factor_image (or 1 / it: invert_scale_latents,
     * 1.5), then the noise × init_noise_sigma 1.0 */
    cvx_generator_seed(&out->gen, sp->req->seed);
    if (cogvideox_i2v_latents(c->mean, c->std, chw, sh->numel, (float)(S(m)->vcfg.invert_scale_latents ? 1.0 / sf : sf),
                              &out->gen, (cvx_dtype)sp->noise_dtype, &out->image_latents, &out->init))
        return -1;
    sp->cond = out->image_latents;
    sp->init_latents = out->init;
    sp->init_generator = &out->gen;
    sp->t_start = 0;
    return 0;
}
