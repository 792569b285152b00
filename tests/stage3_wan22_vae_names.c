/* The Wan 2.2 VAE under its original names (Wan2.2_VAE.pth, ComfyUI's wan2.2_vae.safetensors):
 *   - every diffusers tensor of the tiny 2.2 VAE has an original name (wan_vae_original_key_config)
 *     that diffusers' own conversion (scripts/convert_wan_to_diffusers.py convert_vae_22, restated
 *     below) maps back to it, and no two share one;
 *   - the VAE written under those names and loaded with wan_vae_load_file decodes and encodes bit
 *     for bit as the diffusers directory does (1 and 2 latent frames; 5 frames encoded);
 *   - through the programs on the TI2V I2V golden case: stage 1 --image with --vae FILE writes the
 *     same conditioning, stage 3 --vae FILE the same frames, as with the directory's VAE. */
#include "testutil.h"
#include "stage3/wan_vae.h"

#include <math.h>

#define VAE_DIR "tests/data/golden_wan22/vae22_decode/model/vae"
#define I2V "tests/data/golden_wan22/e2e_ti2v_i2v"

static void replace_once(char *s, size_t n, const char *from, const char *to) {
    char *p = strstr(s, from);
    if (!p) return;
    size_t fl = strlen(from), tl = strlen(to), rest = strlen(p + fl);
    if ((size_t)(p - s) + tl + rest + 1 > n) fail_msg("name too long: %s", s);
    memmove(p + tl, p + fl, rest + 1);
    memcpy(p, to, tl);
}

/* convert_vae_22's renaming of one original key (v0.36.0), in its order of cases */
static void upstream_22(const char *key, char *out, size_t n) {
    static const char *const leaf[][2] = {
        {".residual.0.gamma", ".norm1.gamma"}, {".residual.2.weight", ".conv1.weight"},
        {".residual.2.bias", ".conv1.bias"},   {".residual.3.gamma", ".norm2.gamma"},
        {".residual.6.weight", ".conv2.weight"}, {".residual.6.bias", ".conv2.bias"},
        {".shortcut.weight", ".conv_shortcut.weight"}, {".shortcut.bias", ".conv_shortcut.bias"}};
    static const char *const fixed[][2] = {
        {"encoder.head.0.gamma", "encoder.norm_out.gamma"}, {"encoder.head.2.bias", "encoder.conv_out.bias"},
        {"encoder.head.2.weight", "encoder.conv_out.weight"}, {"decoder.head.0.gamma", "decoder.norm_out.gamma"},
        {"decoder.head.2.bias", "decoder.conv_out.bias"}, {"decoder.head.2.weight", "decoder.conv_out.weight"},
        {"conv1.weight", "quant_conv.weight"}, {"conv1.bias", "quant_conv.bias"},
        {"conv2.weight", "post_quant_conv.weight"}, {"conv2.bias", "post_quant_conv.bias"},
        {"encoder.conv1.weight", "encoder.conv_in.weight"}, {"encoder.conv1.bias", "encoder.conv_in.bias"},
        {"decoder.conv1.weight", "decoder.conv_in.weight"}, {"decoder.conv1.bias", "decoder.conv_in.bias"}};
    snprintf(out, n, "%s", key);
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (!strcmp(key, fixed[i][0])) { snprintf(out, n, "%s", fixed[i][1]); return; }
    /* middle_key_mapping / attention_mapping: X.middle.0 / .2 residual blocks, X.middle.1 attention */
    for (int e = 0; e < 2; e++) {
        const char *x = e ? "decoder" : "encoder";
        char m[64], d[64];
        for (int k = 0; k < 3; k++) {
            snprintf(m, sizeof m, "%s.middle.%d.", x, k);
            if (strncmp(key, m, strlen(m))) continue;
            if (k == 1) snprintf(d, sizeof d, "%s.mid_block.attentions.0.", x);
            else snprintf(d, sizeof d, "%s.mid_block.resnets.%d.", x, k / 2);
            replace_once(out, n, m, d);
            if (k != 1)
                for (size_t i = 0; i < 6; i++) replace_once(out, n, leaf[i][0], leaf[i][1]);
            return;
        }
    }
    const int enc = !strncmp(key, "encoder.downsamples.", 20), dec = !strncmp(key, "decoder.upsamples.", 18);
    if (!enc && !dec) return;
    replace_once(out, n, enc ? "encoder.downsamples." : "decoder.upsamples.", enc ? "encoder.down_blocks." : "decoder.up_blocks.");
    if (strstr(out, "residual") || strstr(out, "shortcut")) {
        replace_once(out, n, enc ? ".downsamples." : ".upsamples.", ".resnets.");
        for (size_t i = 0; i < sizeof leaf / sizeof leaf[0]; i++)
            if (strstr(out, leaf[i][0])) { replace_once(out, n, leaf[i][0], leaf[i][1]); break; }
    } else if (strstr(out, "resample") || strstr(out, "time_conv")) {
        /* parts[:3] + ["downsampler" / "upsampler"] + parts[5:] */
        int blk, idx, len = -1;
        char head[64];
        const char *fmt = enc ? "encoder.down_blocks.%d.downsamples.%d.%n" : "decoder.up_blocks.%d.upsamples.%d.%n";
        if (sscanf(out, fmt, &blk, &idx, &len) == 2 && len > 0) {
            snprintf(head, sizeof head, "%s.%d.%s.", enc ? "encoder.down_blocks" : "decoder.up_blocks", blk,
                     enc ? "downsampler" : "upsampler");
            char tail[256];
            snprintf(tail, sizeof tail, "%s", out + len);
            snprintf(out, n, "%.60s%.120s", head, tail);
        }
    }
}

/* The directory's VAE under the original names into dst (after checking the names). */
static void write_original(const wan_vae_config *c, const char *dst) {
    cvx_safetensors *st = tu_open(VAE_DIR "/diffusion_pytorch_model.safetensors");
    cvx_st_writer *w = cvx_stw_new();
    const int n = cvx_st_count(st);
    char (*names)[200] = calloc((size_t)n, sizeof *names);
    for (int i = 0; i < n; i++) {
        const cvx_tensor *t = cvx_st_tensor(st, i);
        char back[200];
        const char *o = wan_vae_original_key_config(c, t->name, names[i], sizeof names[i]);
        if (!o) fail_msg("no original name for %s", t->name);
        upstream_22(o, back, sizeof back);
        if (strcmp(back, t->name)) fail_msg("%s -> %s -> (convert_vae_22) %s", t->name, o, back);
        for (int k = 0; k < i; k++)
            if (!strcmp(names[k], o)) fail_msg("two tensors named %s", o);
        ASSERT_OK(cvx_stw_add(w, o, t->dtype, t->ndim, t->shape, t->data));
    }
    print_message("  %d tensors: original names map back through convert_vae_22\n", n);
    ASSERT_OK(cvx_stw_write(w, dst));
    cvx_stw_free(w);
    free(names);
    cvx_st_close(st);
}

typedef struct {
    float *video;
    size_t at;
} sink;

static int keep(void *user, const float *frames, int t0, int n, int H, int W) {
    sink *s = user;
    (void)t0;
    memcpy(s->video + s->at, frames, sizeof(float) * 3 * (size_t)n * H * W);   /* channel-major per call */
    s->at += (size_t)3 * n * H * W;
    return 0;
}

static void test_api(void **state) {
    (void)state;
    char dir[256], file[300];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/wan2.2_vae.safetensors", dir);
    wan_vae *a = wan_vae_load(VAE_DIR, NULL);
    ASSERT_NONNULL(a);
    write_original(&a->cfg, file);
    wan_vae *b = wan_vae_load_file(VAE_DIR "/config.json", file, NULL);
    ASSERT_NONNULL(b);
    for (int F = 1; F <= 2; F++) {
        const int h = 3, w = 4, zc = a->cfg.z_dim, T = wan_vae_decoded_frames(a, F);
        const size_t nz = (size_t)zc * F * h * w, nv = (size_t)3 * T * h * a->spatial_ratio * w * a->spatial_ratio;
        float *z = malloc(sizeof(float) * nz);
        for (size_t i = 0; i < nz; i++) z[i] = sinf(0.7f * (float)i);
        sink sa = {calloc(nv, sizeof(float)), 0}, sb = {calloc(nv, sizeof(float)), 0};
        ASSERT_OK(wan_vae_decode(a, z, F, h, w, NULL, keep, &sa, NULL));
        ASSERT_OK(wan_vae_decode(b, z, F, h, w, NULL, keep, &sb, NULL));
        assert_int_equal(sa.at, nv);
        assert_memory_equal(sa.video, sb.video, nv * sizeof(float));
        print_message("  decode %d latent frames: bit-identical\n", F);
        free(z), free(sa.video), free(sb.video);
    }
    const int T = 5, H = 64, W = 64;
    int F, h, w;
    ASSERT_OK(wan_vae_encoded_shape(a, T, H, W, &F, &h, &w));
    const size_t nx = (size_t)3 * T * H * W, nl = (size_t)a->cfg.z_dim * F * h * w;
    float *x = malloc(sizeof(float) * nx), *m1 = malloc(sizeof(float) * nl), *l1 = malloc(sizeof(float) * nl);
    float *m2 = malloc(sizeof(float) * nl), *l2 = malloc(sizeof(float) * nl);
    for (size_t i = 0; i < nx; i++) x[i] = 0.9f * sinf(0.013f * (float)i);
    ASSERT_OK(wan_vae_encode(a, x, T, H, W, m1, l1, NULL));
    ASSERT_OK(wan_vae_encode(b, x, T, H, W, m2, l2, NULL));
    assert_memory_equal(m1, m2, nl * sizeof(float));
    assert_memory_equal(l1, l2, nl * sizeof(float));
    print_message("  encode %d frames: mean and logvar bit-identical\n", T);
    free(x), free(m1), free(l1), free(m2), free(l2);
    wan_vae_free(a);
    wan_vae_free(b);
    tu_rmrf(dir);
}

static void same_tensors(const char *pa, const char *pb, const char *name) {
    cvx_safetensors *A = tu_open(pa), *B = tu_open(pb);
    size_t n, m;
    float *a = tu_f32(A, name, &n), *b = tu_f32(B, name, &m);
    assert_int_equal(n, m);
    assert_memory_equal(a, b, n * sizeof *a);
    print_message("  %s: bit-identical\n", name);
    free(a), free(b);
    cvx_st_close(A), cvx_st_close(B);
}

/* stage 1 (TI2V image-to-video: the image VAE-encoded) and stage 3 with --vae FILE */
static void test_programs(void **state) {
    (void)state;
    char s1[256], s2[256], s3[256], dir[256], file[300], cmd[4096], pa[400], pb[400];
    tu_program(s1, sizeof s1, "stage1");
    tu_program(s2, sizeof s2, "stage2");
    tu_program(s3, sizeof s3, "stage3");
    tu_mkdtemp(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/wan2.2_vae.safetensors", dir);
    wan_vae_config c;
    ASSERT_OK(wan_vae_config_load(&c, I2V "/model/vae/config.json"));
    write_original(&c, file);   /* the same tiny VAE as vae22_decode's */
    const char *img = "--image " I2V "/image.png --frames 9 --height 64 --width 64";
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'a fox' --model_dir " I2V "/model --output_dir %s/a %s", s1, dir, img);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'a fox' --model_dir " I2V "/model --output_dir %s/b %s --vae %s", s1, dir,
             img, file);
    tu_run_ok(cmd);
    snprintf(pa, sizeof pa, "%s/a/stage1_conditioning.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/b/stage1_conditioning.safetensors", dir);
    cvx_safetensors *st = tu_open(pa);
    for (int i = 0; i < cvx_st_count(st); i++) same_tensors(pa, pb, cvx_st_tensor(st, i)->name);
    cvx_st_close(st);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s/a --num_inference_steps 2 --frames 9 --height 64 --width 64", s2, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s/a --output_video %s/a.mp4 --output_frames %s/fa.safetensors", s3,
             dir, dir, dir);
    tu_run_ok(cmd);
    snprintf(cmd, sizeof cmd,
             "%s --quiet --input_dir %s/a --output_video %s/b.mp4 --output_frames %s/fb.safetensors --vae %s", s3, dir,
             dir, dir, file);
    tu_run_ok(cmd);
    snprintf(pa, sizeof pa, "%s/fa.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/fb.safetensors", dir);
    same_tensors(pa, pb, "decoded");
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_api), cmocka_unit_test(test_programs)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
