/* Quantized weights (GGUF block types) against bf16 at the real widths:
 *  1. peaks per CPU-second (bench_peaks.h): f32 FMA, bf16 vdpbf16ps, int8 vpdpbusd (or AVX2's
 *     vpmaddubsw), tight register loops on every thread;
 *  2. the linears of CogVideoX-5b, Wan-1.3B and Wan-14B (M = the tokens of one transformer call):
 *     bf16 weights in bf16 mode (oneDNN, read in place: the baseline), Q8_0 and Q4_K weights through
 *     the dequantized-tile path (bf16 GEMM) and through the int8 path; GFLOP/s per CPU-second and
 *     against the int8 peak;
 *  3. whole 2-layer transformers at those widths: a random bf16 diffusers checkpoint, quantized
 *     to Q8_0 and Q4_K_M with stage2's city96 rules; the time of one denoising step (CogVideoX:
 *     one batch-2 call; Wan: two batch-1 calls, cond and uncond), variants alternated per round.
 * Rates per CPU-second (flop / (process CPU s / threads)) are what the kernels do on idle cores;
 * the machine is shared, so wall times are printed too. Run with OMP_WAIT_POLICY=PASSIVE.
 *   bench_quant [--threads N] [--reps R] [--part peaks|linears|models|all] [--models cog5b,wan1.3b,wan14b]
 *               [--frames F] [--height H] [--width W] [--rounds R] [--precision bf16|f32|auto (default bf16)]
 *   bench_quant --write_model cog5b|wan1.3b|wan14b DIR: only write that random 2-layer bf16 checkpoint
 *               (config.json + safetensors) into DIR (for stage2 --quantize and peak-RSS runs).
 *   --dir DIR (with one model): make the checkpoint and its q8_0.gguf / q4_k_m.gguf in DIR and keep
 *               them, or reuse them when DIR has them (stable-diffusion.cpp runs the same files in
 *               bench/side_by_side_wan.sh, case wangguf). */
#include "bench_peaks.h"
#include "error.h"
#include "gemm.h"
#include "gemm_fast.h"
#include "gemm_quant.h"
#include "ops.h"
#include "quant.h"
#include "stage2/cogvideox_family.h"
#include "stage2/quantize.h"
#include "stage2/cogvideox.h"
#include "stage2/wan.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <getopt.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float urand(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (float)((rng * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1 << 23) - 1.0f;
}

/* ------------------------------------------------------------------ 2. linears */

typedef struct {
    const char *model, *name;
    int M, N, K;
} shape;

/* A quantized [N, K] weight of random values. */
static cvx_tensor make_quant(cvx_dtype t, int N, int K, const float *src) {
    const cvx_quant_traits *tr = cvx_quant_of(t);
    const size_t rb = (size_t)K / tr->block * tr->type_size;
    void *d = cvx_alloc_aligned_at(rb * N, __FILE__, __LINE__);
#pragma omp parallel for
    for (int n = 0; n < N; n++) tr->from_f32_ref(src + (size_t)n * K, (char *)d + rb * n, K);
    cvx_tensor w = {.name = cvx_dtype_name(t), .file = "bench", .dtype = t, .ndim = 2, .shape = {N, K},
                    .numel = (int64_t)N * K, .data = d, .nbytes = rb * N};
    return w;
}

/* GFLOP/s per CPU-second and per wall second of cvx_linear (best of reps). */
static void time_linear(cvx_ctx *ctx, const float *x, int M, int K, const cvx_tensor *W, float *y, int reps,
                        double *per_cpu, double *per_wall) {
    cvx_linear(ctx, x, M, K, W, NULL, y);   /* warm-up: primitives, scratch */
    double best_c = 1e30, best_w = 1e30;
    for (int r = 0; r < reps; r++) {
        double c0 = bench_cpu_s(), w0 = cvx_time();
        cvx_linear(ctx, x, M, K, W, NULL, y);
        double c = (bench_cpu_s() - c0) / ctx->threads, w = cvx_time() - w0;
        best_c = c < best_c ? c : best_c, best_w = w < best_w ? w : best_w;
    }
    const double flop = 2.0 * M * (double)W->shape[0] * K;
    *per_cpu = flop / best_c / 1e9, *per_wall = flop / best_w / 1e9;
}

static void bench_linears(int threads, int reps, const bench_peaks *pk, const char *models, int tokens_wan,
                          int tokens_cog, cvx_precision prec, const char *int8_kernel) {
    const shape shapes[] = {
        {"cog5b", "attn q/k/v/o", tokens_cog, 3072, 3072}, {"cog5b", "ff.net.0", tokens_cog, 12288, 3072},
        {"cog5b", "ff.net.2", tokens_cog, 3072, 12288},   {"wan1.3b", "attn q/k/v/o", tokens_wan, 1536, 1536},
        {"wan1.3b", "ffn.0", tokens_wan, 8960, 1536},     {"wan1.3b", "ffn.2", tokens_wan, 1536, 8960},
        {"wan14b", "attn q/k/v/o", tokens_wan, 5120, 5120}, {"wan14b", "ffn.0", tokens_wan, 13824, 5120},
        {"wan14b", "ffn.2", tokens_wan, 5120, 13824},
    };
    cvx_ctx *ctx = cvx_ctx_new(threads);
    printf("\nlinears: GFLOP/s per CPU-s (per wall s), %% of the peak of the units each runs on; M = tokens of one call\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *sh = &shapes[s];
        if (!strstr(models, sh->model)) continue;
        float *w = cvx_alloc_f32((size_t)sh->N * sh->K), *x = cvx_alloc_f32((size_t)sh->M * sh->K),
              *y = cvx_alloc_f32((size_t)sh->M * sh->N);
        for (size_t i = 0; i < (size_t)sh->N * sh->K; i++) w[i] = 0.02f * urand();
        for (size_t i = 0; i < (size_t)sh->M * sh->K; i++) x[i] = urand();
        uint16_t *wb = cvx_alloc_aligned_at(sizeof(uint16_t) * sh->N * sh->K, __FILE__, __LINE__);
        cvx_f32_to_bf16_n(w, wb, (size_t)sh->N * sh->K);
        cvx_tensor tb = {.name = "bf16", .file = "bench", .dtype = CVX_BF16, .ndim = 2, .shape = {sh->N, sh->K},
                         .numel = (int64_t)sh->N * sh->K, .data = wb, .nbytes = 2ull * sh->N * sh->K};
        cvx_tensor q8 = make_quant(CVX_Q8_0, sh->N, sh->K, w), q4 = make_quant(CVX_Q4_K, sh->N, sh->K, w);
        printf("%-8s %-13s M %5d N %5d K %5d\n", sh->model, sh->name, sh->M, sh->N, sh->K);
        char lab[5][64];
        const char *pn = cvx_precision_name(prec);
        snprintf(lab[0], sizeof lab[0], "bf16 weights, %s", pn);
        snprintf(lab[1], sizeof lab[1], "Q8_0 dequant tiles, %s", pn);
        snprintf(lab[2], sizeof lab[2], "Q8_0 int8 (%s)", int8_kernel);
        snprintf(lab[3], sizeof lab[3], "Q4_K dequant tiles, %s", pn);
        snprintf(lab[4], sizeof lab[4], "Q4_K int8 (%s)", int8_kernel);
        struct { const char *label; const cvx_tensor *t; int int8; } v[] = {
            {lab[0], &tb, 0}, {lab[1], &q8, 0}, {lab[2], &q8, 1}, {lab[3], &q4, 0}, {lab[4], &q4, 1}};
        double base = 0;
        if (cvx_ctx_set_precision(ctx, prec)) cvx_die_last_error();
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
            cvx_ctx_set_int8(ctx, v[k].int8);
            double pc, pw;
            time_linear(ctx, x, sh->M, sh->K, v[k].t, y, reps, &pc, &pw);
            if (!k) base = pc;
            const double peak = v[k].int8 ? pk->int8 : prec == CVX_PRECISION_BF16 ? pk->bf16 : pk->f32;
            printf("  %-28s %7.1f (%6.1f) GFLOP/s  %5.1f%% of the %s peak  %.2fx bf16 weights\n", v[k].label, pc, pw,
                   peak > 0 ? 100 * pc / peak : 0.0, v[k].int8 ? "int8" : prec == CVX_PRECISION_BF16 ? "bf16" : "f32",
                   pc / base);
        }
        cvx_ctx_set_int8(ctx, 0);
        free(w), free(x), free(y), free(wb), free((void *)q8.data), free((void *)q4.data);
    }
    cvx_ctx_free(ctx);
}

/* ------------------------------------------------------------------ 3. models */

typedef struct {
    cvx_st_writer *w;
    float **bufs;
    int n;
} ckpt;

static void add_t(ckpt *c, const char *name, float scale, float offset, int ndim, const int64_t *shape) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *d = cvx_alloc_f32(n);
    for (size_t i = 0; i < n; i++) d[i] = offset + scale * urand();
    if (cvx_stw_add_f32(c->w, name, CVX_BF16, ndim, shape, d)) cvx_die_last_error();
    free(d);
}
#define T_(name, scale, offset, ...) \
    add_t(&ck, name, scale, offset, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__})

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0) cvx_die("cannot write %s", path);
    fclose(f);
}

/* CogVideoX-5b widths (48 heads × 64, time_embed 512, text 4096, rotary), 2 layers, bf16. */
static void write_cog5b(const char *dir) {
    const int64_t D = 3072, E = 512, T = 4096, hd = 64, P = 64;
    char path[1024], name[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "{\"_class_name\": \"CogVideoXTransformer3DModel\", \"num_attention_heads\": 48, "
                     "\"attention_head_dim\": 64, \"num_layers\": 2, \"in_channels\": 16, \"out_channels\": 16, "
                     "\"text_embed_dim\": 4096, \"time_embed_dim\": 512, \"patch_size\": 2, \"sample_height\": 60, "
                     "\"sample_width\": 90, \"sample_frames\": 49, \"use_rotary_positional_embeddings\": true}\n");
    ckpt ck = {cvx_stw_new(), NULL, 0};
    const float sD = 1 / sqrtf((float)D), sE = 1 / sqrtf((float)E), sF = 0.5f / sqrtf((float)D);
    T_("patch_embed.proj.weight", 0.125f, 0, D, 16, 2, 2);
    T_("patch_embed.proj.bias", 0.1f, 0, D);
    T_("patch_embed.text_proj.weight", 1 / sqrtf((float)T), 0, D, T);
    T_("patch_embed.text_proj.bias", 0.1f, 0, D);
    T_("time_embedding.linear_1.weight", sD, 0, E, D);
    T_("time_embedding.linear_1.bias", 0.1f, 0, E);
    T_("time_embedding.linear_2.weight", sE, 0, E, E);
    T_("time_embedding.linear_2.bias", 0.1f, 0, E);
    for (int i = 0; i < 2; i++) {
#define N_(s) (snprintf(name, sizeof name, "transformer_blocks.%d.%s", i, s), name)
        for (int k = 1; k <= 2; k++) {
            char nm[64];
            snprintf(nm, sizeof nm, "norm%d.linear.weight", k), T_(N_(nm), sE, 0, 6 * D, E);
            snprintf(nm, sizeof nm, "norm%d.linear.bias", k), T_(N_(nm), 0.1f, 0, 6 * D);
            snprintf(nm, sizeof nm, "norm%d.norm.weight", k), T_(N_(nm), 0.1f, 1, D);
            snprintf(nm, sizeof nm, "norm%d.norm.bias", k), T_(N_(nm), 0.1f, 0, D);
        }
        const char *proj[] = {"attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0"};
        for (int k = 0; k < 4; k++) {
            char nm[64];
            snprintf(nm, sizeof nm, "%s.weight", proj[k]), T_(N_(nm), sD, 0, D, D);
            snprintf(nm, sizeof nm, "%s.bias", proj[k]), T_(N_(nm), 0.1f, 0, D);
        }
        T_(N_("attn1.norm_q.weight"), 0.1f, 1, hd), T_(N_("attn1.norm_q.bias"), 0.1f, 0, hd);
        T_(N_("attn1.norm_k.weight"), 0.1f, 1, hd), T_(N_("attn1.norm_k.bias"), 0.1f, 0, hd);
        T_(N_("ff.net.0.proj.weight"), sD, 0, 4 * D, D), T_(N_("ff.net.0.proj.bias"), 0.1f, 0, 4 * D);
        T_(N_("ff.net.2.weight"), sF, 0, D, 4 * D), T_(N_("ff.net.2.bias"), 0.1f, 0, D);
#undef N_
    }
    T_("norm_final.weight", 0.1f, 1, D), T_("norm_final.bias", 0.1f, 0, D);
    T_("norm_out.linear.weight", sE, 0, 2 * D, E), T_("norm_out.linear.bias", 0.1f, 0, 2 * D);
    T_("norm_out.norm.weight", 0.1f, 1, D), T_("norm_out.norm.bias", 0.1f, 0, D);
    T_("proj_out.weight", sD, 0, P, D), T_("proj_out.bias", 0.1f, 0, P);
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    if (cvx_stw_write(ck.w, path)) cvx_die_last_error();
    cvx_stw_free(ck.w);
}

/* Wan 2.1 T2V widths (heads × 128, ffn, text 4096, freq 256), 2 layers, bf16, diffusers names. */
static void write_wan(const char *dir, int heads, int ffn) {
    const int64_t D = (int64_t)heads * 128, Fd = ffn, T = 4096, Fq = 256, P = 64;
    char path[1024], name[256], cfg[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(cfg, sizeof cfg, "{\"_class_name\": \"WanTransformer3DModel\", \"num_attention_heads\": %d, "
             "\"attention_head_dim\": 128, \"num_layers\": 2, \"ffn_dim\": %d, \"text_dim\": 4096, \"freq_dim\": 256, "
             "\"in_channels\": 16, \"out_channels\": 16, \"patch_size\": [1, 2, 2]}\n", heads, ffn);
    write_text(path, cfg);
    ckpt ck = {cvx_stw_new(), NULL, 0};
    const float sD = 1 / sqrtf((float)D), sF = 1 / sqrtf((float)Fd);
    T_("patch_embedding.weight", 0.125f, 0, D, 16, 1, 2, 2), T_("patch_embedding.bias", 0.1f, 0, D);
    T_("condition_embedder.time_embedder.linear_1.weight", 1 / 16.0f, 0, D, Fq);
    T_("condition_embedder.time_embedder.linear_1.bias", 0.1f, 0, D);
    T_("condition_embedder.time_embedder.linear_2.weight", sD, 0, D, D);
    T_("condition_embedder.time_embedder.linear_2.bias", 0.1f, 0, D);
    T_("condition_embedder.time_proj.weight", sD, 0, 6 * D, D), T_("condition_embedder.time_proj.bias", 0.1f, 0, 6 * D);
    T_("condition_embedder.text_embedder.linear_1.weight", 1 / 64.0f, 0, D, T);
    T_("condition_embedder.text_embedder.linear_1.bias", 0.1f, 0, D);
    T_("condition_embedder.text_embedder.linear_2.weight", sD, 0, D, D);
    T_("condition_embedder.text_embedder.linear_2.bias", 0.1f, 0, D);
    for (int i = 0; i < 2; i++) {
#define N_(s) (snprintf(name, sizeof name, "blocks.%d.%s", i, s), name)
        for (int a = 1; a <= 2; a++) {
            const char *proj[] = {"to_q", "to_k", "to_v", "to_out.0"};
            char nm[64];
            for (int k = 0; k < 4; k++) {
                snprintf(nm, sizeof nm, "attn%d.%s.weight", a, proj[k]), T_(N_(nm), sD, 0, D, D);
                snprintf(nm, sizeof nm, "attn%d.%s.bias", a, proj[k]), T_(N_(nm), 0.1f, 0, D);
            }
            snprintf(nm, sizeof nm, "attn%d.norm_q.weight", a), T_(N_(nm), 0.1f, 1, D);
            snprintf(nm, sizeof nm, "attn%d.norm_k.weight", a), T_(N_(nm), 0.1f, 1, D);
        }
        T_(N_("norm2.weight"), 0.1f, 1, D), T_(N_("norm2.bias"), 0.1f, 0, D);
        T_(N_("ffn.net.0.proj.weight"), sD, 0, Fd, D), T_(N_("ffn.net.0.proj.bias"), 0.1f, 0, Fd);
        T_(N_("ffn.net.2.weight"), 0.5f * sF, 0, D, Fd), T_(N_("ffn.net.2.bias"), 0.1f, 0, D);
        T_(N_("scale_shift_table"), 0.1f, 0, 1, 6, D);
#undef N_
    }
    T_("scale_shift_table", 0.1f, 0, 1, 2, D);
    T_("proj_out.weight", sD, 0, P, D), T_("proj_out.bias", 0.1f, 0, P);
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    if (cvx_stw_write(ck.w, path)) cvx_die_last_error();
    cvx_stw_free(ck.w);
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') snprintf(p, sizeof p, "%s/%s", dir, e->d_name), unlink(p);
    closedir(d);
    rmdir(dir);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    const char *label;
    cogvideox_transformer *cog;
    wan_transformer *wan;
    int int8;
    double wall[16], cpu[16], flop;
    double out_rel;   /* rel L2 of the output vs the bf16-weights variant */
} variant;

static void bench_model(const char *key, int threads, int rounds, int frames, int height, int width,
                        const char *keep_dir, cvx_precision prec) {
    char dir[1024] = "/tmp/cvx_bench_quant_XXXXXX", probe[1100];
    if (keep_dir) snprintf(dir, sizeof dir, "%s", keep_dir);
    else if (!mkdtemp(dir)) cvx_die("mkdtemp failed");
    snprintf(probe, sizeof probe, "%s/q4_k_m.gguf", dir);
    const int reuse = keep_dir && access(probe, R_OK) == 0;   /* made by an earlier run with --dir */
    if (keep_dir && !reuse && mkdir(dir, 0755) && errno != EEXIST) cvx_die("--dir %s: %s", dir, strerror(errno));
    const int is_cog = !strcmp(key, "cog5b"), heads = !strcmp(key, "wan14b") ? 40 : 12,
              ffn = !strcmp(key, "wan14b") ? 13824 : 8960;
    if (is_cog) width = 720;   /* CogVideoX-5b's 480×720 */
    double t0 = cvx_time();
    char q8[1100], q4[1100], cfg[1100];
    snprintf(q8, sizeof q8, "%s/q8_0.gguf", dir), snprintf(q4, sizeof q4, "%s/q4_k_m.gguf", dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    if (!reuse) {
        if (is_cog) write_cog5b(dir);
        else write_wan(dir, heads, ffn);
        cvx_weights *src = cvx_weights_open(dir);
        if (!src) cvx_die_last_error();
        const cvx_gguf_rules *rules = is_cog ? &cogvideox_gguf_rules : &wan_gguf_rules;
        if (cvx_quantize_to_gguf(src, rules, 7, 0, q8, NULL) || cvx_quantize_to_gguf(src, rules, 15, 0, q4, NULL))
            cvx_die_last_error();
        cvx_weights_close(src);
    }
    printf("\n%s: 2 layers, %d frames %dx%d, %s compute; bf16 checkpoint + Q8_0 / Q4_K_M GGUFs %s in %.0f s\n", key,
           frames, height, width, cvx_precision_name(prec), reuse ? "reused" : "made", cvx_time() - t0);

    cvx_ctx *ctx = cvx_ctx_new(threads);
    if (cvx_ctx_set_precision(ctx, prec)) cvx_die_last_error();
    const char *paths[3] = {dir, q8, q4};
    const char *labels[5] = {"bf16 weights", "Q8_0 dequant tiles", "Q8_0 int8", "Q4_K_M dequant tiles", "Q4_K_M int8"};
    const int src_of[5] = {0, 1, 1, 2, 2};
    variant v[5];
    memset(v, 0, sizeof v);
    void *models[3];
    for (int k = 0; k < 3; k++) {
        models[k] = is_cog ? (void *)cogvideox_load_file(cfg, paths[k], ctx) : (void *)wan_load_file(cfg, paths[k], ctx);
        if (!models[k]) cvx_die_last_error();
    }
    /* inputs */
    const int lf = (frames - 1) / 4 + 1, h = height / 8, w = width / 8, L = is_cog ? 226 : 512, B = is_cog ? 2 : 1;
    const size_t nx = (size_t)B * lf * 16 * h * w, nt = (size_t)B * L * 4096;
    float *x = cvx_alloc_f32(nx), *text = cvx_alloc_f32(nt), *ref = cvx_alloc_f32(nx), *out = cvx_alloc_f32(nx);
    for (size_t i = 0; i < nx; i++) x[i] = urand();
    for (size_t i = 0; i < nt; i++) text[i] = 0.2f * urand();
    float *cs = NULL, *sn = NULL;
    int64_t ti[2] = {500, 500};
    const float tf[1] = {500.0f};
    if (is_cog) {
        const cogvideox_config *c = cogvideox_get_config(models[0]);
        const int N = cogvideox_num_video_tokens(c, lf, h, w);
        cs = cvx_alloc_f32((size_t)N * 64), sn = cvx_alloc_f32((size_t)N * 64);
        if (cogvideox_rope_tables(c, lf, h, w, cs, sn)) cvx_die_last_error();
    }
    for (int k = 0; k < 5; k++) {
        v[k].label = labels[k], v[k].int8 = k == 2 || k == 4;
        if (is_cog) v[k].cog = models[src_of[k]];
        else v[k].wan = models[src_of[k]];
    }
    /* one step: CogVideoX one batch-2 call, Wan two batch-1 calls (cond, uncond) */
    for (int r = -1; r < rounds; r++)   /* round -1: warm-up (primitives, scratch, page cache) */
        for (int k = 0; k < 5; k++) {
            cvx_ctx_set_int8(ctx, v[k].int8);
            const double f0 = ctx->flops, c0 = bench_cpu_s(), w0 = cvx_time();
            int rc = 0;
            if (is_cog) rc = cogvideox_forward(v[k].cog, x, B, lf, h, w, text, L, ti, cs, sn, out);
            else
                for (int call = 0; call < 2 && !rc; call++)
                    rc = wan_forward(v[k].wan, x, 1, lf, h, w, text, L, NULL, 0, tf, out);
            if (rc) cvx_die_last_error();
            if (r < 0) {
                if (k == 0) memcpy(ref, out, sizeof(float) * nx);
                v[k].out_rel = cvx_rel_l2(out, ref, nx);
                continue;
            }
            v[k].wall[r] = cvx_time() - w0, v[k].cpu[r] = (bench_cpu_s() - c0) / threads, v[k].flop = ctx->flops - f0;
        }
    cvx_ctx_set_int8(ctx, 0);
    printf("  %-27s %9s %9s %11s %9s  %s\n", "variant", "step wall", "step CPU", "GFLOP/CPU-s", "vs bf16",
           "output vs bf16 weights (rel L2)");
    double base = 0;
    for (int k = 0; k < 5; k++) {
        qsort(v[k].wall, (size_t)rounds, sizeof(double), cmp_d);
        qsort(v[k].cpu, (size_t)rounds, sizeof(double), cmp_d);
        const double cw = v[k].cpu[rounds / 2];
        if (!k) base = cw;
        printf("  %-27s %8.2fs %8.2fs %11.1f %8.2fx  %.2e\n", v[k].label, v[k].wall[rounds / 2], cw,
               v[k].flop / cw / 1e9, base / cw, v[k].out_rel);
    }
    static const char *const tags[5] = {"bf16", "q8_0_dequant", "q8_0_int8", "q4_k_m_dequant", "q4_k_m_int8"};
    for (int k = 0; k < 5; k++)   /* for bench/side_by_side_wan.sh (case wangguf); cpu_s: of the whole process */
        printf("RESULT who=ours case=gguf_%s precision=%s compute=%s seconds=%.4f cpu_s=%.2f tokens=%d\n", key, tags[k],
               cvx_precision_name(prec), v[k].wall[rounds / 2], v[k].cpu[rounds / 2] * threads,
               B * ((frames - 1) / 4 + 1) * (height / 16) * (width / 16));
    for (int k = 0; k < 3; k++) is_cog ? cogvideox_free(models[k]) : wan_free(models[k]);
    cvx_ctx_free(ctx);
    free(x), free(text), free(ref), free(out), free(cs), free(sn);
    if (!keep_dir) rm_dir(dir);
}

static void bench_models(int threads, int rounds, const char *models, int frames, int height, int width,
                         const char *keep_dir, cvx_precision prec) {
    static const char *const keys[] = {"cog5b", "wan1.3b", "wan14b"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strstr(models, keys[i])) bench_model(keys[i], threads, rounds > 16 ? 16 : rounds, frames, height, width, keep_dir, prec);
}

int main(int argc, char **argv) {
    int threads = 2, reps = 3, rounds = 2, frames = 9, height = 480, width = 832;
    const char *part = "all", *models = "cog5b,wan1.3b,wan14b", *write_model = NULL, *keep_dir = NULL, *prec_name = "bf16";
    static const struct option opts[] = {{"threads", 1, 0, 't'}, {"reps", 1, 0, 'r'},   {"part", 1, 0, 'p'},
                                         {"models", 1, 0, 'm'},  {"frames", 1, 0, 'f'}, {"height", 1, 0, 'h'},
                                         {"width", 1, 0, 'w'},   {"rounds", 1, 0, 'R'}, {"write_model", 1, 0, 'W'},
                                         {"dir", 1, 0, 'd'},     {"precision", 1, 0, 'P'},
                                         {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (c == 't') threads = atoi(optarg);
        else if (c == 'r') reps = atoi(optarg);
        else if (c == 'p') part = optarg;
        else if (c == 'm') models = optarg;
        else if (c == 'f') frames = atoi(optarg);
        else if (c == 'h') height = atoi(optarg);
        else if (c == 'w') width = atoi(optarg);
        else if (c == 'R') rounds = atoi(optarg);
        else if (c == 'W') write_model = optarg;
        else if (c == 'd') keep_dir = optarg;
        else if (c == 'P') prec_name = optarg;
        else return fprintf(stderr, "see the comment at the top of bench/bench_quant.c\n"), 2;
    }
    cvx_set_threads(threads);
    if (write_model) {
        if (optind >= argc) cvx_die("--write_model KEY DIR: give the directory");
        if (!strcmp(write_model, "cog5b")) write_cog5b(argv[optind]);
        else if (!strcmp(write_model, "wan1.3b")) write_wan(argv[optind], 12, 8960);
        else if (!strcmp(write_model, "wan14b")) write_wan(argv[optind], 40, 13824);
        else cvx_die("--write_model %s: one of cog5b, wan1.3b, wan14b", write_model);
        return 0;
    }
    cvx_precision prec;
    if (cvx_precision_parse(prec_name, CVX_WORK_MATMUL, &prec)) cvx_die_last_error();
    cvx_cpu_features cpu;
    cvx_cpu_detect(&cpu);
    char buf[160];
    printf("cpu: %s; %d threads; int8 kernel %s\n", cvx_cpu_describe(&cpu, buf, sizeof buf), threads,
           cvx_q8_kernel_name(&cpu, CVX_Q8K_AUTO));
    bench_peaks pk;
    bench_measure_peaks(&pk, &cpu, 4);
    printf("peaks per CPU-s: f32 %.0f GFLOP/s (%s), bf16 %.0f GFLOP/s (%s), int8 %.0f GOP/s (%s)\n", pk.f32,
           pk.f32_how, pk.bf16, pk.bf16_how, pk.int8, pk.int8_how);
    /* tokens of one transformer call: Wan batch 1 (F' × h/16 × w/16), CogVideoX batch 2 × (226 + tokens) */
    const int lf = (frames - 1) / 4 + 1, tok = lf * (height / 16) * (width / 16);
    if (!strcmp(part, "linears") || !strcmp(part, "all"))
        bench_linears(threads, reps, &pk, models, tok,
                      2 * (226 + lf * (height / 16) * (720 / 16)), prec, cvx_q8_kernel_name(&cpu, CVX_Q8K_AUTO));
    if (!strcmp(part, "models") || !strcmp(part, "all"))
        bench_models(threads, rounds, models, frames, height, width, keep_dir, prec);
    printf("peak RSS %.2f GB\n", cvx_peak_rss_bytes() / 1e9);
    return 0;
}
