/* HunyuanVideo-1.5 through the API with a VAE whose encoder is damaged (encoder.conv_in's weight
 * missing, the encoder's attention q mis-shaped): stage 3 reads the decoder's tensors only, so the
 * golden I2V case's final latents decode to the same bytes as with the intact VAE (and to the
 * golden video within 1e-3); the I2V condition, which needs the encoder, fails with one line
 * naming the missing tensor. The model: tests/hv15_harness.h's directory of symlinks with vae/
 * replaced. */
#include "golden_harness.h"
#include "hv15_harness.h"

#include "pipeline/cvx.h"
#include "fileio.h"
#include "safetensors.h"

static char intact[300], broken[300], image[1200];

/* dir/vae/diffusion_pytorch_model.safetensors: the tiny model's VAE without encoder.conv_in's
 * weight, the encoder's attention to_q weight with half its rows */
static void write_broken_vae(const char *dir) {
    char path[512];
    cvx_weights *src = cvx_weights_open(HV15_T2V_MODEL "/vae");
    assert_non_null(src);
    cvx_st_writer *w = cvx_stw_new();
    for (int i = 0; i < cvx_weights_count(src); i++) {
        const cvx_tensor *t = cvx_weights_at(src, i);
        if (!strcmp(t->name, "encoder.conv_in.conv.weight")) continue;
        int64_t shape[CVX_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        if (!strcmp(t->name, "encoder.mid_block.attentions.0.to_q.weight")) shape[0] /= 2;
        ASSERT_OK(cvx_stw_add(w, t->name, t->dtype, t->ndim, shape, t->data));
    }
    snprintf(path, sizeof path, "%s/vae/diffusion_pytorch_model.safetensors", dir);
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);
    cvx_weights_close(src);
}

static int setup(void **state) {
    (void)state;
    hv15_i2v_image(image, sizeof image);
    tu_mkdtemp(intact, sizeof intact);
    hv15_i2v_model(intact, NULL);
    tu_mkdtemp(broken, sizeof broken);
    hv15_i2v_model(broken, HV15_T2V_MODEL "/vae");
    write_broken_vae(broken);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rmrf(intact);
    tu_rmrf(broken);
    return 0;
}

static void decode(const char *model, const cvx_tensor *lat, cvx_frames *fr) {
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = 2});
    if (!m) fail_msg("%s: %s", model, cvx_last_error());
    float *z = cvx_tensor_f32_dup(lat);
    cvx_decode_params dp = {0};
    if (cvx_decode(m, &dp, z, 1, (int)lat->shape[1], (int)lat->shape[2], (int)lat->shape[3], (int)lat->shape[4],
                   "latents", NULL, NULL, fr))
        fail_msg("%s", cvx_last_error());
    free(z);
    cvx_model_close(m);
}

static void test_decode_without_encoder(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, HV15_I2V_CASE);
    const cvx_tensor *lat = gh_tensor(&c, "final_latents");
    cvx_frames a, b;
    decode(intact, lat, &a);
    decode(broken, lat, &b);
    const size_t n = (size_t)3 * a.T * a.H * a.W;
    assert_int_equal(b.T, a.T), assert_int_equal(b.H, a.H), assert_int_equal(b.W, a.W);
    assert_memory_equal(a.data[0], b.data[0], n * sizeof(float));
    size_t ng;
    float *want = gh_f32(&c, &ng, "decoded");
    assert_int_equal(ng, n);
    gh_check_rel_l2(&c, "decoded (VAE without its encoder)", b.data[0], want, n, 1e-3);
    free(want);
    cvx_frames_free(&a), cvx_frames_free(&b);
    gh_close(&c);
}

static void test_encode_fails_one_line(void **state) {
    (void)state;
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = broken, .threads = 2});
    if (!m) fail_msg("%s: %s", broken, cvx_last_error());
    cvx_conditioning cond;
    assert_int_equal(cvx_encode_conditioning(m, &(cvx_conditioning_params){.image = image, .max_frames = 5}, NULL,
                                             NULL, &cond),
                     -1);
    const char *e = cvx_last_error();
    print_message("  error: %s\n", e);
    assert_non_null(strstr(e, "encoder.conv_in.conv.weight"));
    assert_non_null(strstr(e, "/vae/diffusion_pytorch_model.safetensors"));
    assert_null(strchr(e, '\n'));
    cvx_model_close(m);
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_without_encoder),
        cmocka_unit_test(test_encode_fails_one_line),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
