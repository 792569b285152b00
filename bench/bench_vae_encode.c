/* VAE encoder benchmark: the real CogVideoX VAE encoder configuration (block_out_channels
 * [128,256,256,512], layers_per_block 3, 32 groups, 16 latent channels; real_configs.md) with
 * random weights (PyTorch default init ranges), encoding random pixels with upstream's frame
 * batches (8, the first one 8 + F % 8) and carried causal caches, optionally in upstream's
 * default 240×360 tiles.
 *
 *   bench_vae_encode [F H W] [--threads N] [--bf16] [--tiled]     default 9 frames of 96×144
 *
 * The weights are written by a child process, so the peak RSS printed is the encoder's own
 * (mmapped weights + activations + the input/output tensors). Prints wall time, conv GFLOP/s
 * of the 3×3×3 convolutions (nominal direct count) and peak RSS. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "safetensors.h"
#include "stage3/cogvideox_vae.h"
#include "stage3/cogvideox_vae_encoder.h"

typedef struct {
    uint64_t rng;
    cvx_dtype store;
    cvx_st_writer *w;
} maker;

static double urand(uint64_t *s) {   /* xorshift64*, [0, 1) */
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (double)((*s * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

static void add_param(maker *m, const char *name, int ndim, const int64_t *shape, double bound, double constant) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *v = cvx_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = bound > 0 ? (float)((2 * urand(&m->rng) - 1) * bound) : (float)constant;
    if (cvx_stw_add_f32(m->w, name, m->store, ndim, shape, v)) cvx_die_last_error();
    free(v);
}

static void add_conv(maker *m, const char *name, int cout, int cin, int k, int is2d) {
    char b[256];
    double fan_in = (double)cin * k * k * (is2d ? 1 : k), bound = 1.0 / sqrt(fan_in);
    snprintf(b, sizeof b, "%s.weight", name);
    if (is2d) add_param(m, b, 4, (int64_t[]){cout, cin, k, k}, bound, 0);
    else add_param(m, b, 5, (int64_t[]){cout, cin, k, k, k}, bound, 0);
    snprintf(b, sizeof b, "%s.bias", name);
    add_param(m, b, 1, (int64_t[]){cout}, bound, 0);
}

static void add_norm(maker *m, const char *name, int C) {
    char b[256];
    snprintf(b, sizeof b, "%s.weight", name), add_param(m, b, 1, (int64_t[]){C}, 0, 1.0);
    snprintf(b, sizeof b, "%s.bias", name), add_param(m, b, 1, (int64_t[]){C}, 0, 0.0);
}

static void add_resnet(maker *m, const char *name, int cin, int cout) {
    char b[256];
    snprintf(b, sizeof b, "%s.norm1", name), add_norm(m, b, cin);
    snprintf(b, sizeof b, "%s.conv1.conv", name), add_conv(m, b, cout, cin, 3, 0);
    snprintf(b, sizeof b, "%s.norm2", name), add_norm(m, b, cout);
    snprintf(b, sizeof b, "%s.conv2.conv", name), add_conv(m, b, cout, cout, 3, 0);
    if (cin != cout) snprintf(b, sizeof b, "%s.conv_shortcut", name), add_conv(m, b, cout, cin, 1, 0);
}

static void make_model(const char *dir, cvx_dtype store) {
    const int bo[4] = {128, 256, 256, 512}, lc = 16, lpb = 3;
    char path[4096], b[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"_class_name\": \"AutoencoderKLCogVideoX\", \"block_out_channels\": [128, 256, 256, 512],"
                      " \"down_block_types\": [\"CogVideoXDownBlock3D\", \"CogVideoXDownBlock3D\","
                      " \"CogVideoXDownBlock3D\", \"CogVideoXDownBlock3D\"], \"in_channels\": 3,"
                      " \"latent_channels\": 16, \"layers_per_block\": 3, \"norm_num_groups\": 32, \"norm_eps\": 1e-06,"
                      " \"out_channels\": 3, \"scaling_factor\": 1.15258426, \"temporal_compression_ratio\": 4,"
                      " \"sample_height\": 480, \"sample_width\": 720, \"act_fn\": \"silu\", \"use_quant_conv\": false}";
    if (cvx_write_file_atomic(path, cfg, strlen(cfg))) cvx_die_last_error();
    maker m = {0x9E3779B97F4A7C15ull, store, cvx_stw_new()};
    add_conv(&m, "encoder.conv_in.conv", bo[0], 3, 3, 0);
    int out = bo[0];
    for (int i = 0; i < 4; i++) {
        int in = out;
        out = bo[i];
        for (int j = 0; j < lpb; j++)
            snprintf(b, sizeof b, "encoder.down_blocks.%d.resnets.%d", i, j), add_resnet(&m, b, j ? out : in, out);
        if (i < 3) snprintf(b, sizeof b, "encoder.down_blocks.%d.downsamplers.0.conv", i), add_conv(&m, b, out, out, 3, 1);
    }
    for (int i = 0; i < 2; i++) snprintf(b, sizeof b, "encoder.mid_block.resnets.%d", i), add_resnet(&m, b, 512, 512);
    add_norm(&m, "encoder.norm_out", 512);
    add_conv(&m, "encoder.conv_out.conv", 2 * lc, 512, 3, 0);
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    if (cvx_stw_write(m.w, path)) cvx_die_last_error();
    cvx_stw_free(m.w);
}

int main(int argc, char **argv) {
    int threads = 0, pos = 0, tiled = 0, dims[3] = {9, 96, 144};
    cvx_dtype store = CVX_F32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bf16")) store = CVX_BF16;
        else if (!strcmp(argv[i], "--tiled")) tiled = 1;   /* upstream's default tiles: 240x360 samples */
        else if (pos < 3) dims[pos++] = atoi(argv[i]);
    }
    const int F = dims[0], H = dims[1], W = dims[2];
    cvx_set_program_name("bench_vae_encode");
    cvx_set_threads(threads);
    char dir[] = "/tmp/cvx_bench_vae_enc_XXXXXX";
    if (!mkdtemp(dir)) cvx_die("mkdtemp failed");
    pid_t pid = fork();   /* the writer holds every weight in memory: keep that out of our RSS */
    if (pid == 0) {
        make_model(dir, store);
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) cvx_die("writing the weights failed");
    cogvideox_vae_encoder e;
    if (cogvideox_vae_encoder_load(&e, dir, NULL)) cvx_die_last_error();
    const size_t n = (size_t)3 * F * H * W;
    float *x = cvx_alloc_f32(n);   // [3, F, H, W] in [-1, 1]
    uint64_t s = 12345;
    for (size_t i = 0; i < n; i++) x[i] = (float)(2 * urand(&s) - 1);
    size_t rss0 = cvx_peak_rss_bytes();
    double t0 = cvx_time(), f0 = e.ctx->conv_flops;
    int T, h, w;
    float *m;
    if (tiled && cogvideox_vae_encode_tiling_applies(&e, H, W, 240, 360)) {
        m = cogvideox_vae_encode_tiled(&e, x, F, H, W, 240, 360, &T, &h, &w, NULL);
    } else {
        T = cogvideox_vae_encoded_frames(&e, F), h = cogvideox_vae_encoded_size(&e, H), w = cogvideox_vae_encoded_size(&e, W);
        m = cvx_alloc_f32((size_t)2 * e.latent_channels * T * h * w);
        cogvideox_vae_encode_batched(&e, x, F, H, W, m, NULL);
    }
    const double dt = cvx_time() - t0, fl = e.ctx->conv_flops - f0;
    double sum = 0;
    for (size_t i = 0; i < (size_t)2 * e.latent_channels * T * h * w; i++) sum += m[i];
    printf("bench_vae_encode: pixels [3,%d,%d,%d] -> moments [%d,%d,%d,%d] (%s weights, %d threads%s): %.2f s, "
           "%.0f GFLOP in 3x3x3 convs (direct count), %.1f GFLOP/s effective, peak RSS %.3f GB (%.3f GB before "
           "encode), checksum %.6g\n",
           F, H, W, 2 * e.latent_channels, T, h, w, store == CVX_BF16 ? "bf16" : "f32", cvx_threads(),
           tiled ? ", tiles 240x360" : "", dt, fl / 1e9, fl / dt / 1e9, cvx_peak_rss_bytes() / 1e9, rss0 / 1e9, sum);
    printf("bench_vae_encode: estimated peak (activations + caches + input, untiled) %.3f GB; for 49x480x720: %.2f GB\n",
           cogvideox_vae_encode_estimate_peak_bytes(&e, F, H, W) / 1e9, cogvideox_vae_encode_estimate_peak_bytes(&e, 49, 480, 720) / 1e9);
    cogvideox_vae_encoder_free(&e);
    free(x), free(m);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    return 0;
}
