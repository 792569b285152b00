/* LTX-Video (LTXPipeline) through the three programs on the golden tiny models
 * (tests/data/golden_ltx/e2e_t2v*): the embeddings (1e-4) and masks (exact) stage 1 writes, stage
 * 2's latents (1e-4), stage 3's frames (1e-3) — e2e_t2v_tsvae's decode noise continues stage 2's
 * generator through the latents file's 'generator_state' —; a stopped and resumed stage 2 gives
 * the same bytes; e2e_i2v (the image through stage 1's conditioning file); the embeddings of one family refused by the other's model with one line. */
#include "cli_harness.h"

#define LG "tests/data/golden_ltx"

/* the case's whole model: pipeline_model/ where model/ holds only what the stage tests read */
static const char *model_of(const char *name) {
    static char buf[300];
    snprintf(buf, sizeof buf, LG "/%s/pipeline_model", name);
    if (access(buf, F_OK) != 0) snprintf(buf, sizeof buf, LG "/%s/model", name);
    return buf;
}

static void run_case(const char *name, const char *flags) {
    char dir[64], cmd[4096], lat[200], frames[200], gc[1024], lat2[200];
    tu_mkdtemp(dir, sizeof dir);
    cli_stage1(LG, name, model_of(name), dir, "");
    snprintf(lat, sizeof lat, "%s/stage1_embeddings.safetensors", dir);
    cli_check(LG, name, lat, "prompt_embeds", "prompt_embeds", 1e-4);
    cli_check(LG, name, lat, "negative_prompt_embeds", "negative_prompt_embeds", 1e-4);
    cli_check(LG, name, lat, "prompt_attention_mask", "prompt_attention_mask", 0);
    cli_check(LG, name, lat, "negative_prompt_attention_mask", "negative_attention_mask", 0);
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --input_dir %s %s", s2, model_of(name), dir, flags);
    tu_run_ok(cmd);
    snprintf(lat, sizeof lat, "%s/stage2_latents.safetensors", dir);
    cli_check(LG, name, lat, "latents", "final_latents", 1e-4);
    snprintf(frames, sizeof frames, "%s/frames.safetensors", dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --input_dir %s --output_frames %s", s3, model_of(name), dir,
             frames);
    tu_run_ok(cmd);
    cli_check(LG, name, frames, "decoded", "decoded", 1e-3);

    /* stop after 2 steps, resume: the same latents file */
    snprintf(lat2, sizeof lat2, "%s/full.safetensors", dir);
    snprintf(cmd, sizeof cmd, "mv %s %s", lat, lat2);
    assert_int_equal(system(cmd), 0);
    snprintf(gc, sizeof gc, "%s --quiet --model_dir %s --input_dir %s %s", s2, model_of(name), dir, flags);
    snprintf(cmd, sizeof cmd, "%s --stop_after_steps 2", gc);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --resume", gc);
    tu_run_ok(cmd);
    if (!cli_same_file(lat, lat2)) fail_msg("%s: the resumed run's latents differ from the straight run's", name);
    tu_rmrf(dir);
}

static void test_t2v_090(void **s) {
    (void)s;
    run_case("e2e_t2v", "--frames 9 --height 64 --width 96 --num_inference_steps 4 --guidance_scale 3 --seed 42");
}

static void test_t2v_tsvae(void **s) {
    (void)s;
    run_case("e2e_t2v_tsvae", "--frames 9 --height 64 --width 64 --num_inference_steps 4 --guidance_scale 3 "
                              "--guidance_rescale 0.7 --fps 24 --seed 43");
}

/* LTXImageToVideoPipeline through the programs: stage 1 encodes the image, stage 2 samples it first */
static void test_i2v(void **s) {
    (void)s;
    char dir[64], cmd[4096], path[300];
    tu_mkdtemp(dir, sizeof dir);
    const char *model = LG "/e2e_i2v/pipeline_model";
    cli_stage1(LG, "e2e_i2v", model, dir, "--image " LG "/e2e_i2v/image.png --height 64 --width 96");
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --input_dir %s --frames 9 --num_inference_steps 4 "
             "--guidance_scale 3 --seed 44", s2, model, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cli_check(LG, "e2e_i2v", path, "latents", "final_latents", 1e-4);
    snprintf(path, sizeof path, "%s/frames.safetensors", dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --input_dir %s --output_frames %s", s3, model, dir, path);
    tu_run_ok(cmd);
    cli_check(LG, "e2e_i2v", path, "decoded", "decoded", 1e-3);
    tu_rmrf(dir);
}

/* LTX embeddings to a Wan model, and Wan's to an LTX model: one line, no latents written */
static void test_foreign_embeddings(void **s) {
    (void)s;
    char dir[64], cmd[4096], err[4096], path[300];
    tu_mkdtemp(dir, sizeof dir);
    cli_stage1(LG, "e2e_t2v", model_of("e2e_t2v"), dir, "");
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir tests/data/golden_wan/e2e_t2v_1.3b/model --input_dir %s "
             "--frames 5 --height 16 --width 16 --num_inference_steps 2", s2, dir);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  LTX embeddings, Wan model: %s", err);
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    assert_int_not_equal(access(path, F_OK), 0);
    tu_rmrf(dir);

    tu_mkdtemp(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir tests/data/golden_wan/e2e_t2v_1.3b/model --output_dir %s",
             s1, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir " LG "/e2e_t2v/model --input_dir %s --frames 9 --height 64 "
             "--width 96 --num_inference_steps 2", s2, dir);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  Wan embeddings, LTX model: %s", err);
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    assert_int_not_equal(access(path, F_OK), 0);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t2v_090),
        cmocka_unit_test(test_t2v_tsvae),
        cmocka_unit_test(test_i2v),
        cmocka_unit_test(test_foreign_embeddings),
    };
    return cmocka_run_group_tests(tests, cli_setup, NULL);
}
