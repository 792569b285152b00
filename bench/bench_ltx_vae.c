/* LTX-Video VAE decode benchmark: the 0.9.5+ timestep-conditioned decoder at its real widths
 * (decoder_block_out_channels 256, 512, 1024, 5 resnets per block, 128 latent channels; random
 * weights written by a child process, mmapped; the encoder is the tiny golden one's, untouched),
 * one decode of a video of `frames` × height × width, untiled or with upstream's tiles
 * (stage3/ltx_vae_tiles.h). Prints wall and CPU time and peak RSS, then
 *   RESULT case=ltx_vae frames=.. height=.. width=.. tiling=.. seconds=.. cpu_s=.. peak_rss_gb=..
 *
 *   bench_ltx_vae [--frames 121] [--height 512] [--width 768] [--tiling off|on] [--threads N]
 *                 [--f32-weights] */
#include "bench_models.h"
#include "error.h"
#include "gemm.h"
#include "rng.h"
#include "runenv.h"
#include "safetensors.h"
#include "stage2/ltx_pack.h"
#include "stage3/ltx_vae.h"
#include "stage3/ltx_vae_tiles.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TINY_VAE "tests/data/golden_ltx/vae095_decode_encode/model/vae/diffusion_pytorch_model.safetensors"

static void conv(cvx_st_writer *w, cvx_dtype store, const char *name, int64_t out, int64_t in) {
    char n[256];
    snprintf(n, sizeof n, "%s.conv.weight", name);
    bm_add_random(w, store, n, 5, (int64_t[]){out, in, 3, 3, 3}, 1.0f / sqrtf((float)in * 27), 0);
    snprintf(n, sizeof n, "%s.conv.bias", name);
    bm_add_random(w, store, n, 1, (int64_t[]){out}, 0.02f, 0);
}

static void time_embedder(cvx_st_writer *w, cvx_dtype store, const char *prefix, int64_t d) {
    char n[256];
    snprintf(n, sizeof n, "%s.time_embedder.timestep_embedder.linear_1.weight", prefix);
    bm_add_random(w, store, n, 2, (int64_t[]){d, 256}, 1.0f / 16, 0);
    snprintf(n, sizeof n, "%s.time_embedder.timestep_embedder.linear_1.bias", prefix);
    bm_add_random(w, store, n, 1, (int64_t[]){d}, 0.1f, 0);
    snprintf(n, sizeof n, "%s.time_embedder.timestep_embedder.linear_2.weight", prefix);
    bm_add_random(w, store, n, 2, (int64_t[]){d, d}, 1.0f / sqrtf((float)d), 0);
    snprintf(n, sizeof n, "%s.time_embedder.timestep_embedder.linear_2.bias", prefix);
    bm_add_random(w, store, n, 1, (int64_t[]){d}, 0.1f, 0);
}

static void resnets(cvx_st_writer *w, cvx_dtype store, const char *prefix, int64_t c, int n_res) {
    char n[256];
    for (int r = 0; r < n_res; r++) {
        snprintf(n, sizeof n, "%s.resnets.%d.conv1", prefix, r);
        conv(w, store, n, c, c);
        snprintf(n, sizeof n, "%s.resnets.%d.conv2", prefix, r);
        conv(w, store, n, c, c);
        snprintf(n, sizeof n, "%s.resnets.%d.scale_shift_table", prefix, r);
        bm_add_random(w, store, n, 2, (int64_t[]){4, c}, 0.1f, 0);
    }
}

/* the 0.9.5 VAE config: the real decoder, the tiny golden encoder (the decode never runs it) */
static void write_vae(const char *dir, cvx_dtype store) {
    FILE *f = bm_open_config(dir);
    fprintf(f, "{\"_class_name\": \"AutoencoderKLLTXVideo\", \"block_out_channels\": [8, 8, 16, 16, 32],"
               " \"decoder_block_out_channels\": [256, 512, 1024], \"decoder_causal\": false,"
               " \"decoder_inject_noise\": [false, false, false, false], \"decoder_layers_per_block\": [5, 5, 5, 5],"
               " \"decoder_spatio_temporal_scaling\": [true, true, true], \"down_block_types\": [\"LTXVideo095DownBlock3D\","
               " \"LTXVideo095DownBlock3D\", \"LTXVideo095DownBlock3D\", \"LTXVideo095DownBlock3D\"],"
               " \"downsample_type\": [\"spatial\", \"temporal\", \"spatiotemporal\", \"spatiotemporal\"],"
               " \"encoder_causal\": true, \"in_channels\": 3, \"latent_channels\": 128, \"layers_per_block\": [1, 1, 1, 1, 1],"
               " \"out_channels\": 3, \"patch_size\": 4, \"patch_size_t\": 1, \"resnet_norm_eps\": 1e-06,"
               " \"scaling_factor\": 1.0, \"spatial_compression_ratio\": 32, \"spatio_temporal_scaling\": [true, true, true, true],"
               " \"temporal_compression_ratio\": 8, \"timestep_conditioning\": true, \"upsample_factor\": [2, 2, 2],"
               " \"upsample_residual\": [true, true, true]}\n");
    fclose(f);
    cvx_st_writer *w = cvx_stw_new();
    cvx_safetensors *tiny = cvx_st_open(TINY_VAE);
    if (!tiny) cvx_die_last_error();
    for (int i = 0; i < cvx_st_count(tiny); i++) {   /* the encoder as is, its conv_out for 128 latent channels */
        const cvx_tensor *t = cvx_st_tensor(tiny, i);
        if (strncmp(t->name, "encoder.", 8) || strstr(t->name, "conv_out")) continue;
        float *d = cvx_tensor_f32_dup(t);
        if (cvx_stw_add_f32(w, t->name, CVX_F32, t->ndim, t->shape, d)) cvx_die_last_error();
        free(d);
    }
    conv(w, store, "encoder.conv_out", 129, 32);
    cvx_st_close(tiny);
    conv(w, store, "decoder.conv_in", 1024, 128);
    time_embedder(w, store, "decoder.mid_block", 4096);
    resnets(w, store, "decoder.mid_block", 1024, 5);
    const int64_t cin[3] = {1024, 512, 256};
    char n[256];
    for (int b = 0; b < 3; b++) {
        snprintf(n, sizeof n, "decoder.up_blocks.%d", b);
        time_embedder(w, store, n, 4 * (cin[b] / 2));
        snprintf(n, sizeof n, "decoder.up_blocks.%d.upsamplers.0.conv", b);
        conv(w, store, n, 4 * cin[b], cin[b]);
        snprintf(n, sizeof n, "decoder.up_blocks.%d", b);
        resnets(w, store, n, cin[b] / 2, 5);
    }
    time_embedder(w, store, "decoder", 256);
    bm_add_random(w, store, "decoder.scale_shift_table", 2, (int64_t[]){2, 128}, 0.1f, 0);
    conv(w, store, "decoder.conv_out", 48, 128);
    bm_add_random(w, CVX_F32, "decoder.timestep_scale_multiplier", 1, (int64_t[]){1}, 0, 1000);
    bm_add_random(w, CVX_F32, "latents_mean", 1, (int64_t[]){128}, 0.1f, 0);
    bm_add_random(w, CVX_F32, "latents_std", 1, (int64_t[]){128}, 0.1f, 1);
    bm_write_weights(dir, w);
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    cvx_runtime_setup(argc, argv);
    int frames = 121, height = 512, width = 768, threads = 0, tiling = 0;
    cvx_dtype store = CVX_BF16;
    static const struct option opts[] = {{"frames", 1, 0, 'f'}, {"height", 1, 0, 'H'},    {"width", 1, 0, 'W'},
                                         {"tiling", 1, 0, 'T'}, {"threads", 1, 0, 't'},   {"f32-weights", 0, 0, 'x'},
                                         {"help", 0, 0, 'h'},   {0, 0, 0, 0}};
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (o) {
        case 'f': frames = atoi(optarg); break;
        case 'H': height = atoi(optarg); break;
        case 'W': width = atoi(optarg); break;
        case 'T': tiling = !strcmp(optarg, "on"); break;
        case 't': threads = atoi(optarg); break;
        case 'x': store = CVX_F32; break;
        default:
            printf("usage: %s [--frames 121] [--height 512] [--width 768] [--tiling off|on] [--threads N] "
                   "[--f32-weights]\n", argv[0]);
            return o == 'h' ? 0 : 1;
        }
    }
    cvx_set_program_name("bench_ltx_vae");
    int F, h, w;
    if (ltx_latent_grid(frames, height, width, &F, &h, &w)) cvx_die_last_error();
    cvx_set_threads(threads);
    char dir[] = "/tmp/cvx_bench_ltx_vae_XXXXXX";
    if (!mkdtemp(dir)) cvx_die("mkdtemp failed");
    pid_t pid = fork();   /* the writer's memory does not count in this process's peak RSS */
    if (pid == 0) {
        write_vae(dir, store);
        _exit(0);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) cvx_die("writing the VAE failed");
    ltx_vae *v = ltx_vae_load(dir, NULL);
    if (!v) cvx_die_last_error();
    const size_t nz = (size_t)128 * F * h * w, nv = (size_t)3 * frames * height * width;
    float *z = cvx_alloc_f32(nz), *video = cvx_alloc_f32(nv);
    cvx_generator g;
    cvx_generator_seed(&g, 1);
    cvx_randn(&g, z, nz);
    ltx_vae_tiling t;
    ltx_vae_tiling_default(&t);
    printf("LTX-Video 0.9.5 VAE decoder (256/512/1024, 5 resnets per block, %s weights), %d threads: latents [128, %d, "
           "%d, %d] -> %d frames %dx%d, %s\n", store == CVX_BF16 ? "BF16" : "F32", threads, F, h, w, frames,
           width, height, tiling ? "tiled (512/448 px, 16/8 frames)" : "untiled");
    fflush(stdout);
    double t0 = cvx_time(), c0 = cpu_seconds();
    int tiled = 0;
    if (ltx_vae_decode_tiled(v, tiling ? &t : NULL, z, F, h, w, 0.05f, video, &tiled, NULL)) cvx_die_last_error();
    double secs = cvx_time() - t0, cpu = cpu_seconds() - c0, rss = cvx_peak_rss_bytes() / 1073741824.0;
    printf("decode %.1f s wall, %.1f s CPU, peak RSS %.2f GB (output video %.2f GB)\n", secs, cpu, rss,
           nv * 4.0 / 1073741824.0);
    printf("RESULT case=ltx_vae frames=%d height=%d width=%d tiling=%s seconds=%.2f cpu_s=%.1f peak_rss_gb=%.3f\n",
           frames, height, width, tiled ? "on" : "off", secs, cpu, rss);
    free(z), free(video);
    ltx_vae_free(v);
    bm_rm_dir(dir);
    return 0;
}
