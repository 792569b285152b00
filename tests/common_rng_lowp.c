/* common/rng_lowp: torch.randn(..., dtype=bfloat16 / float16) on CPU, bit for bit.
 *
 * Golden (tests/data/golden/noise_lowp, made by its make_fixture.py from golden README §8/§9):
 * every case of noise_lowp/ in both dtypes (7, 16, 33 values, the 2b-test latent shape
 * [1,3,4,6,8] and the real 5b latent shape [1,13,16,60,90] — the latter as head/mid/tail values
 * plus a 64-bit hash of all 1.1 M values), and user.initial_latents of the bf16 end-to-end runs
 * e2e_2b / e2e_5b (seed and shape from their case.json). All compared bit for bit.
 * Plus: generator consumption and carry-over (mixed f32 / bf16 / fp16 draws, resume from a
 * byte copy), the f32 -> f16 rounding against an independent reference, and bad dtypes. */
#include "testutil.h"

#include <math.h>

#include "config.h"
#include "rng_lowp.h"

#define LOWP_DIR GOLDEN "/noise_lowp"

/* ------------------------------------------------------------------------------ helpers */

static json_object *jget(json_object *o, const char *key) {
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v)) fail_msg("case.json: missing key '%s'", key);
    return v;
}

static size_t json_numel(json_object *shape) {
    size_t n = 1;
    for (size_t i = 0; i < json_object_array_length(shape); i++)
        n *= (size_t)json_object_get_int64(json_object_array_get_idx(shape, i));
    return n;
}

static float widen(cvx_dtype t, uint16_t h) {
    return t == CVX_BF16 ? cvx_bf16_to_f32(h) : cvx_f16_to_f32(h);
}

/* Compare got[0..n) with the golden 16-bit tensor `name` bit for bit; prints the count. */
static size_t compare_bits(const cvx_safetensors *st, const char *name, cvx_dtype dtype,
                           const uint16_t *got, size_t n) {
    const cvx_tensor *t = cvx_st_find(st, name);
    if (!t) fail_msg("%s: no tensor '%s'", cvx_st_path(st), name);
    assert_int_equal(t->dtype, dtype);
    if ((size_t)t->numel != n) fail_msg("%s: golden has %lld values, we compare %zu", name,
                                        (long long)t->numel, n);
    const unsigned char *w = t->data;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t want;
        memcpy(&want, w + 2 * i, 2);
        if (want != got[i]) {
            if (bad < 5)
                print_message("  %s[%zu]: got 0x%04x (%.6g), want 0x%04x (%.6g)\n", name, i, got[i],
                              (double)widen(dtype, got[i]), want, (double)widen(dtype, want));
            bad++;
        }
    }
    print_message("  %-22s %8zu values, %zu mismatches\n", name, n, bad);
    return bad;
}

/* 64-bit FNV-1a over the little-endian bytes of the 16-bit values (make_fixture.py's hash). */
static uint64_t fnv1a64_u16(const uint16_t *v, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        unsigned char b[2] = {(unsigned char)(v[i] & 0xff), (unsigned char)(v[i] >> 8)};
        for (int k = 0; k < 2; k++) h = (h ^ b[k]) * 0x100000001b3ull;
    }
    return h;
}

static uint16_t *draw_lowp(uint64_t seed, cvx_dtype dtype, size_t n) {
    cvx_generator g;
    cvx_generator_seed(&g, seed);
    uint16_t *out = cvx_malloc((n ? n : 1) * sizeof *out);
    ASSERT_OK(cvx_randn_lowp(&g, dtype, out, n));
    return out;
}

/* ------------------------------------------------------------------------------- tests */

/* Every noise_lowp case, bf16 and fp16: small tensors whole; big ones head / mid (n/2) / tail
 * exactly and all values through the hash. The f32-widened API must agree with the bits. */
static void test_golden_noise_lowp(void **state) {
    (void)state;
    cvx_config c;
    ASSERT_OK(cvx_config_load(&c, LOWP_DIR "/case.json"));
    cvx_safetensors *st = tu_open(LOWP_DIR "/expected.safetensors");
    json_object *cases = jget(c.root, "cases");
    assert_true(json_object_array_length(cases) >= 5);
    size_t total_bad = 0, big_cases = 0;
    for (size_t i = 0; i < json_object_array_length(cases); i++) {
        json_object *e = json_object_array_get_idx(cases, i);
        const char *cname = json_object_get_string(jget(e, "name"));
        uint64_t seed = (uint64_t)json_object_get_int64(jget(e, "seed"));
        size_t n = json_numel(jget(e, "shape"));
        for (int d = 0; d < 2; d++) {
            cvx_dtype dtype = d ? CVX_F16 : CVX_BF16;
            char name[96];
            snprintf(name, sizeof name, "%s.%s", cname, d ? "fp16" : "bf16");
            uint16_t *got = draw_lowp(seed, dtype, n);
            if (cvx_st_find(st, name)) {
                total_bad += compare_bits(st, name, dtype, got, n);
            } else {                                 /* stored as head / mid / tail + hash */
                char part[128];
                big_cases++;
                size_t hn = 4096, mn = 1000, mid = n / 2;
                snprintf(part, sizeof part, "%s.head", name);
                total_bad += compare_bits(st, part, dtype, got, hn);
                snprintf(part, sizeof part, "%s.mid", name);
                total_bad += compare_bits(st, part, dtype, got + mid, mn);
                snprintf(part, sizeof part, "%s.tail", name);
                total_bad += compare_bits(st, part, dtype, got + n - hn, hn);
                snprintf(part, sizeof part, "%s.fnv1a64", name);
                const char *want = cvx_st_metadata(st, part);
                if (!want) fail_msg("%s: no metadata '%s'", cvx_st_path(st), part);
                char have[17];
                snprintf(have, sizeof have, "%016llx", (unsigned long long)fnv1a64_u16(got, n));
                print_message("  %-22s hash of all %zu values %s (want %s)\n", name, n, have, want);
                if (strcmp(have, want) != 0) total_bad++;
            }
            /* cvx_randn_as: the same values widened to f32 */
            cvx_generator g;
            cvx_generator_seed(&g, seed);
            float *f = cvx_alloc_f32(n);
            ASSERT_OK(cvx_randn_as(&g, dtype, f, n));
            for (size_t k = 0; k < n; k++) {
                float w = widen(dtype, got[k]);
                if (memcmp(&w, &f[k], sizeof w) != 0) fail_msg("%s[%zu]: cvx_randn_as %.9g != bits %.9g",
                                                               name, k, (double)f[k], (double)w);
            }
            free(f);
            free(got);
        }
    }
    assert_int_equal(big_cases, 2);                  /* c4 in both dtypes went through the hash */
    cvx_st_close(st);
    cvx_config_free(&c);
    if (total_bad) fail_msg("%zu mismatches against torch.randn(dtype=bf16/fp16)", total_bad);
}

/* The bf16 pipelines' initial latents (golden §9 user.initial_latents, F32 holding bf16 values):
 * seed and latent shape from the f32 case's case.json, drawn with cvx_randn_as(BF16). */
static void test_golden_e2e_bf16_initial_latents(void **state) {
    (void)state;
    const char *cases[] = {"e2e_2b", "e2e_5b"};
    cvx_safetensors *st = tu_open(LOWP_DIR "/expected.safetensors");
    for (size_t k = 0; k < 2; k++) {
        char path[256], name[96];
        snprintf(path, sizeof path, GOLDEN "/%s/case.json", cases[k]);
        cvx_config c;
        ASSERT_OK(cvx_config_load(&c, path));
        uint64_t seed = (uint64_t)json_object_get_int64(jget(jget(c.root, "call"), "seed"));
        size_t n = json_numel(jget(c.root, "latent_shape"));
        snprintf(name, sizeof name, "%s.user.initial_latents", cases[k]);
        size_t wn = 0;
        float *want = tu_f32(st, name, &wn);
        assert_int_equal(cvx_st_find(st, name)->dtype, CVX_F32);
        assert_int_equal(wn, n);

        cvx_generator g;
        cvx_generator_seed(&g, seed);
        float *got = cvx_alloc_f32(n), *f32 = cvx_alloc_f32(n);
        ASSERT_OK(cvx_randn_as(&g, CVX_BF16, got, n));
        size_t bad = 0, differs_from_f32 = 0;
        cvx_generator_seed(&g, seed);
        cvx_randn(&g, f32, n);
        for (size_t i = 0; i < n; i++) {
            if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
                if (bad < 5) print_message("  %s[%zu]: got %.9g, want %.9g\n", name, i,
                                           (double)got[i], (double)want[i]);
                bad++;
            }
            differs_from_f32 += cvx_bf16_to_f32(cvx_f32_to_bf16(f32[i])) != want[i];
        }
        print_message("  %s (seed %llu, %zu values): %zu mismatches; the f32 draw rounded to bf16 "
                      "would differ in %zu\n", name, (unsigned long long)seed, n, bad, differs_from_f32);
        assert_true(differs_from_f32 > n / 10);      /* the test can tell the two kernels apart */
        if (bad) fail_msg("%s: %zu of %zu values differ", name, bad, n);
        free(got);
        free(f32);
        free(want);
        cvx_config_free(&c);
    }
    cvx_st_close(st);
}

/* Generator consumption, as torch: n >= 16 takes n (+ 16 when n % 16 != 0) 32-bit draws; below
 * 16 the double path (2 x random64 per pair, second value cached and shared with f32 draws).
 * A pipeline's DPM chain (initial latents, then two noises per step) mixes sizes on one generator. */
static void test_state_carry_over(void **state) {
    (void)state;
    const size_t sizes[] = {16, 17, 31, 32, 33, 576, 0, 1, 2, 3, 15};
    for (int d = 0; d < 2; d++) {
        cvx_dtype dtype = d ? CVX_F16 : CVX_BF16;
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t n = sizes[i];
            size_t draws = n >= 16 ? n + (n % 16 ? 16 : 0) : 4 * ((n + 1) / 2);
            uint16_t buf[600];
            cvx_generator a, b;
            cvx_generator_seed(&a, 7 + i);
            cvx_generator_seed(&b, 7 + i);
            ASSERT_OK(cvx_randn_lowp(&a, dtype, buf, n));
            for (size_t k = 0; k < draws; k++) cvx_generator_random(&b);
            assert_int_equal(cvx_generator_random(&a), cvx_generator_random(&b));
        }
    }
    /* below 16 the values are the f32 draw rounded, and the cached second normal is shared */
    cvx_generator a, b;
    float f[3], y;
    uint16_t h[1];
    cvx_generator_seed(&a, 5);
    cvx_randn(&a, f, 3);
    cvx_generator_seed(&b, 5);
    ASSERT_OK(cvx_randn_lowp(&b, CVX_BF16, h, 1));   /* first of a pair, second cached */
    assert_int_equal(h[0], cvx_f32_to_bf16(f[0]));
    cvx_randn(&b, &y, 1);                             /* the cached one, in f32 */
    assert_memory_equal(&y, &f[1], sizeof y);
    ASSERT_OK(cvx_randn_lowp(&b, CVX_F16, h, 1));
    assert_int_equal(h[0], cvx_f32_to_f16(f[2]));

    /* a chain of draws resumed from a byte copy of the generator (stage-2 checkpoint) */
    const size_t chain[] = {576, 576, 7, 576, 33, 576};
    uint16_t *x = cvx_malloc(576 * sizeof *x), *z = cvx_malloc(576 * sizeof *z);
    cvx_generator_seed(&a, 42);
    ASSERT_OK(cvx_randn_lowp(&a, CVX_BF16, x, 5));   /* a cached normal is pending */
    cvx_generator saved = a;
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++)
        ASSERT_OK(cvx_randn_lowp(&a, CVX_BF16, x, chain[i]));
    ASSERT_OK(cvx_generator_validate(&saved));
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++)
        ASSERT_OK(cvx_randn_lowp(&saved, CVX_BF16, z, chain[i]));
    assert_memory_equal(x, z, 576 * sizeof *x);
    assert_memory_equal(&a, &saved, sizeof a);
    free(x);
    free(z);
}

/* f32 -> f16 round to nearest even, checked without trusting the implementation: for every
 * finite positive half h, the exact midpoint to the next half (a float) must go to the even one,
 * and one float ulp either side to the nearer one; plus zeros, overflow, inf, NaN; and a sweep
 * against the compiler's _Float16 conversion where it has one. */
static void test_f32_to_f16(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        float lo = cvx_f16_to_f32((uint16_t)h), hi = cvx_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)(((double)lo + (double)hi) / 2);    /* exact in float */
        assert_int_equal(cvx_f32_to_f16(lo), h);
        assert_int_equal(cvx_f32_to_f16(-lo), h | 0x8000u);
        if (h + 1 == 0x7c00u) {             /* 65504 .. "65536" (inf): midpoint 65520 -> inf */
            mid = 65520.0f;
            assert_int_equal(cvx_f32_to_f16(mid), 0x7c00u);
            assert_int_equal(cvx_f32_to_f16(nextafterf(mid, 0)), h);
            continue;
        }
        assert_int_equal(cvx_f32_to_f16(mid), (h & 1u) ? h + 1 : h);
        assert_int_equal(cvx_f32_to_f16(nextafterf(mid, 0)), h);
        assert_int_equal(cvx_f32_to_f16(nextafterf(mid, INFINITY)), h + 1);
    }
    assert_int_equal(cvx_f32_to_f16(0x1p-25f), 0);                 /* half of the smallest: even */
    assert_int_equal(cvx_f32_to_f16(nextafterf(0x1p-25f, 1)), 1);
    assert_int_equal(cvx_f32_to_f16(1e-30f), 0);
    assert_int_equal(cvx_f32_to_f16(-0.0f), 0x8000u);
    assert_int_equal(cvx_f32_to_f16(1e10f), 0x7c00u);
    assert_int_equal(cvx_f32_to_f16(-INFINITY), 0xfc00u);
    assert_true((cvx_f32_to_f16(NAN) & 0x7fffu) > 0x7c00u);
#ifdef __FLT16_MAX__
    size_t checked = 0;
    for (uint64_t u = 0; u <= 0xffffffffull; u += 9973) {
        uint32_t b = (uint32_t)u;
        float f;
        memcpy(&f, &b, 4);
        if (isnan(f)) continue;
        _Float16 r = (_Float16)f;
        uint16_t want;
        memcpy(&want, &r, 2);
        if (cvx_f32_to_f16(f) != want) fail_msg("f32 0x%08x: got 0x%04x, _Float16 0x%04x", b,
                                                cvx_f32_to_f16(f), want);
        checked++;
    }
    print_message("  %zu floats agree with the compiler's _Float16 conversion\n", checked);
#endif
}

/* Unsupported dtypes and names: one clear message. */
static void test_bad_dtype(void **state) {
    (void)state;
    cvx_generator g;
    cvx_generator_seed(&g, 1);
    uint16_t h[4];
    float f[4];
    assert_int_equal(cvx_randn_lowp(&g, CVX_F32, h, 4), -1);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "F32"));
    assert_int_equal(cvx_randn_as(&g, CVX_I64, f, 4), -1);
    print_message("  %s\n", cvx_last_error());
    cvx_dtype t;
    ASSERT_OK(cvx_noise_dtype_parse("bf16", &t));
    assert_int_equal(t, CVX_BF16);
    ASSERT_OK(cvx_noise_dtype_parse("float16", &t));
    assert_int_equal(t, CVX_F16);
    ASSERT_OK(cvx_noise_dtype_parse("F32", &t));
    assert_int_equal(t, CVX_F32);
    assert_int_equal(cvx_noise_dtype_parse("int8", &t), -1);
    assert_non_null(strstr(cvx_last_error(), "int8"));
    print_message("  %s\n", cvx_last_error());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_noise_lowp),
        cmocka_unit_test(test_golden_e2e_bf16_initial_latents),
        cmocka_unit_test(test_state_carry_over),
        cmocka_unit_test(test_f32_to_f16),
        cmocka_unit_test(test_bad_dtype),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
