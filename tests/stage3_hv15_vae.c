/* HunyuanVideo-1.5 VAE (stage3/hunyuan15_vae*.c, diffusers v0.36.0 AutoencoderKLHunyuanVideo15)
 * against tests/data/golden_hv15/ vae_decode (z = latents / scaling_factor, decode of 1, 2, 5
 * latent frames — upstream's whole-video pass, ours streamed frame by frame —, the pipeline's
 * post-processing) and vae_encode (1, 5, 9 frames: mean, logvar, std, mode·scaling, sample with
 * Generator(7)); tiled decode / encode against a straight re-implementation of upstream's
 * tiled_decode / tiled_encode over untiled calls; config and load errors. The decodes and encodes
 * (plain and tiled) run on a context of the test's: every feature map taken from its pool is given
 * back after each call, and freeing the VAE empties the pool.
 * vae_encode's model is byte-identical to vae_decode's (cmp'd when copied): one is stored. */
#include "golden_harness.h"

#include "stage3/hunyuan15_vae.h"
#include "latent_dist.h"

#define DEC_CASE "tests/data/golden_hv15/vae_decode"
#define ENC_CASE "tests/data/golden_hv15/vae_encode"
#define VAE_DIR DEC_CASE "/model/vae"
#define TOL 1e-5

static hv15_vae *load_on(cvx_ctx *ctx) {
    hv15_vae *v = hv15_vae_load(VAE_DIR, ctx);
    if (!v) fail_msg("%s", cvx_last_error());
    return v;
}

static hv15_vae *load(void) { return load_on(NULL); }

/* No feature map of the test's context's pool is still out (the call gave back what it took). */
static void assert_pool_balanced(const cvx_ctx *ctx) { assert_int_equal(cvx_pool_in_use(&ctx->maps), 0); }

/* The VAE freed on the test's context: the pool keeps nothing (vae_conv_forget trims it). */
static void free_and_check_pool(hv15_vae *v, cvx_ctx *ctx) {
    assert_true(ctx->maps.held_bytes > 0);   /* the calls did take their maps from it */
    hv15_vae_free(v);
    assert_pool_balanced(ctx);
    assert_true(ctx->maps.held_bytes == 0);
    cvx_ctx_free(ctx);
}

/* ------------------------------------------------------------------ decode */

static void check_decode(gh_case *c, hv15_vae *v, const cvx_ctx *ctx, const char *name) {
    const cvx_tensor *lt = gh_tensor(c, "%s.latents", name);
    const int lc = (int)lt->shape[1], F = (int)lt->shape[2], h = (int)lt->shape[3], w = (int)lt->shape[4];
    const int T = hv15_vae_decoded_frames(v, F), r = hv15_vae_get_config(v)->spatial_ratio, H = h * r, W = w * r;
    float *lat = cvx_tensor_f32_dup(lt), *z = cvx_alloc_f32(lt->numel), *want;
    char what[64];
    hv15_vae_unscale(v, lat, (size_t)lt->numel, z);
    snprintf(what, sizeof what, "%s.z", name);
    gh_expect_exact(c, what, z, (size_t)lt->numel);
    assert_int_equal(lc, hv15_vae_get_config(v)->latent_channels);
    const size_t n = (size_t)3 * T * H * W;
    float *video = cvx_alloc_f32(n);
    ASSERT_OK(hv15_vae_decode(v, z, F, h, w, NULL, video));
    assert_pool_balanced(ctx);
    want = gh_f32(c, NULL, "%s.decoded", name);
    snprintf(what, sizeof what, "%s.decoded", name);
    gh_check_rel_l2(c, what, video, want, n, TOL);
    free(want);
    /* postprocess_video(np): clamp(x/2 + 0.5, 0, 1) as [T, H, W, 3]; uint8 = round(·255) ±1 */
    float *np = cvx_alloc_f32(n);
    for (int ch = 0; ch < 3; ch++)
        for (size_t i = 0; i < (size_t)T * H * W; i++) {
            float x = video[(size_t)ch * T * H * W + i] / 2 + 0.5f;
            np[i * 3 + ch] = x < 0 ? 0 : x > 1 ? 1 : x;
        }
    want = gh_f32(c, NULL, "%s.frames_np", name);
    snprintf(what, sizeof what, "%s.frames_np", name);
    gh_check_rel_l2(c, what, np, want, n, TOL);
    free(want);
    const cvx_tensor *u8 = gh_tensor(c, "%s.frames_uint8", name);
    int worst = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)lrintf(np[i] * 255.0f) - (int)((const uint8_t *)u8->data)[i]);
        worst = d > worst ? d : worst;
    }
    print_message("  %s.frames_uint8 max |diff| = %d (tol 1)\n", name, worst);
    if (worst > 1) fail_msg("%s.frames_uint8 differs by %d", name, worst);
    free(lat), free(z), free(video), free(np);
}

static void test_decode(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, DEC_CASE);
    cvx_ctx *ctx = cvx_ctx_new(0);   /* ours: its feature-map pool must balance after every call */
    hv15_vae *v = load_on(ctx);
    check_decode(&c, v, ctx, "f1");
    check_decode(&c, v, ctx, "f2");
    check_decode(&c, v, ctx, "f5");
    free_and_check_pool(v, ctx);
    gh_close(&c);
}

/* ------------------------------------------------------------------ encode */

static void check_encode(gh_case *c, hv15_vae *v, const cvx_ctx *ctx, const char *name) {
    const cvx_tensor *vt = gh_tensor(c, "%s.video", name);
    const int T = (int)vt->shape[2], H = (int)vt->shape[3], W = (int)vt->shape[4];
    const hv15_vae_config *cfg = hv15_vae_get_config(v);
    int F, h, w;
    ASSERT_OK(hv15_vae_encoded_shape(v, T, H, W, &F, &h, &w));
    const int lc = cfg->latent_channels;
    const size_t S = (size_t)F * h * w, n = (size_t)lc * S;
    float *video = cvx_tensor_f32_dup(vt), *mom = cvx_alloc_f32(2 * n);
    ASSERT_OK(hv15_vae_encode(v, video, T, H, W, NULL, mom));
    assert_pool_balanced(ctx);
    float *mean = cvx_alloc_f32(n), *logvar = cvx_alloc_f32(n), *std = cvx_alloc_f32(n), *want;
    vae_latent_dist(mom, lc, S, mean, logvar, std);
    const char *parts[3] = {"mean", "logvar", "std"};
    float *got[3] = {mean, logvar, std};
    char what[64];
    for (int k = 0; k < 3; k++) {
        snprintf(what, sizeof what, "%s.%s", name, parts[k]);
        want = gh_f32(c, NULL, "%s", what);
        gh_check_rel_l2(c, what, got[k], want, n, TOL);
        free(want);
    }
    float *ms = cvx_alloc_f32(n);
    for (size_t i = 0; i < n; i++) ms[i] = mean[i] * (float)cfg->scaling_factor;
    snprintf(what, sizeof what, "%s.mode_scaled", name);
    want = gh_f32(c, NULL, "%s", what);
    gh_check_rel_l2(c, what, ms, want, n, TOL);
    free(want);
    cvx_generator g;
    cvx_generator_seed(&g, 7);
    vae_latent_sample(mean, std, n, &g, ms);
    snprintf(what, sizeof what, "%s.sample_seed7", name);
    want = gh_f32(c, NULL, "%s", what);
    gh_check_rel_l2(c, what, ms, want, n, TOL);
    free(want);
    free(video), free(mom), free(mean), free(logvar), free(std), free(ms);
}

static void test_encode(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, ENC_CASE);
    cvx_ctx *ctx = cvx_ctx_new(0);   /* ours: its feature-map pool must balance after every call */
    hv15_vae *v = load_on(ctx);
    check_encode(&c, v, ctx, "t1");
    check_encode(&c, v, ctx, "t5");
    check_encode(&c, v, ctx, "t9");
    free_and_check_pool(v, ctx);
    gh_close(&c);
}

/* ------------------------------------------------------------------ tiling */

/* upstream blend_v / blend_h on [C, T, H, W] tiles, written out as in the Python */
static void blend_v(const float *a, int Ha, float *b, int Hb, int C, int T, int W, int extent) {
    int e = extent < Ha ? extent : Ha;
    e = e < Hb ? e : Hb;
    for (int c = 0; c < C * T; c++)
        for (int y = 0; y < e; y++)
            for (int x = 0; x < W; x++)
                b[((size_t)c * Hb + y) * W + x] = a[((size_t)c * Ha + Ha - e + y) * W + x] * (1 - (float)y / e) +
                                                  b[((size_t)c * Hb + y) * W + x] * ((float)y / e);
}

static void blend_h(const float *a, int Wa, float *b, int Wb, int C, int T, int H, int extent) {
    int e = extent < Wa ? extent : Wa;
    e = e < Wb ? e : Wb;
    for (int c = 0; c < C * T; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < e; x++)
                b[((size_t)c * H + y) * Wb + x] = a[((size_t)c * H + y) * Wa + Wa - e + x] * (1 - (float)x / e) +
                                                  b[((size_t)c * H + y) * Wb + x] * ((float)x / e);
}

typedef struct { float *d; int H, W; } tile;

/* upstream's tiled loop: tiles of `tile_in` input units every `stride`, run (decode or encode)
 * untiled, blended over `blend` output units, each cropped to `keep`; out [C, T, Ho, Wo]. */
static void reference_tiled(hv15_vae *v, int decode, const float *src, int C_in, int T_in, int Hs, int Ws,
                            int tile_in, int stride, int blend, int keep, int C, int T, float *out, int Ho, int Wo) {
    int rows = (Hs + stride - 1) / stride, cols = (Ws + stride - 1) / stride;
    int ratio = hv15_vae_get_config(v)->spatial_ratio;
    tile *tl = calloc((size_t)rows * cols, sizeof *tl);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            int y0 = i * stride, x0 = j * stride;
            int th = Hs - y0 < tile_in ? Hs - y0 : tile_in, tw = Ws - x0 < tile_in ? Ws - x0 : tile_in;
            float *in = cvx_alloc_f32((size_t)C_in * T_in * th * tw);
            for (int c = 0; c < C_in * T_in; c++)
                for (int y = 0; y < th; y++)
                    memcpy(in + ((size_t)c * th + y) * tw, src + ((size_t)c * Hs + y0 + y) * Ws + x0,
                           sizeof(float) * tw);
            tile *t = &tl[i * cols + j];
            t->H = decode ? th * ratio : th / ratio, t->W = decode ? tw * ratio : tw / ratio;
            t->d = cvx_alloc_f32((size_t)C * T * t->H * t->W);
            if (decode) ASSERT_OK(hv15_vae_decode(v, in, T_in, th, tw, NULL, t->d));
            else ASSERT_OK(hv15_vae_encode(v, in, T_in, th, tw, NULL, t->d));
            free(in);
        }
    int oy = 0;
    for (int i = 0; i < rows; i++) {
        int ox = 0, kh = 0;
        for (int j = 0; j < cols; j++) {
            tile *t = &tl[i * cols + j];
            if (i > 0) blend_v(tl[(i - 1) * cols + j].d, tl[(i - 1) * cols + j].H, t->d, t->H, C, T, t->W, blend);
            if (j > 0) blend_h(tl[i * cols + j - 1].d, tl[i * cols + j - 1].W, t->d, t->W, C, T, t->H, blend);
        }
        for (int j = 0; j < cols; j++) {
            tile *t = &tl[i * cols + j];
            int kw = t->W < keep ? t->W : keep;
            kh = t->H < keep ? t->H : keep;
            for (int c = 0; c < C * T; c++)
                for (int y = 0; y < kh; y++)
                    memcpy(out + ((size_t)c * Ho + oy + y) * Wo + ox, t->d + ((size_t)c * t->H + y) * t->W,
                           sizeof(float) * kw);
            ox += kw;
        }
        assert_int_equal(ox, Wo);
        oy += kh;
    }
    assert_int_equal(oy, Ho);
    for (int k = 0; k < rows * cols; k++) free(tl[k].d);
    free(tl);
}

static void test_tiled(void **s) {
    (void)s;
    cvx_ctx *ctx = cvx_ctx_new(0);
    hv15_vae *v = load_on(ctx);
    const int lc = hv15_vae_get_config(v)->latent_channels, r = 16, F = 2, h = 3, w = 4;
    const int T = hv15_vae_decoded_frames(v, F), H = h * r, W = w * r;
    /* decode: tiles of 2 latents (32 samples), overlap 0.5: stride 1 latent, blend 16, keep 16 */
    hv15_vae_tiling t = {32, 32, 0.5};
    float *z = cvx_alloc_f32((size_t)lc * F * h * w);
    cvx_generator g;
    cvx_generator_seed(&g, 3);
    cvx_randn(&g, z, (size_t)lc * F * h * w);
    float *got = cvx_alloc_f32((size_t)3 * T * H * W), *ref = cvx_alloc_f32((size_t)3 * T * H * W);
    ASSERT_OK(hv15_vae_decode(v, z, F, h, w, &t, got));
    assert_pool_balanced(ctx);
    reference_tiled(v, 1, z, lc, F, h, w, 2, 1, 16, 16, 3, T, ref, H, W);
    double e = cvx_rel_l2(got, ref, (size_t)3 * T * H * W);
    print_message("  tiled decode 32/0.5 vs upstream's loop: rel L2 = %.3g (tol 1e-6)\n", e);
    assert_true(e <= 1e-6);
    float *untiled = cvx_alloc_f32((size_t)3 * T * H * W);
    ASSERT_OK(hv15_vae_decode(v, z, F, h, w, NULL, untiled));
    print_message("  tiled vs untiled decode: rel L2 = %.3g (blending: not 0)\n",
                  cvx_rel_l2(got, untiled, (size_t)3 * T * H * W));
    assert_true(cvx_rel_l2(got, untiled, (size_t)3 * T * H * W) > 1e-4);
    /* the default 256 tiles: this video is one tile, so tiling does not apply (as upstream) */
    hv15_vae_tiling d;
    hv15_vae_tiling_default(&d);
    ASSERT_OK(hv15_vae_decode(v, z, F, h, w, &d, got));
    assert_memory_equal(got, untiled, sizeof(float) * 3 * T * H * W);
    /* encode: tiles of 64 samples every 32 (overlap 0.5), blend 2 latents, keep 2: a 5-frame
     * 48×80 video from the decoded one */
    const int Te = 5, He = 48, We = 80, Fe = 2, he = 3, we = 5, M = 2 * lc;
    float *vid = cvx_alloc_f32((size_t)3 * Te * He * We);
    cvx_randn(&g, vid, (size_t)3 * Te * He * We);
    hv15_vae_tiling te = {64, 64, 0.5};
    float *mg = cvx_alloc_f32((size_t)M * Fe * he * we), *mr = cvx_alloc_f32((size_t)M * Fe * he * we);
    ASSERT_OK(hv15_vae_encode(v, vid, Te, He, We, &te, mg));
    assert_pool_balanced(ctx);
    reference_tiled(v, 0, vid, 3, Te, He, We, 64, 32, 2, 2, M, Fe, mr, he, we);
    e = cvx_rel_l2(mg, mr, (size_t)M * Fe * he * we);
    print_message("  tiled encode 64/0.5 vs upstream's loop: rel L2 = %.3g (tol 1e-6)\n", e);
    assert_true(e <= 1e-6);
    free(z), free(got), free(ref), free(untiled), free(vid), free(mg), free(mr);
    free_and_check_pool(v, ctx);
}

/* ------------------------------------------------------------------ errors */

static void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void test_errors(void **s) {
    (void)s;
    char dir[] = "/tmp/cvx_hv15vae_XXXXXX", cfg[256];
    assert_non_null(mkdtemp(dir));
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    hv15_vae_config c;
    ASSERT_OK(hv15_vae_config_load(&c, NULL));   /* upstream defaults = the real VAE */
    assert_int_equal(c.latent_channels, 32);
    assert_int_equal(c.block_out_channels[4], 1024);
    write_text(cfg, "{\"_class_name\": \"AutoencoderKLWan\"}");
    assert_int_equal(hv15_vae_config_load(&c, cfg), -1);
    assert_non_null(strstr(cvx_last_error(), "AutoencoderKLHunyuanVideo15"));
    write_text(cfg, "{\"spatial_compression_ratio\": 12}");
    assert_int_equal(hv15_vae_config_load(&c, cfg), -1);
    assert_non_null(strstr(cvx_last_error(), "powers of two"));
    /* the tiny weights under a config with one more resnet per level: the missing tensor named */
    write_text(cfg, "{\"latent_channels\": 8, \"block_out_channels\": [4, 8, 8, 8, 16], \"layers_per_block\": 2}");
    assert_null(hv15_vae_load_file(cfg, VAE_DIR, NULL));
    assert_non_null(strstr(cvx_last_error(), "resnets.2"));
    unlink(cfg);
    rmdir(dir);
    hv15_vae *v = load();
    float x[3 * 4 * 16 * 16] = {0}, m[16 * 2];
    assert_int_equal(hv15_vae_encode(v, x, 4, 16, 16, NULL, m), -1);   /* 4 frames: not 1 + 4k */
    assert_non_null(strstr(cvx_last_error(), "1 + 4"));
    assert_int_equal(hv15_vae_encode(v, x, 1, 8, 16, NULL, m), -1);
    hv15_vae_tiling bad = {24, 24, 0.25};
    assert_int_equal(hv15_vae_decode(v, x, 1, 1, 1, &bad, x), -1);
    assert_non_null(strstr(cvx_last_error(), "tiling"));
    hv15_vae_free(v);
}

/* ------------------------------------------------------------------ one half only */

/* dir/ = the golden VAE without the tensor `drop` and with `bad` reshaped (its first dimension
 * halved: a damaged checkpoint), config.json copied. */
static void write_broken_vae(const char *dir, const char *drop, const char *bad) {
    char path[512];
    cvx_weights *src = cvx_weights_open(VAE_DIR);
    assert_non_null(src);
    cvx_st_writer *w = cvx_stw_new();
    int dropped = 0, damaged = 0;
    for (int i = 0; i < cvx_weights_count(src); i++) {
        const cvx_tensor *t = cvx_weights_at(src, i);
        if (!strcmp(t->name, drop)) {
            dropped = 1;
            continue;
        }
        int64_t shape[CVX_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        if (!strcmp(t->name, bad)) shape[0] /= 2, damaged = 1;
        ASSERT_OK(cvx_stw_add(w, t->name, t->dtype, t->ndim, shape, t->data));
    }
    assert_true(dropped && damaged);
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);
    cvx_weights_close(src);
    size_t n;
    char *cfg = cvx_read_file(VAE_DIR "/config.json", &n);
    assert_non_null(cfg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    tu_write(path, cfg, n);
    free(cfg);
}

/* the error is one line naming `what` */
static void expect_error_line(const char *what) {
    const char *e = cvx_last_error();
    print_message("  error: %s\n", e);
    assert_non_null(strstr(e, what));
    assert_null(strchr(e, '\n'));
}

/* A decode-only load reads no encoder tensor (here missing or mis-shaped: it decodes the golden
 * case bit-identically to the whole model, encoding then fails with one line), and the reverse;
 * hv15_vae_load_more adds the other half to a model. */
static void test_parts(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, DEC_CASE);
    hv15_vae *full = load();
    const cvx_tensor *lt = gh_tensor(&c, "f2.latents");
    const int F = (int)lt->shape[2], h = (int)lt->shape[3], w = (int)lt->shape[4];
    const int T = hv15_vae_decoded_frames(full, F), H = 16 * h, W = 16 * w;
    float *z = cvx_tensor_f32_dup(lt);
    hv15_vae_unscale(full, z, (size_t)lt->numel, z);
    const size_t nv = (size_t)3 * T * H * W, nm = (size_t)2 * hv15_vae_get_config(full)->latent_channels * F * h * w;
    float *want = cvx_alloc_f32(nv), *got = cvx_alloc_f32(nv), *video = cvx_alloc_f32(nv);
    float *mwant = cvx_alloc_f32(nm), *mgot = cvx_alloc_f32(nm);
    ASSERT_OK(hv15_vae_decode(full, z, F, h, w, NULL, want));
    ASSERT_OK(hv15_vae_encode(full, want, T, H, W, NULL, mwant));
    memcpy(video, want, sizeof(float) * nv);
    assert_int_equal(hv15_vae_parts_loaded(full), VAE_PART_BOTH);

    /* the golden weights themselves, one half at a time: the same bits */
    hv15_vae *v = hv15_vae_load_parts(VAE_DIR, NULL, VAE_PART_DECODER);
    assert_non_null(v);
    assert_int_equal(hv15_vae_parts_loaded(v), VAE_PART_DECODER);
    ASSERT_OK(hv15_vae_decode(v, z, F, h, w, NULL, got));
    assert_memory_equal(got, want, sizeof(float) * nv);
    assert_int_equal(hv15_vae_encode(v, video, T, H, W, NULL, mgot), -1);
    expect_error_line("loaded without its encoder");
    ASSERT_OK(hv15_vae_load_more(v, VAE_PART_ENCODER));                 /* then asked to encode */
    assert_int_equal(hv15_vae_parts_loaded(v), VAE_PART_BOTH);
    ASSERT_OK(hv15_vae_encode(v, video, T, H, W, NULL, mgot));
    assert_memory_equal(mgot, mwant, sizeof(float) * nm);
    hv15_vae_free(v);

    /* encoder tensors missing / damaged: decoding does not notice */
    char dir[256];
    tu_mkdtemp(dir, sizeof dir);
    write_broken_vae(dir, "encoder.conv_in.conv.weight", "encoder.mid_block.attentions.0.to_q.weight");
    assert_null(hv15_vae_load(dir, NULL));
    expect_error_line("encoder.conv_in.conv.weight");
    v = hv15_vae_load_parts(dir, NULL, VAE_PART_DECODER);
    if (!v) fail_msg("%s", cvx_last_error());
    memset(got, 0, sizeof(float) * nv);
    ASSERT_OK(hv15_vae_decode(v, z, F, h, w, NULL, got));
    assert_memory_equal(got, want, sizeof(float) * nv);
    assert_int_equal(hv15_vae_load_more(v, VAE_PART_ENCODER), -1);
    expect_error_line("encoder.conv_in.conv.weight");
    assert_int_equal(hv15_vae_parts_loaded(v), VAE_PART_DECODER);       /* kept what it had */
    assert_int_equal(hv15_vae_encode(v, video, T, H, W, NULL, mgot), -1);
    expect_error_line("without its encoder");
    ASSERT_OK(hv15_vae_decode(v, z, F, h, w, NULL, got));
    assert_memory_equal(got, want, sizeof(float) * nv);
    hv15_vae_free(v);
    tu_rmrf(dir);

    /* decoder tensors missing / damaged: encoding does not notice */
    tu_mkdtemp(dir, sizeof dir);
    write_broken_vae(dir, "decoder.up_blocks.0.upsamplers.0.conv.conv.weight", "decoder.conv_out.conv.bias");
    v = hv15_vae_load_parts(dir, NULL, VAE_PART_ENCODER);
    if (!v) fail_msg("%s", cvx_last_error());
    ASSERT_OK(hv15_vae_encode(v, video, T, H, W, NULL, mgot));
    assert_memory_equal(mgot, mwant, sizeof(float) * nm);
    assert_int_equal(hv15_vae_decode(v, z, F, h, w, NULL, got), -1);
    expect_error_line("without its decoder");
    assert_int_equal(hv15_vae_load_more(v, VAE_PART_DECODER), -1);
    expect_error_line("decoder.up_blocks.0.upsamplers.0.conv.conv.weight");
    hv15_vae_free(v);
    tu_rmrf(dir);

    free(z), free(want), free(got), free(video), free(mwant), free(mgot);
    hv15_vae_free(full);
    gh_close(&c);
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_tiled),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
