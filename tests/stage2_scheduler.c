/* CogVideoXDDIMScheduler / CogVideoXDPMScheduler without golden files: leading / linspace /
 * trailing spacing on hand-computed values, the plain schedule, config errors and the
 * --scheduler name table. The golden parity (tests/data/golden/scheduler_{2b,5b,1.5}, README §4:
 * alphas_cumprod within 1e-12, final_alpha_cumprod and timesteps exact, every DDIM step and
 * both DPM chains within 1e-6 with the drawn noise bit for bit) is rows of tests/golden_cases.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "config.h"
#include "error.h"
#include "ops.h"
#include "rng.h"
#include "safetensors.h"
#include "stage2/scheduler_ddpm.h"

static int init_from_json(cvx_scheduler *s, const char *json, const cvx_scheduler_type *kind_override) {
    cvx_config c;
    if (cvx_config_parse(&c, json, strlen(json), "test/scheduler_config.json")) return -1;
    int rc = cvx_scheduler_init(s, &c, kind_override);
    cvx_config_free(&c);
    return rc;
}

/* Hand-computed upstream values: leading = arange(n)·(N//n) reversed + offset; linspace =
 * round-half-even(linspace(0, N−1, n)) reversed (999/6 = 166.5 → 166, 499.5 → 500, 832.5 → 832). */
static void test_spacings(void **state) {
    (void)state;
    cvx_scheduler s;
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\",\"beta_schedule\":\"scaled_linear\","
                                        "\"timestep_spacing\":\"leading\",\"steps_offset\":1}", NULL), 0);
    assert_int_equal(cvx_scheduler_set_timesteps(&s, 50), 0);
    assert_int_equal(ddpm_of(&s)->timesteps[0], 981);
    assert_int_equal(ddpm_of(&s)->timesteps[49], 1);
    assert_int_equal(cvx_scheduler_set_timesteps(&s, 7), 0);
    static const int64_t lead7[] = {853, 711, 569, 427, 285, 143, 1};
    assert_memory_equal(ddpm_of(&s)->timesteps, lead7, sizeof lead7);
    cvx_scheduler_free(&s);

    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDPMScheduler\",\"timestep_spacing\":\"linspace\"}", NULL), 0);
    assert_ptr_equal(s.type, &cvx_scheduler_dpm);
    assert_int_equal(cvx_scheduler_set_timesteps(&s, 7), 0);
    static const int64_t lin7[] = {999, 832, 666, 500, 333, 166, 0};
    assert_memory_equal(ddpm_of(&s)->timesteps, lin7, sizeof lin7);
    assert_int_equal(cvx_scheduler_set_timesteps(&s, 1), 0);
    assert_int_equal(ddpm_of(&s)->timesteps[0], 0);
    assert_int_equal(cvx_scheduler_set_timesteps(&s, 0), -1);
    assert_int_equal(cvx_scheduler_set_timesteps(&s, 1001), -1);
    cvx_scheduler_free(&s);

    /* trailing spacing with n = 61: numpy's arange makes 62 timesteps (the last -1) upstream;
     * refused with a clear message naming usable counts */
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\",\"timestep_spacing\":\"trailing\"}", NULL), 0);
    assert_int_equal(cvx_scheduler_set_timesteps(&s, 61), -1);
    printf("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "use 60 or 62 steps"));
    assert_int_equal(cvx_scheduler_set_timesteps(&s, 60), 0);
    assert_int_equal(ddpm_of(&s)->timesteps[59], 16);     /* round(1000 - 59·16.666…) - 1 = round(16.67) - 1 */
    cvx_scheduler_free(&s);

    /* --scheduler override beats _class_name */
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\"}", &cvx_scheduler_dpm), 0);
    assert_ptr_equal(s.type, &cvx_scheduler_dpm);
    cvx_scheduler_free(&s);
}

/* Without the SNR shift and rescale the DDIM scheduler is the plain DDIM one: ā = cumprod(1 − β). */
static void test_plain_schedule(void **state) {
    (void)state;
    cvx_scheduler s;
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\",\"beta_schedule\":\"scaled_linear\","
                                        "\"snr_shift_scale\":1.0,\"set_alpha_to_one\":false}", NULL), 0);
    double b0 = 0.00085, b999 = 0.012;
    assert_true(fabs(ddpm_of(&s)->alphas_cumprod[0] - (1 - b0)) < 1e-15);
    assert_true(ddpm_of(&s)->final_alpha_cumprod == ddpm_of(&s)->alphas_cumprod[0]);
    assert_true(ddpm_of(&s)->alphas_cumprod[999] > 0 && ddpm_of(&s)->alphas_cumprod[999] < 1 - b999);
    cvx_scheduler_free(&s);
    /* float32 linear schedule: the first value is 1 − beta_start in float */
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\",\"beta_schedule\":\"linear\","
                                        "\"snr_shift_scale\":1.0}", NULL), 0);
    assert_true(ddpm_of(&s)->alphas_cumprod[0] == (double)(1.0f - 0.00085f));
    cvx_scheduler_free(&s);
}

static void test_config_errors(void **state) {
    (void)state;
    cvx_scheduler s;
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"EulerDiscreteScheduler\"}", NULL), -1);
    assert_non_null(strstr(cvx_last_error(), "_class_name"));
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\",\"beta_schedule\":\"cubic\"}", NULL), -1);
    assert_non_null(strstr(cvx_last_error(), "beta_schedule"));
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\",\"prediction_type\":\"flow\"}", NULL), -1);
    assert_non_null(strstr(cvx_last_error(), "prediction_type"));
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\",\"timestep_spacing\":\"odd\"}", NULL), -1);
    assert_non_null(strstr(cvx_last_error(), "timestep_spacing"));
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\",\"num_train_timesteps\":\"x\"}", NULL), -1);
    assert_non_null(strstr(cvx_last_error(), "num_train_timesteps"));
    assert_null(cvx_scheduler_find("heun"));
    assert_non_null(strstr(cvx_last_error(), "ddim"));
    assert_ptr_equal(cvx_scheduler_find("dpm"), &cvx_scheduler_dpm);
    assert_ptr_equal(cvx_scheduler_find("CogVideoXDDIMScheduler"), &cvx_scheduler_ddim);
    char names[64];
    cvx_scheduler_names(names, sizeof names, "|");
    assert_string_equal(names, "ddim|dpm|unipc|euler");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spacings),      cmocka_unit_test(test_plain_schedule),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
