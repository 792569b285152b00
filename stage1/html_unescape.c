/* Python's html.unescape (Lib/html/__init__.py), step for step:
 *
 *   _charref = re.compile(r'&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)')
 *   unescape(s) = _charref.sub(_replace_charref, s)
 *
 * _replace_charref: a number goes through _invalid_charrefs (0x80..0x9F read as Windows-1252,
 * 0 and 0x0D), then surrogates and > U+10FFFF become U+FFFD, then _invalid_codepoints vanish;
 * a name is looked up whole, then by its longest prefix of >= 2 characters (the rest kept),
 * else left as it was. The tables are generated from Python (stage1/ftfy_tables.c). */
#include "html_unescape.h"

#include <stdlib.h>
#include <string.h>

#include "ftfy_tables.h"

static int cmp_entity(const void *key, const void *elem) {
    return strcmp((const char *)key, ((const html_entity *)elem)->name);
}

const char *html5_entity(const uint32_t *name, size_t n) {
    char buf[40];
    if (n == 0 || n >= sizeof buf) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (name[i] == 0 || name[i] > 0x7f) return NULL;
        buf[i] = (char)name[i];
    }
    buf[n] = 0;
    const html_entity *e = bsearch(buf, html5_entities, HTML5_N_ENTITIES, sizeof *html5_entities, cmp_entity);
    return e ? e->utf8 : NULL;
}

static int is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
static int is_hex(uint32_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static int hex_value(uint32_t c) { return is_digit(c) ? (int)(c - '0') : (int)((c | 0x20) - 'a' + 10); }
static int name_char(uint32_t c) {   /* [^\t\n\f <&#;] */
    return !(c == '\t' || c == '\n' || c == '\f' || c == ' ' || c == '<' || c == '&' || c == '#' || c == ';');
}

static int in_ranges(const ftfy_range *r, size_t n, uint32_t c) {
    for (size_t i = 0; i < n; i++)
        if (c >= r[i].lo && c <= r[i].hi) return 1;
    return 0;
}

/* The replacement of numeric reference `num` (saturated above U+10FFFF). */
static void numeric_ref(uint64_t num, pystr *out) {
    for (size_t i = 0; i < HTML_N_INVALID_CHARREFS; i++)
        if (num == html_invalid_charrefs[i].cp) {
            pystr_append_utf8(out, html_invalid_charrefs[i].utf8);
            return;
        }
    if ((num >= 0xd800 && num <= 0xdfff) || num > 0x10ffff) {
        pystr_push(out, 0xfffd);
        return;
    }
    if (in_ranges(html_invalid_codepoints, HTML_N_INVALID_CODEPOINTS, (uint32_t)num)) return;
    pystr_push(out, (uint32_t)num);
}

/* Try the three alternatives of _charref at s[p] == '&'; on a match append the replacement and
 * return the match's end, else return 0. */
static size_t charref(const uint32_t *s, size_t n, size_t p, pystr *out) {
    size_t q = p + 1;
    if (q < n && s[q] == '#') {
        uint64_t num = 0;
        size_t d = q + 1;
        if (d < n && is_digit(s[d])) {                       /* #[0-9]+;? */
            for (; d < n && is_digit(s[d]); d++) num = num > 0x10ffff ? num : num * 10 + (s[d] - '0');
        } else if (d + 1 < n && (s[d] == 'x' || s[d] == 'X') && is_hex(s[d + 1])) {   /* #[xX][0-9a-fA-F]+;? */
            for (d++; d < n && is_hex(s[d]); d++) num = num > 0x10ffff ? num : num * 16 + (uint64_t)hex_value(s[d]);
        } else {
            return 0;   /* the name alternative cannot start with '#' */
        }
        if (d < n && s[d] == ';') d++;
        numeric_ref(num, out);
        return d;
    }
    size_t e = q;                                            /* [^\t\n\f <&#;]{1,32};? */
    while (e < n && e - q < 32 && name_char(s[e])) e++;
    if (e == q) return 0;
    if (e < n && s[e] == ';') e++;
    const size_t len = e - q;                                /* the name, with its ';' if any */
    const char *v = html5_entity(s + q, len);
    if (v) {
        pystr_append_utf8(out, v);
        return e;
    }
    for (size_t x = len - 1; x >= 2; x--)
        if ((v = html5_entity(s + q, x))) {
            pystr_append_utf8(out, v);
            pystr_append(out, s + q + x, len - x);
            return e;
        }
    pystr_append(out, s + p, e - p);                         /* '&' + name: unchanged */
    return e;
}

void html_unescape(const uint32_t *s, size_t n, pystr *out) {
    pystr_reserve(out, out->n + n);
    if (n == 0) return;   /* s may be NULL */
    size_t last = 0;
    for (size_t p = 0; p < n; p++) {
        if (s[p] != '&') continue;
        pystr tmp = {0};
        const size_t e = charref(s, n, p, &tmp);
        if (e) {
            pystr_append(out, s + last, p - last);
            pystr_append(out, tmp.c, tmp.n);
            last = e;
            p = e - 1;
        }
        pystr_free(&tmp);
    }
    pystr_append(out, s + last, n - last);
}
