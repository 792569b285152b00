/* End to end: the three programs chained through their files on the golden tiny models
 * reproduce upstream's CogVideoXPipeline (embeddings and latents ≤ 1e-4, decoded frames ≤ 1e-3
 * relative L2), for DDIM (2b-style), DPM (5b-style) and DPM with dynamic CFG; and `make
 * pipeline` re-runs only the stages whose inputs or settings changed. */
#include "cli_harness.h"

#include <math.h>
#include <sys/stat.h>

static void run_case(const char *name) {
    cli_case_call c;
    cli_case_call_load(&c, name);
    char dir[256], cmd[4096], qp[1100], qn[1100], model[512], path[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(model, sizeof model, GOLDEN "/%s/model", name);
    tu_shell_quote(qp, sizeof qp, c.prompt);
    tu_shell_quote(qn, sizeof qn, c.negative);

    snprintf(cmd, sizeof cmd, "%s --quiet --prompt %s --negative_prompt %s --model_dir %s --output_dir %s", s1, qp, qn,
             model, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd,
             "%s --quiet --input_dir %s --output_dir %s --model_dir %s --num_inference_steps %lld --guidance_scale %g "
             "--seed %lld --frames %lld --height %lld --width %lld %s",
             s2, dir, dir, model, (long long)c.steps, c.guidance, (long long)c.seed, (long long)c.frames,
             (long long)c.height, (long long)c.width, c.dynamic ? "--use_dynamic_cfg" : "");
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --output_video %s/video.mp4 --output_frames %s/frames.safetensors",
             s3, dir, model, dir, dir);
    tu_run_ok(cmd);

    snprintf(path, sizeof path, GOLDEN "/%s/expected.safetensors", name);
    cvx_safetensors *gold = tu_open(path);

    /* stage 1 */
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", dir);
    cvx_safetensors *e = tu_open(path);
    size_t n;
    float *got = tu_f32(e, "prompt_embeds", &n), *want = tu_f32(gold, "prompt_embeds", NULL);
    ASSERT_REL_L2(got, want, n, 1e-4);
    free(got); free(want);
    got = tu_f32(e, "negative_prompt_embeds", &n);
    want = tu_f32(gold, "negative_prompt_embeds", NULL);
    ASSERT_REL_L2(got, want, n, 1e-4);
    free(got); free(want);
    cvx_st_close(e);

    /* stage 2: ours is [B, C, T, H, W], the golden pipeline's [B, T, C, H, W] */
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cvx_safetensors *l = tu_open(path);
    const cvx_tensor *lt = cvx_st_find(l, "latents");
    assert_non_null(lt);
    assert_int_equal(lt->ndim, 5);
    const cvx_tensor *gt = cvx_st_find(gold, "final_latents");
    int64_t B = gt->shape[0], T = gt->shape[1], C = gt->shape[2], H = gt->shape[3], W = gt->shape[4];
    assert_true(lt->shape[0] == B && lt->shape[1] == C && lt->shape[2] == T && lt->shape[3] == H && lt->shape[4] == W);
    got = cvx_tensor_f32_dup(lt);
    want = cvx_tensor_f32_dup(gt);
    float *perm = cvx_alloc_f32(gt->numel);
    for (int64_t t = 0; t < T; t++)
        for (int64_t ch = 0; ch < C; ch++)
            memcpy(perm + ((ch * T + t) * H * W), want + ((t * C + ch) * H * W), sizeof(float) * (size_t)(H * W));
    ASSERT_REL_L2(got, perm, (size_t)gt->numel, 1e-4);
    free(got); free(want); free(perm);
    cvx_st_close(l);

    /* stage 3: decoder output and post-processed frames */
    snprintf(path, sizeof path, "%s/frames.safetensors", dir);
    cvx_safetensors *fr = tu_open(path);
    const cvx_tensor *ft = cvx_st_find(fr, "decoded");
    assert_non_null(ft);
    const cvx_tensor *dt = cvx_st_find(gold, "decoded");
    assert_int_equal(ft->numel, dt->numel);
    got = cvx_tensor_f32_dup(ft);
    want = cvx_tensor_f32_dup(dt);
    ASSERT_REL_L2(got, want, (size_t)dt->numel, 1e-3);
    /* frames_np = clamp(x/2 + 0.5, 0, 1) as [B, F, H, W, 3] */
    const cvx_tensor *np = cvx_st_find(gold, "frames_np");
    assert_int_equal(np->numel, dt->numel);
    float *post = gh_frames_np(got, dt->shape[2], dt->shape[3] * dt->shape[4]), *wantnp = cvx_tensor_f32_dup(np);
    ASSERT_REL_L2(post, wantnp, (size_t)np->numel, 1e-3);
    free(got); free(want); free(post); free(wantnp);
    cvx_st_close(fr);
    cvx_st_close(gold);

    snprintf(path, sizeof path, "%s/video.mp4", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 1000);
    tu_rmrf(dir);
}

static void test_e2e_2b_ddim(void **state) { (void)state; run_case("e2e_2b"); }
static void test_e2e_5b_dpm(void **state) { (void)state; run_case("e2e_5b"); }
static void test_e2e_5b_dynamic_cfg(void **state) { (void)state; run_case("e2e_5b_dyncfg"); }

/* `make pipeline` through real make dependencies: a stage-3 setting re-runs only stage 3,
 * a stage-2 setting stages 2 and 3, the prompt all three. */
static void test_make_reruns_only_what_changed(void **state) {
    (void)state;
    char dir[256], base[1024], cmd[2048];
    const char *b = getenv("BUILD");
    tu_mkdtemp(dir, sizeof dir);
    snprintf(base, sizeof base, "make -s --no-print-directory pipeline BIN=%s/bin OUT=%s STEPS=2 THREADS=1",
             b && b[0] ? b : "build", dir);
    snprintf(cmd, sizeof cmd, "%s CRF=20 >/dev/null", base);
    tu_run_ok(cmd);
    double t1 = tu_mtime(dir, "stage1_embeddings.safetensors"), t2 = tu_mtime(dir, "stage2_latents.safetensors"),
           t3 = tu_mtime(dir, "output_video.mp4");
    snprintf(cmd, sizeof cmd, "%s CRF=20 >/dev/null", base);  /* nothing changed: nothing runs */
    tu_run_ok(cmd);
    assert_true(tu_mtime(dir, "output_video.mp4") == t3);
    snprintf(cmd, sizeof cmd, "%s CRF=30 >/dev/null", base);  /* stage-3 setting */
    tu_run_ok(cmd);
    assert_true(tu_mtime(dir, "stage1_embeddings.safetensors") == t1);
    assert_true(tu_mtime(dir, "stage2_latents.safetensors") == t2);
    assert_true(tu_mtime(dir, "output_video.mp4") > t3);
    t3 = tu_mtime(dir, "output_video.mp4");
    snprintf(cmd, sizeof cmd, "%s CRF=30 SEED=7 >/dev/null", base);  /* stage-2 setting */
    tu_run_ok(cmd);
    assert_true(tu_mtime(dir, "stage1_embeddings.safetensors") == t1);
    assert_true(tu_mtime(dir, "stage2_latents.safetensors") > t2);
    assert_true(tu_mtime(dir, "output_video.mp4") > t3);
    snprintf(cmd, sizeof cmd, "%s CRF=30 SEED=7 PROMPT='another prompt' >/dev/null", base);
    tu_run_ok(cmd);
    assert_true(tu_mtime(dir, "stage1_embeddings.safetensors") > t1);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e2e_2b_ddim),
        cmocka_unit_test(test_e2e_5b_dpm),
        cmocka_unit_test(test_e2e_5b_dynamic_cfg),
        cmocka_unit_test(test_make_reruns_only_what_changed),
    };
    return cmocka_run_group_tests_name("e2e_pipeline", tests, cli_setup, NULL);
}
