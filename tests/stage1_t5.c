/* T5 v1.1 encoder: the bucket function, config errors, and the sharded bf16 fixture
 * (tests/data/stage1/, made by scripts/make_t5_fixtures.py): right shards, exact against the same
 * weights rounded to bf16 and stored as one f32 file, close to the f32 golden. The golden
 * last_hidden_state parity itself is a row of tests/golden_cases.c. */
#include "golden_harness.h"
#include "gemm.h"
#include "stage1/t5.h"

#include <math.h>

#define FIX "tests/data/stage1"

/* The golden inputs and outputs, shared by the tests. */
static int64_t *g_ids;
static float *g_out;
static int g_B, g_S, g_D;

static int setup(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, "t5");
    const cvx_tensor *ids = gh_tensor(&c, "input_ids"), *out = gh_tensor(&c, "last_hidden_state");
    if (ids->dtype != CVX_I64) return -1;
    g_B = (int)ids->shape[0];
    g_S = (int)ids->shape[1];
    g_D = (int)out->shape[2];
    g_ids = malloc(ids->nbytes);
    memcpy(g_ids, ids->data, ids->nbytes);
    g_out = cvx_tensor_f32_dup(out);
    gh_close(&c);
    return 0;
}
static int teardown(void **state) {
    (void)state;
    free(g_ids);
    free(g_out);
    return 0;
}

/* Reference bucket in double precision, away from the float32 rounding boundaries. */
static void test_relative_position_bucket(void **state) {
    (void)state;
    /* exact range, both directions */
    for (int r = 0; r < 8; r++) {
        assert_int_equal(t5_relative_position_bucket(r, 32, 128), r == 0 ? 0 : 16 + r);
        assert_int_equal(t5_relative_position_bucket(-r, 32, 128), r);
    }
    for (int n = 8; n < 1000; n++) {
        double v = 8 + log(n / 8.0) / log(16.0) * 8;
        if (fabs(v - floor(v + 0.5)) < 1e-4) continue;   /* boundaries: float32 decides */
        int want = (int)v < 15 ? (int)v : 15;
        assert_int_equal(t5_relative_position_bucket(-n, 32, 128), want);
        assert_int_equal(t5_relative_position_bucket(n, 32, 128), 16 + want);
    }
    /* the boundaries upstream's float32 arithmetic lands on (n = 16, 32, 64 -> 10, 12, 14) */
    assert_int_equal(t5_relative_position_bucket(-16, 32, 128), 10);
    assert_int_equal(t5_relative_position_bucket(-32, 32, 128), 12);
    assert_int_equal(t5_relative_position_bucket(-64, 32, 128), 14);
    assert_int_equal(t5_relative_position_bucket(-128, 32, 128), 15);
    assert_int_equal(t5_relative_position_bucket(5000, 32, 128), 31);
}

static void encode_all(const char *dir, float *out) {
    t5_model m;
    ASSERT_OK(t5_build(&m, dir, NULL));
    assert_int_equal(m.cfg.d_model, g_D);
    /* two prompts per call, as stage1 batches prompt and negative prompt */
    for (int b = 0; b < g_B; b += 2) {
        int nb = g_B - b < 2 ? g_B - b : 2;
        ASSERT_OK(t5_encode(&m, g_ids + (size_t)b * g_S, nb, g_S, out + (size_t)b * g_S * g_D, NULL));
    }
    t5_free(&m);
}

/* Sharded bf16 fixture: index, shard placement, embed_tokens naming, bf16/f16 widening. */
static void test_sharded_bf16(void **state) {
    (void)state;
    cvx_weights *w = cvx_weights_open(FIX "/t5_bf16_sharded/text_encoder");
    ASSERT_NONNULL(w);
    const struct { const char *name, *shard; cvx_dtype dt; } where[] = {
        {"encoder.embed_tokens.weight", "model-00001-of-00002.safetensors", CVX_BF16},
        {"encoder.block.0.layer.0.SelfAttention.q.weight", "model-00001-of-00002.safetensors", CVX_BF16},
        {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", "model-00001-of-00002.safetensors",
         CVX_BF16},
        {"encoder.block.1.layer.0.SelfAttention.q.weight", "model-00002-of-00002.safetensors", CVX_BF16},
        {"encoder.block.1.layer.1.DenseReluDense.wo.weight", "model-00002-of-00002.safetensors", CVX_BF16},
        {"encoder.final_layer_norm.weight", "model-00002-of-00002.safetensors", CVX_F16},
    };
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
        const cvx_tensor *t = cvx_weights_find(w, where[i].name);
        if (!t) fail_msg("tensor %s not found", where[i].name);
        const char *base = strrchr(t->file, '/');
        assert_string_equal(base ? base + 1 : t->file, where[i].shard);
        assert_int_equal(t->dtype, where[i].dt);
    }
    assert_null(cvx_weights_find(w, "shared.weight"));
    cvx_weights_close(w);

    const size_t n = (size_t)g_B * g_S * g_D, per = (size_t)g_S * g_D;
    float *bf = malloc(n * sizeof(float)), *rounded = malloc(n * sizeof(float));
    encode_all(FIX "/t5_bf16_sharded/text_encoder", bf);
    encode_all(FIX "/t5_bf16_rounded_f32/text_encoder", rounded);
    /* Same values, other storage: widening is exact, so the results must agree. */
    ASSERT_REL_L2(bf, rounded, n, 1e-6);
    /* Against the f32 golden: bf16 weights (8-bit mantissa) move the output by ~1e-3..1e-2. */
    double worst = 0;
    for (int b = 0; b < g_B; b++) {
        double e = cvx_rel_l2(bf + b * per, g_out + b * per, per);
        if (e > worst) worst = e;
    }
    print_message("  bf16 vs f32 golden: worst rel L2 = %.3g (tol 2e-2)\n", worst);
    assert_true(worst <= 2e-2);
    assert_true(worst > 1e-6);   /* really the bf16 weights, not the f32 file */
    free(bf);
    free(rounded);
}

/* Config errors name the file and the key. */
static void test_config_errors(void **state) {
    (void)state;
    static const struct { const char *json, *expect; } cases[] = {
        {"{\"d_kv\": 8, \"num_heads\": 4, \"d_ff\": 48, \"num_layers\": 2, \"vocab_size\": 9, "
         "\"feed_forward_proj\": \"gated-gelu\"}", "d_model"},
        {"{\"d_model\": 32, \"d_kv\": 8, \"num_heads\": 4, \"d_ff\": 48, \"num_layers\": 2, \"vocab_size\": 9, "
         "\"feed_forward_proj\": \"relu\"}", "feed_forward_proj"},
        {"{\"d_model\": 32, \"d_kv\": 8, \"num_heads\": 0, \"d_ff\": 48, \"num_layers\": 2, \"vocab_size\": 9, "
         "\"feed_forward_proj\": \"gated-gelu\"}", "num_heads"},
        {"{\"d_model\": \"big\", \"d_kv\": 8}", "d_model"},
    };
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tu_write(path, cases[i].json, strlen(cases[i].json));
        t5_config c;
        assert_int_not_equal(t5_config_load(&c, path), 0);
        print_message("  %s\n", cvx_last_error());
        assert_non_null(strstr(cvx_last_error(), cases[i].expect));
        assert_non_null(strstr(cvx_last_error(), "config.json"));
    }
    /* the defaults transformers' T5Config has for the optional keys */
    const char *ok = "{\"d_model\": 32, \"d_kv\": 8, \"num_heads\": 4, \"d_ff\": 48, \"num_layers\": 2, "
                     "\"vocab_size\": 9, \"feed_forward_proj\": \"gated-gelu\"}";
    tu_write(path, ok, strlen(ok));
    t5_config c;
    ASSERT_OK(t5_config_load(&c, path));
    assert_int_equal(c.num_buckets, 32);
    assert_int_equal(c.max_distance, 128);
    assert_true(c.eps == 1e-6f);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relative_position_bucket),
        cmocka_unit_test(test_sharded_bf16),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
