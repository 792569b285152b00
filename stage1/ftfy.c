/* ftfy 6.3.1 fix_text with the default TextFixerConfig, reproduced rule for rule.
 *
 * fix_text splits the text after each '\n' (segments of at most 1,000,000 code points) and fixes
 * each segment until it stops changing (fix_and_explain), applying in this order:
 *   unescape_html      HTML entities: the html5 names ending in ';', upper-case forms of some
 *                      (&EACUTE;), numeric references. Off for this and every later segment
 *                      once a segment contains '<' (unescape_html="auto").
 *   fix_encoding       mojibake: while the text is not ASCII and badness.BADNESS_RE finds a
 *                      likely mojibake sequence, re-encode it in each of latin-1,
 *                      sloppy-windows-1252/1251/1250/1253/1254/1257, iso-8859-2, macroman, cp437
 *                      that can represent it and decode the bytes as UTF-8 (after
 *                      restore_byte_a0: ' ' back to 0xA0 in likely sequences, and for the sloppy
 *                      codecs replace_lossy_sequences: sequences broken by U+FFFD/'?' become
 *                      U+FFFD; "utf-8-variants" when 0xED/0xC0 occur: CESU-8 and Java's 0xC0 0x80);
 *                      else decode_inconsistent_utf8 (each run UTF8_DETECTOR_RE finds that is_bad
 *                      is fixed on its own), else Latin-1 read as Windows-1252, else
 *                      fix_c1_controls.
 *   fix_c1_controls    U+0080..U+009F read as sloppy Windows-1252.
 *   fix_latin_ligatures, fix_character_width (fullwidth/halfwidth forms, U+3000 -> ' '),
 *   uncurl_quotes, fix_line_breaks (CRLF, CR, U+2028, U+2029, U+0085 -> '\n'), fix_surrogates,
 *   remove_terminal_escapes (ANSI "ESC [ digits/; letter"), remove_control_chars, NFC.
 * Every regex of ftfy is run from tables generated from ftfy's own patterns (ftfy_tables.c) by
 * a small matcher with Python re's semantics (leftmost match, first alternative that matches,
 * greedy '?', '$' before a final '\n' in the utf-8-variants patterns), and the codecs are ftfy's.
 * At each position the matcher tries only the alternatives that can start with that character
 * (a generated first-character index), in their order: the same matches, ~5x faster than trying
 * all 37 of BADNESS_RE (checked on 20,000 mutated inputs against the exhaustive matcher).
 * Covered: all of the above (tests/stage1_prompt_clean.c: the golden prompts and 353 cases run
 * through the real ftfy). Not implemented: explanations and other configs (unused by Wan);
 * fix_surrogates never sees a surrogate (text decoded from UTF-8 holds none). Divergence from
 * Python can come only from Unicode versions (ICU's vs Python's unicodedata: NFC, \w,
 * str.isspace; equal for every character assigned in Unicode 14) and from the iteration guard
 * (a text still changing after length + 64 rounds; upstream would loop on). */
#include "ftfy.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "ftfy_tables.h"
#include "html_unescape.h"

/* ---- the regex tables: Python re semantics on fixed-length alternatives ---- */

static int set_has(int id, uint32_t c) {
    const ftfy_set *s = &ftfy_sets[id];
    const ftfy_range *r = ftfy_set_ranges + s->first;
    size_t lo = 0, hi = s->count;
    int in = 0;
    if (hi == 0 || c < r[0].lo || c > r[hi - 1].hi) return s->negate;   /* outside every range */
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (c < r[mid].lo) hi = mid;
        else if (c > r[mid].hi) lo = mid + 1;
        else { in = 1; break; }
    }
    return in != s->negate;
}

static int item_has(const ftfy_item *it, uint32_t c) {
    switch (it->kind) {
    case FTFY_ITEM_SET: return set_has(it->set, c);
    case FTFY_ITEM_SPACE: return py_isspace(c);
    case FTFY_ITEM_WORD: return py_isword(c);
    case FTFY_ITEM_DIGIT: return py_isdecimal(c);
    default: return c != '\n';   /* '.' */
    }
}

/* End of items k.. of alternative a matched at t[p..], or -1. An optional item is tried
 * present first, then absent (greedy '?', backtracking). */
static long alt_end(const ftfy_alt *a, int k, const uint32_t *t, size_t n, size_t p) {
    for (; k < a->n; k++) {
        const ftfy_item *it = &a->item[k];
        if (it->optional) {
            if (p < n && item_has(it, t[p])) {
                const long e = alt_end(a, k + 1, t, n, p + 1);
                if (e >= 0) return e;
            }
            continue;
        }
        if (p >= n || !item_has(it, t[p])) return -1;
        p++;
    }
    return (long)p;
}

/* The alternatives of b that may start at character c (the generated first-character index). */
static uint64_t branch_starts(const ftfy_branch *b, uint32_t c) {
    const ftfy_first *f = b->first;
    size_t lo = 0, hi = (size_t)b->n_first;
    if (hi == 0 || c < f[0].lo || c > f[hi - 1].hi) return b->always;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (c < f[mid].lo) hi = mid;
        else if (c > f[mid].hi) lo = mid + 1;
        else return f[mid].alts | b->always;
    }
    return b->always;
}

/* The match of alternation b at t[p] (p < n): the first alternative that matches, trying only
 * those that can start at t[p], in order; its end or -1. */
static long branch_at(const ftfy_branch *b, const uint32_t *t, size_t n, size_t p) {
    for (uint64_t m = branch_starts(b, t[p]); m; m &= m - 1) {
        const int i = __builtin_ctzll(m);
        if (b->alt[i].anchored && p != 0) continue;
        const long e = alt_end(&b->alt[i], 0, t, n, p);
        if (e >= 0) return e;
    }
    return -1;
}

/* The reference: every alternative in order, no index (tests/stage1_prompt_clean.c checks that
 * the two agree). */
static long branch_at_ref(const ftfy_branch *b, const uint32_t *t, size_t n, size_t p) {
    for (int i = 0; i < b->n; i++) {
        if (b->alt[i].anchored && p != 0) continue;
        const long e = alt_end(&b->alt[i], 0, t, n, p);
        if (e >= 0) return e;
    }
    return -1;
}

long ftfy_match_at(int which, const uint32_t *t, size_t n, size_t p, int reference) {
    const ftfy_branch *b = which == FTFY_RE_BADNESS        ? &ftfy_badness_re
                           : which == FTFY_RE_ALTERED_UTF8 ? &ftfy_altered_utf8_re
                                                           : &ftfy_lossy_utf8_re;
    if (p >= n) return -1;
    return reference ? branch_at_ref(b, t, n, p) : branch_at(b, t, n, p);
}

/* re.search from `from`: the leftmost match's start in *start and its end, or -1. */
static long branch_search(const ftfy_branch *b, const uint32_t *t, size_t n, size_t from, size_t *start) {
    for (size_t p = from; p < n; p++) {
        const long e = branch_at(b, t, n, p);
        if (e >= 0) {
            *start = p;
            return e;
        }
    }
    return -1;
}

int ftfy_is_bad(const uint32_t *t, size_t n) {
    size_t s;
    return branch_search(&ftfy_badness_re, t, n, 0, &s) >= 0;
}

/* UTF8_DETECTOR_RE at t[p]: (?<![STRICT])([FIRST2][CONT]|[FIRST3][CONT]{2}|[FIRST4][CONT]{3})+,
 * the repetition greedy with the first matching alternative each round; end or -1. */
static long utf8_detector_at(const uint32_t *t, size_t n, size_t p) {
    if (t[p] < 0x80) return -1;   /* no FIRST set holds ASCII (asserted by the generator) */
    if (p > 0 && set_has(FTFY_SET_UTF8_STRICT, t[p - 1])) return -1;
    static const int first[3] = {FTFY_SET_UTF8_FIRST2, FTFY_SET_UTF8_FIRST3, FTFY_SET_UTF8_FIRST4};
    size_t q = p;
    for (;;) {
        int len = 0;
        for (int a = 0; a < 3 && !len; a++) {
            const size_t need = (size_t)a + 2;
            if (q + need > n || !set_has(first[a], t[q])) continue;
            size_t j = 1;
            while (j < need && set_has(FTFY_SET_UTF8_CONT, t[q + j])) j++;
            if (j == need) len = (int)need;
        }
        if (!len) break;
        q += (size_t)len;
    }
    return q > p ? (long)q : -1;
}

/* ---- codecs ---- */

static int all_ascii(const uint32_t *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t[i] > 0x7f) return 0;
    return 1;
}

/* The byte a codec encodes c to (ASCII but 0x1A encodes to itself in every codec). */
static int codec_byte(const ftfy_codec *cd, uint32_t c, uint32_t *byte) {
    if (c < 0x80 && c != 0x1a) {
        *byte = c;
        return 1;
    }
    const ftfy_encode *e = cd->encode;
    size_t lo = 0, hi = FTFY_N_ENCODE;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (c < e[mid].cp) hi = mid;
        else if (c > e[mid].cp) lo = mid + 1;
        else {
            *byte = e[mid].byte;
            return 1;
        }
    }
    return 0;
}

/* chardata.possible_encoding: every character has a byte. Then text.encode(codec). */
static int encode_charmap(const ftfy_codec *cd, const uint32_t *t, size_t n, pystr *bytes) {
    pystr_clear(bytes);
    pystr_reserve(bytes, n);
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        if (!codec_byte(cd, t[i], &b)) return 0;
        bytes->c[bytes->n++] = b;
    }
    return 1;
}

/* Python's strict UTF-8 decoder on bytes b[0..n): appends and returns 0, or -1 (nothing usable). */
static int utf8_strict(const uint32_t *b, size_t n, pystr *out) {
    for (size_t i = 0; i < n;) {
        const uint32_t c = b[i];
        int k;
        uint32_t lo = 0x80, hi = 0xbf, cp;
        if (c < 0x80) k = 1, cp = c;
        else if (c >= 0xc2 && c <= 0xdf) k = 2, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef) k = 3, cp = c & 0x0f, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        else if (c >= 0xf0 && c <= 0xf4) k = 4, cp = c & 0x07, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        else return -1;
        if (i + (size_t)k > n) return -1;
        for (int j = 1; j < k; j++) {
            const uint32_t d = b[i + (size_t)j];
            if (j == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xbf)) return -1;
            cp = (cp << 6) | (d & 0x3f);
        }
        pystr_push(out, cp);
        i += (size_t)k;
    }
    return 0;
}

/* Python's '$' in a bytes pattern: at the end, or before a '\n' that ends the bytes. */
static int at_dollar(const uint32_t *b, size_t n, size_t i) { return i == n || (i + 1 == n && b[i] == '\n'); }

/* A sequence of groups "([lo-hi]|$)" from b[i]; the match's end or -1 (backtracking into '$'). */
static long groups_or_dollar(const uint32_t *b, size_t n, size_t i, const uint32_t (*g)[2], int k) {
    if (k == 0) return (long)i;
    if (i < n && b[i] >= g[0][0] && b[i] <= g[0][1]) {
        const long e = groups_or_dollar(b, n, i + 1, g + 1, k - 1);
        if (e >= 0) return e;
    }
    return at_dollar(b, n, i) ? groups_or_dollar(b, n, i, g + 1, k - 1) : -1;
}

/* utf8_variants.CESU8_EXPR at b[i]: \xed([\xa0-\xaf]|$)([\x80-\xbf]|$)(\xed|$)([\xb0-\xbf]|$)([\x80-\xbf]|$) */
static int cesu8_at(const uint32_t *b, size_t n, size_t i) {
    static const uint32_t g[5][2] = {{0xa0, 0xaf}, {0x80, 0xbf}, {0xed, 0xed}, {0xb0, 0xbf}, {0x80, 0xbf}};
    return b[i] == 0xed && groups_or_dollar(b, n, i + 1, g, 5) >= 0;
}

/* utf8_variants.SPECIAL_BYTES_RE matches at b[i] (NULL_EXPR | CESU8_EXPR | SURROGATE_EXPR). */
static int special_at(const uint32_t *b, size_t n, size_t i) {
    static const uint32_t null_g[1][2] = {{0x80, 0x80}}, sur_g[2][2] = {{0xa0, 0xbf}, {0x80, 0xbf}};
    if (b[i] == 0xc0) return groups_or_dollar(b, n, i + 1, null_g, 1) >= 0;
    return b[i] == 0xed && (cesu8_at(b, n, i) || groups_or_dollar(b, n, i + 1, sur_g, 2) >= 0);
}

/* ftfy's "utf-8-variants" codec (IncrementalDecoder._buffer_decode, final): strict UTF-8 up to
 * each special sequence; 0xC0 + one more byte -> U+0000; a CESU-8 surrogate pair (6 bytes) -> its
 * code point; anything else there fails. 0 or -1. */
static int utf8_variants(const uint32_t *b, size_t n, pystr *out) {
    size_t pos = 0;
    while (pos < n) {
        size_t q = pos;
        while (q < n && !special_at(b, n, q)) q++;
        if (q == n) return utf8_strict(b + pos, n - pos, out);
        if (q > pos) {
            if (utf8_strict(b + pos, q - pos, out)) return -1;
            pos = q;
            continue;
        }
        if (b[pos] == 0xc0) {
            if (n - pos < 2) return -1;
            pystr_push(out, 0);
            pos += 2;
        } else if (n - pos < 6) {
            return utf8_strict(b + pos, n - pos, out);
        } else if (cesu8_at(b, n, pos)) {
            const uint32_t *s = b + pos;
            pystr_push(out, ((s[1] & 0x0f) << 16) + ((s[2] & 0x3f) << 10) + ((s[4] & 0x0f) << 6) + (s[5] & 0x3f) +
                                0x10000);
            pos += 6;
        } else {
            return -1;   /* a lone encoded surrogate */
        }
    }
    return 0;
}

/* fixes.restore_byte_a0: A_GRAVE_WORD_RE (b"\xc3 (?! |quele|quela|quilo|s )" -> b"\xc3\xa0 "),
 * then each ALTERED_UTF8_RE match with its spaces made 0xA0. */
static void restore_byte_a0(pystr *bytes) {
    static const char *const not_after[] = {" ", "quele", "quela", "quilo", "s "};
    pystr out = {0};
    const uint32_t *b = bytes->c;
    const size_t n = bytes->n;
    for (size_t i = 0; i < n; i++) {
        pystr_push(&out, b[i]);
        if (b[i] != 0xc3 || i + 1 >= n || b[i + 1] != ' ') continue;
        int blocked = 0;
        for (size_t k = 0; k < sizeof not_after / sizeof *not_after && !blocked; k++) {
            const size_t l = strlen(not_after[k]);
            size_t j = 0;
            while (j < l && i + 2 + j < n && b[i + 2 + j] == (uint32_t)(unsigned char)not_after[k][j]) j++;
            blocked = j == l;
        }
        if (blocked) continue;
        pystr_push(&out, 0xa0);
        pystr_push(&out, ' ');
        i++;
    }
    size_t from = 0, s;
    long e;
    while ((e = branch_search(&ftfy_altered_utf8_re, out.c, out.n, from, &s)) >= 0) {
        for (size_t i = s; i < (size_t)e; i++)
            if (out.c[i] == ' ') out.c[i] = 0xa0;
        from = (size_t)e;
    }
    pystr_swap(bytes, &out);
    pystr_free(&out);
}

/* fixes.replace_lossy_sequences: each LOSSY_UTF8_RE match -> the UTF-8 of U+FFFD. */
static void replace_lossy_sequences(pystr *bytes) {
    static const uint32_t fffd[3] = {0xef, 0xbf, 0xbd};
    pystr out = {0};
    size_t from = 0, s;
    long e;
    while ((e = branch_search(&ftfy_lossy_utf8_re, bytes->c, bytes->n, from, &s)) >= 0) {
        pystr_append(&out, bytes->c + from, s - from);
        pystr_append(&out, fffd, 3);
        from = (size_t)e;
    }
    pystr_append(&out, bytes->c + from, bytes->n - from);
    pystr_swap(bytes, &out);
    pystr_free(&out);
}

/* ---- fix_encoding ---- */

static void fix_c1_controls(const uint32_t *t, size_t n, pystr *out) {
    const ftfy_codec *cp1252 = &ftfy_codecs[1];   /* sloppy-windows-1252 */
    for (size_t i = 0; i < n; i++) pystr_push(out, t[i] >= 0x80 && t[i] <= 0x9f ? cp1252->decode[t[i]] : t[i]);
}

static int has_c1(const uint32_t *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t[i] >= 0x80 && t[i] <= 0x9f) return 1;
    return 0;
}

/* text.encode("latin-1").decode("windows-1252") (strict: the five bytes Windows-1252 leaves
 * undefined, where the sloppy table keeps the Latin-1 control, fail). 0 or -1. */
static int latin1_as_windows1252(const uint32_t *t, size_t n, pystr *out) {
    const ftfy_codec *cp1252 = &ftfy_codecs[1];
    for (size_t i = 0; i < n; i++) {
        const uint32_t c = t[i];
        if (c > 0xff) return -1;
        if (c >= 0x80 && c <= 0x9f && cp1252->decode[c] == c) return -1;
        pystr_push(out, c >= 0x80 && c <= 0x9f ? cp1252->decode[c] : c);
    }
    return 0;
}

static void decode_inconsistent_utf8(const uint32_t *t, size_t n, pystr *out);

/* ftfy._fix_encoding_one_step_and_explain, appended to out. */
static void fix_encoding_step(const uint32_t *t, size_t n, pystr *out) {
    if (n == 0 || all_ascii(t, n) || !ftfy_is_bad(t, n)) {
        pystr_append(out, t, n);
        return;
    }
    pystr bytes = {0}, dec = {0};
    int latin1_possible = 0;
    for (int e = 0; e < FTFY_N_CODECS; e++) {
        const ftfy_codec *cd = &ftfy_codecs[e];
        if (!encode_charmap(cd, t, n, &bytes)) continue;
        if (e == 0) latin1_possible = 1;   /* "latin-1" comes first */
        size_t s;
        if (strcmp(cd->name, "macroman") != 0 && branch_search(&ftfy_altered_utf8_re, bytes.c, bytes.n, 0, &s) >= 0)
            restore_byte_a0(&bytes);
        if (strncmp(cd->name, "sloppy", 6) == 0) replace_lossy_sequences(&bytes);
        int variants = 0;
        for (size_t i = 0; i < bytes.n && !variants; i++) variants = bytes.c[i] == 0xed || bytes.c[i] == 0xc0;
        pystr_clear(&dec);
        if ((variants ? utf8_variants : utf8_strict)(bytes.c, bytes.n, &dec) == 0) {
            pystr_append(out, dec.c, dec.n);
            goto done;
        }
    }
    size_t s;
    for (s = 0; s < n && utf8_detector_at(t, n, s) < 0; s++) {}
    if (s < n) {
        pystr_clear(&dec);
        decode_inconsistent_utf8(t, n, &dec);
        if (!pystr_eq(&dec, t, n)) {
            pystr_append(out, dec.c, dec.n);
            goto done;
        }
    }
    /* upstream returns the text as it is when "windows-1252" is among the possible encodings,
     * which never happens (the list holds "sloppy-windows-1252") */
    if (latin1_possible) {
        pystr_clear(&dec);
        if (latin1_as_windows1252(t, n, &dec) == 0 && !pystr_eq(&dec, t, n)) {
            pystr_append(out, dec.c, dec.n);
            goto done;
        }
    }
    if (has_c1(t, n)) fix_c1_controls(t, n, out);
    else pystr_append(out, t, n);
done:
    pystr_free(&bytes);
    pystr_free(&dec);
}

void ftfy_fix_encoding(const uint32_t *t, size_t n, pystr *out) {
    pystr cur = {0}, next = {0};
    pystr_set(&cur, t, n);
    for (size_t round = 0; round < n + 64; round++) {
        pystr_clear(&next);
        fix_encoding_step(cur.c, cur.n, &next);
        const int same = pystr_eq(&next, cur.c, cur.n);
        pystr_swap(&cur, &next);
        if (same) break;
    }
    pystr_append(out, cur.c, cur.n);
    pystr_free(&cur);
    pystr_free(&next);
}

/* fixes.decode_inconsistent_utf8: each UTF8_DETECTOR_RE match shorter than the text that is_bad
 * is replaced by its fix_encoding. */
static void decode_inconsistent_utf8(const uint32_t *t, size_t n, pystr *out) {
    size_t last = 0;
    for (size_t p = 0; p < n; p++) {
        const long e = utf8_detector_at(t, n, p);
        if (e < 0) continue;
        const size_t len = (size_t)e - p;
        pystr_append(out, t + last, p - last);
        if (len < n && ftfy_is_bad(t + p, len)) ftfy_fix_encoding(t + p, len, out);
        else pystr_append(out, t + p, len);
        last = (size_t)e;
        p = (size_t)e - 1;
    }
    pystr_append(out, t + last, n - last);
}

/* ---- the other fixers ---- */

static int cmp_entity_name(const void *key, const void *elem) {
    return strcmp((const char *)key, ((const html_entity *)elem)->name);
}

static int ascii_alnum(uint32_t c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'); }

/* fixes.unescape_html: HTML_ENTITY_RE = &#?[0-9A-Za-z]{1,24}; through _unescape_fixup. */
void ftfy_unescape_html(const uint32_t *t, size_t n, pystr *out) {
    pystr_reserve(out, out->n + n);
    if (n == 0) return;   /* t may be NULL */
    size_t last = 0;
    for (size_t p = 0; p < n; p++) {
        if (t[p] != '&') continue;
        const size_t q = p + 1 + (p + 1 < n && t[p + 1] == '#');
        size_t e = q;
        while (e < n && e - q <= 24 && ascii_alnum(t[e])) e++;
        if (e == q || e - q > 24 || e >= n || t[e] != ';') continue;
        e++;                                                   /* the match is t[p..e) */
        pystr_append(out, t + last, p - last);
        const char *v = html5_entity(t + p + 1, e - p - 1);
        if (!v) {   /* chardata.HTML_ENTITIES also has upper-case forms of some names */
            char name[32];
            size_t k = 0;
            for (size_t i = p + 1; i < e; i++) name[k++] = (char)t[i];
            name[k] = 0;
            const html_entity *u = bsearch(name, ftfy_upper_entities, FTFY_N_UPPER_ENTITIES,
                                           sizeof *ftfy_upper_entities, cmp_entity_name);
            v = u ? u->utf8 : NULL;
        }
        if (v) {
            pystr_append_utf8(out, v);
        } else if (t[p + 1] == '#') {   /* html.unescape, unless it leaves a ';' */
            pystr u = {0};
            html_unescape(t + p, e - p, &u);
            int semi = 0;
            for (size_t i = 0; i < u.n; i++) semi |= u.c[i] == ';';
            if (semi) pystr_append(out, t + p, e - p);
            else pystr_append(out, u.c, u.n);
            pystr_free(&u);
        } else {
            pystr_append(out, t + p, e - p);
        }
        last = e;
        p = e - 1;
    }
    pystr_append(out, t + last, n - last);
}

static const char *cp_map_find(const ftfy_cp_map *m, size_t count, uint32_t c) {
    size_t lo = 0, hi = count;
    if (c < m[0].cp || c > m[count - 1].cp) return NULL;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (c < m[mid].cp) hi = mid;
        else if (c > m[mid].cp) lo = mid + 1;
        else return m[mid].utf8;
    }
    return NULL;
}

/* fix_latin_ligatures, fix_character_width, uncurl_quotes and remove_control_chars are
 * str.translate tables applied one after the other; fix_line_breaks sits between the last two. */
static void translate(const uint32_t *t, size_t n, const ftfy_cp_map *m, size_t count, pystr *out) {
    for (size_t i = 0; i < n; i++) {
        const char *v = cp_map_find(m, count, t[i]);
        if (v) pystr_append_utf8(out, v);
        else pystr_push(out, t[i]);
    }
}

static void uncurl_quotes(const uint32_t *t, size_t n, pystr *out) {
    for (size_t i = 0; i < n; i++) {
        const uint32_t c = t[i];
        pystr_push(out, c >= 0x201c && c <= 0x201f ? '"' : c == 0x2bc || (c >= 0x2018 && c <= 0x201b) ? '\'' : c);
    }
}

static void fix_line_breaks(const uint32_t *t, size_t n, pystr *out) {
    for (size_t i = 0; i < n; i++) {
        const uint32_t c = t[i];
        if (c == '\r' && i + 1 < n && t[i + 1] == '\n') i++;
        pystr_push(out, c == '\r' || c == 0x2028 || c == 0x2029 || c == 0x85 ? '\n' : c);
    }
}

static void fix_surrogates(const uint32_t *t, size_t n, pystr *out) {
    for (size_t i = 0; i < n; i++) {
        const uint32_t c = t[i];
        if (c >= 0xd800 && c <= 0xdbff && i + 1 < n && t[i + 1] >= 0xdc00 && t[i + 1] <= 0xdfff) {
            pystr_push(out, 0x10000 + (c - 0xd800) * 0x400 + (t[i + 1] - 0xdc00));
            i++;
        } else {
            pystr_push(out, c >= 0xd800 && c <= 0xdfff ? 0xfffd : c);
        }
    }
}

/* ANSI_RE = "\033\[((?:\d|;)*)([a-zA-Z])" removed. */
static void remove_terminal_escapes(const uint32_t *t, size_t n, pystr *out) {
    for (size_t i = 0; i < n; i++) {
        if (t[i] == 0x1b && i + 1 < n && t[i + 1] == '[') {
            size_t j = i + 2;
            while (j < n && (t[j] == ';' || py_isdecimal(t[j]))) j++;
            if (j < n && ((t[j] | 0x20) >= 'a' && (t[j] | 0x20) <= 'z')) {
                i = j;
                continue;
            }
        }
        pystr_push(out, t[i]);
    }
}

static void remove_control_chars(const uint32_t *t, size_t n, pystr *out) {
    for (size_t i = 0; i < n; i++) {
        int drop = 0;
        for (size_t k = 0; k < FTFY_N_CONTROL && !drop; k++)
            drop = t[i] >= ftfy_control_chars[k].lo && t[i] <= ftfy_control_chars[k].hi;
        if (!drop) pystr_push(out, t[i]);
    }
}

/* ---- fix_and_explain and fix_text ---- */

typedef void (*fixer_fn)(const uint32_t *t, size_t n, pystr *out);

static void ligatures(const uint32_t *t, size_t n, pystr *out) {
    translate(t, n, ftfy_ligatures, FTFY_N_LIGATURES, out);
}
static void character_width(const uint32_t *t, size_t n, pystr *out) {
    translate(t, n, ftfy_width_map, FTFY_N_WIDTH, out);
}

/* cur = fix(cur) */
static void apply(fixer_fn fix, pystr *cur, pystr *tmp) {
    pystr_clear(tmp);
    fix(cur->c, cur->n, tmp);
    pystr_swap(cur, tmp);
}

/* fix_and_explain on one segment: every fixer in order, until the text stops changing. */
static int fix_segment(const uint32_t *t, size_t n, int unescape, pystr *out) {
    static const fixer_fn fixers[] = {fix_c1_controls, ligatures, character_width, uncurl_quotes,
                                      fix_line_breaks, fix_surrogates, remove_terminal_escapes, remove_control_chars};
    pystr cur = {0}, prev = {0}, tmp = {0};
    pystr_set(&cur, t, n);
    int rc = 0;
    for (size_t round = 0; round < n + 64; round++) {
        pystr_set(&prev, cur.c, cur.n);
        if (unescape) apply(ftfy_unescape_html, &cur, &tmp);
        apply(ftfy_fix_encoding, &cur, &tmp);
        for (size_t f = 0; f < sizeof fixers / sizeof *fixers; f++) apply(fixers[f], &cur, &tmp);
        if ((rc = pystr_nfc(&cur))) break;
        if (pystr_eq(&cur, prev.c, prev.n)) break;
    }
    if (!rc) pystr_append(out, cur.c, cur.n);
    pystr_free(&cur);
    pystr_free(&prev);
    pystr_free(&tmp);
    return rc;
}

int ftfy_fix_text(const uint32_t *t, size_t n, pystr *out) {
    enum { MAX_DECODE_LENGTH = 1000000 };
    int unescape = 1;   /* "auto": off from the first segment holding a '<' on */
    pystr_reserve(out, out->n + n);
    for (size_t pos = 0; pos < n;) {
        size_t brk = pos;
        while (brk < n && t[brk] != '\n') brk++;
        brk = brk < n ? brk + 1 : n;
        if (brk - pos > MAX_DECODE_LENGTH) brk = pos + MAX_DECODE_LENGTH;
        for (size_t i = pos; i < brk && unescape; i++)
            if (t[i] == '<') unescape = 0;
        if (fix_segment(t + pos, brk - pos, unescape, out)) return -1;
        pos = brk;
    }
    return 0;
}
