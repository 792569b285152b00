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
 * and writes <input_dir>/output_video.mp4. The work is cvx_decode (pipeline/cogvideox.h); this
 * file is flags, files and messages. */
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "error.h"
#include "fileio.h"
#include "lock.h"
#include "runenv.h"
#include "validate.h"
#include "pipeline/cogvideox.h"
#include "pipeline/parallel.h"
#include "stage3/video.h"

#define DEFAULT_INPUT_DIR "stage_outputs"
#include "stage3/usage.h"

/* The directory of `path` must exist and be writable: checked before the long decode. */
static void check_writable(const char *path, const char *what) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    const char *dir = dirname(buf);
    if (!cvx_is_dir(dir)) cvx_die("%s: cannot write %s: directory '%s' does not exist", path, what, dir);
    if (access(dir, W_OK) != 0) cvx_die("%s: cannot write %s: directory '%s' is not writable", path, what, dir);
    if (cvx_is_dir(path)) cvx_die("%s: cannot write %s: it is a directory", path, what);
}

int main(int argc, char **argv) {
    cvx_set_program_name("stage3");
    cvx_runtime_setup(argc, argv);   /* OpenMP wait policy (may re-exec once), before any thread starts */
    cvx_install_signal_cleanup();    /* SIGINT/SIGTERM remove this run's temps */
    cvx_dist *world = cvx_par_start(&argc, &argv);   /* under mpirun: the ranks share the tiles */
    const char *input_dir = DEFAULT_INPUT_DIR, *latents_arg = NULL, *output_arg = NULL, *model_id = NULL,
               *model_dir_arg = NULL, *png_dir = NULL, *sheet = NULL, *frames_out = NULL;
    int fps = 0, crf = 18, threads = 0, verbosity = 1;
    const char *precision_arg = NULL;
    cvx_decode_params dp = {.tiling = CVX_TILING_AUTO};
    static const struct option opts[] = {
        {"input_dir", 1, 0, 'i'}, {"latents", 1, 0, 'l'}, {"output_video", 1, 0, 'o'}, {"fps", 1, 0, 'f'},
        {"model_id", 1, 0, 'm'}, {"model_dir", 1, 0, 'M'}, {"tiling", 1, 0, 'T'},
        {"tile_sample_min_height", 1, 0, 'y'}, {"tile_sample_min_width", 1, 0, 'x'}, {"crf", 1, 0, 'c'},
        {"png_dir", 1, 0, 'p'}, {"contact_sheet", 1, 0, 's'}, {"output_frames", 1, 0, 'F'}, {"threads", 1, 0, 't'},
        {"quiet", 0, 0, 'q'}, {"verbose", 0, 0, 'v'}, {"help", 0, 0, 'h'}, {"precision", 1, 0, 'P'}, {0, 0, 0, 0}};
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        if (optarg) cvx_opt_value(opts, c, optarg, argv, optind);   /* "--latents --fps 8" */
        switch (c) {
        case 'i': input_dir = optarg; break;
        case 'l': latents_arg = optarg; break;
        case 'o': output_arg = optarg; break;
        case 'f': fps = cvx_flag_int("--fps", optarg, 1, 240); break;
        case 'm': model_id = optarg; break;
        case 'M': model_dir_arg = optarg; break;
        case 'T':
            if (!strcmp(optarg, "auto")) dp.tiling = CVX_TILING_AUTO;
            else if (!strcmp(optarg, "on")) dp.tiling = CVX_TILING_ON;
            else if (!strcmp(optarg, "off")) dp.tiling = CVX_TILING_OFF;
            else cvx_die("--tiling must be auto, on or off, got '%s'", optarg);
            break;
        case 'y': dp.tile_height = cvx_flag_int("--tile_sample_min_height", optarg, 8, 1 << 16); break;
        case 'x': dp.tile_width = cvx_flag_int("--tile_sample_min_width", optarg, 8, 1 << 16); break;
        case 'c': crf = cvx_flag_int("--crf", optarg, 0, 51); break;
        case 'p': png_dir = optarg; break;
        case 's': sheet = optarg; break;
        case 'F': frames_out = optarg; break;
        case 't': threads = cvx_flag_int("--threads", optarg, 0, 1024); break;
        case 'P': precision_arg = optarg; break;
        case 'q': verbosity = 0; break;
        case 'v': verbosity = 2; break;
        case 'h': if (cvx_par_writer(world)) usage(stdout); cvx_dist_free(world); return 0;
        default: cvx_die_bad_option(opts, argv, optind, optopt);
        }
    }
    if (optind < argc) cvx_die("unexpected argument '%s' (see --help)", argv[optind]);
    if (model_id && model_dir_arg) cvx_die("give either --model_id or --model_dir, not both");
    cvx_set_verbosity(cvx_par_writer(world) ? verbosity : 0);
    double t_start = cvx_time();

    char lat_path[4200], out_path[4200], gc_path[4200];
    if (latents_arg) snprintf(lat_path, sizeof lat_path, "%s", latents_arg);
    else if (cvx_path_join(lat_path, sizeof lat_path, input_dir, "stage2_latents.safetensors")) cvx_die_last_error();
    if (output_arg) snprintf(out_path, sizeof out_path, "%s", output_arg);
    else if (cvx_path_join(out_path, sizeof out_path, input_dir, "output_video.mp4")) cvx_die_last_error();
    if (cvx_path_join(gc_path, sizeof gc_path, input_dir, "generation_config.json")) cvx_die_last_error();
    if (cvx_par_writer(world)) {   /* rank 0 writes */
        check_writable(out_path, "the video");
        if (frames_out) check_writable(frames_out, "the frames");
        if (sheet) check_writable(sheet, "the contact sheet");
    }
    /* one run per run directory: exclusive when the video goes into the input directory (the
     * default); a video written elsewhere (a shared folder, /tmp) takes no lock there, only a
     * shared one on the input directory (renames keep such a file whole either way) */
    char out_dir[4200], buf[4200], real_in[PATH_MAX], real_out[PATH_MAX], real_lat[PATH_MAX], default_lat[4200];
    snprintf(buf, sizeof buf, "%s", out_path);
    snprintf(out_dir, sizeof out_dir, "%s", dirname(buf));   /* dirname may point into buf */
    int same_dir = realpath(input_dir, real_in) && realpath(out_dir, real_out) && !strcmp(real_in, real_out);
    cvx_dir_lock *out_lock = NULL, *in_lock = NULL;
    if (cvx_par_writer(world) &&   /* under MPI only rank 0 writes, and so locks */
        (same_dir ? !(out_lock = cvx_dir_lock_acquire(out_dir, 1))
                  : cvx_is_dir(input_dir) && !(in_lock = cvx_dir_lock_acquire(input_dir, 0))))
        cvx_die_last_error();
    if (out_lock) cvx_clean_stale_temps(out_dir);

    /* generation_config.json: fps, frames, model_id (all optional) */
    cvx_config gen = {0};
    int have_gen = cvx_is_file(gc_path);
    int64_t gen_fps = 0, gen_frames = 0;
    const char *gen_model = NULL;
    if (have_gen && (cvx_config_load(&gen, gc_path) || cvx_genconfig_validate(&gen) ||
                     cvx_cfg_int_or(&gen, "fps", 0, &gen_fps) ||
                     cvx_cfg_int_or(&gen, "frames", 0, &gen_frames) || cvx_cfg_str_or(&gen, "model_id", NULL, &gen_model)))
        cvx_die_last_error();
    /* the latents stage2 wrote with this config must be the ones it describes (its xxh64) */
    if (have_gen && cvx_path_join(default_lat, sizeof default_lat, input_dir, "stage2_latents.safetensors") == 0 &&
        realpath(lat_path, real_lat) && realpath(default_lat, real_in) && !strcmp(real_lat, real_in) &&
        cvx_genconfig_check_pair(&gen, lat_path, "stage2_latents_xxh64"))
        cvx_die_last_error();
    const char *model = model_dir_arg ? model_dir_arg : model_id ? model_id : gen_model;
    if (!model)
        cvx_die("no model: give --model_id or --model_dir (%s has no 'model_id')",
                have_gen ? gc_path : "no generation_config.json found, it");
    /* auto decodes in f32: measured faster than bf16 for the VAE today (Winograd F(4×4) in f32,
     * F(2×2) in bf16 for accuracy: 71 s vs 90 s on the 3×30×45 bench, docs/performance.md) */
    const char *env_precision = getenv("CVX_PRECISION");
    const char *asked = precision_arg ? precision_arg : env_precision && env_precision[0] ? env_precision : "auto";
    if (!strcmp(asked, "auto")) precision_arg = "f32";
    cvx_precision precision;
    if (cvx_precision_from_cli(precision_arg, &precision)) cvx_die_last_error();
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = threads, .precision = precision});
    float *z;
    int s[5];   /* B, C, T, h, w */
    long meta_frames;
    cvx_frames fr;
    cvx_par_agree_or_fail(world, !m || cvx_latents_read(m, lat_path, &z, s, &meta_frames));
    char settings[96];
    snprintf(settings, sizeof settings, "tiling %d, tiles %dx%d", (int)dp.tiling, dp.tile_height, dp.tile_width);
    cvx_par_check_decode_inputs(world, m, lat_path, settings);
    dp.dist = world;
    if (cvx_decode(m, &dp, z, s[0], s[1], s[2], s[3], s[4], lat_path, NULL, NULL, &fr)) cvx_par_fail(world);
    free(z);
    if (!cvx_par_writer(world)) {   /* ranks > 0 decoded their tiles; rank 0 writes */
        cvx_frames_free(&fr);
        cvx_model_close(m);
        if (have_gen) cvx_config_free(&gen);
        cvx_dist_free(world);
        return 0;
    }
    if (!fps) fps = gen_fps > 0 ? (int)gen_fps : cvx_model_get_info(m)->fps;
    long want_frames = gen_frames > 0 ? gen_frames : meta_frames;
    if (want_frames > 0 && want_frames != fr.T)
        cvx_warn("the latents decode to %d frames, but %s says %ld", fr.T,
                 gen_frames > 0 ? gc_path : "the latents metadata", want_frames);

    /* outputs: one MP4 per sample (<stem>_<i>.mp4 for i > 0) */
    const char *codec = "?";
    for (int b = 0; b < fr.B; b++) {
        char path[4300], dir[4300];
        const char *dot = strrchr(out_path, '.');
        int ext = dot && !strchr(dot, '/'), stem = ext ? (int)(dot - out_path) : (int)strlen(out_path);
        if (b == 0) snprintf(path, sizeof path, "%s", out_path);
        else snprintf(path, sizeof path, "%.*s_%d%s", stem, out_path, b, ext ? dot : "");
        video_opts vo = {fps, crf, verbosity > 1};
        if (video_write_mp4(path, fr.data[b], fr.T, fr.H, fr.W, &vo, &codec)) cvx_die_last_error();
        if (fr.B == 1) snprintf(dir, sizeof dir, "%s", png_dir ? png_dir : "");
        else snprintf(dir, sizeof dir, "%s/sample_%d", png_dir ? png_dir : "", b);
        if (png_dir && video_write_pngs(dir, fr.data[b], fr.T, fr.H, fr.W)) cvx_die_last_error();
        if (sheet && b == 0 && video_write_contact_sheet(sheet, fr.data[0], fr.T, fr.H, fr.W)) cvx_die_last_error();
    }
    if (frames_out && cvx_frames_write(frames_out, &fr, lat_path)) cvx_die_last_error();
    cvx_info("wrote %s (%d frames %dx%d, %d fps, %s%s) in %.1f s, peak RSS %.2f GB", out_path, fr.T, fr.W, fr.H, fps,
             codec, fr.B > 1 ? ", one file per sample" : "", cvx_time() - t_start, cvx_peak_rss_bytes() / 1e9);
    cvx_frames_free(&fr);
    cvx_model_close(m);
    if (have_gen) cvx_config_free(&gen);
    cvx_dir_lock_release(in_lock);
    cvx_dir_lock_release(out_lock);
    cvx_dist_free(world);
    return 0;
}
