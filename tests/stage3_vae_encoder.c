/* CogVideoX VAE encoder against the golden vae_encode cases (diffusers 0.32.2
 * AutoencoderKLCogVideoX.encode(pixels).latent_dist, README §10): a single image, 9 frames
 * (one batch of 8+1), 17 frames (batches 9 + 8 with carried causal caches), a tiled encode
 * (48×64 in 32×40 tiles); mean, logvar, std and the seeded sample (torch.Generator seed 7). */
#include "testutil.h"
#include <math.h>
#include "config.h"
#include "gemm.h"
#include "image.h"
#include "resize.h"
#include "rng.h"
#include "stage3/vae_encoder.h"

#define ENC_DIR GOLDEN "/vae_encode/model/vae"
#define ENC_EXPECTED GOLDEN "/vae_encode/expected.safetensors"
#define TOL 1e-4   /* stage tolerance (f32 relative L2) */

static void run_case(const char *name, int tiled, int tsh, int tsw) {
    vae_encoder e;
    ASSERT_OK(vae_encoder_load(&e, ENC_DIR, NULL));
    cvx_safetensors *st = tu_open(ENC_EXPECTED);
    char key[128];
    snprintf(key, sizeof key, "%s.pixels", name);
    const cvx_tensor *px = cvx_st_find(st, key);
    ASSERT_NONNULL(px);
    const int F = (int)px->shape[2], H = (int)px->shape[3], W = (int)px->shape[4];
    float *x = tu_f32(st, key, NULL);   // [1, 3, F, H, W] = [3, F, H, W]
    int T, h, w;
    float *m;
    if (tiled) {
        assert_true(vae_encode_tiling_applies(&e, H, W, tsh, tsw));
        ASSERT_OK(vae_encode_tiling_check(&e, tsh, tsw));
        m = vae_encode_tiled(&e, x, F, H, W, tsh, tsw, &T, &h, &w, NULL);
    } else {
        T = vae_encoded_frames(&e, F), h = vae_encoded_size(&e, H), w = vae_encoded_size(&e, W);
        m = cvx_alloc_f32((size_t)2 * e.latent_channels * T * h * w);
        vae_encode_batched(&e, x, F, H, W, m, NULL);
    }
    const int lc = e.latent_channels;
    const size_t S = (size_t)T * h * w, n = (size_t)lc * S;
    print_message("  %s: pixels [3,%d,%d,%d] -> latent [%d,%d,%d,%d]\n", name, F, H, W, lc, T, h, w);
    snprintf(key, sizeof key, "%s.mean", name);
    const cvx_tensor *want = cvx_st_find(st, key);
    ASSERT_NONNULL(want);
    assert_int_equal(want->shape[1], lc);
    assert_int_equal(want->shape[2], T);
    assert_int_equal(want->shape[3], h);
    assert_int_equal(want->shape[4], w);
    float *mean = cvx_alloc_f32(n), *logvar = cvx_alloc_f32(n), *std = cvx_alloc_f32(n);
    vae_latent_dist(m, lc, S, mean, logvar, std);
    const char *fields[] = {"mean", "logvar", "std"};
    float *got[] = {mean, logvar, std};
    for (int k = 0; k < 3; k++) {
        snprintf(key, sizeof key, "%s.%s", name, fields[k]);
        float *ref = tu_f32(st, key, NULL);
        print_message("  %s:\n", key);
        ASSERT_REL_L2(got[k], ref, n, TOL);
        free(ref);
    }
    cvx_generator g;
    cvx_generator_seed(&g, 7);
    float *sample = cvx_alloc_f32(n);
    vae_latent_sample(mean, std, n, &g, sample);
    snprintf(key, sizeof key, "%s.sample_seed7", name);
    float *ref = tu_f32(st, key, NULL);
    ASSERT_REL_L2(sample, ref, n, TOL);
    free(ref), free(sample), free(mean), free(logvar), free(std), free(m), free(x);
    cvx_st_close(st);
    vae_encoder_free(&e);
}

static void test_img(void **s) { (void)s; run_case("img", 0, 0, 0); }
static void test_f9(void **s) { (void)s; run_case("f9", 0, 0, 0); }
static void test_f17_batches(void **s) { (void)s; run_case("f17", 0, 0, 0); }
static void test_f9_tiled(void **s) { (void)s; run_case("f9_tiled", 1, 32, 40); }

/* The image path of I2V end to end on the golden §11 cases (e2e_i2v_5b, and e2e_i2v_5b_resize
 * whose 101×77 image is LANCZOS-resized): image.png -> preprocess -> encode -> latent_dist.sample
 * with the pipeline's generator (it draws first) -> × scaling_factor = image_latents frame 0. */
static void i2v_image_latents(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, GOLDEN "/%s/model/vae", dir);
    vae_encoder e;
    ASSERT_OK(vae_encoder_load(&e, path, NULL));
    snprintf(path, sizeof path, GOLDEN "/%s/expected.safetensors", dir);
    cvx_safetensors *st = tu_open(path);
    const cvx_tensor *want = cvx_st_find(st, "image_latents");   // [1, F, C, h, w]
    ASSERT_NONNULL(want);
    const cvx_tensor *pre = cvx_st_find(st, "image_preprocessed");   // [1, 3, H, W]
    ASSERT_NONNULL(pre);
    const int H = (int)pre->shape[2], W = (int)pre->shape[3], lc = e.latent_channels;
    snprintf(path, sizeof path, GOLDEN "/%s/image.png", dir);
    cvx_rgb_frames im;
    ASSERT_OK(cvx_image_load(path, &im));
    float *x = cvx_alloc_f32((size_t)3 * H * W);   // [3, 1, H, W]
    cvx_preprocess_image(im.rgb, im.width, im.height, W, H, x);
    const int h = vae_encoded_size(&e, H), w = vae_encoded_size(&e, W);
    assert_int_equal(vae_encoded_frames(&e, 1), 1);
    assert_int_equal(want->shape[2], lc);
    assert_int_equal(want->shape[3], h);
    assert_int_equal(want->shape[4], w);
    const size_t n = (size_t)lc * h * w;
    float *m = cvx_alloc_f32(2 * n), *mean = cvx_alloc_f32(n), *std = cvx_alloc_f32(n);
    vae_encode_batched(&e, x, 1, H, W, m, NULL);
    vae_latent_dist(m, lc, (size_t)h * w, mean, NULL, std);
    cvx_generator g;
    int64_t seed = 0;
    snprintf(path, sizeof path, GOLDEN "/%s/case.json", dir);
    cvx_config c;
    ASSERT_OK(cvx_config_load(&c, path));
    ASSERT_OK(cvx_cfg_int(&c, "seed", &seed));
    cvx_config_free(&c);
    cvx_generator_seed(&g, (uint64_t)seed);
    vae_latent_sample(mean, std, n, &g, mean);
    const float sf = (float)e.scaling_factor;   /* invert_scale_latents is false for 5b-I2V */
    assert_false(e.invert_scale_latents);
    float *image_latent = mean;   /* the sample, in place */
    for (size_t i = 0; i < n; i++) image_latent[i] *= sf;
    float *ref = cvx_tensor_f32_dup(want);
    print_message("  %s: image %dx%d -> [%d,%d,%d] latent frame 0\n", dir, im.width, im.height, lc, h, w);
    ASSERT_REL_L2(image_latent, ref, n, TOL);   /* frame 0 of [F, C, h, w] */
    for (size_t i = n; i < (size_t)want->numel; i++) assert_true(ref[i] == 0.0f);   /* zero frames after */
    /* The generator order upstream uses: the initial noise is the next draw after the encoder's
     * sample (init_noise_sigma = 1), bit for bit. */
    size_t nn;
    float *init = tu_f32(st, "initial_latents", &nn), *noise = cvx_alloc_f32(nn);
    cvx_randn(&g, noise, nn);
    assert_memory_equal(noise, init, nn * sizeof(float));
    free(init), free(noise);
    free(ref), free(m), free(mean), free(std), free(x);
    cvx_rgb_frames_free(&im);
    cvx_st_close(st);
    vae_encoder_free(&e);
}
static void test_i2v_image_latents(void **s) { (void)s; i2v_image_latents("e2e_i2v_5b"); }
static void test_i2v_resized_image_latents(void **s) { (void)s; i2v_image_latents("e2e_i2v_5b_resize"); }

/* Latent frame counts: batches of 8 (+ the leftover in the first), each halved twice with
 * the odd first frame kept alone. */
static void test_frame_counts(void **s) {
    (void)s;
    vae_encoder e;
    ASSERT_OK(vae_encoder_load(&e, ENC_DIR, NULL));
    assert_int_equal(vae_encoded_frames(&e, 1), 1);
    assert_int_equal(vae_encoded_frames(&e, 9), 3);
    assert_int_equal(vae_encoded_frames(&e, 17), 5);
    assert_int_equal(vae_encoded_frames(&e, 49), 13);
    assert_int_equal(vae_encoded_frames(&e, 8), 2);
    assert_int_equal(vae_encoded_size(&e, 480), 60);
    assert_int_equal(vae_encoded_size(&e, 720), 90);
    assert_int_equal(vae_encode_steps(&e, 49, 0, 0, 0, 0, 0), 6);
    /* Memory is flat in the frame count: past the first batches only the input grows. */
    double d = vae_encode_estimate_peak_bytes(&e, 49, 480, 720) - vae_encode_estimate_peak_bytes(&e, 17, 480, 720);
    assert_true(fabs(d - 4.0 * 3 * 32 * 480 * 720) < 1.0);
    assert_true(vae_encode_estimate_peak_bytes(&e, 9, 480, 720) > vae_encode_estimate_peak_bytes(&e, 1, 480, 720));
    vae_encoder_free(&e);
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
    vae_conv c = {&tw, &tb, Cin, Cout, 1, 3, 3, -1, ctx};
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
    vae_encoder e;
    assert_int_equal(vae_encoder_load(&e, "tests/data/golden/no_such_vae", NULL), -1);
    assert_non_null(strstr(cvx_last_error(), "no_such_vae"));
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"block_out_channels\":[8,16,16,32],\"layers_per_block\":1,\"latent_channels\":4,"
                      "\"norm_num_groups\":4,\"temporal_compression_ratio\":4}";
    tu_write(path, cfg, strlen(cfg));
    snprintf(path, sizeof path, "ln -s \"$PWD/%s/diffusion_pytorch_model.safetensors\" %s/", ENC_DIR, dir);
    assert_int_equal(system(path), 0);
    assert_int_equal(vae_encoder_load(&e, dir, NULL), -1);
    print_message("  error: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "encoder.down_blocks.3.resnets.0.conv1.conv.weight"));
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_counts),
        cmocka_unit_test(test_conv2d_s2_ref),
        cmocka_unit_test(test_latent_dist_clamp),
        cmocka_unit_test(test_img),
        cmocka_unit_test(test_f9),
        cmocka_unit_test(test_f17_batches),
        cmocka_unit_test(test_f9_tiled),
        cmocka_unit_test(test_i2v_image_latents),
        cmocka_unit_test(test_i2v_resized_image_latents),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
