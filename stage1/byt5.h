/* transformers' ByT5Tokenizer (slow), as HunyuanVideo-1.5 calls it for its glyph text:
 *   tokenizer(text, padding="max_length", max_length=L, truncation=True, add_special_tokens=True)
 *   1. split on added tokens occurring literally (bpe.h's tok_added_split: <pad>, </s>, <unk> strip
 *      the whitespace around them; <extra_id_N>, and the pipeline's <color-N> / <xx-font-N>);
 *   2. every other chunk: its UTF-8 bytes, id = byte + 3 (after pad 0, eos 1, unk 2);
 *   3. truncation keeps the first L - 1 ids (room for the EOS), then EOS appended unless the ids
 *      already end with it (_add_eos_if_not_present);
 *   4. right-padded with the pad id; mask 1 on the real ids. */
#ifndef CVX_STAGE1_BYT5_H
#define CVX_STAGE1_BYT5_H

#include <stdint.h>

#include "bpe.h"

#define BYT5_OFFSET 3   /* ids of bytes start after <pad>, </s>, <unk> */

typedef struct {
    tok_added_set added;
    int pad_id, eos_id;
    int vocab_size;      /* len(tokenizer): 3 + 256 + extra ids + added tokens (the largest id + 1) */
} byt5_tokenizer;

/* The added tokens of <dir> (tokenizer_config.json's added_tokens_decoder, else added_tokens.json),
 * eos_token / pad_token from tokenizer_config.json (defaults "</s>", "<pad>"), checked: -1 + one line
 * naming the file when a token is missing or the special ids are not ByT5's (pad 0, eos 1). */
int byt5_tokenizer_load(byt5_tokenizer *t, const char *dir);
void byt5_tokenizer_free(byt5_tokenizer *t);

/* Ids before truncation and padding, EOS included (*ids malloc'ed, *n of them). */
int byt5_tokenize_raw(const byt5_tokenizer *t, const char *text, int64_t **ids, int *n);
/* ids, mask: [max_len]; *n_raw (may be NULL): the untruncated length. */
int byt5_tokenize(const byt5_tokenizer *t, const char *text, int max_len, int64_t *ids, int64_t *mask, int *n_raw);

#endif
