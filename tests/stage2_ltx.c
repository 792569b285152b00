/* LTXVideoTransformer3DModel (stage2/ltx.c) against the LTX golden cases (tests/data/golden_ltx/,
 * copied from shared/golden_ltx: transformer_2b and transformer_13b, tiny widths with inner % 6 ≠ 0):
 *   - the rope_interpolation_scale path: output, the rotary tables, proj_in, the time embedding,
 *     the caption projection, each block's attention outputs and output, norm_out (f32, rel L2 ≤ 1e-5);
 *   - the video_coords path (its rotary tables and output) and per-token timesteps [B, S];
 *   - chunked rows give the same output; bf16 runs close to it (rel L2 < 3e-2);
 *   - bad inputs and configs give one clear error. */
#include "golden_harness.h"

#include "fileio.h"
#include "stage2/ltx.h"

#define LTX_DATA "tests/data/golden_ltx/"
#define TOL 1e-5

typedef struct {
    gh_case c;
    ltx_transformer *m;
    float *x, *text, *mask, *t, *coords;
    int B, S, L, F, H, W, D, Cout;
} ltx_case;

static void lc_open(ltx_case *k, const char *name) {
    char p[256];
    memset(k, 0, sizeof *k);
    snprintf(p, sizeof p, LTX_DATA "%s", name);
    gh_open(&k->c, p);
    k->m = ltx_load(gh_path(&k->c, "model/transformer"), NULL);
    if (!k->m) fail_msg("%s", cvx_last_error());
    const cvx_tensor *hs = gh_tensor(&k->c, "hidden_states"), *eh = gh_tensor(&k->c, "encoder_hidden_states");
    const cvx_tensor *am = gh_tensor(&k->c, "encoder_attention_mask");
    k->B = (int)hs->shape[0], k->S = (int)hs->shape[1], k->L = (int)eh->shape[1];
    k->F = (int)gh_int(gh_json(&k->c, "F")), k->H = (int)gh_int(gh_json(&k->c, "H"));
    k->W = (int)gh_int(gh_json(&k->c, "W"));
    assert_int_equal(k->S, k->F * k->H * k->W);
    const ltx_config *c = ltx_get_config(k->m);
    k->D = c->num_attention_heads * c->attention_head_dim, k->Cout = c->out_channels;
    k->x = cvx_tensor_f32_dup(hs);
    k->text = cvx_tensor_f32_dup(eh);
    k->mask = malloc(sizeof(float) * (size_t)k->B * k->L);
    for (size_t i = 0; i < (size_t)k->B * k->L; i++) k->mask[i] = (float)gh_i64_at(am, i);
    k->t = gh_f32(&k->c, NULL, "timestep");
    /* rope_interpolation_scale = (8 / frame_rate, 32, 32), as the pipelines pass it */
    json_object *rs = gh_json(&k->c, "rope_interpolation_scale");
    float scale[3];
    for (int i = 0; i < 3; i++) scale[i] = (float)gh_num(gh_at(rs, (size_t)i));
    assert_true(scale[0] == (float)(8.0 / gh_num(gh_json(&k->c, "frame_rate"))));
    k->coords = malloc(sizeof(float) * (size_t)k->B * 3 * k->S);
    for (int b = 0; b < k->B; b++) ltx_rope_coords_grid(k->F, k->H, k->W, scale, k->coords + (size_t)b * 3 * k->S);
}

static void lc_close(ltx_case *k) {
    ltx_free(k->m);
    free(k->x); free(k->text); free(k->mask); free(k->t); free(k->coords);
    gh_close(&k->c);
}

/* The probe compares each intermediate with inter.<name>. */
static void check_probe(void *user, const char *name, const float *x, size_t n) {
    gh_case *c = user;
    float *want = gh_f32(c, NULL, "inter.%s", name);
    char what[96];
    snprintf(what, sizeof what, "inter.%s", name);
    gh_check_rel_l2(c, what, x, want, n, TOL);
    free(want);
}

static void run_case(const char *name) {
    ltx_case k;
    lc_open(&k, name);
    size_t n_out = (size_t)k.B * k.S * k.Cout;
    float *out = malloc(sizeof(float) * n_out), *want;

    /* (1) LTXPipeline: timestep [B], rope_interpolation_scale; every intermediate */
    ltx_set_probe(k.m, check_probe, &k.c);
    assert_int_equal(ltx_forward(k.m, k.x, k.B, k.S, k.text, k.mask, k.L, k.t, 1, k.coords, out), 0);
    ltx_set_probe(k.m, NULL, NULL);
    want = gh_f32(&k.c, NULL, "output");
    gh_check_rel_l2(&k.c, "output", out, want, n_out, TOL);

    /* chunked rows: the same bits */
    float *out2 = malloc(sizeof(float) * n_out);
    ltx_set_chunking(k.m, 5);
    assert_int_equal(ltx_forward(k.m, k.x, k.B, k.S, k.text, k.mask, k.L, k.t, 1, k.coords, out2), 0);
    ltx_set_chunking(k.m, 0);
    assert_memory_equal(out, out2, sizeof(float) * n_out);
    free(want);

    /* (2) LTXConditionPipeline: video_coords [B, 3, S], timestep [B, 1] */
    float *vc = gh_f32(&k.c, NULL, "video_coords");
    float *coords = malloc(sizeof(float) * (size_t)k.B * 3 * k.S);
    for (int b = 0; b < k.B; b++) ltx_rope_coords_video(vc + (size_t)b * 3 * k.S, k.S, coords + (size_t)b * 3 * k.S);
    float *cs = malloc(sizeof(float) * (size_t)k.B * k.S * k.D), *sn = malloc(sizeof(float) * (size_t)k.B * k.S * k.D);
    for (int b = 0; b < k.B; b++)
        ltx_rope_tables(k.D, coords + (size_t)b * 3 * k.S, k.S, cs + (size_t)b * k.S * k.D, sn + (size_t)b * k.S * k.D);
    want = gh_f32(&k.c, NULL, "rope_video_coords.cos");
    gh_check_rel_l2(&k.c, "rope_video_coords.cos", cs, want, (size_t)k.B * k.S * k.D, TOL);
    free(want);
    want = gh_f32(&k.c, NULL, "rope_video_coords.sin");
    gh_check_rel_l2(&k.c, "rope_video_coords.sin", sn, want, (size_t)k.B * k.S * k.D, TOL);
    free(want);
    assert_int_equal(ltx_forward(k.m, k.x, k.B, k.S, k.text, k.mask, k.L, k.t, 1, coords, out), 0);
    want = gh_f32(&k.c, NULL, "output_video_coords");
    gh_check_rel_l2(&k.c, "output_video_coords", out, want, n_out, TOL);
    free(want);

    /* (3) per-token timesteps [B, S] */
    size_t nt;
    float *pt = gh_f32(&k.c, &nt, "per_token_timestep");
    assert_int_equal(nt, (size_t)k.B * k.S);
    assert_int_equal(ltx_forward(k.m, k.x, k.B, k.S, k.text, k.mask, k.L, pt, k.S, coords, out), 0);
    want = gh_f32(&k.c, NULL, "output_per_token_t");
    gh_check_rel_l2(&k.c, "output_per_token_t", out, want, n_out, TOL);
    free(want);

    /* bad inputs: one clear error */
    assert_int_equal(ltx_forward(k.m, k.x, k.B, k.S, k.text, k.mask, k.L, pt, 2, coords, out), -1);
    assert_non_null(strstr(cvx_last_error(), "timestep"));
    k.mask[3] = 0.5f;
    assert_int_equal(ltx_forward(k.m, k.x, k.B, k.S, k.text, k.mask, k.L, k.t, 1, coords, out), -1);
    assert_non_null(strstr(cvx_last_error(), "encoder_attention_mask[3]"));

    free(pt); free(vc); free(coords); free(cs); free(sn); free(out); free(out2);
    lc_close(&k);
}

static void test_golden_2b(void **state) { (void)state; run_case("transformer_2b"); }
static void test_golden_13b(void **state) { (void)state; run_case("transformer_13b"); }

/* bf16 operands in the linears and attention: runs, stays close to the f32 golden. */
static void test_bf16(void **state) {
    (void)state;
    static const char *const cases[] = {"transformer_2b", "transformer_13b"};
    for (int i = 0; i < 2; i++) {
        ltx_case k;
        lc_open(&k, cases[i]);
        ASSERT_OK(cvx_ctx_set_precision(ltx_ctx(k.m), CVX_PRECISION_BF16));
        size_t n = (size_t)k.B * k.S * k.Cout;
        float *out = malloc(sizeof(float) * n), *want = gh_f32(&k.c, NULL, "output");
        ASSERT_OK(ltx_forward(k.m, k.x, k.B, k.S, k.text, k.mask, k.L, k.t, 1, k.coords, out));
        double e = cvx_rel_l2(out, want, n);
        print_message("  %s bf16 vs f32 golden output rel L2 = %.3g (bound 3e-2)\n", cases[i], e);
        assert_true(e < 3e-2 && e > 0);
        free(out);
        free(want);
        lc_close(&k);
    }
}

/* Bad configs: a missing weight and unsupported keys name the file and key. */
static void test_bad_checkpoints(void **state) {
    (void)state;
    char dir[256], sub[300], cmd[2048];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/transformer", dir);
    snprintf(cmd, sizeof cmd, "cp -r " LTX_DATA "transformer_2b/model/transformer %s && chmod -R u+w %s", sub, sub);
    tu_run_ok(cmd);
    char cfg[400], wts[400];
    snprintf(cfg, sizeof cfg, "%s/config.json", sub);
    snprintf(wts, sizeof wts, "%s/diffusion_pytorch_model.safetensors", sub);
    /* a dropped tensor */
    char src[400];
    snprintf(src, sizeof src, "%s/orig.safetensors", dir);
    rename(wts, src);
    tu_st_copy_edit(src, wts, "transformer_blocks.1.attn2.norm_k.weight", NULL, CVX_F32, 0, NULL, NULL);
    assert_null(ltx_load(sub, NULL));
    assert_non_null(strstr(cvx_last_error(), "transformer_blocks.1.attn2.norm_k.weight"));
    rename(src, wts);
    /* unsupported config keys */
    static const char *const edits[][2] = {
        {"\"qk_norm\": \"rms_norm_across_heads\"", "\"qk_norm\": \"rms_norm\""},
        {"\"patch_size\": 1", "\"patch_size\": 2"},
        {"\"norm_elementwise_affine\": false", "\"norm_elementwise_affine\": true"},
        {"\"cross_attention_dim\": 32", "\"cross_attention_dim\": 48"},
    };
    static const char *const keys[] = {"qk_norm", "patch_size", "norm_elementwise_affine", "cross_attention_dim"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        snprintf(cmd, sizeof cmd, "cp " LTX_DATA "transformer_2b/model/transformer/config.json %s && chmod u+w %s && "
                 "sed -i 's/%s/%s/' %s", cfg, cfg, edits[i][0], edits[i][1], cfg);
        tu_run_ok(cmd);
        assert_null(ltx_load(sub, NULL));
        assert_non_null(strstr(cvx_last_error(), keys[i]));
        assert_non_null(strstr(cvx_last_error(), "config.json"));
    }
    tu_rmrf(dir);
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_2b),
        cmocka_unit_test(test_golden_13b),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_bad_checkpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
