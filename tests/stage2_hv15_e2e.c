/* The HunyuanVideo-1.5 denoising loop and decode of the golden e2e cases, run from the stage-1
 * tensors they store (tests/data/golden_hv15/e2e_*, trimmed copies of shared/golden_hv15: the
 * transformer, scheduler and guider of each case; the VAE of every e2e case is byte-identical to
 * vae_decode's and e2e_t2v_nocfg's transformer to e2e_t2v_glyph's (cmp'd when copied), so those are
 * stored once):
 *   - each transformer call of each step from the stored latents_before (cond, and uncond when the
 *     guider runs CFG): module tolerance 1e-5;
 *   - the whole loop from initial_latents (scheduler with the pipeline's sigmas, guider, Euler):
 *     every step's latents and final_latents within the stage tolerance 1e-4;
 *   - z = final_latents / scaling_factor, decode, post-processing (frames ±1 on uint8);
 *   - I2V: vae.encode(image_preprocessed).mode()·scaling = image_latents, and the condition
 *     channels (cond latents on frame 0, mask 1 there) built from them.
 * Cases: e2e_t2v_glyph (ByT5 path live, CFG 6, negative None), e2e_t2v_nocfg (guidance 1: one
 * call per step), e2e_i2v (image embeddings and the first-frame condition). */
#include "golden_harness.h"

#include "stage2/guidance.h"
#include "stage2/hunyuan15.h"
#include "stage2/scheduler_flow.h"
#include "stage3/hunyuan15_vae.h"
#include "latent_dist.h"

#define DATA "tests/data/golden_hv15/"
#define VAE_DIR DATA "vae_decode/model/vae"

typedef struct {
    const float *embeds, *mask, *embeds2, *mask2;
} branch;

static branch branch_of(gh_case *c, const char *prefix, float **own) {
    branch b;
    own[0] = gh_f32(c, NULL, "%sprompt_embeds", prefix);
    own[1] = gh_f32(c, NULL, "%sprompt_embeds_mask", prefix);
    own[2] = gh_f32(c, NULL, "%sprompt_embeds_2", prefix);
    own[3] = gh_f32(c, NULL, "%sprompt_embeds_mask_2", prefix);
    b.embeds = own[0], b.mask = own[1], b.embeds2 = own[2], b.mask2 = own[3];
    return b;
}

/* One transformer call of batch 1: input cat[x, cond, mask] along channels. */
static void call(hv15_transformer *m, const float *x, const float *condlat, const float *mask, int C, int F, int H,
                 int W, const branch *b, const float *image, float t, float *out) {
    const hv15_config *c = hv15_get_config(m);
    const size_t fhw = (size_t)F * H * W;
    float *in = cvx_alloc_f32((size_t)c->in_channels * fhw);
    memcpy(in, x, sizeof(float) * C * fhw);
    memcpy(in + C * fhw, condlat, sizeof(float) * C * fhw);
    memcpy(in + 2 * C * fhw, mask, sizeof(float) * fhw);
    assert_int_equal(c->in_channels, 2 * C + 1);
    hv15_cond hc = {.text = b->embeds, .text_mask = b->mask, .L = 1000, .text2 = b->embeds2, .text2_mask = b->mask2,
                    .L2 = 256, .image = image, .L_img = 729, .timestep = &t};
    ASSERT_OK(hv15_forward(m, in, 1, F, H, W, &hc, out));
    free(in);
}

static void run_case(const char *name, const char *transformer_case) {
    char p[256];
    gh_case c;
    snprintf(p, sizeof p, DATA "%s", name);
    gh_open(&c, p);
    snprintf(p, sizeof p, DATA "%s/model/transformer", transformer_case);
    hv15_transformer *m = hv15_load(p, NULL);
    if (!m) fail_msg("%s", cvx_last_error());
    flow_scheduler s;
    ASSERT_OK(flow_scheduler_load(&s, gh_path(&c, "model/scheduler/scheduler_config.json"), FLOW_FROM_CONFIG, 0));
    cvx_guider g;
    double win[2];
    ASSERT_OK(cvx_guider_load(gh_path(&c, "model/guider/guider_config.json"), &g, win));
    const int N = (int)gh_int(gh_json(&c, "call.num_inference_steps"));
    double *sg = cvx_malloc(sizeof(double) * N);
    flow_linear_sigmas(N, sg);
    ASSERT_OK(flow_scheduler_set_sigmas(&s, N, sg));
    free(sg);
    gh_expect_exact(&c, "timesteps", s.timesteps, (size_t)N);

    const cvx_tensor *il = gh_tensor(&c, "initial_latents");
    const int C = (int)il->shape[1], F = (int)il->shape[2], H = (int)il->shape[3], W = (int)il->shape[4];
    const size_t n = (size_t)il->numel;
    float *own_c[4], *own_u[4] = {0};
    branch bc = branch_of(&c, "", own_c), bu = {0};
    const int cfg = cvx_guider_active(&g) && cvx_guider_window_has(win, 0, N);
    assert_int_equal(cfg, gh_json(&c, "cfg") && json_object_get_boolean(gh_json(&c, "cfg")));
    if (cfg) bu = branch_of(&c, "negative_", own_u);
    float *condlat = gh_f32(&c, NULL, "cond_latents_concat"), *mask = gh_f32(&c, NULL, "mask_concat");
    float *image = gh_f32_opt(&c, "image_embeds");                   /* NULL: T2V (the pipeline's zeros) */

    /* I2V: the condition from the image through the VAE encoder */
    hv15_vae *v = hv15_vae_load(VAE_DIR, NULL);
    if (!v) fail_msg("%s", cvx_last_error());
    const double sf = hv15_vae_get_config(v)->scaling_factor;
    if (image) {
        const cvx_tensor *ip = gh_tensor(&c, "image_preprocessed");   // [1, 3, H, W]
        int Hi = (int)ip->shape[2], Wi = (int)ip->shape[3], fe, he, we;
        float *img = cvx_tensor_f32_dup(ip), *mom, *lat;
        ASSERT_OK(hv15_vae_encoded_shape(v, 1, Hi, Wi, &fe, &he, &we));
        mom = cvx_alloc_f32((size_t)2 * C * he * we);
        lat = cvx_alloc_f32((size_t)C * he * we);
        ASSERT_OK(hv15_vae_encode(v, img, 1, Hi, Wi, NULL, mom));
        vae_latent_dist(mom, C, (size_t)he * we, lat, NULL, NULL);
        for (size_t i = 0; i < (size_t)C * he * we; i++) lat[i] *= (float)sf;
        float *want = gh_f32(&c, NULL, "image_latents");
        gh_check_rel_l2(&c, "image_latents (encode mode · scaling)", lat, want, (size_t)C * he * we, 1e-5);
        /* cond latents: the image latents on frame 0, zeros after; mask 1 on frame 0 */
        float *built = cvx_alloc_f32(n), *mb = cvx_alloc_f32(n / C);
        memset(built, 0, sizeof(float) * n);
        memset(mb, 0, sizeof(float) * (n / C));
        for (int ch = 0; ch < C; ch++) memcpy(built + (size_t)ch * F * H * W, want + (size_t)ch * H * W, sizeof(float) * H * W);
        for (int i = 0; i < H * W; i++) mb[i] = 1.0f;
        gh_expect_exact(&c, "cond_latents_concat", built, n);
        gh_expect_exact(&c, "mask_concat", mb, n / C);
        free(img), free(mom), free(lat), free(want), free(built), free(mb);
    }

    /* each call from the stored latents */
    float *pc = cvx_alloc_f32(n), *pu = cvx_alloc_f32(n), *pred = cvx_alloc_f32(n), *want;
    char what[64];
    for (int i = 0; i < N; i++) {
        float *xb = gh_f32(&c, NULL, "step%d.latents_before", i);
        call(m, xb, condlat, mask, C, F, H, W, &bc, image, s.timesteps[i], pc);
        snprintf(what, sizeof what, cfg ? "step%d.noise_pred_cond" : "step%d.noise_pred", i);
        want = gh_f32(&c, NULL, "%s", what);
        gh_check_rel_l2(&c, what, pc, want, n, 1e-5);
        free(want);
        if (cfg) {
            call(m, xb, condlat, mask, C, F, H, W, &bu, image, s.timesteps[i], pu);
            snprintf(what, sizeof what, "step%d.noise_pred_uncond", i);
            want = gh_f32(&c, NULL, "%s", what);
            gh_check_rel_l2(&c, what, pu, want, n, 1e-5);
            free(want);
        }
        free(xb);
    }

    /* the loop from the initial noise */
    float *x = gh_f32(&c, NULL, "initial_latents"), *next = cvx_alloc_f32(n);
    flow_state *fs = flow_state_new(&s, n);
    for (int i = 0; i < N; i++) {
        call(m, x, condlat, mask, C, F, H, W, &bc, image, s.timesteps[i], pc);
        const int both = cvx_guider_active(&g) && cvx_guider_window_has(win, i, N);
        if (both) call(m, x, condlat, mask, C, F, H, W, &bu, image, s.timesteps[i], pu);
        cvx_guider_apply(&g, g.scale, both ? pu : NULL, pc, n, pred);
        flow_step(&s, fs, i, pred, x, n, next);
        memcpy(x, next, sizeof(float) * n);
        snprintf(what, sizeof what, "step%d.latents_after", i);
        want = gh_f32(&c, NULL, "%s", what);
        gh_check_rel_l2(&c, what, x, want, n, 1e-4);
        free(want);
    }
    want = gh_f32(&c, NULL, "final_latents");
    gh_check_rel_l2(&c, "final_latents (loop)", x, want, n, 1e-4);

    /* decode the stored final latents */
    float *z = cvx_alloc_f32(n);
    hv15_vae_unscale(v, want, n, z);
    gh_expect_exact(&c, "z", z, n);
    const int T = hv15_vae_decoded_frames(v, F), r = hv15_vae_get_config(v)->spatial_ratio;
    const size_t nv = (size_t)3 * T * H * r * W * r;
    float *video = cvx_alloc_f32(nv), *dw = gh_f32(&c, NULL, "decoded");
    ASSERT_OK(hv15_vae_decode(v, z, F, H, W, NULL, video));
    gh_check_rel_l2(&c, "decoded", video, dw, nv, 1e-5);
    const cvx_tensor *u8 = gh_tensor(&c, "frames_uint8");
    const size_t px = nv / 3;
    int worst = 0;
    for (int ch = 0; ch < 3; ch++)
        for (size_t i = 0; i < px; i++) {
            float f = video[ch * px + i] / 2 + 0.5f;
            f = f < 0 ? 0 : f > 1 ? 1 : f;
            int d = abs((int)lrintf(f * 255.0f) - (int)((const uint8_t *)u8->data)[i * 3 + ch]);
            worst = d > worst ? d : worst;
        }
    print_message("  %s frames_uint8 max |diff| = %d (tol 1); %d checks\n", name, worst, c.checks);
    if (worst > 1) fail_msg("%s: frames_uint8 differ by %d", name, worst);

    free(dw), free(video), free(z), free(want), free(x), free(next), free(pc), free(pu), free(pred);
    flow_state_free(fs);
    for (int k = 0; k < 4; k++) free(own_c[k]), free(own_u[k]);
    free(condlat), free(mask), free(image);
    hv15_vae_free(v);
    flow_scheduler_free(&s);
    hv15_free(m);
    gh_close(&c);
}

static void test_t2v_glyph(void **s) { (void)s; run_case("e2e_t2v_glyph", "e2e_t2v_glyph"); }
static void test_t2v_nocfg(void **s) { (void)s; run_case("e2e_t2v_nocfg", "e2e_t2v_glyph"); }
static void test_i2v(void **s) { (void)s; run_case("e2e_i2v", "e2e_i2v"); }

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t2v_glyph),
        cmocka_unit_test(test_t2v_nocfg),
        cmocka_unit_test(test_i2v),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
