/* Writing GGUF v3 files (gguf.h): the layout gguf-py's GGUFWriter and ggml's gguf_write produce —
 * header, key/values in the order added, tensor infos (ne innermost first, offsets relative to the
 * data section, each a multiple of 32), zero padding to 32, the data. Tensor data is produced one
 * tensor at a time at write time (a quantized model never has to exist whole in memory) and the
 * file is written to a temp next to the destination and renamed over it when complete. */
#include "gguf.h"
#include "error.h"
#include "fileio.h"
#include "quant.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { ALIGN = 32, MAX_NAME = 127 /* GGML_MAX_NAME - 1 as city96's lcpp.patch sets it (128) for image models */ };

typedef struct {
    char *key;
    cvx_gguf_type type, arr_type;
    char *str;
    unsigned char *raw;   /* little-endian scalar / array bytes */
    size_t raw_len;
    uint64_t count;
} w_kv;

typedef struct {
    char *name;
    int ndim;
    int64_t shape[CVX_MAX_DIMS];
    cvx_dtype type;
    const void *data;     /* NULL: the fill callback produces it */
    uint64_t nbytes, offset;
} w_tensor;

struct cvx_gguf_writer {
    w_kv *kv;
    int n_kv;
    w_tensor *t;
    int n_t;
    uint64_t data_size;
};

cvx_gguf_writer *cvx_ggufw_new(void) { return cvx_calloc(1, sizeof(cvx_gguf_writer)); }

void cvx_ggufw_free(cvx_gguf_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n_kv; i++) free(w->kv[i].key), free(w->kv[i].str), free(w->kv[i].raw);
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv), free(w->t), free(w);
}

static w_kv *new_kv(cvx_gguf_writer *w, const char *key, cvx_gguf_type type) {
    for (int i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) {
            cvx_error("gguf writer: key '%s' added twice", key);
            return NULL;
        }
    w->kv = cvx_realloc(w->kv, sizeof *w->kv * (size_t)(w->n_kv + 1));
    w_kv *kv = &w->kv[w->n_kv++];
    memset(kv, 0, sizeof *kv);
    kv->key = strdup(key);
    kv->type = type;
    kv->count = 1;
    return kv;
}

static void put_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

int cvx_ggufw_kv_str(cvx_gguf_writer *w, const char *key, const char *value) {
    w_kv *kv = new_kv(w, key, CVX_GGUF_STRING);
    if (!kv) return -1;
    kv->str = strdup(value);
    return 0;
}

int cvx_ggufw_kv_u32(cvx_gguf_writer *w, const char *key, uint32_t value) {
    w_kv *kv = new_kv(w, key, CVX_GGUF_U32);
    if (!kv) return -1;
    kv->raw = cvx_malloc(4), kv->raw_len = 4;
    put_le(kv->raw, value, 4);
    return 0;
}

int cvx_ggufw_kv_arr_i32(cvx_gguf_writer *w, const char *key, const int32_t *v, int n) {
    w_kv *kv = new_kv(w, key, CVX_GGUF_ARRAY);
    if (!kv) return -1;
    kv->arr_type = CVX_GGUF_I32, kv->count = (uint64_t)n;
    kv->raw = cvx_malloc((size_t)n * 4 + 1), kv->raw_len = (size_t)n * 4;
    for (int i = 0; i < n; i++) put_le(kv->raw + 4 * i, (uint32_t)v[i], 4);
    return 0;
}

int cvx_ggufw_tensor(cvx_gguf_writer *w, const char *name, int ndim, const int64_t *shape, cvx_dtype type,
                     const void *data) {
    char sh[160];
    if (strlen(name) > MAX_NAME)
        return cvx_error("gguf writer: tensor name '%s' is %zu bytes, ggml (city96's GGML_MAX_NAME) reads at most %d", name,
                         strlen(name), MAX_NAME);
    if (!cvx_quant_of(type))
        return cvx_error("gguf writer: tensor '%s': dtype %s is not a ggml type", name, cvx_dtype_name(type));
    if (ndim < 1 || ndim > CVX_MAX_DIMS)
        return cvx_error("gguf writer: tensor '%s' has %d dims, expected 1..%d", name, ndim, CVX_MAX_DIMS);
    uint64_t numel = 1, nbytes;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1) return cvx_error("gguf writer: tensor '%s' has a dimension %lld", name, (long long)shape[d]);
        numel *= (uint64_t)shape[d];
    }
    if (shape[ndim - 1] % cvx_dtype_block(type) || cvx_dtype_nbytes(type, numel, &nbytes))
        return cvx_error("gguf writer: tensor '%s' %s: rows of %lld values are not whole %s blocks of %d", name,
                         cvx_shape_str(ndim, shape, sh, sizeof sh), (long long)shape[ndim - 1], cvx_dtype_name(type),
                         cvx_dtype_block(type));
    for (int i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return cvx_error("gguf writer: tensor '%s' added twice", name);
    w->t = cvx_realloc(w->t, sizeof *w->t * (size_t)(w->n_t + 1));
    w_tensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    t->type = type;
    t->data = data;
    t->nbytes = nbytes;
    t->offset = w->data_size;
    w->data_size += (nbytes + ALIGN - 1) / ALIGN * ALIGN;
    return w->n_t++;
}

int cvx_ggufw_count(const cvx_gguf_writer *w) { return w->n_t; }

/* ---- serialising ---- */

typedef struct {
    unsigned char *p;
    size_t n, cap;
} buf;

static void b_add(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = cvx_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void b_le(buf *b, uint64_t v, int n) {
    unsigned char t[8];
    put_le(t, v, n);
    b_add(b, t, (size_t)n);
}
static void b_str(buf *b, const char *s) {
    b_le(b, strlen(s), 8);
    b_add(b, s, strlen(s));
}

static int write_all(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n ? 0 : -1; }

int cvx_ggufw_write(cvx_gguf_writer *w, const char *path, cvx_ggufw_fill_fn fill, void *user) {
    buf h = {0};
    b_add(&h, "GGUF", 4);
    b_le(&h, 3, 4);
    b_le(&h, (uint64_t)w->n_t, 8);
    b_le(&h, (uint64_t)w->n_kv, 8);
    for (int i = 0; i < w->n_kv; i++) {
        const w_kv *kv = &w->kv[i];
        b_str(&h, kv->key);
        b_le(&h, kv->type, 4);
        if (kv->type == CVX_GGUF_STRING) {
            b_str(&h, kv->str);
        } else if (kv->type == CVX_GGUF_ARRAY) {
            b_le(&h, kv->arr_type, 4);
            b_le(&h, kv->count, 8);
            b_add(&h, kv->raw, kv->raw_len);
        } else {
            b_add(&h, kv->raw, kv->raw_len);
        }
    }
    for (int i = 0; i < w->n_t; i++) {
        const w_tensor *t = &w->t[i];
        b_str(&h, t->name);
        b_le(&h, (uint64_t)t->ndim, 4);
        for (int d = t->ndim - 1; d >= 0; d--) b_le(&h, (uint64_t)t->shape[d], 8);   /* ne[0] innermost */
        b_le(&h, cvx_quant_of(t->type)->ggml_type, 4);
        b_le(&h, t->offset, 8);
    }
    while (h.n % ALIGN) b_le(&h, 0, 1);

    char tmp[4200];
    int fd = cvx_temp_create(path, tmp, sizeof tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd), cvx_temp_discard(tmp), cvx_error("%s: cannot write: %s", path, strerror(errno));
        free(h.p);
        return -1;
    }
    int rc = write_all(f, h.p, h.n) ? cvx_error("%s: write failed: %s", path, strerror(errno)) : 0;
    free(h.p);
    static const unsigned char zeros[ALIGN] = {0};
    for (int i = 0; i < w->n_t && !rc; i++) {
        w_tensor *t = &w->t[i];
        void *owned = NULL;
        const void *data = t->data;
        if (!data) {
            if (!fill) {
                rc = cvx_error("gguf writer: tensor '%s' has no data and no fill callback", t->name);
                break;
            }
            owned = cvx_malloc(t->nbytes ? t->nbytes : 1);
            if ((rc = fill(user, i, owned, t->nbytes))) {
                free(owned);
                break;
            }
            data = owned;
        }
        size_t pad = (size_t)((ALIGN - t->nbytes % ALIGN) % ALIGN);
        if (write_all(f, data, t->nbytes) || write_all(f, zeros, pad))
            rc = cvx_error("%s: write failed: %s", path, strerror(errno));
        free(owned);
    }
    if (!rc && (fflush(f) != 0 || fsync(fileno(f)) != 0)) rc = cvx_error("%s: write failed: %s", path, strerror(errno));
    if (fclose(f) != 0 && !rc) rc = cvx_error("%s: write failed", path);
    if (rc) {
        cvx_temp_discard(tmp);
        return -1;
    }
    return cvx_commit_file(tmp, path);
}
