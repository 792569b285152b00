/* CogVideoX VAE encoder: latent frame counts, the stride-2 conv against its reference, the
 * latent-distribution clamp, load errors, and the feature maps: a batched and a tiled encode on a
 * context of the test's give back every map they took from its pool (and still match the golden
 * means); freeing the encoder empties the pool. The golden encodes (tests/data/golden/vae_encode,
 * README §10: image, 9 / 17 frames, tiled; mean, logvar, std, seeded sample) and the I2V image
 * latents (e2e_i2v_5b, e2e_i2v_5b_resize, §11) are rows of tests/golden_cases.c. */
#include "golden_harness.h"
#include <math.h>
#include "gemm.h"
#include "rng.h"
#include "stage3/cogvideox_vae_encoder.h"

#define ENC_DIR GOLDEN "/vae_encode/model/vae"

/* Latent frame counts: batches of 8 (+ the leftover in the first), each halved twice with
 * the odd first frame kept alone. */
static void test_frame_counts(void **s) {
    (void)s;
    cogvideox_vae_encoder e;
    ASSERT_OK(cogvideox_vae_encoder_load(&e, ENC_DIR, NULL));
    assert_int_equal(cogvideox_vae_encoded_frames(&e, 1), 1);
    assert_int_equal(cogvideox_vae_encoded_frames(&e, 9), 3);
    assert_int_equal(cogvideox_vae_encoded_frames(&e, 17), 5);
    assert_int_equal(cogvideox_vae_encoded_frames(&e, 49), 13);
    assert_int_equal(cogvideox_vae_encoded_frames(&e, 8), 2);
    assert_int_equal(cogvideox_vae_encoded_size(&e, 480), 60);
    assert_int_equal(cogvideox_vae_encoded_size(&e, 720), 90);
    assert_int_equal(cogvideox_vae_encode_steps(&e, 49, 0, 0, 0, 0, 0), 6);
    /* Memory is flat in the frame count: past the first batches only the input grows. */
    double d = cogvideox_vae_encode_estimate_peak_bytes(&e, 49, 480, 720) - cogvideox_vae_encode_estimate_peak_bytes(&e, 17, 480, 720);
    assert_true(fabs(d - 4.0 * 3 * 32 * 480 * 720) < 1.0);
    assert_true(cogvideox_vae_encode_estimate_peak_bytes(&e, 9, 480, 720) > cogvideox_vae_encode_estimate_peak_bytes(&e, 1, 480, 720));
    cogvideox_vae_encoder_free(&e);
}

/* The strided down-sampling convolution (9 tap GEMMs) against direct loops, odd and even sizes. */
static void test_conv2d_s2_ref(void **s) {
    (void)s;
    const int Cin = 5, Cout = 7, T = 2;
    const int sizes[][2] = {{9, 11}, {8, 6}, {3, 4}};
    float *w = cvx_alloc_f32((size_t)Cout * Cin * 9), *b = cvx_alloc_f32(Cout);
    cvx_generator g;
    cvx_generator_seed(&g, 3);
    cvx_randn(&g, w, (size_t)Cout * Cin * 9);
    cvx_randn(&g, b, Cout);
    cvx_tensor tw = {.name = "w", .dtype = CVX_F32, .ndim = 4, .shape = {Cout, Cin, 3, 3}, .numel = Cout * Cin * 9,
                     .data = w, .nbytes = sizeof(float) * Cout * Cin * 9, .file = "test"};
    cvx_tensor tb = {.name = "b", .dtype = CVX_F32, .ndim = 1, .shape = {Cout}, .numel = Cout, .data = b,
                     .nbytes = sizeof(float) * Cout, .file = "test"};
    cvx_ctx *ctx = cvx_ctx_new(0);
    vae_conv c = {.w = &tw, .b = &tb, .cin = Cin, .cout = Cout, .kt = 1, .kh = 3, .kw = 3, .cache_id = -1, .ctx = ctx};
    for (int k = 0; k < 3; k++) {
        const int H = sizes[k][0], W = sizes[k][1], Ho = (H - 2) / 2 + 1, Wo = (W - 2) / 2 + 1;
        float *x = cvx_alloc_f32((size_t)Cin * T * H * W);
        cvx_randn(&g, x, (size_t)Cin * T * H * W);
        float *y = cvx_alloc_f32((size_t)Cout * T * Ho * Wo), *r = cvx_alloc_f32((size_t)Cout * T * Ho * Wo);
        vae_conv2d_s2(&c, x, T, H, W, y);
        vae_conv2d_s2_ref(x, Cin, T, H, W, w, b, Cout, r);
        ASSERT_REL_L2(y, r, (size_t)Cout * T * Ho * Wo, 1e-6);
        free(x), free(y), free(r);
    }
    cvx_ctx_free(ctx);
    free(w), free(b);
}

/* logvar is clamped to [−30, 20] before std = exp(logvar/2). */
static void test_latent_dist_clamp(void **s) {
    (void)s;
    const float mom[8] = {1, 2, 3, 4, -100, 100, 0, 2};   /* lc = 1, S = 4: mean, then logvar */
    float mean[4], lv[4], sd[4];
    vae_latent_dist(mom, 1, 4, mean, lv, sd);
    assert_true(mean[2] == 3.0f);
    assert_true(lv[0] == -30.0f && lv[1] == 20.0f && lv[2] == 0.0f && lv[3] == 2.0f);
    assert_true(sd[1] == expf(10.0f) && sd[2] == 1.0f && sd[3] == expf(1.0f));
}

/* Weight problems are reported at load with the tensor named. */
static void test_load_errors(void **s) {
    (void)s;
    cogvideox_vae_encoder e;
    assert_int_equal(cogvideox_vae_encoder_load(&e, "tests/data/golden/no_such_vae", NULL), -1);
    assert_non_null(strstr(cvx_last_error(), "no_such_vae"));
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"block_out_channels\":[8,16,16,32],\"layers_per_block\":1,\"latent_channels\":4,"
                      "\"norm_num_groups\":4,\"temporal_compression_ratio\":4}";
    tu_write(path, cfg, strlen(cfg));
    snprintf(path, sizeof path, "ln -s \"$PWD/%s/diffusion_pytorch_model.safetensors\" %s/", ENC_DIR, dir);
    assert_int_equal(system(path), 0);
    assert_int_equal(cogvideox_vae_encoder_load(&e, dir, NULL), -1);
    print_message("  error: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "encoder.down_blocks.3.resnets.0.conv1.conv.weight"));
    tu_rmrf(dir);
}

static void check_mean(gh_case *c, const cogvideox_vae_encoder *e, const char *name, const float *m, int T, int h,
                       int w) {
    const size_t n = (size_t)e->latent_channels * T * h * w;
    float *mean = cvx_alloc_f32(n), *lv = cvx_alloc_f32(n), *want = gh_f32(c, NULL, "%s.mean", name);
    vae_latent_dist(m, e->latent_channels, (size_t)T * h * w, mean, lv, NULL);
    char what[64];
    snprintf(what, sizeof what, "%s.mean (test's context)", name);
    gh_check_rel_l2(c, what, mean, want, n, 1e-4);
    free(mean), free(lv), free(want);
}

static void test_pool_balance(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, "vae_encode");
    cvx_ctx *ctx = cvx_ctx_new(0);   /* ours: its feature-map pool must balance after every call */
    cogvideox_vae_encoder e;
    ASSERT_OK(cogvideox_vae_encoder_load(&e, ENC_DIR, ctx));
    const cvx_tensor *px = gh_tensor(&c, "f17.pixels");   /* 2 frame batches, caches carried */
    int F = (int)px->shape[2], H = (int)px->shape[3], W = (int)px->shape[4];
    float *x = cvx_tensor_f32_dup(px);
    int T = cogvideox_vae_encoded_frames(&e, F), h = cogvideox_vae_encoded_size(&e, H), w = cogvideox_vae_encoded_size(&e, W);
    float *m = cvx_alloc_f32((size_t)2 * e.latent_channels * T * h * w);
    cogvideox_vae_encode_batched(&e, x, F, H, W, m, NULL);
    assert_int_equal(cvx_pool_in_use(&ctx->maps), 0);
    assert_true(ctx->maps.held_bytes > 0);   /* it did take its maps from the pool */
    check_mean(&c, &e, "f17", m, T, h, w);
    free(m), free(x);
    px = gh_tensor(&c, "f9_tiled.pixels");
    F = (int)px->shape[2], H = (int)px->shape[3], W = (int)px->shape[4];
    x = cvx_tensor_f32_dup(px);
    m = cogvideox_vae_encode_tiled(&e, x, F, H, W, 32, 40, &T, &h, &w, NULL);
    assert_int_equal(cvx_pool_in_use(&ctx->maps), 0);
    check_mean(&c, &e, "f9_tiled", m, T, h, w);
    free(m), free(x);
    cogvideox_vae_encoder_free(&e);   /* borrowed context: the pool's kept maps go back too */
    assert_true(ctx->maps.held_bytes == 0);
    cvx_ctx_free(ctx);
    gh_close(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_balance),
        cmocka_unit_test(test_frame_counts),
        cmocka_unit_test(test_conv2d_s2_ref),
        cmocka_unit_test(test_latent_dist_clamp),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
