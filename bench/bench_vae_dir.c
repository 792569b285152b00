/* VAE decoder benchmark on a diffusers `vae/` directory: AutoencoderKLHunyuanVideo15 (--family hv15)
 * or AutoencoderKLLTXVideo (--family ltx, a timestep-conditioned decoder decodes at --timestep)
 * decoding one random latent [C, F, h, w], untiled, so that ours and the PyTorch peer decode with the
 * same weights (bench/pt_video_peer.py --case hv15vae|ltxvae --save-dir DIR writes such a directory
 * with random weights at the real config). Prints wall and process CPU time of the decode (after
 * --warmup decodes; CPU time is less disturbed by other load), the convolutions' GFLOP and peak RSS:
 *   RESULT case=<hv15vae|ltxvae> precision=.. latent=F,h,w seconds=.. cpu_s=.. gflop=.. peak_rss_gb=.. digest=..
 * (digest: FNV-1a of the output's bytes, to check that a change to the kernels kept every bit)
 *
 *   bench_vae_dir --family hv15|ltx --model DIR [--latent F,h,w] [--timestep 0.05] [--warmup 0]
 *                 [--threads N] [--precision f32|bf16] */
#include "bench_models.h"
#include "error.h"
#include "runenv.h"
#include "stage3/hunyuan15_vae.h"
#include "stage3/ltx_vae.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    cvx_runtime_setup(argc, argv);
    const char *family = NULL, *model = NULL, *precision = "f32", *latent = "3,30,53";
    int warmup = 0, threads = 0;
    float timestep = 0.05f;
    static const struct option opts[] = {
        {"family", 1, 0, 'f'}, {"model", 1, 0, 'm'}, {"latent", 1, 0, 'L'}, {"timestep", 1, 0, 'T'},
        {"warmup", 1, 0, 'w'}, {"threads", 1, 0, 't'}, {"precision", 1, 0, 'p'}, {0, 0, 0, 0}};
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (o) {
        case 'f': family = optarg; break;
        case 'm': model = optarg; break;
        case 'L': latent = optarg; break;
        case 'T': timestep = (float)atof(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'p': precision = optarg; break;
        default: fprintf(stderr, "usage: see bench/bench_vae_dir.c\n"); return 2;
        }
    }
    cvx_set_program_name("bench_vae_dir");
    int F, h, w;
    if (!family || !model || (strcmp(family, "hv15") && strcmp(family, "ltx")) ||
        sscanf(latent, "%d,%d,%d", &F, &h, &w) != 3 || F < 1 || h < 1 || w < 1 || warmup < 0)
        cvx_die("usage: bench_vae_dir --family hv15|ltx --model DIR [--latent F,h,w] [--timestep T] [--warmup N]"
                " [--threads N] [--precision f32|bf16]");
    const int hv = !strcmp(family, "hv15");
    cvx_set_threads(threads);
    cvx_precision prec;
    if (cvx_precision_parse(precision, CVX_WORK_CONV, &prec)) cvx_die_last_error();
    cvx_ctx *ctx = cvx_ctx_new(cvx_threads());
    if (cvx_ctx_set_precision(ctx, prec)) cvx_die_last_error();
    hv15_vae *hvv = NULL;
    ltx_vae *lv = NULL;
    int C, T, s;
    if (hv) {
        if (!(hvv = hv15_vae_load(model, ctx))) cvx_die_last_error();
        C = hv15_vae_get_config(hvv)->latent_channels, T = hv15_vae_decoded_frames(hvv, F), s = 16;
    } else {
        if (!(lv = ltx_vae_load(model, ctx))) cvx_die_last_error();
        C = ltx_vae_get_config(lv)->latent_channels, T = 8 * (F - 1) + 1, s = 32;
    }
    const size_t nz = (size_t)C * F * h * w, nv = (size_t)3 * T * (size_t)(s * h) * (size_t)(s * w);
    float *z = cvx_alloc_f32(nz), *video = cvx_alloc_f32(nv);
    for (size_t i = 0; i < nz; i++) z[i] = bm_urand();
    double f0 = 0, w0 = 0, c0 = 0;
    for (int r = 0; r <= warmup; r++) {
        f0 = ctx->conv_flops + ctx->flops, w0 = cvx_time(), c0 = cpu_seconds();
        if (hv ? hv15_vae_decode(hvv, z, F, h, w, NULL, video) : ltx_vae_decode(lv, z, F, h, w, timestep, video))
            cvx_die_last_error();
    }
    double wall = cvx_time() - w0, cpu = cpu_seconds() - c0, gflop = (ctx->conv_flops + ctx->flops - f0) * 1e-9;
    printf("%s VAE decode [%d,%d,%d,%d] -> %d frames %dx%d, %s, %d threads: %.2f s wall, %.2f s CPU, %.0f GFLOP"
           " (%.1f GFLOP/s wall); peak RSS %.2f GB\n", hv ? "HunyuanVideo-1.5" : "LTX-Video", C, F, h, w, T, s * h,
           s * w, cvx_precision_name(prec), cvx_threads(), wall, cpu, gflop, gflop / wall, cvx_peak_rss_bytes() / 1e9);
    uint64_t digest = 1469598103934665603ull;   /* FNV-1a of the output bytes */
    for (size_t i = 0; i < nv * sizeof(float); i++) digest = (digest ^ ((const unsigned char *)video)[i]) * 1099511628211ull;
    printf("RESULT case=%s precision=%s latent=%d,%d,%d seconds=%.3f cpu_s=%.2f gflop=%.1f peak_rss_gb=%.3f"
           " digest=%016llx\n", hv ? "hv15vae" : "ltxvae", cvx_precision_name(prec), F, h, w, wall, cpu, gflop,
           cvx_peak_rss_bytes() / 1e9, (unsigned long long)digest);
    free(z), free(video);
    if (hvv) hv15_vae_free(hvv);
    if (lv) ltx_vae_free(lv);
    cvx_ctx_free(ctx);
    return 0;
}
