/* LTX-Video's image-to-video conditioning math (stage2/ltx_cond.c) against golden_ltx/e2e_i2v
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
