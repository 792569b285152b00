/* stage1: prompt (and negative prompt) -> T5 text embeddings.
 *
 *   stage1 --prompt TEXT [--negative_prompt TEXT] [--model_id ID | --model_dir DIR] [--output_dir DIR]
 *          [--max_sequence_length N] [--threads N] [--quiet] [--verbose] [--prompts_file FILE]
 *          [--image PATH | --video PATH [--frames N]] [--height H] [--width W] [--precision P]
 *
 * Writes <output_dir>/stage1_embeddings.safetensors (prompt_embeds, negative_prompt_embeds,
 * each [1, L, d_model] F32) and updates <output_dir>/generation_config.json; with --image /
 * --video also <output_dir>/stage1_conditioning.safetensors. The work is cvx_encode_texts and
 * cvx_encode_conditioning (pipeline/cvx.h); this file is flags, files and messages. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "error.h"
#include "fileio.h"
#include "image.h"
#include "runenv.h"
#include "pipeline/cvx.h"
#include "pipeline/stage_files.h"
#include "pipeline/parallel.h"
#include "pipeline/run.h"
#include "progress.h"

#define DEFAULT_MODEL_ID "zai-org/CogVideoX-2b"
#define DEFAULT_OUTPUT_DIR "stage_outputs"
#include "stage1/usage.h"

/* V2V without --frames: the largest count the model takes (4k+1, k the VAE's temporal factor, and
 * for CogVideoX1.5 a latent frame count that divides by its patch_size_t) that the clip has, said in
 * one line (the clip is read once more to count its frames). */
static int v2v_default_frames(cvx_model *m, const char *video, int *frames) {
    cvx_rgb_frames all;
    if (cvx_video_load(video, 0, &all)) return -1;
    const cvx_model_info *info = cvx_model_get_info(m);
    const int n = all.frames, ts = info->vae_scale_temporal;
    const int mult = info->v2v_latent_frames_multiple > 1 ? info->v2v_latent_frames_multiple : 1;
    cvx_rgb_frames_free(&all);
    if (ts < 1 || n < 1) return 0;   /* the encode names the problem */
    int f = (n - 1) / ts * ts + 1;
    while (f > ts && ((f - 1) / ts + 1) % mult != 0) f -= ts;
    if (((f - 1) / ts + 1) % mult != 0) return 0;   /* none fits: the encode names the valid counts */
    *frames = f;
    if (f != n) {
        if (mult > 1)
            cvx_info("%s: %d frames; using the first %d (the largest %dk+1 count whose %d latent frames divide by %d; "
                     "--frames N to choose)", video, n, f, ts, (f - 1) / ts + 1, mult);
        else
            cvx_info("%s: %d frames; using the first %d (the largest %dk+1 count; --frames N to choose)", video, n, f,
                     ts);
    }
    return 0;
}

/* --condition PATH:FRAME:STRENGTH (repeatable; split at the last two colons: the path may hold some) */
typedef struct {
    cvx_condition_spec spec[CVX_MAX_CONDITIONS];
    char path[CVX_MAX_CONDITIONS][4096];
    int n;
    const char *given;
} condition_list;
static int parse_condition(const char *v, void *dest) {
    condition_list *l = dest;
    if (l->n == CVX_MAX_CONDITIONS) return cvx_error("--condition: at most %d", CVX_MAX_CONDITIONS);
    const char *c2 = strrchr(v, ':'), *c1 = c2;
    while (c1 && c1 > v && *--c1 != ':') {}
    char *end1, *end2;
    long f = c1 && *c1 == ':' ? strtol(c1 + 1, &end1, 10) : -1;
    double st = c2 ? strtod(c2 + 1, &end2) : -1;
    if (!c1 || *c1 != ':' || c1 == v || f < 0 || f > 1000000 || end1 != c2 || end2 == c2 + 1 || *end2 ||
        !(st >= 0 && st <= 1) || (size_t)(c1 - v) >= sizeof l->path[0])
        return cvx_error("--condition '%s': expected PATH:FRAME:STRENGTH (FRAME a pixel frame index >= 0, STRENGTH "
                         "in [0, 1])", v);
    memcpy(l->path[l->n], v, (size_t)(c1 - v));
    l->path[l->n][c1 - v] = 0;
    l->spec[l->n] = (cvx_condition_spec){l->path[l->n], (int)f, st};
    l->n++;
    l->given = v;
    return 0;
}

int main(int argc, char **argv) {
    cvx_set_program_name("stage1");
    cvx_runtime_setup(argc, argv);   /* OpenMP wait policy (may re-exec once), before any thread starts */
    cvx_install_signal_cleanup();    /* SIGINT/SIGTERM remove this run's temps */
    /* Under mpirun: the text encoder takes seconds, so rank 0 does it all and writes; the other
     * ranks exit 0 at once, printing nothing (docs/distributed.md). */
    cvx_dist *world = cvx_par_start(&argc, &argv);
    if (!cvx_par_writer(world)) return cvx_dist_free(world), 0;
    cvx_par_alone(world);
    const char *prompt = NULL, *negative = "", *model_id = NULL, *model_dir = NULL;
    const char *output_dir = DEFAULT_OUTPUT_DIR, *prompts_file = NULL, *precision_arg = NULL;
    int L = 0, threads = 0, verbosity = 1;
    cvx_conditioning_params cp = {0};   /* --image / --video: I2V / V2V conditioning */
    const char *wfile[4] = {NULL, NULL, NULL, NULL};   /* --transformer, --text_encoder, --vae, --text_encoder_2 */
    int int8 = 0;
    static condition_list conds;   /* --condition: LTX-Video's condition pipeline */
    const cvx_flag flags[] = {
        CVX_FLAG_STR_("prompt", &prompt), CVX_FLAG_STR_("negative_prompt", &negative),
        CVX_FLAG_STR_("model_id", &model_id), CVX_FLAG_STR_("model_dir", &model_dir),
        CVX_FLAG_STR_("output_dir", &output_dir), CVX_FLAG_INT_("max_sequence_length", &L, 1, 65536),
        {.name = "threads", .kind = CVX_FLAG_INT, .dest = &threads, .lo = 0, .hi = INT_MAX,
         .expected = "a non-negative integer"},
        CVX_FLAG_BOOL_("quiet", &verbosity, 0), CVX_FLAG_BOOL_("verbose", &verbosity, 2),
        CVX_FLAG_STR_("prompts_file", &prompts_file), CVX_FLAG_HELP_(), CVX_FLAG_STR_("image", &cp.image),
        CVX_FLAG_STR_("video", &cp.video), CVX_FLAG_INT_("frames", &cp.max_frames, 1, 65536),
        CVX_FLAG_INT_("height", &cp.height, 1, 65536), CVX_FLAG_INT_("width", &cp.width, 1, 65536),
        CVX_FLAG_STR_("precision", &precision_arg), CVX_FLAG_STR_("transformer", &wfile[0]), CVX_FLAG_STR_("text_encoder", &wfile[1]),
        CVX_FLAG_STR_("vae", &wfile[2]), CVX_FLAG_STR_("text_encoder_2", &wfile[3]), CVX_FLAG_BOOL_("int8", &int8, 1),
        CVX_FLAG_PARSE_("condition", parse_condition, &conds, &conds.given), {0}};
    if (cvx_flags_parse(flags, argc, argv)) return usage(stdout), cvx_dist_free(world), 0;
    if (!prompt == !prompts_file) cvx_die("give exactly one of --prompt TEXT and --prompts_file FILE (see --help)");
    if (model_id && model_dir) cvx_die("give --model_id or --model_dir, not both");
    if (cp.image && cp.video) cvx_die("give --image (image-to-video) or --video (video-to-video), not both");
    if (conds.n && (cp.image || cp.video)) cvx_die("give --condition (LTX-Video's conditions) or --image / --video, not both");
    cp.conditions = conds.spec, cp.n_conditions = conds.n;
    if (cp.max_frames && !cp.video && !cp.image && !conds.n)
        cvx_die("--frames takes the first N frames of a --video (Wan image-to-video: the video's length for the "
                "--image); give a --video or an --image");
    if ((cp.height || cp.width) && !cp.image && !cp.video && !conds.n)
        cvx_die("--height/--width size the --image or --video; without one, give them to stage 2");
    cvx_set_verbosity(verbosity);
    const double t0 = cvx_time();

    /* Everything that can fail cheaply fails before the (large) model is mapped. */
    cvx_prompt_set ps;
    if (cvx_prompt_set_load(&ps, prompt, prompts_file, negative) || cvx_output_dir_ready(output_dir))
        cvx_die_last_error();
    if (model_dir && !cvx_is_dir(model_dir)) cvx_die("%s: model directory not found", model_dir);
    char model_abs[4096];
    const char *model = model_dir ? model_dir : model_id ? model_id : DEFAULT_MODEL_ID;
    model = cvx_model_abs(model, model_abs, sizeof model_abs);   /* recorded: later stages run elsewhere */
    cvx_precision precision;
    if (cvx_precision_from_cli(precision_arg, CVX_WORK_MATMUL, &precision)) cvx_die_last_error();
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = threads, .precision = precision,
                                                      .transformer_file = wfile[0], .text_encoder_file = wfile[1],
                                                      .vae_file = wfile[2], .text_encoder_2_file = wfile[3], .int8 = int8});
    if (!m) cvx_die_last_error();
    /* the image / video first: a bad input fails before the text encoder is mapped */
    cvx_conditioning cond = {0};
    const char *source = cp.image ? cp.image : cp.video;
    char cond_source[CVX_MAX_CONDITIONS * 512] = "";   /* the --condition values, recorded */
    for (int k = 0; k < conds.n; k++)
        snprintf(cond_source + strlen(cond_source), sizeof cond_source - strlen(cond_source), "%s%s:%d:%g",
                 k ? " " : "", conds.path[k], conds.spec[k].frame_index, conds.spec[k].strength);
    if (conds.n) source = cond_source;
    if (cp.video && !cp.max_frames && v2v_default_frames(m, cp.video, &cp.max_frames)) cvx_die_last_error();
    if (source && cvx_encode_conditioning(m, &cp, NULL, NULL, &cond)) cvx_die_last_error();
    const int D = cvx_encoder_dim(m);   /* maps the text encoder */
    if (D < 0) cvx_die_last_error();
    /* the output directory, locked: one run per directory (after the model loaded: a run that
     * fails before leaves only the empty directory) */
    cvx_run_locks lock;
    if (cvx_run_lock(&lock, output_dir, output_dir, 1)) cvx_die_last_error();
    cvx_run_files out;
    if (cvx_run_files_init(&out, output_dir)) cvx_die("%s: output path too long", output_dir);
    /* the generation_config.json this run extends must be sound before the embeddings are made */
    if (cvx_genconfig_check_file(out.genconfig, NULL, NULL)) cvx_die_last_error();

    const int n = ps.n;
    if (!L) L = cvx_model_get_info(m)->text_len;   /* the family's (CogVideoX 226, Wan 512) */
    float *emb = cvx_alloc_f32((size_t)(n + 1) * L * D);   // [1 + n, L, D]: the negative prompt, the prompts
    char first[4200];
    cvx_cond_set more = {0};   /* the family's further tensors (a second text encoder, masks), if any */
    if (cvx_encode_texts(m, ps.texts, ps.labels, n + 1, L, NULL, NULL, emb) ||
        cvx_encode_texts_more(m, ps.texts, ps.labels, n + 1, NULL, NULL, &more) ||
        cvx_encode_write_outputs(output_dir, &ps, emb, L, D, &more, model, &cond, source, m, first, sizeof first))
        cvx_die_last_error();
    if (source) cvx_info("wrote %s (%s: latent distribution [1, %d, %d, %d, %d])", out.conditioning,
                         cvx_mode_name(cond.mode), cond.C, cond.T, cond.h, cond.w);
    char dur[32];
    cvx_format_duration(cvx_time() - t0, dur, sizeof dur);
    const double rss = cvx_peak_rss_bytes() / 1048576.0;
    if (n == 1) cvx_info("wrote %s and %s in %s, peak RSS %.0f MB", first, out.genconfig, dur, rss);
    else cvx_info("wrote %d embedding files (%s ...) and %s in %s, peak RSS %.0f MB", n, first, out.genconfig, dur,
                  rss);
    free(emb);
    cvx_cond_set_free(&more);
    cvx_conditioning_free(&cond);
    cvx_prompt_set_free(&ps);
    cvx_model_close(m);
    cvx_run_unlock(&lock);
    cvx_dist_free(world);
    return 0;
}
