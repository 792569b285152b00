/* The stage2 program end to end ($BUILD/bin/stage2) on the golden e2e models, with the golden
 * prompt embeddings written as a stage1 output directory:
 *   - DDIM (e2e_2b): stage2_latents.safetensors holds exactly `latents` F32 [1, C, T, h, w] equal
 *     to the golden final latents permuted from [1, F, C, h, w] (rel L2 <= 1e-4), the metadata,
 *     and generation_config.json keeps stage1's keys and gains stage2's; no checkpoint or temp
 *     file is left;
 *   - DPM + dynamic CFG (e2e_5b_dyncfg) into another --output_dir with --output_dtype bf16;
 *   - --stop_after_steps 2 then --resume gives a file bit-identical to an uninterrupted run;
 *   - the error table: wrong embedding dim, frames not 4k+1, bad height, missing input file,
 *     --resume with changed settings / without a checkpoint, bad flags, no model: each exits
 *     non-zero with one "stage2: error: ..." line on stderr and writes nothing. */
#include "testutil.h"
#include "config.h"
#include "fileio.h"

#include <dirent.h>
#include <json-c/json.h>
#include <limits.h>

static char prog[4096];

static int setup(void **state) {
    (void)state;
    tu_program(prog, sizeof prog, "stage2");
    if (!cvx_is_file(prog)) {
        fprintf(stderr, "%s not built (make BUILD=... %s)\n", prog, prog);
        return -1;
    }
    return 0;
}

#define FMT(buf, ...) \
    do { if (snprintf((buf), sizeof(buf), __VA_ARGS__) >= (int)sizeof(buf)) fail_msg("buffer too small"); } while (0)

/* A stage1 output directory from a golden case: its embeddings (or [1, L, D] zeros when dim > 0),
 * and a generation_config.json with the model's absolute path (model_id may be omitted). */
static void make_input(const char *dir, const char *golden_case, int dim, int with_model_id) {
    char path[4200], model[PATH_MAX], rel[512];
    FMT(rel, GOLDEN "/%s/model", golden_case);
    if (!realpath(rel, model)) fail_msg("realpath %s", rel);
    cvx_st_writer *w = cvx_stw_new();
    if (dim > 0) {
        int64_t shape[3] = {1, 226, dim};
        float *z = calloc((size_t)226 * dim, sizeof(float));
        ASSERT_OK(cvx_stw_add_f32(w, "prompt_embeds", CVX_F32, 3, shape, z));
        ASSERT_OK(cvx_stw_add_f32(w, "negative_prompt_embeds", CVX_F32, 3, shape, z));
        free(z);
    } else {
        FMT(path, GOLDEN "/%s/expected.safetensors", golden_case);
        cvx_safetensors *g = tu_open(path);
        const char *names[2] = {"prompt_embeds", "negative_prompt_embeds"};
        for (int k = 0; k < 2; k++) {
            const cvx_tensor *t = cvx_st_find(g, names[k]);
            ASSERT_NONNULL(t);
            ASSERT_OK(cvx_stw_add(w, names[k], t->dtype, t->ndim, t->shape, t->data));
        }
        cvx_st_close(g);
    }
    ASSERT_OK(cvx_stw_metadata(w, "prompt", "a golden prompt"));
    if (with_model_id) ASSERT_OK(cvx_stw_metadata(w, "model_id", model));
    FMT(path, "%s/stage1_embeddings.safetensors", dir);
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);
    char json[PATH_MAX + 256];
    if (with_model_id)
        FMT(json, "{\"prompt\": \"a golden prompt\", \"model_id\": \"%s\", \"custom_key\": [1, 2]}\n", model);
    else
        FMT(json, "{\"prompt\": \"a golden prompt\", \"custom_key\": [1, 2]}\n");
    FMT(path, "%s/generation_config.json", dir);
    tu_write(path, json, strlen(json));
}

static const char *meta(const cvx_safetensors *st, const char *key) {
    const char *v = cvx_st_metadata(st, key);
    if (!v) fail_msg("%s: metadata '%s' missing", cvx_st_path(st), key);
    return v;
}

/* The golden final latents [1, F, C, h, w] permuted to [1, C, F, h, w]. */
static float *golden_output(const char *golden_case, int64_t *shape) {
    char path[512];
    FMT(path, GOLDEN "/%s/expected.safetensors", golden_case);
    cvx_safetensors *g = tu_open(path);
    const cvx_tensor *t = cvx_st_find(g, "final_latents");
    ASSERT_NONNULL(t);
    int64_t F = t->shape[1], C = t->shape[2], hw = t->shape[3] * t->shape[4];
    float *src = cvx_tensor_f32_dup(t), *dst = malloc((size_t)t->numel * sizeof(float));
    cvx_permute_fc_to_cf(src, (int)F, (int)C, (size_t)hw, 0, dst);
    int64_t s[5] = {1, C, F, t->shape[3], t->shape[4]};
    memcpy(shape, s, sizeof s);
    free(src);
    cvx_st_close(g);
    return dst;
}

static json_object *genconfig(const char *dir, cvx_config *c) {
    char path[4200];
    FMT(path, "%s/generation_config.json", dir);
    ASSERT_OK(cvx_config_load(c, path));
    return c->root;
}

static void check_common_genconfig(json_object *r) {
    json_object *v;
    assert_true(json_object_object_get_ex(r, "prompt", &v));
    assert_string_equal(json_object_get_string(v), "a golden prompt");
    assert_true(json_object_object_get_ex(r, "custom_key", &v));
    assert_int_equal(json_object_array_length(v), 2);
    assert_true(json_object_object_get_ex(r, "num_inference_steps", &v));
    assert_int_equal(json_object_get_int(v), 4);
    assert_true(json_object_object_get_ex(r, "height", &v));
    assert_int_equal(json_object_get_int(v), 48);
    assert_true(json_object_object_get_ex(r, "width", &v));
    assert_int_equal(json_object_get_int(v), 64);
    assert_true(json_object_object_get_ex(r, "frames", &v));
    assert_int_equal(json_object_get_int(v), 9);
    assert_true(json_object_object_get_ex(r, "fps", &v));
    assert_int_equal(json_object_get_int(v), 8);
    assert_true(json_object_object_get_ex(r, "guidance_scale", &v));
    assert_true(json_object_get_double(v) == 6.0);
    assert_true(json_object_object_get_ex(r, "model_id", &v));
}

static void test_ddim_output(void **state) {
    (void)state;
    char dir[256], cmd[8192], err[8192], path[4200];
    tu_mkdtemp(dir, sizeof dir);
    make_input(dir, "e2e_2b", 0, 1);
    FMT(cmd, "%s --input_dir %s --num_inference_steps 4 --frames 9 --height 48 --width 64 --seed 42 --threads 2",
        prog, dir);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    print_message("%s", err);
    assert_non_null(strstr(err, "wrote "));          /* the one-line summary */
    assert_non_null(strstr(err, "video 9 frames 64x48 ->"));   /* width x height, as stage 3 prints it */
    assert_int_equal(tu_count_entries(dir), 4);          /* embeddings, genconfig, latents, stage2_steps.json: no checkpoint / temp */

    FMT(path, "%s/stage2_latents.safetensors", dir);
    cvx_safetensors *st = tu_open(path);
    assert_int_equal(cvx_st_count(st), 1);
    const cvx_tensor *t = cvx_st_find(st, "latents");
    ASSERT_NONNULL(t);
    assert_int_equal(t->dtype, CVX_F32);
    int64_t want_shape[5];
    float *want = golden_output("e2e_2b", want_shape);
    assert_int_equal(t->ndim, 5);
    assert_memory_equal(t->shape, want_shape, sizeof want_shape);
    float *got = cvx_tensor_f32_dup(t);
    ASSERT_REL_L2(got, want, (size_t)t->numel, 1e-4);
    assert_string_equal(meta(st, "num_frames"), "9");
    assert_string_equal(meta(st, "num_inference_steps"), "4");
    assert_string_equal(meta(st, "guidance_scale"), "6.0");
    assert_string_equal(meta(st, "seed"), "42");
    assert_string_equal(meta(st, "height"), "48");
    assert_string_equal(meta(st, "width"), "64");
    json_object *di = json_tokener_parse(meta(st, "dtype_info")), *v;
    ASSERT_NONNULL(di);
    assert_true(json_object_object_get_ex(di, "latents", &v));
    assert_string_equal(json_object_get_string(v), "float32");
    json_object_put(di);
    cvx_st_close(st);

    cvx_config c;
    json_object *r = genconfig(dir, &c);
    check_common_genconfig(r);
    assert_true(json_object_object_get_ex(r, "scheduler", &v));
    assert_string_equal(json_object_get_string(v), "ddim");
    assert_true(json_object_object_get_ex(r, "use_dynamic_cfg", &v));
    assert_false(json_object_get_boolean(v));
    assert_true(json_object_object_get_ex(r, "seed", &v));
    assert_int_equal(json_object_get_int64(v), 42);
    cvx_config_free(&c);
    free(got);
    free(want);
    tu_rmrf(dir);
}

static void test_dpm_dyncfg_bf16_output_dir(void **state) {
    (void)state;
    char dir[256], out[512], cmd[8192], err[8192], path[4200];
    tu_mkdtemp(dir, sizeof dir);
    make_input(dir, "e2e_5b_dyncfg", 0, 1);
    FMT(out, "%s/out/sub", dir);
    FMT(cmd, "%s --input_dir %s --output_dir %s --num_inference_steps 4 --frames 9 --height 48 --width 64 --seed 44 "
        "--use_dynamic_cfg --output_dtype bf16 --quiet", prog, dir, out);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_string_equal(err, "");                      /* --quiet */
    assert_int_equal(tu_count_entries(out), 3);           /* latents + genconfig + stage2_steps.json */
    FMT(path, "%s/stage2_latents.safetensors", out);
    cvx_safetensors *st = tu_open(path);
    const cvx_tensor *t = cvx_st_find(st, "latents");
    ASSERT_NONNULL(t);
    assert_int_equal(t->dtype, CVX_BF16);
    int64_t want_shape[5];
    float *want = golden_output("e2e_5b_dyncfg", want_shape);
    assert_memory_equal(t->shape, want_shape, sizeof want_shape);
    float *got = cvx_tensor_f32_dup(t);
    ASSERT_REL_L2(got, want, (size_t)t->numel, 4e-3);  /* bf16 storage: 8 bits of mantissa */
    assert_non_null(strstr(meta(st, "dtype_info"), "bfloat16"));
    assert_string_equal(meta(st, "seed"), "44");
    cvx_st_close(st);
    cvx_config c;
    json_object *r = genconfig(out, &c), *v;
    check_common_genconfig(r);                         /* stage1's keys carried to the new dir */
    assert_true(json_object_object_get_ex(r, "scheduler", &v));
    assert_string_equal(json_object_get_string(v), "dpm");
    assert_true(json_object_object_get_ex(r, "use_dynamic_cfg", &v));
    assert_true(json_object_get_boolean(v));
    cvx_config_free(&c);
    free(got);
    free(want);
    tu_rmrf(dir);
}

static void *file_bytes(const char *path, size_t *n) {
    void *b = cvx_read_file(path, n);
    ASSERT_NONNULL(b);
    return b;
}

static void test_resume(void **state) {
    (void)state;
    char a[256], b[256], cmd[8192], err[8192], pa[4200], pb[4200], ck[4200];
    const char *args = "--num_inference_steps 4 --frames 9 --height 48 --width 64 --seed 43 --quiet";
    tu_mkdtemp(a, sizeof a);
    tu_mkdtemp(b, sizeof b);
    make_input(a, "e2e_5b", 0, 1);
    make_input(b, "e2e_5b", 0, 1);
    FMT(cmd, "%s --input_dir %s %s", prog, a, args);
    if (tu_run(cmd, err, sizeof err) != 0) fail_msg("%s", err);

    FMT(cmd, "%s --input_dir %s %s --stop_after_steps 2", prog, b, args);
    if (tu_run(cmd, err, sizeof err) != 0) fail_msg("%s", err);
    FMT(ck, "%s/stage2_checkpoint.safetensors", b);
    FMT(pb, "%s/stage2_latents.safetensors", b);
    assert_true(cvx_is_file(ck));
    assert_false(cvx_is_file(pb));
    cvx_safetensors *st = tu_open(ck);                 /* what the checkpoint holds */
    assert_non_null(cvx_st_find(st, "old_pred_original_sample"));
    assert_non_null(cvx_st_find(st, "generator"));
    assert_string_equal(meta(st, "steps_done"), "2");
    assert_string_equal(meta(st, "run.seed"), "43");
    cvx_st_close(st);

    /* changed settings: refused, the checkpoint is kept, nothing written */
    FMT(cmd, "%s --input_dir %s %s --resume --guidance_scale 5", prog, b, args);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  %s", err);
    assert_non_null(strstr(err, "stage2: error:"));
    assert_non_null(strstr(err, "guidance_scale"));
    char *nl = strchr(err, '\n');
    assert_true(nl && nl[1] == 0);                     /* one line */
    assert_true(cvx_is_file(ck));
    assert_false(cvx_is_file(pb));

    FMT(cmd, "%s --input_dir %s %s --resume", prog, b, args);
    if (tu_run(cmd, err, sizeof err) != 0) fail_msg("%s", err);
    assert_false(cvx_is_file(ck));                     /* deleted after the final write */
    FMT(pa, "%s/stage2_latents.safetensors", a);
    size_t na, nb;
    void *ba = file_bytes(pa, &na), *bb = file_bytes(pb, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ba, bb, na);                   /* the whole file, bit for bit */
    print_message("  stop after 2 + --resume: %s == %s byte for byte\n", pb, pa);
    free(ba);
    free(bb);
    tu_rmrf(a);
    tu_rmrf(b);
}

/* One error case: in a fresh input dir, `extra` flags; must exit non-zero with exactly one
 * "stage2: error:" line containing `want` and leave the directory as it was. */
static void expect_error(const char *golden_case, int dim, int with_model_id, int with_input, const char *extra,
                         const char *want) {
    char dir[256], cmd[8192], err[8192];
    tu_mkdtemp(dir, sizeof dir);
    if (with_input) make_input(dir, golden_case, dim, with_model_id);
    int before = tu_count_entries(dir);
    FMT(cmd, "%s --input_dir %s --num_inference_steps 4 --frames 9 --height 48 --width 64 %s", prog, dir, extra);
    int rc = tu_run(cmd, err, sizeof err);
    print_message("  [%s] exit %d: %s", extra, rc, err);
    assert_int_not_equal(rc, 0);
    assert_true(strncmp(err, "stage2: error: ", 15) == 0);
    assert_non_null(strstr(err, want));
    char *nl = strchr(err, '\n');
    assert_true(nl && nl[1] == 0);                     /* exactly one line */
    assert_int_equal(tu_count_entries(dir), before);      /* nothing written */
    tu_rmrf(dir);
}

static void test_errors(void **state) {
    (void)state;
    expect_error("e2e_2b", 31, 1, 1, "", "text_embed_dim 32");
    expect_error("e2e_2b", 0, 1, 1, "--frames 10", "--frames 10");
    expect_error("e2e_2b", 0, 1, 1, "--height 50", "--height 50");
    expect_error("e2e_2b", 0, 1, 1, "--width 72", "--width 72");   /* multiple of 8, not of 16 */
    expect_error("e2e_2b", 0, 1, 0, "", "stage1_embeddings.safetensors: input file not found");
    expect_error("e2e_2b", 0, 1, 1, "--resume --quiet", "no checkpoint");
    expect_error("e2e_2b", 0, 0, 1, "", "no model given");
    expect_error("e2e_2b", 0, 1, 1, "--scheduler heun", "--scheduler must be one of ddim, dpm, unipc, euler, got 'heun'");
    expect_error("e2e_2b", 0, 1, 1, "--scheduler euler", "the model's scheduler is ddim (CogVideoXDDIMScheduler); euler is not one of its kind");
    expect_error("e2e_2b", 0, 1, 1, "--output_dtype f16", "--output_dtype");
    expect_error("e2e_2b", 0, 1, 1, "--num_inference_steps 0", "--num_inference_steps");
    expect_error("e2e_2b", 0, 1, 1, "--model_dir /nonexistent/model", "/nonexistent/model");
    expect_error("e2e_2b", 0, 1, 1, "--num_inference_steps 1001", "num_train_timesteps");
}

static void test_resume_settings_refused(void **state) {
    (void)state;
    /* a checkpoint from 4 steps, resumed asking for 3 / another seed / another scheduler */
    char dir[256], cmd[8192], err[8192];
    const char *changes[] = {"--num_inference_steps 3", "--seed 7", "--scheduler dpm", "--frames 13",
                             "--use_dynamic_cfg"};
    const char *keys[] = {"num_inference_steps=", "seed=", "scheduler=", "frames=", "use_dynamic_cfg="};
    tu_mkdtemp(dir, sizeof dir);
    make_input(dir, "e2e_2b", 0, 1);
    FMT(cmd, "%s --input_dir %s --num_inference_steps 4 --frames 9 --height 48 --width 64 --quiet --stop_after_steps 1",
        prog, dir);
    if (tu_run(cmd, err, sizeof err) != 0) fail_msg("%s", err);
    int before = tu_count_entries(dir);
    for (size_t k = 0; k < sizeof changes / sizeof changes[0]; k++) {
        FMT(cmd, "%s --input_dir %s --num_inference_steps 4 --frames 9 --height 48 --width 64 --quiet --resume %s",
            prog, dir, changes[k]);
        assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
        print_message("  [%s] %s", changes[k], err);
        assert_non_null(strstr(err, keys[k]));
        char *nl = strchr(err, '\n');
        assert_true(nl && nl[1] == 0);
        assert_int_equal(tu_count_entries(dir), before);
    }
    tu_rmrf(dir);
}

/* --cache_threshold <= 0 turns caching off, -1 included (it was the "use the default" sentinel
 * and turned caching on at 0.2, issue 21): the latents are the uncached run's, byte for byte, and
 * generation_config.json records cache "none". */
static void test_cache_threshold_negative_off(void **state) {
    (void)state;
    char dir[256], cmd[8192], err[8192], path[4200];
    const char *runs[] = {"--cache teacache --cache_threshold -1", "--cache fbcache --cache_threshold -1",
                          "--cache teacache --cache_threshold -0.5", "--cache teacache --cache_threshold 0"};
    tu_mkdtemp(dir, sizeof dir);
    make_input(dir, "e2e_2b", 0, 1);
    FMT(cmd, "%s --input_dir %s --num_inference_steps 4 --frames 9 --height 48 --width 64 --quiet", prog, dir);
    tu_run_ok(cmd);
    FMT(path, "%s/stage2_latents.safetensors", dir);
    size_t n0, n1;
    char *want = cvx_read_file(path, &n0);
    ASSERT_NONNULL(want);
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        FMT(cmd, "%s --input_dir %s --num_inference_steps 4 --frames 9 --height 48 --width 64 %s", prog, dir, runs[k]);
        int rc = tu_run(cmd, err, sizeof err);
        if (rc != 0) fail_msg("[%s] exit %d: %s", runs[k], rc, err);
        print_message("  [%s] %s", runs[k], strstr(err, "wrote ") ? strstr(err, "wrote ") : err);
        if (strstr(err, "step cache") || strstr(err, "steps computed")) fail_msg("[%s] caching ran: %s", runs[k], err);
        char *got = cvx_read_file(path, &n1);
        ASSERT_NONNULL(got);
        if (n0 != n1 || memcmp(want, got, n0) != 0) fail_msg("[%s] latents differ from the uncached run", runs[k]);
        free(got);
        cvx_config c;
        json_object *r = genconfig(dir, &c), *v;
        assert_true(json_object_object_get_ex(r, "cache", &v));
        assert_string_equal(json_object_get_string(v), "none");
        cvx_config_free(&c);
    }
    free(want);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ddim_output),
        cmocka_unit_test(test_dpm_dyncfg_bf16_output_dir),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_resume_settings_refused),
        cmocka_unit_test(test_cache_threshold_negative_off),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
