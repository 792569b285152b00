/* The fixed-chain GEMM's paths (common/gemm_fixed.c) against its scalar chains (cvx_sgemm_fixed_ref),
 * bit for bit, for each tile set this CPU runs (AVX2 6×16; with AVX-512 the 12×32 tiles under 1,024
 * rows and the 6×64 ones from there):
 *   - A read in place (not transposed): A's padding columns past K hold NaN, which no chain may read;
 *   - the chain start in the tiles (first K block: beta·C + bias, 16 / 8 lanes at a time) and on the
 *     edge tiles (columns past the last whole tile): C holds NaN where beta = 0 (never read then);
 *   - the job grid: 1 and 2 threads (row groups × column groups differ) give the same bits, at shapes
 *     where the grid takes row groups, column groups and both. */
#include "testutil.h"
#include "gemm.h"
#include "gemm_fast.h"

#include <math.h>

static uint64_t g_rng = 0x5851F42D4C957F2Dull;
static float *rand_buf(size_t n) { return tu_rand_buf(&g_rng, n); }

typedef struct {
    int M, N, K, ta, tb, bias;
    float beta;
} fcase;

static const fcase CASES[] = {
    /* rows short of a tile (6 and 12 row tiles), columns past the last tile of 16 / 32 / 64 */
    {7, 70, 33, 0, 1, 1, 0},       {13, 45, 65, 0, 0, 0, 0.5f},   {25, 100, 400, 0, 1, 1, 1},
    {300, 700, 450, 0, 1, 1, 0},   {226, 330, 520, 0, 1, 0, 0},   {200, 64, 385, 1, 1, 1, 0.25f},
    /* the 6×64 tiles: tall (row groups), wide (column groups), K past a block of 512 */
    {2100, 130, 100, 0, 1, 1, 0},  {1030, 200, 300, 0, 0, 1, 0.5f}, {1024, 520, 530, 0, 1, 0, 0},
    {1101, 77, 1030, 1, 0, 1, 0},  {1035, 300, 64, 0, 1, 0, 1},
};

static void run_case(int isa, const fcase *c) {
    /* A's rows padded with NaN past K (ta = 0) or past M (ta = 1): read in place, never past the row */
    const int lda = c->ta ? c->M + 5 : c->K + 7, ldb = c->tb ? c->K + 2 : c->N + 3, ldc = c->N + 4;
    const int arows = c->ta ? c->K : c->M, acols = c->ta ? c->M : c->K;
    float *A = rand_buf((size_t)arows * lda), *B = rand_buf((size_t)(c->tb ? c->N : c->K) * ldb),
          *bias = c->bias ? rand_buf((size_t)c->N) : NULL, *C0 = rand_buf((size_t)c->M * ldc);
    for (int r = 0; r < arows; r++)
        for (int q = acols; q < lda; q++) A[(size_t)r * lda + q] = NAN;
    if (c->beta == 0.0f)   /* C is not an input then: NaN must not reach the result */
        for (int i = 0; i < c->M; i++)
            for (int j = 0; j < c->N; j += 3) C0[(size_t)i * ldc + j] = NAN;
    const size_t nc = (size_t)c->M * ldc;
    float *ref = cvx_alloc_f32(nc), *out = cvx_alloc_f32(nc);
    memcpy(ref, C0, sizeof(float) * nc);
    cvx_sgemm_fixed_ref(c->ta, c->tb, c->M, c->N, c->K, A, lda, B, ldb, bias, c->beta, ref, ldc);
    for (int i = 0; i < c->M; i++)
        for (int j = 0; j < c->N; j++) assert_false(isnan(ref[(size_t)i * ldc + j]));
    for (int threads = 1; threads <= 2; threads++) {
        cvx_set_threads(threads);
        memcpy(out, C0, sizeof(float) * nc);
        cvx_sgemm_fixed_isa(isa, c->ta, c->tb, c->M, c->N, c->K, A, lda, B, ldb, bias, c->beta, out, ldc);
        char what[160];
        snprintf(what, sizeof what, "%s tiles, %d thread(s): %dx%dx%d ta %d tb %d bias %d beta %g",
                 isa ? "avx512" : "avx2", threads, c->M, c->N, c->K, c->ta, c->tb, c->bias, (double)c->beta);
        tu_assert_same_bits(what, out, ref, nc);
    }
    free(A), free(B), free(bias), free(C0), free(ref), free(out);
}

static void test_fixed_paths(void **state) {
    (void)state;
    cvx_ctx *ctx = cvx_ctx_new(0);
    ASSERT_NONNULL(ctx->kernels);
    const int wide = cvx_kernels_avx512(ctx->kernels);
    if (!wide) print_message("  this CPU has no AVX-512: only the AVX2 tiles are tested\n");
    for (int isa = 0; isa <= wide; isa++)
        for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(isa, &CASES[i]);
    cvx_set_threads(0);
    cvx_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fixed_paths)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
