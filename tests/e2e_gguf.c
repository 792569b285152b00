/* GGUF transformers end to end through the three programs (tests/data/golden_adapters/e2e_gguf_*,
 * from shared/golden_adapters: diffusers pipelines whose transformer weights were taken from
 * city96-style GGUF files, dequantized as ggml does). Every case runs the argv lists of its
 * case.json (`cli`: stage1, stage2 with --transformer FILE.gguf, stage3) in the case directory:
 *   - prompt embeddings (1e-4), final latents (1e-4 max abs; the f32-weights run is further away,
 *     so a run that ignores --transformer fails), decoded frames (1e-3);
 *   - generation_config.json records the file and what it holds; the checkpoint fingerprint stops a
 *     --resume with other quantized-weight settings (--int8);
 *   - stage 2 again with --int8 and with --precision bf16: the distances to the reference printed,
 *     int8's smaller than bf16's (both opt-in precisions; int8 measured 1.2e-3..3.6e-3 rel L2,
 *     bf16 9e-3 on these cases);
 *   - a file whose blocks the MinusZone safetensors layout can hold (Q4_0, Q8_0: the CogVideoX case)
 *     rewritten in it (`<module>.Q8_0_qweight` U8 rows, the other tensors as they are): stage 2 with
 *     --transformer FILE.safetensors writes the same latents bit for bit, and records what it read. */
#include "golden_harness.h"

#include <dirent.h>

#define GA "tests/data/golden_adapters"

/* "'...'" with single quotes escaped, for the shell */
static void quote(char *out, size_t n, const char *s) {
    size_t k = 0;
    out[k++] = '\'';
    for (; *s && k + 6 < n; s++) {
        if (*s == '\'') { memcpy(out + k, "'\\''", 4); k += 4; }
        else out[k++] = *s;
    }
    out[k++] = '\'';
    out[k] = 0;
}

/* The command line of stage `stage` from case.json's cli (<OUT> -> out), run in the case dir. */
static void build_cmd(gh_case *c, const char *stage, const char *prog, const char *out, const char *extra, char *cmd,
                      size_t n) {
    char key[64], q[2048];
    snprintf(key, sizeof key, "cli.%s", stage);
    json_object *argv = gh_json(c, key);
    size_t k = (size_t)snprintf(cmd, n, "cd %s && %s", c->dir, prog);
    for (size_t i = 0; i < gh_len(argv) && k < n; i++) {
        const char *a = gh_str(gh_at(argv, i));
        char arg[1024];
        const char *o = strstr(a, "<OUT>");
        if (o) snprintf(arg, sizeof arg, "%.*s%s%s", (int)(o - a), a, out, o + 5);
        else snprintf(arg, sizeof arg, "%s", a);
        quote(q, sizeof q, arg);
        k += (size_t)snprintf(cmd + k, n - k, " %s", q);
    }
    if (k < n) snprintf(cmd + k, n - k, " %s >/dev/null", extra);
}

static double max_abs(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static float *latents_of(const char *dir, size_t *n) {
    char path[512];
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cvx_safetensors *st = tu_open(path);
    float *l = tu_f32(st, "latents", n);
    cvx_st_close(st);
    return l;
}

static void run_case(const char *name) {
    gh_case c;
    char dir[256], out[128], out8[160], prog[3][512], cmd[16384], path[700], err[8192];
    snprintf(dir, sizeof dir, GA "/%s", name);
    gh_open(&c, dir);
    tu_mkdtemp(out, sizeof out);
    snprintf(out8, sizeof out8, "%s/int8", out);
    const char *names[3] = {"stage1", "stage2", "stage3"};
    for (int s = 0; s < 3; s++) {
        char rel[256];
        tu_program(rel, sizeof rel, names[s]);
        if (!realpath(rel, prog[s])) fail_msg("%s: not built", rel);
    }
    print_message("%s (%s)\n", name, gh_str(gh_json(&c, "gguf.file")));
    for (int s = 0; s < 3; s++) {
        build_cmd(&c, names[s], prog[s], out, "", cmd, sizeof cmd);
        tu_run_ok(cmd);
    }

    /* stage 1 */
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", out);
    cvx_safetensors *e = tu_open(path);
    size_t n;
    const char *emb[2] = {"prompt_embeds", "negative_prompt_embeds"};
    for (int i = 0; i < 2; i++) {
        float *got = tu_f32(e, emb[i], &n), *want = gh_f32(&c, NULL, "%s", emb[i]);
        gh_check_max_abs(&c, emb[i], got, want, n, 1e-4);
        free(got), free(want);
    }
    cvx_st_close(e);

    /* stage 2: [1, C, F, h, w] (CogVideoX's pipeline returns [1, F, C, h, w]: the golden's BCFHW copy) */
    const int cog = gh_tensor_opt(&c, "final_latents_BCFHW") != NULL;
    float *lat = latents_of(out, &n), *want = gh_f32(&c, NULL, cog ? "final_latents_BCFHW" : "final_latents");
    const size_t n_lat = n;
    float *f32w = gh_f32(&c, NULL, "f32weights.final_latents");
    if (cog) {   /* f32weights.final_latents is frame-major too */
        const cvx_tensor *t = gh_tensor(&c, "f32weights.final_latents");
        const int64_t F = t->shape[1], C = t->shape[2], hw = t->shape[3] * t->shape[4];
        float *p = cvx_alloc_f32(n);
        for (int64_t f = 0; f < F; f++)
            for (int64_t ch = 0; ch < C; ch++) memcpy(p + (ch * F + f) * hw, f32w + (f * C + ch) * hw, sizeof(float) * (size_t)hw);
        free(f32w);
        f32w = p;
    }
    gh_check_max_abs(&c, "final_latents", lat, want, n, 1e-4);
    const double d_f32w = max_abs(want, f32w, n);
    print_message("  final latents: %.2e from the reference; the f32 weights are %.2e away\n", max_abs(lat, want, n), d_f32w);
    assert_true(d_f32w > 1e-4);

    /* stage 3 */
    snprintf(path, sizeof path, "%s/frames.safetensors", out);
    cvx_safetensors *fr = tu_open(path);
    float *dec = tu_f32(fr, "decoded", &n), *dwant = gh_f32(&c, NULL, "decoded");
    gh_check_max_abs(&c, "decoded", dec, dwant, n, 1e-3);
    free(dec), free(dwant);
    cvx_st_close(fr);

    /* the record */
    snprintf(path, sizeof path, "%s/generation_config.json", out);
    cvx_config gc;
    ASSERT_OK(cvx_config_load(&gc, path));
    const char *w = NULL, *f = NULL;
    ASSERT_OK(cvx_cfg_str(&gc, "transformer_weights", &w));
    ASSERT_OK(cvx_cfg_str(&gc, "transformer_file", &f));
    print_message("  generation_config.json: transformer_weights \"%s\"\n", w);
    assert_non_null(strstr(w, "gguf"));
    assert_non_null(strstr(f, gh_str(gh_json(&c, "gguf.file"))));
    int i8 = -1;
    ASSERT_OK(cvx_cfg_bool(&gc, "int8_dot", &i8));
    assert_int_equal(i8, 0);
    cvx_config_free(&gc);

    /* the MinusZone layout of the same bytes through --transformer (the last --transformer wins) */
    char mzdir[200], mz[300];
    snprintf(mzdir, sizeof mzdir, "%s/mz", out);
    snprintf(mz, sizeof mz, "%s/transformer.safetensors", mzdir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/stage1_embeddings.safetensors %s/generation_config.json %s/", mzdir,
             out, out, mzdir);
    tu_run_ok(cmd);
    if (tu_write_qweights(gh_path(&c, gh_str(gh_json(&c, "gguf.file"))), mz) == 0) {
        char extra[400];
        snprintf(extra, sizeof extra, "--transformer %s", mz);
        build_cmd(&c, "stage2", prog[1], mzdir, extra, cmd, sizeof cmd);
        tu_run_ok(cmd);
        size_t nm;
        float *latm = latents_of(mzdir, &nm);
        assert_int_equal(nm, n_lat);
        assert_memory_equal(latm, lat, n_lat * sizeof *lat);
        free(latm);
        snprintf(path, sizeof path, "%s/generation_config.json", mzdir);
        ASSERT_OK(cvx_config_load(&gc, path));
        ASSERT_OK(cvx_cfg_str(&gc, "transformer_weights", &w));
        print_message("  the same blocks as *_qweight safetensors: the same latents bit for bit (\"%s\")\n", w);
        assert_non_null(strstr(w, "safetensors"));
        assert_non_null(strstr(w, gh_str(gh_json(&c, "gguf.ftype"))));
        cvx_config_free(&gc);
    } else {
        print_message("  (block types the *_qweight safetensors layout cannot hold: not rewritten)\n");
    }

    /* int8 dot products: stage 2 again (same embeddings) */
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/stage1_embeddings.safetensors %s/generation_config.json %s/", out8, out,
             out, out8);
    tu_run_ok(cmd);
    build_cmd(&c, "stage2", prog[1], out8, "--int8", cmd, sizeof cmd);
    tu_run_ok(cmd);
    float *lat8 = latents_of(out8, &n);
    const double d8 = cvx_rel_l2(lat8, want, n);
    /* the other opt-in precision as the yardstick: bf16 (with f32 noise draws, as the reference) */
    build_cmd(&c, "stage2", prog[1], out8, "--precision bf16 --noise_dtype f32", cmd, sizeof cmd);
    tu_run_ok(cmd);
    float *lat16 = latents_of(out8, &n);
    const double d16 = cvx_rel_l2(lat16, want, n);
    print_message("  final latents, rel L2 from the reference: --int8 %.2e, --precision bf16 %.2e; the weights' own "
                  "quantization (f32 weights) %.2e\n", d8, d16, cvx_rel_l2(f32w, want, n));
    assert_true(d8 > 0 && d8 < d16);
    free(lat8), free(lat16);

    /* a checkpoint of the default path does not resume with --int8 (the fingerprint has int8_dot) */
    build_cmd(&c, "stage2", prog[1], out8, "--stop_after_steps 1", cmd, sizeof cmd);
    tu_run_ok(cmd);
    build_cmd(&c, "stage2", prog[1], out8, "--resume --int8", cmd, sizeof cmd);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    if (!strstr(err, "int8_dot")) fail_msg("resume with --int8: %s", err);

    free(lat), free(want), free(f32w);
    gh_close(&c);
    tu_rmrf(out);
}

/* Every e2e_gguf_* case present (a hidden set drops in beside). */
static void test_cases(void **state) {
    (void)state;
    DIR *d = opendir(GA);
    if (!d) fail_msg("cannot open " GA);
    char names[16][128];
    int k = 0;
    struct dirent *e;
    while ((e = readdir(d)) && k < 16)
        if (!strncmp(e->d_name, "e2e_gguf_", 9) && strlen(e->d_name) < 128) snprintf(names[k++], 128, "%.127s", e->d_name);
    closedir(d);
    assert_true(k >= 3);
    qsort(names, (size_t)k, 128, (int (*)(const void *, const void *))strcmp);
    for (int i = 0; i < k; i++) run_case(names[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cases)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
