/* ftfy 6.3.1 ("fixes text for you") in C: fix_text with the default TextFixerConfig, as diffusers'
 * WanPipeline runs it on every prompt. What is covered and how: stage1/ftfy.c. */
#ifndef CVX_STAGE1_FTFY_H
#define CVX_STAGE1_FTFY_H

#include "pystr.h"

/* ftfy.fix_text(text): appends the fixed text to out. -1 + cvx_error only if ICU fails. */
int ftfy_fix_text(const uint32_t *text, size_t n, pystr *out);

/* Pieces, exposed for tests. */
/* ftfy.badness.is_bad(text): BADNESS_RE finds a likely mojibake sequence. */
int ftfy_is_bad(const uint32_t *text, size_t n);
/* ftfy.fix_encoding(text), appended to out. */
void ftfy_fix_encoding(const uint32_t *text, size_t n, pystr *out);
/* ftfy.fixes.unescape_html(text), appended to out. */
void ftfy_unescape_html(const uint32_t *text, size_t n, pystr *out);
/* The end of regex `which`'s match at text[p] (Python's re.match at p), or -1: through the
 * generated first-character index, or with reference = 1 by trying every alternative in order
 * (the two must agree). */
enum { FTFY_RE_BADNESS, FTFY_RE_ALTERED_UTF8, FTFY_RE_LOSSY_UTF8 };
long ftfy_match_at(int which, const uint32_t *text, size_t n, size_t p, int reference);

#endif
