/* Kernel rates against this machine's measured peaks (bench_peaks.h: f32 FMA, bf16 vdpbf16ps and
 * int8 vpdpbusd loops, every thread), then per GEMM shape: OpenBLAS cblas_sgemm (cvx_sgemm),
 * cvx_matmul f32 (oneDNN), cvx_linear_p bf16 (bf16 weights read in place, x converted per call),
 * cvx_linear_p bf16 on the weight pre-packed in the context (gemm_fast.h), oneDNN bf16 with the
 * weights reordered once by hand, the bf16 fallback in place and pre-packed; attention f32 vs bf16; a VAE
 * convolution in f32 and bf16; oneDNN's int8 GEMM; and a closing table of each op family's share of
 * its peak. Best of `reps` runs (other processes share the cores: the best is the least disturbed).
 * Usage: bench_kernels [threads] [reps] [quick] */
#include "conv.h"
#include "error.h"
#include "gemm.h"
#include "gemm_fast.h"
#include "ops.h"

#include "bench_peaks.h"

#include <cblas.h>
#include <dnnl.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
        double c = bench_cpu_s();
        DN(dnnl_primitive_execute(prim, st, 3, args));
        dnnl_stream_wait(st);
        t = cvx_time() - t;
        c = bench_cpu_s() - c;
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

/* One op family's rate for the closing summary: wall-clock and per-CPU-second, against its peak. */
typedef struct {
    const char *what;
    double wall, cpu, peak;
    const char *peak_name;
} family;

/* A VAE-like kt×3×3 convolution (128 → 128 channels, 3 frames of 60×60, pre-padded) with the
 * algorithm each precision uses: f32 Winograd F(4×4), bf16 F(2×2), and oneDNN's bf16 convolution
 * primitive (CVX_VAE_CONV=onednn; per call: primitive, weight reorder, src/dst reorders included;
 * emulated bf16 on a CPU without AVX512_BF16); rates in direct-equivalent FLOPs. */
static void conv_families(cvx_kernels *kc, int reps, double pk_f32, double pk_bf16, family *fam, int *nfam) {
    (void)kc;
    const int C = 128, T = 3, H = 60, W = 60, kt = 3, Tp = T + kt - 1, Hp = H + 2, Wp = W + 2;
    size_t nx = (size_t)C * Tp * Hp * Wp, nw = (size_t)C * C * kt * 9;
    float *xp = cvx_alloc_f32(nx), *w = cvx_alloc_f32(nw), *y = cvx_alloc_f32((size_t)C * T * H * W);
    float *U = cvx_alloc_f32((size_t)36 * C * C * kt);
    for (size_t i = 0; i < nx; i++) xp[i] = (float)((i * 2654435761u) % 1000) * 2e-3f - 1.0f;
    for (size_t i = 0; i < nw; i++) w[i] = (float)((i * 40503u) % 1000) * 1e-4f - 0.05f;
    cvx_tensor wt = {0};
    wt.dtype = CVX_F32, wt.ndim = 5, wt.shape[0] = C, wt.shape[1] = C, wt.shape[2] = kt, wt.shape[3] = wt.shape[4] = 3;
    wt.numel = (int64_t)nw, wt.data = w, wt.file = "bench";
    double flop = 2.0 * C * C * kt * 9 * T * H * W;
    for (int v = 0; v < 3; v++) {
        const int bf = v > 0;
        cvx_ctx *ctx = cvx_ctx_new(cvx_threads());
        if (cvx_ctx_set_precision(ctx, bf ? CVX_PRECISION_BF16 : CVX_PRECISION_F32)) cvx_die_last_error();
        double best = 1e30, cbest = 1e30;
        if (ctx->conv_algo == CVX_CONV_WINOGRAD4) cvx_conv_winograd4_weights(ctx, &wt, C, C, kt, U);
        else cvx_conv_winograd_weights(ctx, &wt, C, C, kt, U);
        for (int r = 0; r <= reps; r++) {
            double t = cvx_time(), c = bench_cpu_s();
            if (v == 2) {
                if (cvx_conv3d_onednn_bf16(ctx, xp, C, Tp, Hp, Wp, &wt, NULL, C, kt, 3, 3, y)) cvx_die_last_error();
            } else if (ctx->conv_algo == CVX_CONV_WINOGRAD4) {
                cvx_conv3d_winograd4(ctx, xp, C, Tp, Hp, Wp, U, NULL, C, kt, y);
            } else {
                cvx_conv3d_winograd(ctx, xp, C, Tp, Hp, Wp, U, NULL, C, kt, y);
            }
            t = cvx_time() - t, c = bench_cpu_s() - c;
            if (r > 0 && t < best) best = t;
            if (r > 0 && c < cbest) cbest = c;
        }
        static const char *names[3] = {"conv 3x3x3 f32 (Winograd F(4x4), 128 ch)",
                                       "conv 3x3x3 bf16 (Winograd F(2x2), 128 ch)",
                                       "conv 3x3x3 bf16 (oneDNN conv, 128 ch)"};
        fam[(*nfam)++] = (family){names[v],
                                  flop / best * 1e-9, flop / (cbest / cvx_threads()) * 1e-9, bf ? pk_bf16 : pk_f32,
                                  bf ? "bf16" : "f32"};
        cvx_ctx_free(ctx);
    }
    free(xp), free(w), free(y), free(U);
}

/* oneDNN's int8 matmul (u8 activations × s8 weights → s32), the product int8 linears would run on,
 * at the QKV shape. */
static void int8_family(int reps, double pk_int8, family *fam, int *nfam) {
    const int M = 2432, N = 1920, K = 1920;
    dnnl_engine_t eng;
    dnnl_stream_t st;
    DN(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    dnnl_memory_desc_t ms, mw, md;
    dnnl_dims_t ds = {M, K}, dw = {K, N}, dd = {M, N};
    DN(dnnl_memory_desc_init_by_tag(&ms, 2, ds, dnnl_u8, dnnl_ab));
    DN(dnnl_memory_desc_init_by_tag(&mw, 2, dw, dnnl_s8, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&md, 2, dd, dnnl_s32, dnnl_ab));
    dnnl_matmul_desc_t mm;
    DN(dnnl_matmul_desc_init(&mm, &ms, &mw, NULL, &md));
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &mm, NULL, eng, NULL) != dnnl_success) {
        printf("int8 matmul: oneDNN has no implementation here\n");
        dnnl_stream_destroy(st), dnnl_engine_destroy(eng);
        return;
    }
    const dnnl_memory_desc_t *mwb = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    dnnl_primitive_t prim;
    DN(dnnl_primitive_create(&prim, pd));
    dnnl_memory_t a, w, d;
    DN(dnnl_memory_create(&a, &ms, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&w, mwb, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&d, &md, eng, DNNL_MEMORY_ALLOCATE));
    void *pa, *pw;
    DN(dnnl_memory_get_data_handle(a, &pa));
    DN(dnnl_memory_get_data_handle(w, &pw));
    memset(pa, 7, (size_t)M * K);
    memset(pw, 3, dnnl_memory_desc_get_size(mwb));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, d}};
    double best = 1e30, cbest = 1e30, flop = 2.0 * M * N * K;
    for (int r = 0; r <= reps; r++) {
        double t = cvx_time(), c = bench_cpu_s();
        DN(dnnl_primitive_execute(prim, st, 3, args));
        dnnl_stream_wait(st);
        t = cvx_time() - t, c = bench_cpu_s() - c;
        if (r > 0 && t < best) best = t;
        if (r > 0 && c < cbest) cbest = c;
    }
    printf("int8 matmul u8 x s8 -> s32 %dx%dx%d (oneDNN %s, weights blocked once): %.1f GOP/s\n", M, N, K,
           impl ? impl : "?", flop / best * 1e-9);
    fam[(*nfam)++] = (family){"int8 GEMM (oneDNN u8xs8, 2432x1920x1920)", flop / best * 1e-9,
                              flop / (cbest / cvx_threads()) * 1e-9, pk_int8, "int8"};
    dnnl_memory_destroy(a), dnnl_memory_destroy(w), dnnl_memory_destroy(d);
    dnnl_primitive_destroy(prim), dnnl_primitive_desc_destroy(pd);
    dnnl_stream_destroy(st), dnnl_engine_destroy(eng);
}

enum { V_BLAS, V_DNNL, V_F32, V_BF16, V_BF16_REO, V_BF16_PACKED, V_BF16_BLK, V_FALLBACK, V_FALLBACK_PACKED, V_COUNT };
/* cvx_matmul f32: cvx_sgemm_fixed on every CPU (the same bits at any thread count and on any CPU);
 * the two library sgemms beside it, threaded their own way */
static const char *vname[V_COUNT] = {"openblas sgemm f32", "oneDNN sgemm f32", "cvx_matmul f32",
                                     "cvx_linear_p bf16 W in place",
                                     "cvx_linear_p bf16 reorder/call", "cvx_linear_p bf16 pre-packed",
                                     "oneDNN bf16 W reordered once", "bf16 fallback (widen+f32)",
                                     "bf16 fallback pre-packed"};

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
    bench_peaks pk;
    bench_measure_peaks(&pk, cpu, 4 * reps);
    double pk_f32 = pk.f32, pk_bf16 = pk.bf16;
    printf("peaks per CPU-s (%d threads): f32 %.0f GFLOP/s (%s), bf16 %.0f GFLOP/s (%s), int8 %.0f GOP/s (%s)\n",
           cvx_threads(), pk.f32, pk.f32_how, pk.bf16, pk.bf16_how, pk.int8, pk.int8_how);
    family fam[16];
    int nfam = 0;

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
            /* the fallback rows are what bf16 runs on without bf16 units: only there at every shape */
            if ((v == V_FALLBACK || v == V_FALLBACK_PACKED) && si > 0 && cvx_kernels_bf16_native(kc)) continue;
            /* in place unless the row is a packed one (its warm-up call packs the weight) */
            cvx_kernels_unpack(kc);
            cvx_kernels_set_pack_budget(kc, v == V_BF16_PACKED || v == V_FALLBACK_PACKED ? (size_t)8 << 30 : 0);
            if (v == V_BF16_REO && M < 8192) continue;  /* the library reorders only from 8192 rows */
            double best = 1e30, cbest = 1e30;
            for (int r = 0; r <= reps; r++) {
                double t = cvx_time(), c = bench_cpu_s();
                switch (v) {
                case V_BLAS: cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, x, K, w, K, 0, y, N); break;
                case V_DNNL: dnnl_sgemm('N', 'T', M, N, K, 1, x, K, w, K, 0, y, N); break;
                case V_F32: cvx_gemm_p(kc, CVX_PRECISION_F32, 0, 1, M, N, K, x, K, w, K, 0, y, N); break;
                case V_BF16:
                    cvx_kernels_set_reorder(kc, 0);
                    cvx_linear_p(kc, CVX_PRECISION_BF16, x, M, K, &Wb, NULL, y);
                    cvx_kernels_set_reorder(kc, 1);
                    break;
                case V_BF16_REO:
                case V_BF16_PACKED: cvx_linear_p(kc, CVX_PRECISION_BF16, x, M, K, &Wb, NULL, y); break;
                case V_FALLBACK:
                case V_FALLBACK_PACKED:
                    cvx_kernels_force(kc, CVX_KPATH_NO_BF16);
                    cvx_linear_p(kc, CVX_PRECISION_BF16, x, M, K, &Wb, NULL, y);
                    cvx_kernels_force(kc, CVX_KPATH_AUTO);
                    break;
                }
                t = cvx_time() - t;
                c = bench_cpu_s() - c;
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
        cvx_kernels_unpack(kc);
        if (reorder_s > 0) printf("  (one reorder of W to the blocked layout: %.1f ms)\n", reorder_s * 1e3);
        if (si == 0) {
            fam[nfam++] = (family){"linear f32 (cvx_matmul, 2432x1920x1920)", rate[V_F32], crate[V_F32], pk_f32, "f32"};
            fam[nfam++] = (family){"linear bf16 (W in place, 2432x1920x1920)", rate[V_BF16], crate[V_BF16], pk_bf16,
                                   "bf16"};
        }
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
            double t = cvx_time(), c = bench_cpu_s();
            cvx_attention_isa(cvx_kernels_avx512(kc), qkv, ld, qkv + H * hd, qkv + 2 * H * hd, ld, o, H * hd, S, S, H, hd,
                              0.125f, NULL);   /* as the models run it (cvx_attention_ctx) */
            t = cvx_time() - t;
            c = bench_cpu_s() - c;
            if (r > 0 && t < r32) r32 = t;
            if (r > 0 && c < c32) c32 = c;
            t = cvx_time();
            c = bench_cpu_s();
            cvx_attention_bf16(kc, qkv, ld, qkv + H * hd, qkv + 2 * H * hd, ld, o, H * hd, S, S, H, hd, 0.125f, NULL);
            t = cvx_time() - t;
            c = bench_cpu_s() - c;
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
        if (ai == 0) {
            fam[nfam++] = (family){"attention f32 (S 2476, hd 64)", flop / r32 * 1e-9, flop / c32 * 1e-9, pk_f32, "f32"};
            fam[nfam++] = (family){"attention bf16 (S 2476, hd 64)", flop / r16 * 1e-9, flop / c16 * 1e-9, pk_bf16, "bf16"};
        }
        free(qkv); free(o);
    }
    conv_families(kc, reps, pk_f32, pk_bf16, fam, &nfam);
    if (pk.int8 > 0) int8_family(reps, pk.int8, fam, &nfam);
    printf("\nEach op family against its peak (per CPU-second; convolutions: direct-equivalent FLOPs, so Winograd can "
           "pass 100%%):\n");
    printf("  peaks: f32 %.0f GFLOP/s, bf16 %.0f GFLOP/s, int8 %.0f GOP/s\n", pk.f32, pk.bf16, pk.int8);
    for (int i = 0; i < nfam; i++)
        printf("  %-44s %7.1f G%s/s wall %7.1f per CPU-s  %5.1f%% of the %s peak\n", fam[i].what, fam[i].wall,
               strcmp(fam[i].peak_name, "int8") ? "FLOP" : "OP ",
               fam[i].cpu, 100 * fam[i].cpu / fam[i].peak, fam[i].peak_name);
    printf("peak RSS %.2f GB\n", cvx_peak_rss_bytes() / 1e9);
    cvx_kernels_free(kc);
    return 0;
}
