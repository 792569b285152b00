/* libFuzzer target: the byte-level BPE tokenizer (stage1/bpe.c) on arbitrary bytes.
 *
 * 1. The whole input as a prompt through a fixed tokenizer (the 256 byte symbols, a few merges, two
 *    added tokens): it must never fail, and the tokens mapped back through bytes_to_unicode must
 *    give exactly the UTF-8 of NFC(input decoded with U+FFFD): nothing dropped, duplicated or
 *    reordered by the added-token split, the Qwen2 pre-tokenizer or the merges. The pre-tokenizer
 *    on its own must always advance and cover the text.
 * 2. The input split at its first three NUL bytes into vocab.json, merges.txt, tokenizer_config.json
 *    and a prompt: the loader either refuses with a message or gives a tokenizer that tokenizes the
 *    prompt into ids below len(tokenizer) (or refuses a token outside its vocabulary). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "stage1/bpe.h"
#include "stage1/pystr.h"

static bpe_tokenizer *g_fixed;
static uint32_t g_inv[0x200];   /* bytes_to_unicode inverse (code points < 0x144) */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    cvx_set_verbosity(0);
    /* vocab: every byte symbol (ids 0..255) and the merge results */
    char *vocab = malloc(16384), *p = vocab;
    p += sprintf(p, "{");
    for (unsigned b = 0; b < 256; b++) {
        const uint32_t c = bpe_byte_to_unicode(b);
        g_inv[c] = b;
        char u[8];
        size_t n;
        char *s = pystr_to_utf8(&c, 1, &n);
        snprintf(u, sizeof u, "%s", s);
        free(s);
        if (c == '"' || c == '\\') p += sprintf(p, "\"\\%s\": %u, ", u, b);
        else p += sprintf(p, "\"%s\": %u, ", u, b);
    }
    p += sprintf(p, "\"\xc4\xa0t\": 256, \"he\": 257, \"\xc4\xa0the\": 258, \"in\": 259, \"\xc4\xa0\xc4\xa0\": 260}");
    static const char merges[] = "#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\ni n\n\xc4\xa0 \xc4\xa0\n";
    static const char config[] = "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<|endoftext|>\", \"special\": true},"
                                 " \"301\": {\"content\": \"<|im_end|>\", \"special\": true}}, \"unk_token\": null}";
    g_fixed = bpe_load_memory(vocab, strlen(vocab), merges, strlen(merges), config, strlen(config), NULL, 0, "fixed");
    free(vocab);
    if (!g_fixed) {
        fprintf(stderr, "fuzz_bpe: fixed tokenizer: %s\n", cvx_last_error());
        abort();
    }
    return 0;
}

/* The tokens of the fixed tokenizer back to bytes: added tokens literally, others via the inverse
 * byte alphabet. */
static char *detokenize(char **toks, int n, size_t *len) {
    size_t cap = 16, k = 0;
    char *out = malloc(cap);
    for (int i = 0; i < n; i++) {
        const int id = bpe_token_id(g_fixed, toks[i]);
        if (id >= 300) {
            const size_t l = strlen(toks[i]);
            while (k + l + 1 > cap) out = realloc(out, cap *= 2);
            memcpy(out + k, toks[i], l);
            k += l;
            continue;
        }
        pystr s = {0};
        pystr_from_utf8(&s, toks[i], strlen(toks[i]));
        for (size_t j = 0; j < s.n; j++) {
            if (s.c[j] >= 0x200) abort();   /* outside the byte alphabet */
            if (k + 2 > cap) out = realloc(out, cap *= 2);
            out[k++] = (char)g_inv[s.c[j]];
        }
        pystr_free(&s);
    }
    *len = k;
    return out;
}

static void check_fixed(const char *text) {
    char **toks;
    int n;
    if (bpe_tokenize(g_fixed, text, &toks, &n)) abort();   /* every byte is in the vocabulary */
    size_t got_n;
    char *got = detokenize(toks, n, &got_n);
    pystr s = {0};
    pystr_from_utf8(&s, text, strlen(text));
    if (pystr_nfc(&s)) abort();
    size_t want_n;
    char *want = pystr_to_utf8(s.c, s.n, &want_n);
    if (got_n != want_n || memcmp(got, want, got_n)) abort();
    /* the pre-tokenizer alone covers the text in advancing steps */
    for (size_t i = 0; i < s.n;) {
        const size_t e = bpe_qwen2_pretoken_end(s.c, s.n, i);
        if (e <= i || e > s.n) abort();
        i = e;
    }
    int64_t *ids;
    int ni;
    if (bpe_encode(g_fixed, text, &ids, &ni) || ni != n) abort();
    free(ids);
    free(got), free(want);
    pystr_free(&s);
    bpe_tokens_free(toks, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;   /* a C string: up to the first NUL */
    check_fixed(text);
    /* the parsers: vocab \0 merges \0 config \0 prompt (the prompt may hold more NULs: cut there) */
    const char *part[4] = {(const char *)data, NULL, NULL, NULL};
    size_t len[4] = {size, 0, 0, 0};
    int k = 1;
    for (; k < 4; k++) {
        const char *z = memchr(part[k - 1], 0, len[k - 1]);
        if (!z) break;
        part[k] = z + 1;
        len[k] = len[k - 1] - (size_t)(part[k] - part[k - 1]);
        len[k - 1] = (size_t)(z - part[k - 1]);
    }
    if (k >= 2) {
        bpe_tokenizer *t = bpe_load_memory(part[0], len[0], part[1], len[1], k >= 3 ? part[2] : NULL,
                                           k >= 3 ? len[2] : 0, NULL, 0, "fuzz");
        if (!t) {
            if (!cvx_last_error()[0]) abort();   /* a refusal says why */
        } else {
            int64_t *ids;
            int n;
            char *prompt = k == 4 ? strndup(part[3], len[3]) : NULL;   /* up to a further NUL */
            if (prompt && !bpe_encode(t, prompt, &ids, &n)) {
                for (int i = 0; i < n; i++)
                    if (ids[i] < 0 || ids[i] >= bpe_vocab_size(t)) abort();
                free(ids);
            }
            free(prompt);
            bpe_free(t);
        }
    }
    free(text);
    return 0;
}
