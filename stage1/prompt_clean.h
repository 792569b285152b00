/* diffusers' WanPipeline prompt cleaning (pipeline_wan.py prompt_clean), as every Wan pipeline
 * runs it on the prompt and the negative prompt before tokenizing:
 *
 *   basic_clean(text)      = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
 *   whitespace_clean(text) = regex.sub(r"\s+", " ", text).strip()
 *   prompt_clean(text)     = whitespace_clean(basic_clean(text))
 *
 * ftfy: stage1/ftfy.c; html.unescape: stage1/html_unescape.c. `regex`'s \s is the Unicode
 * White_Space property (U+00A0 and U+3000 included, U+200B not); strip() is str.strip(). */
#ifndef CVX_STAGE1_PROMPT_CLEAN_H
#define CVX_STAGE1_PROMPT_CLEAN_H

#include <stddef.h>

/* prompt_clean(in): *out is malloc'ed UTF-8 (free() it). Input bytes that are not UTF-8 are read
 * as bytes.decode("utf-8", "replace") would (U+FFFD each). -1 + cvx_error only if ICU fails. */
int wan_prompt_clean(const char *in, char **out);
/* The same on in[0..n) (may hold NUL bytes; U+0000 never survives ftfy). */
int wan_prompt_clean_n(const char *in, size_t n, char **out);

#endif
