/* Stage 3 benchmark: the real CogVideoX VAE decoder configuration (block_out_channels
 * [128,256,256,512], layers_per_block 3, 32 groups, 16 latent channels) with random weights
 * (PyTorch default init ranges), decoding a random latent untiled with the upstream chunking.
 *
 *   bench_stage3 [T H W] [--threads N] [--bf16] [--no-winograd|--winograd2] [--precision f32|bf16]
 *   default latent 3×30×45 (-> 9×240×360); --bf16 stores the weights in bf16, --precision is the compute.
 *
 * Prints wall time, convolution GFLOP/s (nominal FLOPs, multiply-add = 2) and peak RSS, then one
 * line for bench/side_by_side.sh (which times PyTorch on the same case in the same run):
 *   RESULT case=vae precision=<f32|bf16> seconds=<wall s of the one decode> gflops=<rate> */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "error.h"
#include "gemm_fast.h"
#include "fileio.h"
#include "gemm.h"
#include "safetensors.h"
#include "stage3/cogvideox_vae.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {   /* xorshift64*, [0, 1) */
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return (double)((g_rng * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

static cvx_dtype g_store = CVX_F32;

static double cpu_seconds(void) {   /* user + system CPU of this process */
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

static void add_param(cvx_st_writer *w, const char *name, int ndim, const int64_t *shape, double bound,
                      double constant) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = bound > 0 ? (float)((2 * urand() - 1) * bound) : (float)constant;
    if (cvx_stw_add_f32(w, name, g_store, ndim, shape, v)) cvx_die_last_error();
    free(v);
}

static void add_conv(cvx_st_writer *w, const char *name, int cout, int cin, int k, int is2d) {
    char b[256];
    double fan_in = (double)cin * k * k * (is2d ? 1 : k), bound = 1.0 / sqrt(fan_in);
    snprintf(b, sizeof b, "%s.weight", name);
    if (is2d) add_param(w, b, 4, (int64_t[]){cout, cin, k, k}, bound, 0);
    else add_param(w, b, 5, (int64_t[]){cout, cin, k, k, k}, bound, 0);
    snprintf(b, sizeof b, "%s.bias", name);
    add_param(w, b, 1, (int64_t[]){cout}, bound, 0);
}

static void add_norm(cvx_st_writer *w, const char *name, int C, int zc) {
    char b[256];
    snprintf(b, sizeof b, "%s.norm_layer.weight", name);
    add_param(w, b, 1, (int64_t[]){C}, 0, 1.0);
    snprintf(b, sizeof b, "%s.norm_layer.bias", name);
    add_param(w, b, 1, (int64_t[]){C}, 0, 0.0);
    snprintf(b, sizeof b, "%s.conv_y.conv", name);
    add_conv(w, b, C, zc, 1, 0);
    snprintf(b, sizeof b, "%s.conv_b.conv", name);
    add_conv(w, b, C, zc, 1, 0);
}

static void add_resnet(cvx_st_writer *w, const char *name, int cin, int cout, int zc) {
    char b[256];
    snprintf(b, sizeof b, "%s.norm1", name), add_norm(w, b, cin, zc);
    snprintf(b, sizeof b, "%s.conv1.conv", name), add_conv(w, b, cout, cin, 3, 0);
    snprintf(b, sizeof b, "%s.norm2", name), add_norm(w, b, cout, zc);
    snprintf(b, sizeof b, "%s.conv2.conv", name), add_conv(w, b, cout, cout, 3, 0);
    if (cin != cout) snprintf(b, sizeof b, "%s.conv_shortcut", name), add_conv(w, b, cout, cin, 1, 0);
}

static void make_model(const char *dir) {
    const int bo[4] = {128, 256, 256, 512}, rev[4] = {512, 256, 256, 128}, zc = 16, lpb = 3;
    char path[4096], b[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"_class_name\": \"AutoencoderKLCogVideoX\", \"block_out_channels\": [128, 256, 256, 512],"
                      " \"latent_channels\": 16, \"layers_per_block\": 3, \"norm_num_groups\": 32, \"norm_eps\": 1e-06,"
                      " \"out_channels\": 3, \"scaling_factor\": 1.15258426, \"temporal_compression_ratio\": 4,"
                      " \"sample_height\": 480, \"sample_width\": 720, \"act_fn\": \"silu\"}";
    if (cvx_write_file_atomic(path, cfg, strlen(cfg))) cvx_die_last_error();
    (void)bo;
    cvx_st_writer *w = cvx_stw_new();
    add_conv(w, "decoder.conv_in.conv", rev[0], zc, 3, 0);
    for (int i = 0; i < 2; i++) snprintf(b, sizeof b, "decoder.mid_block.resnets.%d", i), add_resnet(w, b, 512, 512, zc);
    int out = rev[0];
    for (int i = 0; i < 4; i++) {
        int in = out;
        out = rev[i];
        for (int j = 0; j <= lpb; j++)
            snprintf(b, sizeof b, "decoder.up_blocks.%d.resnets.%d", i, j), add_resnet(w, b, j ? out : in, out, zc);
        if (i < 3) snprintf(b, sizeof b, "decoder.up_blocks.%d.upsamplers.0.conv", i), add_conv(w, b, out, out, 3, 1);
    }
    add_norm(w, "decoder.norm_out", 128, zc);
    add_conv(w, "decoder.conv_out.conv", 3, 128, 3, 0);
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    if (cvx_stw_write(w, path)) cvx_die_last_error();
    cvx_stw_free(w);
}

int main(int argc, char **argv) {
    int T = 3, h = 30, w = 45, threads = 0, pos = 0, tiled = 0;
    cvx_conv_algo algo = CVX_CONV_WINOGRAD4;
    cvx_precision prec = CVX_PRECISION_F32;
    int openblas = 0;
    int dims[3] = {T, h, w};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bf16")) g_store = CVX_BF16;
        else if (!strcmp(argv[i], "--no-winograd")) algo = CVX_CONV_DIRECT;
        else if (!strcmp(argv[i], "--winograd2")) algo = CVX_CONV_WINOGRAD2;
        else if (!strcmp(argv[i], "--tiled")) tiled = 1;
        else if (!strcmp(argv[i], "--openblas")) openblas = 1;   /* compare: f32 GEMMs on OpenBLAS */
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            if (cvx_precision_parse(argv[++i], CVX_WORK_CONV, &prec)) cvx_die_last_error();
        }  /* upstream's default tiles: 240x360 samples */
        else if (pos < 3) dims[pos++] = atoi(argv[i]);
    }
    T = dims[0], h = dims[1], w = dims[2];
    cvx_set_program_name("bench_stage3");
    cvx_set_threads(threads);
    char dir[] = "/tmp/cvx_bench_vae_XXXXXX";
    if (!mkdtemp(dir)) cvx_die("mkdtemp failed");
    make_model(dir);
    cogvideox_vae_decoder d;
    if (cogvideox_vae_load(&d, dir, NULL)) cvx_die_last_error();
    d.ctx->conv_algo = algo;
    if (cvx_ctx_set_precision(d.ctx, prec)) cvx_die_last_error();
    if (openblas && d.ctx->kernels) cvx_kernels_force(d.ctx->kernels, CVX_KPATH_NO_ONEDNN);
    size_t n = (size_t)d.latent_channels * T * h * w;
    float *z = cvx_alloc_f32(n);   // [16, T, h, w]
    for (size_t i = 0; i < n; i += 2) {
        double u1 = urand() + 1e-12, u2 = urand(), r = sqrt(-2 * log(u1));
        z[i] = (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < n) z[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
    int To = cogvideox_vae_output_frames(&d, T), Ho = h * d.spatial_ratio, Wo = w * d.spatial_ratio;
    size_t rss0 = cvx_peak_rss_bytes();
    double t0 = cvx_time(), c0 = cpu_seconds();
    float *out;
    if (tiled) {
        out = cogvideox_vae_decode_tiled(&d, z, T, h, w, 240, 360, &To, &Ho, &Wo, NULL);
    } else {
        out = cvx_alloc_f32((size_t)d.out_channels * To * Ho * Wo);
        cogvideox_vae_decode_chunked(&d, z, T, h, w, out, NULL);
    }
    double dt = cvx_time() - t0, cpu = cpu_seconds() - c0, fl = d.ctx->conv_flops;
    double s = 0;
    for (size_t i = 0; i < (size_t)d.out_channels * To * Ho * Wo; i++) s += out[i];
    printf("bench_stage3: VAE decode latent [16,%d,%d,%d] -> [3,%d,%d,%d] (%s weights, %s compute, %d threads%s): %.2f s, "
           "%.0f GFLOP conv (direct count), %.1f GFLOP/s effective, 3x3 convs %.1f s, CPU %.1f s, peak RSS %.2f GB "
           "(%.2f GB before decode), checksum %.6g\n",
           T, h, w, To, Ho, Wo, g_store == CVX_BF16 ? "bf16" : "f32", cvx_precision_name(prec), cvx_threads(), tiled ? ", tiled 240x360" : "", dt, fl / 1e9, fl / dt / 1e9,
           d.ctx->conv_seconds, cpu,
           cvx_peak_rss_bytes() / 1e9, rss0 / 1e9, s);
    printf("RESULT case=vae precision=%s seconds=%.4f gflops=%.1f\n", cvx_precision_name(prec), dt, fl / dt / 1e9);
    cogvideox_vae_free(&d);
    free(z), free(out);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    return 0;
}
