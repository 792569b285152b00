/* stage2: text embeddings -> denoised video latents (CogVideoXPipeline's denoising loop).
 *
 *   stage2 [--input_dir DIR] [--output_dir DIR] [--num_inference_steps N] [--guidance_scale G]
 *          [--use_dynamic_cfg] [--seed S] [--height H] [--width W] [--frames F] [--fps N]
 *          [--model_id ID | --model_dir DIR] [--scheduler ddim|dpm] [--threads N] [--resume]
 *          [--checkpoint_every K] [--output_dtype f32|bf16] [--quiet] [--verbose] [--help]
 *
 * Reads <input_dir>/stage1_embeddings.safetensors (+ generation_config.json for the model id),
 * writes <output_dir>/stage2_latents.safetensors and extends <output_dir>/generation_config.json.
 * The loop state is checkpointed to <output_dir>/stage2_checkpoint.safetensors (see --help).
 * The work is cvx_sample (pipeline/cogvideox.h); this file is flags, files and messages. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "error.h"
#include "fileio.h"
#include "pipeline/cogvideox.h"
#include "progress.h"
#include "stage2/cache.h"
#include "stage2/preview.h"
#include "stage2/sampler.h"
#include "stage2/scheduler.h"

#define DEFAULT_DIR "stage_outputs"
#define EMBEDDINGS_FILE "stage1_embeddings.safetensors"
#define LATENTS_FILE "stage2_latents.safetensors"
#define CHECKPOINT_FILE "stage2_checkpoint.safetensors"
#define GENCONFIG_FILE "generation_config.json"
#define PREVIEW_FILE "preview.png"

#include "stage2/usage.h"

int main(int argc, char **argv) {
    cvx_set_program_name("stage2");
    const char *input_dir = DEFAULT_DIR, *output_dir = NULL, *model_id = NULL, *model_dir_arg = NULL;
    int fps = 0, threads = 0, verbosity = 1, resume = 0, checkpoint_every = 1, stop_after = 0;
    cvx_sample_params sp = {.num_inference_steps = 50, .guidance_scale = 6.0, .seed = 42};
    cvx_dtype out_dtype = CVX_F32;
    static const struct option opts[] = {
        {"input_dir", 1, 0, 'i'}, {"output_dir", 1, 0, 'o'}, {"num_inference_steps", 1, 0, 'n'},
        {"guidance_scale", 1, 0, 'g'}, {"use_dynamic_cfg", 0, 0, 'y'}, {"seed", 1, 0, 's'}, {"height", 1, 0, 'H'},
        {"width", 1, 0, 'W'}, {"frames", 1, 0, 'F'}, {"fps", 1, 0, 'f'}, {"model_id", 1, 0, 'm'},
        {"model_dir", 1, 0, 'M'}, {"scheduler", 1, 0, 'S'}, {"threads", 1, 0, 't'}, {"resume", 0, 0, 'r'},
        {"checkpoint_every", 1, 0, 'c'}, {"output_dtype", 1, 0, 'd'}, {"quiet", 0, 0, 'q'}, {"verbose", 0, 0, 'v'},
        {"stop_after_steps", 1, 0, 'x'}, {"help", 0, 0, 'h'}, {"cache", 1, 0, 'C'}, {"cache_threshold", 1, 0, 'T'},
        {"teacache_coefficients", 1, 0, 'K'}, {"preview_every", 1, 0, 'P'}, {"preview", 1, 0, 'V'}, {0, 0, 0, 0}};
    double teacache_coeffs[5], cache_threshold = -1;   /* -1: the cache's default */
    cogvideox_cache_kind cache_kind = COGVIDEOX_CACHE_NONE;
    cogvideox_preview_mode preview_mode;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        char *end;
        switch (c) {
        case 'i': input_dir = optarg; break;
        case 'o': output_dir = optarg; break;
        case 'n': sp.num_inference_steps = (int)cvx_flag_int("--num_inference_steps", optarg, 1, 1000000); break;
        case 'g': sp.guidance_scale = cvx_flag_num("--guidance_scale", optarg, 0, 1e6); break;
        case 'y': sp.use_dynamic_cfg = 1; break;
        case 's':
            errno = 0;
            sp.seed = strtoull(optarg, &end, 10);
            if (!optarg[0] || *end || errno || optarg[0] == '-')
                cvx_die("--seed must be a non-negative integer below 2^64, got '%s'", optarg);
            break;
        case 'H': sp.height = (int)cvx_flag_int("--height", optarg, 1, 65536); break;
        case 'W': sp.width = (int)cvx_flag_int("--width", optarg, 1, 65536); break;
        case 'F': sp.frames = (int)cvx_flag_int("--frames", optarg, 1, 65536); break;
        case 'f': fps = (int)cvx_flag_int("--fps", optarg, 1, 1000); break;
        case 'm': model_id = optarg; break;
        case 'M': model_dir_arg = optarg; break;
        case 'S': sp.scheduler = optarg; break;
        case 't': threads = (int)cvx_flag_int("--threads", optarg, 0, 4096); break;
        case 'r': resume = 1; break;
        case 'c': checkpoint_every = (int)cvx_flag_int("--checkpoint_every", optarg, 0, 1000000); break;
        case 'd':
            if (!strcmp(optarg, "f32") || !strcmp(optarg, "float32")) out_dtype = CVX_F32;
            else if (!strcmp(optarg, "bf16") || !strcmp(optarg, "bfloat16")) out_dtype = CVX_BF16;
            else cvx_die("--output_dtype must be f32 or bf16, got '%s'", optarg);
            break;
        case 'q': verbosity = 0; break;
        case 'v': verbosity = 2; break;
        case 'x': stop_after = (int)cvx_flag_int("--stop_after_steps", optarg, 0, 1000000); break;
        case 'C':
            if (cogvideox_cache_parse_kind(optarg, &cache_kind)) cvx_die_last_error();
            sp.cache = optarg;
            break;
        case 'T': cache_threshold = cvx_flag_num("--cache_threshold", optarg, -1e6, 1e6); break;
        case 'K':
            if (cogvideox_teacache_parse_coefficients(optarg, teacache_coeffs)) cvx_die_last_error();
            sp.teacache_coefficients = teacache_coeffs;
            break;
        case 'P': sp.preview_every = (int)cvx_flag_int("--preview_every", optarg, 0, 1000000); break;
        case 'V':
            if (cogvideox_preview_parse_mode(optarg, &preview_mode)) cvx_die_last_error();
            sp.preview = optarg;
            break;
        case 'h': usage(stdout); return 0;
        default: cvx_die("unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) cvx_die("unexpected argument '%s' (see --help)", argv[optind]);
    if (model_id && model_dir_arg) cvx_die("give --model_id or --model_dir, not both");
    if (sp.scheduler && !cogvideox_scheduler_by_flag(sp.scheduler)) cvx_die_last_error();
    if (!output_dir) output_dir = input_dir;
    sp.cache_threshold = cache_threshold == -1 ? cogvideox_cache_default_threshold(cache_kind) : cache_threshold;
    cvx_set_verbosity(verbosity);
    const double t0 = cvx_time();

    /* ---- inputs: everything is checked before anything is written ---- */
    char emb_path[4200], in_gc[4200], out_gc[4200], lat_path[4200], ckpt_path[4200], gc_model[4096] = "",
         preview_path[4200];
    if (cvx_path_join(emb_path, sizeof emb_path, input_dir, EMBEDDINGS_FILE) ||
        cvx_path_join(in_gc, sizeof in_gc, input_dir, GENCONFIG_FILE) ||
        cvx_path_join(out_gc, sizeof out_gc, output_dir, GENCONFIG_FILE) ||
        cvx_path_join(lat_path, sizeof lat_path, output_dir, LATENTS_FILE) ||
        cvx_path_join(ckpt_path, sizeof ckpt_path, output_dir, CHECKPOINT_FILE) ||
        cvx_path_join(preview_path, sizeof preview_path, output_dir, PREVIEW_FILE))
        cvx_die("path too long under %s or %s", input_dir, output_dir);
    if (!cvx_is_file(emb_path)) cvx_die("%s: input file not found (run stage1 first, or pass --input_dir)", emb_path);
    cvx_safetensors *emb_file = cvx_st_open(emb_path);
    if (!emb_file) cvx_die_last_error();
    /* the model: --model_dir / --model_id, else what stage1 recorded */
    const char *model;
    if (cvx_recorded_model(model_dir_arg, model_id, in_gc, emb_file, gc_model, sizeof gc_model, &model))
        cvx_die_last_error();
    if (!model)
        cvx_die("no model given and %s records no model_id: pass --model_id ORG/NAME or --model_dir DIR", in_gc);
    if (model_dir_arg && !cvx_is_dir(model_dir_arg)) cvx_die("%s: model directory not found", model_dir_arg);
    sp.preview_path = preview_path;
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = threads});
    cvx_embeddings emb;
    cvx_sample_params r;
    cogvideox_fingerprint fp;
    if (!m || cvx_embeddings_from_file(m, emb_file, &emb) || cvx_sample_resolve(m, &sp, &r) ||
        cvx_sample_fingerprint(m, &r, emb_path, &fp))
        cvx_die_last_error();
    if (!fps) fps = cvx_model_get_info(m)->fps;
    if (cvx_mkdirs(output_dir)) cvx_die_last_error();
    if (access(output_dir, W_OK) != 0) cvx_die("%s: output directory is not writable", output_dir);

    /* ---- the loop ---- */
    sp.checkpoint_path = ckpt_path, sp.checkpoint_every = checkpoint_every, sp.resume = resume;
    sp.stop_after_steps = stop_after, sp.fingerprint = &fp;
    cvx_latents lat;
    if (cvx_sample(m, &sp, &emb, NULL, NULL, &lat)) cvx_die_last_error();
    if (lat.steps_done < r.num_inference_steps) {
        cvx_info("stopped after step %d of %d as asked (--stop_after_steps); state saved in %s, continue with --resume",
                 lat.steps_done, r.num_inference_steps, ckpt_path);
    } else {
        if (cvx_latents_write(lat_path, &lat, &r, out_dtype, model) ||
            cvx_genconfig_record_sample(out_gc, in_gc, &r, fps, lat.scheduler, model) ||
            cvx_genconfig_record_cache(out_gc, &r, &lat))
            cvx_die_last_error();
        /* the checkpoint is stale now that the result is written */
        if (cvx_is_file(ckpt_path) && unlink(ckpt_path) != 0)
            cvx_warn("%s: could not delete: %s", ckpt_path, strerror(errno));
        char dur[32];
        cvx_format_duration(cvx_time() - t0, dur, sizeof dur);
        int ran = lat.steps_done - lat.resumed_from;
        cvx_info("wrote %s (latents [1, %d, %d, %d, %d] %s, %d steps %s%s) and %s in %s (%.2f s/step), peak RSS "
                 "%.0f MB", lat_path, lat.C, lat.T, lat.h, lat.w, out_dtype == CVX_BF16 ? "bf16" : "f32",
                 lat.steps_done, lat.scheduler, lat.resumed_from ? ", resumed" : "", out_gc, dur,
                 ran > 0 ? lat.seconds / ran : 0.0, cvx_peak_rss_bytes() / 1048576.0);
        if (strcmp(r.cache, "none") != 0)
            cvx_info("cache %s@%g: %lld/%d steps computed, %lld skipped (%lld transformer blocks not run)", r.cache,
                     r.cache_threshold, lat.cache_steps_computed, r.num_inference_steps, lat.cache_steps_skipped,
                     lat.cache_blocks_skipped);
        if (lat.previews)
            cvx_info("previews: %d written to %s, %.2f s in all (%.2f s each)", lat.previews, preview_path,
                     lat.preview_seconds, lat.preview_seconds / lat.previews);
    }
    cvx_latents_free(&lat);
    cvx_embeddings_free(&emb);
    cvx_model_close(m);
    cvx_st_close(emb_file);
    return 0;
}
