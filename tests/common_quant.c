/* ggml tensor types (common/quant.h) and the new dtype conversions: the traits table against the
 * dtype layer, every type's golden block vectors (tests/data/golden_gguf/blocks: ggml's C
 * quantizer / gguf-py's numpy codecs) bit-exactly in both directions, the fast dequantizers
 * against the references on random blocks, f32 -> f16 against F16C, and float8_e4m3fn over all
 * 256 codes. */
#include "testutil.h"
#include "dtype.h"
#include "quant.h"

#include <immintrin.h>
#include <math.h>

#define BLOCKS "tests/data/golden_gguf/blocks"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Values whose bits differ, and the largest difference in ulps (same-sign floats). */
static size_t count_bit_diffs(const float *a, const float *b, size_t n, uint32_t *max_ulp) {
    size_t k = 0;
    *max_ulp = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t x = bits(a[i]), y = bits(b[i]);
        if (x == y) continue;
        k++;
        uint32_t d = x > y ? x - y : y - x;
        if (d > *max_ulp) *max_ulp = d;
    }
    return k;
}

static void test_traits_table(void **state) {
    (void)state;
    assert_true(cvx_quant_count() == 13);
    for (int i = 0; i < cvx_quant_count(); i++) {
        const cvx_quant_traits *q = cvx_quant_at(i);
        assert_ptr_equal(cvx_quant_by_ggml(q->ggml_type), q);
        assert_ptr_equal(cvx_quant_of(q->dtype), q);
        assert_string_equal(cvx_dtype_name(q->dtype), q->name);
        assert_string_equal(cvx_ggml_type_name(q->ggml_type), q->name);
        assert_int_equal(cvx_dtype_block(q->dtype), q->block);
        assert_int_equal(cvx_dtype_block_bytes(q->dtype), q->type_size);
        assert_true(cvx_dtype_to_f32_ok(q->dtype));
        assert_non_null(q->to_f32_ref);
        assert_non_null(q->to_f32);
        assert_non_null(q->from_f32_ref);
        if (q->block == 1) assert_int_equal(cvx_dtype_size(q->dtype), q->type_size);
        else {
            assert_true(cvx_dtype_is_quant(q->dtype));
            assert_int_equal(cvx_dtype_size(q->dtype), 0);
            assert_false(cvx_dtype_is_safetensors(q->dtype));
            assert_false(cvx_dtype_is_float(q->dtype));
        }
        uint64_t nb;
        assert_int_equal(cvx_dtype_nbytes(q->dtype, (uint64_t)q->block * 3, &nb), 0);
        assert_int_equal(nb, 3 * (uint64_t)q->type_size);
        if (q->block > 1) assert_int_equal(cvx_dtype_nbytes(q->dtype, (uint64_t)q->block + 1, &nb), -1);
        assert_int_equal(cvx_dtype_nbytes(q->dtype, 1ull << 63, &nb), q->type_size > q->block ? -1 : 0);
    }
    assert_null(cvx_quant_by_ggml(9));   /* Q8_1: a known ggml type, not a storage type here */
    assert_string_equal(cvx_ggml_type_name(9), "Q8_1");
    assert_string_equal(cvx_ggml_type_name(16), "IQ2_XXS");
    assert_null(cvx_ggml_type_name(4));  /* removed Q4_2 */
    assert_null(cvx_ggml_type_name(1000));
    assert_null(cvx_quant_of(CVX_F64));
    assert_null(cvx_quant_of(CVX_F8_E4M3));
    /* the safetensors names parse, the ggml block names do not */
    cvx_dtype d;
    assert_int_equal(cvx_dtype_parse("F8_E4M3", &d), 0);
    assert_int_equal(d, CVX_F8_E4M3);
    assert_int_equal(cvx_dtype_size(CVX_F8_E4M3), 1);
    assert_int_equal(cvx_dtype_parse("Q4_K", &d), -1);
    assert_string_equal(cvx_dtype_name(CVX_Q4_K), "Q4_K");
}

/* Each type of blocks/: T.blocks -> dequantize == T.dequant (bit-exact), fast == reference,
 * T.input -> quantize == T.blocks (bit-exact), also from an odd (unaligned) address. */
static void test_block_vectors(void **state) {
    (void)state;
    cvx_safetensors *st = tu_open(BLOCKS "/blocks.safetensors");
    cvx_config cj;
    ASSERT_OK(cvx_config_load(&cj, BLOCKS "/case.json"));
    json_object *types;
    assert_true(json_object_object_get_ex(cj.root, "types", &types));
    int n_types = 0, n_failed = 0;
    json_object_object_foreach(types, tname, tinfo) {
        const cvx_quant_traits *q = NULL;
        for (int i = 0; i < cvx_quant_count(); i++)
            if (strcmp(cvx_quant_at(i)->name, tname) == 0) q = cvx_quant_at(i);
        if (!q) fail_msg("blocks/case.json type %s has no traits row", tname);
        json_object *v;
        assert_true(json_object_object_get_ex(tinfo, "block_size", &v));
        assert_int_equal(json_object_get_int(v), q->block);
        assert_true(json_object_object_get_ex(tinfo, "bytes_per_block", &v));
        assert_int_equal(json_object_get_int(v), q->type_size);

        char name[64];
        snprintf(name, sizeof name, "%s.blocks", tname);
        const cvx_tensor *tb = cvx_st_find(st, name);
        ASSERT_NONNULL(tb);
        assert_int_equal(tb->dtype, CVX_U8);
        size_t in_n, want_n;
        snprintf(name, sizeof name, "%s.input", tname);
        float *input = tu_f32(st, name, &in_n);
        snprintf(name, sizeof name, "%s.dequant", tname);
        float *want = tu_f32(st, name, &want_n);
        assert_int_equal(in_n, want_n);
        const int64_t rows = tb->shape[0], row_n = (int64_t)in_n / rows;
        const size_t row_bytes = (size_t)(row_n / q->block * q->type_size);
        assert_int_equal(tb->shape[1], (int64_t)row_bytes);

        float *got = malloc(in_n * sizeof(float)), *fast = malloc(in_n * sizeof(float));
        unsigned char *odd = malloc(tb->nbytes + 1), *qb = malloc(tb->nbytes + 1);
        memcpy(odd + 1, tb->data, tb->nbytes);  /* blocks at an odd address */
        size_t bad_deq = 0, bad_fast = 0, bad_q = 0;
        uint32_t ulp_deq = 0, ulp_fast = 0, u;
        for (int64_t r = 0; r < rows; r++) {
            const unsigned char *src = odd + 1 + r * row_bytes;
            q->to_f32_ref(src, got + r * row_n, row_n);
            q->to_f32(src, fast + r * row_n, row_n);
            q->from_f32_ref(input + r * row_n, qb + 1 + r * row_bytes, row_n);
            if (memcmp(qb + 1 + r * row_bytes, (const unsigned char *)tb->data + r * row_bytes, row_bytes) != 0) {
                bad_q++;
                print_message("  %s row %lld: quantized bytes differ from the golden blocks\n", tname, (long long)r);
            }
        }
        bad_deq = count_bit_diffs(got, want, in_n, &u);
        ulp_deq = u;
        bad_fast = count_bit_diffs(fast, got, in_n, &u);
        ulp_fast = u;
        /* the dtype layer dequantizes the same way */
        float *viadtype = malloc(in_n * sizeof(float));
        cvx_to_f32_n(q->dtype, odd + 1, viadtype, in_n);
        size_t bad_dt = count_bit_diffs(viadtype, got, in_n, &u);
        print_message("  %-4s %lld rows x %lld: dequant %zu values differ (max %u ulp), fast %zu, quantize %zu "
                      "rows differ\n", tname, (long long)rows, (long long)row_n, bad_deq, ulp_deq, bad_fast, bad_q);
        if (bad_deq || bad_fast || bad_q || bad_dt)
            n_failed++, print_message("%s: dequant %zu (max %u ulp) / fast %zu (max %u ulp) / dtype %zu values, quantize %zu rows not "
                     "bit-exact\n", tname, bad_deq, ulp_deq, bad_fast, ulp_fast, bad_dt, bad_q);
        free(viadtype);
        free(got); free(fast); free(odd); free(qb); free(input); free(want);
        n_types++;
    }
    assert_int_equal(n_types, 12);  /* F16, BF16 and the ten quantized types */
    if (n_failed) fail_msg("%d of %d types not bit-exact", n_failed, n_types);
    cvx_config_free(&cj);
    cvx_st_close(st);
}

/* Fast dequantizers against the references on random blocks (every byte random, scales too:
 * subnormal, inf and NaN f16 scales included), bit for bit. */
static void test_fast_matches_reference(void **state) {
    (void)state;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < cvx_quant_count(); i++) {
        const cvx_quant_traits *q = cvx_quant_at(i);
        if (q->to_f32 == q->to_f32_ref) continue;
        const int64_t nblk = 4096, n = nblk * q->block;
        unsigned char *b = malloc((size_t)(nblk * q->type_size) + 1);
        for (int64_t k = 0; k < nblk * q->type_size + 1; k++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            b[k] = (unsigned char)(s >> 24);
        }
        float *a = malloc((size_t)n * 4), *f = malloc((size_t)n * 4);
        q->to_f32_ref(b + 1, a, n);
        q->to_f32(b + 1, f, n);
        uint32_t ulp;
        size_t bad = count_bit_diffs(f, a, (size_t)n, &ulp);
        print_message("  %-4s fast vs reference on %lld random blocks: %zu values differ\n", q->name, (long long)nblk, bad);
        if (bad) fail_msg("%s: fast dequantizer differs from the reference in %zu values", q->name, bad);
        free(a); free(f); free(b);
    }
}

/* cvx_f32_to_f16 rounds like the F16C instruction (nearest even) on a sweep of bit patterns
 * covering every exponent; NaN -> 0x7e00 with the sign. */
static void test_f32_to_f16(void **state) {
    (void)state;
    size_t checked = 0;
    for (uint64_t u = 0; u <= 0xffffffffull; u += 251) {
        float f;
        uint32_t x = (uint32_t)u;
        memcpy(&f, &x, 4);
        uint16_t got = cvx_f32_to_f16(f);
        if (isnan(f)) {
            assert_int_equal(got, (x >> 16 & 0x8000) | 0x7e00);
            continue;
        }
        uint16_t want = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
        if (got != want) fail_msg("f32 0x%08x -> f16 0x%04x, F16C gives 0x%04x", x, got, want);
        checked++;
    }
    /* the boundaries: largest finite, first overflow, smallest subnormal and halfway cases */
    const float edge[] = {65504.f, 65519.99f, 65520.f, 0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1.8p-24f, 0x1p-14f,
                          0x1.ffcp-15f, 0x1.ffep-15f, -0.f, INFINITY, -INFINITY, 1.0f + 0x1p-11f, 1.0f + 0x1.8p-11f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        assert_int_equal(cvx_f32_to_f16(edge[i]), _cvtss_sh(edge[i], _MM_FROUND_TO_NEAREST_INT));
    print_message("  f32 -> f16: %zu values equal to F16C\n", checked);
}

/* float8_e4m3fn: all 256 codes against (-1)^s 2^(e-7) (1 + m/8) (e > 0), m/8 2^-6 (e = 0), and
 * PyTorch's NaN bits (0x7f, 0xff -> sign | 0x7ff00000); the widest value is 448. */
static void test_f8_e4m3(void **state) {
    (void)state;
    unsigned char codes[257];
    float via[256];
    for (int c = 0; c < 256; c++) codes[c + 1] = (unsigned char)c;
    cvx_to_f32_n(CVX_F8_E4M3, codes + 1, via, 256);
    for (int c = 0; c < 256; c++) {
        int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
        float got = cvx_f8e4m3_to_f32((uint8_t)c);
        assert_int_equal(bits(via[c]), bits(got));
        if (e == 15 && m == 7) {
            assert_int_equal(bits(got), (s ? 0x80000000u : 0) | 0x7ff00000u);
            continue;
        }
        double want = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
        if (s) want = -want;
        if (bits(got) != bits((float)want)) fail_msg("f8 code 0x%02x -> %a, expected %a", c, got, want);
    }
    assert_true(cvx_f8e4m3_to_f32(0x7e) == 448.0f);
    assert_true(cvx_f8e4m3_to_f32(0x01) == 0x1p-9f);
    assert_int_equal(bits(cvx_f8e4m3_to_f32(0x80)), 0x80000000u);  /* -0 */

    /* through safetensors: an F8_E4M3 tensor is written, read back and widened; the compute layers'
     * loader (cvx_weights_get) takes it as a weight (widened exactly where it is used) and refuses
     * an integer tensor with a clear error; a block type cannot be stored */
    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/f8.safetensors", dir);
    cvx_st_writer *w = cvx_stw_new();
    ASSERT_OK(cvx_stw_add(w, "codes", CVX_F8_E4M3, 2, (const int64_t[]){16, 16}, codes + 1));
    ASSERT_OK(cvx_stw_add(w, "ints", CVX_I32, 1, (const int64_t[]){4}, codes + 1));
    cvx_clear_error();
    assert_int_equal(cvx_stw_add(w, "q", CVX_Q4_K, 1, (const int64_t[]){256}, codes), -1);
    assert_string_equal(cvx_last_error(), "tensor 'q': dtype Q4_K cannot be stored in safetensors");
    ASSERT_OK(cvx_stw_write(w, path));
    cvx_stw_free(w);
    cvx_safetensors *st = tu_open(path);
    const cvx_tensor *t = cvx_st_find(st, "codes");
    ASSERT_NONNULL(t);
    assert_int_equal(t->dtype, CVX_F8_E4M3);
    assert_int_equal(t->nbytes, 256);
    float *wide = cvx_tensor_f32_dup(t);
    assert_memory_equal(wide, via, sizeof via);
    free(wide);
    cvx_st_close(st);
    cvx_weights *ws = cvx_weights_open(path);
    ASSERT_NONNULL(ws);
    const cvx_tensor *wt = cvx_weights_get(ws, "codes", CVX_SHAPE(16, 16));
    ASSERT_NONNULL(wt);
    assert_int_equal(wt->dtype, CVX_F8_E4M3);
    cvx_clear_error();
    assert_null(cvx_weights_get(ws, "ints", CVX_SHAPE(4)));
    assert_non_null(strstr(cvx_last_error(), "has dtype I32, expected a float type (F32, BF16, F16, F8_E4M3)"));
    cvx_weights_close(ws);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traits_table),
        cmocka_unit_test(test_block_vectors),
        cmocka_unit_test(test_fast_matches_reference),
        cmocka_unit_test(test_f32_to_f16),
        cmocka_unit_test(test_f8_e4m3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
