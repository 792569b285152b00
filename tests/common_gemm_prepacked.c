/* A packed once (cvx_sgemm_fixed_pack_a + cvx_sgemm_fixed_packed, common/gemm_fixed.c): the same bits
 * as the plain fixed-chain GEMM (cvx_sgemm_fixed_isa) and as the scalar chains (cvx_sgemm_fixed_ref,
 * and cvx_sgemm_fixed_packed_ref reading the packed layout), for each tile set this CPU runs — AVX2
 * 6×16; with AVX-512 the 12×32 tiles (< 1,024 rows) and the 6×64 ones — at odd sizes (rows past a
 * micro-panel, K past a K block, columns past a tile), both B layouts, bias and beta; A packed
 * whole or in pieces. */
#include "testutil.h"
#include "gemm.h"
#include "gemm_fast.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float *rand_buf(size_t n) { return tu_rand_buf(&g_rng, n); }

typedef struct {
    int M, N, K, ta, tb, bias;
    float beta;
} pcase;

static const pcase CASES[] = {
    {1, 1, 1, 0, 0, 0, 0},       {5, 17, 3, 0, 0, 1, 0},       {6, 64, 384, 1, 0, 0, 0},
    {13, 33, 385, 0, 1, 1, 0.5f}, {25, 100, 800, 1, 1, 0, 1},  {97, 130, 1025, 0, 0, 1, 0},
    {200, 300, 517, 0, 0, 0, 0}, {1031, 70, 530, 0, 0, 1, 0},  {1100, 129, 1100, 1, 0, 0, 0.25f},
    {1040, 100, 300, 0, 1, 1, 0}, {1027, 90, 257, 1, 0, 0, 0.5f}, {1030, 40, 129, 0, 0, 1, 0},
};

static void run_case(int isa, const pcase *c) {
    const int lda = c->ta ? c->M + 3 : c->K + 1, ldb = c->tb ? c->K + 2 : c->N + 5, ldc = c->N + 4;
    const size_t nc = (size_t)c->M * ldc;
    float *A = rand_buf((size_t)(c->ta ? c->K : c->M) * lda), *B = rand_buf((size_t)(c->tb ? c->N : c->K) * ldb),
          *bias = c->bias ? rand_buf((size_t)c->N) : NULL, *C0 = rand_buf(nc);
    float *plain = cvx_alloc_f32(nc), *packed = cvx_alloc_f32(nc), *ref = cvx_alloc_f32(nc),
          *pref = cvx_alloc_f32(nc);
    float *Ap = cvx_alloc_f32(cvx_sgemm_fixed_packed_floats(isa, c->M, c->K));
    memcpy(plain, C0, sizeof(float) * nc), memcpy(packed, C0, sizeof(float) * nc);
    memcpy(ref, C0, sizeof(float) * nc), memcpy(pref, C0, sizeof(float) * nc);
    /* packed in pieces — row blocks (a multiple of the panel height, the last one short) × column
     * ranges (across K blocks, odd lengths) — or whole */
    const int blk = cvx_sgemm_fixed_packed_mr(isa, c->M) * 3, kb = c->K / 3 + 1;
    if (c->M > blk || c->K > kb) {
        for (int i0 = 0; i0 < c->M; i0 += blk)
            for (int k0 = 0; k0 < c->K; k0 += kb) {
                const int m = c->M - i0 < blk ? c->M - i0 : blk, kn = c->K - k0 < kb ? c->K - k0 : kb;
                const float *a = c->ta ? A + (size_t)k0 * lda + i0 : A + (size_t)i0 * lda + k0;
                cvx_sgemm_fixed_pack_a(isa, c->ta, c->M, c->K, i0, m, k0, kn, a, lda, Ap);
            }
    } else {
        cvx_sgemm_fixed_pack_a(isa, c->ta, c->M, c->K, 0, c->M, 0, c->K, A, lda, Ap);
    }
    cvx_sgemm_fixed_packed(isa, c->tb, c->M, c->N, c->K, Ap, B, ldb, bias, c->beta, packed, ldc);
    cvx_sgemm_fixed_isa(isa, c->ta, c->tb, c->M, c->N, c->K, A, lda, B, ldb, bias, c->beta, plain, ldc);
    cvx_sgemm_fixed_ref(c->ta, c->tb, c->M, c->N, c->K, A, lda, B, ldb, bias, c->beta, ref, ldc);
    cvx_sgemm_fixed_packed_ref(isa, c->tb, c->M, c->N, c->K, Ap, B, ldb, bias, c->beta, pref, ldc);
    char what[128];
    snprintf(what, sizeof what, "%dx%dx%d ta %d tb %d bias %d beta %g (isa %s)", c->M, c->N, c->K, c->ta, c->tb,
             c->bias, (double)c->beta, isa ? "avx512" : "avx2");
    tu_assert_same_bits(what, plain, ref, nc);    /* the plain GEMM is the chains */
    tu_assert_same_bits(what, packed, ref, nc);   /* pre-packed: the same chains */
    tu_assert_same_bits(what, pref, ref, nc);     /* the packed layout holds A (zero rows past M unread) */
    free(A), free(B), free(bias), free(C0), free(plain), free(packed), free(ref), free(pref), free(Ap);
}

static void test_prepacked(void **state) {
    (void)state;
    cvx_ctx *ctx = cvx_ctx_new(0);
    ASSERT_NONNULL(ctx->kernels);
    const int wide = cvx_kernels_avx512(ctx->kernels);
    if (!wide) print_message("  this CPU has no AVX-512: only the AVX2 tiles are tested\n");
    for (int isa = 0; isa <= wide; isa++)
        for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(isa, &CASES[i]);
    cvx_ctx_free(ctx);
}

/* The layout depends on (isa, M, K): the AVX-512 blockings differ from the AVX2 one and at 1,024 rows. */
static void test_layout_size(void **state) {
    (void)state;
    assert_int_equal(cvx_sgemm_fixed_packed_floats(0, 7, 10), 12 * 10);    /* 6-row panels */
    assert_int_equal(cvx_sgemm_fixed_packed_floats(0, 6, 0), 0);
    cvx_ctx *ctx = cvx_ctx_new(0);
    if (ctx->kernels && cvx_kernels_avx512(ctx->kernels)) {
        assert_int_equal(cvx_sgemm_fixed_packed_floats(1, 7, 10), 12 * 10);     /* 12-row panels */
        assert_int_equal(cvx_sgemm_fixed_packed_floats(1, 13, 10), 24 * 10);
        assert_int_equal(cvx_sgemm_fixed_packed_floats(1, 1025, 10), 1026 * 10);   /* 6-row panels */
    }
    cvx_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_prepacked), cmocka_unit_test(test_layout_size)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
