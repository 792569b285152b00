/* LTX-Video's schedule math (stage2/ltx_schedule.c) against golden_ltx/scheduler (bit-exact):
 *   - every table: 0.9.0 dynamic shift (mu from the token count, stretch to the terminal; N = 1
 *     NaN as upstream), 0.9.5 LTXPipeline, condition pipeline (linear-quadratic, distilled lists);
 *   - the plain Euler chain and the condition pipeline's per-token chain (per-token timesteps,
 *     step, keep-conditioning select);
 *   - bad scheduler configs give one error naming the key. */
#include "golden_harness.h"

#include "stage2/ltx_schedule.h"

#define SCHED "tests/data/golden_ltx/scheduler"

/* Equal bits, NaN equal to NaN (N = 1 upstream). */
static void check_bits(const char *what, const float *got, json_object *want, size_t n) {
    assert_int_equal(gh_len(want), n);
    for (size_t i = 0; i < n; i++) {
        float w = (float)gh_num(gh_at(want, i));
        if (isnan(w) && isnan(got[i])) continue;
        if (memcmp(&w, &got[i], sizeof w))
            fail_msg("%s[%zu]: got %.9g, want %.9g", what, i, (double)got[i], (double)w);
    }
}

static void load_cfg(gh_case *c, const char *which, ltx_sched_config *cfg) {
    if (ltx_sched_config_load(gh_path(c, which), cfg)) fail_msg("%s", cvx_last_error());
}

static void test_tables(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, SCHED);
    ltx_sched_config c090, c095;
    load_cfg(&c, "model/scheduler/scheduler_config.json", &c090);
    load_cfg(&c, "model/scheduler_095/scheduler_config.json", &c095);
    json_object *tables = gh_json(&c, "tables");
    int n_tables = 0;
    json_object_object_foreach(tables, key, tab) {
        int N = (int)gh_len(gh_get(tab, "timesteps"));
        float *sig = malloc(sizeof(float) * (N + 1)), *ts = malloc(sizeof(float) * N);
        json_object *in = NULL;
        if (!strncmp(key, "v090_", 5)) {
            double mu = ltx_calculate_shift(gh_int(gh_get(tab, "video_sequence_length")), &c090);
            assert_true(mu == gh_num(gh_get(tab, "mu")));
            ASSERT_OK(ltx_schedule_sigmas(&c090, N, mu, sig, ts));
        } else if (!strncmp(key, "v095_ltxpipeline_", 17)) {
            ASSERT_OK(ltx_schedule_sigmas(&c095, N, 0.0, sig, ts));
        } else if (json_object_object_get_ex(tab, "input_timesteps", &in)) {   /* distilled lists */
            double *t = malloc(sizeof(double) * N);
            for (int i = 0; i < N; i++) t[i] = gh_num(gh_at(in, (size_t)i));
            ASSERT_OK(ltx_schedule_timesteps(&c095, N, t, sig, ts));
            free(t);
        } else {                                                                 /* linear-quadratic */
            float *lq = malloc(sizeof(float) * N);
            double *t = malloc(sizeof(double) * N);
            ltx_linear_quadratic_schedule(N, 0.025, 0, lq);
            check_bits("linear_quadratic", lq, gh_get(tab, "linear_quadratic"), (size_t)N);
            ltx_linear_quadratic_timesteps(N, 0.025, 0, lq);
            for (int i = 0; i < N; i++) t[i] = lq[i];
            ASSERT_OK(ltx_schedule_timesteps(&c095, N, t, sig, ts));
            free(lq);
            free(t);
        }
        check_bits(key, sig, gh_get(tab, "sigmas"), (size_t)N + 1);
        check_bits(key, ts, gh_get(tab, "timesteps"), (size_t)N);
        free(sig);
        free(ts);
        n_tables++;
    }
    assert_true(n_tables >= 29);
    printf("  %d schedule tables bit-exact\n", n_tables);
    gh_close(&c);
}

/* The plain chain runs the 0.9.0 schedule of N steps at the chain's token count. */
static void test_chains(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, SCHED);
    ltx_sched_config cfg;
    load_cfg(&c, "model/scheduler/scheduler_config.json", &cfg);
    int N = (int)gh_int(gh_json(&c, "chain.N")), tokens = (int)gh_int(gh_json(&c, "chain.tokens"));
    json_object *shape = gh_json(&c, "chain.shape");
    int C = (int)gh_int(gh_at(shape, 2));
    size_t n = (size_t)tokens * C;
    double mu = ltx_calculate_shift(tokens, &cfg);
    assert_true(mu == gh_num(gh_json(&c, "chain.mu")));
    float *sig = malloc(sizeof(float) * (N + 1)), *ts = malloc(sizeof(float) * N), *got = malloc(sizeof(float) * n);
    float *neg = malloc(sizeof(float) * n), *ptt = malloc(sizeof(float) * tokens);
    ASSERT_OK(ltx_schedule_sigmas(&cfg, N, mu, sig, ts));
    for (int i = 0; i < N; i++) {
        float *x = gh_f32(&c, NULL, "chain_plain_i%d.sample", i), *v = gh_f32(&c, NULL, "chain_plain_i%d.model_output", i);
        char name[64];
        snprintf(name, sizeof name, "chain_plain_i%d.prev_sample", i);
        ltx_step(sig, i, v, x, n, got);
        gh_expect_exact(&c, name, got, n);
        free(x);
        free(v);
    }
    /* the per-token chain: the condition pipeline's default (linear-quadratic) schedule, 0.9.5 config */
    ltx_sched_config c095;
    load_cfg(&c, "model/scheduler_095/scheduler_config.json", &c095);
    double *tin = malloc(sizeof(double) * N);
    ltx_linear_quadratic_timesteps(N, 0.025, 0, ts);
    for (int i = 0; i < N; i++) tin[i] = ts[i];
    ASSERT_OK(ltx_schedule_timesteps(&c095, N, tin, sig, ts));
    free(tin);
    float *mask = gh_f32(&c, NULL, "chain_tok.conditioning_mask");
    for (int i = 0; i < N; i++) {
        char name[64];
        float *x = gh_f32(&c, NULL, "chain_tok_i%d.sample", i), *v = gh_f32(&c, NULL, "chain_tok_i%d.model_output", i);
        float *wp = gh_f32(&c, NULL, "chain_tok_i%d.per_token_timesteps", i);
        float *wd = gh_f32(&c, NULL, "chain_tok_i%d.denoised", i), *wn = gh_f32(&c, NULL, "chain_tok_i%d.prev_sample", i);
        ltx_per_token_timesteps(ts[i], mask, tokens, ptt);
        snprintf(name, sizeof name, "chain_tok_i%d.per_token_timesteps", i);
        gh_check_exact_f32(&c, name, ptt, wp, (size_t)tokens);
        for (size_t k = 0; k < n; k++) neg[k] = -v[k];   /* the pipeline steps −noise_pred */
        ltx_step_per_token(sig, N, ptt, neg, x, tokens, C, got);
        snprintf(name, sizeof name, "chain_tok_i%d.denoised", i);
        gh_check_exact_f32(&c, name, got, wd, n);
        ltx_condition_select(ts[i], mask, got, x, tokens, C, got);
        snprintf(name, sizeof name, "chain_tok_i%d.prev_sample", i);
        gh_check_exact_f32(&c, name, got, wn, n);
        free(x); free(v); free(wp); free(wd); free(wn);
    }
    free(mask); free(sig); free(ts); free(got); free(neg); free(ptt);
    gh_close(&c);
}

static void test_bad_configs(void **state) {
    (void)state;
    char dir[256], path[300], cmd[1024];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/scheduler_config.json", dir);
    static const char *const cases[][2] = {
        {"{\"use_karras_sigmas\": true}", "use_karras_sigmas"},
        {"{\"time_shift_type\": \"linear\"}", "time_shift_type"},
        {"{\"shift_terminal\": 1.5}", "shift_terminal"},
        {"{\"_class_name\": \"UniPCMultistepScheduler\"}", "_class_name"},
        {"{\"base_image_seq_len\": 4096}", "base_image_seq_len"},
    };
    ltx_sched_config cfg;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tu_write(path, cases[i][0], strlen(cases[i][0]));
        assert_int_equal(ltx_sched_config_load(path, &cfg), -1);
        assert_non_null(strstr(cvx_last_error(), cases[i][1]));
    }
    /* custom timesteps with the dynamic-shifting config, and bad step counts */
    snprintf(cmd, sizeof cmd, "{\"use_dynamic_shifting\": true}");
    tu_write(path, cmd, strlen(cmd));
    ASSERT_OK(ltx_sched_config_load(path, &cfg));
    float s[3], t[2];
    double tin[2] = {1000, 500};
    assert_int_equal(ltx_schedule_timesteps(&cfg, 2, tin, s, t), -1);
    assert_int_equal(ltx_schedule_sigmas(&cfg, 0, 1.0, s, t), -1);
    assert_non_null(strstr(cvx_last_error(), "num_inference_steps"));
    tu_rmrf(dir);
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_chains),
        cmocka_unit_test(test_bad_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
