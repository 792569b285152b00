/* issue 14, the library half: temp files (names, O_EXCL|O_NOFOLLOW, signal cleanup, stale
 * temps), output sets, fsync, the xxh64 pair check, directory locks, non-finite checks, config
 * ranges, generation_config validation, UTF-8/prompt checks and the CLI value helpers. */
#include "testutil.h"
#include "cli.h"
#include "config.h"
#include "fileio.h"
#include "lock.h"
#include "validate.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

static char *slurp(const char *path) {
    size_t n;
    char *s = cvx_read_file(path, &n);
    return s;
}
static int temps_in(const char *dir) {   /* files with the temp pattern */
    DIR *d = opendir(dir);
    int k = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (cvx_temp_name_parse(e->d_name, NULL)) k++;
    if (d) closedir(d);
    return k;
}

/* Names: <final>.tmp.<pid>.<12 hex>, unpredictable (two differ), exclusive, parseable. */
static void test_temp_names(void **state) {
    (void)state;
    char dir[64], final[256], a[4200], b[4200];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(final, sizeof final, "%s/out.bin", dir);
    int fa = cvx_temp_create(final, a, sizeof a), fb = cvx_temp_create(final, b, sizeof b);
    assert_true(fa >= 0 && fb >= 0);
    assert_string_not_equal(a, b);
    char want[300];
    snprintf(want, sizeof want, "%s.tmp.%ld.", final, (long)getpid());
    assert_int_equal(strncmp(a, want, strlen(want)), 0);
    assert_int_equal(strlen(a), strlen(want) + 12);
    long pid;
    assert_true(cvx_temp_name_parse(strrchr(a, '/') + 1, &pid));
    assert_int_equal(pid, getpid());
    assert_true(fcntl(fa, F_GETFD) & FD_CLOEXEC);
    close(fa);
    close(fb);
    cvx_temp_discard(a);
    cvx_temp_discard(b);
    assert_int_equal(temps_in(dir), 0);
    /* names that must not parse as temps (never removed by the stale cleaner) */
    static const char *const not_temps[] = {"x.tmp.123", "x.tmp.123.0123456789aB", "x.tmp..0123456789ab",
                                            ".tmp.12.0123456789ab", "x.tmp.12.0123456789a", "x.tmq.12.0123456789ab",
                                            "x.tmp.0.0123456789ab", "x.tmp.12345678901.0123456789ab"};
    for (size_t i = 0; i < sizeof not_temps / sizeof not_temps[0]; i++)
        if (cvx_temp_name_parse(not_temps[i], NULL)) fail_msg("'%s' parsed as a temp name", not_temps[i]);
    assert_true(cvx_temp_name_parse("a.b.tmp.77.abcdef012345", &pid));
    assert_int_equal(pid, 77);
    tu_rmrf(dir);
}

/* Atomic writes replace the final name, refuse a symlink planted there (neither followed nor
 * replaced: issue 37), and leave no temp behind; a failed write leaves the old file. */
static void test_atomic_write(void **state) {
    (void)state;
    char dir[64], final[256], victim[256];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(final, sizeof final, "%s/config.json", dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    tu_write(victim, "keep", 4);
    assert_int_equal(symlink(victim, final), 0);
    assert_int_equal(cvx_write_file_atomic(final, "new", 3), -1);
    assert_non_null(strstr(cvx_last_error(), "config.json: a symbolic link, not a regular file"));
    char *v = slurp(victim);
    assert_string_equal(v, "keep");   /* the symlink was not followed */
    struct stat st;
    assert_int_equal(lstat(final, &st), 0);
    assert_true(S_ISLNK(st.st_mode));   /* nor replaced */
    free(v);
    assert_int_equal(temps_in(dir), 0);
    assert_int_equal(unlink(final), 0);
    ASSERT_OK(cvx_write_file_atomic(final, "new", 3));
    char *f = slurp(final);
    assert_string_equal(f, "new");
    free(f);
    /* a FIFO and a character device (as root: a copy of /dev/null's node) are refused too */
    char fifo[300];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    assert_int_equal(cvx_write_file_atomic(fifo, "x", 1), -1);
    assert_non_null(strstr(cvx_last_error(), "fifo: a FIFO, not a regular file"));
    char dev[300];
    snprintf(dev, sizeof dev, "%s/null", dir);
    if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        assert_int_equal(cvx_write_file_atomic(dev, "x", 1), -1);
        assert_non_null(strstr(cvx_last_error(), "null: a character device, not a regular file"));
        assert_int_equal(lstat(dev, &st), 0);
        assert_true(S_ISCHR(st.st_mode));
    } else {
        print_message("  (mknod not permitted here: the character-device case is covered by the FIFO's path)\n");
    }
    assert_int_equal(temps_in(dir), 0);
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no/such/dir/x", dir);
    assert_int_equal(cvx_write_file_atomic(missing, "x", 1), -1);
    assert_non_null(strstr(cvx_last_error(), missing));
    tu_rmrf(dir);
}

/* Inputs that are a FIFO (no writer), a directory or a device: refused at once by the opener
 * every weight/tensor reader uses (issue 37: a FIFO as --transformer blocked in open(2)). */
static void test_open_input(void **state) {
    (void)state;
    char dir[64], fifo[128], file[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(fifo, sizeof fifo, "%s/w.safetensors", dir);
    snprintf(file, sizeof file, "%s/f", dir);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    tu_write(file, "x", 1);
    assert_int_equal(cvx_open_input(fifo), -1);
    assert_non_null(strstr(cvx_last_error(), "w.safetensors: a FIFO, not a file"));
    assert_null(cvx_st_open(fifo));
    assert_non_null(strstr(cvx_last_error(), "a FIFO, not a file"));
    assert_int_equal(cvx_open_input(dir), -1);
    assert_non_null(strstr(cvx_last_error(), "a directory, not a file"));
    assert_int_equal(cvx_open_input("/dev/zero"), -1);
    assert_non_null(strstr(cvx_last_error(), "/dev/zero: a character device, not a file"));
    int fd = cvx_open_input(file);
    assert_true(fd >= 0);
    assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);   /* reads block as usual */
    close(fd);
    tu_rmrf(dir);
}

/* SIGTERM/SIGINT during a write: the registered temps are removed and the process dies of the
 * signal; the final file is untouched. */
static void signal_case(int sig) {
    char dir[64], final[256];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(final, sizeof final, "%s/out.safetensors", dir);
    tu_write(final, "old", 3);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        cvx_install_signal_cleanup();
        char t1[4200], t2[4200];
        int a = cvx_temp_create(final, t1, sizeof t1), b = cvx_temp_create(final, t2, sizeof t2);
        if (a < 0 || b < 0 || write(a, "partial", 7) != 7) _exit(3);
        if (write(pipefd[1], "r", 1) != 1) _exit(4);
        for (;;) pause();
    }
    char c;
    assert_int_equal(read(pipefd[0], &c, 1), 1);
    assert_int_equal(temps_in(dir), 2);
    kill(pid, sig);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), sig);
    assert_int_equal(temps_in(dir), 0);
    char *f = slurp(final);
    assert_string_equal(f, "old");
    free(f);
    close(pipefd[0]);
    close(pipefd[1]);
    tu_rmrf(dir);
}
static void test_signal_cleanup(void **state) {
    (void)state;
    signal_case(SIGTERM);
    signal_case(SIGINT);
}

/* Stale temps: removed only when the pid in the name is dead, the name matches, and it is a
 * regular file of ours; never a live run's temp, a symlink or another file. */
static void test_stale_temps(void **state) {
    (void)state;
    char dir[64], p[512];
    tu_mkdtemp(dir, sizeof dir);
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);   /* reaped: the pid is free (reuse within this test is negligible) */
    snprintf(p, sizeof p, "%s/stage2_latents.safetensors.tmp.%ld.0123456789ab", dir, (long)dead);
    tu_write(p, "x", 1);
    snprintf(p, sizeof p, "%s/generation_config.json.tmp.%ld.abcdefabcdef", dir, (long)dead);
    tu_write(p, "x", 1);
    snprintf(p, sizeof p, "%s/live.tmp.%ld.0123456789ab", dir, (long)getppid());   /* a live pid */
    tu_write(p, "x", 1);
    snprintf(p, sizeof p, "%s/mine.tmp.%ld.0123456789ab", dir, (long)getpid());    /* this run */
    tu_write(p, "x", 1);
    snprintf(p, sizeof p, "%s/notes.tmp.%ld", dir, (long)dead);                    /* old pattern */
    tu_write(p, "x", 1);
    snprintf(p, sizeof p, "%s/link.tmp.%ld.0123456789ab", dir, (long)dead);        /* a symlink */
    assert_int_equal(symlink("/etc/hostname", p), 0);
    assert_int_equal(cvx_clean_stale_temps(dir), 2);
    assert_int_equal(tu_count_entries(dir), 4);
    assert_int_equal(cvx_clean_stale_temps(dir), 0);
    assert_int_equal(cvx_clean_stale_temps("/nonexistent/dir"), 0);
    tu_rmrf(dir);
}

/* Output sets: nothing is replaced until commit; abort removes the temps; commit replaces all. */
static void test_outset(void **state) {
    (void)state;
    char dir[64], a[256], b[256];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/stage1_embeddings.safetensors", dir);
    snprintf(b, sizeof b, "%s/generation_config.json", dir);
    tu_write(a, "old-a", 5);
    tu_write(b, "old-b", 5);
    cvx_outset s;
    cvx_outset_init(&s);
    ASSERT_OK(cvx_outset_write(&s, a, "new-a", 5));
    ASSERT_OK(cvx_outset_write(&s, b, "new-b", 5));
    assert_int_equal(temps_in(dir), 2);
    char *x = slurp(a);
    assert_string_equal(x, "old-a");   /* written, not yet committed */
    free(x);
    cvx_outset_abort(&s);
    assert_int_equal(temps_in(dir), 0);
    x = slurp(a);
    assert_string_equal(x, "old-a");
    free(x);
    cvx_outset_abort(&s);   /* twice is fine */

    cvx_outset_init(&s);
    cvx_st_writer *w = cvx_stw_new();
    float v[3] = {1, 2, 3};
    ASSERT_OK(cvx_stw_add_f32(w, "t", CVX_F32, 1, (int64_t[]){3}, v));
    ASSERT_OK(cvx_outset_stw(&s, w, a));
    cvx_stw_free(w);
    ASSERT_OK(cvx_outset_write(&s, b, "new-b", 5));
    ASSERT_OK(cvx_outset_commit(&s));
    assert_int_equal(temps_in(dir), 0);
    x = slurp(b);
    assert_string_equal(x, "new-b");
    free(x);
    cvx_safetensors *st = tu_open(a);
    assert_non_null(cvx_st_find(st, "t"));
    cvx_st_close(st);
    /* a final name that became a directory after its temp was written: the commit refuses it
     * before any rename, and removes every temp */
    char d2[300];
    snprintf(d2, sizeof d2, "%s/adir", dir);
    cvx_outset_init(&s);
    ASSERT_OK(cvx_outset_write(&s, d2, "x", 1));
    ASSERT_OK(cvx_outset_write(&s, b, "newer-b", 7));
    assert_int_equal(mkdir(d2, 0755), 0);
    assert_int_equal(cvx_outset_commit(&s), -1);
    assert_non_null(strstr(cvx_last_error(), "adir"));
    assert_int_equal(temps_in(dir), 0);
    x = slurp(b);
    assert_string_equal(x, "new-b");   /* not renamed: the set stopped at the first failure */
    free(x);
    /* a file updated again before the commit: find its entry, drop it (temp removed, order kept) */
    cvx_outset_init(&s);
    ASSERT_OK(cvx_outset_write(&s, a, "a1", 2));
    ASSERT_OK(cvx_outset_write(&s, b, "b1", 2));
    assert_int_equal(cvx_outset_find(&s, b), 1);
    assert_int_equal(cvx_outset_find(&s, "/nonexistent"), -1);
    cvx_outset_drop(&s, 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(cvx_outset_find(&s, b), 0);
    assert_int_equal(temps_in(dir), 1);
    cvx_outset_drop(&s, -1);   /* "not found" is a no-op */
    assert_int_equal(s.n, 1);
    ASSERT_OK(cvx_outset_commit(&s));
    x = slurp(b);
    assert_string_equal(x, "b1");
    free(x);
    tu_rmrf(dir);
}

/* XXH64 against the reference implementation's published values; the pair check's message. */
static void test_xxh64(void **state) {
    (void)state;
    assert_true(cvx_xxh64("", 0, 0) == 0xEF46DB3751D8E999ull);
    assert_true(cvx_xxh64("abc", 3, 0) == 0x44BC2CF5AD770999ull);
    const char *s = "Nobody inspects the spammish repetition";   /* 39 bytes: the 32-byte stripe */
    assert_true(cvx_xxh64(s, strlen(s), 0) == 0xFBCEA83C8A378BF1ull);
    char dir[64], data[256], hex[17];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(data, sizeof data, "%s/stage2_latents.safetensors", dir);
    tu_write(data, s, strlen(s));
    ASSERT_OK(cvx_file_xxh64(data, hex));
    assert_string_equal(hex, "fbcea83c8a378bf1");
    ASSERT_OK(cvx_check_file_hash(data, "fbcea83c8a378bf1", "x/generation_config.json"));
    tu_write(data, "other run", 9);
    assert_int_equal(cvx_check_file_hash(data, "fbcea83c8a378bf1", "x/generation_config.json"), -1);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(),
                           "stage2_latents.safetensors does not belong to generation_config.json: xxh64 "));
    assert_non_null(strstr(cvx_last_error(), "!= fbcea83c8a378bf1"));
    assert_int_equal(cvx_check_file_hash(data, NULL, "generation_config.json"), -1);
    /* the same through the config: matching, mismatching, absent (older outputs: accepted) */
    char hexnow[17], json[128];
    ASSERT_OK(cvx_file_xxh64(data, hexnow));
    cvx_config gc;
    snprintf(json, sizeof json, "{\"stage2_latents_xxh64\": \"%s\"}", hexnow);
    ASSERT_OK(cvx_config_parse(&gc, json, strlen(json), "out/generation_config.json"));
    ASSERT_OK(cvx_genconfig_check_pair(&gc, data, "stage2_latents_xxh64"));
    ASSERT_OK(cvx_genconfig_check_pair(&gc, data, "stage1_embeddings_xxh64"));
    cvx_config_free(&gc);
    ASSERT_OK(cvx_config_parse(&gc, "{\"stage2_latents_xxh64\": \"0000000000000000\"}", 44, "out/generation_config.json"));
    /* a damaged data file (here: not safetensors at all) gets the reader's message (issue 21) */
    assert_int_equal(cvx_genconfig_check_pair(&gc, data, "stage2_latents_xxh64"), -1);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "stage2_latents.safetensors: header length"));
    /* a sound file of another run: "does not belong" */
    cvx_st_writer *w = cvx_stw_new();
    const float z[2] = {1, 2};
    ASSERT_OK(cvx_stw_add_f32(w, "latents", CVX_F32, 1, (int64_t[]){2}, z));
    ASSERT_OK(cvx_stw_write(w, data));
    cvx_stw_free(w);
    assert_int_equal(cvx_genconfig_check_pair(&gc, data, "stage2_latents_xxh64"), -1);
    assert_non_null(strstr(cvx_last_error(), "does not belong to generation_config.json"));
    cvx_config_free(&gc);
    tu_rmrf(dir);
}

/* Locks: a second exclusive holder gets one line naming the first's pid; shared readers
 * coexist; release lets the next run in; a child process sees the parent's lock. */
static void test_dir_lock(void **state) {
    (void)state;
    char dir[64];
    tu_mkdtemp(dir, sizeof dir);
    cvx_set_program_name("stage2");
    cvx_dir_lock *a = cvx_dir_lock_acquire(dir, 1);
    ASSERT_NONNULL(a);
    assert_null(cvx_dir_lock_acquire(dir, 1));
    char want[64];
    snprintf(want, sizeof want, "(pid %ld, stage2)", (long)getpid());
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), want));
    assert_non_null(strstr(cvx_last_error(), "in use by another run"));
    assert_null(cvx_dir_lock_acquire(dir, 0));   /* readers wait for the writer too */
    pid_t pid = fork();
    if (pid == 0) _exit(cvx_dir_lock_acquire(dir, 1) == NULL && strstr(cvx_last_error(), want) ? 0 : 1);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cvx_dir_lock_release(a);
    cvx_dir_lock *r1 = cvx_dir_lock_acquire(dir, 0), *r2 = cvx_dir_lock_acquire(dir, 0);
    ASSERT_NONNULL(r1);
    ASSERT_NONNULL(r2);
    assert_null(cvx_dir_lock_acquire(dir, 1));
    cvx_dir_lock_release(r1);
    cvx_dir_lock_release(r2);
    a = cvx_dir_lock_acquire(dir, 1);
    ASSERT_NONNULL(a);
    cvx_dir_lock_release(a);
    cvx_dir_lock_release(NULL);
    assert_null(cvx_dir_lock_acquire("/nonexistent/dir", 1));
    assert_non_null(strstr(cvx_last_error(), "/nonexistent/dir/.lock"));
    cvx_set_program_name("cvx");
    tu_rmrf(dir);
}

/* The vectorized scan equals the isfinite() loop for a NaN/Inf at every position of odd sizes. */
static void test_finite(void **state) {
    (void)state;
    const size_t n = 3000;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)i * 0.5f - 700.0f;
    assert_int_equal(cvx_first_nonfinite(x, n), n);
    ASSERT_OK(cvx_check_finite(x, n, "latents"));
    const float bad[] = {NAN, INFINITY, -INFINITY, -NAN};
    for (size_t len = 0; len < 40; len++)
        for (size_t pos = 0; pos < len; pos++)
            for (int k = 0; k < 4; k++) {
                float keep = x[pos];
                x[pos] = bad[k];
                assert_int_equal(cvx_first_nonfinite(x, len), cvx_first_nonfinite_ref(x, len));
                assert_int_equal(cvx_first_nonfinite(x, len), pos);
                x[pos] = keep;
            }
    for (size_t pos = 1000; pos < n; pos += 331) {
        x[pos] = NAN;
        x[pos + 7 < n ? pos + 7 : pos] = INFINITY;
        assert_int_equal(cvx_first_nonfinite(x, n), pos);
        assert_int_equal(cvx_check_finite(x, n, "prompt_embeds"), -1);
        char want[64];
        snprintf(want, sizeof want, "at index %zu (of %zu)", pos, n);
        assert_non_null(strstr(cvx_last_error(), want));
        assert_non_null(strstr(cvx_last_error(), "tensor 'prompt_embeds'"));
        for (size_t i = pos; i < n; i++) x[i] = 1.0f;
    }
    print_message("  %s\n", cvx_last_error());
    float big = 3.4e38f, sub = 1e-45f;   /* largest and subnormal values are finite */
    ASSERT_OK(cvx_check_finite(&big, 1, "a"));
    ASSERT_OK(cvx_check_finite(&sub, 1, "a"));
    free(x);
}

static int parse(cvx_config *c, const char *json, const char *label) {
    return cvx_config_parse(c, json, strlen(json), label);
}

/* Model configs: each absurd number names its file and key, before anything is allocated. */
static void test_model_config_ranges(void **state) {
    (void)state;
    static const struct { const char *json, *key; } bad[] = {
        {"{\"num_layers\": 1e9}", "'num_layers' = 1000000000"},
        {"{\"num_layers\": 0}", "'num_layers' = 0"},
        {"{\"num_layers\": 2.5}", "'num_layers' = 2.5 must be an integer"},
        {"{\"scaling_factor\": 0}", "'scaling_factor' = 0 is out of range: must be in (0"},
        {"{\"scaling_factor\": -1.15}", "'scaling_factor'"},
        {"{\"scaling_factor\": NaN}", "'scaling_factor' = nan is not a finite number"},
        {"{\"norm_eps\": Infinity}", "'norm_eps'"},
        {"{\"d_model\": 100000000}", "'d_model'"},
        {"{\"vocab_size\": -5}", "'vocab_size'"},
        {"{\"attention_head_dim\": 1e300}", "'attention_head_dim'"},
        {"{\"block_out_channels\": [128, 0]}", "'block_out_channels'[1]"},
        {"{\"num_attention_heads\": \"many\"}", "'num_attention_heads' must be a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cvx_config c;
        ASSERT_OK(parse(&c, bad[i].json, "vae/config.json"));
        assert_int_equal(cvx_check_model_config(&c), -1);
        if (!strstr(cvx_last_error(), bad[i].key) || !strstr(cvx_last_error(), "vae/config.json"))
            fail_msg("%s: message '%s' lacks '%s'", bad[i].json, cvx_last_error(), bad[i].key);
        cvx_config_free(&c);
    }
    /* every real config of the fixtures passes */
    static const char *const real[] = {GOLDEN "/e2e_5b/model/transformer/config.json",
                                       GOLDEN "/e2e_5b/model/vae/config.json",
                                       GOLDEN "/e2e_5b/model/text_encoder/config.json",
                                       GOLDEN "/e2e_2b/model/transformer/config.json",
                                       GOLDEN "/transformer_1.5/model/transformer/config.json"};
    for (size_t i = 0; i < sizeof real / sizeof real[0]; i++) {
        cvx_config c;
        ASSERT_OK(cvx_config_load(&c, real[i]));
        ASSERT_OK(cvx_check_model_config(&c));
        cvx_config_free(&c);
    }
    cvx_config c;
    ASSERT_OK(parse(&c, "{\"fps\": 8}", "g.json"));
    int64_t v;
    double d;
    ASSERT_OK(cvx_cfg_int_range_or(&c, "fps", 1, 1, 240, &v));
    assert_int_equal(v, 8);
    ASSERT_OK(cvx_cfg_int_range_or(&c, "frames", 49, 1, 1000, &v));
    assert_int_equal(v, 49);
    assert_int_equal(cvx_cfg_num_range_or(&c, "fps", 0, 10, 20, 0, &d), -1);
    cvx_config_free(&c);
}

/* generation_config.json values: fps -8 is refused (it silently became 8), NaN guidance,
 * invalid UTF-8 prompts, malformed hashes. */
static void test_genconfig_validate(void **state) {
    (void)state;
    static const struct { const char *json, *key; } bad[] = {
        {"{\"fps\": -8}", "'fps' = -8"},
        {"{\"fps\": 0}", "'fps' = 0"},
        {"{\"fps\": 8.5}", "'fps' = 8.5 must be an integer"},
        {"{\"guidance_scale\": NaN}", "'guidance_scale'"},
        {"{\"guidance_scale\": -1}", "'guidance_scale'"},
        {"{\"num_inference_steps\": 0}", "'num_inference_steps'"},
        {"{\"seed\": -1}", "'seed'"},
        {"{\"height\": 1e12}", "'height'"},
        {"{\"num_frames\": -49}", "'num_frames'"},
        {"{\"prompt\": \"caf\xc3\"}", "'prompt' is not valid UTF-8"},
        {"{\"negative_prompt\": \"\xed\xa0\x80\"}", "'negative_prompt' is not valid UTF-8"},
        {"{\"model_id\": 3}", "'model_id' must be a string"},
        {"{\"stage1_embeddings_xxh64\": \"XYZ\"}", "'stage1_embeddings_xxh64' must be 16 hex digits"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cvx_config c;
        ASSERT_OK(parse(&c, bad[i].json, "out/generation_config.json"));
        assert_int_equal(cvx_genconfig_validate(&c), -1);
        if (!strstr(cvx_last_error(), bad[i].key) || !strstr(cvx_last_error(), "generation_config.json"))
            fail_msg("%s: message '%s' lacks '%s'", bad[i].json, cvx_last_error(), bad[i].key);
        cvx_config_free(&c);
    }
    cvx_config c;
    ASSERT_OK(parse(&c,
                    "{\"prompt\": \"A panda \xe2\x80\x94 caf\xc3\xa9 \xf0\x9f\x90\xbc\", \"negative_prompt\": \"\", "
                    "\"fps\": 8, \"num_frames\": 49, \"guidance_scale\": 6.0, \"seed\": 42, \"height\": 480, "
                    "\"width\": 720, \"num_inference_steps\": 50, \"stage1_embeddings_xxh64\": \"0123456789abcdef\"}",
                    "generation_config.json"));
    ASSERT_OK(cvx_genconfig_validate(&c));
    cvx_config_free(&c);
}

static void test_utf8_and_prompts(void **state) {
    (void)state;
    static const char *const good[] = {"", "abc", "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf"};
    static const char *const badv[] = {"\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                       "\xff", "\x80", "ab\xe2\x82", "\xf8\x88\x80\x80\x80"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) assert_true(cvx_utf8_valid(good[i], strlen(good[i]), NULL));
    for (size_t i = 0; i < sizeof badv / sizeof badv[0]; i++)
        if (cvx_utf8_valid(badv[i], strlen(badv[i]), NULL)) fail_msg("bad UTF-8 #%zu accepted", i);
    size_t off;
    assert_false(cvx_utf8_valid("ok \xff", 4, &off));
    assert_int_equal(off, 3);
    ASSERT_OK(cvx_check_prompt("A panda playing guitar", "--prompt"));
    ASSERT_OK(cvx_check_prompt("  \xe4\xb8\xad\xe6\x96\x87\t\n", "--prompt"));
    assert_int_equal(cvx_check_prompt("   \t  ", "prompts.txt line 3"), -1);
    assert_string_equal(cvx_last_error(), "prompts.txt line 3 is empty or only whitespace");
    assert_int_equal(cvx_check_prompt("", "--prompt"), -1);
    assert_int_equal(cvx_check_prompt("caf\xe9", "--prompt"), -1);
    assert_non_null(strstr(cvx_last_error(), "--prompt is not valid UTF-8 (byte 3 is 0xe9)"));
    assert_int_equal(cvx_check_prompt("a\x1b[31mb", "--prompt"), -1);
    assert_non_null(strstr(cvx_last_error(), "control character 0x1b"));
}

/* CLI: "--prompt --threads 1" and a missing value name the flag (each case in a child: the
 * helpers exit(1) after printing the line). */
static const struct option OPTS[] = {
    {"prompt", required_argument, 0, 256}, {"threads", required_argument, 0, 257},
    {"quiet", no_argument, 0, 258},        {0, 0, 0, 0},
};
/* the option loop of a program (stage1's name) */
static void parse_as_stage1(int argc, char **argv) {
    cvx_set_program_name("stage1");
    opterr = 0;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", OPTS, NULL)) != -1;) {
        if (c == 256 || c == 257) (void)cvx_opt_value(OPTS, c, optarg, argv, optind);
        else if (c == '?') cvx_die_bad_option(OPTS, argv, optind, optopt);
    }
}
static int cli_child(int argc, char **argv, char *err, size_t errn) {
    return tu_fork_stderr(parse_as_stage1, argc, argv, err, errn);
}
static void test_cli_values(void **state) {
    (void)state;
    char err[512];
    char *a1[] = {"stage1", "--prompt", "--threads", "1", NULL};
    assert_int_equal(cli_child(4, a1, err, sizeof err), 1);
    print_message("  %s", err);
    assert_non_null(strstr(err, "stage1: error: --prompt needs a value (got the option '--threads'"));
    char *a2[] = {"stage1", "--threads", NULL};
    assert_int_equal(cli_child(2, a2, err, sizeof err), 1);
    assert_non_null(strstr(err, "--threads needs a value"));
    char *a3[] = {"stage1", "--prompt=--threads", NULL};   /* the explicit form is text */
    assert_int_equal(cli_child(2, a3, err, sizeof err), 0);
    char *a4[] = {"stage1", "--prompt", "--not-an-option", NULL};   /* text that looks like a flag */
    assert_int_equal(cli_child(3, a4, err, sizeof err), 0);
    char *a5[] = {"stage1", "--bogus", NULL};
    assert_int_equal(cli_child(2, a5, err, sizeof err), 1);
    assert_non_null(strstr(err, "unknown or incomplete option '--bogus'"));
    char *a6[] = {"stage1", "--quiet=1", NULL};
    assert_int_equal(cli_child(2, a6, err, sizeof err), 1);
    assert_non_null(strstr(err, "--quiet takes no value"));
    char *a7[] = {"stage1", "--prompt", "--quiet", NULL};
    assert_int_equal(cli_child(3, a7, err, sizeof err), 1);
    assert_non_null(strstr(err, "--prompt needs a value"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_temp_names),      cmocka_unit_test(test_atomic_write), cmocka_unit_test(test_open_input),
        cmocka_unit_test(test_signal_cleanup),  cmocka_unit_test(test_stale_temps),
        cmocka_unit_test(test_outset),          cmocka_unit_test(test_xxh64),
        cmocka_unit_test(test_dir_lock),        cmocka_unit_test(test_finite),
        cmocka_unit_test(test_model_config_ranges), cmocka_unit_test(test_genconfig_validate),
        cmocka_unit_test(test_utf8_and_prompts), cmocka_unit_test(test_cli_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
