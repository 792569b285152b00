/* The make targets a new user runs first (issue 19's "small things", issue 21):
 *   - make run NP=2 as root gives mpirun --allow-run-as-root and says so (Open MPI refuses root
 *     otherwise); not as another user, nor with one rank;
 *   - make bench PART=... maps each part onto its benchmark (kernels, attention, and the
 *     side-by-side cases t5,tr2b,tr5b,vae); an unknown part is one error before anything runs;
 *   - bench/side_by_side.sh stops at once on SIGTERM, with the benchmark it is running (its trap
 *     swallowed the first SIGTERM, and the benchmark in the foreground ran on): checked with a
 *     stub benchmark that would sleep 30 s.
 * make runs with -n (prints the commands) in a clean environment (no MAKEFLAGS of a parent make). */
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

static void test_run_np2_as_root(void **state) {
    (void)state;
    static char out[65536];
    char dir[64], args[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(args, sizeof args, "pipeline NP=2 OUT=%s BIN=%s/bin", dir, tu_build_dir());
    assert_int_equal(tu_make_n(args, out, sizeof out), 0);
    const int root = geteuid() == 0;
    print_message("  uid %d: %d mpirun commands, %d with --allow-run-as-root, %d notes\n", (int)geteuid(),
                  tu_count_substr(out, "mpirun -q"), tu_count_substr(out, "mpirun -q -np 2 --allow-run-as-root"),
                  tu_count_substr(out, "note: running as root"));
    assert_int_equal(tu_count_substr(out, "mpirun -q -np 2"), 2);   /* stages 2 and 3 */
    assert_int_equal(tu_count_substr(out, "--allow-run-as-root"), root ? 4 : 0);   /* 2 commands + 2 notes */
    assert_int_equal(tu_count_substr(out, "note: running as root"), root ? 2 : 0);
    snprintf(args, sizeof args, "pipeline NP=1 OUT=%s BIN=%s/bin", dir, tu_build_dir());
    assert_int_equal(tu_make_n(args, out, sizeof out), 0);
    assert_null(strstr(out, "mpirun"));
    assert_null(strstr(out, "note: running as root"));
    tu_rmrf(dir);
}

static void test_bench_parts(void **state) {
    (void)state;
    static char out[65536];
    struct { const char *part, *want[2], *not_want; } cases[] = {
        {"", {"bench_kernels 2 3 quick", "side_by_side.sh t5,tr2b,tr5b,vae"}, NULL},
        {"PART=t5,vae", {"side_by_side.sh t5,vae", NULL}, "3 quick"},
        {"PART=tr2b", {"side_by_side.sh tr2b", NULL}, "bench_attention 2476"},
        {"PART=attention", {"bench_attention 2476 30 f32 3", "bench_attention 2476 30 bf16 3"}, "side_by_side"},
        {"PART=kernels", {"bench_kernels 2 3 quick", NULL}, "side_by_side"},
        {"PART=hv15,ltx", {"side_by_side_video.sh hv15,ltx", NULL}, "side_by_side.sh"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "bench %s", cases[i].part);
        assert_int_equal(tu_make_n(args, out, sizeof out), 0);
        for (int k = 0; k < 2 && cases[i].want[k]; k++)
            if (!strstr(out, cases[i].want[k])) fail_msg("make -n %s: no '%s' in:\n%s", args, cases[i].want[k], out);
        if (cases[i].not_want && strstr(out, cases[i].not_want))
            fail_msg("make -n %s: '%s' should not run:\n%s", args, cases[i].not_want, out);
        print_message("  make bench %-16s ok\n", cases[i].part);
    }
    assert_int_not_equal(tu_make_n("bench PART=t5,bogus", out, sizeof out), 0);
    print_message("  %s", out);
    assert_non_null(strstr(out, "unknown PART 'bogus'"));
    assert_int_equal(tu_count_substr(out, "\n"), 1);   /* refused before anything is built or run */
}

/* 1 while pid exists and is not a zombie. */
static int alive(pid_t pid) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = 0;
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
}

static void test_bench_sigterm_stops_at_once(void **state) {
    (void)state;
    char dir[64], path[256], text[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bench", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/bench/bench_stage1", dir);
    snprintf(text, sizeof text, "#!/bin/sh\necho $$ > %s/stub.pid\nsleep 30\necho RESULT case=t5 precision=f32 "
             "seconds=1\n", dir);
    tu_write(path, text, strlen(text));
    assert_int_equal(chmod(path, 0755), 0);
    char envb[128];
    snprintf(envb, sizeof envb, "BUILD=%s", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        putenv(envb);
        putenv("PEER_DIR=/nonexistent");
        putenv("PRECISIONS=f32");
        execl("/bin/sh", "sh", "bench/side_by_side.sh", "t5", (char *)NULL);
        _exit(127);
    }
    snprintf(path, sizeof path, "%s/stub.pid", dir);
    long stub = 0;
    for (int i = 0; i < 200 && stub <= 0; i++) {   /* the stub benchmark has started */
        usleep(20000);
        FILE *f = fopen(path, "r");
        if (f && fscanf(f, "%ld", &stub) != 1) stub = 0;
        if (f) fclose(f);
    }
    assert_true(stub > 0);
    const double t0 = cvx_time();
    assert_int_equal(kill(pid, SIGTERM), 0);
    int st = 0;
    pid_t w = 0;
    while ((w = waitpid(pid, &st, WNOHANG)) == 0 && cvx_time() - t0 < 10) usleep(10000);
    const double dt = cvx_time() - t0;
    if (w == 0) kill(pid, SIGKILL), waitpid(pid, &st, 0);
    for (int i = 0; i < 100 && alive((pid_t)stub); i++) usleep(10000);
    const int stub_alive = alive((pid_t)stub);
    if (stub_alive) kill((pid_t)stub, SIGKILL);
    print_message("  side_by_side.sh exited %.2f s after SIGTERM (status %d), stub benchmark %s\n", dt,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st), stub_alive ? "still running" : "stopped");
    assert_true(w == pid && dt < 3.0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 143);
    assert_false(stub_alive);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_np2_as_root),
        cmocka_unit_test(test_bench_parts),
        cmocka_unit_test(test_bench_sigterm_stops_at_once),
    };
    return cmocka_run_group_tests_name("make_targets", tests, NULL, NULL);
}
