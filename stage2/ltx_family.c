/* LTX-Video in stage 2 (ltx_family.h): the denoiser adapter over stage2/ltx.c. */
#include "stage2/ltx_family.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "stage2/ltx_pack.h"

typedef struct {
    double frame_rate;
    float *coords;       /* [3, S] rotary coordinates of the prepared grid */
    float *x, *v;        /* [S, C] packed input / output */
    float *t;            /* [S] per-token timesteps (when the plan gives them) */
} ltx_priv;

static ltx_transformer *tr(cvx_denoiser *d) { return d->model; }

static int ld_prepare(cvx_denoiser *d, int F, int H, int W) {
    ltx_priv *p = d->priv;
    const ltx_config *c = ltx_get_config(tr(d));
    const size_t S = (size_t)F * H * W;
    if (c->in_channels != c->out_channels)
        return cvx_error("the LTX transformer takes %d input channels and gives %d: LTXPipeline needs them equal",
                         c->in_channels, c->out_channels);
    free(p->coords), free(p->x), free(p->v), free(p->t);
    d->F = F, d->H = H, d->W = W;
    d->n_latent = d->n_out = (size_t)c->in_channels * S;
    /* rope_interpolation_scale = (vae temporal factor / frame_rate, 32, 32) */
    const float scale[3] = {(float)(8.0 / p->frame_rate), 32.0f, 32.0f};
    p->coords = cvx_alloc_f32(3 * S);
    ltx_rope_coords_grid(F, H, W, scale, p->coords);
    p->x = cvx_alloc_f32(d->n_latent);
    p->v = cvx_alloc_f32(d->n_out);
    p->t = cvx_alloc_f32(S);
    return 0;
}

/* The packed input p->x and timesteps p->t of `in`; T: 1 or S (per-token timesteps). */
static int ld_input(cvx_denoiser *d, const cvx_denoise_input *in) {
    ltx_priv *p = d->priv;
    const int C = ltx_get_config(tr(d))->in_channels, S = d->F * d->H * d->W;
    ltx_pack_latents(in->x, 1, C, d->F, d->H, d->W, p->x);   /* [C, F, H, W] -> [S, C] */
    if (!in->t_tokens) {
        p->t[0] = (float)in->t;   /* the scheduler's values are float32 (exact in double) */
        return 1;
    }
    CVX_CHECK(in->n_t == (size_t)S);
    memcpy(p->t, in->t_tokens, sizeof(float) * S);
    return S;
}

static int ld_forward(cvx_denoiser *d, const cvx_denoise_input *in, float *out) {
    ltx_priv *p = d->priv;
    const ltx_text_cond *c = in->cond;
    const int C = ltx_get_config(tr(d))->in_channels, S = d->F * d->H * d->W, T = ld_input(d, in);
    if (ltx_forward(tr(d), p->x, 1, S, c->text, c->mask, c->L, p->t, T, p->coords, p->v)) return -1;
    ltx_unpack_latents(p->v, 1, C, d->F, d->H, d->W, out);
    return 0;
}

/* ---- the forward in pieces (step caching): the packed token stream is h, no text rows ---- */
static int ld_embed(cvx_denoiser *d, const cvx_denoise_input *in, cvx_fwd *f) {
    ltx_priv *p = d->priv;
    const ltx_text_cond *c = in->cond;
    const int S = d->F * d->H * d->W, T = ld_input(d, in);
    ltx_fwd *lf = cvx_malloc(sizeof *lf);
    if (ltx_forward_embed(tr(d), p->x, 1, S, c->text, c->mask, c->L, p->t, T, p->coords, lf)) {
        free(lf);
        return -1;
    }
    *f = (cvx_fwd){.S = S, .L = 0, .N = S, .D = lf->D, .E = lf->D, .h = lf->h, .emb = lf->emb, .row0 = 0,
                   .nrows = (size_t)S, .impl = lf};
    return 0;
}

static void ld_blocks(cvx_denoiser *d, cvx_fwd *f, int first, int count) {
    ltx_fwd *lf = f->impl;
    lf->h = f->h;
    ltx_forward_blocks(tr(d), lf, first, count);
}

static void ld_finalize(cvx_denoiser *d, cvx_fwd *f, float *out) {
    ltx_priv *p = d->priv;
    ltx_fwd *lf = f->impl;
    lf->h = f->h;
    ltx_forward_finalize(tr(d), lf, p->v);
    ltx_unpack_latents(p->v, 1, ltx_get_config(tr(d))->out_channels, d->F, d->H, d->W, out);
    free(lf);
    f->impl = NULL;
}

static void ld_abort(cvx_denoiser *d, cvx_fwd *f) {
    (void)d;
    if (!f->impl) return;
    ltx_forward_abort(f->impl);
    free(f->impl);
    f->impl = NULL;
}

static int ld_set_sp(cvx_denoiser *d, struct cvx_dist *sp) {
    (void)d;
    return sp ? cvx_error("--sp: sequence parallelism is not wired for LTX-Video") : 0;
}

static void ld_comm(cvx_denoiser *d, double *seconds, double *bytes) {
    (void)d;
    *seconds = 0, *bytes = 0;
}

static void ld_free(cvx_denoiser *d) {
    ltx_priv *p = d->priv;
    if (p) {
        free(p->coords), free(p->x), free(p->v), free(p->t);
        free(p);
    }
    d->priv = NULL;
}

static const cvx_denoiser_type ltx_denoiser = {
    .name = "LTX-Video transformer", .prepare = ld_prepare, .forward = ld_forward, .embed = ld_embed,
    .blocks = ld_blocks, .finalize = ld_finalize, .abort = ld_abort, .set_sp = ld_set_sp, .comm = ld_comm,
    .free = ld_free,
};

void ltx_denoiser_init(cvx_denoiser *d, ltx_transformer *m, double frame_rate) {
    ltx_priv *p = cvx_calloc(1, sizeof *p);
    p->frame_rate = frame_rate;
    *d = (cvx_denoiser){.type = &ltx_denoiser, .model = m, .priv = p, .num_layers = ltx_get_config(m)->num_layers};
}
