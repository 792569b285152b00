/* Attention throughput at CogVideoX shapes: tiled online-softmax attention vs the sgemm rate.
 * FLOPs counted as the two products only: 4·Sq·Skv·hd per head. Usage: bench_attention [S] [heads] */
#include "error.h"
#include "gemm.h"
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    cvx_set_program_name(argv[0]);
    cvx_set_threads(0);
    int S = argc > 1 ? atoi(argv[1]) : 4096, heads = argc > 2 ? atoi(argv[2]) : 4, hd = 64, D = heads * hd;
    float *q = cvx_alloc_f32((size_t)S * D), *k = cvx_alloc_f32((size_t)S * D), *v = cvx_alloc_f32((size_t)S * D),
          *o = cvx_alloc_f32((size_t)S * D);
    for (size_t i = 0; i < (size_t)S * D; i++) {
        q[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
        k[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
        v[i] = (float)(i % 997) * 1e-3f;
    }
    cvx_attention(q, D, k, v, D, o, D, 256, S, heads, hd, 0.125f, NULL);  /* warm-up */
    double t = cvx_time();
    cvx_attention(q, D, k, v, D, o, D, S, S, heads, hd, 0.125f, NULL);
    t = cvx_time() - t;
    double flop = 4.0 * S * (double)S * hd * heads;
    printf("attention S=%d heads=%d hd=%d: %.3f s, %.1f GFLOP/s (threads %d)\n", S, heads, hd, t, flop / t * 1e-9,
           cvx_threads());
    free(q); free(k); free(v); free(o);
    return 0;
}
