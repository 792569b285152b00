/* CogVideoX VAE decoder against the golden vae_2b cases (diffusers 0.32.2 decode_latents),
 * with the default Winograd convolutions and with plain GEMM convolutions:
 * plain (f3: one chunk of 3), chunked (f5: chunks 3+2 with carried caches), tiled with
 * consistent tiles (f3_tiled, f5_tiled: 48×40) and upstream's inconsistent-tile output size
 * (f3_tiled_inconsistent: 24×32 -> [1,3,9,56,68]); post-processed frames of f3. */
#include "testutil.h"
#include <math.h>
#include "stage3/vae.h"
#include "stage3/video.h"

#define VAE_DIR GOLDEN "/vae_2b/model/vae"
#define VAE_EXPECTED GOLDEN "/vae_2b/expected.safetensors"

/* Golden latents [1, F, C, H, W] -> [C, F, H, W] × (float)(1/scaling_factor), as decode_latents. */
static float *load_latents(const cvx_safetensors *st, const char *name, const vae_decoder *d, int *F, int *C, int *H,
                           int *W) {
    const cvx_tensor *t = cvx_st_find(st, name);
    ASSERT_NONNULL(t);
    assert_int_equal(t->ndim, 5);
    *F = (int)t->shape[1], *C = (int)t->shape[2], *H = (int)t->shape[3], *W = (int)t->shape[4];
    float *src = cvx_tensor_f32_dup(t), *z = cvx_alloc_f32((size_t)t->numel);
    float s = (float)(1.0 / d->scaling_factor);
    cvx_permute_fc_to_cf(src, *F, *C, (size_t)*H * *W, 0, z);
    for (int64_t i = 0; i < t->numel; i++) z[i] *= s;
    free(src);
    return z;
}

/* The convolution algorithm run_case's decoders use. */
static cvx_conv_algo g_algo = CVX_CONV_WINOGRAD4;

static void run_case(const char *name, int tiled, int tsh, int tsw, double tol) {
    vae_decoder d;
    ASSERT_OK(vae_load(&d, VAE_DIR, NULL));
    d.ctx->conv_algo = g_algo;
    cvx_safetensors *st = tu_open(VAE_EXPECTED);
    char key[128];
    snprintf(key, sizeof key, "%s.latents", name);
    int F, C, H, W;
    float *z = load_latents(st, key, &d, &F, &C, &H, &W);
    assert_int_equal(C, d.latent_channels);
    snprintf(key, sizeof key, "%s.decoded", name);
    const cvx_tensor *want = cvx_st_find(st, key);
    ASSERT_NONNULL(want);
    float *ref = cvx_tensor_f32_dup(want);
    int To, Ho, Wo;
    float *out;
    if (tiled) {
        assert_true(vae_tiling_applies(&d, H, W, tsh, tsw));
        out = vae_decode_tiled(&d, z, F, H, W, tsh, tsw, &To, &Ho, &Wo, NULL);
    } else {
        To = vae_output_frames(&d, F), Ho = H * d.spatial_ratio, Wo = W * d.spatial_ratio;
        out = cvx_alloc_f32((size_t)d.out_channels * To * Ho * Wo);
        vae_decode_chunked(&d, z, F, H, W, out, NULL);
    }
    print_message("  %s: latent [%d,%d,%d,%d] -> [%d,%d,%d,%d]\n", name, C, F, H, W, d.out_channels, To, Ho, Wo);
    assert_int_equal(want->shape[1], d.out_channels);
    assert_int_equal(want->shape[2], To);
    assert_int_equal(want->shape[3], Ho);
    assert_int_equal(want->shape[4], Wo);
    ASSERT_REL_L2(out, ref, (size_t)want->numel, tol);

    if (!strcmp(name, "f3")) {   /* post-processing: clamp(x/2 + 0.5, 0, 1) as [B, F, H, W, 3] */
        const cvx_tensor *fn = cvx_st_find(st, "f3.frames_np");
        ASSERT_NONNULL(fn);
        float *fw = cvx_tensor_f32_dup(fn), *fg = cvx_alloc_f32((size_t)fn->numel);
        for (int t = 0; t < To; t++)
            for (int i = 0; i < Ho * Wo; i++)
                for (int c = 0; c < 3; c++)
                    fg[((size_t)t * Ho * Wo + i) * 3 + c] = video_unit(out[((size_t)c * To + t) * Ho * Wo + i]);
        double maxd = 0;
        for (size_t i = 0; i < (size_t)fn->numel; i++) {
            double e = fabs((double)fg[i] - fw[i]);
            if (e > maxd) maxd = e;
        }
        print_message("  f3.frames_np max abs diff = %.3g\n", maxd);
        ASSERT_REL_L2(fg, fw, (size_t)fn->numel, 1e-5);
        assert_true(maxd <= 1e-5);
        free(fw), free(fg);
    }
    free(out), free(ref), free(z);
    cvx_st_close(st);
    vae_free(&d);
}

static void test_f3(void **s) { (void)s; run_case("f3", 0, 0, 0, 1e-4); }
/* The other convolution algorithms (plain shifted GEMMs, Winograd F(2×2, 3×3)) give the same
 * results as the default F(4×4, 3×3). */
static void test_f5_gemm_convs(void **s) {
    (void)s;
    g_algo = CVX_CONV_DIRECT;
    run_case("f5", 0, 0, 0, 1e-4);
    run_case("f3_tiled_inconsistent", 1, 24, 32, 1e-4);
    g_algo = CVX_CONV_WINOGRAD2;
    run_case("f5", 0, 0, 0, 1e-4);
    run_case("f3_tiled", 1, 48, 40, 1e-4);
    g_algo = CVX_CONV_WINOGRAD4;
}
static void test_f5_chunked(void **s) { (void)s; run_case("f5", 0, 0, 0, 1e-4); }
static void test_f3_tiled(void **s) { (void)s; run_case("f3_tiled", 1, 48, 40, 1e-4); }
static void test_f5_tiled(void **s) { (void)s; run_case("f5_tiled", 1, 48, 40, 1e-4); }
static void test_f3_tiled_inconsistent(void **s) { (void)s; run_case("f3_tiled_inconsistent", 1, 24, 32, 1e-4); }

/* Frame counts of the temporal up-sampling with the first-frame rule (README §6). */
static void test_frame_counts(void **s) {
    (void)s;
    vae_decoder d;
    ASSERT_OK(vae_load(&d, VAE_DIR, NULL));
    assert_int_equal(vae_output_frames(&d, 1), 1);
    assert_int_equal(vae_output_frames(&d, 2), 8);
    assert_int_equal(vae_output_frames(&d, 3), 9);
    assert_int_equal(vae_output_frames(&d, 5), 17);
    assert_int_equal(vae_output_frames(&d, 13), 49);
    assert_int_equal(vae_output_frames(&d, 4), 16);
    vae_free(&d);
}

/* Weight problems are reported at load with the tensor named. */
static void test_load_errors(void **s) {
    (void)s;
    vae_decoder d;
    assert_int_equal(vae_load(&d, "tests/data/golden/no_such_vae", NULL), -1);
    assert_non_null(strstr(cvx_last_error(), "no_such_vae"));
    vae_free(&d);
    /* A config whose block_out_channels disagree with the weights: shape mismatch named. */
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"block_out_channels\":[8,16,16,32],\"layers_per_block\":1,\"latent_channels\":4,"
                      "\"norm_num_groups\":4,\"temporal_compression_ratio\":4}";
    tu_write(path, cfg, strlen(cfg));
    snprintf(path, sizeof path, "ln -s \"$PWD/%s/diffusion_pytorch_model.safetensors\" %s/", VAE_DIR, dir);
    assert_int_equal(system(path), 0);
    assert_int_equal(vae_load(&d, dir, NULL), -1);
    print_message("  error: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "decoder.conv_in.conv.weight"));
    vae_free(&d);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_counts),
        cmocka_unit_test(test_f3),
        cmocka_unit_test(test_f5_chunked),
        cmocka_unit_test(test_f3_tiled),
        cmocka_unit_test(test_f5_tiled),
        cmocka_unit_test(test_f3_tiled_inconsistent),
        cmocka_unit_test(test_f5_gemm_convs),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
