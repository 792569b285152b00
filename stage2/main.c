/* stage2: text embeddings -> denoised video latents (CogVideoXPipeline's denoising loop).
 * Reads <input_dir>/stage1_embeddings.safetensors (+ generation_config.json, + stage 1's
 * conditioning for I2V / V2V), writes <output_dir>/stage2_latents.safetensors and extends
 * <output_dir>/generation_config.json, checkpointing the loop (flags: stage2/usage.h, --help).
 * The work is cvx_sample (pipeline/cogvideox.h); this file is flags, files and messages. */
#include <stdio.h>

#include "cli.h"
#include "error.h"
#include "runenv.h"
#include "pipeline/cogvideox.h"
#include "pipeline/parallel.h"
#include "pipeline/run.h"
#include "stage2/cache.h"
#include "stage2/preview.h"
#include "stage2/sampler.h"
#include "stage2/scheduler.h"

#define DEFAULT_DIR "stage_outputs"
#include "stage2/usage.h"

static int parse_cache(const char *v, void *kind) { return cvx_cache_parse_kind(v, kind); }
static int parse_coeffs(const char *v, void *c) { return cvx_teacache_parse_coefficients(v, c); }
static int parse_preview(const char *v, void *mode) { return cvx_preview_parse_mode(v, mode); }

int main(int argc, char **argv) {
    cvx_set_program_name("stage2");
    cvx_runtime_setup(argc, argv);   /* OpenMP wait policy (may re-exec once), before any thread starts */
    cvx_install_signal_cleanup();    /* SIGINT/SIGTERM remove this run's temps */
    cvx_dist *world = cvx_par_start(&argc, &argv);   /* one rank without mpirun */
    const int writer = cvx_par_writer(world);        /* under MPI only rank 0 writes, and so locks */
    const char *input_dir = DEFAULT_DIR, *output_dir = NULL, *model_id = NULL, *model_dir = NULL,
               *precision_arg = NULL, *coeffs_arg = NULL;
    int fps = 0, threads = 0, verbosity = 1, resume = 0, checkpoint_every = 1, stop_after = 0, cfg_parallel = 0,
        sp_degree = 1;
    cvx_sample_params sp = {.num_inference_steps = 50, .guidance_scale = -1, .seed = 42};   /* -1: the model's */
    cvx_dtype out_dtype = CVX_F32;
    double teacache_coeffs[5], cache_threshold = -1;   /* -1: the cache's default */
    cvx_cache_kind cache_kind = CVX_CACHE_NONE;
    cvx_preview_mode preview_mode;
    static const cvx_flag_choice dtypes[] = {
        {"f32", CVX_F32}, {"float32", CVX_F32}, {"bf16", CVX_BF16}, {"bfloat16", CVX_BF16}, {0}};
    const char *wfile[3] = {NULL, NULL, NULL};   /* --transformer, --text_encoder, --vae single files */
    const char *quantize = NULL, *transformer_out = NULL;   /* --quantize TYPE --transformer_out FILE.gguf */
    int int8 = 0, pure = 0;
    const cvx_flag flags[] = {   /* --help's order (stage2/usage.h) */
        CVX_FLAG_STR_("input_dir", &input_dir), CVX_FLAG_STR_("output_dir", &output_dir),
        CVX_FLAG_INT_("num_inference_steps", &sp.num_inference_steps, 1, 1000000),
        CVX_FLAG_NUM_("guidance_scale", &sp.guidance_scale, 0, 1e6),
        CVX_FLAG_BOOL_("use_dynamic_cfg", &sp.use_dynamic_cfg, 1), CVX_FLAG_U64_("seed", &sp.seed),
        CVX_FLAG_INT_("height", &sp.height, 1, 65536), CVX_FLAG_INT_("width", &sp.width, 1, 65536),
        CVX_FLAG_INT_("frames", &sp.frames, 1, 65536), CVX_FLAG_INT_("fps", &fps, 1, 1000),
        CVX_FLAG_STR_("model_id", &model_id), CVX_FLAG_STR_("model_dir", &model_dir),
        CVX_FLAG_STR_("scheduler", &sp.scheduler), CVX_FLAG_INT_("threads", &threads, 0, 4096),
        CVX_FLAG_BOOL_("resume", &resume, 1), CVX_FLAG_INT_("checkpoint_every", &checkpoint_every, 0, 1000000),
        CVX_FLAG_CHOICE_("output_dtype", &out_dtype, dtypes, "f32 or bf16"), CVX_FLAG_BOOL_("quiet", &verbosity, 0),
        CVX_FLAG_BOOL_("verbose", &verbosity, 2), CVX_FLAG_INT_("stop_after_steps", &stop_after, 0, 1000000),
        CVX_FLAG_HELP_(), CVX_FLAG_NUM_("strength", &sp.strength, 1e-9, 1),
        CVX_FLAG_BOOL_("cfg_parallel", &cfg_parallel, 1), CVX_FLAG_INT_("sp", &sp_degree, 1, 4096),
        CVX_FLAG_STR_("precision", &precision_arg), CVX_FLAG_STR_("noise_dtype", &sp.noise_dtype),
        CVX_FLAG_PARSE_("cache", parse_cache, &cache_kind, &sp.cache),
        CVX_FLAG_NUM_("cache_threshold", &cache_threshold, -1e6, 1e6),
        CVX_FLAG_PARSE_("teacache_coefficients", parse_coeffs, teacache_coeffs, &coeffs_arg),
        CVX_FLAG_INT_("preview_every", &sp.preview_every, 0, 1000000),
        CVX_FLAG_PARSE_("preview", parse_preview, &preview_mode, &sp.preview), CVX_FLAG_STR_("transformer", &wfile[0]), CVX_FLAG_STR_("text_encoder", &wfile[1]),
        CVX_FLAG_STR_("vae", &wfile[2]), CVX_FLAG_BOOL_("int8", &int8, 1), CVX_FLAG_STR_("quantize", &quantize),
        CVX_FLAG_STR_("transformer_out", &transformer_out), CVX_FLAG_BOOL_("pure", &pure, 1), {0}};
    if (cvx_flags_parse(flags, argc, argv)) return writer ? usage(stdout) : (void)0, cvx_dist_free(world), 0;
    if (model_id && model_dir) cvx_die("give --model_id or --model_dir, not both");
    if (!quantize != !transformer_out) cvx_die("--quantize TYPE and --transformer_out FILE.gguf go together");
    if (quantize) {   /* make a GGUF of the model's transformer and stop (no sampling) */
        if (!model_id && !model_dir) cvx_die("--quantize: give the model with --model_dir or --model_id");
        cvx_model *qm = cvx_model_open(&(cvx_model_params){.model = model_dir ? model_dir : model_id,
                                                           .threads = threads, .transformer_file = wfile[0]});
        if (!qm || cvx_model_write_gguf(qm, quantize, pure, transformer_out)) cvx_die_last_error();
        cvx_model_close(qm);
        cvx_dist_free(world);
        return 0;
    }
    if (sp.scheduler && !cvx_scheduler_by_flag(sp.scheduler)) cvx_die_last_error();
    if (!output_dir) output_dir = input_dir;
    cvx_par par;
    cvx_par_layout(&par, world, cfg_parallel, sp_degree);
    sp.sp_dist = par.sp_group, sp.world_dist = world;
    sp.cache_threshold = cache_threshold == -1 ? cvx_cache_default_threshold(cache_kind) : cache_threshold;
    sp.teacache_coefficients = coeffs_arg ? teacache_coeffs : NULL;
    if (!writer) sp.preview_every = 0;   /* rank 0 writes the preview */
    cvx_set_verbosity(writer ? verbosity : 0);
    const double t0 = cvx_time();

    /* ---- inputs: everything is checked before anything is written ---- */
    cvx_run_files in, out;
    cvx_run_locks locks;
    if (cvx_sample_check_dirs(input_dir, output_dir, writer, &in, &out, &locks)) cvx_die_last_error();
    cvx_safetensors *emb_file = cvx_st_open(in.embeddings);
    char model_buf[4096];
    const char *model;   /* --model_dir / --model_id, else what stage1 recorded */
    if (!emb_file || cvx_sample_model(model_dir, model_id, in.genconfig, emb_file, model_buf, 4096, &model))
        cvx_die_last_error();
    sp.preview_path = out.preview;
    cvx_precision precision;
    if (cvx_precision_from_cli(precision_arg, &precision)) cvx_die_last_error();
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = threads, .precision = precision,
                                                      .transformer_file = wfile[0], .text_encoder_file = wfile[1],
                                                      .vae_file = wfile[2], .int8 = int8});
    cvx_conditioning cond;   /* I2V / V2V: stage 1's encoded image or video */
    if (!m || cvx_sample_read_conditioning(m, &in, &cond)) cvx_die_last_error();
    if (cond.mean) sp.conditioning = &cond;
    cvx_embeddings emb;
    cvx_sample_params r;   /* sp resolved: the defaults filled in */
    cvx_fingerprint fp;
    int irc = cvx_embeddings_from_file(m, emb_file, &emb) || cvx_sample_resolve(m, &sp, &r) ||
              cvx_sample_fingerprint(m, &r, in.embeddings, &fp);
    cvx_par_agree_or_fail(world, irc);   /* one rank: cvx_die */
    if (cvx_embeddings_check_finite(&emb, in.embeddings)) cvx_die_last_error();
    if (!fps) fps = cvx_model_get_info(m)->fps;
    char layout[64];
    snprintf(layout, sizeof layout, "cfg %d x sp %d", par.cfg, par.sp);
    cvx_par_check_sample_inputs(world, m, &fp, in.embeddings, resume ? out.checkpoint : NULL, layout);

    /* ---- the loop ---- */
    sp.checkpoint_path = out.checkpoint, sp.checkpoint_every = checkpoint_every, sp.resume = resume;
    sp.stop_after_steps = stop_after, sp.fingerprint = &fp, sp.cfg_dist = par.cfg_group;
    cvx_latents lat;
    if (cvx_sample(m, &sp, &emb, NULL, NULL, &lat)) cvx_par_fail(world);
    if (writer && lat.steps_done < r.num_inference_steps) {   /* ranks > 0 computed their share; rank 0 writes */
        cvx_info("stopped after step %d of %d as asked (--stop_after_steps); state saved in %s, continue with --resume",
                 lat.steps_done - lat.steps_skipped, r.num_inference_steps - lat.steps_skipped, out.checkpoint);
    } else if (writer) {   /* under MPI, a failure here stops every rank (MPI_Abort) */
        if (cvx_sample_write_outputs(&out, in.genconfig, &lat, &r, out_dtype, fps, model, m)) cvx_par_fail(world);
        cvx_sample_report(&out, &lat, &r, out_dtype, cvx_time() - t0);
    }
    cvx_latents_free(&lat), cvx_conditioning_free(&cond), cvx_embeddings_free(&emb);
    cvx_model_close(m), cvx_st_close(emb_file);
    cvx_run_unlock(&locks), cvx_par_end(&par);
    return 0;
}
