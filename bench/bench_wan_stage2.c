/* Wan transformer benchmark: one CFG step (the conditional and the unconditional forward,
 * batch 1 each, as WanPipeline and our stage 2 run them) of WanTransformer3DModel at the real
 * Wan2.1-T2V-1.3B (12 heads × 128, ffn 8960), -14B (40 heads × 128, ffn 13824; = each Wan 2.2
 * A14B expert) or Wan2.2-TI2V-5B (24 heads × 128, ffn 14336, 48 channels, latent ×16) widths with
 * 2 layers and random bf16 weights (a diffusers dir written to a temp dir by a child process and
 * mmapped, as the real checkpoints are), text 512 × 4096, at a video size given in frames and
 * pixels (bench/bench_models.h's writer; latent (F − 1)/4 + 1 × H/8 × W/8, patches 1 × 2 × 2: 81 frames 480×832 = 32,760
 * tokens, 33 frames = 14,040; 5b: H/16 × W/16, 121 frames 704×1280 = 27,280). --per-token: the
 * timesteps per token as TI2V image-to-video passes them (latent frame 0 at 0, the rest at 999).
 * Prints per step the wall time (median of --runs after
 * --warmup steps), GFLOP/s of the linear layers and of the attention products, the GEMM rate
 * at the feed-forward's shape measured right before and after, peak RSS, and one line for
 * bench/side_by_side_wan.sh:
 *   RESULT case=<wan13|wan14|wan5> precision=<f32|bf16> tokens=<S> layers=<n> seconds=<median s per
 *          CFG step> gflops=<rate> lin_gflops=.. att_gflops=.. lin_share=<fraction of FLOPs>
 *          peak_rss_gb=..
 *
 *   bench_wan_stage2 [--model 1.3b|14b|5b] [--frames 81] [--height 480] [--width 832] [--layers 2]
 *                    [--runs 1] [--warmup 0] [--threads N] [--precision f32|bf16] [--f32-weights]
 *                    [--per-token] */
#include "bench_models.h"
#include "error.h"
#include "gemm.h"
#include "gemm_fast.h"
#include "runenv.h"
#include "safetensors.h"
#include "stage2/wan.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *tag, *label;
    int heads, ffn, channels, spatial;   /* latent channels, pixels per latent sample */
} wan_dims;
static const wan_dims MODELS[] = {{"wan13", "Wan2.1-T2V-1.3B dims", 12, 8960, 16, 8},
                                  {"wan14", "Wan2.1-T2V-14B dims", 40, 13824, 16, 8},
                                  {"wan5", "Wan2.2-TI2V-5B dims", 24, 14336, 48, 16}};

static double cpu_seconds(void) {   /* this process's CPU time: less disturbed by other load than wall time */
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The context's GEMM rate (x·Wᵀ, f32 operands, best of 3) at M × N × K, GFLOP/s. */
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
    free(a), free(b), free(y);
    return 2.0 * M * N * K / best * 1e-9;
}

static void usage(const char *argv0) {
    printf("usage: %s [--model 1.3b|14b|5b] [--frames 81] [--height 480] [--width 832] [--layers 2] [--runs 1]"
           " [--warmup 0] [--threads N] [--precision f32|bf16] [--f32-weights] [--per-token]\n",
           argv0);
}

int main(int argc, char **argv) {
    cvx_runtime_setup(argc, argv);   /* GOMP_SPINCOUNT as the stage programs run (issue 14) */
    const char *model = "1.3b";
    int frames = 81, height = 480, width = 832, layers = 2, runs = 1, warmup = 0, threads = 0, per_token = 0;
    cvx_dtype store = CVX_BF16;
    cvx_precision prec = CVX_PRECISION_F32;
    static const struct option opts[] = {
        {"model", 1, 0, 'm'},  {"frames", 1, 0, 'f'}, {"height", 1, 0, 'H'},   {"width", 1, 0, 'W'},
        {"layers", 1, 0, 'l'}, {"runs", 1, 0, 'r'},   {"warmup", 1, 0, 'u'},   {"threads", 1, 0, 't'},
        {"precision", 1, 0, 'P'}, {"f32-weights", 0, 0, 'x'}, {"per-token", 0, 0, 'k'}, {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'f': frames = atoi(optarg); break;
        case 'H': height = atoi(optarg); break;
        case 'W': width = atoi(optarg); break;
        case 'l': layers = atoi(optarg); break;
        case 'r': runs = atoi(optarg); break;
        case 'u': warmup = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'x': store = CVX_F32; break;
        case 'k': per_token = 1; break;
        case 'P':
            if (cvx_precision_parse(optarg, CVX_WORK_MATMUL, &prec)) cvx_die_last_error();
            break;
        default: usage(argv[0]); return o == 'h' ? 0 : 1;
        }
    }
    cvx_set_program_name("bench_wan_stage2");
    const wan_dims *md = !strcmp(model, "1.3b") ? &MODELS[0] : !strcmp(model, "14b") ? &MODELS[1]
                       : !strcmp(model, "5b")   ? &MODELS[2] : NULL;
    if (!md) cvx_die("--model must be 1.3b, 14b or 5b, got '%s'", model);
    const int mult = 2 * md->spatial;   /* whole patches of latent samples */
    if (frames < 1 || (frames - 1) % 4 || height % mult || width % mult || height <= 0 || width <= 0)
        cvx_die("--frames must be 4k+1 and --height/--width multiples of %d (got %d, %dx%d)", mult, frames, height,
                width);
    if (layers < 1 || runs < 1 || warmup < 0) cvx_die("--layers and --runs must be >= 1, --warmup >= 0");
    cvx_set_threads(threads);

    char dir[] = "/tmp/cvx_bench_wan_s2_XXXXXX";
    if (!mkdtemp(dir)) cvx_die("mkdtemp failed");
    double t0 = cvx_time();
    pid_t pid = fork();   /* the writer's memory does not count in this process's peak RSS */
    if (pid == 0) {
        bm_write_wan_ch(dir, md->heads, layers, md->ffn, md->channels, store);
        _exit(0);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) cvx_die("writing the model failed");
    double t_write = cvx_time() - t0;
    wan_transformer *m = wan_load(dir, NULL);
    if (!m) cvx_die_last_error();
    cvx_ctx *ctx = wan_ctx(m);
    if (cvx_ctx_set_precision(ctx, prec)) cvx_die_last_error();
    const wan_config *c = wan_get_config(m);
    const int F = (frames - 1) / 4 + 1, H = height / md->spatial, W = width / md->spatial, L = 512,
              D = c->num_attention_heads * 128;
    const int S = wan_num_tokens(c, F, H, W);
    float *ts = cvx_alloc_f32((size_t)S);   /* --per-token: TI2V I2V's (m[0,0][:, ::2, ::2]·t).flatten() */
    for (int i = 0; i < S; i++) ts[i] = i < S / F ? 0.0f : 999.0f;
    const size_t nx = (size_t)c->in_channels * F * H * W, nt = (size_t)L * c->text_dim;
    float *x = cvx_alloc_f32(nx), *out = cvx_alloc_f32(nx), *text = cvx_alloc_f32(2 * nt);
    for (size_t i = 0; i < nx; i++) x[i] = bm_urand();
    for (size_t i = 0; i < 2 * nt; i++) text[i] = 0.2f * bm_urand();   /* [2, L, 4096]: prompt, negative prompt */
    const float t999 = 999.0f;
    printf("%s: D=%d (%d heads x 128), ffn %d, %d layers, %s weights, %s compute (%s), %d threads; %d frames %dx%d ->"
           " latent [1,%d,%d,%d,%d] = %d tokens, text %d; one CFG step = 2 forwards of batch 1, %s timesteps (written in "
           "%.1f s)\n",
           md->label, D, md->heads, md->ffn, layers, cvx_dtype_name(store), cvx_precision_name(prec),
           ctx->kernels ? cvx_kernels_path(ctx->kernels, prec) : "fixed-f32", cvx_threads(), frames, height, width,
           md->channels, F, H, W, S, L, per_token ? "per-token" : "scalar", t_write);
    fflush(stdout);
    const size_t rss_loaded = cvx_peak_rss_bytes();
    for (int r = 0; r < warmup; r++)
        for (int b = 0; b < 2; b++)
            if (per_token ? wan_forward_per_token(m, x, 1, F, H, W, text + b * nt, L, NULL, 0, ts, out)
                          : wan_forward(m, x, 1, F, H, W, text + b * nt, L, NULL, 0, &t999, out))
                cvx_die_last_error();
    /* the GEMM rate at the feed-forward's shape (rows: a quarter of the tokens, as the model's
     * chunks), right before and after the timed steps, so the ratios hold under other load */
    const int Mrows = S / 4 < 4096 ? S / 4 : 4096;
    const double rate0 = gemm_rate(ctx, Mrows, c->ffn_dim, D);
    double *times = cvx_malloc(sizeof(double) * (size_t)runs);
    wan_stats best = {0};
    double best_cpu = 1e30;
    for (int r = 0; r < runs; r++) {
        wan_reset_stats(m);
        const double c0 = cpu_seconds();
        for (int b = 0; b < 2; b++)
            if (per_token ? wan_forward_per_token(m, x, 1, F, H, W, text + b * nt, L, NULL, 0, ts, out)
                          : wan_forward(m, x, 1, F, H, W, text + b * nt, L, NULL, 0, &t999, out))
                cvx_die_last_error();
        const double cpu = cpu_seconds() - c0;
        best_cpu = cpu < best_cpu ? cpu : best_cpu;
        wan_stats s = wan_get_stats(m);
        times[r] = s.t_total;
        printf("  step %d: %.2f s (linear %.2f s, attention %.2f s; CPU %.1f s)\n", r + 1, s.t_total, s.t_linear,
               s.t_attention, cpu);
        fflush(stdout);
        if (r == 0 || s.t_total < best.t_total) best = s;
    }
    const double rate1 = gemm_rate(ctx, Mrows, c->ffn_dim, D), rate = 0.5 * (rate0 + rate1);
    double sum = 0;
    for (size_t i = 0; i < nx; i++) sum += fabs(out[i]);
    qsort(times, (size_t)runs, sizeof(double), cmp_double);
    const double med = times[runs / 2], fl = best.flop_linear + best.flop_attention;
    const double r_lin = best.flop_linear * 1e-9 / best.t_linear, r_att = best.flop_attention * 1e-9 / best.t_attention;
    printf("  CFG step: median %.3f s of %d (min %.3f)\n", med, runs, times[0]);
    printf("  %s GEMM %dx%dx%d beside it: %.1f GFLOP/s (before %.1f, after %.1f)\n", cvx_precision_name(prec), Mrows,
           c->ffn_dim, D, rate, rate0, rate1);
    printf("  linear:    %8.1f GFLOP in %7.2f s = %6.1f GFLOP/s = %3.0f%% of that GEMM\n", best.flop_linear * 1e-9,
           best.t_linear, r_lin, 100 * r_lin / rate);
    printf("  attention: %8.1f GFLOP in %7.2f s = %6.1f GFLOP/s (%.0f%% of the FLOPs)\n", best.flop_attention * 1e-9,
           best.t_attention, r_att, 100 * best.flop_attention / fl);
    printf("  other (norms, modulation, RoPE, patching): %.2f s; total %.1f GFLOP at %.1f GFLOP/s; mean|out| %.4f\n",
           best.t_total - best.t_linear - best.t_attention, fl * 1e-9, fl * 1e-9 / best.t_total, sum / nx);
    printf("  peak RSS %.2f GB (%.2f GB after loading)\n", cvx_peak_rss_bytes() / 1e9, rss_loaded / 1e9);
    printf("RESULT case=%s precision=%s tokens=%d layers=%d seconds=%.4f gflops=%.1f lin_gflops=%.1f att_gflops=%.1f "
           "lin_share=%.4f gemm_gflops=%.1f cpu_s=%.2f peak_rss_gb=%.3f\n",
           md->tag, cvx_precision_name(prec), S, layers, med, fl * 1e-9 / med, r_lin, r_att, best.flop_linear / fl,
           rate, best_cpu, cvx_peak_rss_bytes() / 1e9);
    free(times), free(x), free(out), free(text), free(ts);
    wan_free(m);
    bm_rm_dir(dir);
    return 0;
}
