/* LoRA adapters through the three programs (bin/stage1 → bin/stage2 --lora FILE:WEIGHT →
 * bin/stage3) against the golden end-to-end runs (tests/data/golden_adapters/e2e_lora_*, copied
 * from shared/golden_adapters; diffusers 0.33.1 + peft 0.15.2 pipelines with the adapters active):
 *   - each case's command lines from case.json: prompt embeddings (1e-4), final latents (1e-4
 *     max abs, and far from the no-adapter run), decoded frames (1e-3); CogVideoX one diffusers
 *     LoRA at 0.8, Wan two at once (ComfyUI/Kijai with alpha at 1.0 + diffusers at 0.5);
 *   - --lora_fuse: the same latents (1e-4); generation_config.json records the files, weights,
 *     hashes and the mode;
 *   - --resume: the same LoRA set continues bit-identically; another weight, another file, no LoRA
 *     or fused instead of unfused is refused with one line naming the setting;
 *   - a LoRA of the other family, a missing file, --lora_fuse alone, --flow_shift on CogVideoX:
 *     one error line each;
 *   - --flow_shift: the config's own value gives the same bytes, another one differs and is
 *     recorded; the few-step distilled form (--guidance_scale 1, 4 steps) runs one branch;
 *   - bf16: the LoRA run is no farther from the f32 golden than the no-LoRA bf16 run from its own. */
#include "golden_harness.h"

#include <math.h>

#define ADAPTERS "tests/data/golden_adapters/"
#define TOL_LATENTS 1e-4
#define TOL_FRAMES 1e-3

typedef struct {
    gh_case c;
    char dir[1024];                    /* absolute case directory */
    char out[64];                      /* scratch (tu_rmrf) */
    char s1[1024], s2[1024], s3[1024];  /* absolute program paths */
    char args[3][8192];                /* the stages' argv from case.json, <OUT> = out/run */
    int wan;
} ecase;

/* argv list → one shell-quoted string, <OUT> replaced. */
static void join_args(json_object *arr, const char *out, char *buf, size_t n) {
    buf[0] = 0;
    for (size_t i = 0; i < gh_len(arr); i++) {
        const char *a = gh_str(gh_at(arr, i));
        char v[4096];
        const char *o = strstr(a, "<OUT>");
        if (o) snprintf(v, sizeof v, "%.*s%s%s", (int)(o - a), a, out, o + 5);
        else snprintf(v, sizeof v, "%s", a);
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, " '");
        for (const char *p = v; *p; p++) {   /* ' → '\'' */
            len = strlen(buf);
            if (*p == '\'') snprintf(buf + len, n - len, "'\\''");
            else snprintf(buf + len, n - len, "%c", *p);
        }
        len = strlen(buf);
        snprintf(buf + len, n - len, "'");
    }
}

static void abs_program(char *buf, size_t n, const char *name) {
    char rel[256];
    tu_program(rel, sizeof rel, name);
    if (!realpath(rel, buf)) fail_msg("%s: not built", rel);
    (void)n;
}

static void ec_open(ecase *e, const char *name) {
    memset(e, 0, sizeof *e);
    char rel[256], run[128];
    snprintf(rel, sizeof rel, ADAPTERS "%s", name);
    if (!realpath(rel, e->dir)) fail_msg("%s: missing", rel);
    gh_open(&e->c, rel);
    e->wan = strstr(name, "wan") != NULL;
    abs_program(e->s1, sizeof e->s1, "stage1");
    abs_program(e->s2, sizeof e->s2, "stage2");
    abs_program(e->s3, sizeof e->s3, "stage3");
    tu_mkdtemp(e->out, sizeof e->out);
    snprintf(run, sizeof run, "%s/run", e->out);
    json_object *cli = gh_json(&e->c, "cli");
    join_args(gh_get(cli, "stage1"), run, e->args[0], sizeof e->args[0]);
    join_args(gh_get(cli, "stage2"), run, e->args[1], sizeof e->args[1]);
    join_args(gh_get(cli, "stage3"), run, e->args[2], sizeof e->args[2]);
}

static void ec_close(ecase *e) {
    tu_rmrf(e->out);
    gh_close(&e->c);
}

/* Run `prog args extra` in the case directory (relative paths of case.json resolve there). */
static int ec_run(const ecase *e, const char *prog, const char *args, const char *extra, char *err, size_t errn) {
    char cmd[20000];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s %s --threads 2 %s", e->dir, prog, args, extra);
    return tu_run(cmd, err, errn);
}

static void ec_run_ok(const ecase *e, const char *prog, const char *args, const char *extra) {
    char err[16384];
    if (ec_run(e, prog, args, extra, err, sizeof err)) fail_msg("%s %s %s failed:\n%s", prog, args, extra, err);
}

/* A stage-2 run of the case into out/<sub> from out/run's embeddings: its latents (f32). */
static float *stage2_into(const ecase *e, const char *sub, const char *extra, size_t *n) {
    char dir[256], cmd[1024], a[16384], path[300];
    snprintf(dir, sizeof dir, "%s/%s", e->out, sub);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/run/stage1_embeddings.safetensors %s/run/generation_config.json %s/",
             dir, e->out, e->out, dir);
    tu_run_ok(cmd);
    /* the case's stage-2 argv with another output/input directory */
    snprintf(a, sizeof a, "%s --input_dir %s --output_dir %s", e->args[1], dir, dir);
    ec_run_ok(e, e->s2, a, extra);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cvx_safetensors *st = tu_open(path);
    float *z = tu_f32(st, "latents", n);
    cvx_st_close(st);
    return z;
}

static const char *final_key(const ecase *e) { return e->wan ? "final_latents" : "final_latents_BCFHW"; }

/* ------------------------------------------------------------------ the case's own command lines */

static void check_case(const char *name) {
    ecase e;
    ec_open(&e, name);
    char path[300];
    ec_run_ok(&e, e.s1, e.args[0], "");
    snprintf(path, sizeof path, "%s/run/stage1_embeddings.safetensors", e.out);
    cvx_safetensors *st = tu_open(path);
    size_t n, nw;
    const char *emb[2] = {"prompt_embeds", "negative_prompt_embeds"};
    for (int i = 0; i < 2; i++) {
        float *got = tu_f32(st, emb[i], &n), *want = gh_f32(&e.c, &nw, "%s", emb[i]);
        assert_int_equal(n, nw);
        gh_check_max_abs(&e.c, emb[i], got, want, n, TOL_LATENTS);
        free(got), free(want);
    }
    cvx_st_close(st);

    char err[16384];
    if (ec_run(&e, e.s2, e.args[1], "", err, sizeof err)) fail_msg("stage2 failed:\n%s", err);
    assert_true(strstr(err, "LoRA ") != NULL);   /* the per-file line */
    snprintf(path, sizeof path, "%s/run/stage2_latents.safetensors", e.out);
    st = tu_open(path);
    float *z = tu_f32(st, "latents", &n), *want = gh_f32(&e.c, &nw, "%s", final_key(&e));
    cvx_st_close(st);
    assert_int_equal(n, nw);
    gh_check_max_abs(&e.c, "final latents (stage 2 with --lora)", z, want, n, TOL_LATENTS);
    /* the adapters' effect (upstream's, both in the pipeline's layout) is far above the tolerance */
    float *fm = gh_f32(&e.c, NULL, "final_latents"), *base = gh_f32(&e.c, NULL, "no_adapter.final_latents");
    double effect = 0;
    for (size_t i = 0; i < n; i++) effect = fmax(effect, fabs(fm[i] - base[i]));
    print_message("  the LoRAs' effect upstream: max abs %.3g\n", effect);
    gh_check_true(&e.c, "the LoRAs move the latents", effect > 100 * TOL_LATENTS);
    free(fm);

    /* generation_config.json: files, weights, hashes, mode */
    snprintf(path, sizeof path, "%s/run/generation_config.json", e.out);
    cvx_config gc;
    ASSERT_OK(cvx_config_load(&gc, path));
    json_object *rec = gh_get(gc.root, "loras"), *want_l = gh_json(&e.c, "loras");
    assert_int_equal(gh_len(rec), gh_len(want_l));
    for (size_t i = 0; i < gh_len(rec); i++) {
        assert_true(fabs(gh_num(gh_get(gh_at(rec, i), "weight")) - gh_num(gh_get(gh_at(want_l, i), "weight"))) < 1e-12);
        const char *f = gh_str(gh_get(gh_at(rec, i), "file")), *wf = gh_str(gh_get(gh_at(want_l, i), "file"));
        assert_true(strlen(f) > strlen(wf) && !strcmp(f + strlen(f) - strlen(wf), wf));
        assert_int_equal(strlen(gh_str(gh_get(gh_at(rec, i), "xxh64"))), 16);
    }
    assert_false(json_object_get_boolean(gh_get(gc.root, "lora_fuse")));
    cvx_config_free(&gc);

    ec_run_ok(&e, e.s3, e.args[2], "");
    snprintf(path, sizeof path, "%s/run/frames.safetensors", e.out);
    st = tu_open(path);
    float *fr = tu_f32(st, "decoded", &n), *wfr = gh_f32(&e.c, &nw, "decoded");
    assert_int_equal(n, nw);
    gh_check_max_abs(&e.c, "decoded frames (stage 3)", fr, wfr, n, TOL_FRAMES);
    cvx_st_close(st);
    free(fr), free(wfr);

    /* fused: the same latents */
    float *zf = stage2_into(&e, "fused", "--lora_fuse", &n);
    gh_check_max_abs(&e.c, "final latents (--lora_fuse)", zf, want, n, TOL_LATENTS);
    snprintf(path, sizeof path, "%s/fused/generation_config.json", e.out);
    ASSERT_OK(cvx_config_load(&gc, path));
    assert_true(json_object_get_boolean(gh_get(gc.root, "lora_fuse")));
    cvx_config_free(&gc);
    free(z), free(want), free(base), free(zf);
    ec_close(&e);
}

static void test_cogvideox_case(void **state) { (void)state; check_case("e2e_lora_cogvideox"); }
static void test_wan_case(void **state) { (void)state; check_case("e2e_lora_wan"); }

/* ------------------------------------------------------------------ resume */

static int one_line_with(const char *err, const char *want) {
    int lines = 0;
    for (const char *p = err; *p; p++) lines += *p == '\n';
    return lines == 1 && strstr(err, want) != NULL;
}

/* The Wan case stopped after 2 steps resumes with the same LoRAs bit-identically; any change of the
 * set is refused by name. */
static void test_resume(void **state) {
    (void)state;
    ecase e;
    ec_open(&e, "e2e_lora_wan");
    ec_run_ok(&e, e.s1, e.args[0], "--quiet");
    size_t n, n2;
    float *full = stage2_into(&e, "full", "--quiet", &n);
    char dir[256], a[16384], err[16384], path[300];
    snprintf(dir, sizeof dir, "%s/full", e.out);
    snprintf(a, sizeof a, "%s --input_dir %s --output_dir %s", e.args[1], dir, dir);
    ec_run_ok(&e, e.s2, a, "--quiet --stop_after_steps 2");
    /* the case's argv with one --lora changed, or one added flag */
    const char *kijai = "'lora_kijai_r8.safetensors:1'", *diff = "'lora_diffusers_r4.safetensors:0.5'";
    struct {
        const char *from, *to, *extra, *named;
    } bad[] = {
        {diff, "'lora_diffusers_r4.safetensors:0.6'", "", "lora.1="},
        {diff, "'lora_kijai_r8.safetensors:0.5'", "", "lora.1="},
        {diff, "'lora_diffusers_r4.safetensors:0.5' --lora_fuse", "", "lora_fuse="},
        {" '--lora' 'lora_kijai_r8.safetensors:1' '--lora' 'lora_diffusers_r4.safetensors:0.5'", "", "", "lora"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char changed[16384];
        const char *p = strstr(a, bad[i].from);
        assert_non_null(p);
        snprintf(changed, sizeof changed, "%.*s%s%s", (int)(p - a), a, bad[i].to, p + strlen(bad[i].from));
        int rc = ec_run(&e, e.s2, changed, "--quiet --resume", err, sizeof err);
        if (rc == 0 || !one_line_with(err, "--resume") || !strstr(err, bad[i].named))
            fail_msg("resume with another LoRA set (%s): exit %d, expected one line naming %s:\n%s", bad[i].to, rc,
                     bad[i].named, err);
        print_message("  refused: %s", err);
    }
    (void)kijai;
    ec_run_ok(&e, e.s2, a, "--quiet --resume");
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cvx_safetensors *st = tu_open(path);
    float *resumed = tu_f32(st, "latents", &n2);
    cvx_st_close(st);
    assert_int_equal(n, n2);
    if (memcmp(full, resumed, n * sizeof(float)))
        fail_msg("resumed latents differ from the uninterrupted run (rel L2 %.3g)", cvx_rel_l2(resumed, full, n));
    print_message("  resumed with the same LoRA set: bit-identical\n");
    free(full), free(resumed);
    ec_close(&e);
}

/* ------------------------------------------------------------------ errors */

static void expect_error(const ecase *e, const char *args, const char *extra, const char *want) {
    char err[16384], x[1400];
    snprintf(x, sizeof x, "--quiet %s", extra);
    int rc = ec_run(e, e->s2, args, x, err, sizeof err);
    if (rc == 0 || !one_line_with(err, want))
        fail_msg("expected one error line with '%s' (exit %d):\n%s\n(args %s %s)", want, rc, err, args, extra);
    print_message("  %s", err);
}

static void test_errors(void **state) {
    (void)state;
    ecase cog, wan;
    ec_open(&cog, "e2e_lora_cogvideox");
    ec_open(&wan, "e2e_lora_wan");
    ec_run_ok(&cog, cog.s1, cog.args[0], "--quiet");
    ec_run_ok(&wan, wan.s1, wan.args[0], "--quiet");
    char a[16384], other[1300];
    /* the other family's LoRA */
    snprintf(other, sizeof other, "--lora '%s/lora_diffusers_r4.safetensors'", wan.dir);
    const char *p = strstr(cog.args[1], " '--lora'");
    snprintf(a, sizeof a, "%.*s", (int)(p - cog.args[1]), cog.args[1]);
    expect_error(&cog, a, other, "a LoRA for Wan 2.1?");
    snprintf(other, sizeof other, "--lora '%s/lora_cog_r8.safetensors:0.8'", cog.dir);
    p = strstr(wan.args[1], " '--lora'");
    char aw[16384];
    snprintf(aw, sizeof aw, "%.*s", (int)(p - wan.args[1]), wan.args[1]);
    expect_error(&wan, aw, other, "a LoRA for CogVideoX");
    expect_error(&wan, aw, "--lora missing.safetensors", "--lora missing.safetensors: no such file");
    expect_error(&wan, aw, "--lora_fuse", "--lora_fuse without --lora");
    expect_error(&cog, a, "--flow_shift 5", "--flow_shift 5: the dpm scheduler has no flow shift");
    ec_close(&cog);
    ec_close(&wan);
}

/* ------------------------------------------------------------------ flow shift, few steps */

static void test_flow_shift_and_distilled_form(void **state) {
    (void)state;
    ecase e;
    ec_open(&e, "e2e_lora_wan");
    ec_run_ok(&e, e.s1, e.args[0], "--quiet");
    double shift = gh_num(gh_json(&e.c, "scheduler_config.flow_shift"));
    char extra[64], path[300];
    size_t n;
    float *plain = stage2_into(&e, "plain", "--quiet", &n);
    snprintf(extra, sizeof extra, "--quiet --flow_shift %.17g", shift);
    float *same = stage2_into(&e, "same", extra, &n);
    assert_memory_equal(plain, same, n * sizeof(float));   /* the config's own value: the same run */
    float *other = stage2_into(&e, "other", "--quiet --flow_shift 5", &n);
    double d = cvx_rel_l2(other, plain, n);
    print_message("  --flow_shift 5 vs the config's %g: rel L2 %.3g\n", shift, d);
    assert_true(d > 1e-3);
    snprintf(path, sizeof path, "%s/other/generation_config.json", e.out);
    cvx_config gc;
    ASSERT_OK(cvx_config_load(&gc, path));
    assert_true(gh_num(gh_get(gc.root, "flow_shift")) == 5.0);
    cvx_config_free(&gc);
    snprintf(path, sizeof path, "%s/plain/generation_config.json", e.out);
    assert_false(tu_genconfig_has(path, "flow_shift"));
    /* the distilled form: 4 steps, guidance 1 (one transformer call per step), shift 5 */
    char err[16384], a[16384], dir[256];
    snprintf(dir, sizeof dir, "%s/other", e.out);
    snprintf(a, sizeof a, "%s --input_dir %s --output_dir %s", e.args[1], dir, dir);
    if (ec_run(&e, e.s2, a, "--guidance_scale 1 --flow_shift 5 --scheduler euler", err, sizeof err))
        fail_msg("distilled form failed:\n%s", err);
    assert_non_null(strstr(err, "no CFG: one transformer call per step"));
    free(plain), free(same), free(other);
    ec_close(&e);
}

/* ------------------------------------------------------------------ bf16 */

static void test_bf16(void **state) {
    (void)state;
    ecase e;
    ec_open(&e, "e2e_lora_wan");
    ec_run_ok(&e, e.s1, e.args[0], "--quiet");
    size_t n;
    float *want = gh_f32(&e.c, NULL, "final_latents"), *want0 = gh_f32(&e.c, NULL, "no_adapter.final_latents");
    float *z = stage2_into(&e, "bf16", "--quiet --precision bf16 --noise_dtype f32", &n);
    /* the no-LoRA bf16 run: the case's argv without its --lora flags */
    char a[16384], dir[256], cmd[1024], path[300];
    const char *p = strstr(e.args[1], " '--lora'");
    snprintf(dir, sizeof dir, "%s/bf16_base", e.out);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/run/stage1_embeddings.safetensors %s/run/generation_config.json %s/",
             dir, e.out, e.out, dir);
    tu_run_ok(cmd);
    snprintf(a, sizeof a, "%.*s --input_dir %s --output_dir %s", (int)(p - e.args[1]), e.args[1], dir, dir);
    ec_run_ok(&e, e.s2, a, "--quiet --precision bf16 --noise_dtype f32");
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cvx_safetensors *st = tu_open(path);
    float *z0 = tu_f32(st, "latents", NULL);
    cvx_st_close(st);
    double d = cvx_rel_l2(z, want, n), d0 = cvx_rel_l2(z0, want0, n), tol = fmax(2 * d0, 2e-2);
    print_message("  bf16 final latents vs f32 golden: with LoRAs %.3g, without %.3g (tol %.3g)\n", d, d0, tol);
    assert_true(d <= tol);
    free(want), free(want0), free(z), free(z0);
    ec_close(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cogvideox_case), cmocka_unit_test(test_wan_case),
        cmocka_unit_test(test_resume),         cmocka_unit_test(test_errors),
        cmocka_unit_test(test_flow_shift_and_distilled_form), cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
