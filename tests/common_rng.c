/* common/rng: torch.Generator('cpu').manual_seed(s) + torch.randn(float32), bit for bit.
 *
 * Every golden noise value is compared bitwise (mismatch counts printed): tests/data/golden/noise
 * (numel < 16, multiples of 16 and not, real latent shapes as head/mid/tail + float64 sums,
 * three consecutive draws), the DPM scheduler chains' per-step noise (scheduler_5b, _1.5) and the
 * pipelines' initial latents (e2e_*). Plus mt19937 reference values, state carry-over, resume
 * from a byte copy of the generator and state validation. */
#include "testutil.h"

#include <math.h>

#include "config.h"
#include "rng.h"

#define NOISE_DIR GOLDEN "/noise"

/* ------------------------------------------------------------------------------ helpers */

/* Bitwise comparison; prints the first few differences and the mismatch count. */
static size_t count_mismatches(const char *what, const float *got, const float *want, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            if (bad < 5)
                print_message("  %s[%zu]: got %.9g, want %.9g\n", what, i, (double)got[i],
                              (double)want[i]);
            bad++;
        }
    }
    print_message("  %-28s %zu values, %zu mismatches\n", what, n, bad);
    return bad;
}

/* Golden tensor `name` must equal got[0..n) bit for bit (and have exactly n values). */
static void expect_exact(const cvx_safetensors *st, const char *name, const float *got, size_t n) {
    size_t wn = 0;
    float *want = tu_f32(st, name, &wn);
    const cvx_tensor *t = cvx_st_find(st, name);
    assert_int_equal(t->dtype, CVX_F32);
    if (wn != n) fail_msg("%s: golden has %zu values, we drew %zu", name, wn, n);
    size_t bad = count_mismatches(name, got, want, n);
    free(want);
    if (bad) fail_msg("%s: %zu of %zu values differ from torch.randn", name, bad, n);
}

static json_object *jget(json_object *o, const char *key) {
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v)) fail_msg("case.json: missing key '%s'", key);
    return v;
}

static size_t json_numel(json_object *shape) {
    size_t n = 1;
    for (size_t i = 0; i < json_object_array_length(shape); i++)
        n *= (size_t)json_object_get_int64(json_object_array_get_idx(shape, i));
    return n;
}

/* The noise/case.json entry whose "key" is `key`. */
static json_object *noise_entry(const cvx_config *c, const char *key) {
    json_object *entries = jget(c->root, "entries");
    for (size_t i = 0; i < json_object_array_length(entries); i++) {
        json_object *e = json_object_array_get_idx(entries, i);
        if (strcmp(json_object_get_string(jget(e, "key")), key) == 0) return e;
    }
    fail_msg("noise/case.json: no entry '%s'", key);
    return NULL;
}

static float *randn_seeded(uint64_t seed, size_t n) {
    cvx_generator g;
    cvx_generator_seed(&g, seed);
    float *out = cvx_alloc_f32(n ? n : 1);
    cvx_randn(&g, out, n);
    return out;
}

/* ------------------------------------------------------------------------------- tests */

/* mt19937 itself: the C++ standard's check value and torch's seed handling. */
static void test_mt19937_reference(void **state) {
    (void)state;
    cvx_generator g;
    cvx_generator_seed(&g, 5489);                /* std::mt19937 default seed */
    uint32_t x = 0;
    for (int i = 0; i < 10000; i++) x = cvx_generator_random(&g);
    assert_int_equal(x, 4123659995u);            /* [rand.predef]: 10000th output */

    /* manual_seed keeps the 64-bit seed but initialises mt19937 with its low 32 bits. */
    cvx_generator a, b;
    cvx_generator_seed(&a, 7);
    cvx_generator_seed(&b, (1ull << 32) + 7);
    assert_true(b.seed == (1ull << 32) + 7);
    for (int i = 0; i < 2000; i++) assert_int_equal(cvx_generator_random(&a), cvx_generator_random(&b));

    /* random64 = first draw in the high word. */
    cvx_generator_seed(&a, 11);
    cvx_generator_seed(&b, 11);
    uint64_t hi = cvx_generator_random(&a), lo = cvx_generator_random(&a);
    assert_true(cvx_generator_random64(&b) == ((hi << 32) | lo));
}

/* randn_0..randn_7 (numel 1, 7, 15, 16, 17, 33, 30, 576) stored in full, and the 2b-like
 * prepare_latents case. */
static void test_golden_small(void **state) {
    (void)state;
    cvx_config c;
    ASSERT_OK(cvx_config_load(&c, NOISE_DIR "/case.json"));
    cvx_safetensors *st = tu_open(NOISE_DIR "/expected.safetensors");
    json_object *entries = jget(c.root, "entries");
    int cases = 0;
    for (size_t i = 0; i < json_object_array_length(entries); i++) {
        json_object *e = json_object_array_get_idx(entries, i), *stored = NULL;
        if (!json_object_object_get_ex(e, "stored", &stored) ||
            strcmp(json_object_get_string(stored), "full") != 0)
            continue;
        const char *key = json_object_get_string(jget(e, "key"));
        size_t n = json_numel(jget(e, "shape"));
        assert_int_equal(n, (size_t)json_object_get_int64(jget(e, "numel")));
        float *got = randn_seeded((uint64_t)json_object_get_int64(jget(e, "seed")), n);
        expect_exact(st, key, got, n);
        free(got);
        cases++;
    }
    assert_int_equal(cases, 8);

    json_object *pl = jget(jget(noise_entry(&c, "prepare_latents.*"), "cases"), "2b_like");
    size_t n = json_numel(jget(pl, "shape"));
    float *got = randn_seeded((uint64_t)json_object_get_int64(jget(pl, "seed")), n);
    expect_exact(st, "prepare_latents.2b_like", got, n);
    free(got);
    cvx_st_close(st);
    cvx_config_free(&c);
}

/* The real latent shapes [1,3,16,60,90] and [1,13,16,60,90]: head 4096 / mid 1000 / tail 4096
 * exact, and the float64 sum / sum of squares of all values. */
static void test_golden_latent_shapes(void **state) {
    (void)state;
    cvx_config c;
    ASSERT_OK(cvx_config_load(&c, NOISE_DIR "/case.json"));
    cvx_safetensors *st = tu_open(NOISE_DIR "/expected.safetensors");
    const char *keys[2] = {"randn_8", "randn_9"};
    for (int k = 0; k < 2; k++) {
        json_object *e = noise_entry(&c, keys[k]);
        size_t n = json_numel(jget(e, "shape"));
        float *got = randn_seeded((uint64_t)json_object_get_int64(jget(e, "seed")), n);
        char name[64];
        size_t hn = (size_t)cvx_st_find(st, (snprintf(name, sizeof name, "%s.head", keys[k]), name))->numel;
        expect_exact(st, name, got, hn);
        size_t mid = (size_t)json_object_get_int64(jget(e, "mid_offset"));
        assert_int_equal(mid, n / 2);
        snprintf(name, sizeof name, "%s.mid", keys[k]);
        size_t mn = (size_t)cvx_st_find(st, name)->numel;
        expect_exact(st, name, got + mid, mn);
        snprintf(name, sizeof name, "%s.tail", keys[k]);
        size_t tn = (size_t)cvx_st_find(st, name)->numel;
        expect_exact(st, name, got + n - tn, tn);

        double sum = 0, sumsq = 0;
        for (size_t i = 0; i < n; i++) { sum += got[i]; sumsq += (double)got[i] * got[i]; }
        double want_sum = json_object_get_double(jget(e, "sum_float64"));
        double want_sumsq = json_object_get_double(jget(e, "sumsq_float64"));
        double rs = fabs(sum - want_sum) / fabs(want_sum), rq = fabs(sumsq - want_sumsq) / want_sumsq;
        print_message("  %s: sum %.15g (want %.15g, rel %.2g), sumsq %.15g (want %.15g, rel %.2g)\n",
                      keys[k], sum, want_sum, rs, sumsq, want_sumsq, rq);
        assert_true(rs < 1e-9);   /* only the summation order differs from torch */
        assert_true(rq < 1e-9);
        free(got);
    }
    cvx_st_close(st);
    cvx_config_free(&c);
}

/* seq99.draw0/1/2: three consecutive randn calls on one generator (24, 5, 20 values: the
 * vector path, the scalar path leaving a cached normal, the vector path again). */
static void test_golden_consecutive_draws(void **state) {
    (void)state;
    cvx_config c;
    ASSERT_OK(cvx_config_load(&c, NOISE_DIR "/case.json"));
    cvx_safetensors *st = tu_open(NOISE_DIR "/expected.safetensors");
    json_object *e = noise_entry(&c, "seq99.draw0/1/2");
    json_object *shapes = jget(e, "shapes");
    assert_int_equal(json_object_array_length(shapes), 3);
    cvx_generator g;
    cvx_generator_seed(&g, (uint64_t)json_object_get_int64(jget(e, "seed")));
    for (int d = 0; d < 3; d++) {
        size_t n = json_numel(json_object_array_get_idx(shapes, (size_t)d));
        float got[64];
        assert_true(n <= 64);
        cvx_randn(&g, got, n);
        char name[32];
        snprintf(name, sizeof name, "seq99.draw%d", d);
        expect_exact(st, name, got, n);
    }
    cvx_st_close(st);
    cvx_config_free(&c);
}

/* The DPM scheduler chains: one generator per chain (case.json generator_seed), drawn for
 * noise1 (and noise2 on second-order steps) in step order, nothing drawn before. */
static void check_scheduler_noise(const char *dir) {
    char path[256];
    cvx_config c;
    print_message("  %s:\n", dir);
    snprintf(path, sizeof path, "%s/case.json", dir);
    ASSERT_OK(cvx_config_load(&c, path));
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    cvx_safetensors *st = tu_open(path);
    size_t n = json_numel(jget(c.root, "sample_shape"));
    float *got = cvx_alloc_f32(n);
    json_object *chains = jget(c.root, "steps");
    int draws = 0;
    for (size_t ci = 0; ci < json_object_array_length(chains); ci++) {
        json_object *chain = json_object_array_get_idx(chains, ci);
        cvx_generator g;
        cvx_generator_seed(&g, (uint64_t)json_object_get_int64(jget(chain, "generator_seed")));
        json_object *steps = jget(chain, "steps");
        for (size_t si = 0; si < json_object_array_length(steps); si++) {
            json_object *s = json_object_array_get_idx(steps, si);
            int k = json_object_get_int(jget(s, "generator_draws"));
            for (int d = 1; d <= k; d++) {
                char name[96];
                snprintf(name, sizeof name, "%s.noise%d", json_object_get_string(jget(s, "key")), d);
                cvx_randn(&g, got, n);
                expect_exact(st, name, got, n);
                draws++;
            }
        }
    }
    assert_int_equal(draws, 24);
    free(got);
    cvx_st_close(st);
    cvx_config_free(&c);
}
static void test_golden_scheduler_noise(void **state) {
    (void)state;
    check_scheduler_noise(GOLDEN "/scheduler_5b");
    check_scheduler_noise(GOLDEN "/scheduler_1.5");
}

/* The pipelines' initial latents: randn(latent shape, generator seeded with call.seed) * 1.0. */
static void test_golden_e2e_initial_latents(void **state) {
    (void)state;
    const char *dirs[3] = {GOLDEN "/e2e_2b", GOLDEN "/e2e_5b", GOLDEN "/e2e_5b_dyncfg"};
    for (int d = 0; d < 3; d++) {
        char path[256];
        cvx_config c;
        snprintf(path, sizeof path, "%s/case.json", dirs[d]);
        ASSERT_OK(cvx_config_load(&c, path));
        snprintf(path, sizeof path, "%s/expected.safetensors", dirs[d]);
        cvx_safetensors *st = tu_open(path);
        const cvx_tensor *t = cvx_st_find(st, "initial_latents");
        ASSERT_NONNULL(t);
        float *got = randn_seeded((uint64_t)json_object_get_int64(jget(jget(c.root, "call"), "seed")),
                                  (size_t)t->numel);
        expect_exact(st, "initial_latents", got, (size_t)t->numel);
        free(got);
        cvx_st_close(st);
        cvx_config_free(&c);
    }
}

/* The generator state carries over between calls exactly as in torch: the scalar path (< 16)
 * caches the second Box-Muller value, which the vector path neither uses nor clears; the vector
 * path consumes n (+ 16 when n % 16 != 0) 32-bit draws; the scalar path 4 per pair. */
static void test_state_carry_over(void **state) {
    (void)state;
    cvx_generator a, b;
    float x2[2], y, z[40];
    cvx_generator_seed(&a, 1234);
    cvx_randn(&a, x2, 2);                            /* one pair */
    cvx_generator_seed(&b, 1234);
    cvx_randn(&b, &y, 1);                            /* first of the pair, second cached */
    assert_memory_equal(&y, &x2[0], sizeof y);
    cvx_randn(&b, z, 40);                            /* vector path leaves the cache alone */
    cvx_randn(&b, &y, 1);
    assert_memory_equal(&y, &x2[1], sizeof y);

    /* draw counts, measured against raw mt19937 output (torch.randn(0) draws nothing) */
    const size_t sizes[] = {16, 17, 31, 32, 33, 576, 0, 1, 2, 3, 15};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        size_t draws = n >= 16 ? n + (n % 16 ? 16 : 0) : 4 * ((n + 1) / 2);   /* 2 x random64 per pair */
        float buf[600];
        cvx_generator_seed(&a, 99 + i);
        cvx_generator_seed(&b, 99 + i);
        cvx_randn(&a, buf, n);
        for (size_t k = 0; k < draws; k++) cvx_generator_random(&b);
        assert_int_equal(cvx_generator_random(&a), cvx_generator_random(&b));
    }
}

/* Resume: a byte copy of the generator taken mid-stream (as a stage-2 checkpoint saves it)
 * continues with exactly the values the original produces. */
static void test_resume_from_copy(void **state) {
    (void)state;
    const size_t sizes[] = {5, 280, 1, 17, 3, 4096, 2, 33};
    cvx_generator g, saved;
    unsigned char bytes[sizeof(cvx_generator)];
    cvx_generator_seed(&g, 42);
    float *a = cvx_alloc_f32(4096), *b = cvx_alloc_f32(4096);
    cvx_randn(&g, a, 7);                             /* odd count: a cached normal is pending */
    assert_int_equal(g.has_next_double_normal, 1);
    memcpy(bytes, &g, sizeof g);                     /* "write the checkpoint" */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) cvx_randn(&g, a, sizes[i]);
    memcpy(&saved, bytes, sizeof saved);             /* "load it" */
    ASSERT_OK(cvx_generator_validate(&saved));
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) cvx_randn(&saved, b, sizes[i]);
    assert_memory_equal(a, b, 33 * sizeof(float));  /* the last draw, and ... */
    assert_memory_equal(&g, &saved, sizeof g);       /* ... the whole state agree */

    /* the same sequence from a fresh seed without any copy */
    cvx_generator h;
    cvx_generator_seed(&h, 42);
    cvx_randn(&h, b, 7);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) cvx_randn(&h, b, sizes[i]);
    assert_memory_equal(a, b, 33 * sizeof(float));
    free(a);
    free(b);
}

/* A state from an incompatible build or a corrupted checkpoint is refused with a message. */
static void test_validate(void **state) {
    (void)state;
    cvx_generator g, bad;
    cvx_generator_seed(&g, 3);
    ASSERT_OK(cvx_generator_validate(&g));
    float x[20];
    cvx_randn(&g, x, 20);
    ASSERT_OK(cvx_generator_validate(&g));

    bad = g;
    bad.magic ^= 1;
    assert_int_equal(cvx_generator_validate(&bad), -1);
    assert_non_null(strstr(cvx_last_error(), "incompatible"));
    print_message("  bad magic: %s\n", cvx_last_error());
    bad = g;
    bad.left = 0;
    assert_int_equal(cvx_generator_validate(&bad), -1);
    bad = g;
    bad.next = CVX_MT_N + 1;
    assert_int_equal(cvx_generator_validate(&bad), -1);
    bad = g;
    bad.has_next_double_normal = 2;
    assert_int_equal(cvx_generator_validate(&bad), -1);
    print_message("  bad state: %s\n", cvx_last_error());
}

/* issue 14: next = 624, left = 624 passed the per-field range checks and the next draw read
 * state[624] (out of bounds). Every inconsistent next/left pair must be refused; every state
 * that draws can reach must be accepted, and restoring it gives the same draws. */
static void test_validate_next_left(void **state) {
    (void)state;
    cvx_generator g;
    cvx_generator_seed(&g, 5);
    cvx_generator bad = g;
    bad.next = CVX_MT_N;
    bad.left = CVX_MT_N;
    assert_int_equal(cvx_generator_validate(&bad), -1);
    assert_non_null(strstr(cvx_last_error(), "next 624, left 624"));
    print_message("  %s\n", cvx_last_error());
    assert_int_equal(cvx_generator_restore(&g, &bad, sizeof bad), -1);
    assert_int_equal(cvx_generator_restore(&g, &bad, sizeof bad - 1), -1);
    assert_non_null(strstr(cvx_last_error(), "bytes"));
    /* exhaustive over the index pairs near and inside the valid region */
    int accepted = 0;
    for (int next = 0; next <= CVX_MT_N + 2; next++)
        for (int left = -2; left <= CVX_MT_N + 2; left++) {
            bad = g;
            bad.next = (uint32_t)next;
            bad.left = left;
            int ok = cvx_generator_validate(&bad) == 0;
            int want = (next == 0 && left == 1) || (next >= 1 && left >= 1 && next + left == CVX_MT_N + 1);
            assert_int_equal(ok, want);
            if (ok) {  /* a full regeneration cycle from here stays inside the array (ASan/UBSan) */
                for (int k = 0; k < CVX_MT_N + 2; k++) (void)cvx_generator_random(&bad);
                accepted++;
            }
        }
    assert_int_equal(accepted, CVX_MT_N + 1);
    /* every state reached by drawing validates and restores to the same stream */
    for (int k = 0; k < 2 * CVX_MT_N; k++) {
        ASSERT_OK(cvx_generator_validate(&g));
        cvx_generator r;
        ASSERT_OK(cvx_generator_restore(&r, &g, sizeof g));
        assert_int_equal(cvx_generator_random(&r), cvx_generator_random(&g));
    }
    bad = g;
    bad.has_next_double_normal = 1;
    bad.next_double_normal = NAN;
    assert_int_equal(cvx_generator_validate(&bad), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mt19937_reference),
        cmocka_unit_test(test_validate_next_left),
        cmocka_unit_test(test_golden_small),
        cmocka_unit_test(test_golden_latent_shapes),
        cmocka_unit_test(test_golden_consecutive_draws),
        cmocka_unit_test(test_golden_scheduler_noise),
        cmocka_unit_test(test_golden_e2e_initial_latents),
        cmocka_unit_test(test_state_carry_over),
        cmocka_unit_test(test_resume_from_copy),
        cmocka_unit_test(test_validate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
