/* Python str semantics in C, for code that reproduces Python text processing exactly (the Wan
 * prompt cleaning: ftfy, html.unescape, regex): text as an array of code points, conversions from
 * and to UTF-8, and the character predicates of Python's str methods and re character classes.
 * Unicode data comes from ICU (Debian libicu), not from tables of our own. */
#ifndef CVX_STAGE1_PYSTR_H
#define CVX_STAGE1_PYSTR_H

#include <stddef.h>
#include <stdint.h>

/* A growable array of code points (a Python str); {0} is the empty string. Byte strings are held
 * the same way with values < 256, so one regex matcher serves str and bytes patterns. */
typedef struct {
    uint32_t *c;
    size_t n, cap;
} pystr;

/* Room for n code points. Allocates even for n = 0: a string once reserved, cleared or appended
 * to never has c == NULL (so offsets from it are defined). */
void pystr_reserve(pystr *s, size_t n);
/* Append one code point (inline: the per-character path of every fixer). */
static inline void pystr_push(pystr *s, uint32_t c) {
    if (s->n >= s->cap) pystr_reserve(s, s->n + 1);
    s->c[s->n++] = c;
}
void pystr_append(pystr *s, const uint32_t *c, size_t n);
/* Append the code points of trusted, valid UTF-8 (the generated tables). */
void pystr_append_utf8(pystr *s, const char *utf8);
void pystr_clear(pystr *s);
void pystr_free(pystr *s);
/* dst = src (dst's old content dropped). */
void pystr_set(pystr *dst, const uint32_t *c, size_t n);
/* *a = *b and *b = old *a. */
void pystr_swap(pystr *a, pystr *b);
int pystr_eq(const pystr *a, const uint32_t *c, size_t n);

/* bytes.decode("utf-8", "replace"): each maximal invalid subpart (Unicode's recommendation, as
 * CPython) becomes U+FFFD; encoded surrogates are invalid. Appends to s. */
void pystr_from_utf8(pystr *s, const char *bytes, size_t n);
/* UTF-8 of c[0..n), NUL-terminated, malloc'ed (*len may be NULL). */
char *pystr_to_utf8(const uint32_t *c, size_t n, size_t *len);

/* str.isspace(): bidirectional class WS, B or S, or category Zs. */
int py_isspace(uint32_t c);
/* The Unicode White_Space property (what the `regex` module's \s matches; str.isspace minus
 * U+001C..U+001F). */
int unicode_white_space(uint32_t c);
/* re's \w on str: str.isalnum() or '_'. */
int py_isword(uint32_t c);
/* re's \d on str: str.isdecimal() (general category Nd). */
int py_isdecimal(uint32_t c);

/* unicodedata.normalize("NFC", s) in place (ICU). -1 + cvx_error if ICU fails. */
int pystr_nfc(pystr *s);

#endif
