/* The SigLIP side of HunyuanVideo-1.5 image-to-video in stage 1 (golden_hv15 README section 6,
 * e2e_i2v; tests/data/golden_hv15/e2e_i2v_siglip holds its image encoder, feature extractor and
 * three tensors of its expected.safetensors, bytes unchanged):
 *  - SiglipImageProcessor (PIL bicubic resize to 384 x 384, no crop, rescale, mean = std = 0.5) of
 *    the pipeline's resized 48 x 48 image gives siglip_pixel_values bit for bit; the 48 x 48 RGB8
 *    image is read back from image_preprocessed = u8 / 255 · 2 − 1 (checked to round-trip);
 *  - SiglipVisionModel(siglip_pixel_values).last_hidden_state = image_embeds [729, 20] (the CLIP
 *    vision code with SigLIP's embeddings and post_layernorm), rel L2 <= 1e-5. */
#include "golden_harness.h"

#include "stage1/clip_image_processor.h"
#include "stage1/clip_vision.h"

#define CASE "tests/data/golden_hv15/e2e_i2v_siglip"

static void test_processor(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, CASE);
    clip_image_processor p;
    ASSERT_OK(clip_image_processor_load(&p, gh_path(&c, "model/feature_extractor")));
    assert_false(p.do_center_crop);
    assert_int_equal(p.size_h, 384);
    size_t n;
    float *pre = gh_f32(&c, &n, "image_preprocessed");   /* [1, 3, 48, 48] */
    const int W = 48, H = 48;
    assert_int_equal(n, (size_t)3 * W * H);
    uint8_t *rgb = malloc(n);
    for (int ch = 0; ch < 3; ch++)
        for (int i = 0; i < W * H; i++) {
            const float x = pre[(size_t)ch * W * H + i];
            const long u = lroundf((x + 1.0f) / 2.0f * 255.0f);
            assert_true(u >= 0 && u <= 255);
            assert_true(fabsf((float)u / 255.0f * 2.0f - 1.0f - x) <= 1e-6f);
            rgb[(size_t)i * 3 + ch] = (uint8_t)u;
        }
    int ow, oh;
    clip_image_output_size(&p, W, H, &ow, &oh);
    assert_int_equal(ow, 384);
    assert_int_equal(oh, 384);
    float *got = malloc((size_t)3 * ow * oh * sizeof(float)), *want = gh_f32(&c, NULL, "siglip_pixel_values");
    clip_image_preprocess(&p, rgb, W, H, got);
    gh_check_exact_f32(&c, "siglip_pixel_values", got, want, (size_t)3 * ow * oh);
    free(got), free(want), free(rgb), free(pre);
    gh_close(&c);
}

/* SiglipImageProcessor's defaults and its refusals. */
static void test_processor_config(void **state) {
    (void)state;
    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    const char *cfg = "{\"image_processor_type\": \"SiglipImageProcessor\", \"do_center_crop\": true}";
    tu_write(path, cfg, strlen(cfg));
    clip_image_processor p;
    ASSERT_OK(clip_image_processor_load(&p, dir));
    assert_false(p.do_center_crop);   /* SiglipImageProcessor has no crop step */
    assert_int_equal(p.size_w, 224);
    assert_int_equal(p.size_h, 224);
    assert_true(p.mean[1] == 0.5f && p.std[2] == 0.5f && p.resample == CVX_PIL_BICUBIC);
    cfg = "{\"image_processor_type\": \"SiglipImageProcessor\", \"size\": {\"shortest_edge\": 384}}";
    tu_write(path, cfg, strlen(cfg));
    assert_int_not_equal(clip_image_processor_load(&p, dir), 0);
    assert_non_null(strstr(cvx_last_error(), "'size' must be {\"height\": h, \"width\": w}"));
    tu_rmrf(dir);
}

static void test_encoder(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, CASE);
    clip_vision *m = clip_vision_load(gh_path(&c, "model/image_encoder"), NULL);
    ASSERT_NONNULL(m);
    assert_true(m->cfg.siglip);
    assert_int_equal(m->cfg.tokens, 729);
    float *px = gh_f32(&c, NULL, "siglip_pixel_values"), *want = gh_f32(&c, NULL, "image_embeds");
    const size_t n = (size_t)m->cfg.tokens * m->cfg.hidden_size;
    float *got = malloc(n * sizeof(float));
    ASSERT_OK(clip_vision_last_hidden_state(m, px, got));
    gh_check_rel_l2(&c, "image_embeds (last_hidden_state)", got, want, n, 1e-5);
    free(got), free(want), free(px);
    clip_vision_free(m);
    gh_close(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_processor),
        cmocka_unit_test(test_processor_config),
        cmocka_unit_test(test_encoder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
