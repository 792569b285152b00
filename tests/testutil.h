/* Helpers shared by the cmocka tests (header-only: every test is one program).
 * Tests run from the repository root; golden fixtures live in tests/data/golden/. */
#ifndef CVX_TESTUTIL_H
#define CVX_TESTUTIL_H

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "ops.h"
#include "safetensors.h"

#define GOLDEN "tests/data/golden"

/* Fail the test with the recorded library error when `expr` (returning 0 / non-NULL) fails. */
#define ASSERT_OK(expr) \
    do { if ((expr) != 0) fail_msg("%s failed: %s", #expr, cvx_last_error()); } while (0)
#define ASSERT_NONNULL(p) \
    do { if ((p) == NULL) fail_msg("%s is NULL: %s", #p, cvx_last_error()); } while (0)

/* Relative L2 check with the value printed, so logs show how close we are. */
#define ASSERT_REL_L2(got, want, n, tol) \
    do { double e_ = cvx_rel_l2((got), (want), (n)); \
         print_message("  %-40s rel L2 = %.3g (tol %.0e)\n", #got, e_, (double)(tol)); \
         if (!(e_ <= (tol))) fail_msg("%s: relative L2 error %.3g > %.0e", #got, e_, (double)(tol)); } while (0)

/* a and b (n floats) equal bit for bit (NaNs compare by their bits too); fails naming the first
 * element that differs. */
static inline void tu_assert_same_bits(const char *what, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float)))
            fail_msg("%s: element %zu is %.9g, expected %.9g", what, i, (double)a[i], (double)b[i]);
}

/* Open a golden safetensors file; fails the test when it cannot. */
/* Deterministic test data: a 64-bit LCG (Knuth's MMIX constants), uniform in [-1, 1); each test
 * keeps its own state (seed), so its sequence does not depend on other tests. */
static inline float tu_frand(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) / 16777216.0 * 2.0 - 1.0);
}
/* n such values in a new cvx_alloc_f32 buffer (n = 0: one element, never read). */
static inline float *tu_rand_buf(uint64_t *state, size_t n) {
    float *p = cvx_alloc_f32(n ? n : 1);
    for (size_t i = 0; i < n; i++) p[i] = tu_frand(state);
    return p;
}

static inline cvx_safetensors *tu_open(const char *path) {
    cvx_safetensors *st = cvx_st_open(path);
    if (!st) fail_msg("cannot open %s: %s", path, cvx_last_error());
    return st;
}

/* A tensor of a golden file as newly allocated f32 (numel in *n if non-NULL). */
static inline float *tu_f32(const cvx_safetensors *st, const char *name, size_t *n) {
    const cvx_tensor *t = cvx_st_find(st, name);
    if (!t) fail_msg("%s: no tensor '%s'", cvx_st_path(st), name);
    if (n) *n = (size_t)t->numel;
    return cvx_tensor_f32_dup(t);
}

/* A fresh temporary directory (removed by tu_rmrf). */
static inline void tu_mkdtemp(char *buf, size_t n) {
    snprintf(buf, n, "/tmp/cvx_test_XXXXXX");
    if (!mkdtemp(buf)) fail_msg("mkdtemp failed");
}
static inline void tu_rmrf(const char *dir) {
    char cmd[4200];
    if (strncmp(dir, "/tmp/cvx_test_", 14) != 0) return;  /* never anything else */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) print_message("warning: could not remove %s\n", dir);
}

/* Write bytes to a file (for building malformed inputs). */
static inline void tu_write(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) fail_msg("cannot write %s", path);
    fclose(f);
}

/* Element `index` of F32 tensor `name` in the safetensors file at path set to v, in place (a NaN, an
 * infinity or a changed value planted for a bad-input test). */
static inline void tu_poke_f32(const char *path, const char *name, size_t index, float v) {
    size_t n;
    char *buf = cvx_read_file(path, &n);
    assert_non_null(buf);
    cvx_safetensors *st = cvx_st_open_memory(buf, n, path);
    assert_non_null(st);
    const cvx_tensor *t = cvx_st_find(st, name);
    if (!t || t->dtype != CVX_F32 || (int64_t)index >= t->numel) fail_msg("%s: no F32 tensor %s[%zu]", path, name, index);
    memcpy((char *)t->data + index * sizeof(float), &v, sizeof v);   /* the data lies inside buf */
    cvx_st_close(st);
    tu_write(path, buf, n);
    free(buf);
}

/* The build directory: $BUILD (set by tests/run.sh), default "build". */
static inline const char *tu_build_dir(void) {
    const char *b = getenv("BUILD");
    return b && b[0] ? b : "build";
}

/* Path of a built program: $BUILD/bin/NAME. */
static inline void tu_program(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/bin/%s", tu_build_dir(), name);
}

/* `make -n ARGS` from the repository root (BUILD=$BUILD, outside any calling make): its
 * stdout+stderr into out, the exit status. */
static inline int tu_make_n(const char *args, char *out, size_t n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -n --no-print-directory BUILD=%s %s 2>&1",
             tu_build_dir(), args);
    FILE *p = popen(cmd, "r");
    if (!p) fail_msg("cannot run make");
    size_t k = fread(out, 1, n - 1, p);
    out[k] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The prefix of an mpirun of np ranks (the program and its flags follow): no banners (-q), root in
 * CI containers, no shared-memory single copy (CMA is not permitted in Docker and prints "Read -1"
 * on every large message), one OpenMP thread per rank, no leak report under ASan (Open MPI keeps
 * memory from plugins it has unloaded), a time limit of `timeout_s` seconds. */
static inline void tu_mpirun(char *buf, size_t n, int np, int timeout_s) {
    snprintf(buf, n,
             "OMP_NUM_THREADS=1 ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" "
             "OMPI_MCA_btl_vader_single_copy_mechanism=none timeout %d mpirun -q --oversubscribe %s -np %d",
             timeout_s, geteuid() == 0 ? "--allow-run-as-root" : "", np);
}

/* The golden tests compare against upstream f32: the stage programs these tests run default to
 * --precision auto (bf16 on a bf16-capable CPU), so every test process pins them to f32 through
 * $CVX_PRECISION (a test that passes --precision explicitly still wins). bf16 has its own tests. */
__attribute__((constructor)) static void tu_pin_precision_f32(void) { setenv("CVX_PRECISION", "f32", 0); }

/* Shell-quote s into out as '...'. */
static inline void tu_shell_quote(char *out, size_t n, const char *s) {
    size_t k = 0;
    out[k++] = '\'';
    for (; *s && k + 5 < n; s++) {
        if (*s == '\'') { memcpy(out + k, "'\\''", 4); k += 4; }
        else out[k++] = *s;
    }
    out[k++] = '\'';
    out[k] = 0;
}

/* Run a shell command, capturing stderr into `err` (may be NULL); returns the exit status. */
static inline int tu_run(const char *cmd, char *err, size_t errn) {
    char full[8192], tmp[] = "/tmp/cvx_test_err_XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0) fail_msg("mkstemp failed");
    close(fd);
    if (snprintf(full, sizeof full, "%s 2>%s", cmd, tmp) >= (int)sizeof full) fail_msg("command too long");
    int st = system(full);
    if (err && errn) {
        FILE *f = fopen(tmp, "rb");
        size_t k = f ? fread(err, 1, errn - 1, f) : 0;
        err[k] = 0;
        if (f) fclose(f);
    }
    unlink(tmp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* 1 when key is in the JSON file at path with a value other than null (a run's record). */
static inline int tu_genconfig_has(const char *path, const char *key) {
    cvx_config c;
    json_object *v = NULL;
    ASSERT_OK(cvx_config_load(&c, path));
    int has = json_object_object_get_ex(c.root, key, &v) && v;
    cvx_config_free(&c);
    return has;
}

/* Run fn(argc, argv) in a forked child with its stderr captured into err; the child's exit
 * status (-1 when it did not exit). For code that exits on errors (cvx_die, the flag parsers). */
static inline int tu_fork_stderr(void (*fn)(int, char **), int argc, char **argv, char *err, size_t errn) {
    int pfd[2];
    if (pipe(pfd) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 2);
        fn(argc, argv);
        _exit(0);
    }
    close(pfd[1]);
    ssize_t k = read(pfd[0], err, errn - 1);
    err[k > 0 ? k : 0] = 0;
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Run a command that must succeed (fails the test with the command and its stderr otherwise). */
static inline void tu_run_ok(const char *cmd) {
    char err[8192];
    int rc = tu_run(cmd, err, sizeof err);
    if (rc != 0) fail_msg("command failed (%d): %s\n%s", rc, cmd, err);
}

/* Occurrences of w in s (e.g. error lines in a program's stderr). */
static inline int tu_count_substr(const char *s, const char *w) {
    int k = 0;
    for (const char *p = s; (p = strstr(p, w)); p += strlen(w)) k++;
    return k;
}

/* Copy the safetensors file src to dst with tensor `drop` left out (NULL: none) and, when `name` is
 * non-NULL, a tensor (name, dtype, shape, data) added: for building bad weight files. */
static inline void tu_st_copy_edit(const char *src, const char *dst, const char *drop, const char *name,
                                   cvx_dtype dtype, int ndim, const int64_t *shape, const void *data) {
    cvx_safetensors *st = tu_open(src);
    cvx_st_writer *w = cvx_stw_new();
    for (int i = 0; i < cvx_st_count(st); i++) {
        const cvx_tensor *t = cvx_st_tensor(st, i);
        if (!drop || strcmp(t->name, drop)) ASSERT_OK(cvx_stw_add(w, t->name, t->dtype, t->ndim, t->shape, t->data));
    }
    if (name) ASSERT_OK(cvx_stw_add(w, name, dtype, ndim, shape, data));
    ASSERT_OK(cvx_stw_write(w, dst));
    cvx_stw_free(w);
    cvx_st_close(st);
}

/* The weights at src (any file cvx_weights_open reads, e.g. a GGUF) rewritten as one safetensors
 * file in the layout of MinusZone's CogVideoX *_GGUF_Q4_0.safetensors, every tensor's bytes kept:
 * a Q4_0 (Q8_0) `<m>.weight` [N, K] becomes the U8 `<m>.Q4_0_qweight` (`.Q8_0_qweight`)
 * [N, K / 32 * bytes per block], the other tensors keep their dtype. 0, or 1 (nothing written) when
 * src holds another block type, which that layout cannot store. */
static inline int tu_write_qweights(const char *src, const char *dst) {
    cvx_weights *ws = cvx_weights_open(src);
    ASSERT_NONNULL(ws);
    cvx_st_writer *w = cvx_stw_new();
    int rc = 0;
    for (int i = 0; i < cvx_weights_count(ws) && !rc; i++) {
        const cvx_tensor *t = cvx_weights_at(ws, i);
        if (!cvx_dtype_is_quant(t->dtype)) {
            ASSERT_OK(cvx_stw_add(w, t->name, t->dtype, t->ndim, t->shape, t->data));
            continue;
        }
        size_t len = strlen(t->name);
        if ((t->dtype != CVX_Q4_0 && t->dtype != CVX_Q8_0) || t->ndim != 2 || len < 7 ||
            strcmp(t->name + len - 7, ".weight")) {
            rc = 1;
            break;
        }
        char name[600];
        snprintf(name, sizeof name, "%.*s.%s_qweight", (int)(len - 7), t->name, cvx_dtype_name(t->dtype));
        const int64_t shape[2] = {t->shape[0], t->shape[1] / 32 * (int64_t)cvx_dtype_block_bytes(t->dtype)};
        ASSERT_OK(cvx_stw_add(w, name, CVX_U8, 2, shape, t->data));
    }
    if (!rc) ASSERT_OK(cvx_stw_write(w, dst));
    cvx_stw_free(w);
    cvx_weights_close(ws);
    return rc;
}

/* One good run of the three programs on the golden tiny 2b model into a fresh directory: the
 * "previous outputs" the run-directory tests start from (embeddings, generation_config.json,
 * latents, video). Paths of the programs and the absolute model directory are returned too. */
#define TU_STAGE2_SMALL "--num_inference_steps 2 --frames 9 --height 48 --width 64"
typedef struct {
    char dir[64];                  /* the run directory (tu_rmrf it) */
    char model[1024];              /* absolute path of the golden tiny 2b model */
    char s1[256], s2[256], s3[256];   /* the built programs */
} tu_good_run;
static inline int tu_good_run_make(tu_good_run *r) {
    tu_program(r->s1, sizeof r->s1, "stage1");
    tu_program(r->s2, sizeof r->s2, "stage2");
    tu_program(r->s3, sizeof r->s3, "stage3");
    char real[4096], cmd[8192];
    if (!realpath(GOLDEN "/e2e_2b/model", real) || strlen(real) >= sizeof r->model) return -1;
    memcpy(r->model, real, strlen(real) + 1);
    snprintf(r->dir, sizeof r->dir, "/tmp/cvx_test_XXXXXX");
    if (!mkdtemp(r->dir)) return -1;
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'A panda' --model_dir %s --output_dir %s", r->s1, r->model, r->dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s " TU_STAGE2_SMALL, r->s2, r->dir, r->model);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s", r->s3, r->dir, r->model);
    tu_run_ok(cmd);
    return 0;
}

/* The modification time of dir/file in seconds (nanoseconds kept: make's stamps); fails the test
 * when the file is missing. */
static inline double tu_mtime(const char *dir, const char *file) {
    char p[600];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, file);
    if (stat(p, &st) != 0) fail_msg("%s missing", p);
    return (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec;
}

/* Entries of a directory other than . and .., not counting the programs' directory lock file
 * ".lock" (common/lock.h); 0 if it does not exist. */
static inline int tu_count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, ".lock")) n++;
    closedir(d);
    return n;
}

#endif
