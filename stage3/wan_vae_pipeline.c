/* What the Wan pipelines (diffusers 0.33.1 / 0.35.2) do around AutoencoderKLWan: the decode's
 * tiling choice, a whole video decoded into one buffer, an encode to the latent distribution's
 * mean and std, and WanImageToVideoPipeline's condition (the first-frame mask + the encoded
 * image-then-zeros video). */
#include "wan_vae.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

int wan_vae_choose_tiling(const wan_vae *v, int mode, int tile_h, int tile_w, int F, int h, int w, double auto_budget,
                          wan_vae_tiling *t) {
    wan_vae_tiling_default(t);
    if (tile_h) t->min_h = tile_h, t->stride_h = tile_h * 3 / 4;
    if (tile_w) t->min_w = tile_w, t->stride_w = tile_w * 3 / 4;
    if (mode < 0) return 0;
    if (mode > 0) return wan_vae_tiling_applies(v, h, w, t);
    return wan_vae_estimate_peak_bytes(v, F, h, w, NULL) > auto_budget && wan_vae_tiling_applies(v, h, w, t);
}

typedef struct {
    float *dst;   /* [3, T, H, W] */
    int T;
} frames_sink;

static int take_frames(void *user, const float *frames, int t0, int n, int H, int W) {
    frames_sink *s = user;
    const size_t hw = (size_t)H * W;
    for (int c = 0; c < 3; c++)
        memcpy(s->dst + ((size_t)c * s->T + t0) * hw, frames + (size_t)c * n * hw, sizeof(float) * n * hw);
    return 0;
}

int wan_vae_plan_decode(const wan_vae *v, int mode, int tile_h, int tile_w, int B, int F, int h, int w,
                        double auto_budget, wan_vae_tiling *t) {
    const int C = v->cfg.z_dim, tiled = wan_vae_choose_tiling(v, mode, tile_h, tile_w, F, h, w, auto_budget, t);
    if (tiled && wan_vae_tiling_check(v, t)) return -1;
    if (mode > 0 && !tiled)
        cvx_info("tiling on: latents %dx%d fit one tile of %dx%d samples: decoding untiled", w, h, t->min_w, t->min_h);
    if (tiled)
        cvx_info("decoding latents [%d, %d, %d, %d, %d] with the Wan VAE in tiles of %dx%d samples (~%.1f GB peak)", B,
                 C, F, h, w, t->min_w, t->min_h, wan_vae_estimate_peak_bytes(v, F, h, w, t) / 1e9);
    else
        cvx_info("decoding latents [%d, %d, %d, %d, %d] with the Wan VAE (untiled, ~%.1f GB estimated peak%s)", B, C, F,
                 h, w, wan_vae_estimate_peak_bytes(v, F, h, w, NULL) / 1e9, mode < 0 ? ", --tiling off" : "");
    return tiled;
}

float *wan_vae_decode_video(const wan_vae *v, const float *latents, int F, int h, int w, const wan_vae_tiling *tiling,
                            cvx_progress *p) {
    const int To = wan_vae_decoded_frames(v, F);
    frames_sink sink = {cvx_alloc_f32((size_t)3 * To * h * v->spatial_ratio * w * v->spatial_ratio), To};
    if (wan_vae_decode(v, latents, F, h, w, tiling, take_frames, &sink, p)) {
        free(sink.dst);
        return NULL;
    }
    return sink.dst;
}

int wan_vae_encode_steps(int T) { return 1 + (T - 1 + WAN_VAE_ENCODE_CHUNK - 1) / WAN_VAE_ENCODE_CHUNK; }

int wan_vae_encode_dist(const wan_vae *v, const float *video, int T, int H, int W, float *mean, float *std,
                        cvx_progress *p) {
    int F, h, w;
    if (wan_vae_encoded_shape(v, T, H, W, &F, &h, &w)) return -1;
    const size_t n = (size_t)v->cfg.z_dim * F * h * w;
    float *logvar = cvx_alloc_f32(n);
    const int rc = wan_vae_encode(v, video, T, H, W, mean, logvar, p);
    for (size_t i = 0; i < n && !rc; i++) std[i] = expf(0.5f * logvar[i]);   /* torch.exp(0.5 * logvar) */
    free(logvar);
    return rc;
}

float *wan_i2v_condition(const wan_vae_config *cfg, const float *mean, int F, int h, int w) {
    const size_t fhw = (size_t)F * h * w, hw = (size_t)h * w;
    float *cond = cvx_calloc((WAN_I2V_MASK_CHANNELS + (size_t)cfg->z_dim) * fhw, sizeof(float));   // [4 + z, F, h, w]
    for (int k = 0; k < WAN_I2V_MASK_CHANNELS; k++)
        for (size_t i = 0; i < hw; i++) cond[k * fhw + i] = 1.0f;   /* latent frame 0 */
    wan_latents_normalize(cfg, mean, F, h, w, cond + WAN_I2V_MASK_CHANNELS * fhw);
    return cond;
}
