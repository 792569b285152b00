/* Classifier-free guidance (guidance.h). */
#include "guidance.h"

#include <math.h>

void cvx_cfg_combine(const float *uncond, const float *cond, double g, size_t n, float *out) {
    const float gf = (float)g;
    for (size_t i = 0; i < n; i++) out[i] = uncond[i] + gf * (cond[i] - uncond[i]);
}

/* unbiased standard deviation (torch.std's default correction 1), two passes in double */
static double std_of(const float *x, size_t n) {
    double mean = 0, ss = 0;
    for (size_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) ss += ((double)x[i] - mean) * ((double)x[i] - mean);
    return n > 1 ? sqrt(ss / (double)(n - 1)) : 0.0;
}

void cvx_cfg_rescale(const float *cond, double phi, size_t n, float *out) {
    if (!(phi > 0)) return;
    const double so = std_of(out, n);
    if (!(so > 0)) return;
    const float ratio = (float)(std_of(cond, n) / so), p = (float)phi, q = (float)(1.0 - phi);
    for (size_t i = 0; i < n; i++) out[i] = p * (out[i] * ratio) + q * out[i];
}
