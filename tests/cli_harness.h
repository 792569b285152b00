/* The tests that run the three programs (bin/stage1 → stage2 → stage3) on a golden case and compare
 * the files they write (header-only like testutil.h: every test is one program). A case is
 * <root>/<name>/ with case.json ("call": the upstream call's arguments) and expected.safetensors.
 *
 *   return cmocka_run_group_tests(tests, cli_setup, NULL);   // the programs' paths into s1, s2, s3
 *   cli_stage1(WG, name, model, dir, "--image …");          // the case's prompts through stage 1
 *   cli_case_call k; cli_case_call_load(&k, "e2e_2b");       // a CogVideoX case's call, typed
 *   cli_check(WG, name, file, "latents", "final_latents", 1e-4);
 *   cli_check_frames(WG, name, frames_file);
 *   cli_stage23_resumed(WG, name, dir, dir2, "--seed 42 …");  // stages 2 and 3 checked, stop + resume
 *   if (!cli_same_file(a, b)) fail_msg(…);
 *   cli_expect_refused(cmd, "--frames", out_file);          // exit != 0, the error says it, no file
 */
#ifndef CVX_CLI_HARNESS_H
#define CVX_CLI_HARNESS_H

#include "golden_harness.h"
#include "dtype.h"
#include "safetensors.h"

#include <sys/stat.h>

/* the programs' paths (bin/stage1, bin/stage2, bin/stage3 of the build under test) */
static __attribute__((unused)) char s1[256], s2[256], s3[256];

/* cmd refused: a non-zero exit, an error holding `want` (printed), and no must_not_exist (NULL:
 * nothing checked) */
static inline void cli_expect_refused(const char *cmd, const char *want, const char *must_not_exist) {
    char err[8192];
    int rc = tu_run(cmd, err, sizeof err);
    print_message("  [%s] exit %d: %s", want, rc, err);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err, want));
    struct stat st;
    if (must_not_exist) assert_int_not_equal(stat(must_not_exist, &st), 0);
}

/* cmocka group setup: find the three programs */
static inline int cli_setup(void **state) {
    (void)state;
    tu_program(s1, sizeof s1, "stage1");
    tu_program(s2, sizeof s2, "stage2");
    tu_program(s3, sizeof s3, "stage3");
    return 0;
}

/* call.<key> of <root>/<name>/case.json as a string ("" when absent or null) */
static inline void cli_call_str(const char *root, const char *name, const char *key, char *out, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/case.json", root, name);
    cvx_config cfg;
    ASSERT_OK(cvx_config_load(&cfg, path));
    json_object *call, *v;
    assert_true(json_object_object_get_ex(cfg.root, "call", &call));
    out[0] = 0;
    if (json_object_object_get_ex(call, key, &v) && v) snprintf(out, n, "%s", json_object_get_string(v));
    cvx_config_free(&cfg);
}

/* A CogVideoX golden case's call (tests/data/golden/<name>/case.json): prompts, size, steps,
 * guidance, seed, dynamic CFG, and for V2V the strength and the video's frame count (the
 * top-level num_frames when the call has none). */
typedef struct {
    const char *name;
    char prompt[512], negative[512];
    int64_t frames, height, width, steps, seed;
    double guidance, strength;   /* strength 0 when the call has none */
    int dynamic;
} cli_case_call;

static inline void cli_case_call_load(cli_case_call *c, const char *name) {
    char path[512];
    snprintf(path, sizeof path, GOLDEN "/%s/case.json", name);
    cvx_config cfg;
    ASSERT_OK(cvx_config_load(&cfg, path));
    json_object *call;
    assert_true(json_object_object_get_ex(cfg.root, "call", &call));
    cvx_config cc = {.root = call};
    snprintf(cc.path, sizeof cc.path, "%s:call", path);
    const char *s;
    memset(c, 0, sizeof *c);
    c->name = name;
    ASSERT_OK(cvx_cfg_str(&cc, "prompt", &s));
    snprintf(c->prompt, sizeof c->prompt, "%s", s);
    ASSERT_OK(cvx_cfg_str(&cc, "negative_prompt", &s));
    snprintf(c->negative, sizeof c->negative, "%s", s);
    if (cvx_cfg_has(&cc, "num_frames")) ASSERT_OK(cvx_cfg_int(&cc, "num_frames", &c->frames));
    else ASSERT_OK(cvx_cfg_int(&cfg, "num_frames", &c->frames));
    ASSERT_OK(cvx_cfg_int(&cc, "height", &c->height));
    ASSERT_OK(cvx_cfg_int(&cc, "width", &c->width));
    ASSERT_OK(cvx_cfg_int(&cc, "num_inference_steps", &c->steps));
    ASSERT_OK(cvx_cfg_int(&cc, "seed", &c->seed));
    ASSERT_OK(cvx_cfg_num(&cc, "guidance_scale", &c->guidance));
    ASSERT_OK(cvx_cfg_bool(&cc, "use_dynamic_cfg", &c->dynamic));
    if (cvx_cfg_has(&cc, "strength")) ASSERT_OK(cvx_cfg_num(&cc, "strength", &c->strength));
    cvx_config_free(&cfg);
}

/* Stage 1 on the case's prompt and negative prompt with model_dir (NULL: <root>/<name>/model) into
 * dir (extra: more flags, e.g. --image). */
static inline void cli_stage1(const char *root, const char *name, const char *model_dir, const char *dir,
                              const char *extra) {
    char p[1024], neg[1024], qp[1100], qn[1100], cmd[4096], model[512];
    if (!model_dir) snprintf(model, sizeof model, "%s/%s/model", root, name), model_dir = model;
    cli_call_str(root, name, "prompt", p, sizeof p);
    cli_call_str(root, name, "negative_prompt", neg, sizeof neg);
    tu_shell_quote(qp, sizeof qp, p);
    tu_shell_quote(qn, sizeof qn, neg);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt %s --negative_prompt %s --model_dir %s --output_dir %s %s", s1, qp,
             qn, model_dir, dir, extra);
    tu_run_ok(cmd);
}

/* a tensor's values as newly allocated floats (an I64 mask as 0/1) */
static inline float *cli_values(const cvx_tensor *t) {
    if (t->dtype != CVX_I64) return cvx_tensor_f32_dup(t);
    float *f = malloc(sizeof(float) * (size_t)t->numel);
    for (int64_t i = 0; i < t->numel; i++) {
        int64_t v;
        memcpy(&v, (const char *)t->data + 8 * i, 8);
        f[i] = (float)v;
    }
    return f;
}

/* Tensor `got` of the written file against `want` of <root>/<name>/expected.safetensors: the same
 * element count and relative L2 <= tol, or every element equal when tol is 0. */
static inline void cli_check(const char *root, const char *name, const char *file, const char *got, const char *want,
                             double tol) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/expected.safetensors", root, name);
    cvx_safetensors *g = tu_open(path), *f = tu_open(file);
    const cvx_tensor *a = cvx_st_find(f, got), *b = cvx_st_find(g, want);
    if (!a) fail_msg("%s: no tensor '%s'", file, got);
    if (!b) fail_msg("%s: no tensor '%s'", path, want);
    float *x = cli_values(a), *y = cli_values(b);
    const size_t n = (size_t)a->numel;
    assert_int_equal(n, (size_t)b->numel);
    print_message("  %s %s: ", name, want);
    if (tol == 0) {
        for (size_t i = 0; i < n; i++)
            if (x[i] != y[i]) fail_msg("%s: %s[%zu] = %g, expected %g", file, got, i, x[i], y[i]);
        print_message("exact\n");
    } else {
        ASSERT_REL_L2(x, y, n, tol);
    }
    free(x), free(y);
    cvx_st_close(f), cvx_st_close(g);
}

/* stage 3's --output_frames file ('decoded' [1, 3, T, H, W]) against the case's frames_np
 * [1, T, H, W, 3]: relative L2 <= 1e-3 */
static inline void cli_check_frames(const char *root, const char *name, const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/expected.safetensors", root, name);
    cvx_safetensors *g = tu_open(path), *f = tu_open(file);
    const cvx_tensor *ft = cvx_st_find(f, "decoded");
    assert_non_null(ft);
    float *d = cvx_tensor_f32_dup(ft);
    size_t n;
    float *want = tu_f32(g, "frames_np", &n);
    const int64_t T = ft->shape[2], HW = ft->shape[3] * ft->shape[4];
    assert_int_equal(n, (size_t)(3 * T * HW));
    float *post = gh_frames_np(d, T, HW);
    print_message("  %s frames_np: ", name);
    ASSERT_REL_L2(post, want, n, 1e-3);
    free(d), free(want), free(post);
    cvx_st_close(f), cvx_st_close(g);
}

/* 1 when the two files have the same bytes */
static inline int cli_same_file(const char *a, const char *b) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

/* A text-to-video run past stage 1 (dir holds stage 1's files, dir2 is empty): stage 2 with flags,
 * its latents against the case's final_latents (1e-4); stage 3 (video and frames), its frames
 * against frames_np (1e-3); then stage 2 in dir2 on a copy of stage 1's files stopped after 2
 * steps and resumed: the same latents bytes as the straight run. */
static inline void cli_stage23_resumed(const char *root, const char *name, const char *dir, const char *dir2,
                                       const char *flags) {
    char cmd[4096], path[512], path2[512];
    snprintf(cmd, sizeof cmd, "cp %s/stage1_embeddings.safetensors %s/generation_config.json %s/", dir, dir, dir2);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s %s", s2, dir, flags);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cli_check(root, name, path, "latents", "final_latents", 1e-4);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_video %s/v.mp4 --output_frames %s/frames.safetensors",
             s3, dir, dir, dir);
    tu_run_ok(cmd);
    snprintf(path2, sizeof path2, "%s/frames.safetensors", dir);
    cli_check_frames(root, name, path2);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s %s --stop_after_steps 2", s2, dir2, flags);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s %s --resume", s2, dir2, flags);
    tu_run_ok(cmd);
    snprintf(path2, sizeof path2, "%s/stage2_latents.safetensors", dir2);
    assert_true(cli_same_file(path, path2));
}

#endif
