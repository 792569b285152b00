/* LTX-Video transformer benchmark: one CFG step (LTXPipeline runs it as ONE forward at batch 2,
 * uncond + cond) of LTXVideoTransformer3DModel at the real 2B (32 heads × 64, caption 4096) or
 * 13B (32 × 128) widths with a few random layers (bf16 by default, a diffusers dir written to a
 * temp dir by a child process and mmapped), text 128 tokens (the second half masked), at a video
 * size in frames and pixels (latent (frames − 1)/8 + 1 × H/32 × W/32 tokens: 121 frames
 * 768×512 = 6,144). Prints the step's wall and CPU time (CPU time is less disturbed by other
 * load), its GFLOP (the context's count) and rate, and peak RSS, then a RESULT line:
 *   RESULT case=<ltx2b|ltx13b> precision=.. tokens=.. layers=.. seconds=.. cpu_s=.. gflop=.. peak_rss_gb=..
 *
 *   bench_ltx_stage2 [--model 2b|13b] [--frames 121] [--height 512] [--width 768] [--layers 2]
 *                    [--runs 1] [--threads N] [--precision f32|bf16] [--f32-weights] */
#include "bench_models.h"
#include "error.h"
#include "gemm.h"
#include "runenv.h"
#include "safetensors.h"
#include "stage2/ltx.h"
#include "stage2/ltx_pack.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BM_ADD(name, scale, offset, ...) \
    bm_add_random(w, store, name, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__}, \
                  scale, offset)

/* LTXVideoTransformer3DModel with `layers` random layers at `heads` × `hd`, 128 latent channels. */
static void write_ltx(const char *dir, int heads, int hd, int layers, cvx_dtype store) {
    int64_t D = (int64_t)heads * hd, C = 128, Cap = 4096;
    char name[256];
    FILE *f = bm_open_config(dir);
    fprintf(f, "{\"_class_name\": \"LTXVideoTransformer3DModel\", \"num_attention_heads\": %d, \"attention_head_dim\": %d,"
               " \"num_layers\": %d, \"in_channels\": 128, \"out_channels\": 128, \"cross_attention_dim\": %lld,"
               " \"caption_channels\": 4096}\n", heads, hd, layers, (long long)D);
    fclose(f);
    cvx_st_writer *w = cvx_stw_new();
    float sD = 1.0f / sqrtf((float)D);
    BM_ADD("proj_in.weight", 1.0f / sqrtf((float)C), 0, D, C);
    BM_ADD("proj_in.bias", 0.1f, 0, D);
    BM_ADD("time_embed.emb.timestep_embedder.linear_1.weight", 1.0f / 16, 0, D, 256);
    BM_ADD("time_embed.emb.timestep_embedder.linear_1.bias", 0.1f, 0, D);
    BM_ADD("time_embed.emb.timestep_embedder.linear_2.weight", sD, 0, D, D);
    BM_ADD("time_embed.emb.timestep_embedder.linear_2.bias", 0.1f, 0, D);
    BM_ADD("time_embed.linear.weight", sD, 0, 6 * D, D);
    BM_ADD("time_embed.linear.bias", 0.1f, 0, 6 * D);
    BM_ADD("caption_projection.linear_1.weight", 1.0f / sqrtf((float)Cap), 0, D, Cap);
    BM_ADD("caption_projection.linear_1.bias", 0.1f, 0, D);
    BM_ADD("caption_projection.linear_2.weight", sD, 0, D, D);
    BM_ADD("caption_projection.linear_2.bias", 0.1f, 0, D);
    for (int i = 0; i < layers; i++) {
#define N_(s) (snprintf(name, sizeof name, "transformer_blocks.%d.%s", i, s), name)
        bm_add_attention(w, store, N_("attn1"), D);
        bm_add_attention(w, store, N_("attn2"), D);
        BM_ADD(N_("ff.net.0.proj.weight"), sD, 0, 4 * D, D);
        BM_ADD(N_("ff.net.0.proj.bias"), 0.1f, 0, 4 * D);
        BM_ADD(N_("ff.net.2.weight"), 0.5f * sD, 0, D, 4 * D);
        BM_ADD(N_("ff.net.2.bias"), 0.1f, 0, D);
        BM_ADD(N_("scale_shift_table"), 0.1f, 0, 6, D);
#undef N_
    }
    BM_ADD("scale_shift_table", 0.1f, 0, 2, D);
    BM_ADD("proj_out.weight", sD, 0, C, D);
    BM_ADD("proj_out.bias", 0.1f, 0, C);
    bm_write_weights(dir, w);
}
#undef BM_ADD

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    cvx_runtime_setup(argc, argv);
    const char *model = "2b";
    int frames = 121, height = 512, width = 768, layers = 2, runs = 1, threads = 0;
    cvx_dtype store = CVX_BF16;
    cvx_precision prec = CVX_PRECISION_F32;
    static const struct option opts[] = {
        {"model", 1, 0, 'm'},  {"frames", 1, 0, 'f'}, {"height", 1, 0, 'H'},     {"width", 1, 0, 'W'},
        {"layers", 1, 0, 'l'}, {"runs", 1, 0, 'r'},   {"threads", 1, 0, 't'},    {"precision", 1, 0, 'P'},
        {"f32-weights", 0, 0, 'x'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'f': frames = atoi(optarg); break;
        case 'H': height = atoi(optarg); break;
        case 'W': width = atoi(optarg); break;
        case 'l': layers = atoi(optarg); break;
        case 'r': runs = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'x': store = CVX_F32; break;
        case 'P':
            if (cvx_precision_parse(optarg, CVX_WORK_MATMUL, &prec)) cvx_die_last_error();
            break;
        default:
            printf("usage: %s [--model 2b|13b] [--frames 121] [--height 512] [--width 768] [--layers 2] [--runs 1]"
                   " [--threads N] [--precision f32|bf16] [--f32-weights]\n", argv[0]);
            return o == 'h' ? 0 : 1;
        }
    }
    cvx_set_program_name("bench_ltx_stage2");
    int hd = !strcmp(model, "2b") ? 64 : !strcmp(model, "13b") ? 128 : 0;
    if (!hd) cvx_die("--model must be 2b or 13b, got '%s'", model);
    int F, H, W;
    if (ltx_latent_grid(frames, height, width, &F, &H, &W)) cvx_die_last_error();
    if (layers < 1 || runs < 1) cvx_die("--layers and --runs must be >= 1");
    cvx_set_threads(threads);

    char dir[] = "/tmp/cvx_bench_ltx_s2_XXXXXX";
    if (!mkdtemp(dir)) cvx_die("mkdtemp failed");
    pid_t pid = fork();   /* the writer's memory does not count in this process's peak RSS */
    if (pid == 0) {
        write_ltx(dir, 32, hd, layers, store);
        _exit(0);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) cvx_die("writing the model failed");
    ltx_transformer *m = ltx_load(dir, NULL);
    if (!m) cvx_die_last_error();
    cvx_ctx *ctx = ltx_ctx(m);
    if (cvx_ctx_set_precision(ctx, prec)) cvx_die_last_error();
    const int B = 2, S = F * H * W, L = 128, D = 32 * hd;
    size_t nx = (size_t)B * S * 128, nt = (size_t)B * L * 4096;
    float *x = cvx_alloc_f32(nx), *out = cvx_alloc_f32(nx), *text = cvx_alloc_f32(nt);
    float *mask = cvx_alloc_f32((size_t)B * L), *coords = cvx_alloc_f32((size_t)B * 3 * S), t[2] = {999.0f, 999.0f};
    for (size_t i = 0; i < nx; i++) x[i] = bm_urand();
    for (size_t i = 0; i < nt; i++) text[i] = 0.2f * bm_urand();
    for (int i = 0; i < B * L; i++) mask[i] = (i % L) < L / 2;
    const float scale[3] = {8.0f / 25.0f, 32, 32};
    for (int b = 0; b < B; b++) ltx_rope_coords_grid(F, H, W, scale, coords + (size_t)b * 3 * S);
    printf("LTX-Video %s dims: D=%d (32 heads x %d), %d layers, %s weights, %s compute, %d threads; %d frames %dx%d"
           " -> %d tokens, text %d; one CFG step = 1 forward at batch 2\n",
           model, D, hd, layers, cvx_dtype_name(store), cvx_precision_name(prec), cvx_threads(), frames, width, height,
           S, L);
    fflush(stdout);
    double best = 1e30, best_cpu = 1e30, gflop = 0;
    for (int r = 0; r < runs; r++) {
        double f0 = ctx->flops, t0 = cvx_time(), c0 = cpu_seconds();
        if (ltx_forward(m, x, B, S, text, mask, L, t, 1, coords, out)) cvx_die_last_error();
        double dt = cvx_time() - t0, dc = cpu_seconds() - c0;
        gflop = (ctx->flops - f0) * 1e-9;
        printf("  step %d: %.2f s wall, %.1f s CPU, %.1f GFLOP (%.1f GFLOP/s wall)\n", r + 1, dt, dc, gflop, gflop / dt);
        fflush(stdout);
        if (dt < best) best = dt;
        if (dc < best_cpu) best_cpu = dc;
    }
    printf("  peak RSS %.2f GB\n", cvx_peak_rss_bytes() / 1e9);
    printf("RESULT case=ltx%s precision=%s tokens=%d layers=%d seconds=%.3f cpu_s=%.2f gflop=%.1f peak_rss_gb=%.3f\n",
           model, cvx_precision_name(prec), S, layers, best, best_cpu, gflop, cvx_peak_rss_bytes() / 1e9);
    free(x), free(out), free(text), free(mask), free(coords);
    ltx_free(m);
    bm_rm_dir(dir);
    return 0;
}
