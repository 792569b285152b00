/* Wan 2.2 transformers (stage2/wan.c, diffusers 0.35.2 WanTransformer3DModel) against
 * tests/data/golden_wan22 (copied from shared/golden_wan22):
 *   - transformer_ti2v (TI2V-5B style, in/out 48): per-token timesteps [B, S] of the I2V form
 *     (latent frame 0 at 0) and the T2V form (all t), with the per-token embeddings, patch
 *     embedding and every block's output; scalar timesteps; all tokens equal = the scalar path;
 *   - transformer_a14b: both experts (transformer = high noise, transformer_2 = low noise) with
 *     their intermediates;
 *   - e2e_a14b_i2v_dit (e2e_a14b_i2v's experts, in_channels 36, no CLIP branch, with the tensors
 *     of its steps 0 (high noise) and 2 (low noise)): cond / uncond predictions of
 *     cat([latents, condition]);
 *   - bad per-token timesteps: one error line. */
#include "golden_harness.h"

#include "stage2/positional.h"
#include "stage2/wan.h"

#define DATA "tests/data/golden_wan22/"
#define TOL 1e-5

typedef struct {
    gh_case c;
    wan_transformer *m;
    float *x, *text;
    int B, F, H, W, L, D, S;
    size_t n_out;
} w22_case;

static void case_open(w22_case *w, const char *dir, const char *model) {
    memset(w, 0, sizeof *w);
    gh_open(&w->c, dir);
    w->m = wan_load(gh_path(&w->c, model), NULL);
    ASSERT_NONNULL(w->m);
    wan_ctx(w->m)->precision = CVX_PRECISION_F32;
    const wan_config *c = wan_get_config(w->m);
    const cvx_tensor *hs = gh_tensor_opt(&w->c, "hidden_states"), *eh = gh_tensor_opt(&w->c, "encoder_hidden_states");
    w->D = c->num_attention_heads * c->attention_head_dim;
    if (!hs) return;   /* e2e_a14b_i2v_dit builds its inputs */
    w->B = (int)hs->shape[0], w->F = (int)hs->shape[2], w->H = (int)hs->shape[3], w->W = (int)hs->shape[4];
    w->L = (int)eh->shape[1];
    w->S = wan_num_tokens(c, w->F, w->H, w->W);
    w->x = cvx_tensor_f32_dup(hs);
    w->text = cvx_tensor_f32_dup(eh);
    w->n_out = (size_t)w->B * c->out_channels * w->F * w->H * w->W;
}

static void case_close(w22_case *w) {
    wan_free(w->m);
    free(w->x), free(w->text);
    gh_close(&w->c);
}

/* [B, D, S] (Conv3d output) -> [B, S, D] */
static float *bds_to_bsd(const float *a, int B, int D, int S) {
    float *o = cvx_alloc_f32((size_t)B * S * D);
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++)
            for (int d = 0; d < D; d++) o[((size_t)b * S + s) * D + d] = a[((size_t)b * D + d) * S + s];
    return o;
}

/* The three pieces with the intermediates `prefix`.inter.* between them; ts per token or not. */
static void check_pieces(w22_case *w, const char *prefix, const float *ts, int per_token, const char *out_key) {
    const wan_config *c = wan_get_config(w->m);
    const int B = w->B, S = w->S, D = w->D;
    char key[128];
    wan_fwd f;
    if (per_token) ASSERT_OK(wan_forward_embed_per_token(w->m, w->x, B, w->F, w->H, w->W, w->text, w->L, NULL, 0, ts, &f));
    else ASSERT_OK(wan_forward_embed(w->m, w->x, B, w->F, w->H, w->W, w->text, w->L, NULL, 0, ts, &f));
    /* temb / timestep_proj: per token [B, S, ·] from the distinct rows, or per element [B, ·] */
    const size_t rows = per_token ? (size_t)B * S : (size_t)B;
    if (per_token) {
        print_message("  %s: %d distinct timesteps over %d tokens\n", prefix, f.U, B * S);
        assert_non_null(f.t_row);
    } else {
        assert_null(f.t_row);
        assert_int_equal(f.U, B);
    }
    for (int k = 0; k < 2; k++) {
        const size_t wd = (size_t)(k ? 6 : 1) * D;
        const float *src = k ? f.tproj : f.temb;
        float *got = cvx_alloc_f32(rows * wd);
        for (size_t r = 0; r < rows; r++) memcpy(got + r * wd, src + (per_token ? (size_t)f.t_row[r] : r) * wd, sizeof(float) * wd);
        snprintf(key, sizeof key, "%s.inter.condition_embedder.%d", prefix, k);
        float *want = gh_f32(&w->c, NULL, "%s", key);
        gh_check_rel_l2(&w->c, key, got, want, rows * wd, TOL);
        free(got), free(want);
    }
    snprintf(key, sizeof key, "%s.inter.condition_embedder.2", prefix);
    float *want = gh_f32(&w->c, NULL, "%s", key);
    gh_check_rel_l2(&w->c, key, f.ctx_txt, want, (size_t)B * w->L * D, TOL);
    free(want);
    snprintf(key, sizeof key, "%s.inter.patch_embedding", prefix);
    want = gh_f32(&w->c, NULL, "%s", key);
    float *pe = bds_to_bsd(want, B, D, S);
    gh_check_rel_l2(&w->c, key, f.h, pe, (size_t)B * S * D, TOL);
    free(pe), free(want);
    for (int i = 0; i < c->num_layers; i++) {
        wan_forward_blocks(w->m, &f, i, 1);
        snprintf(key, sizeof key, "%s.inter.blocks.%d", prefix, i);
        want = gh_f32(&w->c, NULL, "%s", key);
        gh_check_rel_l2(&w->c, key, f.h, want, (size_t)B * S * D, TOL);
        free(want);
    }
    float *out = cvx_alloc_f32(w->n_out);
    wan_forward_finalize(w->m, &f, out);
    want = gh_f32(&w->c, NULL, "%s", out_key);
    snprintf(key, sizeof key, "%s (three pieces)", out_key);
    gh_check_rel_l2(&w->c, key, out, want, w->n_out, TOL);
    free(out), free(want);
}

static float *forward(w22_case *w, const float *ts, int per_token) {
    float *out = cvx_alloc_f32(w->n_out);
    if (per_token) ASSERT_OK(wan_forward_per_token(w->m, w->x, w->B, w->F, w->H, w->W, w->text, w->L, NULL, 0, ts, out));
    else ASSERT_OK(wan_forward(w->m, w->x, w->B, w->F, w->H, w->W, w->text, w->L, NULL, 0, ts, out));
    return out;
}

/* ------------------------------------------------------------------ TI2V */

static void test_ti2v(void **s) {
    (void)s;
    w22_case w;
    case_open(&w, DATA "transformer_ti2v", "model/transformer");
    const int B = w.B, S = w.S;
    assert_int_equal(B * S, (int)gh_tensor(&w.c, "timestep_i2v")->numel);
    float *ts_i2v = gh_f32(&w.c, NULL, "timestep_i2v"), *ts_t2v = gh_f32(&w.c, NULL, "timestep_t2v");
    /* the I2V form: latent frame 0's tokens at 0 (S / F tokens per frame), the rest at t[b] */
    const int per_frame = S / w.F;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < S; i++) {
            const float want = i < per_frame ? 0.0f : ts_t2v[(size_t)b * S + i];
            assert_true(ts_i2v[(size_t)b * S + i] == want);
        }
    check_pieces(&w, "i2v", ts_i2v, 1, "output_i2v");

    struct { const char *key; const float *ts; int per_token; } runs[] = {
        {"output_i2v", ts_i2v, 1}, {"output_t2v", ts_t2v, 1}, {"output_scalar", NULL, 0}};
    float t_scalar[2], t_first[2];
    const cvx_tensor *tsc = gh_tensor(&w.c, "timestep_scalar");
    for (int b = 0; b < B; b++) t_scalar[b] = (float)gh_i64_at(tsc, (size_t)b), t_first[b] = t_scalar[0];
    runs[2].ts = t_scalar;
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        float *out = forward(&w, runs[k].ts, runs[k].per_token), *want = gh_f32(&w.c, NULL, "%s", runs[k].key);
        gh_check_rel_l2(&w.c, runs[k].key, out, want, w.n_out, TOL);
        free(out), free(want);
    }
    /* all tokens at t[0] (the T2V form's sample 0 value for both samples) = the scalar path at t[0] */
    float *ts_same = cvx_alloc_f32((size_t)B * S);
    for (size_t i = 0; i < (size_t)B * S; i++) ts_same[i] = t_first[0];
    float *pt = forward(&w, ts_same, 1), *sc = forward(&w, t_first, 0), *want = gh_f32(&w.c, NULL, "output_scalar_t0");
    gh_check_rel_l2(&w.c, "output_scalar_t0 (scalar path)", sc, want, w.n_out, TOL);
    const double d = cvx_rel_l2(pt, sc, w.n_out);
    print_message("  per-token (all t[0]) vs scalar t[0]: rel L2 = %.3g (%s)\n", d,
                  memcmp(pt, sc, sizeof(float) * w.n_out) ? "bytes differ" : "bit-identical");
    assert_true(d <= 5e-7);
    free(pt), free(sc), free(want), free(ts_same);

    /* bad per-token timesteps: one line naming the token */
    ts_i2v[5] = NAN;
    float *out = cvx_alloc_f32(w.n_out);
    assert_int_equal(wan_forward_per_token(w.m, w.x, B, w.F, w.H, w.W, w.text, w.L, NULL, 0, ts_i2v, out), -1);
    print_message("  error: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "[0, 5]"));
    free(out), free(ts_i2v), free(ts_t2v);
    case_close(&w);
}

/* ------------------------------------------------------------------ A14B */

static void test_a14b_experts(void **s) {
    (void)s;
    static const char *const experts[] = {"transformer", "transformer_2"};
    for (int e = 0; e < 2; e++) {
        w22_case w;
        char model[64];
        snprintf(model, sizeof model, "model/%s", experts[e]);
        case_open(&w, DATA "transformer_a14b", model);
        float t[2];
        const cvx_tensor *tt = gh_tensor(&w.c, "timestep");
        for (int b = 0; b < w.B; b++) t[b] = (float)gh_i64_at(tt, (size_t)b);
        char key[64];
        snprintf(key, sizeof key, "%s.output", experts[e]);
        check_pieces(&w, experts[e], t, 0, key);
        float *out = forward(&w, t, 0), *want = gh_f32(&w.c, NULL, "%s", key);
        gh_check_rel_l2(&w.c, key, out, want, w.n_out, TOL);
        /* the same timestep per token gives the same prediction */
        float *ts = cvx_alloc_f32((size_t)w.B * w.S);
        for (int b = 0; b < w.B; b++)
            for (int i = 0; i < w.S; i++) ts[(size_t)b * w.S + i] = t[b];
        float *pt = forward(&w, ts, 1);
        print_message("  %s per-token (constant) vs scalar: rel L2 = %.3g\n", experts[e], cvx_rel_l2(pt, out, w.n_out));
        assert_true(cvx_rel_l2(pt, out, w.n_out) <= 5e-7);
        free(pt), free(ts), free(out), free(want);
        case_close(&w);
    }
}

/* I2V-A14B: in_channels 36 = 16 latent + 20 condition channels, no image embeddings. */
static void test_a14b_i2v(void **s) {
    (void)s;
    static const struct { const char *model; int step; const char *latents; } runs[] = {
        {"model/transformer", 0, "initial_latents"}, {"model/transformer_2", 2, "step1.latents_after"}};
    for (int r = 0; r < 2; r++) {
        w22_case w;
        case_open(&w, DATA "e2e_a14b_i2v_dit", runs[r].model);
        const wan_config *c = wan_get_config(w.m);
        assert_int_equal(c->in_channels, 36);
        assert_int_equal(c->image_dim, 0);
        const cvx_tensor *lt = gh_tensor(&w.c, "%s", runs[r].latents), *ct = gh_tensor(&w.c, "condition");
        const int F = (int)lt->shape[2], H = (int)lt->shape[3], W = (int)lt->shape[4], Cl = (int)lt->shape[1],
                  Cc = (int)ct->shape[1];
        assert_int_equal(Cl + Cc, 36);
        const size_t fhw = (size_t)F * H * W;
        float *lat = gh_f32(&w.c, NULL, "%s", runs[r].latents), *cond = gh_f32(&w.c, NULL, "condition");
        float *x = cvx_alloc_f32(36 * fhw);                                       // cat([latents, condition], dim=1)
        memcpy(x, lat, sizeof(float) * Cl * fhw);
        memcpy(x + Cl * fhw, cond, sizeof(float) * Cc * fhw);
        const float t = (float)gh_i64_at(gh_tensor(&w.c, "step%d.timestep", runs[r].step), 0);
        const size_t n = (size_t)c->out_channels * fhw;
        float *out = cvx_alloc_f32(n);
        for (int k = 0; k < 2; k++) {
            const cvx_tensor *te = gh_tensor(&w.c, k ? "negative_prompt_embeds" : "prompt_embeds");
            float *text = cvx_tensor_f32_dup(te);
            ASSERT_OK(wan_forward(w.m, x, 1, F, H, W, text, (int)te->shape[1], NULL, 0, &t, out));
            char key[64];
            snprintf(key, sizeof key, "step%d.noise_pred_%s", runs[r].step, k ? "uncond" : "cond");
            float *want = gh_f32(&w.c, NULL, "%s", key);
            gh_check_rel_l2(&w.c, key, out, want, n, TOL);
            free(want), free(text);
        }
        /* image embeddings to a model without the CLIP branch: refused */
        float img[4] = {0};
        assert_int_equal(wan_forward(w.m, x, 1, F, H, W, img, 1, img, 1, &t, out), -1);
        print_message("  error: %s\n", cvx_last_error());
        free(out), free(x), free(lat), free(cond);
        case_close(&w);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ti2v),
        cmocka_unit_test(test_a14b_experts),
        cmocka_unit_test(test_a14b_i2v),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
