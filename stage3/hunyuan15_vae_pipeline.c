/* HunyuanVideo-1.5's VAE as its pipelines call it (hunyuan15_vae_pipeline.h). */
#include "stage3/hunyuan15_vae_pipeline.h"

#include <stdlib.h>

#include "error.h"
#include "latent_dist.h"

int hv15_vae_encode_image_dist(const hv15_vae *v, const float *image, int H, int W, float **mean, float **std, int *F,
                               int *h, int *w) {
    *mean = *std = NULL;
    if (hv15_vae_encoded_shape(v, 1, H, W, F, h, w)) return -1;
    const int C = hv15_vae_get_config(v)->latent_channels;
    const size_t hw = (size_t)*h * *w;
    float *moments = cvx_alloc_f32(2 * C * hw);
    if (hv15_vae_encode(v, image, 1, H, W, NULL, moments)) {
        free(moments);
        return -1;
    }
    *mean = cvx_alloc_f32(C * hw), *std = cvx_alloc_f32(C * hw);
    vae_latent_dist(moments, C, hw, *mean, NULL, *std);
    free(moments);
    return 0;
}

void hv15_vae_tiling_for(int tile_height, int tile_width, hv15_vae_tiling *t) {
    hv15_vae_tiling_default(t);
    if (tile_height) t->min_h = tile_height;
    if (tile_width) t->min_w = tile_width;
}

int hv15_vae_decode_latents(const hv15_vae *v, const hv15_vae_tiling *tiling, const float *latents, int T, int h, int w,
                            float **frames) {
    const hv15_vae_config *c = hv15_vae_get_config(v);
    const size_t n = (size_t)c->latent_channels * T * h * w;
    float *z = cvx_alloc_f32(n);
    hv15_vae_unscale(v, latents, n, z);
    *frames = cvx_alloc_f32((size_t)3 * hv15_vae_decoded_frames(v, T) * h * c->spatial_ratio * w * c->spatial_ratio);
    const int rc = hv15_vae_decode(v, z, T, h, w, tiling, *frames);
    free(z);
    return rc;
}
