/* Image-to-video and video-to-video end to end against upstream (golden README §11–§12):
 * CogVideoXImageToVideoPipeline on the 5b-I2V-style model (an image at the target size and one
 * LANCZOS-resized from 101×77) and the 1.5-I2V-style model (ofs, patch_size_t 2, the odd-frame
 * padding), CogVideoXVideoToVideoPipeline on the 5b-style model (a folder of frames, strength
 * 0.6). Through the three programs and their files: embeddings and latents ≤ 1e-4, decoded
 * frames ≤ 1e-3 relative L2. Through the API: the image latents (the seeded encoder sample ×
 * scaling factor) ≤ 1e-4 and the initial noise, the generator's next draw, bit for bit.
 * Bad inputs: one clear error and no output. */
#include "cli_harness.h"
#include "fileio.h"
#include "pipeline/family_cogvideox.h"
#include "stage2/cogvideox_family.h"
#include "rng_lowp.h"

#include <math.h>
#include <sys/stat.h>

/* golden [1, T, C, h, w] (frames from f0 on) -> ours [1, C, T − f0, h, w] */
static float *golden_latents_cf(const cvx_tensor *gt, int f0) {
    const int64_t T = gt->shape[1], C = gt->shape[2], hw = gt->shape[3] * gt->shape[4];
    float *all = cvx_tensor_f32_dup(gt), *out = cvx_alloc_f32((size_t)(C * (T - f0) * hw));
    for (int64_t t = f0; t < T; t++)
        for (int64_t ch = 0; ch < C; ch++)
            memcpy(out + (ch * (T - f0) + (t - f0)) * hw, all + (t * C + ch) * hw, sizeof(float) * (size_t)hw);
    free(all);
    return out;
}

static void compare_tensor(cvx_safetensors *ours, const char *ours_name, cvx_safetensors *gold, const char *gold_name,
                           double tol) {
    size_t n, m;
    float *got = tu_f32(ours, ours_name, &n), *want = tu_f32(gold, gold_name, &m);
    assert_int_equal(n, m);
    print_message("  %s:\n", gold_name);
    ASSERT_REL_L2(got, want, n, tol);
    free(got), free(want);
}

/* stage1 (--image / --video) -> stage2 -> stage3, every output against the golden pipeline. */
static void run_cli_case(const char *name, int is_video, int pad_frames) {
    cli_case_call c;
    cli_case_call_load(&c, name);
    char dir[256], cmd[4096], qp[1100], qn[1100], model[512], path[512], input[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(model, sizeof model, GOLDEN "/%s/model", name);
    snprintf(input, sizeof input, GOLDEN "/%s/%s", name, is_video ? "video" : "image.png");
    tu_shell_quote(qp, sizeof qp, c.prompt);
    tu_shell_quote(qn, sizeof qn, c.negative);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt %s --negative_prompt %s --model_dir %s --output_dir %s %s %s "
             "--height %lld --width %lld", s1, qp, qn, model, dir, is_video ? "--video" : "--image", input,
             (long long)c.height, (long long)c.width);
    tu_run_ok(cmd);
    /* stage 2 takes the size (and V2V's frame count) from stage 1 */
    char extra[128] = "";
    if (is_video) snprintf(extra, sizeof extra, "--strength %g", c.strength);
    else snprintf(extra, sizeof extra, "--frames %lld", (long long)c.frames);
    snprintf(cmd, sizeof cmd,
             "%s --quiet --input_dir %s --model_dir %s --num_inference_steps %lld --guidance_scale %g --seed %lld %s %s",
             s2, dir, model, (long long)c.steps, c.guidance, (long long)c.seed, c.dynamic ? "--use_dynamic_cfg" : "",
             extra);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --output_video %s/video.mp4 "
             "--output_frames %s/frames.safetensors", s3, dir, model, dir, dir);
    tu_run_ok(cmd);

    snprintf(path, sizeof path, GOLDEN "/%s/expected.safetensors", name);
    cvx_safetensors *gold = tu_open(path);
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", dir);
    cvx_safetensors *e = tu_open(path);
    compare_tensor(e, "prompt_embeds", gold, "prompt_embeds", 1e-4);
    compare_tensor(e, "negative_prompt_embeds", gold, "negative_prompt_embeds", 1e-4);
    cvx_st_close(e);

    /* final latents; 1.5: upstream's output_type="latent" keeps the padding frame, ours drops it */
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    cvx_safetensors *l = tu_open(path);
    const cvx_tensor *lt = cvx_st_find(l, "latents"), *gt = cvx_st_find(gold, "final_latents");
    assert_non_null(lt);
    assert_true(lt->shape[1] == gt->shape[2] && lt->shape[2] == gt->shape[1] - pad_frames);
    float *got = cvx_tensor_f32_dup(lt), *want = golden_latents_cf(gt, pad_frames);
    print_message("  final_latents:\n");
    ASSERT_REL_L2(got, want, (size_t)lt->numel, 1e-4);
    free(got), free(want);
    assert_string_equal(cvx_st_metadata(l, "mode"), is_video ? "v2v" : "i2v");
    cvx_st_close(l);

    snprintf(path, sizeof path, "%s/frames.safetensors", dir);
    cvx_safetensors *fr = tu_open(path);
    compare_tensor(fr, "decoded", gold, "decoded", 1e-3);
    /* frames_np = clamp(x/2 + 0.5, 0, 1) as [1, F, H, W, 3] */
    const cvx_tensor *dt = cvx_st_find(gold, "decoded"), *np = cvx_st_find(gold, "frames_np");
    assert_int_equal(np->numel, dt->numel);
    float *dec = tu_f32(fr, "decoded", NULL), *wantnp = cvx_tensor_f32_dup(np);
    float *post = gh_frames_np(dec, dt->shape[2], dt->shape[3] * dt->shape[4]);
    print_message("  frames_np:\n");
    ASSERT_REL_L2(post, wantnp, (size_t)np->numel, 1e-3);
    free(dec), free(post), free(wantnp);
    cvx_st_close(fr);
    cvx_st_close(gold);
    tu_rmrf(dir);
}

static void test_cli_i2v_5b(void **s) { (void)s; run_cli_case("e2e_i2v_5b", 0, 0); }
static void test_cli_i2v_5b_resize(void **s) { (void)s; run_cli_case("e2e_i2v_5b_resize", 0, 0); }
static void test_cli_i2v_15(void **s) { (void)s; run_cli_case("e2e_i2v_1.5", 0, 1); }
static void test_cli_v2v_5b(void **s) { (void)s; run_cli_case("e2e_v2v_5b", 1, 0); }

/* The API's prepare_latents: image latents (the encoder sample × or ÷ the scaling factor in
 * frame 0, zeros after) and the initial noise drawn right after the encoder sample. */
static void api_i2v_prepare(const char *name) {
    cli_case_call c;
    cli_case_call_load(&c, name);
    char dir[256], path[512];
    snprintf(dir, sizeof dir, GOLDEN "/%s/model", name);
    snprintf(path, sizeof path, GOLDEN "/%s/image.png", name);
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = dir, .threads = 1});
    ASSERT_NONNULL(m);
    cvx_conditioning cond;
    cvx_conditioning_params cp = {.image = path, .height = (int)c.height, .width = (int)c.width};
    ASSERT_OK(cvx_encode_conditioning(m, &cp, NULL, NULL, &cond));
    assert_int_equal(cond.mode, CVX_MODE_I2V);
    assert_int_equal(cond.T, 1);
    cvx_scheduler sched;
    snprintf(path, sizeof path, "%s/scheduler/scheduler_config.json", dir);
    ASSERT_OK(cvx_scheduler_load(&sched, path, NULL));
    cvx_loop_request sp_req = {.frames = (int)c.frames, .height = (int)c.height, .width = (int)c.width, .num_inference_steps = (int)c.steps, .seed = (uint64_t)c.seed};
    cvx_loop_params sp = {.req = &sp_req, .vae_scale_spatial = 8, .vae_scale_temporal = 4};
    cvx_latent_shape sh;
    ASSERT_OK(cogvideox_latent_shape_for(&cogvideox_state_of(m)->tcfg, &sp, 1, &sh));
    cvx_prepared prep;
    ASSERT_OK(cogvideox_prepare_conditioned(m, &cond, &sched, 0, &sp, &sh, &prep));
    snprintf(path, sizeof path, GOLDEN "/%s/expected.safetensors", name);
    cvx_safetensors *gold = tu_open(path);
    size_t n;
    float *want = tu_f32(gold, "image_latents", &n);   // [1, F, C, h, w]
    assert_int_equal(n, sh.numel);
    print_message("  %s image_latents:\n", name);
    ASSERT_REL_L2(prep.image_latents, want, n, 1e-4);
    for (size_t i = (size_t)sh.channels * sh.height * sh.width; i < n; i++) assert_true(prep.image_latents[i] == 0.0f);
    free(want);
    want = tu_f32(gold, "initial_latents", &n);
    assert_int_equal(n, sh.numel);
    assert_memory_equal(prep.init, want, n * sizeof(float));   /* the generator's order, bit for bit */
    assert_true(sp.init_latents == prep.init && sp.cond == prep.image_latents && sp.t_start == 0);
    free(want);
    cvx_st_close(gold);
    cvx_prepared_free(&prep);
    cvx_scheduler_free(&sched);
    cvx_conditioning_free(&cond);
    cvx_model_close(m);
}
static void test_api_i2v_5b(void **s) { (void)s; api_i2v_prepare("e2e_i2v_5b"); }
static void test_api_i2v_15(void **s) { (void)s; api_i2v_prepare("e2e_i2v_1.5"); }

/* prepare_latents of a pipeline loaded in bf16 / fp16 (the official I2V demo runs in bf16): the
 * encoder sample's randn (DiagonalGaussianDistribution.sample: dtype=parameters.dtype) and the
 * noise (randn_tensor(dtype=prompt_embeds.dtype)) are both drawn in the pipeline's dtype, with the
 * T2V kernel (cvx_randn_as). No golden case runs I2V/V2V in bf16 (README §11/§12 are f32), so the
 * expected values are built here from the same seed and shapes, bit for bit. The conditioning is
 * synthetic (no VAE encode needed): prepare_latents only reads its mean and std. */
static void api_prepare_noise_dtype(const char *name, int v2v, cvx_dtype nd) {
    cli_case_call c;
    cli_case_call_load(&c, name);
    char dir[256], path[512];
    snprintf(dir, sizeof dir, GOLDEN "/%s/model", name);
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = dir, .threads = 1});
    ASSERT_NONNULL(m);
    cvx_scheduler sched;
    snprintf(path, sizeof path, "%s/scheduler/scheduler_config.json", dir);
    ASSERT_OK(cvx_scheduler_load(&sched, path, NULL));
    cvx_loop_request sp_req = {.frames = (int)c.frames, .height = (int)c.height, .width = (int)c.width, .num_inference_steps = (int)c.steps, .seed = (uint64_t)c.seed};
    cvx_loop_params sp = {.req = &sp_req, .vae_scale_spatial = 8, .vae_scale_temporal = 4, .noise_dtype = (int)nd};
    cvx_latent_shape sh;
    ASSERT_OK(cogvideox_latent_shape_for(&cogvideox_state_of(m)->tcfg, &sp, !v2v, &sh));
    const size_t hw = (size_t)sh.height * sh.width;
    cvx_conditioning cond = {.mode = v2v ? CVX_MODE_V2V : CVX_MODE_I2V, .C = sh.channels, .T = v2v ? sh.frames : 1,
                             .h = sh.height, .w = sh.width, .frames = (int)c.frames, .height = (int)c.height,
                             .width = (int)c.width};
    const size_t nc = (size_t)cond.C * cond.T * hw;
    cond.mean = cvx_alloc_f32(nc);   // [C, T, h, w]
    cond.std = cvx_alloc_f32(nc);
    for (size_t i = 0; i < nc; i++) cond.mean[i] = 0.5f * sinf((float)i), cond.std[i] = 0.1f + 0.05f * (float)(i % 7);
    cvx_prepared prep;
    ASSERT_OK(cogvideox_prepare_conditioned(m, &cond, &sched, v2v ? c.strength : 0, &sp, &sh, &prep));

    /* expected: the generator's draws in nd, encoder sample first, then the noise */
    cvx_generator g;
    cvx_generator_seed(&g, (uint64_t)c.seed);
    float *eps = cvx_alloc_f32(nc), *noise = cvx_alloc_f32(sh.numel), *want = cvx_alloc_f32(sh.numel);
    ASSERT_OK(cvx_randn_as(&g, nd, eps, nc));
    for (size_t i = 0; i < nc; i++) eps[i] = cond.mean[i] + cond.std[i] * eps[i];   /* the encoder sample */
    ASSERT_OK(cvx_randn_as(&g, nd, noise, sh.numel));
    const double sf = m->info.vae_scaling_factor;
    if (!v2v) {
        const float k = (float)(cogvideox_state_of(m)->vcfg.invert_scale_latents ? 1.0 / sf : sf);
        for (size_t i = 0; i < nc; i++) assert_true(prep.image_latents[i] == k * eps[i]);
        assert_memory_equal(prep.init, noise, sh.numel * sizeof(float));
    } else {
        for (size_t i = 0; i < nc; i++) eps[i] *= (float)sf;
        float *x0 = cvx_alloc_f32(sh.numel);
        cvx_permute_fc_to_cf(eps, cond.C, cond.T, hw, 0, x0);   // [C, T, hw] -> [T, C, hw]
        sched.type->add_noise(&sched, sp.t_start, x0, noise, sh.numel, want);
        assert_true(sp.t_start > 0);
        assert_memory_equal(prep.init, want, sh.numel * sizeof(float));
        free(x0);
    }
    /* the generator carries on from there (the DPM step noise) */
    float a, b;
    cvx_randn(&g, &a, 1);
    cvx_randn(&prep.gen, &b, 1);
    assert_true(a == b);
    print_message("  %s, noise %s: encoder sample and noise drawn as torch.randn(dtype=) (%zu + %zu values)\n", name,
                  nd == CVX_BF16 ? "bf16" : "fp16", nc, sh.numel);
    free(eps), free(noise), free(want);
    cvx_prepared_free(&prep);
    cvx_scheduler_free(&sched);
    cvx_conditioning_free(&cond);
    cvx_model_close(m);
}
static void test_api_i2v_noise_bf16(void **s) { (void)s; api_prepare_noise_dtype("e2e_i2v_5b", 0, CVX_BF16); }
static void test_api_i2v_15_noise_fp16(void **s) { (void)s; api_prepare_noise_dtype("e2e_i2v_1.5", 0, CVX_F16); }
static void test_api_v2v_noise_bf16(void **s) { (void)s; api_prepare_noise_dtype("e2e_v2v_5b", 1, CVX_BF16); }

/* The same through cvx_sample (the pipeline's path, not the family's function alone): the noise
 * dtype must reach prepare_latents. With DDIM (no step noise) a video-to-video run differs between
 * --noise_dtype f32 and bf16 only through those draws, so equal latents mean the setting was
 * dropped on the way (a regression of the family refactor: f32 draws for every I2V/V2V run). */
static void test_api_sample_noise_dtype_reaches_prepare(void **s) {
    (void)s;
    cli_case_call c;
    cli_case_call_load(&c, "e2e_v2v_5b");
    char dir[256];
    snprintf(dir, sizeof dir, GOLDEN "/e2e_v2v_5b/model");
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = dir, .threads = 1});   /* f32 */
    ASSERT_NONNULL(m);
    const cogvideox_config *tc = &cogvideox_state_of(m)->tcfg;
    const int hs = (int)c.height / 8, ws = (int)c.width / 8, T = ((int)c.frames - 1) / 4 + 1, C = tc->out_channels;
    const size_t nc = (size_t)C * T * hs * ws;
    cvx_conditioning cond = {.mode = CVX_MODE_V2V, .C = C, .T = T, .h = hs, .w = ws, .frames = (int)c.frames,
                             .height = (int)c.height, .width = (int)c.width};
    cond.mean = cvx_alloc_f32(nc), cond.std = cvx_alloc_f32(nc);
    for (size_t i = 0; i < nc; i++) cond.mean[i] = 0.5f * sinf((float)i), cond.std[i] = 0.1f + 0.05f * (float)(i % 7);
    const int L = tc->max_text_seq_length, D = tc->text_embed_dim;
    cvx_embeddings emb = {.prompt = cvx_calloc((size_t)L * D, sizeof(float)),
                          .negative = cvx_calloc((size_t)L * D, sizeof(float)), .L = L, .D = D};
    cvx_latents out[2];
    const char *nd[2] = {"f32", "bf16"};
    for (int k = 0; k < 2; k++) {
        cvx_sample_params p = {0};
        p.frames = (int)c.frames, p.height = (int)c.height, p.width = (int)c.width, p.num_inference_steps = 4;
        p.guidance_scale = 1, p.seed = (uint64_t)c.seed, p.scheduler = "ddim", p.conditioning = &cond;
        p.strength = 0.6, p.noise_dtype = nd[k];
        ASSERT_OK(cvx_sample(m, &p, &emb, NULL, NULL, &out[k]));
    }
    const size_t n = (size_t)out[0].C * out[0].T * out[0].h * out[0].w;
    assert_true(memcmp(out[0].data, out[1].data, n * sizeof(float)) != 0);
    for (int k = 0; k < 2; k++) cvx_latents_free(&out[k]);
    cvx_embeddings_free(&emb);
    cvx_conditioning_free(&cond);
    cvx_model_close(m);
}

/* upstream get_timesteps */
static void test_strength_t_start(void **s) {
    (void)s;
    int t;
    ASSERT_OK(cvx_strength_t_start(4, 0.6, &t));
    assert_int_equal(t, 2);   /* int(2.4) = 2 steps run: timesteps [499, 249] of 4 */
    ASSERT_OK(cvx_strength_t_start(50, 0.8, &t));
    assert_int_equal(t, 10);
    ASSERT_OK(cvx_strength_t_start(4, 1.0, &t));
    assert_int_equal(t, 0);
    assert_int_equal(cvx_strength_t_start(4, 0.2, &t), -1);   /* int(0.8) = 0: no step */
    assert_non_null(strstr(cvx_last_error(), "--strength"));
    assert_int_equal(cvx_strength_t_start(4, 1.5, &t), -1);
}

/* ---- bad inputs: one clear error line, non-zero exit, nothing written ---- */
static int dir_is_empty(const char *dir) {   /* the run lock file (.lock) does not count: it holds no output */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "[ -z \"$(ls -A %s | grep -vx .lock)\" ]", dir);
    return system(cmd) == 0;
}

static void expect_fail(const char *cmd, const char *needle, const char *out_dir) {
    char err[8192];
    int rc = tu_run(cmd, err, sizeof err);
    print_message("  -> %s", err);
    if (rc == 0) fail_msg("expected failure: %s", cmd);
    if (!strstr(err, needle)) fail_msg("error lacks '%s': %s", needle, err);
    if (out_dir) assert_true(dir_is_empty(out_dir));
}

static void test_bad_inputs(void **s) {
    (void)s;
    char dir[256], empty[300], notimg[300], cmd[4096];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(empty, sizeof empty, "%s/empty_frames", dir);
    snprintf(notimg, sizeof notimg, "%s/not_an_image.png", dir);
    tu_write(notimg, "this is not a png", 17);
    assert_int_equal(mkdir(empty, 0755), 0);
    char out[300];
    snprintf(out, sizeof out, "%s/out", dir);
    assert_int_equal(mkdir(out, 0755), 0);
    const char *i2v = GOLDEN "/e2e_i2v_5b/model", *t2v = GOLDEN "/e2e_5b/model";
    /* unreadable image */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s --image %s", s1, i2v, out, notimg);
    expect_fail(cmd, "not_an_image.png", out);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s --image %s/nope.png", s1, i2v, out,
             dir);
    expect_fail(cmd, "nope.png", out);
    /* a video with no frames */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s --video %s", s1, t2v, out, empty);
    expect_fail(cmd, "empty_frames", out);
    /* an image given to a text-to-video model */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s --image " GOLDEN
             "/e2e_i2v_5b/image.png --height 48 --width 64", s1, t2v, out);
    expect_fail(cmd, "text-to-video model", out);
    /* a video given to an image-to-video model */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s --video " GOLDEN
             "/e2e_v2v_5b/video --height 48 --width 64", s1, i2v, out);
    expect_fail(cmd, "video-to-video runs on text-to-video", out);
    /* 5b-I2V at another size than its sample size */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s --image " GOLDEN
             "/e2e_i2v_5b/image.png --height 64 --width 64", s1, i2v, out);
    expect_fail(cmd, "learned positional embeddings", out);
    /* a V2V frame count that is not 4k+1 */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s --video " GOLDEN
             "/e2e_v2v_5b/video --frames 7 --height 48 --width 64", s1, t2v, out);
    expect_fail(cmd, "4k+1", out);
    /* --frames beyond the video's 9 (issue 21: 9 used silently) */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s --video " GOLDEN
             "/e2e_v2v_5b/video --frames 13 --height 48 --width 64", s1, t2v, out);
    expect_fail(cmd, "--frames 13: " GOLDEN "/e2e_v2v_5b/video has only 9 frames", out);
    /* a T2V run on an I2V model: stage 2 refuses, writes nothing */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s", s1, i2v, out);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_dir %s/s2 --model_dir %s --num_inference_steps 2 "
             "--frames 9 --height 48 --width 64", s2, out, dir, i2v);
    expect_fail(cmd, "image-to-video model", NULL);
    char s2dir[300];
    snprintf(s2dir, sizeof s2dir, "%s/s2", dir);
    struct stat st;
    assert_true(stat(s2dir, &st) != 0 || dir_is_empty(s2dir));
    /* --strength with an image (issue 21: accepted and ignored) */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s/i2v --image " GOLDEN
             "/e2e_i2v_5b/image.png --height 48 --width 64", s1, i2v, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s/i2v --output_dir %s/s2 --model_dir %s --num_inference_steps 2 "
             "--strength 0.5", s2, dir, dir, i2v);
    expect_fail(cmd, "--strength 0.5 is for video-to-video; image-to-video", NULL);
    assert_true(stat(s2dir, &st) != 0 || dir_is_empty(s2dir));
    /* --strength without a video */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_dir %s/s2 --model_dir %s --strength 0.5", s2, out,
             dir, t2v);
    expect_fail(cmd, "--strength", NULL);
    tu_rmrf(dir);
}

/* A T2V stage-1 run after an I2V one removes the stale conditioning; stage 2 checks the size. */
static void test_stale_and_size(void **s) {
    (void)s;
    char dir[256], cmd[4096], path[512];
    tu_mkdtemp(dir, sizeof dir);
    const char *i2v = GOLDEN "/e2e_i2v_5b/model";
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s --image " GOLDEN
             "/e2e_i2v_5b/image.png --height 48 --width 64", s1, i2v, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage1_conditioning.safetensors", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    /* stage 2 at another size than stage 1 encoded */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --num_inference_steps 2 --height 96", s2, dir,
             i2v);
    expect_fail(cmd, "stage 1 encoded the image at 64x48", NULL);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir %s --output_dir %s", s1, i2v, dir);
    tu_run_ok(cmd);
    assert_true(stat(path, &st) != 0);
    tu_rmrf(dir);
}


/* A V2V run, then T2V in the same directory: generation_config.json keeps no V2V keys (stage 1's
 * conditioning_frames, stage 2's strength). */
static void test_v2v_then_t2v_keys(void **s) {
    (void)s;
    char dir[256], cmd[4096], gc[512];
    const char *model = GOLDEN "/e2e_v2v_5b/model";
    tu_mkdtemp(dir, sizeof dir);
    snprintf(gc, sizeof gc, "%s/generation_config.json", dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'a cat' --model_dir %s --output_dir %s --video " GOLDEN
             "/e2e_v2v_5b/video --height 48 --width 64", s1, model, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --num_inference_steps 2 --strength 0.5", s2,
             dir, model);
    tu_run_ok(cmd);
    assert_true(tu_genconfig_has(gc, "strength") && tu_genconfig_has(gc, "conditioning_frames"));
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'a cat' --model_dir %s --output_dir %s", s1, model, dir);
    tu_run_ok(cmd);
    assert_false(tu_genconfig_has(gc, "conditioning_frames"));
    /* T2V into another directory: the input's config still has the V2V run's strength */
    char out_gc[600];
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --output_dir %s/out --model_dir %s --num_inference_steps 2 "
             "--frames 9 --height 48 --width 64", s2, dir, dir, model);
    tu_run_ok(cmd);
    snprintf(out_gc, sizeof out_gc, "%s/out/generation_config.json", dir);
    assert_false(tu_genconfig_has(out_gc, "strength"));
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --num_inference_steps 2 --frames 9 "
             "--height 48 --width 64", s2, dir, model);
    tu_run_ok(cmd);
    assert_false(tu_genconfig_has(gc, "strength"));
    tu_rmrf(dir);
}

/* record the xxh64 of dir's (damaged) conditioning file in its generation_config.json, so that
 * stage 2 gets past the pair check to the reader's own */
static void rehash_conditioning(const char *dir) {
    char p[512], gc[512], hex[17];
    snprintf(p, sizeof p, "%s/stage1_conditioning.safetensors", dir);
    snprintf(gc, sizeof gc, "%s/generation_config.json", dir);
    ASSERT_OK(cvx_file_xxh64(p, hex));
    json_object *upd = json_object_new_object();
    json_object_object_add(upd, "stage1_conditioning_xxh64", json_object_new_string(hex));
    ASSERT_OK(cvx_genconfig_update(gc, upd));
    json_object_put(upd);
}

/* A NaN / Inf in stage 1's conditioning file is an error naming the tensor and index before the
 * loop (not a "diverged" at step 1, nor NaN latents). */
static void test_nonfinite_conditioning(void **s) {
    (void)s;
    char dir[256], cmd[4096], path[512];
    const char *model = GOLDEN "/e2e_v2v_5b/model";
    tu_mkdtemp(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'a cat' --model_dir %s --output_dir %s --video " GOLDEN
             "/e2e_v2v_5b/video --height 48 --width 64", s1, model, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage1_conditioning.safetensors", dir);
    tu_poke_f32(path, "latent_mean", 7, NAN);
    rehash_conditioning(dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --num_inference_steps 2", s2, dir, model);
    expect_fail(cmd, "latent_mean", NULL);
    expect_fail(cmd, "index 7", NULL);
    tu_poke_f32(path, "latent_mean", 7, 0.0f);
    tu_poke_f32(path, "latent_std", 11, INFINITY);
    rehash_conditioning(dir);
    expect_fail(cmd, "latent_std", NULL);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    assert_false(cvx_is_file(path));
    tu_rmrf(dir);
}

/* stage1_conditioning.safetensors is committed with the embeddings and generation_config.json
 * (its xxh64 recorded there): stage 2 refuses one that is not the file stage 1 wrote with them
 * (changed, or left from an earlier I2V/V2V run after a T2V stage-1 run). */
static void test_conditioning_pair(void **s) {
    (void)s;
    char dir[256], cmd[4096], path[512], keep[512], s1cmd[2048];
    const char *model = GOLDEN "/e2e_v2v_5b/model";
    tu_mkdtemp(dir, sizeof dir);
    snprintf(s1cmd, sizeof s1cmd, "%s --quiet --prompt 'a cat' --model_dir %s --output_dir %s --video " GOLDEN
             "/e2e_v2v_5b/video --height 48 --width 64", s1, model, dir);
    tu_run_ok(s1cmd);
    snprintf(path, sizeof path, "%s/stage1_conditioning.safetensors", dir);
    snprintf(keep, sizeof keep, "%s/kept.safetensors", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s", path, keep);
    tu_run_ok(cmd);
    tu_poke_f32(path, "latent_mean", 3, 0.125f);   /* finite, but not what stage 1 wrote */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --num_inference_steps 2", s2, dir, model);
    expect_fail(cmd, "stage1_conditioning.safetensors does not belong", NULL);
    /* a T2V stage-1 run, then the earlier run's conditioning put back */
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'a cat' --model_dir %s --output_dir %s", s1, model, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "cp %s %s", keep, path);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --num_inference_steps 2", s2, dir, model);
    expect_fail(cmd, "run stage 1 again", NULL);
    /* stage 1 again: the pair is whole */
    tu_run_ok(s1cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --num_inference_steps 2", s2, dir, model);
    tu_run_ok(cmd);
    tu_rmrf(dir);
}

/* V2V through a stop and --resume: bit-identical to the uninterrupted run (the golden run's
 * latents), and a resume with another --strength is refused naming it. */
static void test_v2v_resume(void **s) {
    (void)s;
    cli_case_call c;
    cli_case_call_load(&c, "e2e_v2v_5b");
    char dir[256], cmd[4096], qp[1100], path[512], base[2048];
    const char *model = GOLDEN "/e2e_v2v_5b/model";
    tu_mkdtemp(dir, sizeof dir);
    tu_shell_quote(qp, sizeof qp, c.prompt);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt %s --model_dir %s --output_dir %s --video " GOLDEN
             "/e2e_v2v_5b/video --height 48 --width 64", s1, qp, model, dir);
    tu_run_ok(cmd);
    snprintf(base, sizeof base, "%s --quiet --input_dir %s --model_dir %s --num_inference_steps %lld --guidance_scale %g "
             "--seed %lld", s2, dir, model, (long long)c.steps, c.guidance, (long long)c.seed);
    snprintf(cmd, sizeof cmd, "%s --strength %g --stop_after_steps 1", base, c.strength);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    struct stat st;
    assert_true(stat(path, &st) != 0);   /* stopped: no result yet */
    snprintf(cmd, sizeof cmd, "%s --strength 0.9 --resume", base);
    expect_fail(cmd, "strength", NULL);
    snprintf(cmd, sizeof cmd, "%s --strength %g --resume", base, c.strength);
    tu_run_ok(cmd);
    cvx_safetensors *l = tu_open(path), *gold = tu_open(GOLDEN "/e2e_v2v_5b/expected.safetensors");
    const cvx_tensor *lt = cvx_st_find(l, "latents");
    float *got = cvx_tensor_f32_dup(lt), *want = golden_latents_cf(cvx_st_find(gold, "final_latents"), 0);
    print_message("  resumed final_latents:\n");
    ASSERT_REL_L2(got, want, (size_t)lt->numel, 1e-4);
    free(got), free(want);
    cvx_st_close(l), cvx_st_close(gold);
    tu_rmrf(dir);
}

/* The summary helpers on their own: T2V, T2V resumed, V2V, V2V resumed. */
static void test_steps_text(void **s) {
    (void)s;
    char buf[160];
    cvx_sample_params r = {.num_inference_steps = 50, .strength = 0.8};
    cvx_latents t2v = {.steps_done = 50, .resumed_from = 20, .scheduler = "ddim"};
    cvx_latents_steps_text(&t2v, &r, buf, sizeof buf);
    assert_string_equal(buf, "50 steps ddim, resumed after 20");
    cvx_sample_params one = {.num_inference_steps = 1};
    cvx_latents t2v1 = {.steps_done = 1, .scheduler = "ddim"};
    cvx_latents_steps_text(&t2v1, &one, buf, sizeof buf);
    assert_string_equal(buf, "1 step ddim");
    assert_int_equal(cvx_latents_steps_ran(&t2v), 30);
    cvx_latents v2v = {.steps_done = 50, .steps_skipped = 10, .scheduler = "dpm"};
    cvx_latents_steps_text(&v2v, &r, buf, sizeof buf);
    assert_string_equal(buf, "40 of 50 steps dpm (strength 0.8 skips the first 10)");
    assert_int_equal(cvx_latents_steps_ran(&v2v), 40);
    v2v.resumed_from = 25;   /* schedule position: 15 loop steps were in the checkpoint */
    cvx_latents_steps_text(&v2v, &r, buf, sizeof buf);
    assert_string_equal(buf, "40 of 50 steps dpm (strength 0.8 skips the first 10), resumed after 15");
    assert_int_equal(cvx_latents_steps_ran(&v2v), 25);
}

/* V2V with --strength < 1 runs the last steps only: stage 2's summary counts the steps it ran
 * (and the time per step over those), not the ones strength skips; so does a --stop_after_steps
 * stop. 4 steps at strength 0.6: 2 skipped, 2 run. */
static void test_v2v_summary_counts_steps_run(void **s) {
    (void)s;
    char dir[256], cmd[4096], err[8192], base[2048];
    const char *model = GOLDEN "/e2e_v2v_5b/model";
    tu_mkdtemp(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'a cat' --model_dir %s --output_dir %s --video " GOLDEN
             "/e2e_v2v_5b/video --height 48 --width 64", s1, model, dir);
    tu_run_ok(cmd);
    snprintf(base, sizeof base, "%s --input_dir %s --model_dir %s --num_inference_steps 4 --strength 0.6 --threads 1",
             s2, dir, model);
    snprintf(cmd, sizeof cmd, "%s --stop_after_steps 1", base);
    if (tu_run(cmd, err, sizeof err)) fail_msg("%s\n%s", cmd, err);
    const char *line = strstr(err, "stopped after");
    assert_non_null(line);
    print_message("  %.*s\n", (int)strcspn(line, "\n"), line);
    assert_true(!strncmp(line, "stopped after step 1 of 2 ", 26));
    snprintf(cmd, sizeof cmd, "%s --resume", base);
    if (tu_run(cmd, err, sizeof err)) fail_msg("%s\n%s", cmd, err);
    line = strstr(err, "wrote ");
    assert_non_null(line);
    print_message("  %.*s\n", (int)strcspn(line, "\n"), line);
    assert_non_null(strstr(line, " 2 of 4 steps dpm (strength 0.6 skips the first 2), resumed after 1)"));
    snprintf(cmd, sizeof cmd, "%s", base);
    if (tu_run(cmd, err, sizeof err)) fail_msg("%s\n%s", cmd, err);
    line = strstr(err, "wrote ");
    assert_non_null(line);
    print_message("  %.*s\n", (int)strcspn(line, "\n"), line);
    assert_non_null(strstr(line, " 2 of 4 steps dpm (strength 0.6 skips the first 2))"));
    tu_rmrf(dir);
}

/* make's stamps: STRENGTH re-runs stage 2 only; a changed frame of VIDEO re-runs stage 1. */
static void test_make_video_strength(void **s) {
    (void)s;
    char dir[256], out[300], video[300], base[1200], cmd[2048];
    const char *b = getenv("BUILD");
    tu_mkdtemp(dir, sizeof dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(video, sizeof video, "%s/video", dir);
    snprintf(cmd, sizeof cmd, "cp -r " GOLDEN "/e2e_v2v_5b/video %s", video);
    tu_run_ok(cmd);
    snprintf(base, sizeof base, "make -s --no-print-directory %s/stage2_latents.safetensors BIN=%s/bin OUT=%s THREADS=1 "
             "VIDEO=%s", out, b && b[0] ? b : "build", out, video);
    snprintf(cmd, sizeof cmd, "%s STRENGTH=0.5 >/dev/null 2>&1", base);
    tu_run_ok(cmd);
    double t1 = tu_mtime(out, "stage1_embeddings.safetensors"), t2 = tu_mtime(out, "stage2_latents.safetensors");
    snprintf(cmd, sizeof cmd, "%s STRENGTH=0.75 >/dev/null 2>&1", base);
    tu_run_ok(cmd);
    assert_true(tu_mtime(out, "stage1_embeddings.safetensors") == t1);
    assert_true(tu_mtime(out, "stage2_latents.safetensors") > t2);
    t2 = tu_mtime(out, "stage2_latents.safetensors");
    snprintf(cmd, sizeof cmd, "sleep 0.01; cp %s/0001.png %s/0000.png && %s STRENGTH=0.75 >/dev/null 2>&1", video, video,
             base);
    tu_run_ok(cmd);
    assert_true(tu_mtime(out, "stage1_embeddings.safetensors") > t1);
    assert_true(tu_mtime(out, "stage2_latents.safetensors") > t2);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strength_t_start),
        cmocka_unit_test(test_api_i2v_5b),
        cmocka_unit_test(test_api_i2v_15),
        cmocka_unit_test(test_api_i2v_noise_bf16),
        cmocka_unit_test(test_api_i2v_15_noise_fp16),
        cmocka_unit_test(test_api_v2v_noise_bf16),
        cmocka_unit_test(test_api_sample_noise_dtype_reaches_prepare),
        cmocka_unit_test(test_cli_i2v_5b),
        cmocka_unit_test(test_cli_i2v_5b_resize),
        cmocka_unit_test(test_cli_i2v_15),
        cmocka_unit_test(test_cli_v2v_5b),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_stale_and_size),
        cmocka_unit_test(test_v2v_resume),
        cmocka_unit_test(test_v2v_then_t2v_keys),
        cmocka_unit_test(test_nonfinite_conditioning),
        cmocka_unit_test(test_conditioning_pair),
        cmocka_unit_test(test_steps_text),
        cmocka_unit_test(test_v2v_summary_counts_steps_run),
        cmocka_unit_test(test_make_video_strength),
    };
    return cmocka_run_group_tests_name("e2e_conditioning", tests, cli_setup, NULL);
}
