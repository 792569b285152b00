/* Wan 2.2 A14B experts as users have them, through stage 1 → stage 2 (the programs):
 *   - ComfyUI's repackaged pair (original key names, `model.diffusion_model.` prefix, one file per
 *     expert) with --transformer HIGH --transformer_2 LOW: the latents of the diffusers-directory
 *     run bit for bit; TI2V-5B's single file the same way (--transformer alone);
 *   - city96-style GGUF Q8_0 pair (written by stage 2 --quantize): within e2e_gguf's 1e-4 max abs
 *     of the run on the dequantized weights (f32 files; measured: bit-identical), and not equal
 *     to the f32 run;
 *   - ComfyUI scaled fp8 pair (F8_E4M3 linears + `scale_weight`, the `scaled_fp8` marker, a
 *     `scale_input` that is ignored): bit for bit the run on fp8 × scale written as f32 files;
 *   - --lora_high F --lora_low F = --lora F bit for bit; --lora_high F alone differs from both;
 *   - bad inputs: --transformer alone where transformer_2 has no weights (one line naming
 *     --transformer_2), --transformer_2 on a model of one transformer.
 * The A14B fixture is built here: the golden_adapters Wan GGUF case's components (widths that are
 * whole Q8_0 blocks), its dequantized Q8_0 transformer as the high-noise expert and that × 0.8 as
 * the low-noise one, model_index.json with boundary_ratio 0.875. */
#include "testutil.h"
#include "stage2/wan.h"

#include <math.h>
#include <sys/stat.h>

#define GA "tests/data/golden_adapters"
#define SRC GA "/e2e_gguf_wan_q8_0"
#define TI2V "tests/data/golden_wan22/e2e_ti2v_t2v"
#define FLAGS "--num_inference_steps 4 --frames 5 --height 32 --width 48 --guidance_scale 4 --guidance_scale_2 3 --seed 7"

static char s1[256], s2[256], fix[256], out[256];

/* The diffusers names of a 2-layer T2V Wan transformer (wan_load's), to invert the name table. */
static int diffusers_names(char names[][128], int layers) {
    static const char *const top[] = {
        "patch_embedding.weight", "patch_embedding.bias", "scale_shift_table", "proj_out.weight", "proj_out.bias",
        "condition_embedder.time_embedder.linear_1.weight", "condition_embedder.time_embedder.linear_1.bias",
        "condition_embedder.time_embedder.linear_2.weight", "condition_embedder.time_embedder.linear_2.bias",
        "condition_embedder.time_proj.weight", "condition_embedder.time_proj.bias",
        "condition_embedder.text_embedder.linear_1.weight", "condition_embedder.text_embedder.linear_1.bias",
        "condition_embedder.text_embedder.linear_2.weight", "condition_embedder.text_embedder.linear_2.bias"};
    static const char *const blk[] = {"to_q.weight", "to_q.bias", "to_k.weight", "to_k.bias", "to_v.weight",
                                      "to_v.bias", "to_out.0.weight", "to_out.0.bias", "norm_q.weight",
                                      "norm_k.weight"};
    static const char *const rest[] = {"norm2.weight", "norm2.bias", "ffn.net.0.proj.weight", "ffn.net.0.proj.bias",
                                       "ffn.net.2.weight", "ffn.net.2.bias", "scale_shift_table"};
    int n = 0;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) snprintf(names[n++], 128, "%s", top[i]);
    for (int l = 0; l < layers; l++) {
        for (int a = 1; a <= 2; a++)
            for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) snprintf(names[n++], 128, "blocks.%d.attn%d.%s", l, a, blk[i]);
        for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++) snprintf(names[n++], 128, "blocks.%d.%s", l, rest[i]);
    }
    return n;
}

/* e4m3fn code nearest to |x| (positive codes 0..126 increase with their value), with x's sign */
static uint8_t to_f8(float x) {
    float a = fabsf(x);
    int lo = 0, hi = 126;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (cvx_f8e4m3_to_f32((uint8_t)mid) <= a) lo = mid;
        else hi = mid - 1;
    }
    if (lo < 126 && cvx_f8e4m3_to_f32((uint8_t)(lo + 1)) - a < a - cvx_f8e4m3_to_f32((uint8_t)lo)) lo++;
    return (uint8_t)(lo | (x < 0 ? 0x80 : 0));
}

enum { DIFFUSERS, COMFY, FP8_SCALED, FP8_DEQUANT };

/* The transformer weights at src (any layout wan_load reads; the names listed by diffusers_names)
 * × factor, written to dst as: diffusers names F32; ComfyUI names (model.diffusion_model.) F32;
 * ComfyUI scaled fp8 (the 2-D block linears F8_E4M3 + scale_weight, scale_input, scaled_fp8); or
 * those fp8 values × scale as F32 (diffusers names). */
static void write_expert(const char *src, const char *dst, float factor, int layout) {
    cvx_weights *w = cvx_weights_open(src);
    ASSERT_NONNULL(w);
    int is_orig = cvx_weights_find(w, "head.modulation") != NULL;
    char names[96][128], key[256], oname[200];
    int n = diffusers_names(names, 2);
    cvx_st_writer *wr = cvx_stw_new();
    if (layout == FP8_SCALED) {
        int64_t zero[1] = {0};
        ASSERT_OK(cvx_stw_add(wr, "scaled_fp8", CVX_F8_E4M3, 1, zero, ""));
    }
    for (int i = 0; i < n; i++) {
        wan_original_name(names[i], oname, sizeof oname);
        const cvx_tensor *t = cvx_weights_find(w, is_orig ? oname : names[i]);
        if (!t) fail_msg("%s: no tensor for %s", src, names[i]);
        float *v = cvx_tensor_f32_dup(t);
        for (int64_t k = 0; k < t->numel; k++) v[k] *= factor;
        if (layout == DIFFUSERS || layout == FP8_DEQUANT) snprintf(key, sizeof key, "%.127s", names[i]);
        else snprintf(key, sizeof key, "model.diffusion_model.%.200s", oname);
        int fp8 = layout >= FP8_SCALED && t->ndim == 2 && !strncmp(names[i], "blocks.", 7);
        if (fp8) {   /* per-tensor scale: max |w| at the top of e4m3's range (448) */
            float mx = 0;
            for (int64_t k = 0; k < t->numel; k++) mx = fmaxf(mx, fabsf(v[k]));
            float scale = mx / 448.0f;
            uint8_t *q = malloc((size_t)t->numel);
            for (int64_t k = 0; k < t->numel; k++) q[k] = to_f8(v[k] / scale);
            if (layout == FP8_SCALED) {
                char sname[200];
                ASSERT_OK(cvx_stw_add(wr, key, CVX_F8_E4M3, t->ndim, t->shape, q));
                size_t stem = strlen(key) - strlen(".weight");
                snprintf(sname, sizeof sname, "%.*s.scale_weight", (int)stem, key);
                ASSERT_OK(cvx_stw_add(wr, sname, CVX_F32, 0, NULL, &scale));
                float si = 1e6f;   /* a scale_input that would wreck the run if it were used */
                snprintf(sname, sizeof sname, "%.*s.scale_input", (int)stem, key);
                ASSERT_OK(cvx_stw_add(wr, sname, CVX_F32, 0, NULL, &si));
            } else {
                for (int64_t k = 0; k < t->numel; k++) v[k] = cvx_f8e4m3_to_f32(q[k]) * scale;
                ASSERT_OK(cvx_stw_add_f32(wr, key, CVX_F32, t->ndim, t->shape, v));
            }
            free(q);
        } else {
            ASSERT_OK(cvx_stw_add_f32(wr, key, CVX_F32, t->ndim, t->shape, v));
        }
        free(v);
    }
    ASSERT_OK(cvx_stw_write(wr, dst));
    cvx_stw_free(wr);
    cvx_weights_close(w);
}

static void sh(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    tu_run_ok(cmd);
}

/* The A14B fixture in fix/ and stage 1's embeddings in out/ (once for every test). */
static int setup(void **state) {
    (void)state;
    tu_program(s1, sizeof s1, "stage1");
    tu_program(s2, sizeof s2, "stage2");
    tu_mkdtemp(fix, sizeof fix);
    tu_mkdtemp(out, sizeof out);
    char src[PATH_MAX], path[600];
    if (!realpath(SRC "/model", src)) fail_msg("no %s/model", SRC);
    sh("cd %s && ln -s %s/scheduler %s/text_encoder %s/tokenizer %s/vae . && mkdir transformer transformer_2 && "
       "cp %s/transformer/config.json transformer/ && cp %s/transformer/config.json transformer_2/",
       fix, src, src, src, src, src, src);
    /* model_index.json with boundary_ratio */
    sh("sed '0,/{/s//{\\n  \"boundary_ratio\": 0.875,/' %s/model_index.json > %s/model_index.json", src, fix);
    snprintf(path, sizeof path, "%s/transformer/diffusion_pytorch_model.safetensors", fix);
    write_expert(SRC "/wan-Q8_0.gguf", path, 1.0f, DIFFUSERS);
    snprintf(path, sizeof path, "%s/transformer_2/diffusion_pytorch_model.safetensors", fix);
    write_expert(SRC "/wan-Q8_0.gguf", path, 0.8f, DIFFUSERS);
    sh("%s --quiet --prompt 'A red fox trots through fresh snow' --model_dir %s --output_dir %s/emb", s1, fix, out);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rmrf(fix);
    tu_rmrf(out);
    return 0;
}

/* stage 2 on the fixture's embeddings into out/<name> with `extra`; its latents (n values). The
 * run must use both experts. */
static float *run2(const char *name, const char *model, const char *extra, size_t *n) {
    char cmd[8192], err[16384], path[600];
    struct stat st0;
    snprintf(path, sizeof path, "%s/%s/stage2_latents.safetensors", out, name);
    if (!stat(path, &st0)) {   /* run already (the reference of several tests) */
        cvx_safetensors *st = tu_open(path);
        float *l = tu_f32(st, "latents", n);
        cvx_st_close(st);
        return l;
    }
    sh("mkdir -p %s/%s && cp %s/emb/stage1_embeddings.safetensors %s/emb/generation_config.json %s/%s/", out, name, out,
       out, out, name);
    snprintf(cmd, sizeof cmd, "%s --input_dir %s/%s --model_dir %s " FLAGS " %s", s2, out, name, model, extra);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc) fail_msg("%s: exit %d\n%s", cmd, rc, err);
    if (strstr(model, "ti2v") == NULL && (!strstr(err, "high-noise expert") || !strstr(err, "low-noise expert")))
        fail_msg("%s: not both experts used:\n%s", name, err);
    snprintf(path, sizeof path, "%s/%s/stage2_latents.safetensors", out, name);
    cvx_safetensors *st = tu_open(path);
    float *l = tu_f32(st, "latents", n);
    cvx_st_close(st);
    return l;
}

static double max_abs(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void assert_same(const char *what, const float *a, const float *b, size_t n) {
    int same = !memcmp(a, b, n * sizeof *a);
    print_message("  %s: %s (max abs %.3g)\n", what, same ? "bit-identical" : "DIFFERENT", max_abs(a, b, n));
    assert_true(same);
}

/* ComfyUI's f32 pair: the directory run's latents bit for bit. */
static void test_comfy_pair(void **state) {
    (void)state;
    char h[600], l[600], extra[1400];
    size_t n, m;
    float *ref = run2("dir", fix, "", &n);
    snprintf(h, sizeof h, "%s/wan2.2_t2v_high_noise_14B_fp32.safetensors", out);
    snprintf(l, sizeof l, "%s/wan2.2_t2v_low_noise_14B_fp32.safetensors", out);
    char t1[600], t2[600];
    snprintf(t1, sizeof t1, "%s/transformer", fix);
    snprintf(t2, sizeof t2, "%s/transformer_2", fix);
    write_expert(t1, h, 1.0f, COMFY);
    write_expert(t2, l, 1.0f, COMFY);
    snprintf(extra, sizeof extra, "--transformer %s --transformer_2 %s", h, l);
    float *got = run2("comfy", fix, extra, &m);
    assert_int_equal(n, m);
    char gc[700];
    snprintf(gc, sizeof gc, "%s/comfy/generation_config.json", out);
    assert_true(tu_genconfig_has(gc, "transformer_file") && tu_genconfig_has(gc, "transformer_2_file"));
    assert_same("ComfyUI-named pair vs diffusers directory", got, ref, n);
    free(got);
    /* the experts swapped: another result (the flags reach the right expert) */
    snprintf(extra, sizeof extra, "--transformer %s --transformer_2 %s", l, h);
    got = run2("swapped", fix, extra, &m);
    print_message("  experts swapped: max abs %.3g from the reference\n", max_abs(got, ref, n));
    assert_true(max_abs(got, ref, n) > 1e-3);
    free(got), free(ref);
}

/* The Q8_0 GGUF pair vs the f32 run of its dequantized weights (e2e_gguf's 1e-4 max abs). */
static void test_gguf_pair(void **state) {
    (void)state;
    char h[600], l[600], hd[600], ld[600], extra[1400];
    size_t n, m, k;
    snprintf(h, sizeof h, "%s/Wan2.2-T2V-A14B-HighNoise-Q8_0.gguf", out);
    snprintf(l, sizeof l, "%s/Wan2.2-T2V-A14B-LowNoise-Q8_0.gguf", out);
    sh("%s --quiet --model_dir %s --quantize Q8_0 --transformer_out %s", s2, fix, h);
    sh("%s --quiet --model_dir %s --transformer %s/transformer_2/diffusion_pytorch_model.safetensors --quantize Q8_0 "
       "--transformer_out %s", s2, fix, fix, l);
    cvx_weights *w = cvx_weights_open(h);
    ASSERT_NONNULL(w);
    const cvx_tensor *q = cvx_weights_find(w, "blocks.0.self_attn.q.weight");
    assert_non_null(q);
    assert_int_equal(q->dtype, CVX_Q8_0);   /* the linears are Q8_0 blocks */
    cvx_weights_close(w);
    snprintf(hd, sizeof hd, "%s/high_dequant.safetensors", out);
    snprintf(ld, sizeof ld, "%s/low_dequant.safetensors", out);
    write_expert(h, hd, 1.0f, DIFFUSERS);
    write_expert(l, ld, 1.0f, DIFFUSERS);
    snprintf(extra, sizeof extra, "--transformer %s --transformer_2 %s", h, l);
    float *got = run2("gguf", fix, extra, &n);
    snprintf(extra, sizeof extra, "--transformer %s --transformer_2 %s", hd, ld);
    float *want = run2("gguf_dequant", fix, extra, &m);
    float *f32 = run2("dir", fix, "", &k);
    assert_int_equal(n, m);
    assert_int_equal(n, k);
    const double d = max_abs(got, want, n), d32 = max_abs(got, f32, n);
    print_message("  Q8_0 pair: max abs %.3g from its dequantized weights' run (tol 1e-4), rel L2 %.3g; %.3g from the "
                  "f32 weights' run\n", d, cvx_rel_l2(got, want, n), d32);
    assert_true(d <= 1e-4);
    assert_true(d32 > 0);
    free(got), free(want), free(f32);
}

/* ComfyUI's scaled fp8 pair vs its values × scale as f32 files: bit for bit. */
static void test_fp8_scaled_pair(void **state) {
    (void)state;
    char h[600], l[600], hd[600], ld[600], t1[600], t2[600], extra[1400];
    size_t n, m, k;
    snprintf(t1, sizeof t1, "%s/transformer", fix);
    snprintf(t2, sizeof t2, "%s/transformer_2", fix);
    snprintf(h, sizeof h, "%s/wan2.2_t2v_high_noise_14B_fp8_scaled.safetensors", out);
    snprintf(l, sizeof l, "%s/wan2.2_t2v_low_noise_14B_fp8_scaled.safetensors", out);
    snprintf(hd, sizeof hd, "%s/high_fp8_dequant.safetensors", out);
    snprintf(ld, sizeof ld, "%s/low_fp8_dequant.safetensors", out);
    write_expert(t1, h, 1.0f, FP8_SCALED);
    write_expert(t2, l, 1.0f, FP8_SCALED);
    write_expert(t1, hd, 1.0f, FP8_DEQUANT);
    write_expert(t2, ld, 1.0f, FP8_DEQUANT);
    snprintf(extra, sizeof extra, "--transformer %s --transformer_2 %s", h, l);
    float *got = run2("fp8", fix, extra, &n);
    snprintf(extra, sizeof extra, "--transformer %s --transformer_2 %s", hd, ld);
    float *want = run2("fp8_dequant", fix, extra, &m);
    float *f32 = run2("dir", fix, "", &k);
    assert_int_equal(n, m);
    assert_same("scaled fp8 pair vs fp8 × scale in f32", got, want, n);
    print_message("  (fp8 rounding: max abs %.3g from the f32 weights' run)\n", max_abs(got, f32, n));
    assert_true(max_abs(got, f32, n) > 0);
    free(got), free(want), free(f32);
}

/* --lora_high F --lora_low F = --lora F; --lora_high F alone is another run. */
static void test_lora_per_expert(void **state) {
    (void)state;
    /* a LoRA for these widths: rank 4 on two linears of the first block, from a fixed pattern */
    char lora[600], extra[1400];
    snprintf(lora, sizeof lora, "%s/lora_pair.safetensors", out);
    cvx_st_writer *wr = cvx_stw_new();
    const int64_t D = 256, r = 4;
    float *a = malloc(sizeof(float) * D * r), *b = malloc(sizeof(float) * D * r);
    for (int64_t i = 0; i < D * r; i++) a[i] = 0.05f * sinf(0.37f * (float)i), b[i] = 0.05f * cosf(0.11f * (float)i);
    const char *mods[] = {"blocks.0.attn1.to_q", "blocks.1.ffn.net.2"};
    for (int i = 0; i < 2; i++) {
        char name[200];
        int64_t in = i ? 512 : D;
        float *ai = malloc(sizeof(float) * in * r);
        for (int64_t j = 0; j < in * r; j++) ai[j] = 0.05f * sinf(0.37f * (float)j + (float)i);
        int64_t sa[2] = {r, in}, sb[2] = {D, r};
        snprintf(name, sizeof name, "transformer.%s.lora_A.weight", mods[i]);
        ASSERT_OK(cvx_stw_add_f32(wr, name, CVX_F32, 2, sa, ai));
        snprintf(name, sizeof name, "transformer.%s.lora_B.weight", mods[i]);
        ASSERT_OK(cvx_stw_add_f32(wr, name, CVX_F32, 2, sb, b));
        free(ai);
    }
    ASSERT_OK(cvx_stw_write(wr, lora));
    cvx_stw_free(wr);
    free(a), free(b);
    size_t n, m, k, z;
    snprintf(extra, sizeof extra, "--lora %s:0.7", lora);
    float *both = run2("lora", fix, extra, &n);
    snprintf(extra, sizeof extra, "--lora_high %s:0.7 --lora_low %s:0.7", lora, lora);
    float *pair = run2("lora_pair", fix, extra, &m);
    snprintf(extra, sizeof extra, "--lora_high %s:0.7", lora);
    float *high = run2("lora_high", fix, extra, &k);
    float *bare = run2("dir", fix, "", &z);
    assert_same("--lora_high F --lora_low F vs --lora F", pair, both, n);
    print_message("  --lora_high alone: %.3g from --lora, %.3g from no LoRA\n", max_abs(high, both, n),
                  max_abs(high, bare, n));
    assert_true(max_abs(high, both, n) > 0 && max_abs(high, bare, n) > 0);
    assert_true(max_abs(both, bare, n) > 0);
    char path[700];
    snprintf(path, sizeof path, "%s/lora_pair/generation_config.json", out);
    assert_true(tu_genconfig_has(path, "loras"));
    free(both), free(pair), free(high), free(bare);
}

/* TI2V-5B's ComfyUI single file (wan2.2_ti2v_5B_fp16.safetensors' names; f32 here): bit for bit. */
static void test_ti2v_single_file(void **state) {
    (void)state;
    char dir[256], file[600], cmd[4096];
    tu_mkdtemp(dir, sizeof dir);
    sh("%s --quiet --prompt 'A red fox' --model_dir " TI2V "/model --output_dir %s/a", s1, dir);
    sh("mkdir -p %s/b && cp %s/a/* %s/b/", dir, dir, dir);
    snprintf(file, sizeof file, "%s/wan2.2_ti2v_5B_fp32.safetensors", dir);
    write_expert(TI2V "/model/transformer", file, 1.0f, COMFY);
    const char *f = "--num_inference_steps 2 --frames 5 --height 32 --width 32 --guidance_scale 5";
    sh("%s --quiet --input_dir %s/a --model_dir " TI2V "/model %s", s2, dir, f);
    sh("%s --quiet --input_dir %s/b --model_dir " TI2V "/model %s --transformer %s", s2, dir, f, file);
    size_t n, m;
    snprintf(cmd, sizeof cmd, "%s/a/stage2_latents.safetensors", dir);
    cvx_safetensors *A = tu_open(cmd);
    snprintf(cmd, sizeof cmd, "%s/b/stage2_latents.safetensors", dir);
    cvx_safetensors *B = tu_open(cmd);
    float *a = tu_f32(A, "latents", &n), *b = tu_f32(B, "latents", &m);
    assert_int_equal(n, m);
    assert_same("TI2V ComfyUI single file vs diffusers directory", b, a, n);
    free(a), free(b);
    cvx_st_close(A), cvx_st_close(B);
    /* --transformer_2 on a model of one transformer: one line */
    char err[8192];
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s/b --model_dir " TI2V "/model %s --transformer_2 %s", s2, dir,
             f, file);
    int rc = tu_run(cmd, err, sizeof err);
    print_message("  exit %d: %s", rc, err);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err, "has one transformer"));
    tu_rmrf(dir);
}

/* A high-noise file alone where transformer_2/ has no weights: one line naming --transformer_2. */
static void test_missing_second_expert(void **state) {
    (void)state;
    char fix2[256], cmd[4096], err[8192], h[600];
    tu_mkdtemp(fix2, sizeof fix2);
    sh("cp -a %s/. %s/ && rm %s/transformer_2/diffusion_pytorch_model.safetensors", fix, fix2, fix2);
    snprintf(h, sizeof h, "%s/high.safetensors", fix2);
    write_expert(SRC "/wan-Q8_0.gguf", h, 1.0f, COMFY);
    sh("mkdir -p %s/miss && cp %s/emb/* %s/miss/", out, out, out);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s/miss --model_dir %s " FLAGS " --transformer %s", s2, out, fix2,
             h);
    int rc = tu_run(cmd, err, sizeof err);
    print_message("  exit %d: %s", rc, err);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err, "--transformer_2 FILE"));
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    struct stat st;
    snprintf(cmd, sizeof cmd, "%s/miss/stage2_latents.safetensors", out);
    assert_int_not_equal(stat(cmd, &st), 0);
    tu_rmrf(fix2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comfy_pair),      cmocka_unit_test(test_gguf_pair),
        cmocka_unit_test(test_fp8_scaled_pair), cmocka_unit_test(test_lora_per_expert),
        cmocka_unit_test(test_ti2v_single_file), cmocka_unit_test(test_missing_second_expert),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
