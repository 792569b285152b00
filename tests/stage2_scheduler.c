/* CogVideoXDDIMScheduler / CogVideoXDPMScheduler against the golden data
 * (tests/data/golden/scheduler_{2b,5b,1.5}, README §4):
 *   - alphas_cumprod (float64) within 1e-12 absolute, final_alpha_cumprod exact;
 *   - timesteps for n = 50, 10, 7, 4, 3, 1 exact;
 *   - every stored DDIM step (2b) and both DPM chains (5b, 1.5) run with the chain's seeded
 *     generator: the noise drawn equals noise1/noise2 bit for bit, prev_sample and
 *     pred_original_sample within 1e-6 relative L2 (measured: 0, bit-exact);
 *   - leading / linspace spacing on hand-computed values, config errors. */
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
#include "stage2/scheduler.h"

#define GOLDEN "tests/data/golden"

static const cvx_tensor *need(const cvx_safetensors *st, const char *name) {
    const cvx_tensor *t = cvx_st_find(st, name);
    if (!t) fail_msg("golden tensor '%s' missing", name);
    return t;
}

static float *f32_of(const cvx_safetensors *st, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const cvx_tensor *t = need(st, name);
    assert_int_equal(t->dtype, CVX_F32);
    return cvx_tensor_f32_dup(t);
}

static void load_case(const char *dir, cogvideox_scheduler *s, cvx_safetensors **st, cvx_config *cj) {
    char p[512];
    snprintf(p, sizeof p, GOLDEN "/%s/model/scheduler/scheduler_config.json", dir);
    if (cogvideox_scheduler_load(s, p, NULL)) fail_msg("%s", cvx_last_error());
    snprintf(p, sizeof p, GOLDEN "/%s/expected.safetensors", dir);
    *st = cvx_st_open(p);
    if (!*st) fail_msg("%s", cvx_last_error());
    if (cj) {
        snprintf(p, sizeof p, GOLDEN "/%s/case.json", dir);
        if (cvx_config_load(cj, p)) fail_msg("%s", cvx_last_error());
    }
}

static void check_alphas_and_timesteps(const char *dir, const cogvideox_scheduler_type *kind) {
    cogvideox_scheduler s;
    cvx_safetensors *st;
    load_case(dir, &s, &st, NULL);
    assert_ptr_equal(s.type, kind);
    const cvx_tensor *ac = need(st, "alphas_cumprod");
    assert_int_equal(ac->dtype, CVX_F64);
    assert_int_equal(ac->numel, s.num_train_timesteps);
    double maxerr = 0;
    for (int i = 0; i < s.num_train_timesteps; i++) {
        double g;
        memcpy(&g, (const char *)ac->data + 8 * (size_t)i, 8);
        double e = fabs(s.alphas_cumprod[i] - g);
        if (e > maxerr) maxerr = e;
    }
    printf("  %s: alphas_cumprod max abs err %.3g\n", dir, maxerr);
    assert_true(maxerr <= 1e-12);
    assert_true(s.alphas_cumprod[s.num_train_timesteps - 1] == 0.0);
    float fa;
    cvx_tensor_to_f32(need(st, "final_alpha_cumprod"), &fa);
    assert_true((double)fa == s.final_alpha_cumprod);

    static const int ns[] = {50, 10, 7, 4, 3, 1};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "timesteps_%d", ns[k]);
        const cvx_tensor *t = need(st, name);
        assert_int_equal(t->dtype, CVX_I64);
        assert_int_equal(cogvideox_scheduler_set_timesteps(&s, ns[k]), 0);
        assert_int_equal(t->numel, s.num_inference_steps);
        for (int i = 0; i < ns[k]; i++) {
            int64_t g;
            memcpy(&g, (const char *)t->data + 8 * (size_t)i, 8);
            assert_int_equal(s.timesteps[i], g);
        }
    }
    cvx_st_close(st);
    cogvideox_scheduler_free(&s);
}

static void test_schedule_2b(void **state) { (void)state; check_alphas_and_timesteps("scheduler_2b", &cogvideox_scheduler_ddim); }
static void test_schedule_5b(void **state) { (void)state; check_alphas_and_timesteps("scheduler_5b", &cogvideox_scheduler_dpm); }
static void test_schedule_15(void **state) { (void)state; check_alphas_and_timesteps("scheduler_1.5", &cogvideox_scheduler_dpm); }

static size_t numel_of(const cvx_safetensors *st, const char *name) { return (size_t)need(st, name)->numel; }

static void test_ddim_steps(void **state) {
    (void)state;
    cogvideox_scheduler s;
    cvx_safetensors *st;
    cvx_config cj;
    load_case("scheduler_2b", &s, &st, &cj);
    json_object *steps;
    assert_true(json_object_object_get_ex(cj.root, "steps", &steps));
    int nsteps = (int)json_object_array_length(steps);
    assert_true(nsteps >= 6);
    double worst = 0;
    for (int k = 0; k < nsteps; k++) {
        json_object *o = json_object_array_get_idx(steps, k), *v;
        assert_true(json_object_object_get_ex(o, "key", &v));
        const char *key = json_object_get_string(v);
        assert_true(json_object_object_get_ex(o, "num_inference_steps", &v));
        int n = json_object_get_int(v);
        assert_true(json_object_object_get_ex(o, "timestep", &v));
        int64_t t = json_object_get_int64(v);
        assert_int_equal(cogvideox_scheduler_set_timesteps(&s, n), 0);
        char name[128];
        snprintf(name, sizeof name, "%s.sample", key);
        size_t numel = numel_of(st, name);
        float *mo = f32_of(st, "%s.model_output", key), *x = f32_of(st, "%s.sample", key);
        float *prev_g = f32_of(st, "%s.prev_sample", key), *x0_g = f32_of(st, "%s.pred_original_sample", key);
        float *prev = malloc(numel * sizeof(float)), *x0 = malloc(numel * sizeof(float));
        cogvideox_ddim_step(&s, mo, t, x, numel, prev, x0);
        double e1 = cvx_rel_l2(prev, prev_g, numel), e2 = cvx_rel_l2(x0, x0_g, numel);
        printf("  %s (t=%lld): prev rel L2 %.3g, x0 rel L2 %.3g\n", key, (long long)t, e1, e2);
        worst = fmax(worst, fmax(e1, e2));
        assert_true(e1 <= 1e-6 && e2 <= 1e-6);
        free(mo); free(x); free(prev_g); free(x0_g); free(prev); free(x0);
    }
    printf("  DDIM worst rel L2 %.3g\n", worst);
    cvx_config_free(&cj);
    cvx_st_close(st);
    cogvideox_scheduler_free(&s);
}

/* Both DPM chains: one generator per chain, seeded once, carried over the steps. */
static void check_dpm_chains(const char *dir) {
    cogvideox_scheduler s;
    cvx_safetensors *st;
    cvx_config cj;
    load_case(dir, &s, &st, &cj);
    json_object *chains;
    assert_true(json_object_object_get_ex(cj.root, "steps", &chains));
    int nchains = (int)json_object_array_length(chains);
    assert_int_equal(nchains, 2);
    double worst = 0;
    for (int c = 0; c < nchains; c++) {
        json_object *ch = json_object_array_get_idx(chains, c), *v, *steps;
        assert_true(json_object_object_get_ex(ch, "num_inference_steps", &v));
        int n = json_object_get_int(v);
        assert_true(json_object_object_get_ex(ch, "generator_seed", &v));
        uint64_t seed = (uint64_t)json_object_get_int64(v);
        assert_true(json_object_object_get_ex(ch, "steps", &steps));
        assert_int_equal((int)json_object_array_length(steps), n);
        assert_int_equal(cogvideox_scheduler_set_timesteps(&s, n), 0);
        cvx_generator g;
        cvx_generator_seed(&g, seed);
        for (int i = 0; i < n; i++) {
            json_object *o = json_object_array_get_idx(steps, i);
            assert_true(json_object_object_get_ex(o, "key", &v));
            const char *key = json_object_get_string(v);
            assert_true(json_object_object_get_ex(o, "timestep", &v));
            int64_t t = json_object_get_int64(v);
            assert_int_equal(t, s.timesteps[i]);
            assert_true(json_object_object_get_ex(o, "timestep_back", &v));
            int64_t t_back = v ? json_object_get_int64(v) : -1;
            assert_int_equal(t_back, i > 0 ? s.timesteps[i - 1] : -1);
            assert_true(json_object_object_get_ex(o, "has_old_pred", &v));
            int has_old = json_object_get_boolean(v);
            assert_true(json_object_object_get_ex(o, "generator_draws", &v));
            int draws = json_object_get_int(v);
            assert_true(json_object_object_get_ex(o, "prev_timestep", &v));
            assert_int_equal(cogvideox_scheduler_prev_timestep(&s, t), json_object_get_int64(v));
            assert_int_equal(cogvideox_dpm_num_draws(&s, has_old, t), draws);

            char name[128];
            snprintf(name, sizeof name, "%s.sample", key);
            size_t numel = numel_of(st, name);
            float *mo = f32_of(st, "%s.model_output", key), *x = f32_of(st, "%s.sample", key);
            float *old = has_old ? f32_of(st, "%s.old_pred_original_sample", key) : NULL;
            float *prev_g = f32_of(st, "%s.prev_sample", key), *x0_g = f32_of(st, "%s.pred_original_sample", key);
            float *noise = malloc(numel * sizeof(float)), *prev = malloc(numel * sizeof(float));
            float *x0 = malloc(numel * sizeof(float));

            /* the draws, replayed on a copy of the generator, equal the stored noise exactly */
            cvx_generator copy = g;
            for (int d = 1; d <= draws; d++) {
                float *ng = f32_of(st, "%s.noise%d", key, d);
                cvx_randn(&copy, noise, numel);
                assert_memory_equal(noise, ng, numel * sizeof(float));
                free(ng);
            }
            cogvideox_dpm_step(&s, mo, old, t, t_back, x, numel, &g, noise, prev, x0);
            assert_memory_equal(&g, &copy, sizeof g);   /* the step consumed exactly `draws` draws */
            double e1 = cvx_rel_l2(prev, prev_g, numel), e2 = cvx_rel_l2(x0, x0_g, numel);
            printf("  %s/%s (t=%lld, back=%lld, draws=%d): prev rel L2 %.3g, x0 rel L2 %.3g\n", dir, key,
                   (long long)t, (long long)t_back, draws, e1, e2);
            worst = fmax(worst, fmax(e1, e2));
            assert_true(e1 <= 1e-6 && e2 <= 1e-6);
            free(mo); free(x); free(old); free(prev_g); free(x0_g); free(noise); free(prev); free(x0);
        }
    }
    printf("  %s DPM worst rel L2 %.3g\n", dir, worst);
    cvx_config_free(&cj);
    cvx_st_close(st);
    cogvideox_scheduler_free(&s);
}

static void test_dpm_chains_5b(void **state) { (void)state; check_dpm_chains("scheduler_5b"); }
static void test_dpm_chains_15(void **state) { (void)state; check_dpm_chains("scheduler_1.5"); }

static int init_from_json(cogvideox_scheduler *s, const char *json, const cogvideox_scheduler_type *kind_override) {
    cvx_config c;
    if (cvx_config_parse(&c, json, strlen(json), "test/scheduler_config.json")) return -1;
    int rc = cogvideox_scheduler_init(s, &c, kind_override);
    cvx_config_free(&c);
    return rc;
}

/* Hand-computed upstream values: leading = arange(n)·(N//n) reversed + offset; linspace =
 * round-half-even(linspace(0, N−1, n)) reversed (999/6 = 166.5 → 166, 499.5 → 500, 832.5 → 832). */
static void test_spacings(void **state) {
    (void)state;
    cogvideox_scheduler s;
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\",\"beta_schedule\":\"scaled_linear\","
                                        "\"timestep_spacing\":\"leading\",\"steps_offset\":1}", NULL), 0);
    assert_int_equal(cogvideox_scheduler_set_timesteps(&s, 50), 0);
    assert_int_equal(s.timesteps[0], 981);
    assert_int_equal(s.timesteps[49], 1);
    assert_int_equal(cogvideox_scheduler_set_timesteps(&s, 7), 0);
    static const int64_t lead7[] = {853, 711, 569, 427, 285, 143, 1};
    assert_memory_equal(s.timesteps, lead7, sizeof lead7);
    cogvideox_scheduler_free(&s);

    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDPMScheduler\",\"timestep_spacing\":\"linspace\"}", NULL), 0);
    assert_ptr_equal(s.type, &cogvideox_scheduler_dpm);
    assert_int_equal(cogvideox_scheduler_set_timesteps(&s, 7), 0);
    static const int64_t lin7[] = {999, 832, 666, 500, 333, 166, 0};
    assert_memory_equal(s.timesteps, lin7, sizeof lin7);
    assert_int_equal(cogvideox_scheduler_set_timesteps(&s, 1), 0);
    assert_int_equal(s.timesteps[0], 0);
    assert_int_equal(cogvideox_scheduler_set_timesteps(&s, 0), -1);
    assert_int_equal(cogvideox_scheduler_set_timesteps(&s, 1001), -1);
    cogvideox_scheduler_free(&s);

    /* trailing spacing with n = 61: numpy's arange makes 62 timesteps (the last -1) upstream;
     * refused with a clear message naming usable counts */
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\",\"timestep_spacing\":\"trailing\"}", NULL), 0);
    assert_int_equal(cogvideox_scheduler_set_timesteps(&s, 61), -1);
    printf("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "use 60 or 62 steps"));
    assert_int_equal(cogvideox_scheduler_set_timesteps(&s, 60), 0);
    assert_int_equal(s.timesteps[59], 16);     /* round(1000 - 59·16.666…) - 1 = round(16.67) - 1 */
    cogvideox_scheduler_free(&s);

    /* --scheduler override beats _class_name */
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\"}", &cogvideox_scheduler_dpm), 0);
    assert_ptr_equal(s.type, &cogvideox_scheduler_dpm);
    cogvideox_scheduler_free(&s);
}

/* Without the SNR shift and rescale the DDIM scheduler is the plain DDIM one: ā = cumprod(1 − β). */
static void test_plain_schedule(void **state) {
    (void)state;
    cogvideox_scheduler s;
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\",\"beta_schedule\":\"scaled_linear\","
                                        "\"snr_shift_scale\":1.0,\"set_alpha_to_one\":false}", NULL), 0);
    double b0 = 0.00085, b999 = 0.012;
    assert_true(fabs(s.alphas_cumprod[0] - (1 - b0)) < 1e-15);
    assert_true(s.final_alpha_cumprod == s.alphas_cumprod[0]);
    assert_true(s.alphas_cumprod[999] > 0 && s.alphas_cumprod[999] < 1 - b999);
    cogvideox_scheduler_free(&s);
    /* float32 linear schedule: the first value is 1 − beta_start in float */
    assert_int_equal(init_from_json(&s, "{\"_class_name\":\"CogVideoXDDIMScheduler\",\"beta_schedule\":\"linear\","
                                        "\"snr_shift_scale\":1.0}", NULL), 0);
    assert_true(s.alphas_cumprod[0] == (double)(1.0f - 0.00085f));
    cogvideox_scheduler_free(&s);
}

static void test_config_errors(void **state) {
    (void)state;
    cogvideox_scheduler s;
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
    assert_null(cogvideox_scheduler_find("euler"));
    assert_non_null(strstr(cvx_last_error(), "ddim"));
    assert_ptr_equal(cogvideox_scheduler_find("dpm"), &cogvideox_scheduler_dpm);
    assert_ptr_equal(cogvideox_scheduler_find("CogVideoXDDIMScheduler"), &cogvideox_scheduler_ddim);
    char names[64];
    cogvideox_scheduler_names(names, sizeof names, "|");
    assert_string_equal(names, "ddim|dpm");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedule_2b),   cmocka_unit_test(test_schedule_5b),
        cmocka_unit_test(test_schedule_15),   cmocka_unit_test(test_ddim_steps),
        cmocka_unit_test(test_dpm_chains_5b), cmocka_unit_test(test_dpm_chains_15),
        cmocka_unit_test(test_spacings),      cmocka_unit_test(test_plain_schedule),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
