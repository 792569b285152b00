/* Wan 2.2 A14B (two experts, one resident) under mpirun (docs/distributed.md), on the tiny A14B
 * model (models/wan2.2-a14b-tiny-random, 3 heads; 6 steps: experts H H L L L L):
 *   - --cfg_parallel on 2 ranks: the same bytes as one process;
 *   - --sp 3 and --cfg_parallel --sp 3 (6 ranks): within SP_TOL of one process (bit-identical here);
 *   - a run stopped after step 3 (past the expert switch) on 2 ranks (--cfg_parallel) and resumed
 *     on 3 (--sp 3), and one stopped in one process and resumed on 2 ranks: as the uninterrupted run.
 * Every run uses --threads 1 (results depend on the thread count, not on the rank count). Builds
 * without MPI: the flags are refused with one line on this model too. */
#include "testutil.h"

#define MODEL "models/wan2.2-a14b-tiny-random"
#define ARGS "--quiet --threads 1 --model_dir " MODEL " --num_inference_steps 6 --frames 9 --height 32 --width 48 " \
             "--guidance_scale 4 --guidance_scale_2 3 --seed 11"
#define SP_TOL 1e-6

static char s1[256], s2[256], dir[64];

static int setup(void **state) {
    (void)state;
    char cmd[1024];
    tu_program(s1, sizeof s1, "stage1");
    tu_program(s2, sizeof s2, "stage2");
    tu_mkdtemp(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'A fox in the snow' --negative_prompt 'blurry' --model_dir " MODEL
             " --output_dir %s/in", s1, dir);
    tu_run_ok(cmd);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rmrf(dir);
    return 0;
}

/* A fresh output directory `name` with the embeddings. */
static void outdir(const char *name, char *out, size_t n) {
    char cmd[1024];
    snprintf(out, n, "%s/%s", dir, name);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/in/* %s/", out, dir, out);
    tu_run_ok(cmd);
}

#ifdef CVX_USE_MPI
/* stage 2 into out (np 1: one process) with `flags`; no stderr output allowed. */
static void run2(const char *out, int np, const char *flags) {
    char mr[512] = "", cmd[4096], err[8192];
    if (np > 1) tu_mpirun(mr, sizeof mr, np, 300);
    snprintf(cmd, sizeof cmd, "%s %s --input_dir %s " ARGS " %s", mr, s2, out, flags);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc != 0 || err[0]) fail_msg("%s: exit %d, stderr:\n%s", cmd, rc, err);
}

/* b's latents vs the reference run's: exact (tol 0) or within tol relative L2. */
static void compare(const char *what, const char *b, double tol) {
    char pa[300], pb[300];
    snprintf(pa, sizeof pa, "%s/ref/stage2_latents.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/stage2_latents.safetensors", b);
    cvx_safetensors *x = tu_open(pa), *y = tu_open(pb);
    size_t na, nb;
    float *u = tu_f32(x, "latents", &na), *v = tu_f32(y, "latents", &nb);
    assert_int_equal(na, nb);
    const int same = !memcmp(u, v, na * sizeof *u);
    const double e = cvx_rel_l2(v, u, na);
    print_message("  %s vs one process: rel L2 %.3g%s\n", what, e, same ? ", bit-identical" : "");
    if (tol == 0 ? !same : !(e <= tol)) fail_msg("%s: rel L2 %.3g (tol %.0e%s)", what, e, tol, tol == 0 ? ", bytes" : "");
    free(u), free(v);
    cvx_st_close(x), cvx_st_close(y);
}

static void reference(void) {
    char ref[256], path[300];
    outdir("ref", ref, sizeof ref);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", ref);
    if (access(path, F_OK)) run2(ref, 1, "");
}

static void test_cfg_parallel(void **state) {
    (void)state;
    char o[256];
    reference();
    outdir("cfg", o, sizeof o);
    run2(o, 2, "--cfg_parallel");
    compare("--cfg_parallel (2 ranks)", o, 0);
}

static void test_sp(void **state) {
    (void)state;
    char o[256];
    reference();
    outdir("sp3", o, sizeof o);
    run2(o, 3, "--sp 3");
    compare("--sp 3", o, SP_TOL);
    outdir("cfg_sp3", o, sizeof o);
    run2(o, 6, "--cfg_parallel --sp 3");
    compare("--cfg_parallel --sp 3 (6 ranks)", o, SP_TOL);
}

/* Stopped after step 3 (H H L: past the switch) or after step 2 (the low-noise expert next) and
 * resumed on another rank count. */
static void test_resume_across_switch(void **state) {
    (void)state;
    char x[256], y[256];
    reference();
    outdir("x", x, sizeof x);
    run2(x, 2, "--cfg_parallel --stop_after_steps 3");
    run2(x, 3, "--sp 3 --resume");
    compare("stopped after 3 on 2 ranks (cfg), resumed on 3 (sp 3)", x, SP_TOL);
    outdir("y", y, sizeof y);
    run2(y, 1, "--stop_after_steps 2");   /* stopped just before the switch */
    run2(y, 2, "--cfg_parallel --resume");
    compare("stopped after 2 in one process, resumed on 2 ranks (cfg)", y, 0);
}
#else
static void test_refused_without_mpi(void **state) {
    (void)state;
    char o[256], cmd[4096], err[8192];
    outdir("nompi", o, sizeof o);
    snprintf(cmd, sizeof cmd, "%s --input_dir %s " ARGS " --cfg_parallel", s2, o);
    int rc = tu_run(cmd, err, sizeof err);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err, "this build has no MPI"));
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
#ifdef CVX_USE_MPI
        cmocka_unit_test(test_cfg_parallel), cmocka_unit_test(test_sp), cmocka_unit_test(test_resume_across_switch),
#else
        cmocka_unit_test(test_refused_without_mpi),
#endif
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
