/* The HunyuanVideo-1.5 sampling arithmetic against tests/data/golden_hv15/ scheduler and noise:
 *   - FlowMatchEulerDiscreteScheduler as the pipeline drives it (sigmas = linspace(1, 0, N+1)[:-1]
 *     through set_timesteps(sigmas=...), the checkpoint's scheduler_config.json with shift 5, 7, 9):
 *     timesteps and sigmas of every table bit-exact; the 4-step chain bit-exact;
 *   - ClassifierFreeGuidance (guider_config.json; g = 6, 3.5, 1): the guided prediction bit-exact,
 *     g = 1 one branch (pred = cond);
 *   - randn_tensor: the small cases and the real 480p / 720p latent shapes (head / mid / tail exact,
 *     float64 sums within 1e-9). */
#include "golden_harness.h"

#include "rng.h"
#include "stage2/guidance.h"
#include "stage2/scheduler_flow.h"

#define SCHED_CASE "tests/data/golden_hv15/scheduler"
#define NOISE_CASE "tests/data/golden_hv15/noise"
#define SCHED_CONFIG SCHED_CASE "/model/scheduler/scheduler_config.json"

static void schedule(flow_scheduler *s, double shift, int n) {
    ASSERT_OK(flow_scheduler_load(s, SCHED_CONFIG, FLOW_FROM_CONFIG, shift));
    assert_int_equal(s->kind, FLOW_EULER);
    double *sg = cvx_malloc(sizeof(double) * (size_t)n);
    flow_linear_sigmas(n, sg);
    ASSERT_OK(flow_scheduler_set_sigmas(s, n, sg));
    free(sg);
}

static void test_tables(void **st) {
    (void)st;
    gh_case c;
    gh_open(&c, SCHED_CASE);
    json_object *tables = gh_json(&c, "tables");
    for (size_t k = 0; k < gh_len(tables); k++) {
        json_object *t = gh_at(tables, k);
        double shift = gh_num(gh_get(t, "shift"));
        int n = (int)gh_int(gh_get(t, "N"));
        flow_scheduler s;
        schedule(&s, shift, n);
        char name[64];
        snprintf(name, sizeof name, "shift%g_n%d.timesteps", shift, n);
        gh_expect_exact(&c, name, s.timesteps, (size_t)n);
        snprintf(name, sizeof name, "shift%g_n%d.sigmas", shift, n);
        gh_expect_exact(&c, name, s.sigmas, (size_t)n + 1);
        flow_scheduler_free(&s);
    }
    /* the config's own shift (5) without an override */
    flow_scheduler s;
    schedule(&s, 0, 50);
    gh_expect_exact(&c, "shift5_n50.timesteps", s.timesteps, 50);
    flow_scheduler_free(&s);
    gh_close(&c);
}

static void test_chain(void **st) {
    (void)st;
    gh_case c;
    gh_open(&c, SCHED_CASE);
    int n = (int)gh_int(gh_json(&c, "chain.N"));
    flow_scheduler s;
    schedule(&s, gh_num(gh_json(&c, "chain.shift")), n);
    size_t cnt;
    float *x = gh_f32(&c, &cnt, "chain.i0.sample"), *prev = cvx_alloc_f32(cnt);
    flow_state *fs = flow_state_new(&s, cnt);
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "chain.i%d.sample", i);
        gh_expect_exact(&c, name, x, cnt);
        float *v = gh_f32(&c, NULL, "chain.i%d.model_output", i);
        flow_step(&s, fs, i, v, x, cnt, prev);
        snprintf(name, sizeof name, "chain.i%d.prev_sample", i);
        gh_expect_exact(&c, name, prev, cnt);
        memcpy(x, prev, sizeof(float) * cnt);
        free(v);
    }
    flow_state_free(fs);
    flow_scheduler_free(&s);
    free(x), free(prev);
    gh_close(&c);
}

static void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* the guider's prediction at step i of n as the plan makes it (window, scale, formulation) */
static void guided(const cvx_guider *g, const double win[2], int i, int n, const float *cond, const float *un,
                   size_t cnt, float *out) {
    const int both = cvx_guider_active(g) && cvx_guider_window_has(win, i, n);
    cvx_guider_apply(g, g->scale, both ? un : NULL, cond, cnt, out);
}

static void test_guider(void **st) {
    (void)st;
    gh_case c;
    gh_open(&c, SCHED_CASE);
    cvx_guider g;
    double win[2];
    ASSERT_OK(cvx_guider_load(SCHED_CASE "/guider_config.json", &g, win));   /* the e2e checkpoints' (g = 6) */
    assert_true(g.scale == 6.0 && cvx_guider_active(&g) && cvx_guider_window_has(win, 0, 50) &&
                cvx_guider_window_has(win, 49, 50));
    cvx_guider nocfg;
    ASSERT_OK(cvx_guider_load(SCHED_CASE "/guider_config_nocfg.json", &nocfg, win));   /* distilled: g = 1 */
    assert_false(cvx_guider_active(&nocfg));
    const char *scales[3] = {"6", "3.5", "1"};
    for (int k = 0; k < 3; k++) {
        g.scale = atof(scales[k]);
        int both = cvx_guider_active(&g);
        assert_int_equal(both ? 2 : 1, gh_int(gh_get(gh_get(gh_json(&c, "guider"), scales[k]), "num_conditions")));
        size_t cnt;
        float *cond = gh_f32(&c, &cnt, "cfg%s.pred_cond", scales[k]), *un = gh_f32(&c, NULL, "cfg%s.pred_uncond", scales[k]);
        float *out = cvx_alloc_f32(cnt);
        guided(&g, win, 0, 4, cond, un, cnt, out);
        char name[32];
        snprintf(name, sizeof name, "cfg%s.pred", scales[k]);
        gh_expect_exact(&c, name, out, cnt);
        /* use_original_formulation: cond + g·(cond − uncond); off at g ≈ 0 (then cond) */
        cvx_guider o = g;
        o.original = 1;
        guided(&o, win, 0, 4, cond, un, cnt, out);
        const float gf = (float)g.scale;
        for (size_t i = 0; i < cnt; i++) assert_true(out[i] == cond[i] + gf * (cond[i] - un[i]));
        o.scale = 0;
        assert_false(cvx_guider_active(&o));
        guided(&o, win, 0, 4, cond, un, cnt, out);
        assert_memory_equal(out, cond, cnt * sizeof(float));
        free(cond), free(un), free(out);
    }
    /* start / stop window (int truncation of start·N, stop·N) and the config's keys */
    char dir[] = "/tmp/cvx_hv15g_XXXXXX", p[256];
    assert_non_null(mkdtemp(dir));
    snprintf(p, sizeof p, "%s/guider_config.json", dir);
    write_text(p, "{\"_class_name\": \"ClassifierFreeGuidance\", \"guidance_scale\": 6, \"start\": 0.25, "
                  "\"stop\": 0.75, \"guidance_rescale\": 0.7, \"use_original_formulation\": true}");
    ASSERT_OK(cvx_guider_load(p, &g, win));
    assert_true(win[0] == 0.25 && win[1] == 0.75 && g.rescale == 0.7 && g.original && g.rescale_unguided);
    assert_false(cvx_guider_window_has(win, 0, 4));
    assert_true(cvx_guider_window_has(win, 1, 4) && cvx_guider_window_has(win, 2, 4));
    assert_false(cvx_guider_window_has(win, 3, 4));
    write_text(p, "{\"_class_name\": \"ClassifierFreeGuidance\", \"enabled\": false, \"guidance_scale\": 6}");
    ASSERT_OK(cvx_guider_load(p, &g, win));
    assert_false(cvx_guider_active(&g));
    const char *const bad[][2] = {
        {"{\"_class_name\": \"AdaptiveProjectedGuidance\"}", "ClassifierFreeGuidance"},
        {"{\"guidance_scale\": 6, \"adaptive_projected_guidance_momentum\": 0.5}", "adaptive_projected_guidance_momentum"},
        {"{\"start\": 1.0}", "'start'"},
        {"{\"start\": 0.5, \"stop\": 0.25}", "'stop'"},
        {"{\"guidance_rescale\": -0.5}", "guidance_rescale"},
        {"{\"guidance_scale\": 0.5}", "below 1"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        write_text(p, bad[k][0]);
        assert_int_equal(cvx_guider_load(p, &g, win), -1);
        if (!strstr(cvx_last_error(), bad[k][1])) fail_msg("%s: %s", bad[k][0], cvx_last_error());
        assert_null(strchr(cvx_last_error(), '\n'));
    }
    /* rescale_noise_cfg on a cond-only step (the guider rescales whether or not CFG ran): ratio 1,
     * φ·x + (1 − φ)·x in float32 */
    float x[5] = {0.1f, -2.5f, 3.25f, 7.0f, -0.3f}, y[5];
    cvx_guider r = {.scale = 1.0, .rescale = 0.7, .rescale_unguided = 1};
    cvx_guider_apply(&r, 1.0, NULL, x, 5, y);
    for (int i = 0; i < 5; i++) assert_true(y[i] == 0.7f * (x[i] * 1.0f) + (float)(1.0 - 0.7) * x[i]);
    unlink(p);
    rmdir(dir);
    gh_close(&c);
}

static float *randn_seeded(uint64_t seed, size_t n) {
    cvx_generator g;
    cvx_generator_seed(&g, seed);
    float *x = cvx_alloc_f32(n);
    cvx_randn(&g, x, n);
    return x;
}

static void test_noise(void **st) {
    (void)st;
    gh_case c;
    gh_open(&c, NOISE_CASE);
    static const char *small[4] = {"seed0_1", "seed2_15", "seed3_16", "seed42_1x8x3x2x3"};
    json_object *cases = gh_json(&c, "cases");
    for (int k = 0; k < 4; k++) {
        json_object *e = gh_at(cases, (size_t)k);
        size_t n = gh_numel(gh_get(e, "shape"));
        float *x = randn_seeded((uint64_t)gh_int(gh_get(e, "seed")), n);
        gh_expect_exact(&c, small[k], x, n);
        free(x);
    }
    json_object *real = gh_json(&c, "real");
    for (size_t k = 0; k < gh_len(real); k++) {
        json_object *e = gh_at(real, k);
        json_object *shape = gh_get(e, "shape");
        size_t n = gh_numel(shape);
        /* [1, 32, (121 − 1)/4 + 1, H/16, W/16] at the default size of the target */
        json_object *hw = gh_get(e, "default_height_width");
        assert_int_equal(gh_int(gh_at(shape, 2)), 31);
        assert_int_equal(gh_int(gh_at(shape, 3)), gh_int(gh_at(hw, 0)) / 16);
        assert_int_equal(gh_int(gh_at(shape, 4)), gh_int(gh_at(hw, 1)) / 16);
        int64_t seed = gh_int(gh_get(e, "seed")), ts = gh_int(gh_get(e, "target_size"));
        float *x = randn_seeded((uint64_t)seed, n);
        char name[64];
        snprintf(name, sizeof name, "real%lld_seed%lld.head", (long long)ts, (long long)seed);
        size_t hn = (size_t)gh_tensor(&c, "%s", name)->numel;
        gh_expect_exact(&c, name, x, hn);
        snprintf(name, sizeof name, "real%lld_seed%lld.mid", (long long)ts, (long long)seed);
        gh_expect_exact(&c, name, x + n / 2, hn);
        snprintf(name, sizeof name, "real%lld_seed%lld.tail", (long long)ts, (long long)seed);
        gh_expect_exact(&c, name, x + n - hn, hn);
        double sum = 0, sumsq = 0;
        for (size_t i = 0; i < n; i++) sum += x[i], sumsq += (double)x[i] * x[i];
        double rs = fabs(sum - gh_num(gh_get(e, "sum_f64"))) / fabs(gh_num(gh_get(e, "sum_f64")));
        double rq = fabs(sumsq - gh_num(gh_get(e, "sumsq_f64"))) / gh_num(gh_get(e, "sumsq_f64"));
        print_message("  real %lld: sum rel %.2g, sumsq rel %.2g (tol 1e-9)\n", (long long)ts, rs, rq);
        gh_check_true(&c, "float64 sum", rs < 1e-9);
        gh_check_true(&c, "float64 sum of squares", rq < 1e-9);
        free(x);
    }
    gh_close(&c);
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_chain),
        cmocka_unit_test(test_guider),
        cmocka_unit_test(test_noise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
