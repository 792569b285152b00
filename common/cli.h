/* Command-line value parsing shared by the three programs: a bad value is one error line
 * naming the flag, the accepted range and what was given, then exit(1). */
#ifndef CVX_CLI_H
#define CVX_CLI_H

long long cvx_flag_int(const char *flag, const char *value, long long lo, long long hi);
double cvx_flag_num(const char *flag, const char *value, double lo, double hi);

#endif
