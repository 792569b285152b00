/* ComfyUI's scaled fp8 weights through cvx_weights (common/weights.c open_scaled_fp8): a
 * `<module>.weight` F8_E4M3 with a one-element `<module>.scale_weight` (F32 or BF16) is found as F32
 * (float)fp8 · scale for every code, shape-checked as the weight; an fp8 weight without a scale
 * stays plain F8_E4M3; `scale_input` and the `scaled_fp8` marker are accepted and change nothing;
 * bad files (a scale without its weight, beside a weight that is not fp8, of two values, a marker
 * of another dtype) give one line naming the file and tensor. The end-to-end run on a Wan 2.2
 * A14B pair is tests/e2e_wan22_files.c. */
#include "testutil.h"

static uint8_t codes[12];

typedef struct {
    const char *name;
    cvx_dtype dtype;
    int64_t rows, cols;
} extra_t;

/* A file with a.weight (fp8 + F32 scale + scale_input), b.weight (fp8, no scale), c.weight (fp8 +
 * BF16 scale), the `scaled_fp8` marker of dtype `marker`, and the extras (zero data). */
static void write_file(const char *path, const extra_t *extra, int n_extra, cvx_dtype marker) {
    cvx_st_writer *w = cvx_stw_new();
    const int64_t s34[2] = {3, 4}, zero[1] = {0};
    const float sa = 0.37f, si = 1e6f;
    const uint16_t sc = cvx_f32_to_bf16(2.5f);
    uint8_t none[4] = {0};
    ASSERT_OK(cvx_stw_add(w, "scaled_fp8", marker, 1, zero, none));
    ASSERT_OK(cvx_stw_add(w, "a.weight", CVX_F8_E4M3, 2, s34, codes));
    ASSERT_OK(cvx_stw_add(w, "a.scale_weight", CVX_F32, 0, NULL, &sa));
    ASSERT_OK(cvx_stw_add(w, "a.scale_input", CVX_F32, 0, NULL, &si));
    ASSERT_OK(cvx_stw_add(w, "b.weight", CVX_F8_E4M3, 2, s34, codes));
    ASSERT_OK(cvx_stw_add(w, "c.weight", CVX_F8_E4M3, 2, s34, codes));
    ASSERT_OK(cvx_stw_add(w, "c.scale_weight", CVX_BF16, 1, (const int64_t[]){1}, &sc));
    for (int i = 0; i < n_extra; i++) {
        void *z = calloc((size_t)(extra[i].rows * extra[i].cols), 4);
        ASSERT_OK(cvx_stw_add(w, extra[i].name, extra[i].dtype, 2, (const int64_t[]){extra[i].rows, extra[i].cols}, z));
        free(z);
    }
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);
}

static void test_values(void **state) {
    (void)state;
    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/x_fp8_scaled.safetensors", dir);
    for (int i = 0; i < 12; i++) codes[i] = (uint8_t)(i * 21 + 3);   /* both signs, small and large codes */
    write_file(path, NULL, 0, CVX_F8_E4M3);
    cvx_weights *w = cvx_weights_open(path);
    ASSERT_NONNULL(w);
    const cvx_tensor *a = cvx_weights_get(w, "a.weight", (const int64_t[]){3, 4}, 2);
    const cvx_tensor *b = cvx_weights_get(w, "b.weight", (const int64_t[]){3, 4}, 2);
    const cvx_tensor *c = cvx_weights_get(w, "c.weight", (const int64_t[]){3, 4}, 2);
    ASSERT_NONNULL(a);
    ASSERT_NONNULL(b);
    ASSERT_NONNULL(c);
    assert_int_equal(a->dtype, CVX_F32);
    assert_int_equal(b->dtype, CVX_F8_E4M3);
    assert_int_equal(c->dtype, CVX_F32);
    for (int i = 0; i < 12; i++) {
        const float f = cvx_f8e4m3_to_f32(codes[i]);
        assert_true(((const float *)a->data)[i] == f * 0.37f);
        assert_true(((const float *)c->data)[i] == f * 2.5f);
    }
    /* the view is what cvx_weights_at lists for the file's fp8 tensor */
    int views = 0;
    for (int i = 0; i < cvx_weights_count(w); i++) views += cvx_weights_at(w, i) == a || cvx_weights_at(w, i) == c;
    assert_int_equal(views, 2);
    /* a shape other than the config's: the usual message */
    assert_null(cvx_weights_get(w, "a.weight", (const int64_t[]){4, 3}, 2));
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "tensor 'a.weight' has shape [3, 4], expected [4, 3]"));
    cvx_weights_close(w);
    tu_rmrf(dir);
}

static void expect_open_error(const extra_t *extra, int n_extra, cvx_dtype marker, const char *want) {
    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    write_file(path, extra, n_extra, marker);
    cvx_weights *w = cvx_weights_open(path);
    if (w) fail_msg("opened a bad file (expected '%s')", want);
    print_message("  %s\n", cvx_last_error());
    if (!strstr(cvx_last_error(), want)) fail_msg("'%s' does not say '%s'", cvx_last_error(), want);
    assert_null(strchr(cvx_last_error(), '\n'));
    tu_rmrf(dir);
}

static void test_bad_files(void **state) {
    (void)state;
    expect_open_error((const extra_t[]){{"d.scale_weight", CVX_F32, 1, 1}}, 1, CVX_F8_E4M3,
                      "tensor 'd.scale_weight' has no 'd.weight' to scale");
    expect_open_error((const extra_t[]){{"e.weight", CVX_F32, 2, 2}, {"e.scale_weight", CVX_F32, 1, 1}}, 2, CVX_F8_E4M3,
                      "tensor 'e.weight' is F32, expected F8_E4M3 (it has a scale_weight: ComfyUI's scaled fp8)");
    expect_open_error((const extra_t[]){{"b.scale_weight", CVX_F32, 1, 2}}, 1, CVX_F8_E4M3,
                      "tensor 'b.scale_weight' is F32 with 2 elements, expected one float (a per-tensor scale)");
    expect_open_error(NULL, 0, CVX_F16, "tensor 'scaled_fp8' is F16: scaled fp8 weights of that type are not supported");
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_values), cmocka_unit_test(test_bad_files)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
