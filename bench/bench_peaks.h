/* The machine's measured peaks for the benchmarks (header-only: each bench program is its own
 * program): tight loops of independent vfmadd231ps (f32), vdpbf16ps (bf16 pairs) and vpdpbusd
 * (int8: u8 × s8 quadruples into s32) on every thread, 16 accumulator chains per thread (12 on ymm:
 * 16 registers) to hide
 * the latency (vdpbf16ps needs more than 12 on AMD Zen 5: 12 chains measure 8 % below what 16, 24
 * or the attention kernel's 24 accumulators reach). Each loop returns Σ over threads of ops / (that thread's CPU seconds): the rate of
 * the cores while they run this process, insensitive to how often neighbours preempt it. FLOP
 * counting: a multiply-add is 2, so one zmm vdpbf16ps is 64 and one zmm vpdpbusd 128 (int8 "ops").
 *
 *   bench_peaks p;  bench_measure_peaks(&p, cpu, reps);   p.f32, p.bf16, p.int8 in G(FL)OP/s
 *   bench_cpu_s()   process CPU seconds (rates per CPU-second: run with OMP_WAIT_POLICY=PASSIVE) */
#ifndef CVX_BENCH_PEAKS_H
#define CVX_BENCH_PEAKS_H

#include "cpu.h"

#include <immintrin.h>
#include <omp.h>
#include <time.h>

static inline double bench_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static inline double bench_thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

__attribute__((target("avx512f"))) static double bench_peak_fma512(long iters) {
    double flop = 0;
#pragma omp parallel reduction(+ : flop)
    {
        double t0 = bench_thread_cpu_s();
        __m512 c[16], a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
        for (int i = 0; i < 16; i++) c[i] = _mm512_set1_ps((float)i);
        for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) c[i] = _mm512_fmadd_ps(a, c[i], b);
        float sink = 0;
        for (int i = 0; i < 16; i++) sink += _mm512_reduce_add_ps(c[i]);
        flop = (16.0 * 32 * iters + (sink == 12345.f)) / (bench_thread_cpu_s() - t0);
    }
    return flop;
}

/* ymm: 16 registers only, so 12 chains (+ the two operands): 16 would spill to memory */
static double bench_peak_fma256(long iters) {
    double flop = 0;
#pragma omp parallel reduction(+ : flop)
    {
        double t0 = bench_thread_cpu_s();
        __m256 c[12], a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(0.9999999f);
        for (int i = 0; i < 12; i++) c[i] = _mm256_set1_ps((float)i);
        for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++) c[i] = _mm256_fmadd_ps(a, c[i], b);
        float t[8], sink = 0;
        for (int i = 0; i < 12; i++) { _mm256_storeu_ps(t, c[i]); sink += t[0]; }
        flop = (12.0 * 16 * iters + (sink == 12345.f)) / (bench_thread_cpu_s() - t0);
    }
    return flop;
}

__attribute__((target("avx512f,avx512bf16"))) static double bench_peak_dpbf16(long iters) {
    double flop = 0;
#pragma omp parallel reduction(+ : flop)
    {
        double t0 = bench_thread_cpu_s();
        __m512 c[16];
        __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3c00);
        for (int i = 0; i < 16; i++) c[i] = _mm512_set1_ps((float)i);
        for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) c[i] = _mm512_dpbf16_ps(c[i], a, b);
        float sink = 0;
        for (int i = 0; i < 16; i++) sink += _mm512_reduce_add_ps(c[i]);
        /* 16 lanes × 2 products × (mul + add) */
        flop = (16.0 * 64 * iters + (sink == 12345.f)) / (bench_thread_cpu_s() - t0);
    }
    return flop;
}

/* vpdpbusd zmm: 16 lanes × 4 u8·s8 products, each a multiply and an add: 128 ops. */
__attribute__((target("avx512f,avx512vnni"))) static double bench_peak_dpbusd(long iters) {
    double ops = 0;
#pragma omp parallel reduction(+ : ops)
    {
        double t0 = bench_thread_cpu_s();
        __m512i c[16], a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
        for (int i = 0; i < 16; i++) c[i] = _mm512_set1_epi32(i);
        for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) c[i] = _mm512_dpbusd_epi32(c[i], a, b);
        int sink = 0;
        for (int i = 0; i < 16; i++) sink += _mm512_reduce_add_epi32(c[i]);
        ops = (16.0 * 128 * iters + (sink == 12345)) / (bench_thread_cpu_s() - t0);
    }
    return ops;
}

/* AVX-VNNI (ymm, VEX) where AVX-512 VNNI is absent: 8 lanes × 4 = 64 ops. */
__attribute__((target("avx2,avxvnni"))) static double bench_peak_dpbusd256(long iters) {
    double ops = 0;
#pragma omp parallel reduction(+ : ops)
    {
        double t0 = bench_thread_cpu_s();
        __m256i c[12], a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
        for (int i = 0; i < 12; i++) c[i] = _mm256_set1_epi32(i);
        for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++) c[i] = _mm256_dpbusd_avx_epi32(c[i], a, b);
        int t[8], sink = 0;
        for (int i = 0; i < 12; i++) { _mm256_storeu_si256((__m256i *)t, c[i]); sink += t[0]; }
        ops = (12.0 * 64 * iters + (sink == 12345)) / (bench_thread_cpu_s() - t0);
    }
    return ops;
}

/* AVX2 without VNNI: vpmaddubsw ymm, 32 u8·s8 products added in pairs into int16: 64 ops. An upper
 * bound for int8 dot products there (the int16 sums still have to be widened). */
__attribute__((target("avx2"))) static double bench_peak_maddubs256(long iters) {
    double ops = 0;
#pragma omp parallel reduction(+ : ops)
    {
        double t0 = bench_thread_cpu_s();
        __m256i c[12], a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
        for (int i = 0; i < 12; i++) c[i] = _mm256_set1_epi16((short)i);
        for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++) c[i] = _mm256_add_epi16(c[i], _mm256_maddubs_epi16(a, b));
        int t[8], sink = 0;
        for (int i = 0; i < 12; i++) { _mm256_storeu_si256((__m256i *)t, c[i]); sink += t[0]; }
        ops = (12.0 * 64 * iters + (sink == 12345)) / (bench_thread_cpu_s() - t0);
    }
    return ops;
}

/* The best of `reps` runs of a peak loop, in G(FL)OP/s. */
static inline double bench_best_rate(double (*f)(long), long iters, int reps) {
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double rate = f(iters);
        if (rate > best) best = rate;
    }
    return best * 1e-9;
}

typedef struct {
    double f32, bf16, int8;          /* GFLOP/s (int8: GOP/s); bf16 = f32 without bf16 units, int8 0 without VNNI or AVX2 */
    const char *f32_how, *bf16_how, *int8_how;
} bench_peaks;

static inline void bench_measure_peaks(bench_peaks *p, const cvx_cpu_features *cpu, int reps) {
    p->f32 = cpu->avx512f ? bench_best_rate(bench_peak_fma512, 2000000, reps)
                          : bench_best_rate(bench_peak_fma256, 2000000, reps);
    p->f32_how = cpu->avx512f ? "vfmadd231ps zmm" : "vfmadd231ps ymm";
    p->bf16 = cpu->avx512_bf16 ? bench_best_rate(bench_peak_dpbf16, 2000000, reps) : p->f32;
    p->bf16_how = cpu->avx512_bf16 ? "vdpbf16ps zmm" : "none: = f32";
    if (cpu->avx512_vnni) {
        p->int8 = bench_best_rate(bench_peak_dpbusd, 2000000, reps);
        p->int8_how = "vpdpbusd zmm";
    } else if (cpu->avx_vnni) {
        p->int8 = bench_best_rate(bench_peak_dpbusd256, 2000000, reps);
        p->int8_how = "vpdpbusd ymm (AVX-VNNI)";
    } else if (cpu->avx2) {
        p->int8 = bench_best_rate(bench_peak_maddubs256, 2000000, reps);
        p->int8_how = "vpmaddubsw ymm (into int16: an upper bound)";
    } else {
        p->int8 = 0;
        p->int8_how = "none";
    }
}

#endif
