/* Tensor statistics and distances (tensor_stats.h). */
#include "tensor_stats.h"

#include <math.h>
#include <string.h>

void cvx_stats_f32(const float *x, size_t n, cvx_stats *o) {
    memset(o, 0, sizeof *o);
    o->n = n;
    double s = 0, s2 = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const double v = x[i];
        if (isnan(v)) { o->nan++; continue; }
        if (isinf(v)) { o->inf++; continue; }
        if (k == 0 || v < o->min) o->min = v;
        if (k == 0 || v > o->max) o->max = v;
        s += v, s2 += v * v, k++;
    }
    if (k == 0) return;
    o->mean = s / (double)k;
    double var = 0;   /* second pass: no cancellation */
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i])) var += ((double)x[i] - o->mean) * ((double)x[i] - o->mean);
    o->std = sqrt(var / (double)k);
    o->l2 = sqrt(s2);
}

void cvx_diff_f32(const float *a, const float *b, size_t n, cvx_diff *o) {
    memset(o, 0, sizeof *o);
    double d2 = 0, aa = 0, bb = 0, ab = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = a[i], y = b[i];
        if (!isfinite(x) || !isfinite(y)) { o->nonfinite++; continue; }
        const double d = x - y;
        if (fabs(d) > o->max_abs) o->max_abs = fabs(d), o->argmax = i;
        d2 += d * d, aa += x * x, bb += y * y, ab += x * y;
    }
    o->l2_a = sqrt(aa), o->l2_b = sqrt(bb);
    o->rel_l2 = o->nonfinite ? NAN : bb > 0 ? sqrt(d2 / bb) : sqrt(d2);
    o->cosine = aa == 0 && bb == 0 ? 1.0 : aa == 0 || bb == 0 ? 0.0 : ab / (o->l2_a * o->l2_b);
    if (o->nonfinite) o->cosine = NAN, o->max_abs = NAN;
}
