/* transformers' slow T5Tokenizer, called as CogVideoXPipeline calls it:
 *   tokenizer(prompt, padding="max_length", max_length=L, truncation=True, add_special_tokens=True)
 * i.e. split on literal added tokens, sentencepiece per chunk, EOS, truncate keeping the EOS,
 * right-pad with the pad id, attention mask. Golden README section 1 spells out each step. */
#ifndef CVX_STAGE1_T5_TOKENIZER_H
#define CVX_STAGE1_T5_TOKENIZER_H

#include <stdint.h>

#include "spm.h"

/* One added token of the tokenizer (<pad>, </s>, <unk>, <extra_id_N>, ...). */
typedef struct {
    char *content;
    int id;
    int lstrip, rstrip;   /* eat the whitespace on that side (the extra ids do) */
} t5_added_token;

typedef struct {
    t5_spm *sp;
    t5_added_token *added;
    int n_added;
    int eos_id, pad_id;
    int vocab_size;       /* sentencepiece pieces + extra ids (len(tokenizer)) */
    int words_split;      /* no piece holds U+2581 after its first character: long texts may be
                             tokenized by prefixes (tokenizer.c, "bounded work") */
} t5_tokenizer;

/* Load <dir>/spiece.model and the added tokens from <dir>/tokenizer_config.json
 * ("added_tokens_decoder"), falling back to T5Tokenizer's defaults (extra_ids = 100,
 * <extra_id_N> = pieces + extra_ids - 1 - N) when the file does not list them. */
int t5_tokenizer_load(t5_tokenizer *tok, const char *dir);
void t5_tokenizer_free(t5_tokenizer *tok);

/* Token ids before truncation/padding, EOS appended (unless already last, as upstream).
 * *ids is malloc'ed; *n its length. */
int t5_tokenize_raw(const t5_tokenizer *tok, const char *text, int64_t **ids, int *n);

/* ids, mask: [max_len]. *n_raw (may be NULL) gets the untruncated length so callers can warn
 * about truncation; for a long text only a prefix is tokenized (bounded memory, the same ids)
 * and *n_raw is then a lower bound that is still > max_len. */
int t5_tokenize(const t5_tokenizer *tok, const char *text, int max_len, int64_t *ids, int64_t *mask, int *n_raw);
/* The same; *at_least (may be NULL) = 1 when *n_raw is that lower bound (only a prefix was
 * tokenized), 0 when it is the exact count. */
int t5_tokenize_counted(const t5_tokenizer *tok, const char *text, int max_len, int64_t *ids, int64_t *mask,
                        int *n_raw, int *at_least);
/* The truncation warning for a text of n_raw tokens (at_least: a lower bound) over max_len, naming
 * `label` ("the prompt on line 3"); a debug line with the count otherwise. A lower bound is said
 * as one ("longer than ... (K counted before counting stopped)"), not as the length (issue 21). */
void t5_report_length(const char *label, int n_raw, int at_least, int max_len);

#endif
