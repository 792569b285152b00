/* The flow-matching schedulers of Wan 2.1 (stage2/scheduler_flow.h) against diffusers 0.33.1:
 * tests/data/golden_wan/scheduler_unipc (timesteps and sigmas of N ∈ {50,10,7,4,1} × shift
 * {3,5} exact; chains N = 10 and 4 step by step), scheduler_euler (tables exact; one chain),
 * the e2e cases' scheduler loops (*_sched: the stored noise predictions through CFG and the
 * scheduler reproduce every step's latents and final_latents; V2V's t_start and add_noise),
 * checkpoint save / restore mid-run continuing bit for bit, and the config and state errors. */
#include "golden_harness.h"

#include "validate.h"

#include "stage2/guidance.h"
#include "stage2/scheduler_flow.h"

#define GW "tests/data/golden_wan"

/* Measured: every chain and e2e loop is bit-exact with glibc's libm (the scalar log/expm1 are
 * taken through double, correctly rounded there). Elsewhere only the 1e-6 tolerance holds. */
#ifdef __GLIBC__
#define EXPECT_BITEXACT(count) assert_int_equal((count), 0)
#else
#define EXPECT_BITEXACT(count) (void)(count)
#endif

/* Bit-exact count, max |diff| and relative L2 of one tensor; fails above `tol` (rel L2).
 * Returns the number of values that differ in their bits. */
static size_t check_close(gh_case *c, const char *what, const float *got, const float *want, size_t n, double tol) {
    size_t bad = 0;
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) bad++;
        m = fmax(m, fabs((double)got[i] - want[i]));
    }
    double e = cvx_rel_l2(got, want, n);
    print_message("  %-34s rel L2 %.3g, max |diff| %.3g, %zu/%zu values not bit-exact\n", what, e, m, bad, n);
    if (!(e <= tol)) fail_msg("%s %s: relative L2 error %.3g > %.0e", c->name, what, e, tol);
    c->checks++;
    return bad;
}

static void load_sched(flow_scheduler *s, const char *case_dir, int kind, double shift) {
    char path[512];
    snprintf(path, sizeof path, "%s/model/scheduler/scheduler_config.json", case_dir);
    ASSERT_OK(flow_scheduler_load(s, path, kind, shift));
}

/* ---------------------------------------------------------------- tables */

static void check_tables(const char *dir, int kind) {
    gh_case c;
    gh_open(&c, dir);
    json_object *tables = gh_json(&c, "tables");
    int count = 0;
    json_object_object_foreach(tables, key, val) {
        (void)val;
        int shift, n;
        assert_int_equal(sscanf(key, "shift%d_n%d", &shift, &n), 2);
        flow_scheduler s;
        load_sched(&s, c.dir, FLOW_FROM_CONFIG, shift);
        assert_int_equal((int)s.kind, kind);
        ASSERT_OK(flow_scheduler_set_timesteps(&s, n));
        char name[64];
        snprintf(name, sizeof name, "%s.sigmas", key);
        gh_expect_exact(&c, name, s.sigmas, (size_t)n + 1);
        snprintf(name, sizeof name, "%s.timesteps", key);
        const cvx_tensor *t = gh_tensor(&c, "%s", name);
        assert_int_equal(t->numel, n);
        if (kind == FLOW_UNIPC) {
            int64_t *want = malloc(sizeof(int64_t) * (size_t)n);
            for (int i = 0; i < n; i++) want[i] = gh_i64_at(t, (size_t)i);
            gh_check_exact_i64(&c, name, s.timesteps_int, want, (size_t)n);
            for (int i = 0; i < n; i++) assert_true(s.timesteps[i] == (float)want[i]);
            free(want);
        } else {
            assert_null(s.timesteps_int);
            gh_expect_exact(&c, name, s.timesteps, (size_t)n);
        }
        /* the float64 grid rounds to the f32 table */
        for (int i = 0; i < n; i++) assert_true((float)s.sigmas_f64[i] == s.sigmas[i]);
        flow_scheduler_free(&s);
        count++;
    }
    assert_true(count >= 8);
    gh_close(&c);
}

static void test_unipc_tables(void **state) {
    (void)state;
    check_tables(GW "/scheduler_unipc", FLOW_UNIPC);
}

/* Also: σ_min shifted twice (README §4: N = 4, shift 3 → 1, 0.8577, 0.6022, 0.00893, 0). */
static void test_euler_tables(void **state) {
    (void)state;
    check_tables(GW "/scheduler_euler", FLOW_EULER);
    flow_scheduler s;
    load_sched(&s, GW "/scheduler_euler", FLOW_FROM_CONFIG, 0);
    ASSERT_OK(flow_scheduler_set_timesteps(&s, 4));
    assert_true(fabs(s.sigmas[3] - 0.00893) < 1e-5 && fabs(s.sigmas[1] - 0.8577) < 1e-4);
    flow_scheduler_free(&s);
}

/* ---------------------------------------------------------------- step chains */

/* Run one golden chain free: the first sample and every model output from the file, our own
 * prev_sample fed back. Compares x0_pred, corrected_sample (UniPC) and prev_sample per step. */
static void run_chain(gh_case *c, const char *prefix, int kind, int n_steps, double shift, json_object *steps,
                      double tol, size_t *not_exact) {
    flow_scheduler s;
    load_sched(&s, c->dir, FLOW_FROM_CONFIG, shift);
    ASSERT_OK(flow_scheduler_set_timesteps(&s, n_steps));
    size_t n;
    float *x = gh_f32(c, &n, "%s_i0.sample", prefix);
    float *prev = cvx_alloc_f32(n);
    flow_state *st = flow_state_new(&s, n);
    assert_null(flow_x0(st));
    for (int i = 0; i < n_steps; i++) {
        float *v = gh_f32(c, NULL, "%s_i%d.model_output", prefix, i);
        float *want_prev = gh_f32(c, NULL, "%s_i%d.prev_sample", prefix, i);
        char what[96];
        flow_step(&s, st, i, v, x, n, prev);
        if (kind == FLOW_UNIPC) {
            float *want_x0 = gh_f32(c, NULL, "%s_i%d.x0_pred", prefix, i);
            float *want_cs = gh_f32(c, NULL, "%s_i%d.corrected_sample", prefix, i);
            snprintf(what, sizeof what, "%s_i%d.x0_pred", prefix, i);
            *not_exact += check_close(c, what, flow_x0(st), want_x0, n, tol);
            snprintf(what, sizeof what, "%s_i%d.corrected_sample", prefix, i);
            *not_exact += check_close(c, what, flow_corrected_sample(&s, st), want_cs, n, tol);
            if (steps) {
                json_object *g = gh_at(steps, (size_t)i);
                assert_int_equal(flow_last_order(&s, st), gh_int(gh_get(g, "predictor_order")));
                assert_int_equal(s.timesteps_int[i], gh_int(gh_get(g, "timestep")));
                /* no corrector: the corrected sample is the input itself */
                if (!json_object_get_boolean(gh_get(g, "corrector_applied")))
                    assert_memory_equal(flow_corrected_sample(&s, st), x, n * sizeof(float));
            }
            free(want_x0);
            free(want_cs);
        }
        if (kind == FLOW_EULER) {   /* the preview estimate x − σ_i·v; no corrector */
            assert_null(flow_corrected_sample(&s, st));
            for (size_t j = 0; j < n; j++) assert_true(flow_x0(st)[j] == x[j] - s.sigmas[i] * v[j]);
        }
        snprintf(what, sizeof what, "%s_i%d.prev_sample", prefix, i);
        *not_exact += check_close(c, what, prev, want_prev, n, tol);
        if (i == n_steps - 1 && kind == FLOW_UNIPC)   /* the last step returns x0 itself */
            assert_memory_equal(prev, flow_x0(st), n * sizeof(float));
        memcpy(x, prev, n * sizeof(float));
        free(v);
        free(want_prev);
    }
    flow_state_free(st);
    free(x);
    free(prev);
    flow_scheduler_free(&s);
}

static void test_unipc_chains(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, GW "/scheduler_unipc");
    json_object *chains = gh_json(&c, "chains");
    size_t not_exact = 0;
    assert_int_equal(gh_len(chains), 2);
    for (size_t k = 0; k < gh_len(chains); k++) {
        json_object *ch = gh_at(chains, k);
        run_chain(&c, gh_str(gh_get(ch, "chain")), FLOW_UNIPC, (int)gh_int(gh_get(ch, "num_inference_steps")),
                  gh_num(gh_get(ch, "flow_shift")), gh_get(ch, "steps"), 1e-6, &not_exact);
    }
    print_message("  UniPC chains: %zu values not bit-exact in all\n", not_exact);
    EXPECT_BITEXACT(not_exact);
    gh_close(&c);
}

static void test_euler_chain(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, GW "/scheduler_euler");
    size_t not_exact = 0;
    run_chain(&c, "chain_n4", FLOW_EULER, 4, 3.0, NULL, 1e-7, &not_exact);
    assert_int_equal(not_exact, 0);   /* x + dt·v: nothing to round differently */
    gh_close(&c);
}

/* ---------------------------------------------------------------- end-to-end loops */

/* The e2e case's loop from the stored transformer outputs: CFG (when guidance > 1) then the
 * scheduler, from initial_latents (T2V / I2V) or add_noise at t_start (V2V). */
static void run_e2e(const char *dir) {
    gh_case c;
    gh_open(&c, dir);
    json_object *call = gh_json(&c, "call");
    const int N = (int)gh_int(gh_get(call, "num_inference_steps"));
    const double g = gh_num(gh_get(call, "guidance_scale"));
    flow_scheduler s;
    load_sched(&s, c.dir, FLOW_FROM_CONFIG, 0);
    ASSERT_OK(flow_scheduler_set_timesteps(&s, N));
    json_object *ts = NULL;
    int v2v = json_object_object_get_ex(c.cj.root, "all_timesteps", &ts);
    if (!v2v) ts = gh_json(&c, "timesteps");
    assert_int_equal(gh_len(ts), N);
    for (int i = 0; i < N; i++) {   /* UniPC: int64; Euler: fractional float32 */
        if (s.timesteps_int) assert_int_equal(s.timesteps_int[i], gh_int(gh_at(ts, (size_t)i)));
        assert_true(s.timesteps[i] == (float)gh_num(gh_at(ts, (size_t)i)));
    }
    json_object *sig = gh_json(&c, "sigmas");
    for (int i = 0; i <= N; i++) assert_true(s.sigmas[i] == (float)gh_num(gh_at(sig, (size_t)i)));

    size_t n;
    float *x;
    int t_start = 0;
    flow_state *st;
    if (v2v) {
        t_start = flow_v2v_t_start(N, gh_num(gh_get(call, "strength")));
        assert_int_equal(t_start, gh_int(gh_json(&c, "t_start")));
        assert_true(s.sigmas[t_start] == (float)gh_num(gh_json(&c, "noise_sigma")));
        float *init = gh_f32(&c, &n, "init_latents_normalised"), *noise = gh_f32(&c, NULL, "noise");
        x = cvx_alloc_f32(n);
        flow_add_noise(&s, t_start, init, noise, n, x);
        gh_expect_exact(&c, "noisy_initial_latents", x, n);
        flow_add_noise(&s, t_start, init, noise, n, init);   /* in place */
        assert_memory_equal(init, x, n * sizeof(float));
        free(init);
        free(noise);
        st = flow_state_new(&s, n);
        ASSERT_OK(flow_begin(&s, st, t_start));
    } else {
        x = gh_f32(&c, &n, "initial_latents");
        st = flow_state_new(&s, n);
    }
    float *v = cvx_alloc_f32(n), *prev = cvx_alloc_f32(n);
    size_t not_exact = 0;
    for (int i = t_start; i < N; i++) {
        int k = i - t_start;
        float *cond = gh_f32(&c, NULL, "step%d.noise_pred_cond", k);
        float *want_v = gh_f32(&c, NULL, "step%d.noise_pred", k);
        if (g > 1.0) {
            float *uncond = gh_f32(&c, NULL, "step%d.noise_pred_uncond", k);
            cvx_cfg_combine(uncond, cond, g, n, v);
            free(uncond);
        } else {
            assert_null(gh_tensor_opt(&c, "step%d.noise_pred_uncond", k));
            memcpy(v, cond, n * sizeof(float));
        }
        char what[64];
        snprintf(what, sizeof what, "step%d.noise_pred", k);
        gh_expect_exact(&c, what, v, n);   /* CFG combine bit for bit */
        flow_step(&s, st, i, want_v, x, n, prev);
        float *want = gh_f32(&c, NULL, "step%d.latents_after", k);
        snprintf(what, sizeof what, "step%d.latents_after (t=%g)", k, (double)s.timesteps[i]);
        not_exact += check_close(&c, what, prev, want, n, 1e-6);
        memcpy(x, prev, n * sizeof(float));
        free(cond);
        free(want_v);
        free(want);
    }
    float *fin = gh_f32(&c, NULL, "final_latents");
    not_exact += check_close(&c, "final_latents", x, fin, n, 1e-6);
    print_message("  %s: %zu values not bit-exact in all\n", c.name, not_exact);
    EXPECT_BITEXACT(not_exact);
    free(fin);
    free(v);
    free(prev);
    free(x);
    flow_state_free(st);
    flow_scheduler_free(&s);
    gh_close(&c);
}

static void test_e2e_t2v(void **state) {
    (void)state;
    run_e2e(GW "/e2e_t2v_1.3b_sched");
    run_e2e(GW "/e2e_t2v_14b_sched");    /* flow_shift 5 */
    run_e2e(GW "/e2e_t2v_nocfg_sched");  /* guidance 1: the cond output alone */
    run_e2e(GW "/e2e_i2v_sched");
}

static void test_e2e_v2v(void **state) {
    (void)state;
    run_e2e(GW "/e2e_v2v_sched");
}

/* ---------------------------------------------------------------- checkpoint / resume */

/* A deterministic stand-in for the transformer's output at step i. */
static void fake_velocity(int i, const float *x, size_t n, float *v) {
    for (size_t j = 0; j < n; j++) v[j] = 0.9f * x[j] + sinf(0.37f * (float)j + 1.3f * (float)i);
}

static void fake_latents(size_t n, float *x) {
    for (size_t j = 0; j < n; j++) x[j] = cosf(0.11f * (float)j * (float)j + 0.5f);
}

/* Run steps from st->step_index to N−1 from x; every step's output into ref[i·n ..]. */
static void run_to_end(const flow_scheduler *s, flow_state *st, float *x, size_t n, float *ref) {
    float *v = cvx_alloc_f32(n);
    for (int i = st->step_index; i < s->num_inference_steps; i++) {
        fake_velocity(i, x, n, v);
        flow_step(s, st, i, v, x, n, ref + (size_t)i * n);
        memcpy(x, ref + (size_t)i * n, n * sizeof(float));
    }
    free(v);
}

/* Stop after k steps (every k), save the state next to the latents, restore into a freshly
 * built scheduler and state, continue: every later step equal bit for bit to the unbroken run. */
static void check_resume(const char *case_dir, double shift, int N, int t_start) {
    const int64_t shape[5] = {1, 4, 2, 3, 5};   /* [B, C, F, H, W] */
    const size_t n = 120;
    flow_scheduler s;
    load_sched(&s, case_dir, FLOW_FROM_CONFIG, shift);
    ASSERT_OK(flow_scheduler_set_timesteps(&s, N));
    float *x = cvx_alloc_f32(n), *ref = cvx_alloc_f32((size_t)N * n), *out = cvx_alloc_f32((size_t)N * n);
    float *v = cvx_alloc_f32(n);
    flow_state *st = flow_state_new(&s, n);
    ASSERT_OK(flow_begin(&s, st, t_start));
    fake_latents(n, x);
    run_to_end(&s, st, x, n, ref);
    float *x0_ref = cvx_alloc_f32(n);
    memcpy(x0_ref, flow_x0(st), n * sizeof(float));
    flow_state_free(st);

    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    for (int k = 0; k < N - t_start; k++) {
        st = flow_state_new(&s, n);
        ASSERT_OK(flow_begin(&s, st, t_start));
        fake_latents(n, x);
        for (int i = t_start; i < t_start + k; i++) {
            fake_velocity(i, x, n, v);
            flow_step(&s, st, i, v, x, n, out);
            memcpy(x, out, n * sizeof(float));
        }
        cvx_st_writer *w = cvx_stw_new();
        ASSERT_OK(cvx_stw_add(w, "latents", CVX_F32, 5, shape, x));
        ASSERT_OK(flow_state_save(&s, st, w, 5, shape));
        ASSERT_OK(cvx_stw_write(w, path));
        cvx_stw_free(w);
        flow_state_free(st);

        flow_scheduler s2;   /* a new process: everything rebuilt from the config */
        load_sched(&s2, case_dir, FLOW_FROM_CONFIG, shift);
        ASSERT_OK(flow_scheduler_set_timesteps(&s2, N));
        flow_state *st2 = flow_state_new(&s2, n);
        cvx_safetensors *f = tu_open(path);
        ASSERT_OK(flow_state_load(&s2, st2, f, path));
        assert_int_equal(st2->step_index, t_start + k);
        cvx_tensor_to_f32(cvx_st_find(f, "latents"), x);
        cvx_st_close(f);
        run_to_end(&s2, st2, x, n, out);
        for (int i = t_start + k; i < N; i++)
            if (memcmp(out + (size_t)i * n, ref + (size_t)i * n, n * sizeof(float)))
                fail_msg("%s N=%d t_start=%d: resumed after %d steps, step %d differs", case_dir, N, t_start, k, i);
        assert_memory_equal(flow_x0(st2), x0_ref, n * sizeof(float));
        flow_state_free(st2);
        flow_scheduler_free(&s2);
    }
    print_message("  %s N=%d t_start=%d: resumed after each of %d steps, bit-identical\n", case_dir, N, t_start,
                  N - t_start);
    tu_rmrf(dir);
    free(x);
    free(ref);
    free(out);
    free(v);
    free(x0_ref);
    flow_scheduler_free(&s);
}

static void test_resume(void **state) {
    (void)state;
    check_resume(GW "/scheduler_unipc", 3.0, 10, 0);
    check_resume(GW "/scheduler_unipc", 5.0, 7, 3);   /* V2V-style start */
    check_resume(GW "/scheduler_euler", 3.0, 6, 0);
    check_resume(GW "/scheduler_euler", 3.0, 6, 2);
}

/* Checkpoints of another schedule, scheduler or state are refused with a message. */
static void test_resume_errors(void **state) {
    (void)state;
    const int64_t shape[1] = {8};
    const size_t n = 8;
    float x[8], v[8], prev[8];
    flow_scheduler s, e;
    load_sched(&s, GW "/scheduler_unipc", FLOW_FROM_CONFIG, 0);
    load_sched(&e, GW "/scheduler_euler", FLOW_FROM_CONFIG, 0);
    ASSERT_OK(flow_scheduler_set_timesteps(&s, 5));
    ASSERT_OK(flow_scheduler_set_timesteps(&e, 5));
    flow_state *st = flow_state_new(&s, n), *se = flow_state_new(&e, n);
    fake_latents(n, x);
    for (int i = 0; i < 2; i++) {
        fake_velocity(i, x, n, v);
        flow_step(&s, st, i, v, x, n, prev);
        memcpy(x, prev, sizeof x);
    }
    char dir[64], path[128], part[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    snprintf(part, sizeof part, "%s/part.safetensors", dir);
    cvx_st_writer *w = cvx_stw_new();
    ASSERT_OK(flow_state_save(&s, st, w, 1, shape));
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);
    w = cvx_stw_new();   /* a UniPC state without its last_sample */
    int64_t ns = 6, nv = 8;
    int64_t vals[8] = {FLOW_UNIPC, 5, 0, 2, 2, 2, 1, 2};
    ASSERT_OK(cvx_stw_add(w, "scheduler.state", CVX_I64, 1, &nv, vals));
    ASSERT_OK(cvx_stw_add(w, "scheduler.sigmas", CVX_F32, 1, &ns, s.sigmas));
    ASSERT_OK(cvx_stw_add(w, "scheduler.model_outputs.0", CVX_F32, 1, shape, x));
    ASSERT_OK(cvx_stw_add(w, "scheduler.model_outputs.1", CVX_F32, 1, shape, x));
    ASSERT_OK(cvx_stw_write(w, part));
    cvx_stw_free(w);
    cvx_safetensors *f = tu_open(path), *fp = tu_open(part);

    flow_state *fresh = flow_state_new(&s, n);
    ASSERT_OK(flow_state_load(&s, fresh, f, path));
    assert_int_equal(fresh->step_index, 2);
    assert_memory_equal(flow_x0(fresh), flow_x0(st), sizeof x);
    assert_int_equal(flow_state_load(&e, se, f, path), -1);          /* UniPC state into Euler */
    assert_non_null(strstr(cvx_last_error(), "UniPCMultistepScheduler"));
    assert_int_equal(flow_state_load(&s, fresh, fp, part), -1);      /* last_sample missing */
    assert_non_null(strstr(cvx_last_error(), "'scheduler.last_sample'"));
    flow_scheduler s3;                                                /* another shift */
    load_sched(&s3, GW "/scheduler_unipc", FLOW_FROM_CONFIG, 5.0);
    ASSERT_OK(flow_scheduler_set_timesteps(&s3, 5));
    assert_int_equal(flow_state_load(&s3, fresh, f, path), -1);
    assert_non_null(strstr(cvx_last_error(), "scheduler.sigmas"));
    ASSERT_OK(flow_scheduler_set_timesteps(&s3, 6));                  /* another step count */
    assert_int_equal(flow_state_load(&s3, fresh, f, path), -1);
    assert_non_null(strstr(cvx_last_error(), "6 steps"));
    flow_scheduler_free(&s3);
    flow_state *small = flow_state_new(&s, 4);                        /* another latent size */
    assert_int_equal(flow_state_load(&s, small, f, path), -1);
    assert_non_null(strstr(cvx_last_error(), "4 elements"));
    flow_state_free(small);
    cvx_st_close(f);
    cvx_st_close(fp);

    w = cvx_stw_new();   /* inconsistent counters: steps done but no last sample */
    int64_t bad[8] = {FLOW_UNIPC, 5, 0, 2, 2, 2, 0, 2};
    ASSERT_OK(cvx_stw_add(w, "scheduler.state", CVX_I64, 1, &nv, bad));
    ASSERT_OK(cvx_stw_write(w, part));
    cvx_stw_free(w);
    fp = tu_open(part);
    assert_int_equal(flow_state_load(&s, fresh, fp, part), -1);
    assert_non_null(strstr(cvx_last_error(), "inconsistent"));
    cvx_st_close(fp);

    tu_rmrf(dir);
    flow_state_free(fresh);
    flow_state_free(st);
    flow_state_free(se);
    flow_scheduler_free(&s);
    flow_scheduler_free(&e);
}

/* ---------------------------------------------------------------- config, start and options */

static int init_json(flow_scheduler *s, const char *json, int kind) {
    cvx_config c;
    if (cvx_config_parse(&c, json, strlen(json), "test/scheduler_config.json")) return -1;
    int rc = flow_scheduler_init(s, &c, kind, 0);
    cvx_config_free(&c);
    return rc;
}

#define UNIPC_FLOW "{\"_class_name\":\"UniPCMultistepScheduler\",\"prediction_type\":\"flow_prediction\"," \
                   "\"use_flow_sigmas\":true,\"flow_shift\":3.0"

static void expect_error(const char *json, int kind, const char *needle) {
    flow_scheduler s;
    assert_int_equal(init_json(&s, json, kind), -1);
    print_message("  %s\n", cvx_last_error());
    if (!strstr(cvx_last_error(), needle)) fail_msg("error '%s' does not name '%s'", cvx_last_error(), needle);
    flow_scheduler_free(&s);
}

static void test_config(void **state) {
    (void)state;
    expect_error("{\"_class_name\":\"UniPCMultistepScheduler\"}", FLOW_FROM_CONFIG, "prediction_type");
    expect_error("{\"_class_name\":\"DDIMScheduler\"}", FLOW_FROM_CONFIG, "_class_name");
    expect_error("{}", FLOW_FROM_CONFIG, "_class_name");
    expect_error(UNIPC_FLOW ",\"solver_order\":3}", FLOW_FROM_CONFIG, "solver_order");
    expect_error(UNIPC_FLOW ",\"use_karras_sigmas\":true}", FLOW_FROM_CONFIG, "use_karras_sigmas");
    expect_error(UNIPC_FLOW ",\"thresholding\":true}", FLOW_FROM_CONFIG, "thresholding");
    expect_error(UNIPC_FLOW ",\"predict_x0\":false}", FLOW_FROM_CONFIG, "predict_x0");
    expect_error(UNIPC_FLOW ",\"solver_type\":\"bh3\"}", FLOW_FROM_CONFIG, "solver_type");
    expect_error(UNIPC_FLOW ",\"lower_order_final\":false}", FLOW_FROM_CONFIG, "lower_order_final");
    expect_error(UNIPC_FLOW ",\"final_sigmas_type\":\"max\"}", FLOW_FROM_CONFIG, "final_sigmas_type");
    expect_error(UNIPC_FLOW ",\"flow_shift\":-1}", FLOW_FROM_CONFIG, "flow_shift");
    expect_error("{\"_class_name\":\"FlowMatchEulerDiscreteScheduler\",\"use_dynamic_shifting\":true}", FLOW_FROM_CONFIG,
                 "use_dynamic_shifting");
    expect_error("{\"_class_name\":\"FlowMatchEulerDiscreteScheduler\",\"shift_terminal\":0.1}", FLOW_FROM_CONFIG,
                 "shift_terminal");
    expect_error("{\"_class_name\":\"FlowMatchEulerDiscreteScheduler\",\"num_train_timesteps\":1}", FLOW_FROM_CONFIG,
                 "num_train_timesteps");

    assert_int_equal(flow_kind_find("unipc"), FLOW_UNIPC);
    assert_int_equal(flow_kind_find("FlowMatchEulerDiscreteScheduler"), FLOW_EULER);
    assert_int_equal(flow_kind_find("ddim"), -1);
    assert_string_equal(flow_kind_name(FLOW_EULER), "euler");
    assert_string_equal(flow_kind_class(FLOW_UNIPC), "UniPCMultistepScheduler");

    /* kind override: Euler built from the Wan UniPC config takes its flow_shift (3), and UniPC
     * from an Euler config its shift with the flow defaults: the same schedules as natively */
    flow_scheduler a, b;
    load_sched(&a, GW "/scheduler_unipc", FLOW_EULER, 0);
    load_sched(&b, GW "/scheduler_euler", FLOW_FROM_CONFIG, 0);
    assert_true(a.kind == FLOW_EULER && a.shift == 3.0);
    ASSERT_OK(flow_scheduler_set_timesteps(&a, 7));
    ASSERT_OK(flow_scheduler_set_timesteps(&b, 7));
    assert_memory_equal(a.sigmas, b.sigmas, 8 * sizeof(float));
    flow_scheduler_free(&a);
    flow_scheduler_free(&b);
    load_sched(&a, GW "/scheduler_euler", FLOW_UNIPC, 0);
    load_sched(&b, GW "/scheduler_unipc", FLOW_FROM_CONFIG, 0);
    assert_true(a.kind == FLOW_UNIPC && a.shift == 3.0 && a.solver_order == 2);
    ASSERT_OK(flow_scheduler_set_timesteps(&a, 7));
    ASSERT_OK(flow_scheduler_set_timesteps(&b, 7));
    assert_memory_equal(a.sigmas, b.sigmas, 8 * sizeof(float));
    assert_memory_equal(a.timesteps_int, b.timesteps_int, 7 * sizeof(int64_t));
    flow_scheduler_free(&a);

    /* step counts: 0 refused; 2000 steps at shift 3 repeat timestep 999 at steps 0 and 1
     * (upstream would start at step 1 and index past its sigmas) */
    assert_int_equal(flow_scheduler_set_timesteps(&b, 0), -1);
    assert_int_equal(flow_scheduler_set_timesteps(&b, 2000), -1);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "repeats"));
    ASSERT_OK(flow_scheduler_set_timesteps(&b, 50));
    flow_state *st = flow_state_new(&b, 4);
    assert_int_equal(flow_begin(&b, st, 50), -1);
    assert_int_equal(flow_begin(&b, st, -1), -1);
    ASSERT_OK(flow_begin(&b, st, 49));
    flow_state_free(st);
    flow_scheduler_free(&b);

    /* t_start = N − min(int(N·strength), N): Python's truncation of the float product */
    assert_int_equal(flow_v2v_t_start(5, 0.6), 2);
    assert_int_equal(flow_v2v_t_start(100, 0.29), 72);   /* 100·0.29 = 28.999999999999996 */
    assert_int_equal(flow_v2v_t_start(10, 1.0), 0);
    assert_int_equal(flow_v2v_t_start(10, 1.5), 0);
    assert_int_equal(flow_v2v_t_start(10, 0.05), 10);
}

/* disable_corrector skips UniC at the listed step (+1), final_sigmas_type sigma_min repeats the
 * last sigma (the last step then keeps x), bh1 changes the coefficients, solver_order 1 gives
 * first-order steps only. */
static void test_options(void **state) {
    (void)state;
    const size_t n = 16;
    float x[16], v[16], p_ref[16], p[16];
    flow_scheduler ref, s;
    ASSERT_OK(init_json(&ref, UNIPC_FLOW "}", FLOW_FROM_CONFIG));
    ASSERT_OK(flow_scheduler_set_timesteps(&ref, 6));

    ASSERT_OK(init_json(&s, UNIPC_FLOW ",\"disable_corrector\":[1]}", FLOW_FROM_CONFIG));
    ASSERT_OK(flow_scheduler_set_timesteps(&s, 6));
    flow_state *a = flow_state_new(&ref, n), *b = flow_state_new(&s, n);
    fake_latents(n, x);
    for (int i = 0; i < 3; i++) {
        fake_velocity(i, x, n, v);
        flow_step(&ref, a, i, v, x, n, p_ref);
        flow_step(&s, b, i, v, x, n, p);
        if (i == 2) {   /* corrector of step 2 (disable_corrector lists step − 1) skipped */
            assert_memory_equal(flow_corrected_sample(&s, b), x, sizeof x);
            assert_memory_not_equal(flow_corrected_sample(&ref, a), x, sizeof x);
        } else {
            assert_memory_equal(p, p_ref, sizeof p);
        }
        memcpy(x, p_ref, sizeof x);   /* both continue from the reference */
    }
    flow_state_free(a);
    flow_state_free(b);
    flow_scheduler_free(&s);

    ASSERT_OK(init_json(&s, UNIPC_FLOW ",\"final_sigmas_type\":\"sigma_min\",\"lower_order_final\":false}",
                        FLOW_FROM_CONFIG));
    ASSERT_OK(flow_scheduler_set_timesteps(&s, 6));
    assert_true(s.sigmas[6] == s.sigmas[5] && s.sigmas[5] > 0);
    b = flow_state_new(&s, n);
    fake_latents(n, x);
    for (int i = 0; i < 6; i++) {
        fake_velocity(i, x, n, v);
        flow_step(&s, b, i, v, x, n, p);
        if (i == 5) {
            assert_int_equal(flow_last_order(&s, b), 2);   /* no lower order at the end */
            assert_memory_equal(p, flow_corrected_sample(&s, b), sizeof p);   /* h = 0: x kept */
        }
        memcpy(x, p, sizeof x);
    }
    assert_int_equal(cvx_check_finite(x, n, "x"), 0);
    flow_state_free(b);
    flow_scheduler_free(&s);

    ASSERT_OK(init_json(&s, UNIPC_FLOW ",\"solver_order\":1,\"solver_type\":\"bh1\"}", FLOW_FROM_CONFIG));
    ASSERT_OK(flow_scheduler_set_timesteps(&s, 6));
    a = flow_state_new(&ref, n);
    b = flow_state_new(&s, n);
    fake_latents(n, x);
    for (int i = 0; i < 3; i++) {
        fake_velocity(i, x, n, v);
        flow_step(&ref, a, i, v, x, n, p_ref);
        flow_step(&s, b, i, v, x, n, p);
        assert_int_equal(flow_last_order(&s, b), 1);
        if (i == 0) assert_memory_equal(p, p_ref, sizeof p);   /* first order, no B(h) term yet */
        else assert_memory_not_equal(p, p_ref, sizeof p);
        memcpy(x, p_ref, sizeof x);
    }
    flow_state_free(a);
    flow_state_free(b);
    flow_scheduler_free(&s);
    flow_scheduler_free(&ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unipc_tables), cmocka_unit_test(test_euler_tables), cmocka_unit_test(test_unipc_chains),
        cmocka_unit_test(test_euler_chain),  cmocka_unit_test(test_e2e_t2v),      cmocka_unit_test(test_e2e_v2v),
        cmocka_unit_test(test_resume),       cmocka_unit_test(test_resume_errors), cmocka_unit_test(test_config),
        cmocka_unit_test(test_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
