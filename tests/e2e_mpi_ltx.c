/* LTX-Video's stage 2 under mpirun (docs/distributed.md) against one process, on the golden tiny
 * models: --sp 2 (Ulysses over the 2 heads of e2e_t2v_tsvae's transformer: the row-wise parts on
 * each rank's tokens, self-attention on its head, the prediction gathered), --sp 3 on the condition
 * pipeline (e2e_condition, 3 heads; extra condition tokens, per-token timesteps, the re-noising
 * draws), --cfg_parallel on the condition pipeline, and a --sp that does not divide the heads
 * (one line). The latents must be the same bytes as one process's (the row-wise kernels compute
 * a row the same way whatever rows are beside it; attention per head). In a build without MPI the
 * test checks nothing and says so. */
#include "testutil.h"

#include "dist.h"

#define LG "tests/data/golden_ltx"

static char s1[256], s2[256];

static int setup(void **state) {
    (void)state;
    tu_program(s1, sizeof s1, "stage1");
    tu_program(s2, sizeof s2, "stage2");
    return 0;
}

static void mpirun(char *buf, size_t n, int np) {
    snprintf(buf, n,
             "OMP_NUM_THREADS=1 ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" "
             "OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 300 mpirun -q --oversubscribe %s -np %d",
             geteuid() == 0 ? "--allow-run-as-root" : "", np);
}

/* stage 1 into dir/in with the stage-1 flags `s1flags`; stage 2 with `flags` in one process and
 * under mpirun -np np with `mpiflags`: the same latents file content */
static void ranks_case(const char *model, const char *s1flags, const char *flags, int np, const char *mpiflags) {
    if (!cvx_dist_built_with_mpi()) {
        print_message("  (no MPI in this build: nothing to compare)\n");
        return;
    }
    char dir[64], cmd[8192], mr[512], a[300], b[300], err[8192];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'A cat on a wall.' --negative_prompt 'blurry' --model_dir %s "
             "--output_dir %s/in %s && mkdir %s/one %s/many && cp %s/in/* %s/one/ && cp %s/in/* %s/many/", s1, model,
             dir, s1flags, dir, dir, dir, dir, dir, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --threads 1 --model_dir %s --input_dir %s/one %s", s2, model, dir, flags);
    tu_run_ok(cmd);
    mpirun(mr, sizeof mr, np);
    snprintf(cmd, sizeof cmd, "%s %s --quiet --threads 1 --model_dir %s --input_dir %s/many %s %s", mr, s2, model, dir,
             flags, mpiflags);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc != 0 || err[0]) fail_msg("mpirun -np %d stage2 %s: exit %d, stderr:\n%s", np, mpiflags, rc, err);
    snprintf(a, sizeof a, "%s/one/stage2_latents.safetensors", dir);
    snprintf(b, sizeof b, "%s/many/stage2_latents.safetensors", dir);
    cvx_safetensors *x = tu_open(a), *y = tu_open(b);
    size_t na, nb;
    float *u = tu_f32(x, "latents", &na), *v = tu_f32(y, "latents", &nb);
    assert_int_equal(na, nb);
    if (memcmp(u, v, na * sizeof(float)) != 0)
        fail_msg("%s: the latents of %d ranks (%s) differ from one process's: rel L2 %.3g", model, np, mpiflags,
                 cvx_rel_l2(v, u, na));
    print_message("  %d ranks %s: latents bit-identical to one process\n", np, mpiflags);
    free(u), free(v);
    cvx_st_close(x), cvx_st_close(y);
    tu_rmrf(dir);
}

#define COND_S1 "--condition " LG "/e2e_condition/condition0.png:0:1 --condition " LG "/e2e_condition/condition1.png:8:0.8" \
                " --frames 17 --height 64 --width 64"
#define COND_S2 "--num_inference_steps 3 --guidance_scale 3 --seed 45"

static void test_sp2_t2v(void **s) {
    (void)s;
    ranks_case(LG "/e2e_t2v_tsvae/pipeline_model", "",
               "--frames 9 --height 64 --width 64 --num_inference_steps 3 --guidance_scale 3 --seed 43", 2, "--sp 2");
}

static void test_sp3_condition(void **s) {
    (void)s;
    ranks_case(LG "/e2e_condition/pipeline_model", COND_S1, COND_S2, 3, "--sp 3");
}

static void test_cfg_parallel_condition(void **s) {
    (void)s;
    ranks_case(LG "/e2e_condition/pipeline_model", COND_S1, COND_S2, 2, "--cfg_parallel");
}

/* --sp 2 on 3 heads: one line, no latents */
static void test_sp_heads_refused(void **s) {
    (void)s;
    if (!cvx_dist_built_with_mpi()) return;
    char dir[64], cmd[4096], mr[512], err[8192], path[300];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir " LG "/e2e_condition/pipeline_model --output_dir %s",
             s1, dir);
    tu_run_ok(cmd);
    mpirun(mr, sizeof mr, 2);
    snprintf(cmd, sizeof cmd, "%s %s --quiet --threads 1 --model_dir " LG "/e2e_condition/pipeline_model --input_dir %s "
             "--frames 9 --height 64 --width 64 --num_inference_steps 2 --sp 2", mr, s2, dir);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  --sp 2, 3 heads: %s", err);
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    assert_non_null(strstr(err, "must divide the 3 attention heads"));
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    assert_int_not_equal(access(path, F_OK), 0);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sp2_t2v),
        cmocka_unit_test(test_sp3_condition),
        cmocka_unit_test(test_cfg_parallel_condition),
        cmocka_unit_test(test_sp_heads_refused),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
