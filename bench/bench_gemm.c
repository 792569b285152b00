/* GEMM rate and thread-pool check. Measures cvx_sgemm at the shapes that dominate the stages,
 * then the pattern every forward pass has: a BLAS call followed by one of our OpenMP loops,
 * repeated. With one pool (OpenBLAS's OpenMP build) the two share threads; with two pools
 * (pthread OpenBLAS + OpenMP) they compete for the cores. Usage: bench_gemm [threads]
 *
 * bench_gemm THREADS fixed [ROUNDS [SHAPES [avx2]]]: the fixed-chain GEMM's AVX-512 tiles (and
 * with "avx2" its AVX2 tiles) beside oneDNN's sgemm at the transformer and T5 shapes (SHAPES: their
 * numbers, e.g. 234; default all four), in alternating rounds, GFLOP per CPU-second (the machine
 * may be shared: CPU time, not wall time), the median of the rounds. Run with
 * OMP_WAIT_POLICY=PASSIVE so idle threads do not spin. */
#include "bench_peaks.h"
#include "error.h"
#include "gemm.h"
#include "ops.h"

#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the fixed GEMM (AVX-512 and AVX2 tiles) and oneDNN's sgemm, alternating, x·wᵀ as the linears */
static void bench_fixed(int rounds, const char *which, int nv) {
    struct { const char *what; int M, N, K; } shapes[] = {
        {"2b QKV/out 17776x1920x1920", 17776, 1920, 1920},
        {"2b FF 2432x7680x1920", 2432, 7680, 1920},
        {"2b QKV 2432x1920x1920", 2432, 1920, 1920},
        {"T5-XXL FF 226x10240x4096", 226, 10240, 4096},
    };
    const char *vn[3] = {"oneDNN sgemm", "fixed avx512", "fixed avx2"};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        if (!strchr(which, (int)('1' + si))) continue;
        const int M = shapes[si].M, N = shapes[si].N, K = shapes[si].K;
        float *x = cvx_alloc_f32((size_t)M * K), *w = cvx_alloc_f32((size_t)N * K), *y = cvx_alloc_f32((size_t)M * N);
        for (size_t i = 0; i < (size_t)M * K; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        for (size_t i = 0; i < (size_t)N * K; i++) w[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
        const double flop = 2.0 * M * N * K;
        const int reps = flop < 2e10 ? 3 : 1;
        double rate[3][64];
        for (int r = 0; r <= rounds && r < 64; r++)
            for (int v = 0; v < nv; v++) {
                const double c = bench_cpu_s();
                for (int q = 0; q < reps; q++) {
                    if (v == 0) dnnl_sgemm('N', 'T', M, N, K, 1, x, K, w, K, 0, y, N);
                    else cvx_sgemm_fixed_isa(v == 1, 0, 1, M, N, K, x, K, w, K, NULL, 0, y, N);
                }
                if (r > 0) rate[v][r - 1] = flop * reps / ((bench_cpu_s() - c) / cvx_threads()) * 1e-9;
            }
        printf("  %-28s", shapes[si].what);
        for (int v = 0; v < nv; v++) {
            qsort(rate[v], (size_t)rounds, sizeof(double), cmp_double);
            printf("  %s %6.1f", vn[v], rate[v][rounds / 2]);
        }
        printf("  (fixed avx512 / oneDNN %.3f)\n", rate[1][rounds / 2] / rate[0][rounds / 2]);
        free(x), free(w), free(y);
    }
}

static double bench_shape(int M, int N, int K, int reps) {
    float *A = cvx_alloc_f32((size_t)M * K), *B = cvx_alloc_f32((size_t)N * K), *C = cvx_alloc_f32((size_t)M * N);
    for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)N * K; i++) B[i] = (float)(i % 5) * 0.1f;
    cvx_sgemm(0, 1, M, N, K, 1, A, K, B, K, 0, C, N);  /* warm-up */
    double t = cvx_time();
    for (int r = 0; r < reps; r++) cvx_sgemm(0, 1, M, N, K, 1, A, K, B, K, 0, C, N);
    t = cvx_time() - t;
    free(A); free(B); free(C);
    return 2.0 * M * N * K * reps / t * 1e-9;
}

int main(int argc, char **argv) {
    cvx_set_program_name(argv[0]);
    cvx_set_threads(argc > 1 ? atoi(argv[1]) : 0);
    printf("threads: %d\n", cvx_threads());
    if (argc > 2 && strcmp(argv[2], "fixed") == 0) {
        const int rounds = argc > 3 ? atoi(argv[3]) : 3;
        if (rounds < 1 || rounds > 63) cvx_die("bench_gemm: rounds %d: expected 1 .. 63", rounds);
        printf("GFLOP per CPU-second, median of %d alternating rounds\n", rounds);
        setvbuf(stdout, NULL, _IOLBF, 0);
        bench_fixed(rounds, argc > 4 ? argv[4] : "1234", argc > 5 && strcmp(argv[5], "avx2") == 0 ? 3 : 2);
        return 0;
    }
    struct { const char *what; int M, N, K, reps; } shapes[] = {
        {"square 2048^3", 2048, 2048, 2048, 3},
        {"T5-XXL FF 226x10240x4096", 226, 10240, 4096, 3},
        {"CogVideoX-2b QKV 2432x1920x1920", 2432, 1920, 1920, 3},
        {"CogVideoX-2b FF 2432x7680x1920", 2432, 7680, 1920, 2},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        printf("  %-34s %7.1f GFLOP/s\n", shapes[i].what,
               bench_shape(shapes[i].M, shapes[i].N, shapes[i].K, shapes[i].reps));

    /* Alternate BLAS and our own parallel loop (LayerNorm + GELU on the product). */
    int M = 2432, N = 1920, K = 1920, reps = 10;
    float *A = cvx_alloc_f32((size_t)M * K), *B = cvx_alloc_f32((size_t)N * K), *C = cvx_alloc_f32((size_t)M * N);
    for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < (size_t)N * K; i++) B[i] = (float)(i % 5) * 0.01f;
    double t = cvx_time();
    for (int r = 0; r < reps; r++) {
        cvx_sgemm(0, 1, M, N, K, 1, A, K, B, K, 0, C, N);
        cvx_layernorm(C, C, M, N, NULL, NULL, 1e-5f);
        cvx_gelu_tanh(C, (size_t)M * N);
    }
    t = cvx_time() - t;
    printf("  %-34s %7.3f s per iteration (GEMM + LayerNorm + GELU)\n", "mixed BLAS/OpenMP loop", t / reps);
    free(A); free(B); free(C);
    return 0;
}
