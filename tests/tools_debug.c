/* Debugging a staged run (issue 35, docs/debugging.md): bin/cvx-inspect, bin/cvx-compare and
 * stage 2's stage2_steps.json, on the golden tiny 2b model (dpm: a noise draw every step).
 *   - two identical runs compare as identical: exit 0, every distance 0, PSNR inf, SSIM 1;
 *   - a bf16 run against an f32 run (same f32 noise): latents within the documented bf16 tolerance
 *     (2e-2 relative L2, docs/performance.md), frames >= 30 dB; exit 1 at --tol 0;
 *   - a run resumed from a checkpoint whose generator was reseeded (one altered step): the record
 *     keeps the steps before the checkpoint, and cvx-compare names step 2 as the first diverging;
 *     an unaltered stop + resume compares identical to the uninterrupted run;
 *   - the staged TPU pipeline's layout (files built as its utils.py writes them: bf16 embeddings
 *     widened to F32 with dtype_info "bfloat16", BF16 latents with "torch.bfloat16", its
 *     generation_config.json; and its [B, F, C, H, W] loop layout) is inspected and compared;
 *   - bad inputs (a truncated file, two families, mismatched shapes, two kinds): one line, exit 2;
 *   - cvx-inspect: the statistics are the file's, the fingerprint matches generation_config.json,
 *     a model directory / GGUF / *_qweight file say what they load as, a changed checkpoint's seal;
 *   - the --report PNG is a PNG of the documented size;
 *   - make install PREFIX=tmp, examples/text2video.c built with pkg-config against it and run,
 *     make uninstall leaves no file; make compare passes its variables to cvx-compare. */
#include "testutil.h"

#include <json-c/json.h>
#include <math.h>

#include "rng.h"
#include "tensor_stats.h"
#include "pipeline/steps_record.h"

#define STEPS_ARGS "--num_inference_steps 4 --frames 9 --height 48 --width 64 --scheduler dpm"

typedef struct {
    char model[1024], s1[256], s2[256], s3[256], inspect[256], compare[256];
    char root[64];        /* a temp directory holding the runs */
    char a[128], b[128];  /* two identical f32 runs */
} fixture;

static fixture F;

static void run_stage12(const char *dir, const char *extra2) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && %s --quiet --prompt 'A panda' --model_dir %s --output_dir %s", dir, F.s1,
             F.model, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s " STEPS_ARGS " %s", F.s2, dir, F.model, extra2);
    tu_run_ok(cmd);
}
static void run_stage3(const char *dir) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s", F.s3, dir, F.model);
    tu_run_ok(cmd);
}

static int setup(void **s) {
    (void)s;
    tu_program(F.s1, sizeof F.s1, "stage1"), tu_program(F.s2, sizeof F.s2, "stage2");
    tu_program(F.s3, sizeof F.s3, "stage3"), tu_program(F.inspect, sizeof F.inspect, "cvx-inspect");
    tu_program(F.compare, sizeof F.compare, "cvx-compare");
    if (!realpath(GOLDEN "/e2e_2b/model", F.model)) return -1;
    tu_mkdtemp(F.root, sizeof F.root);
    snprintf(F.a, sizeof F.a, "%s/a", F.root), snprintf(F.b, sizeof F.b, "%s/b", F.root);
    run_stage12(F.a, ""), run_stage3(F.a);
    run_stage12(F.b, ""), run_stage3(F.b);
    return 0;
}
static int teardown(void **s) {
    (void)s;
    if (!getenv("CVX_KEEP")) tu_rmrf(F.root);
    return 0;
}

/* Run a command: stdout into out, stderr into err; the exit status. */
static int cap(const char *cmd, char *out, size_t n, char *err, size_t errn) {
    char full[8192], tmp[] = "/tmp/cvx_test_cap_XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0) fail_msg("mkstemp failed");
    close(fd);
    snprintf(full, sizeof full, "%s 2>%s", cmd, tmp);
    FILE *p = popen(full, "r");
    if (!p) fail_msg("cannot run %s", cmd);
    size_t k = fread(out, 1, n - 1, p);
    out[k] = 0;
    int st = pclose(p);
    FILE *f = fopen(tmp, "rb");
    k = f ? fread(err, 1, errn - 1, f) : 0;
    err[k] = 0;
    if (f) fclose(f);
    unlink(tmp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int compare(const char *a, const char *b, const char *opts, char *out, size_t n, char *err, size_t errn) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s %s %s", F.compare, a, b, opts);
    return cap(cmd, out, n, err, errn);
}

/* The number after `key` on the line that starts with `line` (after spaces) in out; NAN if absent. */
static double number_after(const char *out, const char *line, const char *key) {
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        while (*p == ' ') p++;
        if (strncmp(p, line, strlen(line))) continue;
        const char *e = strchr(p, '\n'), *k = strstr(p, key);
        if (k && (!e || k < e)) return strtod(k + strlen(key), NULL);
    }
    return NAN;
}

static void test_identical_runs(void **s) {
    (void)s;
    static char out[65536], err[4096];
    char png[256], opts[512];
    snprintf(png, sizeof png, "%s/same.png", F.root);
    snprintf(opts, sizeof opts, "--report %s", png);
    int rc = compare(F.a, F.b, opts, out, sizeof out, err, sizeof err);
    fputs(out, stdout);
    assert_int_equal(rc, 0);
    /* every tensor pair at distance 0, every frame equal, every step equal */
    assert_int_equal(tu_count_substr(out, "rel L2 0 "), 3);   /* 2 embeddings, the latents */
    assert_int_equal(tu_count_substr(out, "max abs 0 "), 3);
    assert_int_equal(tu_count_substr(out, "inf        1.00000"), 9);   /* PSNR, SSIM of each frame */
    assert_non_null(strstr(out, "the runs agree on all 4 common steps"));
    assert_null(strstr(out, "DIFFERENT"));
    /* the report: a PNG (cairo) of the documented layout, 3 rows of frames and 2 plots */
    size_t n;
    unsigned char *b = (unsigned char *)cvx_read_file(png, &n);
    assert_non_null(b);
    assert_true(n > 24 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8));
    const unsigned w = (unsigned)b[16] << 24 | b[17] << 16 | b[18] << 8 | b[19];
    const unsigned h = (unsigned)b[20] << 24 | b[21] << 16 | b[22] << 8 | b[23];
    print_message("  report %ux%u\n", w, h);
    assert_int_equal(w, 12 + 3 * (256 + 12) + 90);
    assert_int_equal(h, 70 + 3 * (192 + 28) + 2 * (220 + 12) + 12);
    free(b);
}

static void test_bf16_against_f32(void **s) {
    (void)s;
    static char out[65536], err[4096];
    char dir[128];
    snprintf(dir, sizeof dir, "%s/bf16", F.root);
    run_stage12(dir, "--precision bf16 --noise_dtype f32"), run_stage3(dir);
    int rc = compare(F.a, dir, "--tol 0.02 --min_psnr 30", out, sizeof out, err, sizeof err);
    fputs(out, stdout);
    assert_int_equal(rc, 0);
    const double lat = number_after(out, "stage2_latents.safetensors: latents", "rel L2 ");
    print_message("  bf16 latents rel L2 %.3g (documented tolerance 2e-2)\n", lat);
    assert_true(lat > 0 && lat <= 0.02);
    assert_non_null(strstr(out, "setting precision: A f32, B bf16"));
    /* exact comparison: the same runs differ */
    rc = compare(F.a, dir, "", out, sizeof out, err, sizeof err);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "verdict: DIFFERENT"));
}

/* The checkpoint at path with its generator replaced by one seeded with `seed` and sealed again:
 * a run resumed from it draws other noise from its first step on. */
static void reseed_checkpoint(const char *path, uint64_t seed) {
    size_t n;
    char *buf = cvx_read_file(path, &n);
    assert_non_null(buf);
    cvx_safetensors *st = cvx_st_open_memory(buf, n, path);
    assert_non_null(st);
    cvx_st_writer *w = cvx_stw_new();
    cvx_generator g;
    cvx_generator_seed(&g, seed);
    for (int i = 0; i < cvx_st_count(st); i++) {
        const cvx_tensor *t = cvx_st_tensor(st, i);
        if (strcmp(t->name, "generator")) ASSERT_OK(cvx_stw_add(w, t->name, t->dtype, t->ndim, t->shape, t->data));
        else {
            assert_int_equal(t->nbytes, sizeof g);
            ASSERT_OK(cvx_stw_add(w, t->name, t->dtype, 1, t->shape, &g));
        }
    }
    for (int i = 0; i < cvx_st_metadata_count(st); i++) {
        const char *k, *v;
        cvx_st_metadata_at(st, i, &k, &v);
        if (strcmp(k, "content_xxh64")) ASSERT_OK(cvx_stw_metadata(w, k, v));
    }
    ASSERT_OK(cvx_stw_seal(w, "content_xxh64"));
    cvx_st_close(st);
    free(buf);
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);
}

static void test_planted_step_found(void **s) {
    (void)s;
    static char out[65536], err[4096];
    char dir[128], cmd[8192], png[256], opts[512], pa[256], pb[256];
    /* stop after 2 of 4 steps, a generator of seed 43 in the checkpoint, resume */
    snprintf(dir, sizeof dir, "%s/planted", F.root);
    run_stage12(dir, "--checkpoint_every 1 --stop_after_steps 2");
    snprintf(pa, sizeof pa, "%s/stage2_checkpoint.safetensors", dir);
    reseed_checkpoint(pa, 43);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s " STEPS_ARGS " --resume", F.s2, dir, F.model);
    tu_run_ok(cmd);
    run_stage3(dir);
    /* the record continued: steps 0 and 1 of the first process, 2 and 3 of the resumed one */
    cvx_steps_file ra, rp;
    snprintf(pa, sizeof pa, "%s/stage2_steps.json", F.a), snprintf(pb, sizeof pb, "%s/stage2_steps.json", dir);
    ASSERT_OK(cvx_steps_read(pa, &ra));
    ASSERT_OK(cvx_steps_read(pb, &rp));
    assert_int_equal(rp.n, 4);
    assert_int_equal(rp.n_steps, 4);
    for (int i = 0; i < 4; i++) assert_int_equal(rp.e[i].step, i);
    for (int i = 0; i < 2; i++) assert_true(rp.e[i].norm == ra.e[i].norm && rp.e[i].std == ra.e[i].std);
    assert_true(rp.e[2].norm != ra.e[2].norm);
    cvx_steps_file_free(&ra), cvx_steps_file_free(&rp);

    snprintf(png, sizeof png, "%s/planted.png", F.root);
    snprintf(opts, sizeof opts, "--tol 1e-6 --report %s", png);
    int rc = compare(F.a, dir, opts, out, sizeof out, err, sizeof err);
    fputs(out, stdout);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "first diverging step: 2 ("));
    assert_non_null(strstr(out, "<- first diverging step"));
    assert_true(cvx_is_file(png));
    /* the steps file alone says the same */
    rc = compare(pa, pb, "--tol 1e-6", out, sizeof out, err, sizeof err);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "first diverging step: 2 ("));

    /* stop + resume without a change: the record and the latents equal the uninterrupted run's */
    snprintf(dir, sizeof dir, "%s/resumed", F.root);
    run_stage12(dir, "--checkpoint_every 1 --stop_after_steps 3");
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s " STEPS_ARGS " --resume", F.s2, dir, F.model);
    tu_run_ok(cmd);
    snprintf(pb, sizeof pb, "%s/stage2_steps.json", dir);
    rc = compare(pa, pb, "", out, sizeof out, err, sizeof err);
    fputs(out, stdout);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "the runs agree on all 4 common steps"));
    snprintf(pa, sizeof pa, "%s/stage2_latents.safetensors", F.a), snprintf(pb, sizeof pb, "%s/stage2_latents.safetensors", dir);
    assert_int_equal(compare(pa, pb, "", out, sizeof out, err, sizeof err), 0);
}

/* Files laid out as the staged TPU pipeline's utils.py writes them, from run A's tensors. */
static void write_tpu_run(const char *dir, int frames_major) {
    char p[256], src[256];
    tu_run_ok((snprintf(p, sizeof p, "mkdir -p %s", dir), p));
    /* stage 1: bf16 embeddings widened to F32, dtype_info "bfloat16" */
    snprintf(src, sizeof src, "%s/stage1_embeddings.safetensors", F.a);
    cvx_safetensors *st = tu_open(src);
    cvx_st_writer *w = cvx_stw_new();
    for (int i = 0; i < cvx_st_count(st); i++) {
        const cvx_tensor *t = cvx_st_tensor(st, i);
        float *x = cvx_tensor_f32_dup(t);
        for (int64_t k = 0; k < t->numel; k++) x[k] = cvx_bf16_to_f32(cvx_f32_to_bf16(x[k]));
        ASSERT_OK(cvx_stw_add_f32(w, t->name, CVX_F32, t->ndim, t->shape, x));
        free(x);
    }
    cvx_stw_metadata(w, "prompt", "A panda"), cvx_stw_metadata(w, "negative_prompt", "");
    cvx_stw_metadata(w, "model_id", "zai-org/CogVideoX-2b");
    cvx_stw_metadata(w, "dtype_info", "{\"prompt_embeds\": \"bfloat16\", \"negative_prompt_embeds\": \"bfloat16\"}");
    ASSERT_OK(cvx_stw_write(w, (snprintf(p, sizeof p, "%s/stage1_embeddings.safetensors", dir), p)));
    cvx_stw_free(w), cvx_st_close(st);
    /* stage 2: BF16 latents [B, C, T, H, W] (or the loop's [B, F, C, H, W]), dtype_info "torch.bfloat16" */
    snprintf(src, sizeof src, "%s/stage2_latents.safetensors", F.a);
    st = tu_open(src);
    const cvx_tensor *t = cvx_st_find(st, "latents");
    float *x = cvx_tensor_f32_dup(t), *y = x;
    int64_t shape[5];
    memcpy(shape, t->shape, sizeof shape);
    if (frames_major) {
        y = malloc((size_t)t->numel * sizeof(float));
        const int64_t C = shape[1], T = shape[2], HW = shape[3] * shape[4];
        for (int64_t c = 0; c < C; c++)
            for (int64_t f = 0; f < T; f++) memcpy(y + (f * C + c) * HW, x + (c * T + f) * HW, (size_t)HW * sizeof(float));
        shape[1] = T, shape[2] = C;
    }
    w = cvx_stw_new();
    ASSERT_OK(cvx_stw_add_f32(w, "latents", CVX_BF16, 5, shape, y));
    cvx_stw_metadata(w, "num_frames", "9"), cvx_stw_metadata(w, "num_inference_steps", "4");
    cvx_stw_metadata(w, "guidance_scale", "6.0"), cvx_stw_metadata(w, "seed", "42");
    cvx_stw_metadata(w, "height", "48"), cvx_stw_metadata(w, "width", "64");
    cvx_stw_metadata(w, "dtype_info", "{\"latents\": \"torch.bfloat16\"}");
    ASSERT_OK(cvx_stw_write(w, (snprintf(p, sizeof p, "%s/stage2_latents.safetensors", dir), p)));
    cvx_stw_free(w), cvx_st_close(st);
    if (y != x) free(y);
    free(x);
    const char *cfg = "{\n  \"prompt\": \"A panda\",\n  \"negative_prompt\": \"\",\n  \"model_id\": \"zai-org/CogVideoX-2b\",\n"
                      "  \"num_inference_steps\": 4,\n  \"guidance_scale\": 6.0,\n  \"seed\": 42,\n  \"height\": 48,\n"
                      "  \"width\": 64,\n  \"frames\": 9,\n  \"fps\": 8,\n  \"window_size\": null,\n  \"bqsize\": 3328,\n"
                      "  \"bkvsize\": 2816,\n  \"bkvcomputesize\": 256\n}\n";
    tu_write((snprintf(p, sizeof p, "%s/generation_config.json", dir), p), cfg, strlen(cfg));
}

static void test_staged_tpu_layout(void **s) {
    (void)s;
    static char out[65536], err[4096];
    char dir[128], raw[128], cmd[4096], pa[256], pb[256];
    snprintf(dir, sizeof dir, "%s/tpu", F.root), snprintf(raw, sizeof raw, "%s/tpu_raw", F.root);
    write_tpu_run(dir, 0), write_tpu_run(raw, 1);
    /* inspected: a stage-2 latents file of the staged TPU pipeline, BF16, its dtype_info */
    snprintf(cmd, sizeof cmd, "%s --json %s/stage2_latents.safetensors", F.inspect, dir);
    assert_int_equal(cap(cmd, out, sizeof out, err, sizeof err), 0);
    json_object *j = json_tokener_parse(out), *v, *t;
    assert_non_null(j);
    assert_true(json_object_object_get_ex(j, "kind", &v));
    assert_string_equal(json_object_get_string(v), "stage-2 latents");
    assert_true(json_object_object_get_ex(j, "producer", &v));
    assert_non_null(strstr(json_object_get_string(v), "staged TPU"));
    assert_true(json_object_object_get_ex(j, "tensors", &v));
    t = json_object_array_get_idx(v, 0);
    assert_true(json_object_object_get_ex(t, "dtype", &v));
    assert_string_equal(json_object_get_string(v), "BF16");
    assert_true(json_object_object_get_ex(t, "dtype_info", &v));
    assert_string_equal(json_object_get_string(v), "torch.bfloat16");
    json_object_put(j);
    /* compared with ours: the bf16 rounding only (2^-9 relative at most) */
    int rc = compare(F.a, dir, "--tol 4e-3", out, sizeof out, err, sizeof err);
    fputs(out, stdout);
    assert_int_equal(rc, 0);
    const double e = number_after(out, "stage1_embeddings.safetensors: prompt_embeds", "rel L2 ");
    const double l = number_after(out, "stage2_latents.safetensors: latents", "rel L2 ");
    print_message("  rel L2 embeddings %.3g, latents %.3g\n", e, l);
    assert_true(e > 0 && e < 4e-3 && l > 0 && l < 4e-3);
    assert_non_null(strstr(out, "BF16 (torch.bfloat16)"));
    assert_non_null(strstr(out, "bkvsize: A (absent), B 2816"));
    /* its loop layout [B, F, C, H, W] against ours: matched by the shapes */
    snprintf(pa, sizeof pa, "%s/stage2_latents.safetensors", raw), snprintf(pb, sizeof pb, "%s/stage2_latents.safetensors", F.a);
    rc = compare(pa, pb, "--tol 4e-3", out, sizeof out, err, sizeof err);
    fputs(out, stdout);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "[1, 3, 4, 6, 8] read as [B, C, F, H, W]"));
    assert_true(number_after(out, "stage2_latents.safetensors: latents", "rel L2 ") < 4e-3);
}

/* One error line on stderr naming `what`, and exit status `want`. */
static void expect_error(int rc, const char *err, int want, const char *what) {
    print_message("  -> %d: %s", rc, err);
    assert_int_equal(rc, want);
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    assert_non_null(strstr(err, "error: "));
    assert_non_null(strstr(err, what));
}

static void test_bad_inputs(void **s) {
    (void)s;
    static char out[65536], err[4096];
    char lat[256], bad[256], cmd[4096];
    snprintf(lat, sizeof lat, "%s/stage2_latents.safetensors", F.a);
    /* a truncated file */
    size_t n;
    char *buf = cvx_read_file(lat, &n);
    assert_non_null(buf);
    snprintf(bad, sizeof bad, "%s/truncated.safetensors", F.root);
    tu_write(bad, buf, n / 2);
    free(buf);
    expect_error(compare(lat, bad, "", out, sizeof out, err, sizeof err), err, 2, "truncated.safetensors");
    snprintf(cmd, sizeof cmd, "%s %s", F.inspect, bad);
    expect_error(cap(cmd, out, sizeof out, err, sizeof err), err, 1, "truncated.safetensors");
    /* latents of another family */
    cvx_safetensors *st = tu_open(lat);
    cvx_st_writer *w = cvx_stw_new();
    const cvx_tensor *t = cvx_st_find(st, "latents");
    ASSERT_OK(cvx_stw_add(w, "latents", t->dtype, t->ndim, t->shape, t->data));
    cvx_stw_metadata(w, "model_family", "Wan"), cvx_stw_metadata(w, "dtype_info", "{\"latents\": \"float32\"}");
    snprintf(bad, sizeof bad, "%s/wan_latents.safetensors", F.root);
    ASSERT_OK(cvx_stw_write(w, bad));
    cvx_stw_free(w);
    expect_error(compare(lat, bad, "", out, sizeof out, err, sizeof err), err, 2, "different families");
    /* mismatched shapes (another width) */
    w = cvx_stw_new();
    float *x = calloc(1 * 4 * 3 * 6 * 10, sizeof(float));
    ASSERT_OK(cvx_stw_add_f32(w, "latents", CVX_F32, 5, (int64_t[]){1, 4, 3, 6, 10}, x));
    cvx_stw_metadata(w, "model_family", "CogVideoX");
    free(x);
    snprintf(bad, sizeof bad, "%s/wide_latents.safetensors", F.root);
    ASSERT_OK(cvx_stw_write(w, bad));
    cvx_stw_free(w), cvx_st_close(st);
    expect_error(compare(lat, bad, "", out, sizeof out, err, sizeof err), err, 2, "not the same tensor in any layout");
    /* two kinds of file */
    snprintf(bad, sizeof bad, "%s/stage1_embeddings.safetensors", F.a);
    expect_error(compare(lat, bad, "", out, sizeof out, err, sizeof err), err, 2, "not comparable");
    /* a missing path, a bad flag value */
    expect_error(compare(lat, "/nonexistent/x.safetensors", "", out, sizeof out, err, sizeof err), err, 2,
                 "/nonexistent/x.safetensors");
    expect_error(compare(lat, lat, "--tol abc", out, sizeof out, err, sizeof err), err, 2, "--tol");
}

static json_object *inspect_json(const char *path) {
    static char out[1 << 20], err[4096];
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s --json %s", F.inspect, path);
    int rc = cap(cmd, out, sizeof out, err, sizeof err);
    if (rc) fail_msg("%s: exit %d: %s", cmd, rc, err);
    json_object *j = json_tokener_parse(out);
    if (!j) fail_msg("%s: not JSON", cmd);
    return j;
}
static const char *jget(json_object *o, const char *k) {
    json_object *v;
    return json_object_object_get_ex(o, k, &v) && v ? json_object_get_string(v) : NULL;
}

static void test_inspect(void **s) {
    (void)s;
    char p[1200];
    /* a run directory: every file; the latents' statistics are the file's; the fingerprint */
    json_object *j = inspect_json(F.a), *files, *v;
    assert_true(json_object_object_get_ex(j, "files", &files));
    assert_int_equal(json_object_array_length(files), 5);   /* config, embeddings, steps, latents, video */
    json_object *lat = NULL;
    for (size_t i = 0; i < json_object_array_length(files); i++) {
        json_object *f = json_object_array_get_idx(files, i);
        if (!strcmp(jget(f, "kind"), "stage-2 latents")) lat = f;
    }
    assert_non_null(lat);
    assert_string_equal(jget(lat, "family"), "CogVideoX");
    assert_string_equal(jget(lat, "mode"), "t2v");
    assert_string_equal(jget(lat, "belongs_to_generation_config"), "true");
    snprintf(p, sizeof p, "%s/stage2_latents.safetensors", F.a);
    cvx_safetensors *st = tu_open(p);
    size_t n;
    float *x = tu_f32(st, "latents", &n);
    cvx_stats want;
    cvx_stats_f32(x, n, &want);
    free(x), cvx_st_close(st);
    assert_true(json_object_object_get_ex(lat, "tensors", &v));
    json_object *t = json_object_array_get_idx(v, 0);
    assert_true(fabs(atof(jget(t, "min")) - want.min) <= 1e-12 * fabs(want.min));
    assert_true(fabs(atof(jget(t, "max")) - want.max) <= 1e-12 * fabs(want.max));
    assert_true(fabs(atof(jget(t, "std")) - want.std) <= 1e-12 * want.std);
    assert_string_equal(jget(t, "nan"), "0");
    json_object_put(j);
    /* a model directory: the family, and every parameter counted */
    j = inspect_json(F.model);
    assert_string_equal(jget(j, "family"), "CogVideoX");
    assert_string_equal(jget(j, "pipeline_class"), "CogVideoXPipeline");
    json_object *comps, *tr;
    assert_true(json_object_object_get_ex(j, "components", &comps) && json_object_object_get_ex(comps, "transformer", &tr));
    snprintf(p, sizeof p, "%s/transformer", F.model);
    cvx_weights *ws = cvx_weights_open(p);
    ASSERT_NONNULL(ws);
    long long params = 0;
    for (int i = 0; i < cvx_weights_count(ws); i++) params += cvx_weights_at(ws, i)->numel;
    cvx_weights_close(ws);
    assert_int_equal(atoll(jget(tr, "parameters")), params);
    assert_non_null(strstr(jget(tr, "loads_as"), "CogVideoX transformer"));
    json_object_put(j);
    /* a GGUF file and a MinusZone *_qweight file */
    j = inspect_json("tests/data/golden_gguf/cogvideox/cogvideox-Q4_0.gguf");
    assert_non_null(strstr(jget(j, "format"), "gguf cogvideox"));
    assert_non_null(strstr(jget(j, "loads_as"), "CogVideoX transformer"));
    assert_string_equal(jget(j, "gguf_architecture"), "cogvideox");
    json_object_put(j);
    j = inspect_json("tests/data/mz/cogvideox-mz-Q4_0.safetensors");
    assert_non_null(strstr(jget(j, "format"), "Q4_0"));
    assert_non_null(strstr(jget(j, "loads_as"), "CogVideoX transformer"));
    json_object_put(j);
    /* a checkpoint: its step and seal; one changed byte is reported */
    char dir[128];
    snprintf(dir, sizeof dir, "%s/ckpt", F.root);
    run_stage12(dir, "--checkpoint_every 1 --stop_after_steps 1");
    snprintf(p, sizeof p, "%s/stage2_checkpoint.safetensors", dir);
    j = inspect_json(p);
    assert_string_equal(jget(j, "kind"), "stage-2 checkpoint");
    assert_string_equal(jget(j, "steps_done"), "1");
    assert_string_equal(jget(j, "seal"), "ok");
    assert_string_equal(jget(j, "loop_layout"), "[B, F, C, H, W]");
    json_object_put(j);
    tu_poke_f32(p, "latents", 0, 123.0f);
    j = inspect_json(p);
    assert_non_null(strstr(jget(j, "seal"), "changed or damaged"));
    json_object_put(j);
    /* the step record */
    snprintf(p, sizeof p, "%s/stage2_steps.json", F.a);
    j = inspect_json(p);
    assert_string_equal(jget(j, "kind"), "stage-2 step record");
    assert_string_equal(jget(j, "steps_recorded"), "4");
    json_object_put(j);
}

static void test_make_install(void **s) {
    (void)s;
    char dir[64], cmd[8192], real[4096];
    const char *b = getenv("BUILD");
    b = b && b[0] ? b : "build";
    tu_mkdtemp(dir, sizeof dir);
    /* the sanitizer builds' archive needs their runtime in the example's link line too */
    const char *san = strstr(b, "asan") ? "SAN='-fsanitize=address,undefined -fno-omit-frame-pointer "
                                          "-fno-sanitize-recover=undefined'" : "";
    snprintf(cmd, sizeof cmd, "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -s BUILD=%s %s "
             "install PREFIX=%s/usr >/dev/null", b, san, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s/usr/bin/cvx-inspect --help | grep -q 'usage: cvx-inspect' && "
             "test -f %s/usr/share/man/man1/cvx-compare.1 && test -f %s/usr/lib/libcogvideox.a", dir, dir, dir);
    tu_run_ok(cmd);
    /* the example, built against the installed copy only (no -I of this tree) */
    snprintf(cmd, sizeof cmd, "cd %s && PKG_CONFIG_PATH=%s/usr/lib/pkgconfig gcc -std=gnu11 -o t2v '%s/examples/text2video.c' "
             "$(PKG_CONFIG_PATH=%s/usr/lib/pkgconfig pkg-config --cflags --libs cogvideox)", dir, dir,
             getcwd(real, sizeof real), dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s/t2v %s 'a panda' %s/out.mp4 2 2>/dev/null | grep -q 'wrote .*out.mp4: 9 frames'", dir,
             F.model, dir);
    tu_run_ok(cmd);
    assert_true(cvx_is_file((snprintf(cmd, sizeof cmd, "%s/out.mp4", dir), cmd)));
    /* uninstall removes every file it installed */
    snprintf(cmd, sizeof cmd, "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -s BUILD=%s "
             "uninstall PREFIX=%s/usr >/dev/null && test -z \"$(find %s/usr -type f)\"", b, dir, dir);
    tu_run_ok(cmd);
    tu_rmrf(dir);
}

/* make compare A=... B=...: cvx-compare with the given options (make -n); without A or B one line, exit 2 */
static void test_make_compare(void **s) {
    (void)s;
    static char out[16384], err[4096];
    int rc = cap("env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -n --no-print-directory compare A=run1 B='run 2' TOL=0.02 "
                 "MIN_PSNR=30 REPORT=r.png FRAMES=0,4", out, sizeof out, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "bin/cvx-compare 'run1' 'run 2' --tol 0.02 --min_psnr 30"));
    assert_non_null(strstr(out, "--report 'r.png' --frames 0,4"));
    rc = cap("env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory compare A=run1 2>&1", out, sizeof out,
             err, sizeof err);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(out, "make compare: give A=dir B=dir"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_runs),   cmocka_unit_test(test_bf16_against_f32),
        cmocka_unit_test(test_planted_step_found), cmocka_unit_test(test_staged_tpu_layout),
        cmocka_unit_test(test_bad_inputs),       cmocka_unit_test(test_inspect),
        cmocka_unit_test(test_make_install),     cmocka_unit_test(test_make_compare),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
