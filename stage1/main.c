/* stage1: prompt (and negative prompt) -> T5 text embeddings.
 *
 *   stage1 --prompt TEXT [--negative_prompt TEXT] [--model_id ID | --model_dir DIR]
 *          [--output_dir DIR] [--max_sequence_length N] [--threads N] [--quiet] [--verbose]
 *          [--prompts_file FILE] [--image PATH | --video PATH [--frames N]] [--height H] [--width W]
 *
 * Writes <output_dir>/stage1_embeddings.safetensors (prompt_embeds, negative_prompt_embeds,
 * each [1, L, d_model] F32) and updates <output_dir>/generation_config.json. The work is
 * cvx_encode_texts (pipeline/cogvideox.h); this file is flags, files and messages.
 * With --image / --video also <output_dir>/stage1_conditioning.safetensors (cvx_encode_conditioning). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "error.h"
#include "fileio.h"
#include "lock.h"
#include "runenv.h"
#include "validate.h"
#include "pipeline/cogvideox.h"
#include "pipeline/parallel.h"
#include "progress.h"

#define DEFAULT_MODEL_ID "zai-org/CogVideoX-2b"
#define DEFAULT_OUTPUT_DIR "stage_outputs"
#include "stage1/usage.h"

int main(int argc, char **argv) {
    cvx_set_program_name("stage1");
    cvx_runtime_setup(argc, argv);   /* OpenMP wait policy (may re-exec once), before any thread starts */
    cvx_install_signal_cleanup();    /* SIGINT/SIGTERM remove this run's temps */
    /* Under mpirun: the text encoder takes seconds, so rank 0 does it all and writes; the other
     * ranks exit 0 at once, printing nothing (docs/distributed.md). */
    cvx_dist *world = cvx_par_start(&argc, &argv);
    if (!cvx_par_writer(world)) {
        cvx_dist_free(world);
        return 0;
    }
    const char *prompt = NULL, *negative = "", *model_id = NULL, *model_dir_arg = NULL;
    const char *output_dir = DEFAULT_OUTPUT_DIR, *prompts_file = NULL, *precision_arg = NULL;
    int L = 226, threads = 0, verbosity = 1;
    cvx_conditioning_params cp = {0};   /* --image / --video: I2V / V2V conditioning */
    static const struct option opts[] = {
        {"prompt", 1, 0, 'p'}, {"negative_prompt", 1, 0, 'n'}, {"model_id", 1, 0, 'm'}, {"model_dir", 1, 0, 'M'},
        {"output_dir", 1, 0, 'o'}, {"max_sequence_length", 1, 0, 'L'}, {"threads", 1, 0, 't'}, {"quiet", 0, 0, 'q'},
        {"verbose", 0, 0, 'v'}, {"prompts_file", 1, 0, 'f'}, {"help", 0, 0, 'h'}, {"image", 1, 0, 'I'},
        {"video", 1, 0, 'V'}, {"frames", 1, 0, 'F'}, {"height", 1, 0, 'H'}, {"width", 1, 0, 'W'},
        {"precision", 1, 0, 'P'}, {0, 0, 0, 0}};
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        char *end;
        if (optarg) cvx_opt_value(opts, c, optarg, argv, optind);   /* "--prompt --threads 1" */
        switch (c) {
        case 'p': prompt = optarg; break;
        case 'n': negative = optarg; break;
        case 'm': model_id = optarg; break;
        case 'M': model_dir_arg = optarg; break;
        case 'o': output_dir = optarg; break;
        case 'L':
            L = (int)strtol(optarg, &end, 10);
            if (*end || !optarg[0] || L < 1 || L > 65536)
                cvx_die("--max_sequence_length must be an integer in [1, 65536], got '%s'", optarg);
            break;
        case 't':
            threads = (int)strtol(optarg, &end, 10);
            if (*end || !optarg[0] || threads < 0) cvx_die("--threads must be a non-negative integer, got '%s'", optarg);
            break;
        case 'q': verbosity = 0; break;
        case 'v': verbosity = 2; break;
        case 'f': prompts_file = optarg; break;
        case 'P': precision_arg = optarg; break;
        case 'I': cp.image = optarg; break;
        case 'V': cp.video = optarg; break;
        case 'F': cp.max_frames = (int)cvx_flag_int("--frames", optarg, 1, 65536); break;
        case 'H': cp.height = (int)cvx_flag_int("--height", optarg, 1, 65536); break;
        case 'W': cp.width = (int)cvx_flag_int("--width", optarg, 1, 65536); break;
        case 'h': usage(stdout); cvx_dist_free(world); return 0;
        default: cvx_die_bad_option(opts, argv, optind, optopt);
        }
    }
    if (optind < argc) cvx_die("unexpected argument '%s' (see --help)", argv[optind]);
    if (!prompt == !prompts_file) cvx_die("give exactly one of --prompt TEXT and --prompts_file FILE (see --help)");
    if (model_id && model_dir_arg) cvx_die("give --model_id or --model_dir, not both");
    if (cp.image && cp.video) cvx_die("give --image (image-to-video) or --video (video-to-video), not both");
    if (cp.max_frames && !cp.video) cvx_die("--frames takes the first N frames of a --video; give a --video");
    if ((cp.height || cp.width) && !cp.image && !cp.video)
        cvx_die("--height/--width size the --image or --video; without one, give them to stage 2");
    cvx_set_verbosity(verbosity);
    const double t0 = cvx_time();

    /* Everything that can fail cheaply fails before the (large) model is mapped. */
    cvx_prompt_item single = {prompt, 0}, *items = &single;
    char *file_buf = NULL;
    int n = 1;
    if (prompts_file && !(items = cvx_read_prompts_file(prompts_file, &file_buf, &n))) cvx_die_last_error();
    if (prompt && cvx_check_prompt(prompt, "--prompt")) cvx_die_last_error();
    size_t bad;
    if (!cvx_utf8_valid(negative, strlen(negative), &bad))
        cvx_die("--negative_prompt is not valid UTF-8 (byte %zu); give the text in UTF-8", bad);
    if (cvx_mkdirs(output_dir)) cvx_die_last_error();
    if (access(output_dir, W_OK) != 0) cvx_die("%s: output directory is not writable", output_dir);
    if (model_dir_arg && !cvx_is_dir(model_dir_arg)) cvx_die("%s: model directory not found", model_dir_arg);
    char model_abs[4096], gc_path[4200];
    const char *model = model_dir_arg ? model_dir_arg : model_id ? model_id : DEFAULT_MODEL_ID;
    model = cvx_model_abs(model, model_abs, sizeof model_abs);   /* recorded: later stages run elsewhere */

    /* the negative prompt first, then the prompts */
    const char **texts = cvx_malloc((size_t)(n + 1) * sizeof *texts);
    const char **labels = cvx_malloc((size_t)(n + 1) * sizeof *labels);
    char (*label_buf)[64] = cvx_malloc((size_t)(n + 1) * sizeof *label_buf);
    for (int i = 0; i <= n; i++) {
        texts[i] = i ? items[i - 1].text : negative;
        if (i == 0) snprintf(label_buf[i], sizeof label_buf[i], "the negative prompt");
        else if (prompts_file) snprintf(label_buf[i], sizeof label_buf[i], "the prompt on line %d", items[i - 1].line);
        else snprintf(label_buf[i], sizeof label_buf[i], "the prompt");
        labels[i] = label_buf[i];
    }
    cvx_precision precision;
    if (cvx_precision_from_cli(precision_arg, &precision)) cvx_die_last_error();
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = threads, .precision = precision});
    if (!m) cvx_die_last_error();
    /* the image / video first: a bad input fails before the text encoder is mapped */
    cvx_conditioning cond = {0};
    const char *source = cp.image ? cp.image : cp.video;
    if (source && cvx_encode_conditioning(m, &cp, NULL, NULL, &cond)) cvx_die_last_error();
    const int D = cvx_encoder_dim(m);   /* maps the text encoder */
    if (D < 0) cvx_die_last_error();
    /* the output directory, locked: one run per directory (after the model loaded: a run that
     * fails before leaves only the empty directory) */
    cvx_dir_lock *lock = cvx_dir_lock_acquire(output_dir, 1);   /* one run per directory */
    if (!lock) cvx_die_last_error();
    cvx_clean_stale_temps(output_dir);
    /* the generation_config.json this run extends must be sound before the embeddings are made */
    if (cvx_path_join(gc_path, sizeof gc_path, output_dir, "generation_config.json"))
        cvx_die("%s: output path too long", output_dir);
    if (cvx_is_file(gc_path)) {
        cvx_config gc;
        if (cvx_config_load(&gc, gc_path)) cvx_die_last_error();
        int bad_gc = cvx_genconfig_validate(&gc);
        cvx_config_free(&gc);
        if (bad_gc) cvx_die_last_error();
    }

    float *emb = cvx_alloc_f32((size_t)(n + 1) * L * D);   // [1 + n, L, D]
    if (cvx_encode_texts(m, texts, labels, n + 1, L, NULL, NULL, emb)) cvx_die_last_error();


    /* outputs: one set (embeddings, then generation_config.json with their xxh64), renamed into place
     * together; a failure before the commit leaves the previous files untouched */
    char first[4200] = "", path[4200], name[64], hex[17];
    cvx_outset set;
    cvx_outset_init(&set);
    char cond_path[4200];
    if (cvx_path_join(cond_path, sizeof cond_path, output_dir, "stage1_conditioning.safetensors"))
        cvx_die("%s: output path too long", output_dir);
    if (!source && cvx_is_file(cond_path) && unlink(cond_path) != 0)   /* a T2V run: no stale I2V/V2V input */
        cvx_die("%s: cannot remove the conditioning of an earlier run: %s", cond_path, strerror(errno));
    for (int i = 1; i <= n; i++) {
        if (prompts_file) snprintf(name, sizeof name, "stage1_embeddings_%04d.safetensors", items[i - 1].line);
        else snprintf(name, sizeof name, "stage1_embeddings.safetensors");
        if (cvx_path_join(path, sizeof path, output_dir, name)) cvx_die("%s: output path too long", output_dir);
        /* a prompts file may have more lines than a set holds: those files are written one by one */
        if (prompts_file ? cvx_embeddings_write(path, emb + (size_t)i * L * D, emb, L, D, texts[i], negative, model)
                         : cvx_embeddings_write_set(&set, path, emb + (size_t)i * L * D, emb, L, D, texts[i],
                                                    negative, model))
            cvx_outset_abort(&set), cvx_die_last_error();
        if (i == 1) snprintf(first, sizeof first, "%s", path);
        cvx_debug("wrote %s", path);
    }
    /* the conditioning joins the set after the embeddings (set.tmp[0]); its xxh64 goes in the config */
    if (source && cvx_conditioning_write_set(&set, cond_path, &cond, source, model))
        cvx_outset_abort(&set), cvx_die_last_error();
    if ((!prompts_file && cvx_file_xxh64(set.tmp[0], hex)) ||
        cvx_genconfig_record_encode_set(&set, gc_path, prompts_file ? NULL : prompt, prompts_file, negative, model,
                                        prompts_file ? NULL : hex) ||
        cvx_outset_commit(&set))
        cvx_outset_abort(&set), cvx_die_last_error();
    if (cvx_genconfig_record_conditioning(gc_path, source ? &cond : NULL, source) ||
        cvx_genconfig_record_precision(gc_path, "stage1_precision", m))
        cvx_die_last_error();
    if (source) cvx_info("wrote %s (%s: latent distribution [1, %d, %d, %d, %d])", cond_path, cvx_mode_name(cond.mode),
                         cond.C, cond.T, cond.h, cond.w);
    cvx_conditioning_free(&cond);
    char dur[32];
    cvx_format_duration(cvx_time() - t0, dur, sizeof dur);
    if (n == 1)
        cvx_info("wrote %s and %s in %s, peak RSS %.0f MB", first, gc_path, dur, cvx_peak_rss_bytes() / 1048576.0);
    else cvx_info("wrote %d embedding files (%s ...) and %s in %s, peak RSS %.0f MB", n, first, gc_path, dur,
                  cvx_peak_rss_bytes() / 1048576.0);
    free(emb), free(texts), free(labels), free(label_buf);
    if (items != &single) free(items);
    free(file_buf);
    cvx_model_close(m);
    cvx_dir_lock_release(lock);
    cvx_dist_free(world);
    return 0;
}
