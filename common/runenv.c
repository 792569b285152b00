/* cvx_runtime_setup: pick the OpenMP spin time by re-executing once; see runenv.h. */
#include "runenv.h"
#include "error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cvx_runtime_setup(int argc, char **argv) {
    (void)argc;
    const char *no = getenv("CVX_NO_REEXEC");
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || (no && no[0] == '1')) return;
    /* the marker stops a loop if the variable were dropped on the way (it is not, but a wrapper
     * that cleans the environment must not make us exec forever) */
    if (getenv("CVX_REEXECED")) return;
    if (setenv(CVX_DEFAULT_SPIN_VAR, CVX_DEFAULT_SPIN_VALUE, 1) != 0 || setenv("CVX_REEXECED", "1", 1) != 0) return;
    execv("/proc/self/exe", argv);
    int e = errno;   /* no /proc, or the binary was replaced: run with libgomp's defaults */
    unsetenv(CVX_DEFAULT_SPIN_VAR);
    cvx_debug("cannot re-execute with %s=%s (%s); idle OpenMP threads will spin for libgomp's default time",
              CVX_DEFAULT_SPIN_VAR, CVX_DEFAULT_SPIN_VALUE, strerror(e));
}
