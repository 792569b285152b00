/* The CogVideoXPipeline loop (stage2/sampler.c) on the golden end-to-end cases
 * (tests/data/golden/e2e_{2b,5b,5b_dyncfg}, README §7), from their stored prompt embeddings
 * (the golden parity of the loop itself, initial noise, guidance per step, latents after every
 * step and final, is rows of tests/golden_cases.c):
 *   - resume: a run stopped after 2 of 4 steps and resumed from its checkpoint gives latents
 *     bit-identical to an uninterrupted run (DDIM and DPM), also with checkpoint_every 3 and
 *     a stop at step 1; a checkpoint from other settings is refused naming the setting;
 *   - CogVideoX1.5 padding: one no-CFG DDIM step at t = 999 equals −forward(noise) on the padded
 *     latent grid bit for bit, and the output drops the first frame;
 *   - latent shape rules (CogVideoX1.5 padding frame, validation errors), output permutation,
 *     embedding checks. */
#include "cogvideox_loop_harness.h"

#include "rng.h"
#include "stage2/sampler.h"
#include "stage2/cogvideox_family.h"
#include "stage2/scheduler_ddpm.h"
#include "stage2/cogvideox.h"

/* ---- resume ---- */
static void fingerprint_of(const cl_case *c, cvx_fingerprint *fp) {
    memset(fp, 0, sizeof(*fp));
    cvx_fingerprint_set(fp, "model", "%s", c->dir);
    cvx_fingerprint_set(fp, "seed", "%llu", (unsigned long long)c->r.seed);
    cvx_fingerprint_set(fp, "num_inference_steps", "%d", c->r.num_inference_steps);
}

static int run(cl_case *c, const cvx_checkpointing *ck, float *lat, cvx_sample_result *res) {
    cvx_scheduler s;
    cl_scheduler(c, &s);
    int rc = cogvideox_sample_loop(c->m, 0, &s, &c->p, NULL, &c->sh, c->prompt, c->negative, c->L, ck, NULL, NULL, lat, res);
    cvx_scheduler_free(&s);
    return rc;
}

static void check_resume(const char *dir, int every, int stop_at) {
    cl_case c;
    cl_open(&c, dir, 0);
    char tmpl[] = "/tmp/cvx_s2_resume_XXXXXX", path[256];
    assert_non_null(mkdtemp(tmpl));
    snprintf(path, sizeof path, "%s/stage2_checkpoint.safetensors", tmpl);
    cvx_fingerprint fp;
    fingerprint_of(&c, &fp);
    size_t n = c.sh.numel;
    float *full = malloc(n * sizeof(float)), *part = malloc(n * sizeof(float)), *resumed = malloc(n * sizeof(float));
    cvx_sample_result res;

    /* uninterrupted, no checkpoints */
    assert_int_equal(run(&c, NULL, full, &res), 0);
    assert_int_equal(res.steps_done, c.r.num_inference_steps);

    /* stopped after `stop_at` steps, then resumed */
    cvx_checkpointing ck = {path, every, 0, stop_at, &fp};
    assert_int_equal(run(&c, &ck, part, &res), 0);
    assert_int_equal(res.steps_done, stop_at);
    assert_true(access(path, F_OK) == 0);
    ck.resume = 1;
    ck.stop_after_steps = 0;
    assert_int_equal(run(&c, &ck, resumed, &res), 0);
    assert_int_equal(res.resumed_from, stop_at);
    assert_int_equal(res.steps_done, c.r.num_inference_steps);
    assert_memory_equal(resumed, full, n * sizeof(float));
    printf("  %s: stop after %d (checkpoint every %d) + resume == uninterrupted, bit for bit\n", dir, stop_at, every);

    /* the checkpoint of a run with another seed is refused, naming the setting */
    ck.stop_after_steps = stop_at;
    ck.resume = 0;
    assert_int_equal(run(&c, &ck, part, &res), 0);
    cvx_fingerprint_set(&fp, "seed", "%llu", (unsigned long long)c.r.seed + 1);
    ck.resume = 1;
    ck.stop_after_steps = 0;
    assert_int_equal(run(&c, &ck, resumed, &res), -1);
    printf("  refused: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "seed="));
    /* and a missing checkpoint is an error too */
    unlink(path);
    assert_int_equal(run(&c, &ck, resumed, &res), -1);
    assert_non_null(strstr(cvx_last_error(), "no checkpoint"));

    rmdir(tmpl);
    free(full); free(part); free(resumed);
    cl_close(&c);
}

static void test_resume_ddim(void **state) { (void)state; check_resume("e2e_2b", 1, 2); }
static void test_resume_dpm(void **state) { (void)state; check_resume("e2e_5b", 1, 2); }
static void test_resume_dpm_dyncfg(void **state) {
    (void)state;
    check_resume("e2e_5b_dyncfg", 1, 2);
    check_resume("e2e_5b_dyncfg", 3, 1);   /* the stop writes a checkpoint even off the K grid */
    check_resume("e2e_5b_dyncfg", 1, 3);
}


/* CogVideoX1.5 (patch_size_t = 2) on 9 frames: 3 latent frames, padded to 4 for the loop, the
 * FIRST dropped at the end. One DDIM step without CFG at t = 999 (ā = 0, ā_prev = 1) gives
 * prev = x0 = −model output, so the loop must equal one hand-made forward on the seeded noise
 * [1, 4, C, 6, 8] with the rotary tables of the padded grid, bit for bit. */
static void test_15_padding_loop(void **state) {
    (void)state;
    cogvideox_transformer *m = cogvideox_load(GOLDEN "/transformer_1.5/model/transformer", NULL);
    if (!m) fail_msg("%s", cvx_last_error());
    const cogvideox_config *cfg = cogvideox_get_config(m);
    cvx_scheduler s;
    if (cvx_scheduler_load(&s, GOLDEN "/scheduler_1.5/model/scheduler/scheduler_config.json", &cvx_scheduler_ddim))
        fail_msg("%s", cvx_last_error());
    cvx_loop_request p_req = {.frames = 9, .height = 48, .width = 64, .num_inference_steps = 1, .guidance_scale = 1.0, .seed = 5};
    cvx_loop_params p = {.req = &p_req, .vae_scale_spatial = 8, .vae_scale_temporal = 4};
    cvx_latent_shape sh;
    assert_int_equal(cogvideox_latent_shape_for(cfg, &p, 0, &sh), 0);
    assert_int_equal(sh.frames, 4);
    assert_int_equal(sh.pad_frames, 1);
    gh_case gc;
    gh_open(&gc, "transformer_1.5");
    float *text = gh_f32(&gc, NULL, "encoder_hidden_states");   /* [2, 226, 32]: use the first */
    const int L = cfg->max_text_seq_length;

    size_t n = sh.numel;
    float *lat = malloc(n * sizeof(float));
    cvx_sample_result res;
    if (cogvideox_sample_loop(m, 0, &s, &p, NULL, &sh, text, NULL, L, NULL, NULL, NULL, lat, &res)) fail_msg("%s", cvx_last_error());

    float *noise = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    cvx_generator g;
    cvx_generator_seed(&g, p_req.seed);
    cvx_randn(&g, noise, n);
    size_t nt = (size_t)cogvideox_num_video_tokens(cfg, sh.frames, sh.height, sh.width);
    float *rc = malloc(nt * cfg->attention_head_dim * sizeof(float)), *rs = malloc(nt * cfg->attention_head_dim * sizeof(float));
    assert_int_equal(cogvideox_rope_tables(cfg, sh.frames, sh.height, sh.width, rc, rs), 0);
    int64_t t = 999;
    if (cogvideox_forward(m, noise, 1, sh.frames, sh.height, sh.width, text, L, &t, rc, rs, out))
        fail_msg("%s", cvx_last_error());
    for (size_t i = 0; i < n; i++) want[i] = -out[i];
    assert_memory_equal(lat, want, n * sizeof(float));

    /* the written layout: [1, C, 3, h, w] from frames 1..3 */
    float *o = malloc(n * sizeof(float));
    cogvideox_latents_to_output(lat, &sh, o);
    size_t hw = (size_t)sh.height * sh.width;
    for (int c = 0; c < sh.channels; c++)
        for (int f = 0; f < 3; f++)
            assert_memory_equal(o + ((size_t)c * 3 + f) * hw, lat + ((size_t)(f + 1) * sh.channels + c) * hw,
                                hw * sizeof(float));
    printf("  1.5: 9 frames -> 4 latent frames (1 padding), loop == hand-made forward, first frame dropped\n");
    free(o); free(rc); free(rs); free(noise); free(out); free(want); free(lat); free(text);
    gh_close(&gc);
    cvx_scheduler_free(&s);
    cogvideox_free(m);
}

/* ---- shapes and checks without a model ---- */
static cogvideox_config cfg_15(void) {
    cogvideox_config c = {0};
    c.in_channels = c.out_channels = 16;
    c.patch_size = 2;
    c.patch_size_t = 2;
    c.text_embed_dim = 4096;
    c.max_text_seq_length = 226;
    return c;
}

static void test_latent_shapes(void **state) {
    (void)state;
    cogvideox_config c = cfg_15();
    cvx_loop_request p_req = {.frames = 81, .height = 768, .width = 1360, .num_inference_steps = 50, .guidance_scale = 6};
    cvx_loop_params p = {.req = &p_req, .vae_scale_spatial = 8, .vae_scale_temporal = 4};
    cvx_latent_shape sh;
    assert_int_equal(cogvideox_latent_shape_for(&c, &p, 0, &sh), 0);   /* 21 latent frames: odd -> 22 */
    assert_int_equal(sh.frames, 22);
    assert_int_equal(sh.pad_frames, 1);
    assert_int_equal(sh.height, 96);
    assert_int_equal(sh.width, 170);
    p_req.frames = 85;                                                  /* 22: no padding */
    assert_int_equal(cogvideox_latent_shape_for(&c, &p, 0, &sh), 0);
    assert_int_equal(sh.frames, 22);
    assert_int_equal(sh.pad_frames, 0);
    c.patch_size_t = 0;                                             /* 1.0 model: never padded */
    p_req.frames = 49;
    p_req.height = 480;
    p_req.width = 720;
    assert_int_equal(cogvideox_latent_shape_for(&c, &p, 0, &sh), 0);
    assert_int_equal(sh.frames, 13);
    assert_int_equal(sh.pad_frames, 0);
    assert_int_equal(sh.numel, (size_t)13 * 16 * 60 * 90);

    p_req.frames = 50;
    assert_int_equal(cogvideox_latent_shape_for(&c, &p, 0, &sh), -1);
    printf("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "--frames 50"));
    p_req.frames = 49;
    p_req.height = 488;                                                 /* multiple of 8, not of 16 */
    assert_int_equal(cogvideox_latent_shape_for(&c, &p, 0, &sh), -1);
    printf("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "--height 488"));
    p_req.height = 480;
    p_req.width = 0;
    assert_int_equal(cogvideox_latent_shape_for(&c, &p, 0, &sh), -1);
    assert_non_null(strstr(cvx_last_error(), "--width 0"));
    p_req.width = 720;
    c.in_channels = 32;
    assert_int_equal(cogvideox_latent_shape_for(&c, &p, 0, &sh), -1);
    assert_non_null(strstr(cvx_last_error(), "image-to-video"));
}

static void test_output_layout(void **state) {
    (void)state;
    /* [1, F=3, C=2, 1, 2] with one padding frame -> [1, C=2, T=2, 1, 2] */
    cvx_latent_shape sh = {.frames = 3, .pad_frames = 1, .channels = 2, .height = 1, .width = 2};
    sh.numel = 12;
    float lat[12], out[8];
    for (int f = 0; f < 3; f++)
        for (int ch = 0; ch < 2; ch++)
            for (int x = 0; x < 2; x++) lat[(f * 2 + ch) * 2 + x] = (float)(100 * f + 10 * ch + x);
    cogvideox_latents_to_output(lat, &sh, out);
    static const float want[8] = {100, 101, 200, 201, 110, 111, 210, 211};
    assert_memory_equal(out, want, sizeof want);
}

static void test_embedding_checks(void **state) {
    (void)state;
    cogvideox_config c = cfg_15();
    float dummy = 0;
    cvx_tensor a = {.name = "prompt_embeds", .dtype = CVX_F32, .ndim = 3, .shape = {1, 226, 4096}, .data = &dummy};
    cvx_tensor b = a;
    b.name = "negative_prompt_embeds";
    assert_int_equal(cogvideox_check_embeddings(&c, &a, &b, "in.safetensors"), 0);
    b.shape[2] = 4095;
    assert_int_equal(cogvideox_check_embeddings(&c, &a, &b, "in.safetensors"), -1);
    printf("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "negative_prompt_embeds"));
    assert_non_null(strstr(cvx_last_error(), "text_embed_dim 4096"));
    b.shape[2] = 4096;
    a.shape[1] = 77;
    assert_int_equal(cogvideox_check_embeddings(&c, &a, &b, "in.safetensors"), -1);
    assert_non_null(strstr(cvx_last_error(), "max_text_seq_length"));
    a.shape[1] = 226;
    assert_int_equal(cogvideox_check_embeddings(&c, &a, NULL, "in.safetensors"), -1);
    assert_non_null(strstr(cvx_last_error(), "missing"));
    a.dtype = CVX_I64;
    assert_int_equal(cogvideox_check_embeddings(&c, &a, &b, "in.safetensors"), -1);
    assert_non_null(strstr(cvx_last_error(), "dtype"));
}

static void test_guidance(void **state) {
    (void)state;
    /* README §7 values for n = 4 */
    assert_true(fabs(cvx_guidance_at(6, 1, 4, 999) - 4.7559) < 1e-4);
    assert_true(fabs(cvx_guidance_at(6, 1, 4, 749) - 1.9380) < 1e-4);
    assert_true(fabs(cvx_guidance_at(6, 1, 4, 499) - 1.0922) < 1e-4);
    assert_true(fabs(cvx_guidance_at(6, 1, 4, 249) - 1.0103) < 1e-4);
    assert_true(cvx_guidance_at(6, 0, 4, 999) == 6.0);
    assert_true(cvx_uses_cfg(6));
    assert_false(cvx_uses_cfg(1.0));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_latent_shapes),  cmocka_unit_test(test_output_layout),
        cmocka_unit_test(test_embedding_checks), cmocka_unit_test(test_guidance),
        cmocka_unit_test(test_resume_ddim),
        cmocka_unit_test(test_resume_dpm),     cmocka_unit_test(test_resume_dpm_dyncfg),
        cmocka_unit_test(test_15_padding_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
