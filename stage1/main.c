/* stage1: prompt (and negative prompt) -> T5 text embeddings.
 *
 *   stage1 --prompt TEXT [--negative_prompt TEXT] [--model_id ID | --model_dir DIR]
 *          [--output_dir DIR] [--max_sequence_length N] [--threads N] [--quiet] [--verbose]
 *          [--prompts_file FILE]
 *
 * Writes <output_dir>/stage1_embeddings.safetensors (prompt_embeds, negative_prompt_embeds,
 * each [1, L, d_model] F32) and updates <output_dir>/generation_config.json. */
#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "model.h"
#include "progress.h"
#include "safetensors.h"
#include "stage1/t5.h"
#include "stage1/tokenizer.h"

#define DEFAULT_MODEL_ID "zai-org/CogVideoX-2b"
#define DEFAULT_OUTPUT_DIR "stage_outputs"
#define MAX_BATCH 4   /* sequences per encoder pass: the widened weights serve them all */

static void usage(FILE *f) {
    fprintf(f,
        "usage: stage1 --prompt TEXT [options]\n"
        "       stage1 --prompts_file FILE [options]\n"
        "\n"
        "Encode a prompt and a negative prompt with the model's T5 tokenizer and T5 v1.1 encoder,\n"
        "as diffusers' CogVideoXPipeline does (no attention mask, padding to max_sequence_length).\n"
        "\n"
        "  --prompt TEXT               the prompt\n"
        "  --negative_prompt TEXT      the negative prompt (default: \"\")\n"
        "  --model_id ORG/NAME         hub id looked up in the local HuggingFace cache\n"
        "                              ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub;\n"
        "                              nothing is downloaded; default %s)\n"
        "  --model_dir DIR             a local diffusers model directory (tokenizer/, text_encoder/)\n"
        "  --output_dir DIR            where to write (default %s; created if needed)\n"
        "  --max_sequence_length N     tokens per prompt, padded/truncated (default 226)\n"
        "  --prompts_file FILE         encode every non-empty line of FILE as a prompt with one model\n"
        "                              load; line N is written to stage1_embeddings_NNNN.safetensors\n"
        "                              (N = line number in the file, 1-based, at least 4 digits)\n"
        "  --threads N                 threads (default: all cores)\n"
        "  --quiet                     only errors and warnings\n"
        "  --verbose                   more detail\n"
        "  --help                      this text\n"
        "\n"
        "Output: <output_dir>/stage1_embeddings.safetensors with prompt_embeds and\n"
        "negative_prompt_embeds, each [1, L, d_model] float32, metadata prompt, negative_prompt,\n"
        "model_id, dtype_info; <output_dir>/generation_config.json gets prompt, negative_prompt and\n"
        "model_id (other keys are kept). With --prompts_file the prompt key is not set; the file\n"
        "gets prompts_file instead.\n",
        DEFAULT_MODEL_ID, DEFAULT_OUTPUT_DIR);
}

typedef struct {
    const char *text;
    int line;          /* line number in --prompts_file, 0 for --prompt */
} prompt_item;

/* Non-empty lines of FILE (trailing \r dropped). The buffer owns the strings. */
static prompt_item *read_prompts_file(const char *path, char **buf, int *count) {
    size_t len;
    *buf = cvx_read_file(path, &len);
    if (!*buf) cvx_die_last_error();
    prompt_item *items = NULL;
    int n = 0, line = 0;
    for (char *p = *buf; p < *buf + len;) {
        char *nl = memchr(p, '\n', (size_t)(*buf + len - p));
        char *end = nl ? nl : *buf + len;
        line++;
        *end = 0;
        if (end > p && end[-1] == '\r') end[-1] = 0;
        if (p[0]) {
            items = cvx_realloc(items, (size_t)(n + 1) * sizeof *items);
            items[n++] = (prompt_item){p, line};
        }
        p = end + 1;
    }
    if (n == 0) cvx_die("%s: no prompts (the file has no non-empty line)", path);
    *count = n;
    return items;
}

static void tokenize_or_die(const t5_tokenizer *tok, const char *text, int L, int64_t *ids, const char *what) {
    int64_t *mask = cvx_malloc((size_t)L * sizeof *mask);
    int n_raw;
    if (t5_tokenize(tok, text, L, ids, mask, &n_raw)) cvx_die_last_error();
    if (n_raw > L)
        cvx_warn("%s is %d tokens long; truncated to max_sequence_length %d (the rest is ignored, as upstream)",
                 what, n_raw, L);
    else
        cvx_debug("%s: %d tokens", what, n_raw);
    free(mask);
}

static void write_embeddings(const char *path, const float *prompt_embeds, const float *negative_embeds, int L,
                             int D, const char *prompt, const char *negative, const char *model_id) {
    cvx_st_writer *w = cvx_stw_new();
    const int64_t shape[3] = {1, L, D};
    if (cvx_stw_add_f32(w, "prompt_embeds", CVX_F32, 3, shape, prompt_embeds) ||
        cvx_stw_add_f32(w, "negative_prompt_embeds", CVX_F32, 3, shape, negative_embeds) ||
        cvx_stw_metadata(w, "prompt", prompt) || cvx_stw_metadata(w, "negative_prompt", negative) ||
        cvx_stw_metadata(w, "model_id", model_id) ||
        cvx_stw_metadata(w, "dtype_info", "{\"prompt_embeds\": \"float32\", \"negative_prompt_embeds\": \"float32\"}") ||
        cvx_stw_write(w, path))
        cvx_die_last_error();
    cvx_stw_free(w);
}

int main(int argc, char **argv) {
    cvx_set_program_name("stage1");
    const char *prompt = NULL, *negative = "", *model_id = NULL, *model_dir_arg = NULL;
    const char *output_dir = DEFAULT_OUTPUT_DIR, *prompts_file = NULL;
    int max_len = 226, threads = 0, verbosity = 1;
    enum { O_PROMPT = 256, O_NEG, O_MODEL_ID, O_MODEL_DIR, O_OUT, O_MAXLEN, O_THREADS, O_QUIET, O_VERBOSE, O_FILE };
    static const struct option opts[] = {
        {"prompt", required_argument, 0, O_PROMPT},
        {"negative_prompt", required_argument, 0, O_NEG},
        {"model_id", required_argument, 0, O_MODEL_ID},
        {"model_dir", required_argument, 0, O_MODEL_DIR},
        {"output_dir", required_argument, 0, O_OUT},
        {"max_sequence_length", required_argument, 0, O_MAXLEN},
        {"threads", required_argument, 0, O_THREADS},
        {"quiet", no_argument, 0, O_QUIET},
        {"verbose", no_argument, 0, O_VERBOSE},
        {"prompts_file", required_argument, 0, O_FILE},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        char *end;
        switch (c) {
        case O_PROMPT: prompt = optarg; break;
        case O_NEG: negative = optarg; break;
        case O_MODEL_ID: model_id = optarg; break;
        case O_MODEL_DIR: model_dir_arg = optarg; break;
        case O_OUT: output_dir = optarg; break;
        case O_MAXLEN:
            max_len = (int)strtol(optarg, &end, 10);
            if (*end || !optarg[0] || max_len < 1 || max_len > 65536)
                cvx_die("--max_sequence_length must be an integer in [1, 65536], got '%s'", optarg);
            break;
        case O_THREADS:
            threads = (int)strtol(optarg, &end, 10);
            if (*end || !optarg[0] || threads < 0) cvx_die("--threads must be a non-negative integer, got '%s'", optarg);
            break;
        case O_QUIET: verbosity = 0; break;
        case O_VERBOSE: verbosity = 2; break;
        case O_FILE: prompts_file = optarg; break;
        case 'h': usage(stdout); return 0;
        default:
            cvx_die("unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) cvx_die("unexpected argument '%s' (see --help)", argv[optind]);
    if (!prompt == !prompts_file) cvx_die("give exactly one of --prompt TEXT and --prompts_file FILE (see --help)");
    if (model_id && model_dir_arg) cvx_die("give --model_id or --model_dir, not both");
    cvx_set_verbosity(verbosity);
    cvx_set_threads(threads);
    const double t0 = cvx_time();

    /* Everything that can fail cheaply fails before the (large) model is mapped. */
    prompt_item single = {prompt, 0}, *items = &single;
    char *file_buf = NULL;
    int n_prompts = 1;
    if (prompts_file) items = read_prompts_file(prompts_file, &file_buf, &n_prompts);
    if (cvx_mkdirs(output_dir)) cvx_die_last_error();
    if (access(output_dir, W_OK) != 0) cvx_die("%s: output directory is not writable", output_dir);

    char model_dir[4096], tok_dir[4096], te_dir[4096];
    const char *model_name = model_dir_arg ? model_dir_arg : model_id ? model_id : DEFAULT_MODEL_ID;
    if (model_dir_arg && !cvx_is_dir(model_dir_arg)) cvx_die("%s: model directory not found", model_dir_arg);
    if (cvx_model_resolve(model_name, model_dir, sizeof model_dir) ||
        cvx_model_component(model_dir, "tokenizer", "spiece.model", tok_dir, sizeof tok_dir) ||
        cvx_model_component(model_dir, "text_encoder", "config.json", te_dir, sizeof te_dir))
        cvx_die_last_error();
    cvx_debug("model %s -> %s", model_name, model_dir);

    t5_tokenizer tok;
    t5_model m;
    if (t5_tokenizer_load(&tok, tok_dir) || t5_build(&m, te_dir, NULL)) cvx_die_last_error();
    const int L = max_len, D = m.cfg.d_model;
    cvx_info("T5 encoder: %d layers, d_model %d, %d heads x %d, d_ff %d (%s)", m.cfg.num_layers, D,
             m.cfg.num_heads, m.cfg.d_kv, m.cfg.d_ff, cvx_weights_path(m.weights));

    /* Sequences: the negative prompt first, then the prompts, encoded MAX_BATCH at a time. */
    const int n_seq = 1 + n_prompts, n_batches = (n_seq + MAX_BATCH - 1) / MAX_BATCH;
    int64_t *ids = cvx_malloc((size_t)MAX_BATCH * L * sizeof *ids);
    float *emb = cvx_alloc_f32((size_t)MAX_BATCH * L * D);     // [MAX_BATCH, L, D]
    float *negative_embeds = cvx_alloc_f32((size_t)L * D);     // [L, D]
    cvx_progress bar;
    cvx_progress_start(&bar, "T5 layers", n_batches * m.cfg.num_layers);
    char first_path[4200] = "", path[4200], what[64];
    int written = 0;
    for (int s0 = 0; s0 < n_seq; s0 += MAX_BATCH) {
        const int nb = n_seq - s0 < MAX_BATCH ? n_seq - s0 : MAX_BATCH;
        for (int b = 0; b < nb; b++) {
            const int s = s0 + b;
            if (s == 0) snprintf(what, sizeof what, "the negative prompt");
            else if (prompts_file) snprintf(what, sizeof what, "%s line %d", "the prompt on", items[s - 1].line);
            else snprintf(what, sizeof what, "the prompt");
            tokenize_or_die(&tok, s == 0 ? negative : items[s - 1].text, L, ids + (size_t)b * L, what);
        }
        if (t5_encode(&m, ids, nb, L, emb, &bar)) cvx_die_last_error();
        for (int b = 0; b < nb; b++) {
            const int s = s0 + b;
            const float *e = emb + (size_t)b * L * D;
            if (s == 0) {
                memcpy(negative_embeds, e, (size_t)L * D * sizeof(float));
                continue;
            }
            char name[64];
            if (prompts_file) snprintf(name, sizeof name, "stage1_embeddings_%04d.safetensors", items[s - 1].line);
            else snprintf(name, sizeof name, "stage1_embeddings.safetensors");
            if (cvx_path_join(path, sizeof path, output_dir, name)) cvx_die("%s: output path too long", output_dir);
            write_embeddings(path, e, negative_embeds, L, D, items[s - 1].text, negative, model_name);
            if (!written++) snprintf(first_path, sizeof first_path, "%s", path);
            cvx_debug("wrote %s", path);
        }
    }
    cvx_progress_finish(&bar);

    json_object *upd = json_object_new_object();
    if (!prompts_file) json_object_object_add(upd, "prompt", json_object_new_string(prompt));
    else json_object_object_add(upd, "prompts_file", json_object_new_string(prompts_file));
    json_object_object_add(upd, "negative_prompt", json_object_new_string(negative));
    json_object_object_add(upd, "model_id", json_object_new_string(model_name));
    char gc_path[4200];
    if (cvx_path_join(gc_path, sizeof gc_path, output_dir, "generation_config.json") ||
        cvx_genconfig_update(gc_path, upd))
        cvx_die_last_error();
    json_object_put(upd);

    char dur[32];
    cvx_format_duration(cvx_time() - t0, dur, sizeof dur);
    if (written == 1)
        cvx_info("wrote %s and %s in %s, peak RSS %.0f MB", first_path, gc_path, dur,
                 cvx_peak_rss_bytes() / 1048576.0);
    else
        cvx_info("wrote %d embedding files (%s ...) and %s in %s, peak RSS %.0f MB", written, first_path, gc_path,
                 dur, cvx_peak_rss_bytes() / 1048576.0);

    free(ids);
    free(emb);
    free(negative_embeds);
    if (items != &single) free(items);
    free(file_buf);
    t5_free(&m);
    t5_tokenizer_free(&tok);
    return 0;
}
