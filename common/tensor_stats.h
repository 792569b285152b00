/* Statistics of a tensor and distances between two, in double, sequential (deterministic):
 * what the debugging tools (tools/cvx-inspect, tools/cvx-compare) and stage 2's per-step record
 * print. NaN and Inf values are counted and left out of the other statistics. */
#ifndef CVX_TENSOR_STATS_H
#define CVX_TENSOR_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t n;                  /* values */
    size_t nan, inf;           /* counts; the rest are over the finite values */
    double min, max, mean, std;   /* std: population (÷ n) */
    double l2;                 /* sqrt(Σ x²) */
} cvx_stats;

void cvx_stats_f32(const float *x, size_t n, cvx_stats *out);

typedef struct {
    double rel_l2;             /* ‖a − b‖ / ‖b‖ (‖a − b‖ when ‖b‖ = 0); NaN when either side has a NaN/Inf */
    double max_abs;            /* max |a − b| (index in argmax) */
    size_t argmax;
    double cosine;             /* a·b / (‖a‖‖b‖); 1 when both are zero, 0 when one is */
    double l2_a, l2_b;
    size_t nonfinite;          /* positions where a or b is NaN/Inf */
} cvx_diff;

void cvx_diff_f32(const float *a, const float *b, size_t n, cvx_diff *out);

#endif
