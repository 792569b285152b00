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
#include "stage2/cogvideox_family.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "image.h"
#include "ops.h"
#include "resize.h"
#include "validate.h"
#include "rng_lowp.h"

/* An untiled encode estimated above this is tiled (the decoder's budget, pipeline/decode.c). */
#define ENCODE_TILING_BUDGET (6.0 * 1024 * 1024 * 1024)
#define DEFAULT_STRENGTH 0.8   /* CogVideoXVideoToVideoPipeline.__call__'s default */
#define FILE_FORMAT "cogvideox.c stage1 conditioning v1"

const char *cvx_mode_name(cvx_mode mode) { return mode == CVX_MODE_I2V ? "i2v" : mode == CVX_MODE_V2V ? "v2v" : "t2v"; }

void cvx_conditioning_free(cvx_conditioning *c) {
    free(c->mean);
    free(c->std);
    memset(c, 0, sizeof *c);
}

int cvx_model_load_vae_encoder(cvx_model *m) {
    if (m->enc_loaded) return 0;
    char dir[4200];
    if (cvx_model_component(m->dir, "vae", "config.json", dir, sizeof dir)) return -1;
    if (vae_encoder_load(&m->enc, dir, m->ctx)) return -1;
    m->enc_loaded = 1;
    return 0;
}

int cvx_check_model_mode(cvx_model *m, cvx_mode mode) {
    if (!m->has_transformer) return 0;   /* reported by the call that needs the transformer */
    const cogvideox_config *c = &m->tcfg;
    const int i2v_model = c->in_channels == 2 * c->out_channels;
    if (mode == CVX_MODE_I2V && !i2v_model)
        return cvx_error("--image: %s/transformer is a text-to-video model (in_channels %d = out_channels): "
                         "image-to-video needs an I2V checkpoint (CogVideoX-5b-I2V, CogVideoX1.5-5B-I2V)",
                         m->dir, c->in_channels);
    if (mode == CVX_MODE_V2V && i2v_model)
        return cvx_error("--video: %s/transformer is an image-to-video model (in_channels %d = 2 × %d): "
                         "video-to-video runs on text-to-video checkpoints (CogVideoX-2b, -5b, 1.5-5B)",
                         m->dir, c->in_channels, c->out_channels);
    if (mode == CVX_MODE_T2V && i2v_model)
        return cvx_error("%s/transformer is an image-to-video model (in_channels %d = 2 × %d): give stage 1 an "
                         "--image", m->dir, c->in_channels, c->out_channels);
    return 0;
}

/* The latent shape the transformer will run on, checking the size (and for V2V the frame
 * count) against the model as stage 2 will: the errors come before anything is encoded. */
static int check_size(cvx_model *m, cvx_mode mode, int frames, int height, int width) {
    if (!m->has_transformer) return 0;
    cvx_loop_params sp = {.frames = frames, .height = height, .width = width, .num_inference_steps = 1,
                                  .vae_scale_spatial = m->info.vae_scale_spatial,
                                  .vae_scale_temporal = m->info.vae_scale_temporal};
    cvx_latent_shape sh;
    if (cogvideox_latent_shape_for(&m->tcfg, &sp, mode == CVX_MODE_I2V, &sh)) return -1;
    if (mode == CVX_MODE_V2V && sh.pad_frames)   /* upstream raises instead of padding */
        return cvx_error("--video: %d frames make %d latent frames, not a multiple of patch_size_t %d (CogVideoX1.5 "
                         "video-to-video): use %d or %d frames", frames, sh.frames - sh.pad_frames,
                         m->tcfg.patch_size_t, frames - m->info.vae_scale_temporal,
                         frames + m->info.vae_scale_temporal);
    return 0;
}

int cvx_encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                            cvx_conditioning *out) {
    memset(out, 0, sizeof *out);
    if (!p->image == !p->video) return cvx_error("give exactly one of an image (I2V) and a video (V2V)");
    const cvx_mode mode = p->image ? CVX_MODE_I2V : CVX_MODE_V2V;
    const int H = p->height ? p->height : m->info.height, W = p->width ? p->width : m->info.width;
    if (H < 1 || W < 1) return cvx_error("no --height/--width given and the model has no default size");
    if (cvx_check_model_mode(m, mode)) return -1;
    if (mode == CVX_MODE_I2V && check_size(m, mode, m->info.frames ? m->info.frames : 1, H, W)) return -1;

    /* decode: RGB8 frames */
    cvx_rgb_frames rgb;
    if (mode == CVX_MODE_I2V ? cvx_image_load(p->image, &rgb) : cvx_video_load(p->video, p->max_frames, &rgb))
        return -1;
    const char *src = p->image ? p->image : p->video;
    int rc = -1;
    float *px = NULL, *moments = NULL;
    if (rgb.frames < 1) {
        cvx_error("%s: no frames", src);
        goto done;
    }
    if (mode == CVX_MODE_V2V && check_size(m, mode, rgb.frames, H, W)) {
        cvx_error_prefix("%s (%d frames)", src, rgb.frames);
        goto done;
    }
    const int F = rgb.frames;
    if (rgb.width != W || rgb.height != H)
        cvx_info("%s: %dx%d resized to %dx%d (LANCZOS, as upstream)", src, rgb.width, rgb.height, W, H);
    px = cvx_alloc_f32((size_t)3 * F * H * W);   // [3, F, H, W] in [-1, 1]
    cvx_preprocess_frames(rgb.rgb, F, rgb.width, rgb.height, W, H, px);

    /* encode: frame batches, tiles when an untiled encode would be large */
    if (cvx_model_load_vae_encoder(m)) goto done;
    const vae_encoder *e = &m->enc;
    const int lc = e->latent_channels, tsh = e->sample_height / 2, tsw = e->sample_width / 2;
    const double peak = vae_encode_estimate_peak_bytes(e, F, H, W);
    const int tiled = vae_encode_tiling_applies(e, H, W, tsh, tsw) && peak > ENCODE_TILING_BUDGET;
    if (tiled && vae_encode_tiling_check(e, tsh, tsw)) goto done;
    cvx_info("encoding %s: %d frame%s %dx%d with %s/vae%s", src, F, F == 1 ? "" : "s", W, H, m->dir,
             tiled ? " in tiles" : "");
    int T, h, w;
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae encode", vae_encode_steps(e, F, H, W, tiled, tsh, tsw), progress, user);
    if (tiled) {
        moments = vae_encode_tiled(e, px, F, H, W, tsh, tsw, &T, &h, &w, &bar);   // [2·lc, T, h, w]
    } else {
        T = vae_encoded_frames(e, F), h = vae_encoded_size(e, H), w = vae_encoded_size(e, W);
        moments = cvx_alloc_f32((size_t)2 * lc * T * h * w);                    // [2·lc, T, h, w]
        vae_encode_batched(e, px, F, H, W, moments, &bar);
    }
    cvx_progress_finish(&bar);
    const size_t S = (size_t)T * h * w;
    out->mode = mode;
    out->C = lc, out->T = T, out->h = h, out->w = w;
    out->frames = F, out->height = H, out->width = W;
    out->mean = cvx_alloc_f32((size_t)lc * S);   // [lc, T, h, w]
    out->std = cvx_alloc_f32((size_t)lc * S);
    vae_latent_dist(moments, lc, S, out->mean, NULL, out->std);
    rc = 0;
done:
    free(px);
    free(moments);
    cvx_rgb_frames_free(&rgb);
    return rc;
}

/* ---- stage 2: prepare_latents ---- */

int cvx_sample_conditioning_sizes(const cvx_conditioning *c, cvx_sample_params *r) {
    if (!r->height) r->height = c->height;
    if (!r->width) r->width = c->width;
    if (r->height != c->height || r->width != c->width)
        return cvx_error("--height %d --width %d: stage 1 encoded the %s at %dx%d (pass the size to stage 1, or none "
                         "to stage 2)", r->height, r->width, c->mode == CVX_MODE_I2V ? "image" : "video", c->width,
                         c->height);
    if (c->mode == CVX_MODE_V2V) {
        if (!r->frames) r->frames = c->frames;
        if (r->frames != c->frames)
            return cvx_error("--frames %d: video-to-video makes as many frames as the input video has (%d)", r->frames,
                             c->frames);
        if (!(r->strength > 0)) r->strength = DEFAULT_STRENGTH;
    }
    return 0;
}

int cvx_prepare_conditioned(cvx_model *m, const cvx_conditioning *c, cvx_scheduler *sched, double strength,
                            cvx_loop_params *sp, const cvx_latent_shape *sh, cvx_prepared *out) {
    memset(out, 0, sizeof *out);
    const size_t hw = (size_t)sh->height * sh->width, chw = (size_t)sh->channels * hw;
    if (c->C != sh->channels || c->h != sh->height || c->w != sh->width)
        return cvx_error("conditioning latents [%d, %d, %d, %d] do not fit the latent grid [%d, %d, %d] "
                         "(channels, height, width)", c->C, c->T, c->h, c->w, sh->channels, sh->height, sh->width);
    if (c->mode == CVX_MODE_I2V && c->T != 1)
        return cvx_error("image-to-video conditioning has %d latent frames, expected 1", c->T);
    if (c->mode == CVX_MODE_V2V && (c->T != sh->frames || sh->pad_frames))
        return cvx_error("video-to-video conditioning has %d latent frames, the loop %d", c->T, sh->frames);
    int t_start = 0;
    if (c->mode == CVX_MODE_V2V) {
        if (cvx_strength_t_start(sp->num_inference_steps, strength, &t_start) ||
            cvx_scheduler_set_timesteps(sched, sp->num_inference_steps))
            return -1;
    }
    /* latent_dist.sample(generator) in the encoder's [C, T, h, w] order: the generator's first
     * draws. A pipeline loaded in bf16/fp16 draws this randn and the noise below in its dtype
     * (the VAE's parameters.dtype, randn_tensor(dtype=prompt_embeds.dtype)): --noise_dtype, as T2V */
    const cvx_dtype nd = (cvx_dtype)sp->noise_dtype;
    const size_t nc = (size_t)c->C * c->T * hw;
    float *sample = cvx_alloc_f32(nc);
    cvx_generator_seed(&out->gen, sp->seed);
    if (vae_latent_sample_as(c->mean, c->std, nc, &out->gen, nd, sample)) {
        free(sample);
        return -1;
    }
    const double sf = m->info.vae_scaling_factor;
    out->init = cvx_alloc_f32(sh->numel);   // [F, C, h, w]
    if (c->mode == CVX_MODE_I2V) {
        /* vae_scaling_factor_image · x, or 1 / it · x (invert_scale_latents, 1.5): a python
         * float times a float32 tensor, the scalar rounded to float32 */
        const float k = (float)(m->vcfg.invert_scale_latents ? 1.0 / sf : sf);
        out->image_latents = cvx_calloc(sh->numel, sizeof(float));   // [F, C, h, w]: frame 0, then zeros
        for (size_t i = 0; i < chw; i++) out->image_latents[i] = k * sample[i];
        cvx_randn_as(&out->gen, nd, out->init, sh->numel);   /* the noise, × init_noise_sigma 1.0 */
        sp->cond = out->image_latents;
    } else {
        const float k = (float)sf;   /* V2V multiplies whatever invert_scale_latents says (upstream) */
        float *x0 = cvx_alloc_f32(sh->numel), *noise = cvx_alloc_f32(sh->numel);
        for (size_t i = 0; i < nc; i++) sample[i] *= k;
        cvx_permute_fc_to_cf(sample, c->C, c->T, hw, 0, x0);   // [C, T, hw] -> [T, C, hw]
        cvx_randn_as(&out->gen, nd, noise, sh->numel);   /* nd was accepted by the sample draw above */
        sched->type->add_noise(sched, t_start, x0, noise, sh->numel, out->init);
        cvx_info("video-to-video: strength %g runs %d of %d steps from t=%g", strength,
                 sp->num_inference_steps - t_start, sp->num_inference_steps, sched->timesteps[t_start]);
        free(x0);
        free(noise);
    }
    free(sample);
    sp->init_latents = out->init;
    sp->init_generator = &out->gen;
    sp->t_start = t_start;
    return 0;
}

void cvx_prepared_free(cvx_prepared *p) {
    free(p->init);
    free(p->image_latents);
    memset(p, 0, sizeof *p);
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
             cvx_stw_metadata(w, "model_id", model_id) ||
             (set ? cvx_outset_stw(set, w, path) : cvx_stw_write(w, path));
    cvx_stw_free(w);
    return rc ? -1 : 0;
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
    if (!mode || (strcmp(mode, "i2v") && strcmp(mode, "v2v"))) {
        cvx_error("%s: metadata 'mode' is %s, expected \"i2v\" or \"v2v\"", path, mode ? mode : "missing");
        goto done;
    }
    out->mode = !strcmp(mode, "i2v") ? CVX_MODE_I2V : CVX_MODE_V2V;
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
    if (m->has_vae && out->C != m->vcfg.latent_channels) {
        cvx_error("%s: tensor 'latent_mean' has %d channels, the VAE in %s/vae has latent_channels %d (encoded with "
                  "another model?)", path, out->C, m->dir, m->vcfg.latent_channels);
        goto done;
    }
    if (out->mode == CVX_MODE_I2V && out->T != 1) {
        cvx_error("%s: image-to-video conditioning with %d latent frames, expected 1", path, out->T);
        goto done;
    }
    if (cvx_check_model_mode(m, out->mode)) goto done;
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
    return cvx_xxh64(c->std, n * sizeof(float), h);
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
