/* Pillow-exact LANCZOS resize and VaeImageProcessor.preprocess: the filter, properties, frames,
 * errors. The golden images (README §11: e2e_i2v_5b_resize/image.png 101×77 -> [1, 3, 48, 64],
 * the same-size e2e_i2v_5b/image.png) are rows of tests/golden_cases.c. */
#include "testutil.h"
#include <math.h>
#include "image.h"
#include "resize.h"


/* Pillow's filter: 1 at 0, zero at the integers, 0 outside [−3, 3) (−3 itself is inside: sin rounding). */
static void test_filter(void **s) {
    (void)s;
    assert_true(cvx_lanczos3(0.0) == 1.0);
    for (int i = 1; i < 3; i++) assert_true(fabs(cvx_lanczos3(i)) < 1e-15 && fabs(cvx_lanczos3(-i)) < 1e-15);
    assert_true(cvx_lanczos3(3.0) == 0.0 && cvx_lanczos3(-3.5) == 0.0 && fabs(cvx_lanczos3(-3.0)) < 1e-15);
    assert_true(cvx_lanczos3(0.5) > 0.6 && cvx_lanczos3(1.5) < 0);
}

/* Properties every resize must have: a constant image stays constant (taps sum to 1 in fixed
 * point within rounding), upscales and one-axis resizes work, same size is a copy. */
static void test_properties(void **s) {
    (void)s;
    const int sizes[][4] = {{10, 7, 23, 15}, {50, 40, 50, 13}, {9, 9, 31, 9}, {1, 1, 4, 3}, {64, 48, 1, 1}};
    for (int k = 0; k < 5; k++) {
        const int sw = sizes[k][0], sh = sizes[k][1], dw = sizes[k][2], dh = sizes[k][3];
        uint8_t *src = cvx_malloc((size_t)sw * sh * 3), *dst = cvx_malloc((size_t)dw * dh * 3);
        for (int i = 0; i < sw * sh; i++) src[i * 3] = 200, src[i * 3 + 1] = 0, src[i * 3 + 2] = 255;
        cvx_resize_lanczos_rgb8(src, sw, sh, dst, dw, dh);
        for (int i = 0; i < dw * dh; i++) {
            assert_int_equal(dst[i * 3], 200);
            assert_int_equal(dst[i * 3 + 1], 0);
            assert_int_equal(dst[i * 3 + 2], 255);
        }
        free(src), free(dst);
    }
    uint8_t a[4 * 3 * 3], b[4 * 3 * 3];
    for (int i = 0; i < 36; i++) a[i] = (uint8_t)(i * 7);
    cvx_resize_lanczos_rgb8(a, 4, 3, b, 4, 3);
    assert_memory_equal(a, b, sizeof a);
}

/* A clip: every frame preprocessed alone, laid out [3, F, H, W]. */
static void test_preprocess_frames(void **s) {
    (void)s;
    cvx_rgb_frames v;
    ASSERT_OK(cvx_video_load("tests/data/image/frames", 0, &v));
    const int F = v.frames, dw = 5, dh = 4, HW = dw * dh;
    float *all = cvx_alloc_f32((size_t)3 * F * HW), *one = cvx_alloc_f32((size_t)3 * HW);
    cvx_preprocess_frames(v.rgb, F, v.width, v.height, dw, dh, all);
    for (int t = 0; t < F; t++) {
        cvx_preprocess_image(cvx_frame_rgb(&v, t), v.width, v.height, dw, dh, one);
        for (int c = 0; c < 3; c++) assert_memory_equal(all + ((size_t)c * F + t) * HW, one + (size_t)c * HW, sizeof(float) * HW);
    }
    free(all), free(one);
    cvx_rgb_frames_free(&v);
}

/* Bad inputs: one clear error naming the file. */
static void test_image_errors(void **s) {
    (void)s;
    cvx_rgb_frames f;
    assert_int_equal(cvx_image_load("tests/data/no_such_image.png", &f), -1);
    assert_non_null(strstr(cvx_last_error(), "no_such_image.png"));
    assert_null(f.rgb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter),
        cmocka_unit_test(test_properties),
        cmocka_unit_test(test_preprocess_frames),
        cmocka_unit_test(test_image_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
