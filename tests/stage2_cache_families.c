/* Step caching on every family's denoiser through the API (cvx_encode / cvx_sample), on the tiny
 * random models of models/: HunyuanVideo-1.5 and LTX-Video (FBCache and DeepCache; TeaCache is
 * refused on HunyuanVideo-1.5, docs/caching.md; LTX-Video's: tests/stage2_cache_ltx.c), CogVideoX, Wan 2.1 and Wan 2.2 A14B (DeepCache: the generic
 * block split they already had for FBCache; A14B's expert switch drops the kept streams).
 *
 *   DeepCache, interval 1: every step full → the uncached run's bytes (the split forward is exact)
 *   DeepCache, interval 2: the cached steps counted by the rule, latents differ, twice the same bytes
 *   DeepCache, stopped right before a cached step and resumed: the uninterrupted run's bytes (the
 *             kept streams, HV1.5's text stream included, come from the checkpoint)
 *   FBCache, threshold 1e-300 (every step computes) → the uncached run's bytes; 1e6 (every step
 *             after the first skips) → N−1 skipped, latents differ, twice the same bytes
 *   --cache teacache on HV1.5, Wan 2.2 TI2V-5B and A14B: one line naming the missing rule and the
 *             caches that run;
 *             --cache_threshold with deepcache: refused (HV1.5, LTX)
 *   stage 2's flags: --deepcache_* in the fingerprint (a resume with another interval is refused)
 *             and in generation_config.json. */
#include "api_harness.h"

#include "pipeline/cvx.h"
#include "stage2/cache.h"

typedef struct {
    const char *model;
    int frames, height, width;   /* 0: the model's */
} fam;

static const fam HV15 = {"models/hunyuanvideo15-tiny-random", 9, 32, 48};
static const fam LTX = {"models/ltx-tiny-random", 9, 64, 96};
static const fam COG = {"models/cogvideox-tiny-random", 0, 0, 0};
static const fam WAN = {"models/wan2.1-tiny-random", 9, 48, 64};
static const fam A14B = {"models/wan2.2-a14b-tiny-random", 9, 48, 64};
static const fam TI2V = {"models/wan2.2-ti2v-tiny-random", 9, 64, 64};

#define STEPS 6
static const char *const NEG = "blurry, low quality", *const POS = "a red fox running through fresh snow";

typedef struct {
    cvx_model *m;
    cvx_embeddings emb;
    cvx_cond_set more;
    cvx_sample_params sp;
    size_t n;   /* floats of the latents */
} fx;

static void fx_open(fx *x, const fam *f) {
    memset(x, 0, sizeof *x);
    x->m = cvx_model_open(&(cvx_model_params){.model = f->model, .threads = 2});
    if (!x->m) fail_msg("%s: %s", f->model, cvx_last_error());
    cvx_encode_params ep = {.prompt = POS, .negative_prompt = NEG};
    if (cvx_encode(x->m, &ep, NULL, NULL, &x->emb)) fail_msg("%s", cvx_last_error());
    const char *texts[2] = {NEG, POS};
    if (cvx_encode_texts_more(x->m, texts, NULL, 2, NULL, NULL, &x->more)) fail_msg("%s", cvx_last_error());
    ah_cond_set_split(&x->more);
    x->sp = cvx_sample_default_params(x->m);
    if (f->frames) x->sp.frames = f->frames, x->sp.height = f->height, x->sp.width = f->width;
    x->sp.num_inference_steps = STEPS, x->sp.seed = 7;
    x->sp.cond_more = x->more.n ? &x->more : NULL;
}

static void fx_close(fx *x) {
    cvx_embeddings_free(&x->emb);
    cvx_cond_set_free(&x->more);
    cvx_model_close(x->m);
}

/* One run of sp; fails the test on an error. */
static void sample(fx *x, const cvx_sample_params *sp, cvx_latents *out) {
    if (cvx_sample(x->m, sp, &x->emb, NULL, NULL, out)) fail_msg("%s", cvx_last_error());
    x->n = (size_t)out->C * out->T * out->h * out->w;
}

static cvx_sample_params deepcache(const fx *x, int start, int end, int interval) {
    cvx_sample_params sp = x->sp;
    sp.cache = "deepcache", sp.deepcache_start = start, sp.deepcache_end = end, sp.deepcache_interval = interval;
    return sp;
}

static int same(const cvx_latents *a, const cvx_latents *b, size_t n) {
    return !memcmp(a->data, b->data, n * sizeof(float));
}

/* Cached steps of DeepCache's rule over STEPS steps (no expert switch). */
static int rule_cached(int start, int end, int interval) {
    cvx_cache c;
    ASSERT_OK(cvx_cache_init(&c, CVX_CACHE_DEEPCACHE, 0, NULL, STEPS, 2));
    ASSERT_OK(cvx_cache_set_deepcache(&c, start, end, interval));
    int k = 0;
    for (int i = 0; i < STEPS; i++) k += !cvx_deepcache_full_step(&c, i);
    cvx_cache_free(&c);
    return k;
}

static void deepcache_case(const fam *f, int switches) {
    fx x;
    fx_open(&x, f);
    cvx_latents plain, one, two, again;
    sample(&x, &x.sp, &plain);
    cvx_sample_params s1 = deepcache(&x, 1, STEPS, 1), s2 = deepcache(&x, 1, STEPS, 2);
    sample(&x, &s1, &one);
    if (!same(&one, &plain, x.n)) fail_msg("%s: deepcache interval 1 differs from the uncached run", f->model);
    assert_int_equal(one.cache_steps_skipped, 0);
    assert_int_equal(one.cache_steps_computed, STEPS);
    sample(&x, &s2, &two);
    sample(&x, &s2, &again);
    if (same(&two, &plain, x.n)) fail_msg("%s: deepcache interval 2 gave the uncached bytes", f->model);
    if (!same(&two, &again, x.n)) fail_msg("%s: deepcache interval 2 is not deterministic", f->model);
    /* steps 0 1 [2] 3 [4] 5: 2 cached; an expert switch drops the kept streams (a full step there) */
    int want = rule_cached(1, STEPS, 2);
    assert_int_equal(want, 2);
    if (!switches) assert_int_equal(two.cache_steps_skipped, want);
    else assert_true(two.cache_steps_skipped >= 1 && two.cache_steps_skipped <= want);
    assert_int_equal(two.cache_steps_computed + two.cache_steps_skipped, STEPS);
    print_message("  %s: deepcache 1-%d/2: %lld of %d steps cached, rel-L2 vs uncached %.3g\n", f->model, STEPS,
                  two.cache_steps_skipped, STEPS, cvx_rel_l2(two.data, plain.data, x.n));
    cvx_latents_free(&plain), cvx_latents_free(&one), cvx_latents_free(&two), cvx_latents_free(&again);
    fx_close(&x);
}

static void test_deepcache_hv15(void **s) { (void)s; deepcache_case(&HV15, 0); }
static void test_deepcache_ltx(void **s) { (void)s; deepcache_case(&LTX, 0); }
static void test_deepcache_cogvideox(void **s) { (void)s; deepcache_case(&COG, 0); }
static void test_deepcache_wan(void **s) { (void)s; deepcache_case(&WAN, 0); }
static void test_deepcache_wan22_a14b(void **s) { (void)s; deepcache_case(&A14B, 1); }

/* Stopped after step 2 (the next, step 2 of 0..5, is cached), resumed: the uninterrupted bytes. */
static void resume_case(const fam *f) {
    fx x;
    fx_open(&x, f);
    cvx_sample_params sp = deepcache(&x, 1, STEPS, 2);
    cvx_latents full, part, rest;
    sample(&x, &sp, &full);
    char dir[] = "/tmp/cvx_deepcache_ckXXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    for (int stop = 2; stop <= 4; stop += 2) {   /* both cached steps */
        sp.checkpoint_path = path, sp.checkpoint_every = 1, sp.stop_after_steps = stop, sp.resume = 0;
        sample(&x, &sp, &part);
        assert_int_equal(part.steps_done, stop);
        cvx_safetensors *ck = tu_open(path);
        assert_non_null(cvx_st_find(ck, "deepcache_stream"));
        if (f == &HV15) assert_non_null(cvx_st_find(ck, "deepcache_aux"));   /* the text stream */
        cvx_st_close(ck);
        sp.stop_after_steps = 0, sp.resume = 1;
        sample(&x, &sp, &rest);
        assert_int_equal(rest.resumed_from, stop);
        if (!same(&rest, &full, x.n)) fail_msg("%s: resumed after step %d differs", f->model, stop);
        assert_int_equal(rest.cache_steps_skipped, full.cache_steps_skipped);
        cvx_latents_free(&part), cvx_latents_free(&rest);
    }
    tu_rmrf(dir);
    cvx_latents_free(&full);
    fx_close(&x);
}

static void test_deepcache_resume_hv15(void **s) { (void)s; resume_case(&HV15); }
static void test_deepcache_resume_ltx(void **s) { (void)s; resume_case(&LTX); }

static void fbcache_case(const fam *f) {
    fx x;
    fx_open(&x, f);
    cvx_latents plain, all, skip, again;
    sample(&x, &x.sp, &plain);
    cvx_sample_params sp = x.sp;
    sp.cache = "fbcache", sp.cache_threshold = 1e-300;   /* every diff is above: every step computes */
    sample(&x, &sp, &all);
    if (!same(&all, &plain, x.n)) fail_msg("%s: fbcache computing every step differs from the uncached run", f->model);
    assert_int_equal(all.cache_steps_computed, STEPS);
    sp.cache_threshold = 1e6;   /* every step after the first skips */
    sample(&x, &sp, &skip);
    sample(&x, &sp, &again);
    assert_int_equal(skip.cache_steps_computed, 1);
    assert_int_equal(skip.cache_steps_skipped, STEPS - 1);
    if (same(&skip, &plain, x.n)) fail_msg("%s: fbcache skipping gave the uncached bytes", f->model);
    if (!same(&skip, &again, x.n)) fail_msg("%s: fbcache is not deterministic", f->model);
    cvx_latents_free(&plain), cvx_latents_free(&all), cvx_latents_free(&skip), cvx_latents_free(&again);
    fx_close(&x);
}

static void test_fbcache_hv15(void **s) { (void)s; fbcache_case(&HV15); }
static void test_fbcache_ltx(void **s) { (void)s; fbcache_case(&LTX); }

/* Refusals: one line holding every `want`, nothing run. A row's settings over the family's
 * defaults (0: the default kept). */
typedef struct {
    const fam *f;
    const char *cache;
    double threshold;
    int dc_start, dc_end, dc_interval;
    const char *want[3];
} refusal;

static void check_refusals(const refusal *rows, int n) {
    fx x = {0};
    for (int k = 0; k < n; k++) {
        const refusal *r = &rows[k];
        if (!k || r->f != rows[k - 1].f) {   /* rows of one family in a run: opened once */
            if (k) fx_close(&x);
            fx_open(&x, r->f);
        }
        cvx_sample_params sp = r->dc_interval ? deepcache(&x, r->dc_start, r->dc_end, r->dc_interval) : x.sp;
        sp.cache = r->cache;
        if (r->threshold) sp.cache_threshold = r->threshold;
        cvx_latents l;
        assert_int_equal(cvx_sample(x.m, &sp, &x.emb, NULL, NULL, &l), -1);
        const char *e = cvx_last_error();
        print_message("  %s: %s\n", r->f->model, e);
        for (int i = 0; i < 3 && r->want[i]; i++)
            if (!strstr(e, r->want[i]))
                fail_msg("%s, --cache %s: the error lacks \"%s\"", r->f->model, r->cache, r->want[i]);
        assert_null(strchr(e, '\n'));
    }
    if (n) fx_close(&x);
}

/* TeaCache on HV1.5 (no published rule; LTX-Video runs TeaCache4LTX-Video: tests/stage2_cache_ltx.c),
 * DeepCache with a threshold or an empty range (HV1.5, LTX). */
static void test_refusals(void **s) {
    (void)s;
    static const refusal rows[] = {
        {&HV15, "teacache", 0.2, 0, 0, 0,
         {"--cache teacache", "ali-vilab/TeaCache publishes no rule for HunyuanVideo-1.5", "fbcache or deepcache"}},
        {&HV15, "deepcache", 0.1, 1, STEPS, 2, {"deepcache has no threshold"}},
        {&HV15, "deepcache", 0, 3, 2, 1, {"--deepcache_end 2 must be >= --deepcache_start 3"}},
        {&LTX, "deepcache", 0.1, 1, STEPS, 2, {"deepcache has no threshold"}},
        {&LTX, "deepcache", 0, 3, 2, 1, {"--deepcache_end 2 must be >= --deepcache_start 3"}},
    };
    check_refusals(rows, (int)(sizeof rows / sizeof rows[0]));
}

/* Wan 2.2 (TI2V-5B, A14B): TeaCache's authors publish no coefficients; one line naming the caches
 * that run. */
static void test_refusals_wan22(void **s) {
    (void)s;
    static const refusal rows[] = {
        {&TI2V, "teacache", 0.2, 0, 0, 0,
         {"--cache teacache: ali-vilab/TeaCache publishes coefficients for Wan 2.1 only",
          "give --teacache_coefficients or use --cache fbcache or deepcache"}},
        {&A14B, "teacache", 0.2, 0, 0, 0,
         {"--cache teacache: ali-vilab/TeaCache publishes coefficients for Wan 2.1 only",
          "give --teacache_coefficients or use --cache fbcache or deepcache"}},
    };
    check_refusals(rows, (int)(sizeof rows / sizeof rows[0]));
}

/* The rule: the seed project's no_cache_steps for 50 steps at its defaults (11, 45, 4): steps
 * 12-14, 16-18, ..., 40-42 and 44 cached (25 of 50). */
static void test_rule_defaults(void **s) {
    (void)s;
    cvx_cache c;
    ASSERT_OK(cvx_cache_init(&c, CVX_CACHE_DEEPCACHE, 0, NULL, 50, 54));
    assert_int_equal(c.kind, CVX_CACHE_DEEPCACHE);   /* no threshold: stays on */
    assert_int_equal(c.dc_start, 11);
    assert_int_equal(c.dc_end, 45);
    assert_int_equal(c.dc_interval, 4);
    int cached = 0;
    for (int i = 0; i < 50; i++) {
        int want_full = i < 11 || i >= 45 || (i - 11) % 4 == 0;   /* range(0,11) + range(11,45,4) + range(45,50) */
        assert_int_equal(cvx_deepcache_full_step(&c, i), want_full);
        cached += !want_full;
    }
    assert_int_equal(cached, 25);
    assert_int_equal(cvx_cache_set_deepcache(&c, 0, 0, 0), -1);
    assert_int_equal(cvx_cache_use_layers(&c, 1), -1);   /* the last block alone is no cache */
    cvx_cache_kind k;
    ASSERT_OK(cvx_cache_parse_kind("deepcache", &k));
    assert_int_equal(k, CVX_CACHE_DEEPCACHE);
    assert_string_equal(cvx_cache_kind_name(k), "deepcache");
    cvx_cache_free(&c);
}

/* Stage 2's flags on HV1.5: the record in generation_config.json, the fingerprint refusing a
 * resume with another interval, the resume with the same flags equal to the uninterrupted file. */
static void test_cli(void **s) {
    (void)s;
    char s1[256], s2[256], dir[] = "/tmp/cvx_deepcache_cliXXXXXX", cmd[4096], err[8192], gc[128];
    tu_program(s1, sizeof s1, "stage1");
    tu_program(s2, sizeof s2, "stage2");
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "%s --model_dir %s --prompt '%s' --negative_prompt '%s' --output_dir %s --quiet", s1,
             HV15.model, POS, NEG, dir);
    tu_run_ok(cmd);
    char base[2048];
    snprintf(base, sizeof base, "%s --model_dir %s --input_dir %s --output_dir %s --num_inference_steps %d --frames %d "
             "--height %d --width %d --quiet --cache deepcache --deepcache_start 1 --deepcache_end %d", s2, HV15.model,
             dir, dir, STEPS, HV15.frames, HV15.height, HV15.width, STEPS);
    snprintf(cmd, sizeof cmd, "%s --deepcache_interval 2 && cp %s/stage2_latents.safetensors %s/full.safetensors", base,
             dir, dir);
    tu_run_ok(cmd);
    snprintf(gc, sizeof gc, "%s/generation_config.json", dir);
    cvx_config c;
    ASSERT_OK(cvx_config_load(&c, gc));
    json_object *v;
    assert_true(json_object_object_get_ex(c.root, "deepcache_interval", &v) && json_object_get_int(v) == 2);
    assert_true(json_object_object_get_ex(c.root, "cache_steps_skipped", &v) && json_object_get_int(v) == 2);
    assert_false(tu_genconfig_has(gc, "cache_threshold"));
    cvx_config_free(&c);
    snprintf(cmd, sizeof cmd, "%s --deepcache_interval 2 --stop_after_steps 2", base);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --deepcache_interval 3 --resume", base);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  resume with another interval: %s", err);
    assert_non_null(strstr(err, "deepcache_interval"));
    snprintf(cmd, sizeof cmd, "%s --deepcache_interval 2 --resume && cmp %s/stage2_latents.safetensors "
             "%s/full.safetensors", base, dir, dir);
    tu_run_ok(cmd);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_defaults),        cmocka_unit_test(test_deepcache_hv15),
        cmocka_unit_test(test_deepcache_ltx),        cmocka_unit_test(test_deepcache_cogvideox),
        cmocka_unit_test(test_deepcache_wan),        cmocka_unit_test(test_deepcache_wan22_a14b),
        cmocka_unit_test(test_deepcache_resume_hv15), cmocka_unit_test(test_deepcache_resume_ltx),
        cmocka_unit_test(test_fbcache_hv15),         cmocka_unit_test(test_fbcache_ltx),
        cmocka_unit_test(test_refusals),             cmocka_unit_test(test_refusals_wan22),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
