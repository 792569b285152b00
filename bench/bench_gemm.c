/* GEMM rate and thread-pool check. Measures cvx_sgemm at the shapes that dominate the stages,
 * then the pattern every forward pass has: a BLAS call followed by one of our OpenMP loops,
 * repeated. With one pool (OpenBLAS's OpenMP build) the two share threads; with two pools
 * (pthread OpenBLAS + OpenMP) they compete for the cores. Usage: bench_gemm [threads] */
#include "error.h"
#include "gemm.h"
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>

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
