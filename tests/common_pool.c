/* The buffer pool (common/pool.c):
 *   - a buffer given back is handed out again for a request of its size (and of up to half its
 *     size), not for a larger one or one under half;
 *   - the pool never holds more than the most that was in use at once (the high-water mark), over
 *     random sequences of gets and puts of mixed sizes (the feature maps of a decode: sizes that
 *     grow stage by stage, tiles that start small again), checked after every call;
 *   - buffers are writable over their whole size and 64-byte aligned (2 MB from 8 MB on);
 *   - trim returns the kept buffers, in-use counts what is out; a foreign pointer is refused. */
#include "testutil.h"
#include "pool.h"

#include <setjmp.h>
#include <stdint.h>

static void test_reuse(void **state) {
    (void)state;
    cvx_pool p;
    cvx_pool_init(&p);
    float *a = cvx_pool_get(&p, 1000);
    assert_int_equal((uintptr_t)a % 64, 0);
    cvx_pool_put(&p, a);
    assert_ptr_equal(cvx_pool_get(&p, 1000), a);   /* same size: the kept buffer */
    cvx_pool_put(&p, a);
    assert_ptr_equal(cvx_pool_get(&p, 600), a);    /* over half its size: still it */
    cvx_pool_put(&p, a);
    float *b = cvx_pool_get(&p, 400);              /* under half: a new one, a released (both > the mark) */
    assert_int_equal(p.held_bytes, 1600);
    float *c = cvx_pool_get(&p, 2000);             /* larger: a new one, b kept (both fit the new mark) */
    assert_int_equal(p.held_bytes, 9600);
    assert_int_equal(p.mark_bytes, 9600);
    assert_int_equal(cvx_pool_in_use(&p), 2);
    cvx_pool_put(&p, b);
    cvx_pool_put(&p, c);
    assert_int_equal(cvx_pool_in_use(&p), 0);
    assert_true(p.held_bytes <= p.mark_bytes);
    cvx_pool_trim(&p);
    assert_int_equal(p.held_bytes, 0);
    /* large buffers: 2 MB aligned, writable to the end */
    float *big = cvx_pool_get(&p, (size_t)3 << 20);
    assert_int_equal((uintptr_t)big % (2u << 20), 0);
    big[0] = 1.0f, big[((size_t)3 << 20) - 1] = 2.0f;
    cvx_pool_put(&p, big);
    cvx_pool_free(&p);
}

/* Random gets and puts; after each call: held ≤ mark, mark = max in use so far (by capacity),
 * used = the sum of the live buffers' capacities; each live buffer keeps what was written. */
static void test_mark_invariant(void **state) {
    (void)state;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (int round = 0; round < 20; round++) {
        cvx_pool p;
        cvx_pool_init(&p);
        enum { LIVE = 12 };
        float *live[LIVE] = {0};
        size_t n_of[LIVE] = {0};
        size_t max_used = 0;
        for (int step = 0; step < 400; step++) {
            int k = (int)(tu_frand(&rng) * 0.5f * LIVE + 0.5f * LIVE) % LIVE;
            if (live[k]) {
                for (size_t i = 0; i < n_of[k]; i += 97) assert_true(live[k][i] == (float)(k + i % 7));
                cvx_pool_put(&p, live[k]);
                live[k] = NULL;
            } else {
                /* sizes in a few classes that grow with the step, and small ones */
                size_t base = (size_t)(1 + step / 80) * 5000, n = base * (size_t)(1 + (int)((tu_frand(&rng) + 1.0f) * 2.0f) % 4);
                live[k] = cvx_pool_get(&p, n), n_of[k] = n;
                for (size_t i = 0; i < n; i += 97) live[k][i] = (float)(k + i % 7);
            }
            size_t used = 0;
            for (int i = 0; i < LIVE; i++) used += live[i] ? 1 : 0;
            assert_int_equal(cvx_pool_in_use(&p), (int)used);
            if (p.used_bytes > max_used) max_used = p.used_bytes;
            assert_int_equal(p.mark_bytes, max_used);
            assert_true(p.held_bytes <= p.mark_bytes);
            assert_true(p.used_bytes <= p.held_bytes);
        }
        for (int i = 0; i < LIVE; i++) cvx_pool_put(&p, live[i]);
        assert_int_equal(cvx_pool_in_use(&p), 0);
        assert_int_equal(p.used_bytes, 0);
        cvx_pool_free(&p);
    }
}

static jmp_buf g_jump;
static char g_msg[256];
static void on_die(void *user, const char *msg) {
    (void)user;
    snprintf(g_msg, sizeof g_msg, "%s", msg);
    longjmp(g_jump, 1);
}

static void test_foreign_pointer(void **state) {
    (void)state;
    cvx_pool p;
    cvx_pool_init(&p);
    float *a = cvx_pool_get(&p, 10), other[4];
    cvx_set_die_handler(on_die, NULL);
    if (!setjmp(g_jump)) {
        cvx_pool_put(&p, other);
        fail_msg("a pointer the pool did not hand out was taken");
    }
    assert_non_null(strstr(g_msg, "not handed out by this pool"));
    cvx_pool_put(&p, a);
    cvx_set_die_handler(on_die, NULL);   /* cvx_die clears the handler before calling it */
    if (!setjmp(g_jump)) {
        cvx_pool_put(&p, a);
        fail_msg("a buffer given back twice was taken");
    }
    assert_non_null(strstr(g_msg, "given back twice"));
    cvx_set_die_handler(NULL, NULL);
    cvx_pool_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_reuse), cmocka_unit_test(test_mark_invariant),
                                       cmocka_unit_test(test_foreign_pointer)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
