/* CLIPImageProcessor (transformers 4.46, slow/PIL path); see clip_image_processor.h. */
#include "clip_image_processor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fileio.h"

#define MAX_SIDE (1 << 16)

void clip_image_processor_default(clip_image_processor *p) {
    static const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};   /* OPENAI_CLIP_MEAN */
    static const float std[3] = {0.26862954f, 0.26130258f, 0.27577711f};   /* OPENAI_CLIP_STD */
    memset(p, 0, sizeof *p);
    p->do_resize = p->do_center_crop = p->do_rescale = p->do_normalize = 1;
    p->shortest_edge = 224;
    p->crop_h = p->crop_w = 224;
    p->resample = CVX_PIL_BICUBIC;
    p->rescale_factor = 1.0 / 255;
    memcpy(p->mean, mean, sizeof mean);
    memcpy(p->std, std, sizeof std);
}

/* A side length in 1 .. MAX_SIDE from a JSON value. */
static int side(const char *path, const char *key, json_object *v, int *out) {
    if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 1 ||
        json_object_get_int64(v) > MAX_SIDE)
        return cvx_error("%s: key '%s' must be an integer in [1, %d], got %.80s", path, key, MAX_SIDE,
                         json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    *out = (int)json_object_get_int64(v);
    return 0;
}

static json_object *member(json_object *o, const char *key) {
    json_object *v = NULL;
    if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &v)) return NULL;
    return json_object_is_type(v, json_type_null) ? NULL : v;
}

/* "size": an int (shortest edge, as get_size_dict(default_to_square=False) reads it),
 * {"shortest_edge": n} or {"height": h, "width": w}. */
static int parse_size(clip_image_processor *p, const char *path, json_object *v) {
    if (json_object_is_type(v, json_type_int)) return side(path, "size", v, &p->shortest_edge);
    json_object *se = member(v, "shortest_edge"), *h = member(v, "height"), *w = member(v, "width");
    if (se) return side(path, "size.shortest_edge", se, &p->shortest_edge);
    if (h && w) {
        p->shortest_edge = 0;
        return side(path, "size.height", h, &p->size_h) || side(path, "size.width", w, &p->size_w) ? -1 : 0;
    }
    return cvx_error("%s: key 'size' must be an integer, {\"shortest_edge\": n} or {\"height\": h, \"width\": w}, "
                     "got %.80s", path, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
}

/* "crop_size": an int (square) or {"height": h, "width": w}. */
static int parse_crop(clip_image_processor *p, const char *path, json_object *v) {
    if (json_object_is_type(v, json_type_int)) {
        if (side(path, "crop_size", v, &p->crop_h)) return -1;
        p->crop_w = p->crop_h;
        return 0;
    }
    json_object *h = member(v, "height"), *w = member(v, "width");
    if (h && w) return side(path, "crop_size.height", h, &p->crop_h) || side(path, "crop_size.width", w, &p->crop_w) ? -1 : 0;
    return cvx_error("%s: key 'crop_size' must be an integer or {\"height\": h, \"width\": w}, got %.80s", path,
                     json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
}

/* "image_mean" / "image_std": one number (every channel) or a list of 3. */
static int parse_channels(const char *path, const char *key, json_object *v, float out[3]) {
    if (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)) {
        out[0] = out[1] = out[2] = (float)json_object_get_double(v);
        return 0;
    }
    if (json_object_is_type(v, json_type_array) && json_object_array_length(v) == 3) {
        for (int i = 0; i < 3; i++) {
            json_object *e = json_object_array_get_idx(v, (size_t)i);
            if (!json_object_is_type(e, json_type_double) && !json_object_is_type(e, json_type_int)) goto bad;
            out[i] = (float)json_object_get_double(e);   /* np.array(mean, dtype=float32) */
        }
        return 0;
    }
bad:
    return cvx_error("%s: key '%s' must be a number or a list of 3 numbers (RGB), got %.80s", path, key,
                     json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
}

int clip_image_processor_load(clip_image_processor *p, const char *path) {
    char file[4096];
    if (cvx_is_dir(path)) {
        if (cvx_path_join(file, sizeof file, path, "preprocessor_config.json")) return cvx_error("%s: path too long", path);
    } else if (snprintf(file, sizeof file, "%s", path) >= (int)sizeof file) {
        return cvx_error("%s: path too long", path);
    }
    clip_image_processor_default(p);
    cvx_config c;
    if (cvx_config_load(&c, file)) return -1;
    int rc = -1;
    int64_t resample;
    const char *type;
    if (cvx_cfg_str_or(&c, "image_processor_type", "CLIPImageProcessor", &type)) goto done;
    const int siglip = !strcmp(type, "SiglipImageProcessor");
    if (!siglip && strcmp(type, "CLIPImageProcessor") != 0) {
        cvx_error("%s: key 'image_processor_type' is \"%s\"; only \"CLIPImageProcessor\" and \"SiglipImageProcessor\" are "
                  "implemented", file, type);
        goto done;
    }
    if (siglip) {   /* SiglipImageProcessor: resize to 224 × 224, no crop, mean = std = 0.5 */
        p->do_center_crop = 0;
        p->shortest_edge = 0;
        p->size_h = p->size_w = 224;
        for (int i = 0; i < 3; i++) p->mean[i] = p->std[i] = 0.5f;
    }
    if (cvx_cfg_bool_or(&c, "do_resize", 1, &p->do_resize) ||
        (!siglip && cvx_cfg_bool_or(&c, "do_center_crop", 1, &p->do_center_crop)) ||
        cvx_cfg_bool_or(&c, "do_rescale", 1, &p->do_rescale) || cvx_cfg_bool_or(&c, "do_normalize", 1, &p->do_normalize) ||
        cvx_cfg_num_or(&c, "rescale_factor", 1.0 / 255, &p->rescale_factor) ||
        cvx_cfg_int_or(&c, "resample", CVX_PIL_BICUBIC, &resample))
        goto done;
    if (!cvx_pil_filter_valid((int)resample)) {
        cvx_error("%s: key 'resample' is %lld; supported: 1 (lanczos), 2 (bilinear), 3 (bicubic), 4 (box), 5 (hamming)",
                  file, (long long)resample);
        goto done;
    }
    p->resample = (cvx_pil_filter)resample;
    json_object *v;
    if ((v = member(c.root, "size")) && parse_size(p, file, v)) goto done;
    if (siglip && p->shortest_edge) {
        cvx_error("%s: SiglipImageProcessor's key 'size' must be {\"height\": h, \"width\": w}", file);
        goto done;
    }
    if ((v = member(c.root, "crop_size")) && parse_crop(p, file, v)) goto done;
    if ((v = member(c.root, "image_mean")) && parse_channels(file, "image_mean", v, p->mean)) goto done;
    if ((v = member(c.root, "image_std")) && parse_channels(file, "image_std", v, p->std)) goto done;
    for (int i = 0; i < 3; i++)
        if (!(p->std[i] != 0.0f)) {
            cvx_error("%s: key 'image_std' has a zero (or NaN) entry", file);
            goto done;
        }
    rc = 0;
done:
    cvx_config_free(&c);
    return rc;
}

void clip_image_resize_size(const clip_image_processor *p, int w, int h, int *out_w, int *out_h) {
    if (!p->do_resize) {
        *out_w = w, *out_h = h;
    } else if (p->shortest_edge == 0) {
        *out_w = p->size_w, *out_h = p->size_h;
    } else {
        /* short, long = (w, h) if w <= h else (h, w); new_long = int(s * long / short) */
        const int s = p->shortest_edge, sh = w <= h ? w : h, lg = w <= h ? h : w;
        const int nl = (int)((double)s * lg / sh);
        *out_w = w <= h ? s : nl;
        *out_h = w <= h ? nl : s;
    }
}

void clip_image_output_size(const clip_image_processor *p, int w, int h, int *out_w, int *out_h) {
    if (p->do_center_crop) *out_w = p->crop_w, *out_h = p->crop_h;
    else clip_image_resize_size(p, w, h, out_w, out_h);
}

static int floor_div2(int a) { return a >= 0 ? a / 2 : -((-a + 1) / 2); }

void clip_center_crop_rgb8(const uint8_t *src, int w, int h, uint8_t *dst, int cw, int ch) {
    const int top = floor_div2(h - ch), left = floor_div2(w - cw);
    for (int y = 0; y < ch; y++)
        for (int x = 0; x < cw; x++) {
            const int sy = y + top, sx = x + left;
            uint8_t *o = dst + ((size_t)y * cw + x) * 3;
            if (sy >= 0 && sy < h && sx >= 0 && sx < w) memcpy(o, src + ((size_t)sy * w + sx) * 3, 3);
            else o[0] = o[1] = o[2] = 0;   /* np.zeros_like padding, before rescaling */
        }
}

void clip_image_preprocess(const clip_image_processor *p, const uint8_t *rgb, int w, int h, float *out) {
    int rw, rh, ow, oh;
    clip_image_resize_size(p, w, h, &rw, &rh);
    clip_image_output_size(p, w, h, &ow, &oh);
    uint8_t *resized = cvx_malloc((size_t)rw * rh * 3), *img = cvx_malloc((size_t)ow * oh * 3);
    cvx_resize_rgb8(rgb, w, h, resized, rw, rh, p->resample);   /* same size: a copy, as PIL */
    if (p->do_center_crop) clip_center_crop_rgb8(resized, rw, rh, img, ow, oh);
    else memcpy(img, resized, (size_t)ow * oh * 3);
    const size_t n = (size_t)ow * oh;
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < n; i++) {
            const uint8_t u = img[i * 3 + c];
            /* rescale: image.astype(float64) * scale, then .astype(float32) */
            float x = p->do_rescale ? (float)((double)u * p->rescale_factor) : (float)u;
            if (p->do_normalize) x = (x - p->mean[c]) / p->std[c];   /* float32 numpy ops */
            out[(size_t)c * n + i] = x;
        }
    free(resized), free(img);
}
