/* The same bits at any thread count, at real dimensions: one transformer forward (one CFG branch,
 * batch 1) of a random 2-layer CogVideoX-2b (17,776 tokens by default: 226 text + 13 × 30 × 45
 * video, the 49-frame 720×480 video) and/or Wan2.1-1.3B (8,190 tokens by default: 21 × 15 × 26,
 * 81 frames at 416×240; --height 60 --width 104 gives the real 480p 32,760), run on a fresh compute
 * context per thread count; prints the FNV-1a hash of the output bytes per thread count and
 * whether they are all equal (exit 1 if not). tests/common_threads.c checks the same on small
 * sizes in every `make test`.
 *
 *   bench_threads [--model 2b|wan|all] [--frames F] [--height H] [--width W] [--layers N]
 *                 [--threads 1,2,3,8] [--precision f32|bf16|both] */
#include "error.h"
#include "gemm.h"
#include "stage2/cogvideox.h"
#include "stage2/wan.h"

#include "bench_models.h"

#include <getopt.h>
#include <stdint.h>
#include <string.h>

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

typedef struct {
    int F, H, W, layers;
} grid;

/* One forward of the model in `dir` on a context of `threads` threads; returns the output hash. */
static uint64_t run_cogvideox(const char *dir, const grid *g, int threads, cvx_precision prec, double *secs,
                              double *gflop) {
    cvx_ctx *ctx = cvx_ctx_new(threads);
    if (cvx_ctx_set_precision(ctx, prec)) cvx_die_last_error();
    cogvideox_transformer *m = cogvideox_load(dir, ctx);
    if (!m) cvx_die_last_error();
    const cogvideox_config *c = cogvideox_get_config(m);
    int L = 226;
    size_t nx = (size_t)g->F * c->in_channels * g->H * g->W, nt = (size_t)L * c->text_embed_dim;
    float *x = malloc(sizeof(float) * nx), *out = malloc(sizeof(float) * nx), *text = malloc(sizeof(float) * nt);
    bm_rng_state = 0x9E3779B97F4A7C15ull;   /* the same inputs for every thread count */
    for (size_t i = 0; i < nx; i++) x[i] = bm_urand();
    for (size_t i = 0; i < nt; i++) text[i] = 0.2f * bm_urand();
    int64_t t = 999;
    if (cogvideox_forward(m, x, 1, g->F, g->H, g->W, text, L, &t, NULL, NULL, out)) cvx_die_last_error();
    cogvideox_stats s = cogvideox_get_stats(m);
    *secs = s.t_total, *gflop = (s.flop_linear + s.flop_attention) * 1e-9;
    uint64_t h = fnv1a(out, sizeof(float) * nx);
    free(x), free(out), free(text);
    cogvideox_free(m);
    cvx_ctx_free(ctx);
    return h;
}

static uint64_t run_wan(const char *dir, const grid *g, int threads, cvx_precision prec, double *secs, double *gflop) {
    cvx_ctx *ctx = cvx_ctx_new(threads);
    if (cvx_ctx_set_precision(ctx, prec)) cvx_die_last_error();
    wan_transformer *m = wan_load(dir, ctx);
    if (!m) cvx_die_last_error();
    const wan_config *c = wan_get_config(m);
    int L = 512;
    size_t nx = (size_t)c->in_channels * g->F * g->H * g->W, nt = (size_t)L * c->text_dim;
    float *x = malloc(sizeof(float) * nx), *out = malloc(sizeof(float) * nx), *text = malloc(sizeof(float) * nt);
    bm_rng_state = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < nx; i++) x[i] = bm_urand();
    for (size_t i = 0; i < nt; i++) text[i] = 0.2f * bm_urand();
    float t = 999;
    if (wan_forward(m, x, 1, g->F, g->H, g->W, text, L, NULL, 0, &t, out)) cvx_die_last_error();
    wan_stats s = wan_get_stats(m);
    *secs = s.t_total, *gflop = (s.flop_linear + s.flop_attention) * 1e-9;
    uint64_t h = fnv1a(out, sizeof(float) * nx);
    free(x), free(out), free(text);
    wan_free(m);
    cvx_ctx_free(ctx);
    return h;
}

/* Every thread count of `list` at precision `prec`; 0 when all hashes agree. */
static int compare(const char *label, const char *dir, int wan, const grid *g, const int *list, int n,
                   cvx_precision prec) {
    uint64_t first = 0;
    int same = 1;
    for (int i = 0; i < n; i++) {
        double secs, gflop;
        uint64_t h = wan ? run_wan(dir, g, list[i], prec, &secs, &gflop)
                         : run_cogvideox(dir, g, list[i], prec, &secs, &gflop);
        if (i == 0) first = h;
        same &= h == first;
        printf("  %s %-4s threads %2d: output FNV-1a %016llx  %7.2f s  %6.1f GFLOP/s%s\n", label,
               cvx_precision_name(prec), list[i], (unsigned long long)h, secs, gflop / secs,
               h == first ? "" : "  <- differs");
        fflush(stdout);
    }
    printf("  %s %s: %s at %d thread counts\n", label, cvx_precision_name(prec),
           same ? "the same bits" : "DIFFERENT bits", n);
    return !same;
}

int main(int argc, char **argv) {
    const char *model = "all", *prec_arg = "both", *threads_arg = "1,2,3,8";
    grid g2b = {13, 60, 90, 2}, gwan = {21, 30, 52, 2};
    int F = 0, H = 0, W = 0, layers = 2;
    static const struct option opts[] = {{"model", 1, 0, 'm'},     {"frames", 1, 0, 'f'},    {"height", 1, 0, 'H'},
                                         {"width", 1, 0, 'W'},     {"layers", 1, 0, 'l'},    {"threads", 1, 0, 't'},
                                         {"precision", 1, 0, 'P'}, {"help", 0, 0, 'h'},      {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'f': F = atoi(optarg); break;
        case 'H': H = atoi(optarg); break;
        case 'W': W = atoi(optarg); break;
        case 'l': layers = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
        case 't': threads_arg = optarg; break;
        case 'P': prec_arg = optarg; break;
        default:
            printf("usage: %s [--model 2b|wan|all] [--frames F] [--height H] [--width W] [--layers N]"
                   " [--threads 1,2,3,8] [--precision f32|bf16|both]\n", argv[0]);
            return o == 'h' ? 0 : 1;
        }
    }
    cvx_set_program_name("bench_threads");
    setvbuf(stdout, NULL, _IOLBF, 0);
    int list[32], n = 0;
    for (const char *p = threads_arg; *p && n < 32;) {
        list[n++] = atoi(p);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    cvx_precision precs[2] = {CVX_PRECISION_F32, CVX_PRECISION_BF16};
    int p0 = !strcmp(prec_arg, "bf16"), p1 = strcmp(prec_arg, "f32") ? 2 : 1;
    g2b.layers = gwan.layers = layers;
    if (F) g2b.F = gwan.F = F;
    if (H) g2b.H = gwan.H = H;
    if (W) g2b.W = gwan.W = W;
    int bad = 0;
    for (int wan = 0; wan < 2; wan++) {
        if (strcmp(model, "all") && strcmp(model, wan ? "wan" : "2b")) continue;
        const grid *g = wan ? &gwan : &g2b;
        char dir[] = "/tmp/cvx_bench_threads_XXXXXX";
        if (!mkdtemp(dir)) cvx_die("mkdtemp failed");
        if (wan) bm_write_wan(dir, 12, g->layers, 8960, CVX_BF16);
        else bm_write_cogvideox(dir, 30, g->layers, 0, CVX_BF16);
        int tokens = wan ? g->F * (g->H / 2) * (g->W / 2) : 226 + g->F * (g->H / 2) * (g->W / 2);
        const char *label = wan ? "Wan2.1-1.3B" : "CogVideoX-2b";
        printf("%s dims, %d layers, bf16 weights, latent %dx%dx%d: %d tokens, batch 1\n", label, g->layers, g->F,
               g->H, g->W, tokens);
        for (int p = p0; p < p1; p++) bad |= compare(label, dir, wan, g, list, n, precs[p]);
        bm_rm_dir(dir);
    }
    printf("peak RSS %.2f GB\n", cvx_peak_rss_bytes() / 1e9);
    return bad;
}
