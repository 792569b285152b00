/* HunyuanVideo-1.5 in stage 2 (hunyuan15_family.h): the denoiser adapter over stage2/hunyuan15.c
 * and the latent shape rules of HunyuanVideo15Pipeline. */
#include "stage2/hunyuan15_family.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

typedef struct {
    float *x;   /* [in_channels, F, H, W]: cat[latents, cond_latents, mask] */
} hv15_priv;

static hv15_transformer *tr(cvx_denoiser *d) { return d->model; }

static int hd_prepare(cvx_denoiser *d, int F, int H, int W) {
    hv15_priv *p = d->priv;
    const hv15_config *c = hv15_get_config(tr(d));
    free(p->x);
    d->F = F, d->H = H, d->W = W;
    d->n_latent = (size_t)c->out_channels * F * H * W;
    d->n_out = d->n_latent;
    if (c->in_channels != 2 * c->out_channels + 1)
        return cvx_error("the HunyuanVideo-1.5 transformer takes %d input channels, expected 2 x %d latent + 1 mask",
                         c->in_channels, c->out_channels);
    p->x = cvx_calloc((size_t)c->in_channels * F * H * W, sizeof(float));
    return 0;
}

/* torch.cat([latents, cond_latents, mask], dim=1): channel-major; T2V's condition is zeros */
static const float *hd_input(cvx_denoiser *d, const cvx_denoise_input *in) {
    hv15_priv *p = d->priv;
    const hv15_branch *b = in->cond;
    const size_t fhw = d->n_latent / (size_t)hv15_get_config(tr(d))->out_channels;
    memcpy(p->x, in->x, d->n_latent * sizeof(float));
    if (b->channels) memcpy(p->x + d->n_latent, b->channels, (d->n_latent + fhw) * sizeof(float));
    else memset(p->x + d->n_latent, 0, (d->n_latent + fhw) * sizeof(float));
    return p->x;
}

static hv15_cond cond_of(const cvx_denoise_input *in, const float *t) {
    const hv15_branch *b = in->cond;
    return (hv15_cond){.text = b->text, .text_mask = b->text_mask, .L = b->L, .text2 = b->text2,
                       .text2_mask = b->text2_mask, .L2 = b->L2, .image = b->image, .L_img = b->L_img,
                       .timestep = t};
}

static int hd_forward(cvx_denoiser *d, const cvx_denoise_input *in, float *out) {
    const float t = (float)in->t;   /* σ·1000 as float32 */
    const hv15_cond c = cond_of(in, &t);
    return hv15_forward(tr(d), hd_input(d, in), 1, d->F, d->H, d->W, &c, out);
}

static int hd_embed(cvx_denoiser *d, const cvx_denoise_input *in, cvx_fwd *f) {
    const float t = (float)in->t;
    const hv15_cond c = cond_of(in, &t);
    hv15_fwd *hf = cvx_malloc(sizeof *hf);
    if (hv15_forward_embed(tr(d), hd_input(d, in), 1, d->F, d->H, d->W, &c, hf)) {
        free(hf);
        return -1;
    }
    /* the step cache works on the video stream; the text stream, which the double-stream blocks
     * update too, is the aux stream (DeepCache keeps it; only the video stream reaches the output) */
    *f = (cvx_fwd){.S = hf->S, .L = 0, .N = hf->S, .D = hf->D, .E = hf->D, .h = hf->h, .emb = hf->temb,
                   .aux = hf->txt, .A = hf->Lt, .row0 = (size_t)hf->row0, .nrows = (size_t)hf->nrows, .impl = hf};
    return 0;
}

/* f->h may be a caller's copy (FBCache holds the first CFG branch's stream): the blocks run on it,
 * hf->h stays the forward's own buffer (finalize frees it) */
static void hd_blocks(cvx_denoiser *d, cvx_fwd *f, int first, int count) {
    hv15_fwd *hf = f->impl;
    float *own = hf->h;
    hf->h = f->h;
    hv15_forward_blocks(tr(d), hf, first, count);
    hf->h = own;
}

static void hd_finalize(cvx_denoiser *d, cvx_fwd *f, float *out) {
    hv15_fwd *hf = f->impl;
    if (f->h != hf->h) memcpy(hf->h, f->h, sizeof(float) * (size_t)hf->B * hf->S * hf->D);   // [B, S, D]
    hv15_forward_finalize(tr(d), hf, out);
    free(hf);
    f->impl = NULL;
}

static void hd_abort(cvx_denoiser *d, cvx_fwd *f) {
    (void)d;
    if (!f->impl) return;
    hv15_forward_abort(f->impl);
    free(f->impl);
    f->impl = NULL;
}

static int hd_set_sp(cvx_denoiser *d, struct cvx_dist *sp) { return hv15_set_sp(tr(d), sp); }

static void hd_comm(cvx_denoiser *d, double *seconds, double *bytes) {
    (void)d;
    *seconds = 0, *bytes = 0;
}

static void hd_free(cvx_denoiser *d) {
    hv15_priv *p = d->priv;
    if (p) {
        free(p->x);
        free(p);
    }
    d->priv = NULL;
}

static const cvx_denoiser_type hv15_denoiser = {
    .name = "HunyuanVideo-1.5 transformer", .prepare = hd_prepare, .forward = hd_forward, .embed = hd_embed,
    .blocks = hd_blocks, .finalize = hd_finalize, .abort = hd_abort, .set_sp = hd_set_sp, .comm = hd_comm, .free = hd_free,
};

void hv15_denoiser_init(cvx_denoiser *d, hv15_transformer *m) {
    *d = (cvx_denoiser){.type = &hv15_denoiser, .model = m, .priv = cvx_calloc(1, sizeof(hv15_priv)),
                        .num_layers = hv15_get_config(m)->num_layers};
}

int hv15_latent_shape_for(const hv15_config *c, const cvx_loop_params *p, int latent_channels, cvx_latent_shape *out) {
    const cvx_loop_request *r = p->req;
    const int ts = p->vae_scale_temporal, m = p->vae_scale_spatial * c->patch_size;
    memset(out, 0, sizeof *out);
    if (r->frames < 1 || (r->frames - 1) % ts != 0) {
        const int lower = r->frames > 1 ? (r->frames - 1) / ts * ts + 1 : 1;
        return cvx_error("--frames %d: the frame count must be %dk+1 (VAE temporal factor %d), e.g. %d or %d",
                         r->frames, ts, ts, lower, lower + ts);
    }
    if (r->height < m || r->height % m != 0)
        return cvx_error("--height %d: must be a positive multiple of %d (VAE factor %d x patch size %d), e.g. %d",
                         r->height, m, p->vae_scale_spatial, c->patch_size, cvx_multiple_below(r->height, m));
    if (r->width < m || r->width % m != 0)
        return cvx_error("--width %d: must be a positive multiple of %d (VAE factor %d x patch size %d), e.g. %d",
                         r->width, m, p->vae_scale_spatial, c->patch_size, cvx_multiple_below(r->width, m));
    *out = (cvx_latent_shape){.frames = (r->frames - 1) / ts + 1, .channels_major = 1, .channels = latent_channels,
                              .height = r->height / p->vae_scale_spatial, .width = r->width / p->vae_scale_spatial};
    out->numel = (size_t)out->frames * out->channels * out->height * out->width;
    return 0;
}

float *hv15_i2v_channels(const float *mean, int C, int F, int h, int w, float scaling_factor) {
    const size_t hw = (size_t)h * w, fhw = hw * F;
    float *cond = cvx_calloc(((size_t)C + 1) * fhw, sizeof(float));   // [C + 1, F, h, w]
    for (int ch = 0; ch < C; ch++)
        for (size_t i = 0; i < hw; i++) cond[ch * fhw + i] = mean[ch * hw + i] * scaling_factor;
    for (size_t i = 0; i < hw; i++) cond[C * fhw + i] = 1.0f;
    return cond;
}
