/* Image/video input (common/image.c) on tiny fixtures in tests/data/image made with the ffmpeg
 * CLI from a known 8×6 pattern (r = 30x, g = 40y, b = 10(x+y) + 20t):
 * pattern.png (exact), pattern.jpg (lossy: close), clip_lossless.mkv (FFV1, 5 frames, exact),
 * clip.mp4 (MPEG-4 yuv420p, 5 frames: count, size, close), frames/ (0000, 0001, 0002, 0010.png
 * and a notes.txt that is skipped: sorted order, exact). Errors: missing file, not an image,
 * empty directory, frames of different sizes. */
#include "testutil.h"
#include <math.h>
#include "fileio.h"
#include "image.h"

#define DATA "tests/data/image"

static uint8_t pattern(int t, int x, int y, int c) {
    return (uint8_t)(c == 0 ? x * 30 : c == 1 ? y * 40 : ((x + y) * 10 + t * 20) % 256);
}

/* Max abs difference of frame f (of fr) against pattern frame t. */
static int frame_diff(const cvx_rgb_frames *fr, int f, int t) {
    const uint8_t *p = cvx_frame_rgb(fr, f);
    int maxd = 0;
    for (int y = 0; y < fr->height; y++)
        for (int x = 0; x < fr->width; x++)
            for (int c = 0; c < 3; c++) {
                int d = abs((int)p[(y * fr->width + x) * 3 + c] - pattern(t, x, y, c));
                if (d > maxd) maxd = d;
            }
    return maxd;
}

static void test_png_exact(void **s) {
    (void)s;
    cvx_rgb_frames f;
    ASSERT_OK(cvx_image_load(DATA "/pattern.png", &f));
    assert_int_equal(f.frames, 1);
    assert_int_equal(f.width, 8);
    assert_int_equal(f.height, 6);
    assert_int_equal(frame_diff(&f, 0, 0), 0);
    cvx_rgb_frames_free(&f);
}

static void test_jpeg_close(void **s) {
    (void)s;
    cvx_rgb_frames f;
    ASSERT_OK(cvx_image_load(DATA "/pattern.jpg", &f));
    assert_int_equal(f.frames, 1);
    assert_int_equal(f.width, 8);
    assert_int_equal(f.height, 6);
    int d = frame_diff(&f, 0, 0);
    print_message("  jpeg max abs diff %d\n", d);
    assert_true(d < 64);   /* 4:2:0 chroma on an 8×6 image with strong colour edges */
    cvx_rgb_frames_free(&f);
}

static void test_video_lossless_exact(void **s) {
    (void)s;
    cvx_rgb_frames f;
    ASSERT_OK(cvx_video_load(DATA "/clip_lossless.mkv", 0, &f));
    assert_int_equal(f.frames, 5);
    for (int t = 0; t < 5; t++) assert_int_equal(frame_diff(&f, t, t), 0);
    cvx_rgb_frames_free(&f);
    ASSERT_OK(cvx_video_load(DATA "/clip_lossless.mkv", 3, &f));   /* the first N frames */
    assert_int_equal(f.frames, 3);
    assert_int_equal(frame_diff(&f, 2, 2), 0);
    cvx_rgb_frames_free(&f);
    ASSERT_OK(cvx_video_load(DATA "/clip_lossless.mkv", 5, &f));   /* exactly as many as there are */
    assert_int_equal(f.frames, 5);
    cvx_rgb_frames_free(&f);
    /* more than there are: an error naming both counts, not silently fewer (issue 21) */
    assert_int_equal(cvx_video_load(DATA "/clip_lossless.mkv", 99, &f), -1);
    assert_non_null(strstr(cvx_last_error(), "--frames 99: " DATA "/clip_lossless.mkv has only 5 frames"));
    assert_null(f.rgb);
}

static void test_video_mp4(void **s) {
    (void)s;
    cvx_rgb_frames f;
    ASSERT_OK(cvx_video_load(DATA "/clip.mp4", 0, &f));
    assert_int_equal(f.frames, 5);
    assert_int_equal(f.width, 8);
    assert_int_equal(f.height, 6);
    double mean = 0;
    for (size_t i = 0; i < (size_t)5 * 8 * 6 * 3; i++) {
        int t = (int)(i / (8 * 6 * 3)), r = (int)(i % (8 * 6 * 3)), px = r / 3;
        mean += abs((int)f.rgb[i] - pattern(t, px % 8, px / 8, r % 3));
    }
    mean /= 5 * 8 * 6 * 3;
    print_message("  mp4 mean abs diff %.2f\n", mean);
    assert_true(mean < 16);
    cvx_rgb_frames_free(&f);
    /* An image file read as a 1-frame video. */
    ASSERT_OK(cvx_video_load(DATA "/pattern.png", 0, &f));
    assert_int_equal(f.frames, 1);
    cvx_rgb_frames_free(&f);
}

static void test_frame_folder(void **s) {
    (void)s;
    cvx_rgb_frames f;
    ASSERT_OK(cvx_video_load(DATA "/frames", 0, &f));
    assert_int_equal(f.frames, 4);   /* notes.txt skipped */
    const int order[4] = {0, 1, 2, 3};  /* 0000, 0001, 0002, 0010 hold pattern frames 0, 1, 2, 3 */
    for (int i = 0; i < 4; i++) assert_int_equal(frame_diff(&f, i, order[i]), 0);
    cvx_rgb_frames_free(&f);
    ASSERT_OK(cvx_video_load(DATA "/frames", 2, &f));
    assert_int_equal(f.frames, 2);
    cvx_rgb_frames_free(&f);
}

static void test_errors(void **s) {
    (void)s;
    cvx_rgb_frames f;
    char dir[256], path[1024];
    assert_int_equal(cvx_image_load(DATA "/missing.png", &f), -1);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "missing.png"));
    assert_int_equal(cvx_video_load(DATA "/missing.mp4", 0, &f), -1);
    assert_non_null(strstr(cvx_last_error(), "missing.mp4"));
    tu_mkdtemp(dir, sizeof dir);
    /* Not an image. */
    snprintf(path, sizeof path, "%s/junk.png", dir);
    tu_write(path, "this is not a png at all", 24);
    assert_int_equal(cvx_image_load(path, &f), -1);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "junk.png"));
    assert_null(f.rgb);
    /* An empty file. */
    snprintf(path, sizeof path, "%s/empty.mp4", dir);
    tu_write(path, "", 0);
    assert_int_equal(cvx_video_load(path, 0, &f), -1);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "empty.mp4"));
    /* A directory with no frames: 0 frames. */
    snprintf(path, sizeof path, "%s/noframes", dir);
    assert_int_equal(cvx_mkdirs(path), 0);
    assert_int_equal(cvx_video_load(path, 0, &f), -1);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "0 frames"));
    /* Frames of different sizes. */
    snprintf(path, sizeof path, "cp " DATA "/frames/0000.png %s/noframes/a.png && cp " GOLDEN
             "/e2e_i2v_5b/image.png %s/noframes/b.png", dir, dir);
    assert_int_equal(system(path), 0);
    snprintf(path, sizeof path, "%s/noframes", dir);
    assert_int_equal(cvx_video_load(path, 0, &f), -1);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "b.png"));
    assert_non_null(strstr(cvx_last_error(), "expected 8x6"));
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_exact),
        cmocka_unit_test(test_jpeg_close),
        cmocka_unit_test(test_video_lossless_exact),
        cmocka_unit_test(test_video_mp4),
        cmocka_unit_test(test_frame_folder),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
