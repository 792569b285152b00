/* HunyuanVideo-1.5 text-to-video through the three programs (stage1 -> stage2 -> stage3 and their
 * files) on models/hunyuanvideo15-tiny-random against the golden e2e_t2v run (its guider 6 and
 * shift 5 are the model's configs): embeddings and latents <= 1e-4, frames <= 1e-3; a stopped and
 * resumed stage 2 gives the same bytes; stage 2 reads the staged TPU pipeline's stage-1 file
 * (the four tensors per branch as F32 of bf16 values, masks included, dtype_info "bfloat16");
 * bad inputs (HunyuanVideo embeddings to a Wan transformer and the reverse, a glyph tensor of the
 * wrong width) get one line and leave no output behind. */
#include "cli_harness.h"

#define MODEL "models/hunyuanvideo15-tiny-random"
#define HG "tests/data/golden_hv15"
#define GOLD HG "/e2e_t2v/expected.safetensors"
#define WAN_MODEL "tests/data/golden_wan/e2e_t2v_1.3b/model"
#define PROMPT "'A cat walks on the grass, realistic' --negative_prompt 'low quality, blurry'"
#define FLAGS "--num_inference_steps 4 --frames 9 --height 32 --width 48 --seed 42"

static void stage1(const char *dir) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt " PROMPT " --model_dir " MODEL " --output_dir %s", s1, dir);
    tu_run_ok(cmd);
}

static void test_t2v_programs(void **state) {
    (void)state;
    char dir[256], dir2[256], path[512];
    tu_mkdtemp(dir, sizeof dir);
    tu_mkdtemp(dir2, sizeof dir2);
    stage1(dir);
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", dir);
    const char *names[4] = {"prompt_embeds", "prompt_embeds_mask", "prompt_embeds_2", "prompt_embeds_mask_2"};
    for (int k = 0; k < 4; k++) {
        char neg[64];
        snprintf(neg, sizeof neg, "negative_%s", names[k]);
        cli_check(HG, "e2e_t2v", path, names[k], names[k], 1e-4);
        cli_check(HG, "e2e_t2v", path, neg, neg, 1e-4);
    }
    /* the rest of the run; stopped after 2 of 4 steps, resumed: the same bytes */
    cli_stage23_resumed(HG, "e2e_t2v", dir, dir2, FLAGS);
    tu_rmrf(dir);
    tu_rmrf(dir2);
}

/* The staged TPU pipeline's stage-1 file: every tensor (masks too: the pipeline casts them to the
 * bf16 transformer dtype) saved as F32 of bf16 values, dtype_info "bfloat16". Stage 2 reads it;
 * the result equals the API's on the same values (final latents within 1e-2 of the f32 run). */
static void test_tpu_file(void **state) {
    (void)state;
    char dir[256], cmd[2048], path[512];
    tu_mkdtemp(dir, sizeof dir);
    cvx_safetensors *g = tu_open(GOLD);
    cvx_st_writer *w = cvx_stw_new();
    char info[2048] = "{";
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 4; k++) {
            static const char *const names[4] = {"prompt_embeds", "prompt_embeds_mask", "prompt_embeds_2",
                                                 "prompt_embeds_mask_2"};
            char name[64];
            snprintf(name, sizeof name, "%s%s", b ? "negative_" : "", names[k]);
            const cvx_tensor *t = cvx_st_find(g, name);
            assert_non_null(t);
            float *v = cli_values(t);
            for (int64_t i = 0; i < t->numel; i++) v[i] = cvx_bf16_to_f32(cvx_f32_to_bf16(v[i]));
            ASSERT_OK(cvx_stw_add_f32(w, name, CVX_F32, t->ndim, t->shape, v));
            free(v);
            snprintf(info + strlen(info), sizeof info - strlen(info), "%s\"%s\": \"bfloat16\"", b || k ? ", " : "", name);
        }
    strcat(info, "}");
    ASSERT_OK(cvx_stw_metadata(w, "dtype_info", info));
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", dir);
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);
    cvx_st_close(g);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir " MODEL " " FLAGS, s2, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cli_check(HG, "e2e_t2v", path, "latents", "final_latents", 1e-2);
    tu_rmrf(dir);
}

static void test_bad_inputs(void **state) {
    (void)state;
    char dir[256], wdir[256], cmd[4096], path[512];
    tu_mkdtemp(dir, sizeof dir);
    tu_mkdtemp(wdir, sizeof wdir);
    stage1(dir);
    /* HunyuanVideo embeddings given to a Wan transformer */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_dir %s/out --model_dir " WAN_MODEL " " FLAGS, s2, dir,
             dir);
    snprintf(path, sizeof path, "%s/out/stage2_latents.safetensors", dir);
    cli_expect_refused(cmd, "tensor 'prompt_embeds' has shape [1, 1000, 32], expected [1, 512, 32]", path);
    /* Wan embeddings given to the HunyuanVideo-1.5 transformer */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir " WAN_MODEL " --output_dir %s", s1, wdir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_dir %s/out --model_dir " MODEL " " FLAGS, s2, wdir,
             wdir);
    snprintf(path, sizeof path, "%s/out/stage2_latents.safetensors", wdir);
    cli_expect_refused(cmd, "expected [1, 1000, 32] (HunyuanVideo15Pipeline's MLLM length 1000)", path);
    /* a glyph tensor of the wrong width: prompt_embeds_2 [1, 256, 23] instead of 24 */
    {
        char src[512], dst[512];
        snprintf(src, sizeof src, "%s/stage1_embeddings.safetensors", dir);
        cvx_safetensors *st = tu_open(src);
        cvx_st_writer *w = cvx_stw_new();
        for (int i = 0; i < cvx_st_count(st); i++) {
            const cvx_tensor *t = cvx_st_tensor(st, i);
            float *v = cli_values(t);
            int64_t shape[4];
            memcpy(shape, t->shape, sizeof(int64_t) * t->ndim);
            if (!strcmp(t->name, "prompt_embeds_2")) shape[2] = 23;
            ASSERT_OK(cvx_stw_add_f32(w, t->name, CVX_F32, t->ndim, shape, v));
            free(v);
        }
        snprintf(dst, sizeof dst, "%s/bad/stage1_embeddings.safetensors", dir);
        snprintf(cmd, sizeof cmd, "mkdir -p %s/bad", dir);
        tu_run_ok(cmd);
        ASSERT_OK(cvx_stw_write(w, dst));
        cvx_stw_free(w);
        cvx_st_close(st);
    }
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s/bad --model_dir " MODEL " " FLAGS, s2, dir);
    snprintf(path, sizeof path, "%s/bad/stage2_latents.safetensors", dir);
    cli_expect_refused(cmd, "tensor 'prompt_embeds_2' has shape [1, 256, 23], expected [1, 256, 24]", path);
    /* frames not 4k+1 */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir " MODEL " --frames 10 --height 32 --width 48", s2,
             dir);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cli_expect_refused(cmd, "--frames 10: the frame count must be 4k+1", path);
    tu_rmrf(dir);
    tu_rmrf(wdir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t2v_programs),
        cmocka_unit_test(test_tpu_file),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, cli_setup, NULL);
}
