/* The denoiser interface the sampler and the step cache drive: one transformer forward of one CFG
 * branch (batch 1) in three pieces — embed, blocks, finalize — so that step caching can skip or
 * reuse the blocks. Each model family implements it in its own file (stage2/cogvideox_family.c,
 * stage2/wan_family.c) over its transformer; the sampler knows no family, and the conditioning
 * of a branch (text, masks, image tokens) is the family's own type behind one pointer.
 *
 * The pieces' float operations are those of the family's plain forward: embed, blocks(0,
 * num_layers), finalize gives the same bytes as `forward`, and so does any split of the blocks
 * into consecutive calls (blocks(0, k), blocks(k, n − k)).
 *
 * Step caching drives them generically: "run blocks [0, k) and read the streams" is blocks(0, k)
 * then f->h (and f->aux); "run from block k on given streams" is writing them into f->h (rows
 * row0 .. row0 + nrows) and f->aux after embed, then blocks(k, ·). */
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
    /* what else the blocks update besides h, as A rows of D (HunyuanVideo-1.5's text stream
     * [Lt, D]; NULL, A = 0: nothing — CogVideoX's text rows are in h, Wan's and LTX's context is
     * read only). Whole on every rank. A caller may write into it between pieces (not repoint it). */
    float *aux;
    int A;
    size_t row0, nrows;       /* the rows of h the blocks compute on this rank (sequence parallelism) */
    int out_normed;           /* h already went through the output norm and its modulation (type->output_norm,
                               * or a caller that wrote such a stream into h): finalize projects only */
    void *impl;               /* the family's forward state */
} cvx_fwd;

/* The inputs of one forward (batch 1: one CFG branch). */
typedef struct {
    const float *x;           /* latents in the family's layout (n_latent floats) */
    /* this branch's conditioning, built by the family (its sample_setup) and read only by its
     * denoiser: the sampler and the step cache pass it through and never look inside. CogVideoX and
     * Wan 2.1 take a cvx_text_cond; a family with other inputs (several encoders, masks) its own */
    const void *cond;
    double t;                 /* the timestep value the scheduler hands the model */
    /* per-token timesteps [n_t] (the plan's t_scale[k] · t, float32), NULL: the scalar t for every
     * token (Wan 2.2 TI2V: 0 on the conditioning frame's tokens) */
    const float *t_tokens;
    size_t n_t;
} cvx_denoise_input;

/* The per-branch conditioning of the CogVideoX and Wan 2.1 denoisers (in.cond points to one). */
typedef struct {
    const float *text;        /* [L, text_dim] the branch's text embeddings */
    int L;
    const float *image;       /* extra context tokens (Wan I2V: CLIP image embeddings [L_img, image_dim]), NULL */
    int L_img;
    const float *channels;    /* extra input channels concatenated to x (I2V image latents / mask), NULL */
} cvx_text_cond;

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
    /* TeaCache on the family's own probe (NULL: the generic rule on f->emb). teacache_input writes
     * what the rule compares for this rank's video rows, [nrows, D] (L = 0) — LTX-Video: block 0's
     * modulated input norm1(h)·(1 + scale_msa) + shift_msa; the rule then takes the rel-L1 over the
     * whole CFG batch and the cached residual spans the blocks and output_norm: the output norm and
     * its modulation on this rank's rows of f->h, in place (sets f->out_normed). */
    void (*teacache_input)(cvx_denoiser *d, cvx_fwd *f, float *out);
    void (*output_norm)(cvx_denoiser *d, cvx_fwd *f);
} cvx_denoiser_type;

struct cvx_denoiser {
    const cvx_denoiser_type *type;
    void *model;              /* the family's transformer (borrowed) */
    void *priv;               /* the adapter's per-run state */
    int num_layers;
    size_t n_latent, n_out;   /* floats of x and of one branch's output for the prepared grid */
    int F, H, W;              /* the prepared grid */
};

static inline void cvx_denoiser_free(cvx_denoiser *d) {
    if (d && d->type && d->type->free) d->type->free(d);
}

#endif
