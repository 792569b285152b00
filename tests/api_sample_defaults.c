/* cvx_sample_default_params (pipeline/cvx.h): the model's defaults as a request (its info's
 * size, 50 steps, the family's guidance: CogVideoX 6, Wan 5; the scheduler config's), the same
 * settings cvx_sample_resolve gives a request of sentinels (0, guidance_scale -1), for both
 * families' tiny models; the family options table (pipeline/family.h cvx_family_options): each
 * family takes its own options and refuses the other's with one line. */
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

/* the family options table: an option of another family is one error line, the family's own passes */
static void resolve_expect(const char *dir, cvx_sample_params p, const char *want) {
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = dir, .threads = 1});
    ASSERT_NONNULL(m);
    cvx_sample_params r;
    p.guidance_scale = -1;
    if (!want) {
        ASSERT_OK(cvx_sample_resolve(m, &p, &r));
    } else {
        assert_int_equal(cvx_sample_resolve(m, &p, &r), -1);
        print_message("  refused: %s\n", cvx_last_error());
        assert_non_null(strstr(cvx_last_error(), want));
    }
    cvx_model_close(m);
}

static void test_family_options(void **state) {
    (void)state;
    const char *cog = "models/cogvideox-tiny-random", *wan = "models/wan2.1-tiny-random";
    resolve_expect(cog, (cvx_sample_params){.use_dynamic_cfg = 1}, NULL);
    resolve_expect(wan, (cvx_sample_params){.teacache_ret_steps = 1}, NULL);
    resolve_expect(wan, (cvx_sample_params){.use_dynamic_cfg = 1}, "--use_dynamic_cfg is CogVideoX's");
    resolve_expect(cog, (cvx_sample_params){.teacache_ret_steps = 1}, "--teacache_ret_steps: TeaCache publishes");
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_defaults), cmocka_unit_test(test_family_options)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
