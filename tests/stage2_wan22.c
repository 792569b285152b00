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
 *   - bad per-token timesteps: one error line;
 *   - scheduler_unipc22: UniPC tables at shift 5 / 3 / 12 (exact), the shift-5 chain step by step,
 *     every expert-switch list from wan_expert_is_high_noise, the boundary check;
 *   - noise22: the Wan 2.2 latent shapes' randn_tensor (exact, large ones by head / mid / tail);
 *   - e2e_ti2v_i2v_steps (e2e_ti2v_i2v's tensors; its VAE and transformer are byte-identical to
 *     vae22_decode's and transformer_ti2v's, cmp'd when copied): the image's latent condition
 *     (encode + normalise), first_frame_mask, every step's transformer input and per-token
 *     timesteps (exact), steps 0 and 3's predictions, the final frame-0 replacement (exact). */
#include "golden_harness.h"

#include "rng.h"
#include "stage2/cogvideox_rope.h"
#include "stage2/scheduler_flow.h"
#include "stage3/wan_vae.h"
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

/* ------------------------------------------------------------------ scheduler, experts, noise */

#define SCHED DATA "scheduler_unipc22"

static void load_sched(flow_scheduler *s, double shift) {
    ASSERT_OK(flow_scheduler_load(s, SCHED "/model/scheduler/scheduler_config.json", FLOW_FROM_CONFIG, shift));
    assert_int_equal((int)s->kind, FLOW_UNIPC);
}

static void test_unipc_tables(void **st) {
    (void)st;
    gh_case c;
    gh_open(&c, SCHED);
    int count = 0;
    json_object_object_foreach(gh_json(&c, "tables"), key, val) {
        (void)val;
        int shift, n;
        assert_int_equal(sscanf(key, "shift%d_n%d", &shift, &n), 2);
        flow_scheduler s;
        load_sched(&s, shift);
        ASSERT_OK(flow_scheduler_set_timesteps(&s, n));
        char name[64];
        snprintf(name, sizeof name, "%s.sigmas", key);
        gh_expect_exact(&c, name, s.sigmas, (size_t)n + 1);
        snprintf(name, sizeof name, "%s.timesteps", key);
        const cvx_tensor *t = gh_tensor(&c, "%s", name);
        assert_int_equal(t->numel, n);
        int64_t *want = malloc(sizeof(int64_t) * (size_t)n);
        for (int i = 0; i < n; i++) want[i] = gh_i64_at(t, (size_t)i);
        gh_check_exact_i64(&c, name, s.timesteps_int, want, (size_t)n);
        /* the expert of every step, for both A14B boundaries */
        json_object *sw = gh_json(&c, "boundary_ratio");
        json_object_object_foreach(sw, kind, ratio) {
            char lk[96];
            snprintf(lk, sizeof lk, "%s.%s", key, kind);
            json_object *list = gh_get(gh_json(&c, "expert_switch"), lk);
            assert_int_equal(gh_len(list), n);
            for (int i = 0; i < n; i++) {
                const int high = !strcmp(gh_str(gh_at(list, (size_t)i)), "transformer");
                assert_int_equal(wan_expert_is_high_noise(want[i], gh_num(ratio), 1000), high);
            }
            c.checks++;
        }
        free(want);
        flow_scheduler_free(&s);
        count++;
    }
    assert_int_equal(count, 8);
    /* the rule's edges: t = 875 is high noise at 0.875, 874 is not; 900 at 0.9 */
    assert_true(wan_expert_is_high_noise(875, 0.875, 1000) && !wan_expert_is_high_noise(874, 0.875, 1000));
    assert_true(wan_expert_is_high_noise(900, 0.9, 1000) && !wan_expert_is_high_noise(899, 0.9, 1000));
    ASSERT_OK(wan_boundary_check(0.875, "model_index.json"));
    const double bad[] = {0.0, 1.0, -0.5, 1.5, NAN};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        assert_int_equal(wan_boundary_check(bad[k], "model_index.json"), -1);
        assert_non_null(strstr(cvx_last_error(), "model_index.json: boundary_ratio"));
    }
    print_message("  error: %s\n", cvx_last_error());
    gh_close(&c);
}

/* The shift-5 chain: the first sample and the model outputs from the file, our own samples fed back. */
static void test_unipc_chain(void **st) {
    (void)st;
    gh_case c;
    gh_open(&c, SCHED);
    json_object *ch = gh_at(gh_json(&c, "chains"), 0), *steps = gh_get(ch, "steps");
    const char *prefix = gh_str(gh_get(ch, "chain"));
    const int N = (int)gh_int(gh_get(ch, "num_inference_steps"));
    flow_scheduler s;
    load_sched(&s, gh_num(gh_get(ch, "flow_shift")));
    ASSERT_OK(flow_scheduler_set_timesteps(&s, N));
    size_t n;
    float *x = gh_f32(&c, &n, "%s_i0.sample", prefix), *prev = cvx_alloc_f32(n);
    flow_state *fs = flow_state_new(&s, n);
    for (int i = 0; i < N; i++) {
        json_object *g = gh_at(steps, (size_t)i);
        assert_int_equal(s.timesteps_int[i], gh_int(gh_get(g, "timestep")));
        float *v = gh_f32(&c, NULL, "%s_i%d.model_output", prefix, i);
        flow_step(&s, fs, i, v, x, n, prev);
        assert_int_equal(flow_last_order(&s, fs), gh_int(gh_get(g, "predictor_order")));
        static const char *const keys[] = {"x0_pred", "corrected_sample", "prev_sample"};
        for (int k = 0; k < 3; k++) {
            const float *got = k == 0 ? flow_x0(fs) : k == 1 ? flow_corrected_sample(&s, fs) : prev;
            char what[96];
            snprintf(what, sizeof what, "%s_i%d.%s", prefix, i, keys[k]);
            float *want = gh_f32(&c, NULL, "%s", what);
            gh_check_rel_l2(&c, what, got, want, n, 1e-6);
            free(want);
        }
        memcpy(x, prev, sizeof(float) * n);
        free(v);
    }
    flow_state_free(fs);
    flow_scheduler_free(&s);
    free(x), free(prev);
    gh_close(&c);
}

static void test_noise(void **st) {
    (void)st;
    gh_case c;
    gh_open(&c, DATA "noise22");
    json_object *entries = gh_json(&c, "entries");
    for (size_t e = 0; e < gh_len(entries); e++) {
        json_object *en = gh_at(entries, e);
        const char *key = gh_str(gh_get(en, "key"));
        const size_t n = (size_t)gh_int(gh_get(en, "numel"));
        assert_int_equal(gh_numel(gh_get(en, "shape")), n);
        float *x = cvx_alloc_f32(n);
        cvx_generator g;
        cvx_generator_seed(&g, (uint64_t)gh_int(gh_get(en, "seed")));
        cvx_randn(&g, x, n);
        char what[64];
        if (gh_tensor_opt(&c, "%s", key)) {
            snprintf(what, sizeof what, "%s", key);
            float *want = gh_f32(&c, NULL, "%s", key);
            gh_check_exact_f32(&c, what, x, want, n);
            free(want);
        } else {
            const size_t mid = (size_t)gh_int(gh_get(en, "mid_offset"));
            static const char *const parts[] = {"head", "mid", "tail"};
            for (int k = 0; k < 3; k++) {
                size_t m;
                float *want = gh_f32(&c, &m, "%s.%s", key, parts[k]);
                const size_t at = k == 0 ? 0 : k == 1 ? mid : n - m;
                snprintf(what, sizeof what, "%s.%s", key, parts[k]);
                gh_check_exact_f32(&c, what, x + at, want, m);
                free(want);
            }
            double sum = 0, sq = 0;
            for (size_t i = 0; i < n; i++) sum += x[i], sq += (double)x[i] * x[i];
            const double ws = gh_num(gh_get(en, "sum_float64")), wq = gh_num(gh_get(en, "sumsq_float64"));
            print_message("  %s: sum %.10g (want %.10g), sum of squares %.10g (want %.10g)\n", key, sum, ws, sq, wq);
            assert_true(fabs(sum - ws) <= 1e-6 * wq && fabs(sq - wq) <= 1e-9 * wq);
        }
        free(x);
    }
    gh_close(&c);
}

/* ------------------------------------------------------------------ TI2V image-to-video */

static void test_ti2v_i2v_steps(void **st) {
    (void)st;
    gh_case c;
    gh_open(&c, DATA "e2e_ti2v_i2v_steps");
    /* the condition: the image alone encoded (mode), normalised */
    wan_vae *v = wan_vae_load(DATA "vae22_decode/model/vae", NULL);
    ASSERT_NONNULL(v);
    v->ctx->precision = CVX_PRECISION_F32;
    const cvx_tensor *it = gh_tensor(&c, "image_preprocessed"), *ct = gh_tensor(&c, "condition");
    const int Hp = (int)it->shape[2], Wp = (int)it->shape[3], C = (int)ct->shape[1], h = (int)ct->shape[3], w = (int)ct->shape[4];
    int F1, h1, w1;
    ASSERT_OK(wan_vae_encoded_shape(v, 1, Hp, Wp, &F1, &h1, &w1));
    assert_true(F1 == 1 && h1 == h && w1 == w && C == v->cfg.z_dim);
    const size_t nc = (size_t)C * h * w;
    float *img = gh_f32(&c, NULL, "image_preprocessed"), *mean = cvx_alloc_f32(nc), *logvar = cvx_alloc_f32(nc);
    ASSERT_OK(wan_vae_encode(v, img, 1, Hp, Wp, mean, logvar, NULL));   /* [3, H, W] = [3, 1, H, W] */
    float *want = gh_f32(&c, NULL, "image_latent_mode");
    gh_check_rel_l2(&c, "image_latent_mode", mean, want, nc, TOL);
    free(want);
    float *cond_got = cvx_alloc_f32(nc);
    wan_vae_normalize(v, mean, 1, h, w, cond_got);
    float *cond = gh_f32(&c, NULL, "condition");
    gh_check_rel_l2(&c, "condition", cond_got, cond, nc, TOL);
    free(cond_got), free(mean), free(logvar), free(img);
    wan_vae_free(v);

    /* the mask, then each step's transformer input and timesteps from the previous step's latents */
    const cvx_tensor *lt = gh_tensor(&c, "initial_latents");
    const int F = (int)lt->shape[2];
    const size_t n = (size_t)C * F * h * w, S = (size_t)F * (h / 2) * (w / 2);
    float *m = cvx_alloc_f32((size_t)F * h * w), *x = cvx_alloc_f32(n), *ts = cvx_alloc_f32(S);
    wan_ti2v_first_frame_mask(F, h, w, m);
    want = gh_f32(&c, NULL, "first_frame_mask");
    gh_check_exact_f32(&c, "first_frame_mask", m, want, (size_t)F * h * w);
    free(want);
    float *lat = gh_f32(&c, NULL, "initial_latents");
    wan_ti2v_apply_condition(lat, cond, C, F, h, w, x);
    want = gh_f32(&c, NULL, "initial_transformer_input");
    gh_check_exact_f32(&c, "initial_transformer_input", x, want, n);
    free(want), free(lat);

    w22_case tw;
    case_open(&tw, DATA "transformer_ti2v", "model/transformer");
    const cvx_tensor *pe = gh_tensor(&c, "prompt_embeds");
    const int L = (int)pe->shape[1];
    float *text[2] = {cvx_tensor_f32_dup(pe), cvx_tensor_f32_dup(gh_tensor(&c, "negative_prompt_embeds"))};
    float *out = cvx_alloc_f32(n);
    flow_scheduler sched;   /* e2e_ti2v_i2v's schedule: UniPC shift 5 (TI2V-5B's), 4 steps */
    load_sched(&sched, 5.0);
    ASSERT_OK(flow_scheduler_set_timesteps(&sched, 4));
    const int64_t *T = sched.timesteps_int;
    char key[64];
    for (int i = 0; i < 4; i++) {
        lat = i ? gh_f32(&c, NULL, "step%d.latents_after", i - 1) : gh_f32(&c, NULL, "initial_latents");
        wan_ti2v_apply_condition(lat, cond, C, F, h, w, x);
        snprintf(key, sizeof key, "step%d.transformer_input", i);
        want = gh_f32(&c, NULL, "%s", key);
        gh_check_exact_f32(&c, key, x, want, n);
        free(want);
        wan_ti2v_timesteps(T[i], F, h, w, ts);
        snprintf(key, sizeof key, "step%d.timestep", i);
        want = gh_f32(&c, NULL, "%s", key);
        gh_check_exact_f32(&c, key, ts, want, S);
        free(want);
        if (i == 0 || i == 3)
            for (int k = 0; k < 2; k++) {
                ASSERT_OK(wan_forward_per_token(tw.m, x, 1, F, h, w, text[k], L, NULL, 0, ts, out));
                snprintf(key, sizeof key, "step%d.noise_pred_%s", i, k ? "uncond" : "cond");
                want = gh_f32(&c, NULL, "%s", key);
                gh_check_rel_l2(&c, key, out, want, n, TOL);
                free(want);
            }
        free(lat);
    }
    /* after the loop: frame 0 replaced once more */
    lat = gh_f32(&c, NULL, "step3.latents_after");
    wan_ti2v_apply_condition(lat, cond, C, F, h, w, lat);
    want = gh_f32(&c, NULL, "final_latents");
    gh_check_exact_f32(&c, "final_latents", lat, want, n);
    free(want), free(lat), free(out), free(text[0]), free(text[1]), free(m), free(x), free(ts), free(cond);
    flow_scheduler_free(&sched);
    case_close(&tw);
    gh_close(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ti2v),         cmocka_unit_test(test_a14b_experts), cmocka_unit_test(test_a14b_i2v),
        cmocka_unit_test(test_unipc_tables), cmocka_unit_test(test_unipc_chain),  cmocka_unit_test(test_noise),
        cmocka_unit_test(test_ti2v_i2v_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
