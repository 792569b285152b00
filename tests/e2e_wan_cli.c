/* Wan 2.1 through the three programs (stage1 → stage2 → stage3 and their files) on the golden
 * tiny models (tests/data/golden_wan/e2e_*): embeddings / latents ≤ 1e-4 and frames ≤ 1e-3 of
 * WanPipeline for T2V and V2V/I2V; a stopped and resumed stage 2 gives the same bytes; under
 * MPI (--cfg_parallel, --sp) the same bytes as one process; step caching runs; and the bad inputs
 * of issue 20 get one line and leave no output behind. */
#include "cli_harness.h"
#include "pipeline/cogvideox.h"
#include "pipeline/stage_files.h"

#include <limits.h>

#include <sys/stat.h>

#define WG "tests/data/golden_wan"

#define T2V_FLAGS "--num_inference_steps 4 --frames 9 --height 48 --width 64 --seed 42"

/* T2V: the three programs against the golden run; stop + resume and MPI give the same bytes. */
static void test_t2v_programs(void **state) {
    (void)state;
    char dir[256], dir2[256], cmd[4096], path[512], path2[512];
    tu_mkdtemp(dir, sizeof dir);
    tu_mkdtemp(dir2, sizeof dir2);
    cli_stage1(WG, "e2e_t2v_1.3b", NULL, dir, "");
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", dir);
    cli_check(WG, "e2e_t2v_1.3b", path, "prompt_embeds", "prompt_embeds", 1e-4);
    cli_check(WG, "e2e_t2v_1.3b", path, "negative_prompt_embeds", "negative_prompt_embeds", 1e-4);
    /* the rest of the run; killed after 2 of 4 steps, resumed: the same bytes (UniPC's multistep state
     * in the checkpoint) */
    cli_stage23_resumed(WG, "e2e_t2v_1.3b", dir, dir2, T2V_FLAGS);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    snprintf(path2, sizeof path2, "%s/stage2_latents.safetensors", dir2);
    /* a resume with another step count is refused by name */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s " T2V_FLAGS " --stop_after_steps 1", s2, dir2);
    tu_run_ok(cmd);
    char err[4096];
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --num_inference_steps 5 --frames 9 --height 48 --width 64 "
             "--seed 42 --resume", s2, dir2);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "num_inference_steps"));
    /* --flow_shift at the scheduler config's own value (3.0) is the same run (issue 37: refused); another
     * value is refused by name */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s " T2V_FLAGS " --resume --flow_shift 5", s2, dir2);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "flow_shift=5"));
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s " T2V_FLAGS " --resume --flow_shift 3", s2, dir2);
    tu_run_ok(cmd);
    assert_true(cli_same_file(path, path2));

#ifdef CVX_USE_MPI
    /* CFG-parallel on 2 ranks and Ulysses over the 3 heads on 3 ranks: one process's bytes */
    const char *mpi[2] = {"-np 2 %s --quiet --threads 2 --input_dir %s " T2V_FLAGS " --cfg_parallel",
                          "-np 3 %s --quiet --threads 2 --input_dir %s " T2V_FLAGS " --sp 3"};
    for (int k = 0; k < 2; k++) {
        char tail[1024];
        snprintf(cmd, sizeof cmd, "rm -f %s/stage2_*.safetensors", dir2);
        tu_run_ok(cmd);
        snprintf(tail, sizeof tail, mpi[k], s2, dir2);
        /* Open MPI's own allocations are not ours: no leak report under ASan (as tests/e2e_mpi.c) */
        snprintf(cmd, sizeof cmd, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" "
                 "OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 120 mpirun -q --oversubscribe %s", tail);
        tu_run_ok(cmd);
        assert_true(cli_same_file(path, path2));
    }
    /* --threads 2 above and the one-process run (all cores): the same bytes */
#endif
    tu_rmrf(dir);
    tu_rmrf(dir2);
}

/* Step caching on Wan: TeaCache (TeaCache4Wan2.1's coefficients) and FBCache run and report; a
 * cached run that never skips equals the uncached one. */
static void test_caching(void **state) {
    (void)state;
    char dir[256], cmd[4096], err[8192], a[512], b[512];
    tu_mkdtemp(dir, sizeof dir);
    cli_stage1(WG, "e2e_t2v_1.3b", NULL, dir, "");
    snprintf(cmd, sizeof cmd, "%s --input_dir %s --output_dir %s/none " T2V_FLAGS, s2, dir, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --input_dir %s --output_dir %s/tc " T2V_FLAGS " --cache teacache --cache_threshold 1e-9",
             s2, dir, dir);
    assert_int_equal(tu_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "published"));
    /* p(rel) >= 0.13 for the 1.3B set near rel = 0: every step computes, and then the bytes are the uncached ones */
    assert_non_null(strstr(err, "4/4 steps computed"));
    snprintf(a, sizeof a, "%s/none/stage2_latents.safetensors", dir);
    snprintf(b, sizeof b, "%s/tc/stage2_latents.safetensors", dir);
    cvx_safetensors *la = tu_open(a), *lb = tu_open(b);
    size_t na, nb;
    float *xa = tu_f32(la, "latents", &na), *xb = tu_f32(lb, "latents", &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(xa, xb, na * sizeof(float));
    free(xa), free(xb);
    cvx_st_close(la), cvx_st_close(lb);
    /* use_ret_steps: e0 and the first 5 steps computed, the last not forced (p ≡ 0: every other step skips) */
    snprintf(cmd, sizeof cmd, "%s --input_dir %s --output_dir %s/ret --num_inference_steps 8 --frames 9 --height 48 "
             "--width 64 --cache teacache --teacache_ret_steps --cache_threshold 0.5 --teacache_coefficients 0,0,0,0,0",
             s2, dir, dir);
    assert_int_equal(tu_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "5/8 steps computed"));
    snprintf(b, sizeof b, "%s/ret/generation_config.json", dir);
    assert_true(tu_genconfig_has(b, "teacache_ret_steps"));
    snprintf(cmd, sizeof cmd, "%s --input_dir %s --output_dir %s/fb --num_inference_steps 10 --frames 9 --height 48 "
             "--width 64 --cache fbcache --cache_threshold 0.3", s2, dir, dir);
    assert_int_equal(tu_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "skipped"));
    tu_rmrf(dir);
}

/* V2V and I2V through the programs (stage 1 encodes the video / the image for --frames frames). */
static void test_v2v_i2v_programs(void **state) {
    (void)state;
    char dir[256], cmd[4096], path[512], extra[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(extra, sizeof extra, "--video " WG "/e2e_v2v/video --height 48 --width 64");
    cli_stage1(WG, "e2e_v2v", NULL, dir, extra);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --num_inference_steps 5 --strength 0.6 --seed 45", s2, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cli_check(WG, "e2e_v2v", path, "latents", "final_latents", 1e-4);
    tu_rmrf(dir);

    tu_mkdtemp(dir, sizeof dir);
    snprintf(extra, sizeof extra, "--image " WG "/e2e_i2v/image.png --frames 9 --height 48 --width 64");
    cli_stage1(WG, "e2e_i2v", NULL, dir, extra);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --num_inference_steps 3 --seed 46", s2, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cli_check(WG, "e2e_i2v", path, "latents", "final_latents", 1e-4);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_video %s/v.mp4 --output_frames %s/frames.safetensors",
             s3, dir, dir, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/frames.safetensors", dir);
    cli_check_frames(WG, "e2e_i2v", path);
    /* --strength is V2V's: refused for I2V */
    char err[4096];
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --num_inference_steps 3 --strength 0.5", s2, dir);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "--strength"));
    tu_rmrf(dir);
}

/* The staged TPU pipeline's Wan files, both ways: its BF16 latents (metadata dtype_info only, no
 * hashes, its generation_config.json keys) decode here as our own decode of the same bf16 values;
 * our stage-1 file has its tensors, shapes and dtype. */
static void test_tpu_files(void **state) {
    (void)state;
    char dir[256], cmd[4096], path[512], model[PATH_MAX], json[PATH_MAX + 512];
    tu_mkdtemp(dir, sizeof dir);
    if (!realpath(WG "/e2e_t2v_1.3b/model", model)) fail_msg("realpath failed");
    cvx_safetensors *g = tu_open(WG "/e2e_t2v_1.3b/expected.safetensors");
    const cvx_tensor *fl = cvx_st_find(g, "final_latents");   /* [1, 16, 3, 6, 8] */
    float *lat = cvx_tensor_f32_dup(fl);
    for (int64_t i = 0; i < fl->numel; i++) lat[i] = cvx_bf16_to_f32(cvx_f32_to_bf16(lat[i]));
    cvx_st_writer *w = cvx_stw_new();
    ASSERT_OK(cvx_stw_add_f32(w, "latents", CVX_BF16, 5, fl->shape, lat));
    ASSERT_OK(cvx_stw_metadata(w, "dtype_info", "{\"latents\": \"bfloat16\"}"));
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    snprintf(json, sizeof json, "{\"prompt\": \"x\", \"negative_prompt\": \"\", \"model_id\": \"%s\", "
             "\"num_inference_steps\": 4, \"guidance_scale\": 5.0, \"seed\": 42, \"height\": 48, \"width\": 64, "
             "\"frames\": 9}", model);
    tu_write(path, json, strlen(json));
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_video %s/v.mp4 --output_frames %s/frames.safetensors",
             s3, dir, dir, dir);
    tu_run_ok(cmd);
    /* the same values through the API */
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = 2});
    assert_non_null(m);
    cvx_decode_params dp = {0};
    cvx_frames fr;
    ASSERT_OK(cvx_decode(m, &dp, lat, 1, 16, 3, 6, 8, "latents", NULL, NULL, &fr));
    snprintf(path, sizeof path, "%s/frames.safetensors", dir);
    cvx_safetensors *f = tu_open(path);
    size_t n;
    float *got = tu_f32(f, "decoded", &n);
    assert_int_equal(n, (size_t)3 * fr.T * fr.H * fr.W);
    assert_memory_equal(got, fr.data[0], n * sizeof(float));
    free(got);
    cvx_st_close(f);
    cvx_frames_free(&fr);
    cvx_model_close(m);
    free(lat);
    cvx_st_close(g);
    /* ours -> theirs: stage 1 writes prompt_embeds / negative_prompt_embeds [1, 512, D] F32 + dtype_info */
    cli_stage1(WG, "e2e_t2v_1.3b", NULL, dir, "");
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", dir);
    cvx_safetensors *e = tu_open(path);
    const char *names[2] = {"prompt_embeds", "negative_prompt_embeds"};
    for (int k = 0; k < 2; k++) {
        const cvx_tensor *t = cvx_st_find(e, names[k]);
        assert_non_null(t);
        assert_int_equal(t->dtype, CVX_F32);
        assert_true(t->ndim == 3 && t->shape[0] == 1 && t->shape[1] == 512 && t->shape[2] == 32);
    }
    assert_non_null(cvx_st_metadata(e, "dtype_info"));
    cvx_st_close(e);
    tu_rmrf(dir);
}

/* Bad inputs (issue 20): one line naming what is wrong, exit != 0, no output left behind
 * (cli_expect_refused). */
static void test_bad_inputs(void **state) {
    (void)state;
    char dir[256], cmd[4096], path[512];
    tu_mkdtemp(dir, sizeof dir);
    cli_stage1(WG, "e2e_t2v_1.3b", NULL, dir, "");
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    /* frames not 4k+1 */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --frames 10 --height 48 --width 64", s2, dir);
    cli_expect_refused(cmd, "--frames 10: the frame count must be 4k+1", path);
    /* a size that is not a multiple of 16 */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --frames 9 --height 40 --width 64", s2, dir);
    cli_expect_refused(cmd, "--height 40", path);
    /* CogVideoX embeddings (226 rows) given to Wan */
    char cdir[256];
    tu_mkdtemp(cdir, sizeof cdir);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir models/cogvideox-tiny-random --output_dir %s", s1, cdir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_dir %s/out --model_dir " WG "/e2e_t2v_1.3b/model "
             "--frames 9 --height 48 --width 64", s2, cdir, cdir);
    snprintf(path, sizeof path, "%s/out/stage2_latents.safetensors", cdir);
    cli_expect_refused(cmd, "prompt_embeds", path);
    /* Wan latents given to the CogVideoX VAE */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s " T2V_FLAGS, s2, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/other.mp4", dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir models/cogvideox-tiny-random --output_video %s", s3,
             dir, path);
    cli_expect_refused(cmd, "latents of a Wan model", path);
    /* a single-file transformer with a missing key: the golden weights as one file, minus one tensor */
    char sf[512];
    snprintf(sf, sizeof sf, "%s/wan_missing.safetensors", dir);
    cvx_safetensors *gt = tu_open(WG "/e2e_t2v_1.3b/model/transformer/diffusion_pytorch_model.safetensors");
    cvx_st_writer *w = cvx_stw_new();
    for (int i = 0; i < cvx_st_count(gt); i++) {
        const cvx_tensor *t = cvx_st_tensor(gt, i);
        if (strcmp(t->name, "blocks.1.attn2.to_k.weight") != 0)
            ASSERT_OK(cvx_stw_add(w, t->name, t->dtype, t->ndim, t->shape, t->data));
    }
    ASSERT_OK(cvx_stw_write(w, sf));
    cvx_stw_free(w);
    cvx_st_close(gt);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_dir %s/sf --transformer %s " T2V_FLAGS, s2, dir, dir, sf);
    snprintf(path, sizeof path, "%s/sf/stage2_latents.safetensors", dir);
    cli_expect_refused(cmd, "blocks.1.attn2.to_k.weight", path);
    /* the complete file loads and gives the directory's bytes */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_dir %s/sf2 --transformer "
             WG "/e2e_t2v_1.3b/model/transformer/diffusion_pytorch_model.safetensors " T2V_FLAGS, s2, dir, dir);
    tu_run_ok(cmd);
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/stage2_latents.safetensors", dir);
    snprintf(b, sizeof b, "%s/sf2/stage2_latents.safetensors", dir);
    cvx_safetensors *la = tu_open(a), *lb = tu_open(b);
    size_t na, nb;
    float *xa = tu_f32(la, "latents", &na), *xb = tu_f32(lb, "latents", &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(xa, xb, na * sizeof(float));
    free(xa), free(xb);
    cvx_st_close(la), cvx_st_close(lb);
    /* weights larger than the machine's memory (Wan-14B in bf16 on 24 GiB): refused with the way out */
    snprintf(cmd, sizeof cmd, "mkdir -p %s/big && cp -r " WG "/e2e_t2v_1.3b/model/* %s/big/ && "
             "truncate -s 4T %s/big/transformer/zz_sparse.safetensors", dir, dir, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_dir %s/bo --model_dir %s/big " T2V_FLAGS, s2, dir, dir,
             dir);
    snprintf(path, sizeof path, "%s/bo/stage2_latents.safetensors", dir);
    cli_expect_refused(cmd, "quantized", path);
    /* a pipeline class no family serves */
    snprintf(path, sizeof path, "%s/m", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/m/model_index.json", dir);
    tu_write(path, "{\"_class_name\": \"HunyuanVideoPipeline\"}", 39);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s/m --output_dir %s/o", s1, dir, dir);
    snprintf(path, sizeof path, "%s/o/stage1_embeddings.safetensors", dir);
    cli_expect_refused(cmd, "HunyuanVideoPipeline", path);
    tu_rmrf(cdir);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t2v_programs),
        cmocka_unit_test(test_caching),
        cmocka_unit_test(test_v2v_i2v_programs),
        cmocka_unit_test(test_tpu_files),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, cli_setup, NULL);
}
