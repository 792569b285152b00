/* GGUF reader (mmap, zero-copy tensor data, every header field validated against the file
 * size with overflow-safe arithmetic). Format: gguf.h; semantics of ggml's gguf.cpp
 * (gguf_init_from_reader), with the tensor layout checks kept and two deliberate differences:
 * up to CVX_MAX_DIMS dims (city96's 5-D Wan tensors), and tensors need only be aligned, inside
 * the data section and non-overlapping (ggml also demands they be packed in file order). */
#include "gguf.h"
#include "error.h"
#include "fileio.h"
#include "quant.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct {
    char *key;
    cvx_gguf_type type, arr_type;  /* arr_type for arrays only */
    uint64_t count;                /* 1 for scalars, elements for arrays */
    const unsigned char *data;     /* scalar / numeric array bytes in the file */
    char *str;                     /* a string value (NUL-terminated copy) */
    char **strs;                   /* a string array: count pointers into one allocation */
} gguf_kv;

struct cvx_gguf {
    char *path;
    const unsigned char *base;
    size_t size;
    int mapped;
    uint32_t version;
    size_t alignment, data_offset;
    gguf_kv *kv;
    int n_kv;
    cvx_gguf_tensor *tensors;
    int n_tensors;
    int *sorted;  /* tensor indices by name */
};

/* ---- bounded reading of the header ---- */

typedef struct {
    const unsigned char *p;
    size_t pos, size;
    const char *path;
} reader;

static int need(reader *r, uint64_t n, const char *what) {
    if (n > r->size - r->pos)
        return cvx_error("%s: truncated: %s needs %llu bytes at byte %zu, only %zu left in the %zu-byte file", r->path,
                         what, (unsigned long long)n, r->pos, r->size - r->pos, r->size);
    return 0;
}
static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static int rd_u32(reader *r, uint32_t *v, const char *what) {
    if (need(r, 4, what)) return -1;
    *v = (uint32_t)le(r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}
static int rd_u64(reader *r, uint64_t *v, const char *what) {
    if (need(r, 8, what)) return -1;
    *v = le(r->p + r->pos, 8);
    r->pos += 8;
    return 0;
}
/* A string in place: *s points into the file (not NUL-terminated), *len its length. */
static int rd_str(reader *r, const char **s, uint64_t *len, const char *what) {
    if (rd_u64(r, len, what)) return -1;
    if (*len > r->size - r->pos)
        return cvx_error("%s: %s: string length %llu runs past the end of the file (%zu bytes left at byte %zu)",
                         r->path, what, (unsigned long long)*len, r->size - r->pos, r->pos);
    *s = (const char *)r->p + r->pos;
    r->pos += (size_t)*len;
    return 0;
}
static char *dup_n(const char *s, uint64_t len) {
    char *d = cvx_malloc((size_t)len + 1);
    memcpy(d, s, (size_t)len);
    d[len] = 0;
    return d;
}

static size_t value_size(cvx_gguf_type t) {
    static const unsigned char sz[CVX_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < CVX_GGUF_TYPE_COUNT ? sz[t] : 0;
}

const char *cvx_gguf_type_name(cvx_gguf_type t) {
    static const char *const names[CVX_GGUF_TYPE_COUNT] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                           "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < CVX_GGUF_TYPE_COUNT ? names[t] : "?";
}

/* ---- key/values ---- */

static int read_kv(cvx_gguf *g, reader *r, uint64_t index, gguf_kv *kv) {
    const char *ks;
    uint64_t klen;
    char what[64];
    snprintf(what, sizeof what, "key %llu: its name", (unsigned long long)index);
    if (rd_str(r, &ks, &klen, what)) return -1;
    if (klen == 0) return cvx_error("%s: key %llu is empty", g->path, (unsigned long long)index);
    if (memchr(ks, 0, (size_t)klen))
        return cvx_error("%s: key %llu contains a NUL byte", g->path, (unsigned long long)index);
    kv->key = dup_n(ks, klen);
    const char *k = kv->key;
    for (int j = 0; j < g->n_kv; j++)
        if (strcmp(g->kv[j].key, k) == 0) return cvx_error("%s: key '%s' appears twice", g->path, k);
    char ctx[160];
    snprintf(ctx, sizeof ctx, "key '%.100s': the value", k);
    uint32_t t;
    if (rd_u32(r, &t, ctx)) return -1;
    kv->type = (cvx_gguf_type)t;
    kv->count = 1;
    if (t >= CVX_GGUF_TYPE_COUNT)
        return cvx_error("%s: key '%s' has value type %u, expected 0..%d", g->path, k, t, CVX_GGUF_TYPE_COUNT - 1);
    cvx_gguf_type et = kv->type;
    if (t == CVX_GGUF_ARRAY) {
        uint32_t e;
        if (rd_u32(r, &e, ctx) || rd_u64(r, &kv->count, ctx)) return -1;
        if (e >= CVX_GGUF_TYPE_COUNT || e == CVX_GGUF_ARRAY)
            return cvx_error("%s: key '%s' is an array of element type %u, expected 0..12 other than 9 (nested "
                             "arrays are not supported)", g->path, k, e);
        kv->arr_type = et = (cvx_gguf_type)e;
    }
    size_t left = r->size - r->pos;
    if (et != CVX_GGUF_STRING) {
        size_t es = value_size(et);
        if (kv->count > left / es)
            return cvx_error("%s: key '%s': %llu values of %s (%zu bytes each) run past the end of the file (%zu "
                             "bytes left at byte %zu)", g->path, k, (unsigned long long)kv->count,
                             cvx_gguf_type_name(et), es, left, r->pos);
        kv->data = r->p + r->pos;
        r->pos += (size_t)kv->count * es;
        return 0;
    }
    if (t == CVX_GGUF_STRING) {
        const char *s;
        uint64_t len;
        if (rd_str(r, &s, &len, ctx)) return -1;
        kv->str = dup_n(s, len);
        return 0;
    }
    /* array of strings: every length checked first, then one allocation for all of them */
    if (kv->count > left / 8)
        return cvx_error("%s: key '%s': %llu strings cannot fit in the %zu bytes left at byte %zu", g->path, k,
                         (unsigned long long)kv->count, left, r->pos);
    size_t start = r->pos, total = 0;
    for (uint64_t i = 0; i < kv->count; i++) {
        const char *s;
        uint64_t len;
        snprintf(ctx, sizeof ctx, "key '%.100s': element %llu", k, (unsigned long long)i);
        if (rd_str(r, &s, &len, ctx)) return -1;
        total += (size_t)len + 1;  /* bounded by the file size */
    }
    kv->strs = cvx_malloc(sizeof(char *) * (size_t)(kv->count ? kv->count : 1));
    char *arena = cvx_malloc(total ? total : 1), *w = arena;
    r->pos = start;
    for (uint64_t i = 0; i < kv->count; i++) {
        const char *s;
        uint64_t len;
        CVX_CHECK(rd_str(r, &s, &len, "a string array element") == 0);
        memcpy(w, s, (size_t)len);
        w[len] = 0;
        kv->strs[i] = w;
        w += len + 1;
    }
    if (kv->count == 0) free(arena);
    return 0;
}

/* ---- tensor infos ---- */

static const char *supported_types(char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < cvx_quant_count() && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", cvx_quant_at(i)->name);
    return buf;
}

static int read_tensor_info(cvx_gguf *g, reader *r, uint64_t index, cvx_gguf_tensor *gt) {
    const char *ns;
    uint64_t nlen;
    char what[64], sb[192];
    snprintf(what, sizeof what, "tensor %llu: its name", (unsigned long long)index);
    if (rd_str(r, &ns, &nlen, what)) return -1;
    if (memchr(ns, 0, (size_t)nlen))
        return cvx_error("%s: tensor %llu: name contains a NUL byte", g->path, (unsigned long long)index);
    gt->t.name = dup_n(ns, nlen);
    gt->t.file = g->path;
    const char *name = gt->t.name;
    char ctx[160];
    snprintf(ctx, sizeof ctx, "tensor '%.100s': its info", name);
    uint32_t nd, type;
    if (rd_u32(r, &nd, ctx)) return -1;
    if (nd > CVX_MAX_DIMS)
        return cvx_error("%s: tensor '%s' has %u dimensions, at most %d supported", g->path, name, nd, CVX_MAX_DIMS);
    gt->n_dims = gt->t.ndim = (int)nd;
    /* The product of the non-zero dims must fit in int64 (not only numel, which one zero dim makes
     * 0): then every partial product a caller forms from the shape fits too. */
    uint64_t numel = 1, nonzero = 1;
    for (uint32_t j = 0; j < nd; j++) {
        uint64_t v;
        if (rd_u64(r, &v, ctx)) return -1;
        if (v > (uint64_t)INT64_MAX)
            return cvx_error("%s: tensor '%s': ne[%u] = %llu is negative as int64, expected >= 0", g->path, name, j,
                             (unsigned long long)v);
        gt->ne[j] = (int64_t)v;
        gt->t.shape[nd - 1 - j] = (int64_t)v;
        if (v != 0 && nonzero > (uint64_t)INT64_MAX / v)
            return cvx_error("%s: tensor '%s': element count of shape %s overflows int64", g->path, name,
                             cvx_shape_str((int)j + 1, gt->t.shape + nd - 1 - j, sb, sizeof sb));
        nonzero *= v ? v : 1;
        numel *= v;
    }
    if (rd_u32(r, &type, ctx) || rd_u64(r, &gt->offset, ctx)) return -1;
    gt->ggml_type = type;
    const cvx_quant_traits *q = cvx_quant_by_ggml(type);
    if (!q) {
        const char *tn = cvx_ggml_type_name(type);
        return cvx_error("%s: tensor '%s' has ggml type %u (%s), expected one of %s", g->path, name, type,
                         tn ? tn : "unknown", supported_types(sb, sizeof sb));
    }
    gt->t.dtype = q->dtype;
    gt->t.numel = (int64_t)numel;
    int64_t ne0 = nd ? gt->ne[0] : 1;
    if (ne0 % q->block != 0)
        return cvx_error("%s: tensor '%s' of type %s has rows of %lld elements, expected a multiple of its block "
                         "size %d", g->path, name, q->name, (long long)ne0, q->block);
    uint64_t nbytes;
    if (cvx_dtype_nbytes(q->dtype, numel, &nbytes))
        return cvx_error("%s: tensor '%s': %llu elements of %s overflow the byte count", g->path, name,
                         (unsigned long long)numel, q->name);
    gt->t.nbytes = (size_t)nbytes;
    if (gt->offset % g->alignment != 0)
        return cvx_error("%s: tensor '%s' has data offset %llu, expected a multiple of the alignment %zu", g->path,
                         name, (unsigned long long)gt->offset, g->alignment);
    return 0;
}

typedef struct { const cvx_gguf_tensor *t; int index; } sort_rec;
static int cmp_name(const void *a, const void *b) {
    return strcmp(((const sort_rec *)a)->t->t.name, ((const sort_rec *)b)->t->t.name);
}
static int cmp_offset(const void *a, const void *b) {
    uint64_t x = ((const sort_rec *)a)->t->offset, y = ((const sort_rec *)b)->t->offset;
    return x < y ? -1 : x > y;
}

/* Tensors inside the data section, not overlapping, names unique; the by-name index. */
static int place_tensors(cvx_gguf *g) {
    size_t avail = g->size - g->data_offset;
    for (int i = 0; i < g->n_tensors; i++) {
        cvx_gguf_tensor *gt = &g->tensors[i];
        if (gt->offset > avail || gt->t.nbytes > avail - gt->offset)
            return cvx_error("%s: tensor '%s': %zu bytes at data offset %llu run past the end of the file (data "
                             "section of %zu bytes at byte %zu; truncated?)", g->path, gt->t.name, gt->t.nbytes,
                             (unsigned long long)gt->offset, avail, g->data_offset);
        gt->t.data = g->base + g->data_offset + gt->offset;
    }
    int rc = 0, n = g->n_tensors;
    sort_rec *recs = cvx_malloc(sizeof(sort_rec) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) recs[i] = (sort_rec){&g->tensors[i], i};
    qsort(recs, (size_t)n, sizeof *recs, cmp_offset);
    for (int i = 1; i < n && !rc; i++) {
        const cvx_gguf_tensor *a = recs[i - 1].t, *b = recs[i].t;
        if (a->offset + a->t.nbytes > b->offset)
            rc = cvx_error("%s: tensors '%s' and '%s' overlap in the data section", g->path, a->t.name, b->t.name);
    }
    qsort(recs, (size_t)n, sizeof *recs, cmp_name);
    for (int i = 1; i < n && !rc; i++)
        if (strcmp(recs[i - 1].t->t.name, recs[i].t->t.name) == 0)
            rc = cvx_error("%s: tensor '%s' appears twice", g->path, recs[i].t->t.name);
    g->sorted = cvx_malloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) g->sorted[i] = recs[i].index;
    free(recs);
    return rc;
}

/* Make room for element n of a zero-initialised array (capacity doubles). */
static void grow(void *arr, size_t *cap, size_t n, size_t es) {
    void **a = arr;
    if (n < *cap) return;
    size_t nc = *cap ? 2 * *cap : 16;
    *a = cvx_realloc(*a, nc * es);
    memset((char *)*a + *cap * es, 0, (nc - *cap) * es);
    *cap = nc;
}

static int parse(cvx_gguf *g) {
    reader r = {g->base, 0, g->size, g->path};
    if (g->size < 4) return cvx_error("%s: file of %zu bytes is too short for a GGUF header", g->path, g->size);
    if (memcmp(g->base, "GGUF", 4) != 0) {
        char m[5];
        for (int i = 0; i < 4; i++) m[i] = (g->base[i] >= 32 && g->base[i] < 127) ? (char)g->base[i] : '?';
        m[4] = 0;
        return cvx_error("%s: not a GGUF file: magic '%s' (0x%08x), expected 'GGUF'", g->path, m,
                         (unsigned)le(g->base, 4));
    }
    r.pos = 4;
    uint64_t n_tensors, n_kv;
    if (rd_u32(&r, &g->version, "the version")) return -1;
    if ((g->version & 0xffffu) == 0 && g->version != 0)
        return cvx_error("%s: GGUF version %u (0x%08x): a big-endian file? Only little-endian GGUF is supported",
                         g->path, g->version, g->version);
    if (g->version != 2 && g->version != 3)
        return cvx_error("%s: GGUF version %u, expected 2 or 3", g->path, g->version);
    if (rd_u64(&r, &n_tensors, "the tensor count") || rd_u64(&r, &n_kv, "the key/value count")) return -1;
    /* A key/value takes at least 13 bytes, a tensor info 24: the counts must fit in what is left. */
    if (n_kv > (r.size - r.pos) / 13)
        return cvx_error("%s: header says %llu key/values, more than the %zu-byte file can hold", g->path,
                         (unsigned long long)n_kv, r.size);
    if (n_tensors > (r.size - r.pos) / 24)
        return cvx_error("%s: header says %llu tensors, more than the %zu-byte file can hold", g->path,
                         (unsigned long long)n_tensors, r.size);
    /* Arrays grow as entries are read, so memory follows what the file really holds. */
    size_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        grow(&g->kv, &cap, (size_t)g->n_kv, sizeof(gguf_kv));
        int rc = read_kv(g, &r, i, &g->kv[g->n_kv]);
        g->n_kv++;  /* counted even on failure, so close frees what it allocated */
        if (rc) return -1;
    }
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int ai = cvx_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        const gguf_kv *kv = &g->kv[ai];
        if (kv->type != CVX_GGUF_U32)
            return cvx_error("%s: key 'general.alignment' has type %s, expected u32", g->path,
                             cvx_gguf_type_name(kv->type));
        uint32_t a = (uint32_t)le(kv->data, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return cvx_error("%s: key 'general.alignment' = %u, expected a power of 2", g->path, a);
        g->alignment = a;
    }
    cap = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        grow(&g->tensors, &cap, (size_t)g->n_tensors, sizeof(cvx_gguf_tensor));
        int rc = read_tensor_info(g, &r, i, &g->tensors[g->n_tensors]);
        g->n_tensors++;
        if (rc) return -1;
    }
    /* the data section starts at the next multiple of the alignment */
    size_t pad = (g->alignment - r.pos % g->alignment) % g->alignment;
    if (n_tensors > 0 && pad > r.size - r.pos)
        return cvx_error("%s: the data section (at byte %zu, after padding to %zu) lies past the end of the "
                         "%zu-byte file", g->path, r.pos + pad, g->alignment, r.size);
    g->data_offset = pad <= r.size - r.pos ? r.pos + pad : r.size;
    return place_tensors(g);
}

static cvx_gguf *open_image(const unsigned char *base, size_t size, int mapped, const char *label) {
    cvx_gguf *g = cvx_calloc(1, sizeof *g);
    g->path = strdup(label ? label : "<memory>");
    g->base = base;
    g->size = size;
    g->mapped = mapped;
    if (parse(g) != 0) {
        cvx_gguf_close(g);
        return NULL;
    }
    return g;
}

cvx_gguf *cvx_gguf_open_memory(const void *buf, size_t len, const char *label) {
    return open_image(buf, len, 0, label);
}

cvx_gguf *cvx_gguf_open(const char *path) {
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
    return open_image(base, size, size > 0, path);
}

void cvx_gguf_close(cvx_gguf *g) {
    if (!g) return;
    if (g->mapped) munmap((void *)g->base, g->size);
    for (int i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str);
        if (g->kv[i].strs && g->kv[i].count) free(g->kv[i].strs[0]);  /* the arena */
        free(g->kv[i].strs);
    }
    for (int i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].t.name);
    free(g->kv);
    free(g->tensors);
    free(g->sorted);
    free(g->path);
    free(g);
}

const char *cvx_gguf_path(const cvx_gguf *g) { return g->path; }
uint32_t cvx_gguf_version(const cvx_gguf *g) { return g->version; }
size_t cvx_gguf_alignment(const cvx_gguf *g) { return g->alignment; }
size_t cvx_gguf_data_offset(const cvx_gguf *g) { return g->data_offset; }
int cvx_gguf_tensor_count(const cvx_gguf *g) { return g->n_tensors; }
const cvx_gguf_tensor *cvx_gguf_tensor_at(const cvx_gguf *g, int i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const cvx_gguf_tensor *cvx_gguf_find(const cvx_gguf *g, const char *name) {
    int lo = 0, hi = g->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(name, g->tensors[g->sorted[mid]].t.name);
        if (c == 0) return &g->tensors[g->sorted[mid]];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const cvx_gguf_tensor *cvx_gguf_get(const cvx_gguf *g, const char *name, const int64_t *shape, int ndim) {
    const cvx_gguf_tensor *gt = cvx_gguf_find(g, name);
    char want[160], got[160];
    if (!gt) { cvx_error("%s: tensor '%s' is missing", g->path, name); return NULL; }
    int ok = gt->t.ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = shape[i] < 0 || shape[i] == gt->t.shape[i];
    if (!ok) {
        cvx_error("%s: tensor '%s' has shape %s, expected %s", g->path, name,
                  cvx_shape_str(gt->t.ndim, gt->t.shape, got, sizeof got), cvx_shape_str(ndim, shape, want, sizeof want));
        return NULL;
    }
    return gt;
}

/* ---- metadata access ---- */

int cvx_gguf_kv_count(const cvx_gguf *g) { return g->n_kv; }
int cvx_gguf_find_key(const cvx_gguf *g, const char *key) {
    for (int i = 0; i < g->n_kv; i++)
        if (g->kv[i].key && strcmp(g->kv[i].key, key) == 0) return i;
    return -1;
}
const char *cvx_gguf_kv_key(const cvx_gguf *g, int i) { return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL; }
cvx_gguf_type cvx_gguf_kv_type(const cvx_gguf *g, int i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].type : CVX_GGUF_TYPE_COUNT;
}
cvx_gguf_type cvx_gguf_kv_arr_type(const cvx_gguf *g, int i) {
    return i >= 0 && i < g->n_kv && g->kv[i].type == CVX_GGUF_ARRAY ? g->kv[i].arr_type : CVX_GGUF_TYPE_COUNT;
}
uint64_t cvx_gguf_kv_count_of(const cvx_gguf *g, int i) { return i >= 0 && i < g->n_kv ? g->kv[i].count : 0; }

/* The key, or NULL + "FILE: key 'k' is missing". */
static const gguf_kv *get_kv(const cvx_gguf *g, const char *key) {
    int i = cvx_gguf_find_key(g, key);
    if (i < 0) { cvx_error("%s: key '%s' is missing", g->path, key); return NULL; }
    return &g->kv[i];
}

static int is_int_type(cvx_gguf_type t) { return t <= CVX_GGUF_I32 || t == CVX_GGUF_U64 || t == CVX_GGUF_I64; }
static int is_signed(cvx_gguf_type t) {
    return t == CVX_GGUF_I8 || t == CVX_GGUF_I16 || t == CVX_GGUF_I32 || t == CVX_GGUF_I64;
}

/* An integer element at p as (negative?, magnitude bits): u64 values above INT64_MAX stay exact. */
static void int_at(const unsigned char *p, cvx_gguf_type t, int *neg, uint64_t *u) {
    int n = (int)value_size(t);
    uint64_t v = le(p, n);
    *neg = 0;
    if (is_signed(t) && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~0ull << (8 * n);  /* sign-extend */
    if (is_signed(t) && (v >> 63)) { *neg = 1; v = ~v + 1; }
    *u = v;
}

static int get_int(const cvx_gguf *g, const char *key, int64_t lo, uint64_t hi, const char *want, int *neg,
                   uint64_t *mag) {
    const gguf_kv *kv = get_kv(g, key);
    if (!kv) return -1;
    if (!is_int_type(kv->type))
        return cvx_error("%s: key '%s' has type %s, expected %s", g->path, key, cvx_gguf_type_name(kv->type), want);
    int_at(kv->data, kv->type, neg, mag);
    if ((*neg && (lo == 0 || *mag > (uint64_t)-(lo + 1) + 1)) || (!*neg && *mag > hi)) {
        if (*neg) return cvx_error("%s: key '%s' = -%llu, out of range for %s", g->path, key, (unsigned long long)*mag, want);
        return cvx_error("%s: key '%s' = %llu, out of range for %s", g->path, key, (unsigned long long)*mag, want);
    }
    return 0;
}

int cvx_gguf_get_u32(const cvx_gguf *g, const char *key, uint32_t *out) {
    int neg;
    uint64_t m;
    if (get_int(g, key, 0, UINT32_MAX, "u32", &neg, &m)) return -1;
    *out = (uint32_t)m;
    return 0;
}
int cvx_gguf_get_u64(const cvx_gguf *g, const char *key, uint64_t *out) {
    int neg;
    uint64_t m;
    if (get_int(g, key, 0, UINT64_MAX, "u64", &neg, &m)) return -1;
    *out = m;
    return 0;
}
int cvx_gguf_get_i32(const cvx_gguf *g, const char *key, int32_t *out) {
    int neg;
    uint64_t m;
    if (get_int(g, key, INT32_MIN, INT32_MAX, "i32", &neg, &m)) return -1;
    *out = neg ? (int32_t)(-(int64_t)m) : (int32_t)m;
    return 0;
}
int cvx_gguf_get_i64(const cvx_gguf *g, const char *key, int64_t *out) {
    int neg;
    uint64_t m;
    if (get_int(g, key, INT64_MIN, INT64_MAX, "i64", &neg, &m)) return -1;
    *out = neg ? (m == (1ull << 63) ? INT64_MIN : -(int64_t)m) : (int64_t)m;
    return 0;
}

int cvx_gguf_get_f32(const cvx_gguf *g, const char *key, float *out) {
    const gguf_kv *kv = get_kv(g, key);
    if (!kv) return -1;
    if (kv->type == CVX_GGUF_F32) {
        uint32_t u = (uint32_t)le(kv->data, 4);
        memcpy(out, &u, 4);
    } else if (kv->type == CVX_GGUF_F64) {
        uint64_t u = le(kv->data, 8);
        double d;
        memcpy(&d, &u, 8);
        *out = (float)d;
    } else {
        return cvx_error("%s: key '%s' has type %s, expected f32", g->path, key, cvx_gguf_type_name(kv->type));
    }
    return 0;
}

int cvx_gguf_get_bool(const cvx_gguf *g, const char *key, int *out) {
    const gguf_kv *kv = get_kv(g, key);
    if (!kv) return -1;
    if (kv->type != CVX_GGUF_BOOL)
        return cvx_error("%s: key '%s' has type %s, expected bool", g->path, key, cvx_gguf_type_name(kv->type));
    *out = kv->data[0] != 0;
    return 0;
}

const char *cvx_gguf_get_str(const cvx_gguf *g, const char *key) {
    const gguf_kv *kv = get_kv(g, key);
    if (!kv) return NULL;
    if (kv->type != CVX_GGUF_STRING) {
        cvx_error("%s: key '%s' has type %s, expected string", g->path, key, cvx_gguf_type_name(kv->type));
        return NULL;
    }
    return kv->str;
}

static const gguf_kv *get_arr(const cvx_gguf *g, const char *key) {
    const gguf_kv *kv = get_kv(g, key);
    if (kv && kv->type != CVX_GGUF_ARRAY) {
        cvx_error("%s: key '%s' has type %s, expected an array", g->path, key, cvx_gguf_type_name(kv->type));
        return NULL;
    }
    return kv;
}

int cvx_gguf_get_arr(const cvx_gguf *g, const char *key, cvx_gguf_type *elem, uint64_t *count, const void **data) {
    const gguf_kv *kv = get_arr(g, key);
    if (!kv) return -1;
    *elem = kv->arr_type;
    *count = kv->count;
    *data = kv->arr_type == CVX_GGUF_STRING ? NULL : kv->data;
    return 0;
}

const char *cvx_gguf_get_arr_str(const cvx_gguf *g, const char *key, uint64_t i) {
    const gguf_kv *kv = get_arr(g, key);
    if (!kv) return NULL;
    if (kv->arr_type != CVX_GGUF_STRING) {
        cvx_error("%s: key '%s' is an array of %s, expected an array of string", g->path, key,
                  cvx_gguf_type_name(kv->arr_type));
        return NULL;
    }
    if (i >= kv->count) {
        cvx_error("%s: key '%s': element %llu of an array of %llu", g->path, key, (unsigned long long)i,
                  (unsigned long long)kv->count);
        return NULL;
    }
    return kv->strs[i];
}

int cvx_gguf_get_arr_i64(const cvx_gguf *g, const char *key, int64_t *out, size_t cap, size_t *n) {
    const gguf_kv *kv = get_arr(g, key);
    if (!kv) return -1;
    if (!is_int_type(kv->arr_type))
        return cvx_error("%s: key '%s' is an array of %s, expected an array of integers", g->path, key,
                         cvx_gguf_type_name(kv->arr_type));
    if (kv->count > cap)
        return cvx_error("%s: key '%s' has %llu elements, expected at most %zu", g->path, key,
                         (unsigned long long)kv->count, cap);
    size_t es = value_size(kv->arr_type);
    for (uint64_t i = 0; i < kv->count; i++) {
        int neg;
        uint64_t m;
        int_at(kv->data + i * es, kv->arr_type, &neg, &m);
        if (!neg && m > (uint64_t)INT64_MAX)
            return cvx_error("%s: key '%s': element %llu = %llu exceeds int64", g->path, key, (unsigned long long)i,
                             (unsigned long long)m);
        out[i] = neg ? (m == (1ull << 63) ? INT64_MIN : -(int64_t)m) : (int64_t)m;
    }
    *n = (size_t)kv->count;
    return 0;
}
