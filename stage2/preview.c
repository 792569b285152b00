/* Live preview: contact sheet of the current x0 estimate (preview.h). */
#include "preview.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fileio.h"
#include "stage3/video.h"

/* kijai/ComfyUI-CogVideoXWrapper pipeline_cogvideox.py, class CogVideoXLatentFormat (introduced in
 * 90e8367, 2025-01-20, unchanged at fdb8abd): rows = latent channels 0..15, columns R, G, B. The
 * wrapper applies them to 5·x0 in model space; ComfyUI's Latent2RGBPreviewer then maps
 * clamp((rgb + 1)/2). Likely hand-picked (its nodes.py draws random factors to search by eye). */
static const float latent_rgb_factors[16][3] = {
    {0.03197404301362048f, 0.04091260743347359f, 0.0015679806301828524f},
    {0.005517101026578029f, 0.0052348639043457755f, -0.005613441650464035f},
    {0.0012485338264583965f, -0.016096744206117782f, 0.025023940031635054f},
    {0.01760126794276171f, 0.0036818415416642893f, -0.0006019202528157255f},
    {0.000444954842288864f, 0.006102128982092191f, 0.0008457999272962447f},
    {-0.010531904354560697f, -0.0032275501924977175f, -0.00886595780267917f},
    {-0.0001454543946122991f, 0.010199210750845965f, -0.00012702234832386188f},
    {0.02078497279904325f, -0.001669617778939972f, 0.006712703698951264f},
    {0.005529571599763264f, 0.009733929789086743f, 0.001887302765339838f},
    {0.012138415094654218f, 0.024684961927224837f, 0.037211249767461915f},
    {0.0010364484570000384f, 0.01983636315929172f, 0.009864602025627755f},
    {0.006802862648143341f, -0.0010509255113510681f, -0.007026003345126021f},
    {0.0003532208468418043f, 0.005351971582801936f, -0.01845912126717106f},
    {-0.009045079994694397f, -0.01127941143183089f, 0.0042294057970470806f},
    {0.002548289972720752f, 0.025224244654428216f, -0.0006086130121693347f},
    {-0.011135669222532816f, 0.0018181308593668505f, 0.02794541485349922f}};
static const float latent_rgb_bias[3] = {-0.023f, 0.0f, -0.017f};

int cvx_preview_parse_mode(const char *s, cvx_preview_mode *out) {
    if (!strcmp(s, "latent")) *out = CVX_PREVIEW_LATENT;
    else if (!strcmp(s, "vae")) *out = CVX_PREVIEW_VAE;
    else return cvx_error("--preview must be latent or vae, got '%s'", s);
    return 0;
}

const char *cvx_preview_mode_name(cvx_preview_mode m) {
    return m == CVX_PREVIEW_VAE ? "vae" : "latent";
}

void cvx_preview_latent_rgb(const float *x0, const cvx_latent_shape *sh, double scaling_factor, int up,
                                  float *rgb) {
    const int T = sh->frames - sh->pad_frames, C = sh->channels < 16 ? sh->channels : 16;
    const int h = sh->height, w = sh->width, H = h * up, W = w * up;
    const size_t hw = (size_t)h * w;
    /* the wrapper's gain 5 on model-space latents = 3.5 on VAE-space ones at 5b's scaling 0.7 */
    const float gain = (float)(3.5 / scaling_factor);
    for (int t = 0; t < T; t++) {
        const float *z = x0 + (size_t)(t + sh->pad_frames) * sh->channels * hw;          // [C, h, w]
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                float v[3] = {0, 0, 0};
                for (int c = 0; c < C; c++)
                    for (int k = 0; k < 3; k++) v[k] += z[c * hw + (size_t)y * w + x] * latent_rgb_factors[c][k];
                for (int k = 0; k < 3; k++) {
                    float o = gain * v[k] + latent_rgb_bias[k];
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
        T = sh->frames - sh->pad_frames, H = sh->height * up, W = sh->width * up;
        rgb = cvx_alloc_f32((size_t)3 * T * H * W);
        cvx_preview_latent_rgb(x0, sh, pv->scaling_factor, up, rgb);
    } else {
        if (!pv->decode) return cvx_error("--preview vae: no VAE decoder available");
        /* latent frame 0 (after the padding) as raw latents [1, C, 1, h, w] */
        const float *z = x0 + (size_t)sh->pad_frames * sh->channels * sh->height * sh->width;
        if (pv->decode(pv->decode_user, z, sh->channels, sh->height, sh->width, &rgb, &T, &H, &W)) return -1;
    }
    rc = video_write_contact_sheet(pv->path, rgb, T, H, W);
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
