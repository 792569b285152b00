/* A run directory across runs (issue 14), beside the bad-input table of tests/e2e_bad_inputs.c:
 * a locked directory names its holder's pid; a stage-1 re-run invalidates the latents until
 * stage 2 runs again; generation_config.json holds no keys of an earlier run; a stale temp of a
 * dead run is removed by the next run; SIGTERM during writes leaves no temp. Each test starts
 * from (a copy of) the outputs of one good run of the three programs. */
#include "testutil.h"
#include "config.h"
#include "fileio.h"
#include "lock.h"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <sys/wait.h>

static tu_good_run g_good;

static int group_setup(void **state) {
    (void)state;
    return tu_good_run_make(&g_good);
}
static int group_teardown(void **state) {
    (void)state;
    tu_rmrf(g_good.dir);
    return 0;
}

/* A second run into a locked directory: one error line naming the holder's pid, nothing
 * written; the same run succeeds once the lock is released. */
static void test_lock_names_holder(void **state) {
    (void)state;
    char D[64], cmd[8192], err[4096], want[64];
    tu_mkdtemp(D, sizeof D);
    cvx_dir_lock *l = cvx_dir_lock_acquire(D, 1);
    ASSERT_NONNULL(l);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'A panda' --model_dir %s --output_dir %s", g_good.s1, g_good.model, D);
    int rc = tu_run(cmd, err, sizeof err);
    print_message("  %s", err);
    assert_int_equal(rc, 1);
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    snprintf(want, sizeof want, "pid %ld", (long)getpid());
    assert_non_null(strstr(err, "in use by another run"));
    assert_non_null(strstr(err, want));
    assert_int_equal(tu_count_entries(D), 0);
    cvx_dir_lock_release(l);
    assert_int_equal(tu_run(cmd, err, sizeof err), 0);
    assert_int_equal(tu_count_entries(D), 2);   /* embeddings + generation_config.json */
    tu_rmrf(D);
}

/* The lock message names the process that holds the lock (issue 21): here a reader (this test,
 * a shared lock, which records no pid) while the .lock file still names a writer that has exited. */
static void test_lock_names_live_holder(void **state) {
    (void)state;
    char D[64], cmd[8192], err[4096], want[64], dead[64];
    tu_mkdtemp(D, sizeof D);
    pid_t child = fork();
    if (child == 0) _exit(cvx_dir_lock_acquire(D, 1) ? 0 : 1);   /* records its pid, then dies */
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cvx_dir_lock *l = cvx_dir_lock_acquire(D, 0);
    ASSERT_NONNULL(l);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'A panda' --model_dir %s --output_dir %s", g_good.s1, g_good.model, D);
    int rc = tu_run(cmd, err, sizeof err);
    print_message("  %s", err);
    assert_int_equal(rc, 1);
    snprintf(want, sizeof want, "pid %ld", (long)getpid());
    snprintf(dead, sizeof dead, "pid %ld", (long)child);
    assert_non_null(strstr(err, want));
    assert_null(strstr(err, dead));
    cvx_dir_lock_release(l);
    tu_rmrf(D);
}

/* A holder whose /proc/PID/comm is "exe" (a program re-executed through /proc/self/exe, as
 * cvx_runtime_setup does) is named by its argv[0] (issue 37: the message said "exe"): flock(1)
 * run through a symlink named exe, with argv[0] "stage2", holds the lock. */
static void test_lock_names_reexecuted_holder(void **state) {
    (void)state;
    char D[64], X[64], cmd[8192], err[4096];
    tu_mkdtemp(D, sizeof D);
    tu_mkdtemp(X, sizeof X);
    snprintf(cmd, sizeof cmd, "ln -s \"$(command -v flock)\" %s/exe && touch %s/.lock", X, D);
    if (tu_run(cmd, NULL, 0) != 0) {
        print_message("  (no flock(1): the case is not run)\n");
        tu_rmrf(D), tu_rmrf(X);
        return;
    }
    snprintf(cmd, sizeof cmd, "bash -c 'exec -a stage2 %s/exe -s %s/.lock sleep 30' & echo $! > %s/pid", X, D, X);
    tu_run_ok(cmd);
    for (int i = 0; i < 100; i++) {   /* until it holds the lock */
        FILE *f = fopen("/proc/locks", "r");
        char line[256], pidf[128];
        long pid = 0;
        snprintf(pidf, sizeof pidf, "%s/pid", X);
        FILE *p = fopen(pidf, "r");
        if (p && fscanf(p, "%ld", &pid) != 1) pid = 0;
        if (p) fclose(p);
        int held = 0;
        while (f && pid && fgets(line, sizeof line, f)) {
            long q;
            if (sscanf(line, "%*d: FLOCK %*s %*s %ld", &q) == 1 && q == pid) held = 1;
        }
        if (f) fclose(f);
        if (held) break;
        usleep(50000);
    }
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'A panda' --model_dir %s --output_dir %s", g_good.s1, g_good.model, D);
    int rc = tu_run(cmd, err, sizeof err);
    print_message("  %s", err);
    snprintf(cmd, sizeof cmd, "kill $(cat %s/pid)", X);
    tu_run_ok(cmd);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, ", stage2"));
    assert_null(strstr(err, ", exe"));
    tu_rmrf(D);
    tu_rmrf(X);
}

/* Re-running stage 1 over a full run directory invalidates the latents (the table's "older than a
 * stage-1 re-run" cases); running stage 2 again makes the chain whole, and stage 3 decodes. A
 * first run into a fresh directory records no null keys. */
static void test_rerun_chain_recovers(void **state) {
    (void)state;
    char D[64], cmd[8192], err[4096], gc[512];
    tu_mkdtemp(D, sizeof D);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'A panda' --model_dir %s --output_dir %s", g_good.s1, g_good.model, D);
    tu_run_ok(cmd);
    snprintf(gc, sizeof gc, "%s/generation_config.json", D);
    size_t n;
    char *text = cvx_read_file(gc, &n);
    assert_non_null(text);
    /* a fresh directory: nothing to invalidate (T2V records "image"/"video" null already) */
    assert_null(strstr(text, "\"stage2_latents_xxh64\""));
    assert_null(strstr(text, "\"prompts_file\""));
    free(text);
    snprintf(cmd, sizeof cmd, "cp -p '%s'/* '%s'/", g_good.dir, D);   /* the full run of 'A panda' */
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'A red car' --model_dir %s --output_dir %s", g_good.s1, g_good.model, D);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s", g_good.s3, D, g_good.model);
    assert_int_equal(tu_run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "run stage 2 again"));
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s " TU_STAGE2_SMALL, g_good.s2, D, g_good.model);
    tu_run_ok(cmd);
    cvx_config c;
    const char *prompt, *h;
    ASSERT_OK(cvx_config_load(&c, gc));
    ASSERT_OK(cvx_cfg_str(&c, "prompt", &prompt));
    assert_string_equal(prompt, "A red car");
    ASSERT_OK(cvx_cfg_str(&c, "stage2_latents_xxh64", &h));   /* recorded again */
    cvx_config_free(&c);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s", g_good.s3, D, g_good.model);
    tu_run_ok(cmd);
    tu_rmrf(D);
}

static void gc_str(const char *path, const char *key, char *out, size_t n) { ASSERT_OK(cvx_genconfig_get_str(path, key, out, n)); }

/* generation_config.json describes the last run, not a mix: a stage-2 run without a step cache
 * after one with it leaves no cache numbers of the earlier run; stage 2 into an output directory
 * of an earlier run records the stage-1 keys of its new input (prompt, embeddings hash). */
static void test_genconfig_no_stale_keys(void **state) {
    (void)state;
    char D[64], A[64], B[64], cmd[8192], gc[512], v[4096], want[17], p[512];
    tu_mkdtemp(D, sizeof D);
    snprintf(cmd, sizeof cmd, "cp -p '%s'/* '%s'/", g_good.dir, D);
    tu_run_ok(cmd);
    snprintf(gc, sizeof gc, "%s/generation_config.json", D);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s " TU_STAGE2_SMALL " --cache teacache "
             "--cache_threshold 0.1", g_good.s2, D, g_good.model);
    tu_run_ok(cmd);
    assert_true(tu_genconfig_has(gc, "cache_threshold") && tu_genconfig_has(gc, "cache_steps_computed"));
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s " TU_STAGE2_SMALL, g_good.s2, D, g_good.model);
    tu_run_ok(cmd);
    gc_str(gc, "cache", v, sizeof v);
    assert_string_equal(v, "none");
    const char *cache_keys[] = {"cache_threshold", "teacache_coefficients", "cache_steps_computed",
                                "cache_steps_skipped", "cache_blocks_skipped"};
    for (int i = 0; i < 5; i++)
        if (tu_genconfig_has(gc, cache_keys[i])) fail_msg("%s: '%s' of the earlier cached run kept", gc, cache_keys[i]);
    /* B: stage 2 from the full run's directory, then from A (stage 1 of another prompt) */
    tu_mkdtemp(A, sizeof A);
    tu_mkdtemp(B, sizeof B);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_dir %s --model_dir %s " TU_STAGE2_SMALL, g_good.s2, g_good.dir, B,
             g_good.model);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'A red car' --model_dir %s --output_dir %s", g_good.s1, g_good.model, A);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_dir %s --model_dir %s " TU_STAGE2_SMALL, g_good.s2, A, B,
             g_good.model);
    tu_run_ok(cmd);
    snprintf(gc, sizeof gc, "%s/generation_config.json", B);
    gc_str(gc, "prompt", v, sizeof v);
    assert_string_equal(v, "A red car");
    snprintf(p, sizeof p, "%s/stage1_embeddings.safetensors", A);
    ASSERT_OK(cvx_file_xxh64(p, want));
    gc_str(gc, "stage1_embeddings_xxh64", v, sizeof v);
    assert_string_equal(v, want);
    tu_rmrf(D), tu_rmrf(A), tu_rmrf(B);
}

/* A temp left by a run that died (its pid no longer runs) is removed by the next run into the
 * directory; a temp of a live process (this test) is kept. */
static void test_stale_temp_removed(void **state) {
    (void)state;
    char D[64], cmd[8192], err[4096], dead[512], live[512];
    tu_mkdtemp(D, sizeof D);
    pid_t child = fork();   /* a pid that surely ran and is gone */
    assert_true(child >= 0);
    if (child == 0) _exit(0);
    assert_int_equal(waitpid(child, NULL, 0), child);
    snprintf(dead, sizeof dead, "%s/stage1_embeddings.safetensors.tmp.%ld.0123456789ab", D, (long)child);
    snprintf(live, sizeof live, "%s/generation_config.json.tmp.%ld.abcdef012345", D, (long)getpid());
    tu_write(dead, "half", 4);
    tu_write(live, "busy", 4);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'A panda' --model_dir %s --output_dir %s", g_good.s1, g_good.model, D);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc) fail_msg("stage1 failed (%d): %s", rc, err);
    assert_false(cvx_is_file(dead));
    assert_true(cvx_is_file(live));
    tu_rmrf(D);
}

/* SIGTERM at many points of a run that writes a file after every step (checkpoints, then the
 * output set): the run dies of the signal and no temp is ever left behind. */
static void test_sigterm_leaves_no_temp(void **state) {
    (void)state;
    char D[64], cmd[8192];
    tu_mkdtemp(D, sizeof D);
    snprintf(cmd, sizeof cmd, "cp -p '%s'/* '%s'/", g_good.dir, D);
    tu_run_ok(cmd);
    int killed = 0;
    for (int trial = 0; trial < 24; trial++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            int devnull = open("/dev/null", O_WRONLY);
            dup2(devnull, 2);
            execl(g_good.s2, g_good.s2, "--quiet", "--input_dir", D, "--model_dir", g_good.model, "--num_inference_steps", "6",
                  "--frames", "9", "--height", "48", "--width", "64", "--checkpoint_every", "1", (char *)NULL);
            _exit(127);
        }
        struct timespec ts = {0, (long)(20 + 15 * trial) * 1000000L};   /* 20 .. 365 ms */
        nanosleep(&ts, NULL);
        kill(pid, SIGTERM);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        if (WIFSIGNALED(st)) {
            assert_int_equal(WTERMSIG(st), SIGTERM);
            killed++;
        } else {
            assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);   /* finished before the signal */
        }
        DIR *d = opendir(D);
        char left[256] = "";
        for (struct dirent *e; (e = readdir(d));)
            if (strstr(e->d_name, ".tmp.")) snprintf(left, sizeof left, "%s", e->d_name);
        closedir(d);
        if (left[0]) fail_msg("trial %d: temp %s left behind after SIGTERM", trial, left);
    }
    print_message("  %d of 24 runs killed by SIGTERM mid-run, no temp left\n", killed);
    assert_true(killed > 0);
    tu_rmrf(D);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_lock_names_holder),
                                       cmocka_unit_test(test_lock_names_live_holder),
                                       cmocka_unit_test(test_lock_names_reexecuted_holder), cmocka_unit_test(test_stale_temp_removed),
                                       cmocka_unit_test(test_rerun_chain_recovers),
                                       cmocka_unit_test(test_genconfig_no_stale_keys),
                                       cmocka_unit_test(test_sigterm_leaves_no_temp)};
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
