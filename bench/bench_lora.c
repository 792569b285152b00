/* Benchmark: LoRA adapters on the linear layers of 2 transformer blocks at real widths —
 * CogVideoX-5b (D 3072, ff 12288, joint text+video rows) and Wan2.1-1.3B (D 1536, ffn 8960,
 * cross-attention keys/values on 512 text rows) — bf16 weights (as the checkpoints), random
 * LoRA factors of rank 32 and 128 on every linear a LoRA of that family usually adapts
 * (CogVideoX: attn1 q/k/v/out + ff; Wan: attn1 + attn2 q/k/v/o + ffn: Kijai / lightx2v files).
 *
 * For each: the block linears without LoRA, unfused (cvx_linear + the low-rank path) and fused
 * (merged private copies), at --rows video rows (per-row costs; GEMMs are linear in the rows at
 * these sizes), plus the one-time fuse cost; then the attention core at --att_tokens tokens for
 * its rate. From these, extrapolated (FLOPs × measured rates): one transformer call of the real
 * model (CogVideoX-5b 42 layers at 49 frames 480×720: 226 + 17550 tokens; Wan2.1-1.3B 30 layers at
 * 33 frames 480×832: 14040 tokens) and the stage-2 time of a Wan-1.3B 33-frame 480×832 video:
 * 50 steps with CFG (2 calls per step, no LoRA) next to 4 steps without CFG (1 call, a
 * step-distilled LoRA, unfused or fused).
 *
 * Times are CPU seconds / threads (the machine is shared: wall time under others' load is not
 * the cost) and wall seconds, best of --runs.
 *
 *   bench_lora [--model 5b|1.3b|all] [--rows M] [--att_tokens S] [--ranks 32,128] [--runs N]
 *              [--threads N] [--precision f32|bf16]  */
#include "error.h"
#include "gemm.h"
#include "gemm_fast.h"
#include "lora.h"
#include "ops.h"
#include "runenv.h"
#include "safetensors.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float urand(void) {   /* xorshift64*, uniform in [-1, 1) */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1 << 23) - 1.0f;
}

/* One linear of a block: [N, K] on `text` rows (Wan cross-attention k/v) or the video rows. */
typedef struct {
    const char *name;
    int N, K, text_rows;
} lin;

typedef struct {
    const char *tag, *label;
    int D, layers, heads;
    int text;            /* text rows: CogVideoX's joint rows (226) go through every linear; Wan's 512 only k/v of attn2 */
    int joint;           /* CogVideoX: the text rows are part of every linear's M */
    long video_tokens;   /* the real run's video tokens per branch */
    const char *real;
    lin lins[12];
    int n;
} model;

static const model MODELS[] = {
    {"5b", "CogVideoX-5b", 3072, 42, 48, 226, 1, 13L * 30 * 45, "49 frames 480x720",
     {{"attn1.to_q", 3072, 3072, 0}, {"attn1.to_k", 3072, 3072, 0}, {"attn1.to_v", 3072, 3072, 0},
      {"attn1.to_out.0", 3072, 3072, 0}, {"ff.net.0.proj", 12288, 3072, 0}, {"ff.net.2", 3072, 12288, 0}}, 6},
    {"1.3b", "Wan2.1-1.3B", 1536, 30, 12, 512, 0, 9L * 30 * 52, "33 frames 480x832",
     {{"attn1.to_q", 1536, 1536, 0}, {"attn1.to_k", 1536, 1536, 0}, {"attn1.to_v", 1536, 1536, 0},
      {"attn1.to_out.0", 1536, 1536, 0}, {"attn2.to_q", 1536, 1536, 0}, {"attn2.to_k", 1536, 1536, 1},
      {"attn2.to_v", 1536, 1536, 1}, {"attn2.to_out.0", 1536, 1536, 0}, {"ffn.net.0.proj", 8960, 1536, 0},
      {"ffn.net.2", 1536, 8960, 0}}, 10},
};

enum { LAYERS = 2 };

typedef struct {
    cvx_tensor w[LAYERS][12];
    cvx_lora_target t[LAYERS * 12];
    float *x, *xt, *y;   /* [rows, maxK] video / text inputs, [rows, maxN] output */
} blocks;

static void blocks_init(blocks *b, const model *m, int rows) {
    int maxk = 0, maxn = 0;
    for (int l = 0; l < LAYERS; l++)
        for (int i = 0; i < m->n; i++) {
            const lin *L = &m->lins[i];
            size_t n = (size_t)L->N * L->K;
            uint16_t *d = malloc(n * sizeof *d);
            float s = 1.0f / sqrtf((float)L->K);
            for (size_t k = 0; k < n; k++) d[k] = cvx_f32_to_bf16(s * urand());
            b->w[l][i] = (cvx_tensor){.name = L->name, .dtype = CVX_BF16, .ndim = 2, .shape = {L->N, L->K},
                                      .numel = (int64_t)n, .data = d, .nbytes = n * 2, .file = "bench"};
            cvx_lora_target *t = &b->t[l * m->n + i];
            memset(t, 0, sizeof *t);
            snprintf(t->name, sizeof t->name, "blocks.%d.%s", l, L->name);
            t->w = &b->w[l][i];
            maxk = L->K > maxk ? L->K : maxk, maxn = L->N > maxn ? L->N : maxn;
        }
    b->x = cvx_alloc_f32((size_t)rows * maxk);
    b->xt = cvx_alloc_f32((size_t)m->text * maxk);
    b->y = cvx_alloc_f32((size_t)rows * maxn);
    for (size_t i = 0; i < (size_t)rows * maxk; i++) b->x[i] = urand();
    for (size_t i = 0; i < (size_t)m->text * maxk; i++) b->xt[i] = urand();
}

static void blocks_free(blocks *b, const model *m) {
    for (int l = 0; l < LAYERS; l++)
        for (int i = 0; i < m->n; i++) free((void *)b->w[l][i].data);
    free(b->x), free(b->xt), free(b->y);
}

/* A LoRA file of rank r on every linear of both blocks (bf16 factors, as distributed). */
static void write_lora(const char *path, const model *m, int r) {
    cvx_st_writer *w = cvx_stw_new();
    for (int l = 0; l < LAYERS; l++)
        for (int i = 0; i < m->n; i++) {
            const lin *L = &m->lins[i];
            char k[256];
            size_t na = (size_t)r * L->K, nb = (size_t)L->N * r;
            float *a = malloc(na * sizeof *a), *bb = malloc(nb * sizeof *bb);
            for (size_t j = 0; j < na; j++) a[j] = urand() / sqrtf((float)L->K);
            for (size_t j = 0; j < nb; j++) bb[j] = 0.01f * urand();
            int64_t sa[2] = {r, L->K}, sb[2] = {L->N, r};
            snprintf(k, sizeof k, "transformer.blocks.%d.%s.lora_A.weight", l, L->name);
            if (cvx_stw_add_f32(w, k, CVX_BF16, 2, sa, a)) cvx_die_last_error();
            snprintf(k, sizeof k, "transformer.blocks.%d.%s.lora_B.weight", l, L->name);
            if (cvx_stw_add_f32(w, k, CVX_BF16, 2, sb, bb)) cvx_die_last_error();
            free(a), free(bb);
        }
    if (cvx_stw_write(w, path)) cvx_die_last_error();
    cvx_stw_free(w);
}

/* The block linears of both layers once: rows video rows (+ the text rows of Wan's k/v). */
static void run_blocks(cvx_ctx *ctx, blocks *b, const model *m, int rows) {
    for (int l = 0; l < LAYERS; l++)
        for (int i = 0; i < m->n; i++) {
            const lin *L = &m->lins[i];
            int M = L->text_rows ? m->text : rows;
            cvx_linear(ctx, L->text_rows ? b->xt : b->x, M, L->K, &b->w[l][i], NULL, b->y);
        }
}

typedef struct {
    double cpu, wall;   /* best of runs: CPU seconds / threads, wall seconds */
} timing;

static timing time_blocks(cvx_ctx *ctx, blocks *b, const model *m, int rows, int runs) {
    run_blocks(ctx, b, m, rows);   /* warm-up: primitives, scratch */
    timing t = {1e30, 1e30};
    for (int r = 0; r < runs; r++) {
        double c0 = cpu_seconds(), w0 = cvx_time();
        run_blocks(ctx, b, m, rows);
        double c = (cpu_seconds() - c0) / cvx_threads(), w = cvx_time() - w0;
        t.cpu = c < t.cpu ? c : t.cpu, t.wall = w < t.wall ? w : t.wall;
    }
    return t;
}

/* The attention core's rate (GFLOP/s, CPU-time based) at S tokens, the model's heads. */
static double attention_rate(cvx_ctx *ctx, const model *m, int S, int runs) {
    const int D = m->D, hd = D / m->heads;
    float *q = cvx_alloc_f32((size_t)S * D), *k = cvx_alloc_f32((size_t)S * D), *v = cvx_alloc_f32((size_t)S * D),
          *o = cvx_alloc_f32((size_t)S * D);
    for (size_t i = 0; i < (size_t)S * D; i++) q[i] = urand(), k[i] = urand(), v[i] = urand();
    cvx_attention_ctx(ctx, q, D, k, v, D, o, D, S, S, m->heads, hd, 1.0f / sqrtf((float)hd), NULL);
    double best = 1e30;
    for (int r = 0; r < runs; r++) {
        double c0 = cpu_seconds();
        cvx_attention_ctx(ctx, q, D, k, v, D, o, D, S, S, m->heads, hd, 1.0f / sqrtf((float)hd), NULL);
        double c = (cpu_seconds() - c0) / cvx_threads();
        best = c < best ? c : best;
    }
    free(q), free(k), free(v), free(o);
    return 4.0 * S * (double)S * D / best * 1e-9;
}

static void fmt_time(double s, char *buf, size_t n) {
    if (s < 120) snprintf(buf, n, "%.1f s", s);
    else if (s < 7200) snprintf(buf, n, "%.1f min", s / 60);
    else snprintf(buf, n, "%.1f h", s / 3600);
}

static void bench(const model *m, int rows, int att_tokens, const int *ranks, int n_ranks, int runs, int threads,
                  cvx_precision prec) {
    cvx_ctx *ctx = cvx_ctx_new(threads);
    if (cvx_ctx_set_precision(ctx, prec)) cvx_die_last_error();
    blocks b;
    blocks_init(&b, m, rows);
    const int n_t = LAYERS * m->n;
    double flop_base = 0;   /* per video row, both blocks (Wan's text-row k/v counted apart) */
    for (int i = 0; i < m->n; i++) flop_base += m->lins[i].text_rows ? 0 : 2.0 * m->lins[i].N * m->lins[i].K;
    flop_base *= LAYERS;
    printf("%s: D %d, %d heads, 2 blocks of %d linears (bf16 weights), %s compute (%s), %d video rows%s\n", m->label,
           m->D, m->heads, m->n, cvx_precision_name(prec), cvx_kernels_path(ctx->kernels, prec), rows,
           m->joint ? " (text rows go through the same linears)" : ", text k/v on 512 rows");
    timing base = time_blocks(ctx, &b, m, rows, runs);
    const double att = attention_rate(ctx, m, att_tokens, runs > 1 ? 2 : 1);
    /* the real call: rows of one branch, per-layer linears scaled by rows, attention by FLOPs */
    const double real_rows = (double)m->video_tokens + (m->joint ? m->text : 0);
    const double att_flop_layer = 4.0 * real_rows * real_rows * m->D + (m->joint ? 0 : 4.0 * real_rows * m->text * m->D);
    const double t_att_layer = att_flop_layer * 1e-9 / att;
    const double lin_layer_base = base.cpu / LAYERS / rows * real_rows;
    printf("  no LoRA : %.3f s (wall %.3f) = %.0f GFLOP/s;  attention %.0f GFLOP/s at %d tokens\n", base.cpu, base.wall,
           flop_base * rows * 1e-9 / base.cpu, att, att_tokens);
    const double call_base = m->layers * (lin_layer_base + t_att_layer);
    char tb[32];
    fmt_time(call_base, tb, sizeof tb);
    printf("  real call (%d layers, %s, %.0f rows): linears %.1f s + attention %.1f s per layer -> %s per call\n",
           m->layers, m->real, real_rows, lin_layer_base, t_att_layer, tb);
    char dir[] = "/tmp/cvx_bench_lora_XXXXXX";
    if (!mkdtemp(dir)) cvx_die("mkdtemp failed");
    for (int ri = 0; ri < n_ranks; ri++) {
        const int r = ranks[ri];
        char path[256];
        snprintf(path, sizeof path, "%s/r%d.safetensors", dir, r);
        write_lora(path, m, r);
        cvx_lora_spec spec = {path, 1.0};
        int v = cvx_verbosity();
        cvx_set_verbosity(0);
        cvx_lora_set *s = cvx_lora_load(&spec, 1, b.t, n_t, m->label, 0);
        double f0 = cpu_seconds(), fw0 = cvx_time();
        cvx_lora_set *sf = cvx_lora_load(&spec, 1, b.t, n_t, m->label, 1);
        double fuse_cpu = (cpu_seconds() - f0) / cvx_threads(), fuse_wall = cvx_time() - fw0;
        cvx_set_verbosity(v);
        if (!s || !sf) cvx_die_last_error();
        ctx->lora = s;
        timing un = time_blocks(ctx, &b, m, rows, runs);
        ctx->lora = sf;
        timing fu = time_blocks(ctx, &b, m, rows, runs);
        ctx->lora = NULL;
        double lora_flop = 0;
        for (int i = 0; i < m->n; i++)
            if (!m->lins[i].text_rows) lora_flop += 2.0 * r * (m->lins[i].N + m->lins[i].K);
        lora_flop *= LAYERS;
        printf("  rank %3d: unfused %.3f s (+%.1f%%; LoRA FLOPs +%.1f%%, wall %.3f)   fused %.3f s (%+.1f%%, wall %.3f); "
               "fusing %.2f s (wall %.2f) for %.0f MB of merged copies\n",
               r, un.cpu, 100 * (un.cpu / base.cpu - 1), 100 * lora_flop / flop_base, un.wall, fu.cpu,
               100 * (fu.cpu / base.cpu - 1), fu.wall, fuse_cpu, fuse_wall, cvx_lora_fused_bytes(sf) / 1048576.0);
        const double lin_layer_un = un.cpu / LAYERS / rows * real_rows;
        const double call_un = m->layers * (lin_layer_un + t_att_layer);
        const double fuse_real = fuse_cpu / LAYERS * m->layers;
        char tu[32], tf[32];
        fmt_time(call_un, tu, sizeof tu);
        fmt_time(fuse_real, tf, sizeof tf);
        printf("            real call: unfused %s (+%.1f%%), fused %s after fusing all %d layers once (%s); fused "
               "pays back after %.1f calls\n", tu, 100 * (call_un / call_base - 1), tb, m->layers, tf,
               fuse_real / (call_un - call_base));
        if (!strcmp(m->tag, "1.3b")) {
            char a[32], bu[32], bf[32];
            fmt_time(50 * 2 * call_base, a, sizeof a);
            fmt_time(4 * call_un, bu, sizeof bu);
            fmt_time(4 * call_base + fuse_real, bf, sizeof bf);
            printf("            stage 2 of a %s video: 50 steps with CFG %s  |  4 steps, guidance 1, rank-%d LoRA: "
                   "unfused %s, fused %s  (%.0fx less)\n", m->real, a, r, bu, bf, 50 * 2 * call_base / (4 * call_un));
        }
        cvx_lora_free(s);
        cvx_lora_free(sf);
        unlink(path);
    }
    rmdir(dir);
    blocks_free(&b, m);
    cvx_ctx_free(ctx);
}

int main(int argc, char **argv) {
    cvx_runtime_setup(argc, argv);   /* the programs' OpenMP wait policy: idle threads sleep, CPU time = work */
    const char *which = "all";
    int rows = 2048, att_tokens = 4096, runs = 3, threads = 0, ranks[8] = {32, 128}, n_ranks = 2;
    cvx_precision prec = cvx_precision_auto(CVX_WORK_MATMUL);
    static const struct option opts[] = {{"model", 1, 0, 'm'}, {"rows", 1, 0, 'r'}, {"att_tokens", 1, 0, 'a'},
                                         {"ranks", 1, 0, 'k'}, {"runs", 1, 0, 'n'}, {"threads", 1, 0, 't'},
                                         {"precision", 1, 0, 'P'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'm': which = optarg; break;
        case 'r': rows = atoi(optarg) > 0 ? atoi(optarg) : rows; break;
        case 'a': att_tokens = atoi(optarg) > 0 ? atoi(optarg) : att_tokens; break;
        case 'n': runs = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
        case 't': threads = atoi(optarg); break;
        case 'k': {
            n_ranks = 0;
            for (char *p = optarg; *p && n_ranks < 8;) {
                ranks[n_ranks++] = (int)strtol(p, &p, 10);
                if (*p == ',') p++;
            }
            break;
        }
        case 'P':
            if (cvx_precision_parse(optarg, CVX_WORK_MATMUL, &prec)) cvx_die_last_error();
            break;
        default:
            printf("usage: %s [--model 5b|1.3b|all] [--rows M] [--att_tokens S] [--ranks 32,128] [--runs N] "
                   "[--threads N] [--precision f32|bf16]\n", argv[0]);
            return o == 'h' ? 0 : 1;
        }
    }
    for (size_t i = 0; i < sizeof MODELS / sizeof *MODELS; i++)
        if (!strcmp(which, "all") || !strcmp(which, MODELS[i].tag))
            bench(&MODELS[i], rows, att_tokens, ranks, n_ranks, runs, threads, prec);
    return 0;
}
