/* Attention throughput at CogVideoX shapes: the f32 tiled online-softmax kernel (cvx_attention), the
 * bf16 one (cvx_attention_bf16, vdpbf16ps where the CPU has it) or the int8 one (cvx_attention_int8:
 * int8 QKᵀ by vpdpbusd or AVX2 vpmaddubsw, PV in bf16; int8pv: cvx_attention_int8_pv8, PV in int8 too).
 * FLOPs counted as the two products only: 4·Sq·Skv·hd per head; best of `reps` timed runs after a
 * warm-up, wall-clock and per CPU-second (the rate the cores give while they run it: other processes
 * share them; run with OMP_WAIT_POLICY=PASSIVE), against the peak of the precision's dot product
 * measured here (bench_peaks.h). Usage:
 *   bench_attention [S] [heads] [f32|f32-avx2|bf16|bf16-portable|int8|int8pv] [reps] [head_dim]
 * (f32: the AVX-512 kernels where the CPU has them, as the models run it; f32-avx2: the AVX2 ones, same bits)
 * (CogVideoX-2b at 13 frames: 2476 30 bf16; 49 frames: 17776 30 bf16; Wan2.1-1.3B 81 frames 480p:
 * 32760 12 bf16 3 128); bf16-portable: the path of CPUs without AVX512_BF16. int8's % is of the peak of
 * its PV product (vdpbf16ps, or the f32 FMA where bf16 is widened): its QK half runs on int8 units. */
#include "error.h"
#include "gemm.h"
#include "gemm_fast.h"
#include "ops.h"

#include "bench_peaks.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    cvx_set_program_name(argv[0]);
    cvx_set_threads(0);
    int S = argc > 1 ? atoi(argv[1]) : 4096, heads = argc > 2 ? atoi(argv[2]) : 4, hd = argc > 5 ? atoi(argv[5]) : 64;
    int D = heads * hd;
    int portable = argc > 3 && strcmp(argv[3], "bf16-portable") == 0;
    int f32_avx2 = argc > 3 && strcmp(argv[3], "f32-avx2") == 0;
    int pv8 = argc > 3 && strcmp(argv[3], "int8pv") == 0;
    int int8 = pv8 || (argc > 3 && strcmp(argv[3], "int8") == 0);
    int bf16 = portable || (argc > 3 && strcmp(argv[3], "bf16") == 0), reps = argc > 4 ? atoi(argv[4]) : 1;
    if (S <= 0 || heads <= 0 || reps <= 0 || hd <= 0 || hd % 2 ||
        (argc > 3 && !bf16 && !int8 && !f32_avx2 && strcmp(argv[3], "f32") != 0)) {
        cvx_error("usage: bench_attention [S > 0] [heads > 0] [f32|f32-avx2|bf16|bf16-portable|int8|int8pv] [reps > 0] [head_dim > 0, "
                  "even]");
        return 1;
    }
    cvx_kernels *kc = bf16 || int8 ? cvx_kernels_new() : NULL;
    if (bf16 && !kc) return 1;
    if (portable) cvx_kernels_force(kc, CVX_KPATH_NO_BF16);
    float *q = cvx_alloc_f32((size_t)S * D), *k = cvx_alloc_f32((size_t)S * D), *v = cvx_alloc_f32((size_t)S * D),
          *o = cvx_alloc_f32((size_t)S * D);
    for (size_t i = 0; i < (size_t)S * D; i++) {
        q[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
        k[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
        v[i] = (float)(i % 997) * 1e-3f;
    }
    cvx_cpu_features cpu;
    cvx_cpu_detect(&cpu);
    double best = 1e30, cbest = 1e30;
    float scale = 1.0f / sqrtf((float)hd);
    for (int r = 0; r <= reps; r++) {   /* r = 0: warm-up on 256 query rows */
        int sq = r == 0 ? (S < 256 ? S : 256) : S;
        double t = cvx_time(), c = bench_cpu_s();
        if (pv8) cvx_attention_int8_pv8(kc, q, D, k, v, D, o, D, sq, S, heads, hd, scale, NULL);
        else if (int8) cvx_attention_int8(kc, q, D, k, v, D, o, D, sq, S, heads, hd, scale, NULL);
        else if (bf16) cvx_attention_bf16(kc, q, D, k, v, D, o, D, sq, S, heads, hd, scale, NULL);
        else cvx_attention_isa(cpu.avx512f && !f32_avx2, q, D, k, v, D, o, D, sq, S, heads, hd, scale, NULL);
        t = cvx_time() - t, c = bench_cpu_s() - c;
        if (r > 0 && t < best) best = t;
        if (r > 0 && c < cbest) cbest = c;
    }
    double flop = 4.0 * S * (double)S * hd * heads;
    uint64_t hash = 14695981039346656037ull;   /* FNV-1a of the output bits: bit-identity between builds */
    for (size_t i = 0; i < (size_t)S * D; i++) {
        uint32_t b;
        memcpy(&b, o + i, 4);
        hash = (hash ^ b) * 1099511628211ull;
    }
    double err = -1;   /* bf16 / int8: rel L2 vs the f32 kernel on the first 256 query rows */
    if (bf16 || int8) {
        int nr = S < 256 ? S : 256;
        float *o32 = cvx_alloc_f32((size_t)nr * D);
        cvx_attention(q, D, k, v, D, o32, D, nr, S, heads, hd, scale, NULL);
        err = cvx_rel_l2(o, o32, (size_t)nr * D);
        free(o32);
    }
    int native = (bf16 || int8) && kc && cvx_kernels_bf16_native(kc);
    double peak = native ? bench_best_rate(bench_peak_dpbf16, 2000000, 8)
                         : cpu.avx512f ? bench_best_rate(bench_peak_fma512, 2000000, 8)
                                       : bench_best_rate(bench_peak_fma256, 2000000, 8);
    double per_cpu = flop / (cbest / cvx_threads()) * 1e-9;
    if (int8) printf("(int8 QK path: %s)\n", cvx_attention_int8_path(kc));
    printf("attention %s S=%d heads=%d hd=%d: %.3f s, %.1f GFLOP/s, per CPU-s %.1f GFLOP/s = %.1f%% of the %s peak "
           "%.0f (threads %d, best of %d; output hash %016llx)\n",
           pv8 ? "int8-qk+int8-pv" : int8 ? (native ? "int8" : "int8-qk+widened-pv") : bf16 ? (native ? "bf16" : "bf16-widened") : f32_avx2 || !cpu.avx512f ? "f32 (AVX2)" : "f32 (AVX-512)", S, heads, hd, best, flop / best * 1e-9, per_cpu,
           100 * per_cpu / peak, native ? "vdpbf16ps" : "f32 FMA", peak, cvx_threads(), reps, (unsigned long long)hash);
    if (err >= 0) printf("  rel L2 vs f32 attention (first 256 query rows): %.3g\n", err);
    free(q); free(k); free(v); free(o);
    cvx_kernels_free(kc);
    return 0;
}
