/* Python's html.unescape and the HTML5 named character references (html.entities.html5). */
#ifndef CVX_STAGE1_HTML_UNESCAPE_H
#define CVX_STAGE1_HTML_UNESCAPE_H

#include "pystr.h"

/* html.unescape(s), appended to out: numeric references (&#65; &#x41;, ';' optional) with the
 * HTML5 rules for invalid numbers, named references with or without ';' (the longest known
 * prefix when the whole name is not one). One deviation: Python >= 3.11 raises ValueError on a
 * decimal reference of more than 4300 digits; here it is out of range, U+FFFD. */
void html_unescape(const uint32_t *s, size_t n, pystr *out);

/* The UTF-8 replacement of an exact entity name (no '&'; with its ';' if it has one) in
 * html.entities.html5, else NULL. Names are ASCII: any other code point finds nothing. */
const char *html5_entity(const uint32_t *name, size_t n);

#endif
