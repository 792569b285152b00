/* LTX-Video's LTXConditionPipeline end to end on the golden tiny models
 * (tests/data/golden_ltx/e2e_condition, e2e_condition_distilled; README §7): through the API
 * (cvx_encode_conditioning with conditions, cvx_sample, cvx_decode) and through the three
 * programs (stage 1 --condition PATH:FRAME:STRENGTH, stage 2 --timesteps /
 * --image_cond_noise_scale, stage 3). e2e_condition: two image conditions (frame 0 strength 1;
 * frame 8 strength 0.8 → extra tokens), the per-step re-noising draws (image_cond_noise_scale
 * 0.15), the linear-quadratic default schedule, CFG 3; e2e_condition_distilled: the 0.9.7
 * distilled timesteps, no CFG, no re-noising. Checked: the timesteps (exact), the final latents
 * (1e-4), the decoded video (1e-3; its decode noise continues the generator after every draw),
 * a stopped and resumed stage 2 (the same bytes), and the bad inputs' one line. */
#include "api_harness.h"
#include "cli_harness.h"

#include "pipeline/cvx.h"

#define LG "tests/data/golden_ltx"

typedef struct {
    const char *name, *prompt, *negative;
    int frames, height, width, steps, n_cond;
    double guidance, fps, noise_scale;
    uint64_t seed;
    double timesteps[16];
    int n_timesteps;
    cvx_condition_spec cond[4];
    char path[4][300];
} ccase;

static void ccase_open(gh_case *c, ccase *k, const char *name) {
    memset(k, 0, sizeof *k);
    char dir[200];
    snprintf(dir, sizeof dir, LG "/%s", name);
    gh_open(c, dir);
    json_object *call = gh_json(c, "call"), *o;
    k->name = name;
    k->prompt = gh_str(gh_get(call, "prompt"));
    k->negative = json_object_object_get_ex(call, "negative_prompt", &o) && o ? gh_str(o) : "";
    k->frames = (int)gh_int(gh_get(call, "num_frames"));
    k->height = (int)gh_int(gh_get(call, "height"));
    k->width = (int)gh_int(gh_get(call, "width"));
    k->guidance = gh_num(gh_get(call, "guidance_scale"));
    k->fps = gh_num(gh_get(call, "frame_rate"));
    k->noise_scale = gh_num(gh_get(call, "image_cond_noise_scale"));
    k->seed = (uint64_t)gh_int(gh_get(call, "seed"));
    if (json_object_object_get_ex(call, "timesteps", &o)) {
        k->n_timesteps = (int)gh_len(o);
        for (int i = 0; i < k->n_timesteps; i++) k->timesteps[i] = gh_num(gh_at(o, (size_t)i));
        k->steps = k->n_timesteps;
    } else {
        k->steps = (int)gh_int(gh_get(call, "num_inference_steps"));
    }
    json_object *conds = gh_get(call, "conditions");
    k->n_cond = (int)gh_len(conds);
    for (int i = 0; i < k->n_cond; i++) {
        json_object *ci = gh_at(conds, (size_t)i);
        snprintf(k->path[i], sizeof k->path[i], "%s/%s", dir, gh_str(gh_get(ci, "image")));
        k->cond[i] = (cvx_condition_spec){k->path[i], (int)gh_int(gh_get(ci, "frame_index")),
                                          gh_num(gh_get(ci, "strength"))};
    }
}

static cvx_model *open_model(const char *name) {
    char dir[200];
    snprintf(dir, sizeof dir, LG "/%s/pipeline_model", name);
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = dir, .threads = 2});
    if (!m) fail_msg("%s: %s", dir, cvx_last_error());
    return m;
}

static float *mask_f32(gh_case *c, const char *name) {
    const cvx_tensor *t = gh_tensor(c, "%s", name);
    float *f = malloc(sizeof(float) * 128);
    for (int k = 0; k < 128; k++) f[k] = (float)gh_i64_at(t, k);
    return f;
}

static void api_case(const char *name) {
    gh_case c;
    ccase k;
    ccase_open(&c, &k, name);
    cvx_model *m = open_model(name);
    assert_string_equal(cvx_model_get_info(m)->pipeline_class, "LTXConditionPipeline");
    /* stage 1: the conditions' latent distributions */
    cvx_conditioning cond;
    cvx_conditioning_params cp = {.height = k.height, .width = k.width, .max_frames = k.frames,
                                  .conditions = k.cond, .n_conditions = k.n_cond};
    if (cvx_encode_conditioning(m, &cp, NULL, NULL, &cond)) fail_msg("%s", cvx_last_error());
    assert_int_equal(cond.mode, CVX_MODE_COND);
    assert_int_equal(cond.n_items, k.n_cond);
    assert_int_equal(cond.T, k.n_cond);   /* images: one latent frame each */
    {   /* LTXConditionPipeline(image=): a condition at frame 0 with strength 1 */
        cvx_conditioning one;
        cvx_conditioning_params ip = {.image = k.path[0], .height = k.height, .width = k.width,
                                      .max_frames = k.frames};
        if (cvx_encode_conditioning(m, &ip, NULL, NULL, &one)) fail_msg("%s", cvx_last_error());
        assert_int_equal(one.mode, CVX_MODE_COND);
        assert_int_equal(one.n_items, 1);
        assert_true(one.items[0].frame_index == 0 && one.items[0].strength == 1.0);
        const size_t hw = (size_t)one.h * one.w;   /* condition 0's rows of the two-condition file */
        for (int ch = 0; ch < one.C; ch++)
            assert_memory_equal(one.mean + ch * hw, cond.mean + (size_t)ch * cond.T * hw, hw * sizeof(float));
        cvx_conditioning_free(&one);
    }
    /* stage 2 from the golden embeddings (no CFG: the prompt's alone) */
    const int cfg = k.guidance > 1;
    float *pe = gh_f32(&c, NULL, "prompt_embeds"), *ne = cfg ? gh_f32(&c, NULL, "negative_prompt_embeds") : NULL;
    float *pm = mask_f32(&c, "prompt_attention_mask"), *nm = cfg ? mask_f32(&c, "negative_attention_mask") : NULL;
    cvx_cond_set cs = {.n = 1};
    cs.t[0] = (cvx_cond_tensor){.name = "prompt_attention_mask", .prompt = pm, .negative = cfg ? nm : pm, .L = 128,
                                .D = 1, .is_mask = 1};
    cvx_embeddings gold = {pe, cfg ? ne : pe, 128, 32};
    ah_step_log rec = {0};
    cvx_sample_params sp = {.frames = k.frames, .height = k.height, .width = k.width, .guidance_scale = k.guidance,
                            .seed = k.seed, .frame_rate = k.fps, .conditioning = &cond, .cond_more = &cs,
                            .image_cond_noise_scale = k.noise_scale, .image_cond_noise_set = 1,
                            .timesteps = k.n_timesteps ? k.timesteps : NULL, .n_timesteps = k.n_timesteps,
                            .num_inference_steps = k.n_timesteps ? 0 : k.steps, .on_step = ah_log_step,
                            .on_step_user = &rec};
    cvx_latents lat;
    if (cvx_sample(m, &sp, &gold, NULL, NULL, &lat)) fail_msg("%s", cvx_last_error());
    ah_check_timesteps(&c, &rec);
    size_t n;
    float *fin = gh_f32(&c, &n, "final_latents");
    assert_int_equal(n, (size_t)lat.C * lat.T * lat.h * lat.w);
    gh_check_rel_l2(&c, "final_latents", lat.data, fin, n, 1e-4);
    /* stage 3: the decode noise is the generator's draw after the loop's */
    cvx_decode_params dp = {.generator = lat.generator};
    cvx_frames fr;
    if (cvx_decode(m, &dp, lat.data, 1, lat.C, lat.T, lat.h, lat.w, "latents", NULL, NULL, &fr))
        fail_msg("%s", cvx_last_error());
    size_t nd;
    float *dec = gh_f32(&c, &nd, "decoded");
    assert_int_equal(nd, (size_t)3 * fr.T * fr.H * fr.W);
    gh_check_rel_l2(&c, "decoded", fr.data[0], dec, nd, 1e-3);
    cvx_frames_free(&fr);
    cvx_latents_free(&lat);

    /* bad inputs: one clear line each */
    sp.on_step = NULL;
    double rising[2] = {500, 900};
    sp.timesteps = rising, sp.n_timesteps = 2, sp.num_inference_steps = 0;
    assert_int_equal(cvx_sample(m, &sp, &gold, NULL, NULL, &lat), -1);
    assert_non_null(strstr(cvx_last_error(), "strictly descending"));
    double big[2] = {1500, 900};
    sp.timesteps = big;
    assert_int_equal(cvx_sample(m, &sp, &gold, NULL, NULL, &lat), -1);
    assert_non_null(strstr(cvx_last_error(), "num_train_timesteps"));
    sp.timesteps = k.timesteps, sp.n_timesteps = 3, sp.num_inference_steps = 4;
    assert_int_equal(cvx_sample(m, &sp, &gold, NULL, NULL, &lat), -1);
    assert_non_null(strstr(cvx_last_error(), "--timesteps gives 3 values"));

    free(dec), free(fin), free(pe), free(ne), free(pm), free(nm);
    cvx_conditioning_free(&cond);
    cvx_model_close(m);
    gh_close(&c);
}

static void test_api_condition(void **s) { (void)s; api_case("e2e_condition"); }
static void test_api_condition_distilled(void **s) { (void)s; api_case("e2e_condition_distilled"); }

/* ---- the three programs ---- */

static void cli_case(const char *name) {
    gh_case c;
    ccase k;
    ccase_open(&c, &k, name);
    char dir[64], cmd[8192], qp[1100], qn[1100], conds[2048] = "", model[200], path[300], lat2[300], flags[1024];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(model, sizeof model, LG "/%s/pipeline_model", name);
    tu_shell_quote(qp, sizeof qp, k.prompt);
    tu_shell_quote(qn, sizeof qn, k.negative);
    for (int i = 0; i < k.n_cond; i++)
        snprintf(conds + strlen(conds), sizeof conds - strlen(conds), " --condition %s:%d:%.17g", k.path[i],
                 k.cond[i].frame_index, k.cond[i].strength);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt %s --negative_prompt %s --model_dir %s --output_dir %s%s --frames "
             "%d --height %d --width %d", s1, qp, qn, model, dir, conds, k.frames, k.height, k.width);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", dir);
    cli_check(LG, name, path, "prompt_embeds", "prompt_embeds", 1e-4);
    int at = snprintf(flags, sizeof flags, "--guidance_scale %g --seed %llu --fps %g --image_cond_noise_scale %g",
                      k.guidance, (unsigned long long)k.seed, k.fps, k.noise_scale);
    if (k.n_timesteps) {
        at += snprintf(flags + at, sizeof flags - at, " --timesteps ");
        for (int i = 0; i < k.n_timesteps; i++)
            at += snprintf(flags + at, sizeof flags - at, "%s%.17g", i ? "," : "", k.timesteps[i]);
    } else {
        snprintf(flags + at, sizeof flags - at, " --num_inference_steps %d", k.steps);
    }
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --input_dir %s %s", s2, model, dir, flags);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cli_check(LG, name, path, "latents", "final_latents", 1e-4);
    char frames[300];
    snprintf(frames, sizeof frames, "%s/frames.safetensors", dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --input_dir %s --output_frames %s", s3, model, dir, frames);
    tu_run_ok(cmd);
    cli_check(LG, name, frames, "decoded", "decoded", 1e-3);

    /* stop after 2 steps, resume: the same latents file (the re-noising draws continue the generator) */
    snprintf(lat2, sizeof lat2, "%s/full.safetensors", dir);
    assert_int_equal(rename(path, lat2), 0);
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --input_dir %s %s --stop_after_steps 2", s2, model, dir, flags);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --input_dir %s %s --resume", s2, model, dir, flags);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", path, lat2);
    if (system(cmd) != 0) fail_msg("%s: the resumed run's latents differ from the straight run's", name);
    tu_rmrf(dir);
    gh_close(&c);
}

static void test_cli_condition(void **s) { (void)s; cli_case("e2e_condition"); }
static void test_cli_condition_distilled(void **s) { (void)s; cli_case("e2e_condition_distilled"); }

/* bad --condition / --timesteps values: one line, non-zero exit, nothing written */
static void test_cli_bad_inputs(void **s) {
    (void)s;
    char dir[64], cmd[4096], err[4096];
    const char *model = LG "/e2e_condition/pipeline_model";
    tu_mkdtemp(dir, sizeof dir);
    static const char *const bad[] = {
        "--condition " LG "/e2e_condition/condition0.png:0",           /* no strength */
        "--condition " LG "/e2e_condition/condition0.png:x:1",         /* frame not a number */
        "--condition " LG "/e2e_condition/condition0.png:0:1.5",       /* strength above 1 */
        "--condition /nonexistent.png:0:1",                             /* no file */
        "--condition " LG "/e2e_condition/condition0.png:0:1 --image " LG "/e2e_condition/condition0.png",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s %s --frames 9 --height 64 "
                 "--width 64", s1, model, dir, bad[i]);
        assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
        print_message("  %s\n    -> %s", bad[i], err);
        assert_int_equal(tu_count_substr(err, "\n"), 1);
    }
    char path[300];
    snprintf(path, sizeof path, "%s/stage1_conditioning.safetensors", dir);
    assert_int_not_equal(access(path, F_OK), 0);
    /* a text-to-video run: --image_cond_noise_scale and a bad --timesteps list refused */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s", s1, model, dir);
    tu_run_ok(cmd);
    static const char *const bad2[] = {"--image_cond_noise_scale 0.1", "--timesteps 1000,a", "--timesteps 900,950",
                                       "--timesteps 1000,500 --num_inference_steps 3"};
    for (size_t i = 0; i < sizeof bad2 / sizeof bad2[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --input_dir %s --frames 9 --height 64 --width 64 %s", s2,
                 model, dir, bad2[i]);
        assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
        print_message("  %s\n    -> %s", bad2[i], err);
        assert_int_equal(tu_count_substr(err, "\n"), 1);
    }
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    assert_int_not_equal(access(path, F_OK), 0);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_condition),
        cmocka_unit_test(test_api_condition_distilled),
        cmocka_unit_test(test_cli_condition),
        cmocka_unit_test(test_cli_condition_distilled),
        cmocka_unit_test(test_cli_bad_inputs),
    };
    return cmocka_run_group_tests(tests, cli_setup, NULL);
}
