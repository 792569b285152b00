/* Glyph text extraction and its ByT5 embeddings for HunyuanVideo-1.5; see glyph.h. */
#include "glyph.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "pystr.h"

/* The end (after the closing quote) of `open (.*?) close` at c[i] == open, or 0 when the closing
 * quote does not come before a newline or the end ('.' does not match "\n"). */
static size_t quoted_end(const pystr *s, size_t i, uint32_t close) {
    for (size_t j = i + 1; j < s->n && s->c[j] != '\n'; j++)
        if (s->c[j] == close) return j + 1;
    return 0;
}

char *hv15_extract_glyph_texts(const char *prompt) {
    pystr s = {0}, out = {0};
    pystr_from_utf8(&s, prompt, strlen(prompt));
    size_t *start = NULL, *len = NULL;
    int n = 0;
    for (size_t i = 0; i < s.n;) {
        size_t e = 0;
        if (s.c[i] == '"') e = quoted_end(&s, i, '"');
        if (!e && s.c[i] == 0x201c) e = quoted_end(&s, i, 0x201d);   /* “ ... ” */
        if (!e) {
            i++;
            continue;
        }
        start = cvx_realloc(start, (size_t)(n + 1) * sizeof *start);
        len = cvx_realloc(len, (size_t)(n + 1) * sizeof *len);
        start[n] = i + 1, len[n] = e - i - 2;
        n++;
        i = e;
    }
    if (!n) {
        pystr_free(&s);
        return NULL;
    }
    static const uint32_t pre[] = {'T', 'e', 'x', 't', ' ', '"'}, post[] = {'"', '.', ' '};
    for (int k = 0; k < n; k++) {
        int dup = 0;   /* dict.fromkeys keeps the first occurrence (only when more than one match) */
        for (int j = 0; j < k && !dup; j++)
            dup = len[j] == len[k] && !memcmp(s.c + start[j], s.c + start[k], len[k] * sizeof *s.c);
        if (dup) continue;
        pystr_append(&out, pre, 6);
        pystr_append(&out, s.c + start[k], len[k]);
        pystr_append(&out, post, 3);
    }
    char *r = pystr_to_utf8(out.c, out.n, NULL);
    free(start), free(len);
    pystr_free(&s), pystr_free(&out);
    return r;
}

int hv15_byt5_prompt_embeds(const t5_model *m, const byt5_tokenizer *t, const char *prompt, float *embeds,
                            int64_t *mask) {
    enum { L = HV15_BYT5_MAX_LENGTH };
    const int D = m->cfg.d_model;
    char *glyph = hv15_extract_glyph_texts(prompt ? prompt : "");
    if (!glyph) {
        memset(embeds, 0, sizeof(float) * (size_t)L * D);
        memset(mask, 0, sizeof(int64_t) * L);
        return 0;
    }
    int64_t ids[L];
    int rc = byt5_tokenize(t, glyph, L, ids, mask, NULL);
    free(glyph);
    if (!rc) rc = umt5_encode(m, ids, mask, 1, L, embeds, NULL);
    return rc;
}
