/* stage2: text embeddings -> denoised video latents (CogVideoXPipeline's denoising loop).
 *
 *   stage2 [--input_dir DIR] [--output_dir DIR] [--num_inference_steps N] [--guidance_scale G]
 *          [--use_dynamic_cfg] [--seed S] [--height H] [--width W] [--frames F] [--fps N]
 *          [--model_id ID | --model_dir DIR] [--scheduler ddim|dpm] [--threads N] [--resume]
 *          [--checkpoint_every K] [--output_dtype f32|bf16] [--quiet] [--verbose] [--help]
 *
 * Reads <input_dir>/stage1_embeddings.safetensors (+ generation_config.json for the model id;
 * + stage1_conditioning.safetensors when stage 1 had an --image or --video: I2V / V2V),
 * writes <output_dir>/stage2_latents.safetensors and extends <output_dir>/generation_config.json.
 * The loop state is checkpointed to <output_dir>/stage2_checkpoint.safetensors (see --help).
 * The work is cvx_sample (pipeline/cogvideox.h); this file is flags, files and messages. */
#include <errno.h>
#include <limits.h>
#include <getopt.h>
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
#define CONDITIONING_FILE "stage1_conditioning.safetensors"
#define PREVIEW_FILE "preview.png"

#include "stage2/usage.h"

/* generation_config.json at path, if there is one, loaded and validated (fps, sizes, UTF-8,
 * hashes) into *gc; 0 when absent (gc->root NULL). Dies on a bad file: checked before any work. */
static void load_genconfig(const char *path, cvx_config *gc) {
    memset(gc, 0, sizeof *gc);
    if (!cvx_is_file(path)) return;
    if (cvx_config_load(gc, path) || cvx_genconfig_validate(gc)) cvx_die_last_error();
}

int main(int argc, char **argv) {
    cvx_set_program_name("stage2");
    cvx_runtime_setup(argc, argv);   /* OpenMP wait policy (may re-exec once), before any thread starts */
    cvx_install_signal_cleanup();    /* SIGINT/SIGTERM remove this run's temps */
    cvx_dist *world = cvx_par_start(&argc, &argv);   /* one rank without mpirun */
    int cfg_parallel = 0, sp_degree = 1;
    const char *input_dir = DEFAULT_DIR, *output_dir = NULL, *model_id = NULL, *model_dir_arg = NULL;
    int fps = 0, threads = 0, verbosity = 1, resume = 0, checkpoint_every = 1, stop_after = 0;
    cvx_sample_params sp = {.num_inference_steps = 50, .guidance_scale = 6.0, .seed = 42};
    cvx_dtype out_dtype = CVX_F32;
    const char *precision_arg = NULL;
    static const struct option opts[] = {
        {"input_dir", 1, 0, 'i'}, {"output_dir", 1, 0, 'o'}, {"num_inference_steps", 1, 0, 'n'},
        {"guidance_scale", 1, 0, 'g'}, {"use_dynamic_cfg", 0, 0, 'y'}, {"seed", 1, 0, 's'}, {"height", 1, 0, 'H'},
        {"width", 1, 0, 'W'}, {"frames", 1, 0, 'F'}, {"fps", 1, 0, 'f'}, {"model_id", 1, 0, 'm'},
        {"model_dir", 1, 0, 'M'}, {"scheduler", 1, 0, 'S'}, {"threads", 1, 0, 't'}, {"resume", 0, 0, 'r'},
        {"checkpoint_every", 1, 0, 'c'}, {"output_dtype", 1, 0, 'd'}, {"quiet", 0, 0, 'q'}, {"verbose", 0, 0, 'v'},
        {"stop_after_steps", 1, 0, 'x'}, {"help", 0, 0, 'h'}, {"strength", 1, 0, 'R'},
        {"cfg_parallel", 0, 0, 'P'}, {"sp", 1, 0, 'Q'}, {"precision", 1, 0, 'Z'}, {"noise_dtype", 1, 0, 'N'},
        {"cache", 1, 0, 'C'}, {"cache_threshold", 1, 0, 'Y'}, {"teacache_coefficients", 1, 0, 'K'},
        {"preview_every", 1, 0, 'E'}, {"preview", 1, 0, 'V'}, {0, 0, 0, 0}};
    double teacache_coeffs[5], cache_threshold = -1;   /* -1: the cache's default */
    cogvideox_cache_kind cache_kind = COGVIDEOX_CACHE_NONE;
    cogvideox_preview_mode preview_mode;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        char *end;
        if (optarg) cvx_opt_value(opts, c, optarg, argv, optind);   /* "--seed --steps 2" */
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
        case 'R': sp.strength = cvx_flag_num("--strength", optarg, 1e-9, 1); break;
        case 'x': stop_after = (int)cvx_flag_int("--stop_after_steps", optarg, 0, 1000000); break;
        case 'Z': precision_arg = optarg; break;
        case 'N': sp.noise_dtype = optarg; break;
        case 'P': cfg_parallel = 1; break;
        case 'Q': sp_degree = (int)cvx_flag_int("--sp", optarg, 1, 4096); break;
        case 'C':
            if (cogvideox_cache_parse_kind(optarg, &cache_kind)) cvx_die_last_error();
            sp.cache = optarg;
            break;
        case 'Y': cache_threshold = cvx_flag_num("--cache_threshold", optarg, -1e6, 1e6); break;
        case 'K':
            if (cogvideox_teacache_parse_coefficients(optarg, teacache_coeffs)) cvx_die_last_error();
            sp.teacache_coefficients = teacache_coeffs;
            break;
        case 'E': sp.preview_every = (int)cvx_flag_int("--preview_every", optarg, 0, 1000000); break;
        case 'V':
            if (cogvideox_preview_parse_mode(optarg, &preview_mode)) cvx_die_last_error();
            sp.preview = optarg;
            break;
        case 'h': if (cvx_par_writer(world)) usage(stdout); cvx_dist_free(world); return 0;
        default: cvx_die_bad_option(opts, argv, optind, optopt);
        }
    }
    if (optind < argc) cvx_die("unexpected argument '%s' (see --help)", argv[optind]);
    if (model_id && model_dir_arg) cvx_die("give --model_id or --model_dir, not both");
    if (sp.scheduler && !cogvideox_scheduler_by_flag(sp.scheduler)) cvx_die_last_error();
    if (!output_dir) output_dir = input_dir;
    cvx_par par;
    cvx_par_layout(&par, world, cfg_parallel, sp_degree);
    if (sp_degree > 1) {   /* TODO(issue 11): Ulysses in the transformer's attention */
        cvx_error("--sp %d: sequence parallelism is not wired yet (use --cfg_parallel)", sp_degree);
        cvx_par_fail_alike(world);
    }
    sp.cache_threshold = cache_threshold == -1 ? cogvideox_cache_default_threshold(cache_kind) : cache_threshold;
    if (!cvx_par_writer(world)) sp.preview_every = 0;   /* rank 0 writes the preview */
    cvx_set_verbosity(cvx_par_writer(world) ? verbosity : 0);
    const double t0 = cvx_time();

    /* ---- inputs: everything is checked before anything is written ---- */
    char emb_path[4200], in_gc[4200], out_gc[4200], lat_path[4200], ckpt_path[4200], gc_model[4096] = "";
    char cond_path[4200], gc_mode[16] = "", preview_path[4200];
    if (cvx_path_join(emb_path, sizeof emb_path, input_dir, EMBEDDINGS_FILE) ||
        cvx_path_join(in_gc, sizeof in_gc, input_dir, GENCONFIG_FILE) ||
        cvx_path_join(out_gc, sizeof out_gc, output_dir, GENCONFIG_FILE) ||
        cvx_path_join(lat_path, sizeof lat_path, output_dir, LATENTS_FILE) ||
        cvx_path_join(ckpt_path, sizeof ckpt_path, output_dir, CHECKPOINT_FILE) ||
        cvx_path_join(cond_path, sizeof cond_path, input_dir, CONDITIONING_FILE) ||
        cvx_path_join(preview_path, sizeof preview_path, output_dir, PREVIEW_FILE))
        cvx_die("path too long under %s or %s", input_dir, output_dir);
    if (!cvx_is_file(emb_path)) cvx_die("%s: input file not found (run stage1 first, or pass --input_dir)", emb_path);
    /* one run per output directory; the input directory (if another) is not replaced while read */
    const int writer = cvx_par_writer(world);   /* under MPI only rank 0 writes, and so locks */
    if (writer && cvx_mkdirs(output_dir)) cvx_die_last_error();
    if (writer && access(output_dir, W_OK) != 0) cvx_die("%s: output directory is not writable", output_dir);
    char real_in[PATH_MAX], real_out[PATH_MAX];
    int same_dir = realpath(input_dir, real_in) && realpath(output_dir, real_out) && !strcmp(real_in, real_out);
    cvx_dir_lock *out_lock = NULL, *in_lock = NULL;
    if (writer && (!(out_lock = cvx_dir_lock_acquire(output_dir, 1)) ||
                   (!same_dir && !(in_lock = cvx_dir_lock_acquire(input_dir, 0)))))
        cvx_die_last_error();
    if (writer) cvx_clean_stale_temps(output_dir);
    /* both generation_config.json files are sound, and the embeddings are the ones stage1 wrote
     * with the input one, before the (hours-long) denoise */
    cvx_config in_cfg, out_cfg;
    load_genconfig(in_gc, &in_cfg);
    if (!same_dir) load_genconfig(out_gc, &out_cfg);
    if (in_cfg.root && cvx_genconfig_check_pair(&in_cfg, emb_path, "stage1_embeddings_xxh64")) cvx_die_last_error();
    if (in_cfg.root && cvx_is_file(cond_path) && cvx_genconfig_check_pair(&in_cfg, cond_path, "stage1_conditioning_xxh64"))
        cvx_die_last_error();
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
    char model_abs[4096];
    model = cvx_model_abs(model, model_abs, sizeof model_abs);   /* recorded for stage3 */
    cvx_precision precision;
    if (cvx_precision_from_cli(precision_arg, &precision)) cvx_die_last_error();
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = threads, .precision = precision});
    cvx_embeddings emb;
    cvx_sample_params r;
    cogvideox_fingerprint fp;
    /* I2V / V2V: stage 1's encoded image or video (the recorded mode must find its file) */
    cvx_conditioning cond = {0};
    if (!m) cvx_die_last_error();
    if (cvx_is_file(in_gc) && cvx_genconfig_get_str(in_gc, "mode", gc_mode, sizeof gc_mode)) cvx_die_last_error();
    if (cvx_is_file(cond_path)) {
        if (cvx_conditioning_read(m, cond_path, &cond)) cvx_die_last_error();
        sp.conditioning = &cond;
        cvx_info("%s: %s, %d frame%s %dx%d", cond_path, cond.mode == CVX_MODE_I2V ? "image-to-video" : "video-to-video",
                 cond.frames, cond.frames == 1 ? "" : "s", cond.width, cond.height);
    } else if (gc_mode[0] && strcmp(gc_mode, "t2v")) {
        cvx_die("%s records mode \"%s\" but %s is missing (run stage 1 again)", in_gc, gc_mode, cond_path);
    }
    int irc = cvx_embeddings_from_file(m, emb_file, &emb) || cvx_sample_resolve(m, &sp, &r) ||
              cvx_sample_fingerprint(m, &r, emb_path, &fp);
    cvx_par_agree_or_fail(world, irc);   /* one rank: cvx_die */
    if (cvx_check_finite(emb.prompt, (size_t)emb.L * emb.D, "prompt_embeds") ||
        cvx_check_finite(emb.negative, (size_t)emb.L * emb.D, "negative_prompt_embeds"))
        cvx_error_prefix("%s", emb_path), cvx_die_last_error();
    if (!fps) fps = cvx_model_get_info(m)->fps;
    char layout[64];
    snprintf(layout, sizeof layout, "cfg %d x sp %d", par.cfg, par.sp);
    cvx_par_check_sample_inputs(world, m, &fp, emb_path, resume ? ckpt_path : NULL, layout);

    /* ---- the loop ---- */
    sp.checkpoint_path = ckpt_path, sp.checkpoint_every = checkpoint_every, sp.resume = resume;
    sp.stop_after_steps = stop_after, sp.fingerprint = &fp, sp.cfg_dist = par.cfg_group;
    cvx_latents lat;
    if (cvx_sample(m, &sp, &emb, NULL, NULL, &lat)) cvx_par_fail(world);
    if (!cvx_par_writer(world)) {
        /* ranks > 0 computed their share; rank 0 writes */
    } else if (lat.steps_done < r.num_inference_steps) {
        cvx_info("stopped after step %d of %d as asked (--stop_after_steps); state saved in %s, continue with --resume",
                 lat.steps_done - lat.steps_skipped, r.num_inference_steps - lat.steps_skipped, ckpt_path);
    } else {
        /* latents + generation_config.json (with the latents' xxh64) committed as one set; rank 0 writes */
        char hex[17];
        cvx_outset set;
        cvx_outset_init(&set);
        if (cvx_par_writer(world) &&
            (cvx_latents_write_set(&set, lat_path, &lat, &r, out_dtype, model) || cvx_file_xxh64(set.tmp[0], hex) ||
             cvx_genconfig_record_sample_set(&set, out_gc, in_gc, &r, fps, lat.scheduler, model, hex) ||
             cvx_outset_commit(&set) || cvx_genconfig_record_precision(out_gc, "stage2_precision", m) ||
             cvx_genconfig_record_cache(out_gc, &r, &lat)))
            cvx_outset_abort(&set), cvx_par_fail(world);   /* under MPI: MPI_Abort stops every rank */
        /* the checkpoint is stale now that the result is written */
        if (cvx_is_file(ckpt_path) && unlink(ckpt_path) != 0)
            cvx_warn("%s: could not delete: %s", ckpt_path, strerror(errno));
        char dur[32];
        cvx_format_duration(cvx_time() - t0, dur, sizeof dur);
        int ran = cvx_latents_steps_ran(&lat);
        char steps[160];
        cvx_latents_steps_text(&lat, &r, steps, sizeof steps);
        cvx_info("wrote %s (latents [1, %d, %d, %d, %d] %s, %s) and %s in %s (%.2f s/step), peak RSS "
                 "%.0f MB", lat_path, lat.C, lat.T, lat.h, lat.w, out_dtype == CVX_BF16 ? "bf16" : "f32",
                 steps, out_gc, dur, ran > 0 ? lat.seconds / ran : 0.0, cvx_peak_rss_bytes() / 1048576.0);
        if (strcmp(r.cache, "none") != 0)
            cvx_info("cache %s@%g: %lld/%d steps computed, %lld skipped (%lld transformer blocks not run)", r.cache,
                     r.cache_threshold, lat.cache_steps_computed, r.num_inference_steps - lat.steps_skipped,
                     lat.cache_steps_skipped, lat.cache_blocks_skipped);
        if (lat.previews)
            cvx_info("previews: %d written to %s, %.2f s in all (%.2f s each)", lat.previews, preview_path,
                     lat.preview_seconds, lat.preview_seconds / lat.previews);
    }
    cvx_latents_free(&lat);
    cvx_conditioning_free(&cond);
    cvx_embeddings_free(&emb);
    cvx_model_close(m);
    cvx_st_close(emb_file);
    if (in_cfg.root) cvx_config_free(&in_cfg);
    if (!same_dir && out_cfg.root) cvx_config_free(&out_cfg);
    cvx_dir_lock_release(in_lock);
    cvx_dir_lock_release(out_lock);
    cvx_par_end(&par);
    return 0;
}
