/* CogVideoX VAE decoder: frame counts of the temporal up-sampling, load-time errors, and the
 * feature maps: a chunked and a tiled decode on a context of the test's give back every map they
 * took from its pool (and still match the golden decodes); freeing the decoder empties the pool.
 * The golden decodes (tests/data/golden/vae_2b: plain f3, chunked f5, tiled f3/f5, upstream's
 * inconsistent-tile size, each convolution algorithm, f3's post-processed frames) are rows of
 * tests/golden_cases.c. */
#include "golden_harness.h"

#include "ops.h"
#include "stage3/cogvideox_vae.h"

#define VAE_DIR GOLDEN "/vae_2b/model/vae"

/* Frame counts of the temporal up-sampling with the first-frame rule (README §6). */
static void test_frame_counts(void **s) {
    (void)s;
    cogvideox_vae_decoder d;
    ASSERT_OK(cogvideox_vae_load(&d, VAE_DIR, NULL));
    assert_int_equal(cogvideox_vae_output_frames(&d, 1), 1);
    assert_int_equal(cogvideox_vae_output_frames(&d, 2), 8);
    assert_int_equal(cogvideox_vae_output_frames(&d, 3), 9);
    assert_int_equal(cogvideox_vae_output_frames(&d, 5), 17);
    assert_int_equal(cogvideox_vae_output_frames(&d, 13), 49);
    assert_int_equal(cogvideox_vae_output_frames(&d, 4), 16);
    cogvideox_vae_free(&d);
}

/* Weight problems are reported at load with the tensor named. */
static void test_load_errors(void **s) {
    (void)s;
    cogvideox_vae_decoder d;
    assert_int_equal(cogvideox_vae_load(&d, "tests/data/golden/no_such_vae", NULL), -1);
    assert_non_null(strstr(cvx_last_error(), "no_such_vae"));
    cogvideox_vae_free(&d);
    /* A config whose block_out_channels disagree with the weights: shape mismatch named. */
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"block_out_channels\":[8,16,16,32],\"layers_per_block\":1,\"latent_channels\":4,"
                      "\"norm_num_groups\":4,\"temporal_compression_ratio\":4}";
    tu_write(path, cfg, strlen(cfg));
    snprintf(path, sizeof path, "ln -s \"$PWD/%s/diffusion_pytorch_model.safetensors\" %s/", VAE_DIR, dir);
    assert_int_equal(system(path), 0);
    assert_int_equal(cogvideox_vae_load(&d, dir, NULL), -1);
    print_message("  error: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "decoder.conv_in.conv.weight"));
    cogvideox_vae_free(&d);
    tu_rmrf(dir);
}

/* <name>.latents of vae_2b ([1, F, C, h, w]) as the decoder takes them: [C, F, h, w] / scaling_factor. */
static float *golden_z(gh_case *c, const cogvideox_vae_decoder *d, const char *name, int *F, int *h, int *w) {
    const cvx_tensor *lt = gh_tensor(c, "%s.latents", name);
    *F = (int)lt->shape[1], *h = (int)lt->shape[3], *w = (int)lt->shape[4];
    float *src = cvx_tensor_f32_dup(lt), *z = cvx_alloc_f32((size_t)lt->numel);
    cvx_permute_fc_to_cf(src, *F, d->latent_channels, (size_t)*h * *w, 0, z);
    for (int64_t i = 0; i < lt->numel; i++) z[i] *= (float)(1.0 / d->scaling_factor);
    free(src);
    return z;
}

static void test_pool_balance(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, "vae_2b");
    cvx_ctx *ctx = cvx_ctx_new(0);   /* ours: its feature-map pool must balance after every call */
    cogvideox_vae_decoder d;
    ASSERT_OK(cogvideox_vae_load(&d, VAE_DIR, ctx));
    int F, h, w, To, Ho, Wo;
    float *z = golden_z(&c, &d, "f5", &F, &h, &w);   /* 2 chunks, caches carried */
    To = cogvideox_vae_output_frames(&d, F), Ho = h * d.spatial_ratio, Wo = w * d.spatial_ratio;
    size_t n;
    float *out = cvx_alloc_f32((size_t)d.out_channels * To * Ho * Wo), *want = gh_f32(&c, &n, "f5.decoded");
    cogvideox_vae_decode_chunked(&d, z, F, h, w, out, NULL);
    assert_int_equal(cvx_pool_in_use(&ctx->maps), 0);
    assert_true(ctx->maps.held_bytes > 0);   /* it did take its maps from the pool */
    gh_check_rel_l2(&c, "f5.decoded (test's context)", out, want, n, 1e-4);
    free(out), free(want), free(z);
    z = golden_z(&c, &d, "f5_tiled", &F, &h, &w);
    out = cogvideox_vae_decode_tiled(&d, z, F, h, w, 48, 40, &To, &Ho, &Wo, NULL);
    assert_int_equal(cvx_pool_in_use(&ctx->maps), 0);
    want = gh_f32(&c, &n, "f5_tiled.decoded");
    assert_true(n == (size_t)d.out_channels * To * Ho * Wo);
    gh_check_rel_l2(&c, "f5_tiled.decoded (test's context)", out, want, n, 1e-4);
    free(out), free(want), free(z);
    cogvideox_vae_free(&d);   /* borrowed context: the pool's kept maps go back too */
    assert_true(ctx->maps.held_bytes == 0);
    cvx_ctx_free(ctx);
    gh_close(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_counts),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_pool_balance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
