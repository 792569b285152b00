/* Classifier-free guidance (guidance.h). */
#include "guidance.h"

void cvx_cfg_combine(const float *uncond, const float *cond, double g, size_t n, float *out) {
    const float gf = (float)g;
    for (size_t i = 0; i < n; i++) out[i] = uncond[i] + gf * (cond[i] - uncond[i]);
}
