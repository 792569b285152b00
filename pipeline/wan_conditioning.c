/* The Wan family's conditioning (pipeline/family_wan.h): stage 1 encodes an image (I2V: the CLIP
 * image embeddings and the VAE's latent distribution of the image then zero frames; TI2V: the
 * image alone) or a video (V2V); stage 2 prepares the run from it as WanImageToVideoPipeline,
 * WanVideoToVideoPipeline and Wan 2.2 TI2V's prepare_latents do. */
#include "pipeline/family_wan.h"

#include <stdlib.h>

#include "error.h"

#define I2V_IMAGE_TOKENS 257   /* diffusers 0.33.1 splits the first 257 encoder rows off as the image's */

static wan_state *S(const cvx_model *m) { return m->fam; }

/* ---- stage 1 ---- */
/* The size checks stage 2 will make, before anything is encoded. */
static int shape_of(const void *m, const cvx_loop_params *lp, cvx_latent_shape *sh) {
    return wan_latent_shape_for(&S(m)->tcfg, lp, S(m)->vcfg.z_dim, sh);
}
static int check_size(cvx_model *m, cvx_mode mode, int frames, int height, int width) {
    (void)mode;
    cvx_latent_shape sh;
    return cvx_check_latent_size(m, frames, height, width, shape_of, m, &sh);
}

/* I2V: the video length decides the encoded condition (the image, then zero frames); TI2V: the image alone */
static int video_frames(cvx_model *m, const cvx_conditioning_params *p) {
    return p->max_frames ? p->max_frames : m->info.frames;
}
static int i2v_frames(cvx_model *m, const cvx_conditioning_params *p) {
    return S(m)->pc.expand_timesteps ? 1 : video_frames(m, p);
}
static int check(cvx_model *m, const cvx_conditioning_params *p, cvx_mode mode, int H, int W) {
    return mode == CVX_MODE_I2V && check_size(m, mode, video_frames(m, p), H, W) ? -1 : 0;
}

/* The CLIP image embeddings of the original image (WanImageToVideoPipeline.encode_image; Wan 2.2
 * I2V-A14B and TI2V have no image encoder). */
static int encode_image_clip(cvx_model *m, const cvx_rgb_frames *rgb, cvx_conditioning *out) {
    if (S(m)->tcfg.image_dim <= 0) return 0;
    if (cvx_image_encoder_load(m, "image_processor", &S(m)->proc, &S(m)->clip)) return -1;
    out->image_L = S(m)->clip->cfg.tokens, out->image_D = S(m)->clip->cfg.hidden_size;
    out->image_embeds = clip_vision_encode_rgb8(S(m)->clip, &S(m)->proc, rgb->rgb, rgb->width, rgb->height);
    return out->image_embeds ? 0 : -1;
}

/* The VAE's latent distribution of the pixels (V2V: the frames; I2V: the image, then zero frames;
 * TI2V: the image as latent frame 0). */
static int encode_vae(cvx_model *m, const cvx_conditioning_params *p, cvx_mode mode, const float *px, int T, int H,
                      int W, const char *src, cvx_progress_fn progress, void *user, cvx_conditioning *out) {
    if (cvx_component_load(m, m->family->parts, "vae")) return -1;
    const int ti2v = mode == CVX_MODE_I2V && S(m)->pc.expand_timesteps;
    const wan_vae *v = S(m)->vae;
    int F, h, w;
    if (wan_vae_encoded_shape(v, T, H, W, &F, &h, &w)) return -1;
    cvx_info("encoding %s: %d frame%s %dx%d with the Wan VAE%s", src, T, T == 1 ? "" : "s", W, H,
             ti2v ? " (the image as latent frame 0)" : mode == CVX_MODE_I2V ? " (the image, then zero frames)" : "");
    const size_t n = (size_t)v->cfg.z_dim * F * h * w;
    out->mean = cvx_alloc_f32(n);
    out->std = cvx_alloc_f32(n);
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae encode", wan_vae_encode_steps(T), progress, user);
    if (wan_vae_encode_dist(v, px, T, H, W, out->mean, out->std, &bar)) return -1;
    cvx_progress_finish(&bar);
    out->C = v->cfg.z_dim, out->T = F, out->h = h, out->w = w;
    out->frames = ti2v ? video_frames(m, p) : T;
    return 0;
}

static const cvx_media_encoder MEDIA = {check, check_size, i2v_frames, encode_image_clip, encode_vae};

int wan_encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                            cvx_conditioning *out) {
    return cvx_conditioning_encode(m, p, &MEDIA, progress, user, out);
}

/* ---- stage 2 ---- */
/* WanVideoToVideoPipeline.prepare_latents: the encoder sample (the generator's first draws),
 * normalised; the noise; add_noise at the first kept step (conditioning.c's cvx_prepare_v2v). */
typedef struct {
    const wan_vae_config *cfg;
    int F, h, w;
} v2v_norm;

static void v2v_to_x0(void *user, float *sample, float *x0) {
    const v2v_norm *n = user;
    wan_latents_normalize(n->cfg, sample, n->F, n->h, n->w, x0);
}

int wan_prepare_v2v(cvx_model *m, const cvx_conditioning *c, const cvx_sample_params *p, cvx_scheduler *sched,
                    cvx_sample_run *run) {
    const cvx_latent_shape *sh = &run->shape;
    if (cvx_conditioning_fits(c, sh->channels, sh->frames, sh->height, sh->width, "video-to-video", "")) return -1;
    v2v_norm n = {&S(m)->vcfg, sh->frames, sh->height, sh->width};
    return cvx_prepare_v2v(c, sched, p->strength, sh->numel, &run->loop, &run->gen, &run->init, v2v_to_x0, &n);
}

/* WanImageToVideoPipeline.prepare_latents: condition = [mask (4 channels: 1 on latent frame 0),
 * the encoded image-then-zeros video (its mode, normalised)]; the noise comes from the seed in the
 * loop; the image embeddings go to both CFG branches. */
int wan_prepare_i2v(cvx_model *m, const cvx_conditioning *c, cvx_sample_run *run) {
    const cvx_latent_shape *sh = &run->shape;
    if (cvx_conditioning_fits(c, sh->channels, sh->frames, sh->height, sh->width, "image-to-video",
                              " (stage 1 encodes the image for a video of --frames frames: give stage 1 the same --frames)"))
        return -1;
    if (S(m)->tcfg.image_dim > 0 &&   /* Wan 2.2 I2V-A14B: no image encoder */
        (!c->image_embeds || c->image_L != I2V_IMAGE_TOKENS || c->image_D != S(m)->tcfg.image_dim))
        return cvx_error("image-to-video conditioning: image_embeds [%d, %d], the transformer expects [%d, %d]",
                         c->image_L, c->image_D, I2V_IMAGE_TOKENS, S(m)->tcfg.image_dim);
    /* [4 + z, F, h, w] */
    cvx_sample_run_i2v(run, wan_i2v_condition(&S(m)->vcfg, c->mean, sh->frames, sh->height, sh->width), c);
    return 0;
}

/* Wan 2.2 TI2V (WanPipeline / WanImageToVideoPipeline with expand_timesteps, diffusers 0.35.2):
 * per-token timesteps, t_scale 1 on every token (T2V) or first_frame_mask (I2V: 0 on latent
 * frame 0's tokens); I2V: condition = the image's latents (mode, normalised), latent frame 0 of
 * the transformer's input every step (the denoiser) and of the final latents (latents_out). */
int wan_prepare_ti2v(cvx_model *m, const cvx_conditioning *c, cvx_sample_run *run) {
    const cvx_latent_shape *sh = &run->shape;
    wan_state *s = S(m);
    free(s->ti2v_cond);
    s->ti2v_cond = NULL;
    if (c && (c->C != sh->channels || c->T != 1 || c->h != sh->height || c->w != sh->width))
        return cvx_error("Wan 2.2 TI2V image-to-video: conditioning latents [%d, %d, %d, %d], expected the image's "
                         "[%d, 1, %d, %d] (stage 1 of this model encodes the image alone at the video's size)",
                         c->C, c->T, c->h, c->w, sh->channels, sh->height, sh->width);
    float *t_scale = wan_ti2v_t_scale(&s->tcfg, sh->frames, sh->height, sh->width, c != NULL, &run->plan.n_t);
    run->fam_run = t_scale, run->fam_run_free = free;
    for (int i = 0; i < run->plan.n_steps; i++) run->plan.steps[i].t_scale = t_scale;
    if (c) {
        s->ti2v_cond = cvx_alloc_f32((size_t)c->C * c->h * c->w);
        wan_latents_normalize(&s->vcfg, c->mean, 1, sh->height, sh->width, s->ti2v_cond);   /* latent_dist.mode() */
        wan_denoiser_set_ti2v_condition(&run->den, s->ti2v_cond);
    }
    return 0;
}
