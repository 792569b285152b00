/* Live preview of a stage-2 run: every K steps, a contact sheet (PNG, written to a temp file and
 * renamed) of the scheduler's current x0 estimate (pred_original_sample).
 *
 * Modes:
 *   latent  a rough colour sketch: per latent pixel RGB = gain·Σ_c z_c·F[c] + bias (then the
 *           pipeline's clamp(x/2 + 0.5)), F the family's published C×3 table (cvx_latent_rgb:
 *           CogVideoX's in stage2/cogvideox_family.c, Wan's in stage2/wan_family.c, with their
 *           sources). Models with fewer latent channels than the table's rows (the tiny test models)
 *           use the first C rows; more channels than rows is an error (a warning of the hook).
 *           Upscaled ×4 (nearest).
 *   vae     latent frame 0 decoded by the real VAE (causal: frame 0 decodes alone), through a callback.
 * Nothing is allocated and nothing runs unless a preview is asked for (the sampler calls the hook
 * only when one is set). */
#ifndef CVX_STAGE2_PREVIEW_H
#define CVX_STAGE2_PREVIEW_H

#include "stage2/sampler.h"
#include "stage2/scheduler.h"

typedef enum { CVX_PREVIEW_LATENT = 0, CVX_PREVIEW_VAE } cvx_preview_mode;

/* A family's published latent → RGB sketch: rgb = gain · Σ_c z_c·factors[c] + bias (then the
 * pipeline's clamp(x/2 + 0.5)), z the loop's (model-space) latents; a table of any channel count
 * (latents with fewer channels use its first rows, with more are refused by cvx_preview_write). */
typedef struct {
    const float (*factors)[3];   /* [n_channels][3] */
    int n_channels;
    float bias[3];
    float gain;
} cvx_latent_rgb;

/* --preview vae: decode raw (model-space) latents z [1, C, 1, h, w] into *rgb [3, T, H, W] in
 * [-1, 1] (malloc'd by the callee). -1 + cvx_error. */
typedef int (*cvx_preview_decode_fn)(void *user, const float *z, int C, int h, int w, float **rgb, int *T,
                                           int *H, int *W);

typedef struct {
    const char *path;                 /* preview.png */
    int every;                        /* write after every K-th step (and after the last) */
    int n_steps;
    cvx_preview_mode mode;
    const cvx_latent_rgb *rgb;        /* the family's table (latent mode) */
    const cvx_scheduler *sched; /* x0 source */
    cvx_preview_decode_fn decode;
    void *decode_user;
    /* writes rgb [3, T, H, W] in [-1, 1] as a contact sheet PNG at path (temp file and rename):
     * the pipeline's video writer (stage3/video.h video_write_contact_sheet; model code does not
     * include another stage). -1 + cvx_error */
    int (*write_sheet)(const char *path, const float *rgb, int T, int H, int W);
    /* results */
    int written;
    double seconds;                   /* total time spent on previews */
} cvx_preview;

/* "latent" / "vae" → mode; -1 + cvx_error naming --preview. */
int cvx_preview_parse_mode(const char *s, cvx_preview_mode *out);
const char *cvx_preview_mode_name(cvx_preview_mode m);

/* x0 in the loop layout (sh: frames- or channels-major, padding first) → rgb [3, F − pad, h·up,
 * w·up] in [-1, 1]. */
void cvx_preview_latent_rgb(const float *x0, const cvx_latent_shape *sh, const cvx_latent_rgb *tab, int up,
                            float *rgb);

/* Write the preview for this step now (whatever `every` says). -1 + cvx_error. */
int cvx_preview_write(cvx_preview *pv, int step, const float *x0, const cvx_latent_shape *sh);

/* A cvx_step_hook (ctx = cvx_preview *): writes on every K-th step and the last,
 * reporting the time taken; a failed preview is a warning, never the end of the run. */
void cvx_preview_hook(void *ctx, int step, const float *latents, const cvx_latent_shape *sh);

#endif
