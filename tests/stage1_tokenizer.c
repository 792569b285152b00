/* T5Tokenizer: the vocabulary, the edge cases upstream's code implies, the genuine T5 vocabulary.
 * The golden prompts (input_ids and attention_mask exactly, untruncated ids of case.json) are a
 * row of tests/golden_cases.c. */
#include "testutil.h"
#include "config.h"
#include "stage1/t5_tokenizer.h"

#define TOK_CASE GOLDEN "/tokenizer"
/* The genuine T5 v1.1 spiece.model (golden README §13) and transformers' ids for 11 prompts. */
#define GENUINE_DIR "tests/data/tokenizer_t5_genuine"
#define L 226

static t5_tokenizer tok;

static int setup(void **state) {
    (void)state;
    if (t5_tokenizer_load(&tok, TOK_CASE "/model/tokenizer")) {
        fprintf(stderr, "cannot load tokenizer: %s\n", cvx_last_error());
        return -1;
    }
    return 0;
}
static int teardown(void **state) {
    (void)state;
    t5_tokenizer_free(&tok);
    return 0;
}

static void test_vocabulary(void **state) {
    (void)state;
    assert_int_equal(t5_spm_piece_count(tok.sp), 800);
    assert_int_equal(tok.vocab_size, 900);   /* len(tokenizer) in case.json */
    assert_int_equal(tok.eos_id, 1);
    assert_int_equal(tok.pad_id, 0);
}

/* Cases implied by upstream's code rather than covered by the golden prompts. */
static void test_edge_cases(void **state) {
    (void)state;
    int64_t ids[L], mask[L], ids2[L], mask2[L];
    /* Empty prompt: [</s>, pad, ...], mask [1, 0, ...]. */
    ASSERT_OK(t5_tokenize(&tok, "", L, ids, mask, NULL));
    assert_int_equal(ids[0], 1);
    assert_int_equal(mask[0], 1);
    for (int i = 1; i < L; i++) { assert_int_equal(ids[i], 0); assert_int_equal(mask[i], 0); }
    /* Whitespace only normalises to nothing. */
    ASSERT_OK(t5_tokenize(&tok, " \t\n ", L, ids, mask, NULL));
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 0);
    /* <extra_id_N> = pieces + 99 - N, eating the whitespace on both sides. */
    ASSERT_OK(t5_tokenize(&tok, "a <extra_id_5>   b", L, ids, mask, NULL));
    ASSERT_OK(t5_tokenize(&tok, "a<extra_id_5>b", L, ids2, mask2, NULL));
    assert_memory_equal(ids, ids2, sizeof ids);
    int found = 0;
    for (int i = 0; i < L; i++) found |= ids[i] == 800 + 99 - 5;
    assert_true(found);
    /* A literal </s> at the end is not doubled (_add_eos_if_not_present). */
    int64_t *raw;
    int n1, n2;
    ASSERT_OK(t5_tokenize_raw(&tok, "hello", &raw, &n1));
    free(raw);
    ASSERT_OK(t5_tokenize_raw(&tok, "hello</s>", &raw, &n2));
    assert_int_equal(n1, n2);
    assert_int_equal(raw[n2 - 1], 1);
    free(raw);
    /* <pad> / <unk> written literally are their ids, without stripping. */
    ASSERT_OK(t5_tokenize_raw(&tok, "<pad><unk>", &raw, &n1));
    assert_int_equal(n1, 3);
    assert_int_equal(raw[0], 0);
    assert_int_equal(raw[1], 2);
    free(raw);
    /* Truncation keeps max_len - 1 ids then the EOS. */
    ASSERT_OK(t5_tokenize(&tok, "a golden retriever runs along the beach", 4, ids, mask, &n1));
    assert_true(n1 > 4);
    assert_int_equal(ids[3], 1);
    assert_int_equal(mask[3], 1);
    ASSERT_OK(t5_tokenize(&tok, "a golden retriever", 1, ids, mask, NULL));
    assert_int_equal(ids[0], 1);
    assert_int_not_equal(t5_tokenize(&tok, "x", 0, ids, mask, NULL), 0);
}

/* The real 32000-piece vocabulary every CogVideoX checkpoint ships: all 226 ids of every
 * golden prompt exactly (CJK, emoji, full-width letters, ligatures, tabs, <extra_id_0>,
 * truncation). The directory holds only spiece.model: the added tokens are T5Tokenizer's
 * defaults (extra_ids = 100). */
static void test_genuine_vocabulary(void **state) {
    (void)state;
    t5_tokenizer t;
    ASSERT_OK(t5_tokenizer_load(&t, GENUINE_DIR));
    assert_int_equal(t5_spm_piece_count(t.sp), 32000);
    assert_int_equal(t.vocab_size, 32100);
    cvx_config c;
    ASSERT_OK(cvx_config_load(&c, GENUINE_DIR "/case.json"));
    json_object *cases;
    assert_true(json_object_object_get_ex(c.root, "cases", &cases));
    const int n = (int)json_object_array_length(cases);
    assert_int_equal(n, 11);
    for (int p = 0; p < n; p++) {
        json_object *cs = json_object_array_get_idx(cases, p), *jp, *jids, *jn;
        assert_true(json_object_object_get_ex(cs, "prompt", &jp));
        assert_true(json_object_object_get_ex(cs, "input_ids", &jids));
        assert_true(json_object_object_get_ex(cs, "n_tokens", &jn));
        assert_int_equal(json_object_array_length(jids), L);
        int64_t ids[L], mask[L];
        int n_raw, real = 0;
        ASSERT_OK(t5_tokenize(&t, json_object_get_string(jp), L, ids, mask, &n_raw));
        for (int i = 0; i < L; i++) {
            int64_t w = json_object_get_int64(json_object_array_get_idx(jids, i));
            if (ids[i] != w) fail_msg("genuine prompt %d position %d: id %lld, expected %lld", p, i, (long long)ids[i], (long long)w);
            real += mask[i] != 0;
        }
        print_message("  genuine prompt %d: %d tokens (n_tokens %d), ids exact\n", p, n_raw, json_object_get_int(jn));
        assert_int_equal(real, n_raw < L ? n_raw : L);
    }
    int64_t *raw;
    int nr;
    ASSERT_OK(t5_tokenize_raw(&t, "Hello world", &raw, &nr));   /* README §13 */
    assert_int_equal(nr, 3);
    assert_int_equal(raw[0], 8774);
    assert_int_equal(raw[1], 296);
    assert_int_equal(raw[2], 1);
    free(raw);
    cvx_config_free(&c);
    t5_tokenizer_free(&t);
}

/* The embedded tiny model (models/cogvideox-tiny-random, made by
 * scripts/make_tiny_model_tokenizer.py) ships the genuine vocabulary with a tokenizer_config.json
 * listing the added tokens: same ids as the bare spiece.model, <extra_id_N> = 32099 − N, and
 * the text encoder's embedding has a row for every id. */
static void test_embedded_model_tokenizer(void **state) {
    (void)state;
    t5_tokenizer t;
    ASSERT_OK(t5_tokenizer_load(&t, "models/cogvideox-tiny-random/tokenizer"));
    assert_int_equal(t5_spm_piece_count(t.sp), 32000);
    assert_int_equal(t.vocab_size, 32100);
    int64_t *raw;
    int nr;
    ASSERT_OK(t5_tokenize_raw(&t, "Hello world <extra_id_0> x<extra_id_99>", &raw, &nr));
    const int64_t want[] = {8774, 296, 32099, 3, 226, 32000, 1};
    assert_int_equal(nr, 7);
    for (int i = 0; i < nr; i++) assert_int_equal(raw[i], want[i]);
    free(raw);
    cvx_config c;
    int64_t vocab;
    ASSERT_OK(cvx_config_load(&c, "models/cogvideox-tiny-random/text_encoder/config.json"));
    ASSERT_OK(cvx_cfg_int(&c, "vocab_size", &vocab));
    assert_int_equal(vocab, 32128);
    cvx_config_free(&c);
    t5_tokenizer_free(&t);
}

static void test_missing_model(void **state) {
    (void)state;
    t5_tokenizer t;
    assert_int_not_equal(t5_tokenizer_load(&t, "/nonexistent/tokenizer"), 0);
    assert_non_null(strstr(cvx_last_error(), "/nonexistent/tokenizer"));
    assert_int_not_equal(t5_tokenizer_load(&t, GOLDEN "/t5/model/text_encoder"), 0);
    assert_non_null(strstr(cvx_last_error(), "spiece.model"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocabulary),
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_genuine_vocabulary),
        cmocka_unit_test(test_embedded_model_tokenizer),
        cmocka_unit_test(test_missing_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
