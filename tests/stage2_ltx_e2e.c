/* LTXPipeline's stage 2 on our LTX code (the model pieces a family row will call, without the
 * family wiring) against golden_ltx/e2e_t2v_tsvae (trimmed: the transformer, the scheduler config,
 * the per-step tensors, the VAE's latents_mean/std): the initial latents from the seed (torch-exact
 * randn, packed), the 0.9.5 schedule, per step the transformer at CFG batch 2 (uncond first, the
 * empty negative prompt's mask, rope_interpolation_scale (8/24, 32, 32)) → noise_pred_uncond /
 * _text (rel L2 ≤ 1e-5), the step from the golden's guided prediction (bit-exact), then the final
 * latents unpacked and denormalised and the decode noise drawn from the same generator after the
 * initial latents (the staged trap: bit-exact) and the decoder input. */
#include "golden_harness.h"

#include "rng.h"
#include "stage2/ltx.h"
#include "stage2/ltx_pack.h"
#include "stage2/ltx_schedule.h"
#include "stage3/ltx_vae.h"

#define CASE "tests/data/golden_ltx/e2e_t2v_tsvae"

static void test_t2v_stage2(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, CASE);
    json_object *call = gh_json(&c, "call"), *shape = gh_json(&c, "latent_shape_unpacked");
    int C = (int)gh_int(gh_at(shape, 1)), F, H, W;
    ASSERT_OK(ltx_latent_grid((int)gh_int(gh_get(call, "num_frames")), (int)gh_int(gh_get(call, "height")),
                              (int)gh_int(gh_get(call, "width")), &F, &H, &W));
    assert_int_equal(F, (int)gh_int(gh_at(shape, 2)));
    int S = F * H * W;
    size_t n = (size_t)S * C;
    /* initial latents: randn_tensor [1, C, F, H, W] from the seed, packed */
    cvx_generator g;
    cvx_generator_seed(&g, (uint64_t)gh_int(gh_get(call, "seed")));
    float *u = malloc(sizeof(float) * n), *x = malloc(sizeof(float) * n), *next = malloc(sizeof(float) * n);
    cvx_randn(&g, u, n);
    gh_expect_exact(&c, "initial_latents", u, n);
    ltx_pack_latents(u, 1, C, F, H, W, x);
    gh_expect_exact(&c, "initial_latents_packed", x, n);
    /* the schedule (0.9.5 config: mu unused) */
    ltx_sched_config cfg;
    ASSERT_OK(ltx_sched_config_load(gh_path(&c, "model/scheduler/scheduler_config.json"), &cfg));
    int N = (int)gh_int(gh_get(call, "num_inference_steps"));
    float *sig = malloc(sizeof(float) * (N + 1)), *ts = malloc(sizeof(float) * N);
    ASSERT_OK(ltx_schedule_sigmas(&cfg, N, ltx_calculate_shift(S, &cfg), sig, ts));
    /* the transformer at CFG batch 2 */
    ltx_transformer *m = ltx_load(gh_path(&c, "model/transformer"), NULL);
    if (!m) fail_msg("%s", cvx_last_error());
    const cvx_tensor *am = gh_tensor(&c, "transformer_encoder_attention_mask");
    float *text = gh_f32(&c, NULL, "transformer_encoder_hidden_states"), mask[2 * 128];
    int L = (int)am->shape[1];
    assert_true(L <= 128);
    for (int i = 0; i < 2 * L; i++) mask[i] = (float)gh_i64_at(am, (size_t)i);
    float scale[3] = {(float)(8.0 / gh_num(gh_get(call, "frame_rate"))), 32, 32};
    assert_true(scale[0] == (float)gh_num(gh_at(gh_json(&c, "rope_interpolation_scale"), 0)));
    float *coords = malloc(sizeof(float) * 6 * (size_t)S), *in2 = malloc(sizeof(float) * 2 * n), *out = malloc(sizeof(float) * 2 * n);
    for (int b = 0; b < 2; b++) ltx_rope_coords_grid(F, H, W, scale, coords + (size_t)b * 3 * S);
    for (int i = 0; i < N; i++) {
        char name[64];
        snprintf(name, sizeof name, "step%d.transformer_hidden_states", i);
        gh_expect_exact(&c, name, x, n);
        float t2[2] = {ts[i], ts[i]};
        snprintf(name, sizeof name, "step%d.timestep", i);
        gh_expect_exact(&c, name, t2, 2);
        memcpy(in2, x, sizeof(float) * n);
        memcpy(in2 + n, x, sizeof(float) * n);
        ASSERT_OK(ltx_forward(m, in2, 2, S, text, mask, L, t2, 1, coords, out));
        float *want = gh_f32(&c, NULL, "step%d.noise_pred_uncond", i);
        snprintf(name, sizeof name, "step%d.noise_pred_uncond", i);
        gh_check_rel_l2(&c, name, out, want, n, 1e-5);
        free(want);
        want = gh_f32(&c, NULL, "step%d.noise_pred_text", i);
        snprintf(name, sizeof name, "step%d.noise_pred_text", i);
        gh_check_rel_l2(&c, name, out + n, want, n, 1e-5);
        free(want);
        float *v = gh_f32(&c, NULL, "step%d.noise_pred", i);   /* guided + rescaled: the guider's */
        ltx_step(sig, i, v, x, n, next);
        snprintf(name, sizeof name, "step%d.latents_after", i);
        gh_expect_exact(&c, name, next, n);
        memcpy(x, next, sizeof(float) * n);
        free(v);
    }
    gh_expect_exact(&c, "final_latents_packed", x, n);
    ltx_unpack_latents(x, 1, C, F, H, W, u);
    gh_expect_exact(&c, "final_latents", u, n);
    cvx_safetensors *st = cvx_st_open(gh_path(&c, "model/vae/latents_stats.safetensors"));
    assert_non_null(st);
    float *lmean = cvx_tensor_f32_dup(cvx_st_find(st, "latents_mean")), *lstd = cvx_tensor_f32_dup(cvx_st_find(st, "latents_std"));
    cvx_st_close(st);
    ltx_denormalize_latents(u, 1, C, (size_t)S, lmean, lstd, 1.0f);
    gh_expect_exact(&c, "denormalised_latents", u, n);
    /* the decode noise: the same generator after the initial latents */
    cvx_randn(&g, next, n);
    gh_expect_exact(&c, "decode_noise", next, n);
    ltx_vae_decode_input(u, next, n, (float)gh_num(gh_get(call, "decode_noise_scale")), x);
    gh_expect_exact(&c, "vae_decode_input", x, n);
    ltx_free(m);
    free(u); free(x); free(next); free(sig); free(ts); free(text); free(coords); free(in2); free(out); free(lmean);
    free(lstd);
    gh_close(&c);
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t2v_stage2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
