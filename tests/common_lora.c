/* common/lora.h on a synthetic two-layer "model" (in-memory tensors, f32 and bf16 weights) with
 * LoRA files written here in every key format:
 *   - FILE[:WEIGHT] parsing;
 *   - diffusers keys (mixed ranks: the first lora_B in sorted order sets lora_alpha), original
 *     names with and without diffusion_model., lora_down/up + alpha (folded), kohya lora_unet_
 *     names, diff_b bias deltas: cvx_linear unfused and fused against a double-precision
 *     reference of W x + b + Σ s·B(A x) + s'·diff_b, two adapters at once;
 *   - a layer no adapter targets is untouched (same bytes); fused bf16 weights stay bf16;
 *   - text-encoder keys and keys matching no layer: one stderr line each, the rest applied;
 *   - errors (one message naming the file and key): lora_A without lora_B, a shape of another
 *     model size, DoRA, a file of another family, only text-encoder keys. */
#include "testutil.h"

#include <fcntl.h>
#include <math.h>

#include "context.h"
#include "dtype.h"
#include "gemm.h"
#include "lora.h"

enum { OUT1 = 6, IN1 = 5, OUT2 = 4, IN2 = 6, M = 7 };

/* ------------------------------------------------------------------ the synthetic model */

typedef struct {
    float w1[OUT1 * IN1], b1[OUT1];
    uint16_t w2[OUT2 * IN2], b2[OUT2];   /* bf16 */
    cvx_tensor W1, B1, W2, B2, W3;       /* W3: a layer no adapter targets (shares w1's data) */
    cvx_lora_target t[3];
} model;

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f);
}

static cvx_tensor tensor(const char *name, cvx_dtype d, int ndim, int64_t a, int64_t b, const void *data) {
    cvx_tensor t = {.name = name, .dtype = d, .ndim = ndim, .shape = {a, b}, .numel = ndim == 1 ? a : a * b,
                    .data = data, .file = "model"};
    t.nbytes = (size_t)t.numel * cvx_dtype_size(d);
    return t;
}

static void model_init(model *m) {
    unsigned s = 7;
    for (int i = 0; i < OUT1 * IN1; i++) m->w1[i] = frand(&s);
    for (int i = 0; i < OUT1; i++) m->b1[i] = frand(&s);
    for (int i = 0; i < OUT2 * IN2; i++) m->w2[i] = cvx_f32_to_bf16(frand(&s));
    for (int i = 0; i < OUT2; i++) m->b2[i] = cvx_f32_to_bf16(frand(&s));
    m->W1 = tensor("w1", CVX_F32, 2, OUT1, IN1, m->w1);
    m->B1 = tensor("b1", CVX_F32, 1, OUT1, 0, m->b1);
    m->W2 = tensor("w2", CVX_BF16, 2, OUT2, IN2, m->w2);
    m->B2 = tensor("b2", CVX_BF16, 1, OUT2, 0, m->b2);
    m->W3 = tensor("w3", CVX_F32, 2, OUT1, IN1, m->w1);
    memset(m->t, 0, sizeof m->t);
    snprintf(m->t[0].name, CVX_LORA_NAME, "blocks.0.attn1.to_q");
    snprintf(m->t[0].alias, CVX_LORA_NAME, "blocks.0.self_attn.q");
    m->t[0].w = &m->W1, m->t[0].b = &m->B1;
    snprintf(m->t[1].name, CVX_LORA_NAME, "blocks.0.ffn.net.2");
    snprintf(m->t[1].alias, CVX_LORA_NAME, "blocks.0.ffn.2");
    m->t[1].w = &m->W2, m->t[1].b = &m->B2;
    snprintf(m->t[2].name, CVX_LORA_NAME, "blocks.0.attn1.to_k");
    snprintf(m->t[2].alias, CVX_LORA_NAME, "blocks.0.self_attn.k");
    m->t[2].w = &m->W3, m->t[2].b = NULL;
}

/* ------------------------------------------------------------------ LoRA files */

/* One layer's factors, as written and as the reference uses them. */
typedef struct {
    int r, in, out;
    float A[8 * IN2], B[OUT1 * 8], bias[OUT1];
    int has_bias;
    float alpha;   /* 0: no .alpha key */
} factors;

static void factors_init(factors *f, int r, int in, int out, unsigned seed, int has_bias, float alpha) {
    f->r = r, f->in = in, f->out = out, f->has_bias = has_bias, f->alpha = alpha;
    for (int i = 0; i < r * in; i++) f->A[i] = frand(&seed);
    for (int i = 0; i < out * r; i++) f->B[i] = frand(&seed);
    for (int i = 0; i < out; i++) f->bias[i] = frand(&seed);
}

/* Write `f` under module name `mod` with suffixes (down, up, bias) into w. */
static void add_layer(cvx_st_writer *w, const char *mod, const char *down, const char *up, const char *bias,
                      const factors *f) {
    char k[256];
    int64_t sa[2] = {f->r, f->in}, sb[2] = {f->out, f->r}, sv[1] = {f->out};
    snprintf(k, sizeof k, "%s.%s", mod, down);
    ASSERT_OK(cvx_stw_add(w, k, CVX_F32, 2, sa, f->A));
    snprintf(k, sizeof k, "%s.%s", mod, up);
    ASSERT_OK(cvx_stw_add(w, k, CVX_F32, 2, sb, f->B));
    if (f->has_bias) {
        snprintf(k, sizeof k, "%s.%s", mod, bias);
        ASSERT_OK(cvx_stw_add(w, k, CVX_F32, 1, sv, f->bias));
    }
    if (f->alpha > 0) {
        snprintf(k, sizeof k, "%s.alpha", mod);
        ASSERT_OK(cvx_stw_add(w, k, CVX_F32, 0, sv, &f->alpha));
    }
}

static void write_file(cvx_st_writer *w, const char *path) {
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);
}

/* ------------------------------------------------------------------ reference */

/* y_ref[M, out] = x W^T + b + Σ_terms (s · B(A x) + s' · bias), in double; W, b as f32 arrays. */
typedef struct {
    const factors *f;
    double s, sb;
} term;

static void reference(const float *x, int in, int out, const float *W, const float *b, const term *t, int nt, float *y) {
    for (int i = 0; i < M; i++)
        for (int o = 0; o < out; o++) {
            double acc = b ? b[o] : 0;
            for (int k = 0; k < in; k++) acc += (double)x[i * in + k] * W[o * in + k];
            for (int a = 0; a < nt; a++) {
                const factors *f = t[a].f;
                double lr = 0;
                for (int r = 0; r < f->r; r++) {
                    double ax = 0;
                    for (int k = 0; k < in; k++) ax += (double)f->A[r * in + k] * x[i * in + k];
                    lr += f->B[o * f->r + r] * ax;
                }
                acc += t[a].s * lr + (f->has_bias ? t[a].sb * f->bias[o] : 0);
            }
            y[i * out + o] = (float)acc;
        }
}

static double max_rel(const float *a, const float *b, int n) {
    double m = 0, s = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i])), s = fmax(s, fabs(b[i]));
    return m / s;
}

/* cvx_linear of target `ti` with set s attached vs the reference (tolerance tol, max rel). */
static void check_layer(cvx_ctx *ctx, const model *m, const cvx_lora_set *s, int ti, const term *t, int nt,
                        double tol, const char *what) {
    const cvx_tensor *W = m->t[ti].w, *b = m->t[ti].b;
    const int in = (int)W->shape[1], out = (int)W->shape[0];
    float x[M * IN2], y[M * OUT1], want[M * OUT1], Wf[OUT1 * IN2], bf[OUT1];
    unsigned seed = 99;
    for (int i = 0; i < M * in; i++) x[i] = frand(&seed);
    cvx_tensor_to_f32(W, Wf);
    if (b) cvx_tensor_to_f32(b, bf);
    reference(x, in, out, Wf, b ? bf : NULL, t, nt, want);
    ctx->lora = s;
    cvx_linear(ctx, x, M, in, W, b, y);
    ctx->lora = NULL;
    double e = max_rel(y, want, M * out);
    print_message("  %-44s max rel %.2g (tol %.0e)\n", what, e, tol);
    if (!(e <= tol)) fail_msg("%s: max rel error %.3g > %.0e", what, e, tol);
}

/* ------------------------------------------------------------------ tests */

static void test_spec_parse(void **state) {
    (void)state;
    char p[64];
    double w;
    ASSERT_OK(cvx_lora_spec_parse("a.safetensors", p, sizeof p, &w));
    assert_string_equal(p, "a.safetensors");
    assert_true(w == 1.0);
    ASSERT_OK(cvx_lora_spec_parse("a.safetensors:0.5", p, sizeof p, &w));
    assert_string_equal(p, "a.safetensors");
    assert_true(w == 0.5);
    ASSERT_OK(cvx_lora_spec_parse("d:x/a.safetensors:-1.25", p, sizeof p, &w));
    assert_string_equal(p, "d:x/a.safetensors");
    assert_true(w == -1.25);
    ASSERT_OK(cvx_lora_spec_parse("d:x/a.safetensors", p, sizeof p, &w));   /* not a number: all path */
    assert_string_equal(p, "d:x/a.safetensors");
    assert_true(w == 1.0);
    assert_int_equal(cvx_lora_spec_parse(":0.5", p, sizeof p, &w), -1);
    assert_int_equal(cvx_lora_spec_parse("", p, sizeof p, &w), -1);
    assert_int_equal(cvx_lora_spec_parse("a-very-long-name.safetensors", p, 8, &w), -1);
    /* issue 37: FILE:WEIGHT where FILE exists and WEIGHT is not a finite number; a directory */
    char dir[64], file[128], arg[256];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/l.safetensors", dir);
    FILE *fp = fopen(file, "w");
    ASSERT_NONNULL(fp);
    fclose(fp);
    const char *bad[] = {"abc", "nan", "inf", "1e400", "1,5", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(arg, sizeof arg, "%s:%s", file, bad[i]);
        assert_int_equal(cvx_lora_spec_parse(arg, p, sizeof p, &w), -1);
        print_message("  %s\n", cvx_last_error());
        assert_non_null(strstr(cvx_last_error(), "not a finite number"));
        char want[64];
        snprintf(want, sizeof want, "'%s'", bad[i]);
        assert_non_null(strstr(cvx_last_error(), want));
    }
    snprintf(arg, sizeof arg, "%s:0.5", dir);
    assert_int_equal(cvx_lora_spec_parse(arg, p, sizeof p, &w), -1);
    assert_non_null(strstr(cvx_last_error(), "is a directory"));
    assert_int_equal(cvx_lora_spec_parse(dir, p, sizeof p, &w), -1);
    assert_non_null(strstr(cvx_last_error(), "is a directory"));
    tu_rmrf(dir);
}

typedef struct {
    char dir[64];
    model m;
    cvx_ctx *ctx;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    tu_mkdtemp(f->dir, sizeof f->dir);
    model_init(&f->m);
    f->ctx = cvx_ctx_new(1);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    cvx_ctx_free(f->ctx);
    tu_rmrf(f->dir);
    free(f);
    return 0;
}

static cvx_lora_set *load(fixture *f, const char *file, double w, int fuse) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", f->dir, file);
    cvx_lora_spec spec = {path, w};
    return cvx_lora_load(&spec, 1, f->m.t, 3, "Test", fuse);
}

/* diffusers keys with two ranks: lora_alpha = the rank of the first lora_B in sorted order. */
static void test_diffusers_mixed_rank(void **state) {
    fixture *f = *state;
    factors q, ff;
    factors_init(&q, 2, IN1, OUT1, 1, 0, 0);
    factors_init(&ff, 3, IN2, OUT2, 2, 1, 0);
    cvx_st_writer *w = cvx_stw_new();
    add_layer(w, "transformer.blocks.0.ffn.net.2", "lora_A.weight", "lora_B.weight", "lora_B.bias", &ff);
    add_layer(w, "transformer.blocks.0.attn1.to_q", "lora_A.weight", "lora_B.weight", "lora_B.bias", &q);
    char path[256];
    snprintf(path, sizeof path, "%s/d.safetensors", f->dir);
    write_file(w, path);
    for (int fuse = 0; fuse < 2; fuse++) {
        cvx_lora_set *s = load(f, "d.safetensors", 0.8, fuse);
        ASSERT_NONNULL(s);
        assert_int_equal(cvx_lora_layer_count(s), 2);
        /* 'attn1' < 'ffn': to_q's rank 2 is lora_alpha for both; ffn (rank 3) scaled 0.8 · 2/3 */
        term tq = {&q, 0.8, 0.8}, tf = {&ff, 0.8 * 2.0 / 3.0, 0.8 * 2.0 / 3.0};
        check_layer(f->ctx, &f->m, s, 0, &tq, 1, 1e-6, fuse ? "diffusers to_q fused" : "diffusers to_q");
        check_layer(f->ctx, &f->m, s, 1, &tf, 1, fuse ? 1e-2 : 1e-6, fuse ? "diffusers ffn (bf16 W) fused" : "diffusers ffn (bf16 W)");
        if (fuse) assert_int_equal(cvx_lora_fused_weight(s, &f->m.W2)->dtype, CVX_BF16);
        /* the untargeted layer: the same bytes as without the set */
        float x[M * IN1], y0[M * OUT1], y1[M * OUT1];
        unsigned seed = 5;
        for (int i = 0; i < M * IN1; i++) x[i] = frand(&seed);
        cvx_linear(f->ctx, x, M, IN1, &f->m.W3, NULL, y0);
        f->ctx->lora = s;
        cvx_linear(f->ctx, x, M, IN1, &f->m.W3, NULL, y1);
        f->ctx->lora = NULL;
        assert_memory_equal(y0, y1, sizeof y0);
        assert_null(cvx_lora_find(s, &f->m.W3));
        cvx_lora_free(s);
    }
}

/* Original names (diffusion_model. or none), lora_down/up + alpha (folded), diff_b; kohya names;
 * two adapters at once. */
static void test_original_and_kohya(void **state) {
    fixture *f = *state;
    factors q, ff, kq;
    factors_init(&q, 4, IN1, OUT1, 3, 1, 2.0f);   /* alpha 2, rank 4: × 0.5 */
    factors_init(&ff, 4, IN2, OUT2, 4, 1, 0);     /* no alpha: × 1 */
    factors_init(&kq, 2, IN1, OUT1, 5, 0, 3.0f);  /* kohya, alpha 3, rank 2: × 1.5 */
    cvx_st_writer *w = cvx_stw_new();
    add_layer(w, "diffusion_model.blocks.0.self_attn.q", "lora_down.weight", "lora_up.weight", "diff_b", &q);
    add_layer(w, "blocks.0.ffn.2", "lora_A.weight", "lora_B.weight", "diff_b", &ff);   /* no prefix */
    char path[256];
    snprintf(path, sizeof path, "%s/o.safetensors", f->dir);
    write_file(w, path);
    w = cvx_stw_new();
    add_layer(w, "lora_unet_blocks_0_self_attn_q", "lora_down.weight", "lora_up.weight", "diff_b", &kq);
    snprintf(path, sizeof path, "%s/k.safetensors", f->dir);
    write_file(w, path);
    char p1[256], p2[256];
    snprintf(p1, sizeof p1, "%s/o.safetensors", f->dir);
    snprintf(p2, sizeof p2, "%s/k.safetensors", f->dir);
    cvx_lora_spec specs[2] = {{p1, 0.7}, {p2, -0.4}};
    for (int fuse = 0; fuse < 2; fuse++) {
        cvx_lora_set *s = cvx_lora_load(specs, 2, f->m.t, 3, "Test", fuse);
        ASSERT_NONNULL(s);
        assert_int_equal(cvx_lora_layer_count(s), 2);
        assert_int_equal(cvx_lora_term_count(s), 3);
        term tq[2] = {{&q, 0.7 * 0.5, 0.7}, {&kq, -0.4 * 1.5, -0.4}}, tf = {&ff, 0.7, 0.7};
        check_layer(f->ctx, &f->m, s, 0, tq, 2, 1e-6, fuse ? "original + kohya on to_q fused" : "original + kohya on to_q");
        check_layer(f->ctx, &f->m, s, 1, &tf, 1, fuse ? 1e-2 : 1e-6, fuse ? "bare original ffn.2 fused" : "bare original ffn.2");
        cvx_lora_free(s);
    }
}

/* stderr of fn(f) (one call), into buf. */
static void capture_stderr(fixture *f, cvx_lora_set *(*fn)(fixture *), cvx_lora_set **out, char *buf, size_t n) {
    char path[256];
    snprintf(path, sizeof path, "%s/stderr.txt", f->dir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    *out = fn(f);
    fflush(stderr);
    dup2(saved, 2);
    close(fd), close(saved);
    FILE *fp = fopen(path, "rb");
    size_t k = fread(buf, 1, n - 1, fp);
    buf[k] = 0;
    fclose(fp);
}

static cvx_lora_set *load_extra(fixture *f) { return load(f, "x.safetensors", 1.0, 0); }

static void test_text_encoder_and_unmatched_keys(void **state) {
    fixture *f = *state;
    factors q, te;
    factors_init(&q, 2, IN1, OUT1, 6, 0, 0);
    factors_init(&te, 2, IN1, OUT1, 7, 0, 0);
    cvx_st_writer *w = cvx_stw_new();
    add_layer(w, "transformer.blocks.0.attn1.to_q", "lora_A.weight", "lora_B.weight", "", &q);
    add_layer(w, "transformer.blocks.9.attn1.to_q", "lora_A.weight", "lora_B.weight", "", &q);   /* no such layer */
    add_layer(w, "text_encoder.encoder.block.0.q", "lora_A.weight", "lora_B.weight", "", &te);
    float one = 1;
    int64_t sh[1] = {1};
    ASSERT_OK(cvx_stw_add(w, "transformer.something_else", CVX_F32, 1, sh, &one));
    char path[256], err[4096];
    snprintf(path, sizeof path, "%s/x.safetensors", f->dir);
    write_file(w, path);
    cvx_lora_set *s;
    int v = cvx_verbosity();
    cvx_set_verbosity(1);
    capture_stderr(f, load_extra, &s, err, sizeof err);
    cvx_set_verbosity(v);
    ASSERT_NONNULL(s);
    print_message("%s", err);
    assert_int_equal(tu_count_substr(err, "\n"), 3);   /* the file's line, unmatched, text encoder */
    assert_non_null(strstr(err, "2 keys match no layer of the Test transformer and are ignored: "
                                "'transformer.something_else', 'transformer.blocks.9.attn1.to_q.lora_A.weight'"));
    assert_non_null(strstr(err, "2 text-encoder keys ignored"));
    term tq = {&q, 1.0, 1.0};
    check_layer(f->ctx, &f->m, s, 0, &tq, 1, 1e-6, "applied beside ignored keys");
    cvx_lora_free(s);
}

/* A file whose keys break one rule: the message. */
static void expect_load_error(fixture *f, cvx_st_writer *w, const char *want) {
    char path[256];
    snprintf(path, sizeof path, "%s/bad.safetensors", f->dir);
    write_file(w, path);
    cvx_lora_set *s = load(f, "bad.safetensors", 1.0, 0);
    if (s) fail_msg("loaded, expected an error with '%s'", want);
    print_message("  %s\n", cvx_last_error());
    if (!strstr(cvx_last_error(), want)) fail_msg("error '%s' lacks '%s'", cvx_last_error(), want);
    assert_null(strchr(cvx_last_error(), '\n'));
}

static void test_errors(void **state) {
    fixture *f = *state;
    factors q, wide;
    factors_init(&q, 2, IN1, OUT1, 8, 0, 0);
    factors_init(&wide, 2, IN2, OUT1, 9, 0, 0);   /* in 6 for a layer of in 5 */
    cvx_st_writer *w = cvx_stw_new();
    int64_t sa[2] = {2, IN1};
    ASSERT_OK(cvx_stw_add(w, "transformer.blocks.0.attn1.to_q.lora_A.weight", CVX_F32, 2, sa, q.A));
    expect_load_error(f, w, "layer 'blocks.0.attn1.to_q' has transformer.blocks.0.attn1.to_q.lora_A.weight but no lora_B");
    w = cvx_stw_new();
    add_layer(w, "transformer.blocks.0.attn1.to_q", "lora_A.weight", "lora_B.weight", "", &wide);
    expect_load_error(f, w, "Test layer 'blocks.0.attn1.to_q' takes 5 inputs (expected [rank, 5]: a LoRA for another "
                            "model size?)");
    w = cvx_stw_new();
    add_layer(w, "transformer.blocks.0.attn1.to_q", "lora_A.weight", "lora_B.weight", "", &q);
    int64_t sv[1] = {OUT1};
    ASSERT_OK(cvx_stw_add(w, "transformer.blocks.0.attn1.to_q.lora_magnitude_vector", CVX_F32, 1, sv, q.bias));
    expect_load_error(f, w, "DoRA adapters are not supported");
    w = cvx_stw_new();
    add_layer(w, "transformer.transformer_blocks.0.attn1.to_q", "lora_A.weight", "lora_B.weight", "", &q);
    expect_load_error(f, w, "none of its 1 LoRA layers is a layer of this Test transformer");
    w = cvx_stw_new();
    add_layer(w, "text_encoder.encoder.block.0.q", "lora_A.weight", "lora_B.weight", "", &q);
    expect_load_error(f, w, "no LoRA layers in this file (2 keys, only text-encoder ones)");
    w = cvx_stw_new();
    add_layer(w, "transformer.blocks.0.attn1.to_q", "lora_A.weight", "lora_B.weight", "", &q);
    ASSERT_OK(cvx_stw_metadata(w, "lora_adapter_metadata", "{\"transformer.use_dora\": true}"));
    expect_load_error(f, w, "lora_adapter_metadata says use_dora");
    /* issue 37: non-finite LoRA values are named at load, not met as wrong latents */
    factors nan_up = q;
    nan_up.B[3] = NAN;
    w = cvx_stw_new();
    add_layer(w, "transformer.blocks.0.attn1.to_q", "lora_A.weight", "lora_B.weight", "", &nan_up);
    expect_load_error(f, w, "tensor 'transformer.blocks.0.attn1.to_q.lora_B.weight': non-finite value nan at index 3");
    factors inf_alpha = q;
    inf_alpha.alpha = INFINITY;
    w = cvx_stw_new();
    add_layer(w, "diffusion_model.blocks.0.self_attn.q", "lora_down.weight", "lora_up.weight", "", &inf_alpha);
    expect_load_error(f, w, "tensor 'diffusion_model.blocks.0.self_attn.q.alpha': non-finite value inf");
    const float nan_alpha = NAN;
    int64_t s0[1] = {1};
    w = cvx_stw_new();
    add_layer(w, "diffusion_model.blocks.0.self_attn.q", "lora_down.weight", "lora_up.weight", "", &q);
    ASSERT_OK(cvx_stw_add(w, "diffusion_model.blocks.0.self_attn.q.alpha", CVX_F32, 0, s0, &nan_alpha));
    expect_load_error(f, w, "tensor 'diffusion_model.blocks.0.self_attn.q.alpha': non-finite value nan");
    cvx_lora_spec spec = {"/nonexistent/x.safetensors", 1.0};
    assert_null(cvx_lora_load(&spec, 1, f->m.t, 3, "Test", 0));
    assert_non_null(strstr(cvx_last_error(), "/nonexistent/x.safetensors"));
}

/* lora_adapter_metadata (diffusers >= 0.34): lora_alpha / r, alpha_pattern, use_rslora. */
static void test_metadata(void **state) {
    fixture *f = *state;
    factors q, ff;
    factors_init(&q, 4, IN1, OUT1, 10, 0, 0);
    factors_init(&ff, 4, IN2, OUT2, 11, 0, 0);
    cvx_st_writer *w = cvx_stw_new();
    add_layer(w, "transformer.blocks.0.attn1.to_q", "lora_A.weight", "lora_B.weight", "", &q);
    add_layer(w, "transformer.blocks.0.ffn.net.2", "lora_A.weight", "lora_B.weight", "", &ff);
    ASSERT_OK(cvx_stw_metadata(w, "lora_adapter_metadata",
                               "{\"transformer.r\": 4, \"transformer.lora_alpha\": 2.0, \"transformer.use_rslora\": "
                               "false, \"transformer.alpha_pattern\": {\"ffn.net.2\": 8}, \"transformer.rank_pattern\": {}}"));
    char path[256];
    snprintf(path, sizeof path, "%s/m.safetensors", f->dir);
    write_file(w, path);
    cvx_lora_set *s = load(f, "m.safetensors", 0.5, 0);
    ASSERT_NONNULL(s);
    term tq = {&q, 0.5 * 2.0 / 4, 0.5 * 2.0 / 4}, tf = {&ff, 0.5 * 8.0 / 4, 0.5 * 8.0 / 4};
    check_layer(f->ctx, &f->m, s, 0, &tq, 1, 1e-6, "metadata lora_alpha / r");
    check_layer(f->ctx, &f->m, s, 1, &tf, 1, 1e-6, "metadata alpha_pattern");
    cvx_lora_free(s);
    /* rsLoRA: peft 0.15.2 src/peft/tuners/lora/layer.py, LoraLayer.update_layer:
     *   if use_rslora: self.scaling[adapter_name] = lora_alpha / math.sqrt(r)
     *   else:          self.scaling[adapter_name] = lora_alpha / r
     * r 4 (8 by rank_pattern for ffn.net.2, whose lora_A has rank 8): sqrt(r) != r, so a scale of
     * lora_alpha / r would miss by 2x (2.8x) */
    factors f16;
    factors_init(&f16, 8, IN2, OUT2, 12, 0, 0);
    w = cvx_stw_new();
    add_layer(w, "transformer.blocks.0.attn1.to_q", "lora_A.weight", "lora_B.weight", "", &q);
    add_layer(w, "transformer.blocks.0.ffn.net.2", "lora_A.weight", "lora_B.weight", "", &f16);
    ASSERT_OK(cvx_stw_metadata(w, "lora_adapter_metadata",
                               "{\"transformer.r\": 4, \"transformer.lora_alpha\": 6.0, \"transformer.use_rslora\": "
                               "true, \"transformer.alpha_pattern\": {}, \"transformer.rank_pattern\": {\"ffn.net.2\": 8}}"));
    snprintf(path, sizeof path, "%s/rs.safetensors", f->dir);
    write_file(w, path);
    s = load(f, "rs.safetensors", 0.5, 0);
    ASSERT_NONNULL(s);
    term rq = {&q, 0.5 * 6.0 / sqrt(4.0), 0.5 * 6.0 / sqrt(4.0)}, rf = {&f16, 0.5 * 6.0 / sqrt(8.0), 0.5 * 6.0 / sqrt(8.0)};
    check_layer(f->ctx, &f->m, s, 0, &rq, 1, 1e-6, "use_rslora: lora_alpha / sqrt(r)");
    check_layer(f->ctx, &f->m, s, 1, &rf, 1, 1e-6, "use_rslora with rank_pattern: lora_alpha / sqrt(8)");
    cvx_lora_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_parse),
        cmocka_unit_test_setup_teardown(test_diffusers_mixed_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_original_and_kohya, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_encoder_and_unmatched_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metadata, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
