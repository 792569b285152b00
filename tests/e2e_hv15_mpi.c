/* HunyuanVideo-1.5 stage 2 under mpirun (docs/distributed.md) on models/hunyuanvideo15-tiny-random
 * (2 heads): --sp 2 (Ulysses: video rows split, the joint attention's heads split, the text stream
 * on every rank), --cfg_parallel and both at once (4 ranks): the same bytes as one process (CFG 6, a glyph prompt so the ByT5 rows are live); I2V (image tokens, condition
 * channels) under --sp 2 likewise; --sp 3 (does not divide the heads): one error line.
 * --threads 1 everywhere: results depend on the thread count, not on the rank count. Without MPI
 * in the build: nothing to run (said in one line). */
#include "cli_harness.h"
#include "hv15_harness.h"

#include <sys/stat.h>

#ifdef CVX_USE_MPI
#define MODEL "models/hunyuanvideo15-tiny-random"
#define ARGS "--quiet --threads 1 --num_inference_steps 3 --frames 5 --height 32 --width 48 --seed 3"

static char dir[256];

static int setup(void **state) {
    (void)state;
    char cmd[2048];
    tu_program(s1, sizeof s1, "stage1");
    tu_program(s2, sizeof s2, "stage2");
    tu_mkdtemp(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir " MODEL " --prompt 'A shop sign \"OPEN 24/7\" in the rain' "
             "--negative_prompt 'blurry' --output_dir %s/in", s1, dir);
    tu_run_ok(cmd);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rmrf(dir);
    return 0;
}

/* stage 2 with `flags` in one process (into one/) and under mpirun -np np with `mpi_flags` (into
 * many/): the same latents file */
static void same_as_one(const char *in, const char *flags, int np, const char *mpi_flags) {
    char cmd[4096], mr[512], one[300], many[300], a[400], b[400], err[8192];
    snprintf(one, sizeof one, "%s/one", dir);
    snprintf(many, sizeof many, "%s/many", dir);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s && mkdir %s %s && cp %s/* %s/ && cp %s/* %s/", one, many, one, many, in,
             one, in, many);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --input_dir %s " ARGS " %s", s2, one, flags);
    tu_run_ok(cmd);
    tu_mpirun(mr, sizeof mr, np, 300);
    snprintf(cmd, sizeof cmd, "%s %s --input_dir %s " ARGS " %s %s", mr, s2, many, flags, mpi_flags);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc != 0 || err[0]) fail_msg("mpirun -np %d stage2 %s: exit %d, stderr:\n%s", np, mpi_flags, rc, err);
    snprintf(a, sizeof a, "%s/stage2_latents.safetensors", one);
    snprintf(b, sizeof b, "%s/stage2_latents.safetensors", many);
    if (!cli_same_file(a, b)) fail_msg("%s (np %d) differs from one process", mpi_flags, np);
    print_message("  %s on %d ranks: the same bytes as one process\n", mpi_flags, np);
}

static void test_sp_and_cfg_parallel(void **state) {
    (void)state;
    char in[300];
    snprintf(in, sizeof in, "%s/in", dir);
    same_as_one(in, "", 2, "--sp 2");
    same_as_one(in, "", 2, "--cfg_parallel");
    same_as_one(in, "", 4, "--cfg_parallel --sp 2");
}

/* I2V: the tiny I2V model of tests/hv15_harness.h */
static void test_sp_i2v(void **state) {
    (void)state;
    char cmd[8192], m[300], in[300], image[1200];
    snprintf(m, sizeof m, "%s/i2v_model", dir);
    snprintf(in, sizeof in, "%s/i2v_in", dir);
    if (mkdir(m, 0755)) fail_msg("mkdir %s failed", m);
    hv15_i2v_model(m, NULL);
    hv15_i2v_image(image, sizeof image);
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --prompt 'a red ball' --image %s --frames 5 --output_dir %s",
             s1, m, image, in);
    tu_run_ok(cmd);
    char one[300], many[300], mr[512], a[400], b[400], err[8192];
    snprintf(one, sizeof one, "%s/i2v_one", dir);
    snprintf(many, sizeof many, "%s/i2v_many", dir);
    snprintf(cmd, sizeof cmd, "mkdir %s %s && cp %s/* %s/ && cp %s/* %s/", one, many, in, one, in, many);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --threads 1 --num_inference_steps 2 --seed 4 --input_dir %s", s2, one);
    tu_run_ok(cmd);
    tu_mpirun(mr, sizeof mr, 2, 300);
    snprintf(cmd, sizeof cmd, "%s %s --quiet --threads 1 --num_inference_steps 2 --seed 4 --input_dir %s --sp 2", mr,
             s2, many);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc != 0 || err[0]) fail_msg("mpirun -np 2 stage2 --sp 2 (I2V): exit %d, stderr:\n%s", rc, err);
    snprintf(a, sizeof a, "%s/stage2_latents.safetensors", one);
    snprintf(b, sizeof b, "%s/stage2_latents.safetensors", many);
    assert_true(cli_same_file(a, b));
}

static void test_sp3_refused(void **state) {
    (void)state;
    char cmd[4096], mr[512], err[8192], out[300];
    snprintf(out, sizeof out, "%s/sp3", dir);
    snprintf(cmd, sizeof cmd, "mkdir %s && cp %s/in/* %s/", out, dir, out);
    tu_run_ok(cmd);
    tu_mpirun(mr, sizeof mr, 3, 300);
    snprintf(cmd, sizeof cmd, "%s %s --input_dir %s " ARGS " --sp 3", mr, s2, out);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    if (tu_count_substr(err, "\n") != 1 || !strstr(err, "--sp 3: must divide the 2 attention heads"))
        fail_msg("expected one line about --sp 3, got:\n%s", err);
}
#endif

int main(void) {
#ifdef CVX_USE_MPI
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sp_and_cfg_parallel),
        cmocka_unit_test(test_sp_i2v),
        cmocka_unit_test(test_sp3_refused),
    };
    return cmocka_run_group_tests_name("e2e_hv15_mpi", tests, setup, teardown);
#else
    print_message("e2e_hv15_mpi: built without MPI: nothing to run\n");
    return 0;
#endif
}
