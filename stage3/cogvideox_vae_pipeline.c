/* What the CogVideoX pipelines (diffusers 0.32.2) do around AutoencoderKLCogVideoX: the decode's
 * tiling choice (with the reason a decode stays untiled) and the encode of a video to its latent
 * distribution (tiled when the untiled estimate is large), and the decode job of a request
 * (cogvideox_vae_pipeline.h). */
#include "cogvideox_vae_encoder.h"
#include "stage3/cogvideox_vae_pipeline.h"

#include <stdio.h>
#include <stdlib.h>

#include "dist.h"
#include "error.h"

int cogvideox_vae_plan_tiling(const cogvideox_vae_decoder *d, int mode, int tile_h, int tile_w, int h, int w,
                              double auto_budget, int *tiled, int *tsh, int *tsw, char *why, size_t n) {
    *tsh = tile_h ? tile_h : d->sample_height / 2;
    *tsw = tile_w ? tile_w : d->sample_width / 2;
    const int applies = cogvideox_vae_tiling_applies(d, h, w, *tsh, *tsw);
    const double peak = cogvideox_vae_estimate_peak_bytes(d, h, w) / 1e9;
    *tiled = mode >= 0 && applies && (mode > 0 || cogvideox_vae_estimate_peak_bytes(d, h, w) > auto_budget);
    if (mode < 0)
        snprintf(why, n, "untiled: --tiling off; ~%.1f GB estimated peak", peak);
    else if (!applies)
        snprintf(why, n, "untiled: the latents fit in one tile of %dx%d samples; ~%.1f GB estimated peak", *tsw, *tsh,
                 peak);
    else if (!*tiled)
        snprintf(why, n, "untiled: ~%.1f GB estimated peak, under the %.0f GB above which --tiling auto tiles", peak,
                 auto_budget / 1e9);
    else
        why[0] = 0;
    return *tiled && (cogvideox_vae_tiling_check(d, *tsh, *tsw) || cogvideox_vae_tiling_check_size(d, h, w, *tsh, *tsw))
               ? -1 : 0;
}

float *cogvideox_vae_decode_video(const cogvideox_vae_decoder *d, const float *latents, int T, int h, int w, int tiled,
                                  int tsh, int tsw, struct cvx_dist *dist, int *To, int *Ho, int *Wo, cvx_progress *p) {
    const size_t n = (size_t)d->latent_channels * T * h * w;
    float *z = cvx_alloc_f32(n), *out = NULL;   // [C, T, h, w]
    const float scale = (float)(1.0 / d->scaling_factor);
    for (size_t i = 0; i < n; i++) z[i] = latents[i] * scale;
    if (tiled) {
        out = cogvideox_vae_decode_tiled_dist(d, z, T, h, w, tsh, tsw, dist, To, Ho, Wo, p);
    } else if (!dist || cvx_dist_rank(dist) == 0) {
        *To = cogvideox_vae_output_frames(d, T), *Ho = h * d->spatial_ratio, *Wo = w * d->spatial_ratio;
        out = cvx_alloc_f32((size_t)d->out_channels * *To * *Ho * *Wo);   // [3, To, Ho, Wo]
        cogvideox_vae_decode_chunked(d, z, T, h, w, out, p);
    }
    free(z);
    return out;
}

int cogvideox_vae_encode_tiles_for(const cogvideox_vae_encoder *e, int F, int H, int W, double budget,
                                   cogvideox_vae_encode_tiles *t) {
    t->tsh = e->sample_height / 2, t->tsw = e->sample_width / 2;
    t->tiled = cogvideox_vae_encode_tiling_applies(e, H, W, t->tsh, t->tsw) &&
               cogvideox_vae_encode_estimate_peak_bytes(e, F, H, W) > budget;
    t->steps = cogvideox_vae_encode_steps(e, F, H, W, t->tiled, t->tsh, t->tsw);
    return t->tiled && cogvideox_vae_encode_tiling_check(e, t->tsh, t->tsw) ? -1 : 0;
}

void cogvideox_vae_encode_dist(const cogvideox_vae_encoder *e, const cogvideox_vae_encode_tiles *t, const float *x,
                               int F, int H, int W, float **mean, float **std, int *T, int *h, int *w, cvx_progress *p) {
    const int lc = e->latent_channels;
    float *moments;   // [2·lc, T, h, w]
    if (t->tiled) {
        moments = cogvideox_vae_encode_tiled(e, x, F, H, W, t->tsh, t->tsw, T, h, w, p);
    } else {
        *T = cogvideox_vae_encoded_frames(e, F), *h = cogvideox_vae_encoded_size(e, H), *w = cogvideox_vae_encoded_size(e, W);
        moments = cvx_alloc_f32((size_t)2 * lc * *T * *h * *w);
        cogvideox_vae_encode_batched(e, x, F, H, W, moments, p);
    }
    const size_t S = (size_t)*T * *h * *w;
    *mean = cvx_alloc_f32((size_t)lc * S);   // [lc, T, h, w]
    *std = cvx_alloc_f32((size_t)lc * S);
    vae_latent_dist(moments, lc, S, *mean, NULL, *std);
    free(moments);
}

int cogvideox_vae_decode_job_plan(const cogvideox_vae_decoder *d, int mode, int tile_h, int tile_w, int B, int T,
                                  int h, int w, double auto_budget, struct cvx_dist *dist, const char *dir,
                                  cogvideox_vae_decode_job *job) {
    *job = (cogvideox_vae_decode_job){d, dist, T, h, w, 0, 0, 0};
    char why[160];
    if (cogvideox_vae_plan_tiling(d, mode, tile_h, tile_w, h, w, auto_budget, &job->tiled, &job->tsh, &job->tsw, why,
                                  sizeof why))
        return -1;
    if (!dir) return 0;
    const int C = d->latent_channels;
    if (job->tiled)
        cvx_info("decoding latents [%d, %d, %d, %d, %d] with %s/vae in tiles of %dx%d samples", B, C, T, h, w, dir,
                 job->tsw, job->tsh);
    else
        cvx_info("decoding latents [%d, %d, %d, %d, %d] with %s/vae (%s)", B, C, T, h, w, dir, why);
    if (dist && cvx_dist_size(dist) > 1 && !job->tiled)
        cvx_info("untiled decode: rank 0 decodes alone (tiles are what ranks share)");
    return 0;
}
