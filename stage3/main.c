/* stage3: latents -> video, with the CogVideoX VAE decoder.
 *
 *   stage3 [--input_dir DIR] [--latents FILE] [--output_video PATH] [--fps N]
 *          [--model_id ID | --model_dir DIR] [--tiling auto|on|off]
 *          [--tile_sample_min_height H] [--tile_sample_min_width W] [--crf N]
 *          [--png_dir DIR] [--contact_sheet FILE] [--output_frames FILE]
 *          [--threads N] [--quiet] [--verbose] [--help]
 *
 * Reads <input_dir>/stage2_latents.safetensors (`latents` [B, C, T, H, W], F32/BF16/F16) and
 * <input_dir>/generation_config.json, decodes as diffusers' CogVideoXPipeline.decode_latents
 * and writes <input_dir>/output_video.mp4. */
#include <getopt.h>
#include <json-c/json.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "cli.h"
#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "model.h"
#include "progress.h"
#include "safetensors.h"
#include "stage3/vae.h"
#include "stage3/video.h"

#define DEFAULT_INPUT_DIR "stage_outputs"
/* --tiling auto tiles when an untiled decode would need more than this (the 6 GB target). */
#define AUTO_TILING_BUDGET (6.0 * 1024 * 1024 * 1024)

static void usage(FILE *f) {
    fprintf(f,
        "usage: stage3 [options]\n"
        "\n"
        "Decode stage 2 latents with the model's CogVideoX VAE (as diffusers' CogVideoXPipeline\n"
        "does: latents x 1/scaling_factor, chunks of 2 latent frames with carried causal caches)\n"
        "and write an MP4.\n"
        "\n"
        "  --input_dir DIR              where stage2_latents.safetensors and generation_config.json\n"
        "                               are (default %s)\n"
        "  --latents FILE               latents file (default <input_dir>/stage2_latents.safetensors);\n"
        "                               tensor 'latents' [B, C, T, H, W], F32, BF16 or F16\n"
        "  --output_video PATH          MP4 to write (default <input_dir>/output_video.mp4)\n"
        "  --fps N                      frames per second (default: generation_config.json 'fps',\n"
        "                               else 8 for CogVideoX 1.0 models, 16 for 1.5)\n"
        "  --model_id ORG/NAME          hub id looked up in the local HuggingFace cache (nothing is\n"
        "                               downloaded; default: generation_config.json 'model_id')\n"
        "  --model_dir DIR              a local diffusers model directory (vae/)\n"
        "  --tiling auto|on|off         spatial tiling: 'on' tiles whenever the latent is larger than\n"
        "                               one tile (upstream enable_tiling), 'off' never, 'auto'\n"
        "                               (default) only when an untiled decode would need > 6 GiB\n"
        "  --tile_sample_min_height H   tile height in pixels (default: vae sample_height / 2)\n"
        "  --tile_sample_min_width W    tile width in pixels (default: vae sample_width / 2)\n"
        "  --crf N                      H.264 quality, 0 (lossless) .. 51 (default 18)\n"
        "  --png_dir DIR                also write every frame as DIR/frame_NNNN.png\n"
        "  --contact_sheet FILE         also write a PNG with all frames in a grid\n"
        "  --output_frames FILE         also write the decoder output, tensor 'decoded'\n"
        "                               [B, 3, T, H, W] F32 in [-1, 1] (before post-processing)\n"
        "  --threads N                  threads (default: all cores)\n"
        "  --quiet                      only errors and warnings\n"
        "  --verbose                    more detail\n"
        "  --help                       this text\n"
        "\n"
        "Frames are post-processed as upstream: clamp(x/2 + 0.5, 0, 1), x255 rounded to 8 bits.\n"
        "Odd frame sizes are padded to even (last row/column repeated) for yuv420p. With B > 1 the\n"
        "sample i > 0 goes to <output_video stem>_<i>.mp4.\n",
        DEFAULT_INPUT_DIR);
}

/* The directory of `path` must exist and be writable: checked before the long decode. */
static void check_writable(const char *path, const char *what) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    const char *dir = dirname(buf);
    if (!cvx_is_dir(dir)) cvx_die("%s: cannot write %s: directory '%s' does not exist", path, what, dir);
    if (access(dir, W_OK) != 0) cvx_die("%s: cannot write %s: directory '%s' is not writable", path, what, dir);
    if (cvx_is_dir(path)) cvx_die("%s: cannot write %s: it is a directory", path, what);
}

/* CogVideoX 1.5 (16 fps) vs 1.0 (8 fps): the 1.5 transformer has patch_size_t set; without a
 * transformer config, the 1.5 VAE is the one with invert_scale_latents = true. */
static int default_fps(const char *model_dir, const vae_decoder *d) {
    char path[4200];
    cvx_config c;
    if (!cvx_path_join(path, sizeof path, model_dir, "transformer/config.json") && cvx_is_file(path) &&
        !cvx_config_load(&c, path)) {
        int is15 = cvx_cfg_has(&c, "patch_size_t");
        cvx_config_free(&c);
        return is15 ? 16 : 8;
    }
    return d->invert_scale_latents ? 16 : 8;
}

int main(int argc, char **argv) {
    cvx_set_program_name("stage3");
    const char *input_dir = DEFAULT_INPUT_DIR, *latents_arg = NULL, *output_arg = NULL, *model_id = NULL,
               *model_dir_arg = NULL, *png_dir = NULL, *sheet = NULL, *frames_out = NULL, *tiling = "auto";
    int fps = 0, crf = 18, threads = 0, verbosity = 1, tsh = 0, tsw = 0;
    enum { O_IN = 256, O_LAT, O_OUT, O_FPS, O_MID, O_MDIR, O_TILING, O_TSH, O_TSW, O_CRF, O_PNG, O_SHEET, O_FRAMES,
           O_THREADS, O_QUIET, O_VERBOSE };
    static const struct option opts[] = {
        {"input_dir", required_argument, 0, O_IN}, {"latents", required_argument, 0, O_LAT},
        {"output_video", required_argument, 0, O_OUT}, {"fps", required_argument, 0, O_FPS},
        {"model_id", required_argument, 0, O_MID}, {"model_dir", required_argument, 0, O_MDIR},
        {"tiling", required_argument, 0, O_TILING}, {"tile_sample_min_height", required_argument, 0, O_TSH},
        {"tile_sample_min_width", required_argument, 0, O_TSW}, {"crf", required_argument, 0, O_CRF},
        {"png_dir", required_argument, 0, O_PNG}, {"contact_sheet", required_argument, 0, O_SHEET},
        {"output_frames", required_argument, 0, O_FRAMES}, {"threads", required_argument, 0, O_THREADS},
        {"quiet", no_argument, 0, O_QUIET}, {"verbose", no_argument, 0, O_VERBOSE},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
        case O_IN: input_dir = optarg; break;
        case O_LAT: latents_arg = optarg; break;
        case O_OUT: output_arg = optarg; break;
        case O_FPS: fps = cvx_flag_int("--fps", optarg, 1, 240); break;
        case O_MID: model_id = optarg; break;
        case O_MDIR: model_dir_arg = optarg; break;
        case O_TILING:
            if (strcmp(optarg, "auto") && strcmp(optarg, "on") && strcmp(optarg, "off"))
                cvx_die("--tiling must be auto, on or off, got '%s'", optarg);
            tiling = optarg;
            break;
        case O_TSH: tsh = cvx_flag_int("--tile_sample_min_height", optarg, 8, 1 << 16); break;
        case O_TSW: tsw = cvx_flag_int("--tile_sample_min_width", optarg, 8, 1 << 16); break;
        case O_CRF: crf = cvx_flag_int("--crf", optarg, 0, 51); break;
        case O_PNG: png_dir = optarg; break;
        case O_SHEET: sheet = optarg; break;
        case O_FRAMES: frames_out = optarg; break;
        case O_THREADS: threads = cvx_flag_int("--threads", optarg, 0, 1024); break;
        case O_QUIET: verbosity = 0; break;
        case O_VERBOSE: verbosity = 2; break;
        case 'h': usage(stdout); return 0;
        default:
            cvx_die("unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) cvx_die("unexpected argument '%s' (see --help)", argv[optind]);
    if (model_id && model_dir_arg) cvx_die("give either --model_id or --model_dir, not both");
    cvx_set_verbosity(verbosity);
    cvx_set_threads(threads);
    double t_start = cvx_time();

    char latents_path[4200], output_path[4200], genconf_path[4200];
    if (latents_arg) snprintf(latents_path, sizeof latents_path, "%s", latents_arg);
    else if (cvx_path_join(latents_path, sizeof latents_path, input_dir, "stage2_latents.safetensors"))
        cvx_die_last_error();
    if (output_arg) snprintf(output_path, sizeof output_path, "%s", output_arg);
    else if (cvx_path_join(output_path, sizeof output_path, input_dir, "output_video.mp4")) cvx_die_last_error();
    if (cvx_path_join(genconf_path, sizeof genconf_path, input_dir, "generation_config.json")) cvx_die_last_error();
    check_writable(output_path, "the video");
    if (frames_out) check_writable(frames_out, "the frames");
    if (sheet) check_writable(sheet, "the contact sheet");

    /* generation_config.json: fps, frames, model_id (all optional). */
    cvx_config gen = {0};
    int have_gen = cvx_is_file(genconf_path);
    int64_t gen_fps = 0, gen_frames = 0;
    const char *gen_model = NULL;
    if (have_gen) {
        if (cvx_config_load(&gen, genconf_path) || cvx_cfg_int_or(&gen, "fps", 0, &gen_fps) ||
            cvx_cfg_int_or(&gen, "frames", 0, &gen_frames) || cvx_cfg_str_or(&gen, "model_id", NULL, &gen_model))
            cvx_die_last_error();
    }

    /* Model. */
    const char *model = model_dir_arg ? model_dir_arg : model_id ? model_id : gen_model;
    if (!model)
        cvx_die("no model: give --model_id or --model_dir (%s has no 'model_id')",
                have_gen ? genconf_path : "no generation_config.json found, it");
    char model_dir[4096], vae_dir[4200];
    if (cvx_model_resolve(model, model_dir, sizeof model_dir)) cvx_die_last_error();
    if (cvx_model_component(model_dir, "vae", "config.json", vae_dir, sizeof vae_dir)) cvx_die_last_error();
    vae_decoder d;
    if (vae_load(&d, vae_dir, NULL)) cvx_die_last_error();

    /* Latents [B, C, T, H, W]. */
    cvx_safetensors *st = cvx_st_open(latents_path);
    if (!st) cvx_die_last_error();
    const cvx_tensor *lt = cvx_st_find(st, "latents");
    if (!lt) cvx_die("%s: no tensor 'latents'", latents_path);
    char shp[128];
    cvx_shape_str(lt->ndim, lt->shape, shp, sizeof shp);
    if (!cvx_dtype_is_float(lt->dtype))
        cvx_die("%s: tensor 'latents' has dtype %s, expected F32, BF16 or F16", latents_path,
                cvx_dtype_name(lt->dtype));
    if (lt->ndim != 5)
        cvx_die("%s: tensor 'latents' has shape %s (rank %d), expected rank 5 [B, C, T, H, W]", latents_path, shp,
                lt->ndim);
    const int B = (int)lt->shape[0], C = (int)lt->shape[1], T = (int)lt->shape[2], h = (int)lt->shape[3],
              w = (int)lt->shape[4];
    if (C != d.latent_channels)
        cvx_die("%s: tensor 'latents' has shape %s: %d channels (dim 1 of [B, C, T, H, W]), the VAE in %s expects "
                "latent_channels = %d", latents_path, shp, C, vae_dir, d.latent_channels);
    if (B < 1 || T < 1 || h < 1 || w < 1) cvx_die("%s: tensor 'latents' has an empty shape %s", latents_path, shp);
    const size_t n = (size_t)lt->numel;
    float *z = cvx_alloc_f32(n);   // [B, C, T, h, w]
    cvx_tensor_to_f32(lt, z);
    size_t nan = 0;
    const float scale = (float)(1.0 / d.scaling_factor);   /* 1 / scaling_factor * latents, as upstream */
    for (size_t i = 0; i < n; i++) {
        if (isnan(z[i])) z[i] = 0.0f, nan++;
        z[i] *= scale;
    }
    if (nan) cvx_warn("%s: %zu NaN values in 'latents' replaced by 0", latents_path, nan);
    const char *meta = cvx_st_metadata(st, "num_frames");
    long meta_frames = meta ? atol(meta) : 0;   /* copied: the string dies with the file */
    cvx_st_close(st);

    /* Output sizes, tiling, fps. */
    if (!tsh) tsh = d.sample_height / 2;
    if (!tsw) tsw = d.sample_width / 2;
    int tiled = 0;
    if (!strcmp(tiling, "on")) tiled = vae_tiling_applies(&d, h, w, tsh, tsw);
    else if (!strcmp(tiling, "auto"))
        tiled = vae_tiling_applies(&d, h, w, tsh, tsw) && vae_estimate_peak_bytes(&d, h, w) > AUTO_TILING_BUDGET;
    if (tiled && vae_tiling_check(&d, tsh, tsw)) cvx_die_last_error();
    const int To = vae_output_frames(&d, T);
    if (!fps) fps = gen_fps > 0 ? (int)gen_fps : default_fps(model_dir, &d);
    long want_frames = gen_frames > 0 ? gen_frames : meta_frames;
    if (want_frames > 0 && want_frames != To)
        cvx_warn("the latents decode to %d frames, but %s says %ld", To, gen_frames > 0 ? genconf_path : "the latents "
                 "metadata", want_frames);
    if (tiled)
        cvx_info("decoding latents [%d, %d, %d, %d, %d] with %s in tiles of %dx%d samples", B, C, T, h, w, vae_dir,
                 tsh, tsw);
    else
        cvx_info("decoding latents [%d, %d, %d, %d, %d] with %s (untiled, ~%.1f GB estimated peak)", B, C, T, h, w,
                 vae_dir, vae_estimate_peak_bytes(&d, h, w) / 1e9);

    /* Decode every sample. */
    cvx_progress prog;
    cvx_progress_start(&prog, "vae decode", B * vae_decode_steps(&d, T, h, w, tiled, tsh, tsw));
    float **dec = cvx_calloc((size_t)B, sizeof *dec);
    int Ho = h * d.spatial_ratio, Wo = w * d.spatial_ratio, Tt = To;
    for (int b = 0; b < B; b++) {
        const float *zb = z + (size_t)b * C * T * h * w;   // [C, T, h, w]
        if (tiled) {
            dec[b] = vae_decode_tiled(&d, zb, T, h, w, tsh, tsw, &Tt, &Ho, &Wo, &prog);
        } else {
            dec[b] = cvx_alloc_f32((size_t)d.out_channels * To * Ho * Wo);   // [3, To, Ho, Wo]
            vae_decode_chunked(&d, zb, T, h, w, dec[b], &prog);
        }
    }
    cvx_progress_finish(&prog);
    free(z);
    if (d.out_channels != 3) cvx_die("%s: out_channels = %d, a video needs 3", vae_dir, d.out_channels);

    /* Outputs. */
    const char *codec = "?";
    for (int b = 0; b < B; b++) {
        char path[4300];
        if (b == 0) snprintf(path, sizeof path, "%s", output_path);
        else {
            const char *dot = strrchr(output_path, '.');
            int stem = dot && !strchr(dot, '/') ? (int)(dot - output_path) : (int)strlen(output_path);
            snprintf(path, sizeof path, "%.*s_%d%s", stem, output_path, b, dot && !strchr(dot, '/') ? dot : "");
        }
        video_opts vo = {fps, crf, verbosity > 1};
        if (video_write_mp4(path, dec[b], Tt, Ho, Wo, &vo, &codec)) cvx_die_last_error();
        if (png_dir) {
            char dir[4300];
            if (B == 1) snprintf(dir, sizeof dir, "%s", png_dir);
            else snprintf(dir, sizeof dir, "%s/sample_%d", png_dir, b);
            if (video_write_pngs(dir, dec[b], Tt, Ho, Wo)) cvx_die_last_error();
        }
        if (sheet && b == 0 && video_write_contact_sheet(sheet, dec[0], Tt, Ho, Wo)) cvx_die_last_error();
    }
    if (frames_out) {
        size_t per = (size_t)3 * Tt * Ho * Wo;
        float *all = cvx_alloc_f32(per * B);   // [B, 3, T, H, W]
        for (int b = 0; b < B; b++) memcpy(all + per * b, dec[b], per * sizeof(float));
        cvx_st_writer *sw = cvx_stw_new();
        if (cvx_stw_add_f32(sw, "decoded", CVX_F32, 5, (int64_t[]){B, 3, Tt, Ho, Wo}, all) ||
            cvx_stw_metadata(sw, "latents", latents_path) || cvx_stw_write(sw, frames_out))
            cvx_die_last_error();
        cvx_stw_free(sw);
        free(all);
    }
    for (int b = 0; b < B; b++) free(dec[b]);
    free(dec);
    vae_free(&d);
    if (have_gen) cvx_config_free(&gen);
    double dt = cvx_time() - t_start;
    cvx_info("wrote %s (%d frames %dx%d, %d fps, %s%s) in %.1f s, peak RSS %.2f GB", output_path, Tt, Wo, Ho,
             fps, codec, B > 1 ? ", one file per sample" : "", dt, cvx_peak_rss_bytes() / 1e9);
    return 0;
}
