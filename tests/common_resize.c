/* Pillow-exact LANCZOS resize and VaeImageProcessor.preprocess (golden README §11):
 * e2e_i2v_5b_resize/image.png (101×77) -> image_preprocessed [1, 3, 48, 64], and the
 * same-size e2e_i2v_5b/image.png (64×48, no resize). */
#include "testutil.h"
#include <math.h>
#include "image.h"
#include "resize.h"

static void check_case(const char *dir, int expect_w, int expect_h) {
    char path[512];
    snprintf(path, sizeof path, GOLDEN "/%s/image.png", dir);
    cvx_rgb_frames im;
    ASSERT_OK(cvx_image_load(path, &im));
    assert_int_equal(im.frames, 1);
    assert_int_equal(im.width, expect_w);
    assert_int_equal(im.height, expect_h);
    snprintf(path, sizeof path, GOLDEN "/%s/expected.safetensors", dir);
    cvx_safetensors *st = tu_open(path);
    const cvx_tensor *t = cvx_st_find(st, "image_preprocessed");
    ASSERT_NONNULL(t);
    assert_int_equal(t->ndim, 4);
    const int H = (int)t->shape[2], W = (int)t->shape[3];
    float *want = cvx_tensor_f32_dup(t), *got = cvx_alloc_f32((size_t)3 * H * W);
    cvx_preprocess_image(im.rgb, im.width, im.height, W, H, got);
    size_t differ = 0;
    double maxd = 0;
    for (size_t i = 0; i < (size_t)3 * H * W; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d > maxd) maxd = d;
        differ += got[i] != want[i];
    }
    print_message("  %s: %dx%d -> %dx%d, %zu of %d values differ, max abs diff %.3g\n", dir, im.width, im.height, W,
                  H, differ, 3 * H * W, maxd);
    assert_int_equal(differ, 0);   /* bit-exact, not merely within 1/255 */
    free(want), free(got);
    cvx_st_close(st);
    cvx_rgb_frames_free(&im);
}

static void test_resize_golden(void **s) { (void)s; check_case("e2e_i2v_5b_resize", 101, 77); }
static void test_same_size_golden(void **s) { (void)s; check_case("e2e_i2v_5b", 64, 48); }

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
        cmocka_unit_test(test_same_size_golden),
        cmocka_unit_test(test_resize_golden),
        cmocka_unit_test(test_preprocess_frames),
        cmocka_unit_test(test_image_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
