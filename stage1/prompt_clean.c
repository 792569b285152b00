/* WanPipeline's prompt_clean: ftfy.fix_text, html.unescape twice, strip, collapse whitespace. */
#include "prompt_clean.h"

#include <string.h>

#include "ftfy.h"
#include "html_unescape.h"
#include "pystr.h"

/* str.strip(): the bounds of s without leading and trailing str.isspace() characters. */
static void strip(const pystr *s, size_t *lo, size_t *hi) {
    *lo = 0, *hi = s->n;
    while (*lo < *hi && py_isspace(s->c[*lo])) (*lo)++;
    while (*hi > *lo && py_isspace(s->c[*hi - 1])) (*hi)--;
}

int wan_prompt_clean_n(const char *in, size_t n, char **out) {
    pystr a = {0}, b = {0};
    pystr_from_utf8(&a, in, n);
    if (ftfy_fix_text(a.c, a.n, &b)) {
        pystr_free(&a);
        pystr_free(&b);
        return -1;
    }
    pystr_clear(&a);
    html_unescape(b.c, b.n, &a);
    pystr_clear(&b);
    html_unescape(a.c, a.n, &b);
    size_t lo, hi;
    strip(&b, &lo, &hi);                                   /* basic_clean's strip() */
    pystr_clear(&a);
    for (size_t i = lo; i < hi; i++) {                     /* regex.sub(r"\s+", " ", .) */
        if (!unicode_white_space(b.c[i])) {
            pystr_push(&a, b.c[i]);
            continue;
        }
        pystr_push(&a, ' ');
        while (i + 1 < hi && unicode_white_space(b.c[i + 1])) i++;
    }
    strip(&a, &lo, &hi);
    *out = pystr_to_utf8(a.c + lo, hi - lo, NULL);
    pystr_free(&a);
    pystr_free(&b);
    return 0;
}

int wan_prompt_clean(const char *in, char **out) { return wan_prompt_clean_n(in, strlen(in), out); }
