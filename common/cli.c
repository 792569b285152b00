#include "cli.h"
#include "error.h"
#include "fileio.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
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

/* The value of one flag, checked, into its destination. */
static void flag_store(const cvx_flag *f, const char *value) {
    char flag[80];
    snprintf(flag, sizeof flag, "--%s", f->name);
    switch (f->kind) {
    case CVX_FLAG_STR: *(const char **)f->dest = value; break;
    case CVX_FLAG_BOOL: *(int *)f->dest = (int)f->lo; break;
    case CVX_FLAG_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (f->expected && (!value[0] || *end || errno || v < f->lo || v > f->hi))
            cvx_die("%s must be %s, got '%s'", flag, f->expected, value);
        *(int *)f->dest = (int)cvx_flag_int(flag, value, f->lo, f->hi);
        break;
    }
    case CVX_FLAG_U64: {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(value, &end, 10);
        if (!value[0] || *end || errno || value[0] == '-')
            cvx_die("%s must be %s, got '%s'", flag, f->expected ? f->expected : "a non-negative integer below 2^64",
                    value);
        *(uint64_t *)f->dest = v;
        break;
    }
    case CVX_FLAG_NUM: *(double *)f->dest = cvx_flag_num(flag, value, f->nlo, f->nhi); break;
    case CVX_FLAG_CHOICE: {
        const cvx_flag_choice *c = f->choices;
        while (c->name && strcmp(c->name, value)) c++;
        if (!c->name) cvx_die("%s must be %s, got '%s'", flag, f->expected, value);
        *(int *)f->dest = c->value;
        break;
    }
    case CVX_FLAG_PARSE:
        if (f->parse(value, f->dest)) cvx_die_last_error();
        break;
    case CVX_FLAG_HELP: break;
    }
    if (f->given) *f->given = value;
}

void cvx_flags_each_agreed(const cvx_flag *flags, void (*add)(void *user, const char *name, const char *value),
                           void *user) {
    for (const cvx_flag *f = flags; f->name; f++) {
        if (f->per_rank || f->kind == CVX_FLAG_HELP) continue;
        char name[80], v[64];
        const char *value = v;
        snprintf(name, sizeof name, "--%s", f->name);
        switch (f->kind) {
        case CVX_FLAG_STR: value = *(const char *const *)f->dest ? *(const char *const *)f->dest : "(unset)"; break;
        /* as a user reads them (issue 37): no enum numbers, no sentinels of a flag not given */
        case CVX_FLAG_BOOL: value = *(const int *)f->dest == f->lo ? "given" : "not given"; break;
        case CVX_FLAG_INT: {
            const int x = *(const int *)f->dest;
            if (x < f->lo || x > f->hi) value = "(not given)";
            else snprintf(v, sizeof v, "%d", x);
            break;
        }
        case CVX_FLAG_CHOICE:
            value = "(not given)";
            for (const cvx_flag_choice *c = f->choices; c && c->name; c++)
                if (c->value == *(const int *)f->dest) { value = c->name; break; }
            break;
        case CVX_FLAG_U64: snprintf(v, sizeof v, "%llu", (unsigned long long)*(const uint64_t *)f->dest); break;
        case CVX_FLAG_NUM: {
            const double x = *(const double *)f->dest;
            if (!(x >= f->nlo && x <= f->nhi)) value = "(not given)";
            else snprintf(v, sizeof v, "%.17g", x);
            break;
        }
        case CVX_FLAG_PARSE:
            CVX_CHECK(f->given);   /* its destination is the parser's: the agreement compares the text given */
            value = *f->given ? *f->given : "(unset)";
            break;
        case CVX_FLAG_HELP: continue;
        }
        if (f->given && !*f->given) value = "(unset)";   /* not given: the program's default, not the stored value */
        add(user, name, value);
    }
}

int cvx_flags_parse(const cvx_flag *flags, int argc, char **argv) {
    struct option opts[64];   /* getopt_long's view of the table: val = 256 + row */
    int n = 0;
    for (; flags[n].name; n++) {
        CVX_CHECK(n < 63);
        int takes = flags[n].kind != CVX_FLAG_BOOL && flags[n].kind != CVX_FLAG_HELP;
        opts[n] = (struct option){flags[n].name, takes ? required_argument : no_argument, NULL, 256 + n};
    }
    opts[n] = (struct option){0, 0, 0, 0};
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        if (c == 'h') return 1;
        if (c < 256 || c >= 256 + n) cvx_die_bad_option(opts, argv, optind, optopt);
        const cvx_flag *f = &flags[c - 256];
        if (f->kind == CVX_FLAG_HELP) return 1;
        if (optarg) cvx_opt_value(opts, c, optarg, argv, optind);   /* "--prompt --threads 1" */
        flag_store(f, optarg);
    }
    if (optind < argc) cvx_die("unexpected argument '%s' (see --help)", argv[optind]);
    return 0;
}
