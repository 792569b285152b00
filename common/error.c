/* Error recording, logging, checked allocation, time and memory probes. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* The last error is errno-style: one per thread (_Thread_local), so a library call reports into
 * the thread that made it and two pipelines running in two threads cannot overwrite each other's
 * message. It is not in the compute context because errors also come from code that has none
 * (config and safetensors parsing, path handling) and the caller reads it right after the failing
 * call, exactly like errno/strerror.
 * The program name and verbosity are the process's logging setup (like stderr itself, which they
 * describe): written once by main() before any work, only read afterwards; not per-model state.
 * The die handler belongs to the same process setup: how cvx_die leaves (under mpirun, by agreeing
 * with the other ranks first; pipeline/parallel.c installs it around the start-up checks). */
static _Thread_local char g_error[2048];
static _Thread_local int g_error_shared;   /* g_error is known to every MPI rank (cvx_error_mark_shared) */
static const char *g_program = "cvx";
static cvx_die_handler g_die;   /* NULL: print and exit */
static void *g_die_user;
static int g_verbosity = 1;

int cvx_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
    g_error_shared = 0;
    return -1;
}

int cvx_error_prefix(const char *fmt, ...) {
    char prefix[1024], old[sizeof g_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_error, sizeof old);
    snprintf(g_error, sizeof g_error, "%.1000s: %.1000s", prefix, old);
    return -1;
}

const char *cvx_last_error(void) { return g_error[0] ? g_error : "unknown error"; }
void cvx_clear_error(void) { g_error[0] = 0, g_error_shared = 0; }
void cvx_error_mark_shared(void) { g_error_shared = 1; }
int cvx_error_is_shared(void) { return g_error_shared; }

void cvx_set_program_name(const char *name) {
    const char *slash = strrchr(name, '/');
    g_program = slash ? slash + 1 : name;
}
const char *cvx_program_name(void) { return g_program; }

void cvx_die(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_die) {
        cvx_die_handler h = g_die;
        g_die = NULL;   /* a failure inside the handler dies plainly */
        h(g_die_user, msg);
    }
    fflush(stdout);
    fprintf(stderr, "%s: error: %s\n", g_program, msg);
    exit(1);
}

void cvx_set_die_handler(cvx_die_handler fn, void *user) {
    g_die = fn;
    g_die_user = user;
}

void cvx_die_last_error(void) { cvx_die("%s", cvx_last_error()); }

void cvx_set_verbosity(int level) { g_verbosity = level; }
int cvx_verbosity(void) { return g_verbosity; }

static void vlog(FILE *f, const char *tag, const char *fmt, va_list ap) {
    fprintf(f, "%s: %s", g_program, tag);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    fflush(f);
}
void cvx_info(const char *fmt, ...) {
    if (g_verbosity < 1) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "", fmt, ap);
    va_end(ap);
}
void cvx_debug(const char *fmt, ...) {
    if (g_verbosity < 2) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "", fmt, ap);
    va_end(ap);
}
void cvx_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "warning: ", fmt, ap);
    va_end(ap);
}

void cvx_check_failed(const char *file, int line, const char *expr) {
    fflush(stdout);
    fprintf(stderr, "%s: internal error at %s:%d: check failed: %s\n", g_program, file, line, expr);
    abort();
}

static void oom(size_t n, const char *file, int line) {
    fprintf(stderr, "%s: error: out of memory allocating %zu bytes at %s:%d\n", g_program, n, file, line);
    exit(1);
}

void *cvx_malloc_at(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n, file, line);
    return p;
}
void *cvx_calloc_at(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size, file, line);
    return p;
}
void *cvx_realloc_at(void *p, size_t n, const char *file, int line) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n, file, line);
    return q;
}
void *cvx_alloc_aligned_at(size_t n, const char *file, int line) {
    void *p = NULL;
    size_t rounded = (n + 63) / 64 * 64;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) oom(n, file, line);
    return p;
}

double cvx_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t cvx_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024;  /* Linux reports KiB */
}
