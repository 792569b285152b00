/* The image side of Wan 2.1 image-to-video in stage 1 (golden_wan README section 8):
 * CLIPImageProcessor (PIL bicubic resize, centre crop, rescale, normalise) -> clip_pixel_values,
 * CLIPVisionModel hidden_states[-2] -> image_embeds, VideoProcessor.preprocess -> image_preprocessed.
 *
 * Golden data: tests/data/golden_wan/e2e_i2v_clip = the e2e_i2v case's image, image encoder,
 * image processor and the four image tensors of its expected.safetensors. Pillow references
 * for other sizes and every filter: tests/data/stage1/clip_resize.safetensors; the encoder as a
 * sharded bf16 checkpoint: tests/data/stage1/clip_bf16_*. All made by scripts/make_clip_fixtures.py. */
#include "golden_harness.h"
#include "gemm.h"
#include "image.h"
#include "resize.h"
#include "stage1/clip_image_processor.h"
#include "stage1/clip_vision.h"

#include <math.h>

#define CASE "tests/data/golden_wan/e2e_i2v_clip"
#define FIX "tests/data/stage1"

/* ---- the processor ---- */

/* image.png decodes to the pipeline's image_uint8, and the processor gives clip_pixel_values
 * bit for bit (the 64x48 image is bicubic-upscaled to 298x224 in 8 bits, cropped at x = 37). */
static void test_clip_pixel_values(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, CASE);
    cvx_rgb_frames im;
    ASSERT_OK(cvx_image_load(gh_path(&c, "image.png"), &im));
    const cvx_tensor *u8 = gh_tensor(&c, "image_uint8");
    assert_int_equal(u8->dtype, CVX_U8);
    assert_int_equal(u8->numel, (int64_t)im.width * im.height * 3);
    assert_memory_equal(im.rgb, u8->data, (size_t)u8->numel);

    clip_image_processor p;
    ASSERT_OK(clip_image_processor_load(&p, gh_path(&c, "model/image_processor")));
    assert_int_equal(p.resample, CVX_PIL_BICUBIC);
    int rw, rh, ow, oh;
    clip_image_resize_size(&p, im.width, im.height, &rw, &rh);
    assert_int_equal(rw, 298);   /* int(224 * 64 / 48) */
    assert_int_equal(rh, 224);
    clip_image_output_size(&p, im.width, im.height, &ow, &oh);
    const cvx_tensor *t = gh_tensor(&c, "clip_pixel_values");
    assert_int_equal(t->ndim, 4);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->shape[2], oh);
    assert_int_equal(t->shape[3], ow);
    const size_t n = (size_t)3 * oh * ow;
    float *got = cvx_alloc_f32(n), *want = cvx_tensor_f32_dup(t);
    clip_image_preprocess(&p, im.rgb, im.width, im.height, got);
    gh_check_max_abs(&c, "clip_pixel_values", got, want, n, 1e-6);
    gh_check_exact_f32(&c, "clip_pixel_values", got, want, n);
    free(got), free(want);
    cvx_rgb_frames_free(&im);
    gh_close(&c);
}

/* VideoProcessor.preprocess of the image at the video size (already that size: no resize,
 * u8/255·2 − 1), bit for bit. */
static void test_image_preprocessed(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, CASE);
    cvx_rgb_frames im;
    ASSERT_OK(cvx_image_load(gh_path(&c, "image.png"), &im));
    const cvx_tensor *t = gh_tensor(&c, "image_preprocessed");
    const int H = (int)t->shape[2], W = (int)t->shape[3];
    assert_int_equal(H, gh_int(gh_json(&c, "call.height")));
    assert_int_equal(W, gh_int(gh_json(&c, "call.width")));
    float *got = cvx_alloc_f32((size_t)3 * H * W);
    cvx_preprocess_image(im.rgb, im.width, im.height, W, H, got);
    gh_expect_exact(&c, "image_preprocessed", got, (size_t)3 * H * W);
    free(got);
    cvx_rgb_frames_free(&im);
    gh_close(&c);
}

/* Shortest-edge sizes (Python's int(s * long / short)), square / explicit sizes, centre crop
 * offsets with floor division and zero padding. */
static void test_processor_geometry(void **state) {
    (void)state;
    clip_image_processor p;
    clip_image_processor_default(&p);
    int w, h;
    clip_image_resize_size(&p, 832, 480, &w, &h);
    assert_int_equal(w, 388), assert_int_equal(h, 224);   /* int(224 * 832 / 480) = int(388.26..) */
    clip_image_resize_size(&p, 480, 832, &w, &h);
    assert_int_equal(w, 224), assert_int_equal(h, 388);
    clip_image_resize_size(&p, 101, 77, &w, &h);
    assert_int_equal(w, 293), assert_int_equal(h, 224);   /* 224·101/77 = 293.8 */
    clip_image_resize_size(&p, 224, 224, &w, &h);
    assert_int_equal(w, 224), assert_int_equal(h, 224);
    clip_image_output_size(&p, 832, 480, &w, &h);
    assert_int_equal(w, 224), assert_int_equal(h, 224);
    p.shortest_edge = 0, p.size_w = 30, p.size_h = 20;
    clip_image_resize_size(&p, 832, 480, &w, &h);
    assert_int_equal(w, 30), assert_int_equal(h, 20);

    /* crop 3x2 of a 6x5 image: top = (5-2)//2 = 1, left = (6-3)//2 = 1 */
    uint8_t src[5 * 6 * 3], dst[4 * 5 * 3];
    for (int i = 0; i < 5 * 6 * 3; i++) src[i] = (uint8_t)(i + 1);
    clip_center_crop_rgb8(src, 6, 5, dst, 3, 2);
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 3; x++) assert_memory_equal(dst + (y * 3 + x) * 3, src + ((y + 1) * 6 + x + 1) * 3, 3);
    /* crop 5x4 of a 2x3 image: top = (3-4)//2 = -1, left = (2-5)//2 = -2 (zero padding around) */
    clip_center_crop_rgb8(src, 2, 3, dst, 5, 4);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 5; x++) {
            const int sy = y - 1, sx = x - 2;
            if (sy >= 0 && sy < 3 && sx >= 0 && sx < 2) assert_memory_equal(dst + (y * 5 + x) * 3, src + (sy * 2 + sx) * 3, 3);
            else assert_true(dst[(y * 5 + x) * 3] == 0 && dst[(y * 5 + x) * 3 + 1] == 0 && dst[(y * 5 + x) * 3 + 2] == 0);
        }
}

/* Rescale in float64 then float32, normalise in float32: a constant image gives exactly
 * ((float)(v·(1/255)) − mean) / std per channel. */
static void test_processor_values(void **state) {
    (void)state;
    clip_image_processor p;
    clip_image_processor_default(&p);
    p.crop_w = p.crop_h = 4, p.shortest_edge = 4;
    uint8_t img[6 * 4 * 3];
    for (int i = 0; i < 6 * 4; i++) img[i * 3] = 0, img[i * 3 + 1] = 128, img[i * 3 + 2] = 255;
    float out[3 * 16];
    clip_image_preprocess(&p, img, 6, 4, out);
    const uint8_t v[3] = {0, 128, 255};
    for (int ch = 0; ch < 3; ch++) {
        const float x = (float)((double)v[ch] * (1.0 / 255)), want = (x - p.mean[ch]) / p.std[ch];
        for (int i = 0; i < 16; i++) assert_true(out[ch * 16 + i] == want);
    }
}

/* A config error names the file and the key. */
static void expect_processor_error(const char *json, const char *needle) {
    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    tu_write(path, json, strlen(json));
    clip_image_processor p;
    assert_int_equal(clip_image_processor_load(&p, dir), -1);
    if (!strstr(cvx_last_error(), needle) || !strstr(cvx_last_error(), "preprocessor_config.json"))
        fail_msg("error '%s' does not mention '%s'", cvx_last_error(), needle);
    tu_rmrf(dir);
}

static void test_processor_config(void **state) {
    (void)state;
    expect_processor_error("{\"resample\": 0}", "resample");
    expect_processor_error("{\"size\": {\"longest_edge\": 5}}", "size");
    expect_processor_error("{\"crop_size\": 0}", "crop_size");
    expect_processor_error("{\"image_mean\": [0.5, 0.5]}", "image_mean");
    expect_processor_error("{\"image_std\": [0.5, 0, 0.5]}", "image_std");
    expect_processor_error("{\"image_processor_type\": \"BlipImageProcessor\"}", "image_processor_type");
    /* the forms get_size_dict accepts: ints and dicts; the rest default */
    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    const char *ok = "{\"size\": 336, \"crop_size\": {\"height\": 300, \"width\": 320}, \"resample\": 1, \"image_mean\": 0.5}";
    tu_write(path, ok, strlen(ok));
    clip_image_processor p;
    ASSERT_OK(clip_image_processor_load(&p, path));
    assert_int_equal(p.shortest_edge, 336);
    assert_int_equal(p.crop_h, 300), assert_int_equal(p.crop_w, 320);
    assert_int_equal(p.resample, CVX_PIL_LANCZOS);
    assert_true(p.mean[0] == 0.5f && p.mean[2] == 0.5f && p.std[0] == 0.26862954f && p.do_rescale);
    tu_rmrf(dir);
}

/* ---- Pillow references (clip_resize.safetensors) ---- */

/* Resize `src` (an [h, w, 3] U8 tensor) to the size of `want` with filter f: bit for bit. */
static void check_pil_resize(const cvx_safetensors *st, const char *src_name, const char *want_name, cvx_pil_filter f) {
    const cvx_tensor *src = cvx_st_find(st, src_name), *want = cvx_st_find(st, want_name);
    if (!src || !want) fail_msg("clip_resize.safetensors: no '%s' / '%s'", src_name, want_name);
    assert_true(src->dtype == CVX_U8 && want->dtype == CVX_U8 && src->ndim == 3 && want->ndim == 3);
    const int sw = (int)src->shape[1], sh = (int)src->shape[0], dw = (int)want->shape[1], dh = (int)want->shape[0];
    uint8_t *got = cvx_malloc((size_t)want->numel);
    cvx_resize_rgb8(src->data, sw, sh, got, dw, dh, f);
    size_t bad = 0;
    int maxd = 0;
    for (size_t i = 0; i < (size_t)want->numel; i++) {
        const int d = abs((int)got[i] - (int)((const uint8_t *)want->data)[i]);
        bad += d != 0;
        maxd = d > maxd ? d : maxd;
    }
    print_message("  %-8s %3dx%-3d -> %3dx%-3d %-18s %zu of %lld bytes differ (max %d)\n", cvx_pil_filter_name(f), sw,
                  sh, dw, dh, want_name, bad, (long long)want->numel, maxd);
    if (bad) fail_msg("%s: %zu bytes differ from Pillow (max %d)", want_name, bad, maxd);
    free(got);
}

/* A non-square, non-224 image up- and down-scaled with BICUBIC as CLIP does, the whole processor
 * on it, and every Pillow filter on a small image (both axes up, both down, one axis only). */
static void test_pil_references(void **state) {
    (void)state;
    cvx_safetensors *st = tu_open(FIX "/clip_resize.safetensors");
    print_message("  Pillow %s\n", cvx_st_metadata(st, "pillow") ? cvx_st_metadata(st, "pillow") : "?");
    check_pil_resize(st, "a_src", "a_bicubic", CVX_PIL_BICUBIC);
    check_pil_resize(st, "b_src", "b_bicubic", CVX_PIL_BICUBIC);
    static const char *const names[] = {"lanczos", "bilinear", "bicubic", "box", "hamming"};
    static const cvx_pil_filter filters[] = {CVX_PIL_LANCZOS, CVX_PIL_BILINEAR, CVX_PIL_BICUBIC, CVX_PIL_BOX, CVX_PIL_HAMMING};
    static const char *const tags[] = {"up", "down", "h", "v"};
    for (int f = 0; f < 5; f++)
        for (int t = 0; t < 4; t++) {
            char name[64];
            snprintf(name, sizeof name, "c_%s_%s", names[f], tags[t]);
            check_pil_resize(st, "c_src", name, filters[f]);
        }
    /* the CLIP processor on the 101x77 image: resize to 293x224, crop at x = 34, normalise */
    const cvx_tensor *a = cvx_st_find(st, "a_src");
    clip_image_processor p;
    clip_image_processor_default(&p);
    float *got = cvx_alloc_f32((size_t)3 * 224 * 224), *want = tu_f32(st, "a_pixel_values", NULL);
    clip_image_preprocess(&p, a->data, (int)a->shape[1], (int)a->shape[0], got);
    size_t bad = 0;
    double m = 0;
    for (size_t i = 0; i < (size_t)3 * 224 * 224; i++) {
        bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
        m = fmax(m, fabs((double)got[i] - want[i]));
    }
    print_message("  101x77 pixel_values: %zu mismatches, max |diff| %.3g\n", bad, m);
    assert_int_equal(bad, 0);
    free(got), free(want);
    cvx_st_close(st);
}

/* The filters' kernels: 1 at 0, 0 at the integers, support edges; the cubic's a = -0.5 value. */
static void test_filters(void **state) {
    (void)state;
    const cvx_pil_filter all[] = {CVX_PIL_LANCZOS, CVX_PIL_BILINEAR, CVX_PIL_BICUBIC, CVX_PIL_BOX, CVX_PIL_HAMMING};
    for (int i = 0; i < 5; i++) {
        assert_true(cvx_pil_filter_valid((int)all[i]));
        assert_true(cvx_pil_filter_eval(all[i], 0.0) == 1.0);
        const double s = cvx_pil_filter_support(all[i]);
        assert_true(cvx_pil_filter_eval(all[i], s + 0.01) == 0.0 && cvx_pil_filter_eval(all[i], -s - 0.01) == 0.0);
    }
    assert_false(cvx_pil_filter_valid(0));
    assert_false(cvx_pil_filter_valid(6));
    assert_true(cvx_pil_filter_eval(CVX_PIL_BICUBIC, 1.0) == 0.0 && cvx_pil_filter_eval(CVX_PIL_BICUBIC, 2.0) == 0.0);
    assert_true(cvx_pil_filter_eval(CVX_PIL_BICUBIC, 0.5) == 0.5625);     /* 1.5·⅛ − 2.5·¼ + 1 */
    assert_true(cvx_pil_filter_eval(CVX_PIL_BICUBIC, -1.5) == -0.0625);   /* (((−3.5)·1.5 + 8)·1.5 − 4)·(−0.5) */
    assert_true(cvx_pil_filter_eval(CVX_PIL_BOX, 0.5) == 1.0 && cvx_pil_filter_eval(CVX_PIL_BOX, -0.5) == 0.0);
    assert_true(cvx_pil_filter_eval(CVX_PIL_BILINEAR, -0.25) == 0.75);
    assert_true(cvx_pil_filter_eval(CVX_PIL_LANCZOS, 1.5) == cvx_lanczos3(1.5));
}

/* The encoder as the real checkpoints come: bf16, sharded with an index, a
 * CLIPVisionModelWithProjection (visual_projection present, unused). In f32 mode it gives
 * exactly what the same rounded values stored as one F32 file give; close to the golden. */
static void test_bf16_sharded(void **state) {
    (void)state;
    cvx_ctx *ctx = cvx_ctx_new(0);
    clip_vision *a = clip_vision_load(FIX "/clip_bf16_sharded/image_encoder", ctx);
    if (!a) fail_msg("%s", cvx_last_error());
    clip_vision *b = clip_vision_load(FIX "/clip_bf16_rounded_f32/image_encoder", ctx);
    if (!b) fail_msg("%s", cvx_last_error());
    assert_int_equal(a->layers[0].q_w->dtype, CVX_BF16);
    gh_case c;
    gh_open(&c, CASE);
    const size_t n = (size_t)a->cfg.tokens * a->cfg.hidden_size;
    float *pix = gh_f32(&c, NULL, "clip_pixel_values"), *want = gh_f32(&c, NULL, "image_embeds");
    float *ya = cvx_alloc_f32(n), *yb = cvx_alloc_f32(n);
    ASSERT_OK(clip_vision_encode(a, pix, ya));
    ASSERT_OK(clip_vision_encode(b, pix, yb));
    const double e = cvx_rel_l2(ya, yb, n), g = cvx_rel_l2(ya, want, n);
    print_message("  sharded bf16 vs rounded f32: rel L2 %.3g; vs golden (f32 weights): %.3g\n", e, g);
    assert_true(e <= 1e-6);
    assert_true(g > 0 && g < 2e-2);
    free(pix), free(want), free(ya), free(yb);
    clip_vision_free(a);
    clip_vision_free(b);
    cvx_ctx_free(ctx);
    gh_close(&c);
}

/* ---- the vision model ---- */

/* image_embeds = hidden_states[-2] from the golden clip_pixel_values (rel L2 <= 1e-5), and from
 * our own preprocessing of image.png (the same pixels, so the same numbers). */
static void test_image_embeds(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, CASE);
    cvx_ctx *ctx = cvx_ctx_new(0);
    clip_vision *m = clip_vision_load(gh_path(&c, "model/image_encoder"), ctx);
    if (!m) fail_msg("%s", cvx_last_error());
    const clip_vision_config *cfg = &m->cfg;
    assert_int_equal(cfg->act, CLIP_ACT_GELU);
    assert_int_equal(cfg->tokens, 257);
    const cvx_tensor *t = gh_tensor(&c, "image_embeds");
    assert_int_equal(t->shape[1], cfg->tokens);
    assert_int_equal(t->shape[2], cfg->hidden_size);
    const size_t n = (size_t)cfg->tokens * cfg->hidden_size;
    float *pix = gh_f32(&c, NULL, "clip_pixel_values"), *want = cvx_tensor_f32_dup(t), *got = cvx_alloc_f32(n);
    ASSERT_OK(clip_vision_encode(m, pix, got));
    gh_check_rel_l2(&c, "image_embeds", got, want, n, 1e-5);

    /* the same through hidden_state(L - 1); the last layer (hidden_states[-1]) is something else */
    float *h = cvx_alloc_f32(n);
    ASSERT_OK(clip_vision_hidden_state(m, pix, cfg->num_hidden_layers - 1, h));
    assert_memory_equal(h, got, sizeof(float) * n);
    ASSERT_OK(clip_vision_hidden_state(m, pix, cfg->num_hidden_layers, h));
    assert_true(cvx_rel_l2(h, want, n) > 1e-2);
    assert_int_equal(clip_vision_hidden_state(m, pix, cfg->num_hidden_layers + 1, h), -1);
    assert_int_equal(clip_vision_hidden_state(m, pix, -1, h), -1);

    /* image.png -> processor -> encoder */
    cvx_rgb_frames im;
    clip_image_processor p;
    ASSERT_OK(cvx_image_load(gh_path(&c, "image.png"), &im));
    ASSERT_OK(clip_image_processor_load(&p, gh_path(&c, "model/image_processor")));
    clip_image_preprocess(&p, im.rgb, im.width, im.height, pix);
    ASSERT_OK(clip_vision_encode(m, pix, h));
    gh_check_rel_l2(&c, "image_embeds from image.png", h, want, n, 1e-5);
    cvx_rgb_frames_free(&im);

    /* bf16 compute: close, not equal (operands rounded to bf16) */
    ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_BF16));
    ASSERT_OK(clip_vision_encode(m, pix, h));
    const double e = cvx_rel_l2(h, want, n);
    print_message("  bf16 image_embeds rel L2 = %.3g\n", e);
    assert_true(e > 0 && e < 2e-2);

    free(pix), free(want), free(got), free(h);
    clip_vision_free(m);
    cvx_ctx_free(ctx);
    gh_close(&c);
}

/* The attention shape of the real encoder (ViT-H/14: 257 tokens, 16 heads of 80), which the tiny
 * golden model (heads of 8) does not reach: cvx_attention_ctx against the reference, f32 and bf16. */
static void test_vit_h_attention(void **state) {
    (void)state;
    const int S = 257, H = 16, hd = 80, D = H * hd;
    float *q = cvx_alloc_f32((size_t)S * D), *k = cvx_alloc_f32((size_t)S * D), *v = cvx_alloc_f32((size_t)S * D);
    float *o = cvx_alloc_f32((size_t)S * D), *r = cvx_alloc_f32((size_t)S * D);
    uint32_t st = 12345;
    for (size_t i = 0; i < (size_t)S * D; i++) {
        float *dst[3] = {q, k, v};
        for (int j = 0; j < 3; j++) {
            st = st * 1664525u + 1013904223u;
            dst[j][i] = ((float)(st >> 8) / 16777216.0f - 0.5f) * 4.0f;
        }
    }
    const float scale = (float)pow(hd, -0.5);
    cvx_attention_ref(q, D, k, v, D, r, D, S, S, H, hd, scale, NULL);
    cvx_ctx *ctx = cvx_ctx_new(0);
    cvx_attention_ctx(ctx, q, D, k, v, D, o, D, S, S, H, hd, scale, NULL);
    const double e32 = cvx_rel_l2(o, r, (size_t)S * D);
    ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_BF16));
    cvx_attention_ctx(ctx, q, D, k, v, D, o, D, S, S, H, hd, scale, NULL);
    const double e16 = cvx_rel_l2(o, r, (size_t)S * D);
    print_message("  257 tokens, 16 heads x 80: f32 rel L2 %.3g, bf16 %.3g\n", e32, e16);
    assert_true(e32 <= 1e-6);
    assert_true(e16 < 2e-2);
    cvx_ctx_free(ctx);
    free(q), free(k), free(v), free(o), free(r);
}

/* The activations: erf GELU, x·σ(1.702x), tanh GELU, against double references. */
static void test_activations(void **state) {
    (void)state;
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = -8.0f + 0.25f * i;
    const clip_activation acts[3] = {CLIP_ACT_GELU, CLIP_ACT_QUICK_GELU, CLIP_ACT_GELU_TANH};
    for (int a = 0; a < 3; a++) {
        memcpy(y, x, sizeof x);
        clip_activation_apply(acts[a], y, 64);
        for (int i = 0; i < 64; i++) {
            const double v = x[i];
            const double want = a == 0 ? 0.5 * v * (1 + erf(v / sqrt(2.0)))
                              : a == 1 ? v / (1 + exp(-1.702 * v))
                                       : 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
            if (fabs(y[i] - want) > 1e-6 * fmax(1.0, fabs(want)))
                fail_msg("activation %d at %g: %.9g vs %.9g", a, v, (double)y[i], want);
        }
    }
}

/* Config errors name the file and key; a CLIPConfig's vision_config is read. */
static void expect_config(const char *json, const char *needle) {
    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    tu_write(path, json, strlen(json));
    clip_vision_config cfg;
    const int rc = clip_vision_config_load(&cfg, path);
    if (needle) {
        assert_int_equal(rc, -1);
        if (!strstr(cvx_last_error(), needle) || !strstr(cvx_last_error(), "config.json"))
            fail_msg("error '%s' does not mention '%s'", cvx_last_error(), needle);
    } else {
        ASSERT_OK(rc);
        assert_int_equal(cfg.hidden_size, 1280);
        assert_int_equal(cfg.num_hidden_layers, 32);
        assert_int_equal(cfg.tokens, 257);
        assert_int_equal(cfg.act, CLIP_ACT_GELU);
    }
    tu_rmrf(dir);
}

static void test_config(void **state) {
    (void)state;
#define BASE "\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2, \"patch_size\": 14"
    expect_config("{" BASE ", \"num_attention_heads\": 4, \"hidden_act\": \"relu\"}", "hidden_act");
    expect_config("{" BASE ", \"num_attention_heads\": 5}", "num_attention_heads");
    expect_config("{" BASE ", \"num_attention_heads\": 4, \"num_channels\": 4}", "num_channels");
    expect_config("{\"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 4}", "intermediate_size");
    expect_config("{" BASE ", \"num_attention_heads\": 4, \"image_size\": 10}", "patch_size");
    /* ViT-H/14 of Wan 2.1 I2V (laion/CLIP-ViT-H-14-laion2B-s32B-b79K) inside a CLIPConfig */
    expect_config("{\"model_type\": \"clip\", \"vision_config\": {\"hidden_size\": 1280, \"intermediate_size\": 5120, "
                  "\"num_hidden_layers\": 32, \"num_attention_heads\": 16, \"patch_size\": 14, \"image_size\": 224, "
                  "\"hidden_act\": \"gelu\"}}",
                  NULL);
#undef BASE
}

/* Loading: a missing directory and a wrong tensor shape are named. */
static void test_load_errors(void **state) {
    (void)state;
    assert_null(clip_vision_load("tests/data/no_such_encoder", NULL));
    assert_non_null(strstr(cvx_last_error(), "no_such_encoder"));
    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    /* the golden weights with hidden_size 16 in the config: the first tensor looked up mismatches */
    const char *cfg = "{\"hidden_size\": 16, \"intermediate_size\": 64, \"num_hidden_layers\": 3, "
                      "\"num_attention_heads\": 4, \"patch_size\": 14, \"image_size\": 224, \"hidden_act\": \"gelu\"}";
    tu_write(path, cfg, strlen(cfg));
    size_t len;
    char *w = cvx_read_file(CASE "/model/image_encoder/model.safetensors", &len);
    assert_non_null(w);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tu_write(path, w, len);
    free(w);
    assert_null(clip_vision_load(dir, NULL));
    assert_non_null(strstr(cvx_last_error(), "patch_embedding"));
    assert_non_null(strstr(cvx_last_error(), "expected"));
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clip_pixel_values),
        cmocka_unit_test(test_image_preprocessed),
        cmocka_unit_test(test_processor_geometry),
        cmocka_unit_test(test_processor_values),
        cmocka_unit_test(test_processor_config),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_pil_references),
        cmocka_unit_test(test_image_embeds),
        cmocka_unit_test(test_vit_h_attention),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_bf16_sharded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
