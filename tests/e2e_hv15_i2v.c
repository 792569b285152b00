/* HunyuanVideo-1.5 image-to-video end to end (HunyuanVideo15ImageToVideoPipeline, diffusers v0.36.0)
 * against the golden e2e_i2v run (shared/golden_hv15 README §6): through the API (cvx_encode_conditioning
 * / cvx_encode / cvx_sample / cvx_decode) and through the three programs and their files.
 * The I2V model: tests/hv15_harness.h's directory of symlinks (the case's guider 6 and scheduler
 * shift 7). The 56×40 image goes to the 48×48 bucket of target_size 48 (resize "crop", Pillow
 * LANCZOS).
 * Checked: image_embeds and the image latents (mode × scaling_factor) 1e-5, the branches'
 * embeddings 1e-4, the timesteps exact, final latents 1e-4, decoded video and frames 1e-3; the
 * CLI's stage-1 files and latents the same; refusals (an image to the T2V model, no image to the
 * I2V model) one line. The guider config's step window and guidance_rescale reach the plan: with
 * start 0.5 the first half of the steps run the conditional branch alone (guidance 1 in the step
 * record), the others CFG; the rescaled run differs from the plain one. */
#include "api_harness.h"
#include "hv15_harness.h"

#include <math.h>
#include <stdlib.h>

#include "pipeline/cvx.h"
#include "fileio.h"
#include "safetensors.h"

static char model[300], image[1200];

/* the I2V model directory of symlinks (removed by teardown) */
static int setup(void **state) {
    (void)state;
    tu_mkdtemp(model, sizeof model);
    hv15_i2v_model(model, NULL);
    hv15_i2v_image(image, sizeof image);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rmrf(model);
    return 0;
}

/* the model with its own guider/guider_config.json (a copy of the directory's symlinks) */
static void model_with_guider(char *dir, size_t n, const char *guider_json) {
    char cmd[2048], path[512];
    tu_mkdtemp(dir, n);
    snprintf(cmd, sizeof cmd, "cp -P %s/* %s/ && rm %s/guider && mkdir %s/guider", model, dir, dir, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/guider/guider_config.json", dir);
    tu_write(path, guider_json, strlen(guider_json));
}

/* the image latents the pipeline concatenates: mean × scaling_factor (float32) */
static void check_image_latents(gh_case *c, const float *mean, size_t n) {
    size_t ng;
    float *want = gh_f32(c, &ng, "image_latents"), *got = malloc(n * sizeof(float));
    assert_int_equal(ng, n);
    for (size_t i = 0; i < n; i++) got[i] = mean[i] * 1.03682f;
    gh_check_rel_l2(c, "image_latents", got, want, n, 1e-5);
    free(got);
    free(want);
}

static void on_guidance(void *user, const cvx_step_info *info) {
    if (info->step < 4) ((double *)user)[info->step] = info->guidance;
}

static void test_api(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, HV15_I2V_CASE);
    json_object *call = gh_json(&c, "call");
    const char *prompt = gh_str(gh_get(call, "prompt")), *negative = gh_str(gh_get(call, "negative_prompt"));
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = 2});
    if (!m) fail_msg("%s: %s", model, cvx_last_error());

    /* stage 1: the image (no size given: the bucket), then the texts */
    cvx_conditioning cond;
    const int frames = (int)gh_int(gh_get(call, "num_frames"));
    if (cvx_encode_conditioning(m, &(cvx_conditioning_params){.image = image, .max_frames = frames}, NULL, NULL, &cond))
        fail_msg("%s", cvx_last_error());
    assert_int_equal(cond.mode, CVX_MODE_I2V);
    assert_int_equal(cond.height, 48);
    assert_int_equal(cond.width, 48);
    assert_int_equal(cond.frames, frames);
    assert_int_equal(cond.T, 1);
    size_t n;
    float *ie = gh_f32(&c, &n, "image_embeds");
    assert_int_equal(n, (size_t)cond.image_L * cond.image_D);
    gh_check_rel_l2(&c, "image_embeds", cond.image_embeds, ie, n, 1e-5);
    free(ie);
    check_image_latents(&c, cond.mean, (size_t)cond.C * cond.h * cond.w);

    cvx_embeddings emb;
    if (cvx_encode(m, &(cvx_encode_params){.prompt = prompt, .negative_prompt = negative}, NULL, NULL, &emb))
        fail_msg("%s", cvx_last_error());
    const char *texts[2] = {negative, prompt};
    cvx_cond_set more;
    if (cvx_encode_texts_more(m, texts, NULL, 2, NULL, NULL, &more)) fail_msg("%s", cvx_last_error());
    ah_cond_set_split(&more);
    float *pe = gh_f32(&c, &n, "prompt_embeds"), *ne = gh_f32(&c, NULL, "negative_prompt_embeds");
    gh_check_rel_l2(&c, "prompt_embeds", emb.prompt, pe, n, 1e-4);
    gh_check_rel_l2(&c, "negative_prompt_embeds", emb.negative, ne, n, 1e-4);
    free(pe), free(ne);
    for (int k = 0; k < more.n; k++) {
        const cvx_cond_tensor *t = &more.t[k];
        float *want = gh_f32(&c, NULL, "%s", t->name);
        gh_check_rel_l2(&c, t->name, t->prompt, want, (size_t)t->L * t->D, 1e-4);
        free(want);
    }

    /* stage 2: the guider (6) and the shift (7) from the model's configs */
    cvx_sample_params sp = cvx_sample_default_params(m);
    assert_true(sp.guidance_scale < 0 || sp.guidance_scale == 6.0);
    sp.frames = frames, sp.height = cond.height, sp.width = cond.width, sp.num_inference_steps = (int)gh_int(gh_get(call, "num_inference_steps"));
    sp.seed = (uint64_t)gh_int(gh_get(call, "seed"));
    sp.cond_more = &more, sp.conditioning = &cond;
    ah_step_log log = {0};
    sp.on_step = ah_log_step, sp.on_step_user = &log;
    cvx_latents lat;
    if (cvx_sample(m, &sp, &emb, NULL, NULL, &lat)) fail_msg("%s", cvx_last_error());
    ah_check_timesteps(&c, &log);
    float *fin = gh_f32(&c, &n, "final_latents");
    assert_int_equal(n, (size_t)lat.C * lat.T * lat.h * lat.w);
    gh_check_rel_l2(&c, "final_latents", lat.data, fin, n, 1e-4);

    /* stage 3 */
    cvx_decode_params dp = {0};
    cvx_frames fr;
    if (cvx_decode(m, &dp, lat.data, 1, lat.C, lat.T, lat.h, lat.w, "latents", NULL, NULL, &fr))
        fail_msg("%s", cvx_last_error());
    float *dec = gh_f32(&c, &n, "decoded");
    assert_int_equal(n, (size_t)3 * fr.T * fr.H * fr.W);
    gh_check_rel_l2(&c, "decoded", fr.data[0], dec, n, 1e-3);
    gh_check_frames_np(&c, fr.data[0], fr.T, fr.H, fr.W, 1e-3);
    cvx_frames_free(&fr);
    free(dec), free(fin);
    cvx_latents_free(&lat);
    cvx_embeddings_free(&emb);
    cvx_cond_set_free(&more);
    cvx_conditioning_free(&cond);
    cvx_model_close(m);
    gh_close(&c);
}

/* a tensor of a file as floats (I64 masks converted) against the golden one */
static void check_file(const char *path, const char *name, const char *gold, double tol, float scale) {
    cvx_safetensors *st = tu_open(path), *g = tu_open(HV15_I2V_CASE "/expected.safetensors");
    const cvx_tensor *t = cvx_st_find(st, name), *tg = cvx_st_find(g, gold);
    if (!t || !tg) fail_msg("%s: tensor %s missing", path, t ? gold : name);
    assert_int_equal(t->numel, tg->numel);
    float *a = cvx_tensor_f32_dup(t), *b = cvx_tensor_f32_dup(tg);
    for (size_t i = 0; i < (size_t)t->numel; i++) a[i] *= scale;
    ASSERT_REL_L2(a, b, (size_t)t->numel, tol);
    free(a), free(b);
    cvx_st_close(st);
    cvx_st_close(g);
}

static void test_programs(void **state) {
    (void)state;
    char s1[256], s2[256], s3[256], dir[256], cmd[8192], q[1024], path[512], err[4096];
    tu_program(s1, sizeof s1, "stage1");
    tu_program(s2, sizeof s2, "stage2");
    tu_program(s3, sizeof s3, "stage3");
    tu_mkdtemp(dir, sizeof dir);
    gh_case c;
    gh_open(&c, HV15_I2V_CASE);
    tu_shell_quote(q, sizeof q, gh_str(gh_get(gh_json(&c, "call"), "prompt")));
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --prompt %s --negative_prompt '' --image %s --frames 5 "
             "--output_dir %s", s1, model, q, image, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage1_conditioning.safetensors", dir);
    check_file(path, "image_embeds", "image_embeds", 1e-5, 1.0f);
    check_file(path, "latent_mean", "image_latents", 1e-5, 1.03682f);
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", dir);
    check_file(path, "prompt_embeds", "prompt_embeds", 1e-4, 1.0f);
    check_file(path, "negative_prompt_embeds_2", "negative_prompt_embeds_2", 1e-4, 1.0f);
    /* stage 2 takes frames and size from the conditioning file */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --num_inference_steps 3 --seed 46", s2, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    check_file(path, "latents", "final_latents", 1e-4, 1.0f);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_frames %s/frames.safetensors", s3, dir, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/frames.safetensors", dir);
    check_file(path, "decoded", "decoded", 1e-3, 1.0f);

    /* refusals: one line each, nothing written */
    char dir2[256];
    tu_mkdtemp(dir2, sizeof dir2);
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir " HV15_T2V_MODEL " --prompt a --image %s --output_dir %s", s1,
             image, dir2);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "HunyuanVideo15ImageToVideoPipeline"));
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    assert_int_equal(tu_count_entries(dir2), 0);
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --prompt a --output_dir %s", s1, model, dir2);
    tu_run_ok(cmd);   /* the texts alone: stage 2 refuses them for the I2V model */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --num_inference_steps 1", s2, dir2);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "give stage 1 an --image"));
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir2);
    assert_false(cvx_is_file(path));
    tu_rmrf(dir2);
    gh_close(&c);
    tu_rmrf(dir);
}

static void test_guider_window(void **state) {
    (void)state;
    char dir[300];
    model_with_guider(dir, sizeof dir,
                      "{\"_class_name\": \"ClassifierFreeGuidance\", \"guidance_scale\": 6.0, \"start\": 0.5}");
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = dir, .threads = 2});
    if (!m) fail_msg("%s", cvx_last_error());
    cvx_conditioning cond;
    cvx_embeddings emb;
    cvx_cond_set more;
    const char *texts[2] = {"", "a red ball"};
    if (cvx_encode_conditioning(m, &(cvx_conditioning_params){.image = image, .max_frames = 5}, NULL, NULL, &cond) ||
        cvx_encode(m, &(cvx_encode_params){.prompt = texts[1], .negative_prompt = texts[0]}, NULL, NULL, &emb) ||
        cvx_encode_texts_more(m, texts, NULL, 2, NULL, NULL, &more))
        fail_msg("%s", cvx_last_error());
    ah_cond_set_split(&more);
    cvx_sample_params sp = cvx_sample_default_params(m);
    sp.frames = 5, sp.height = 48, sp.width = 48, sp.num_inference_steps = 4, sp.seed = 1;
    sp.cond_more = &more, sp.conditioning = &cond;
    double gs[4] = {0};
    sp.on_step = on_guidance, sp.on_step_user = gs;
    cvx_latents a, b;
    if (cvx_sample(m, &sp, &emb, NULL, NULL, &a)) fail_msg("%s", cvx_last_error());
    assert_true(gs[0] == 1.0 && gs[1] == 1.0 && gs[2] == 6.0 && gs[3] == 6.0);
    sp.guidance_rescale = 0.7;   /* --guidance_rescale over the config's 0 */
    if (cvx_sample(m, &sp, &emb, NULL, NULL, &b)) fail_msg("%s", cvx_last_error());
    const size_t n = (size_t)a.C * a.T * a.h * a.w;
    assert_true(memcmp(a.data, b.data, n * sizeof(float)) != 0);
    cvx_latents_free(&a), cvx_latents_free(&b);
    cvx_embeddings_free(&emb);
    cvx_cond_set_free(&more);
    cvx_conditioning_free(&cond);
    cvx_model_close(m);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_programs),
        cmocka_unit_test(test_guider_window),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
