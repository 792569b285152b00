/* Byte-level BPE (transformers' slow Qwen2Tokenizer) and added-token splitting; see bpe.h. */
#include "bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <unicode/uchar.h>

#include "config.h"
#include "error.h"
#include "fileio.h"

/* ---- a string -> int hash map (open addressing, FNV-1a) ---- */

typedef struct {
    char **key;
    int *val;
    size_t cap, n;   /* cap: a power of two */
} strmap;

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Slot of key s[0..n) (its own or the empty one where it would go). */
static size_t strmap_slot(const strmap *m, const char *s, size_t n) {
    size_t i = (size_t)fnv1a(s, n) & (m->cap - 1);
    while (m->key[i] && (strlen(m->key[i]) != n || memcmp(m->key[i], s, n))) i = (i + 1) & (m->cap - 1);
    return i;
}

/* Insert or overwrite (a later duplicate wins, as a Python dict built in order). */
static void strmap_put(strmap *m, const char *s, size_t n, int v) {
    if (2 * (m->n + 1) > m->cap) {
        strmap old = *m;
        m->cap = old.cap ? 2 * old.cap : 1024;
        m->key = cvx_calloc(m->cap, sizeof *m->key);
        m->val = cvx_calloc(m->cap, sizeof *m->val);
        m->n = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.key[i]) {
                const size_t j = strmap_slot(m, old.key[i], strlen(old.key[i]));
                m->key[j] = old.key[i];
                m->val[j] = old.val[i];
                m->n++;
            }
        free(old.key), free(old.val);
    }
    const size_t i = strmap_slot(m, s, n);
    if (!m->key[i]) {
        m->key[i] = cvx_malloc(n + 1);
        memcpy(m->key[i], s, n);
        m->key[i][n] = 0;
        m->n++;
    }
    m->val[i] = v;
}

static int strmap_get(const strmap *m, const char *s, size_t n) {
    if (!m->cap) return -1;
    const size_t i = strmap_slot(m, s, n);
    return m->key[i] ? m->val[i] : -1;
}

static void strmap_free(strmap *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->key[i]);
    free(m->key), free(m->val);
    memset(m, 0, sizeof *m);
}

/* ---- added tokens ---- */

int tok_added_add(tok_added_set *s, const char *content, int id, int lstrip, int rstrip, int special) {
    if (!content[0]) return cvx_error("added token %d has an empty content", id);
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->tok[i].content, content)) return 0;
    s->tok = cvx_realloc(s->tok, (size_t)(s->n + 1) * sizeof *s->tok);
    tok_added_token *t = &s->tok[s->n++];
    pystr p = {0};
    pystr_from_utf8(&p, content, strlen(content));
    *t = (tok_added_token){strdup(content), p.c, p.n, id, lstrip, rstrip, special};
    return 0;
}

void tok_added_free(tok_added_set *s) {
    for (int i = 0; i < s->n; i++) free(s->tok[i].content), free(s->tok[i].cp);
    free(s->tok);
    memset(s, 0, sizeof *s);
}

int tok_added_id(const tok_added_set *s, const char *content) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->tok[i].content, content)) return s->tok[i].id;
    return -1;
}

static int parse_id(const char *s, const char *label, const char *what, int *id) {
    char *end;
    const long long v = strtoll(s, &end, 10);
    if (!*s || *end || v < 0 || v > 0x7fffffff)
        return cvx_error("%s: %s '%s' must be an integer id in [0, 2147483647]", label, what, s);
    *id = (int)v;
    return 0;
}

static int json_flag(json_object *o, const char *key, const char *label, const char *content, int *out) {
    json_object *v;
    *out = 0;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) return 0;
    if (!json_object_is_type(v, json_type_boolean))
        return cvx_error("%s: added token '%s': key '%s' must be true or false", label, content, key);
    *out = json_object_get_boolean(v);
    return 0;
}

/* "added_tokens_decoder": {"<id>": {"content": .., "lstrip": .., ...}} in id order of the file. */
static int parse_added_decoder(tok_added_set *s, json_object *atd, const char *label) {
    json_object_object_foreach(atd, k, v) {
        int id = 0, l, r, sp, sw;
        json_object *c;
        if (parse_id(k, label, "added_tokens_decoder key", &id)) return -1;
        if (!json_object_is_type(v, json_type_object) || !json_object_object_get_ex(v, "content", &c) ||
            !json_object_is_type(c, json_type_string) || !json_object_get_string_len(c))
            return cvx_error("%s: added_tokens_decoder entry '%s' must be an object with a non-empty string "
                             "'content'", label, k);
        const char *content = json_object_get_string(c);
        if (json_flag(v, "lstrip", label, content, &l) || json_flag(v, "rstrip", label, content, &r) ||
            json_flag(v, "special", label, content, &sp) || json_flag(v, "single_word", label, content, &sw))
            return -1;
        if (sw) return cvx_error("%s: added token '%s' has single_word=true, which is not implemented", label, content);
        if (tok_added_add(s, content, id, l, r, sp)) return cvx_error_prefix("%s", label);
    }
    return 0;
}

int tok_added_parse(tok_added_set *s, const char *config_json, size_t config_len, const char *config_label,
                    const char *added_json, size_t added_len, const char *added_label) {
    memset(s, 0, sizeof *s);
    json_object *atd = NULL, *root = NULL;
    int rc = 0;
    if (config_json) {
        cvx_config c;
        if (cvx_config_parse(&c, config_json, config_len, config_label)) return -1;
        if (json_object_object_get_ex(c.root, "added_tokens_decoder", &atd) && !json_object_is_type(atd, json_type_null)) {
            rc = json_object_is_type(atd, json_type_object)
                     ? parse_added_decoder(s, atd, config_label)
                     : cvx_error("%s: key 'added_tokens_decoder' must be an object", config_label);
            cvx_config_free(&c);
            if (rc) tok_added_free(s);
            return rc;
        }
        cvx_config_free(&c);
    }
    if (!added_json) return 0;
    cvx_config a;
    if (cvx_config_parse(&a, added_json, added_len, added_label)) return -1;
    root = a.root;
    json_object_object_foreach(root, k, v) {
        if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0 ||
            json_object_get_int64(v) > 0x7fffffff) {
            rc = cvx_error("%s: added token '%s' must map to an integer id in [0, 2147483647]", added_label, k);
            break;
        }
        if ((rc = tok_added_add(s, k, (int)json_object_get_int64(v), 0, 0, 0) ? cvx_error_prefix("%s", added_label) : 0))
            break;
    }
    cvx_config_free(&a);
    if (rc) tok_added_free(s);
    return rc;
}

/* Read <dir>/<name> if it exists: 0 with *text NULL when absent, -1 on a read error. */
static int read_optional(const char *dir, const char *name, char *path, size_t np, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    if (cvx_path_join(path, np, dir, name)) return cvx_error("%s: path too long", dir);
    if (!cvx_is_file(path)) return 0;
    return (*text = cvx_read_file(path, len)) ? 0 : -1;
}

int tok_added_load(tok_added_set *s, const char *dir) {
    char pc[4096], pa[4096], *c, *a;
    size_t nc, na;
    memset(s, 0, sizeof *s);
    if (read_optional(dir, "tokenizer_config.json", pc, sizeof pc, &c, &nc)) return -1;
    if (read_optional(dir, "added_tokens.json", pa, sizeof pa, &a, &na)) {
        free(c);
        return -1;
    }
    const int rc = tok_added_parse(s, c, nc, pc, a, na, pa);
    free(c), free(a);
    return rc;
}

/* Longest added token matching at t[p..), -1 if none. */
static int match_added(const tok_added_set *s, const pystr *t, size_t p) {
    int best = -1;
    for (int i = 0; i < s->n; i++) {
        const tok_added_token *a = &s->tok[i];
        if (a->n <= t->n - p && (best < 0 || a->n > s->tok[best].n) && !memcmp(a->cp, t->c + p, a->n * sizeof *a->cp))
            best = i;
    }
    return best;
}

void tok_added_split(const tok_added_set *s, const pystr *t, tok_chunk **chunks, int *n) {
    tok_chunk *c = NULL;
    int nc = 0, cap = 0;
#define PUSH(st, ln, ad)                                                       \
    do {                                                                       \
        if (nc == cap) c = cvx_realloc(c, (size_t)(cap = 2 * cap + 8) * sizeof *c); \
        c[nc++] = (tok_chunk){(st), (ln), (ad)};                               \
    } while (0)
    size_t start = 0;
    for (size_t p = 0; p < t->n;) {
        const int a = s->n ? match_added(s, t, p) : -1;
        if (a < 0) {
            p++;
            continue;
        }
        if (p > start) PUSH(start, p - start, -1);
        PUSH(p, s->tok[a].n, a);
        p += s->tok[a].n;
        start = p;
    }
    if (t->n > start) PUSH(start, t->n - start, -1);
#undef PUSH
    /* an added token's rstrip / lstrip strips the next / previous text chunk (Python str.strip) */
    for (int i = 0; i < nc; i++) {
        if (c[i].added < 0) continue;
        const tok_added_token *a = &s->tok[c[i].added];
        if (a->rstrip && i + 1 < nc && c[i + 1].added < 0)
            while (c[i + 1].len && py_isspace(t->c[c[i + 1].start])) c[i + 1].start++, c[i + 1].len--;
        if (a->lstrip && i > 0 && c[i - 1].added < 0)
            while (c[i - 1].len && py_isspace(t->c[c[i - 1].start + c[i - 1].len - 1])) c[i - 1].len--;
    }
    int k = 0;
    for (int i = 0; i < nc; i++)
        if (c[i].len) c[k++] = c[i];
    *chunks = c;
    *n = k;
}

/* ---- the Qwen2 pre-tokenizer ---- */

static int is_L(uint32_t c) {
    const int8_t t = u_charType((UChar32)c);
    return t == U_UPPERCASE_LETTER || t == U_LOWERCASE_LETTER || t == U_TITLECASE_LETTER ||
           t == U_MODIFIER_LETTER || t == U_OTHER_LETTER;
}
static int is_N(uint32_t c) {
    const int8_t t = u_charType((UChar32)c);
    return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}
static int is_s(uint32_t c) { return unicode_white_space(c); }
static int is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

/* c equals the ASCII lower-case letter x under the regex module's simple case folding. */
static int ci_eq(uint32_t c, char x) {
    return c == (uint32_t)x || c == (uint32_t)(x - 32) || (x == 's' && c == 0x17f);
}

size_t bpe_qwen2_pretoken_end(const uint32_t *c, size_t n, size_t i) {
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (c[i] == '\'' && i + 1 < n) {
        static const char *const alt[] = {"s", "t", "re", "ve", "m", "ll", "d"};
        for (int a = 0; a < 7; a++) {
            const size_t l = strlen(alt[a]);
            size_t k = 0;
            while (k < l && i + 1 + k < n && ci_eq(c[i + 1 + k], alt[a][k])) k++;
            if (k == l) return i + 1 + l;
        }
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    {
        size_t j = i;
        if (!is_crlf(c[j]) && !is_L(c[j]) && !is_N(c[j])) j++;
        if (j < n && is_L(c[j])) {
            while (j < n && is_L(c[j])) j++;
            return j;
        }
        if (is_L(c[i])) {   /* the optional class failed: the letters alone */
            j = i;
            while (j < n && is_L(c[j])) j++;
            return j;
        }
    }
    /* \p{N} */
    if (is_N(c[i])) return i + 1;
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    {
        size_t j = i + (c[i] == ' ');
        const size_t k0 = j;
        while (j < n && !is_s(c[j]) && !is_L(c[j]) && !is_N(c[j])) j++;
        if (j > k0) {
            while (j < n && is_crlf(c[j])) j++;
            return j;
        }
    }
    /* the whitespace alternatives: W = the run of \s from i */
    size_t e = i;
    while (e < n && is_s(c[e])) e++;
    if (e == i) return i + 1;   /* unreachable: every code point is L, N, \s or none of them */
    /* \s*[\r\n]+ : up to the last \r or \n of the run */
    for (size_t k = e; k > i; k--)
        if (is_crlf(c[k - 1])) return k;
    /* \s+(?!\S) : the run, or the run but its last character when text follows */
    if (e == n) return e;
    if (e - i >= 2) return e - 1;
    /* \s+ */
    return e;
}

/* ---- byte-level BPE ---- */

struct bpe_tokenizer {
    strmap vocab;          /* token -> id */
    strmap ranks;          /* "first second" -> merge rank (the line's index; a later duplicate wins) */
    tok_added_set added;
    int unk_id, pad_id;    /* -1: none */
    int vocab_size;
    uint32_t byte_cp[256]; /* bytes_to_unicode */
};

uint32_t bpe_byte_to_unicode(unsigned b) {
    /* printable Latin-1 stands for itself; the other bytes get 256, 257, ... in byte order */
    if ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) return b;
    uint32_t n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff))) n++;
    return 256 + n;
}

int bpe_vocab_size(const bpe_tokenizer *t) { return t->vocab_size; }
int bpe_pad_id(const bpe_tokenizer *t) { return t->pad_id; }

int bpe_token_id(const bpe_tokenizer *t, const char *token) {
    const int a = tok_added_id(&t->added, token);
    return a >= 0 ? a : strmap_get(&t->vocab, token, strlen(token));
}

void bpe_free(bpe_tokenizer *t) {
    if (!t) return;
    strmap_free(&t->vocab);
    strmap_free(&t->ranks);
    tok_added_free(&t->added);
    free(t);
}

/* Valid UTF-8 (what Python's strict decode accepts). */
static int utf8_valid(const char *s, size_t n) {
    pystr p = {0};
    pystr_from_utf8(&p, s, n);
    size_t m;
    char *back = pystr_to_utf8(p.c, p.n, &m);
    const int ok = m == n && !memcmp(back, s, n);
    free(back), pystr_free(&p);
    return ok;
}

static int load_vocab(bpe_tokenizer *t, const char *text, size_t len, const char *label) {
    if (!utf8_valid(text, len)) return cvx_error("%s: not valid UTF-8", label);
    cvx_config c;
    if (cvx_config_parse(&c, text, len, label)) return -1;
    int rc = 0;
    json_object_object_foreach(c.root, k, v) {
        if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0 ||
            json_object_get_int64(v) > 0x7fffffff) {
            rc = cvx_error("%s: token '%.200s' must map to an integer id in [0, 2147483647]", label, k);
            break;
        }
        const int id = (int)json_object_get_int64(v);
        strmap_put(&t->vocab, k, strlen(k), id);
        if (id >= t->vocab_size) t->vocab_size = id + 1;
    }
    cvx_config_free(&c);
    if (!rc && !t->vocab.n) rc = cvx_error("%s: the vocabulary is empty", label);
    return rc;
}

/* merges.txt as Qwen2Tokenizer reads it: lines (\n, \r\n or \r), each strip()ped; a first line
 * "#version: ..." and empty lines skipped; every other line exactly two tokens. */
static int load_merges(bpe_tokenizer *t, const char *text, size_t len, const char *label) {
    if (!utf8_valid(text, len)) return cvx_error("%s: not valid UTF-8", label);
    pystr all = {0};
    pystr_from_utf8(&all, text, len);
    int rank = 0, rc = 0;
    size_t line = 0;
    for (size_t p = 0; p < all.n && !rc; line++) {
        size_t e = p;
        while (e < all.n && !is_crlf(all.c[e])) e++;
        const size_t next = e < all.n && all.c[e] == '\r' && e + 1 < all.n && all.c[e + 1] == '\n' ? e + 2 : e + 1;
        size_t a = p, b = e;
        while (a < b && py_isspace(all.c[a])) a++;
        while (b > a && py_isspace(all.c[b - 1])) b--;
        p = next;
        if (a == b) continue;
        static const uint32_t ver[] = {'#', 'v', 'e', 'r', 's', 'i', 'o', 'n', ':'};
        if (line == 0 && b - a >= 9 && !memcmp(all.c + a, ver, sizeof ver)) continue;
        size_t m = a;
        while (m < b && !py_isspace(all.c[m])) m++;
        size_t s2 = m;
        while (s2 < b && py_isspace(all.c[s2])) s2++;
        size_t m2 = s2;
        while (m2 < b && !py_isspace(all.c[m2])) m2++;
        if (s2 == b || m2 != b) {
            rc = cvx_error("%s: line %zu: a merge must be two tokens separated by whitespace", label, line + 1);
            break;
        }
        size_t n1, n2;
        char *x = pystr_to_utf8(all.c + a, m - a, &n1), *y = pystr_to_utf8(all.c + s2, b - s2, &n2);
        char *key = cvx_malloc(n1 + n2 + 2);
        memcpy(key, x, n1);
        key[n1] = ' ';
        memcpy(key + n1 + 1, y, n2 + 1);
        strmap_put(&t->ranks, key, n1 + 1 + n2, rank++);
        free(x), free(y), free(key);
    }
    pystr_free(&all);
    return rc;
}

/* unk_token / pad_token of tokenizer_config.json: a string, {"content": ..}, null (none) or absent
 * (Qwen2Tokenizer's default "<|endoftext|>", when the vocabulary has it). */
static int special_id(const bpe_tokenizer *t, const cvx_config *c, const char *key, int *id) {
    json_object *v = NULL, *cv;
    const char *name = NULL;
    *id = -1;
    if (!c || !json_object_object_get_ex(c->root, key, &v)) {
        *id = bpe_token_id(t, "<|endoftext|>");
        return 0;
    }
    if (json_object_is_type(v, json_type_null)) return 0;
    if (json_object_is_type(v, json_type_string)) name = json_object_get_string(v);
    else if (json_object_is_type(v, json_type_object) && json_object_object_get_ex(v, "content", &cv) &&
             json_object_is_type(cv, json_type_string))
        name = json_object_get_string(cv);
    else
        return cvx_error("%s: key '%s' must be a string, an object with 'content', or null", c->path, key);
    if ((*id = bpe_token_id(t, name)) < 0)
        return cvx_error("%s: %s '%s' is neither in the vocabulary nor an added token", c->path, key, name);
    return 0;
}

bpe_tokenizer *bpe_load_memory(const char *vocab_json, size_t vocab_len, const char *merges, size_t merges_len,
                               const char *config_json, size_t config_len, const char *added_json,
                               size_t added_len, const char *label) {
    bpe_tokenizer *t = cvx_calloc(1, sizeof *t);
    char lv[4200], lm[4200], lc[4200], la[4200];
    snprintf(lv, sizeof lv, "%s/vocab.json", label);
    snprintf(lm, sizeof lm, "%s/merges.txt", label);
    snprintf(lc, sizeof lc, "%s/tokenizer_config.json", label);
    snprintf(la, sizeof la, "%s/added_tokens.json", label);
    cvx_config c = {0};
    if (load_vocab(t, vocab_json, vocab_len, lv) || load_merges(t, merges, merges_len, lm) ||
        tok_added_parse(&t->added, config_json, config_len, lc, added_json, added_len, la) ||
        (config_json && cvx_config_parse(&c, config_json, config_len, lc)))
        goto fail;
    for (int i = 0; i < t->added.n; i++)
        if (t->added.tok[i].id >= t->vocab_size) t->vocab_size = t->added.tok[i].id + 1;
    if (special_id(t, config_json ? &c : NULL, "unk_token", &t->unk_id) ||
        special_id(t, config_json ? &c : NULL, "pad_token", &t->pad_id))
        goto fail;
    if (config_json) cvx_config_free(&c);
    for (unsigned b = 0; b < 256; b++) t->byte_cp[b] = bpe_byte_to_unicode(b);
    return t;
fail:
    if (c.root) cvx_config_free(&c);
    bpe_free(t);
    return NULL;
}

bpe_tokenizer *bpe_load(const char *dir) {
    char pv[4096], pm[4096], pc[4096], pa[4096];
    char *v = NULL, *m = NULL, *c = NULL, *a = NULL;
    size_t nv, nm, nc, na;
    bpe_tokenizer *t = NULL;
    if (read_optional(dir, "vocab.json", pv, sizeof pv, &v, &nv) ||
        read_optional(dir, "merges.txt", pm, sizeof pm, &m, &nm) ||
        read_optional(dir, "tokenizer_config.json", pc, sizeof pc, &c, &nc) ||
        read_optional(dir, "added_tokens.json", pa, sizeof pa, &a, &na))
        goto done;
    if (!v) {
        cvx_error("%s: no vocab.json (a byte-level BPE tokenizer needs vocab.json and merges.txt)", dir);
        goto done;
    }
    if (!m) {
        cvx_error("%s: vocab.json without merges.txt (a byte-level BPE tokenizer needs both)", dir);
        goto done;
    }
    t = bpe_load_memory(v, nv, m, nm, c, nc, a, na, dir);
done:
    free(v), free(m), free(c), free(a);
    return t;
}

/* Output of the tokenizer: ids or token strings. */
typedef struct {
    int64_t *ids;
    char **toks;
    int n, cap, want_toks;
} tok_out;

static void out_push(tok_out *o, int id, const char *tok, size_t len) {
    if (o->n == o->cap) {
        o->cap = 2 * o->cap + 64;
        o->ids = cvx_realloc(o->ids, (size_t)o->cap * sizeof *o->ids);
        if (o->want_toks) o->toks = cvx_realloc(o->toks, (size_t)o->cap * sizeof *o->toks);
    }
    o->ids[o->n] = id;
    if (o->want_toks) {
        o->toks[o->n] = cvx_malloc(len + 1);
        memcpy(o->toks[o->n], tok, len);
        o->toks[o->n][len] = 0;
    }
    o->n++;
}

/* Append code point c as UTF-8 to buf[*n] (room for 4). */
static void put_utf8(char *buf, size_t *n, uint32_t c) {
    if (c < 0x80) buf[(*n)++] = (char)c;
    else {   /* the byte alphabet stays below U+0800 */
        buf[(*n)++] = (char)(0xc0 | (c >> 6));
        buf[(*n)++] = (char)(0x80 | (c & 0x3f));
    }
}

/* Work buffers of bpe_word for words of up to `cap` bytes, allocated once per text. */
typedef struct {
    char *bytes, *w, *key;
    size_t *off, *len;
    int *rank, *merged;
} bpe_work;

static void work_alloc(bpe_work *b, size_t cap) {
    b->bytes = cvx_malloc(cap + 1);
    b->w = cvx_malloc(2 * cap + 1);
    b->key = cvx_malloc(4 * cap + 2);
    b->off = cvx_malloc((cap + 1) * sizeof *b->off);
    b->len = cvx_malloc((cap + 1) * sizeof *b->len);
    b->rank = cvx_malloc((cap + 1) * sizeof *b->rank);
    b->merged = cvx_malloc((cap + 1) * sizeof *b->merged);
}

static void work_free(bpe_work *b) {
    free(b->bytes), free(b->w), free(b->key), free(b->off), free(b->len), free(b->rank), free(b->merged);
}

/* Append code point c (< 0x110000) as UTF-8. */
static void put_utf8_full(char *buf, size_t *n, uint32_t c) {
    if (c < 0x80) buf[(*n)++] = (char)c;
    else if (c < 0x800) buf[(*n)++] = (char)(0xc0 | (c >> 6)), buf[(*n)++] = (char)(0x80 | (c & 0x3f));
    else if (c < 0x10000)
        buf[(*n)++] = (char)(0xe0 | (c >> 12)), buf[(*n)++] = (char)(0x80 | ((c >> 6) & 0x3f)),
        buf[(*n)++] = (char)(0x80 | (c & 0x3f));
    else
        buf[(*n)++] = (char)(0xf0 | (c >> 18)), buf[(*n)++] = (char)(0x80 | ((c >> 12) & 0x3f)),
        buf[(*n)++] = (char)(0x80 | ((c >> 6) & 0x3f)), buf[(*n)++] = (char)(0x80 | (c & 0x3f));
}

/* The merge rank of symbols (i, i + 1) of the word in b ("first second" in merges.txt), -1: none. */
static int pair_rank(const bpe_tokenizer *t, bpe_work *b, size_t i) {
    const size_t l1 = b->len[i], l2 = b->len[i + 1];
    memcpy(b->key, b->w + b->off[i], l1);
    b->key[l1] = ' ';
    memcpy(b->key + l1 + 1, b->w + b->off[i + 1], l2);
    return strmap_get(&t->ranks, b->key, l1 + 1 + l2);
}

/* bpe() of one pre-token (its nb UTF-8 bytes) and the vocabulary lookup of each resulting token. */
static int bpe_word(const bpe_tokenizer *t, const char *bytes, size_t nb, bpe_work *b, tok_out *o) {
    char *w = b->w;   /* the byte-encoded word */
    size_t *off = b->off, *len = b->len, wn = 0;
    int *rank = b->rank, *merged = b->merged;
    size_t m = nb;
    for (size_t i = 0; i < nb; i++) {
        off[i] = wn;
        put_utf8(w, &wn, t->byte_cp[(unsigned char)bytes[i]]);
        len[i] = wn - off[i];
        merged[i] = 1;
    }
    for (size_t i = 0; i + 1 < m; i++) rank[i] = pair_rank(t, b, i);
    for (;;) {
        int best = -1;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] >= 0 && (best < 0 || rank[i] < best)) best = rank[i];
        if (best < 0) break;
        /* merge every occurrence of the pair, left to right; symbols are contiguous in w */
        size_t k = 0;
        for (size_t i = 0; i < m; k++) {
            if (i + 1 < m && rank[i] == best) {
                off[k] = off[i], len[k] = len[i] + len[i + 1], merged[k] = 1;
                rank[k] = -2;
                i += 2;
            } else {
                off[k] = off[i], len[k] = len[i], merged[k] = 0;
                rank[k] = i + 1 < m ? rank[i] : -1;   /* the old pair (i, i+1): kept if i+1 is copied too */
                i++;
            }
        }
        m = k;
        for (size_t i = 0; i + 1 < m; i++)
            if (merged[i] || merged[i + 1]) rank[i] = pair_rank(t, b, i);
    }
    int rc = 0;
    for (size_t i = 0; i < m && !rc; i++) {
        int id = strmap_get(&t->vocab, w + off[i], len[i]);
        if (id < 0) id = t->unk_id;
        if (id < 0)
            rc = cvx_error("tokenizer: token '%.*s' is not in vocab.json and the tokenizer has no unk_token",
                           (int)len[i], w + off[i]);
        else
            out_push(o, id, w + off[i], len[i]);
    }
    return rc;
}

static int run(const bpe_tokenizer *t, const char *text, tok_out *o) {
    pystr s = {0};
    pystr_from_utf8(&s, text, strlen(text));
    if (pystr_nfc(&s)) {
        pystr_free(&s);
        return -1;
    }
    tok_chunk *ch;
    int nch, rc = 0;
    tok_added_split(&t->added, &s, &ch, &nch);
    bpe_work b;
    work_alloc(&b, 4 * s.n + 1);   /* a pre-token has at most 4 bytes per code point */
    for (int i = 0; i < nch && !rc; i++) {
        if (ch[i].added >= 0) {
            const tok_added_token *a = &t->added.tok[ch[i].added];
            out_push(o, a->id, a->content, strlen(a->content));
            continue;
        }
        const uint32_t *c = s.c + ch[i].start;
        for (size_t p = 0, n = ch[i].len; p < n && !rc;) {
            const size_t e = bpe_qwen2_pretoken_end(c, n, p);
            size_t nb = 0;
            for (size_t q = p; q < e; q++) put_utf8_full(b.bytes, &nb, c[q]);
            rc = bpe_word(t, b.bytes, nb, &b, o);
            p = e;
        }
    }
    work_free(&b);
    free(ch);
    pystr_free(&s);
    return rc;
}

int bpe_encode(const bpe_tokenizer *t, const char *text, int64_t **ids, int *n) {
    tok_out o = {0};
    if (run(t, text, &o)) {
        free(o.ids);
        return -1;
    }
    *ids = o.ids ? o.ids : cvx_malloc(sizeof **ids);
    *n = o.n;
    return 0;
}

int bpe_tokenize(const bpe_tokenizer *t, const char *text, char ***toks, int *n) {
    tok_out o = {.want_toks = 1};
    const int rc = run(t, text, &o);
    free(o.ids);
    if (rc) {
        bpe_tokens_free(o.toks, o.n);
        return -1;
    }
    *toks = o.toks;
    *n = o.n;
    return 0;
}

void bpe_tokens_free(char **toks, int n) {
    for (int i = 0; i < n; i++) free(toks[i]);
    free(toks);
}
