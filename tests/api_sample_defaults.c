/* cvx_sample_default_params (pipeline/cogvideox.h): the model's defaults as a request (its info's
 * size, 50 steps, the family's guidance: CogVideoX 6, Wan 5; the scheduler config's), the same
 * settings cvx_sample_resolve gives a request of sentinels (0, guidance_scale -1), for both
 * families' tiny models. */
#include "testutil.h"

#include "pipeline/cvx.h"

static void check(const char *dir, double guidance, const char *sched) {
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = dir, .threads = 1});
    ASSERT_NONNULL(m);
    const cvx_sample_params d = cvx_sample_default_params(m);
    const cvx_model_info *i = cvx_model_get_info(m);
    assert_int_equal(d.frames, i->frames);
    assert_int_equal(d.height, i->height);
    assert_int_equal(d.width, i->width);
    assert_int_equal(d.num_inference_steps, 50);
    assert_true(d.guidance_scale == guidance);
    assert_string_equal(d.scheduler, sched);
    cvx_sample_params r;
    ASSERT_OK(cvx_sample_resolve(m, &(cvx_sample_params){.guidance_scale = -1}, &r));
    assert_int_equal(r.frames, d.frames);
    assert_int_equal(r.height, d.height);
    assert_int_equal(r.width, d.width);
    assert_int_equal(r.num_inference_steps, d.num_inference_steps);
    assert_true(r.guidance_scale == d.guidance_scale);
    assert_string_equal(r.scheduler, d.scheduler);
    cvx_model_close(m);
}

static void test_defaults(void **state) {
    (void)state;
    check("models/cogvideox-tiny-random", 6.0, "dpm");
    check("models/wan2.1-tiny-random", 5.0, "unipc");
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_defaults)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
