/* cvx_runtime_setup: with neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set, the program re-executes
 * itself once and libgomp then runs with the chosen policy (checked with omp_display_env, i.e.
 * what libgomp actually parsed at load time); a user's setting and CVX_NO_REEXEC=1 are respected.
 * The cases run this test binary again as a child ("child" argument) under a controlled env. */
#include "testutil.h"
#include "runenv.h"

#include <omp.h>

static void child(int argc, char **argv) {
    cvx_runtime_setup(argc, argv);
    fflush(stdout);
    dup2(1, 2);   /* omp_display_env prints on stderr */
    printf("pid %ld reexeced %s\n", (long)getpid(), getenv("CVX_REEXECED") ? "yes" : "no");
    fflush(stdout);
    omp_display_env(1);
    exit(0);
}

static void run_child(const char *env, char *out, size_t n) {
    char self[4096], cmd[8192];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(k > 0);
    self[k] = 0;
    snprintf(cmd, sizeof cmd,
             "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u CVX_NO_REEXEC -u CVX_REEXECED %s '%s' child 2>&1", env, self);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = 0;
    assert_int_equal(pclose(p), 0);
}

static void test_reexec_sets_policy(void **state) {
    (void)state;
    char out[16384];
    run_child("", out, sizeof out);
    assert_non_null(strstr(out, "reexeced yes"));
    assert_non_null(strstr(out, "GOMP_SPINCOUNT = '" CVX_DEFAULT_SPIN_VALUE "'"));   /* parsed by libgomp */
}

static void test_user_setting_respected(void **state) {
    (void)state;
    char out[16384];
    run_child("OMP_WAIT_POLICY=ACTIVE", out, sizeof out);
    assert_non_null(strstr(out, "reexeced no"));
    assert_non_null(strstr(out, "OMP_WAIT_POLICY = 'ACTIVE'"));
    run_child("GOMP_SPINCOUNT=12345", out, sizeof out);
    assert_non_null(strstr(out, "reexeced no"));
    assert_non_null(strstr(out, "GOMP_SPINCOUNT = '12345'"));
    run_child("CVX_NO_REEXEC=1", out, sizeof out);
    assert_non_null(strstr(out, "reexeced no"));
    assert_non_null(strstr(out, "GOMP_SPINCOUNT = '300000'"));   /* libgomp's default */
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "child") == 0) child(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reexec_sets_policy),
        cmocka_unit_test(test_user_setting_respected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
