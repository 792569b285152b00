/* LTX-Video's image-to-video conditioning math (diffusers 0.35.2 pipeline_ltx_image2video.py) as
 * pure functions on packed tokens [S, C] (S = F·h·w, token (f·h + y)·w + x; stage2/ltx_pack.h).
 * The condition pipeline's per-token step and keep-select are in stage2/ltx_schedule.h. */
#ifndef CVX_STAGE2_LTX_COND_H
#define CVX_STAGE2_LTX_COND_H

#include <stddef.h>

#include "dtype.h"
#include "rng.h"

/* prepare_latents: the normalised image latent [C, h, w] (latent_dist.sample, then
 * _normalize_latents) repeated over the F latent frames, conditioning mask 1 on frame 0:
 * latents = init·mask + noise·(1 − mask) with noise [C, F, h, w] (randn_tensor, drawn after the
 * image latent's sample); packed → latents [S, C] and mask [S] (1 on the h·w tokens of frame 0). */
void ltx_i2v_initial_latents(const float *image_latent, const float *noise, int C, int F, int h, int w,
                             float *latents, float *mask);

/* LTXImageToVideoPipeline.prepare_latents in the loop's layout [C, F, h, w] (allocated into *init):
 * the image latent (latent_dist.sample of mean, std [C, h, w]: the generator's first draws, in
 * sample_dtype) normalised (latents_mean / std, scaling) on latent frame 0, the noise (the next
 * draws, [C, F, h, w]) elsewhere. -1 + cvx_error, *init NULL. */
int ltx_i2v_prepare(const float *mean, const float *std, int C, int F, int h, int w, const float *latents_mean,
                    const float *latents_std, float scaling, cvx_generator *g, cvx_dtype sample_dtype, float **init);

/* The transformer's per-token timestep of one batch row: t·(1 − mask) [S] (frame-0 tokens 0). */
void ltx_i2v_timesteps(float t, const float *mask, int S, float *out);

/* One Euler step of the I2V loop on packed tokens: frame 0 (the first hw tokens) kept, the other
 * tokens x + (σ_{i+1} − σ_i)·v (the pipeline unpacks, steps latents[:, :, 1:], concatenates and
 * repacks: the same values). out must not alias x or v. */
void ltx_i2v_step(const float *sigmas, int i, const float *v, const float *x, int S, int C, int hw, float *out);

/* LTXConditionPipeline's per-step re-noising of the hard conditions (image_cond_noise_scale > 0,
 * one randn draw of the packed latents' shape per step): tokens with mask > 1 − 1e-6 become
 * init + scale·noise·(t/1000)² (float32 as upstream), the others keep their value. In place on
 * latents [tokens, C]. */
void ltx_condition_renoise(float t, const float *init, const float *noise, const float *mask, int tokens, int C,
                           float scale, float *latents);

/* torch.lerp(start, end, weight) element-wise (weight < 0.5: start + w·(end − start), else
 * end − (end − start)·(1 − w)): the condition latents' blending by strength. out may alias. */
void ltx_lerp(const float *start, const float *end, float weight, size_t n, float *out);

/* LTXConditionPipeline's video_coords of one batch row [3, S] for the F × H × W latent grid
 * (pixel coordinates: frames (f·8 + 1 − 8) clamped at 0, + frame_index (extra condition tokens),
 * then · (1/frame_rate) in float32; h·32, w·32). The transformer divides them by (20, 2048, 2048):
 * ltx_rope_coords_video (stage2/ltx.h). */
void ltx_condition_video_coords(int F, int H, int W, int frame_index, double frame_rate, float *video_coords);

/* ---- LTXConditionPipeline.prepare_latents ---- */

/* One encoded condition (stage 1's latent distribution of an image or video). */
typedef struct {
    const float *mean, *std;   /* [C, T, h, w] */
    int T;                     /* latent frames */
    int frame_index;           /* the pixel frame it conditions */
    float strength;
} ltx_condition;

/* The loop's inputs of the condition pipeline: packed tokens, the frame-k conditions' extra
 * tokens first, then the F·h·w tokens of the video grid. */
typedef struct {
    int tokens, extra;         /* all tokens; the extra tokens among them (first) */
    float *latents;            /* [tokens, C] the initial latents (init_latents) */
    float *mask;               /* [tokens] conditioning_mask */
    float *video_coords;       /* [3, tokens] pixel coordinates (frames / frame_rate; h·32, w·32) */
} ltx_condition_run;

/* prepare_latents with n conditions on the C × F × h × w latent grid, the generator's draws in
 * upstream's order: the noise [C, F, h, w] (float32), then per condition its latent_dist sample
 * (randn in sample_dtype, the VAE's) normalised by the VAE's latents_mean / std / scaling, and for
 * frame_index > 0 the noise its extra tokens are lerped from (float32). frame_index 0: latent frames
 * [0, T) lerped to the condition, mask = strength; frame_index k > 0: with T > 2 latent frames, frames
 * [k/8 + 2, k/8 + T) lerped to the condition's frames from 2 on, and its first (up to 2) frames
 * become extra tokens lerp(noise, cond, strength) at video coordinates of frame k, mask strength.
 * -1 + cvx_error when a condition does not fit the grid. Free with ltx_condition_run_free. */
int ltx_condition_prepare(const ltx_condition *conds, int n, int C, int F, int h, int w, double frame_rate,
                          const float *latents_mean, const float *latents_std, float scaling, cvx_generator *g,
                          cvx_dtype sample_dtype, ltx_condition_run *out);
void ltx_condition_run_free(ltx_condition_run *r);

/* The condition pipeline's start from stage 1's conditions: n conditions (items: T, frame_index,
 * strength; their mean / std are ignored) whose latent distributions lie one after another along T
 * of mean / std [C, T_all, h, w] -> ltx_condition_prepare (out); then *init [tokens, C] (allocated):
 * out->latents, with step 0's add_noise_to_image_conditioning_latents at timestep t0 when
 * scale > 0 (one randn draw [tokens, C] after prepare's). -1 + cvx_error (*init NULL). */
int ltx_condition_start(const float *mean, const float *std, int T_all, const ltx_condition *items, int n, int C,
                        int F, int h, int w, double frame_rate,
                        const float *latents_mean, const float *latents_std, float scaling, cvx_generator *g,
                        cvx_dtype sample_dtype, float t0, float scale, ltx_condition_run *out, float **init);

#endif
