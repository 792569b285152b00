/* Benchmark: one CogVideoX transformer forward at real CogVideoX-2b / -5b dimensions with 2
 * layers and random bf16 weights (written to a temp dir and mmapped, as the real checkpoints
 * are), CFG batch 2, text 226×4096. Default latent [2, 3, 16, 30, 44] = 226 + 990 tokens per
 * batch element: the case bench/side_by_side.sh times PyTorch on (it passes width 45; PyTorch's
 * stride-2 patching floors it to 22 patch columns, so 44 gives the same 990 tokens and FLOPs).
 * Prints wall time (median of --runs after a warm-up), GFLOP/s of the linear layers and of the
 * attention core against the best GEMM rate at the same precision measured beside them, peak
 * RSS, and one line per model for bench/side_by_side.sh:
 *   RESULT case=<tr2b|tr5b> precision=<f32|bf16> seconds=<median wall s> gflops=<rate>
 *
 *   bench_stage2 [--model 2b|5b|all] [--frames F] [--height H] [--width W] [--runs N]
 *                [--threads N] [--f32] [--precision f32|bf16] [--library_f32]
 * --library_f32: run oneDNN's own f32 matmul (brgemm on AVX-512, its threaded jit sgemm elsewhere)
 * instead of cvx_sgemm_fixed, to measure what the same bits on any CPU and thread count cost. */
#include "error.h"
#include "gemm.h"
#include "gemm_fast.h"
#include "safetensors.h"
#include "stage2/cogvideox.h"

#include "bench_models.h"

#include <dirent.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <time.h>

static double cpu_seconds(void) {   /* process CPU time: less disturbed than wall time by other load */
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double gemm_rate(cvx_ctx *ctx, int M, int N, int K);

static void bench(const char *label, const char *tag, int heads, int rope, int F, int H, int W, int runs,
                  cvx_dtype store, cvx_precision prec, int library_f32) {
    char dir[] = "/tmp/cvx_bench_s2_XXXXXX";
    if (!mkdtemp(dir)) cvx_die("mkdtemp failed");
    double t0 = cvx_time();
    bm_write_cogvideox(dir, heads, 2, rope, store);
    double t_write = cvx_time() - t0;
    cogvideox_transformer *m = cogvideox_load(dir, NULL);
    if (!m) cvx_die_last_error();
    cvx_ctx *ctx = cogvideox_ctx(m);
    if (cvx_ctx_set_precision(ctx, prec)) cvx_die_last_error();
    if (library_f32 && ctx->kernels) cvx_kernels_force(ctx->kernels, CVX_KPATH_LIBRARY_F32);
    const cogvideox_config *c = cogvideox_get_config(m);
    int B = 2, L = 226, Cin = c->in_channels, N = cogvideox_num_video_tokens(c, F, H, W), hd = c->attention_head_dim;
    size_t nx = (size_t)B * F * Cin * H * W;
    float *x = malloc(sizeof(float) * nx), *out = malloc(sizeof(float) * nx);
    float *text = malloc(sizeof(float) * (size_t)B * L * c->text_embed_dim);
    for (size_t i = 0; i < nx; i++) x[i] = bm_urand();
    for (size_t i = 0; i < (size_t)B * L * c->text_embed_dim; i++) text[i] = 0.2f * bm_urand();
    int64_t t[2] = {999, 999};
    float *cs = NULL, *sn = NULL;
    if (rope) {
        cs = malloc(sizeof(float) * (size_t)N * hd);
        sn = malloc(sizeof(float) * (size_t)N * hd);
        if (cogvideox_rope_tables(c, F, H, W, cs, sn)) cvx_die_last_error();
    }
    printf("%s: D=%d (%d heads x %d), 2 layers, %s weights, %s compute (%s), latent [%d,%d,%d,%d,%d] -> %d + %d tokens per batch element"
           " (weights written in %.1fs)\n",
           label, heads * hd, heads, hd, cvx_dtype_name(store), cvx_precision_name(prec),
           ctx->kernels ? cvx_kernels_path(ctx->kernels, prec) : "fixed-f32", B, F, Cin, H, W, L, N, t_write);
    if (cogvideox_forward(m, x, B, F, H, W, text, L, t, cs, sn, out)) cvx_die_last_error();   /* warm-up */
    /* the best GEMM rate at this precision at the FF shape, measured right before and after the runs, so the
     * ratios below stay meaningful when other processes share the cores */
    int Mrows = B * (L + N), D = heads * hd;
    double rate0 = gemm_rate(ctx, Mrows, 4 * D, D);
    double *times = malloc(sizeof(double) * (size_t)runs);
    cogvideox_stats best = {0};
    double best_cpu = 1e30;
    for (int r = 0; r < runs; r++) {
        cogvideox_reset_stats(m);
        double c0 = cpu_seconds();
        if (cogvideox_forward(m, x, B, F, H, W, text, L, t, cs, sn, out)) cvx_die_last_error();
        double c1 = cpu_seconds() - c0;
        best_cpu = c1 < best_cpu ? c1 : best_cpu;
        cogvideox_stats s = cogvideox_get_stats(m);
        times[r] = s.t_total;
        if (r == 0 || s.t_total < best.t_total) best = s;
    }
    double rate1 = gemm_rate(ctx, Mrows, 4 * D, D), rate = 0.5 * (rate0 + rate1);
    double sum = 0;
    for (size_t i = 0; i < nx; i++) sum += fabs(out[i]);
    qsort(times, (size_t)runs, sizeof(double), cmp_double);
    double med = times[runs / 2];
    double other = best.t_total - best.t_linear - best.t_attention;
    printf("  forward: median %.3f s of %d (min %.3f)   (PyTorch beside it: bench/side_by_side.sh)\n", med, runs,
           times[0]);
    double r_lin = best.flop_linear * 1e-9 / best.t_linear, r_att = best.flop_attention * 1e-9 / best.t_attention;
    printf("  %s GEMM %dx%dx%d now: %.1f GFLOP/s (before %.1f, after %.1f)\n", cvx_precision_name(prec), Mrows, 4 * D,
           D, rate, rate0, rate1);
    printf("  linear:    %7.1f GFLOP in %.3f s = %6.1f GFLOP/s = %3.0f%% of the GEMM (target 80%%)\n",
           best.flop_linear * 1e-9, best.t_linear, r_lin, 100 * r_lin / rate);
    printf("  attention: %7.1f GFLOP in %.3f s = %6.1f GFLOP/s = %3.0f%% of the GEMM\n",
           best.flop_attention * 1e-9, best.t_attention, r_att, 100 * r_att / rate);
    printf("  whole forward at %.0f%% of the GEMM rate\n", 100 * (best.flop_linear + best.flop_attention) * 1e-9 /
                                                         best.t_total / rate);
    printf("  CPU time of one forward (min): %.2f s = %.1f GFLOP per CPU-second (%d threads: %.2f s if they never wait)\n",
           best_cpu, (best.flop_linear + best.flop_attention) * 1e-9 / best_cpu, cvx_threads(), best_cpu / cvx_threads());
    printf("  other (norms, modulation, RoPE, patching): %.3f s;  total %.1f GFLOP at %.1f GFLOP/s;  mean|out| %.4f\n",
           other, (best.flop_linear + best.flop_attention) * 1e-9,
           (best.flop_linear + best.flop_attention) * 1e-9 / best.t_total, sum / nx);
    printf("  peak RSS so far: %.2f GB\n", cvx_peak_rss_bytes() / 1e9);
    printf("RESULT case=%s precision=%s seconds=%.4f gflops=%.1f\n", tag, cvx_precision_name(prec), med,
           (best.flop_linear + best.flop_attention) * 1e-9 / med);
    free(times); free(x); free(out); free(text); free(cs); free(sn);
    cogvideox_free(m);
    bm_rm_dir(dir);
}

/* The context's GEMM rate at its precision (x·Wᵀ, f32 operands, best of 3) at the bench's FF
 * shape, for the "% of the GEMM" figures. */
static double gemm_rate(cvx_ctx *ctx, int M, int N, int K) {
    float *a = cvx_alloc_f32((size_t)M * K), *b = cvx_alloc_f32((size_t)N * K), *y = cvx_alloc_f32((size_t)M * N);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = bm_urand();
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = bm_urand();
    cvx_gemm(ctx, 0, 1, M, N, K, 1, a, K, b, K, 0, y, N);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = cvx_time();
        cvx_gemm(ctx, 0, 1, M, N, K, 1, a, K, b, K, 0, y, N);
        double dt = cvx_time() - t0;
        best = dt < best ? dt : best;
    }
    free(a); free(b); free(y);
    return 2.0 * M * N * K / best * 1e-9;
}

int main(int argc, char **argv) {
    const char *model = "all";
    int F = 3, H = 30, W = 44, runs = 3, threads = 0, library_f32 = 0;
    cvx_dtype store = CVX_BF16;
    cvx_precision prec = CVX_PRECISION_F32;
    static const struct option opts[] = {{"model", 1, 0, 'm'}, {"frames", 1, 0, 'f'}, {"height", 1, 0, 'H'},
                                         {"width", 1, 0, 'W'}, {"runs", 1, 0, 'r'}, {"threads", 1, 0, 't'},
                                         {"f32", 0, 0, 'x'}, {"help", 0, 0, 'h'}, {"precision", 1, 0, 'P'},
                                         {"library_f32", 0, 0, 'L'}, {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'f': F = atoi(optarg); break;
        case 'H': H = atoi(optarg); break;
        case 'W': W = atoi(optarg); break;
        case 'r': runs = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
        case 't': threads = atoi(optarg); break;
        case 'x': store = CVX_F32; break;
        case 'L': library_f32 = 1; break;
        case 'P':
            if (cvx_precision_parse(optarg, CVX_WORK_MATMUL, &prec)) cvx_die_last_error();
            break;
        default:
            printf("usage: %s [--model 2b|5b|all] [--frames F] [--height H] [--width W] [--runs N] [--threads N] [--f32]"
                   " [--precision f32|bf16] [--library_f32]\n",
                   argv[0]);
            return o == 'h' ? 0 : 1;
        }
    }
    cvx_set_program_name("bench_stage2");
    cvx_set_threads(threads);
    printf("threads: %d   (load average now: see uptime; the %%-of-GEMM figures are measured side by side)\n",
           cvx_threads());
    int all = !strcmp(model, "all");
    if (all || !strcmp(model, "2b")) {
        bench("CogVideoX-2b dims", "tr2b", 30, 0, F, H, W, runs, store, prec, library_f32);
    }
    if (all || !strcmp(model, "5b")) {
        bench("CogVideoX-5b dims", "tr5b", 48, 1, F, H, W, runs, store, prec, library_f32);
    }
    return 0;
}
