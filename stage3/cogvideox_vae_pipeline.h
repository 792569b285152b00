/* CogVideoX's decode as its pipelines run it (stage3/cogvideox_vae_pipeline.c): the tiling plan of
 * the request's flags with its log line, then the decode of one batch item. */
#ifndef CVX_STAGE3_COGVIDEOX_VAE_PIPELINE_H
#define CVX_STAGE3_COGVIDEOX_VAE_PIPELINE_H

#include "stage3/cogvideox_vae.h"

typedef struct {
    const cogvideox_vae_decoder *d;
    struct cvx_dist *dist;   /* tiles spread over its ranks (an untiled decode is rank 0's); NULL: one process */
    int T, h, w, tiled, tsh, tsw;
} cogvideox_vae_decode_job;

/* The decode of latents [C, T, h, w] per item: cogvideox_vae_plan_tiling (mode 1 on, −1 off, 0 auto
 * over auto_budget bytes; tile sizes 0: half the sample size) into *job; the choice logged (latents
 * [B, C, T, h, w] with the VAE of `dir`, or nothing: dir NULL). -1 + cvx_error (the tile sizes). */
int cogvideox_vae_decode_job_plan(const cogvideox_vae_decoder *d, int mode, int tile_h, int tile_w, int B, int T,
                                  int h, int w, double auto_budget, struct cvx_dist *dist, const char *dir,
                                  cogvideox_vae_decode_job *job);

#endif
