/* Wan 2.1 in stage 2 (wan_family.h): the denoiser adapter over stage2/wan.c and the latent shape
 * rules of WanPipeline. */
#include "stage2/wan_family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fileio.h"

typedef struct {
    int teacache_e0;               /* the step cache compares e0 = timestep_proj instead of e */
    int cond_channels;             /* I2V: 4 + z channels appended to the latents; 0 otherwise */
    float *x;                      /* [C + cond_channels, F, H, W] I2V input; TI2V I2V: the replaced latents */
    const float *ti2v_cond;        /* Wan 2.2 TI2V I2V: the image's latents [C, 1, H, W] (borrowed), else NULL */
} wan_priv;

static wan_transformer *tr(cvx_denoiser *d) { return d->model; }

static int wd_prepare(cvx_denoiser *d, int F, int H, int W) {
    wan_priv *p = d->priv;
    const wan_config *c = wan_get_config(tr(d));
    free(p->x);
    p->x = NULL;
    d->F = F, d->H = H, d->W = W;
    d->n_latent = (size_t)c->out_channels * F * H * W;
    d->n_out = d->n_latent;
    if (c->in_channels != c->out_channels + p->cond_channels)
        return cvx_error("the Wan transformer takes %d input channels, this run gives %d latent + %d conditioning "
                         "channels", c->in_channels, c->out_channels, p->cond_channels);
    if (p->cond_channels || p->ti2v_cond) p->x = cvx_alloc_f32((size_t)c->in_channels * F * H * W);
    return 0;
}

/* torch.cat([latents, condition], dim=1): channel-major, so the condition follows the latents */
static const float *wd_input(cvx_denoiser *d, const cvx_denoise_input *in) {
    wan_priv *p = d->priv;
    const wan_config *wc = wan_get_config(tr(d));
    if (p->ti2v_cond) {   /* (1 − m)·condition + m·latents: frame 0 is the image's */
        wan_ti2v_apply_condition(in->x, p->ti2v_cond, wc->out_channels, d->F, d->H, d->W, p->x);
        return p->x;
    }
    if (!p->cond_channels) return in->x;
    const float *channels = ((const cvx_text_cond *)in->cond)->channels;
    CVX_CHECK(channels != NULL);
    const size_t fhw = d->n_latent / (size_t)wc->out_channels;
    memcpy(p->x, in->x, d->n_latent * sizeof(float));
    memcpy(p->x + d->n_latent, channels, (size_t)p->cond_channels * fhw * sizeof(float));
    return p->x;
}

static int wd_forward(cvx_denoiser *d, const cvx_denoise_input *in, float *out) {
    const cvx_text_cond *c = in->cond;
    const float t = (float)in->t;   /* the scheduler's values are float32 (exact in double) */
    if (in->t_tokens)   /* Wan 2.2 TI2V's expand_timesteps: [1, S] */
        return wan_forward_per_token(tr(d), wd_input(d, in), 1, d->F, d->H, d->W, c->text, c->L, c->image, c->L_img,
                                     in->t_tokens, out);
    return wan_forward(tr(d), wd_input(d, in), 1, d->F, d->H, d->W, c->text, c->L, c->image, c->L_img, &t, out);
}

static int wd_embed(cvx_denoiser *d, const cvx_denoise_input *in, cvx_fwd *f) {
    const cvx_text_cond *c = in->cond;
    const float t = (float)in->t;
    wan_fwd *wf = cvx_malloc(sizeof *wf);
    const float *x = wd_input(d, in);
    if (in->t_tokens ? wan_forward_embed_per_token(tr(d), x, 1, d->F, d->H, d->W, c->text, c->L, c->image, c->L_img,
                                                   in->t_tokens, wf)
                     : wan_forward_embed(tr(d), x, 1, d->F, d->H, d->W, c->text, c->L, c->image, c->L_img, &t, wf)) {
        free(wf);
        return -1;
    }
    /* TeaCache compares the time embedding (TeaCache4Wan2.1: e, or e0 = timestep_proj with use_ret_steps) */
    const int e0 = ((wan_priv *)d->priv)->teacache_e0;
    *f = (cvx_fwd){.S = wf->S, .L = 0, .N = wf->S, .D = wf->D, .E = e0 ? 6 * wf->D : wf->D,
                   .h = wf->h, .emb = e0 ? wf->tproj : wf->temb, .row0 = wf->row0, .nrows = wf->nrows, .impl = wf};
    return 0;
}

static void wd_blocks(cvx_denoiser *d, cvx_fwd *f, int first, int count) {
    wan_fwd *wf = f->impl;
    wf->h = f->h;
    wan_forward_blocks(tr(d), wf, first, count);
}

static void wd_finalize(cvx_denoiser *d, cvx_fwd *f, float *out) {
    wan_fwd *wf = f->impl;
    wf->h = f->h;
    wan_forward_finalize(tr(d), wf, out);
    free(wf);
    f->impl = NULL;
}

static void wd_abort(cvx_denoiser *d, cvx_fwd *f) {
    (void)d;
    if (!f->impl) return;
    wan_forward_abort(f->impl);
    free(f->impl);
    f->impl = NULL;
}

static int wd_set_sp(cvx_denoiser *d, struct cvx_dist *sp) { return wan_set_sp(tr(d), sp); }

static void wd_comm(cvx_denoiser *d, double *seconds, double *bytes) {
    wan_stats st = wan_get_stats(tr(d));
    *seconds = st.t_comm, *bytes = st.bytes_sent;
}

static void wd_free(cvx_denoiser *d) {
    wan_priv *p = d->priv;
    if (p) { free(p->x); free(p); }
    d->priv = NULL;
}

static const cvx_denoiser_type wan_denoiser = {
    .name = "Wan transformer", .prepare = wd_prepare, .forward = wd_forward, .embed = wd_embed,
    .blocks = wd_blocks, .finalize = wd_finalize, .abort = wd_abort, .set_sp = wd_set_sp, .comm = wd_comm,
    .free = wd_free,
};

void wan_denoiser_init(cvx_denoiser *d, wan_transformer *m, int cond_channels, int teacache_e0) {
    wan_priv *p = cvx_calloc(1, sizeof *p);
    p->cond_channels = cond_channels;
    p->teacache_e0 = teacache_e0;
    *d = (cvx_denoiser){.type = &wan_denoiser, .model = m, .priv = p, .num_layers = wan_get_config(m)->num_layers};
}

void wan_denoiser_set_ti2v_condition(cvx_denoiser *d, const float *condition) {
    ((wan_priv *)d->priv)->ti2v_cond = condition;
}

int wan_latent_shape_for(const wan_config *c, const cvx_loop_params *p, int z_dim, cvx_latent_shape *out) {
    const cvx_loop_request *r = p->req;
    const int ts = p->vae_scale_temporal, sp = p->vae_scale_spatial, mh = sp * c->patch_h, mw = sp * c->patch_w;
    memset(out, 0, sizeof *out);
    if (r->frames < 1 || (r->frames - 1) % ts != 0) {
        int lower = r->frames > 1 ? (r->frames - 1) / ts * ts + 1 : 1;
        return cvx_error("--frames %d: the frame count must be %dk+1 (VAE temporal factor %d), e.g. %d or %d",
                         r->frames, ts, ts, lower, lower + ts);
    }
    if (r->height < mh || r->height % mh != 0)
        return cvx_error("--height %d: must be a positive multiple of %d (VAE factor %d × patch size %d), e.g. %d "
                         "or %d", r->height, mh, sp, c->patch_h, cvx_multiple_below(r->height, mh),
                         cvx_multiple_below(r->height, mh) + mh);
    if (r->width < mw || r->width % mw != 0)
        return cvx_error("--width %d: must be a positive multiple of %d (VAE factor %d × patch size %d), e.g. %d "
                         "or %d", r->width, mw, sp, c->patch_w, cvx_multiple_below(r->width, mw),
                         cvx_multiple_below(r->width, mw) + mw);
    if (r->num_inference_steps < 1)
        return cvx_error("--num_inference_steps %d: must be at least 1", r->num_inference_steps);
    if (!(r->guidance_scale >= 0) || !isfinite(r->guidance_scale))
        return cvx_error("--guidance_scale %g: must be a finite number >= 0", r->guidance_scale);
    if (z_dim != c->out_channels)
        return cvx_error("the VAE's z_dim %d differs from the transformer's out_channels %d (components of different "
                         "models?)", z_dim, c->out_channels);
    out->frames = (r->frames - 1) / ts + 1;
    out->channels = c->out_channels;
    out->height = r->height / sp;
    out->width = r->width / sp;
    out->numel = (size_t)out->frames * out->channels * out->height * out->width;
    out->channels_major = 1;
    return 0;
}

static const struct { const char *name; double c[5]; } teacache_sets[] = {   /* use_ret_steps False */
    {"Wan2.1-T2V-1.3B", {2.39676752e+03, -1.31110545e+03, 2.01331979e+02, -8.29855975e+00, 1.37887774e-01}},
    {"Wan2.1-T2V-14B", {-5784.54975374, 5449.50911966, -1811.16591783, 256.27178429, -13.02252404}},
    {"Wan2.1-I2V-14B-480P", {-3.02331670e+02, 2.23948934e+02, -5.25463970e+01, 5.87348440e+00, -2.01973289e-01}},
    {"Wan2.1-I2V-14B-720P", {-114.36346466, 65.26524496, -18.82220707, 4.91518089, -0.23412683}},
};

static const struct { const char *name; double c[5]; } teacache_ret_sets[] = {   /* use_ret_steps True */
    {"Wan2.1-T2V-1.3B (ret steps)", {-5.21862437e+04, 9.23041404e+03, -5.28275948e+02, 1.36987616e+01, -4.99875664e-02}},
    {"Wan2.1-T2V-14B (ret steps)", {-3.03318725e+05, 4.90537029e+04, -2.65530556e+03, 5.87365115e+01, -3.15583525e-01}},
    {"Wan2.1-I2V-14B-480P (ret steps)", {2.57151496e+05, -3.54229917e+04, 1.40286849e+03, -1.35890334e+01, 1.32517977e-01}},
    {"Wan2.1-I2V-14B-720P (ret steps)", {8.10705460e+03, 2.13393892e+03, -3.72934672e+02, 1.66203073e+01, -4.17769401e-02}},
};

const char *wan_teacache_coefficients(const wan_config *c, int height, int width, int ret_steps, double out[5]) {
    const int dim = c->num_attention_heads * c->attention_head_dim;
    int k;
    memset(out, 0, sizeof(double) * 5);
    if (c->out_channels != 16) return NULL;   /* Wan 2.2 TI2V-5B (48 channels): none published */
    if (c->image_dim > 0 || c->in_channels != c->out_channels) k = (long)height * width >= 720L * 1280 ? 3 : 2;
    else if (dim <= 2048 || dim == 5120) k = dim <= 2048 ? 0 : 1;   /* 1.3B: 1536 wide (tiny models too); 14B */
    else return NULL;
    const double *src = ret_steps ? teacache_ret_sets[k].c : teacache_sets[k].c;
    memcpy(out, src, sizeof teacache_sets[k].c);
    return ret_steps ? teacache_ret_sets[k].name : teacache_sets[k].name;
}

const cvx_latent_rgb wan_latent_rgb = {
    .factors = (const float[][3]){{-0.1299f, -0.1692f, 0.2932f}, {0.0671f, 0.0406f, 0.0442f}, {0.3568f, 0.2548f, 0.1747f},
                {0.0372f, 0.2344f, 0.1420f},   {0.0313f, 0.0189f, -0.0328f}, {0.0296f, -0.0956f, -0.0665f},
                {-0.3477f, -0.4059f, -0.2925f}, {0.0166f, 0.1902f, 0.1975f}, {-0.0412f, 0.0267f, -0.1364f},
                {-0.1293f, 0.0740f, 0.1636f},  {0.0680f, 0.3019f, 0.1128f},  {0.0032f, 0.0581f, 0.0639f},
                {-0.1251f, 0.0927f, 0.1699f},  {0.0060f, -0.0633f, 0.0005f}, {0.3477f, 0.2275f, 0.2950f},
                {0.1984f, 0.0913f, 0.1861f}},
    .n_channels = 16,
    .bias = {-0.1835f, -0.0868f, -0.3360f},
    .gain = 1.0f,
};

int wan_pipeline_config_load(const char *model_dir, wan_pipeline_config *out) {
    memset(out, 0, sizeof *out);
    char path[4300];
    snprintf(path, sizeof path, "%s/model_index.json", model_dir);
    if (!cvx_is_file(path)) return 0;
    cvx_config c;
    if (cvx_config_load(&c, path)) return -1;
    /* null (Wan 2.1, TI2V) reads as absent */
    int rc = 0, has_boundary = cvx_cfg_has(&c, "boundary_ratio") && !cvx_cfg_num(&c, "boundary_ratio", &out->boundary_ratio);
    cvx_clear_error();
    if (cvx_cfg_bool_or(&c, "expand_timesteps", 0, &out->expand_timesteps)) out->expand_timesteps = 0;
    cvx_clear_error();
    if (has_boundary) {
        rc = wan_boundary_check(out->boundary_ratio, path);
        char cfg2[4300];
        snprintf(cfg2, sizeof cfg2, "%s/transformer_2/config.json", model_dir);
        if (!rc && !cvx_is_file(cfg2))
            rc = cvx_error("%s: boundary_ratio %g needs two experts, but %s is missing (Wan 2.2 A14B: transformer "
                           "= high noise, transformer_2 = low noise)", path, out->boundary_ratio, cfg2);
        if (!rc) rc = wan_config_load(cfg2, &out->tcfg2);
        int64_t ntt = 1000;
        cvx_config sc;
        snprintf(path, sizeof path, "%s/scheduler/scheduler_config.json", model_dir);
        if (!rc && cvx_is_file(path) && !cvx_config_load(&sc, path)) {
            rc = cvx_cfg_int_or(&sc, "num_train_timesteps", 1000, &ntt);
            cvx_config_free(&sc);
        }
        out->num_train_timesteps = (int)ntt;
    }
    cvx_config_free(&c);
    return rc;
}

double wan_a14b_plan(cvx_sample_plan *pl, const double *timesteps, const wan_pipeline_config *pc, double g, double g2) {
    const cvx_guider guide2 = {.scale = g > 1 ? g2 : 1.0};
    /* upstream compares the int64 timestep with the Python float in float32 */
    const double boundary_t = (float)(pc->boundary_ratio * pc->num_train_timesteps);
    cvx_plan_switch_below(pl, timesteps, boundary_t, 1, &guide2);
    return boundary_t;
}

float *wan_ti2v_t_scale(const wan_config *c, int F, int h, int w, int i2v, size_t *n) {
    *n = (size_t)wan_num_tokens(c, F, h, w);
    float *t = cvx_alloc_f32(*n);
    if (i2v) wan_ti2v_timesteps(1, F, h, w, t);   /* the mask: 0 on frame 0 */
    else
        for (size_t k = 0; k < *n; k++) t[k] = 1.0f;
    return t;
}

static const wan_variant VARIANTS[] = {
    {48, 1, -1, 121, 704, 1280, 24, 5.0, 0},   /* Wan 2.2 TI2V-5B */
    {0, 2, 1, 81, 480, 832, 16, 3.5, 3.5},     /* Wan 2.2 I2V-A14B */
    {0, 2, 0, 81, 480, 832, 16, 4.0, 3.0},     /* Wan 2.2 T2V-A14B */
    {0, 0, -1, 81, 480, 832, 16, 5.0, 0},      /* Wan 2.1 T2V 1.3B / 14B, I2V 480P / 720P */
};

const wan_variant *wan_variant_for(int z_dim, int experts, int i2v) {
    const wan_variant *x = VARIANTS;
    while ((x->z_dim && x->z_dim != z_dim) || (x->experts && x->experts != experts) || (x->i2v >= 0 && x->i2v != i2v))
        x++;
    return x;
}
