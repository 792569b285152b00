#include "cli.h"
#include "error.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

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
