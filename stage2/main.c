/* stage2: text embeddings -> denoised video latents (CogVideoXPipeline's denoising loop).
 * Reads <input_dir>/stage1_embeddings.safetensors (+ generation_config.json, + stage 1's
 * conditioning for I2V / V2V), writes <output_dir>/stage2_latents.safetensors and extends
 * <output_dir>/generation_config.json, checkpointing the loop (flags: stage2/usage.h, --help).
 * --prompt_index N: stage1_embeddings_NNNN.safetensors of a --prompts_file batch in, and every
 * output numbered alike (stage2_latents_NNNN.safetensors, generation_config_NNNN.json).
 * The work is cvx_sample (pipeline/cvx.h); this file is flags, files and messages. */
#include <stdio.h>

#include "cli.h"
#include "error.h"
#include "runenv.h"
#include "pipeline/args.h"
#include "pipeline/cvx.h"
#include "pipeline/stage_files.h"
#include "pipeline/parallel.h"
#include "pipeline/run.h"
#include "stage2/cache.h"
#include "stage2/preview.h"
#include "stage2/sampler.h"
#include "stage2/scheduler.h"
#include "pipeline/steps_record.h"

#define DEFAULT_DIR "stage_outputs"
#include "stage2/usage.h"

int main(int argc, char **argv) {
    cvx_set_program_name("stage2");
    cvx_runtime_setup(argc, argv);   /* OpenMP wait policy (may re-exec once), before any thread starts */
    cvx_install_signal_cleanup();    /* SIGINT/SIGTERM remove this run's temps */
    cvx_dist *world = cvx_par_start(&argc, &argv);   /* one rank without mpirun */
    const int writer = cvx_par_writer(world);        /* under MPI only rank 0 writes, and so locks */
    cvx_stage2_args a;   /* every flag's destination and the one flag table (pipeline/args.c) */
    cvx_stage2_args_init(&a, DEFAULT_DIR);
    if (cvx_flags_parse(a.flags, argc, argv)) return writer ? usage(stdout) : (void)0, cvx_dist_free(world), 0;
    /* MPI: every rank was given the same values of every flag not marked per rank (before any of
     * them is changed below); one line naming the flag otherwise (issue 21: --checkpoint_every
     * differing between ranks hung the run) */
    cvx_par_check_flags(world, a.flags);
    cvx_stage2_args_finish(&a);   /* --fps into sp.frame_rate (a family option: LTX-Video's rotary positions) */
    const char *input_dir = a.input_dir, *output_dir = a.output_dir, *model_id = a.model_id, *model_dir = a.model_dir;
    const char *const *wfile = a.wfile;
    cvx_sample_params sp = a.sp;
    int fps = (int)sp.frame_rate, resume = a.resume;   /* 0: the model's */
    if (model_id && model_dir) cvx_die("give --model_id or --model_dir, not both");
    if (a.lora_fuse && !a.loras.n) cvx_die("--lora_fuse without --lora: nothing to fuse");
    if (!a.quantize != !a.transformer_out) cvx_die("--quantize TYPE and --transformer_out FILE.gguf go together");
    if (a.quantize) {   /* make a GGUF of the model's transformer and stop (no sampling) */
        if (!model_id && !model_dir) cvx_die("--quantize: give the model with --model_dir or --model_id");
        cvx_model *qm = cvx_model_open(&(cvx_model_params){.model = model_dir ? model_dir : model_id,
                                                           .threads = a.threads, .transformer_file = wfile[0]});
        if (!qm || cvx_model_write_gguf(qm, a.quantize, a.pure, a.transformer_out)) cvx_die_last_error();
        cvx_model_close(qm);
        cvx_dist_free(world);
        return 0;
    }
    if (sp.scheduler && !cvx_scheduler_by_flag(sp.scheduler)) cvx_die_last_error();
    if (!output_dir) output_dir = input_dir;
    cvx_par par;
    cvx_par_layout(&par, world, a.cfg_parallel, a.sp_degree);
    sp.sp_dist = par.sp_group, sp.world_dist = world;
    /* any value given is the user's (<= 0 is off, -1 included); only an absent flag means the default */
    sp.cache_threshold = a.threshold_arg ? a.cache_threshold : cvx_cache_default_threshold(a.cache_kind);
    sp.teacache_coefficients = a.coeffs_arg ? a.teacache_coeffs : NULL;
    if (!writer) sp.preview_every = 0;   /* rank 0 writes the preview */
    cvx_set_verbosity(writer ? a.verbosity : 0);
    const double t0 = cvx_time();

    /* ---- inputs: everything is checked before anything is written ---- */
    cvx_run_files in, out;
    cvx_run_locks locks;
    if (cvx_sample_check_dirs_n(input_dir, output_dir, a.prompt_index, writer, &in, &out, &locks)) cvx_die_last_error();
    cvx_safetensors *emb_file = cvx_st_open(in.embeddings);
    char model_buf[4096];
    const char *model;   /* --model_dir / --model_id, else what stage1 recorded */
    if (!emb_file || cvx_sample_model(model_dir, model_id, in.genconfig, emb_file, model_buf, 4096, &model))
        cvx_die_last_error();
    sp.preview_path = out.preview;
    cvx_precision precision;
    if (cvx_precision_from_cli(a.precision_arg, CVX_WORK_MATMUL, &precision)) cvx_die_last_error();
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = a.threads, .precision = precision,
                                                      .transformer_file = wfile[0], .text_encoder_file = wfile[1],
                                                      .vae_file = wfile[2], .transformer_2_file = wfile[3],
                                                      .loras = a.loras.spec,
                                                      .lora_experts = a.loras.expert,
                                                      .n_loras = a.loras.n, .lora_fuse = a.lora_fuse,
                                                      .int8 = a.int8, .attention = a.attention});
    cvx_conditioning cond;   /* I2V / V2V: stage 1's encoded image or video */
    if (!m || cvx_sample_read_conditioning(m, &in, &cond)) cvx_die_last_error();
    if (cond.mean) sp.conditioning = &cond;
    cvx_embeddings emb;
    cvx_cond_set more = {0};   /* the family's conditioning tensors after prompt_embeds (none for CogVideoX, Wan 2.1) */
    cvx_sample_params r;   /* sp resolved: the defaults filled in */
    cvx_fingerprint fp;
    int irc = cvx_embeddings_from_file(m, emb_file, &emb) || cvx_cond_more_from_file(m, emb_file, &more) ||
              cvx_sample_resolve(m, &sp, &r) || cvx_sample_fingerprint(m, &r, in.embeddings, &fp);
    if (more.n) sp.cond_more = &more;
    cvx_par_agree_or_fail(world, irc);   /* one rank: cvx_die */
    if (cvx_embeddings_check_finite(&emb, sp.cond_more, in.embeddings)) cvx_die_last_error();
    if (!fps) fps = cvx_model_get_info(m)->fps;
    char layout[64];
    snprintf(layout, sizeof layout, "cfg %d x sp %d", par.cfg, par.sp);
    cvx_par_check_sample_inputs(world, m, &fp, in.embeddings, resume ? out.checkpoint : NULL, layout);

    /* ---- the loop ---- */
    sp.checkpoint_path = out.checkpoint, sp.checkpoint_every = a.checkpoint_every, sp.resume = resume;
    sp.stop_after_steps = a.stop_after, sp.fingerprint = &fp, sp.cfg_dist = par.cfg_group;
    char steps_path[4200];   /* the per-step record (pipeline/steps_record.h), rank 0 */
    cvx_steps_record *rec = NULL;
    if (writer && (cvx_steps_record_path(out.latents, steps_path, sizeof steps_path) ||
                   !(rec = cvx_steps_record_new(steps_path, resume, &fp))))
        cvx_die_last_error();
    sp.on_step = rec ? cvx_steps_record_on_step : NULL, sp.on_step_user = rec;
    cvx_latents lat;
    if (cvx_sample(m, &sp, &emb, NULL, NULL, &lat)) cvx_par_fail(world);
    cvx_steps_record_free(rec);   /* a failed write was warned */
    if (writer && lat.steps_done < r.num_inference_steps) {   /* ranks > 0 computed their share; rank 0 writes */
        cvx_info("stopped after step %d of %d as asked (--stop_after_steps); state saved in %s, continue with --resume",
                 lat.steps_done - lat.steps_skipped, r.num_inference_steps - lat.steps_skipped, out.checkpoint);
    } else if (writer) {   /* under MPI, a failure here stops every rank (MPI_Abort) */
        if (cvx_sample_write_outputs(&out, in.genconfig, &lat, &r, a.out_dtype, fps, model, m)) cvx_par_fail(world);
        cvx_sample_report(&out, &lat, &r, a.out_dtype, cvx_time() - t0);
    }
    cvx_latents_free(&lat), cvx_conditioning_free(&cond), cvx_embeddings_free(&emb), cvx_cond_set_free(&more);
    cvx_model_close(m), cvx_st_close(emb_file);
    cvx_run_unlock(&locks), cvx_par_end(&par);
    return 0;
}
