/* libFuzzer target: Wan's prompt cleaning (wan_prompt_clean_n: ftfy.fix_text, html.unescape twice,
 * whitespace collapsing) on arbitrary bytes, invalid UTF-8 and NUL bytes included. It must never
 * crash, leak or hit UB, and its output must be what prompt_clean promises: valid UTF-8 without
 * U+0000, no leading/trailing str.isspace() character, no White_Space character but single
 * spaces. Then the pieces on their own: fix_encoding, is_bad, html.unescape.
 *
 * With FUZZ_PRINT set in the environment it also prints, per input, one line of hex: the input,
 * prompt_clean, fix_encoding, is_bad, html.unescape (UTF-8; "-" for empty), which
 * scripts/ftfy_diff.py compares with the real ftfy / html / regex:
 *   FUZZ_PRINT=1 build-fuzz/fuzz_prompt_clean -runs=0 DIR 2>/dev/null | python3 scripts/ftfy_diff.py */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "stage1/ftfy.h"
#include "stage1/html_unescape.h"
#include "stage1/prompt_clean.h"
#include "stage1/pystr.h"

static volatile size_t g_sink;
static int g_print;   /* FUZZ_PRINT: print the outputs (for scripts/ftfy_diff.py) */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    cvx_set_verbosity(0);
    g_print = getenv("FUZZ_PRINT") != NULL;
    return 0;
}

static void print_hex(const char *s, size_t n) {
    putchar(' ');
    if (n == 0) putchar('-');
    for (size_t i = 0; i < n; i++) printf("%02x", (unsigned char)s[i]);
}
static void print_codes(const pystr *s) {
    size_t n;
    char *u = pystr_to_utf8(s->c, s->n, &n);
    print_hex(u, n);
    free(u);
}

static void check_output(const char *out) {
    pystr s = {0};
    const size_t n = strlen(out);
    pystr_from_utf8(&s, out, n);
    char *back = pystr_to_utf8(s.c, s.n, NULL);
    if (strcmp(back, out) != 0) abort();                          /* valid UTF-8: round trips */
    for (size_t i = 0; i < s.n; i++) {
        const uint32_t c = s.c[i];
        if (unicode_white_space(c) && (c != ' ' || (i + 1 < s.n && s.c[i + 1] == ' '))) abort();
        if ((i == 0 || i + 1 == s.n) && py_isspace(c)) abort();
    }
    free(back);
    pystr_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *out = NULL;
    if (wan_prompt_clean_n((const char *)data, size, &out) != 0) abort();   /* only ICU could fail */
    check_output(out);
    g_sink += strlen(out);
    if (g_print) {
        print_hex((const char *)data, size);
        print_hex(out, strlen(out));
    }
    free(out);

    /* (ftfy_fix_text on this input already ran inside wan_prompt_clean_n: not again) */
    pystr in = {0}, o = {0};
    pystr_from_utf8(&in, (const char *)data, size);
    ftfy_fix_encoding(in.c, in.n, &o);
    const int bad = ftfy_is_bad(in.c, in.n);
    g_sink += o.n + (size_t)bad;
    if (g_print) {
        print_codes(&o);
        printf(" %d", bad);
    }
    pystr_clear(&o);
    html_unescape(in.c, in.n, &o);
    for (size_t i = 0; i < o.n; i++)
        if (o.c[i] > 0x10ffff || (o.c[i] >= 0xd800 && o.c[i] <= 0xdfff)) abort();
    if (g_print) {
        print_codes(&o);
        putchar('\n');
    }
    pystr_free(&in);
    pystr_free(&o);
    return 0;
}
