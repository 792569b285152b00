/* Wan 2.2 VAE (diffusers 0.35.2 AutoencoderKLWan with is_residual, patch_size 2, z_dim 48) against
 * tests/data/golden_wan22/vae22_decode (un-normalise with the 48 real channel stats + decode 1, 2,
 * 5 latent frames: patchified decoder output, unpatchified raw output, clamped output, frames) and
 * vae22_encode (1, 5, 9 frames: patchify, quant_conv output, mean, logvar, normalised mode, sample
 * with Generator(7)); tiled decode against untiled; patchify / AvgDown3D / DupUp3D against
 * straight re-statements of upstream's view/permute code; sizes and bad inputs; a random model
 * of the hidden set's kind (base 6 / decoder 10, dim_mult [1,2,4,2], 2 res blocks: other group
 * and repeat sizes) is causal frame by frame, decoding and encoding. The golden decodes and
 * encodes run on a context of the test's: every feature map taken from its pool is given back after
 * each call, and freeing the VAE returns the pool's kept buffers.
 * vae22_encode's model is byte-identical to vae22_decode's (cmp'd when copied), so only one is stored. */
#include "golden_harness.h"

#include "rng.h"
#include "stage3/video.h"
#include "stage3/wan_vae.h"
#include "wan_vae_harness.h"

#define DEC_CASE "tests/data/golden_wan22/vae22_decode"
#define ENC_CASE "tests/data/golden_wan22/vae22_encode"
#define VAE_DIR DEC_CASE "/model/vae"
#define TOL 1e-5

static wan_vae *load_f32_on(cvx_ctx *ctx) {
    wan_vae *v = wan_vae_load(VAE_DIR, ctx);
    ASSERT_NONNULL(v);
    v->ctx->precision = CVX_PRECISION_F32;
    return v;
}

static wan_vae *load_f32(void) { return load_f32_on(NULL); }

/* ------------------------------------------------------------------ golden decode */

static void decode_case(gh_case *c, wan_vae *v, const char *name) {
    const cvx_tensor *lt = gh_tensor(c, "%s.latents", name);
    const int F = (int)lt->shape[2], h = (int)lt->shape[3], w = (int)lt->shape[4];
    float *lat = gh_f32(c, NULL, "%s.latents", name), *zw = gh_f32(c, NULL, "%s.z", name);
    const size_t nz = (size_t)lt->numel;
    float *z = cvx_alloc_f32(nz);
    wan_vae_unnormalize(v, lat, F, h, w, z);
    char what[64];
    snprintf(what, sizeof what, "%s.z", name);
    gh_check_exact_f32(c, what, z, zw, nz);

    /* the decoder itself, frame by frame, still patchified */
    size_t np;
    float *pw = gh_f32(c, &np, "%s.decoder_out_patchified", name);
    const int T = wan_vae_decoded_frames(v, F), oc = v->cfg.out_channels, dh = h * v->decoder_ratio, dw = w * v->decoder_ratio;
    gh_check_true(c, "patchified shape", np == (size_t)oc * T * dh * dw);
    float *pg = cvx_alloc_f32(np);
    vae_cache cache;
    vae_cache_init(&cache, v->dec_caches);
    float *zk = cvx_alloc_f32((size_t)v->cfg.z_dim * h * w);
    for (int k = 0, t0 = 0; k < F; k++) {
        for (int ch = 0; ch < v->cfg.z_dim; ch++) memcpy(zk + (size_t)ch * h * w, z + ((size_t)ch * F + k) * h * w, sizeof(float) * h * w);
        int n;
        float *y = wan_decoder_forward(v, &cache, zk, h, w, k == 0, &n);   // [oc, n, dh, dw]
        assert_int_equal(n, k ? v->temporal_ratio : 1);
        for (int ch = 0; ch < oc; ch++)
            memcpy(pg + ((size_t)ch * T + t0) * dh * dw, y + (size_t)ch * n * dh * dw, sizeof(float) * n * dh * dw);
        t0 += n;
        vae_fmap_put(v->ctx, y);   /* a feature map of the VAE's pool */
        assert_pool_balanced(v);
    }
    vae_cache_free(&cache);
    snprintf(what, sizeof what, "%s.decoder_out_patchified", name);
    gh_check_rel_l2(c, what, pg, pw, np, TOL);

    size_t nd;
    float *raw_want = gh_f32(c, &nd, "%s.decoded_unclamped", name), *want = gh_f32(c, NULL, "%s.decoded", name);
    const int H = h * 16, W = w * 16;
    gh_check_true(c, "decoded shape", (size_t)3 * T * H * W == nd);
    float *raw = wv_decode_z(v, z, F, h, w, NULL, 0);
    assert_pool_balanced(v);
    snprintf(what, sizeof what, "%s.decoded_unclamped", name);
    gh_check_rel_l2(c, what, raw, raw_want, nd, TOL);

    wv_collect col = {.T = T, .H = H, .W = W};
    col.video = cvx_alloc_f32(nd);
    ASSERT_OK(wan_vae_decode(v, lat, F, h, w, NULL, wv_collect_frames, &col, NULL));
    assert_pool_balanced(v);
    snprintf(what, sizeof what, "%s.decoded", name);
    gh_check_rel_l2(c, what, col.video, want, nd, TOL);
    int clamped = 0;
    for (size_t i = 0; i < nd; i++) {
        assert_true(col.video[i] >= -1.0f && col.video[i] <= 1.0f);
        clamped += raw[i] < -1.0f || raw[i] > 1.0f;
    }
    print_message("  %s: %d of %zu samples clamped\n", name, clamped, nd);

    const cvx_tensor *u8 = gh_tensor(c, "%s.frames_uint8", name);
    const uint8_t *uw = u8->data;
    int maxd = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H * W; i++)
            for (int k = 0; k < 3; k++) {
                int d = abs((int)video_u8(col.video[((size_t)k * T + t) * H * W + i]) - (int)uw[((size_t)t * H * W + i) * 3 + k]);
                maxd = d > maxd ? d : maxd;
            }
    print_message("  %s.frames_uint8 max |diff| = %d (tol 1)\n", name, maxd);
    gh_check_true(c, "frames_uint8 within 1", maxd <= 1);
    free(col.video), free(raw), free(raw_want), free(want), free(pg), free(pw), free(zk), free(z), free(zw), free(lat);
}

static void test_decode_golden(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, DEC_CASE);
    cvx_ctx *ctx = cvx_ctx_new(0);   /* ours: its feature-map pool must balance after every call */
    wan_vae *v = load_f32_on(ctx);
    assert_int_equal(v->spatial_ratio, 16);
    assert_int_equal(v->decoder_ratio, 8);
    assert_int_equal(v->temporal_ratio, 4);
    assert_int_equal(v->cfg.z_dim, 48);
    decode_case(&c, v, "f1");
    decode_case(&c, v, "f2");
    decode_case(&c, v, "f5");
    free_and_check_pool(v, ctx);
    gh_close(&c);
}

/* ------------------------------------------------------------------ golden encode */

static void encode_case(gh_case *c, wan_vae *v, const char *name) {
    const cvx_tensor *pt = gh_tensor(c, "%s.pixels", name);
    const int T = (int)pt->shape[2], H = (int)pt->shape[3], W = (int)pt->shape[4];
    float *x = gh_f32(c, NULL, "%s.pixels", name);
    char what[64];

    /* patchify: exact (a permutation) */
    size_t npp;
    float *pp_want = gh_f32(c, &npp, "%s.pixels_patchified", name), *pp = cvx_alloc_f32(npp);
    wan_vae_patchify(x, 3, T, H, W, 2, pp);
    snprintf(what, sizeof what, "%s.pixels_patchified", name);
    gh_check_exact_f32(c, what, pp, pp_want, npp);
    float *back = cvx_alloc_f32(npp);
    wan_vae_unpatchify(pp, 3, T, H / 2, W / 2, 2, back);
    assert_memory_equal(back, x, sizeof(float) * npp);
    free(back), free(pp), free(pp_want);

    const cvx_tensor *mt = gh_tensor(c, "%s.mean", name);
    int F, h, w;
    ASSERT_OK(wan_vae_encoded_shape(v, T, H, W, &F, &h, &w));
    gh_check_true(c, "latent shape", mt->shape[1] == 48 && mt->shape[2] == F && mt->shape[3] == h && mt->shape[4] == w);
    const size_t n = (size_t)mt->numel;
    float *mean = cvx_alloc_f32(n), *logvar = cvx_alloc_f32(n), *out = cvx_alloc_f32(n);
    ASSERT_OK(wan_vae_encode(v, x, T, H, W, mean, logvar, NULL));
    assert_pool_balanced(v);
    static const char *const keys[] = {"mean", "logvar", "normalised_mode", "sample_seed7"};
    for (int k = 0; k < 4; k++) {
        const float *got = k == 0 ? mean : k == 1 ? logvar : out;
        if (k == 2) wan_vae_normalize(v, mean, F, h, w, out);
        if (k == 3) {
            cvx_generator g;
            cvx_generator_seed(&g, 7);
            wan_vae_sample(mean, logvar, n, &g, out);
        }
        float *want = gh_f32(c, NULL, "%s.%s", name, keys[k]);
        snprintf(what, sizeof what, "%s.%s", name, keys[k]);
        gh_check_rel_l2(c, what, got, want, n, TOL);
        free(want);
    }
    free(out), free(x), free(mean), free(logvar);
}

static void test_encode_golden(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, ENC_CASE);
    cvx_ctx *ctx = cvx_ctx_new(0);   /* ours: its feature-map pool must balance after every call */
    wan_vae *v = load_f32_on(ctx);
    encode_case(&c, v, "t1");
    encode_case(&c, v, "t5");
    encode_case(&c, v, "t9");
    free_and_check_pool(v, ctx);
    gh_close(&c);
}

/* ------------------------------------------------------------------ shortcuts vs upstream's view/permute */

/* AvgDown3D as upstream writes it: pad, the 8-D view, permute(0,1,3,5,7,2,4,6), group, mean. */
static void ref_avg_down(const float *x, int C, int out, int ft, int fs, int T, int H, int W, float *y) {
    const int pad = (ft - T % ft) % ft, Tp = T + pad, To = Tp / ft, Ho = H / fs, Wo = W / fs, f = ft * fs * fs;
    const int g = C * f / out;
    const size_t So = (size_t)To * Ho * Wo;
    float *fold = cvx_alloc_f32((size_t)C * f * So);   // [C·f, To, Ho, Wo]
    for (int c = 0; c < C; c++)
        for (int a = 0; a < ft; a++)
            for (int b = 0; b < fs; b++)
                for (int d = 0; d < fs; d++)
                    for (int t = 0; t < To; t++)
                        for (int i = 0; i < Ho; i++)
                            for (int j = 0; j < Wo; j++) {
                                const int tp = t * ft + a;
                                const float v = tp < pad ? 0.0f : x[(((size_t)c * T + tp - pad) * H + i * fs + b) * W + j * fs + d];
                                fold[((((size_t)((c * ft + a) * fs + b) * fs + d) * To + t) * Ho + i) * Wo + j] = v;
                            }
    for (int o = 0; o < out; o++)
        for (size_t s = 0; s < So; s++) {
            float acc = 0.0f;
            for (int k = 0; k < g; k++) acc += fold[(size_t)(o * g + k) * So + s];
            y[(size_t)o * So + s] = acc / (float)g;
        }
    free(fold);
}

/* DupUp3D as upstream: repeat_interleave, the 8-D view, permute(0,1,5,2,6,3,7,4), drop. */
static void ref_dup_up(const float *x, int C, int out, int ft, int fs, int T, int H, int W, int first, float *y) {
    const int f = ft * fs * fs, rep = out * f / C, drop = first ? ft - 1 : 0, To = T * ft - drop;
    for (int o = 0; o < out; o++)
        for (int t = 0; t < T; t++)
            for (int a = 0; a < ft; a++)
                for (int i = 0; i < H; i++)
                    for (int b = 0; b < fs; b++)
                        for (int j = 0; j < W; j++)
                            for (int d = 0; d < fs; d++) {
                                const int e = ((o * ft + a) * fs + b) * fs + d, tt = t * ft + a - drop;
                                if (tt < 0) continue;
                                y[(((size_t)o * To + tt) * H * fs + i * fs + b) * W * fs + j * fs + d] =
                                    x[(((size_t)(e / rep) * T + t) * H + i) * W + j];
                            }
}

static void test_shortcuts(void **s) {
    (void)s;
    cvx_generator g;
    cvx_generator_seed(&g, 3);
    /* (C → out, ft, fs, T): group sizes 1, 2, 4 and 16, odd and even frame counts */
    const int cases[][5] = {{4, 8, 2, 2, 1}, {4, 8, 2, 2, 4}, {6, 3, 1, 2, 3}, {8, 8, 1, 1, 2}, {6, 12, 2, 2, 5}, {4, 1, 2, 2, 2}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int C = cases[k][0], out = cases[k][1], ft = cases[k][2], fs = cases[k][3], T = cases[k][4], H = 4, W = 6;
        const size_t n = (size_t)C * T * H * W;
        float *x = cvx_alloc_f32(n);
        cvx_randn(&g, x, n);
        const int To = (T + ft - 1) / ft;
        const size_t no = (size_t)out * To * (H / fs) * (W / fs);
        float *want = cvx_alloc_f32(no), *got = cvx_alloc_f32(no);
        wan_avg_down3d(x, C, out, ft, fs, T, H, W, got);
        ref_avg_down(x, C, out, ft, fs, T, H, W, want);
        assert_memory_equal(got, want, sizeof(float) * no);
        free(got), free(want);
        /* DupUp3D the other way (out → C channels), first chunk or not */
        for (int first = 0; first < 2; first++) {
            if (C * ft * fs * fs % out) continue;
            const int Tu = T * ft - (first ? ft - 1 : 0);
            const size_t nu = (size_t)C * Tu * H * fs * W * fs, nx = (size_t)out * T * H * W;
            float *xu = cvx_alloc_f32(nx), *yu = cvx_alloc_f32(nu), *ru = cvx_alloc_f32(nu);
            cvx_randn(&g, xu, nx);
            memset(yu, 0, sizeof(float) * nu);
            wan_dup_up3d_add(xu, out, C, ft, fs, T, H, W, first, yu);
            ref_dup_up(xu, out, C, ft, fs, T, H, W, first, ru);
            assert_memory_equal(yu, ru, sizeof(float) * nu);
            free(xu), free(yu), free(ru);
        }
        free(x);
    }
}

/* ------------------------------------------------------------------ tiling, sizes, errors */

/* tiled_decode as diffusers 0.36 writes it for patch_size 2: every tile decoded alone (here the
 * untiled decode of its latent region, patchified back: a permutation), blended on the 12-channel
 * patchified samples with extents (min − stride)/2, [:stride/2, :stride/2] of each kept,
 * concatenated, cropped, unpatchified, clamped. */
static float *ref_tiled(const wan_vae *v, const float *z, int F, int h, int w, const wan_vae_tiling *t) {
    const int r = 16, p = 2, dr = 8, C = 12, tlh = t->min_h / r, tlw = t->min_w / r, slh = t->stride_h / r,
              slw = t->stride_w / r;
    const int T = wan_vae_decoded_frames(v, F), H = h * dr, W = w * dr, zc = v->cfg.z_dim;
    const int rows = (h + slh - 1) / slh, cols = (w + slw - 1) / slw, bh = (t->min_h - t->stride_h) / p,
              bw = (t->min_w - t->stride_w) / p, sh = t->stride_h / p, sw = t->stride_w / p;
    float **tiles = calloc((size_t)rows * cols, sizeof *tiles);
    int *th = calloc((size_t)rows, sizeof(int)), *tw = calloc((size_t)cols, sizeof(int));
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            const int i0 = i * slh, j0 = j * slw, lh = h - i0 < tlh ? h - i0 : tlh, lw = w - j0 < tlw ? w - j0 : tlw;
            float *zt = wv_latent_tile(z, zc, F, h, w, i0, j0, lh, lw);
            float *px = wv_decode_z(v, zt, F, lh, lw, NULL, 0);
            th[i] = lh * dr, tw[j] = lw * dr;
            tiles[i * cols + j] = cvx_alloc_f32((size_t)C * T * th[i] * tw[j]);
            wan_vae_patchify(px, 3, T, lh * r, lw * r, p, tiles[i * cols + j]);
            free(zt), free(px);
        }
    float *out = cvx_alloc_f32((size_t)C * T * H * W);
    for (int i = 0, y0 = 0; i < rows; i++) {
        int kh = 0;
        for (int j = 0, x0 = 0; j < cols; j++) {
            float *b = tiles[i * cols + j];
            if (i > 0) wv_ref_blend_v(tiles[(i - 1) * cols + j], th[i - 1], b, th[i], C * T, tw[j], bh);
            if (j > 0) wv_ref_blend_h(tiles[i * cols + j - 1], tw[j - 1], b, tw[j], C * T, th[i], bw);
            kh = th[i] < sh ? th[i] : sh;
            const int kw = tw[j] < sw ? tw[j] : sw;
            for (int c = 0; c < C * T; c++)
                for (int y = 0; y < kh && y0 + y < H; y++)
                    for (int x = 0; x < kw && x0 + x < W; x++)
                        out[((size_t)c * H + y0 + y) * W + x0 + x] = b[((size_t)c * th[i] + y) * tw[j] + x];
            x0 += kw;
        }
        y0 += kh;
    }
    float *px = cvx_alloc_f32((size_t)3 * T * H * p * W * p);
    wan_vae_unpatchify(out, 3, T, H, W, p, px);
    for (size_t k = 0; k < (size_t)3 * T * H * p * W * p; k++) px[k] = px[k] < -1 ? -1 : px[k] > 1 ? 1 : px[k];
    for (int k = 0; k < rows * cols; k++) free(tiles[k]);
    free(tiles), free(th), free(tw), free(out);
    return px;
}

static void test_tiled(void **s) {
    (void)s;
    wan_vae *v = load_f32();
    const int F = 2, h = 7, w = 9, zc = v->cfg.z_dim, T = wan_vae_decoded_frames(v, F);
    const size_t n = (size_t)zc * F * h * w, nd = (size_t)3 * T * h * 16 * w * 16;
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
    print_message("  tiled vs upstream-order tiled reference: rel L2 = %.3g, %s\n", cvx_rel_l2(tiled, ref, nd),
                  memcmp(tiled, ref, sizeof(float) * nd) ? "bytes differ" : "bit-identical");
    assert_true(memcmp(tiled, ref, sizeof(float) * nd) == 0);
    float *plain = wv_decode_z(v, z, F, h, w, NULL, 1);
    const double d = cvx_rel_l2(tiled, plain, nd);
    print_message("  tiled vs untiled (the approximation tiling makes): rel L2 = %.3g\n", d);
    assert_true(d > 0 && d < 1.0);   /* 4×6-latent tiles of a random latent: a coarse approximation */
    wan_vae_tiling big;
    wan_vae_tiling_default(&big);
    assert_false(wan_vae_tiling_applies(v, h, w, &big));
    float *same = wv_decode_z(v, z, F, h, w, &big, 1);
    assert_true(memcmp(same, plain, sizeof(float) * nd) == 0);
    wan_vae_tiling bad = {.min_h = 56, .min_w = 96, .stride_h = 48, .stride_w = 64};   /* 56: not a multiple of 16 */
    assert_int_equal(wan_vae_tiling_check(v, &bad), -1);
    print_message("  error: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "multiple of the spatial ratio 16"));
    free(z), free(tiled), free(ref), free(plain), free(same);
    wan_vae_free(v);
}

static void test_sizes_errors(void **s) {
    (void)s;
    wan_vae *v = load_f32();
    int F, h, w;
    ASSERT_OK(wan_vae_encoded_shape(v, 121, 704, 1280, &F, &h, &w));   /* TI2V-5B's default video */
    assert_int_equal(F, 31), assert_int_equal(h, 44), assert_int_equal(w, 80);
    assert_int_equal(wan_vae_decoded_frames(v, 31), 121);
    assert_int_equal(wan_vae_encoded_shape(v, 5, 40, 64, &F, &h, &w), -1);   /* 40: not a multiple of 16 */
    print_message("  error: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "multiples of 16"));
    wan_vae_free(v);

    /* a config whose shortcut cannot divide its channels: one line naming the block */
    char dir[256], cfg[512], cmd[1400];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(cmd, sizeof cmd, "ln -s %s/%s/diffusion_pytorch_model.safetensors %s/", getenv("PWD") ? getenv("PWD") : ".",
             VAE_DIR, dir);
    assert_int_equal(system(cmd), 0);
    const char *bad = "{\"base_dim\": 8, \"decoder_base_dim\": 12, \"z_dim\": 48, \"dim_mult\": [1, 2, 2, 2], "
                      "\"num_res_blocks\": 1, \"is_residual\": true, \"patch_size\": 2, \"in_channels\": 12, "
                      "\"out_channels\": 12, \"latents_mean\": [" "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                      "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0], \"latents_std\": ["
                      "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1], "
                      "\"out_channels\": 3}";
    tu_write(cfg, bad, strlen(bad));
    assert_null(wan_vae_load(dir, NULL));
    print_message("  error: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "out_channels"));
    /* a Wan 2.1 config over the 2.2 weights: the first mismatching tensor, named */
    const char *v21 = "{\"base_dim\": 8, \"z_dim\": 16, \"dim_mult\": [1, 2, 2, 2], \"num_res_blocks\": 1}";
    tu_write(cfg, v21, strlen(v21));
    assert_null(wan_vae_load(dir, NULL));
    print_message("  error: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "expected"));
    tu_rmrf(dir);
}

/* ------------------------------------------------------------------ another configuration */

static cvx_generator g_w;

static void add_t(cvx_st_writer *w, const char *name, int ndim, const int64_t *shape, float scale) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *v = cvx_alloc_f32(n);
    cvx_randn(&g_w, v, n);
    for (size_t i = 0; i < n; i++) v[i] = scale > 0 ? v[i] * scale : 1.0f + 0.1f * v[i];   /* scale 0: a gamma */
    ASSERT_OK(cvx_stw_add_f32(w, name, CVX_F32, ndim, shape, v));
    free(v);
}

static void add_conv(cvx_st_writer *w, const char *name, int cout, int cin, int k, int is2d) {
    char b[256];
    snprintf(b, sizeof b, "%s.weight", name);
    const float sc = 1.0f / sqrtf((float)cin * k * k * (is2d ? 1 : k));
    if (is2d) add_t(w, b, 4, (int64_t[]){cout, cin, k, k}, sc);
    else add_t(w, b, 5, (int64_t[]){cout, cin, k, k, k}, sc);
    snprintf(b, sizeof b, "%s.bias", name);
    add_t(w, b, 1, (int64_t[]){cout}, 0.05f);
}

static void add_time_conv(cvx_st_writer *w, const char *name, int cout, int cin) {
    char b[256];
    snprintf(b, sizeof b, "%s.weight", name);
    add_t(w, b, 5, (int64_t[]){cout, cin, 3, 1, 1}, 1.0f / sqrtf(3.0f * cin));
    snprintf(b, sizeof b, "%s.bias", name);
    add_t(w, b, 1, (int64_t[]){cout}, 0.05f);
}

static void add_gamma(cvx_st_writer *w, const char *name, int C, int images) {
    char b[288];
    snprintf(b, sizeof b, "%s.gamma", name);
    if (images) add_t(w, b, 3, (int64_t[]){C, 1, 1}, 0);
    else add_t(w, b, 4, (int64_t[]){C, 1, 1, 1}, 0);
}

static void add_res(cvx_st_writer *w, const char *name, int cin, int cout) {
    char b[256];
    snprintf(b, sizeof b, "%s.norm1", name), add_gamma(w, b, cin, 0);
    snprintf(b, sizeof b, "%s.conv1", name), add_conv(w, b, cout, cin, 3, 0);
    snprintf(b, sizeof b, "%s.norm2", name), add_gamma(w, b, cout, 0);
    snprintf(b, sizeof b, "%s.conv2", name), add_conv(w, b, cout, cout, 3, 0);
    if (cin != cout) snprintf(b, sizeof b, "%s.conv_shortcut", name), add_conv(w, b, cout, cin, 1, 0);
}

static void add_mid(cvx_st_writer *w, const char *name, int C) {
    char b[256];
    for (int i = 0; i < 2; i++) snprintf(b, sizeof b, "%s.resnets.%d", name, i), add_res(w, b, C, C);
    snprintf(b, sizeof b, "%s.attentions.0.norm", name), add_gamma(w, b, C, 1);
    snprintf(b, sizeof b, "%s.attentions.0.to_qkv", name), add_conv(w, b, 3 * C, C, 1, 1);
    snprintf(b, sizeof b, "%s.attentions.0.proj", name), add_conv(w, b, C, C, 1, 1);
}

/* A random Wan 2.2 VAE (diffusers names) of base 6, decoder 10, z 8, dim_mult [1,2,4,2], 2 res blocks. */
static void write_vae(const char *dir) {
    const int base = 6, dbase = 10, z = 8, nrb = 2, mult[4] = {1, 2, 4, 2}, temporal[3] = {0, 1, 1};
    char path[512], b[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"_class_name\": \"AutoencoderKLWan\", \"base_dim\": 6, \"decoder_base_dim\": 10, \"z_dim\": 8, "
                      "\"dim_mult\": [1, 2, 4, 2], \"num_res_blocks\": 2, \"attn_scales\": [], \"temperal_downsample\": "
                      "[false, true, true], \"is_residual\": true, \"patch_size\": 2, \"in_channels\": 12, \"out_channels\": 12, "
                      "\"latents_mean\": [0, 0, 0, 0, 0, 0, 0, 0], \"latents_std\": [1, 1, 1, 1, 1, 1, 1, 1]}";
    tu_write(path, cfg, strlen(cfg));
    cvx_generator_seed(&g_w, 5);
    cvx_st_writer *w = cvx_stw_new();
    int dd[5] = {dbase * mult[3], dbase * mult[3], dbase * mult[2], dbase * mult[1], dbase * mult[0]};
    add_conv(w, "post_quant_conv", z, z, 1, 0);
    add_conv(w, "decoder.conv_in", dd[0], z, 3, 0);
    add_mid(w, "decoder.mid_block", dd[0]);
    for (int i = 0; i < 4; i++) {
        int in = dd[i], out = dd[i + 1];
        for (int j = 0; j <= nrb; j++, in = out) snprintf(b, sizeof b, "decoder.up_blocks.%d.resnets.%d", i, j), add_res(w, b, in, out);
        if (i == 3) continue;
        snprintf(b, sizeof b, "decoder.up_blocks.%d.upsampler.resample.1", i), add_conv(w, b, out, out, 3, 1);
        if (temporal[2 - i]) snprintf(b, sizeof b, "decoder.up_blocks.%d.upsampler.time_conv", i), add_time_conv(w, b, 2 * out, out);
    }
    add_gamma(w, "decoder.norm_out", dd[4], 0);
    add_conv(w, "decoder.conv_out", 12, dd[4], 3, 0);
    int ed[5] = {base, base * mult[0], base * mult[1], base * mult[2], base * mult[3]};
    add_conv(w, "encoder.conv_in", ed[0], 12, 3, 0);
    for (int i = 0; i < 4; i++) {
        int in = ed[i], out = ed[i + 1];
        for (int j = 0; j < nrb; j++, in = out) snprintf(b, sizeof b, "encoder.down_blocks.%d.resnets.%d", i, j), add_res(w, b, in, out);
        if (i == 3) continue;
        snprintf(b, sizeof b, "encoder.down_blocks.%d.downsampler.resample.1", i), add_conv(w, b, out, out, 3, 1);
        if (temporal[i]) snprintf(b, sizeof b, "encoder.down_blocks.%d.downsampler.time_conv", i), add_time_conv(w, b, out, out);
    }
    add_mid(w, "encoder.mid_block", ed[4]);
    add_gamma(w, "encoder.norm_out", ed[4], 0);
    add_conv(w, "encoder.conv_out", 2 * z, ed[4], 3, 0);
    add_conv(w, "quant_conv", 2 * z, 2 * z, 1, 0);
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);
}

/* Causality: the video of the first k latent frames is the first frames of the longer video's
 * (the caches carry everything), and the first latents of a longer video are the shorter one's. */
static void test_other_config(void **s) {
    (void)s;
    char dir[256];
    tu_mkdtemp(dir, sizeof dir);
    write_vae(dir);
    wan_vae *v = wan_vae_load(dir, NULL);
    ASSERT_NONNULL(v);
    v->ctx->precision = CVX_PRECISION_F32;
    assert_int_equal(v->spatial_ratio, 16);
    assert_int_equal(v->up[1].sc_ft, 2), assert_int_equal(v->up[2].sc_ft, 1), assert_int_equal(v->up[3].sc_ft, 0);
    assert_int_equal(v->down[3].sc_in, 24), assert_int_equal(v->down[3].sc_out, 12);   /* AvgDown3D groups of 2 */
    const int F = 3, h = 2, w = 3, zc = v->cfg.z_dim;
    float *z = cvx_alloc_f32((size_t)zc * F * h * w), *z2 = cvx_alloc_f32((size_t)zc * 2 * h * w);
    cvx_generator g;
    cvx_generator_seed(&g, 9);
    cvx_randn(&g, z, (size_t)zc * F * h * w);
    for (int c = 0; c < zc; c++) memcpy(z2 + (size_t)c * 2 * h * w, z + (size_t)c * F * h * w, sizeof(float) * 2 * h * w);
    float *long_v = wv_decode_z(v, z, F, h, w, NULL, 0), *short_v = wv_decode_z(v, z2, 2, h, w, NULL, 0);
    const int T = wan_vae_decoded_frames(v, F), T2 = wan_vae_decoded_frames(v, 2), H = h * 16, W = w * 16;
    assert_int_equal(T, 9);
    double sum = 0;
    for (int c = 0; c < 3; c++) {
        assert_memory_equal(short_v + (size_t)c * T2 * H * W, long_v + (size_t)c * T * H * W, sizeof(float) * T2 * H * W);
        for (size_t i = 0; i < (size_t)T * H * W; i++) sum += fabs(long_v[(size_t)c * T * H * W + i]);
    }
    print_message("  decode [8,3,2,3] -> [3,9,32,48]: mean |x| %.3g, the first 5 frames = decoding 2 latent frames\n",
                  sum / (3.0 * T * H * W));
    assert_true(isfinite(sum) && sum > 0);
    /* encode 9 frames and 5 frames of the decoded video */
    int Fe, he, we;
    ASSERT_OK(wan_vae_encoded_shape(v, T, H, W, &Fe, &he, &we));
    assert_true(Fe == 3 && he == h && we == w);
    const size_t n9 = (size_t)zc * 3 * h * w, n5 = (size_t)zc * 2 * h * w;
    float *m9 = cvx_alloc_f32(n9), *l9 = cvx_alloc_f32(n9), *m5 = cvx_alloc_f32(n5), *l5 = cvx_alloc_f32(n5);
    for (size_t i = 0; i < (size_t)3 * T * H * W; i++) long_v[i] = long_v[i] < -1 ? -1 : long_v[i] > 1 ? 1 : long_v[i];
    ASSERT_OK(wan_vae_encode(v, long_v, T, H, W, m9, l9, NULL));
    float *v5 = cvx_alloc_f32((size_t)3 * T2 * H * W);
    for (int c = 0; c < 3; c++) memcpy(v5 + (size_t)c * T2 * H * W, long_v + (size_t)c * T * H * W, sizeof(float) * T2 * H * W);
    ASSERT_OK(wan_vae_encode(v, v5, T2, H, W, m5, l5, NULL));
    for (int c = 0; c < zc; c++) {
        assert_memory_equal(m5 + (size_t)c * 2 * h * w, m9 + (size_t)c * 3 * h * w, sizeof(float) * 2 * h * w);
        assert_memory_equal(l5 + (size_t)c * 2 * h * w, l9 + (size_t)c * 3 * h * w, sizeof(float) * 2 * h * w);
    }
    for (size_t i = 0; i < n9; i++) assert_true(isfinite(m9[i]) && isfinite(l9[i]));
    free(z), free(z2), free(long_v), free(short_v), free(m9), free(l9), free(m5), free(l5), free(v5);
    wan_vae_free(v);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_golden), cmocka_unit_test(test_encode_golden), cmocka_unit_test(test_shortcuts),
        cmocka_unit_test(test_tiled),         cmocka_unit_test(test_sizes_errors),  cmocka_unit_test(test_other_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
