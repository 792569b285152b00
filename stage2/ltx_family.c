/* LTX-Video in stage 2 (ltx_family.h): the denoiser adapter over stage2/ltx.c. */
#include "stage2/ltx_family.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "stage2/ltx_pack.h"
#include "stage2/ltx_schedule.h"

typedef struct {
    double frame_rate;
    float *coords;       /* [3, S] rotary coordinates of the prepared grid */
    float *x, *v;        /* [S, C] packed input / output */
    float *t;            /* [S] per-token timesteps (when the plan gives them) */
    const float *cmask, *video_coords;   /* the condition pipeline (NULL: off), [S] and [3, S] */
    int tokens;
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
    if (p->cmask) {   /* the condition pipeline: video_coords / (20, 2048, 2048) */
        CVX_CHECK(S == (size_t)p->tokens);
        ltx_rope_coords_video(p->video_coords, p->tokens, p->coords);
    } else {
        ltx_rope_coords_grid(F, H, W, scale, p->coords);
    }
    p->x = cvx_alloc_f32(d->n_latent);
    p->v = cvx_alloc_f32(d->n_out);
    p->t = cvx_alloc_f32(S);
    return 0;
}

/* The packed input p->x and timesteps p->t of `in`; T: 1 or S (per-token timesteps). The
 * condition pipeline's latents come packed; its timestep is min(t, (1 − mask)·1000) per token. */
static int ld_input(cvx_denoiser *d, const cvx_denoise_input *in) {
    ltx_priv *p = d->priv;
    const int C = ltx_get_config(tr(d))->in_channels, S = d->F * d->H * d->W;
    if (p->cmask) {
        memcpy(p->x, in->x, sizeof(float) * d->n_latent);
        ltx_per_token_timesteps((float)in->t, p->cmask, S, p->t);
        return S;
    }
    ltx_pack_latents(in->x, 1, C, d->F, d->H, d->W, p->x);   /* [C, F, H, W] -> [S, C] */
    if (!in->t_tokens) {
        p->t[0] = (float)in->t;   /* the scheduler's values are float32 (exact in double) */
        return 1;
    }
    CVX_CHECK(in->n_t == (size_t)S);
    memcpy(p->t, in->t_tokens, sizeof(float) * S);
    return S;
}

/* The prediction p->v [S, C] -> out: unpacked, or as it is for the condition pipeline's packed loop. */
static void ld_output(cvx_denoiser *d, int C, float *out) {
    ltx_priv *p = d->priv;
    if (p->cmask) memcpy(out, p->v, sizeof(float) * d->n_out);
    else ltx_unpack_latents(p->v, 1, C, d->F, d->H, d->W, out);
}

static int ld_forward(cvx_denoiser *d, const cvx_denoise_input *in, float *out) {
    ltx_priv *p = d->priv;
    const ltx_text_cond *c = in->cond;
    const int C = ltx_get_config(tr(d))->in_channels, S = d->F * d->H * d->W, T = ld_input(d, in);
    if (ltx_forward(tr(d), p->x, 1, S, c->text, c->mask, c->L, p->t, T, p->coords, p->v)) return -1;
    ld_output(d, C, out);
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
    /* (sequence parallelism: the blocks compute this rank's rows lf->r0 .. + lf->rn) */
    *f = (cvx_fwd){.S = S, .L = 0, .N = S, .D = lf->D, .E = lf->D, .h = lf->h, .emb = lf->emb, .row0 = lf->r0,
                   .nrows = lf->rn, .impl = lf};
    return 0;
}

static void ld_blocks(cvx_denoiser *d, cvx_fwd *f, int first, int count) {
    ltx_fwd *lf = f->impl;
    lf->h = f->h;
    ltx_forward_blocks(tr(d), lf, first, count);
}

/* TeaCache4LTX-Video (ali-vilab/TeaCache, TeaCache4LTX-Video/teacache_ltx.py lines 60-67): block 0's
 * modulated input, this rank's rows [nrows, D] */
static void ld_teacache_input(cvx_denoiser *d, cvx_fwd *f, float *out) {
    ltx_fwd *lf = f->impl;
    lf->h = f->h;
    ltx_forward_block0_input(tr(d), lf, out);
}

/* norm_out and its modulation in place (the same script's cached residual ends there, line 126) */
static void ld_output_norm(cvx_denoiser *d, cvx_fwd *f) {
    ltx_fwd *lf = f->impl;
    lf->h = f->h;
    ltx_forward_output_norm(tr(d), lf);
    f->out_normed = 1;
}

static void ld_finalize(cvx_denoiser *d, cvx_fwd *f, float *out) {
    ltx_priv *p = d->priv;
    ltx_fwd *lf = f->impl;
    lf->h = f->h;
    lf->out_normed = f->out_normed;
    ltx_forward_finalize(tr(d), lf, p->v);
    ld_output(d, ltx_get_config(tr(d))->out_channels, out);
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

static int ld_set_sp(cvx_denoiser *d, struct cvx_dist *sp) { return ltx_set_sp(tr(d), sp); }

static void ld_comm(cvx_denoiser *d, double *seconds, double *bytes) { ltx_comm_stats(tr(d), seconds, bytes); }

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
    .blocks = ld_blocks, .finalize = ld_finalize, .abort = ld_abort, .teacache_input = ld_teacache_input,
    .output_norm = ld_output_norm, .set_sp = ld_set_sp, .comm = ld_comm, .free = ld_free,
};

void ltx_denoiser_init(cvx_denoiser *d, ltx_transformer *m, double frame_rate) {
    ltx_priv *p = cvx_calloc(1, sizeof *p);
    p->frame_rate = frame_rate;
    *d = (cvx_denoiser){.type = &ltx_denoiser, .model = m, .priv = p, .num_layers = ltx_get_config(m)->num_layers};
}

void ltx_denoiser_set_condition(cvx_denoiser *d, const float *mask, const float *video_coords, int tokens) {
    ltx_priv *p = d->priv;
    p->cmask = mask, p->video_coords = video_coords, p->tokens = tokens;
}

/* ali-vilab/TeaCache @ 7c10efc, TeaCache4LTX-Video/teacache_ltx.py line 72 (a-r-r-o-w/LTX-Video-0.9.1-diffusers) */
static const struct { const char *name; int max_dim; double c[5]; } teacache_sets[] = {
    {"LTX-Video-0.9.1", 2048, {2.14700694e+01, -1.28016453e+01, 2.31279151e+00, 7.92487521e-01, 9.69274326e-03}},
};

const char *ltx_teacache_coefficients(const ltx_config *c, double out[5]) {
    const int dim = c->num_attention_heads * c->attention_head_dim;
    memset(out, 0, sizeof(double) * 5);
    for (size_t k = 0; k < sizeof teacache_sets / sizeof *teacache_sets; k++)
        if (dim <= teacache_sets[k].max_dim) {
            memcpy(out, teacache_sets[k].c, sizeof teacache_sets[k].c);
            return teacache_sets[k].name;
        }
    return NULL;
}
