/* The conditioning's pipeline-internal half (not part of the API; pipeline/cvx.h has the
 * public calls): what cvx_sample and the files need from pipeline/conditioning.c. */
#ifndef CVX_PIPELINE_CONDITIONING_H
#define CVX_PIPELINE_CONDITIONING_H

#include "pipeline/internal.h"
#include "image.h"
#include "rng.h"
#include "stage2/sampler.h"
#include "stage2/scheduler.h"

/* The model fits the mode (its row's mode_rules for the kind its mode_kind gives: CogVideoX I2V needs
 * in_channels = 2 × out_channels, T2V and V2V equal ones). -1 + the rule's one clear cvx_error line
 * naming the model, the mode and what fits. */
int cvx_check_model_mode(cvx_model *m, cvx_mode mode);

/* cvx_sample_resolve's part: the video size from the conditioning (V2V: its frame count and the
 * default strength). -1 + cvx_error when a flag contradicts it. */
int cvx_sample_conditioning_sizes(const cvx_conditioning *c, cvx_sample_params *r);

/* prepare_latents of the I2V / V2V pipelines: the buffers the loop's parameters point to
 * afterwards (image latents, initial latents, the generator after the draws). */
typedef struct {
    float *image_latents;      /* I2V: [F, C, h, w] */
    float *init;               /* [F, C, h, w] */
    cvx_generator gen;
} cvx_prepared;
void cvx_prepared_free(cvx_prepared *p);

/* The stage-1 prologue of an I2V / V2V encode: exactly one of p->image (I2V) and p->video (V2V),
 * the size (the request's, else the model's default: 0 when it has none), the row's mode rules:
 * 0, or -1 + cvx_error. */
int cvx_conditioning_request(cvx_model *m, const cvx_conditioning_params *p, cvx_mode *mode, int *H, int *W);
/* Then the source, exactly one of p->image, p->video, loaded as RGB8
 * frames (at least one): 0, or -1 + cvx_error (rgb then holds nothing). */
int cvx_conditioning_load(const cvx_conditioning_params *p, cvx_rgb_frames *rgb);
/* VideoProcessor.preprocess of the loaded frames: [3, T, H, W] in [-1, 1] (allocated), the first
 * min(T, frames) resized to H×W (Pillow's LANCZOS, logged naming `src`) and mapped, zero frames
 * after (Wan I2V: the image, then zeros). */
float *cvx_conditioning_pixels(const cvx_rgb_frames *rgb, const char *src, int T, int H, int W);

/* The stage-1 skeleton of an image (I2V) or video (V2V) encode through the row's VAE
 * (cvx_conditioning_encode): the request and the mode rule, the row's checks, the source loaded,
 * a video's frame count checked, the image's own encodings, the pixels, the row's encode. */
typedef struct {
    /* after the mode rule, before anything is read: the row's checks (the size of an I2V video of
     * the request's length, flags the mode does not take). -1 + cvx_error */
    int (*check)(cvx_model *m, const cvx_conditioning_params *p, cvx_mode mode, int H, int W);
    /* V2V, after loading: the row's size rule for the video's frames × H × W. -1 + cvx_error */
    int (*check_size)(cvx_model *m, cvx_mode mode, int frames, int H, int W);
    /* optional: I2V's pixel frames (the image, then zero frames: Wan 2.1); NULL: the image alone */
    int (*i2v_frames)(cvx_model *m, const cvx_conditioning_params *p);
    /* optional: the image's own encodings (Wan's CLIP image embeddings) into out */
    int (*encode_image)(cvx_model *m, const cvx_rgb_frames *rgb, cvx_conditioning *out);
    /* px [3, T, H, W] (from `src`) -> out's mean, std, C, T, h, w and frames */
    int (*encode)(cvx_model *m, const cvx_conditioning_params *p, cvx_mode mode, const float *px, int T, int H, int W,
                  const char *src, cvx_progress_fn progress, void *user, cvx_conditioning *out);
} cvx_media_encoder;
/* 0 with out filled (mode, size too), or -1 + cvx_error with out freed. */
int cvx_conditioning_encode(cvx_model *m, const cvx_conditioning_params *p, const cvx_media_encoder *e,
                            cvx_progress_fn progress, void *user, cvx_conditioning *out);

/* prepare_latents of a video-to-video pipeline: t_start from `strength` (the timesteps set for
 * the request's steps), the generator seeded from the request, the encoder's sample mean + std·randn
 * (its first draws, in the loop's noise dtype) -> to_x0 (the family's scaling and layout: sample
 * [C, T, h, w] -> x0 [numel]; in place allowed), the noise, scheduler add_noise at t_start ->
 * *init (allocated). lp's init_latents, init_generator (= gen) and t_start set. -1 + cvx_error */
int cvx_prepare_v2v(const cvx_conditioning *c, cvx_scheduler *sched, double strength, size_t numel,
                    cvx_loop_params *lp, cvx_generator *gen, float **init,
                    void (*to_x0)(void *user, float *sample, float *x0), void *user);

/* The latents stage 1 encoded fit the loop's [C, T, h, w]: 0, or -1 + "<what> conditioning latents
 * [..] do not fit the loop's [..]<hint>" (what: "image-to-video"; hint: "" or " (...)"). */
int cvx_conditioning_fits(const cvx_conditioning *c, int C, int T, int h, int w, const char *what, const char *hint);
/* An image-to-video run's extra input: cond (taken: the run frees it) as the loop's channels, and
 * the conditioning's image embeddings (if any, copied) as its image tokens. */
void cvx_sample_run_i2v(cvx_sample_run *run, float *cond, const cvx_conditioning *c);
/* The further conditioning tensor `name` of the request (its negative prompt's rows with
 * `negative`), NULL when absent. */
const float *cvx_cond_more_find(const cvx_sample_params *p, const char *name, int negative);
/* The size checks stage 2 will make, in stage 1 before anything is encoded: `shape` (the family's
 * latent shape rule over the request, user its config) for frames × H × W at the model's VAE
 * factors; 0 without a transformer config (reported by the call that needs it). */
int cvx_check_latent_size(const cvx_model *m, int frames, int H, int W,
                          int (*shape)(const void *user, const cvx_loop_params *lp, cvx_latent_shape *sh),
                          const void *user, cvx_latent_shape *sh);
/* Keyframe conditions (CVX_MODE_COND, stage 1 --condition): each condition's image or video
 * (a video trimmed as LTXConditionPipeline.trim_conditioning_sequence: at most frames −
 * frame_index frames, then k·vae_scale_temporal + 1) resized to W×H (LANCZOS), [-1, 1], encoded
 * by the row's VAE (vae->encode: px [3, n, H, W] -> mean, std [C, T, h, w] allocated); out: their
 * distributions along T in order [C, ΣT, h, w], the items, the video's frames × H × W. */
typedef struct {
    const char *name;   /* the log line's "the LTX VAE" */
    int (*encode)(void *user, const float *px, int n, int H, int W, float **mean, float **std);
    void *user;
} cvx_conditions_vae;
int cvx_conditions_encode(const cvx_model *m, const cvx_conditioning_params *p, const cvx_conditions_vae *vae,
                          int frames, int H, int W, int C, int h, int w, cvx_conditioning *out);
/* stage 2's log line of the video and its latents [1, C, T, h, w] (the loop's frames less pad). */
void cvx_log_latents(const cvx_sample_params *p, const cvx_latent_shape *sh, const char *note);
/* TeaCache's coefficients of a run: the request's --teacache_coefficients over the row's (the row
 * filled lp->teacache_coefficients before the call; `published` 0: it has none). None at all with
 * --cache teacache: -1 + cvx_error "--cache teacache: <why>; give --teacache_coefficients or use
 * --cache fbcache or deepcache" (why: a printf format). */
int cvx_teacache_setup(const cvx_sample_params *p, cvx_loop_params *lp, int published, const char *why, ...)
    __attribute__((format(printf, 4, 5)));

/* stage 2's log line of the transformer: "<name> transformer: L layers, H heads x d<detail>; <scheduler>
 * scheduler, N steps, guidance g<note>, seed s" (sched NULL: no scheduler named; note NULL: the
 * no-CFG note when the guidance is <= 1). */
void cvx_log_transformer(const char *name, int layers, int heads, int head_dim, const char *detail,
                         const cvx_scheduler *sched, const cvx_sample_params *p, const char *note);

/* xxh64 of the mode, mean and std: identifies the conditioning in the checkpoint fingerprint. */
uint64_t cvx_conditioning_hash(const cvx_conditioning *c);

#endif
