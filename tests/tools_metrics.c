/* The debugging tools' building blocks on known values (issue 35):
 *   - tensor statistics and distances (common/tensor_stats.h): mean / population std / L2 of
 *     1..n in closed form, NaN and Inf counted and left out, relative L2, cosine of orthogonal and
 *     parallel vectors, max abs and its index;
 *   - PSNR (RGB) and SSIM (luma, 11×11 Gaussian): equal frames inf / 1, a difference of one level
 *     everywhere 10·log10(255²), constant frames SSIM's closed form (2μaμb + C1)/(μa² + μb² + C1);
 *   - stage2_steps.json (pipeline/steps_record.h): written and read back; a resumed record keeps the
 *     steps before the first step of the new process and replaces the rest; a record of other run
 *     settings is not continued; a damaged record is one error naming the key. */
#include "testutil.h"

#include <math.h>

#include "tensor_stats.h"
#include "pipeline/steps_record.h"
#include "tools/metrics.h"

static void test_stats(void **s) {
    (void)s;
    enum { N = 1000 };
    float x[N + 2];
    for (int i = 0; i < N; i++) x[i] = (float)(i + 1);
    x[N] = NAN, x[N + 1] = INFINITY;
    cvx_stats st;
    cvx_stats_f32(x, N + 2, &st);
    assert_int_equal(st.nan, 1);
    assert_int_equal(st.inf, 1);
    assert_true(st.min == 1 && st.max == N);
    assert_true(fabs(st.mean - (N + 1) / 2.0) < 1e-12);
    assert_true(fabs(st.std - sqrt((N * (double)N - 1) / 12.0)) < 1e-9);              /* population std of 1..N */
    assert_true(fabs(st.l2 - sqrt(N * (N + 1.0) * (2 * N + 1) / 6.0)) < 1e-6);   /* sqrt(Σ i²) */

    float a[4] = {1, 0, 0, 0}, b[4] = {0, 1, 0, 0}, c[4] = {2, 0, 0, 0}, d[4] = {1, 0, 0, 0.5f};
    cvx_diff df;
    cvx_diff_f32(a, b, 4, &df);
    assert_true(df.cosine == 0 && fabs(df.rel_l2 - sqrt(2.0)) < 1e-12 && df.max_abs == 1);
    cvx_diff_f32(c, a, 4, &df);
    assert_true(fabs(df.cosine - 1) < 1e-15 && df.rel_l2 == 1);
    cvx_diff_f32(d, a, 4, &df);
    assert_true(df.max_abs == 0.5 && df.argmax == 3 && fabs(df.rel_l2 - 0.5) < 1e-12);
    cvx_diff_f32(a, a, 4, &df);
    assert_true(df.rel_l2 == 0 && df.max_abs == 0 && df.cosine == 1);
    a[2] = NAN;
    cvx_diff_f32(a, a, 4, &df);
    assert_int_equal(df.nonfinite, 1);
    assert_true(isnan(df.rel_l2));   /* never "within tolerance" */
}

static void test_psnr_ssim(void **s) {
    (void)s;
    enum { H = 24, W = 32 };
    static uint8_t a[H * W * 3], b[H * W * 3];
    uint32_t r = 12345;
    for (int i = 0; i < H * W * 3; i++) {
        r = r * 1103515245u + 12345u;
        a[i] = (uint8_t)(r >> 24 & 0xfe);
        b[i] = a[i] + 1;
    }
    assert_true(isinf(frame_psnr(a, a, H, W)));
    assert_true(frame_ssim(a, a, H, W) == 1.0);
    const double p = frame_psnr(a, b, H, W);
    print_message("  PSNR one level everywhere: %.6f dB\n", p);
    assert_true(fabs(p - 10 * log10(255.0 * 255.0)) < 1e-9);
    const double sab = frame_ssim(a, b, H, W), sba = frame_ssim(b, a, H, W);
    assert_true(sab < 1 && sab > 0.99 && fabs(sab - sba) < 1e-12);
    /* constant frames: the structure term is 1, the luminance term is the closed form */
    memset(a, 100, sizeof a), memset(b, 140, sizeof b);
    const double C1 = (0.01 * 255) * (0.01 * 255), want = (2 * 100.0 * 140 + C1) / (100.0 * 100 + 140.0 * 140 + C1);
    const double got = frame_ssim(a, b, H, W);
    print_message("  SSIM of constant 100 vs 140: %.9f (closed form %.9f)\n", got, want);
    assert_true(fabs(got - want) < 1e-9);
}

static void fake_step(cvx_steps_record *r, int step, float v) {
    float lat[8];
    for (int i = 0; i < 8; i++) lat[i] = v * (float)(i - 3);
    cvx_steps_record_on_step(r, &(cvx_step_info){step, 4, 999 - 250 * step, 6, step % 2, 0.5, lat, 8, 0});
}

static void test_steps_record(void **s) {
    (void)s;
    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/stage2_steps.json", dir);
    cvx_fingerprint fp = {0}, other = {0};
    cvx_fingerprint_set(&fp, "seed", "42"), cvx_fingerprint_set(&other, "seed", "43");
    /* a run killed after 3 steps */
    cvx_steps_record *r = cvx_steps_record_new(path, 0, &fp);
    ASSERT_NONNULL(r);
    for (int i = 0; i < 3; i++) fake_step(r, i, 1.0f + i);
    ASSERT_OK(cvx_steps_record_free(r));
    cvx_steps_file f;
    ASSERT_OK(cvx_steps_read(path, &f));
    assert_int_equal(f.n, 3);
    assert_int_equal(f.n_steps, 4);
    assert_string_equal(cvx_steps_run(&f, "seed"), "42");
    assert_true(f.e[1].timestep == 749 && f.e[1].guidance == 6 && f.e[1].cache == 1 && f.e[0].cache == 0);
    assert_true(fabs(f.e[1].norm - 2.0 * sqrt(9 + 4 + 1 + 0 + 1 + 4 + 9 + 16)) < 1e-12);
    cvx_steps_file_free(&f);
    /* resumed from a checkpoint after step 2 (index 1): step 2 of the dead process is replaced */
    r = cvx_steps_record_new(path, 1, &fp);
    fake_step(r, 2, 10.0f), fake_step(r, 3, 11.0f);
    ASSERT_OK(cvx_steps_record_free(r));
    ASSERT_OK(cvx_steps_read(path, &f));
    assert_int_equal(f.n, 4);
    assert_true(f.e[0].norm > 0 && fabs(f.e[1].norm / f.e[0].norm - 2) < 1e-12);   /* kept: v = 1, 2 */
    assert_true(fabs(f.e[2].norm / f.e[0].norm - 10) < 1e-12);                     /* replaced: v = 10 */
    cvx_steps_file_free(&f);
    /* a record of other settings is not continued */
    r = cvx_steps_record_new(path, 1, &other);
    fake_step(r, 2, 5.0f);
    ASSERT_OK(cvx_steps_record_free(r));
    ASSERT_OK(cvx_steps_read(path, &f));
    assert_int_equal(f.n, 1);
    assert_int_equal(f.e[0].step, 2);
    cvx_steps_file_free(&f);
    /* damaged records */
    const char *bad = "{\"format\": \"cogvideox.c stage2 steps v1\", \"n_steps\": 4, \"steps\": [{\"step\": 0, "
                      "\"latent_norm\": \"x\"}]}";
    tu_write(path, bad, strlen(bad));
    assert_int_equal(cvx_steps_read(path, &f), -1);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "steps[0]"));
    const char *other_format = "{\"format\": \"something else\", \"n_steps\": 4, \"steps\": []}";
    tu_write(path, other_format, strlen(other_format));
    assert_int_equal(cvx_steps_read(path, &f), -1);
    assert_non_null(strstr(cvx_last_error(), "'format'"));
    tu_rmrf(dir);
}

static void test_steps_record_path(void **s) {
    (void)s;
    char p[64];
    ASSERT_OK(cvx_steps_record_path("/r/stage2_latents.safetensors", p, sizeof p));
    assert_string_equal(p, "/r/stage2_steps.json");
    ASSERT_OK(cvx_steps_record_path("runs/a/stage2_latents_0003.safetensors", p, sizeof p));   /* a batch's numbered file */
    assert_string_equal(p, "runs/a/stage2_steps_0003.json");
    ASSERT_OK(cvx_steps_record_path("stage2_latents.safetensors", p, sizeof p));
    assert_string_equal(p, "stage2_steps.json");
    assert_int_equal(cvx_steps_record_path("/a/very/long/directory/name/stage2_latents.safetensors", p, 16), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_psnr_ssim),
        cmocka_unit_test(test_steps_record),
        cmocka_unit_test(test_steps_record_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
