/* safetensors reader (mmap, zero-copy, every header field validated), sharded weights,
 * and the atomic writer. */
#include "safetensors.h"
#include "error.h"
#include "fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Real headers are tens of KB (T5-XXL shard: ~20 KB); 100 MB is the reference library's cap. */
#define CVX_MAX_HEADER (100u << 20)

struct cvx_safetensors {
    char *path;
    const unsigned char *base;   /* whole file image */
    size_t size;
    int mapped;                  /* base is our mmap */
    cvx_tensor *tensors;         /* header order */
    int count;
    int *sorted;                 /* indices sorted by name, for bsearch */
    char **meta_keys, **meta_values;
    int meta_count;
};

const char *cvx_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* Sort records (no global context, so opening files from several threads is safe). */
typedef struct { const cvx_tensor *t; int index; } sort_rec;
static int cmp_by_name(const void *a, const void *b) {
    return strcmp(((const sort_rec *)a)->t->name, ((const sort_rec *)b)->t->name);
}
static int cmp_by_offset(const void *a, const void *b) {
    const cvx_tensor *x = ((const sort_rec *)a)->t, *y = ((const sort_rec *)b)->t;
    return x->data < y->data ? -1 : x->data > y->data ? 1 : 0;
}

/* Parse one tensor entry {"dtype", "shape", "data_offsets"} into t. */
static int parse_entry(cvx_safetensors *st, const char *name, json_object *e, const unsigned char *data,
                       size_t data_size, cvx_tensor *t) {
    const char *p = st->path;
    json_object *jd, *js, *jo;
    if (!json_object_is_type(e, json_type_object))
        return cvx_error("%s: tensor '%s': header entry is not an object", p, name);
    if (!json_object_object_get_ex(e, "dtype", &jd) || !json_object_is_type(jd, json_type_string))
        return cvx_error("%s: tensor '%s': missing or non-string 'dtype'", p, name);
    if (cvx_dtype_parse(json_object_get_string(jd), &t->dtype) != 0)
        return cvx_error("%s: tensor '%s': unknown dtype '%s' (expected F32, F16, BF16, F64, I64, I32, U8, BOOL or F8_E4M3)",
                         p, name, json_object_get_string(jd));
    if (!json_object_object_get_ex(e, "shape", &js) || !json_object_is_type(js, json_type_array))
        return cvx_error("%s: tensor '%s': missing or non-array 'shape'", p, name);
    size_t nd = json_object_array_length(js);
    if (nd > CVX_MAX_DIMS) return cvx_error("%s: tensor '%s': %zu dimensions, at most %d supported", p, name, nd, CVX_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_object *d = json_object_array_get_idx(js, i);
        if (!json_object_is_type(d, json_type_int))
            return cvx_error("%s: tensor '%s': shape entry %zu is not an integer", p, name, i);
        int64_t v = json_object_get_int64(d);
        if (v < 0 || (uint64_t)v > (1ull << 40))
            return cvx_error("%s: tensor '%s': shape entry %zu = %lld out of range", p, name, i, (long long)v);
        t->shape[i] = v;
        if (v != 0 && numel > (UINT64_MAX >> 8) / (uint64_t)v)
            return cvx_error("%s: tensor '%s': element count overflows", p, name);
        numel *= (uint64_t)v;
    }
    t->numel = (int64_t)numel;
    if (!json_object_object_get_ex(e, "data_offsets", &jo) || !json_object_is_type(jo, json_type_array) ||
        json_object_array_length(jo) != 2)
        return cvx_error("%s: tensor '%s': 'data_offsets' must be an array [begin, end]", p, name);
    json_object *jb = json_object_array_get_idx(jo, 0), *je = json_object_array_get_idx(jo, 1);
    if (!json_object_is_type(jb, json_type_int) || !json_object_is_type(je, json_type_int))
        return cvx_error("%s: tensor '%s': data_offsets must be integers", p, name);
    int64_t b = json_object_get_int64(jb), en = json_object_get_int64(je);
    if (b < 0 || en < b || (uint64_t)en > data_size)
        return cvx_error("%s: tensor '%s': data_offsets [%lld, %lld] outside the data section of %zu bytes",
                         p, name, (long long)b, (long long)en, data_size);
    uint64_t want = numel * cvx_dtype_size(t->dtype);
    if ((uint64_t)(en - b) != want) {
        char sb[128];
        return cvx_error("%s: tensor '%s': %lld bytes of data, but shape %s of %s needs %llu", p, name,
                         (long long)(en - b), cvx_shape_str(t->ndim, t->shape, sb, sizeof sb),
                         cvx_dtype_name(t->dtype), (unsigned long long)want);
    }
    t->data = data + b;
    t->nbytes = (size_t)(en - b);
    t->file = st->path;
    return 0;
}

static int parse_metadata(cvx_safetensors *st, json_object *m) {
    if (!json_object_is_type(m, json_type_object))
        return cvx_error("%s: __metadata__ is not an object", st->path);
    int n = json_object_object_length(m), i = 0;
    st->meta_keys = cvx_calloc((size_t)n, sizeof(char *));
    st->meta_values = cvx_calloc((size_t)n, sizeof(char *));
    json_object_object_foreach(m, key, val) {
        if (!json_object_is_type(val, json_type_string))
            return cvx_error("%s: __metadata__ value of '%s' is not a string", st->path, key);
        st->meta_keys[i] = strdup(key);
        st->meta_values[i] = strdup(json_object_get_string(val));
        st->meta_count = ++i;
    }
    return 0;
}

static int parse_header(cvx_safetensors *st) {
    const char *p = st->path;
    if (st->size < 8) return cvx_error("%s: file of %zu bytes is too short for a safetensors header", p, st->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | st->base[i];
    if (n > CVX_MAX_HEADER) return cvx_error("%s: header length %llu exceeds the %u-byte limit", p, (unsigned long long)n, CVX_MAX_HEADER);
    if (n > st->size - 8)
        return cvx_error("%s: header length %llu runs past the end of the %zu-byte file (truncated?)", p,
                         (unsigned long long)n, st->size);
    if (n < 2) return cvx_error("%s: header of %llu bytes is too short", p, (unsigned long long)n);
    const unsigned char *data = st->base + 8 + n;
    size_t data_size = st->size - 8 - (size_t)n;

    json_tokener *tok = json_tokener_new_ex(64);
    json_object *root = json_tokener_parse_ex(tok, (const char *)st->base + 8, (int)n);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t consumed = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!root || jerr != json_tokener_success) {
        if (root) json_object_put(root);
        return cvx_error("%s: header is not valid JSON (%s)", p,
                         jerr == json_tokener_continue ? "unexpected end" : json_tokener_error_desc(jerr));
    }
    for (size_t i = consumed; i < n; i++) {  /* only padding may follow the object */
        unsigned char c = st->base[8 + i];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t' && c != 0) {
            json_object_put(root);
            return cvx_error("%s: trailing bytes after the header JSON", p);
        }
    }
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return cvx_error("%s: header is not a JSON object", p);
    }
    int rc = 0, cap = json_object_object_length(root);
    st->tensors = cvx_calloc((size_t)(cap ? cap : 1), sizeof(cvx_tensor));
    json_object_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if ((rc = parse_metadata(st, val)) != 0) break;
            continue;
        }
        cvx_tensor *t = &st->tensors[st->count];
        t->name = strdup(key);
        st->count++;
        if ((rc = parse_entry(st, key, val, data, data_size, t)) != 0) break;
    }
    json_object_put(root);
    if (rc) return rc;

    /* No two tensors may share bytes. (Duplicate names cannot occur: json-c keeps the last.) */
    int n_t = st->count ? st->count : 1;
    sort_rec *recs = cvx_malloc(sizeof(sort_rec) * (size_t)n_t);
    for (int i = 0; i < st->count; i++) recs[i] = (sort_rec){&st->tensors[i], i};
    qsort(recs, (size_t)st->count, sizeof(sort_rec), cmp_by_offset);
    for (int i = 1; i < st->count; i++) {
        const cvx_tensor *a = recs[i - 1].t, *b = recs[i].t;
        if ((const unsigned char *)a->data + a->nbytes > (const unsigned char *)b->data) {
            rc = cvx_error("%s: tensors '%s' and '%s' overlap in the data section", p, a->name, b->name);
            break;
        }
    }
    qsort(recs, (size_t)st->count, sizeof(sort_rec), cmp_by_name);
    st->sorted = cvx_malloc(sizeof(int) * (size_t)n_t);
    for (int i = 0; i < st->count; i++) st->sorted[i] = recs[i].index;
    free(recs);
    return rc;
}

cvx_safetensors *cvx_st_open_memory(const void *buf, size_t len, const char *label) {
    cvx_safetensors *st = cvx_calloc(1, sizeof *st);
    st->path = strdup(label ? label : "<memory>");
    st->base = buf;
    st->size = len;
    if (parse_header(st) != 0) { cvx_st_close(st); return NULL; }
    return st;
}

cvx_safetensors *cvx_st_open(const char *path) {
    int fd = cvx_open_input(path);   /* a FIFO or device: refused, without blocking */
    if (fd < 0) return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        cvx_error("%s: cannot stat: %s", path, strerror(errno));
        return NULL;
    }
    size_t size = (size_t)sb.st_size;
    void *base = NULL;
    if (size > 0) {
        base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (base == MAP_FAILED) {
            close(fd);
            cvx_error("%s: cannot mmap: %s", path, strerror(errno));
            return NULL;
        }
    }
    close(fd);
    cvx_safetensors *st = cvx_calloc(1, sizeof *st);
    st->path = strdup(path);
    st->base = base;
    st->size = size;
    st->mapped = size > 0;
    if (parse_header(st) != 0) { cvx_st_close(st); return NULL; }
    return st;
}

void cvx_st_close(cvx_safetensors *st) {
    if (!st) return;
    if (st->mapped) munmap((void *)st->base, st->size);
    for (int i = 0; i < st->count; i++) free((char *)st->tensors[i].name);
    for (int i = 0; i < st->meta_count; i++) { free(st->meta_keys[i]); free(st->meta_values[i]); }
    free(st->meta_keys); free(st->meta_values);
    free(st->tensors); free(st->sorted); free(st->path);
    free(st);
}

int cvx_st_count(const cvx_safetensors *st) { return st->count; }
const cvx_tensor *cvx_st_tensor(const cvx_safetensors *st, int i) {
    return (i >= 0 && i < st->count) ? &st->tensors[i] : NULL;
}
const char *cvx_st_path(const cvx_safetensors *st) { return st->path; }

const cvx_tensor *cvx_st_find(const cvx_safetensors *st, const char *name) {
    int lo = 0, hi = st->count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(name, st->tensors[st->sorted[mid]].name);
        if (c == 0) return &st->tensors[st->sorted[mid]];
        if (c < 0) hi = mid - 1; else lo = mid + 1;
    }
    return NULL;
}

const char *cvx_st_metadata(const cvx_safetensors *st, const char *key) {
    for (int i = 0; i < st->meta_count; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
    return NULL;
}
int cvx_st_metadata_count(const cvx_safetensors *st) { return st->meta_count; }
void cvx_st_metadata_at(const cvx_safetensors *st, int i, const char **key, const char **value) {
    *key = st->meta_keys[i];
    *value = st->meta_values[i];
}

/* ---- content seal ---- */

static int seal_tensor_cmp(const void *a, const void *b) {
    return strcmp(((const cvx_seal_tensor *)a)->name, ((const cvx_seal_tensor *)b)->name);
}
static int seal_meta_cmp(const void *a, const void *b) {
    return strcmp(((const cvx_seal_meta *)a)->key, ((const cvx_seal_meta *)b)->key);
}

uint64_t cvx_seal_hash(cvx_seal_tensor *t, int nt, cvx_seal_meta *m, int nm, const char *skip) {
    if (nt > 1) qsort(t, (size_t)nt, sizeof *t, seal_tensor_cmp);
    if (nm > 1) qsort(m, (size_t)nm, sizeof *m, seal_meta_cmp);
    uint64_t h = 0;
    for (int i = 0; i < nt; i++) {
        const char *dt = cvx_dtype_name(t[i].dtype);
        int64_t dims[CVX_MAX_DIMS + 1] = {t[i].ndim};
        for (int d = 0; d < t[i].ndim && d < CVX_MAX_DIMS; d++) dims[d + 1] = t[i].shape[d];
        h = cvx_xxh64(t[i].name, strlen(t[i].name) + 1, h);
        h = cvx_xxh64(dt, strlen(dt) + 1, h);
        h = cvx_xxh64(dims, sizeof(int64_t) * (size_t)(t[i].ndim + 1), h);   /* little-endian hosts */
        h = cvx_xxh64(t[i].data, t[i].nbytes, h);
    }
    for (int i = 0; i < nm; i++) {
        if (skip && !strcmp(m[i].key, skip)) continue;
        h = cvx_xxh64(m[i].key, strlen(m[i].key) + 1, h);
        h = cvx_xxh64(m[i].value, strlen(m[i].value) + 1, h);
    }
    return h;
}

int cvx_st_check_seal(const cvx_safetensors *st, const char *key) {
    const char *want = cvx_st_metadata(st, key);
    if (!want)
        return cvx_error("%s: no content hash (metadata '%s'): written by an older build, or edited", st->path, key);
    const int nt = st->count, nm = st->meta_count;
    cvx_seal_tensor *t = cvx_calloc((size_t)nt + 1, sizeof *t);
    cvx_seal_meta *m = cvx_calloc((size_t)nm + 1, sizeof *m);
    for (int i = 0; i < nt; i++) {
        const cvx_tensor *x = &st->tensors[i];
        t[i] = (cvx_seal_tensor){x->name, x->dtype, x->ndim, x->shape, x->data, x->nbytes};
    }
    for (int i = 0; i < nm; i++) m[i] = (cvx_seal_meta){st->meta_keys[i], st->meta_values[i]};
    char got[17];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)cvx_seal_hash(t, nt, m, nm, key));
    free(t), free(m);
    if (strcmp(got, want) != 0)
        return cvx_error("%s: content xxh64 %s, but '%s' records %.20s: the file was changed or damaged after it was "
                         "written", st->path, got, key, want);
    return 0;
}

/* ---- tensor data as f32 ---- */

void cvx_tensor_to_f32(const cvx_tensor *t, float *dst) {
    CVX_CHECK(cvx_dtype_to_f32_ok(t->dtype));
    cvx_to_f32_n(t->dtype, t->data, dst, (size_t)t->numel);
}

float *cvx_tensor_f32_dup(const cvx_tensor *t) {
    float *p = cvx_alloc_f32(t->numel ? t->numel : 1);
    cvx_tensor_to_f32(t, p);
    return p;
}

const float *cvx_tensor_f32_view(const cvx_tensor *t, float **scratch, size_t *cap) {
    if (t->dtype == CVX_F32 && ((uintptr_t)t->data & 3) == 0) return t->data;
    if (*cap < (size_t)t->numel) {
        free(*scratch);
        *scratch = cvx_alloc_f32(t->numel);
        *cap = (size_t)t->numel;
    }
    cvx_tensor_to_f32(t, *scratch);
    return *scratch;
}
