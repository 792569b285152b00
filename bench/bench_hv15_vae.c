/* HunyuanVideo-1.5 VAE decode benchmark at the real widths: AutoencoderKLHunyuanVideo15 with
 * block_out_channels (128, 256, 512, 1024, 1024), 2 resnets per level, 32 latent channels, ×16
 * spatial, ×4 temporal (random weights, bf16 by default as the published files; a diffusers dir
 * written to a temp dir and mmapped), decoding random latents [32, (frames − 1)/4 + 1, H/16, W/16]
 * untiled or tiled (upstream's enable_tiling: 256 px tiles, overlap 0.25).
 * Loads the decoder only (as stage 3). Prints the wall and process CPU time of the decode, the
 * convolutions' FLOPs, the peak RSS (the weights' mapped pages, the decoder's working set and the
 * output video [3, T, H, W] f32) and the peak after loading, and one line:
 *   RESULT case=hv15_vae frames=<T> height=<H> width=<W> tiled=<0|1> seconds=.. cpu_seconds=.. peak_rss_gb=.. conv_gflop=..
 * The decode streams one latent frame at a time, so the working set does not grow with the frame
 * count (the output does): compare two frame counts to see it. The machine may be shared:
 * compare CPU seconds, not wall time.
 *
 *   bench_hv15_vae [--frames 5] [--height 256] [--width 256] [--tiled] [--threads N] [--f32-weights] */
#include "bench_models.h"
#include "error.h"
#include "runenv.h"
#include "safetensors.h"
#include "stage3/hunyuan15_vae.h"

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

static cvx_dtype store;

static void add_conv(cvx_st_writer *w, const char *name, int64_t cin, int64_t cout, int k) {
    char n[340];
    snprintf(n, sizeof n, "%s.weight", name);
    bm_add_random(w, store, n, 5, (int64_t[]){cout, cin, k, k, k}, 1.0f / sqrtf((float)(cin * k * k * k)), 0);
    snprintf(n, sizeof n, "%s.bias", name);
    bm_add_random(w, store, n, 1, (int64_t[]){cout}, 0.02f, 0);
}

static void add_cconv(cvx_st_writer *w, const char *name, int64_t cin, int64_t cout) {
    char n[320];
    snprintf(n, sizeof n, "%s.conv", name);
    add_conv(w, n, cin, cout, 3);
}

static void add_rms(cvx_st_writer *w, const char *name, int64_t C) {
    char n[340];
    snprintf(n, sizeof n, "%s.gamma", name);
    bm_add_random(w, store, n, 4, (int64_t[]){C, 1, 1, 1}, 0.05f, 1.0f);
}

static void add_resnet(cvx_st_writer *w, const char *name, int64_t cin, int64_t cout) {
    char n[300];
#define N_(s) (snprintf(n, sizeof n, "%s.%s", name, s), n)
    add_rms(w, N_("norm1"), cin);
    add_cconv(w, N_("conv1"), cin, cout);
    add_rms(w, N_("norm2"), cout);
    add_cconv(w, N_("conv2"), cout, cout);
    if (cin != cout) add_conv(w, N_("conv_shortcut"), cin, cout, 1);
#undef N_
}

static void add_mid(cvx_st_writer *w, const char *half, int64_t C) {
    char n[300];
#define N_(s) (snprintf(n, sizeof n, "%s.mid_block.%s", half, s), n)
    add_resnet(w, N_("resnets.0"), C, C);
    add_resnet(w, N_("resnets.1"), C, C);
    add_rms(w, N_("attentions.0.norm"), C);
    add_conv(w, N_("attentions.0.to_q"), C, C, 1);
    add_conv(w, N_("attentions.0.to_k"), C, C, 1);
    add_conv(w, N_("attentions.0.to_v"), C, C, 1);
    add_conv(w, N_("attentions.0.proj_out"), C, C, 1);
#undef N_
}

/* the real VAE's tensors, by the loader's layout (stage3/hunyuan15_vae.c) */
static void write_vae(const char *dir) {
    enum { NL = 5, LC = 32, LPB = 2 };
    const int64_t bo[NL] = {128, 256, 512, 1024, 1024};
    FILE *f = bm_open_config(dir);
    fprintf(f, "{\"_class_name\": \"AutoencoderKLHunyuanVideo15\", \"block_out_channels\": [128, 256, 512, 1024, "
               "1024], \"latent_channels\": 32, \"layers_per_block\": 2, \"in_channels\": 3, \"out_channels\": 3, "
               "\"spatial_compression_ratio\": 16, \"temporal_compression_ratio\": 4, \"downsample_match_channel\": "
               "true, \"upsample_match_channel\": true, \"scaling_factor\": 1.03682}\n");
    fclose(f);
    cvx_st_writer *w = cvx_stw_new();
    char n[300];
    /* decoder: levels from the widest (rev), upsamplers on the first 4 (temporal on the first 2) */
    int64_t rev[NL];
    for (int i = 0; i < NL; i++) rev[i] = bo[NL - 1 - i];
    add_cconv(w, "decoder.conv_in", LC, rev[0]);
    add_mid(w, "decoder", rev[0]);
    int64_t in = rev[0];
    for (int i = 0; i < NL; i++) {
        for (int j = 0; j < LPB + 1; j++) {
            snprintf(n, sizeof n, "decoder.up_blocks.%d.resnets.%d", i, j);
            add_resnet(w, n, j ? rev[i] : in, rev[i]);
        }
        in = rev[i];
        if (i < 4) {
            const int64_t out = rev[i + 1], factor = i < 2 ? 8 : 4;
            snprintf(n, sizeof n, "decoder.up_blocks.%d.upsamplers.0.conv", i);
            add_cconv(w, n, rev[i], out * factor);
            in = out;
        }
    }
    add_rms(w, "decoder.norm_out", rev[NL - 1]);
    add_cconv(w, "decoder.conv_out", rev[NL - 1], 3);
    /* encoder: downsamplers on the first 4 (temporal from level 2) */
    add_cconv(w, "encoder.conv_in", 3, bo[0]);
    in = bo[0];
    for (int i = 0; i < NL; i++) {
        for (int j = 0; j < LPB; j++) {
            snprintf(n, sizeof n, "encoder.down_blocks.%d.resnets.%d", i, j);
            add_resnet(w, n, j ? bo[i] : in, bo[i]);
        }
        in = bo[i];
        if (i < 4) {
            const int64_t out = bo[i + 1], factor = i >= 2 ? 8 : 4;
            snprintf(n, sizeof n, "encoder.down_blocks.%d.downsamplers.0.conv", i);
            add_cconv(w, n, bo[i], out / factor);
            in = out;
        }
    }
    add_mid(w, "encoder", bo[NL - 1]);
    add_rms(w, "encoder.norm_out", bo[NL - 1]);
    add_cconv(w, "encoder.conv_out", bo[NL - 1], 2 * LC);
    bm_write_weights(dir, w);
}

int main(int argc, char **argv) {
    int frames = 5, height = 256, width = 256, tiled = 0, threads = 0, f32w = 0;
    static const struct option opts[] = {{"frames", 1, 0, 'f'}, {"height", 1, 0, 'h'}, {"width", 1, 0, 'w'},
                                          {"tiled", 0, 0, 't'},  {"threads", 1, 0, 'n'}, {"f32-weights", 0, 0, 'F'},
                                          {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (c == 'f') frames = atoi(optarg);
        else if (c == 'h') height = atoi(optarg);
        else if (c == 'w') width = atoi(optarg);
        else if (c == 't') tiled = 1;
        else if (c == 'n') threads = atoi(optarg);
        else if (c == 'F') f32w = 1;
        else return 2;
    }
    if (frames < 1 || (frames - 1) % 4 || height < 16 || height % 16 || width < 16 || width % 16)
        cvx_die("--frames 4k+1, --height/--width multiples of 16");
    cvx_set_program_name("bench_hv15_vae");
    cvx_set_threads(threads);
    store = f32w ? CVX_F32 : CVX_BF16;
    char dir[] = "/tmp/bench_hv15_vae_XXXXXX";
    if (!mkdtemp(dir)) cvx_die("mkdtemp failed");
    pid_t pid = fork();   /* the writer's memory does not count in this process's peak RSS */
    if (pid == 0) {
        write_vae(dir);
        _exit(0);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
        cvx_die("writing the random VAE failed");
    cvx_ctx *ctx = cvx_ctx_new(cvx_threads());
    hv15_vae *v = hv15_vae_load_parts(dir, ctx, VAE_PART_DECODER);   /* as stage 3: the encoder not read */
    if (!v) cvx_die_last_error();
    const double rss_loaded = peak_rss_gb();
    const int F = (frames - 1) / 4 + 1, h = height / 16, w = width / 16;
    const size_t nz = (size_t)32 * F * h * w;
    float *z = cvx_alloc_f32(nz), *video = cvx_alloc_f32((size_t)3 * frames * height * width);
    for (size_t i = 0; i < nz; i++) z[i] = bm_urand();
    hv15_vae_tiling tl;
    hv15_vae_tiling_default(&tl);
    const double t0 = cvx_time(), c0 = cpu_seconds();
    if (hv15_vae_decode(v, z, F, h, w, tiled ? &tl : NULL, video)) cvx_die_last_error();
    const double secs = cvx_time() - t0, cpu = cpu_seconds() - c0;
    printf("decode [32, %d, %d, %d] -> %d frames %dx%d (%s): %.2f s wall, %.2f s CPU, peak RSS %.2f GB (%.2f GB "
           "after loading), %.1f GFLOP of convs (%.1f s wall in them)\n", F, h, w, frames, width, height,
           tiled ? "tiled" : "untiled", secs, cpu, peak_rss_gb(), rss_loaded, ctx->conv_flops * 1e-9, ctx->conv_seconds);
    printf("RESULT case=hv15_vae frames=%d height=%d width=%d tiled=%d seconds=%.3f cpu_seconds=%.3f peak_rss_gb=%.3f "
           "conv_gflop=%.1f\n", frames, height, width, tiled, secs, cpu, peak_rss_gb(), ctx->conv_flops * 1e-9);
    free(z);
    free(video);
    hv15_vae_free(v);
    cvx_ctx_free(ctx);
    bm_rm_dir(dir);
    return 0;
}
