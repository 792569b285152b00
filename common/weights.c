/* A model's weights as one lookup table: a single safetensors file, a sharded checkpoint
 * described by *.safetensors.index.json ({"weight_map": {tensor: shard file}}), or a GGUF file
 * (ggml block-quantized tensors, read in place like any other). ggml blocks stored in a
 * safetensors file as MinusZone's / Kijai's CogVideoX "*_GGUF_Q4_0.safetensors" do
 * (`<module>.Q4_0_qweight`, docs/models.md) are shown as `<module>.weight` of the block type;
 * ComfyUI's "scaled fp8" weights (`<module>.weight` F8_E4M3 + `<module>.scale_weight`) as the
 * F32 products weight × scale (see open_scaled_fp8). */
#include "config.h"
#include "error.h"
#include "fileio.h"
#include "gguf.h"
#include "quant.h"
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct cvx_weights {
    char *path;
    cvx_safetensors **shards;
    int nshards;
    cvx_gguf *gguf;     /* a .gguf file instead of safetensors */
    cvx_tensor *gt;     /* its tensors (file order), shapes as the model sees them (see open_gguf) */
    struct qview *qv;   /* safetensors qweights as `<module>.weight` views (see open_qweights), by name */
    int nqv;
    struct named *nm;   /* after cvx_weights_rename: the model code's names, sorted (see below) */
    int nnm, cap_nm;
    char *names;        /* the renaming's label for messages; NULL: the file's own names */
};

/* ---- a file with other names than the model code's (cvx_weights_rename, at the end) ----
 * Each entry is a copy of a file tensor under the model's name (t first: find() returns &t and
 * cvx_weights_get's shape message reads src back from it), or a tensor made from one (rows of it,
 * or bytes the weights own). */
typedef struct named {
    cvx_tensor t;
    const cvx_tensor *src;   /* the file's tensor it comes from */
    void *own;               /* bytes owned (cvx_weights_add_data), else NULL */
} named;

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* ---- ggml blocks in safetensors files ----
 * The loader both ComfyUI nodes use (MinusZoneAI/ComfyUI-CogVideoX-MZ mz_gguf_loader.py, copied in
 * kijai/ComfyUI-CogVideoXWrapper) replaces the Linear `<module>` by a module whose buffer
 * `<module>.<T>_qweight` is uint8 [out, in / block · block bytes]: rows of ggml blocks, exactly a
 * GGUF tensor's rows. The one name table: the suffix of such a buffer and its block type. */
static const struct { const char *suffix; cvx_dtype type; } QWEIGHTS[] = {
    {".Q4_0_qweight", CVX_Q4_0},
    {".Q8_0_qweight", CVX_Q8_0},   /* Kijai's copy of the loader reads these too */
};

typedef struct qview {
    cvx_tensor t;            /* "<module>.weight", the block type, [out, in], the file's bytes */
    const cvx_tensor *src;   /* the file's "<module>.<T>_qweight" */
    float *owned;            /* a scaled fp8 weight: t is F32 and its data these products (src: the F8_E4M3 weight) */
} qview;

/* The row of QWEIGHTS whose suffix ends `name` (*stem = the length before it), or -1. */
static int qweight_kind(const char *name, size_t *stem) {
    size_t n = strlen(name);
    for (size_t k = 0; k < sizeof QWEIGHTS / sizeof QWEIGHTS[0]; k++) {
        size_t s = strlen(QWEIGHTS[k].suffix);
        if (n > s && !strcmp(name + n - s, QWEIGHTS[k].suffix)) {
            *stem = n - s;
            return (int)k;
        }
    }
    return -1;
}

static int cmp_qview(const void *a, const void *b) {
    return strcmp(((const qview *)a)->t.name, ((const qview *)b)->t.name);
}

static qview *find_qview(const cvx_weights *w, const char *name) {
    if (!w->nqv) return NULL;
    qview key = {.t.name = name};
    return bsearch(&key, w->qv, (size_t)w->nqv, sizeof *w->qv, cmp_qview);
}

static const cvx_tensor *shards_find(const cvx_weights *w, const char *name) {
    for (int s = 0; s < w->nshards; s++) {
        const cvx_tensor *t = cvx_st_find(w->shards[s], name);
        if (t) return t;
    }
    return NULL;
}

/* ComfyUI's "scaled fp8" files (*_fp8_scaled.safetensors): a Linear's `<module>.weight` is F8_E4M3
 * and `<module>.scale_weight` a one-element float; the empty `scaled_fp8` marker's dtype names the
 * fp8 type. ComfyUI computes the layer with the weight cast to the compute dtype times the scale
 * cast to it (comfy/ops.py, scaled_fp8_ops -> scaled_fp8_op.Linear.forward_comfy_cast_weights:
 * `linear(input, weight * self.scale_weight.to(dtype=weight.dtype), bias)`, and convert_weight:
 * `weight * self.scale_weight.to(...)`; picked by pick_operations when the checkpoint has
 * `scaled_fp8`). With f32 compute that is (float)fp8 · scale rounded once to f32, what each view
 * holds here (4 bytes per weight: a 14B file needs ~56 GB; a Q8_0 GGUF keeps ~1 byte). An fp8
 * weight without a scale reads as plain fp8 (ComfyUI's default scale_weight is 1). `scale_input`
 * enters only ComfyUI's fp8 matrix multiply on fp8 GPUs (the activations quantized to fp8): its
 * cast path, the one reproduced here, ignores it, and so does this reader. */
static int open_scaled_fp8(cvx_weights *w, qview *v, const cvx_tensor *scale) {
    const size_t stem = strlen(scale->name) - strlen(".scale_weight");
    char *name = cvx_malloc(stem + sizeof ".weight");
    memcpy(name, scale->name, stem);
    memcpy(name + stem, ".weight", sizeof ".weight");
    const cvx_tensor *wt = shards_find(w, name);
    int rc = 0;
    if (!wt)
        rc = cvx_error("%s: tensor '%s' has no '%s' to scale", scale->file, scale->name, name);
    else if (wt->dtype != CVX_F8_E4M3)
        rc = cvx_error("%s: tensor '%s' is %s, expected F8_E4M3 (it has a scale_weight: ComfyUI's scaled fp8)",
                       wt->file, name, cvx_dtype_name(wt->dtype));
    else if (scale->numel != 1 || !cvx_dtype_is_float(scale->dtype))
        rc = cvx_error("%s: tensor '%s' is %s with %lld elements, expected one float (a per-tensor scale)", scale->file,
                       scale->name, cvx_dtype_name(scale->dtype), (long long)scale->numel);
    if (rc) { free(name); return -1; }
    float s;
    cvx_to_f32_n(scale->dtype, scale->data, &s, 1);
    float *d = cvx_malloc(sizeof(float) * (size_t)(wt->numel ? wt->numel : 1));
    const uint8_t *q = wt->data;
    for (int64_t i = 0; i < wt->numel; i++) d[i] = cvx_f8e4m3_to_f32(q[i]) * s;
    v->src = wt;
    v->t = *wt;
    v->t.name = name;
    v->t.dtype = CVX_F32;
    v->t.data = d;
    v->t.nbytes = sizeof(float) * (size_t)wt->numel;
    v->owned = d;
    return 0;
}

/* The f32 products of a scaled fp8 file must fit in memory (else the allocations would end in the
 * OOM killer): one line with the way out otherwise; CVX_ALLOW_LARGE_WEIGHTS=1 lets it through. */
static int scaled_fp8_fit(const cvx_weights *w) {
    double bytes = 0;
    for (int s = 0; s < w->nshards; s++)
        for (int i = 0; i < cvx_st_count(w->shards[s]); i++) {
            const cvx_tensor *t = cvx_st_tensor(w->shards[s], i);
            if (ends_with(t->name, ".scale_weight")) {
                char name[600];
                snprintf(name, sizeof name, "%.*s.weight", (int)(strlen(t->name) - strlen(".scale_weight")), t->name);
                const cvx_tensor *wt = shards_find(w, name);
                if (wt) bytes += 4.0 * (double)wt->numel;
            }
        }
    const double mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
    const char *allow = getenv("CVX_ALLOW_LARGE_WEIGHTS");
    if (mem <= 0 || bytes < 0.85 * mem || (allow && allow[0] == '1')) return 0;
    return cvx_error("%s: its scaled fp8 weights are read as f32 (weight x scale_weight, as ComfyUI computes them): "
                     "%.1f GB, and this machine has %.1f GB of memory. Use a GGUF of the model (Q8_0 about 1 byte per "
                     "weight) or its bf16 file (CVX_ALLOW_LARGE_WEIGHTS=1 tries anyway)",
                     w->path, bytes / 1e9, mem / 1e9);
}

/* One view per qweight of the shards: U8, 2-D, rows of whole blocks, no `<module>.weight` beside
 * it; and one per scaled fp8 weight (open_scaled_fp8). */
static int open_qweights(cvx_weights *w) {
    int n = 0;
    for (int s = 0; s < w->nshards; s++) n += cvx_st_count(w->shards[s]);
    if (scaled_fp8_fit(w)) return -1;
    for (int s = 0; s < w->nshards; s++)
        for (int i = 0; i < cvx_st_count(w->shards[s]); i++) {
            const cvx_tensor *t = cvx_st_tensor(w->shards[s], i);
            size_t stem;
            if (!strcmp(t->name, "scaled_fp8") && t->dtype != CVX_F8_E4M3)
                return cvx_error("%s: tensor 'scaled_fp8' is %s: scaled fp8 weights of that type are not supported "
                                 "(F8_E4M3 only)", t->file, cvx_dtype_name(t->dtype));
            if (ends_with(t->name, ".scale_weight")) {
                if (!w->qv) w->qv = cvx_calloc((size_t)n, sizeof *w->qv);
                if (open_scaled_fp8(w, &w->qv[w->nqv], t)) return -1;
                w->nqv++;
                continue;
            }
            const int k = qweight_kind(t->name, &stem);
            if (k < 0 && ends_with(t->name, "_qweight"))   /* else only "'<module>.weight' is missing" later */
                return cvx_error("%s: tensor '%s': this ggml block type in a safetensors file is not supported (only "
                                 "<module>.Q4_0_qweight and .Q8_0_qweight; a GGUF file holds every type)", t->file,
                                 t->name);
            if (k < 0) continue;
            const cvx_dtype q = QWEIGHTS[k].type;
            const int64_t bb = (int64_t)cvx_dtype_block_bytes(q);
            char got[160];
            cvx_shape_str(t->ndim, t->shape, got, sizeof got);
            if (t->dtype != CVX_U8 || t->ndim != 2 || t->shape[1] == 0 || t->shape[1] % bb)
                return cvx_error("%s: tensor '%s' is %s %s, expected U8 [out_features, in_features / %d * %d]: rows of "
                                 "%d-byte %s blocks", t->file, t->name, cvx_dtype_name(t->dtype), got,
                                 cvx_dtype_block(q), (int)bb, (int)bb, cvx_dtype_name(q));
            if (!w->qv) w->qv = cvx_calloc((size_t)n, sizeof *w->qv);
            qview *v = &w->qv[w->nqv++];
            char *name = cvx_malloc(stem + sizeof ".weight");
            memcpy(name, t->name, stem);
            memcpy(name + stem, ".weight", sizeof ".weight");
            v->src = t;
            v->t = *t;
            v->t.name = name;
            v->t.dtype = q;
            v->t.shape[1] = t->shape[1] / bb * cvx_dtype_block(q);
            v->t.numel = t->shape[0] * v->t.shape[1];
            if (shards_find(w, name))
                    return cvx_error("%s: holds both '%s' and '%s': one weight stored twice", t->file, name, t->name);
        }
    if (w->nqv) qsort(w->qv, (size_t)w->nqv, sizeof *w->qv, cmp_qview);
    for (int i = 1; i < w->nqv; i++)
        if (!strcmp(w->qv[i - 1].t.name, w->qv[i].t.name))
            return cvx_error("%s: holds both '%s' and '%s': one weight stored twice", w->qv[i].src->file,
                             w->qv[i - 1].src->name, w->qv[i].src->name);
    return 0;
}

static int add_shard(cvx_weights *w, const char *file) {
    cvx_safetensors *st = cvx_st_open(file);
    if (!st) return -1;
    w->shards = cvx_realloc(w->shards, sizeof(*w->shards) * (size_t)(w->nshards + 1));
    w->shards[w->nshards++] = st;
    return 0;
}

static int find_shard(const cvx_weights *w, const char *file) {
    for (int i = 0; i < w->nshards; i++)
        if (strcmp(cvx_st_path(w->shards[i]), file) == 0) return i;
    return -1;
}

/* Open every shard the index names, and check each listed tensor is where the index says. */
static int open_index(cvx_weights *w, const char *index_path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", index_path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");

    cvx_config index;
    if (cvx_config_load(&index, index_path) != 0) return -1;
    json_object *root = index.root, *map;
    int rc = 0;
    if (!json_object_object_get_ex(root, "weight_map", &map) || !json_object_is_type(map, json_type_object)) {
        cvx_config_free(&index);
        return cvx_error("%s: key 'weight_map' must be an object mapping tensor names to shard files", index_path);
    }
    json_object_object_foreach(map, name, val) {
        if (!json_object_is_type(val, json_type_string)) {
            rc = cvx_error("%s: weight_map entry '%s' must be a file name string", index_path, name);
            break;
        }
        const char *shard = json_object_get_string(val);
        if (strchr(shard, '/') || strcmp(shard, "..") == 0) {
            rc = cvx_error("%s: weight_map entry '%s' names '%s', expected a file in the same directory",
                           index_path, name, shard);
            break;
        }
        char file[4096];
        if ((rc = cvx_path_join(file, sizeof file, dir, shard)) != 0) break;
        int k = find_shard(w, file);
        if (k < 0) {
            if (!cvx_is_file(file)) {
                rc = cvx_error("%s: shard '%s' (holding '%s') is missing", index_path, file, name);
                break;
            }
            if ((rc = add_shard(w, file)) != 0) break;
            k = w->nshards - 1;
        }
        if (!cvx_st_find(w->shards[k], name)) {
            rc = cvx_error("%s: the index places tensor '%s' in '%s', but that shard does not hold it", index_path,
                           name, file);
            break;
        }
    }
    cvx_config_free(&index);
    if (!rc && w->nshards == 0) rc = cvx_error("%s: weight_map is empty", index_path);
    return rc;
}

/* In a directory: an index.json if there is one, else the single .safetensors file.
 * Variant files ("*.fp16.safetensors") are considered only when nothing plainer exists. */
static int pick_in_dir(const char *dir, char *out, size_t n, int *is_index) {
    DIR *d = opendir(dir);
    if (!d) return cvx_error("%s: cannot open directory", dir);
    char best_index[1024] = "", best_file[1024] = "";
    int nfiles = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        int dots = 0;
        for (const char *c = s; *c; c++) dots += *c == '.';
        if (ends_with(s, ".safetensors.index.json")) {
            if (!best_index[0] || dots < 3) snprintf(best_index, sizeof best_index, "%s", s);
        } else if (ends_with(s, ".safetensors")) {
            if (dots == 1) nfiles++;
            if (!best_file[0] || dots == 1) snprintf(best_file, sizeof best_file, "%s", s);
        }
    }
    closedir(d);
    if (best_index[0]) { *is_index = 1; return cvx_path_join(out, n, dir, best_index); }
    if (nfiles > 1) return cvx_error("%s: several .safetensors files and no *.safetensors.index.json to say which holds what", dir);
    if (best_file[0]) { *is_index = 0; return cvx_path_join(out, n, dir, best_file); }
    return cvx_error("%s: no .safetensors weights (and no *.safetensors.index.json) in this directory", dir);
}

/* A GGUF file begins with the magic "GGUF" (whatever its name). */
static int is_gguf_file(const char *path) {
    unsigned char magic[4] = {0};
    int fd = cvx_open_input(path);   /* not a FIFO's blocking open: the opener of the file says what it is */
    if (fd < 0) return cvx_clear_error(), 0;
    ssize_t n = read(fd, magic, 4);
    close(fd);
    return n == 4 && !memcmp(magic, "GGUF", 4);
}

/* The tensors of a GGUF file as cvx_tensors. A `comfy.gguf.orig_shape.<name>` array (ComfyUI-GGUF's
 * convert.py writes one for a tensor it flattened to rows of 256) gives the model's shape back: same
 * number of elements and, for a block type, a last dimension made of whole blocks (so the rows a
 * linear reads are whole blocks). */
static int open_gguf(cvx_weights *w, const char *file) {
    if (!(w->gguf = cvx_gguf_open(file))) return -1;
    int n = cvx_gguf_tensor_count(w->gguf);
    w->gt = cvx_calloc((size_t)(n ? n : 1), sizeof *w->gt);
    for (int i = 0; i < n; i++) {
        cvx_tensor *t = &w->gt[i];
        *t = cvx_gguf_tensor_at(w->gguf, i)->t;
        char key[600];
        int64_t shape[CVX_MAX_DIMS];
        size_t nd = 0;
        snprintf(key, sizeof key, "comfy.gguf.orig_shape.%s", t->name);
        if (cvx_gguf_find_key(w->gguf, key) < 0) continue;
        if (cvx_gguf_get_arr_i64(w->gguf, key, shape, CVX_MAX_DIMS, &nd)) return -1;
        int64_t numel = 1;
        int ok = nd >= 1;
        for (size_t d = 0; ok && d < nd; d++) {
            ok = shape[d] >= 1 && shape[d] <= t->numel;
            if (ok) numel *= shape[d];
            ok = ok && numel <= t->numel;
        }
        ok = ok && numel == t->numel && shape[nd - 1] % cvx_dtype_block(t->dtype) == 0;
        if (!ok) {
            char want[160], got[160];
            return cvx_error("%s: key '%s' = %s does not fit tensor '%s' (%s, %s): expected the same number of "
                             "elements, the last dimension a multiple of %d", file, key,
                             cvx_shape_str((int)(nd < CVX_MAX_DIMS ? nd : CVX_MAX_DIMS), shape, want, sizeof want),
                             t->name, cvx_shape_str(t->ndim, t->shape, got, sizeof got), cvx_dtype_name(t->dtype),
                             cvx_dtype_block(t->dtype));
        }
        t->ndim = (int)nd;
        memcpy(t->shape, shape, nd * sizeof *shape);
    }
    return 0;
}

cvx_weights *cvx_weights_open(const char *path) {
    cvx_weights *w = cvx_calloc(1, sizeof *w);
    char file[4096];
    int is_index = ends_with(path, ".json"), rc;
    if (cvx_is_dir(path)) rc = pick_in_dir(path, file, sizeof file, &is_index);
    else rc = snprintf(file, sizeof file, "%s", path) >= (int)sizeof file ? cvx_error("path too long") : 0;
    if (!rc) {
        w->path = strdup(file);
        /* a .gguf name is read as GGUF whatever its first bytes (a damaged one gets GGUF's messages) */
        rc = is_index ? open_index(w, file)
           : is_gguf_file(file) || ends_with(file, ".gguf") ? open_gguf(w, file) : add_shard(w, file);
    }
    if (!rc) rc = open_qweights(w);
    if (rc) { cvx_weights_close(w); return NULL; }
    return w;
}

void cvx_weights_close(cvx_weights *w) {
    if (!w) return;
    for (int i = 0; i < w->nshards; i++) cvx_st_close(w->shards[i]);
    free(w->shards);
    cvx_gguf_close(w->gguf);
    free(w->gt);
    for (int i = 0; i < w->nqv; i++) free((char *)w->qv[i].t.name), free(w->qv[i].owned);
    free(w->qv);
    for (int i = 0; i < w->nnm; i++) free((char *)w->nm[i].t.name), free(w->nm[i].own);
    free(w->nm);
    free(w->names);
    free(w->path);
    free(w);
}

static const cvx_tensor *find_named(const cvx_weights *w, const char *name);

const cvx_tensor *cvx_weights_find(const cvx_weights *w, const char *name) {
    if (w->names) return find_named(w, name);
    if (w->gguf) {
        const cvx_gguf_tensor *gt = cvx_gguf_find(w->gguf, name);
        return gt ? &w->gt[gt - cvx_gguf_tensor_at(w->gguf, 0)] : NULL;
    }
    const qview *v = find_qview(w, name);
    if (v) return &v->t;
    size_t stem;
    for (int i = 0; i < w->nshards; i++) {
        const cvx_tensor *t = cvx_st_find(w->shards[i], name);
        if (t) return qweight_kind(t->name, &stem) < 0 ? t : NULL;   /* a qweight is known by its view's name */
    }
    return NULL;
}

/* The shape error of a qweight view: the file's tensor, its bytes, and what the config's shape needs. */
static void qview_shape_error(const qview *v, const int64_t *shape, int ndim) {
    const cvx_tensor *s = v->src;
    const cvx_dtype q = v->t.dtype;
    const int64_t blk = cvx_dtype_block(q), bb = (int64_t)cvx_dtype_block_bytes(q);
    char got[160], want[160];
    cvx_shape_str(s->ndim, s->shape, got, sizeof got);
    cvx_shape_str(ndim, shape, want, sizeof want);
    if (ndim != 2 || shape[0] < 0 || shape[1] < 0)
        cvx_error("%s: tensor '%s' (U8 %s) holds %s blocks of a [%lld, %lld] linear weight, expected %s (from the "
                  "config)", s->file, s->name, got, cvx_dtype_name(q), (long long)v->t.shape[0],
                  (long long)v->t.shape[1], want);
    else if (shape[1] % blk)
        cvx_error("%s: tensor '%s' (U8 %s) holds %s blocks, but the config's shape %s has %lld columns, not a "
                  "multiple of the %lld-value %s block", s->file, s->name, got, cvx_dtype_name(q), want,
                  (long long)shape[1], (long long)blk, cvx_dtype_name(q));
    else
        cvx_error("%s: tensor '%s' has shape %s U8 (%zu bytes), expected [%lld, %lld] U8 (%lld bytes): the %s blocks "
                  "of the config's %s", s->file, s->name, got, s->nbytes, (long long)shape[0],
                  (long long)(shape[1] / blk * bb), (long long)(shape[0] * (shape[1] / blk * bb)), cvx_dtype_name(q),
                  want);
}

const cvx_tensor *cvx_weights_get(const cvx_weights *w, const char *name, const int64_t *shape, int ndim) {
    const cvx_tensor *t = cvx_weights_find(w, name);
    char want[160], got[160];
    if (!t && w->names) { cvx_error("%s: tensor '%s' is missing (%s)", w->path, name, w->names); return NULL; }
    if (!t) { cvx_error("%s: tensor '%s' is missing", w->path, name); return NULL; }
    if (!cvx_dtype_to_f32_ok(t->dtype)) {
        cvx_error("%s: tensor '%s' has dtype %s, expected a float type (F32, BF16, F16, F8_E4M3) or a GGUF block "
                  "type", t->file, name, cvx_dtype_name(t->dtype));
        return NULL;
    }
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = shape[i] < 0 || shape[i] == t->shape[i];
    const qview *v = ok ? NULL : find_qview(w, name);
    if (v && !v->owned) {
        qview_shape_error(v, shape, ndim);
        return NULL;
    }
    if (!ok && w->names) {
        cvx_error("%s: tensor '%s' ('%s' in the file) has shape %s, expected %s (from the config)", t->file, name,
                  ((const named *)(const void *)t)->src->name, cvx_shape_str(t->ndim, t->shape, got, sizeof got),
                  cvx_shape_str(ndim, shape, want, sizeof want));
        return NULL;
    }
    if (!ok) {
        cvx_error("%s: tensor '%s' has shape %s, expected %s (from the config)", t->file, name,
                  cvx_shape_str(t->ndim, t->shape, got, sizeof got), cvx_shape_str(ndim, shape, want, sizeof want));
        return NULL;
    }
    return t;
}

int cvx_weights_count(const cvx_weights *w) {
    if (w->gguf) return cvx_gguf_tensor_count(w->gguf);
    int n = 0;
    for (int i = 0; i < w->nshards; i++) n += cvx_st_count(w->shards[i]);
    return n;
}
const char *cvx_weights_path(const cvx_weights *w) { return w->path; }

const cvx_tensor *cvx_weights_at(const cvx_weights *w, int i) {
    if (i < 0) return NULL;
    if (w->gguf) return i < cvx_gguf_tensor_count(w->gguf) ? &w->gt[i] : NULL;
    for (int s = 0; s < w->nshards; i -= cvx_st_count(w->shards[s]), s++)
        if (i < cvx_st_count(w->shards[s])) {
            const cvx_tensor *t = cvx_st_tensor(w->shards[s], i);
            for (int k = 0; k < w->nqv; k++)   /* a qweight: its view */
                if (w->qv[k].src == t) return &w->qv[k].t;
            return t;
        }
    return NULL;
}

const cvx_gguf *cvx_weights_gguf(const cvx_weights *w) { return w->gguf; }

const char *cvx_weights_describe(const cvx_weights *w, char *buf, size_t n) {
    int count[CVX_DTYPE_COUNT] = {0}, total = cvx_weights_count(w);
    for (int i = 0; i < total; i++) count[cvx_weights_at(w, i)->dtype]++;
    size_t len = 0;
    uint32_t ft;
    const char *arch = NULL;
    if (w->gguf) {
        arch = cvx_gguf_find_key(w->gguf, "general.architecture") >= 0 ? cvx_gguf_get_str(w->gguf, "general.architecture")
                                                                        : NULL;
        int has_ft = cvx_gguf_find_key(w->gguf, "general.file_type") >= 0 && !cvx_gguf_get_u32(w->gguf, "general.file_type", &ft);
        const char *ftn = has_ft ? cvx_ggml_ftype_name(ft) : NULL;
        len += (size_t)snprintf(buf, n, "gguf");
        if (arch && len < n) len += (size_t)snprintf(buf + len, n - len, " %s", arch);
        if (has_ft && len < n) len += (size_t)snprintf(buf + len, n - len, " %s", ftn ? ftn : "file_type ?");
        cvx_clear_error();
    } else {
        len += (size_t)snprintf(buf, n, "safetensors");
    }
    const char *sep = ": ";
    for (int d = 0; d < CVX_DTYPE_COUNT && len < n; d++)
        if (count[d]) {
            len += (size_t)snprintf(buf + len, n - len, "%s%d %s", sep, count[d], cvx_dtype_name((cvx_dtype)d));
            sep = ", ";
        }
    return buf;
}

/* ---- identity: what a resumed run checks the weights against (issue 37) ---- */

enum { ID_BLOCK = 4096, ID_SAMPLES = 64, ID_WHOLE = 16 << 20 };

/* XXH64 chained over: the size, the header (bytes before the data: head), then the whole file when
 * it is at most ID_WHOLE bytes, else ID_SAMPLES blocks of ID_BLOCK spread evenly over the data. */
static int file_identity(const char *file, size_t head, uint64_t *h, off_t *size, struct timespec *mtime) {
    int fd = cvx_open_input(file);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return cvx_error("%s: cannot stat: %s", file, strerror(errno)); }
    *size = st.st_size, *mtime = st.st_mtim;
    const size_t len = (size_t)st.st_size;
    *h = cvx_xxh64(&st.st_size, sizeof st.st_size, *h);
    if (head > len) head = len;
    const int whole = len <= ID_WHOLE;
    const size_t first = whole ? len : head;
    unsigned char *buf = cvx_malloc(first > ID_BLOCK ? first : ID_BLOCK);
    int rc = 0;
    if (pread(fd, buf, first, 0) != (ssize_t)first) rc = cvx_error("%s: cannot read: %s", file, strerror(errno));
    else *h = cvx_xxh64(buf, first, *h);
    for (int i = 0; !rc && !whole && i < ID_SAMPLES; i++) {
        const size_t span = len - head - ID_BLOCK;   /* len > ID_WHOLE >= head + ID_BLOCK */
        const off_t at = (off_t)(head + span / (ID_SAMPLES - 1) * (size_t)i);
        if (pread(fd, buf, ID_BLOCK, at) != ID_BLOCK) rc = cvx_error("%s: cannot read: %s", file, strerror(errno));
        else *h = cvx_xxh64(buf, ID_BLOCK, *h);
    }
    free(buf);
    close(fd);
    return rc;
}

/* The bytes before the tensor data of shard i (safetensors: 8 + the header length). */
static size_t shard_head(const char *file) {
    unsigned char b[8];
    int fd = cvx_open_input(file);
    if (fd < 0) return 0;
    const ssize_t n = pread(fd, b, 8, 0);
    close(fd);
    uint64_t hl = 0;
    for (int i = 7; n == 8 && i >= 0; i--) hl = hl << 8 | b[i];
    return n == 8 && hl < ((uint64_t)1 << 32) ? (size_t)(8 + hl) : 0;
}

int cvx_weights_identity(const char *path, char *out, size_t n) {
    cvx_weights *w = cvx_weights_open(path);
    if (!w) return -1;
    const int nf = w->gguf ? 1 : w->nshards;
    uint64_t h = 0;
    long long bytes = 0;
    struct timespec newest = {0, 0};
    int rc = 0;
    for (int i = 0; i < nf && !rc; i++) {
        const char *f = w->gguf ? cvx_gguf_path(w->gguf) : cvx_st_path(w->shards[i]);
        off_t size = 0;
        struct timespec mt = {0, 0};
        rc = file_identity(f, w->gguf ? cvx_gguf_data_offset(w->gguf) : shard_head(f), &h, &size, &mt);
        bytes += (long long)size;
        if (mt.tv_sec > newest.tv_sec || (mt.tv_sec == newest.tv_sec && mt.tv_nsec > newest.tv_nsec)) newest = mt;
    }
    cvx_weights_close(w);
    if (rc) return -1;
    snprintf(out, n, "%d file%s, %lld bytes, modified %lld.%09ld, content xxh64 %016llx", nf, nf == 1 ? "" : "s",
             bytes, (long long)newest.tv_sec, newest.tv_nsec, (unsigned long long)h);
    return 0;
}

int cvx_weights_check_arch(const cvx_weights *w, const char *arch, const char *family) {
    if (!w->gguf || cvx_gguf_find_key(w->gguf, "general.architecture") < 0) return 0;   /* no claim: the tensors decide */
    const char *a = cvx_gguf_get_str(w->gguf, "general.architecture");
    if (!a) return -1;
    if (strcmp(a, arch) != 0)
        return cvx_error("%s: general.architecture is '%s', expected '%s': not a %s transformer GGUF", w->path, a, arch,
                         family);
    return 0;
}

/* ---- a file with other names than the model code's: cvx_weights_rename ---- */

static int cmp_named(const void *a, const void *b) { return strcmp(((const named *)a)->t.name, ((const named *)b)->t.name); }

static const cvx_tensor *find_named(const cvx_weights *w, const char *name) {
    named key = {.t.name = name};
    const named *n = w->nnm ? bsearch(&key, w->nm, (size_t)w->nnm, sizeof *w->nm, cmp_named) : NULL;
    return n ? &n->t : NULL;
}

/* Adds (name -> t), keeping nm sorted; a name given twice is an error. */
static int add_named(cvx_weights *w, const char *name, const cvx_tensor *t, const cvx_tensor *src, void *own) {
    const named *had = (const named *)(const void *)find_named(w, name);
    if (had) {
        free(own);
        return cvx_error("%s: tensors '%s' and '%s' both stand for '%s' (%s)", w->path, had->src->name, src->name, name,
                         w->names);
    }
    if (w->nnm == w->cap_nm) {
        w->cap_nm = w->cap_nm ? 2 * w->cap_nm : 256;
        w->nm = cvx_realloc(w->nm, (size_t)w->cap_nm * sizeof *w->nm);
    }
    size_t at = 0;
    while (at < (size_t)w->nnm && strcmp(w->nm[at].t.name, name) < 0) at++;
    memmove(w->nm + at + 1, w->nm + at, ((size_t)w->nnm - at) * sizeof *w->nm);
    w->nm[at] = (named){.t = *t, .src = src, .own = own};
    w->nm[at].t.name = strdup(name);
    w->nnm++;
    return 0;
}

int cvx_weights_rename(cvx_weights *w, const char *label, int (*rename)(const char *name, char *out, size_t n, void *user),
                       void *user) {
    CVX_CHECK(!w->names);
    const int n = cvx_weights_count(w);
    /* collect then sort once: add_named's insertion is for the few derived tensors */
    w->names = strdup(label);
    w->nm = cvx_calloc((size_t)n + 1, sizeof *w->nm);
    w->cap_nm = n + 1;
    char out[512];
    for (int i = 0; i < n; i++) {
        const cvx_tensor *t = cvx_weights_at(w, i);
        if (!rename(t->name, out, sizeof out, user)) continue;
        w->nm[w->nnm] = (named){.t = *t, .src = t};
        w->nm[w->nnm++].t.name = strdup(out);
    }
    qsort(w->nm, (size_t)w->nnm, sizeof *w->nm, cmp_named);
    for (int i = 1; i < w->nnm; i++)
        if (!strcmp(w->nm[i - 1].t.name, w->nm[i].t.name))
            return cvx_error("%s: tensors '%s' and '%s' both stand for '%s' (%s)", w->path, w->nm[i - 1].src->name,
                             w->nm[i].src->name, w->nm[i].t.name, label);
    return 0;
}

int cvx_weights_add_rows(cvx_weights *w, const char *name, const cvx_tensor *src, int64_t row0, int64_t rows) {
    CVX_CHECK(w->names && src->ndim >= 1 && row0 >= 0 && rows > 0 && row0 + rows <= src->shape[0]);
    const size_t row_bytes = src->nbytes / (size_t)src->shape[0];
    cvx_tensor t = *src;
    t.shape[0] = rows;
    t.numel = src->numel / src->shape[0] * rows;
    t.nbytes = row_bytes * (size_t)rows;
    t.data = (const char *)src->data + row_bytes * (size_t)row0;
    return add_named(w, name, &t, src, NULL);
}

int cvx_tensor_gather_rows(const cvx_tensor *t, const int64_t *ids, int n, float *x) {
    CVX_CHECK(t->ndim == 2);
    const int64_t D = t->shape[1];
    uint64_t row_bytes;   /* a row of D values: D / block blocks for a GGUF block type */
    if (cvx_dtype_nbytes(t->dtype, (uint64_t)D, &row_bytes))
        return cvx_error("%s: token embedding of type %s: a row of %lld values is not whole blocks", t->file,
                         cvx_dtype_name(t->dtype), (long long)D);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->shape[0])
            return cvx_error("token id %lld at position %d is outside the embedding table (%lld rows, %s)",
                             (long long)ids[i], i, (long long)t->shape[0], t->file);
    for (int i = 0; i < n; i++)
        cvx_to_f32_n(t->dtype, (const char *)t->data + (size_t)ids[i] * row_bytes, x + (size_t)i * (size_t)D,
                     (size_t)D);
    return 0;
}

int cvx_weights_add_data(cvx_weights *w, const char *name, const cvx_tensor *src, void *data) {
    CVX_CHECK(w->names);
    cvx_tensor t = *src;
    t.data = data;
    return add_named(w, name, &t, src, data);
}

void cvx_str_replace_rules(const char *in, const char *const (*rules)[2], int nrules, char *out, size_t n) {
    char a[512], b[512];
    snprintf(a, sizeof a, "%s", in);
    for (int r = 0; r < nrules; r++) {
        const char *from = rules[r][0], *to = rules[r][1], *p = a, *hit;
        const size_t fl = strlen(from);
        size_t len = 0;
        if (!fl || !strstr(a, from)) continue;
        while ((hit = strstr(p, from)) && len < sizeof b) {   /* str.replace: every occurrence, left to right */
            len += (size_t)snprintf(b + len, sizeof b - len, "%.*s%s", (int)(hit - p), p, to);
            p = hit + fl;
        }
        if (len < sizeof b) snprintf(b + len, sizeof b - len, "%s", p);
        memcpy(a, b, sizeof a);
    }
    snprintf(out, n, "%s", a);
}
