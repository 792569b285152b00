/* Wan VAE (diffusers 0.33.1 AutoencoderKLWan) against the golden cases tests/data/golden_wan/
 * vae_decode (un-normalise + decode 1, 2, 5 latent frames: raw decoder output, clamped output,
 * post-processed frames) and vae_encode (1, 5, 9 frames: mean, logvar, std, normalised mode,
 * sample with Generator(7)); bf16 distances; tiled decode against a straight re-implementation of
 * upstream's tiled_decode; load errors; the original-name (ComfyUI) single file. Every decode
 * and encode gives back each feature map it took from the context's pool (the golden ones run on a
 * context of the test's, emptied when the VAE is freed).
 * vae_encode's model is byte-identical to vae_decode's (cmp'd when copied), so only one is stored. */
#include "golden_harness.h"

#include "rng.h"
#include "stage3/video.h"
#include "stage3/wan_vae.h"
#include "wan_vae_harness.h"

#define DEC_CASE "tests/data/golden_wan/vae_decode"
#define ENC_CASE "tests/data/golden_wan/vae_encode"
#define VAE_DIR DEC_CASE "/model/vae"
#define TOL 1e-5

/* ------------------------------------------------------------------ golden decode */

static void decode_case(gh_case *c, wan_vae *v, const char *name, double tol) {
    const cvx_tensor *lt = gh_tensor(c, "%s.latents", name);
    const int F = (int)lt->shape[2], h = (int)lt->shape[3], w = (int)lt->shape[4];
    float *lat = gh_f32(c, NULL, "%s.latents", name), *zw = gh_f32(c, NULL, "%s.z", name);
    size_t nz = (size_t)lt->numel;
    float *z = cvx_alloc_f32(nz);
    wan_vae_unnormalize(v, lat, F, h, w, z);
    char what[64];
    snprintf(what, sizeof what, "%s.z", name);
    gh_check_exact_f32(c, what, z, zw, nz);   /* latents / (1/std) + mean: the same f32 operations */

    size_t nd;
    float *raw_want = gh_f32(c, &nd, "%s.decoded_unclamped", name), *want = gh_f32(c, NULL, "%s.decoded", name);
    float *raw = wv_decode_z(v, z, F, h, w, NULL, 0);
    assert_pool_balanced(v);
    const int T = wan_vae_decoded_frames(v, F), H = h * 8, W = w * 8;
    gh_check_true(c, "decoded shape", gh_tensor(c, "%s.decoded", name)->shape[2] == T && (size_t)3 * T * H * W == nd);
    snprintf(what, sizeof what, "%s.decoded_unclamped", name);
    gh_check_rel_l2(c, what, raw, raw_want, nd, tol);

    /* the entry point the pipeline calls: normalised latents -> clamped frames */
    wv_collect col;
    wv_collect_init(&col, T, H, W);
    ASSERT_OK(wan_vae_decode(v, lat, F, h, w, NULL, wv_collect_frames, &col, NULL));
    assert_pool_balanced(v);
    snprintf(what, sizeof what, "%s.decoded", name);
    gh_check_rel_l2(c, what, col.video, want, nd, tol);
    for (size_t i = 0; i < nd; i++) assert_true(col.video[i] >= -1.0f && col.video[i] <= 1.0f);

    /* post-processing: frames_np [T, H, W, 3] and the 8-bit frames (±1 at .5 boundaries) */
    size_t nf;
    float *fw = gh_f32(c, &nf, "%s.frames_np", name), *fg = cvx_alloc_f32(nf);
    const cvx_tensor *u8 = gh_tensor(c, "%s.frames_uint8", name);
    const uint8_t *uw = u8->data;
    int maxd = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H * W; i++)
            for (int k = 0; k < 3; k++) {
                const float x = col.video[((size_t)k * T + t) * H * W + i];
                const size_t j = ((size_t)t * H * W + i) * 3 + k;
                fg[j] = video_unit(x);
                int d = abs((int)video_u8(x) - (int)uw[j]);
                maxd = d > maxd ? d : maxd;
            }
    snprintf(what, sizeof what, "%s.frames_np", name);
    gh_check_rel_l2(c, what, fg, fw, nf, tol);
    print_message("  %s.frames_uint8 max |diff| = %d (tol 1)\n", name, maxd);
    gh_check_true(c, "frames_uint8 within 1", maxd <= 1);
    free(fw), free(fg), free(col.video), free(raw), free(raw_want), free(want), free(z), free(zw), free(lat);
}

static void test_decode_golden(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, DEC_CASE);
    cvx_ctx *ctx = cvx_ctx_new(0);   /* ours: its feature-map pool must balance after every call */
    wan_vae *v = wan_vae_load(VAE_DIR, ctx);
    ASSERT_NONNULL(v);
    v->ctx->precision = CVX_PRECISION_F32;
    assert_int_equal(v->spatial_ratio, 8);
    assert_int_equal(v->temporal_ratio, 4);
    decode_case(&c, v, "f1", TOL);
    decode_case(&c, v, "f2", TOL);
    decode_case(&c, v, "f5", TOL);
    assert_true(ctx->maps.held_bytes > 0);   /* the decodes did take their maps from it */
    free_and_check_pool(v, ctx);
    gh_close(&c);
}

/* ------------------------------------------------------------------ golden encode */

static void encode_case(gh_case *c, wan_vae *v, const char *name, double tol) {
    const cvx_tensor *pt = gh_tensor(c, "%s.pixels", name);
    const int T = (int)pt->shape[2], H = (int)pt->shape[3], W = (int)pt->shape[4];
    const cvx_tensor *mt = gh_tensor(c, "%s.mean", name);
    int F, h, w;
    ASSERT_OK(wan_vae_encoded_shape(v, T, H, W, &F, &h, &w));
    gh_check_true(c, "latent shape", mt->shape[1] == v->cfg.z_dim && mt->shape[2] == F && mt->shape[3] == h &&
                                         mt->shape[4] == w);
    const size_t n = (size_t)mt->numel;
    float *x = gh_f32(c, NULL, "%s.pixels", name), *mean = cvx_alloc_f32(n), *logvar = cvx_alloc_f32(n);
    ASSERT_OK(wan_vae_encode(v, x, T, H, W, mean, logvar, NULL));
    assert_pool_balanced(v);
    char what[64];
    float *want = gh_f32(c, NULL, "%s.mean", name);
    snprintf(what, sizeof what, "%s.mean", name);
    gh_check_rel_l2(c, what, mean, want, n, tol);
    free(want);
    want = gh_f32(c, NULL, "%s.logvar", name);
    snprintf(what, sizeof what, "%s.logvar", name);
    gh_check_rel_l2(c, what, logvar, want, n, tol);
    free(want);
    float *out = cvx_alloc_f32(n);
    wan_vae_normalize(v, mean, F, h, w, out);
    want = gh_f32(c, NULL, "%s.normalised_mode", name);
    snprintf(what, sizeof what, "%s.normalised_mode", name);
    gh_check_rel_l2(c, what, out, want, n, tol);
    free(want);
    cvx_generator g;
    cvx_generator_seed(&g, 7);
    wan_vae_sample(mean, logvar, n, &g, out);
    want = gh_f32(c, NULL, "%s.sample_seed7", name);
    snprintf(what, sizeof what, "%s.sample_seed7", name);
    gh_check_rel_l2(c, what, out, want, n, tol);
    free(want), free(out), free(x), free(mean), free(logvar);
}

static void test_encode_golden(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, ENC_CASE);
    cvx_ctx *ctx = cvx_ctx_new(0);   /* ours: its feature-map pool must balance after every call */
    wan_vae *v = wan_vae_load(VAE_DIR, ctx);
    ASSERT_NONNULL(v);
    v->ctx->precision = CVX_PRECISION_F32;
    encode_case(&c, v, "t1", TOL);
    encode_case(&c, v, "t5", TOL);
    encode_case(&c, v, "t9", TOL);
    assert_true(ctx->maps.held_bytes > 0);   /* the encodes did take their maps from it */
    free_and_check_pool(v, ctx);
    gh_close(&c);
}

/* Frame and latent counts, and upstream's handling of a video that is not 1 + 4k frames. */
static void test_sizes(void **s) {
    (void)s;
    wan_vae *v = wan_vae_load(VAE_DIR, NULL);
    ASSERT_NONNULL(v);
    assert_int_equal(wan_vae_decoded_frames(v, 1), 1);
    assert_int_equal(wan_vae_decoded_frames(v, 2), 5);
    assert_int_equal(wan_vae_decoded_frames(v, 21), 81);
    int F, h, w;
    ASSERT_OK(wan_vae_encoded_shape(v, 81, 480, 832, &F, &h, &w));
    assert_int_equal(F, 21), assert_int_equal(h, 60), assert_int_equal(w, 104);
    ASSERT_OK(wan_vae_encoded_shape(v, 8, 50, 66, &F, &h, &w));   /* iter_ = 1 + 7//4 = 2: frames 5..7 unused */
    assert_int_equal(F, 2), assert_int_equal(h, 6), assert_int_equal(w, 8);   /* (n + 1 − 3)//2 + 1, thrice */
    assert_int_equal(wan_vae_encoded_shape(v, 1, 4, 32, &F, &h, &w), -1);
    print_message("  error: %s\n", cvx_last_error());
    wan_vae_free(v);
}

/* ------------------------------------------------------------------ bf16 */

static void test_bf16(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, DEC_CASE);
    wan_vae *v = wan_vae_load(VAE_DIR, NULL);
    ASSERT_NONNULL(v);
    ASSERT_OK(cvx_ctx_set_precision(v->ctx, CVX_PRECISION_BF16));
    const cvx_tensor *lt = gh_tensor(&c, "f5.latents");
    const int F = (int)lt->shape[2], h = (int)lt->shape[3], w = (int)lt->shape[4];
    float *z = gh_f32(&c, NULL, "f5.z");
    size_t nd;
    float *want = gh_f32(&c, &nd, "f5.decoded_unclamped"), *got = wv_decode_z(v, z, F, h, w, NULL, 0);
    double e = cvx_rel_l2(got, want, nd);
    print_message("  bf16 decode f5 vs f32 golden: rel L2 = %.3g (bound 0.04)\n", e);
    assert_true(e <= 0.04);
    free(want), free(got), free(z);
    gh_close(&c);
    gh_open(&c, ENC_CASE);
    const cvx_tensor *pt = gh_tensor(&c, "t9.pixels");
    const int T = (int)pt->shape[2], H = (int)pt->shape[3], W = (int)pt->shape[4];
    float *x = gh_f32(&c, NULL, "t9.pixels");
    size_t n;
    float *mw = gh_f32(&c, &n, "t9.mean"), *mean = cvx_alloc_f32(n), *logvar = cvx_alloc_f32(n);
    ASSERT_OK(wan_vae_encode(v, x, T, H, W, mean, logvar, NULL));
    e = cvx_rel_l2(mean, mw, n);
    print_message("  bf16 encode t9 mean vs f32 golden: rel L2 = %.3g (bound 0.04)\n", e);
    assert_true(e <= 0.04);
    free(x), free(mw), free(mean), free(logvar);
    gh_close(&c);
    wan_vae_free(v);
}

/* ------------------------------------------------------------------ tiling */

/* tiled_decode as upstream writes it: every tile decoded alone (unclamped), blended with the
 * one above and the one to the left, [:stride, :stride] of each kept, concatenated, cropped,
 * clamped. */
static float *ref_tiled(const wan_vae *v, const float *z, int F, int h, int w, const wan_vae_tiling *t) {
    const int r = 8, tlh = t->min_h / r, tlw = t->min_w / r, slh = t->stride_h / r, slw = t->stride_w / r;
    const int T = wan_vae_decoded_frames(v, F), H = h * r, W = w * r, zc = v->cfg.z_dim;
    const int rows = (h + slh - 1) / slh, cols = (w + slw - 1) / slw;
    float **tiles = calloc((size_t)rows * cols, sizeof *tiles);
    int *th = calloc((size_t)rows, sizeof(int)), *tw = calloc((size_t)cols, sizeof(int));
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            const int i0 = i * slh, j0 = j * slw, lh = h - i0 < tlh ? h - i0 : tlh, lw = w - j0 < tlw ? w - j0 : tlw;
            float *zt = wv_latent_tile(z, zc, F, h, w, i0, j0, lh, lw);
            tiles[i * cols + j] = wv_decode_z(v, zt, F, lh, lw, NULL, 0);
            th[i] = lh * r, tw[j] = lw * r;
            free(zt);
        }
    float *out = cvx_alloc_f32((size_t)3 * T * H * W);
    for (int i = 0, y0 = 0; i < rows; i++) {
        int kh = 0;
        for (int j = 0, x0 = 0; j < cols; j++) {
            float *b = tiles[i * cols + j];
            if (i > 0) wv_ref_blend_v(tiles[(i - 1) * cols + j], th[i - 1], b, th[i], 3 * T, tw[j], t->min_h - t->stride_h);
            if (j > 0) wv_ref_blend_h(tiles[i * cols + j - 1], tw[j - 1], b, tw[j], 3 * T, th[i], t->min_w - t->stride_w);
            kh = th[i] < t->stride_h ? th[i] : t->stride_h;
            const int kw = tw[j] < t->stride_w ? tw[j] : t->stride_w;
            for (int c = 0; c < 3 * T; c++)
                for (int y = 0; y < kh && y0 + y < H; y++)
                    for (int x = 0; x < kw && x0 + x < W; x++)
                        out[((size_t)c * H + y0 + y) * W + x0 + x] = b[((size_t)c * th[i] + y) * tw[j] + x];
            x0 += kw;
        }
        y0 += kh;
    }
    for (size_t k = 0; k < (size_t)3 * T * H * W; k++) out[k] = out[k] < -1 ? -1 : out[k] > 1 ? 1 : out[k];
    for (int k = 0; k < rows * cols; k++) free(tiles[k]);
    free(tiles), free(th), free(tw);
    return out;
}

static void test_tiled(void **s) {
    (void)s;
    wan_vae *v = wan_vae_load(VAE_DIR, NULL);
    ASSERT_NONNULL(v);
    v->ctx->precision = CVX_PRECISION_F32;
    const int F = 3, h = 14, w = 19, zc = v->cfg.z_dim, T = wan_vae_decoded_frames(v, F);
    const size_t n = (size_t)zc * F * h * w, nd = (size_t)3 * T * h * 8 * w * 8;
    float *z = cvx_alloc_f32(n);
    cvx_generator g;
    cvx_generator_seed(&g, 11);
    cvx_randn(&g, z, n);
    wan_vae_tiling t = {.min_h = 64, .min_w = 96, .stride_h = 48, .stride_w = 64};   /* 3 × 3 tiles, ragged edges */
    ASSERT_OK(wan_vae_tiling_check(v, &t));
    assert_true(wan_vae_tiling_applies(v, h, w, &t));
    assert_int_equal(wan_vae_decode_steps(v, F, h, w, &t), F * 3 * 3);
    float *tiled = wv_decode_z(v, z, F, h, w, &t, 1), *ref = ref_tiled(v, z, F, h, w, &t);
    assert_pool_balanced(v);   /* the tiled path too */
    double e = cvx_rel_l2(tiled, ref, nd);
    print_message("  tiled vs upstream-order tiled reference: rel L2 = %.3g, %s\n", e,
                  memcmp(tiled, ref, sizeof(float) * nd) ? "bytes differ" : "bit-identical");
    assert_true(memcmp(tiled, ref, sizeof(float) * nd) == 0);
    float *plain = wv_decode_z(v, z, F, h, w, NULL, 1);
    print_message("  tiled vs untiled (the approximation tiling makes): rel L2 = %.3g\n", cvx_rel_l2(tiled, plain, nd));
    assert_true(cvx_rel_l2(tiled, plain, nd) < 0.5);
    /* a latent inside one tile is not tiled: the same bytes as untiled */
    wan_vae_tiling big;
    wan_vae_tiling_default(&big);
    assert_false(wan_vae_tiling_applies(v, h, w, &big));
    float *same = wv_decode_z(v, z, F, h, w, &big, 1);
    assert_true(memcmp(same, plain, sizeof(float) * nd) == 0);
    /* sizes that would misalign the tiles are refused with one line */
    wan_vae_tiling bad = {.min_h = 60, .min_w = 96, .stride_h = 48, .stride_w = 64};
    assert_int_equal(wan_vae_tiling_check(v, &bad), -1);
    print_message("  error: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "multiple of the spatial ratio 8"));
    bad = (wan_vae_tiling){.min_h = 64, .min_w = 64, .stride_h = 48, .stride_w = 72};
    assert_int_equal(wan_vae_tiling_check(v, &bad), -1);
    free(z), free(tiled), free(ref), free(plain), free(same);
    wan_vae_free(v);
}

/* ------------------------------------------------------------------ loading */

/* Copy every tensor of the golden weights into a new file, renamed by `rename` (NULL: same
 * name) and with tensor `reshape` given `shape` (first dim changed). */
static void write_weights(const char *path, const char *(*rename)(const char *, char *, size_t), const char *reshape) {
    cvx_safetensors *st = tu_open(VAE_DIR "/diffusion_pytorch_model.safetensors");
    cvx_st_writer *wr = cvx_stw_new();
    for (int i = 0; i < cvx_st_count(st); i++) {
        const cvx_tensor *t = cvx_st_tensor(st, i);
        char buf[256];
        const char *name = rename ? rename(t->name, buf, sizeof buf) : t->name;
        if (!name) fail_msg("no original name for %s", t->name);
        float *d = cvx_tensor_f32_dup(t);
        int64_t shape[CVX_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        if (reshape && !strcmp(t->name, reshape)) shape[0] = 1;   /* the first row only: a wrong shape */
        if (cvx_stw_add_f32(wr, name, CVX_F32, t->ndim, shape, d)) fail_msg("%s", cvx_last_error());
        free(d);
    }
    if (cvx_stw_write(wr, path)) fail_msg("%s", cvx_last_error());
    cvx_stw_free(wr);
    cvx_st_close(st);
}

static void test_load_errors(void **s) {
    (void)s;
    assert_null(wan_vae_load("tests/data/golden_wan/no_such_vae", NULL));
    print_message("  error: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "no_such_vae"));
    char dir[256], path[1100], cfg[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    /* one weight of the wrong shape: one line naming the tensor, its shape and the expected one */
    write_weights(path, NULL, "decoder.up_blocks.1.resnets.0.conv1.weight");
    snprintf(path, sizeof path, "cp %s/config.json %s", VAE_DIR, cfg);
    assert_int_equal(system(path), 0);
    assert_null(wan_vae_load(dir, NULL));
    const char *e = cvx_last_error();
    print_message("  error: %s\n", e);
    assert_non_null(strstr(e, "'decoder.up_blocks.1.resnets.0.conv1.weight' has shape [1, 8, 3, 3, 3], expected [16, 8, 3, 3, 3]"));
    assert_null(strchr(e, '\n'));
    /* configs upstream 0.33.1 cannot build, or that this implementation does not cover */
    const char *bad[][2] = {
        {"{\"base_dim\": 8, \"is_residual\": true, \"num_res_blocks\": 0}", "num_res_blocks"},
        {"{\"base_dim\": 8, \"patch_size\": 2, \"in_channels\": 3}", "in_channels"},
        {"{\"base_dim\": 8, \"attn_scales\": [0.5]}", "attn_scales"},
        {"{\"base_dim\": 8, \"dim_mult\": [1, 2, 2, 2], \"temperal_downsample\": [true, true]}", "temperal_downsample"},
        {"{\"base_dim\": 8, \"dim_mult\": [1, 2, 2, 2], \"temperal_downsample\": [true, true, true]}", "temporal levels"},
        {"{\"z_dim\": 8}", "latents_mean"},
        {"{\"_class_name\": \"AutoencoderKLCogVideoX\"}", "_class_name"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        tu_write(cfg, bad[k][0], strlen(bad[k][0]));
        assert_null(wan_vae_load(dir, NULL));
        print_message("  error: %s\n", cvx_last_error());
        assert_non_null(strstr(cvx_last_error(), bad[k][1]));
    }
    tu_rmrf(dir);
}

static const char *to_original(const char *name, char *buf, size_t n) { return wan_vae_original_key(name, 1, buf, n); }

/* The name table against diffusers' scripts/convert_wan_to_diffusers.py (its literal entries and
 * its index arithmetic for num_res_blocks 2), then a single file with the original names made
 * from the golden weights: it loads and decodes / encodes bit-identically. */
static void test_original_names(void **s) {
    (void)s;
    static const char *pairs[][2] = {
        {"decoder.up_blocks.1.resnets.0.conv_shortcut.weight", "decoder.upsamples.4.shortcut.weight"},
        {"decoder.up_blocks.0.upsamplers.0.time_conv.weight", "decoder.upsamples.3.time_conv.weight"},
        {"decoder.up_blocks.2.upsamplers.0.resample.1.bias", "decoder.upsamples.11.resample.1.bias"},
        {"decoder.up_blocks.3.resnets.2.conv2.weight", "decoder.upsamples.14.residual.6.weight"},
        {"decoder.up_blocks.2.resnets.1.norm2.gamma", "decoder.upsamples.9.residual.3.gamma"},
        {"encoder.down_blocks.0.norm1.gamma", "encoder.downsamples.0.residual.0.gamma"},
        {"encoder.down_blocks.3.conv_shortcut.bias", "encoder.downsamples.3.shortcut.bias"},
        {"encoder.down_blocks.5.time_conv.weight", "encoder.downsamples.5.time_conv.weight"},
        {"encoder.mid_block.resnets.1.conv1.bias", "encoder.middle.2.residual.2.bias"},
        {"decoder.mid_block.attentions.0.to_qkv.weight", "decoder.middle.1.to_qkv.weight"},
        {"encoder.norm_out.gamma", "encoder.head.0.gamma"},
        {"decoder.conv_out.weight", "decoder.head.2.weight"},
        {"decoder.conv_in.bias", "decoder.conv1.bias"},
        {"quant_conv.bias", "conv1.bias"},
        {"post_quant_conv.weight", "conv2.weight"},
    };
    char buf[256];
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        const char *got = wan_vae_original_key(pairs[k][0], 2, buf, sizeof buf);
        if (!got || strcmp(got, pairs[k][1])) fail_msg("%s -> %s, expected %s", pairs[k][0], got ? got : "NULL", pairs[k][1]);
    }
    assert_null(wan_vae_original_key("decoder.something_else.weight", 2, buf, sizeof buf));

    char dir[256], file[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/wan_2.1_vae.safetensors", dir);
    write_weights(file, to_original, NULL);
    wan_vae *a = wan_vae_load(VAE_DIR, NULL), *b = wan_vae_load_file(VAE_DIR "/config.json", file, NULL);
    ASSERT_NONNULL(a);
    ASSERT_NONNULL(b);
    assert_true(b->original_names && !a->original_names);
    gh_case c;
    gh_open(&c, DEC_CASE);
    float *z = gh_f32(&c, NULL, "f2.z");
    const cvx_tensor *lt = gh_tensor(&c, "f2.latents");
    const int F = (int)lt->shape[2], h = (int)lt->shape[3], w = (int)lt->shape[4];
    const size_t nd = (size_t)3 * wan_vae_decoded_frames(a, F) * h * 8 * w * 8;
    float *da = wv_decode_z(a, z, F, h, w, NULL, 1), *db = wv_decode_z(b, z, F, h, w, NULL, 1);
    assert_true(memcmp(da, db, sizeof(float) * nd) == 0);
    free(da), free(db), free(z);
    gh_close(&c);
    gh_open(&c, ENC_CASE);
    float *x = gh_f32(&c, NULL, "t5.pixels");
    size_t n;
    float *mw = gh_f32(&c, &n, "t5.mean"), *ma = cvx_alloc_f32(4 * n), *mb = ma + n, *la = ma + 2 * n, *lb = ma + 3 * n;
    ASSERT_OK(wan_vae_encode(a, x, 5, 32, 48, ma, la, NULL));
    ASSERT_OK(wan_vae_encode(b, x, 5, 32, 48, mb, lb, NULL));
    assert_true(memcmp(ma, mb, sizeof(float) * n) == 0 && memcmp(la, lb, sizeof(float) * n) == 0);
    free(x), free(mw), free(ma);
    gh_close(&c);
    wan_vae_free(a), wan_vae_free(b);
    /* without a config: the Wan 2.1 defaults (base_dim 96), so the tiny file's first tensor is
     * refused with its original name */
    assert_null(wan_vae_load_file(NULL, file, NULL));
    print_message("  error: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "tensor 'conv2.weight'") || strstr(cvx_last_error(), "'decoder.conv1.weight'"));
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_golden), cmocka_unit_test(test_encode_golden), cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_bf16),          cmocka_unit_test(test_tiled),         cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_original_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
