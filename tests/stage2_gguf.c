/* Transformers from GGUF files (tests/data/golden_gguf, a subset of shared/golden_gguf: tiny
 * CogVideoX and Wan 2.1 models quantized by llama.cpp's tools with city96's rules; Wan with the
 * original tensor names, CogVideoX with diffusers names):
 *   - every file's forward in f32 against `output.<FT>` (diffusers with ggml's dequantized weights)
 *     within 1e-5 relative L2; the bf16 and int8 paths' distances printed (int8 bounded);
 *   - bad files through the loaders: a tensor shape that does not fit the config, a missing tensor,
 *     a tensor of a type we do not read, a truncated file: one clear error line each.
 * CVX_GOLDEN_GGUF=<shared>/golden_gguf runs the model cases on every file of the shared set. */
#include "golden_harness.h"

#include "fileio.h"
#include "gguf.h"
#include "stage2/cogvideox.h"
#include "stage2/wan.h"

#include <dirent.h>

#define DATA "tests/data/golden_gguf"
#define TOL 1e-5

static const char *data_dir(void) {
    const char *e = getenv("CVX_GOLDEN_GGUF");
    return e && e[0] ? e : DATA;
}

/* The .gguf files of dir/kind whose names start with "<kind>-", sorted; returns the count. */
static int list_files(const char *kind_dir, const char *prefix, char names[][64], int cap) {
    DIR *d = opendir(kind_dir);
    if (!d) fail_msg("cannot open %s", kind_dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < cap) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".gguf") && !strncmp(e->d_name, prefix, strlen(prefix)) &&
            len < 64)
            snprintf(names[n++], 64, "%.63s", e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, 64, (int (*)(const void *, const void *))strcmp);
    return n;
}

/* "wan-Q4_K_S.gguf" -> "Q4_K_S" */
static void file_type_of(const char *name, char *ft, size_t n) {
    const char *dash = strchr(name, '-');
    snprintf(ft, n, "%.*s", (int)(strlen(dash + 1) - 5), dash + 1);
}

typedef struct {
    double f32, bf16, int8, base;   /* rel L2 vs output.<FT>; base: output.<FT> vs output_f32 */
} distances;

static void report(const char *kind, const char *ft, const distances *d) {
    print_message("  %-9s %-7s f32 %.2e   bf16 %.2e   int8 %.2e   (the quantization itself: %.2e)\n", kind, ft,
                  d->f32, d->bf16, d->int8, d->base);
}

/* ------------------------------------------------------------------ CogVideoX */

static void cog_run(cogvideox_transformer *m, const gh_forward *g, float *out) {
    ASSERT_OK(cogvideox_forward(m, g->x, g->B, g->F, g->H, g->W, g->text, g->L, g->t, g->cos, g->sin, out));
}

static void test_cogvideox_files(void **state) {
    (void)state;
    char dir[512], cfg[600], names[16][64], path[1100];
    snprintf(dir, sizeof dir, "%s/cogvideox", data_dir());
    snprintf(cfg, sizeof cfg, "%s/model/transformer/config.json", dir);
    gh_case c;
    gh_open(&c, dir);
    gh_forward g;
    gh_forward_load(&c, &g);
    cvx_ctx *ctx = cvx_ctx_new(2);
    const int nf = list_files(dir, "cogvideox-", names, 16);
    assert_true(nf >= 1);
    for (int i = 0; i < nf; i++) {
        char ft[32];
        file_type_of(names[i], ft, sizeof ft);
        snprintf(path, sizeof path, "%.500s/%.63s", dir, names[i]);
        cogvideox_transformer *m = cogvideox_load_file(cfg, path, ctx);
        ASSERT_NONNULL(m);
        const size_t n = (size_t)g.B * g.F * cogvideox_get_config(m)->out_channels * g.H * g.W;
        float *out = cvx_alloc_f32(n), *want = gh_f32(&c, NULL, "output.%s", ft), *f32w = gh_f32(&c, NULL, "output_f32");
        distances d;
        cog_run(m, &g, out);
        gh_check_rel_l2(&c, ft, out, want, n, TOL);
        d.f32 = cvx_rel_l2(out, want, n), d.base = cvx_rel_l2(want, f32w, n);
        ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_BF16));
        cog_run(m, &g, out);
        d.bf16 = cvx_rel_l2(out, want, n);
        ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_F32));
        cvx_ctx_set_int8(ctx, 1);
        cog_run(m, &g, out);
        d.int8 = cvx_rel_l2(out, want, n);
        cvx_ctx_set_int8(ctx, 0);
        report("cogvideox", ft, &d);
        assert_true(d.int8 < 5e-2 && d.bf16 < 5e-2);
        free(out), free(want), free(f32w);
        cogvideox_free(m);
    }
    cvx_ctx_free(ctx);
    gh_forward_free(&g);
    gh_close(&c);
}

/* ------------------------------------------------------------------ Wan */

typedef struct {
    float *x, *text, t[2];
    int B, F, H, W, L;
} wan_in;

static void wan_inputs(gh_case *c, wan_in *in) {
    const cvx_tensor *hs = gh_tensor(c, "hidden_states"), *eh = gh_tensor(c, "encoder_hidden_states"),
                     *ts = gh_tensor(c, "timestep");
    in->B = (int)hs->shape[0], in->F = (int)hs->shape[2], in->H = (int)hs->shape[3], in->W = (int)hs->shape[4];
    in->L = (int)eh->shape[1];
    assert_true(in->B <= 2 && ts->numel == in->B && ts->dtype == CVX_F32);
    cvx_tensor_to_f32(ts, in->t);
    in->x = cvx_tensor_f32_dup(hs), in->text = cvx_tensor_f32_dup(eh);
}

static void wan_run(wan_transformer *m, const wan_in *in, float *out) {
    ASSERT_OK(wan_forward(m, in->x, in->B, in->F, in->H, in->W, in->text, in->L, NULL, 0, in->t, out));
}

static void test_wan_files(void **state) {
    (void)state;
    char dir[512], cfg[600], names[16][64], path[1100];
    snprintf(dir, sizeof dir, "%s/wan", data_dir());
    snprintf(cfg, sizeof cfg, "%s/model/transformer/config.json", dir);
    gh_case c;
    gh_open(&c, dir);
    wan_in in;
    wan_inputs(&c, &in);
    cvx_ctx *ctx = cvx_ctx_new(2);
    const int nf = list_files(dir, "wan-", names, 16);
    assert_true(nf >= 1);
    for (int i = 0; i < nf; i++) {
        char ft[32];
        file_type_of(names[i], ft, sizeof ft);
        snprintf(path, sizeof path, "%.500s/%.63s", dir, names[i]);
        wan_transformer *m = wan_load_file(cfg, path, ctx);
        ASSERT_NONNULL(m);
        assert_true(wan_original_names(m));
        const wan_config *wc = wan_get_config(m);
        const size_t n = (size_t)in.B * wc->out_channels * in.F * in.H * in.W;
        float *out = cvx_alloc_f32(n), *want = gh_f32(&c, NULL, "output.%s", ft), *f32w = gh_f32(&c, NULL, "output_f32"),
              *dg = gh_f32(&c, NULL, "output_diffusers_gguf.%s", ft);
        distances d;
        wan_run(m, &in, out);
        gh_check_rel_l2(&c, ft, out, want, n, TOL);
        d.f32 = cvx_rel_l2(out, want, n), d.base = cvx_rel_l2(want, f32w, n);
        print_message("  (diffusers' own GGUF path, f16 dequantization: %.2e from the reference)\n",
                      cvx_rel_l2(dg, want, n));
        ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_BF16));
        wan_run(m, &in, out);
        d.bf16 = cvx_rel_l2(out, want, n);
        ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_F32));
        cvx_ctx_set_int8(ctx, 1);
        wan_run(m, &in, out);
        d.int8 = cvx_rel_l2(out, want, n);
        cvx_ctx_set_int8(ctx, 0);
        report("wan", ft, &d);
        assert_true(d.int8 < 5e-2 && d.bf16 < 5e-2);
        free(out), free(want), free(f32w), free(dg);
        wan_free(m);
    }
    cvx_ctx_free(ctx);
    free(in.x), free(in.text);
    gh_close(&c);
}

/* ------------------------------------------------------------------ bad files */

static unsigned char *read_all(const char *path, size_t *n) {
    unsigned char *b = (unsigned char *)cvx_read_file(path, n);
    if (!b) fail_msg("%s", cvx_last_error());
    return b;
}

/* The offset of the u32 ggml type of tensor `name` in a GGUF image (after its name, n_dims, ne[]). */
static size_t type_field_of(const unsigned char *b, size_t n, const char *name) {
    size_t len = strlen(name);
    for (size_t i = 8; i + len + 4 < n; i++)
        if (!memcmp(b + i, name, len) && b[i - 8] == len) {
            uint32_t nd;
            memcpy(&nd, b + i + len, 4);
            return i + len + 4 + 8 * (size_t)nd;
        }
    fail_msg("tensor %s not found in the header", name);
    return 0;
}

/* wan_load_file on a modified copy of wan-Q4_K_S.gguf (and/or a modified config): NULL and an
 * error containing `want`. */
static void expect_wan_error(const unsigned char *img, size_t n, const char *cfg_text, const char *want) {
    char tmp[64], gguf[128], cfg[128];
    tu_mkdtemp(tmp, sizeof tmp);
    snprintf(gguf, sizeof gguf, "%s/wan.gguf", tmp);
    snprintf(cfg, sizeof cfg, "%s/config.json", tmp);
    tu_write(gguf, img, n);
    tu_write(cfg, cfg_text, strlen(cfg_text));
    wan_transformer *m = wan_load_file(cfg, gguf, NULL);
    if (m) fail_msg("loaded a bad file (expected an error with '%s')", want);
    const char *err = cvx_last_error();
    print_message("  error: %s\n", err);
    if (!strstr(err, want)) fail_msg("error '%s' does not say '%s'", err, want);
    assert_null(strchr(err, '\n'));
    tu_rmrf(tmp);
}

static void test_bad_files(void **state) {
    (void)state;
    size_t n, ncfg;
    unsigned char *img = read_all(DATA "/wan/wan-Q4_K_S.gguf", &n);
    char *cfg = cvx_read_file(DATA "/wan/model/transformer/config.json", &ncfg);
    ASSERT_NONNULL(cfg);
    unsigned char *b = malloc(n);

    /* the config says ffn_dim 640: the file's 512-row ffn.0 does not fit */
    char *cfg2 = malloc(ncfg + 8), *p = strstr(cfg, "\"ffn_dim\": 512");
    assert_non_null(p);
    snprintf(cfg2, ncfg + 8, "%.*s\"ffn_dim\": 640%s", (int)(p - cfg), cfg, p + strlen("\"ffn_dim\": 512"));
    expect_wan_error(img, n, cfg2, "tensor 'blocks.0.ffn.0.weight' has shape [512, 256], expected [640, 256]");
    free(cfg2);

    /* a missing tensor: blocks.1.ffn.2.weight renamed (same length, offsets unchanged) */
    memcpy(b, img, n);
    size_t t = type_field_of(b, n, "blocks.1.ffn.2.weight");
    size_t name_at = t - 8 * 2 - 4 - strlen("blocks.1.ffn.2.weight");
    b[name_at + strlen("blocks.1.ffn.2.weigh")] = 'x';
    expect_wan_error(b, n, cfg, "tensor 'blocks.1.ffn.2.weight' is missing");

    /* a tensor of a type we do not read (IQ2_XXS = 16) */
    memcpy(b, img, n);
    t = type_field_of(b, n, "blocks.0.self_attn.q.weight");
    b[t] = 16, b[t + 1] = b[t + 2] = b[t + 3] = 0;
    expect_wan_error(b, n, cfg, "IQ2_XXS");

    /* truncated in the data section */
    expect_wan_error(img, n - 1000, cfg, "wan.gguf");

    free(b), free(img), free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cogvideox_files),
        cmocka_unit_test(test_wan_files),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
