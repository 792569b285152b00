/* ByT5Tokenizer; see byt5.h. */
#include "byt5.h"

#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fileio.h"

/* tokenizer_config.json's `key`: a string, {"content": ...}, or absent (def). */
static int special_name(const cvx_config *c, const char *key, const char *def, const char **out) {
    json_object *v, *cv;
    *out = def;
    if (!c || !json_object_object_get_ex(c->root, key, &v) || json_object_is_type(v, json_type_null)) return 0;
    if (json_object_is_type(v, json_type_string)) *out = json_object_get_string(v);
    else if (json_object_is_type(v, json_type_object) && json_object_object_get_ex(v, "content", &cv) &&
             json_object_is_type(cv, json_type_string))
        *out = json_object_get_string(cv);
    else
        return cvx_error("%s: key '%s' must be a string or an object with 'content'", c->path, key);
    return 0;
}

int byt5_tokenizer_load(byt5_tokenizer *t, const char *dir) {
    memset(t, 0, sizeof *t);
    char path[4096];
    if (cvx_path_join(path, sizeof path, dir, "tokenizer_config.json")) return cvx_error("%s: path too long", dir);
    if (!cvx_is_dir(dir)) return cvx_error("%s: tokenizer directory not found", dir);
    cvx_config c = {0};
    const int have = cvx_is_file(path);
    if (have && cvx_config_load(&c, path)) return -1;
    const char *eos, *pad;
    int rc = special_name(have ? &c : NULL, "eos_token", "</s>", &eos) ||
             special_name(have ? &c : NULL, "pad_token", "<pad>", &pad) || tok_added_load(&t->added, dir);
    if (!rc) {
        /* ByT5Tokenizer.__init__ fixes them: {0: pad, 1: eos, 2: unk}, lstrip/rstrip on all three */
        if (!t->added.n) {
            tok_added_add(&t->added, "<pad>", 0, 1, 1, 1);
            tok_added_add(&t->added, "</s>", 1, 1, 1, 1);
            tok_added_add(&t->added, "<unk>", 2, 1, 1, 1);
        }
        t->eos_id = tok_added_id(&t->added, eos);
        t->pad_id = tok_added_id(&t->added, pad);
        if (t->eos_id != 1 || t->pad_id != 0)
            rc = cvx_error("%s: ByT5 needs eos_token '%s' with id 1 and pad_token '%s' with id 0 (got %d, %d)", path,
                           eos, pad, t->eos_id, t->pad_id);
    }
    t->vocab_size = BYT5_OFFSET + 256;
    for (int i = 0; i < t->added.n; i++)
        if (t->added.tok[i].id >= t->vocab_size) t->vocab_size = t->added.tok[i].id + 1;
    if (have) cvx_config_free(&c);
    if (rc) byt5_tokenizer_free(t);
    return rc ? -1 : 0;
}

void byt5_tokenizer_free(byt5_tokenizer *t) {
    tok_added_free(&t->added);
    memset(t, 0, sizeof *t);
}

/* tokenize + convert_tokens_to_ids: the ids without the EOS, room for one more. */
static int64_t *token_ids(const byt5_tokenizer *t, const char *text, int *n) {
    pystr s = {0};
    pystr_from_utf8(&s, text, strlen(text));
    tok_chunk *ch;
    int nch, k = 0;
    tok_added_split(&t->added, &s, &ch, &nch);
    size_t cap = 1;
    for (int i = 0; i < nch; i++) cap += 4 * ch[i].len;
    int64_t *out = cvx_malloc(cap * sizeof *out);
    for (int i = 0; i < nch; i++) {
        if (ch[i].added >= 0) {
            out[k++] = t->added.tok[ch[i].added].id;
            continue;
        }
        size_t nb;
        char *bytes = pystr_to_utf8(s.c + ch[i].start, ch[i].len, &nb);
        for (size_t b = 0; b < nb; b++) out[k++] = (unsigned char)bytes[b] + BYT5_OFFSET;
        free(bytes);
    }
    free(ch);
    pystr_free(&s);
    *n = k;
    return out;
}

int byt5_tokenize_raw(const byt5_tokenizer *t, const char *text, int64_t **ids, int *n) {
    int k;
    int64_t *out = token_ids(t, text, &k);
    if (k == 0 || out[k - 1] != t->eos_id) out[k++] = t->eos_id;   /* _add_eos_if_not_present */
    *ids = out;
    *n = k;
    return 0;
}

int byt5_tokenize(const byt5_tokenizer *t, const char *text, int max_len, int64_t *ids, int64_t *mask, int *n_raw) {
    if (max_len < 1) return cvx_error("byt5 tokenizer: max_length %d must be at least 1", max_len);
    int n;
    int64_t *all = token_ids(t, text, &n);
    if (n_raw) *n_raw = n + (n == 0 || all[n - 1] != t->eos_id);
    /* prepare_for_model: truncate to leave room for the one special token, then add the EOS */
    int k = n < max_len - 1 ? n : max_len - 1;
    memcpy(ids, all, (size_t)k * sizeof *ids);
    if (k == 0 || ids[k - 1] != t->eos_id) ids[k++] = t->eos_id;
    for (int i = 0; i < max_len; i++) {
        mask[i] = i < k;
        if (i >= k) ids[i] = t->pad_id;
    }
    free(all);
    return 0;
}
