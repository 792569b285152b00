/* HunyuanVideo-1.5's second text encoder input: the quoted ("glyph") text of the prompt, encoded
 * by ByT5 (golden_hv15 README section 2; HunyuanVideo15Pipeline._get_byt5_prompt_embeds). */
#ifndef CVX_STAGE1_GLYPH_H
#define CVX_STAGE1_GLYPH_H

#include <stdint.h>

#include "byt5.h"
#include "t5.h"

#define HV15_BYT5_MAX_LENGTH 256   /* tokenizer_2_max_length */

/* extract_glyph_texts(prompt): re.findall(r"\"(.*?)\"|“(.*?)”", prompt) (non-greedy, '.' not
 * matching "\n"), each match's non-empty group (or ""), de-duplicated keeping first occurrences when
 * there is more than one, joined as 'Text "a". Text "b". '. NULL when nothing matches (Python's
 * None), else a malloc'ed UTF-8 string. */
char *hv15_extract_glyph_texts(const char *prompt);

/* prompt_embeds_2 [256, d_model] and prompt_embeds_mask_2 [256] of one prompt: zeros and a zero
 * mask without glyph text; else ByT5Tokenizer(glyph, max_length 256) and the T5 encoder with that
 * attention mask (rows past the glyph text are the encoder's outputs, not zeroed). */
int hv15_byt5_prompt_embeds(const t5_model *m, const byt5_tokenizer *t, const char *prompt, float *embeds,
                            int64_t *mask);

#endif
