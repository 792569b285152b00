/* Wan prompt cleaning (stage1/prompt_clean.c, ftfy.c, html_unescape.c) against upstream:
 *  - the 12 golden prompts of golden_wan/tokenizer: after_ftfy_fix_text and cleaned, exactly;
 *  - tests/data/ftfy/cases.json (scripts/gen_ftfy_cases.py, the real ftfy 6.3.1): per case
 *    fix_text, fix_encoding, fixes.unescape_html, html.unescape, is_bad and prompt_clean, exactly,
 *    including raw inputs that are not UTF-8;
 *  - the Python str predicates and UTF-8 conversions at their edges;
 *  - the regex matcher's first-character index against its reference (every alternative tried). */
#include "golden_harness.h"

#include "stage1/ftfy.h"
#include "stage1/ftfy_tables.h"
#include "stage1/html_unescape.h"
#include "stage1/prompt_clean.h"
#include "stage1/pystr.h"

#define TOK_CASE "tests/data/golden_wan/tokenizer"
#define FTFY_CASES "tests/data/ftfy/cases.json"

/* A JSON string (may hold U+0000) as code points. */
static void json_pystr(json_object *o, pystr *s) {
    pystr_clear(s);
    pystr_from_utf8(s, json_object_get_string(o), (size_t)json_object_get_string_len(o));
}

/* got == want, else fail showing both as UTF-8. */
static void expect_eq(const char *what, int idx, const pystr *got, const pystr *want) {
    if (pystr_eq(got, want->c, want->n)) return;
    char *g = pystr_to_utf8(got->c, got->n, NULL), *w = pystr_to_utf8(want->c, want->n, NULL);
    print_message("  case %d %s:\n    got  \"%s\"\n    want \"%s\"\n", idx, what, g, w);
    free(g), free(w);
    fail_msg("case %d: %s differs from upstream", idx, what);
}

static void test_golden_prompts(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, TOK_CASE);
    json_object *prompts = gh_json(&c, "prompts"), *fixed = gh_json(&c, "after_ftfy_fix_text"),
                *cleaned = gh_json(&c, "cleaned");
    const size_t n = gh_len(prompts);
    assert_int_equal(n, 12);
    pystr in = {0}, got = {0}, want = {0};
    for (size_t i = 0; i < n; i++) {
        json_pystr(gh_at(prompts, i), &in);
        pystr_clear(&got);
        ASSERT_OK(ftfy_fix_text(in.c, in.n, &got));
        json_pystr(gh_at(fixed, i), &want);
        expect_eq("ftfy.fix_text", (int)i, &got, &want);
        char *out;
        ASSERT_OK(wan_prompt_clean(gh_str(gh_at(prompts, i)), &out));
        assert_string_equal(out, gh_str(gh_at(cleaned, i)));
        free(out);
        c.checks += 2;
    }
    print_message("  %zu golden prompts: fix_text and prompt_clean exact\n", n);
    pystr_free(&in), pystr_free(&got), pystr_free(&want);
    gh_close(&c);
}

static int hexval(char h) { return h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10; }

static void test_ftfy_cases(void **state) {
    (void)state;
    cvx_config cfg;
    ASSERT_OK(cvx_config_load(&cfg, FTFY_CASES));
    json_object *cases = gh_get(cfg.root, "cases");
    const size_t n = gh_len(cases);
    assert_true(n >= 300);
    pystr in = {0}, got = {0}, want = {0};
    size_t changed = 0, bad = 0, raw = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *c = gh_at(cases, i), *v;
        char *bytes;
        size_t nb;
        if (json_object_object_get_ex(c, "input_hex", &v)) {   /* raw bytes, maybe not UTF-8 */
            const char *h = json_object_get_string(v);
            nb = strlen(h) / 2;
            bytes = malloc(nb + 1);
            for (size_t k = 0; k < nb; k++) bytes[k] = (char)(hexval(h[2 * k]) * 16 + hexval(h[2 * k + 1]));
            raw++;
        } else {
            v = gh_get(c, "input");
            nb = (size_t)json_object_get_string_len(v);
            bytes = malloc(nb + 1);
            memcpy(bytes, json_object_get_string(v), nb);
        }
        bytes[nb] = 0;
        pystr_clear(&in);
        pystr_from_utf8(&in, bytes, nb);

        pystr_clear(&got);
        ASSERT_OK(ftfy_fix_text(in.c, in.n, &got));
        json_pystr(gh_get(c, "fix_text"), &want);
        expect_eq("fix_text", (int)i, &got, &want);
        changed += !pystr_eq(&got, in.c, in.n);

        pystr_clear(&got);
        ftfy_fix_encoding(in.c, in.n, &got);
        json_pystr(gh_get(c, "fix_encoding"), &want);
        expect_eq("fix_encoding", (int)i, &got, &want);

        pystr_clear(&got);
        ftfy_unescape_html(in.c, in.n, &got);
        json_pystr(gh_get(c, "unescape_html"), &want);
        expect_eq("fixes.unescape_html", (int)i, &got, &want);

        pystr_clear(&got);
        html_unescape(in.c, in.n, &got);
        json_pystr(gh_get(c, "html_unescape"), &want);
        expect_eq("html.unescape", (int)i, &got, &want);

        const int is_bad = json_object_get_boolean(gh_get(c, "is_bad"));
        if (ftfy_is_bad(in.c, in.n) != is_bad) fail_msg("case %zu: is_bad differs from upstream (%d)", i, is_bad);
        bad += (size_t)is_bad;

        char *out;
        ASSERT_OK(wan_prompt_clean_n(bytes, nb, &out));
        pystr_clear(&got);
        pystr_from_utf8(&got, out, strlen(out));
        json_pystr(gh_get(c, "prompt_clean"), &want);
        expect_eq("prompt_clean", (int)i, &got, &want);
        free(out);
        free(bytes);
    }
    print_message("  %zu ftfy cases (%zu raw byte inputs, %zu changed by fix_text, %zu is_bad): all exact\n", n, raw,
                  changed, bad);
    assert_true(changed > n / 2 && bad > n / 4 && raw > 0);   /* the cases exercise the fixes */
    pystr_free(&in), pystr_free(&got), pystr_free(&want);
    cvx_config_free(&cfg);
}

/* What the cleaning does with whitespace, end to end (README §1). */
static void test_whitespace(void **state) {
    (void)state;
    static const struct { const char *in, *want; } cases[] = {
        {"", ""},
        {" \t\n\r ", ""},
        {"a\u00a0b\u3000c\u2003d", "a b c d"},          /* NBSP, ideographic space, em space */
        {"a\u200bb", "a\u200bb"},                       /* zero width space is not whitespace */
        {"  lots   of\t\tspace\n\nhere  ", "lots of space here"},
        {"x&nbsp;&nbsp;y", "x y"},                      /* entities become U+00A0, then collapse */
        {"a\x1c\x1d b", "a b"},                         /* removed by ftfy's remove_control_chars */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *out;
        ASSERT_OK(wan_prompt_clean(cases[i].in, &out));
        assert_string_equal(out, cases[i].want);
        free(out);
    }
}

/* Invalid UTF-8 and NUL bytes: read as bytes.decode("utf-8", "replace"), never a crash. */
static void test_bytes(void **state) {
    (void)state;
    pystr s = {0};
    pystr_from_utf8(&s, "a\xff\xc3(\xed\xa0\x80\xe2\x82\xf0\x9f\x98\x80", 13);
    const uint32_t want[] = {'a', 0xfffd, 0xfffd, '(', 0xfffd, 0xfffd, 0xfffd, 0xfffd, 0x1f600};
    assert_int_equal(s.n, sizeof want / sizeof *want);
    assert_memory_equal(s.c, want, sizeof want);
    size_t len;
    char *u = pystr_to_utf8(s.c, s.n, &len);
    assert_int_equal(len, 1 + 3 + 3 + 1 + 4 * 3 + 4);
    free(u);
    pystr_free(&s);
    char *out;
    ASSERT_OK(wan_prompt_clean_n("a\0b", 3, &out));   /* U+0000 is a control character ftfy removes */
    assert_string_equal(out, "ab");
    free(out);
}

/* Python's predicates where they differ from each other. */
static void test_predicates(void **state) {
    (void)state;
    assert_true(py_isspace(0x1c) && !unicode_white_space(0x1c));   /* str.isspace vs regex \s */
    assert_true(py_isspace(0x85) && unicode_white_space(0x85));
    assert_true(py_isspace(0x3000) && unicode_white_space(0x3000));
    assert_true(!py_isspace(0x200b) && !unicode_white_space(0x200b));
    assert_true(py_isword('_') && py_isword(0xe9) && py_isword(0x2460) && py_isword(0x4e00));   /* ① is numeric */
    assert_true(!py_isword('-') && !py_isword(0xb7));
    assert_true(py_isdecimal(0x661) && !py_isdecimal(0x2460));
    pystr s = {0};
    pystr_append_utf8(&s, "e\xcc\x81 \xe1\x84\x80\xe1\x85\xa1");   /* e + U+0301, Hangul L + V */
    ASSERT_OK(pystr_nfc(&s));
    const uint32_t nfc[] = {0xe9, ' ', 0xac00};
    assert_int_equal(s.n, 3);
    assert_memory_equal(s.c, nfc, sizeof nfc);
    pystr_free(&s);
}

/* The regex matcher's first-character index against the reference that tries every alternative,
 * at every position of texts built from the alternatives themselves: each alternative of each
 * pattern spelled out from its items (a random character of each set, with or without its
 * optional item), between random neighbours, sometimes with one character replaced. */
static uint64_t lcg(uint64_t *r) { return (*r = *r * 6364136223846793005ull + 1442695040888963407ull) >> 33; }

static int in_set(const ftfy_set *s, uint32_t c) {
    for (int r = 0; r < s->count; r++) {
        const ftfy_range *g = &ftfy_set_ranges[s->first + r];
        if (c >= g->lo && c <= g->hi) return !s->negate;
    }
    return s->negate;
}

/* A character the item matches. */
static uint32_t item_char(const ftfy_item *it, const uint32_t *pool, size_t np, uint64_t *r) {
    static const uint32_t space[] = {' ', '\t', '\n', 0x3000, 0x85}, word[] = {'a', 'Z', '_', '7', 0xe9, 0x4e00};
    switch (it->kind) {
    case FTFY_ITEM_SPACE: return space[lcg(r) % 5];
    case FTFY_ITEM_WORD: return word[lcg(r) % 6];
    case FTFY_ITEM_DIGIT: return '0' + (uint32_t)(lcg(r) % 10);
    case FTFY_ITEM_ANY: return pool[lcg(r) % np] == '\n' ? 'x' : pool[lcg(r) % np];
    default: break;
    }
    const ftfy_set *s = &ftfy_sets[it->set];
    if (!s->negate) {
        const ftfy_range *g = &ftfy_set_ranges[s->first + (int)(lcg(r) % (uint64_t)s->count)];
        return g->lo + (uint32_t)(lcg(r) % ((uint64_t)g->hi - g->lo + 1));
    }
    for (;;) {
        const uint32_t c = pool[lcg(r) % np];
        if (in_set(s, c)) return c;
    }
}

static void test_match_index(void **state) {
    (void)state;
    const ftfy_branch *br[3] = {&ftfy_badness_re, &ftfy_altered_utf8_re, &ftfy_lossy_utf8_re};
    const int which[3] = {FTFY_RE_BADNESS, FTFY_RE_ALTERED_UTF8, FTFY_RE_LOSSY_UTF8};
    uint32_t pool[4096];   /* the neighbours: ASCII, every set's range ends and their neighbours */
    size_t np = 0;
    for (uint32_t c = 0; c < 0x80; c++) pool[np++] = c;
    for (int s = 0; s < FTFY_N_SETS; s++)
        for (int r = 0; r < ftfy_sets[s].count && np + 4 <= sizeof pool / sizeof *pool; r++) {
            const ftfy_range *g = &ftfy_set_ranges[ftfy_sets[s].first + r];
            pool[np++] = g->lo, pool[np++] = g->hi, pool[np++] = g->lo - 1, pool[np++] = g->hi + 1;
        }
    uint64_t rng = 12345;
    for (int b = 0; b < 3; b++)
        for (int a = 0; a < br[b]->n; a++) {
            const ftfy_alt *alt = &br[b]->alt[a];
            int matched = 0;
            for (int round = 0; round < 200; round++) {
                uint32_t t[32];
                size_t n = 0;
                const size_t pre = alt->anchored ? 0 : lcg(&rng) % 3, post = lcg(&rng) % 3;
                for (size_t i = 0; i < pre; i++) t[n++] = pool[lcg(&rng) % np];
                const size_t at = n;
                for (int k = 0; k < alt->n; k++)
                    if (!alt->item[k].optional || lcg(&rng) % 2) t[n++] = item_char(&alt->item[k], pool, np, &rng);
                if (lcg(&rng) % 3 == 0) t[at + lcg(&rng) % (n - at)] = pool[lcg(&rng) % np];   /* a near miss */
                for (size_t i = 0; i < post; i++) t[n++] = pool[lcg(&rng) % np];
                if (b > 0)
                    for (size_t i = 0; i < n; i++) t[i] &= 0xff;   /* byte patterns see bytes */
                for (size_t p = 0; p < n; p++) {
                    const long want = ftfy_match_at(which[b], t, n, p, 1), got = ftfy_match_at(which[b], t, n, p, 0);
                    if (got != want)
                        fail_msg("pattern %d, alternative %d: at %zu of %zu characters the index gives %ld, the reference %ld",
                                 b, a, p, n, got, want);
                    matched += p == at && want >= 0;
                }
            }
            if (!matched) fail_msg("pattern %d alternative %d: no text built for it matched", b, a);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_prompts), cmocka_unit_test(test_ftfy_cases), cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_bytes), cmocka_unit_test(test_predicates), cmocka_unit_test(test_match_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
