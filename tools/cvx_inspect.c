/* cvx-inspect PATH...: what a file of a staged run (or a model) is, its metadata, fingerprint and
 * every tensor's dtype, shape and statistics (tools/describe.h). --json for scripts. */
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "tools/describe.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: cvx-inspect [--json] [--stats] PATH...\n"
        "\n"
        "Print what PATH is and what it holds. PATH is any file the pipeline reads or writes:\n"
        "  stage1_embeddings.safetensors, stage1_conditioning.safetensors (stage 1),\n"
        "  stage2_latents.safetensors, stage2_checkpoint.safetensors, stage2_steps.json (stage 2),\n"
        "  the --output_frames file, output_video.mp4 or a folder of frames (stage 3),\n"
        "  generation_config.json, a run directory (every one of those files in it), the staged\n"
        "  TPU pipeline's files (BF16 with dtype_info), or model weights: a model directory, a\n"
        "  .safetensors file, a sharded *.safetensors.index.json, a GGUF file, a *_qweight file.\n"
        "\n"
        "For a stage file: the stage, family, mode and step it belongs to, its xxh64 (and whether\n"
        "the generation_config.json beside it records that hash), a checkpoint's seal and run\n"
        "settings, the metadata, and every tensor: dtype, dtype_info, shape, min, max, mean, std\n"
        "(population), NaN and Inf counts. For weights: the family and variant they would load as,\n"
        "the parameter count and dtypes, every tensor's dtype and shape.\n"
        "\n"
        "  --json      one JSON object per PATH (an array for several) instead of text\n"
        "  --stats     statistics of model weights too (widens every tensor: slow for real models)\n"
        "  -h, --help  this text\n"
        "\n"
        "Exit status: 0, or 1 with one error line when a PATH cannot be read.\n");
}

int main(int argc, char **argv) {
    cvx_set_program_name("cvx-inspect");
    cvx_set_verbosity(0);
    int json = 0, n = 0;
    describe_opts o = {0};
    const char *paths[256];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--stats")) o.weight_stats = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout), 0;
        else if (argv[i][0] == '-' && argv[i][1]) cvx_die("unknown option %s (see --help)", argv[i]);
        else if (n < 256) paths[n++] = argv[i];
        else cvx_die("at most 256 paths");
    }
    if (!n) {
        usage(stderr);
        return 2;
    }
    json_object *all = json_object_new_array();
    for (int i = 0; i < n; i++) {
        json_object *d = describe_path(paths[i], &o);
        if (!d) cvx_die_last_error();
        if (!json) describe_print(stdout, d), fputs(i + 1 < n ? "\n" : "", stdout);
        json_object_array_add(all, d);
    }
    if (json)
        puts(json_object_to_json_string_ext(n == 1 ? json_object_array_get_idx(all, 0) : all,
                                            JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(all);
    return 0;
}
