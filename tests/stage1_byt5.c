/* HunyuanVideo-1.5's glyph encoder against upstream (golden_hv15 README section 2, case byt5/):
 *  - extract_glyph_texts on the 12 prompts (straight and curly quotes, an empty quote, duplicates,
 *    none: Python's None) and on cases they do not reach (a newline inside quotes, one match);
 *  - ByT5Tokenizer: the untruncated ids and the padded ids/mask [256] of every prompt with glyph
 *    text exactly (added <color-N> / <xx-font-N> tokens included); truncation to 255 + </s>; a
 *    literal </s> strips the whitespace around it and is not doubled;
 *  - prompt_embeds_2 [12, 256, 24] (rel L2 <= 1e-5 per prompt; exact zeros without glyph text)
 *    and prompt_embeds_mask_2 exactly, through our T5 encoder with the attention mask. */
#include "golden_harness.h"

#include "stage1/byt5.h"
#include "stage1/glyph.h"
#include "stage1/t5.h"

#define CASE "tests/data/golden_hv15/byt5"
#define L HV15_BYT5_MAX_LENGTH

static void test_glyph_texts(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, CASE);
    json_object *prompts = gh_json(&c, "prompts"), *glyphs = gh_json(&c, "glyph_texts");
    assert_int_equal(gh_len(prompts), 12);
    for (size_t p = 0; p < gh_len(prompts); p++) {
        char *g = hv15_extract_glyph_texts(gh_str(gh_at(prompts, p)));
        json_object *want = gh_at(glyphs, p);
        if (!want) assert_null(g);
        else {
            assert_non_null(g);
            assert_string_equal(g, gh_str(want));
        }
        free(g);
    }
    static const struct { const char *in, *out; } more[] = {
        {"say \"hi\nthere\" now \"ok\"", "Text \" now \". "},          /* no pair across the newline: quotes 2 and 3 pair */
        {"\"a\" \"a\"", "Text \"a\". "},                                 /* de-duplicated */
        {"\xe2\x80\x9c" "a\" b\xe2\x80\x9d", "Text \"a\" b\". "},       /* “a" b”: the curly pair */
        {"unclosed \"quote", NULL},
    };
    for (size_t k = 0; k < sizeof more / sizeof *more; k++) {
        char *g = hv15_extract_glyph_texts(more[k].in);
        if (!more[k].out) assert_null(g);
        else assert_string_equal(g, more[k].out);
        free(g);
    }
    gh_close(&c);
}

static void test_tokenizer(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, CASE);
    byt5_tokenizer t;
    ASSERT_OK(byt5_tokenizer_load(&t, gh_path(&c, "model/tokenizer_2")));
    assert_int_equal(t.vocab_size, gh_int(gh_json(&c, "len_tokenizer")));
    json_object *per = gh_json(&c, "per_prompt");
    int seen = 0;
    for (size_t p = 0; p < gh_len(per); p++) {
        json_object *pp = gh_at(per, p);
        if (!pp) continue;
        const char *glyph = gh_str(gh_get(pp, "glyph_text"));
        json_object *raw = gh_get(pp, "untruncated_ids");
        int64_t *ids;
        int n;
        ASSERT_OK(byt5_tokenize_raw(&t, glyph, &ids, &n));
        assert_int_equal(n, (int)gh_len(raw));
        for (int i = 0; i < n; i++) assert_int_equal(ids[i], gh_int(gh_at(raw, (size_t)i)));
        free(ids);
        int64_t got[2 * L], want[2 * L];
        int n_raw;
        ASSERT_OK(byt5_tokenize(&t, glyph, L, got, got + L, &n_raw));
        assert_int_equal(n_raw, n);
        const cvx_tensor *wi = gh_tensor(&c, "p%zu.input_ids", p), *wm = gh_tensor(&c, "p%zu.attention_mask", p);
        for (int i = 0; i < L; i++) want[i] = gh_i64_at(wi, (size_t)i), want[L + i] = gh_i64_at(wm, (size_t)i);
        char what[48];
        snprintf(what, sizeof what, "p%zu ids + mask", p);
        gh_check_exact_i64(&c, what, got, want, 2 * L);
        seen++;
    }
    assert_int_equal(seen, 5);
    /* truncation: 300 bytes -> 255 + </s>; a literal </s> eats the spaces around it, no second EOS */
    char long_text[301];
    memset(long_text, 'x', 300);
    long_text[300] = 0;
    int64_t ids[L], mask[L];
    int n_raw;
    ASSERT_OK(byt5_tokenize(&t, long_text, L, ids, mask, &n_raw));
    assert_int_equal(n_raw, 301);
    assert_int_equal(ids[254], 'x' + BYT5_OFFSET);
    assert_int_equal(ids[255], 1);
    assert_int_equal(mask[255], 1);
    ASSERT_OK(byt5_tokenize(&t, "a </s>  ", L, ids, mask, &n_raw));
    assert_int_equal(n_raw, 2);
    assert_int_equal(ids[0], 'a' + BYT5_OFFSET);
    assert_int_equal(ids[1], 1);
    assert_int_equal(ids[2], 0);
    assert_int_equal(mask[2], 0);
    byt5_tokenizer_free(&t);
    gh_close(&c);
}

static void test_prompt_embeds_2(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, CASE);
    byt5_tokenizer t;
    ASSERT_OK(byt5_tokenizer_load(&t, gh_path(&c, "model/tokenizer_2")));
    t5_model m;
    ASSERT_OK(t5_build(&m, gh_path(&c, "model/text_encoder_2"), NULL));
    assert_int_equal(m.cfg.per_block_bias, 0);   /* T5: block 0's bias shared */
    const int D = m.cfg.d_model;
    json_object *prompts = gh_json(&c, "prompts");
    float *want = gh_f32(&c, NULL, "prompt_embeds_2"), *got = malloc((size_t)L * D * sizeof(float));
    const cvx_tensor *want_mask = gh_tensor(&c, "prompt_embeds_mask_2");
    for (size_t p = 0; p < gh_len(prompts); p++) {
        int64_t mask[L], wm[L];
        ASSERT_OK(hv15_byt5_prompt_embeds(&m, &t, gh_str(gh_at(prompts, p)), got, mask));
        for (int i = 0; i < L; i++) wm[i] = gh_i64_at(want_mask, p * L + (size_t)i);
        char what[48];
        snprintf(what, sizeof what, "prompt %zu mask_2", p);
        gh_check_exact_i64(&c, what, mask, wm, L);
        snprintf(what, sizeof what, "prompt %zu prompt_embeds_2", p);
        if (!wm[0]) gh_check_exact_f32(&c, what, got, want + p * (size_t)L * D, (size_t)L * D);
        else gh_check_rel_l2(&c, what, got, want + p * (size_t)L * D, (size_t)L * D, 1e-5);
    }
    free(want), free(got);
    t5_free(&m);
    byt5_tokenizer_free(&t);
    gh_close(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glyph_texts),
        cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_prompt_embeds_2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
