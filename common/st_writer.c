/* safetensors writer: tensors and metadata collected in memory, written to a temp file in the
 * target directory and renamed into place, so a crash never leaves a half-written file. */
#include "error.h"
#include "fileio.h"
#include "safetensors.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char *name;
    cvx_dtype dtype;
    int ndim;
    int64_t shape[CVX_MAX_DIMS];
    void *data;
    size_t nbytes;
} stw_entry;

struct cvx_st_writer {
    stw_entry *entries;
    int count;
    json_object *meta;
};

cvx_st_writer *cvx_stw_new(void) {
    cvx_st_writer *w = cvx_calloc(1, sizeof *w);
    w->meta = json_object_new_object();
    return w;
}

void cvx_stw_free(cvx_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->count; i++) { free(w->entries[i].name); free(w->entries[i].data); }
    free(w->entries);
    json_object_put(w->meta);
    free(w);
}

static stw_entry *new_entry(cvx_st_writer *w, const char *name, cvx_dtype dtype, int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > CVX_MAX_DIMS) { cvx_error("tensor '%s': %d dimensions not supported", name, ndim); return NULL; }
    if (!cvx_dtype_is_safetensors(dtype)) {
        cvx_error("tensor '%s': dtype %s cannot be stored in safetensors", name, cvx_dtype_name(dtype));
        return NULL;
    }
    for (int i = 0; i < w->count; i++)
        if (strcmp(w->entries[i].name, name) == 0) { cvx_error("tensor '%s' added twice", name); return NULL; }
    w->entries = cvx_realloc(w->entries, sizeof(stw_entry) * (size_t)(w->count + 1));
    stw_entry *e = &w->entries[w->count++];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    e->dtype = dtype;
    e->ndim = ndim;
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) { e->shape[i] = shape[i]; numel *= (size_t)shape[i]; }
    e->nbytes = numel * cvx_dtype_size(dtype);
    e->data = cvx_malloc(e->nbytes);
    return e;
}

int cvx_stw_add(cvx_st_writer *w, const char *name, cvx_dtype dtype, int ndim, const int64_t *shape,
                const void *data) {
    stw_entry *e = new_entry(w, name, dtype, ndim, shape);
    if (!e) return -1;
    memcpy(e->data, data, e->nbytes);
    return 0;
}

int cvx_stw_add_f32(cvx_st_writer *w, const char *name, cvx_dtype store, int ndim, const int64_t *shape,
                    const float *data) {
    if (store != CVX_F32 && store != CVX_BF16)
        return cvx_error("tensor '%s': can store f32 data as F32 or BF16, not %s", name, cvx_dtype_name(store));
    stw_entry *e = new_entry(w, name, store, ndim, shape);
    if (!e) return -1;
    size_t n = e->nbytes / cvx_dtype_size(store);
    if (store == CVX_F32) memcpy(e->data, data, e->nbytes);
    else cvx_f32_to_bf16_n(data, e->data, n);
    return 0;
}

int cvx_stw_seal(cvx_st_writer *w, const char *key) {
    const int nt = w->count, nm = json_object_object_length(w->meta);
    cvx_seal_tensor *t = cvx_calloc((size_t)nt + 1, sizeof *t);
    cvx_seal_meta *m = cvx_calloc((size_t)nm + 1, sizeof *m);
    for (int i = 0; i < nt; i++) {
        const stw_entry *e = &w->entries[i];
        t[i] = (cvx_seal_tensor){e->name, e->dtype, e->ndim, e->shape, e->data, e->nbytes};
    }
    int k = 0;
    json_object_object_foreach(w->meta, mk, mv) m[k++] = (cvx_seal_meta){mk, json_object_get_string(mv)};
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)cvx_seal_hash(t, nt, m, k, key));
    free(t), free(m);
    return cvx_stw_metadata(w, key, hex);
}

int cvx_stw_metadata(cvx_st_writer *w, const char *key, const char *value) {
    json_object_object_add(w->meta, key, json_object_new_string(value));
    return 0;
}

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

int cvx_stw_write_temp(cvx_st_writer *w, const char *path, char *tmp, size_t tmp_size) {
    json_object *hdr = json_object_new_object();
    if (json_object_object_length(w->meta) > 0)
        json_object_object_add(hdr, "__metadata__", json_object_get(w->meta));
    uint64_t off = 0;
    for (int i = 0; i < w->count; i++) {
        stw_entry *e = &w->entries[i];
        json_object *o = json_object_new_object(), *shape = json_object_new_array(), *offs = json_object_new_array();
        for (int d = 0; d < e->ndim; d++) json_object_array_add(shape, json_object_new_int64(e->shape[d]));
        json_object_array_add(offs, json_object_new_int64((int64_t)off));
        json_object_array_add(offs, json_object_new_int64((int64_t)(off + e->nbytes)));
        json_object_object_add(o, "dtype", json_object_new_string(cvx_dtype_name(e->dtype)));
        json_object_object_add(o, "shape", shape);
        json_object_object_add(o, "data_offsets", offs);
        json_object_object_add(hdr, e->name, o);
        off += e->nbytes;
    }
    const char *js = json_object_to_json_string_ext(hdr, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t jlen = strlen(js), padded = (jlen + 7) / 8 * 8;
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)((uint64_t)padded >> (8 * i));

    int fd = cvx_temp_create(path, tmp, tmp_size);   /* O_EXCL|O_NOFOLLOW, unpredictable name */
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        if (fd >= 0) { close(fd); cvx_temp_discard(tmp); cvx_error("%s: cannot write: %s", path, strerror(errno)); }
        json_object_put(hdr);
        return -1;
    }
    int rc = write_all(f, lenbuf, 8) | write_all(f, js, jlen);
    for (size_t i = jlen; i < padded && !rc; i++) rc = write_all(f, " ", 1);
    for (int i = 0; i < w->count && !rc; i++) rc = write_all(f, w->entries[i].data, w->entries[i].nbytes);
    json_object_put(hdr);
    if (rc || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        int e = errno;
        fclose(f);
        cvx_temp_discard(tmp);
        return cvx_error("%s: write failed: %s", path, strerror(e));
    }
    if (fclose(f) != 0) { cvx_temp_discard(tmp); return cvx_error("%s: write failed", path); }
    return 0;
}

int cvx_stw_write(cvx_st_writer *w, const char *path) {
    char tmp[4200];
    if (cvx_stw_write_temp(w, path, tmp, sizeof tmp)) return -1;
    return cvx_commit_file(tmp, path);
}

int cvx_outset_stw(cvx_outset *s, cvx_st_writer *w, const char *final_path) {
    char tmp[4200];
    if (cvx_stw_write_temp(w, final_path, tmp, sizeof tmp)) return -1;
    return cvx_outset_add(s, tmp, final_path);
}
