/* Errors and logging shared by every stage.
 *
 * Library code never exits on bad input: it records one message with cvx_error()
 * (which returns -1) and returns -1 / NULL; the program prints that message with
 * cvx_die() and exits non-zero. Broken invariants (programming errors) abort via
 * CVX_CHECK with file:line, as llm.c does. */
#ifndef CVX_ERROR_H
#define CVX_ERROR_H

#include <stddef.h>

/* Record an error message (printf-style) and return -1. Overwrites any earlier message of this
 * thread (the message is per thread, errno-style; see error.c). */
int cvx_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prefix the recorded message with more context: "ctx: <old message>". Returns -1. */
int cvx_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *cvx_last_error(void);
void cvx_clear_error(void);
/* Under MPI: the recorded error is known to every rank of the run (cvx_dist_agree over all of
 * them marks it), so the program can stop every rank together with one line from rank 0 instead
 * of aborting from this rank. A new cvx_error (or cvx_clear_error) clears the mark; cvx_error_prefix
 * keeps it (more context, same failure). */
void cvx_error_mark_shared(void);
int cvx_error_is_shared(void);

/* Program name used in messages ("stage1: error: ..."). */
void cvx_set_program_name(const char *name);
const char *cvx_program_name(void);

/* Print "<prog>: error: <msg>" on stderr and exit(1); or, when the program installed a die
 * handler, pass it the message (it does not return). */
_Noreturn void cvx_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Under MPI, until the ranks first agree, a program stops through an agreement so that an error
 * every rank finds is printed once (pipeline/parallel.c). NULL restores the default. Part of the
 * process's logging setup, like the program name: set by main, not per-model state. */
typedef void (*cvx_die_handler)(void *user, const char *msg);
void cvx_set_die_handler(cvx_die_handler fn, void *user);
/* Print the recorded error (cvx_last_error) and exit(1). */
_Noreturn void cvx_die_last_error(void);

/* Verbosity: 0 = quiet (errors and warnings only), 1 = normal, 2 = verbose. */
void cvx_set_verbosity(int level);
int cvx_verbosity(void);
void cvx_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));    /* level >= 1 */
void cvx_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));   /* level >= 2 */
void cvx_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));    /* always */

_Noreturn void cvx_check_failed(const char *file, int line, const char *expr);
#define CVX_CHECK(cond) \
    do { if (!(cond)) cvx_check_failed(__FILE__, __LINE__, #cond); } while (0)

/* Allocation that aborts with file:line on failure (out of memory is not recoverable here). */
void *cvx_malloc_at(size_t n, const char *file, int line);
void *cvx_calloc_at(size_t n, size_t size, const char *file, int line);
void *cvx_realloc_at(void *p, size_t n, const char *file, int line);
#define cvx_malloc(n) cvx_malloc_at((n), __FILE__, __LINE__)
#define cvx_calloc(n, s) cvx_calloc_at((n), (s), __FILE__, __LINE__)
#define cvx_realloc(p, n) cvx_realloc_at((p), (n), __FILE__, __LINE__)
/* 64-byte aligned allocation for SIMD-friendly buffers; free with free(). */
void *cvx_alloc_aligned_at(size_t n, const char *file, int line);
#define cvx_alloc_f32(count) ((float *)cvx_alloc_aligned_at((size_t)(count) * sizeof(float), __FILE__, __LINE__))

/* Wall clock in seconds, and this process's peak resident set size in bytes. */
double cvx_time(void);
size_t cvx_peak_rss_bytes(void);

#endif
