#include "cli.h"
#include "error.h"
#include "fileio.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

long long cvx_flag_int(const char *flag, const char *value, long long lo, long long hi) {
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (!value[0] || *end || errno || v < lo || v > hi)
        cvx_die("%s must be an integer in [%lld, %lld], got '%s'", flag, lo, hi, value);
    return v;
}

double cvx_flag_num(const char *flag, const char *value, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (!value[0] || *end || errno || !isfinite(v) || v < lo || v > hi)
        cvx_die("%s must be a number in [%g, %g], got '%s'", flag, lo, hi, value);
    return v;
}

/* "--name" or "--name=..." naming one of opts (getopt_long also accepts unique prefixes; a
 * value that is a prefix of an option is still taken as text, as nobody types those). */
static const struct option *find_option(const struct option *opts, const char *word) {
    if (strncmp(word, "--", 2) != 0) return NULL;
    const char *name = word + 2;
    size_t n = strcspn(name, "=");
    for (const struct option *o = opts; o->name; o++)
        if (strlen(o->name) == n && strncmp(o->name, name, n) == 0) return o;
    return NULL;
}

const char *cvx_opt_value(const struct option *opts, int val, const char *value, char *const *argv, int optind) {
    const char *flag = "option";
    for (const struct option *o = opts; o->name; o++)
        if (!o->flag && o->val == val) { flag = o->name; break; }
    if (optind >= 1 && argv[optind - 1] == value && find_option(opts, value))
        cvx_die("--%s needs a value (got the option '%s'; write --%s=%s if you mean that text)", flag, value, flag,
                value);
    return value;
}

_Noreturn void cvx_die_bad_option(const struct option *opts, char *const *argv, int optind, int optopt) {
    const char *word = optind >= 1 ? argv[optind - 1] : "";
    const struct option *o = find_option(opts, word);
    if (!o && optopt)
        for (const struct option *p = opts; p->name; p++)
            if (!p->flag && p->val == optopt) { o = p; break; }
    if (o && o->has_arg == required_argument && !strchr(word, '='))
        cvx_die("--%s needs a value (see --help)", o->name);
    if (o && o->has_arg == no_argument && strchr(word, '='))
        cvx_die("--%s takes no value, got '%s' (see --help)", o->name, word);
    cvx_die("unknown or incomplete option '%s' (see --help)", word);
}

const char *cvx_model_abs(const char *model, char *buf, size_t n) {
    char real[PATH_MAX];
    if (!model || model[0] == '/' || !cvx_is_dir(model) || !realpath(model, real) || strlen(real) >= n) return model;
    memcpy(buf, real, strlen(real) + 1);
    return buf;
}
