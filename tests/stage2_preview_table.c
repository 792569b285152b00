/* The latent → RGB preview table of any channel count (stage2/preview.h cvx_latent_rgb): a
 * 20-row table reads all 20 channels (channel 19 lights its pixel), fewer latent channels use the
 * first rows, and latents with more channels than rows are refused (one error line naming both). */
#include "testutil.h"

#include <math.h>

#include "stage2/preview.h"

static float TAB[20][3];

static void test_any_channel_count(void **state) {
    (void)state;
    for (int c = 0; c < 20; c++)
        for (int k = 0; k < 3; k++) TAB[c][k] = 0.01f * (float)(c + 1) * (float)(k + 1);
    const cvx_latent_rgb tab = {.factors = (const float(*)[3])TAB, .n_channels = 20, .bias = {0.1f, 0.2f, 0.3f},
                                .gain = 2.0f};
    cvx_latent_shape sh = {.frames = 1, .channels = 20, .height = 1, .width = 2, .channels_major = 1};
    sh.numel = 40;
    float x0[40] = {0}, rgb[3 * 2];
    x0[19 * 2 + 1] = 1.0f;   /* channel 19, pixel 1 */
    cvx_preview_latent_rgb(x0, &sh, &tab, 1, rgb);
    for (int k = 0; k < 3; k++) {
        assert_true(fabsf(rgb[k * 2 + 0] - tab.bias[k]) < 1e-7f);
        assert_true(fabsf(rgb[k * 2 + 1] - (tab.bias[k] + 2.0f * TAB[19][k])) < 1e-7f);
    }
    /* more channels than rows: refused by the writer */
    float big[42] = {0};
    cvx_latent_shape sh21 = sh;
    sh21.channels = 21, sh21.numel = 42;
    cvx_preview pv = {.path = "/tmp/cvx_preview_table_unused.png", .every = 1, .n_steps = 1, .rgb = &tab};
    assert_int_equal(cvx_preview_write(&pv, 0, big, &sh21), -1);
    print_message("  refused: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "21 channels"));
    assert_non_null(strstr(cvx_last_error(), "20 rows"));
    assert_false(cvx_is_file(pv.path));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_any_channel_count)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
