/* The denoiser interface the sampler and the step cache drive: one transformer forward of one CFG
 * branch (batch 1) in three pieces — embed, blocks, finalize — so that step caching can skip or
 * reuse the blocks. Each model family implements it in its own file (stage2/cogvideox_denoiser.c,
 * stage2/wan_denoiser.c) over its transformer; the sampler knows no family.
 *
 * The pieces' float operations are those of the family's plain forward: embed, blocks(0,
 * num_layers), finalize gives the same bytes as `forward`. */
#ifndef CVX_STAGE2_DENOISER_H
#define CVX_STAGE2_DENOISER_H

#include <stddef.h>

struct cvx_dist;

/* One forward's state between the pieces, as the sampler and the step cache see it. */
typedef struct {
    int S, L, N, D, E;        /* h holds S = L + N token rows: L conditioning rows (CogVideoX's text; 0 for
                               * Wan) then N video rows, D wide; E: the width of emb */
    float *h;                 /* [S, D] residual stream; a caller may point it at a copy between pieces (the
                               * pieces that follow use f->h) */
    const float *emb;         /* [E] the step's time signal the TeaCache rule compares */
    size_t row0, nrows;       /* the rows of h the blocks compute on this rank (sequence parallelism) */
    void *impl;               /* the family's forward state */
} cvx_fwd;

/* The inputs of one forward (batch 1: one CFG branch). */
typedef struct {
    const float *x;           /* latents in the family's layout (n_latent floats) */
    const float *cond;        /* extra input channels the family concatenates to x (I2V), or NULL */
    const float *text;        /* [L, text_dim] */
    int L;
    const float *image;       /* extra context tokens (Wan I2V: CLIP image embeddings [L_img, image_dim]), NULL */
    int L_img;
    double t;                 /* the timestep value the scheduler hands the model */
} cvx_denoise_input;

typedef struct cvx_denoiser cvx_denoiser;

typedef struct {
    const char *name;   /* "CogVideoX transformer" */
    /* the latent grid of the run (frames, height, width in latent pixels): per-run tables (RoPE).
     * -1 + cvx_error when the model cannot take it */
    int (*prepare)(cvx_denoiser *d, int F, int H, int W);
    int (*forward)(cvx_denoiser *d, const cvx_denoise_input *in, float *out);
    int (*embed)(cvx_denoiser *d, const cvx_denoise_input *in, cvx_fwd *f);
    void (*blocks)(cvx_denoiser *d, cvx_fwd *f, int first, int count);
    void (*finalize)(cvx_denoiser *d, cvx_fwd *f, float *out);   /* frees f's buffers */
    void (*abort)(cvx_denoiser *d, cvx_fwd *f);                   /* frees f's buffers without output */
    /* Ulysses sequence parallelism over `sp` (NULL: off); -1 + cvx_error when the heads do not split */
    int (*set_sp)(cvx_denoiser *d, struct cvx_dist *sp);
    /* time in exchanges and bytes sent by this rank since the model was loaded (sequence parallelism) */
    void (*comm)(cvx_denoiser *d, double *seconds, double *bytes_sent);
    void (*free)(cvx_denoiser *d);   /* the adapter's state; not the model */
} cvx_denoiser_type;

struct cvx_denoiser {
    const cvx_denoiser_type *type;
    void *model;              /* the family's transformer (borrowed) */
    void *priv;               /* the adapter's per-run state */
    int num_layers;
    int text_dim;             /* the width of the text rows it takes */
    size_t n_latent, n_out;   /* floats of x and of one branch's output for the prepared grid */
    int F, H, W;              /* the prepared grid */
};

static inline void cvx_denoiser_free(cvx_denoiser *d) {
    if (d && d->type && d->type->free) d->type->free(d);
}

#endif
