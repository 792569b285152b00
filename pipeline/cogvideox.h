/* The API's former name, kept for programs that include it: see pipeline/cvx.h. */
#include "pipeline/cvx.h"
