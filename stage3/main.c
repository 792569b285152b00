/* stage3: latents -> video, with the CogVideoX VAE decoder.
 *
 *   stage3 [--input_dir DIR] [--latents FILE] [--output_video PATH] [--fps N]
 *          [--model_id ID | --model_dir DIR] [--tiling auto|on|off]
 *          [--tile_sample_min_height H] [--tile_sample_min_width W] [--crf N]
 *          [--png_dir DIR] [--contact_sheet FILE] [--output_frames FILE]
 *          [--threads N] [--precision P] [--quiet] [--verbose] [--help]
 *
 * Reads <input_dir>/stage2_latents.safetensors (`latents` [B, C, T, H, W], F32/BF16/F16) and
 * <input_dir>/generation_config.json, decodes as diffusers' CogVideoXPipeline.decode_latents
 * and writes <input_dir>/output_video.mp4 (--prompt_index N: stage2_latents_NNNN.safetensors,
 * generation_config_NNNN.json -> output_video_NNNN.mp4). The work is cvx_decode
 * (pipeline/cvx.h); this file is flags, files and messages. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "error.h"
#include "runenv.h"
#include "pipeline/args.h"
#include "pipeline/cvx.h"
#include "pipeline/stage_files.h"
#include "pipeline/parallel.h"
#include "pipeline/run.h"

#define DEFAULT_INPUT_DIR "stage_outputs"
#include "stage3/usage.h"

int main(int argc, char **argv) {
    cvx_set_program_name("stage3");
    cvx_runtime_setup(argc, argv);   /* OpenMP wait policy (may re-exec once), before any thread starts */
    cvx_install_signal_cleanup();    /* SIGINT/SIGTERM remove this run's temps */
    cvx_dist *world = cvx_par_start(&argc, &argv);   /* under mpirun: the ranks share the tiles */
    const int writer = cvx_par_writer(world);        /* rank 0 writes (and so checks and locks) */
    cvx_stage3_args a;   /* every flag's destination and the one flag table (pipeline/args.c) */
    cvx_stage3_args_init(&a, DEFAULT_INPUT_DIR);
    if (cvx_flags_parse(a.flags, argc, argv)) return writer ? usage(stdout) : (void)0, cvx_dist_free(world), 0;
    cvx_par_check_flags(world, a.flags);   /* MPI: the same decode settings on every rank (pipeline/args.c) */
    cvx_stage3_args_finish(&a);            /* the family options given (--decode_timestep, ...) */
    const char *input_dir = a.input_dir, *latents_arg = a.latents_arg, *output_arg = a.output_arg,
               *model_id = a.model_id, *model_dir = a.model_dir, *png_dir = a.png_dir, *sheet = a.sheet,
               *frames_out = a.frames_out;
    const char *const *wfile = a.wfile;
    int fps = a.fps, verbosity = a.verbosity;
    cvx_decode_params dp = a.dp;
    if (model_id && model_dir) cvx_die("give either --model_id or --model_dir, not both");
    cvx_set_verbosity(writer ? verbosity : 0);
    double t_start = cvx_time();

    /* the files: the latents, the video and the config of the run directory, unless given */
    cvx_run_files in;
    if (cvx_run_files_init(&in, input_dir) || cvx_run_files_number(&in, a.prompt_index)) cvx_die_last_error();
    const char *lat_path = latents_arg ? latents_arg : in.latents, *out_path = output_arg ? output_arg : in.video;
    if (writer && (cvx_check_writable(out_path, "the video") ||
                   (frames_out && cvx_check_writable(frames_out, "the frames")) ||
                   (sheet && cvx_check_writable(sheet, "the contact sheet")) ||
                   (png_dir && (cvx_check_dir_writable(png_dir, "the PNG frames") ||
                                cvx_png_dir_check(png_dir, a.overwrite)))))
        cvx_die_last_error();
    /* one run per run directory: exclusive when the video goes into the input directory (the
     * default); a video written elsewhere (a shared folder, /tmp) takes no lock there, only a
     * shared one on the input directory (renames keep such a file whole either way) */
    char out_dir[4200], buf[4200];
    snprintf(buf, sizeof buf, "%s", out_path);
    snprintf(out_dir, sizeof out_dir, "%s", dirname(buf));   /* dirname may point into buf */
    cvx_run_locks locks = {0};
    cvx_decode_genconfig gen;   /* fps, frames, model_id (all optional) */
    if ((writer && cvx_run_lock(&locks, input_dir, out_dir, 0)) ||
        cvx_decode_genconfig_read(in.genconfig, lat_path, in.latents, &gen))
        cvx_die_last_error();
    const char *model = model_dir ? model_dir : model_id ? model_id : gen.has_model_id ? gen.model_id : NULL;
    if (!model)
        cvx_die("no model: give --model_id or --model_dir (%s has no 'model_id')",
                gen.present ? in.genconfig : "no generation_config.json found, it");
    cvx_precision precision;
    if (cvx_precision_from_cli(a.precision_arg, CVX_WORK_CONV, &precision)) cvx_die_last_error();
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = a.threads, .precision = precision,
                                                      .transformer_file = wfile[0], .text_encoder_file = wfile[1],
                                                      .vae_file = wfile[2]});
    float *z;
    int s[5];   /* B, C, T, h, w */
    long meta_frames;
    cvx_frames fr;
    cvx_par_agree_or_fail(world, !m || cvx_latents_read(m, lat_path, &z, s, &meta_frames) ||
                                     cvx_decode_check(m, &dp, s[3], s[4]));
    cvx_par_check_decode_inputs(world, m, lat_path);   /* the decode settings: cvx_par_check_flags */
    dp.dist = world;
    /* LTX-Video 0.9.5+: the decode noise continues the sampler's generator (the latents' metadata) */
    void *sampler_gen = NULL;
    if (cvx_latents_read_generator(lat_path, &sampler_gen)) cvx_par_fail(world);
    dp.generator = sampler_gen;
    if (cvx_decode(m, &dp, z, s[0], s[1], s[2], s[3], s[4], lat_path, NULL, NULL, &fr)) cvx_par_fail(world);
    free(z);
    free(sampler_gen);
    const char *codec = "?";
    if (writer) {   /* ranks > 0 decoded their tiles; rank 0 writes: one MP4 per sample */
        if (!fps) fps = gen.fps > 0 ? (int)gen.fps : cvx_model_get_info(m)->fps;
        long want_frames = gen.frames > 0 ? gen.frames : meta_frames;
        if (want_frames > 0 && want_frames != fr.T)
            cvx_warn("the latents decode to %d frames, but %s says %ld", fr.T,
                     gen.frames > 0 ? in.genconfig : "the latents metadata", want_frames);
        if (cvx_frames_write_videos(&fr, out_path, fps, a.crf, verbosity > 1, png_dir, sheet, frames_out, lat_path,
                                    a.overwrite, &codec))
            cvx_die_last_error();
        cvx_info("wrote %s (%d frames %dx%d, %d fps, %s%s) in %.1f s, peak RSS %.2f GB", out_path, fr.T, fr.W, fr.H,
                 fps, codec, fr.B > 1 ? ", one file per sample" : "", cvx_time() - t_start, cvx_peak_rss_bytes() / 1e9);
    }
    cvx_frames_free(&fr);
    cvx_model_close(m);
    cvx_run_unlock(&locks);
    cvx_dist_free(world);
    return 0;
}
