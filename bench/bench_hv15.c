/* HunyuanVideo-1.5 transformer benchmark: one forward (one CFG branch, batch 1) of
 * HunyuanVideo15Transformer3DModel at the real 8.3B widths (16 heads × 128, mlp 4, text 3584,
 * ByT5 1472 → 2048, SigLIP 1152, in 65 / out 32, RoPE (16, 56, 56)) with --layers double-stream
 * blocks (2 refiner blocks, as the real model) and random weights (bf16 by default, as the published
 * checkpoints; a diffusers dir written to a temp dir and mmapped), at a latent grid given in video
 * frames and pixels (latent (frames − 1)/4 + 1 × H/16 × W/16, patch 1: 480×848 × 33 frames = 9 × 30 ×
 * 53 = 14,310 tokens). The MLLM text has --text valid tokens of 1000, ByT5 --glyph of 256 (0: the
 * zeros path), T2V (image tokens masked).
 * Prints the wall and process CPU time of the forward (after --warmup forwards), GFLOP/s of the
 * linears and of the attention products by wall time, the FLOP split and peak RSS, and one line:
 *   RESULT case=hv15 precision=<f32|bf16> tokens=<S> text=<valid rows> layers=<n> seconds=<wall s>
 *          cpu_seconds=.. gflops=.. lin_gflops=.. att_gflops=.. peak_rss_gb=..
 * The machine may be shared: compare CPU seconds, not wall time, between runs under load.
 *
 *   bench_hv15 [--frames 33] [--height 480] [--width 848] [--layers 2] [--text 120] [--glyph 0]
 *              [--warmup 0] [--threads N] [--precision f32|bf16] [--f32-weights] */
#include "bench_models.h"
#include "error.h"
#include "runenv.h"
#include "safetensors.h"
#include "stage2/hunyuan15.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

static double peak_rss_gb(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1048576.0;
}

/* A Linear `name` [out, in] + bias, PyTorch-like scales. */
static void add_linear(cvx_st_writer *w, cvx_dtype store, const char *name, int64_t out, int64_t in) {
    char n[300];
    snprintf(n, sizeof n, "%s.weight", name);
    bm_add_random(w, store, n, 2, (int64_t[]){out, in}, 1.0f / sqrtf((float)in), 0);
    snprintf(n, sizeof n, "%s.bias", name);
    bm_add_random(w, store, n, 1, (int64_t[]){out}, 0.02f, 0);
}

static void add_norm(cvx_st_writer *w, cvx_dtype store, const char *name, int64_t dim, int bias) {
    char n[300];
    snprintf(n, sizeof n, "%s.weight", name);
    bm_add_random(w, store, n, 1, (int64_t[]){dim}, 0.05f, 1.0f);
    if (!bias) return;
    snprintf(n, sizeof n, "%s.bias", name);
    bm_add_random(w, store, n, 1, (int64_t[]){dim}, 0.02f, 0);
}

/* The real transformer's tensors with `layers` blocks. */
static void write_model(const char *dir, int layers, cvx_dtype store) {
    const int64_t D = 2048, hd = 128, F = 4 * D, T = 3584, T2 = 1472, W2 = 2048, I = 1152, C = 65, Co = 32;
    FILE *f = bm_open_config(dir);
    fprintf(f, "{\"_class_name\": \"HunyuanVideo15Transformer3DModel\", \"num_layers\": %d, \"task_type\": \"t2v\"}\n",
            layers);
    fclose(f);
    cvx_st_writer *w = cvx_stw_new();
    char n[256];
    bm_add_random(w, store, "x_embedder.proj.weight", 5, (int64_t[]){D, C, 1, 1, 1}, 1.0f / sqrtf((float)C), 0);
    bm_add_random(w, store, "x_embedder.proj.bias", 1, (int64_t[]){D}, 0.02f, 0);
    add_linear(w, store, "time_embed.timestep_embedder.linear_1", D, 256);
    add_linear(w, store, "time_embed.timestep_embedder.linear_2", D, D);
    add_linear(w, store, "context_embedder.time_text_embed.timestep_embedder.linear_1", D, 256);
    add_linear(w, store, "context_embedder.time_text_embed.timestep_embedder.linear_2", D, D);
    add_linear(w, store, "context_embedder.time_text_embed.text_embedder.linear_1", D, T);
    add_linear(w, store, "context_embedder.time_text_embed.text_embedder.linear_2", D, D);
    add_linear(w, store, "context_embedder.proj_in", D, T);
    for (int i = 0; i < 2; i++) {
#define R_(s) (snprintf(n, sizeof n, "context_embedder.token_refiner.refiner_blocks.%d.%s", i, s), n)
        add_norm(w, store, R_("norm1"), D, 1);
        add_norm(w, store, R_("norm2"), D, 1);
        add_linear(w, store, R_("attn.to_q"), D, D);
        add_linear(w, store, R_("attn.to_k"), D, D);
        add_linear(w, store, R_("attn.to_v"), D, D);
        add_linear(w, store, R_("attn.to_out.0"), D, D);
        add_linear(w, store, R_("ff.net.0.proj"), F, D);
        add_linear(w, store, R_("ff.net.2"), D, F);
        add_linear(w, store, R_("norm_out.linear"), 2 * D, D);
#undef R_
    }
    add_norm(w, store, "context_embedder_2.norm", T2, 1);
    add_linear(w, store, "context_embedder_2.linear_1", W2, T2);
    add_linear(w, store, "context_embedder_2.linear_2", W2, W2);
    add_linear(w, store, "context_embedder_2.linear_3", D, W2);
    add_norm(w, store, "image_embedder.norm_in", I, 1);
    add_linear(w, store, "image_embedder.linear_1", I, I);
    add_linear(w, store, "image_embedder.linear_2", D, I);
    add_norm(w, store, "image_embedder.norm_out", D, 1);
    bm_add_random(w, store, "cond_type_embed.weight", 2, (int64_t[]){3, D}, 1.0f, 0);
    for (int i = 0; i < layers; i++) {
#define B_(s) (snprintf(n, sizeof n, "transformer_blocks.%d.%s", i, s), n)
        add_linear(w, store, B_("norm1.linear"), 6 * D, D);
        add_linear(w, store, B_("norm1_context.linear"), 6 * D, D);
        static const char *const proj[] = {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.add_q_proj",
                                           "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out"};
        for (int k = 0; k < 8; k++) add_linear(w, store, B_(proj[k]), D, D);
        static const char *const qk[] = {"attn.norm_q", "attn.norm_k", "attn.norm_added_q", "attn.norm_added_k"};
        for (int k = 0; k < 4; k++) add_norm(w, store, B_(qk[k]), hd, 0);
        add_linear(w, store, B_("ff.net.0.proj"), F, D);
        add_linear(w, store, B_("ff.net.2"), D, F);
        add_linear(w, store, B_("ff_context.net.0.proj"), F, D);
        add_linear(w, store, B_("ff_context.net.2"), D, F);
#undef B_
    }
    add_linear(w, store, "norm_out.linear", 2 * D, D);
    add_linear(w, store, "proj_out", Co, D);
    bm_write_weights(dir, w);
}

int main(int argc, char **argv) {
    int frames = 33, height = 480, width = 848, layers = 2, text = 120, glyph = 0, warmup = 0, threads = 0;
    int f32_weights = 0;
    const char *precision = "f32";
    static const struct option opts[] = {
        {"frames", 1, 0, 'f'}, {"height", 1, 0, 'H'}, {"width", 1, 0, 'W'}, {"layers", 1, 0, 'l'},
        {"text", 1, 0, 't'}, {"glyph", 1, 0, 'g'}, {"warmup", 1, 0, 'w'}, {"threads", 1, 0, 'j'},
        {"precision", 1, 0, 'p'}, {"f32-weights", 0, 0, 'F'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 'f': frames = atoi(optarg); break;
        case 'H': height = atoi(optarg); break;
        case 'W': width = atoi(optarg); break;
        case 'l': layers = atoi(optarg); break;
        case 't': text = atoi(optarg); break;
        case 'g': glyph = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'j': threads = atoi(optarg); break;
        case 'p': precision = optarg; break;
        case 'F': f32_weights = 1; break;
        default: fprintf(stderr, "usage: see bench/bench_hv15.c\n"); return 2;
        }
    }
    if (frames < 1 || (frames - 1) % 4 || height % 16 || width % 16 || height < 16 || width < 16 || layers < 1 ||
        text < 1 || text > 1000 || glyph < 0 || glyph > 256) {
        fprintf(stderr, "bench_hv15: frames 1 + 4k, height/width multiples of 16, text 1..1000, glyph 0..256\n");
        return 2;
    }
    cvx_set_program_name("bench_hv15");
    cvx_set_threads(threads);
    cvx_precision prec;
    if (cvx_precision_parse(precision, CVX_WORK_MATMUL, &prec)) cvx_die_last_error();
    char dir[] = "/tmp/cvx_bench_hv15_XXXXXX";
    if (!mkdtemp(dir)) cvx_die("mkdtemp failed");
    double t0 = cvx_time();
    pid_t pid = fork();   /* the writer's memory does not count in this process's peak RSS */
    if (pid == 0) {
        write_model(dir, layers, f32_weights ? CVX_F32 : CVX_BF16);
        _exit(0);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
        cvx_die("writing the random model failed");
    printf("model: %d blocks at the real widths written in %.1f s (%s weights)\n", layers, cvx_time() - t0,
           f32_weights ? "f32" : "bf16");
    cvx_ctx *ctx = cvx_ctx_new(cvx_threads());
    if (cvx_ctx_set_precision(ctx, prec)) cvx_die_last_error();
    hv15_transformer *m = hv15_load(dir, ctx);
    if (!m) cvx_die_last_error();

    const int F = (frames - 1) / 4 + 1, H = height / 16, Wl = width / 16, S = F * H * Wl, L = 1000, L2 = 256, Li = 729;
    const size_t nx = (size_t)65 * S;
    float *x = cvx_alloc_f32(nx), *out = cvx_alloc_f32((size_t)32 * S);
    float *txt = cvx_alloc_f32((size_t)L * 3584), *mask = cvx_calloc(L, sizeof(float));
    float *txt2 = cvx_alloc_f32((size_t)L2 * 1472), *mask2 = cvx_calloc(L2, sizeof(float)), t = 937.5f;
    for (size_t i = 0; i < nx; i++) x[i] = bm_urand();
    for (size_t i = 0; i < (size_t)L * 3584; i++) txt[i] = bm_urand();
    for (size_t i = 0; i < (size_t)L2 * 1472; i++) txt2[i] = bm_urand();
    for (int i = 0; i < text; i++) mask[i] = 1;
    for (int i = 0; i < glyph; i++) mask2[i] = 1;
    hv15_cond cond = {.text = txt, .text_mask = mask, .L = L, .text2 = txt2, .text2_mask = mask2, .L2 = L2,
                      .image = NULL, .L_img = Li, .timestep = &t};
    for (int i = 0; i < warmup; i++)
        if (hv15_forward(m, x, 1, F, H, Wl, &cond, out)) cvx_die_last_error();
    hv15_reset_stats(m);
    double c0 = cpu_seconds(), w0 = cvx_time();
    if (hv15_forward(m, x, 1, F, H, Wl, &cond, out)) cvx_die_last_error();
    double wall = cvx_time() - w0, cpu = cpu_seconds() - c0;
    hv15_stats st = hv15_get_stats(m);
    double fl = st.flop_linear + st.flop_attention;
    printf("grid %d×%d×%d = %d video tokens + %d valid text rows, %d blocks, %s, %d threads\n", F, H, Wl, S,
           text + glyph, layers, cvx_precision_name(prec), cvx_threads());
    printf("forward: %.2f s wall, %.2f s CPU; %.1f GFLOP (linears %.0f %%), %.1f GFLOP/s (linears %.1f in %.2f s, "
           "attention %.1f in %.2f s); peak RSS %.2f GB\n",
           wall, cpu, fl * 1e-9, 100.0 * st.flop_linear / fl, fl * 1e-9 / wall,
           st.flop_linear * 1e-9 / st.t_linear, st.t_linear, st.flop_attention * 1e-9 / st.t_attention, st.t_attention,
           peak_rss_gb());
    printf("RESULT case=hv15 precision=%s tokens=%d text=%d layers=%d seconds=%.3f cpu_seconds=%.3f gflops=%.1f "
           "lin_gflops=%.1f att_gflops=%.1f peak_rss_gb=%.2f\n",
           cvx_precision_name(prec), S, text + glyph, layers, wall, cpu, fl * 1e-9 / wall,
           st.flop_linear * 1e-9 / st.t_linear, st.flop_attention * 1e-9 / st.t_attention, peak_rss_gb());
    hv15_free(m);
    cvx_ctx_free(ctx);
    bm_rm_dir(dir);
    free(x), free(out), free(txt), free(mask), free(txt2), free(mask2);
    return 0;
}
