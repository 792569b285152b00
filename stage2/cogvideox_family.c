/* CogVideoX in stage 2: the denoiser adapter over stage2/cogvideox.c, the latent shape rules
 * of CogVideoXPipeline, and the TeaCache coefficients (cogvideox_family.h). */
#include "stage2/cogvideox_family.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "ops.h"
#include "stage2/quantize.h"
#include "latent_dist.h"
#include "rng_lowp.h"

/* ---- GGUF (stage2/quantize.h) ----
 * No upstream GGUF converter knows CogVideoX; city96's DiT habits: diffusers names unchanged, the
 * embedders and the final layer unquantized (as the golden_gguf CogVideoX files were made). */
static const char *const COG_GGUF_KEEP[] = {"patch_embed.", "time_embedding.", "norm_out.", "proj_out.", NULL};
const cvx_gguf_rules cogvideox_gguf_rules = {"cogvideox", COG_GGUF_KEEP, NULL, NULL};

/* ---- the denoiser ---- */
typedef struct {
    int i2v;
    float *x;                      /* [F, 2C, h, w] I2V input */
    float *rope_cos, *rope_sin;    /* [video tokens, head_dim] for the prepared grid (rotary models) */
} cog_priv;

static cogvideox_transformer *tr(cvx_denoiser *d) { return d->model; }

static int cog_prepare(cvx_denoiser *d, int F, int H, int W) {
    cog_priv *p = d->priv;
    const cogvideox_config *c = cogvideox_get_config(tr(d));
    free(p->x); free(p->rope_cos); free(p->rope_sin);
    p->x = p->rope_cos = p->rope_sin = NULL;
    d->F = F, d->H = H, d->W = W;
    d->n_latent = (size_t)F * c->out_channels * H * W;
    d->n_out = d->n_latent;
    if (p->i2v) p->x = cvx_alloc_f32(2 * d->n_latent);
    /* rotary tables once, from the latent grid (5b / 1.5) */
    if (c->use_rotary_positional_embeddings) {
        size_t nt = (size_t)cogvideox_num_video_tokens(c, F, H, W);
        p->rope_cos = cvx_alloc_f32(nt * c->attention_head_dim);
        p->rope_sin = cvx_alloc_f32(nt * c->attention_head_dim);
        if (cogvideox_rope_tables(c, F, H, W, p->rope_cos, p->rope_sin)) return -1;
    }
    return 0;
}

/* The model input: the latents, or per frame [latents C channels, image latents C channels]
 * (torch.cat([latents, image_latents], dim=2)) */
static const float *cog_input(cvx_denoiser *d, const cvx_denoise_input *in) {
    cog_priv *p = d->priv;
    if (!p->i2v) return in->x;
    const float *image = ((const cvx_text_cond *)in->cond)->channels;
    CVX_CHECK(image != NULL);
    const size_t chw = d->n_latent / d->F;
    for (int f = 0; f < d->F; f++) {
        float *xf = p->x + (size_t)f * 2 * chw;
        memcpy(xf, in->x + (size_t)f * chw, chw * sizeof(float));
        memcpy(xf + chw, image + (size_t)f * chw, chw * sizeof(float));
    }
    return p->x;
}

static int cog_forward(cvx_denoiser *d, const cvx_denoise_input *in, float *out) {
    cog_priv *p = d->priv;
    const cvx_text_cond *c = in->cond;
    const int64_t t = (int64_t)in->t;
    return cogvideox_forward(tr(d), cog_input(d, in), 1, d->F, d->H, d->W, c->text, c->L, &t, p->rope_cos,
                             p->rope_sin, out);
}

static int cog_embed(cvx_denoiser *d, const cvx_denoise_input *in, cvx_fwd *f) {
    cog_priv *p = d->priv;
    const cvx_text_cond *c = in->cond;
    const int64_t t = (int64_t)in->t;
    cogvideox_fwd *cf = cvx_malloc(sizeof *cf);
    if (cogvideox_forward_embed(tr(d), cog_input(d, in), 1, d->F, d->H, d->W, c->text, c->L, &t, NULL, 0,
                                p->rope_cos, p->rope_sin, cf)) {
        free(cf);
        return -1;
    }
    *f = (cvx_fwd){.S = cf->S, .L = cf->L, .N = cf->N, .D = cf->D, .E = cf->E, .h = cf->h, .emb = cf->emb,
                   .row0 = cf->row0, .nrows = cf->nrows, .impl = cf};
    return 0;
}

static void cog_blocks(cvx_denoiser *d, cvx_fwd *f, int first, int count) {
    cogvideox_fwd *cf = f->impl;
    cf->h = f->h;
    cogvideox_forward_blocks(tr(d), cf, first, count);
}

static void cog_finalize(cvx_denoiser *d, cvx_fwd *f, float *out) {
    cogvideox_fwd *cf = f->impl;
    cf->h = f->h;
    cogvideox_forward_finalize(tr(d), cf, out);
    free(cf);
    f->impl = NULL;
}

static void cog_abort(cvx_denoiser *d, cvx_fwd *f) {
    (void)d;
    if (!f->impl) return;
    cogvideox_forward_abort(f->impl);
    free(f->impl);
    f->impl = NULL;
}

static int cog_set_sp(cvx_denoiser *d, struct cvx_dist *sp) { return cogvideox_set_sp(tr(d), sp); }

static void cog_comm(cvx_denoiser *d, double *seconds, double *bytes) {
    cogvideox_stats st = cogvideox_get_stats(tr(d));
    *seconds = st.t_comm, *bytes = st.bytes_sent;
}

static void cog_free(cvx_denoiser *d) {
    cog_priv *p = d->priv;
    if (p) { free(p->x); free(p->rope_cos); free(p->rope_sin); free(p); }
    d->priv = NULL;
}

static const cvx_denoiser_type cogvideox_denoiser = {
    .name = "CogVideoX transformer", .prepare = cog_prepare, .forward = cog_forward, .embed = cog_embed,
    .blocks = cog_blocks, .finalize = cog_finalize, .abort = cog_abort, .set_sp = cog_set_sp, .comm = cog_comm,
    .free = cog_free,
};

void cogvideox_denoiser_init(cvx_denoiser *d, cogvideox_transformer *m, int i2v) {
    memset(d, 0, sizeof *d);
    cog_priv *p = cvx_calloc(1, sizeof *p);
    p->i2v = i2v;
    *d = (cvx_denoiser){.type = &cogvideox_denoiser, .model = m, .priv = p,
                        .num_layers = cogvideox_get_config(m)->num_layers};
}

int cogvideox_sample_loop(cogvideox_transformer *m, int i2v, cvx_scheduler *s, const cvx_loop_params *p,
                          const double *teacache, const cvx_latent_shape *shape, const float *prompt,
                          const float *negative, int L, const cvx_checkpointing *ck, cvx_step_hook hook,
                          void *hook_ctx, float *latents, cvx_sample_result *result) {
    cvx_loop_params q = *p;
    if (teacache) memcpy(q.teacache_coefficients, teacache, sizeof q.teacache_coefficients);
    else cogvideox_teacache_coefficients(cogvideox_get_config(m), q.teacache_coefficients);
    cvx_denoiser d;
    cogvideox_denoiser_init(&d, m, i2v);
    cvx_expert_provider one;
    cvx_single_expert(&one, &d);
    cvx_sample_plan plan;
    cogvideox_plan(p, &one, &plan);
    const cvx_text_cond neg = {.text = negative, .L = L, .channels = p->cond},
                        pos = {.text = prompt, .L = L, .channels = p->cond};
    int rc = cvx_sample_loop(&plan, s, &q, shape, (const void *const[2]){&neg, &pos}, ck, hook, hook_ctx, latents,
                             result);
    cvx_plan_free(&plan);
    cvx_denoiser_free(&d);
    return rc;
}

void cogvideox_plan(const cvx_loop_params *p, cvx_expert_provider *experts, cvx_sample_plan *out) {
    const cvx_loop_request *r = p->req;
    const cvx_guider g = {.scale = r->guidance_scale, .dynamic = r->use_dynamic_cfg};
    cvx_plan_init(out, r->num_inference_steps - p->t_start, &g, experts);
}

/* ---- shapes and embeddings ---- */
int cogvideox_latent_shape_for(const cogvideox_config *c, const cvx_loop_params *p, int i2v, cvx_latent_shape *out) {
    const cvx_loop_request *r = p->req;
    int ts = p->vae_scale_temporal, sp = p->vae_scale_spatial, mult = sp * c->patch_size;
    memset(out, 0, sizeof(*out));
    /* the model type must fit the mode: I2V models take [noise, image] latents (2 × channels) */
    if (c->in_channels == 2 * c->out_channels && !i2v)
        return cvx_error("this is an image-to-video model (transformer in_channels %d = 2 × %d latent channels): "
                         "give stage 1 an --image", c->in_channels, c->out_channels);
    if (c->in_channels != 2 * c->out_channels && c->in_channels != c->out_channels)
        return cvx_error("transformer in_channels %d: expected out_channels %d (text-to-video) or 2 × %d "
                         "(image-to-video)", c->in_channels, c->out_channels, c->out_channels);
    if (i2v && c->in_channels == c->out_channels)
        return cvx_error("this is a text-to-video model (transformer in_channels %d = out_channels): it cannot take "
                         "an --image; use an image-to-video checkpoint (CogVideoX-5b-I2V, CogVideoX1.5-5B-I2V)",
                         c->in_channels);
    if (r->frames < 1 || (r->frames - 1) % ts != 0) {
        int lower = r->frames > 1 ? (r->frames - 1) / ts * ts + 1 : 1;
        return cvx_error("--frames %d: the frame count must be %dk+1 (VAE temporal factor %d), e.g. %d or %d",
                         r->frames, ts, ts, lower, lower + ts);
    }
    if (r->height < mult || r->height % mult != 0)
        return cvx_error("--height %d: must be a positive multiple of %d (VAE factor %d × patch size %d), e.g. %d "
                         "or %d", r->height, mult, sp, c->patch_size, cvx_multiple_below(r->height, mult),
                         cvx_multiple_below(r->height, mult) + mult);
    if (r->width < mult || r->width % mult != 0)
        return cvx_error("--width %d: must be a positive multiple of %d (VAE factor %d × patch size %d), e.g. %d "
                         "or %d", r->width, mult, sp, c->patch_size, cvx_multiple_below(r->width, mult),
                         cvx_multiple_below(r->width, mult) + mult);
    if (c->use_learned_positional_embeddings &&
        (r->height != c->sample_height * sp || r->width != c->sample_width * sp))
        return cvx_error("--height %d --width %d: this model has learned positional embeddings (CogVideoX-5b-I2V "
                         "style) and runs only at its sample size: --height %d --width %d", r->height, r->width,
                         c->sample_height * sp, c->sample_width * sp);
    if (r->num_inference_steps < 1)
        return cvx_error("--num_inference_steps %d: must be at least 1", r->num_inference_steps);
    if (!(r->guidance_scale >= 0) || !isfinite(r->guidance_scale))
        return cvx_error("--guidance_scale %g: must be a finite number >= 0", r->guidance_scale);
    out->frames = (r->frames - 1) / ts + 1;
    /* CogVideoX1.5: the latent frame count must divide by patch_size_t; upstream adds frames
     * at the front of the noise (num_frames += pad · temporal factor) and drops them at the end */
    if (c->patch_size_t > 0 && out->frames % c->patch_size_t != 0) {
        out->pad_frames = c->patch_size_t - out->frames % c->patch_size_t;
        out->frames += out->pad_frames;
    }
    out->channels = c->out_channels;
    out->height = r->height / sp;
    out->width = r->width / sp;
    out->numel = (size_t)out->frames * out->channels * out->height * out->width;
    return 0;
}

int cogvideox_check_embeddings(const cogvideox_config *c, const cvx_tensor *prompt, const cvx_tensor *negative,
                               const char *file) {
    const cvx_tensor *ts[2] = {prompt, negative};
    for (int k = 0; k < 2; k++) {
        const cvx_tensor *t = ts[k];
        if (!t) return cvx_error("%s: tensor '%s' is missing", file, k ? "negative_prompt_embeds" : "prompt_embeds");
        char got[128];
        cvx_shape_str(t->ndim, t->shape, got, sizeof got);
        if (!cvx_dtype_is_float(t->dtype))
            return cvx_error("%s: tensor '%s' has dtype %s, expected a float dtype", file, t->name,
                             cvx_dtype_name(t->dtype));
        if (t->ndim != 3 || t->shape[0] != 1 || t->shape[2] != c->text_embed_dim)
            return cvx_error("%s: tensor '%s' has shape %s, expected [1, %d, %d] (text_embed_dim %d of the "
                             "transformer: embeddings from another text encoder or model?)",
                             file, t->name, got, c->max_text_seq_length, c->text_embed_dim, c->text_embed_dim);
        if (t->shape[1] != c->max_text_seq_length)
            return cvx_error("%s: tensor '%s' has shape %s, expected [1, %d, %d] (sequence length must be the "
                             "transformer's max_text_seq_length %d)",
                             file, t->name, got, c->max_text_seq_length, c->text_embed_dim, c->max_text_seq_length);
    }
    return 0;
}

void cogvideox_latents_to_output(const float *latents, const cvx_latent_shape *sh, float *out) {
    cvx_permute_fc_to_cf(latents, sh->frames, sh->channels, (size_t)sh->height * sh->width, sh->pad_frames, out);
}

/* ---- TeaCache ---- */
/* ali-vilab/TeaCache TeaCache4CogVideoX1.5/teacache_sample_video.py, coefficients_dict (as of
 * commit 0870af8, 2025-04-14); 5b-I2V has the 5b numbers. */
static const struct { const char *name; double c[5]; } teacache_sets[] = {
    {"CogVideoX-2b", {-3.10658903e+01, 2.54732368e+01, -5.92380459e+00, 1.75769064e+00, -3.61568434e-03}},
    {"CogVideoX-5b", {-1.53880483e+03, 8.43202495e+02, -1.34363087e+02, 7.97131516e+00, -5.23162339e-02}},
    {"CogVideoX1.5-5B", {2.50210439e+02, -1.65061612e+02, 3.57804877e+01, -7.81551492e-01, 3.58559703e-02}},
    {"CogVideoX1.5-5B-I2V", {1.22842302e+02, -1.04088754e+02, 2.62981677e+01, -3.06009921e-01, 3.71213220e-02}},
};

const char *cogvideox_teacache_coefficients(const cogvideox_config *c, double out[5]) {
    int k;
    if (c->patch_size_t <= 0) k = c->use_rotary_positional_embeddings ? 1 : 0;   /* 1.0: 2b sin-cos, 5b rotary */
    else k = (c->in_channels == 2 * c->out_channels || c->ofs_embed_dim) ? 3 : 2;  /* 1.5: I2V or T2V */
    memcpy(out, teacache_sets[k].c, sizeof teacache_sets[k].c);
    return teacache_sets[k].name;
}


/* ---- live preview ---- */
/* kijai/ComfyUI-CogVideoXWrapper pipeline_cogvideox.py, class CogVideoXLatentFormat (introduced in
 * 90e8367, 2025-01-20, unchanged at fdb8abd): rows = latent channels 0..15, columns R, G, B. The
 * wrapper applies them to 5·x0 in model space; ComfyUI's Latent2RGBPreviewer then maps
 * clamp((rgb + 1)/2). Likely hand-picked (its nodes.py draws random factors to search by eye).
 * The gain 5 is on model-space latents at 5b's scaling factor 0.7; cogvideox_latent_rgb scales it
 * to 3.5 / scaling_factor for other VAEs (2b: 1.15258426). */
const cvx_latent_rgb cogvideox_latent_rgb_5b = {
    .factors = (const float[][3]){
    {0.03197404301362048f, 0.04091260743347359f, 0.0015679806301828524f},
    {0.005517101026578029f, 0.0052348639043457755f, -0.005613441650464035f},
    {0.0012485338264583965f, -0.016096744206117782f, 0.025023940031635054f},
    {0.01760126794276171f, 0.0036818415416642893f, -0.0006019202528157255f},
    {0.000444954842288864f, 0.006102128982092191f, 0.0008457999272962447f},
    {-0.010531904354560697f, -0.0032275501924977175f, -0.00886595780267917f},
    {-0.0001454543946122991f, 0.010199210750845965f, -0.00012702234832386188f},
    {0.02078497279904325f, -0.001669617778939972f, 0.006712703698951264f},
    {0.005529571599763264f, 0.009733929789086743f, 0.001887302765339838f},
    {0.012138415094654218f, 0.024684961927224837f, 0.037211249767461915f},
    {0.0010364484570000384f, 0.01983636315929172f, 0.009864602025627755f},
    {0.006802862648143341f, -0.0010509255113510681f, -0.007026003345126021f},
    {0.0003532208468418043f, 0.005351971582801936f, -0.01845912126717106f},
    {-0.009045079994694397f, -0.01127941143183089f, 0.0042294057970470806f},
    {0.002548289972720752f, 0.025224244654428216f, -0.0006086130121693347f},
    {-0.011135669222532816f, 0.0018181308593668505f, 0.02794541485349922f}},
    .n_channels = 16,
    .bias = {-0.023f, 0.0f, -0.017f},
    .gain = 5.0f,
};


void cogvideox_latent_rgb(double scaling_factor, cvx_latent_rgb *out) {
    *out = cogvideox_latent_rgb_5b;
    out->gain = (float)(3.5 / scaling_factor);   /* the wrapper's gain 5 on model-space latents = 3.5 on VAE-space ones at 0.7 */
}

int cogvideox_i2v_latents(const float *mean, const float *std, size_t chw, size_t n, float k, cvx_generator *g,
                          cvx_dtype sample_dtype, float **image_latents, float **init) {
    float *sample = cvx_alloc_f32(chw);
    *image_latents = *init = NULL;
    if (vae_latent_sample_as(mean, std, chw, g, sample_dtype, sample)) {
        free(sample);
        return -1;
    }
    *image_latents = cvx_calloc(n, sizeof(float));   // [F, C, h, w]: frame 0, then zeros
    for (size_t i = 0; i < chw; i++) (*image_latents)[i] = k * sample[i];
    *init = cvx_alloc_f32(n);   // [F, C, h, w]
    cvx_randn_as(g, sample_dtype, *init, n);
    free(sample);
    return 0;
}
