/* Live preview: contact sheet of the current x0 estimate (preview.h). */
#include "preview.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fileio.h"

int cvx_preview_parse_mode(const char *s, cvx_preview_mode *out) {
    if (!strcmp(s, "latent")) *out = CVX_PREVIEW_LATENT;
    else if (!strcmp(s, "vae")) *out = CVX_PREVIEW_VAE;
    else return cvx_error("--preview must be latent or vae, got '%s'", s);
    return 0;
}

const char *cvx_preview_mode_name(cvx_preview_mode m) {
    return m == CVX_PREVIEW_VAE ? "vae" : "latent";
}

void cvx_preview_latent_rgb(const float *x0, const cvx_latent_shape *sh, const cvx_latent_rgb *tab, int up,
                            float *rgb) {
    const int T = sh->frames - sh->pad_frames, C = sh->channels < tab->n_channels ? sh->channels : tab->n_channels;
    const int h = sh->height, w = sh->width, H = h * up, W = w * up;
    const size_t hw = (size_t)h * w;
    /* channel c of frame t: frames-major [F, C, h, w] or channels-major [C, F, h, w] */
    const size_t c_stride = sh->channels_major ? (size_t)sh->frames * hw : hw;
    const size_t t_stride = sh->channels_major ? hw : (size_t)sh->channels * hw;
    for (int t = 0; t < T; t++) {
        const float *z = x0 + (size_t)(t + sh->pad_frames) * t_stride;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                float v[3] = {0, 0, 0};
                for (int c = 0; c < C; c++)
                    for (int k = 0; k < 3; k++) v[k] += z[c * c_stride + (size_t)y * w + x] * tab->factors[c][k];
                for (int k = 0; k < 3; k++) {
                    float o = tab->gain * v[k] + tab->bias[k];
                    for (int dy = 0; dy < up; dy++)
                        for (int dx = 0; dx < up; dx++)
                            rgb[(((size_t)k * T + t) * H + y * up + dy) * W + x * up + dx] = o;   // [3, T, H, W]
                }
            }
    }
}

int cvx_preview_write(cvx_preview *pv, int step, const float *x0, const cvx_latent_shape *sh) {
    double t0 = cvx_time();
    float *rgb = NULL;
    int T, H, W, rc;
    if (pv->mode == CVX_PREVIEW_LATENT) {
        const int up = 4;
        if (sh->channels > pv->rgb->n_channels)
            return cvx_error("--preview latent: the latents have %d channels, the model family's preview table %d rows "
                             "(use --preview vae)", sh->channels, pv->rgb->n_channels);
        T = sh->frames - sh->pad_frames, H = sh->height * up, W = sh->width * up;
        rgb = cvx_alloc_f32((size_t)3 * T * H * W);
        cvx_preview_latent_rgb(x0, sh, pv->rgb, up, rgb);
    } else {
        if (!pv->decode) return cvx_error("--preview vae: no VAE decoder available");
        /* latent frame 0 (after the padding) as raw latents [1, C, 1, h, w] */
        const size_t hw = (size_t)sh->height * sh->width;
        float *z = cvx_alloc_f32((size_t)sh->channels * hw);
        for (int c = 0; c < sh->channels; c++)
            memcpy(z + c * hw, x0 + (sh->channels_major ? (size_t)c * sh->frames * hw
                                                         : ((size_t)sh->pad_frames * sh->channels + c) * hw),
                   hw * sizeof(float));
        int drc = pv->decode(pv->decode_user, z, sh->channels, sh->height, sh->width, &rgb, &T, &H, &W);
        free(z);
        if (drc) return -1;
    }
    rc = pv->write_sheet ? pv->write_sheet(pv->path, rgb, T, H, W)
                         : cvx_error("preview: no contact sheet writer (cvx_preview.write_sheet)");
    free(rgb);
    if (rc) return -1;
    double dt = cvx_time() - t0;
    pv->written++;
    pv->seconds += dt;
    cvx_info("preview (%s) after step %d: %s in %.2f s", cvx_preview_mode_name(pv->mode), step + 1, pv->path, dt);
    return 0;
}

void cvx_preview_hook(void *ctx, int step, const float *latents, const cvx_latent_shape *sh) {
    (void)latents;
    cvx_preview *pv = ctx;
    if ((step + 1) % pv->every != 0 && step != pv->n_steps - 1) return;
    if (cvx_preview_write(pv, step, pv->sched->type->x0(pv->sched), sh))
        cvx_warn("preview after step %d not written: %s", step + 1, cvx_last_error());
}
