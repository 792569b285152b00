/* LTX-Video weights as users have them, on the tiny model of tests/data/golden_ltx/e2e_t2v:
 *   - the VAE name table (stage3/ltx_vae_names.c) against pairs made by diffusers' own
 *     convert_ltx_vae_checkpoint_to_diffusers (tests/data/ltx_single_file/names_0*.txt, 0.9.0 and
 *     0.9.5+ layouts: make_names.py);
 *   - the original single file (ltx-video-2b-v0.9*.safetensors: "model.diffusion_model." transformer
 *     keys with patchify_proj / adaln_single / q_norm / k_norm, and the "vae." keys, with the
 *     per_channel_statistics upstream drops) written here: ltx_load_file and ltx_vae_load_file on the
 *     one file give the diffusers layout's forward and decode bytes;
 *   - GGUF Q8_0 with city96's "ltxv" rules: original names without the prefix, no VAE tensor; from
 *     the diffusers layout and from the single file the same forward bytes; = f32 over the GGUF's
 *     dequantized weights; the distance to f32 printed and bounded;
 *   - LoRA (diffusers "transformer." keys and ComfyUI / trainer "diffusion_model." keys, whose .alpha
 *     diffusers does not apply for LTX): a random rank-4 adapter against the weights merged here
 *     (W + B A), unfused and fused;
 *   - the programs: --transformer FILE --vae FILE (the same single file) = the directory's run
 *     (latents, frames: same bytes); --lora FILE vs --transformer with the merged weights (latents
 *     rel L2 <= 1e-4); --quantize Q8_0 --transformer_out then --transformer FILE.gguf (distance to
 *     the f32 latents printed, bounded);
 *   - bad inputs: truncated single file, another family's file, a transformer-only file as VAE, a
 *     GGUF tensor of the wrong shape: one clear line each. */
#include "golden_harness.h"
#include "weights_harness.h"

#include "gguf.h"
#include "lora.h"
#include "rng.h"
#include "stage2/ltx.h"
#include "stage2/quantize.h"
#include "stage3/ltx_vae.h"

#define MODEL "tests/data/golden_ltx/e2e_t2v/model/"
#define TDIR MODEL "transformer/"
#define VDIR MODEL "vae/"
#define NAMES "tests/data/ltx_single_file/"

/* ------------------------------------------------------------------ fixtures */

/* The "orig diffusers" pairs of a names file; returns the count (names malloc'ed in pairs[i][0..1]). */
static int read_pairs(const char *path, char *pairs[][2], int cap) {
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    char a[200], b[200];
    int n = 0;
    while (n < cap && fscanf(f, "%199s %199s", a, b) == 2) pairs[n][0] = strdup(a), pairs[n][1] = strdup(b), n++;
    fclose(f);
    return n;
}

static void free_pairs(char *pairs[][2], int n) {
    for (int i = 0; i < n; i++) free(pairs[i][0]), free(pairs[i][1]);
}

/* The original transformer name of diffusers' `name` (diffusers' table read backwards). */
static void transformer_orig(const char *name, char *out, size_t n) {
    static const char *const back[][2] = {
        {"proj_in", "patchify_proj"}, {"time_embed", "adaln_single"}, {"norm_q", "q_norm"}, {"norm_k", "k_norm"}};
    char tmp[200];
    cvx_str_replace_rules(name, back, 4, tmp, sizeof tmp);
    snprintf(out, n, "model.diffusion_model.%s", tmp);
}

/* The original single file: transformer (+ VAE unless transformer_only) of the tiny model. */
static void write_single_file(const char *dst, int transformer_only) {
    cvx_st_writer *st = cvx_stw_new();
    cvx_weights *t = cvx_weights_open(TDIR), *v = cvx_weights_open(VDIR);
    ASSERT_NONNULL(t);
    ASSERT_NONNULL(v);
    char key[256];
    for (int i = 0; i < cvx_weights_count(t); i++) {
        const cvx_tensor *x = cvx_weights_at(t, i);
        transformer_orig(x->name, key, sizeof key);
        ASSERT_OK(cvx_stw_add(st, key, x->dtype, x->ndim, x->shape, x->data));
    }
    if (!transformer_only) {
        char *pairs[128][2];
        int n = read_pairs(NAMES "names_090.txt", pairs, 128);
        assert_int_equal(n, cvx_weights_count(v));
        for (int i = 0; i < n; i++) {
            const cvx_tensor *x = cvx_weights_find(v, pairs[i][1]);
            ASSERT_NONNULL(x);
            ASSERT_OK(cvx_stw_add(st, pairs[i][0], x->dtype, x->ndim, x->shape, x->data));
        }
        free_pairs(pairs, n);
        /* what the real files hold beside them and upstream drops */
        const float junk[16] = {1, 2, 3};
        ASSERT_OK(cvx_stw_add(st, "vae.per_channel_statistics.channel", CVX_F32, 1, (const int64_t[]){16}, junk));
        ASSERT_OK(cvx_stw_add(st, "vae.per_channel_statistics.mean-of-stds", CVX_F32, 1, (const int64_t[]){16}, junk));
    }
    ASSERT_OK(cvx_stw_write(st, dst));
    cvx_stw_free(st);
    cvx_weights_close(t);
    cvx_weights_close(v);
}

/* A transformer forward on fixed random inputs (2 latent frames of 2×3, 5 text rows). */
enum { B = 1, F = 2, H = 2, W = 3, S = F * H * W, L = 5, C = 16, CAP = 32 };

/* The fixed inputs: random latents and text, 3 of 5 text rows attended, t = 700. */
typedef struct {
    float x[B * S * C], text[B * L * CAP], mask[B * L], t[B], coords[B * 3 * S];
} fwd_inputs;

static void make_inputs(fwd_inputs *in) {
    cvx_generator rng;
    cvx_generator_seed(&rng, 7);
    cvx_randn(&rng, in->x, B * S * C);
    cvx_randn(&rng, in->text, B * L * CAP);
    for (int i = 0; i < L; i++) in->mask[i] = i < 3;
    in->t[0] = 700.0f;
    ltx_rope_coords_grid(F, H, W, (const float[]){8.0f / 24, 32, 32}, in->coords);
}

/* m's forward on the fixed inputs (allocated). */
static float *run(ltx_transformer *m) {
    static fwd_inputs in;
    make_inputs(&in);
    float *out = cvx_alloc_f32(B * S * C);
    ASSERT_OK(ltx_forward(m, in.x, B, S, in.text, in.mask, L, in.t, 1, in.coords, out));
    return out;
}

static float *forward_of(const char *weights) {
    ltx_transformer *m = ltx_load_file(TDIR "config.json", weights, NULL);
    ASSERT_NONNULL(m);
    float *out = run(m);
    ltx_free(m);
    return out;
}

static float *decode_of(const char *weights, size_t *n) {
    ltx_vae *v = ltx_vae_load_file(VDIR "config.json", weights, NULL);
    ASSERT_NONNULL(v);
    const int lc = ltx_vae_get_config(v)->latent_channels, Fz = 2, hz = 2, wz = 2;
    float *z = cvx_alloc_f32((size_t)lc * Fz * hz * wz);
    cvx_generator rng;
    cvx_generator_seed(&rng, 11);
    cvx_randn(&rng, z, (size_t)lc * Fz * hz * wz);
    *n = (size_t)3 * (8 * (Fz - 1) + 1) * 32 * hz * 32 * wz;
    float *video = cvx_alloc_f32(*n);
    ASSERT_OK(ltx_vae_decode(v, z, Fz, hz, wz, 0.0f, video));
    free(z);
    ltx_vae_free(v);
    return video;
}

static void assert_same(const char *what, const float *a, const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof *a) != 0;
    print_message("  %-55s %zu values, %zu differ\n", what, n, bad);
    assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------ tests */

static void test_vae_name_table(void **state) {
    (void)state;
    static const struct { const char *file; int variant; } sets[] = {{NAMES "names_090.txt", 90},
                                                                      {NAMES "names_095.txt", 95}};
    for (size_t s = 0; s < 2; s++) {
        char *pairs[128][2], out[256];
        int n = read_pairs(sets[s].file, pairs, 128);
        assert_true(n > 70);
        for (int i = 0; i < n; i++) {
            assert_int_equal(ltx_vae_original_name(pairs[i][0], sets[s].variant, out, sizeof out), 1);
            if (strcmp(out, pairs[i][1])) fail_msg("%s (%d): got %s, upstream %s", pairs[i][0], sets[s].variant, out, pairs[i][1]);
        }
        print_message("  %s: %d names as upstream converts them\n", sets[s].file, n);
        free_pairs(pairs, n);
        assert_int_equal(ltx_vae_original_name("vae.per_channel_statistics.channel", sets[s].variant, out, sizeof out), 0);
        assert_int_equal(ltx_vae_original_name("model.diffusion_model.proj_out.weight", sets[s].variant, out, sizeof out), 0);
    }
}

static void test_single_file(void **state) {
    (void)state;
    char dir[64], file[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/ltx-video-2b-v0.9-tiny.safetensors", dir);
    write_single_file(file, 0);
    float *a = forward_of(TDIR), *b = forward_of(file);
    assert_same("transformer: single file = diffusers layout", a, b, B * S * C);
    size_t n, n2;
    float *va = decode_of(VDIR, &n), *vb = decode_of(file, &n2);
    assert_int_equal(n, n2);
    assert_same("VAE decode: single file = diffusers layout", va, vb, n);
    free(a); free(b); free(va); free(vb);
    tu_rmrf(dir);
}

static const cvx_tensor *tensor_named(const cvx_weights *w, const char *name) {
    for (int i = 0; i < cvx_weights_count(w); i++)
        if (!strcmp(cvx_weights_at(w, i)->name, name)) return cvx_weights_at(w, i);
    return NULL;
}

static void test_gguf(void **state) {
    (void)state;
    char dir[64], single[128], g1[128], g2[128], deq[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(single, sizeof single, "%s/single.safetensors", dir);
    snprintf(g1, sizeof g1, "%s/ltx-diffusers-Q8_0.gguf", dir);
    snprintf(g2, sizeof g2, "%s/ltx-single-Q8_0.gguf", dir);
    snprintf(deq, sizeof deq, "%s/dequantized.safetensors", dir);
    write_single_file(single, 0);
    wh_quantize_q8_0(TDIR "diffusion_pytorch_model.safetensors", g1, &ltx_gguf_rules);
    wh_quantize_q8_0(single, g2, &ltx_gguf_rules);
    cvx_weights *w1 = cvx_weights_open(g1), *w2 = cvx_weights_open(g2);
    ASSERT_NONNULL(w1);
    ASSERT_NONNULL(w2);
    assert_string_equal(cvx_gguf_get_str(cvx_weights_gguf(w2), "general.architecture"), "ltxv");
    assert_int_equal(cvx_weights_count(w1), cvx_weights_count(w2));   /* the VAE left out */
    static const char *const want[][2] = {
        {"transformer_blocks.0.ff.net.0.proj.weight", "Q8_0"}, {"transformer_blocks.1.attn2.to_k.weight", "Q8_0"},
        {"patchify_proj.weight", "F32"}, {"adaln_single.linear.weight", "F16"},
        {"caption_projection.linear_1.weight", "F32"}, {"transformer_blocks.0.scale_shift_table", "F32"},
        {"transformer_blocks.0.attn1.q_norm.weight", "F32"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const cvx_tensor *x = tensor_named(w2, want[i][0]);
        if (!x) fail_msg("%s: no %s", g2, want[i][0]);
        print_message("  %-45s %s\n", want[i][0], cvx_dtype_name(x->dtype));
        assert_string_equal(cvx_dtype_name(x->dtype), want[i][1]);
        ASSERT_NONNULL(tensor_named(w1, want[i][0]));
    }
    for (int i = 0; i < cvx_weights_count(w2); i++) assert_null(strstr(cvx_weights_at(w2, i)->name, "vae"));
    /* dequantized f32 copy of the GGUF, original names kept */
    wh_write_dequantized(g2, deq);
    cvx_weights_close(w1);
    cvx_weights_close(w2);

    float *f32 = forward_of(TDIR), *q1 = forward_of(g1), *q2 = forward_of(g2), *ref = forward_of(deq);
    assert_same("Q8_0 from the single file = from the diffusers layout", q1, q2, B * S * C);
    const double e = cvx_rel_l2(q2, ref, B * S * C), d = cvx_rel_l2(q2, f32, B * S * C);
    print_message("  Q8_0 vs f32 over its dequantized weights: rel L2 %.3g (tol 1e-5); vs the f32 model %.3g\n", e, d);
    assert_true(e <= 1e-5);
    assert_true(d > 0 && d < 2e-2);
    free(f32); free(q1); free(q2); free(ref);
    tu_rmrf(dir);
}

/* ---- LoRA ---- */

enum { R = 4 };
static const char *const LORA_MODULES[] = {"transformer_blocks.0.attn1.to_q", "transformer_blocks.1.attn2.to_out.0",
                                           "transformer_blocks.1.ff.net.0.proj", "proj_in", "time_embed.linear"};
enum { NMOD = sizeof LORA_MODULES / sizeof LORA_MODULES[0] };

/* A random rank-R LoRA over LORA_MODULES (prefix "transformer." or "diffusion_model."), and the
 * tiny transformer with the deltas merged: W + 1.0 · B A (no alpha: scale lora_alpha / r = 1 as
 * diffusers sets lora_alpha = r when a file has none). */
static void write_lora_alpha(const char *lora, const char *merged, const char *prefix, int alpha) {
    cvx_weights *t = cvx_weights_open(TDIR);
    ASSERT_NONNULL(t);
    cvx_st_writer *lw = cvx_stw_new(), *mw = cvx_stw_new();
    cvx_generator rng;
    cvx_generator_seed(&rng, 5);
    float *AB[NMOD][2];
    for (int k = 0; k < NMOD; k++) {
        char key[256];
        snprintf(key, sizeof key, "%s.weight", LORA_MODULES[k]);
        const cvx_tensor *w = cvx_weights_find(t, key);
        ASSERT_NONNULL(w);
        const int64_t O = w->shape[0], I = w->shape[1];
        AB[k][0] = cvx_alloc_f32((size_t)R * I), AB[k][1] = cvx_alloc_f32((size_t)O * R);
        cvx_randn(&rng, AB[k][0], (size_t)R * I);
        cvx_randn(&rng, AB[k][1], (size_t)O * R);
        for (int64_t i = 0; i < R * I; i++) AB[k][0][i] *= 0.05f;
        for (int64_t i = 0; i < O * R; i++) AB[k][1][i] *= 0.05f;
        snprintf(key, sizeof key, "%s.%s.lora_A.weight", prefix, LORA_MODULES[k]);
        ASSERT_OK(cvx_stw_add(lw, key, CVX_F32, 2, (const int64_t[]){R, I}, AB[k][0]));
        snprintf(key, sizeof key, "%s.%s.lora_B.weight", prefix, LORA_MODULES[k]);
        ASSERT_OK(cvx_stw_add(lw, key, CVX_F32, 2, (const int64_t[]){O, R}, AB[k][1]));
        const float a8 = 8;   /* 2·r: diffusers ignores it for LTX-Video (its converter only strips the prefix) */
        snprintf(key, sizeof key, "%s.%s.alpha", prefix, LORA_MODULES[k]);
        if (alpha) ASSERT_OK(cvx_stw_add(lw, key, CVX_F32, 0, (const int64_t[]){1}, &a8));
    }
    for (int i = 0; i < cvx_weights_count(t); i++) {
        const cvx_tensor *x = cvx_weights_at(t, i);
        float *d = cvx_tensor_f32_dup(x);
        for (int k = 0; k < NMOD; k++) {
            char key[256];
            snprintf(key, sizeof key, "%s.weight", LORA_MODULES[k]);
            if (strcmp(x->name, key)) continue;
            const int64_t O = x->shape[0], I = x->shape[1];
            for (int64_t o = 0; o < O; o++)
                for (int64_t c = 0; c < I; c++) {
                    double s = 0;
                    for (int r = 0; r < R; r++) s += (double)AB[k][1][o * R + r] * AB[k][0][r * I + c];
                    d[o * I + c] += (float)s;
                }
        }
        ASSERT_OK(cvx_stw_add(mw, x->name, CVX_F32, x->ndim, x->shape, d));
        free(d);
    }
    ASSERT_OK(cvx_stw_write(lw, lora));
    if (merged) ASSERT_OK(cvx_stw_write(mw, merged));
    cvx_stw_free(lw);
    cvx_stw_free(mw);
    for (int k = 0; k < NMOD; k++) free(AB[k][0]), free(AB[k][1]);
    cvx_weights_close(t);
}

/* The diffusers-layout model with the LoRA attached (common/lora.h, as the pipeline attaches it). */
static void write_lora(const char *lora, const char *merged, const char *prefix) {
    write_lora_alpha(lora, merged, prefix, 0);
}

static float *forward_lora(const char *lora, int fuse) {
    ltx_transformer *m = ltx_load_file(TDIR "config.json", TDIR, NULL);
    ASSERT_NONNULL(m);
    cvx_lora_target *t = NULL;
    const int n = ltx_lora_targets(m, &t);
    assert_int_equal(n, 10 * 2 + 7);
    cvx_lora_spec spec = {lora, 1.0};
    cvx_lora_set *set = cvx_lora_load(&spec, 1, t, n, "LTX-Video", fuse);
    ASSERT_NONNULL(set);
    free(t);
    assert_int_equal(cvx_lora_layer_count(set), NMOD);
    ltx_ctx(m)->lora = set;
    float *out = run(m);
    ltx_ctx(m)->lora = NULL;
    cvx_lora_free(set);
    ltx_free(m);
    return out;
}

static void test_lora(void **state) {
    (void)state;
    char dir[64], lora[128], comfy[128], merged[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(lora, sizeof lora, "%s/lora_diffusers.safetensors", dir);
    snprintf(comfy, sizeof comfy, "%s/lora_comfy.safetensors", dir);
    snprintf(merged, sizeof merged, "%s/merged.safetensors", dir);
    write_lora(lora, merged, "transformer");
    write_lora_alpha(comfy, NULL, "diffusion_model", 1);
    float *want = forward_of(merged), *base = forward_of(TDIR);
    float *a = forward_lora(lora, 0), *b = forward_lora(lora, 1), *c = forward_lora(comfy, 0);
    const double ea = cvx_rel_l2(a, want, B * S * C), eb = cvx_rel_l2(b, want, B * S * C),
                 ec = cvx_rel_l2(c, want, B * S * C), moved = cvx_rel_l2(base, want, B * S * C);
    print_message("  LoRA vs merged weights: rel L2 %.3g unfused, %.3g fused, %.3g ComfyUI keys + .alpha (tol 1e-5); the "
                  "LoRA moves the output by %.3g\n", ea, eb, ec, moved);
    assert_true(ea <= 1e-5 && eb <= 1e-5 && ec <= 1e-5);
    assert_true(moved > 1e-3);
    free(want); free(base); free(a); free(b); free(c);
    tu_rmrf(dir);
}

/* ---- bad inputs ---- */

static void expect_error(const char *what, const char *err, const char *const *want) {
    print_message("  %s: %s\n", what, err);
    assert_null(strchr(err, '\n'));
    for (; *want; want++)
        if (!strstr(err, *want)) fail_msg("%s: error '%s' lacks '%s'", what, err, *want);
}

static void test_bad_inputs(void **state) {
    (void)state;
    char dir[64], file[128], q[128], g[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/single.safetensors", dir);
    write_single_file(file, 0);

    size_t n;
    char *bytes = cvx_read_file(file, &n);
    ASSERT_NONNULL(bytes);
    snprintf(q, sizeof q, "%s/truncated.safetensors", dir);
    tu_write(q, bytes, n / 2);
    free(bytes);
    assert_null(ltx_load_file(TDIR "config.json", q, NULL));
    expect_error("truncated, transformer", cvx_last_error(), (const char *const[]){"truncated.safetensors", NULL});
    assert_null(ltx_vae_load_file(VDIR "config.json", q, NULL));
    expect_error("truncated, VAE", cvx_last_error(), (const char *const[]){"truncated.safetensors", NULL});

    const char *hv = "tests/data/golden_hv15/transformer_t2v/model/transformer";
    assert_null(ltx_load_file(TDIR "config.json", hv, NULL));
    expect_error("HunyuanVideo-1.5 file", cvx_last_error(),
                 (const char *const[]){"not an LTX-Video transformer", "patchify_proj", NULL});
    snprintf(q, sizeof q, "%s/transformer_only.safetensors", dir);
    write_single_file(q, 1);
    assert_null(ltx_vae_load_file(VDIR "config.json", q, NULL));
    expect_error("transformer-only file as VAE", cvx_last_error(),
                 (const char *const[]){"not an LTX-Video VAE", "vae.decoder.conv_in.conv.weight", NULL});

    /* a GGUF whose tensor does not fit the config */
    float *wide = cvx_calloc(64 * 32, sizeof *wide);
    tu_st_copy_edit(q, file, "model.diffusion_model.transformer_blocks.0.ff.net.0.proj.weight",
                    "model.diffusion_model.transformer_blocks.0.ff.net.0.proj.weight", CVX_F32, 2,
                    (const int64_t[]){64, 32}, wide);
    free(wide);
    snprintf(g, sizeof g, "%s/bad_shape.gguf", dir);
    wh_quantize_q8_0(file, g, &ltx_gguf_rules);
    assert_null(ltx_load_file(TDIR "config.json", g, NULL));
    expect_error("GGUF, wrong shape", cvx_last_error(),
                 (const char *const[]){"bad_shape.gguf", "transformer_blocks.0.ff.net.0.proj.weight", "[64, 32]",
                                       "[128, 32]", NULL});
    tu_rmrf(dir);
}


/* ---- the programs ---- */

#define FLAGS "--num_inference_steps 2 --frames 9 --height 64 --width 64 --seed 5"

static float *latents_of(const char *dir, size_t *n) {
    char p[300];
    snprintf(p, sizeof p, "%s/stage2_latents.safetensors", dir);
    cvx_safetensors *st = tu_open(p);
    const cvx_tensor *t = cvx_st_find(st, "latents");
    ASSERT_NONNULL(t);
    *n = (size_t)t->numel;
    float *x = cvx_tensor_f32_dup(t);
    cvx_st_close(st);
    return x;
}

static void test_programs(void **state) {
    (void)state;
    char dir[64], s1[256], s2[256], s3[256], cmd[4000], file[160], lora[160], merged[160], gguf[160], p[300], q[300];
    tu_program(s1, sizeof s1, "stage1");
    tu_program(s2, sizeof s2, "stage2");
    tu_program(s3, sizeof s3, "stage3");
    tu_mkdtemp(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/ltx-video-2b-v0.9-tiny.safetensors", dir);
    snprintf(lora, sizeof lora, "%s/lora.safetensors", dir);
    snprintf(merged, sizeof merged, "%s/merged.safetensors", dir);
    snprintf(gguf, sizeof gguf, "%s/ltx-Q8_0.gguf", dir);
    write_single_file(file, 0);
    write_lora(lora, merged, "diffusion_model");
    /* stage 1 once; every stage-2 run reads a copy of its files */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'a lake at dawn' --model_dir " MODEL " --output_dir %s/s1", s1, dir);
    tu_run_ok(cmd);
    static const struct { const char *name, *s2flags, *s3flags; } runs[] = {
        {"dir", "", ""}, {"single", "--transformer %1$s", "--vae %1$s"}, {"lora", "--lora %2$s", NULL},
        {"merged", "--transformer %3$s", NULL}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        char f2[600], f3[600];
        snprintf(f2, sizeof f2, runs[r].s2flags, file, lora, merged);
        snprintf(cmd, sizeof cmd, "mkdir -p %1$s/%2$s && cp %1$s/s1/* %1$s/%2$s/ && %3$s --quiet --input_dir %1$s/%2$s "
                 FLAGS " %4$s", dir, runs[r].name, s2, f2);
        tu_run_ok(cmd);
        if (!runs[r].s3flags) continue;
        snprintf(f3, sizeof f3, runs[r].s3flags, file);
        snprintf(cmd, sizeof cmd, "%1$s --quiet --input_dir %2$s/%3$s --output_video %2$s/%3$s/v.mp4 --output_frames "
                 "%2$s/%3$s/frames.safetensors %4$s", s3, dir, runs[r].name, f3);
        tu_run_ok(cmd);
    }
    static const char *const outs[] = {"stage2_latents.safetensors", "frames.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/dir/%s", dir, outs[i]);
        snprintf(q, sizeof q, "%s/single/%s", dir, outs[i]);
        wh_same_tensors(p, q);
    }
    size_t n, n2;
    snprintf(p, sizeof p, "%s/lora", dir);
    snprintf(q, sizeof q, "%s/merged", dir);
    float *zl = latents_of(p, &n), *zm = latents_of(q, &n2);
    snprintf(p, sizeof p, "%s/dir", dir);
    float *z0 = latents_of(p, &n2);
    const double e = cvx_rel_l2(zl, zm, n), moved = cvx_rel_l2(z0, zm, n);
    print_message("  --lora vs merged weights: latents rel L2 %.3g (tol 1e-4); the LoRA moves them by %.3g\n", e, moved);
    assert_true(e <= 1e-4 && moved > 1e-3);

    /* --quantize through stage 2, then the GGUF as --transformer */
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir " MODEL " --quantize Q8_0 --transformer_out %s", s2, gguf);
    tu_run_ok(cmd);
    cvx_weights *w = cvx_weights_open(gguf);
    ASSERT_NONNULL(w);
    assert_string_equal(cvx_gguf_get_str(cvx_weights_gguf(w), "general.architecture"), "ltxv");
    ASSERT_NONNULL(tensor_named(w, "patchify_proj.weight"));
    cvx_weights_close(w);
    snprintf(cmd, sizeof cmd, "mkdir -p %1$s/q && cp %1$s/s1/* %1$s/q/ && %2$s --quiet --input_dir %1$s/q " FLAGS
             " --transformer %3$s", dir, s2, gguf);
    tu_run_ok(cmd);
    snprintf(p, sizeof p, "%s/q", dir);
    float *zq = latents_of(p, &n2);
    const double dq = cvx_rel_l2(zq, z0, n);
    print_message("  Q8_0 GGUF latents vs f32: rel L2 %.3g\n", dq);
    assert_true(dq > 0 && dq < 5e-2);
    free(zl); free(zm); free(z0); free(zq);

    /* a transformer-only single file as stage 3's --vae: one line, no video written */
    char err[4096], tonly[160];
    snprintf(tonly, sizeof tonly, "%s/transformer_only.safetensors", dir);
    write_single_file(tonly, 1);
    snprintf(cmd, sizeof cmd, "%1$s --quiet --input_dir %2$s/dir --output_video %2$s/dir/bad.mp4 --vae %3$s", s3, dir,
             tonly);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  %s", err);
    assert_non_null(strstr(err, "not an LTX-Video VAE"));
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    snprintf(p, sizeof p, "%s/dir/bad.mp4", dir);
    assert_false(cvx_is_file(p));
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vae_name_table), cmocka_unit_test(test_single_file), cmocka_unit_test(test_gguf),
        cmocka_unit_test(test_lora),           cmocka_unit_test(test_bad_inputs), cmocka_unit_test(test_programs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
