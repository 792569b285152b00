/* Attention throughput at CogVideoX shapes: the f32 tiled online-softmax kernel (cvx_attention) or
 * the bf16 one (cvx_attention_bf16, vdpbf16ps where the CPU has it).
 * FLOPs counted as the two products only: 4·Sq·Skv·hd per head; best of `reps` timed runs after a
 * warm-up. Usage: bench_attention [S] [heads] [f32|bf16|bf16-portable] [reps] [head_dim]   (CogVideoX-2b: 2476 30
 * bf16; Wan-1.3B at 33 frames 480x832: 14040 12 bf16 1 128); bf16-portable: the path of CPUs without AVX512_BF16.
 * Also prints the rate per CPU-second (flop / (process CPU time / threads)): what the kernel does
 * while it has the cores, when other processes share them. */
#include "error.h"
#include "gemm.h"
#include "gemm_fast.h"
#include "ops.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
    cvx_set_program_name(argv[0]);
    cvx_set_threads(0);
    int S = argc > 1 ? atoi(argv[1]) : 4096, heads = argc > 2 ? atoi(argv[2]) : 4;
    int hd = argc > 5 ? atoi(argv[5]) : 64, D = heads * hd;
    int portable = argc > 3 && strcmp(argv[3], "bf16-portable") == 0;
    int bf16 = portable || (argc > 3 && strcmp(argv[3], "bf16") == 0), reps = argc > 4 ? atoi(argv[4]) : 1;
    if (S <= 0 || heads <= 0 || reps <= 0 || hd <= 0 || hd % 2) {
        cvx_error("usage: bench_attention [S > 0] [heads > 0] [f32|bf16|bf16-portable] [reps > 0] [head_dim > 0, even]");
        return 1;
    }
    cvx_kernels *kc = bf16 ? cvx_kernels_new() : NULL;
    if (bf16 && !kc) return 1;
    if (portable) cvx_kernels_force(kc, CVX_KPATH_NO_BF16);
    float *q = cvx_alloc_f32((size_t)S * D), *k = cvx_alloc_f32((size_t)S * D), *v = cvx_alloc_f32((size_t)S * D),
          *o = cvx_alloc_f32((size_t)S * D);
    for (size_t i = 0; i < (size_t)S * D; i++) {
        q[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
        k[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
        v[i] = (float)(i % 997) * 1e-3f;
    }
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r <= reps; r++) {   /* r = 0: warm-up on 256 query rows */
        int sq = r == 0 ? (S < 256 ? S : 256) : S;
        double t = cvx_time(), c = cpu_s();
        if (bf16) cvx_attention_bf16(kc, q, D, k, v, D, o, D, sq, S, heads, hd, 0.125f, NULL);
        else cvx_attention(q, D, k, v, D, o, D, sq, S, heads, hd, 0.125f, NULL);
        t = cvx_time() - t;
        c = cpu_s() - c;
        if (r > 0 && t < best) best = t;
        if (r > 0 && c < best_cpu) best_cpu = c;
    }
    double flop = 4.0 * S * (double)S * hd * heads;
    uint64_t hash = 14695981039346656037ull;   /* FNV-1a of the output bits: bit-identity between builds */
    for (size_t i = 0; i < (size_t)S * D; i++) {
        uint32_t b;
        memcpy(&b, o + i, 4);
        hash = (hash ^ b) * 1099511628211ull;
    }
    printf("attention %s S=%d heads=%d hd=%d: %.3f s, %.1f GFLOP/s, per CPU-s %.1f GFLOP/s (threads %d, best of %d; output "
           "hash %016llx)\n",
           bf16 ? (kc && cvx_kernels_bf16_native(kc) ? "bf16" : "bf16-widened") : "f32", S, heads, hd, best,
           flop / best * 1e-9, flop / (best_cpu / cvx_threads()) * 1e-9, cvx_threads(), reps, (unsigned long long)hash);
    free(q); free(k); free(v); free(o);
    cvx_kernels_free(kc);
    return 0;
}
