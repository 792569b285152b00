/* stage1: prompt (and negative prompt) -> T5 text embeddings.
 *
 *   stage1 --prompt TEXT [--negative_prompt TEXT] [--model_id ID | --model_dir DIR]
 *          [--output_dir DIR] [--max_sequence_length N] [--threads N] [--quiet] [--verbose]
 *          [--prompts_file FILE]
 *
 * Writes <output_dir>/stage1_embeddings.safetensors (prompt_embeds, negative_prompt_embeds,
 * each [1, L, d_model] F32) and updates <output_dir>/generation_config.json. The work is
 * cvx_encode_texts (pipeline/cogvideox.h); this file is flags, files and messages. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "error.h"
#include "fileio.h"
#include "pipeline/cogvideox.h"
#include "progress.h"

#define DEFAULT_MODEL_ID "zai-org/CogVideoX-2b"
#define DEFAULT_OUTPUT_DIR "stage_outputs"
#include "stage1/usage.h"

int main(int argc, char **argv) {
    cvx_set_program_name("stage1");
    const char *prompt = NULL, *negative = "", *model_id = NULL, *model_dir_arg = NULL;
    const char *output_dir = DEFAULT_OUTPUT_DIR, *prompts_file = NULL, *precision_arg = NULL;
    int L = 226, threads = 0, verbosity = 1;
    static const struct option opts[] = {
        {"prompt", 1, 0, 'p'}, {"negative_prompt", 1, 0, 'n'}, {"model_id", 1, 0, 'm'}, {"model_dir", 1, 0, 'M'},
        {"output_dir", 1, 0, 'o'}, {"max_sequence_length", 1, 0, 'L'}, {"threads", 1, 0, 't'}, {"quiet", 0, 0, 'q'},
        {"verbose", 0, 0, 'v'}, {"prompts_file", 1, 0, 'f'}, {"help", 0, 0, 'h'},
        {"precision", 1, 0, 'P'}, {0, 0, 0, 0}};
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        char *end;
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
        case 'h': usage(stdout); return 0;
        default: cvx_die("unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) cvx_die("unexpected argument '%s' (see --help)", argv[optind]);
    if (!prompt == !prompts_file) cvx_die("give exactly one of --prompt TEXT and --prompts_file FILE (see --help)");
    if (model_id && model_dir_arg) cvx_die("give --model_id or --model_dir, not both");
    cvx_set_verbosity(verbosity);
    const double t0 = cvx_time();

    /* Everything that can fail cheaply fails before the (large) model is mapped. */
    cvx_prompt_item single = {prompt, 0}, *items = &single;
    char *file_buf = NULL;
    int n = 1;
    if (prompts_file && !(items = cvx_read_prompts_file(prompts_file, &file_buf, &n))) cvx_die_last_error();
    if (cvx_mkdirs(output_dir)) cvx_die_last_error();
    if (access(output_dir, W_OK) != 0) cvx_die("%s: output directory is not writable", output_dir);
    const char *model = model_dir_arg ? model_dir_arg : model_id ? model_id : DEFAULT_MODEL_ID;
    if (model_dir_arg && !cvx_is_dir(model_dir_arg)) cvx_die("%s: model directory not found", model_dir_arg);

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
    const int D = cvx_encoder_dim(m);   /* maps the text encoder */
    if (D < 0) cvx_die_last_error();
    float *emb = cvx_alloc_f32((size_t)(n + 1) * L * D);   // [1 + n, L, D]
    if (cvx_encode_texts(m, texts, labels, n + 1, L, NULL, NULL, emb)) cvx_die_last_error();

    char first[4200] = "", path[4200], gc_path[4200], name[64];
    for (int i = 1; i <= n; i++) {
        if (prompts_file) snprintf(name, sizeof name, "stage1_embeddings_%04d.safetensors", items[i - 1].line);
        else snprintf(name, sizeof name, "stage1_embeddings.safetensors");
        if (cvx_path_join(path, sizeof path, output_dir, name)) cvx_die("%s: output path too long", output_dir);
        if (cvx_embeddings_write(path, emb + (size_t)i * L * D, emb, L, D, texts[i], negative, model))
            cvx_die_last_error();
        if (i == 1) snprintf(first, sizeof first, "%s", path);
        cvx_debug("wrote %s", path);
    }
    if (cvx_path_join(gc_path, sizeof gc_path, output_dir, "generation_config.json") ||
        cvx_genconfig_record_encode(gc_path, prompts_file ? NULL : prompt, prompts_file, negative, model) ||
        cvx_genconfig_record_precision(gc_path, "stage1_precision", m))
        cvx_die_last_error();
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
    return 0;
}
