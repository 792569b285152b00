/* GPT-2-style byte-level BPE as transformers' slow tokenizers implement it (Qwen2Tokenizer; GPT2's
 * differs only in its pre-tokenizer regex), and the added-token splitting every slow tokenizer does
 * first (PreTrainedTokenizer.tokenize), shared with the ByT5 byte tokenizer (byt5.h).
 *
 * Qwen2Tokenizer.tokenize(text), reproduced in order:
 *   1. unicodedata.normalize("NFC", text) (prepare_for_tokenization);
 *   2. split on added tokens occurring literally (leftmost, longest first: the Trie's split); an
 *      added token with rstrip / lstrip strips Python whitespace off the next / previous chunk;
 *      empty chunks are dropped;
 *   3. each text chunk: re.findall(PRETOKENIZE_REGEX) with
 *        (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *      (the `regex` module: \s = White_Space, \p{L} / \p{N} = general categories L* / N*, ICU's data);
 *      each pre-token's UTF-8 bytes mapped through GPT-2's bytes_to_unicode alphabet, then bpe():
 *      repeatedly merge every occurrence (left to right) of the adjacent pair of lowest merge rank;
 *   4. tokens -> ids through vocab.json (added tokens through their own ids); a token outside the
 *      vocabulary is the unk token's id, or an error when the tokenizer has none (Qwen2's). */
#ifndef CVX_STAGE1_BPE_H
#define CVX_STAGE1_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "pystr.h"

/* ---- added tokens (any slow tokenizer) ---- */

typedef struct {
    char *content;        /* UTF-8 */
    uint32_t *cp;         /* its code points */
    size_t n;
    int id;
    int lstrip, rstrip;   /* eat the Python whitespace on that side */
    int special;
} tok_added_token;

typedef struct {
    tok_added_token *tok;
    int n;
} tok_added_set;

/* Add one token (the first definition of a content wins, as transformers' dict). -1 + error for an
 * empty content. */
int tok_added_add(tok_added_set *s, const char *content, int id, int lstrip, int rstrip, int special);
/* The added tokens of a tokenizer directory: tokenizer_config.json's "added_tokens_decoder"
 * ({"<id>": {"content", "lstrip", "rstrip", "special", "single_word"}}), else added_tokens.json
 * ({"content": id}); neither file is no added tokens. Each entry checked (id an integer in
 * [0, 2^31), content a non-empty string, single_word false): -1 + one line naming the file. */
int tok_added_load(tok_added_set *s, const char *dir);
/* The same from the texts of those two files (either may be NULL; labels name them). */
int tok_added_parse(tok_added_set *s, const char *config_json, size_t config_len, const char *config_label,
                    const char *added_json, size_t added_len, const char *added_label);
void tok_added_free(tok_added_set *s);
/* id of the added token `content`, -1 if none. */
int tok_added_id(const tok_added_set *s, const char *content);

/* One chunk of a text split on added tokens: code points [start, start + len) of the text, and
 * the added token's index in the set, or -1 for ordinary text. */
typedef struct {
    size_t start, len;
    int added;
} tok_chunk;

/* Step 2 above on text t: *chunks (malloc'ed, *n of them) in text order, empty ones dropped. */
void tok_added_split(const tok_added_set *s, const pystr *t, tok_chunk **chunks, int *n);

/* ---- byte-level BPE ---- */

typedef struct bpe_tokenizer bpe_tokenizer;

/* <dir>/vocab.json + <dir>/merges.txt + the added tokens (tok_added_load) + tokenizer_config.json's
 * unk_token / pad_token (strings or {"content": ...} objects; null = none). Everything checked:
 * a missing file, vocab.json not an object of token -> integer id in [0, 2^31), a merges.txt
 * line that is not two tokens, an unk/pad token that is not in the vocabulary: NULL + one line
 * naming the file (and line or key). */
bpe_tokenizer *bpe_load(const char *dir);
/* The same from file contents in memory (labels name them in messages; config_json may be NULL:
 * no unk, no pad, added tokens from added_json if given). Used by the loader and the fuzzer. */
bpe_tokenizer *bpe_load_memory(const char *vocab_json, size_t vocab_len, const char *merges, size_t merges_len,
                               const char *config_json, size_t config_len, const char *added_json,
                               size_t added_len, const char *label);
void bpe_free(bpe_tokenizer *t);

/* len(tokenizer): the largest id + 1 over vocabulary and added tokens. */
int bpe_vocab_size(const bpe_tokenizer *t);
/* pad token id (-1: none), the id of a token string (vocab or added; -1: none). */
int bpe_pad_id(const bpe_tokenizer *t);
int bpe_token_id(const bpe_tokenizer *t, const char *token);

/* tokenize + convert_tokens_to_ids of UTF-8 text (invalid UTF-8 decoded with U+FFFD, as Python's
 * "replace"): *ids malloc'ed, *n of them. -1 + error when a token is not in the vocabulary and
 * there is no unk token. */
int bpe_encode(const bpe_tokenizer *t, const char *text, int64_t **ids, int *n);
/* The token strings of the same (for tests; *toks[i] malloc'ed, free with bpe_tokens_free). */
int bpe_tokenize(const bpe_tokenizer *t, const char *text, char ***toks, int *n);
void bpe_tokens_free(char **toks, int n);

/* The pre-tokenizer alone: the end of the Qwen2 regex's match starting at c[i] (i < n). */
size_t bpe_qwen2_pretoken_end(const uint32_t *c, size_t n, size_t i);
/* GPT-2's bytes_to_unicode: the code point byte b is written as. */
uint32_t bpe_byte_to_unicode(unsigned b);

#endif
