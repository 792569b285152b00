/* Kernel rates against this machine's measured peaks: f32 FMA peak and bf16 dot-product peak
 * (tight vfmadd / vdpbf16ps loops, every thread), then per GEMM shape: OpenBLAS cblas_sgemm
 * (cvx_sgemm), cvx_matmul f32 (oneDNN), cvx_linear_p bf16 (bf16 weights read in place, x converted
 * per call), oneDNN bf16 with the weights reordered once to its blocked layout (the cached-reorder
 * variant, not used by the library: see docs/performance.md), the bf16 fallback; then attention f32
 * vs bf16. Best of `reps` runs (other processes share the cores: the best is the least disturbed).
 * Usage: bench_kernels [threads] [reps] [quick] */
#include "error.h"
#include "gemm.h"
#include "gemm_fast.h"
#include "ops.h"

#include <dnnl.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CPU seconds this process used: on a shared machine, flop / (cpu_s / threads) estimates the rate
 * the kernel would have on idle cores (run with OMP_WAIT_POLICY=PASSIVE so waiting threads sleep
 * instead of burning CPU time), where wall-clock rates only say how busy the neighbours were. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* ---- peaks: 12 independent accumulator chains per thread hide the latency ---- */
__attribute__((target("avx512f"))) static double peak_fma512(long iters) {
    double flop = 0;
#pragma omp parallel reduction(+ : flop)
    {
        double t0 = thread_cpu_s();
        __m512 c[12], a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
        for (int i = 0; i < 12; i++) c[i] = _mm512_set1_ps((float)i);
        for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++) c[i] = _mm512_fmadd_ps(a, c[i], b);
        float sink = 0;
        for (int i = 0; i < 12; i++) sink += _mm512_reduce_add_ps(c[i]);
        flop = (12.0 * 32 * iters + (sink == 12345.f)) / (thread_cpu_s() - t0);
    }
    return flop;
}

static double peak_fma256(long iters) {
    double flop = 0;
#pragma omp parallel reduction(+ : flop)
    {
        double t0 = thread_cpu_s();
        __m256 c[12], a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(0.9999999f);
        for (int i = 0; i < 12; i++) c[i] = _mm256_set1_ps((float)i);
        for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++) c[i] = _mm256_fmadd_ps(a, c[i], b);
        float t[8], sink = 0;
        for (int i = 0; i < 12; i++) { _mm256_storeu_ps(t, c[i]); sink += t[0]; }
        flop = (12.0 * 16 * iters + (sink == 12345.f)) / (thread_cpu_s() - t0);
    }
    return flop;
}

__attribute__((target("avx512f,avx512bf16"))) static double peak_dpbf16(long iters) {
    double flop = 0;
#pragma omp parallel reduction(+ : flop)
    {
        double t0 = thread_cpu_s();
        __m512 c[12];
        __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3c00);
        for (int i = 0; i < 12; i++) c[i] = _mm512_set1_ps((float)i);
        for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++) c[i] = _mm512_dpbf16_ps(c[i], a, b);
        float sink = 0;
        for (int i = 0; i < 12; i++) sink += _mm512_reduce_add_ps(c[i]);
        /* 16 lanes × 2 products × (mul + add) */
        flop = (12.0 * 64 * iters + (sink == 12345.f)) / (thread_cpu_s() - t0);
    }
    return flop;
}

/* The peak loops return Σ over threads of flop / (that thread's CPU seconds): the rate of the
 * cores while they run this process, insensitive to how often neighbours preempt it. */
static double best_rate(double (*f)(long), long iters, int reps) {
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double rate = f(iters);
        if (rate > best) best = rate;
    }
    return best * 1e-9;
}

/* ---- oneDNN bf16 with weights reordered once into the primitive's preferred (blocked) layout ---- */
#define DN(x) CVX_CHECK((x) == dnnl_success)
static double dnnl_bf16_blocked(int M, int N, int K, const uint16_t *xb, const uint16_t *wb, float *y, int reps,
                                double *reorder_s, double *cpu_rate) {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    DN(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    dnnl_memory_desc_t ms, mw_plain, mw_any, md;
    dnnl_dims_t ds = {M, K}, dw = {K, N}, dd = {M, N}, ss = {K, 1}, sw = {1, K}, sd = {N, 1};
    DN(dnnl_memory_desc_init_by_strides(&ms, 2, ds, dnnl_bf16, ss));
    DN(dnnl_memory_desc_init_by_strides(&mw_plain, 2, dw, dnnl_bf16, sw));
    DN(dnnl_memory_desc_init_by_tag(&mw_any, 2, dw, dnnl_bf16, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_strides(&md, 2, dd, dnnl_f32, sd));
    dnnl_matmul_desc_t mm;
    DN(dnnl_matmul_desc_init(&mm, &ms, &mw_any, NULL, &md));
    dnnl_primitive_desc_t pd, rpd;
    DN(dnnl_primitive_desc_create(&pd, &mm, NULL, eng, NULL));
    const dnnl_memory_desc_t *mw_blk = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_primitive_t prim, reo;
    DN(dnnl_primitive_create(&prim, pd));
    DN(dnnl_reorder_primitive_desc_create(&rpd, &mw_plain, eng, mw_blk, eng, NULL));
    DN(dnnl_primitive_create(&reo, rpd));
    dnnl_memory_t a, w0, w1, d;
    DN(dnnl_memory_create(&a, &ms, eng, (void *)xb));
    DN(dnnl_memory_create(&w0, &mw_plain, eng, (void *)wb));
    DN(dnnl_memory_create(&w1, mw_blk, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&d, &md, eng, y));
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, w0}, {DNNL_ARG_TO, w1}};
    double t = cvx_time();
    DN(dnnl_primitive_execute(reo, st, 2, ra));
    dnnl_stream_wait(st);
    *reorder_s = cvx_time() - t;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, w1}, {DNNL_ARG_DST, d}};
    double best = 1e30, cbest = 1e30;
    for (int r = 0; r <= reps; r++) {
        t = cvx_time();
        double c = cpu_s();
        DN(dnnl_primitive_execute(prim, st, 3, args));
        dnnl_stream_wait(st);
        t = cvx_time() - t;
        c = cpu_s() - c;
        if (r > 0 && t < best) best = t;   /* r = 0: warm-up */
        if (r > 0 && c < cbest) cbest = c;
    }
    *cpu_rate = 2.0 * M * N * K / (cbest / omp_get_max_threads()) * 1e-9;
    dnnl_memory_destroy(a); dnnl_memory_destroy(w0); dnnl_memory_destroy(w1); dnnl_memory_destroy(d);
    dnnl_primitive_destroy(prim); dnnl_primitive_destroy(reo);
    dnnl_primitive_desc_destroy(pd); dnnl_primitive_desc_destroy(rpd);
    dnnl_stream_destroy(st); dnnl_engine_destroy(eng);
    return 2.0 * M * N * K / best * 1e-9;
}

typedef struct { const char *what; int M, N, K; } shape;

enum { V_BLAS, V_F32, V_BF16, V_BF16_REO, V_BF16_BLK, V_FALLBACK, V_COUNT };
static const char *vname[V_COUNT] = {"openblas sgemm f32", "cvx_matmul f32 (oneDNN)", "cvx_linear_p bf16 W in place",
                                     "cvx_linear_p bf16 reorder/call", "oneDNN bf16 W reordered once",
                                     "bf16 fallback (widen+f32)"};

int main(int argc, char **argv) {
    cvx_set_program_name(argv[0]);
    cvx_set_threads(argc > 1 ? atoi(argv[1]) : 0);
    int reps = argc > 2 ? atoi(argv[2]) : 5, quick = argc > 3;
    setvbuf(stdout, NULL, _IOLBF, 0);   /* progress visible when piped */
    cvx_kernels *kc = cvx_kernels_new();
    if (!kc) cvx_die_last_error();
    char feat[128];
    printf("threads: %d   cpu: %s   best of %d runs\n", cvx_threads(), cvx_cpu_describe(cvx_kernels_cpu(kc), feat, 128),
           reps);
    const cvx_cpu_features *cpu = cvx_kernels_cpu(kc);
    double pk_f32 = cpu->avx512f ? best_rate(peak_fma512, 2000000, 4 * reps) : best_rate(peak_fma256, 2000000, 4 * reps);
    double pk_bf16 = cpu->avx512_bf16 ? best_rate(peak_dpbf16, 2000000, 4 * reps) : pk_f32;
    printf("peak per CPU-s: f32 FMA (%s) %.0f GFLOP/s, bf16 (%s) %.0f GFLOP/s\n", cpu->avx512f ? "zmm" : "ymm", pk_f32,
           cpu->avx512_bf16 ? "vdpbf16ps" : "none: = f32", pk_bf16);

    shape shapes[] = {
        {"CogVideoX-2b QKV/out 2432x1920x1920", 2432, 1920, 1920},
        {"T5-XXL FF 226x10240x4096", 226, 10240, 4096},
        {"CogVideoX-2b FF 2432x7680x1920", 2432, 7680, 1920},
        {"2b 49 frames 17776x1920x1920", 17776, 1920, 1920},
    };
    int nshapes = quick ? 1 : 4;
    for (int si = 0; si < nshapes; si++) {
        shape s = shapes[si];
        int M = s.M, N = s.N, K = s.K;
        float *x = cvx_alloc_f32((size_t)M * K), *w = cvx_alloc_f32((size_t)N * K), *y = cvx_alloc_f32((size_t)M * N);
        uint16_t *wb = cvx_malloc(2 * (size_t)N * K), *xb = cvx_malloc(2 * (size_t)M * K);
        for (size_t i = 0; i < (size_t)M * K; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        for (size_t i = 0; i < (size_t)N * K; i++) w[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
        cvx_f32_to_bf16_n(w, wb, (size_t)N * K);
        cvx_f32_to_bf16_n(x, xb, (size_t)M * K);
        cvx_tensor Wb = {0};
        Wb.dtype = CVX_BF16; Wb.ndim = 2; Wb.shape[0] = N; Wb.shape[1] = K; Wb.numel = (int64_t)N * K;
        Wb.data = wb; Wb.file = "bench";
        double rate[V_COUNT] = {0}, crate[V_COUNT] = {0}, reorder_s = 0, flop = 2.0 * M * N * K;
        for (int v = 0; v < V_COUNT; v++) {
            if (v == V_BF16_BLK) {
                if (cpu->avx512_bf16) rate[v] = dnnl_bf16_blocked(M, N, K, xb, wb, y, reps, &reorder_s, &crate[v]);
                continue;
            }
            if (v == V_FALLBACK && si > 0) continue;   /* ≈ the f32 rate; once is enough */
            if (v == V_BF16_REO && M < 8192) continue;  /* the library reorders only from 8192 rows */
            double best = 1e30, cbest = 1e30;
            for (int r = 0; r <= reps; r++) {
                double t = cvx_time(), c = cpu_s();
                switch (v) {
                case V_BLAS: cvx_sgemm(0, 1, M, N, K, 1, x, K, w, K, 0, y, N); break;
                case V_F32: cvx_gemm_p(kc, CVX_PRECISION_F32, 0, 1, M, N, K, x, K, w, K, 0, y, N); break;
                case V_BF16:
                    cvx_kernels_set_reorder(kc, 0);
                    cvx_linear_p(kc, CVX_PRECISION_BF16, x, M, K, &Wb, NULL, y);
                    cvx_kernels_set_reorder(kc, 1);
                    break;
                case V_BF16_REO: cvx_linear_p(kc, CVX_PRECISION_BF16, x, M, K, &Wb, NULL, y); break;
                case V_FALLBACK:
                    cvx_kernels_force(kc, CVX_KPATH_NO_BF16);
                    cvx_linear_p(kc, CVX_PRECISION_BF16, x, M, K, &Wb, NULL, y);
                    cvx_kernels_force(kc, CVX_KPATH_AUTO);
                    break;
                }
                t = cvx_time() - t;
                c = cpu_s() - c;
                if (r > 0 && t < best) best = t;
                if (r > 0 && c < cbest) cbest = c;
            }
            rate[v] = flop / best * 1e-9;
            crate[v] = flop / (cbest / cvx_threads()) * 1e-9;
        }
        double top = 0;
        for (int v = 0; v < V_COUNT; v++) top = rate[v] > top ? rate[v] : top;
        printf("%s\n", s.what);
        for (int v = 0; v < V_COUNT; v++) {
            if (rate[v] == 0) continue;
            int bf = v >= V_BF16;
            printf("  %-30s %7.1f GFLOP/s  %5.1f%% of %s peak  %5.2f of best | per CPU-s: %6.1f GFLOP/s %5.1f%%\n",
                   vname[v], rate[v], 100 * rate[v] / (bf ? pk_bf16 : pk_f32), bf ? "bf16" : "f32", rate[v] / top,
                   crate[v], 100 * crate[v] / (bf ? pk_bf16 : pk_f32));
        }
        if (reorder_s > 0) printf("  (one reorder of W to the blocked layout: %.1f ms)\n", reorder_s * 1e3);
        free(x); free(w); free(y); free(wb); free(xb);
        cvx_kernels_trim(kc);
    }

    /* Attention at CogVideoX-2b dims: 2 × (226 + 2 × 1350) ≈ 2 samples; one sample here: S = 2926... */
    struct { const char *what; int S, heads, hd; } att[] = {{"attention 2b: S 2476 heads 30 hd 64", 2476, 30, 64},
                                                           {"attention T5: S 226 heads 64 hd 64", 226, 64, 64}};
    for (int ai = 0; ai < (quick ? 1 : 2); ai++) {
        int S = att[ai].S, H = att[ai].heads, hd = att[ai].hd, ld = 3 * H * hd;
        float *qkv = cvx_alloc_f32((size_t)S * ld), *o = cvx_alloc_f32((size_t)S * H * hd);
        for (size_t i = 0; i < (size_t)S * ld; i++) qkv[i] = (float)((i * 2654435761u) % 1000) * 2e-3f - 1.0f;
        double flop = 4.0 * S * S * hd * H, r32 = 1e30, r16 = 1e30, c32 = 1e30, c16 = 1e30;
        for (int r = 0; r <= reps; r++) {
            double t = cvx_time(), c = cpu_s();
            cvx_attention(qkv, ld, qkv + H * hd, qkv + 2 * H * hd, ld, o, H * hd, S, S, H, hd, 0.125f, NULL);
            t = cvx_time() - t;
            c = cpu_s() - c;
            if (r > 0 && t < r32) r32 = t;
            if (r > 0 && c < c32) c32 = c;
            t = cvx_time();
            c = cpu_s();
            cvx_attention_bf16(kc, qkv, ld, qkv + H * hd, qkv + 2 * H * hd, ld, o, H * hd, S, S, H, hd, 0.125f, NULL);
            t = cvx_time() - t;
            c = cpu_s() - c;
            if (r > 0 && t < r16) r16 = t;
            if (r > 0 && c < c16) c16 = c;
        }
        c32 /= cvx_threads();
        c16 /= cvx_threads();
        printf("%s\n  %-30s %7.1f GFLOP/s  %5.1f%% of f32 peak\n  %-30s %7.1f GFLOP/s  %5.1f%% of bf16 peak  %.2fx\n",
               att[ai].what, "cvx_attention f32", flop / r32 * 1e-9, 100 * flop / r32 * 1e-9 / pk_f32,
               "cvx_attention_bf16", flop / r16 * 1e-9, 100 * flop / r16 * 1e-9 / pk_bf16, r32 / r16);
        printf("  per CPU-s: f32 %.1f GFLOP/s (%.1f%% of f32 peak), bf16 %.1f GFLOP/s (%.1f%% of bf16 peak), %.2fx\n",
               flop / c32 * 1e-9, 100 * flop / c32 * 1e-9 / pk_f32, flop / c16 * 1e-9, 100 * flop / c16 * 1e-9 / pk_bf16,
               c32 / c16);
        free(qkv); free(o);
    }
    printf("peak RSS %.2f GB\n", cvx_peak_rss_bytes() / 1e9);
    cvx_kernels_free(kc);
    return 0;
}
