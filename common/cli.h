/* Command-line value parsing shared by the three programs: a bad value is one error line
 * naming the flag, the accepted range and what was given, then exit(1). */
#ifndef CVX_CLI_H
#define CVX_CLI_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the flag table: one row per long option, from which the parsing is derived ----
 *
 *   static const cvx_flag_choice tilings[] = {{"auto", CVX_TILING_AUTO}, {"on", CVX_TILING_ON}, {0}};
 *   const cvx_flag flags[] = {
 *       CVX_FLAG_STR_("model_id", &model_id), CVX_FLAG_INT_("threads", &threads, 0, 1024),
 *       CVX_FLAG_CHOICE_("tiling", &tiling, tilings, "auto or on"), CVX_FLAG_HELP_(), {0}};
 *   if (cvx_flags_parse(flags, argc, argv)) { usage(stdout); return 0; }
 *
 * A bad value is one error line naming the flag, what it accepts and what was given; a missing
 * value, an unknown option or a stray argument likewise (cvx_opt_value, cvx_die_bad_option). */
typedef enum {
    CVX_FLAG_STR,      /* const char **dest = the value */
    CVX_FLAG_BOOL,     /* int *dest = value (the flag takes no value) */
    CVX_FLAG_INT,      /* int *dest, an integer in [lo, hi] */
    CVX_FLAG_U64,      /* uint64_t *dest, a non-negative integer below 2^64 */
    CVX_FLAG_NUM,      /* double *dest, a finite number in [lo, hi] */
    CVX_FLAG_CHOICE,   /* int (or enum) *dest = the value of the name given, from choices */
    CVX_FLAG_PARSE,    /* parse(value, dest): 0, or -1 + cvx_error (the program dies with it) */
    CVX_FLAG_HELP,     /* --help (and -h): parsing stops, cvx_flags_parse returns 1 */
} cvx_flag_kind;

typedef struct {
    const char *name;
    int value;
} cvx_flag_choice;   /* a {0}-terminated table of the names a CHOICE flag accepts */

typedef struct {
    const char *name;                              /* "threads" for --threads; NULL ends the table */
    cvx_flag_kind kind;
    void *dest;
    long long lo, hi;                              /* INT: the accepted range; BOOL: lo is the value stored */
    double nlo, nhi;                               /* NUM: the accepted range */
    const cvx_flag_choice *choices;                /* CHOICE */
    const char *expected;                          /* the error's "must be ..." (CHOICE; INT, U64: optional) */
    int (*parse)(const char *value, void *dest);   /* PARSE */
    const char **given;                            /* optional: the value as given (CHOICE, PARSE; a
                                                    * PARSE flag the ranks agree on needs it) */
    /* MPI: 0 (the default) = every rank must be given the same value (it can change what the
     * ranks do together: a flag nobody thought about is agreed on, so none can be forgotten);
     * 1 = may differ between ranks (paths on each machine, threads, verbosity): CVX_PER_RANK */
    int per_rank;
} cvx_flag;

/* The row macros take optional designated initializers after their arguments:
 * CVX_FLAG_STR_("input_dir", &dir, CVX_PER_RANK). */
#define CVX_PER_RANK .per_rank = 1
#define CVX_FLAG_STR_(n, d, ...) {.name = n, .kind = CVX_FLAG_STR, .dest = (d), __VA_ARGS__}
#define CVX_FLAG_BOOL_(n, d, v, ...) {.name = n, .kind = CVX_FLAG_BOOL, .dest = (d), .lo = (v), __VA_ARGS__}
#define CVX_FLAG_INT_(n, d, l, h, ...) {.name = n, .kind = CVX_FLAG_INT, .dest = (d), .lo = (l), .hi = (h), __VA_ARGS__}
#define CVX_FLAG_NUM_(n, d, l, h, ...) {.name = n, .kind = CVX_FLAG_NUM, .dest = (d), .nlo = (l), .nhi = (h), __VA_ARGS__}
#define CVX_FLAG_U64_(n, d, ...) {.name = n, .kind = CVX_FLAG_U64, .dest = (d), __VA_ARGS__}
#define CVX_FLAG_CHOICE_(n, d, c, e, ...) \
    {.name = n, .kind = CVX_FLAG_CHOICE, .dest = (d), .choices = (c), .expected = (e), __VA_ARGS__}
#define CVX_FLAG_PARSE_(n, f, d, g, ...) \
    {.name = n, .kind = CVX_FLAG_PARSE, .parse = (f), .dest = (d), .given = (g), __VA_ARGS__}
#define CVX_FLAG_HELP_() {.name = "help", .kind = CVX_FLAG_HELP, .per_rank = 1}

/* Parses argv[1..argc) by the table (getopt_long: "--name value", "--name=value", unique
 * prefixes, options and arguments in any order): every value is checked and stored as it comes,
 * the first bad one is fatal (cvx_die). Returns 1 at --help or -h (the rest unparsed), else 0
 * after checking that no argument is left over. At most 63 flags. */
int cvx_flags_parse(const cvx_flag *flags, int argc, char **argv);

/* Every flag the MPI ranks must agree on (all but CVX_PER_RANK ones and --help), in table order,
 * to add(user, "--name", value): the value as parsed (STR: the text or "(unset)"; BOOL, INT,
 * CHOICE: the int stored; U64; NUM: %.17g; PARSE: the text given; a row with `given`: "(unset)"
 * when not given, as its default is the program's to choose). Call right
 * after cvx_flags_parse, before the program changes a destination. pipeline/parallel.c compares
 * the ranks' lists (issue 21: ranks given different --checkpoint_every hung). */
void cvx_flags_each_agreed(const cvx_flag *flags, void (*add)(void *user, const char *name, const char *value),
                           void *user);

long long cvx_flag_int(const char *flag, const char *value, long long lo, long long hi);
double cvx_flag_num(const char *flag, const char *value, double lo, double hi);

/* getopt_long takes the next word as a required argument even when it is another option:
 * "--prompt --threads 1" gives --prompt the value "--threads". Call on every required
 * argument (val = getopt_long's return value, value = optarg): when `value` came as a separate word (argv[optind - 1] == value) and is one of
 * `opts` ("--threads" or "--threads=..."), exit(1) with "--prompt needs a value (got the option
 * '--threads'; write --prompt=--threads if you mean that text)". Returns value. */
const char *cvx_opt_value(const struct option *opts, int val, const char *value, char *const *argv, int optind);
/* The message for getopt_long's '?' (opterr = 0): "--prompt needs a value" when the option
 * exists and lacks its argument, else "unknown option '--x' (see --help)". Exits 1. */
_Noreturn void cvx_die_bad_option(const struct option *opts, char *const *argv, int optind, int optopt);

/* A model given as a relative local directory becomes its absolute path (the stages record it
 * in their outputs; a later run from another working directory must find the same model).
 * A hub id (ORG/NAME that is not a local directory) or an absolute path is returned unchanged;
 * buf holds the result when it changed. */
const char *cvx_model_abs(const char *model, char *buf, size_t n);

#endif
