/* The stage3 program end to end on the golden e2e_2b case: the final latents written as the
 * staged TPU pipeline writes them (bf16 `latents` [B, C, T, H, W] + metadata) decode to an MP4
 * that ffprobe reads back with the right frame count, size, fps and codec; --output_frames
 * matches the golden decoded video; --png_dir / --contact_sheet write PNGs; bad inputs fail
 * with one clear line, a non-zero exit and no video left behind. */
#include "testutil.h"
#include "dtype.h"
#include "fileio.h"
#include "stage3/cogvideox_vae.h"
#include "stage3/video.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <sys/stat.h>

#define E2E GOLDEN "/e2e_2b"

/* Write `latents` = golden final_latents [1, F, C, H, W] permuted to [1, C, F, H, W], stored as
 * `store`, with the staged pipeline's metadata; `shape_override` (rank, dims) for bad files. */
static void write_latents(const char *path, cvx_dtype store, int bad_rank, int extra_channels) {
    cvx_safetensors *st = tu_open(E2E "/expected.safetensors");
    const cvx_tensor *t = cvx_st_find(st, "final_latents");
    ASSERT_NONNULL(t);
    int F = (int)t->shape[1], C = (int)t->shape[2], H = (int)t->shape[3], W = (int)t->shape[4];
    float *src = cvx_tensor_f32_dup(t);
    int Co = C + extra_channels;
    float *z = calloc((size_t)Co * F * H * W, sizeof(float));
    cvx_permute_fc_to_cf(src, F, C, (size_t)H * W, 0, z);   /* the extra channels stay 0 */
    cvx_st_writer *w = cvx_stw_new();
    if (bad_rank) ASSERT_OK(cvx_stw_add_f32(w, "latents", store, 4, (int64_t[]){Co, F, H, W}, z));
    else ASSERT_OK(cvx_stw_add_f32(w, "latents", store, 5, (int64_t[]){1, Co, F, H, W}, z));
    ASSERT_OK(cvx_stw_metadata(w, "num_frames", "9"));
    ASSERT_OK(cvx_stw_metadata(w, "num_inference_steps", "4"));
    ASSERT_OK(cvx_stw_metadata(w, "guidance_scale", "6.0"));
    ASSERT_OK(cvx_stw_metadata(w, "seed", "42"));
    ASSERT_OK(cvx_stw_metadata(w, "height", "48"));
    ASSERT_OK(cvx_stw_metadata(w, "width", "64"));
    ASSERT_OK(cvx_stw_metadata(w, "dtype_info", store == CVX_BF16 ? "{\"latents\": \"bfloat16\"}"
                                                                   : "{\"latents\": \"float32\"}"));
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);
    free(z), free(src);
    cvx_st_close(st);
}

static void write_genconfig(const char *dir) {
    char path[512], model[PATH_MAX], json[PATH_MAX + 128];
    if (!realpath(E2E "/model", model)) fail_msg("realpath failed");
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    snprintf(json, sizeof json, "{\"model_id\": \"%s\", \"frames\": 9, \"fps\": 8, \"seed\": 42}", model);
    tu_write(path, json, strlen(json));
}

static int count_files(const char *dir, const char *substr) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, substr)) n++;
    closedir(d);
    return n;
}

/* ffprobe: codec, width, height, r_frame_rate, counted frames. */
static void probe(const char *video, char *out, size_t n) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "ffprobe -v error -select_streams v:0 -count_frames -show_entries "
             "stream=codec_name,width,height,r_frame_rate,nb_read_frames,pix_fmt -of csv=p=0 '%s'",
             video);
    FILE *p = popen(cmd, "r");
    if (!p) fail_msg("cannot run ffprobe");
    size_t k = fread(out, 1, n - 1, p);
    out[k] = 0;
    pclose(p);
    while (k && (out[k - 1] == '\n' || out[k - 1] == '\r')) out[--k] = 0;
}

static double frames_error(const char *frames_path) {
    cvx_safetensors *a = tu_open(frames_path), *b = tu_open(E2E "/expected.safetensors");
    size_t na, nb;
    float *got = tu_f32(a, "decoded", &na), *want = tu_f32(b, "decoded", &nb);
    assert_int_equal(na, nb);
    const cvx_tensor *t = cvx_st_find(a, "decoded");
    assert_int_equal(t->ndim, 5);
    assert_int_equal(t->shape[2], 9);
    double e = cvx_rel_l2(got, want, na);
    free(got), free(want);
    cvx_st_close(a), cvx_st_close(b);
    return e;
}

/* Our own decode of the golden final latents rounded to bf16 (what the program must reproduce
 * from a bf16 file): [3, 9, 48, 64]. */
static float *decode_bf16_rounded(void) {
    cogvideox_vae_decoder d;
    ASSERT_OK(cogvideox_vae_load(&d, E2E "/model/vae", NULL));
    cvx_safetensors *st = tu_open(E2E "/expected.safetensors");
    const cvx_tensor *t = cvx_st_find(st, "final_latents");
    int F = (int)t->shape[1], C = (int)t->shape[2], H = (int)t->shape[3], W = (int)t->shape[4];
    float *src = cvx_tensor_f32_dup(t), *z = cvx_alloc_f32((size_t)t->numel);
    const float sc = (float)(1.0 / d.scaling_factor);
    for (int f = 0; f < F; f++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < H * W; i++)
                z[((size_t)c * F + f) * H * W + i] =
                    cvx_bf16_to_f32(cvx_f32_to_bf16(src[((size_t)f * C + c) * H * W + i])) * sc;
    int To = cogvideox_vae_output_frames(&d, F);
    float *out = cvx_alloc_f32((size_t)3 * To * H * 8 * W * 8);
    cogvideox_vae_decode_chunked(&d, z, F, H, W, out, NULL);
    free(src), free(z);
    cvx_st_close(st);
    cogvideox_vae_free(&d);
    return out;
}

static void test_decode_bf16_staged_file(void **s) {
    (void)s;
    char dir[256], prog[512], cmd[4096], path[512], err[4096], info[256];
    tu_mkdtemp(dir, sizeof dir);
    tu_program(prog, sizeof prog, "stage3");
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    write_latents(path, CVX_BF16, 0, 0);
    write_genconfig(dir);
    snprintf(cmd, sizeof cmd,
             "%s --input_dir %s --output_frames %s/frames.safetensors --png_dir %s/png --contact_sheet %s/sheet.png "
             "--threads 2",
             prog, dir, dir, dir, dir);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc) fail_msg("stage3 failed (%d): %s", rc, err);
    snprintf(path, sizeof path, "%s/output_video.mp4", dir);
    probe(path, info, sizeof info);
    print_message("  ffprobe: %s\n", info);
    assert_string_equal(info, "h264,64,48,yuv420p,8/1,9");
    snprintf(path, sizeof path, "%s/frames.safetensors", dir);
    double e = frames_error(path);
    print_message("  bf16 latents: decoded vs golden rel L2 = %.3g (tol 1e-2: bf16 rounding of the latents)\n", e);
    assert_true(e <= 1e-2);
    /* Exactly what decoding the bf16-rounded latents gives (reading path: widening, scaling). */
    cvx_safetensors *fs = tu_open(path);
    size_t nf;
    float *got = tu_f32(fs, "decoded", &nf), *want = decode_bf16_rounded();
    ASSERT_REL_L2(got, want, nf, 1e-6);
    free(got), free(want);
    cvx_st_close(fs);
    snprintf(path, sizeof path, "%s/png", dir);
    assert_int_equal(count_files(path, ".png"), 9);
    snprintf(path, sizeof path, "%s/sheet.png", dir);
    assert_true(cvx_is_file(path));
    assert_int_equal(count_files(dir, ".tmp."), 0);
    tu_rmrf(dir);
}

/* F32 latents: the whole stage within the e2e tolerance, 1.0-model default fps, --fps, --crf,
 * an odd size through --tiling on with small tiles (exercises the tiled path via the CLI). */
static void test_decode_f32_matches_golden(void **s) {
    (void)s;
    char dir[256], prog[512], cmd[4096], path[512], err[4096], info[256];
    tu_mkdtemp(dir, sizeof dir);
    tu_program(prog, sizeof prog, "stage3");
    snprintf(path, sizeof path, "%s/lat.safetensors", dir);
    write_latents(path, CVX_F32, 0, 0);
    snprintf(cmd, sizeof cmd,
             "%s --input_dir %s --latents %s --model_dir %s --output_video %s/v.mp4 --fps 12 --crf 10 "
             "--output_frames %s/frames.safetensors --quiet",
             prog, dir, path, E2E "/model", dir, dir);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc) fail_msg("stage3 failed (%d): %s", rc, err);
    if (err[0]) fail_msg("--quiet but stderr has: %s", err);
    snprintf(path, sizeof path, "%s/v.mp4", dir);
    probe(path, info, sizeof info);
    print_message("  ffprobe: %s\n", info);
    assert_string_equal(info, "h264,64,48,yuv420p,12/1,9");
    snprintf(path, sizeof path, "%s/frames.safetensors", dir);
    double e = frames_error(path);
    print_message("  f32 latents: decoded vs golden rel L2 = %.3g (tol 1e-3)\n", e);
    assert_true(e <= 1e-3);
    tu_rmrf(dir);
}

/* NaN/Inf in the latents (a diverged run, a damaged file) are an error naming the tensor and the
 * first bad index, and no video is written (issue 14; this used to decode them as 0). */
static void test_nonfinite_latents_rejected(void **s) {
    (void)s;
    char dir[256], prog[512], cmd[4096], clean[512], bad[512], err[4096], video[600];
    tu_mkdtemp(dir, sizeof dir);
    tu_program(prog, sizeof prog, "stage3");
    snprintf(clean, sizeof clean, "%s/clean.safetensors", dir);
    write_latents(clean, CVX_F32, 0, 0);
    cvx_safetensors *st = tu_open(clean);
    const cvx_tensor *t = cvx_st_find(st, "latents");
    const float vals[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        float *with_bad = cvx_tensor_f32_dup(t);
        for (int64_t i = 37; i < t->numel; i += 37) with_bad[i] = vals[k];
        snprintf(bad, sizeof bad, "%s/bad%d.safetensors", dir, k);
        cvx_st_writer *w = cvx_stw_new();
        ASSERT_OK(cvx_stw_add_f32(w, "latents", CVX_F32, t->ndim, t->shape, with_bad));
        ASSERT_OK(cvx_stw_write(w, bad));
        cvx_stw_free(w);
        free(with_bad);
        snprintf(video, sizeof video, "%s/v%d.mp4", dir, k);
        snprintf(cmd, sizeof cmd, "%s --input_dir %s --latents %s --model_dir %s --output_video %s", prog, dir, bad,
                 E2E "/model", video);
        int rc = tu_run(cmd, err, sizeof err);
        print_message("  stderr: %.200s\n", err);
        assert_int_equal(rc, 1);
        assert_non_null(strstr(err, "tensor 'latents'"));
        assert_non_null(strstr(err, "at index 37"));
        assert_false(cvx_is_file(video));
    }
    cvx_st_close(st);
    tu_rmrf(dir);
}

typedef struct {
    const char *what;
    int bad_rank, extra_channels, truncate;
    const char *output;      /* NULL: <dir>/out.mp4 */
    const char *expect;      /* substring of the error line */
} bad_case;

static void test_errors(void **s) {
    (void)s;
    const bad_case cases[] = {
        {"wrong channel count", 0, 3, 0, NULL, "latent_channels = 4"},
        {"wrong rank", 1, 0, 0, NULL, "rank 4"},
        {"truncated file", 0, 0, 1, NULL, "stage2_latents.safetensors"},
        {"unwritable output", 0, 0, 0, "/nonexistent_cvx_dir/out.mp4", "does not exist"},
    };
    char prog[512];
    tu_program(prog, sizeof prog, "stage3");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case *c = &cases[i];
        char dir[256], path[512], out[512], cmd[4096], err[4096];
        tu_mkdtemp(dir, sizeof dir);
        snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
        write_latents(path, CVX_BF16, c->bad_rank, c->extra_channels);
        write_genconfig(dir);
        if (c->truncate) {
            struct stat sb;
            assert_int_equal(stat(path, &sb), 0);
            assert_int_equal(truncate(path, sb.st_size - 100), 0);
        }
        snprintf(out, sizeof out, "%s", c->output ? c->output : "");
        if (!c->output) snprintf(out, sizeof out, "%s/out.mp4", dir);
        snprintf(cmd, sizeof cmd, "%s --input_dir %s --output_video %s", prog, dir, out);
        int rc = tu_run(cmd, err, sizeof err);
        int lines = 0;
        for (char *p = err; *p; p++) lines += *p == '\n';
        print_message("  %-20s exit %d: %s", c->what, rc, err);
        assert_int_not_equal(rc, 0);
        assert_int_equal(lines, 1);
        assert_non_null(strstr(err, "stage3: error:"));
        if (!strstr(err, c->expect)) fail_msg("%s: error line lacks '%s'", c->what, c->expect);
        assert_false(cvx_is_file(out));
        assert_int_equal(count_files(dir, ".mp4"), 0);
        tu_rmrf(dir);
    }
}

/* Tiles whose stitching gives the frame size (48x40 on the 6x8 latents, golden f3_tiled's) decode
 * to 9 frames of 48x64 with --tiling on; 24x32 (golden f3_tiled_inconsistent: upstream makes 56x68)
 * is refused before anything is decoded or written (issue 21). */
static void test_tiled_frame_size(void **s) {
    (void)s;
    char prog[512], dir[256], path[512], cmd[4096], err[4096];
    tu_program(prog, sizeof prog, "stage3");
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    write_latents(path, CVX_F32, 0, 0);
    write_genconfig(dir);
    snprintf(cmd, sizeof cmd, "%s --input_dir %s --tiling on --tile_sample_min_height 48 --tile_sample_min_width 40 "
             "--output_frames %s/frames.safetensors", prog, dir, dir);
    int rc = tu_run(cmd, err, sizeof err);
    print_message("%s", err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(err, "in tiles of 40x48 samples"));
    assert_non_null(strstr(err, "9 frames 64x48"));
    snprintf(path, sizeof path, "%s/frames.safetensors", dir);
    cvx_safetensors *st = tu_open(path);
    const cvx_tensor *t = cvx_st_find(st, "decoded");
    ASSERT_NONNULL(t);
    assert_true(t->shape[2] == 9 && t->shape[3] == 48 && t->shape[4] == 64);
    cvx_st_close(st);
    unlink(path);
    snprintf(path, sizeof path, "%s/output_video.mp4", dir);
    unlink(path);
    snprintf(cmd, sizeof cmd, "%s --input_dir %s --tiling on --tile_sample_min_height 24 --tile_sample_min_width 32",
             prog, dir);
    rc = tu_run(cmd, err, sizeof err);
    print_message("  %s", err);
    assert_int_equal(rc, 1);
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    assert_non_null(strstr(err, "56 pixels high, not 48"));
    assert_false(cvx_is_file(path));
    /* a decode that stays untiled says why */
    snprintf(cmd, sizeof cmd, "%s --input_dir %s --tiling on", prog, dir);
    tu_run_ok(cmd);
    rc = tu_run(cmd, err, sizeof err);
    assert_non_null(strstr(err, "untiled: the latents fit in one tile of 360x240 samples"));
    snprintf(cmd, sizeof cmd, "%s --input_dir %s --tiling off", prog, dir);
    rc = tu_run(cmd, err, sizeof err);
    assert_non_null(strstr(err, "untiled: --tiling off"));
    snprintf(cmd, sizeof cmd, "%s --input_dir %s --tile_sample_min_height 48 --tile_sample_min_width 40", prog, dir);
    rc = tu_run(cmd, err, sizeof err);
    assert_non_null(strstr(err, "under the 6 GB above which --tiling auto tiles"));
    tu_rmrf(dir);
}

/* Same latents, same MP4 bytes: 10 runs of stage 3 with --threads 1, 2 and 4 and a different heap
 * content each (MALLOC_PERTURB_: libx264's AVX-512 code read uninitialised memory, and 5 identical
 * runs gave 4 different files, issue 21). */
static void test_mp4_same_bytes(void **s) {
    (void)s;
    char prog[512], dir[256], path[512], cmd[4096], first[512];
    tu_program(prog, sizeof prog, "stage3");
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    write_latents(path, CVX_F32, 0, 0);
    write_genconfig(dir);
    const int threads[3] = {1, 2, 4};
    size_t n0 = 0, n;
    char *want = NULL;
    for (int i = 0; i < 10; i++) {
        snprintf(path, sizeof path, "%s/v%d.mp4", dir, i);
        snprintf(cmd, sizeof cmd, "MALLOC_PERTURB_=%d %s --quiet --input_dir %s --threads %d --output_video %s",
                 i ? 23 * i + 7 : 0, prog, dir, threads[i % 3], path);
        tu_run_ok(cmd);
        char *got = cvx_read_file(path, &n);
        ASSERT_NONNULL(got);
        if (!want) {
            want = got, n0 = n;
            snprintf(first, sizeof first, "%s", path);
            continue;
        }
        if (n != n0 || memcmp(got, want, n) != 0)
            fail_msg("run %d (--threads %d): %s (%zu bytes) differs from %s (%zu bytes)", i, threads[i % 3], path, n,
                     first, n0);
        free(got);
    }
    print_message("  10 runs, --threads 1/2/4: %zu bytes each, identical\n", n0);
    free(want);
    tu_rmrf(dir);
}

/* Odd frame sizes: padded to even (last row/column repeated) for yuv420p; PNGs keep the size. */
static void test_odd_size_video(void **s) {
    (void)s;
    const int T = 5, H = 33, W = 47;
    float *dec = cvx_alloc_f32((size_t)3 * T * H * W);
    for (size_t i = 0; i < (size_t)3 * T * H * W; i++) dec[i] = (float)((i % 97) / 48.0 - 1.0);
    char dir[256], path[512], info[256];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/odd.mp4", dir);
    video_opts o = {16, 23, 0};
    const char *codec = NULL;
    ASSERT_OK(video_write_mp4(path, dec, T, H, W, &o, &codec));
    assert_string_equal(codec, "libx264");
    probe(path, info, sizeof info);
    print_message("  ffprobe: %s\n", info);
    assert_string_equal(info, "h264,48,34,yuv420p,16/1,5");
    snprintf(path, sizeof path, "%s/png", dir);
    ASSERT_OK(video_write_pngs(path, dec, T, H, W));
    assert_int_equal(count_files(path, ".png"), T);
    /* no H.264 encoder: MPEG-4 part 2 with a warning */
    setenv("CVX_VIDEO_NO_H264", "1", 1);
    snprintf(path, sizeof path, "%s/fallback.mp4", dir);
    ASSERT_OK(video_write_mp4(path, dec, T, H, W, &o, &codec));
    unsetenv("CVX_VIDEO_NO_H264");
    assert_string_equal(codec, "mpeg4");
    probe(path, info, sizeof info);
    print_message("  ffprobe (fallback): %s\n", info);
    assert_string_equal(info, "mpeg4,48,34,yuv420p,16/1,5");
    /* unwritable target: error, nothing left behind */
    assert_int_equal(video_write_mp4("/nonexistent_cvx_dir/x.mp4", dec, T, H, W, &o, NULL), -1);
    print_message("  error: %s\n", cvx_last_error());
    assert_int_equal(count_files(dir, ".tmp."), 0);
    free(dec);
    tu_rmrf(dir);
}

/* Post-processing to 8 bits: clamp(x/2+0.5), ×255, round half to even (numpy_to_pil). */
static void test_u8_rounding(void **s) {
    (void)s;
    assert_int_equal(video_u8(-1.0f), 0);
    assert_int_equal(video_u8(-3.0f), 0);
    assert_int_equal(video_u8(1.0f), 255);
    assert_int_equal(video_u8(7.0f), 255);
    assert_int_equal(video_u8(0.0f), 128);   /* 127.5 -> 128 (half to even) */
    assert_int_equal(video_u8(-0.5f), 64);   /* 63.75 */
    float x = 0.3f;
    float v = x / 2.0f + 0.5f;
    assert_int_equal(video_u8(x), (int)rintf(v * 255.0f));
}

static void test_help(void **s) {
    (void)s;
    char prog[512], cmd[1024], err[1024];
    tu_program(prog, sizeof prog, "stage3");
    snprintf(cmd, sizeof cmd, "%s --help > /dev/null", prog);
    assert_int_equal(tu_run(cmd, err, sizeof err), 0);
    snprintf(cmd, sizeof cmd, "%s --tiling maybe", prog);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "--tiling"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_bf16_staged_file),
        cmocka_unit_test(test_decode_f32_matches_golden),
        cmocka_unit_test(test_nonfinite_latents_rejected),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_odd_size_video),
        cmocka_unit_test(test_tiled_frame_size),
        cmocka_unit_test(test_mp4_same_bytes),
        cmocka_unit_test(test_u8_rounding),
        cmocka_unit_test(test_help),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
