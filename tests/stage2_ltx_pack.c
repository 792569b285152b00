/* LTX-Video's latent layout (stage2/ltx_pack.c) against golden_ltx (bit-exact):
 *   - noise/: randn_tensor at real LTX latent shapes with the torch-exact generator, unpacked
 *     (head / mid / tail) and packed (first and last token), and a tiny shape in full;
 *   - vae090_decode_encode/: packed ↔ unpacked latents, _denormalize_latents (z) and
 *     _normalize_latents (the encoder's normalised mode), with the checkpoint's latents_mean/std;
 *   - the frame / size rules. */
#include "golden_harness.h"

#include "rng.h"
#include "stage2/ltx_pack.h"

#define LTX_DATA "tests/data/golden_ltx/"

static void test_noise(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, LTX_DATA "noise");
    json_object *entries = gh_json(&c, "entries");
    for (size_t e = 0; e < gh_len(entries); e++) {
        json_object *en = gh_at(entries, e), *shape = gh_get(en, "shape");
        const char *key = gh_str(gh_get(en, "key"));
        int B = (int)gh_int(gh_at(shape, 0)), C = (int)gh_int(gh_at(shape, 1)), F = (int)gh_int(gh_at(shape, 2));
        int H = (int)gh_int(gh_at(shape, 3)), W = (int)gh_int(gh_at(shape, 4));
        size_t n = (size_t)B * C * F * H * W, S = (size_t)F * H * W;
        assert_int_equal(n, (size_t)gh_int(gh_get(en, "numel")));
        float *x = malloc(sizeof(float) * n), *p = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n);
        cvx_generator g;
        cvx_generator_seed(&g, (uint64_t)gh_int(gh_get(en, "seed")));
        cvx_randn(&g, x, n);
        ltx_pack_latents(x, B, C, F, H, W, p);
        char name[96];
        if (gh_tensor_opt(&c, "%s.head", key)) {
            size_t mid = (size_t)gh_int(gh_get(en, "mid_offset"));
            snprintf(name, sizeof name, "%s.head", key);
            gh_expect_exact(&c, name, x, 4096);
            snprintf(name, sizeof name, "%s.mid", key);
            gh_expect_exact(&c, name, x + mid, 1000);
            snprintf(name, sizeof name, "%s.tail", key);
            gh_expect_exact(&c, name, x + n - 4096, 4096);
            snprintf(name, sizeof name, "%s.packed_token0", key);
            gh_expect_exact(&c, name, p, (size_t)C);
            snprintf(name, sizeof name, "%s.packed_token_last", key);
            gh_expect_exact(&c, name, p + (S - 1) * C, (size_t)C);
        } else {
            snprintf(name, sizeof name, "%s", key);
            gh_expect_exact(&c, name, x, n);
            snprintf(name, sizeof name, "%s.packed", key);
            gh_expect_exact(&c, name, p, n);
        }
        ltx_unpack_latents(p, B, C, F, H, W, u);
        assert_memory_equal(u, x, sizeof(float) * n);
        free(x); free(p); free(u);
    }
    gh_close(&c);
}

static void test_vae_latents(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, LTX_DATA "vae090_decode_encode");
    cvx_safetensors *w = cvx_st_open(gh_path(&c, "model/vae/diffusion_pytorch_model.safetensors"));
    assert_non_null(w);
    float *mean = cvx_tensor_f32_dup(cvx_st_find(w, "latents_mean")), *std = cvx_tensor_f32_dup(cvx_st_find(w, "latents_std"));
    cvx_st_close(w);
    static const char *const dec[] = {"f1", "f2"};
    for (int k = 0; k < 2; k++) {
        const cvx_tensor *z = gh_tensor(&c, "%s.z", dec[k]);
        int C = (int)z->shape[1], F = (int)z->shape[2], H = (int)z->shape[3], W = (int)z->shape[4];
        size_t n = (size_t)z->numel;
        float *packed = gh_f32(&c, NULL, "%s.latents_packed", dec[k]), *x = malloc(sizeof(float) * n);
        float *p = malloc(sizeof(float) * n);
        ltx_unpack_latents(packed, 1, C, F, H, W, x);
        char name[64];
        snprintf(name, sizeof name, "%s.latents_normalised", dec[k]);
        gh_expect_exact(&c, name, x, n);
        ltx_pack_latents(x, 1, C, F, H, W, p);
        assert_memory_equal(p, packed, sizeof(float) * n);
        ltx_denormalize_latents(x, 1, C, (size_t)F * H * W, mean, std, 1.0f);
        snprintf(name, sizeof name, "%s.z", dec[k]);
        gh_expect_exact(&c, name, x, n);
        free(packed); free(x); free(p);
    }
    static const char *const enc[] = {"t1", "t9"};
    for (int k = 0; k < 2; k++) {
        const cvx_tensor *m = gh_tensor(&c, "%s.mean", enc[k]);
        size_t n = (size_t)m->numel;
        float *x = cvx_tensor_f32_dup(m);
        ltx_normalize_latents(x, 1, (int)m->shape[1], n / (size_t)m->shape[1], mean, std, 1.0f);
        char name[64];
        snprintf(name, sizeof name, "%s.normalised_mode", enc[k]);
        gh_expect_exact(&c, name, x, n);
        free(x);
    }
    free(mean);
    free(std);
    gh_close(&c);
}

static void test_grid_rules(void **state) {
    (void)state;
    int F, H, W;
    ASSERT_OK(ltx_latent_grid(121, 512, 768, &F, &H, &W));
    assert_true(F == 16 && H == 16 && W == 24);
    ASSERT_OK(ltx_latent_grid(1, 32, 32, &F, &H, &W));
    assert_true(F == 1 && H == 1 && W == 1);
    assert_int_equal(ltx_latent_grid(120, 512, 768, &F, &H, &W), -1);
    assert_non_null(strstr(cvx_last_error(), "8k + 1"));
    assert_int_equal(ltx_latent_grid(121, 500, 768, &F, &H, &W), -1);
    assert_non_null(strstr(cvx_last_error(), "multiples of 32"));
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noise),
        cmocka_unit_test(test_vae_latents),
        cmocka_unit_test(test_grid_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
