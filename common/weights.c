/* A model's weights as one lookup table: a single safetensors file or a sharded checkpoint
 * described by *.safetensors.index.json ({"weight_map": {tensor: shard file}}). */
#include "config.h"
#include "error.h"
#include "fileio.h"
#include "safetensors.h"

#include <dirent.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cvx_weights {
    char *path;
    cvx_safetensors **shards;
    int nshards;
};

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
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

cvx_weights *cvx_weights_open(const char *path) {
    cvx_weights *w = cvx_calloc(1, sizeof *w);
    char file[4096];
    int is_index = ends_with(path, ".json"), rc;
    if (cvx_is_dir(path)) rc = pick_in_dir(path, file, sizeof file, &is_index);
    else rc = snprintf(file, sizeof file, "%s", path) >= (int)sizeof file ? cvx_error("path too long") : 0;
    if (!rc) {
        w->path = strdup(file);
        rc = is_index ? open_index(w, file) : add_shard(w, file);
    }
    if (rc) { cvx_weights_close(w); return NULL; }
    return w;
}

void cvx_weights_close(cvx_weights *w) {
    if (!w) return;
    for (int i = 0; i < w->nshards; i++) cvx_st_close(w->shards[i]);
    free(w->shards);
    free(w->path);
    free(w);
}

const cvx_tensor *cvx_weights_find(const cvx_weights *w, const char *name) {
    for (int i = 0; i < w->nshards; i++) {
        const cvx_tensor *t = cvx_st_find(w->shards[i], name);
        if (t) return t;
    }
    return NULL;
}

const cvx_tensor *cvx_weights_get(const cvx_weights *w, const char *name, const int64_t *shape, int ndim) {
    const cvx_tensor *t = cvx_weights_find(w, name);
    char want[160], got[160];
    if (!t) { cvx_error("%s: tensor '%s' is missing", w->path, name); return NULL; }
    if (!cvx_dtype_is_float(t->dtype)) {
        cvx_error("%s: tensor '%s' has dtype %s, expected a float type (F32, BF16, F16)", t->file, name,
                  cvx_dtype_name(t->dtype));
        return NULL;
    }
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = shape[i] < 0 || shape[i] == t->shape[i];
    if (!ok) {
        cvx_error("%s: tensor '%s' has shape %s, expected %s (from the config)", t->file, name,
                  cvx_shape_str(t->ndim, t->shape, got, sizeof got), cvx_shape_str(ndim, shape, want, sizeof want));
        return NULL;
    }
    return t;
}

int cvx_weights_count(const cvx_weights *w) {
    int n = 0;
    for (int i = 0; i < w->nshards; i++) n += cvx_st_count(w->shards[i]);
    return n;
}
const char *cvx_weights_path(const cvx_weights *w) { return w->path; }
