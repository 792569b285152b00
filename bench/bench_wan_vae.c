/* Wan VAE benchmark: the real Wan 2.1 VAE configuration (base_dim 96, z_dim 16, dim_mult
 * [1,2,4,4], num_res_blocks 2, temperal_downsample [false,true,true]) or with --wan22 the Wan 2.2
 * (TI2V-5B) VAE's (base_dim 160, decoder_base_dim 256, z_dim 48, is_residual, patch_size 2:
 * latents ×16 spatially) with random weights
 * (PyTorch default init ranges), decoding a random latent of F frames (streamed: each batch of
 * frames is checksummed and dropped, as a video writer would consume it), optionally tiled.
 *
 *   bench_wan_vae [F h w] [--tiled [MIN,STRIDE]] [--threads N] [--precision f32|bf16]
 *                 [--bf16-weights] [--model DIR] [--encode] [--wan22]
 *   default latent 3×60×104 (-> 9 frames 480×832); --tiled: upstream's 256/192-sample tiles;
 *   --model DIR: keep the random model there and reuse it next time (it is ~0.5 GB in f32);
 *   --encode: also encode the 1 + 4(F−1) frames of that size.
 *
 * The model is written by a child process, so this process's peak RSS is the load + the decode
 * (mapped weights it touches included). Prints per latent frame the wall time and the peak RSS so
 * far — the decode holds only the causal caches and one frame batch, so the peak after the second
 * latent frame is the peak of any length — then one summary line:
 *   RESULT case=wan_vae F=.. h=.. w=.. tiled=0|1 precision=.. seconds=.. peak_rss_gb=.. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "runenv.h"
#include "safetensors.h"
#include "stage3/wan_vae.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {   /* xorshift64*, [0, 1) */
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return (double)((g_rng * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

static cvx_dtype g_store = CVX_F32;

static void add_param(cvx_st_writer *w, const char *name, int ndim, const int64_t *shape, double bound) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = bound > 0 ? (float)((2 * urand() - 1) * bound) : 1.0f;
    if (cvx_stw_add_f32(w, name, g_store, ndim, shape, v)) cvx_die_last_error();
    free(v);
}

/* Conv weight [cout, cin, kt?, kh, kw] + bias, kaiming-uniform(a=√5) range 1/√fan_in. */
static void add_conv(cvx_st_writer *w, const char *name, int cout, int cin, int kt, int kh, int kw, int is2d) {
    char b[256];
    const double bound = 1.0 / sqrt((double)cin * kt * kh * kw);
    snprintf(b, sizeof b, "%s.weight", name);
    if (is2d) add_param(w, b, 4, (int64_t[]){cout, cin, kh, kw}, bound);
    else add_param(w, b, 5, (int64_t[]){cout, cin, kt, kh, kw}, bound);
    snprintf(b, sizeof b, "%s.bias", name);
    add_param(w, b, 1, (int64_t[]){cout}, bound);
}

static void add_gamma(cvx_st_writer *w, const char *name, int C, int images) {
    char b[288];
    snprintf(b, sizeof b, "%s.gamma", name);
    if (images) add_param(w, b, 3, (int64_t[]){C, 1, 1}, 0);
    else add_param(w, b, 4, (int64_t[]){C, 1, 1, 1}, 0);
}

static void add_res(cvx_st_writer *w, const char *name, int cin, int cout) {
    char b[256];
    snprintf(b, sizeof b, "%s.norm1", name), add_gamma(w, b, cin, 0);
    snprintf(b, sizeof b, "%s.conv1", name), add_conv(w, b, cout, cin, 3, 3, 3, 0);
    snprintf(b, sizeof b, "%s.norm2", name), add_gamma(w, b, cout, 0);
    snprintf(b, sizeof b, "%s.conv2", name), add_conv(w, b, cout, cout, 3, 3, 3, 0);
    if (cin != cout) snprintf(b, sizeof b, "%s.conv_shortcut", name), add_conv(w, b, cout, cin, 1, 1, 1, 0);
}

static void add_mid(cvx_st_writer *w, const char *name, int C) {
    char b[256];
    snprintf(b, sizeof b, "%s.resnets.0", name), add_res(w, b, C, C);
    snprintf(b, sizeof b, "%s.resnets.1", name), add_res(w, b, C, C);
    snprintf(b, sizeof b, "%s.attentions.0.norm", name), add_gamma(w, b, C, 1);
    snprintf(b, sizeof b, "%s.attentions.0.to_qkv", name), add_conv(w, b, 3 * C, C, 1, 1, 1, 1);
    snprintf(b, sizeof b, "%s.attentions.0.proj", name), add_conv(w, b, C, C, 1, 1, 1, 1);
}

/* wan22: the Wan 2.2 VAE's residual levels (names up_blocks.I.upsampler / down_blocks.I.resnets.J
 * and .downsampler, no input halving, up-samplers keeping their channels; the shortcuts have no
 * weights), 12 patchified channels in and out. */
static void make_model(const char *dir, int wan22) {
    const int base = wan22 ? 160 : 96, dbase = wan22 ? 256 : 96, z = wan22 ? 48 : 16, nrb = 2, mult[4] = {1, 2, 4, 4},
              temporal[3] = {0, 1, 1}, ch = wan22 ? 12 : 3;
    char path[4096], b[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"_class_name\": \"AutoencoderKLWan\", \"base_dim\": 96, \"z_dim\": 16, \"dim_mult\": [1, 2, 4, 4],"
                      " \"num_res_blocks\": 2, \"attn_scales\": [], \"temperal_downsample\": [false, true, true],"
                      " \"dropout\": 0.0}";
    char cfg22[2048];
    if (wan22) {   /* the 48 real channel statistics do not matter for the timing: zeros and ones */
        int n = snprintf(cfg22, sizeof cfg22, "{\"_class_name\": \"AutoencoderKLWan\", \"base_dim\": 160, "
                         "\"decoder_base_dim\": 256, \"z_dim\": 48, \"dim_mult\": [1, 2, 4, 4], \"num_res_blocks\": 2, "
                         "\"attn_scales\": [], \"temperal_downsample\": [false, true, true], \"is_residual\": true, "
                         "\"patch_size\": 2, \"in_channels\": 12, \"out_channels\": 12, \"latents_mean\": [");
        for (int i = 0; i < 48; i++) n += snprintf(cfg22 + n, sizeof cfg22 - n, "%s0", i ? ", " : "");
        n += snprintf(cfg22 + n, sizeof cfg22 - n, "], \"latents_std\": [");
        for (int i = 0; i < 48; i++) n += snprintf(cfg22 + n, sizeof cfg22 - n, "%s1", i ? ", " : "");
        snprintf(cfg22 + n, sizeof cfg22 - n, "]}");
        cfg = cfg22;
    }
    if (cvx_write_file_atomic(path, cfg, strlen(cfg))) cvx_die_last_error();
    cvx_st_writer *w = cvx_stw_new();
    /* decoder */
    int dims[5] = {dbase * mult[3], dbase * mult[3], dbase * mult[2], dbase * mult[1], dbase * mult[0]};
    add_conv(w, "post_quant_conv", z, z, 1, 1, 1, 0);
    add_conv(w, "decoder.conv_in", dims[0], z, 3, 3, 3, 0);
    add_mid(w, "decoder.mid_block", dims[0]);
    for (int i = 0; i < 4; i++) {
        int in = i && !wan22 ? dims[i] / 2 : dims[i], out = dims[i + 1];
        for (int j = 0; j <= nrb; j++, in = out)
            snprintf(b, sizeof b, "decoder.up_blocks.%d.resnets.%d", i, j), add_res(w, b, in, out);
        if (i == 3) continue;
        const char *up = wan22 ? "upsampler" : "upsamplers.0";
        snprintf(b, sizeof b, "decoder.up_blocks.%d.%s.resample.1", i, up), add_conv(w, b, wan22 ? out : out / 2, out, 1, 3, 3, 1);
        if (temporal[2 - i])
            snprintf(b, sizeof b, "decoder.up_blocks.%d.%s.time_conv", i, up), add_conv(w, b, 2 * out, out, 3, 1, 1, 0);
    }
    add_gamma(w, "decoder.norm_out", dims[4], 0);
    add_conv(w, "decoder.conv_out", ch, dims[4], 3, 3, 3, 0);
    /* encoder */
    int ed[5] = {base, base * mult[0], base * mult[1], base * mult[2], base * mult[3]}, k = 0;
    add_conv(w, "encoder.conv_in", ed[0], ch, 3, 3, 3, 0);
    for (int i = 0; i < 4; i++) {
        int in = ed[i], out = ed[i + 1];
        char pre[96];
        for (int j = 0; j < nrb; j++, in = out) {
            if (wan22) snprintf(b, sizeof b, "encoder.down_blocks.%d.resnets.%d", i, j);
            else snprintf(b, sizeof b, "encoder.down_blocks.%d", k++);
            add_res(w, b, in, out);
        }
        if (i == 3) continue;
        if (wan22) snprintf(pre, sizeof pre, "encoder.down_blocks.%d.downsampler", i);
        else snprintf(pre, sizeof pre, "encoder.down_blocks.%d", k);
        snprintf(b, sizeof b, "%s.resample.1", pre), add_conv(w, b, out, out, 1, 3, 3, 1);
        if (temporal[i]) snprintf(b, sizeof b, "%s.time_conv", pre), add_conv(w, b, out, out, 3, 1, 1, 0);
        k++;
    }
    add_mid(w, "encoder.mid_block", ed[4]);
    add_gamma(w, "encoder.norm_out", ed[4], 0);
    add_conv(w, "encoder.conv_out", 2 * z, ed[4], 3, 3, 3, 0);
    add_conv(w, "quant_conv", 2 * z, 2 * z, 1, 1, 1, 0);
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    if (cvx_stw_write(w, path)) cvx_die_last_error();
    cvx_stw_free(w);
}

static double cpu_seconds(void) {   /* user + system CPU of this process */
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

typedef struct {
    double t_start, t_last, sum;
    int frames;
} sink;

static int consume(void *user, const float *frames, int t0, int n, int H, int W) {
    sink *s = user;
    for (size_t i = 0; i < (size_t)3 * n * H * W; i++) s->sum += frames[i];
    s->frames += n;
    const double now = cvx_time();
    printf("  frames %2d..%2d: %6.2f s, peak RSS so far %.2f GB\n", t0, t0 + n - 1, now - s->t_last,
           cvx_peak_rss_bytes() / 1e9);
    fflush(stdout);
    s->t_last = now;
    return 0;
}

int main(int argc, char **argv) {
    cvx_runtime_setup(argc, argv);   /* GOMP_SPINCOUNT as the stage programs run (issue 14) */
    int dims[3] = {3, 60, 104}, pos = 0, threads = 0, tiled = 0, encode = 0, wan22 = 0;
    wan_vae_tiling tiling;
    wan_vae_tiling_default(&tiling);
    cvx_precision prec = CVX_PRECISION_F32;
    const char *keep = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bf16-weights")) g_store = CVX_BF16;
        else if (!strcmp(argv[i], "--encode")) encode = 1;
        else if (!strcmp(argv[i], "--wan22")) wan22 = 1;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) keep = argv[++i];
        else if (!strcmp(argv[i], "--tiled")) {
            tiled = 1;
            int mn, st;
            if (i + 1 < argc && sscanf(argv[i + 1], "%d,%d", &mn, &st) == 2) {
                tiling.min_h = tiling.min_w = mn, tiling.stride_h = tiling.stride_w = st;
                i++;
            }
        } else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            if (cvx_precision_parse(argv[++i], CVX_WORK_CONV, &prec)) cvx_die_last_error();
        } else if (pos < 3) dims[pos++] = atoi(argv[i]);
        else cvx_die("usage: bench_wan_vae [F h w] [--tiled [MIN,STRIDE]] [--threads N] [--precision f32|bf16] "
                     "[--bf16-weights] [--model DIR] [--encode] [--wan22]");
    }
    const int F = dims[0], h = dims[1], w = dims[2];
    cvx_set_program_name("bench_wan_vae");
    cvx_set_threads(threads);
    char tmp[] = "/tmp/cvx_bench_wan_vae_XXXXXX", path[4200];
    const char *dir = keep;
    if (!dir) {
        if (!mkdtemp(tmp)) cvx_die("mkdtemp failed");
        dir = tmp;
    } else {
        mkdir(dir, 0755);
    }
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    if (access(path, R_OK) != 0) {   /* written in a child: its memory does not count in our peak */
        pid_t pid = fork();
        if (pid == 0) {
            make_model(dir, wan22);
            _exit(0);
        }
        int st;
        if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) cvx_die("writing the model failed");
    }
    wan_vae *v = wan_vae_load(dir, NULL);
    if (!v) cvx_die_last_error();
    if (cvx_ctx_set_precision(v->ctx, prec)) cvx_die_last_error();
    const size_t n = (size_t)v->cfg.z_dim * F * h * w;
    float *z = cvx_alloc_f32(n);   // [z_dim, F, h, w], standard normal like stage 2's latents
    for (size_t i = 0; i < n; i += 2) {
        double u1 = urand() + 1e-12, u2 = urand(), r = sqrt(-2 * log(u1));
        z[i] = (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < n) z[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
    const int T = wan_vae_decoded_frames(v, F), H = h * v->spatial_ratio, W = w * v->spatial_ratio;
    const int is_tiled = tiled && wan_vae_tiling_applies(v, h, w, &tiling);
    printf("bench_wan_vae: %s VAE, latent [%d,%d,%d,%d] -> [3,%d,%d,%d], %s weights, %s compute, %d threads, %s\n",
           wan22 ? "Wan 2.2" : "Wan 2.1", v->cfg.z_dim, F, h, w, T, H, W, g_store == CVX_BF16 ? "bf16" : "f32", cvx_precision_name(prec), cvx_threads(),
           is_tiled ? "tiled" : "untiled");
    if (is_tiled)
        printf("  tiles %dx%d samples, stride %dx%d (%d decoder calls)\n", tiling.min_h, tiling.min_w, tiling.stride_h,
               tiling.stride_w, wan_vae_decode_steps(v, F, h, w, &tiling));
    const size_t rss0 = cvx_peak_rss_bytes();
    sink s = {cvx_time(), cvx_time(), 0, 0};
    const double c0 = cpu_seconds();
    if (wan_vae_decode(v, z, F, h, w, tiled ? &tiling : NULL, consume, &s, NULL)) cvx_die_last_error();
    const double dt = cvx_time() - s.t_start, fl = v->ctx->conv_flops;
    printf("bench_wan_vae: decode %.2f s (%.2f s per latent frame; CPU %.1f s, convs %.1f s), conv %.0f GFLOP nominal "
           "(%.1f GFLOP/s), peak RSS %.2f GB (%.2f GB before decoding), checksum %.6g\n",
           dt, dt / F, cpu_seconds() - c0, v->ctx->conv_seconds, fl / 1e9, fl / dt / 1e9, cvx_peak_rss_bytes() / 1e9,
           rss0 / 1e9, s.sum);
    printf("  wan_vae_estimate_peak_bytes: %.2f GB\n", wan_vae_estimate_peak_bytes(v, F, h, w, tiled ? &tiling : NULL) / 1e9);
    printf("RESULT case=%s F=%d h=%d w=%d tiled=%d precision=%s seconds=%.3f peak_rss_gb=%.3f\n",
           wan22 ? "wan22_vae" : "wan_vae", F, h, w, is_tiled,
           cvx_precision_name(prec), dt, cvx_peak_rss_bytes() / 1e9);
    if (encode) {
        float *video = cvx_alloc_f32((size_t)3 * T * H * W);
        for (size_t i = 0; i < (size_t)3 * T * H * W; i++) video[i] = (float)(2 * urand() - 1);
        int Fe, he, we;
        if (wan_vae_encoded_shape(v, T, H, W, &Fe, &he, &we)) cvx_die_last_error();
        float *mean = cvx_alloc_f32((size_t)v->cfg.z_dim * Fe * he * we), *logvar = cvx_alloc_f32((size_t)v->cfg.z_dim * Fe * he * we);
        const double t0 = cvx_time();
        if (wan_vae_encode(v, video, T, H, W, mean, logvar, NULL)) cvx_die_last_error();
        printf("bench_wan_vae: encode [3,%d,%d,%d] -> [%d,%d,%d,%d] %.2f s, peak RSS %.2f GB\n", T, H, W, v->cfg.z_dim,
               Fe, he, we, cvx_time() - t0, cvx_peak_rss_bytes() / 1e9);
        free(video), free(mean), free(logvar);
    }
    wan_vae_free(v);
    free(z);
    if (!keep) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd)) {}
    }
    return 0;
}
