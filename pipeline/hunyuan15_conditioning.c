/* The HunyuanVideo-1.5 family's image-to-video conditioning (pipeline/family_hunyuan15.h):
 * HunyuanVideo15ImageToVideoPipeline's image (the bucket size, the crop, SigLIP's embeddings, the
 * VAE's latent distribution of the first frame) in stage 1, prepare_cond_latents_and_mask in stage 2. */
#include "pipeline/family_hunyuan15.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "image.h"
#include "stage3/hunyuan15_vae_pipeline.h"

static hv15_state *S(const cvx_model *m) { return m->fam; }

/* ---- stage 1 ---- */
static int load_image_encoder(cvx_model *m) {
    return cvx_image_encoder_load(m, "feature_extractor", &S(m)->proc, &S(m)->siglip);
}

/* The size checks stage 2 will make, before anything is encoded. */
static int shape_of(const void *m, const cvx_loop_params *lp, cvx_latent_shape *sh) {
    return hv15_latent_shape_for(&S(m)->tcfg, lp, S(m)->vcfg.latent_channels, sh);
}

/* HunyuanVideo15ImageToVideoPipeline's image: the size (--height/--width, else the bucket of
 * calculate_default_height_width), resize "crop"; image_embeds = SigLIP(SiglipImageProcessor(image))
 * .last_hidden_state; the VAE's latent distribution of the image as one frame (stage 2 takes its
 * mode × scaling_factor as cond_latents frame 0). */
int hv15_encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                             cvx_conditioning *out) {
    (void)progress, (void)user;
    memset(out, 0, sizeof *out);
    if (!p->image || p->video) return cvx_check_model_mode(m, CVX_MODE_V2V);
    if (cvx_check_model_mode(m, CVX_MODE_I2V)) return -1;
    if (!p->height != !p->width)
        return cvx_error("--height/--width: give both or neither (neither: the bucket of the image's aspect ratio)");
    const int frames = p->max_frames ? p->max_frames : m->info.frames;
    cvx_rgb_frames rgb;
    if (cvx_image_load(p->image, &rgb)) return -1;
    int rc = -1, H = p->height, W = p->width;
    uint8_t *img = NULL;
    float *px = NULL;
    const int target = m->has_denoiser_config ? S(m)->tcfg.target_size : 640;
    img = hv15_condition_image(rgb.rgb, rgb.width, rgb.height, target, m->info.vae_scale_spatial, p->image, &H, &W);
    cvx_latent_shape sh;
    if (!img || cvx_check_latent_size(m, frames, H, W, shape_of, m, &sh)) goto done;
    /* SigLIP */
    if (load_image_encoder(m)) goto done;
    hv15_state *s = S(m);
    out->image_L = s->siglip->cfg.tokens, out->image_D = s->siglip->cfg.hidden_size;
    if (!(out->image_embeds = clip_vision_last_hidden_state_rgb8(s->siglip, &s->proc, img, W, H))) goto done;
    /* the VAE: u8/255·2−1 (do_resize False), one frame */
    px = cvx_alloc_f32((size_t)3 * W * H);
    cvx_preprocess_image(img, W, H, W, H, px);
    if (hv15_family_vae(m, VAE_PART_ENCODER)) goto done;
    cvx_info("encoding %s: %dx%d with SigLIP and the HunyuanVideo-1.5 VAE (the first frame's condition)", p->image, W,
             H);
    if (hv15_vae_encode_image_dist(s->vae, px, H, W, &out->mean, &out->std, &out->T, &out->h, &out->w)) goto done;
    out->mode = CVX_MODE_I2V;
    out->C = hv15_vae_get_config(s->vae)->latent_channels;
    out->frames = frames, out->height = H, out->width = W;
    rc = 0;
done:
    if (rc) cvx_conditioning_free(out);
    free(img), free(px);
    cvx_rgb_frames_free(&rgb);
    return rc;
}

/* ---- stage 2 ---- */
/* prepare_cond_latents_and_mask: cond_latents = the image latents (mode × scaling_factor) on latent
 * frame 0, zeros after; mask = 1 on frame 0; the image embeddings go to both CFG branches. */
int hv15_prepare_i2v(cvx_model *m, const hv15_config *c, const cvx_conditioning *ic, cvx_sample_run *run) {
    const cvx_latent_shape *sh = &run->shape;
    if (ic->mode != CVX_MODE_I2V) return cvx_check_model_mode(m, ic->mode);
    if (cvx_conditioning_fits(ic, sh->channels, 1, sh->height, sh->width, "image-to-video",
                              " (the image's latents: one frame at the video's size)"))
        return -1;
    if (!ic->image_embeds || ic->image_L != HV15_IMAGE_TOKENS || ic->image_D != c->image_embed_dim)
        return cvx_error("image-to-video conditioning: image_embeds [%d, %d], the transformer expects [%d, %d] "
                         "(SigLIP's last_hidden_state, image_embed_dim)", ic->image_L, ic->image_D, HV15_IMAGE_TOKENS,
                         c->image_embed_dim);
    cvx_sample_run_i2v(run, hv15_i2v_channels(ic->mean, sh->channels, sh->frames, sh->height, sh->width,
                                              (float)S(m)->vcfg.scaling_factor), ic);
    return 0;
}

int hv15_prepare_branches(const cvx_sample_params *p, const cvx_embeddings *emb, cvx_sample_run *run,
                          hv15_branch branch[2]) {
    for (int b = 0; b < 2; b++) {
        hv15_branch *hb = &branch[b];
        *hb = (hv15_branch){.text = b ? emb->prompt : emb->negative, .L = emb->L,
                            .text_mask = cvx_cond_more_find(p, "prompt_embeds_mask", !b),
                            .text2 = cvx_cond_more_find(p, "prompt_embeds_2", !b),
                            .text2_mask = cvx_cond_more_find(p, "prompt_embeds_mask_2", !b), .L2 = HV15_BYT5_MAX_LENGTH,
                            .image = run->image_tokens, .L_img = HV15_IMAGE_TOKENS, .channels = run->cond};
        run->branch[b] = hb;
    }
    if (!branch[1].text_mask || !branch[1].text2 || !branch[1].text2_mask)
        return cvx_error("HunyuanVideo-1.5 needs prompt_embeds_mask, prompt_embeds_2 and prompt_embeds_mask_2 "
                         "beside prompt_embeds (stage 1 of this model writes them)");
    return 0;
}

void hv15_run_free(void *run) {
    hv15_run *r = run;
    if (!r) return;
    free(r->sigmas);
    free(r);
}
