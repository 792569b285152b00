/* Live preview of a stage-2 run: every K steps, a contact sheet (PNG, written to a temp file and
 * renamed) of the scheduler's current x0 estimate (pred_original_sample).
 *
 * Modes:
 *   latent  a rough colour sketch: per latent pixel RGB = 3.5·Σ_c (z_c / scaling_factor)·F[c] + bias
 *           (then the pipeline's clamp(x/2 + 0.5)), F the 16×3 table of kijai/ComfyUI-CogVideoXWrapper
 *           (CogVideoXLatentFormat, commit 90e8367) — an undocumented community fit, not from THUDM or
 *           diffusers. For 5b/1.5 (scaling 0.7) it equals the wrapper's 5·z·F. Models with fewer than 16
 *           latent channels (the tiny test models) use the first C rows. Upscaled ×4 (nearest).
 *   vae     latent frame 0 decoded by the real VAE (causal: frame 0 decodes alone), through a callback.
 * Nothing is allocated and nothing runs unless a preview is asked for (the sampler calls the hook
 * only when one is set). */
#ifndef CVX_STAGE2_PREVIEW_H
#define CVX_STAGE2_PREVIEW_H

#include "stage2/sampler.h"
#include "stage2/scheduler.h"

typedef enum { CVX_PREVIEW_LATENT = 0, CVX_PREVIEW_VAE } cvx_preview_mode;

/* --preview vae: decode raw (model-space) latents z [1, C, 1, h, w] into *rgb [3, T, H, W] in
 * [-1, 1] (malloc'd by the callee). -1 + cvx_error. */
typedef int (*cvx_preview_decode_fn)(void *user, const float *z, int C, int h, int w, float **rgb, int *T,
                                           int *H, int *W);

typedef struct {
    const char *path;                 /* preview.png */
    int every;                        /* write after every K-th step (and after the last) */
    int n_steps;
    cvx_preview_mode mode;
    double scaling_factor;            /* the VAE's (latent mode) */
    const cvx_scheduler *sched; /* x0 source */
    cvx_preview_decode_fn decode;
    void *decode_user;
    /* results */
    int written;
    double seconds;                   /* total time spent on previews */
} cvx_preview;

/* "latent" / "vae" → mode; -1 + cvx_error naming --preview. */
int cvx_preview_parse_mode(const char *s, cvx_preview_mode *out);
const char *cvx_preview_mode_name(cvx_preview_mode m);

/* x0 [F, C, h, w] (the loop layout, padding first) → rgb [3, F − pad, h·up, w·up] in [-1, 1]. */
void cvx_preview_latent_rgb(const float *x0, const cvx_latent_shape *sh, double scaling_factor, int up,
                                  float *rgb);

/* Write the preview for this step now (whatever `every` says). -1 + cvx_error. */
int cvx_preview_write(cvx_preview *pv, int step, const float *x0, const cvx_latent_shape *sh);

/* A cvx_step_hook (ctx = cvx_preview *): writes on every K-th step and the last,
 * reporting the time taken; a failed preview is a warning, never the end of the run. */
void cvx_preview_hook(void *ctx, int step, const float *latents, const cvx_latent_shape *sh);

#endif
