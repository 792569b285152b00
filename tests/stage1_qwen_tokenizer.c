/* HunyuanVideo-1.5's MLLM tokenization against upstream (golden_hv15 README section 1, case
 * tokenizer/): the slow Qwen2Tokenizer (byte-level BPE, stand-in vocabulary) through the Qwen2-VL
 * chat template with the pipeline's system message, padded/truncated to 1108, cropped at 108:
 *  - the rendered text equals case.json's `rendered` for all 12 prompts;
 *  - the untruncated tokens (strings) and ids equal upstream's, unicode, quotes, special-token
 *    strings inside the prompt and a 3793-token prompt included;
 *  - input_ids / attention_mask [12, 1108] and the cropped ids / mask [12, 1000] exactly;
 *  - the template prefix is the 108 ids of case.json;
 *  - the pre-tokenizer regex on cases the prompts do not reach; bad tokenizer files. */
#include "golden_harness.h"

#include "stage1/bpe.h"
#include "stage1/qwen2_5_vl.h"

#define TOK_CASE "tests/data/golden_hv15/tokenizer"
#define S (HV15_MLLM_CROP_START + HV15_MLLM_MAX_LENGTH)

static void test_render_and_ids(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, TOK_CASE);
    bpe_tokenizer *t = bpe_load(gh_path(&c, "model/tokenizer"));
    ASSERT_NONNULL(t);
    assert_int_equal(bpe_vocab_size(t), gh_int(gh_json(&c, "len_tokenizer")));
    assert_int_equal(bpe_pad_id(t), gh_int(gh_json(&c, "pad_token_id")));
    assert_int_equal(gh_int(gh_json(&c, "crop_start")), HV15_MLLM_CROP_START);
    assert_int_equal(gh_int(gh_json(&c, "max_length")), S);
    assert_string_equal(hv15_system_message, gh_str(gh_json(&c, "system_message")));
    json_object *sp = gh_json(&c, "special_ids");
    json_object_object_foreach(sp, name, id) assert_int_equal(bpe_token_id(t, name), gh_int(id));

    json_object *prompts = gh_json(&c, "prompts"), *rendered = gh_json(&c, "rendered"),
                *raw = gh_json(&c, "untruncated_input_ids"), *raw_tok = gh_json(&c, "untruncated_tokens"),
                *prefix = gh_json(&c, "template_prefix_ids");
    const cvx_tensor *want_ids = gh_tensor(&c, "input_ids"), *want_mask = gh_tensor(&c, "attention_mask"),
                     *want_crop = gh_tensor(&c, "cropped_input_ids"), *want_cmask = gh_tensor(&c, "prompt_embeds_mask");
    const size_t n = gh_len(prompts);
    assert_int_equal(n, 12);
    for (size_t p = 0; p < n; p++) {
        const char *prompt = gh_str(gh_at(prompts, p));
        char *r = qwen_chat_render(hv15_system_message, prompt[0] ? prompt : " ");
        assert_string_equal(r, gh_str(gh_at(rendered, p)));
        /* the untruncated tokens and ids */
        char **toks;
        int64_t *ids;
        int nt, ni;
        ASSERT_OK(bpe_tokenize(t, r, &toks, &nt));
        ASSERT_OK(bpe_encode(t, r, &ids, &ni));
        json_object *rt = gh_at(raw_tok, p), *ri = gh_at(raw, p);
        assert_int_equal(nt, (int)gh_len(rt));
        assert_int_equal(ni, (int)gh_len(ri));
        for (int i = 0; i < nt; i++)
            if (strcmp(toks[i], gh_str(gh_at(rt, (size_t)i))))
                fail_msg("prompt %zu token %d: '%s', upstream '%s'", p, i, toks[i], gh_str(gh_at(rt, (size_t)i)));
        for (int i = 0; i < ni; i++)
            if (ids[i] != gh_int(gh_at(ri, (size_t)i))) fail_msg("prompt %zu untruncated id %d differs", p, i);
        for (int i = 0; i < HV15_MLLM_CROP_START; i++) assert_int_equal(ids[i], gh_int(gh_at(prefix, (size_t)i)));
        bpe_tokens_free(toks, nt);
        free(ids), free(r);
        /* the pipeline's padded / truncated ids and mask, and their cropped rows */
        int64_t got[2 * S], want[2 * S];
        int n_raw;
        ASSERT_OK(hv15_mllm_tokens(t, prompt, got, got + S, &n_raw));
        assert_int_equal(n_raw, ni);
        for (int i = 0; i < S; i++) {
            want[i] = gh_i64_at(want_ids, p * S + (size_t)i);
            want[S + i] = gh_i64_at(want_mask, p * S + (size_t)i);
        }
        char what[48];
        snprintf(what, sizeof what, "prompt %zu ids + mask", p);
        gh_check_exact_i64(&c, what, got, want, 2 * S);
        for (int i = HV15_MLLM_CROP_START; i < S; i++) {
            assert_int_equal(got[i], gh_i64_at(want_crop, p * (S - HV15_MLLM_CROP_START) + (size_t)i - HV15_MLLM_CROP_START));
            assert_int_equal(got[S + i], gh_i64_at(want_cmask, p * (S - HV15_MLLM_CROP_START) + (size_t)i - HV15_MLLM_CROP_START));
        }
    }
    bpe_free(t);
    gh_close(&c);
}

/* Pre-token boundaries of the Qwen2 regex on cases the prompts do not reach. */
static void test_pretokenizer(void **state) {
    (void)state;
    static const struct { const char *text; const char *split[12]; } cases[] = {
        {"I'M 'Ll 'x", {"I", "'M", " '", "Ll", " '", "x"}},
        {"a  \n\n  b", {"a", "  \n\n", " ", " b"}},       /* \s*[\r\n]+, \s+(?!\S), then " b" */
        {"x \t", {"x", " \t"}},                              /* trailing whitespace: one run */
        {"12ab", {"1", "2", "ab"}},                          /* \p{N} one at a time */
        {"?!\n\nx", {"?!\n\n", "x"}},                        /* punctuation takes the newlines */
        {" ...x", {" ...", "x"}},
        {"\xc2\xb2\xe2\x85\xa0", {"\xc2\xb2", "\xe2\x85\xa0"}},   /* ², Ⅰ: No, Nl */
        {"\xc5\xbft", {"\xc5\xbft"}},                       /* ſ is a letter */
        {"'\xc5\xbf", {"'\xc5\xbf"}},                        /* 'ſ: the case-insensitive 's */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        pystr s = {0};
        pystr_from_utf8(&s, cases[k].text, strlen(cases[k].text));
        size_t i = 0;
        int j = 0;
        while (i < s.n) {
            const size_t e = bpe_qwen2_pretoken_end(s.c, s.n, i);
            assert_true(e > i && e <= s.n);
            char *piece = pystr_to_utf8(s.c + i, e - i, NULL);
            if (!cases[k].split[j] || strcmp(piece, cases[k].split[j]))
                fail_msg("'%s': piece %d is '%s', expected '%s'", cases[k].text, j, piece,
                         cases[k].split[j] ? cases[k].split[j] : "(end)");
            free(piece);
            i = e, j++;
        }
        assert_null(cases[k].split[j]);
        pystr_free(&s);
    }
    assert_int_equal(bpe_byte_to_unicode(' '), 0x120);   /* Ġ */
    assert_int_equal(bpe_byte_to_unicode('\n'), 0x10a);  /* Ċ */
    assert_int_equal(bpe_byte_to_unicode('A'), 'A');
}

static void expect_load_error(const char *dir, const char *needle) {
    bpe_tokenizer *t = bpe_load(dir);
    if (t) fail_msg("%s loaded; expected an error containing '%s'", dir, needle);
    if (!strstr(cvx_last_error(), needle)) fail_msg("error '%s' does not contain '%s'", cvx_last_error(), needle);
    assert_null(strchr(cvx_last_error(), '\n'));
}

static void put(const char *path, const char *text) { tu_write(path, text, strlen(text)); }

static void test_bad_files(void **state) {
    (void)state;
    char dir[64], path[256];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    put(path, "{\"a\": 0, \"b\": 1, \"ab\": 2}");
    expect_load_error(dir, "vocab.json without merges.txt");
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    put(path, "#version: 0.2\na b c\n");
    expect_load_error(dir, "merges.txt: line 2: a merge must be two tokens");
    put(path, "#version: 0.2\na b\n");
    bpe_tokenizer *t = bpe_load(dir);
    ASSERT_NONNULL(t);
    int64_t *ids;
    int n;
    ASSERT_OK(bpe_encode(t, "ab", &ids, &n));
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 2);
    free(ids);
    assert_int_not_equal(bpe_encode(t, "abc", &ids, &n), 0);   /* 'c' is not in the vocabulary, no unk */
    assert_non_null(strstr(cvx_last_error(), "not in vocab.json"));
    bpe_free(t);
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    put(path, "{\"a\": -3}");
    expect_load_error(dir, "vocab.json: token 'a' must map to an integer id");
    put(path, "[1, 2]");
    expect_load_error(dir, "vocab.json");
    put(path, "{\"a\": 0, \"b\": 1}");
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    put(path, "{\"pad_token\": \"<none>\"}");
    expect_load_error(dir, "pad_token '<none>' is neither");
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    unlink(path);
    expect_load_error(dir, "no vocab.json");
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_and_ids),
        cmocka_unit_test(test_pretokenizer),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
