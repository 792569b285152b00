/* Python str semantics: code point arrays, UTF-8 in and out, str/re predicates (ICU data). */
#include "pystr.h"

#include <stdlib.h>
#include <string.h>

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include "error.h"

/* ---- the array ---- */

void pystr_reserve(pystr *s, size_t n) {
    if (n <= s->cap && s->c) return;
    size_t cap = s->cap ? s->cap : 16;
    while (cap < n) cap *= 2;
    s->c = cvx_realloc(s->c, cap * sizeof *s->c);
    s->cap = cap;
}

void pystr_append(pystr *s, const uint32_t *c, size_t n) {
    pystr_reserve(s, s->n + n);
    if (n == 0) return;
    memcpy(s->c + s->n, c, n * sizeof *c);
    s->n += n;
}

void pystr_clear(pystr *s) {
    s->n = 0;
    pystr_reserve(s, 0);
}

void pystr_free(pystr *s) {
    free(s->c);
    memset(s, 0, sizeof *s);
}

void pystr_set(pystr *dst, const uint32_t *c, size_t n) {
    dst->n = 0;
    pystr_append(dst, c, n);
}

void pystr_swap(pystr *a, pystr *b) {
    pystr t = *a;
    *a = *b;
    *b = t;
}

int pystr_eq(const pystr *a, const uint32_t *c, size_t n) {
    return a->n == n && (n == 0 || memcmp(a->c, c, n * sizeof *c) == 0);
}

/* ---- UTF-8 ---- */

/* Length of the UTF-8 sequence led by byte b (0: not a lead byte), and the range its second
 * byte must be in (Python's strict decoder: no overlongs, no surrogates, nothing past U+10FFFF). */
static int utf8_lead(unsigned b, unsigned *lo, unsigned *hi) {
    *lo = 0x80, *hi = 0xbf;
    if (b < 0x80) return 1;
    if (b >= 0xc2 && b <= 0xdf) return 2;
    if (b >= 0xe0 && b <= 0xef) {
        if (b == 0xe0) *lo = 0xa0;
        if (b == 0xed) *hi = 0x9f;
        return 3;
    }
    if (b >= 0xf0 && b <= 0xf4) {
        if (b == 0xf0) *lo = 0x90;
        if (b == 0xf4) *hi = 0x8f;
        return 4;
    }
    return 0;
}

void pystr_from_utf8(pystr *s, const char *bytes, size_t n) {
    const unsigned char *b = (const unsigned char *)bytes;
    pystr_reserve(s, s->n + n);
    for (size_t i = 0; i < n;) {
        unsigned lo, hi;
        const int k = utf8_lead(b[i], &lo, &hi);
        if (k == 1) {
            s->c[s->n++] = b[i++];
            continue;
        }
        /* the longest valid prefix of a sequence; an incomplete one is one U+FFFD */
        int got = 1;
        uint32_t cp = k == 2 ? b[i] & 0x1f : k == 3 ? b[i] & 0x0f : b[i] & 0x07;
        while (k && got < k && i + (size_t)got < n) {
            const unsigned c = b[i + (size_t)got];
            if (got == 1 ? (c < lo || c > hi) : (c & 0xc0) != 0x80) break;
            cp = (cp << 6) | (c & 0x3f);
            got++;
        }
        s->c[s->n++] = k && got == k ? cp : 0xfffd;
        i += (size_t)got;
    }
}

char *pystr_to_utf8(const uint32_t *c, size_t n, size_t *len) {
    char *out = cvx_malloc(4 * n + 1);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = c[i];
        if (u < 0x80) {
            out[j++] = (char)u;
        } else if (u < 0x800) {
            out[j++] = (char)(0xc0 | (u >> 6));
            out[j++] = (char)(0x80 | (u & 0x3f));
        } else if (u < 0x10000) {
            out[j++] = (char)(0xe0 | (u >> 12));
            out[j++] = (char)(0x80 | ((u >> 6) & 0x3f));
            out[j++] = (char)(0x80 | (u & 0x3f));
        } else {
            out[j++] = (char)(0xf0 | (u >> 18));
            out[j++] = (char)(0x80 | ((u >> 12) & 0x3f));
            out[j++] = (char)(0x80 | ((u >> 6) & 0x3f));
            out[j++] = (char)(0x80 | (u & 0x3f));
        }
    }
    out[j] = 0;
    if (len) *len = j;
    return out;
}

void pystr_append_utf8(pystr *s, const char *utf8) { pystr_from_utf8(s, utf8, strlen(utf8)); }

/* ---- predicates ---- */

int py_isspace(uint32_t c) {
    if (c < 0x80) return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20);
    const UCharDirection d = u_charDirection((UChar32)c);
    return d == U_WHITE_SPACE_NEUTRAL || d == U_BLOCK_SEPARATOR || d == U_SEGMENT_SEPARATOR ||
           u_charType((UChar32)c) == U_SPACE_SEPARATOR;
}

int unicode_white_space(uint32_t c) { return u_isUWhiteSpace((UChar32)c) != 0; }

/* str.isalnum(): isalpha (categories L*) or a numeric type (decimal, digit or numeric). */
int py_isword(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    return u_isalpha((UChar32)c) || u_getIntPropertyValue((UChar32)c, UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}

int py_isdecimal(uint32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    return u_charType((UChar32)c) == U_DECIMAL_DIGIT_NUMBER;
}

/* ---- normalisation ---- */

int pystr_nfc(pystr *s) {
    size_t i = 0;
    while (i < s->n && s->c[i] < 0x300) i++;   /* nothing below U+0300 composes or decomposes */
    if (i == s->n) return 0;
    if (s->n > (size_t)INT32_MAX / 4) return cvx_error("text of %zu characters is too long to normalise", s->n);
    UErrorCode err = U_ZERO_ERROR;
    const UNormalizer2 *nfc = unorm2_getNFCInstance(&err);
    int32_t n16 = 0;
    UChar *src = cvx_malloc((2 * s->n + 1) * sizeof *src);
    if (U_SUCCESS(err)) u_strFromUTF32(src, (int32_t)(2 * s->n + 1), &n16, (const UChar32 *)s->c, (int32_t)s->n, &err);
    int32_t cap = 3 * n16 + 1;   /* NFC grows a text at most 3x (UAX #15); ICU says if not */
    UChar *dst = cvx_malloc((size_t)cap * sizeof *dst);
    int32_t m = U_SUCCESS(err) ? unorm2_normalize(nfc, src, n16, dst, cap, &err) : 0;
    if (err == U_BUFFER_OVERFLOW_ERROR) {
        err = U_ZERO_ERROR;
        cap = m + 1;
        dst = cvx_realloc(dst, (size_t)cap * sizeof *dst);
        m = unorm2_normalize(nfc, src, n16, dst, cap, &err);
    }
    int32_t n32 = 0;
    if (U_SUCCESS(err)) {
        pystr_reserve(s, (size_t)m);
        u_strToUTF32((UChar32 *)s->c, (int32_t)s->cap, &n32, dst, m, &err);
    }
    free(src);
    free(dst);
    if (U_FAILURE(err)) return cvx_error("ICU NFC normalisation failed: %s", u_errorName(err));
    s->n = (size_t)n32;
    return 0;
}
