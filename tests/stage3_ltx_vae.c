/* AutoencoderKLLTXVideo (stage3/ltx_vae.c) against golden_ltx (f32, rel L2 ≤ 1e-5):
 *   - vae090_decode_encode: the 0.9.0 decoder on 1 and 2 latent frames; the encoder's moments
 *     (mean, logvar) of 1 and 9 frames, the latent_dist sample of Generator(7);
 *   - vae095_decode_encode: the timestep-conditioned decoder at two (decode_timestep,
 *     decode_noise_scale) pairs, from the decoder input (1 − s)·z + s·noise; its encoder
 *     (space-to-depth down-samplers);
 *   - bad configs give one error naming the key;
 *   - every decode and encode gives back each feature map it took from the context's pool. */
#include "golden_harness.h"

#include "fileio.h"
#include "latent_dist.h"
#include "stage3/ltx_vae.h"

#define LTX_DATA "tests/data/golden_ltx/"
#define TOL 1e-5

static void decode_cases(const char *name) {
    gh_case c;
    char p[256];
    snprintf(p, sizeof p, LTX_DATA "%s", name);
    gh_open(&c, p);
    cvx_ctx *ctx = cvx_ctx_new(0);   /* ours: its feature-map pool must balance after every call */
    ltx_vae *v = ltx_vae_load(gh_path(&c, "model/vae"), ctx);
    if (!v) fail_msg("%s", cvx_last_error());
    json_object *cases = gh_json(&c, "decode_cases");
    for (size_t i = 0; i < gh_len(cases); i++) {
        json_object *dc = gh_at(cases, i);
        const char *cname = gh_str(gh_get(dc, "name"));
        int F = (int)gh_int(gh_get(dc, "F")), H = (int)gh_int(gh_get(dc, "H")), W = (int)gh_int(gh_get(dc, "W"));
        const char *key = gh_str(gh_get(dc, "key"));
        json_object *jt = gh_get(dc, "decode_timestep");
        float t = jt ? (float)gh_num(jt) : 0.0f;
        size_t nz, nv = (size_t)3 * (8 * (F - 1) + 1) * 32 * H * 32 * W;
        float *z = gh_f32(&c, &nz, "%s.z", cname), *in = z;
        if (ltx_vae_get_config(v)->timestep_conditioning) {
            json_object *js = gh_get(dc, "decode_noise_scale");
            float s = js ? (float)gh_num(js) : t;
            float *noise = gh_f32(&c, NULL, "%s.decode_noise", key);
            in = malloc(sizeof(float) * nz);
            ltx_vae_decode_input(z, noise, nz, s, in);
            char what[96];
            snprintf(what, sizeof what, "%s.decoder_input", key);
            float *want = gh_f32(&c, NULL, "%s", what);
            gh_check_rel_l2(&c, what, in, want, nz, TOL);
            free(want);
            free(noise);
        }
        float *video = malloc(sizeof(float) * nv), *want = gh_f32(&c, NULL, "%s.decoded", key);
        ASSERT_OK(ltx_vae_decode(v, in, F, H, W, t, video));
        assert_int_equal(cvx_pool_in_use(&ctx->maps), 0);
        char what[96];
        snprintf(what, sizeof what, "%s.decoded", key);
        gh_check_rel_l2(&c, what, video, want, nv, TOL);
        free(video);
        free(want);
        if (in != z) free(in);
        free(z);
    }
    ltx_vae_free(v);
    cvx_ctx_free(ctx);
    gh_close(&c);
}

static void encode_cases(const char *name) {
    gh_case c;
    char p[256];
    snprintf(p, sizeof p, LTX_DATA "%s", name);
    gh_open(&c, p);
    cvx_ctx *ctx = cvx_ctx_new(0);   /* ours: its feature-map pool must balance after every call */
    ltx_vae *v = ltx_vae_load(gh_path(&c, "model/vae"), ctx);
    if (!v) fail_msg("%s", cvx_last_error());
    int lc = ltx_vae_get_config(v)->latent_channels;
    json_object *cases = gh_json(&c, "encode_cases");
    for (size_t i = 0; i < gh_len(cases); i++) {
        const char *cn = gh_str(gh_get(gh_at(cases, i), "name"));
        const cvx_tensor *px = gh_tensor(&c, "%s.pixels", cn), *eo = gh_tensor(&c, "%s.encoder_out", cn);
        int T = (int)px->shape[2], H = (int)px->shape[3], W = (int)px->shape[4];
        size_t S = (size_t)eo->shape[2] * eo->shape[3] * eo->shape[4], n = (size_t)lc * S;
        float *pix = cvx_tensor_f32_dup(px), *mom = malloc(sizeof(float) * 2 * n);
        ASSERT_OK(ltx_vae_encode(v, pix, T, H, W, mom));
        assert_int_equal(cvx_pool_in_use(&ctx->maps), 0);
        char what[96];
        float *want = cvx_tensor_f32_dup(eo);
        snprintf(what, sizeof what, "%s.encoder_out", cn);
        gh_check_rel_l2(&c, what, mom, want, 2 * n, TOL);
        free(want);
        float *mean = malloc(sizeof(float) * n), *logvar = malloc(sizeof(float) * n), *std = malloc(sizeof(float) * n);
        vae_latent_dist(mom, lc, S, mean, logvar, std);
        static const char *const parts[3] = {"mean", "logvar", "std"};
        float *got[3] = {mean, logvar, std};
        for (int k = 0; k < 3; k++) {
            snprintf(what, sizeof what, "%s.%s", cn, parts[k]);
            want = gh_f32(&c, NULL, "%s", what);
            gh_check_rel_l2(&c, what, got[k], want, n, TOL);
            free(want);
        }
        cvx_generator g;
        cvx_generator_seed(&g, 7);
        vae_latent_sample(mean, std, n, &g, mean);
        snprintf(what, sizeof what, "%s.sample_seed7", cn);
        want = gh_f32(&c, NULL, "%s", what);
        gh_check_rel_l2(&c, what, mean, want, n, TOL);
        free(want);
        free(pix); free(mom); free(mean); free(logvar); free(std);
    }
    /* bad sizes: one clear error */
    float dummy[1];
    assert_int_equal(ltx_vae_encode(v, dummy, 8, 64, 64, dummy), -1);
    assert_non_null(strstr(cvx_last_error(), "8k + 1"));
    ltx_vae_free(v);
    cvx_ctx_free(ctx);
    gh_close(&c);
}

static void test_encode_090(void **state) { (void)state; encode_cases("vae090_decode_encode"); }
static void test_encode_095(void **state) { (void)state; encode_cases("vae095_decode_encode"); }

/* config.json of src with the first `old` after `key` replaced by `rep`, written to dst. */
static void edit_config(const char *src, const char *dst, const char *key, const char *old, const char *rep) {
    size_t n;
    char *text = cvx_read_file(src, &n);
    ASSERT_NONNULL(text);
    char *k = strstr(text, key), *o = k ? strstr(k, old) : NULL;
    ASSERT_NONNULL(o);
    FILE *f = fopen(dst, "w");
    ASSERT_NONNULL(f);
    fprintf(f, "%.*s%s%s", (int)(o - text), text, rep, o + strlen(old));
    fclose(f);
    free(text);
}

/* Unsupported configs name the key; a missing tensor names it. */
static void test_bad_checkpoints(void **state) {
    (void)state;
    char dir[256], sub[300], cmd[2048], cfg[400], src[400];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/vae", dir);
    snprintf(cmd, sizeof cmd, "cp -r " LTX_DATA "vae095_decode_encode/model/vae %s && chmod -R u+w %s", sub, sub);
    tu_run_ok(cmd);
    snprintf(cfg, sizeof cfg, "%s/config.json", sub);
    snprintf(src, sizeof src, LTX_DATA "vae095_decode_encode/model/vae/config.json");
    static const char *const edits[][3] = {
        {"\"decoder_inject_noise\"", "false", "true "},
        {"\"down_block_types\"", "LTXVideo095DownBlock3D", "LTXVideoFooBlock"},
        {"\"upsample_factor\"", "2", "0"},
        {"\"patch_size_t\"", "1", "2"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        edit_config(src, cfg, edits[i][0], edits[i][1], edits[i][2]);
        assert_null(ltx_vae_load(sub, NULL));
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)strlen(edits[i][0]) - 2, edits[i][0] + 1);
        if (!strstr(cvx_last_error(), key)) fail_msg("edit %zu: %s", i, cvx_last_error());
    }
    /* a dropped tensor */
    edit_config(src, cfg, "\"_class_name\"", "AutoencoderKLLTXVideo", "AutoencoderKLLTXVideo");
    char wts[400], orig[400];
    snprintf(wts, sizeof wts, "%s/diffusion_pytorch_model.safetensors", sub);
    snprintf(orig, sizeof orig, "%s/orig.safetensors", dir);
    rename(wts, orig);
    tu_st_copy_edit(orig, wts, "decoder.up_blocks.1.resnets.0.scale_shift_table", NULL, CVX_F32, 0, NULL, NULL);
    assert_null(ltx_vae_load(sub, NULL));
    assert_non_null(strstr(cvx_last_error(), "decoder.up_blocks.1.resnets.0.scale_shift_table"));
    tu_rmrf(dir);
}

/* decoder.timestep_scale_multiplier as diffusers saves it (a 0-d parameter) gives the bytes of
 * the [1] form the goldens carry. */
static void test_scalar_multiplier(void **state) {
    (void)state;
    char dir[256], sub[300], cmd[2048], wts[400], orig[400];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/vae", dir);
    snprintf(cmd, sizeof cmd, "cp -r " LTX_DATA "vae095_decode_encode/model/vae %s && chmod -R u+w %s", sub, sub);
    tu_run_ok(cmd);
    snprintf(wts, sizeof wts, "%s/diffusion_pytorch_model.safetensors", sub);
    snprintf(orig, sizeof orig, "%s/orig.safetensors", dir);
    rename(wts, orig);
    ltx_vae *a = ltx_vae_load(LTX_DATA "vae095_decode_encode/model/vae", NULL);
    ASSERT_NONNULL(a);
    cvx_safetensors *st = tu_open(orig);
    const cvx_tensor *m = cvx_st_find(st, "decoder.timestep_scale_multiplier");
    ASSERT_NONNULL(m);
    assert_int_equal(m->ndim, 1);
    float *val = cvx_tensor_f32_dup(m);
    assert_true(val[0] != 1.0f);   /* the decode below sees it */
    tu_st_copy_edit(orig, wts, "decoder.timestep_scale_multiplier", "decoder.timestep_scale_multiplier", CVX_F32, 0,
                    NULL, val);
    cvx_st_close(st);
    ltx_vae *b = ltx_vae_load(sub, NULL);
    if (!b) fail_msg("%s", cvx_last_error());
    const int lc = ltx_vae_get_config(a)->latent_channels, F = 2, H = 2, W = 2;
    size_t nz = (size_t)lc * F * H * W, nv = (size_t)3 * (8 * (F - 1) + 1) * 32 * H * 32 * W;
    float *z = malloc(sizeof(float) * nz), *va = malloc(sizeof(float) * nv), *vb = malloc(sizeof(float) * nv);
    for (size_t i = 0; i < nz; i++) z[i] = (float)((i * 37 % 19) - 9) / 9.0f;
    ASSERT_OK(ltx_vae_decode(a, z, F, H, W, 0.05f, va));
    ASSERT_OK(ltx_vae_decode(b, z, F, H, W, 0.05f, vb));
    assert_memory_equal(va, vb, sizeof(float) * nv);
    /* neither [] nor [1]: one line naming the tensor */
    float two[2] = {val[0], val[0]};
    tu_st_copy_edit(orig, wts, "decoder.timestep_scale_multiplier", "decoder.timestep_scale_multiplier", CVX_F32, 1,
                    (const int64_t[]){2}, two);
    assert_null(ltx_vae_load(sub, NULL));
    assert_non_null(strstr(cvx_last_error(), "decoder.timestep_scale_multiplier"));
    ltx_vae_free(a), ltx_vae_free(b);
    free(z), free(va), free(vb), free(val);
    tu_rmrf(dir);
}

static void test_decode_090(void **state) { (void)state; decode_cases("vae090_decode_encode"); }
static void test_decode_095(void **state) { (void)state; decode_cases("vae095_decode_encode"); }

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_090),
        cmocka_unit_test(test_decode_095),
        cmocka_unit_test(test_scalar_multiplier),
        cmocka_unit_test(test_encode_090),
        cmocka_unit_test(test_encode_095),
        cmocka_unit_test(test_bad_checkpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
