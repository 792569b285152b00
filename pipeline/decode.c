/* decode: latents -> frames (AutoencoderKLCogVideoX.decode as CogVideoXPipeline calls it). */
#include "pipeline/internal.h"

#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "validate.h"

/* --tiling auto tiles when an untiled decode would need more than this. */
#define AUTO_TILING_BUDGET (6.0 * 1024 * 1024 * 1024)

void cvx_frames_free(cvx_frames *f) {
    for (int b = 0; f->data && b < f->B; b++) free(f->data[b]);
    free(f->data);
    memset(f, 0, sizeof *f);
}

int cvx_decode(cvx_model *m, const cvx_decode_params *p, const float *zin, int B, int C, int T, int h, int w,
               const char *label, cvx_progress_fn progress, void *user, cvx_frames *out) {
    memset(out, 0, sizeof *out);
    if (!label) label = "latents";
    if (cvx_model_load_vae(m)) return -1;
    const vae_decoder *d = &m->vae;
    if (C != d->latent_channels)
        return cvx_error("%s: tensor 'latents' has %d channels (dim 1 of [B, C, T, H, W]), the VAE in %s expects "
                         "latent_channels = %d", label, C, m->dir, d->latent_channels);
    if (B < 1 || T < 1 || h < 1 || w < 1) return cvx_error("%s: tensor 'latents' has an empty shape", label);
    if (d->out_channels != 3) return cvx_error("%s/vae: out_channels = %d, a video needs 3", m->dir, d->out_channels);

    /* tiling */
    int tsh = p->tile_height ? p->tile_height : d->sample_height / 2;
    int tsw = p->tile_width ? p->tile_width : d->sample_width / 2;
    int tiled = 0;
    if (p->tiling == CVX_TILING_ON) tiled = vae_tiling_applies(d, h, w, tsh, tsw);
    else if (p->tiling == CVX_TILING_AUTO)
        tiled = vae_tiling_applies(d, h, w, tsh, tsw) && vae_estimate_peak_bytes(d, h, w) > AUTO_TILING_BUDGET;
    if (tiled && vae_tiling_check(d, tsh, tsw)) return -1;
    if (tiled)
        cvx_info("decoding latents [%d, %d, %d, %d, %d] with %s/vae in tiles of %dx%d samples", B, C, T, h, w, m->dir,
                 tsh, tsw);
    else
        cvx_info("decoding latents [%d, %d, %d, %d, %d] with %s/vae (untiled, ~%.1f GB estimated peak)", B, C, T, h,
                 w, m->dir, vae_estimate_peak_bytes(d, h, w) / 1e9);

    /* 1 / scaling_factor * latents, as upstream. A NaN/Inf (a diverged run, a damaged file) is an
     * error naming the index, not a video of NaNs (issue 14) */
    const size_t n = (size_t)B * C * T * h * w;
    if (cvx_check_finite(zin, n, "latents")) return cvx_error_prefix("%s", label);
    float *z = cvx_alloc_f32(n);   // [B, C, T, h, w]
    const float scale = (float)(1.0 / d->scaling_factor);
    for (size_t i = 0; i < n; i++) z[i] = zin[i] * scale;

    const int To = vae_output_frames(d, T);
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae decode", B * vae_decode_steps(d, T, h, w, tiled, tsh, tsw), progress, user);
    out->B = B, out->T = To, out->H = h * d->spatial_ratio, out->W = w * d->spatial_ratio, out->tiled = tiled;
    out->data = cvx_calloc((size_t)B, sizeof *out->data);
    /* several ranks: tiles spread over them; an untiled decode is rank 0's alone */
    const int ranks = p->dist ? cvx_dist_size(p->dist) : 1, root = !p->dist || cvx_dist_rank(p->dist) == 0;
    if (ranks > 1 && !tiled) cvx_info("untiled decode: rank 0 decodes alone (tiles are what ranks share)");
    for (int b = 0; b < B; b++) {
        const float *zb = z + (size_t)b * C * T * h * w;   // [C, T, h, w]
        if (tiled) {
            int To2, H2, W2;
            out->data[b] = vae_decode_tiled_dist(d, zb, T, h, w, tsh, tsw, p->dist, &To2, &H2, &W2, &bar);
            if (root) out->T = To2, out->H = H2, out->W = W2;
        } else if (!root) {
            out->data[b] = NULL;
        } else {
            out->data[b] = cvx_alloc_f32((size_t)d->out_channels * To * out->H * out->W);   // [3, To, Ho, Wo]
            vae_decode_chunked(d, zb, T, h, w, out->data[b], &bar);
        }
    }
    cvx_progress_finish(&bar);
    free(z);
    /* finite latents can still overflow in a damaged VAE: never encode NaN frames */
    for (int b = 0; b < B && root; b++)   /* ranks > 0 hold no frames (rank 0 gathered the tiles) */
        if (cvx_check_finite(out->data[b], (size_t)3 * out->T * out->H * out->W, "decoded")) {
            cvx_error_prefix("%s: sample %d", label, b);
            cvx_frames_free(out);
            return -1;
        }
    return 0;
}
