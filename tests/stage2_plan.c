/* The per-step plan (stage2/plan.h) through the sampler, on a fake two-expert denoiser (a
 * deterministic toy transformer of 3 blocks whose weights differ per expert):
 *   - a boundary plan (Wan 2.2 A14B: expert 0 while t >= boundary, expert 1 below, each with its
 *     own guidance): the experts are acquired in plan order, one resident at a time, prepare and
 *     set_sp re-run after a switch, each step runs the plan's expert;
 *   - stop + resume before, at and after the switch gives the uninterrupted run's bits (DDIM and
 *     DPM, without a cache and with TeaCache and FBCache, whose state resets at the switch);
 *   - a checkpoint of another plan (another boundary) is refused naming the plan;
 *   - per-token timesteps reach the denoiser as t_scale[k]·t; a step without guidance (scale 1)
 *     takes the conditional branch; guidance rescale as diffusers' rescale_noise_cfg;
 *   - explicit sigmas (HunyuanVideo-1.5's linspace(1, 0, N + 1)[:-1] through the Euler scheduler)
 *     give upstream's timesteps and sigmas bit for bit (tests/data/plan_hv15_scheduler: the
 *     golden_hv15 scheduler tables, shifts 5, 7, 9 × N 1, 4, 8, 20, 50); DDIM refuses them. */
#include "testutil.h"

#include <math.h>

#include "stage2/cache.h"
#include "stage2/plan.h"
#include "stage2/sampler.h"
#include "stage2/scheduler.h"
#include "stage2/scheduler_flow.h"

#define CH 4
#define FR 2
#define HT 3
#define WD 4
#define N_TOK (FR * HT * WD)   /* tokens: one per latent pixel, CH wide */
#define LAYERS 3
#define NUMEL (FR * CH * HT * WD)
#define STEPS 6

/* ---- the fake transformer: h = x + text + 0.01·t; per block h = h·a + b (a, b per expert and block) ---- */
typedef struct {
    int expert, prepared, sp_set;
    int *log;                 /* the expert of every forward (embed or forward), in order */
    int *n_log;
    const float *last_t_tokens;
    size_t last_n_t;
    float t_tok_seen[N_TOK];
} fake;

static float blk_a(int e, int l) { return 0.9f - 0.05f * (float)l - 0.1f * (float)e; }
static float blk_b(int e, int l) { return 0.01f * (float)(l + 1) * (e ? -1.0f : 1.0f); }

static fake *fk(cvx_denoiser *d) { return d->priv; }

static int f_prepare(cvx_denoiser *d, int f, int h, int w) {
    d->F = f, d->H = h, d->W = w;
    d->n_latent = d->n_out = (size_t)f * CH * h * w;
    fk(d)->prepared++;
    return 0;
}

typedef struct {
    float h[N_TOK * CH], e[1];
} fake_fwd;

static int f_embed(cvx_denoiser *d, const cvx_denoise_input *in, cvx_fwd *f) {
    fake *p = fk(d);
    p->log[(*p->n_log)++] = p->expert;
    p->last_t_tokens = in->t_tokens, p->last_n_t = in->n_t;
    if (in->t_tokens) memcpy(p->t_tok_seen, in->t_tokens, sizeof(float) * in->n_t);
    const cvx_text_cond *c = in->cond;
    fake_fwd *s = cvx_malloc(sizeof *s);
    for (int i = 0; i < N_TOK * CH; i++) {
        const float tt = in->t_tokens ? in->t_tokens[i / CH] : (float)in->t;
        s->h[i] = in->x[i] + c->text[i % c->L] + 0.01f * tt;
    }
    s->e[0] = (float)in->t;
    *f = (cvx_fwd){.S = N_TOK, .L = 0, .N = N_TOK, .D = CH, .E = 1, .h = s->h, .emb = s->e, .row0 = 0,
                   .nrows = N_TOK, .impl = s};
    return 0;
}

static void f_blocks(cvx_denoiser *d, cvx_fwd *f, int first, int count) {
    for (int l = first; l < first + count; l++)
        for (int i = 0; i < N_TOK * CH; i++) f->h[i] = f->h[i] * blk_a(fk(d)->expert, l) + blk_b(fk(d)->expert, l);
}

static void f_finalize(cvx_denoiser *d, cvx_fwd *f, float *out) {
    (void)d;
    for (int i = 0; i < N_TOK * CH; i++) out[i] = 0.5f * f->h[i];
    free(f->impl);
    f->impl = NULL;
}

static void f_abort(cvx_denoiser *d, cvx_fwd *f) {
    (void)d;
    free(f->impl);
    f->impl = NULL;
}

static int f_forward(cvx_denoiser *d, const cvx_denoise_input *in, float *out) {
    cvx_fwd f;
    if (f_embed(d, in, &f)) return -1;
    f_blocks(d, &f, 0, LAYERS);
    f_finalize(d, &f, out);
    return 0;
}

static int f_set_sp(cvx_denoiser *d, struct cvx_dist *sp) {
    fk(d)->sp_set = sp != NULL;
    return 0;
}
static void f_comm(cvx_denoiser *d, double *s, double *b) { (void)d, *s = 0, *b = 0; }

static const cvx_denoiser_type fake_type = {.name = "fake expert", .prepare = f_prepare, .forward = f_forward,
                                            .embed = f_embed, .blocks = f_blocks, .finalize = f_finalize,
                                            .abort = f_abort, .set_sp = f_set_sp, .comm = f_comm};

/* ---- the provider: two experts, one resident at a time ---- */
typedef struct {
    fake st[2];
    cvx_denoiser d[2];
    int resident;             /* -1: none */
    int acquired[8], n_acq;   /* the order of acquisitions */
    int log[4 * STEPS], n_log;
} two;

static int two_acquire(cvx_expert_provider *p, int i, cvx_denoiser **out) {
    two *t = p->user;
    assert_int_equal(t->resident, -1);   /* the previous one released first */
    t->resident = i;
    t->acquired[t->n_acq++] = i;
    t->st[i].prepared = 0;
    *out = &t->d[i];
    return 0;
}

static void two_release(cvx_expert_provider *p, int i) {
    two *t = p->user;
    assert_int_equal(t->resident, i);
    assert_int_equal(t->st[i].sp_set, 0);
    t->resident = -1;
}

static void two_init(two *t, cvx_expert_provider *p) {
    memset(t, 0, sizeof *t);
    t->resident = -1;
    for (int e = 0; e < 2; e++) {
        t->st[e] = (fake){.expert = e, .log = t->log, .n_log = &t->n_log};
        t->d[e] = (cvx_denoiser){.type = &fake_type, .priv = &t->st[e], .num_layers = LAYERS};
    }
    *p = (cvx_expert_provider){.n = 2, .acquire = two_acquire, .release = two_release, .user = t};
}

/* ---- one run ---- */
typedef struct {
    const char *sched;        /* "ddim" / "dpm" */
    int cache_kind;
    double boundary;          /* the switch: expert 1 below this timestep */
} setup;

static const float TEXT_NEG[3] = {0.1f, -0.2f, 0.05f}, TEXT_POS[3] = {0.3f, 0.25f, -0.15f};

static int run(const setup *su, const cvx_checkpointing *ck, float *lat, two *t, cvx_sample_result *res) {
    cvx_scheduler s;
    ASSERT_OK(cvx_scheduler_load(&s, "models/cogvideox-tiny-random/scheduler/scheduler_config.json",
                                 cvx_scheduler_find(su->sched)));
    cvx_loop_request r = {.num_inference_steps = STEPS, .guidance_scale = 5.0, .seed = 7,
                           .cache_threshold = su->cache_kind ? 0.5 : 0};
    cvx_loop_params lp = {.req = &r, .cache_kind = su->cache_kind, .teacache_coefficients = {0, 0, 0, 1, 0}};
    cvx_latent_shape sh = {.frames = FR, .channels = CH, .height = HT, .width = WD, .numel = NUMEL};
    cvx_expert_provider prov;
    two_init(t, &prov);
    cvx_sample_plan plan;
    const cvx_guider g0 = {.scale = 5.0}, g1 = {.scale = 3.0};
    cvx_plan_init(&plan, STEPS, &g0, &prov);
    ASSERT_OK(cvx_scheduler_set_timesteps(&s, STEPS));
    cvx_plan_switch_below(&plan, s.timesteps, su->boundary, 1, &g1);
    const cvx_text_cond neg = {.text = TEXT_NEG, .L = 3}, pos = {.text = TEXT_POS, .L = 3};
    int rc = cvx_sample_loop(&plan, &s, &lp, &sh, (const void *const[2]){&neg, &pos}, ck, NULL, NULL, lat, res);
    assert_int_equal(t->resident, -1);   /* released at the end, also after a failure */
    cvx_plan_free(&plan);
    cvx_scheduler_free(&s);
    return rc;
}

static void check_plan(const char *sched, int cache_kind) {
    const setup su = {sched, cache_kind, 500};
    two t;
    cvx_sample_result res;
    float full[NUMEL], part[NUMEL], resumed[NUMEL];
    ASSERT_OK(run(&su, NULL, full, &t, &res));
    assert_int_equal(res.steps_done, STEPS);
    if (cache_kind) assert_true(res.cache_steps_skipped > 0);   /* the cache skips some steps of both experts */
    /* DDIM 6 steps of 1000: 999 833 667 500 334 167 (or the config's spacing): count the steps at or above 500 */
    cvx_scheduler s;
    ASSERT_OK(cvx_scheduler_load(&s, "models/cogvideox-tiny-random/scheduler/scheduler_config.json",
                                 cvx_scheduler_find(sched)));
    ASSERT_OK(cvx_scheduler_set_timesteps(&s, STEPS));
    int k = 0;
    while (k < STEPS && s.timesteps[k] >= 500) k++;
    cvx_scheduler_free(&s);
    assert_true(k > 0 && k < STEPS);   /* the plan switches inside the run */
    assert_int_equal(t.n_acq, 2);
    assert_int_equal(t.acquired[0], 0);
    assert_int_equal(t.acquired[1], 1);
    assert_int_equal(t.st[1].prepared, 1);   /* prepare re-run for the new expert */
    int computed = 0;
    for (int i = 0; i < t.n_log; i++) computed += t.log[i] == 1;
    assert_true(computed > 0 && t.log[0] == 0 && t.log[t.n_log - 1] == 1);
    for (int i = 1; i < t.n_log; i++) assert_true(t.log[i] >= t.log[i - 1]);   /* 0 ... 0 1 ... 1 */

    char tmpl[] = "/tmp/cvx_plan_XXXXXX", path[256];
    assert_non_null(mkdtemp(tmpl));
    snprintf(path, sizeof path, "%s/stage2_checkpoint.safetensors", tmpl);
    /* stops before the switch, at it (the last step of expert 0 done) and after it */
    const int stops[3] = {k - 1 > 0 ? k - 1 : 1, k, k + 1 < STEPS ? k + 1 : k};
    for (int j = 0; j < 3; j++) {
        cvx_checkpointing ck = {path, 1, 0, stops[j], NULL};
        ASSERT_OK(run(&su, &ck, part, &t, &res));
        assert_int_equal(res.steps_done, stops[j]);
        ck.resume = 1, ck.stop_after_steps = 0;
        ASSERT_OK(run(&su, &ck, resumed, &t, &res));
        assert_int_equal(res.resumed_from, stops[j]);
        assert_int_equal(t.acquired[0], stops[j] < k ? 0 : 1);   /* the resumed step's expert first */
        assert_memory_equal(resumed, full, sizeof full);
        print_message("  %s %s: stop after %d (switch after step %d) + resume == uninterrupted, bit for bit\n",
                      sched, cvx_cache_kind_name(cache_kind), stops[j], k);
    }
    /* a checkpoint of another plan (the switch one step later) is refused, naming the plan */
    cvx_checkpointing ck = {path, 1, 0, 1, NULL};
    ASSERT_OK(run(&su, &ck, part, &t, &res));
    setup other = su;
    other.boundary = 400;   /* 500 and 334/...: one step more of expert 0 */
    ck.resume = 1, ck.stop_after_steps = 0;
    if (run(&other, &ck, resumed, &t, &res) == 0) {
        /* same plan only if no timestep lies in [400, 500) */
        fail_msg("a checkpoint of another step plan was resumed");
    }
    assert_non_null(strstr(cvx_last_error(), "step plan"));
    print_message("  refused: %s\n", cvx_last_error());
    unlink(path);
    rmdir(tmpl);
}

static void test_switch_resume_ddim(void **state) { (void)state; check_plan("ddim", CVX_CACHE_NONE); }
static void test_switch_resume_dpm(void **state) { (void)state; check_plan("dpm", CVX_CACHE_NONE); }
static void test_switch_resume_teacache(void **state) { (void)state; check_plan("dpm", CVX_CACHE_TEACACHE); }
static void test_switch_resume_fbcache(void **state) { (void)state; check_plan("ddim", CVX_CACHE_FBCACHE); }

/* per-token timesteps: token k gets t_scale[k]·t; a step at scale 1 takes the conditional branch */
static void test_token_timesteps_and_no_guidance(void **state) {
    (void)state;
    cvx_scheduler s;
    ASSERT_OK(cvx_scheduler_load(&s, "models/cogvideox-tiny-random/scheduler/scheduler_config.json", NULL));
    cvx_loop_request r = {.num_inference_steps = 1, .guidance_scale = 1.0, .seed = 3};
    cvx_loop_params lp = {.req = &r};
    cvx_latent_shape sh = {.frames = FR, .channels = CH, .height = HT, .width = WD, .numel = NUMEL};
    two t;
    cvx_expert_provider prov;
    two_init(&t, &prov);
    cvx_sample_plan plan;
    const cvx_guider g = {.scale = 1.0};
    cvx_plan_init(&plan, 1, &g, &prov);
    float scale[N_TOK];
    for (int i = 0; i < N_TOK; i++) scale[i] = i < HT * WD ? 0.0f : 1.0f;   /* frame 0 conditioned (TI2V) */
    plan.n_t = N_TOK;
    plan.steps[0].t_scale = scale;
    const cvx_text_cond neg = {.text = TEXT_NEG, .L = 3}, pos = {.text = TEXT_POS, .L = 3};
    float lat[NUMEL], want[NUMEL], x0[NUMEL];
    cvx_sample_result res;
    ASSERT_OK(cvx_scheduler_set_timesteps(&s, 1));
    const double t0 = s.timesteps[0];
    ASSERT_OK(cvx_sample_loop(&plan, &s, &lp, &sh, (const void *const[2]){&neg, &pos}, NULL, NULL, NULL, lat, &res));
    assert_int_equal(t.n_log, 1);   /* no guidance: one branch, the conditional one */
    assert_int_equal(t.st[0].last_n_t, N_TOK);
    for (int i = 0; i < N_TOK; i++) assert_true(t.st[0].t_tok_seen[i] == scale[i] * (float)t0);
    /* the same step by hand: x = randn(seed), out = forward(x, prompt, t per token), one DDIM step */
    cvx_generator gen;
    cvx_generator_seed(&gen, 3);
    cvx_randn(&gen, x0, NUMEL);
    cvx_scheduler s2;
    ASSERT_OK(cvx_scheduler_load(&s2, "models/cogvideox-tiny-random/scheduler/scheduler_config.json", NULL));
    ASSERT_OK(cvx_scheduler_set_timesteps(&s2, 1));
    ASSERT_OK(s2.type->init(&s2, NUMEL));
    float tt[N_TOK], pred[NUMEL];
    for (int i = 0; i < N_TOK; i++) tt[i] = scale[i] * (float)t0;
    cvx_denoise_input in = {.x = x0, .cond = &pos, .t = t0, .t_tokens = tt, .n_t = N_TOK};
    ASSERT_OK(f_forward(&t.d[0], &in, pred));
    s2.type->step(&s2, 0, pred, x0, NUMEL, &gen, want);
    assert_memory_equal(lat, want, sizeof want);
    print_message("  per-token timesteps (frame 0 at 0) reach the denoiser; scale 1 = the conditional branch alone\n");
    cvx_plan_free(&plan);
    cvx_scheduler_free(&s);
    cvx_scheduler_free(&s2);
}

/* rescale_noise_cfg: std(out) becomes φ·std(cond) + (1 − φ)·std(out) in ratio form */
static void test_guidance_rescale(void **state) {
    (void)state;
    enum { n = 64 };
    float cond[n], out[n], ref[n];
    for (int i = 0; i < n; i++) cond[i] = sinf(0.3f * (float)i), out[i] = 2.5f * cosf(0.7f * (float)i) + 0.1f;
    memcpy(ref, out, sizeof ref);
    cvx_cfg_rescale(cond, 0.0, n, out);
    assert_memory_equal(out, ref, sizeof ref);   /* φ 0: nothing */
    cvx_cfg_rescale(cond, 0.7, n, out);
    double mc = 0, mo = 0, sc = 0, so = 0;
    for (int i = 0; i < n; i++) mc += cond[i], mo += ref[i];
    mc /= n, mo /= n;
    for (int i = 0; i < n; i++) sc += (cond[i] - mc) * (cond[i] - mc), so += (ref[i] - mo) * (ref[i] - mo);
    const double ratio = sqrt(sc / (n - 1)) / sqrt(so / (n - 1));
    for (int i = 0; i < n; i++) assert_true(fabs(out[i] - (0.7 * ref[i] * ratio + 0.3 * ref[i])) < 1e-6);
}

/* explicit sigmas against the golden_hv15 tables */
static void test_explicit_sigmas(void **state) {
    (void)state;
    const char *dir = "tests/data/plan_hv15_scheduler";
    char cfg[256], path[256], name[64];
    snprintf(cfg, sizeof cfg, "%s/scheduler_config.json", dir);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    cvx_safetensors *st = tu_open(path);
    const int shifts[3] = {5, 7, 9}, ns[5] = {1, 4, 8, 20, 50};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 5; b++) {
            const int n = ns[b];
            double lin[64];
            flow_np_linspace(1.0, 0.0, n + 1, lin);   /* np.linspace(1, 0, N + 1)[:-1] */
            cvx_scheduler s;
            ASSERT_OK(cvx_scheduler_load_shift(&s, cfg, NULL, shifts[a]));
            cvx_scheduler_set_sigmas(&s, lin, n);
            ASSERT_OK(cvx_scheduler_set_timesteps(&s, n));
            size_t k;
            snprintf(name, sizeof name, "shift%d_n%d.timesteps", shifts[a], n);
            float *want_t = tu_f32(st, name, &k);
            assert_int_equal(k, n);
            for (int i = 0; i < n; i++) assert_true((float)s.timesteps[i] == want_t[i]);
            snprintf(name, sizeof name, "shift%d_n%d.sigmas", shifts[a], n);
            float *want_s = tu_f32(st, name, &k);
            assert_int_equal(k, n + 1);
            assert_memory_equal(((const flow_scheduler *)s.sched)->sigmas, want_s, (n + 1) * sizeof(float));
            free(want_t);
            free(want_s);
            /* another step count than the sigmas' is refused */
            assert_int_equal(cvx_scheduler_set_timesteps(&s, n + 1), -1);
            assert_non_null(strstr(cvx_last_error(), "explicit sigmas"));
            cvx_scheduler_free(&s);
        }
    print_message("  explicit sigmas: 15 golden tables (shift 5/7/9 x N 1..50), timesteps and sigmas bit for bit\n");
    cvx_st_close(st);
    /* a DDPM-kind scheduler refuses them */
    cvx_scheduler s;
    double one = 0.5;
    ASSERT_OK(cvx_scheduler_load(&s, "models/cogvideox-tiny-random/scheduler/scheduler_config.json", NULL));
    cvx_scheduler_set_sigmas(&s, &one, 1);
    assert_int_equal(cvx_scheduler_set_timesteps(&s, 1), -1);
    assert_non_null(strstr(cvx_last_error(), "explicit sigmas"));
    cvx_scheduler_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_switch_resume_ddim),     cmocka_unit_test(test_switch_resume_dpm),
        cmocka_unit_test(test_switch_resume_teacache), cmocka_unit_test(test_switch_resume_fbcache),
        cmocka_unit_test(test_token_timesteps_and_no_guidance), cmocka_unit_test(test_guidance_rescale),
        cmocka_unit_test(test_explicit_sigmas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
