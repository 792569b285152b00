/* common/rng: torch.Generator('cpu').manual_seed(s) + torch.randn(float32), bit for bit:
 * mt19937 reference values, state carry-over, resume from a byte copy of the generator and state
 * validation. The golden noise (tests/data/golden/noise: numel < 16, multiples of 16 and not,
 * real latent shapes as head/mid/tail + float64 sums, three consecutive draws; the DPM chains'
 * per-step noise; the pipelines' initial latents), compared bitwise, is rows of
 * tests/golden_cases.c. */
#include "testutil.h"

#include <math.h>

#include "rng.h"


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
        cmocka_unit_test(test_state_carry_over),
        cmocka_unit_test(test_resume_from_copy),
        cmocka_unit_test(test_validate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
