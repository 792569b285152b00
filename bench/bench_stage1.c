/* Stage-1 benchmark: the T5 encoder at T5-XXL dimensions (d_model 4096, 64 heads x 64,
 * d_ff 10240) with random bf16 weights (the real checkpoint's storage dtype), 2 of the 24
 * layers, 226 tokens, one sequence. Prints wall time (median of 3 after a warm-up), GFLOP/s
 * and peak RSS, then one line for bench/side_by_side.sh (which runs the PyTorch peer beside it):
 *   RESULT case=t5 precision=<f32|bf16> seconds=<median wall s> gflops=<rate>
 * --umt5: UMT5-XXL as Wan runs it (the same dims, a position bias in every block): stage 1's
 * umt5_prompt_embeds for the prompt and the negative prompt (batch 2) padded to --tokens (default
 * 512) with --seq-len real tokens each (default all): the encoder runs max(seq_len) tokens only.
 *   RESULT case=umt5 precision=.. seconds=.. gflops=.. tokens=<L> seq_len=<n> batch=<B>
 *
 *   bench_stage1 [--layers N] [--tokens S] [--batch B] [--threads N] [--f32|--f16] [--reps N]
 *                [--precision f32|bf16] [--umt5 [--seq-len N]]
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"
#include "error.h"
#include "gemm.h"
#include "stage1/t5.h"

/* Normal-range values only (the weights here are far from the f16 limits); round to nearest. */
static uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000;
    const int e = (int)((u >> 23) & 0xff) - 127 + 15;
    if (e <= 0) return (uint16_t)sign;   /* flush tiny values: irrelevant for timing */
    uint32_t h = sign | (uint32_t)e << 10 | ((u >> 13) & 0x3ff);
    if (u & 0x1000) h++;
    return (uint16_t)h;
}

/* A random weight [r, c] in `dt`, uniform in ±sqrt(3/fan_in) (unit-variance outputs). */
static const cvx_tensor *rand_tensor(const char *name, int64_t r, int64_t c, cvx_dtype dt, uint64_t *seed) {
    cvx_tensor *t = cvx_calloc(1, sizeof *t);
    const size_t n = (size_t)(r * c);
    const float a = 1.7320508f / sqrtf((float)c);
    float *tmp = cvx_alloc_f32(n);
    uint64_t s = *seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        tmp[i] = a * (2.0f * (float)(s >> 40) / 16777216.0f - 1.0f);
    }
    *seed = s;
    void *data;
    if (dt == CVX_BF16 || dt == CVX_F16) {
        uint16_t *h = cvx_malloc(n * 2);
        if (dt == CVX_BF16) cvx_f32_to_bf16_n(tmp, h, n);
        else for (size_t i = 0; i < n; i++) h[i] = f32_to_f16(tmp[i]);
        data = h;
        free(tmp);
    } else {
        data = tmp;
    }
    *t = (cvx_tensor){.name = name, .dtype = dt, .ndim = 2, .shape = {r, c}, .numel = (int64_t)n,
                      .data = data, .nbytes = n * cvx_dtype_size(dt), .file = "(random)"};
    return t;
}

static float *ones_noise(int n) {
    float *w = cvx_alloc_f32((size_t)n);
    for (int i = 0; i < n; i++) w[i] = 1.0f + 0.1f * (float)((i * 37) % 11 - 5) / 5.0f;
    return w;
}

static double cpu_seconds(void) {   /* process CPU time: less noisy than wall on a shared machine */
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    cvx_set_program_name("bench_stage1");
    int layers = 2, S = 0, B = 0, threads = 0, reps = 3, umt5 = 0, seq_len = 0;
    cvx_dtype dt = CVX_BF16;
    cvx_precision prec = CVX_PRECISION_F32;
    static const struct option opts[] = {
        {"layers", required_argument, 0, 'l'}, {"tokens", required_argument, 0, 's'},
        {"batch", required_argument, 0, 'b'},  {"threads", required_argument, 0, 't'},
        {"reps", required_argument, 0, 'r'},   {"f32", no_argument, 0, 'f'},
        {"f16", no_argument, 0, 'g'},          {"help", no_argument, 0, 'h'},
        {"precision", required_argument, 0, 'P'}, {"umt5", no_argument, 0, 'u'},
        {"seq-len", required_argument, 0, 'n'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
        case 'l': layers = atoi(optarg); break;
        case 's': S = atoi(optarg); break;
        case 'b': B = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'f': dt = CVX_F32; break;
        case 'g': dt = CVX_F16; break;
        case 'u': umt5 = 1; break;
        case 'n': seq_len = atoi(optarg); break;
        case 'P':
            if (cvx_precision_parse(optarg, CVX_WORK_MATMUL, &prec)) cvx_die_last_error();
            break;
        default:
            printf("usage: bench_stage1 [--layers N] [--tokens S] [--batch B] [--threads N] [--reps N] [--f32|--f16]"
                   " [--precision f32|bf16] [--umt5 [--seq-len N]]\n");
            return c == 'h' ? 0 : 1;
        }
    }
    if (!S) S = umt5 ? 512 : 226;
    if (!B) B = umt5 ? 2 : 1;
    if (!seq_len) seq_len = S;
    if (layers < 1 || S < 1 || B < 1 || reps < 1) cvx_die("layers, tokens, batch and reps must be positive");
    if (seq_len < 1 || seq_len > S) cvx_die("--seq-len must be in [1, --tokens = %d]", S);
    cvx_set_threads(threads);

    /* T5-XXL hyper-parameters (real_configs.md), fewer layers; a small vocabulary suffices. */
    t5_model m = {.cfg = {.d_model = 4096, .d_kv = 64, .num_heads = 64, .d_ff = 10240, .num_layers = layers,
                          .vocab_size = 1000, .num_buckets = 32, .max_distance = 128, .eps = 1e-6f,
                          .per_block_bias = umt5},
                 .ctx = cvx_ctx_new(threads), .owns_ctx = 1};
    if (cvx_ctx_set_precision(m.ctx, prec)) cvx_die_last_error();
    const t5_config *c = &m.cfg;
    const int64_t D = c->d_model, inner = (int64_t)c->num_heads * c->d_kv, F = c->d_ff;
    uint64_t seed = 42;
    m.embed = rand_tensor("shared.weight", c->vocab_size, D, dt, &seed);
    m.rel_bias = ones_noise(c->num_buckets * c->num_heads);
    m.final_ln = ones_noise((int)D);
    m.blocks = cvx_calloc((size_t)layers, sizeof *m.blocks);
    for (int l = 0; l < layers; l++) {
        t5_block *b = &m.blocks[l];
        b->q = rand_tensor("q", inner, D, dt, &seed);
        b->k = rand_tensor("k", inner, D, dt, &seed);
        b->v = rand_tensor("v", inner, D, dt, &seed);
        b->o = rand_tensor("o", D, inner, dt, &seed);
        b->wi_0 = rand_tensor("wi_0", F, D, dt, &seed);
        b->wi_1 = rand_tensor("wi_1", F, D, dt, &seed);
        b->wo = rand_tensor("wo", D, F, dt, &seed);
        b->ln_attn = ones_noise((int)D);
        b->ln_ff = ones_noise((int)D);
        if (umt5 && l > 0) b->rel_bias = ones_noise(c->num_buckets * c->num_heads);   /* block 0 uses m.rel_bias */
    }
    int64_t *ids = cvx_malloc((size_t)B * S * sizeof *ids);
    for (int i = 0; i < B * S; i++) ids[i] = (i * 7919) % c->vocab_size;
    float *out = cvx_alloc_f32((size_t)B * S * D);

    int64_t *seq_lens = cvx_malloc((size_t)B * sizeof *seq_lens);
    for (int b = 0; b < B; b++) seq_lens[b] = seq_len;
    /* FLOPs: the linear layers plus the two attention products (multiply-add = 2), over the
     * tokens the encoder runs (UMT5: max(seq_len)). */
    const int Sr = umt5 ? seq_len : S;
    const double M = (double)B * Sr;
    const double flop_layer = 2.0 * M * (double)D * (4.0 * (double)inner + 3.0 * (double)F) +
                              4.0 * (double)B * Sr * Sr * (double)inner;
    const double flop = flop_layer * layers;

    double *t = cvx_malloc((size_t)(reps + 1) * sizeof *t), cpu = 0;
    for (int r = 0; r <= reps; r++) {   /* r = 0: warm-up */
        const double t0 = cvx_time(), c0 = cpu_seconds();
        if (umt5 ? umt5_prompt_embeds(&m, ids, seq_lens, B, S, out, NULL) : t5_encode(&m, ids, B, S, out, NULL))
            cvx_die_last_error();
        t[r] = cvx_time() - t0;
        if (r > 0) cpu += (cpu_seconds() - c0) / reps;
    }
    qsort(t + 1, (size_t)reps, sizeof *t, cmp_double);
    const double med = t[1 + reps / 2];
    double checksum = 0;
    for (size_t i = 0; i < (size_t)B * S * D; i++) checksum += out[i];
    printf("stage1 %s encoder bench: %d layers, %d x %d tokens%s, d_model %lld, %d heads x %d, d_ff %lld, %s weights, "
           "%d threads, %s compute\n",
           umt5 ? "UMT5 (umt5_prompt_embeds)" : "T5", layers, B, S, umt5 ? " (padded)" : "", (long long)D, c->num_heads, c->d_kv,
           (long long)F, cvx_dtype_name(dt), cvx_threads(), cvx_precision_name(prec));
    if (umt5) printf("  %d real tokens per prompt: the encoder runs %d tokens\n", seq_len, Sr);
    printf("  wall %.3f s (median of %d; warm-up %.3f s, min %.3f s)  %.1f GFLOP  %.1f GFLOP/s  peak RSS %.0f MB\n",
           med, reps, t[0], t[1], flop / 1e9, flop / med / 1e9, cvx_peak_rss_bytes() / 1048576.0);
    printf("  CPU time per run %.3f s (all threads; %.1f GFLOP per CPU-second)\n", cpu, flop / cpu / 1e9);
    printf("  checksum %.6g\n", checksum);
    if (umt5)
        printf("RESULT case=umt5 precision=%s seconds=%.4f gflops=%.1f tokens=%d seq_len=%d batch=%d cpu_s=%.3f "
               "peak_rss_gb=%.3f\n",
               cvx_precision_name(prec), med, flop / med / 1e9, S, seq_len, B, cpu, cvx_peak_rss_bytes() / 1e9);
    else
        printf("RESULT case=t5 precision=%s seconds=%.4f gflops=%.1f\n", cvx_precision_name(prec), med, flop / med / 1e9);

    for (int l = 0; l < layers; l++) {
        t5_block *b = &m.blocks[l];
        const cvx_tensor *ts[7] = {b->q, b->k, b->v, b->o, b->wi_0, b->wi_1, b->wo};
        for (int i = 0; i < 7; i++) {
            free((void *)ts[i]->data);
            free((void *)ts[i]);
        }
    }
    free((void *)m.embed->data);
    free((void *)m.embed);
    m.embed = NULL;
    t5_free(&m);   /* norms, bias, blocks array */
    free(ids);
    free(seq_lens);
    free(out);
    free(t);
    return 0;
}
