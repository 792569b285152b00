/* LTX-Video's VAE as its pipelines call it (ltx_vae_pipeline.h). */
#include "stage3/ltx_vae_pipeline.h"

#include <stdlib.h>

#include "error.h"
#include "latent_dist.h"

int ltx_vae_encode_dist(ltx_vae *v, const float *video, int T, int H, int W, float **mean, float **std) {
    const int C = ltx_vae_get_config(v)->latent_channels;
    const size_t thw = (size_t)((T - 1) / 8 + 1) * (H / 32) * (W / 32);
    float *moments = cvx_alloc_f32(2 * C * thw);
    *mean = *std = NULL;
    if (ltx_vae_encode(v, video, T, H, W, moments)) {
        free(moments);
        return -1;
    }
    float *logvar = cvx_alloc_f32(C * thw);
    *mean = cvx_alloc_f32(C * thw), *std = cvx_alloc_f32(C * thw);
    vae_latent_dist(moments, C, thw, *mean, logvar, *std);
    free(moments);
    free(logvar);
    return 0;
}

/* a tile size's stride: 7/8 of it in multiples of 32 (upstream: 448 for 512), at least 32 */
static int tile_stride(int size) {
    const int s = size * 7 / 8 / 32 * 32;
    return s < 32 ? 32 : s;
}

void ltx_vae_tiling_for(int tile_height, int tile_width, ltx_vae_tiling *t) {
    ltx_vae_tiling_default(t);
    if (tile_height) t->min_height = tile_height, t->stride_height = tile_stride(tile_height);
    if (tile_width) t->min_width = tile_width, t->stride_width = tile_stride(tile_width);
}

/* the model cards' decode settings of the timestep-conditioned (0.9.5+) VAE */
#define DEFAULT_DECODE_TIMESTEP 0.05
#define DEFAULT_DECODE_NOISE_SCALE 0.025

void ltx_vae_decode_settings(const ltx_vae_config *vc, int decode_set, double timestep, double noise_scale,
                             double *dt, double *ds) {
    const int tc = vc->timestep_conditioning;
    *dt = decode_set & 1 ? timestep : tc ? DEFAULT_DECODE_TIMESTEP : 0.0;
    *ds = decode_set & 2 ? noise_scale : decode_set & 1 ? *dt : tc ? DEFAULT_DECODE_NOISE_SCALE : 0.0;
}

#define AUTO_TILING_FLOATS (64.0 * 1024 * 1024)

int ltx_vae_tiling_auto(int T, int h, int w) {
    return (double)3 * (8 * (T - 1) + 1) * 32 * h * 32 * w > AUTO_TILING_FLOATS;
}

int ltx_vae_decode_item(ltx_vae_decode_job *job, const float *z, float **frames, cvx_progress *progress) {
    *frames = cvx_alloc_f32((size_t)3 * (8 * (job->T - 1) + 1) * 32 * job->h * 32 * job->w);
    return ltx_vae_decode_tiled(job->v, job->tiling, z, job->T, job->h, job->w, job->timestep, *frames, &job->tiled,
                                progress);
}

void ltx_vae_add_decode_noise(float *z, size_t n, float s, cvx_generator *gen) {
    float *noise = cvx_alloc_f32(n);
    cvx_randn(gen, noise, n);
    ltx_vae_decode_input(z, noise, n, s, z);
    free(noise);
}
