/* Process setup every program calls first in main, before any OpenMP or BLAS call.
 *
 * OpenMP wait policy: libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT once, when the library is
 * loaded (before main), and has no call to change them later; by default an idle worker spins
 * ~300000 iterations (~0.1-1 ms) at every barrier and between parallel regions. Beside another
 * CPU-heavy process on a 2-core machine those spinning threads take the CPU from the thread the
 * region is waiting for, and a stage ran > 7x slower (issue 14). So when the user has set
 * neither variable, the program re-executes itself once (/proc/self/exe, same argv and
 * environment) with the chosen setting; a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is always
 * respected. CVX_NO_REEXEC=1 disables the re-exec (debuggers, valgrind, measurements).
 * The choice, GOMP_SPINCOUNT=10000 (spin ~10 us, then sleep on a futex), was measured against
 * PASSIVE (no spinning) and libgomp's default on a loaded 2-core machine: docs/performance.md,
 * "OpenMP threads under load". PASSIVE was close; the default was the slowest everywhere. */
#ifndef CVX_RUNENV_H
#define CVX_RUNENV_H

/* The setting used when the user gives none (docs/performance.md has the measurements). */
#define CVX_DEFAULT_SPIN_VAR "GOMP_SPINCOUNT"
#define CVX_DEFAULT_SPIN_VALUE "10000"

/* Re-exec with GOMP_SPINCOUNT=10000 if needed (does not return then);
 * otherwise returns (already set, re-exec'd once, disabled, or exec failed: then it runs with
 * libgomp's defaults and says so at verbosity 2). */
void cvx_runtime_setup(int argc, char **argv);

#endif
