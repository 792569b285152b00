/* Command-line value parsing shared by the three programs: a bad value is one error line
 * naming the flag, the accepted range and what was given, then exit(1). */
#ifndef CVX_CLI_H
#define CVX_CLI_H

#include <getopt.h>
#include <stddef.h>

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
