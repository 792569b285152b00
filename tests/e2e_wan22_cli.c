/* Wan 2.2 through the three programs (stage1 → stage2 → stage3 and their files) on the golden tiny
 * models (tests/data/golden_wan22/e2e_*): latents ≤ 1e-4 and frames ≤ 1e-3 of the upstream
 * pipelines for TI2V-5B-style T2V and I2V (stage 1 --image) and A14B-style T2V and I2V (two
 * experts, --guidance_scale_2); an A14B stage 2 stopped after the expert switch and resumed gives
 * the same bytes; a Wan 2.1 latent file to the 2.2 VAE is one line and no output. The API runs the
 * same cases in tests/e2e_wan22.c. */
#include "cli_harness.h"

#include <sys/stat.h>

#define WG "tests/data/golden_wan22"

/* The case's stage-2 flags (steps, size, guidance, guidance_2, seed) */
static void stage2_flags(const char *name, char *out, size_t n) {
    char steps[32], fr[32], h[32], w[32], g[32], g2[32], seed[32];
    cli_call_str(WG, name, "num_inference_steps", steps, sizeof steps);
    cli_call_str(WG, name, "num_frames", fr, sizeof fr);
    cli_call_str(WG, name, "height", h, sizeof h);
    cli_call_str(WG, name, "width", w, sizeof w);
    cli_call_str(WG, name, "guidance_scale", g, sizeof g);
    cli_call_str(WG, name, "guidance_scale_2", g2, sizeof g2);
    cli_call_str(WG, name, "seed", seed, sizeof seed);
    snprintf(out, n, "--num_inference_steps %s --frames %s --height %s --width %s --guidance_scale %s --seed %s%s%s",
             steps, fr, h, w, g, seed, g2[0] ? " --guidance_scale_2 " : "", g2);
}

/* One case through the three programs into dir. */
static void run_case(const char *name, const char *dir) {
    char img[256], fr[32], h[32], w[32], extra[600], flags[400];
    char cmd[4096], path[512];
    cli_call_str(WG, name, "image", img, sizeof img);
    cli_call_str(WG, name, "num_frames", fr, sizeof fr);
    cli_call_str(WG, name, "height", h, sizeof h);
    cli_call_str(WG, name, "width", w, sizeof w);
    extra[0] = 0;
    if (img[0]) snprintf(extra, sizeof extra, "--image " WG "/%s/%s --frames %s --height %s --width %s", name, img, fr, h, w);
    cli_stage1(WG, name, NULL, dir, extra);
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", dir);
    cli_check(WG, name, path, "prompt_embeds", "prompt_embeds", 1e-4);
    stage2_flags(name, flags, sizeof flags);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s %s", s2, dir, flags);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cli_check(WG, name, path, "latents", "final_latents", 1e-4);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_video %s/v.mp4 --output_frames %s/frames.safetensors",
             s3, dir, dir, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/frames.safetensors", dir);
    cli_check_frames(WG, name, path);
}

static void program_case(const char *name) {
    char dir[256];
    tu_mkdtemp(dir, sizeof dir);
    run_case(name, dir);
    tu_rmrf(dir);
}

static void test_ti2v_t2v(void **s) { (void)s; program_case("e2e_ti2v_t2v"); }
static void test_ti2v_i2v(void **s) { (void)s; program_case("e2e_ti2v_i2v"); }
static void test_a14b_i2v(void **s) { (void)s; program_case("e2e_a14b_i2v"); }

/* A14B T2V; stage 2 stopped after step 3 (experts H H L: past the switch) and resumed: the same
 * bytes; its 16-channel latents to the TI2V model's 2.2 VAE: one line, no output. */
static void test_a14b_t2v_resume_and_bad_latents(void **state) {
    (void)state;
    const char *name = "e2e_a14b_t2v";
    char dir[256], dir2[256], cmd[4096], path[512], path2[512], flags[400];
    tu_mkdtemp(dir, sizeof dir);
    tu_mkdtemp(dir2, sizeof dir2);
    run_case(name, dir);
    stage2_flags(name, flags, sizeof flags);
    snprintf(cmd, sizeof cmd, "cp %s/stage1_embeddings.safetensors %s/generation_config.json %s/", dir, dir, dir2);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s %s --stop_after_steps 3", s2, dir2, flags);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s %s --resume", s2, dir2, flags);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    snprintf(path2, sizeof path2, "%s/stage2_latents.safetensors", dir2);
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", path, path2);
    tu_run_ok(cmd);

    char err[8192];
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir " WG "/e2e_ti2v_t2v/model --output_video %s/bad.mp4",
             s3, dir, dir);
    int rc = tu_run(cmd, err, sizeof err);
    print_message("  exit %d: %s", rc, err);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err, "expects latent_channels = 48"));
    struct stat st;
    snprintf(path, sizeof path, "%s/bad.mp4", dir);
    assert_int_not_equal(stat(path, &st), 0);
    tu_rmrf(dir);
    tu_rmrf(dir2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ti2v_t2v), cmocka_unit_test(test_ti2v_i2v), cmocka_unit_test(test_a14b_i2v),
        cmocka_unit_test(test_a14b_t2v_resume_and_bad_latents),
    };
    return cmocka_run_group_tests(tests, cli_setup, NULL);
}
