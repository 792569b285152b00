/* CogVideoX VAE decoder: frame counts of the temporal up-sampling and load-time errors. The
 * golden decodes (tests/data/golden/vae_2b: plain f3, chunked f5, tiled f3/f5, upstream's
 * inconsistent-tile size, each convolution algorithm, f3's post-processed frames) are rows of
 * tests/golden_cases.c. */
#include "testutil.h"
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_counts),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
