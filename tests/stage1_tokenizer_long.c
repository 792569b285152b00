/* Long prompts (issue 14): t5_tokenize tokenizes only a prefix of a long text. It must give
 * exactly the ids of tokenizing the whole text (t5_tokenize_raw, unbounded) and truncating, for
 * cuts at many positions, whitespace runs, added tokens near the cut and text without spaces;
 * and a 10 MB prompt must take little memory (it took 934 MB). */
#include "testutil.h"
#include "config.h"
#include "stage1/t5_tokenizer.h"

#define TOK_DIR GOLDEN "/tokenizer/model/tokenizer"
#define L 226

static t5_tokenizer tok;

static int setup(void **state) {
    (void)state;
    if (t5_tokenizer_load(&tok, TOK_DIR)) {
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

/* The reference: the whole text (raw = body + EOS unless the body ends with it), then upstream's
 * truncation: at most L - 1 body ids, EOS appended unless they end with it, right padding. */
static void expected_ids(const char *text, int64_t *want, int64_t *want_mask) {
    int64_t *raw;
    int n;
    ASSERT_OK(t5_tokenize_raw(&tok, text, &raw, &n));
    int len = 0;
    if (n <= L) {
        for (; len < n; len++) want[len] = raw[len];
    } else {
        for (; len < L - 1; len++) want[len] = raw[len];
        if (want[len - 1] != tok.eos_id) want[len++] = tok.eos_id;
    }
    for (int i = 0; i < L; i++) {
        want_mask[i] = i < len;
        if (i >= len) want[i] = tok.pad_id;
    }
    free(raw);
}

static void check_same(const char *text, const char *what) {
    int64_t ids[L], mask[L], want[L], want_mask[L];
    int n_raw;
    ASSERT_OK(t5_tokenize(&tok, text, L, ids, mask, &n_raw));
    expected_ids(text, want, want_mask);
    for (int i = 0; i < L; i++)
        if (ids[i] != want[i] || mask[i] != want_mask[i])
            fail_msg("%s: position %d: id %lld, whole-text tokenizing gives %lld", what, i, (long long)ids[i],
                     (long long)want[i]);
}

/* A long text from the golden prompts, with awkward material around every possible cut. */
static char *long_text(size_t min_len, int shift, int variant) {
    cvx_config c;
    ASSERT_OK(cvx_config_load(&c, GOLDEN "/tokenizer/case.json"));
    json_object *prompts;
    assert_true(json_object_object_get_ex(c.root, "prompts", &prompts));
    const int np = (int)json_object_array_length(prompts);
    size_t cap = min_len + 4096, len = 0;
    char *s = malloc(cap);
    static const char *const seps[] = {" ", "  ", "\n", " \t\n  ", " <extra_id_3> ", "</s> ", "<extra_id_0>", ", "};
    for (int i = 0; i < shift; i++) s[len++] = (char)('a' + i % 26);
    for (int k = 0; len < min_len; k++) {
        const char *p = json_object_get_string(json_object_array_get_idx(prompts, (k * 7 + variant) % np));
        const char *sep = seps[(k + variant) % (int)(sizeof seps / sizeof seps[0])];
        size_t a = strlen(p), b = strlen(sep);
        memcpy(s + len, p, a);
        len += a;
        memcpy(s + len, sep, b);
        len += b;
    }
    s[len] = 0;
    cvx_config_free(&c);
    return s;
}

static void test_prefix_equals_whole(void **state) {
    (void)state;
    char what[64];
    for (int shift = 0; shift < 48; shift += 3)
        for (int variant = 0; variant < 8; variant++) {
            char *text = long_text(6000 + 997 * (size_t)variant, shift, variant);   /* > the first window */
            snprintf(what, sizeof what, "shift %d variant %d", shift, variant);
            check_same(text, what);
            free(text);
        }
    /* longer texts: the window grows several times */
    char *text = long_text(300000, 5, 3);
    check_same(text, "300 KB");
    free(text);
}

/* No whitespace for a long stretch: there is no safe cut, the whole text is tokenized. */
static void test_no_whitespace(void **state) {
    (void)state;
    size_t n = 20000;
    char *text = malloc(n + 1);
    for (size_t i = 0; i < n; i++) text[i] = (char)('a' + (i * 7) % 26);
    text[n] = 0;
    check_same(text, "no whitespace");
    text[n - 3000] = ' ';   /* one space late in the text */
    check_same(text, "one late space");
    free(text);
}

/* A 10 MB prompt: bounded time and memory, and n_raw still reports truncation. */
static void test_ten_megabytes(void **state) {
    (void)state;
    size_t n = 10u << 20;
    char *text = malloc(n + 1);
    const char *word = "a panda playing guitar in a bamboo forest ";
    size_t wl = strlen(word);
    for (size_t i = 0; i < n; i++) text[i] = word[i % wl];
    text[n] = 0;
    size_t rss0 = cvx_peak_rss_bytes();
    double t0 = cvx_time();
    int64_t ids[L], mask[L];
    int n_raw;
    ASSERT_OK(t5_tokenize(&tok, text, L, ids, mask, &n_raw));
    double dt = cvx_time() - t0;
    size_t rss1 = cvx_peak_rss_bytes();
    print_message("  10 MB prompt: %.3f s, peak RSS +%.1f MB, n_raw %d\n", dt, (double)(rss1 - rss0) / 1e6, n_raw);
    assert_true(n_raw > L);
    assert_true(rss1 - rss0 < (size_t)32 << 20);   /* was ~934 MB */
    assert_true(dt < 2.0);
    assert_int_equal(mask[L - 1], 1);
    assert_int_equal(ids[L - 1], tok.eos_id);
    /* the same ids as a text of just its first 64 KB (whole-text tokenizing) */
    text[65536] = 0;
    int64_t want[L], want_mask[L];
    expected_ids(text, want, want_mask);
    assert_memory_equal(ids, want, sizeof ids);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_equals_whole),
        cmocka_unit_test(test_no_whitespace),
        cmocka_unit_test(test_ten_megabytes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
