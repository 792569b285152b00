/* Pre-packed linear weights (gemm_fast.h): cvx_linear_p with each weight prepared once in the
 * context against the same call reading the weight in place (pack budget 0), on every path this CPU
 * runs: f32 (bf16/f16 weights widened once), the bf16 fallback (widened and rounded once), and
 * oneDNN's bf16 matmul (forced with CVX_KPATH_ONEDNN_BF16 where the CPU has no bf16 units: oneDNN
 * emulates them; weight reordered once into the layout oneDNN picks for dnnl_format_tag_any).
 *   f32 and fallback: packed == in place, bit for bit (the same numbers into the same kernel);
 *   onednn-bf16     : packed and in place each vs cvx_matmul_ref in bf16, rel L2 <= 1e-5;
 * the cache is hit on the second call (no new entry), a new weight at the same address is repacked
 * (its result follows the new weight), a budget too small for one weight (set by call, and by
 * CVX_PACK_BUDGET_MB=0 in the environment) reads every weight in place with the same bits. */
#include "testutil.h"
#include "gemm_fast.h"
#include "dtype.h"

#include <immintrin.h>
#include <stdlib.h>

static uint64_t st = 0x9e3779b97f4a7c15ull;
static float urand(void) {
    st ^= st << 13; st ^= st >> 7; st ^= st << 17;
    return (float)(st >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

typedef struct {
    int M, N, K;
    cvx_dtype dt;
} lin_case;

static const lin_case cases[] = {
    {1, 300, 77, CVX_BF16},    /* one token */
    {13, 70, 45, CVX_BF16},
    {37, 96, 64, CVX_F16},     /* f16 weight: rounded to bf16 in bf16 mode */
    {300, 129, 96, CVX_BF16},
    {45, 64, 33, CVX_F32},     /* f32 weight: read in place in f32 mode, packed in bf16 mode */
};

/* A weight tensor as the mmapped file gives it, its values in wf (f32). */
static cvx_tensor make_weight(const lin_case *c, unsigned char **raw, float *wf) {
    size_t n = (size_t)c->N * c->K, es = cvx_dtype_size(c->dt);
    *raw = malloc(n * es + 4);
    void *d = *raw + (es == 4 ? 4 : 2);   /* as a file gives it: aligned to the element only */
    for (size_t i = 0; i < n; i++) {
        float x = urand();
        if (c->dt == CVX_BF16) { ((uint16_t *)d)[i] = cvx_f32_to_bf16(x); wf[i] = cvx_bf16_to_f32(((uint16_t *)d)[i]); }
        else if (c->dt == CVX_F16) { ((uint16_t *)d)[i] = _cvtss_sh(x, 0); wf[i] = _cvtsh_ss(((uint16_t *)d)[i]); }
        else { memcpy((char *)d + 4 * i, &x, 4); wf[i] = x; }
    }
    return (cvx_tensor){.name = "w", .dtype = c->dt, .ndim = 2, .shape = {c->N, c->K}, .numel = (int64_t)n,
                        .data = d, .nbytes = n * es, .file = "test"};
}

static const char *pname(cvx_kpath p) { return p == CVX_KPATH_AUTO ? "auto" : p == CVX_KPATH_NO_BF16 ? "no-bf16" : "onednn-bf16"; }

static void run_case(cvx_kernels *kc, const lin_case *c, cvx_kpath path, cvx_precision prec) {
    size_t nw = (size_t)c->N * c->K, ny = (size_t)c->M * c->N;
    float *wf = malloc(nw * 4), *x = malloc((size_t)c->M * c->K * 4), *b = malloc((size_t)c->N * 4);
    float *y_in = malloc(ny * 4), *y_pk = malloc(ny * 4), *y_ref = malloc(ny * 4);
    unsigned char *raw;
    cvx_tensor W = make_weight(c, &raw, wf);
    for (int i = 0; i < c->M * c->K; i++) x[i] = urand();
    for (int i = 0; i < c->N; i++) b[i] = urand();
    cvx_tensor B = {.name = "b", .dtype = CVX_F32, .ndim = 1, .shape = {c->N}, .numel = c->N, .data = b,
                    .nbytes = 4 * (size_t)c->N, .file = "test"};
    cvx_kernels_force(kc, path);
    cvx_kernels_unpack(kc);
    cvx_kernels_set_pack_budget(kc, 0);   /* in place: today's path */
    ASSERT_OK(cvx_linear_p(kc, prec, x, c->M, c->K, &W, &B, y_in));
    assert_int_equal(cvx_kernels_pack_count(kc), 0);
    cvx_kernels_set_pack_budget(kc, (size_t)1 << 30);
    int expect_pack = prec == CVX_PRECISION_BF16 || c->dt != CVX_F32;
    for (int round = 0; round < 2; round++) {   /* the second call hits the cache */
        ASSERT_OK(cvx_linear_p(kc, prec, x, c->M, c->K, &W, &B, y_pk));
        assert_int_equal(cvx_kernels_pack_count(kc), expect_pack);
    }
    cvx_mat xa = {x, CVX_F32, c->K, 0}, wb = {wf, CVX_F32, c->K, 1};
    ASSERT_OK(cvx_matmul_ref(prec, c->M, c->N, c->K, xa, wb, b, 0, y_ref, c->N));
    const char *kp = cvx_kernels_path(kc, prec);
    double e_in = cvx_rel_l2(y_in, y_ref, ny), e_pk = cvx_rel_l2(y_pk, y_ref, ny);
    int same = memcmp(y_in, y_pk, ny * 4) == 0;
    print_message("  %-11s %-14s %4dx%4dx%4d %s W: packed %zu B, vs ref in place %.2g packed %.2g, %s\n", pname(path), kp,
                  c->M, c->N, c->K, cvx_dtype_name(c->dt), cvx_kernels_pack_bytes(kc), e_in, e_pk,
                  same ? "bit-equal" : "differ");
    double tol = prec == CVX_PRECISION_F32 ? 1e-6 : 1e-5;
    assert_true(e_in <= tol && e_pk <= tol);
    if (strcmp(kp, "onednn-bf16") != 0) assert_true(same);
    /* another weight at the same address: repacked, the result follows it */
    size_t es = cvx_dtype_size(c->dt);
    memmove((void *)W.data, (const char *)W.data + es, (nw - 1) * es);   /* shift by one element */
    memmove(wf, wf + 1, (nw - 1) * 4);
    ASSERT_OK(cvx_matmul_ref(prec, c->M, c->N, c->K, xa, wb, b, 0, y_ref, c->N));
    ASSERT_OK(cvx_linear_p(kc, prec, x, c->M, c->K, &W, &B, y_pk));
    assert_int_equal(cvx_kernels_pack_count(kc), expect_pack);
    assert_true(cvx_rel_l2(y_pk, y_ref, ny) <= tol);
    /* over budget: read in place (one warning), the same bits as with packing off */
    cvx_kernels_unpack(kc);
    cvx_kernels_set_pack_budget(kc, 16);
    ASSERT_OK(cvx_linear_p(kc, prec, x, c->M, c->K, &W, &B, y_pk));
    assert_int_equal(cvx_kernels_pack_count(kc), 0);
    cvx_kernels_set_pack_budget(kc, 0);
    ASSERT_OK(cvx_linear_p(kc, prec, x, c->M, c->K, &W, &B, y_in));
    assert_memory_equal(y_in, y_pk, ny * 4);
    cvx_kernels_force(kc, CVX_KPATH_AUTO);
    free(raw); free(wf); free(x); free(b); free(y_in); free(y_pk); free(y_ref);
}

static void test_packed_linear(void **state) {
    (void)state;
    cvx_kernels *kc = cvx_kernels_new();
    ASSERT_NONNULL(kc);
    cvx_kpath paths[3] = {CVX_KPATH_AUTO, CVX_KPATH_NO_BF16, CVX_KPATH_ONEDNN_BF16};
    int npaths = cvx_kernels_avx512(kc) ? 3 : 2;   /* oneDNN emulates bf16 only on AVX-512 */
    for (int pi = 0; pi < npaths; pi++)
        for (int prec = 0; prec < 2; prec++)
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(kc, &cases[i], paths[pi], prec);
    cvx_kernels_free(kc);
}

/* CVX_PACK_BUDGET_MB=0: a context made under it never packs. */
static void test_pack_env_off(void **state) {
    (void)state;
    setenv("CVX_PACK_BUDGET_MB", "0", 1);
    cvx_kernels *kc = cvx_kernels_new();
    unsetenv("CVX_PACK_BUDGET_MB");
    ASSERT_NONNULL(kc);
    lin_case c = {5, 40, 24, CVX_BF16};
    float wf[40 * 24], x[5 * 24], y[5 * 40];
    unsigned char *raw;
    cvx_tensor W = make_weight(&c, &raw, wf);
    for (int i = 0; i < 5 * 24; i++) x[i] = urand();
    ASSERT_OK(cvx_linear_p(kc, CVX_PRECISION_F32, x, c.M, c.K, &W, NULL, y));
    ASSERT_OK(cvx_linear_p(kc, CVX_PRECISION_BF16, x, c.M, c.K, &W, NULL, y));
    assert_int_equal(cvx_kernels_pack_count(kc), 0);
    assert_true(cvx_kernels_pack_bytes(kc) == 0);
    cvx_kernels_free(kc);
    free(raw);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_linear),
        cmocka_unit_test(test_pack_env_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
