/* Image-to-video and video-to-video conditioning (diffusers 0.32.2
 * CogVideoXImageToVideoPipeline / CogVideoXVideoToVideoPipeline):
 *   stage 1: image or video -> RGB8 (libav) -> VideoProcessor.preprocess (Pillow LANCZOS when the
 *            size differs, [-1, 1]) -> AutoencoderKLCogVideoX.encode -> latent_dist mean and std;
 *   stage 2: prepare_latents with the seeded generator: the encoder sample mean + std·randn
 *            draws first, then the noise; I2V: image latents = the sample × scaling factor (÷ for
 *            invert_scale_latents) in frame 0, zero frames after; V2V: the encoded video × scaling
 *            factor, noised with scheduler.add_noise at the first timestep `strength` keeps.
 * The stage-1 file, stage1_conditioning.safetensors, is documented in docs/file-formats.md. */
#include "pipeline/conditioning.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "image.h"
#include "ops.h"
#include "stage2/cache.h"
#include "resize.h"
#include "validate.h"
#include "rng_lowp.h"
#include "latent_dist.h"

/* An untiled encode estimated above this is tiled (the decoder's budget, pipeline/decode.c). */
#define ENCODE_TILING_BUDGET (6.0 * 1024 * 1024 * 1024)
#define DEFAULT_STRENGTH 0.8   /* CogVideoXVideoToVideoPipeline.__call__'s default */
#define FILE_FORMAT "cogvideox.c stage1 conditioning v1"

const char *cvx_mode_name(cvx_mode mode) {
    return mode == CVX_MODE_I2V ? "i2v" : mode == CVX_MODE_V2V ? "v2v" : mode == CVX_MODE_COND ? "condition" : "t2v";
}

void cvx_conditioning_free(cvx_conditioning *c) {
    free(c->mean);
    free(c->std);
    free(c->image_embeds);
    memset(c, 0, sizeof *c);
}

int cvx_check_model_mode(cvx_model *m, cvx_mode mode) {
    const cvx_family *f = m->family;
    int arg[2] = {0, 0};
    const int kind = f->mode_kind ? f->mode_kind(m, arg) : 0;
    for (const cvx_mode_rule *r = f->mode_rules; kind >= 0 && r && r->refusal; r++)
        if ((r->kind == kind || r->kind == CVX_KIND_ANY) && (r->modes & 1u << mode))
            return cvx_error(r->refusal, m->dir, arg[0], arg[1]);
    return 0;
}

int cvx_encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                            cvx_conditioning *out) {
    memset(out, 0, sizeof *out);
    cvx_ctx_use(m->ctx);
    const char *src = p->image ? p->image : p->video;
    if (p->n_conditions) {
        if (!m->family->takes_conditions)
            return cvx_error("--condition: %s takes no conditions (LTX-Video's LTXConditionPipeline does; give "
                             "--image or --video)", m->family->name);
        if (p->image || p->video) return cvx_error("--condition: give conditions, or --image / --video, not both");
        if (p->n_conditions > CVX_MAX_CONDITIONS)
            return cvx_error("--condition: %d given, at most %d", p->n_conditions, CVX_MAX_CONDITIONS);
        src = p->conditions[0].path;
    }
    if (m->family->encode_conditioning(m, p, progress, user, out)) return -1;
    /* a NaN/Inf (a damaged encoder weight) would only show in stage 2, as diverged latents, or be
     * written as an all-NaN conditioning file: named here instead, before anything is written */
    const size_t n = (size_t)out->C * out->T * out->h * out->w;
    if (cvx_check_finite(out->mean, n, "latent_mean") || cvx_check_finite(out->std, n, "latent_std") ||
        (out->image_embeds &&
         cvx_check_finite(out->image_embeds, (size_t)out->image_L * out->image_D, "image_embeds"))) {
        cvx_error_prefix("%s: encoded with %s", src ? src : "the conditioning", m->dir);
        cvx_conditioning_free(out);
        return -1;
    }
    return 0;
}

int cvx_conditioning_request(cvx_model *m, const cvx_conditioning_params *p, cvx_mode *mode, int *H, int *W) {
    if (!p->image == !p->video) return cvx_error("give exactly one of an image (I2V) and a video (V2V)");
    *mode = p->image ? CVX_MODE_I2V : CVX_MODE_V2V;
    *H = p->height ? p->height : m->info.height, *W = p->width ? p->width : m->info.width;
    return cvx_check_model_mode(m, *mode);
}

int cvx_conditioning_load(const cvx_conditioning_params *p, cvx_rgb_frames *rgb) {
    memset(rgb, 0, sizeof *rgb);
    if (!p->image == !p->video) return cvx_error("give exactly one of an image (I2V) and a video (V2V)");
    if (p->image ? cvx_image_load(p->image, rgb) : cvx_video_load(p->video, p->max_frames, rgb)) return -1;
    if (rgb->frames < 1) {
        cvx_rgb_frames_free(rgb);
        return cvx_error("%s: no frames", p->image ? p->image : p->video);
    }
    return 0;
}

float *cvx_conditioning_pixels(const cvx_rgb_frames *rgb, const char *src, int T, int H, int W) {
    if (rgb->width != W || rgb->height != H)
        cvx_info("%s: %dx%d resized to %dx%d (LANCZOS, as upstream)", src, rgb->width, rgb->height, W, H);
    const size_t hw = (size_t)H * W;
    float *px = cvx_calloc((size_t)3 * T * hw, sizeof(float)), *one = cvx_alloc_f32(3 * hw);   // [3, T, H, W]
    for (int t = 0; t < T && t < rgb->frames; t++) {
        cvx_preprocess_image(rgb->rgb + (size_t)t * rgb->width * rgb->height * 3, rgb->width, rgb->height, W, H, one);
        for (int c = 0; c < 3; c++) memcpy(px + ((size_t)c * T + t) * hw, one + (size_t)c * hw, sizeof(float) * hw);
    }
    free(one);
    return px;
}

int cvx_conditioning_encode(cvx_model *m, const cvx_conditioning_params *p, const cvx_media_encoder *e,
                            cvx_progress_fn progress, void *user, cvx_conditioning *out) {
    cvx_mode mode;
    int H, W;
    if (cvx_conditioning_request(m, p, &mode, &H, &W) || e->check(m, p, mode, H, W)) return -1;
    cvx_rgb_frames rgb;
    if (cvx_conditioning_load(p, &rgb)) return -1;
    const char *src = p->image ? p->image : p->video;
    int rc = -1;
    float *px = NULL;
    if (mode == CVX_MODE_V2V && e->check_size(m, mode, rgb.frames, H, W)) {
        cvx_error_prefix("%s (%d frames)", src, rgb.frames);
        goto done;
    }
    const int T = mode == CVX_MODE_I2V && e->i2v_frames ? e->i2v_frames(m, p) : rgb.frames;
    if (mode == CVX_MODE_I2V && e->encode_image && e->encode_image(m, &rgb, out)) goto done;
    px = cvx_conditioning_pixels(&rgb, src, T, H, W);   /* [3, T, H, W]: V2V the frames; I2V the image (, zeros) */
    if (e->encode(m, p, mode, px, T, H, W, src, progress, user, out)) goto done;
    out->mode = mode;
    out->height = H, out->width = W;
    rc = 0;
done:
    if (rc) cvx_conditioning_free(out);
    free(px);
    cvx_rgb_frames_free(&rgb);
    return rc;
}

/* ---- stage 2 ---- */
int cvx_prepare_v2v(const cvx_conditioning *c, cvx_scheduler *sched, double strength, size_t numel,
                    cvx_loop_params *lp, cvx_generator *gen, float **init,
                    void (*to_x0)(void *user, float *sample, float *x0), void *user) {
    const int n_steps = lp->req->num_inference_steps;
    int t_start;
    if (cvx_strength_t_start(n_steps, strength, &t_start) || cvx_scheduler_set_timesteps(sched, n_steps)) return -1;
    /* latent_dist.sample(generator) in the encoder's [C, T, h, w] order: the generator's first
     * draws. A pipeline loaded in bf16/fp16 draws this randn and the noise below in its dtype
     * (the VAE's parameters.dtype, randn_tensor(dtype=prompt_embeds.dtype)): --noise_dtype, as T2V */
    const cvx_dtype nd = (cvx_dtype)lp->noise_dtype;
    const size_t nc = (size_t)c->C * c->T * c->h * c->w;
    float *sample = cvx_alloc_f32(nc), *x0 = cvx_alloc_f32(numel), *noise = cvx_alloc_f32(numel);
    cvx_generator_seed(gen, lp->req->seed);
    int rc = vae_latent_sample_as(c->mean, c->std, nc, gen, nd, sample);
    if (!rc) {
        to_x0(user, sample, x0);
        rc = cvx_randn_as(gen, nd, noise, numel);
    }
    if (!rc) {
        *init = cvx_alloc_f32(numel);
        sched->type->add_noise(sched, t_start, x0, noise, numel, *init);
        cvx_info("video-to-video: strength %g runs %d of %d steps from t=%g", strength, n_steps - t_start, n_steps,
                 sched->timesteps[t_start]);
        lp->init_latents = *init, lp->init_generator = gen, lp->t_start = t_start;
    }
    free(sample);
    free(x0);
    free(noise);
    return rc;
}


int cvx_sample_conditioning_sizes(const cvx_conditioning *c, cvx_sample_params *r) {
    if (!r->height) r->height = c->height;
    if (!r->width) r->width = c->width;
    if (r->height != c->height || r->width != c->width)
        return cvx_error("--height %d --width %d: stage 1 encoded the %s at %dx%d (pass the size to stage 1, or none "
                         "to stage 2)", r->height, r->width,
                         c->mode == CVX_MODE_I2V ? "image" : c->mode == CVX_MODE_COND ? "conditions" : "video", c->width,
                         c->height);
    if (c->mode == CVX_MODE_V2V) {
        if (!r->frames) r->frames = c->frames;
        if (r->frames != c->frames)
            return cvx_error("--frames %d: video-to-video makes as many frames as the input video has (%d)", r->frames,
                             c->frames);
        if (!(r->strength > 0)) r->strength = DEFAULT_STRENGTH;
    } else if (c->frames > 1) {   /* Wan I2V, LTX conditions: stage 1 encoded for a video of c->frames frames */
        if (!r->frames) r->frames = c->frames;
        if (r->frames != c->frames)
            return cvx_error("--frames %d: stage 1 encoded the image for a %d-frame video (give stage 1 --frames %d)",
                             r->frames, c->frames, r->frames);
    }
    if ((c->mode == CVX_MODE_I2V || c->mode == CVX_MODE_COND) && r->strength)
        return cvx_error("--strength %g is for video-to-video; %s runs every step", r->strength,
                         c->mode == CVX_MODE_I2V ? "image-to-video" : "the condition pipeline");
    return 0;
}


/* ---- the stage-1 file ---- */

int cvx_conditioning_write(const char *path, const cvx_conditioning *c, const char *source, const char *model_id) {
    return cvx_conditioning_write_set(NULL, path, c, source, model_id);
}

int cvx_conditioning_write_set(cvx_outset *set, const char *path, const cvx_conditioning *c, const char *source,
                               const char *model_id) {
    cvx_st_writer *w = cvx_stw_new();
    const int64_t shape[5] = {1, c->C, c->T, c->h, c->w};
    char buf[3][32];
    snprintf(buf[0], sizeof buf[0], "%d", c->frames);
    snprintf(buf[1], sizeof buf[1], "%d", c->height);
    snprintf(buf[2], sizeof buf[2], "%d", c->width);
    int rc = cvx_stw_add_f32(w, "latent_mean", CVX_F32, 5, shape, c->mean) ||
             cvx_stw_add_f32(w, "latent_std", CVX_F32, 5, shape, c->std) ||
             cvx_stw_metadata(w, "format", FILE_FORMAT) || cvx_stw_metadata(w, "mode", cvx_mode_name(c->mode)) ||
             cvx_stw_metadata(w, "frames", buf[0]) || cvx_stw_metadata(w, "height", buf[1]) ||
             cvx_stw_metadata(w, "width", buf[2]) || cvx_stw_metadata(w, "source", source) ||
             cvx_stw_metadata(w, "model_id", model_id);
    if (!rc && c->mode == CVX_MODE_COND) {   /* the conditions: lists in their order */
        char lists[4][CVX_MAX_CONDITIONS * 32] = {"", "", "", ""};
        static const char *const keys[4] = {"condition_frame_index", "condition_latent_frames", "condition_frames",
                                            "condition_strength"};
        for (int k = 0; k < c->n_items; k++) {
            const cvx_condition_item *it = &c->items[k];
            const char *sep = k ? "," : "";
            snprintf(lists[0] + strlen(lists[0]), 32, "%s%d", sep, it->frame_index);
            snprintf(lists[1] + strlen(lists[1]), 32, "%s%d", sep, it->T);
            snprintf(lists[2] + strlen(lists[2]), 32, "%s%d", sep, it->frames);
            snprintf(lists[3] + strlen(lists[3]), 32, "%s%.17g", sep, it->strength);
        }
        for (int k = 0; k < 4 && !rc; k++) rc = cvx_stw_metadata(w, keys[k], lists[k]);
    }
    if (!rc && c->image_embeds) {   /* Wan I2V: the CLIP image embeddings [1, L, D] */
        const int64_t ishape[3] = {1, c->image_L, c->image_D};
        rc = cvx_stw_add_f32(w, "image_embeds", CVX_F32, 3, ishape, c->image_embeds);
    }
    rc = rc || (set ? cvx_outset_stw(set, w, path) : cvx_stw_write(w, path));
    cvx_stw_free(w);
    return rc ? -1 : 0;
}

/* metadata `key`: n comma-separated numbers in [lo, hi] (ints unless dbl) into out / dout */
static int meta_list(const cvx_safetensors *st, const char *key, int n, double lo, double hi, int *out, double *dout) {
    const char *v = cvx_st_metadata(st, key), *p = v;
    for (int k = 0; p && k < n; k++) {
        char *end;
        double x = dout ? strtod(p, &end) : (double)strtol(p, &end, 10);
        if (end == p || !(x >= lo && x <= hi) || (*end != (k + 1 < n ? ',' : 0))) break;
        if (dout) dout[k] = x;
        else out[k] = (int)x;
        p = k + 1 < n ? end + 1 : NULL;
        if (k + 1 == n) return 0;
    }
    return cvx_error("%s: metadata '%s' is %s, expected %d comma-separated %s in [%g, %g]", cvx_st_path(st), key,
                     v ? v : "missing", n, dout ? "numbers" : "integers", lo, hi);
}

/* the conditions' lists of a "condition" file; their latent frames must add up to T */
static int read_items(const cvx_safetensors *st, cvx_conditioning *out) {
    const char *nv = cvx_st_metadata(st, "condition_frame_index");
    int n = 1;
    for (const char *q = nv; q && *q; q++) n += *q == ',';
    if (!nv || n > CVX_MAX_CONDITIONS)
        return cvx_error("%s: metadata 'condition_frame_index' is %s, expected 1 to %d comma-separated frame indices",
                         cvx_st_path(st), nv ? nv : "missing", CVX_MAX_CONDITIONS);
    int fi[CVX_MAX_CONDITIONS], T[CVX_MAX_CONDITIONS], fr[CVX_MAX_CONDITIONS];
    double sv[CVX_MAX_CONDITIONS];
    if (meta_list(st, "condition_frame_index", n, 0, 1000000, fi, NULL) ||
        meta_list(st, "condition_latent_frames", n, 1, 1000000, T, NULL) ||
        meta_list(st, "condition_frames", n, 1, 1000000, fr, NULL) ||
        meta_list(st, "condition_strength", n, 0, 1, NULL, sv))
        return -1;
    int sum = 0;
    for (int k = 0; k < n; k++) {
        out->items[k] = (cvx_condition_item){.frame_index = fi[k], .T = T[k], .frames = fr[k], .strength = sv[k]};
        sum += T[k];
    }
    if (sum != out->T)
        return cvx_error("%s: metadata 'condition_latent_frames' adds up to %d, tensor 'latent_mean' has %d latent "
                         "frames", cvx_st_path(st), sum, out->T);
    out->n_items = n;
    return 0;
}

static int meta_int(const cvx_safetensors *st, const char *key, int lo, int *out) {
    const char *v = cvx_st_metadata(st, key);
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !v[0] || *end || x < lo || x > 1000000)
        return cvx_error("%s: metadata '%s' is %s, expected an integer >= %d", cvx_st_path(st), key, v ? v : "missing",
                         lo);
    *out = (int)x;
    return 0;
}

int cvx_conditioning_read(cvx_model *m, const char *path, cvx_conditioning *out) {
    memset(out, 0, sizeof *out);
    cvx_safetensors *st = cvx_st_open(path);
    if (!st) return -1;
    int rc = -1;
    const char *fmt = cvx_st_metadata(st, "format"), *mode = cvx_st_metadata(st, "mode");
    const cvx_tensor *tm = cvx_st_find(st, "latent_mean"), *ts = cvx_st_find(st, "latent_std");
    if (!fmt || strcmp(fmt, FILE_FORMAT)) {
        cvx_error("%s: metadata 'format' is %s, expected \"%s\"", path, fmt ? fmt : "missing", FILE_FORMAT);
        goto done;
    }
    if (!mode || (strcmp(mode, "i2v") && strcmp(mode, "v2v") && strcmp(mode, "condition"))) {
        cvx_error("%s: metadata 'mode' is %s, expected \"i2v\", \"v2v\" or \"condition\"", path,
                  mode ? mode : "missing");
        goto done;
    }
    out->mode = !strcmp(mode, "i2v") ? CVX_MODE_I2V : !strcmp(mode, "v2v") ? CVX_MODE_V2V : CVX_MODE_COND;
    if (meta_int(st, "frames", 1, &out->frames) || meta_int(st, "height", 1, &out->height) ||
        meta_int(st, "width", 1, &out->width))
        goto done;
    const cvx_tensor *t2[2] = {tm, ts};
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "latent_std" : "latent_mean";
        char got[128];
        if (!t2[k]) { cvx_error("%s: tensor '%s' is missing", path, name); goto done; }
        cvx_shape_str(t2[k]->ndim, t2[k]->shape, got, sizeof got);
        if (!cvx_dtype_is_float(t2[k]->dtype) || t2[k]->ndim != 5 || t2[k]->shape[0] != 1 ||
            memcmp(t2[k]->shape, tm->shape, sizeof tm->shape)) {
            cvx_error("%s: tensor '%s' is %s %s, expected float [1, C, T, h, w] like latent_mean", path, name,
                      cvx_dtype_name(t2[k]->dtype), got);
            goto done;
        }
    }
    out->C = (int)tm->shape[1], out->T = (int)tm->shape[2], out->h = (int)tm->shape[3], out->w = (int)tm->shape[4];
    if (m->has_vae_config && out->C != m->info.latent_channels) {
        cvx_error("%s: tensor 'latent_mean' has %d channels, the VAE in %s/vae has latent_channels %d (encoded with "
                  "another model?)", path, out->C, m->dir, m->info.latent_channels);
        goto done;
    }
    if (out->mode == CVX_MODE_COND && read_items(st, out)) goto done;
    if (cvx_check_model_mode(m, out->mode)) goto done;
    const cvx_tensor *ti = cvx_st_find(st, "image_embeds");
    if (ti) {
        char got[128];
        cvx_shape_str(ti->ndim, ti->shape, got, sizeof got);
        if (out->mode != CVX_MODE_I2V || !cvx_dtype_is_float(ti->dtype) || ti->ndim != 3 || ti->shape[0] != 1 ||
            ti->shape[1] < 1 || ti->shape[2] < 1) {
            cvx_error("%s: tensor 'image_embeds' is %s %s, expected float [1, L, D] in an i2v file", path,
                      cvx_dtype_name(ti->dtype), got);
            goto done;
        }
        out->image_L = (int)ti->shape[1], out->image_D = (int)ti->shape[2];
        out->image_embeds = cvx_tensor_f32_dup(ti);
        if (cvx_check_finite(out->image_embeds, (size_t)ti->numel, "image_embeds")) {
            cvx_error_prefix("%s", path);
            cvx_conditioning_free(out);
            goto done;
        }
    }
    out->mean = cvx_tensor_f32_dup(tm);
    out->std = cvx_tensor_f32_dup(ts);
    /* a NaN/Inf here would only show as diverged latents after a whole step: named here instead */
    const size_t n = (size_t)tm->numel;
    if (cvx_check_finite(out->mean, n, "latent_mean") || cvx_check_finite(out->std, n, "latent_std")) {
        cvx_error_prefix("%s", path);
        cvx_conditioning_free(out);
        goto done;
    }
    rc = 0;
done:
    cvx_st_close(st);
    return rc;
}

uint64_t cvx_conditioning_hash(const cvx_conditioning *c) {
    const size_t n = (size_t)c->C * c->T * c->h * c->w;
    uint64_t h = cvx_xxh64(c->mean, n * sizeof(float), (uint64_t)c->mode);
    h = cvx_xxh64(c->std, n * sizeof(float), h);
    if (c->image_embeds) h = cvx_xxh64(c->image_embeds, (size_t)c->image_L * c->image_D * sizeof(float), h);
    for (int k = 0; c->mode == CVX_MODE_COND && k < c->n_items; k++) {   /* field by field: no padding */
        const double f[4] = {c->items[k].frame_index, c->items[k].T, c->items[k].frames, c->items[k].strength};
        h = cvx_xxh64(f, sizeof f, h);
    }
    return h;
}

int cvx_genconfig_record_conditioning(const char *path, const cvx_conditioning *c, const char *source) {
    return cvx_genconfig_record_conditioning_set(NULL, path, c, source);
}
int cvx_genconfig_record_conditioning_set(cvx_outset *set, const char *path, const cvx_conditioning *c,
                                          const char *source) {
    json_object *upd = json_object_new_object();
    const cvx_mode mode = c ? c->mode : CVX_MODE_T2V;
    json_object_object_add(upd, "mode", json_object_new_string(cvx_mode_name(mode)));
    json_object_object_add(upd, "image", mode == CVX_MODE_I2V ? json_object_new_string(source) : NULL);
    json_object_object_add(upd, "video", mode == CVX_MODE_V2V ? json_object_new_string(source) : NULL);
    json_object_object_add(upd, "conditions", mode == CVX_MODE_COND ? json_object_new_string(source) : NULL);
    /* T2V: null, not left from an earlier I2V/V2V run */
    json_object_object_add(upd, "conditioning_frames", c ? json_object_new_int(c->frames) : NULL);
    if (c) {
        json_object_object_add(upd, "height", json_object_new_int(c->height));
        json_object_object_add(upd, "width", json_object_new_int(c->width));
    }
    int rc = cvx_genconfig_put(set, path, upd);
    json_object_put(upd);
    return rc;
}

void cvx_prepared_free(cvx_prepared *p) {
    free(p->init);
    free(p->image_latents);
    memset(p, 0, sizeof *p);
}

int cvx_conditioning_fits(const cvx_conditioning *c, int C, int T, int h, int w, const char *what, const char *hint) {
    if (c->C == C && c->T == T && c->h == h && c->w == w) return 0;
    return cvx_error("%s conditioning latents [%d, %d, %d, %d] do not fit the loop's [%d, %d, %d, %d]%s", what, c->C,
                     c->T, c->h, c->w, C, T, h, w, hint);
}

void cvx_sample_run_i2v(cvx_sample_run *run, float *cond, const cvx_conditioning *c) {
    run->cond = cond;
    run->loop.cond = cond;
    if (c->image_embeds) {
        run->image_tokens = cvx_alloc_f32((size_t)c->image_L * c->image_D);
        memcpy(run->image_tokens, c->image_embeds, sizeof(float) * c->image_L * c->image_D);
    }
    run->loop.image_tokens = run->image_tokens, run->loop.image_L = c->image_L;
}

const float *cvx_cond_more_find(const cvx_sample_params *p, const char *name, int negative) {
    for (int k = 0; p->cond_more && k < p->cond_more->n; k++)
        if (!strcmp(p->cond_more->t[k].name, name)) return negative ? p->cond_more->t[k].negative : p->cond_more->t[k].prompt;
    return NULL;
}

int cvx_check_latent_size(const cvx_model *m, int frames, int H, int W,
                          int (*shape)(const void *user, const cvx_loop_params *lp, cvx_latent_shape *sh),
                          const void *user, cvx_latent_shape *sh) {
    memset(sh, 0, sizeof *sh);
    if (!m->has_denoiser_config) return 0;
    cvx_loop_request req = {.frames = frames, .height = H, .width = W, .num_inference_steps = 1};
    const cvx_loop_params lp = {.req = &req, .vae_scale_spatial = m->info.vae_scale_spatial,
                                .vae_scale_temporal = m->info.vae_scale_temporal};
    return shape(user, &lp, sh);
}

void cvx_log_latents(const cvx_sample_params *p, const cvx_latent_shape *sh, const char *note) {
    cvx_info("video %d frames %dx%d -> latents [1, %d, %d, %d, %d]%s", p->frames, p->width, p->height, sh->channels,
             sh->frames - sh->pad_frames, sh->height, sh->width, note);
}

int cvx_teacache_setup(const cvx_sample_params *p, cvx_loop_params *lp, int published, const char *why, ...) {
    if (p->teacache_coefficients) {
        memcpy(lp->teacache_coefficients, p->teacache_coefficients, sizeof(double) * 5);
        return 0;
    }
    if (published || lp->cache_kind != CVX_CACHE_TEACACHE) return 0;
    char msg[400];
    va_list ap;
    va_start(ap, why);
    vsnprintf(msg, sizeof msg, why, ap);
    va_end(ap);
    return cvx_error("--cache teacache: %s; give --teacache_coefficients or use --cache fbcache or deepcache", msg);
}

void cvx_log_transformer(const char *name, int layers, int heads, int head_dim, const char *detail,
                         const cvx_scheduler *sched, const cvx_sample_params *p, const char *note) {
    if (!note) note = p->guidance_scale > 1 ? "" : " (no CFG: one transformer call per step)";
    cvx_info("%s transformer: %d layers, %d heads x %d%s; %s%s%d steps, guidance %g%s, seed %llu", name, layers, heads,
             head_dim, detail, sched ? sched->type->name : "", sched ? " scheduler, " : "", p->num_inference_steps,
             p->guidance_scale, note, (unsigned long long)p->seed);
}

/* dst [C, ΣT_k, hw] from the n blocks src[k] [C, T[k], hw], per channel in order */
static void frames_concat(float *dst, float *const *src, const int *T, int n, int C, size_t hw) {
    int Ttot = 0;
    for (int k = 0; k < n; k++) Ttot += T[k];
    for (int c = 0; c < C; c++)
        for (int k = 0, t0 = 0; k < n; t0 += T[k], k++)
            memcpy(dst + ((size_t)c * Ttot + t0) * hw, src[k] + (size_t)c * T[k] * hw,
                   (size_t)T[k] * hw * sizeof(float));
}

/* One condition: the image, or the video trimmed (at most num_frames − frame_index frames, then
 * k·vae_scale_temporal + 1), resized to W×H, [-1, 1], encoded -> mean, std [C, T, h, w]. */
static int encode_condition(const cvx_model *m, const cvx_condition_spec *c, const cvx_conditions_vae *vae,
                            int num_frames, int H, int W, float **mean, float **std, cvx_condition_item *item) {
    const int kt = m->info.vae_scale_temporal;
    cvx_rgb_frames rgb;
    if (cvx_video_load(c->path, 0, &rgb)) return -1;
    int n = rgb.frames, rc = -1;
    float *px = NULL;
    if (n > 1) {   /* a video: LTXConditionPipeline.trim_conditioning_sequence */
        if (num_frames - c->frame_index < 1) {
            cvx_error("--condition %s:%d: frame %d is past the video's %d frames", c->path, c->frame_index,
                      c->frame_index, num_frames);
            goto done;
        }
        n = n < num_frames - c->frame_index ? n : num_frames - c->frame_index;
        n = (n - 1) / kt * kt + 1;
    }
    if (rgb.width != W || rgb.height != H)
        cvx_info("%s: %dx%d resized to %dx%d (LANCZOS, as upstream)", c->path, rgb.width, rgb.height, W, H);
    px = cvx_alloc_f32((size_t)3 * n * H * W);
    cvx_preprocess_frames(rgb.rgb, n, rgb.width, rgb.height, W, H, px);
    cvx_info("encoding %s: %d frame%s %dx%d with %s (condition at frame %d, strength %g)", c->path, n,
             n == 1 ? "" : "s", W, H, vae->name, c->frame_index, c->strength);
    if (vae->encode(vae->user, px, n, H, W, mean, std)) goto done;
    *item = (cvx_condition_item){.frame_index = c->frame_index, .T = (n - 1) / kt + 1, .frames = n,
                                 .strength = c->strength};
    rc = 0;
done:
    free(px);
    cvx_rgb_frames_free(&rgb);
    return rc;
}

int cvx_conditions_encode(const cvx_model *m, const cvx_conditioning_params *p, const cvx_conditions_vae *vae,
                          int frames, int H, int W, int C, int h, int w, cvx_conditioning *out) {
    const int n = p->n_conditions;
    float *mean[CVX_MAX_CONDITIONS] = {0}, *std[CVX_MAX_CONDITIONS] = {0};
    int rc = 0, T = 0, Tk[CVX_MAX_CONDITIONS] = {0};
    for (int k = 0; k < n && !rc; k++) {
        rc = encode_condition(m, &p->conditions[k], vae, frames, H, W, &mean[k], &std[k], &out->items[k]);
        T += rc ? 0 : (Tk[k] = out->items[k].T);
    }
    if (!rc) {   /* [C, ΣT, h, w]: per channel, the conditions' frames in order */
        const size_t hw = (size_t)h * w;
        out->mean = cvx_alloc_f32((size_t)C * T * hw), out->std = cvx_alloc_f32((size_t)C * T * hw);
        frames_concat(out->mean, mean, Tk, n, C, hw);
        frames_concat(out->std, std, Tk, n, C, hw);
        out->mode = CVX_MODE_COND, out->n_items = n;
        out->C = C, out->T = T, out->h = h, out->w = w;
        out->frames = frames, out->height = H, out->width = W;
    }
    for (int k = 0; k < n; k++) free(mean[k]), free(std[k]);
    if (rc) cvx_conditioning_free(out);
    return rc;
}
