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
