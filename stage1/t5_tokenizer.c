/* transformers' slow T5Tokenizer (legacy mode) as the CogVideoX pipeline calls it.
 *
 * Upstream steps, reproduced in order:
 *   1. PreTrainedTokenizer.tokenize: split the text on added tokens that occur literally
 *      (leftmost match); an added token with lstrip/rstrip (the <extra_id_N>) strips Python
 *      whitespace off the neighbouring chunks; empty chunks are dropped.
 *   2. every text chunk goes through sentencepiece on its own (own dummy-prefix "▁").
 *   3. truncation: with the EOS to come, at most max_len - 1 ids are kept.
 *   4. EOS appended unless the ids already end with it (_add_eos_if_not_present).
 *   5. right padding with the pad id; attention mask 1 on the real ids. */
#include "t5_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fileio.h"

/* ---- Python str.isspace() on UTF-8 ---- */

/* Decode one UTF-8 code point at s[0..n); *len gets its byte length (1 for invalid bytes). */
static uint32_t utf8_decode(const unsigned char *s, size_t n, int *len) {
    unsigned c = s[0];
    int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (k == 0 || (size_t)k > n) { *len = 1; return c; }
    uint32_t cp = k == 1 ? c : k == 2 ? (c & 0x1f) : k == 3 ? (c & 0x0f) : (c & 0x07);
    for (int i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) { *len = 1; return c; }
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    *len = k;
    return cp;
}

/* Python's whitespace: Unicode category Zs or bidi class WS/B/S. */
static int py_isspace(uint32_t cp) {
    if ((cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20)) return 1;
    switch (cp) {
    case 0x85: case 0xa0: case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f: case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200a;
    }
}

typedef struct {
    size_t start, len;
    int token;            /* index into tok->added, or -1 for text */
} chunk;

static void chunk_lstrip(const char *text, chunk *c) {
    while (c->len > 0) {
        int k;
        uint32_t cp = utf8_decode((const unsigned char *)text + c->start, c->len, &k);
        if (!py_isspace(cp)) break;
        c->start += (size_t)k;
        c->len -= (size_t)k;
    }
}

static void chunk_rstrip(const char *text, chunk *c) {
    size_t keep = 0, p = 0;   /* keep = end of the last non-space code point */
    while (p < c->len) {
        int k;
        uint32_t cp = utf8_decode((const unsigned char *)text + c->start + p, c->len - p, &k);
        p += (size_t)k;
        if (!py_isspace(cp)) keep = p;
    }
    c->len = keep;
}

/* ---- loading ---- */

static int add_token(t5_tokenizer *tok, const char *content, int id, int lstrip, int rstrip) {
    for (int i = 0; i < tok->n_added; i++)
        if (strcmp(tok->added[i].content, content) == 0) return 0;   /* first definition wins */
    tok->added = cvx_realloc(tok->added, (size_t)(tok->n_added + 1) * sizeof *tok->added);
    t5_added_token *t = &tok->added[tok->n_added++];
    t->content = strdup(content);
    CVX_CHECK(t->content != NULL);
    t->id = id;
    t->lstrip = lstrip;
    t->rstrip = rstrip;
    return 0;
}

static int json_flag(json_object *o, const char *key) {
    json_object *v;
    return json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

/* "added_tokens_decoder": {"<id>": {"content": .., "lstrip": .., "rstrip": ..}, ...} */
static int load_added_tokens_decoder(t5_tokenizer *tok, json_object *atd, const char *path) {
    json_object_object_foreach(atd, key, val) {
        char *end;
        long id = strtol(key, &end, 10);
        json_object *content;
        if (*end || id < 0 || !json_object_is_type(val, json_type_object) ||
            !json_object_object_get_ex(val, "content", &content) || !json_object_is_type(content, json_type_string))
            return cvx_error("%s: added_tokens_decoder entry '%s' must map an integer id to an object with a "
                             "string 'content'", path, key);
        if (json_flag(val, "single_word"))
            return cvx_error("%s: added token '%s' has single_word=true, which this tokenizer does not implement",
                             path, json_object_get_string(content));
        add_token(tok, json_object_get_string(content), (int)id, json_flag(val, "lstrip"), json_flag(val, "rstrip"));
    }
    return 0;
}

/* A special token named in the config, either as a string or as {"content": ...}. */
static const char *special_token(const cvx_config *cfg, const char *key, const char *def) {
    json_object *v;
    if (!cfg->root || !json_object_object_get_ex(cfg->root, key, &v)) return def;
    if (json_object_is_type(v, json_type_string)) return json_object_get_string(v);
    json_object *c;
    if (json_object_is_type(v, json_type_object) && json_object_object_get_ex(v, "content", &c) &&
        json_object_is_type(c, json_type_string))
        return json_object_get_string(c);
    return def;
}

static int token_id(const t5_tokenizer *tok, const char *content) {
    for (int i = 0; i < tok->n_added; i++)
        if (strcmp(tok->added[i].content, content) == 0) return tok->added[i].id;
    return t5_spm_piece_to_id(tok->sp, content);
}

int t5_tokenizer_load(t5_tokenizer *tok, const char *dir) {
    memset(tok, 0, sizeof *tok);
    char path[4096], cfg_path[4096];
    if (!cvx_is_dir(dir)) return cvx_error("%s: tokenizer directory not found", dir);
    if (cvx_path_join(path, sizeof path, dir, "spiece.model") || !cvx_is_file(path))
        return cvx_error("%s: tokenizer file not found (expected the sentencepiece model spiece.model)", path);
    tok->sp = t5_spm_load(path);
    if (!tok->sp) return -1;
    const int pieces = t5_spm_piece_count(tok->sp);

    cvx_config cfg = {0};
    if (cvx_path_join(cfg_path, sizeof cfg_path, dir, "tokenizer_config.json") == 0 && cvx_is_file(cfg_path)) {
        if (cvx_config_load(&cfg, cfg_path)) goto fail;
        int legacy = 1;
        if (cvx_cfg_bool_or(&cfg, "legacy", 1, &legacy)) goto fail;
        if (!legacy)
            cvx_warn("%s: legacy=false is not implemented; tokenizing as legacy=true (what CogVideoX ships)",
                     cfg_path);
        json_object *atd;
        if (json_object_object_get_ex(cfg.root, "added_tokens_decoder", &atd) &&
            json_object_is_type(atd, json_type_object) && load_added_tokens_decoder(tok, atd, cfg_path))
            goto fail;
    }
    /* T5Tokenizer's defaults for whatever the config did not list: the special tokens
     * (no stripping) and extra_ids <extra_id_N> at pieces + extra_ids - 1 - N (stripping). */
    const char *specials[3] = {special_token(&cfg, "pad_token", "<pad>"), special_token(&cfg, "eos_token", "</s>"),
                               special_token(&cfg, "unk_token", "<unk>")};
    for (int i = 0; i < 3; i++) add_token(tok, specials[i], t5_spm_piece_to_id(tok->sp, specials[i]), 0, 0);
    int64_t extra_ids = 100;
    if (cfg.root && cvx_cfg_int_or(&cfg, "extra_ids", 100, &extra_ids)) goto fail;
    for (int n = 0; n < extra_ids; n++) {
        char name[32];
        snprintf(name, sizeof name, "<extra_id_%d>", n);
        add_token(tok, name, pieces + (int)extra_ids - 1 - n, 1, 1);
    }
    tok->words_split = 1;
    for (int i = 0; i < pieces && tok->words_split; i++) {
        const char *pc = t5_spm_piece(tok->sp, i);
        tok->words_split = !(pc[0] && strstr(pc + 1, "\xe2\x96\x81"));   /* U+2581 past the first byte */
    }
    tok->eos_id = token_id(tok, specials[1]);
    tok->pad_id = token_id(tok, specials[0]);
    tok->vocab_size = pieces;
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].id >= tok->vocab_size) tok->vocab_size = tok->added[i].id + 1;
    cvx_config_free(&cfg);
    return 0;
fail:
    cvx_config_free(&cfg);
    t5_tokenizer_free(tok);
    return -1;
}

void t5_tokenizer_free(t5_tokenizer *tok) {
    if (tok->sp) t5_spm_free(tok->sp);
    for (int i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    free(tok->added);
    memset(tok, 0, sizeof *tok);
}

/* ---- tokenizing ---- */

/* Longest added token starting at text[p..n), or -1. */
static int match_added(const t5_tokenizer *tok, const char *text, size_t p, size_t n) {
    int best = -1;
    size_t best_len = 0;
    for (int i = 0; i < tok->n_added; i++) {
        const char *c = tok->added[i].content;
        size_t l = strlen(c);
        if (l > best_len && l <= n - p && c[0] == text[p] && memcmp(c, text + p, l) == 0) {
            best = i;
            best_len = l;
        }
    }
    return best;
}

/* Steps 1-2: ids of text[0..n) without the EOS. */
static int tokenize_body(const t5_tokenizer *tok, const char *text, size_t n, int64_t **out, int *n_out) {
    chunk *chunks = cvx_malloc((2 * n + 2) * sizeof *chunks);
    int nc = 0;
    size_t last = 0;
    for (size_t p = 0; p < n;) {
        int t = match_added(tok, text, p, n);
        if (t < 0) { p++; continue; }
        if (p > last) chunks[nc++] = (chunk){last, p - last, -1};
        size_t l = strlen(tok->added[t].content);
        chunks[nc++] = (chunk){p, l, t};
        p += l;
        last = p;
    }
    if (n > last) chunks[nc++] = (chunk){last, n - last, -1};

    /* Whitespace eaten by the stripping tokens, in order, as upstream mutates its list. */
    for (int i = 0; i < nc; i++) {
        if (chunks[i].token < 0) continue;
        const t5_added_token *t = &tok->added[chunks[i].token];
        if (t->rstrip && i + 1 < nc && chunks[i + 1].len > 0) chunk_lstrip(text, &chunks[i + 1]);
        if (t->lstrip && i > 0 && chunks[i - 1].len > 0) chunk_rstrip(text, &chunks[i - 1]);
    }

    int64_t *ids = NULL;
    int count = 0, cap = 0;
    for (int i = 0; i < nc; i++) {
        if (chunks[i].len == 0) continue;
        int *piece_ids = NULL, np = 0;
        if (chunks[i].token >= 0) {
            np = 1;
        } else if (t5_spm_encode(tok->sp, text + chunks[i].start, chunks[i].len, &piece_ids, &np)) {
            free(chunks);
            free(ids);
            return -1;
        }
        if (count + np > cap) {
            cap = 2 * (count + np) + 16;
            ids = cvx_realloc(ids, (size_t)cap * sizeof *ids);
        }
        if (chunks[i].token >= 0)
            ids[count++] = tok->added[chunks[i].token].id;
        else
            for (int j = 0; j < np; j++) ids[count++] = piece_ids[j];
        free(piece_ids);
    }
    free(chunks);
    *out = ids;
    *n_out = count;
    return 0;
}

/* Step 4: upstream does not append a second EOS when the text already ends with "</s>". */
static int ends_with_eos(const t5_tokenizer *tok, const int64_t *ids, int n) {
    return n > 0 && ids[n - 1] == tok->eos_id;
}

int t5_tokenize_raw(const t5_tokenizer *tok, const char *text, int64_t **ids, int *n) {
    if (tokenize_body(tok, text, strlen(text), ids, n)) return -1;
    if (!ends_with_eos(tok, *ids, *n)) {
        *ids = cvx_realloc(*ids, (size_t)(*n + 1) * sizeof **ids);
        (*ids)[(*n)++] = tok->eos_id;
    }
    return 0;
}

/* ---- bounded work for long texts ----
 * Only the first max_len - 1 ids survive truncation, so a long text is tokenized by prefixes
 * (4 KB, growing x4) until one yields at least max_len ids; a 10 MB prompt no longer costs
 * ~1 GB. Exact, not approximate: the prefix ends right before an ASCII whitespace run, and
 *  - sentencepiece maps whitespace to U+2581 at the start of the next word; when no vocabulary
 *    piece has U+2581 after its first character (true of T5's spiece.model: split_by_whitespace;
 *    checked at load for every model, tok->words_split), every piece boundary falls
 *    at each U+2581, the Viterbi segmentation splits into independent words, and the prefix's
 *    ids are exactly the first ids of the whole text (remove_extra_whitespaces drops the
 *    whitespace at the cut; the prefix ends in a non-space, so nothing else changes);
 *  - no added token contains ASCII whitespace (checked below), so none straddles the cut, and
 *    their lstrip/rstrip only remove whitespace, which yields no ids here.
 * Texts without whitespace after the first window, and tokenizers whose added tokens contain
 * whitespace or whose pieces span words, are tokenized whole. tests/stage1_tokenizer.c compares both ways. */
#define BOUNDED_FIRST_WINDOW 4096

static int ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Start of the whitespace run at or before p (0 when none): the prefix [0, cut) ends in a
 * non-space character. */
static size_t cut_before_space(const char *text, size_t p) {
    while (p > 0 && !ascii_space(text[p])) p--;
    while (p > 0 && ascii_space(text[p - 1])) p--;
    return p;
}

static int tokenize_bounded(const t5_tokenizer *tok, const char *text, int max_len, int64_t **body, int *n,
                            int *bounded) {
    const size_t len = strlen(text);
    *bounded = 0;
    int can_cut = tok->words_split;
    for (int i = 0; i < tok->n_added && can_cut; i++)
        for (const char *c = tok->added[i].content; *c && can_cut; c++) can_cut = !ascii_space(*c);
    for (size_t window = BOUNDED_FIRST_WINDOW; can_cut && window < len; window *= 4) {
        size_t cut = cut_before_space(text, window);
        if (cut == 0) continue;   /* no whitespace yet: try a larger window */
        if (tokenize_body(tok, text, cut, body, n)) return -1;
        if (*n >= max_len) {
            *bounded = 1;
            return 0;
        }
        free(*body);
    }
    return tokenize_body(tok, text, len, body, n);
}

int t5_tokenize(const t5_tokenizer *tok, const char *text, int max_len, int64_t *ids, int64_t *mask, int *n_raw) {
    return t5_tokenize_counted(tok, text, max_len, ids, mask, n_raw, NULL);
}

void t5_report_length(const char *label, int n_raw, int at_least, int L) {
    if (!label) label = "a text";
    if (n_raw > L && at_least)
        cvx_warn("%s is longer than max_sequence_length %d tokens (%d counted before counting stopped); truncated "
                 "(the rest is ignored, as upstream)", label, L, n_raw);
    else if (n_raw > L)
        cvx_warn("%s is %d tokens long; truncated to max_sequence_length %d (the rest is ignored, as upstream)", label,
                 n_raw, L);
    else
        cvx_debug("%s: %d tokens", label, n_raw);
}

int t5_tokenize_counted(const t5_tokenizer *tok, const char *text, int max_len, int64_t *ids, int64_t *mask,
                        int *n_raw, int *at_least) {
    if (max_len < 1) return cvx_error("max_sequence_length must be at least 1, got %d", max_len);
    int64_t *body;
    int n, bounded;
    if (tokenize_bounded(tok, text, max_len, &body, &n, &bounded)) return -1;
    if (n_raw) *n_raw = bounded ? n + 1 : n + (ends_with_eos(tok, body, n) ? 0 : 1);
    if (at_least) *at_least = bounded;
    if (n + 1 > max_len) n = max_len - 1;   /* room for the EOS (num_special_tokens_to_add = 1) */
    int len = 0;
    for (; len < n; len++) ids[len] = body[len];
    if (!ends_with_eos(tok, ids, len)) ids[len++] = tok->eos_id;
    for (int i = 0; i < max_len; i++) {
        mask[i] = i < len;
        if (i >= len) ids[i] = tok->pad_id;
    }
    free(body);
    return 0;
}
