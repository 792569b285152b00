/* LTX-Video's conditioning math (stage2/ltx_cond.c, with ltx_schedule.c and ltx_pack.c) against
 * golden_ltx/e2e_condition and e2e_condition_distilled (the condition pipeline's loop: see
 * condition_chain) and e2e_i2v
 * (LTXImageToVideoPipeline, 4 steps; trimmed copy: the per-step tensors and the VAE's
 * latents_mean/std), bit-exact: the normalised image latent in frame 0 and the noise elsewhere
 * (initial latents and conditioning mask, packed), the 0.9.0 schedule at the case's token count,
 * each step's per-token timesteps t·(1 − mask) and the step on frames 1.. only (frame 0 kept),
 * the final latents unpacked and denormalised for the VAE; the condition pipeline's video_coords
 * (the transformer cases' input). */
#include "golden_harness.h"

#include "stage2/ltx_cond.h"
#include "stage2/ltx_pack.h"
#include "stage2/ltx_schedule.h"
#include "stage3/ltx_vae.h"

#define I2V "tests/data/golden_ltx/e2e_i2v"

static void test_i2v_chain(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, I2V);
    cvx_safetensors *stats = cvx_st_open(gh_path(&c, "model/vae/latents_stats.safetensors"));
    assert_non_null(stats);
    float *lmean = cvx_tensor_f32_dup(cvx_st_find(stats, "latents_mean"));
    float *lstd = cvx_tensor_f32_dup(cvx_st_find(stats, "latents_std"));
    cvx_st_close(stats);
    json_object *shape = gh_json(&c, "latent_shape_unpacked");
    int C = (int)gh_int(gh_at(shape, 1)), F = (int)gh_int(gh_at(shape, 2)), h = (int)gh_int(gh_at(shape, 3));
    int w = (int)gh_int(gh_at(shape, 4)), S = F * h * w, hw = h * w;
    size_t n = (size_t)S * C;

    /* initial latents: the normalised image latent in frame 0, noise elsewhere */
    float *img = gh_f32(&c, NULL, "image_latent_sample"), *noise = gh_f32(&c, NULL, "noise");
    ltx_normalize_latents(img, 1, C, (size_t)hw, lmean, lstd, 1.0f);
    float *x = malloc(sizeof(float) * n), *mask = malloc(sizeof(float) * S), *next = malloc(sizeof(float) * n);
    ltx_i2v_initial_latents(img, noise, C, F, h, w, x, mask);
    gh_expect_exact(&c, "initial_latents_packed", x, n);
    gh_expect_exact(&c, "conditioning_mask_packed", mask, (size_t)S);

    /* the 0.9.0 dynamic-shift schedule at the case's token count */
    json_object *sc = gh_json(&c, "scheduler_config");
    ltx_sched_config cfg = {
        .num_train_timesteps = (int)gh_int(gh_get(sc, "num_train_timesteps")), .shift = gh_num(gh_get(sc, "shift")),
        .use_dynamic_shifting = json_object_get_boolean(gh_get(sc, "use_dynamic_shifting")),
        .base_shift = gh_num(gh_get(sc, "base_shift")), .max_shift = gh_num(gh_get(sc, "max_shift")),
        .base_image_seq_len = gh_int(gh_get(sc, "base_image_seq_len")),
        .max_image_seq_len = gh_int(gh_get(sc, "max_image_seq_len")), .shift_terminal = gh_num(gh_get(sc, "shift_terminal"))};
    double mu = ltx_calculate_shift(S, &cfg);
    assert_true(mu == gh_num(gh_json(&c, "mu")));
    int N = (int)gh_int(gh_json(&c, "call.num_inference_steps"));
    float *sig = malloc(sizeof(float) * (N + 1)), *ts = malloc(sizeof(float) * N), *tt = malloc(sizeof(float) * 2 * S);
    ASSERT_OK(ltx_schedule_sigmas(&cfg, N, mu, sig, ts));
    for (int i = 0; i < N; i++) assert_true(ts[i] == (float)gh_num(gh_at(gh_json(&c, "timesteps"), (size_t)i)));

    for (int i = 0; i < N; i++) {
        char name[64];
        ltx_i2v_timesteps(ts[i], mask, S, tt);          /* both CFG rows: the same mask */
        ltx_i2v_timesteps(ts[i], mask, S, tt + S);
        snprintf(name, sizeof name, "step%d.timestep", i);
        gh_expect_exact(&c, name, tt, 2 * (size_t)S);
        snprintf(name, sizeof name, "step%d.transformer_hidden_states", i);
        gh_expect_exact(&c, name, x, n);
        float *v = gh_f32(&c, NULL, "step%d.noise_pred", i);
        ltx_i2v_step(sig, i, v, x, S, C, hw, next);
        snprintf(name, sizeof name, "step%d.latents_after", i);
        gh_expect_exact(&c, name, next, n);
        memcpy(x, next, sizeof(float) * n);
        free(v);
    }
    gh_expect_exact(&c, "final_latents_packed", x, n);
    ltx_unpack_latents(x, 1, C, F, h, w, next);
    gh_expect_exact(&c, "final_latents", next, n);
    ltx_denormalize_latents(next, 1, C, (size_t)S, lmean, lstd, 1.0f);
    gh_expect_exact(&c, "denormalised_latents", next, n);
    free(img); free(noise); free(x); free(mask); free(next); free(sig); free(ts); free(tt); free(lmean); free(lstd);
    gh_close(&c);
}

/* LTXConditionPipeline's loop from its initial latents (trimmed golden_ltx/e2e_condition and
 * e2e_condition_distilled): the noise lerped to the frame-0 condition at strength 1 (the
 * condition's latent = those tokens of the initial latents: the same bits), video_coords (the
 * extra tokens of a frame-k condition first), the schedule (linear-quadratic or the distilled
 * list), per step the per-token timesteps (both CFG rows), the per-token step of −noise_pred and
 * the keep-select (bit-exact from the step's transformer input), the extra tokens dropped,
 * unpacked, denormalised and the timestep-conditioned decoder's input with the last draw.
 * With image_cond_noise_scale > 0 the golden's "initial latents" are step 0's input, already
 * re-noised (init + scale·draw·1): the clean init is derived from them (one f32 rounding), so the
 * re-noised inputs are compared at rel L2 ≤ 1e-6 and each step continues from the golden input. */
static void condition_chain(const char *dir) {
    gh_case c;
    gh_open(&c, dir);
    json_object *shape = gh_json(&c, "latent_shape_unpacked"), *call = gh_json(&c, "call");
    int C = (int)gh_int(gh_at(shape, 1)), F = (int)gh_int(gh_at(shape, 2)), h = (int)gh_int(gh_at(shape, 3));
    int w = (int)gh_int(gh_at(shape, 4)), hw = h * w, S = F * hw;
    json_object *conds = gh_get(call, "conditions");
    int nc = (int)gh_len(conds), extra = 0, rows = gh_num(gh_get(call, "guidance_scale")) > 1.0 ? 2 : 1;
    for (int k = 0; k < nc; k++) extra += gh_int(gh_get(gh_at(conds, k), "frame_index")) > 0 ? hw : 0;
    /* generator draws: the noise, each condition's VAE sample, one per frame-k condition's extra
     * tokens; then one per step (image_cond_noise_scale > 0); the decode noise last */
    int T = extra + S, draw = 1 + nc + extra / hw;
    size_t n = (size_t)T * C;
    /* mask and video_coords: the extra conditions' tokens (in order), then the grid */
    float *mask = malloc(sizeof(float) * T), *vc = malloc(sizeof(float) * 3 * (size_t)T * rows);
    float *part = malloc(sizeof(float) * 3 * (size_t)S);
    double fps = gh_num(gh_get(call, "frame_rate"));
    int at = 0;
    for (int k = 0; k < T; k++) mask[k] = 0.0f;
    for (int q = 0; q < nc; q++) {
        json_object *cq = gh_at(conds, q);
        int fi = (int)gh_int(gh_get(cq, "frame_index"));
        float st = (float)gh_num(gh_get(cq, "strength"));
        if (fi == 0) {
            for (int k = 0; k < hw; k++) mask[extra + k] = st;
            continue;
        }
        ltx_condition_video_coords(1, h, w, fi, fps, part);
        for (int a = 0; a < 3; a++) memcpy(vc + (size_t)a * T + at, part + (size_t)a * hw, sizeof(float) * hw);
        for (int k = 0; k < hw; k++) mask[at + k] = st;
        at += hw;
    }
    ltx_condition_video_coords(F, h, w, 0, fps, part);
    for (int a = 0; a < 3; a++) memcpy(vc + (size_t)a * T + extra, part + (size_t)a * S, sizeof(float) * S);
    if (rows == 2) memcpy(vc + 3 * (size_t)T, vc, sizeof(float) * 3 * T);
    gh_expect_exact(&c, "video_coords", vc, 3 * (size_t)T * rows);
    /* the schedule: the call's timesteps, else linear-quadratic; shift 1 */
    json_object *jt = NULL;
    int N = json_object_object_get_ex(call, "timesteps", &jt) ? (int)gh_len(jt)
                                                               : (int)gh_int(gh_get(call, "num_inference_steps"));
    ltx_sched_config cfg = {.num_train_timesteps = 1000, .shift = 1.0};
    float *ts = malloc(sizeof(float) * N), *sig = malloc(sizeof(float) * (N + 1));
    double *tin = malloc(sizeof(double) * N);
    if (jt) {
        for (int i = 0; i < N; i++) tin[i] = gh_num(gh_at(jt, (size_t)i));
    } else {
        ltx_linear_quadratic_timesteps(N, 0.025, 0, ts);
        for (int i = 0; i < N; i++) tin[i] = ts[i];
    }
    ASSERT_OK(ltx_schedule_timesteps(&cfg, N, tin, sig, ts));
    float *init = gh_f32(&c, NULL, "initial_latents_packed_with_extra_tokens"), *x = malloc(sizeof(float) * n);
    float *neg = malloc(sizeof(float) * n), *den = malloc(sizeof(float) * n), *ptt = malloc(sizeof(float) * 2 * T);
    float scale = (float)gh_num(gh_get(call, "image_cond_noise_scale"));
    if (scale > 0) {   /* the clean init: step 0's re-noising (draw `draw`, t = 1000) taken back */
        float *n0 = gh_f32(&c, NULL, "randn_%d", draw);
        for (int k = 0; k < T; k++)
            if (mask[k] > 1.0f - 1e-6f)
                for (int ch = 0; ch < C; ch++) init[(size_t)k * C + ch] -= scale * n0[(size_t)k * C + ch];
        free(n0);
    } else {           /* prepare_latents' frame-0 lerp at strength 1 gives the condition's latent */
        float *noise0 = gh_f32(&c, NULL, "randn_0"), *cond0 = malloc(sizeof(float) * (size_t)S * C);
        float *f0 = malloc(sizeof(float) * (size_t)hw), *got = malloc(sizeof(float) * (size_t)S * C);
        ltx_unpack_latents(init + (size_t)extra * C, 1, C, F, h, w, cond0);
        for (int ch = 0; ch < C; ch++) {
            float *nf = noise0 + (size_t)ch * S;                      /* [F, h, w] of channel ch */
            ltx_lerp(nf, cond0 + (size_t)ch * S, (float)gh_num(gh_get(gh_at(conds, 0), "strength")), (size_t)hw, f0);
            memcpy(nf, f0, sizeof(float) * hw);
        }
        ltx_pack_latents(noise0, 1, C, F, h, w, got);
        gh_check_exact_f32(&c, "initial latents (frame 0 lerped)", got, init + (size_t)extra * C, (size_t)S * C);
        free(noise0); free(cond0); free(f0); free(got);
    }
    memcpy(x, init, sizeof(float) * n);
    for (int i = 0; i < N; i++) {
        char name[64];
        snprintf(name, sizeof name, "step%d.transformer_hidden_states", i);
        float *hs = gh_f32(&c, NULL, "%s", name);
        if (scale > 0) {
            float *noise = gh_f32(&c, NULL, "randn_%d", draw + i);   /* one draw per step */
            ltx_condition_renoise(ts[i], init, noise, mask, T, C, scale, x);
            gh_check_rel_l2(&c, name, x, hs, n, 1e-6);
            memcpy(x, hs, sizeof(float) * n);
            free(noise);
        } else {
            gh_check_exact_f32(&c, name, x, hs, n);
        }
        free(hs);
        ltx_per_token_timesteps(ts[i], mask, T, ptt);
        memcpy(ptt + T, ptt, sizeof(float) * T);
        snprintf(name, sizeof name, "step%d.timestep", i);
        gh_expect_exact(&c, name, ptt, (size_t)rows * T);
        float *v = gh_f32(&c, NULL, "step%d.noise_pred", i);
        for (size_t k = 0; k < n; k++) neg[k] = -v[k];
        ltx_step_per_token(sig, N, ptt, neg, x, T, C, den);
        ltx_condition_select(ts[i], mask, den, x, T, C, x);
        snprintf(name, sizeof name, "step%d.latents_after", i);
        gh_expect_exact(&c, name, x, n);
        free(v);
    }
    gh_expect_exact(&c, "final_latents_packed_with_extra_tokens", x, n);
    ltx_unpack_latents(x + (size_t)extra * C, 1, C, F, h, w, den);   /* extra tokens dropped */
    gh_expect_exact(&c, "final_latents", den, (size_t)S * C);
    cvx_safetensors *st = cvx_st_open(gh_path(&c, "model/vae/latents_stats.safetensors"));
    assert_non_null(st);
    float *lmean = cvx_tensor_f32_dup(cvx_st_find(st, "latents_mean")), *lstd = cvx_tensor_f32_dup(cvx_st_find(st, "latents_std"));
    cvx_st_close(st);
    ltx_denormalize_latents(den, 1, C, (size_t)S, lmean, lstd, 1.0f);
    gh_expect_exact(&c, "denormalised_latents", den, (size_t)S * C);
    float *dn = gh_f32(&c, NULL, "decode_noise");
    int last = (int)gh_len(gh_json(&c, "generator_draws")) - 1;     /* the last draw: the decode noise */
    float *dl = gh_f32(&c, NULL, "randn_%d", last);
    gh_check_exact_f32(&c, "decode_noise = the last draw", dl, dn, (size_t)S * C);
    float s = (float)gh_num(gh_get(call, "decode_noise_scale"));
    ltx_vae_decode_input(den, dn, (size_t)S * C, s, neg);             /* (1 − s)·z + s·noise */
    gh_expect_exact(&c, "vae_decode_input", neg, (size_t)S * C);
    free(mask); free(vc); free(part); free(ts); free(sig); free(tin); free(init); free(x); free(neg); free(den);
    free(ptt); free(lmean); free(lstd); free(dn); free(dl);
    gh_close(&c);
}

static void test_condition_chain(void **state) { (void)state; condition_chain("tests/data/golden_ltx/e2e_condition"); }
static void test_condition_distilled(void **state) {
    (void)state;
    condition_chain("tests/data/golden_ltx/e2e_condition_distilled");
}

/* The condition pipeline's video_coords: the transformer cases' input (frame_rate 25). */
static void test_video_coords(void **state) {
    (void)state;
    static const char *const cases[] = {"tests/data/golden_ltx/transformer_2b", "tests/data/golden_ltx/transformer_13b"};
    for (int k = 0; k < 2; k++) {
        gh_case c;
        gh_open(&c, cases[k]);
        int B = (int)gh_int(gh_json(&c, "B")), F = (int)gh_int(gh_json(&c, "F")), H = (int)gh_int(gh_json(&c, "H"));
        int W = (int)gh_int(gh_json(&c, "W")), S = F * H * W;
        float *vc = malloc(sizeof(float) * (size_t)B * 3 * S);
        for (int b = 0; b < B; b++)
            ltx_condition_video_coords(F, H, W, 0, gh_num(gh_json(&c, "frame_rate")), vc + (size_t)b * 3 * S);
        gh_expect_exact(&c, "video_coords", vc, (size_t)B * 3 * S);
        free(vc);
        gh_close(&c);
    }
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_i2v_chain),
        cmocka_unit_test(test_video_coords),
        cmocka_unit_test(test_condition_chain),
        cmocka_unit_test(test_condition_distilled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
