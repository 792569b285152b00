/* The programs' side of issue 36 ("what a newcomer trips over"), on the embedded tiny models:
 *   - a batch: stage1 --prompts_file numbers its embeddings by line; stage2 / stage3
 *     --prompt_index N read those and number every output alike (latents, generation_config,
 *     video, checkpoint: a stopped prompt resumes to the same bytes); a missing number is one
 *     error line;
 *   - V2V without --frames: stage 1 takes the largest 4k+1 count the clip has and says so;
 *   - stage 2's "video ... -> latents [...]" line shows the shape the latents file has
 *     ([1, C, T, h, w]), for CogVideoX (whose loop runs [T, C, h, w]) and Wan;
 *   - a size that is not a multiple of 16 is refused with the nearest ones that are. */
#include "cli_harness.h"

#include <sys/stat.h>

#define COG "models/cogvideox-tiny-random"
#define WAN "models/wan2.1-tiny-random"

static int exists(const char *dir, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* "[1, a, b, c, d]" after `after` in s -> dims; 1 when found */
static int parse_dims(const char *s, const char *after, int64_t d[5]) {
    const char *p = strstr(s, after);
    long long v[5];
    if (!p || sscanf(p + strlen(after), "[%lld, %lld, %lld, %lld, %lld]", &v[0], &v[1], &v[2], &v[3], &v[4]) != 5)
        return 0;
    for (int i = 0; i < 5; i++) d[i] = v[i];
    return 1;
}

static void test_prompt_index_batch(void **state) {
    (void)state;
    char dir[64], path[256], cmd[2048], err[16384];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/prompts.txt", dir);
    const char *text = "a cat on a roof\n\n   \na dog in the sea\n";   /* prompts on lines 1 and 4 */
    tu_write(path, text, strlen(text));
    snprintf(cmd, sizeof cmd, "%s --quiet --prompts_file %s --model_dir " COG " --output_dir %s", s1, path, dir);
    tu_run_ok(cmd);
    assert_true(exists(dir, "stage1_embeddings_0001.safetensors") && exists(dir, "stage1_embeddings_0004.safetensors"));
    assert_false(exists(dir, "stage1_embeddings.safetensors"));
    /* before: stage 2 had no way in ("run stage1 first") */
    for (int n = 1; n <= 4; n += 3) {
        snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --num_inference_steps 2 --prompt_index %d", s2, dir, n);
        tu_run_ok(cmd);
        snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --prompt_index %d", s3, dir, n);
        tu_run_ok(cmd);
    }
    const char *want[] = {"stage2_latents_0001.safetensors", "stage2_latents_0004.safetensors",
                          "generation_config_0001.json", "generation_config_0004.json", "output_video_0001.mp4",
                          "output_video_0004.mp4", "generation_config.json"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!exists(dir, want[i])) fail_msg("%s: no %s", dir, want[i]);
    const char *not_want[] = {"stage2_latents.safetensors", "output_video.mp4", "stage2_checkpoint_0001.safetensors"};
    for (size_t i = 0; i < sizeof not_want / sizeof not_want[0]; i++)
        if (exists(dir, not_want[i])) fail_msg("%s: unexpected %s", dir, not_want[i]);
    /* the two prompts gave two different latents, each recorded in its own config */
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/stage2_latents_0001.safetensors", dir);
    snprintf(b, sizeof b, "%s/stage2_latents_0004.safetensors", dir);
    cvx_safetensors *fa = tu_open(a), *fb = tu_open(b);
    size_t na, nb;
    float *la = tu_f32(fa, "latents", &na), *lb = tu_f32(fb, "latents", &nb);
    assert_int_equal(na, nb);
    assert_true(memcmp(la, lb, na * sizeof *la) != 0);
    free(la), free(lb), cvx_st_close(fa), cvx_st_close(fb);
    snprintf(a, sizeof a, "%s/generation_config_0004.json", dir);
    assert_true(tu_genconfig_has(a, "stage2_latents_xxh64") && tu_genconfig_has(a, "prompts_file"));
    /* prompt 4 stopped after a step and resumed: its numbered checkpoint, the same bytes */
    snprintf(a, sizeof a, "%s/stage2_latents_0004.safetensors", dir);
    snprintf(b, sizeof b, "%s/uninterrupted.safetensors", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s && %s --quiet --input_dir %s --num_inference_steps 2 --prompt_index 4 "
             "--stop_after_steps 1", a, b, s2, dir);
    tu_run_ok(cmd);
    assert_true(exists(dir, "stage2_checkpoint_0004.safetensors"));
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --num_inference_steps 2 --prompt_index 4 --resume && "
             "cmp %s %s", s2, dir, a, b);
    tu_run_ok(cmd);
    assert_false(exists(dir, "stage2_checkpoint_0004.safetensors"));
    /* stage 3 checks the numbered latents against their own config: swapping them is refused */
    snprintf(cmd, sizeof cmd, "cp %s/stage2_latents_0001.safetensors %s/stage2_latents_0004.safetensors", dir, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --prompt_index 4", s3, dir);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  swapped latents: %s", err);
    assert_int_equal(tu_count_substr(err, "error:"), 1);
    /* a line without a prompt: one error line naming the file and the rule */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --prompt_index 2", s2, dir);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  %s", err);
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    assert_non_null(strstr(err, "stage1_embeddings_0002.safetensors: input file not found (--prompt_index 2"));
    tu_rmrf(dir);
}

static void test_v2v_default_frames(void **state) {
    (void)state;
    char dir[64], clip[128], out[128], cmd[2048], err[16384];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(clip, sizeof clip, "%s/clip", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    assert_int_equal(mkdir(clip, 0755), 0);
    /* a 12-frame clip: the 9 golden frames and 3 more */
    snprintf(cmd, sizeof cmd,
             "cp " GOLDEN "/e2e_v2v_5b/video/*.png %s/ && for i in 09 10 11; do cp %s/0000.png %s/00$i.png; done", clip,
             clip, clip);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --prompt 'a boat' --model_dir " COG " --video %s --output_dir %s", s1, clip, out);
    assert_int_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  %.*s\n", (int)strcspn(err, "\n"), err);
    assert_non_null(strstr(err, "12 frames; using the first 9 (the largest 4k+1 count; --frames N to choose)"));
    char cond[256];
    snprintf(cond, sizeof cond, "%s/stage1_conditioning.safetensors", out);
    cvx_safetensors *st = tu_open(cond);
    assert_string_equal(cvx_st_metadata(st, "frames"), "9");
    cvx_st_close(st);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --num_inference_steps 2 --strength 0.6", s2, out);
    tu_run_ok(cmd);   /* before: "--frames 12 ... e.g. 9 or 13" */
    /* a clip of a valid length: taken whole, nothing said */
    snprintf(cmd, sizeof cmd, "rm %s/0009.png %s/0010.png %s/0011.png && %s --prompt 'a boat' --model_dir " COG
             " --video %s --output_dir %s", clip, clip, clip, s1, clip, out);
    assert_int_equal(tu_run(cmd, err, sizeof err), 0);
    assert_null(strstr(err, "using the first"));
    tu_rmrf(dir);
}

/* CogVideoX1.5 video-to-video: the default count also keeps the latent frame count a multiple of
 * patch_size_t (upstream raises otherwise). The golden 1.5 model is I2V and ships no VAE weights: a
 * copy with a T2V transformer config takes the choice, then stops at the missing VAE file. */
static void test_v2v_default_frames_15(void **state) {
    (void)state;
    char dir[64], cmd[2048], err[16384];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(cmd, sizeof cmd,
             "mkdir %s/clip && cp " GOLDEN "/e2e_v2v_5b/video/*.png %s/clip/ && for i in 09 10 11; do cp "
             "%s/clip/0000.png %s/clip/00$i.png; done && cp -r " GOLDEN "/e2e_i2v_1.5/model %s/m && sed -i "
             "'s/\"in_channels\": *8/\"in_channels\": 4/' %s/m/transformer/config.json",
             dir, dir, dir, dir, dir, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --prompt 'a boat' --model_dir %s/m --video %s/clip --output_dir %s/out", s1, dir, dir,
             dir);
    tu_run(cmd, err, sizeof err);
    print_message("  %.*s\n", (int)strcspn(err, "\n"), err);
    /* 12 frames: 9 would make 3 latent frames (odd), so 5 (2 latent frames) */
    assert_non_null(strstr(err, "12 frames; using the first 5 (the largest 4k+1 count whose 2 latent frames divide "
                                "by 2; --frames N to choose)"));
    tu_rmrf(dir);
}

/* stage 2's size line names the shape its latents file has */
static void check_latents_line(const char *model, const char *size) {
    char dir[64], cmd[2048], err[16384], path[256];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'a fox' --model_dir %s --output_dir %s", s1, model, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --input_dir %s --num_inference_steps 1 %s", s2, dir, size);
    assert_int_equal(tu_run(cmd, err, sizeof err), 0);
    int64_t said[5], wrote[5];
    assert_true(parse_dims(err, "-> latents ", said));
    assert_true(parse_dims(err, "(latents ", wrote));
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cvx_safetensors *st = tu_open(path);
    const cvx_tensor *t = cvx_st_find(st, "latents");
    assert_non_null(t);
    assert_int_equal(t->ndim, 5);
    print_message("  %s: said [1, %lld, %lld, %lld, %lld], file [%lld, %lld, %lld, %lld, %lld]\n", model,
                  (long long)said[1], (long long)said[2], (long long)said[3], (long long)said[4],
                  (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2], (long long)t->shape[3],
                  (long long)t->shape[4]);
    for (int i = 0; i < 5; i++) assert_int_equal(said[i], t->shape[i]), assert_int_equal(wrote[i], t->shape[i]);
    assert_true(t->shape[1] != t->shape[2]);   /* channels and frames told apart */
    cvx_st_close(st);
    tu_rmrf(dir);
}

static void test_latents_line_layout(void **state) {
    (void)state;
    check_latents_line(COG, "");
    check_latents_line(WAN, "--frames 9 --height 48 --width 64");
}

static void test_size_error_suggests(void **state) {
    (void)state;
    char dir[64], cmd[2048], err[16384];
    tu_mkdtemp(dir, sizeof dir);
    struct { const char *model, *flags, *want; } cases[] = {
        {COG, "--frames 9 --height 240 --width 360",
         "--width 360: must be a positive multiple of 16 (VAE factor 8 × patch size 2), e.g. 352 or 368"},
        {COG, "--frames 9 --height 250 --width 352", "--height 250: must be a positive multiple of 16"},
        {WAN, "--frames 9 --height 48 --width 70", "e.g. 64 or 80"},
        {WAN, "--frames 9 --height 8 --width 64", "--height 8: must be a positive multiple of 16 (VAE factor 8 × "
                                                   "patch size 2), e.g. 16 or 32"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'a fox' --model_dir %s --output_dir %s", s1, cases[i].model,
                 dir);
        tu_run_ok(cmd);
        snprintf(cmd, sizeof cmd, "%s --input_dir %s --num_inference_steps 1 %s", s2, dir, cases[i].flags);
        assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
        print_message("  %s", err);
        if (!strstr(err, cases[i].want)) fail_msg("no '%s' in: %s", cases[i].want, err);
        assert_int_equal(tu_count_substr(err, "error:"), 1);
        assert_false(exists(dir, "stage2_latents.safetensors"));
    }
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_index_batch),
        cmocka_unit_test(test_v2v_default_frames),
        cmocka_unit_test(test_v2v_default_frames_15),
        cmocka_unit_test(test_latents_line_layout),
        cmocka_unit_test(test_size_error_suggests),
    };
    return cmocka_run_group_tests_name("e2e_newcomer", tests, cli_setup, NULL);
}
