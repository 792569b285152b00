/* f32 on any x86-64 CPU, end to end: the three programs on the tiny CogVideoX-2b and Wan 2.1 golden
 * models in f32, once on this CPU's own path and once acting as an AVX2-only CPU (CVX_ISA=avx2),
 * write identical stage files (every tensor's bytes: embeddings, latents, decoded frames). The runs are also
 * checked against the golden latents (1e-4), so both paths are right, not merely equal. Without
 * AVX-512 the two runs take the same path: the comparison is skipped and says so. */
#include "golden_harness.h"
#include "config.h"
#include "cpu.h"

/* the tensors of two safetensors files: the same names, dtypes, shapes and bytes (the metadata
 * may differ: it names the input files' paths) */
static void assert_same_tensors(const char *a, const char *b) {
    cvx_safetensors *x = tu_open(a), *y = tu_open(b);
    assert_int_equal(cvx_st_count(x), cvx_st_count(y));
    for (int i = 0; i < cvx_st_count(x); i++) {
        const cvx_tensor *t = cvx_st_tensor(x, i), *u = cvx_st_find(y, t->name);
        if (!u) fail_msg("%s: no tensor '%s' (it is in %s)", b, t->name, a);
        assert_int_equal(t->dtype, u->dtype);
        assert_int_equal(t->ndim, u->ndim);
        assert_memory_equal(t->shape, u->shape, sizeof(int64_t) * (size_t)t->ndim);
        assert_int_equal(t->nbytes, u->nbytes);
        if (memcmp(t->data, u->data, t->nbytes))
            fail_msg("%s differs between the AVX-512 and the AVX2 path (%s, %s)", t->name, a, b);
    }
    cvx_st_close(x), cvx_st_close(y);
}

/* ours [1, C, T, H, W] against the golden final latents ([1, T, C, H, W] from CogVideoXPipeline,
 * [1, C, T, H, W] from WanPipeline) */
static void check_latents(const char *file, const char *golden) {
    cvx_safetensors *l = tu_open(file), *g = tu_open(golden);
    const cvx_tensor *lt = cvx_st_find(l, "latents"), *gt = cvx_st_find(g, "final_latents");
    assert_non_null(lt);
    assert_non_null(gt);
    assert_int_equal(lt->numel, gt->numel);
    const int tc = gt->shape[1] != lt->shape[1];   /* the golden is [1, T, C, H, W] */
    const int64_t T = gt->shape[tc ? 1 : 2], C = gt->shape[tc ? 2 : 1], HW = gt->shape[3] * gt->shape[4];
    float *got = cvx_tensor_f32_dup(lt), *want = cvx_tensor_f32_dup(gt), *perm = cvx_alloc_f32((size_t)gt->numel);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++)
            memcpy(perm + (c * T + t) * HW, want + (tc ? t * C + c : c * T + t) * HW, sizeof(float) * (size_t)HW);
    ASSERT_REL_L2(got, perm, (size_t)gt->numel, 1e-4);
    free(got), free(want), free(perm);
    cvx_st_close(l), cvx_st_close(g);
}

/* stage 1, 2, 3 into dir with `env` before each program */
static void run(const char *env, const char *dir, const char *case_dir, const char *s2_flags) {
    char cmd[8192], qp[1100], qn[1100], s1[256], s2[256], s3[256], model[512];
    tu_program(s1, sizeof s1, "stage1");
    tu_program(s2, sizeof s2, "stage2");
    tu_program(s3, sizeof s3, "stage3");
    snprintf(model, sizeof model, "%s/model", case_dir);
    gh_case c;
    gh_open(&c, case_dir);
    const char *p = gh_str(gh_json(&c, "call.prompt")), *neg = gh_str(gh_json(&c, "call.negative_prompt"));
    assert_non_null(p);
    assert_non_null(neg);
    tu_shell_quote(qp, sizeof qp, p);
    tu_shell_quote(qn, sizeof qn, neg);
    gh_close(&c);
    snprintf(cmd, sizeof cmd, "%s %s --quiet --precision f32 --prompt %s --negative_prompt %s --model_dir %s --output_dir %s",
             env, s1, qp, qn, model, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s %s --quiet --precision f32 --input_dir %s --model_dir %s %s", env, s2, dir, model,
             s2_flags);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s %s --quiet --precision f32 --input_dir %s --model_dir %s --output_frames %s/frames.safetensors",
             env, s3, dir, model, dir);
    tu_run_ok(cmd);
}

static void both_paths(const char *case_dir, const char *s2_flags) {
    cvx_cpu_features f;
    cvx_cpu_detect(&f);
    char a[64], b[64];
    tu_mkdtemp(a, sizeof a);
    tu_mkdtemp(b, sizeof b);
    run("", a, case_dir, s2_flags);
    run("CVX_ISA=avx2", b, case_dir, s2_flags);
    char golden[512];
    snprintf(golden, sizeof golden, "%s/expected.safetensors", case_dir);
    static const char *const files[] = {"stage1_embeddings.safetensors", "stage2_latents.safetensors",
                                        "frames.safetensors"};
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/stage2_latents.safetensors", a);
    check_latents(pa, golden);
    snprintf(pb, sizeof pb, "%s/stage2_latents.safetensors", b);
    check_latents(pb, golden);
    if (!f.avx512f) {
        print_message("  this CPU has no AVX-512: both runs took the AVX2 path; the comparison is skipped\n");
    } else {
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            snprintf(pa, sizeof pa, "%s/%s", a, files[i]);
            snprintf(pb, sizeof pb, "%s/%s", b, files[i]);
            assert_same_tensors(pa, pb);
            print_message("  %s: identical on both paths\n", files[i]);
        }
    }
    tu_rmrf(a);
    tu_rmrf(b);
}

static void test_cogvideox_2b(void **state) {
    (void)state;
    both_paths(GOLDEN "/e2e_2b", "--num_inference_steps 4 --guidance_scale 6 --seed 42 --frames 9 --height 48 --width 64");
}

static void test_wan(void **state) {
    (void)state;
    both_paths("tests/data/golden_wan/e2e_t2v_1.3b",
               "--num_inference_steps 4 --guidance_scale 5 --frames 9 --height 48 --width 64 --seed 42");
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cogvideox_2b), cmocka_unit_test(test_wan)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
