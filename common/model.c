/* Model locator: a local directory, or a hub id found in the local HuggingFace cache. */
#include "model.h"
#include "error.h"
#include "fileio.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hub_cache_dir(char *out, size_t n) {
    const char *v = getenv("HF_HUB_CACHE");
    if (v && v[0]) return snprintf(out, n, "%s", v) < (int)n ? 0 : -1;
    v = getenv("HF_HOME");
    if (v && v[0]) return snprintf(out, n, "%s/hub", v) < (int)n ? 0 : -1;
    v = getenv("HOME");
    return snprintf(out, n, "%s/.cache/huggingface/hub", v ? v : "") < (int)n ? 0 : -1;
}

/* The only snapshot directory, when refs/main is absent. */
static int only_snapshot(const char *snapdir, char *rev, size_t n) {
    DIR *d = opendir(snapdir);
    if (!d) return -1;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(rev, n, "%s", e->d_name);
        count++;
    }
    closedir(d);
    return count == 1 ? 0 : -1;
}

int cvx_model_resolve(const char *id, char *out, size_t n) {
    if (!id || !id[0]) return cvx_error("no model given (use --model_dir DIR or --model_id ORG/NAME)");
    if (cvx_is_dir(id)) return snprintf(out, n, "%s", id) < (int)n ? 0 : cvx_error("path too long: %s", id);
    const char *slash = strchr(id, '/');
    if (!slash || strchr(slash + 1, '/') || id[0] == '.' || id[0] == '/')
        return cvx_error("model '%s' is not a directory, nor a hub id of the form ORG/NAME", id);
    char cache[2048], repo[3072], snaps[3200], ref[3300], rev[256] = "";
    if (hub_cache_dir(cache, sizeof cache) != 0) return cvx_error("HuggingFace cache path too long");
    snprintf(repo, sizeof repo, "%s/models--%.*s--%s", cache, (int)(slash - id), id, slash + 1);
    snprintf(snaps, sizeof snaps, "%s/snapshots", repo);
    snprintf(ref, sizeof ref, "%s/refs/main", repo);
    char *r = cvx_is_file(ref) ? cvx_read_file(ref, NULL) : NULL;
    if (r) {
        size_t k = strcspn(r, " \r\n\t");
        snprintf(rev, sizeof rev, "%.*s", (int)k, r);
        free(r);
    } else if (only_snapshot(snaps, rev, sizeof rev) != 0) {
        rev[0] = 0;
    }
    char snap[3600];
    snprintf(snap, sizeof snap, "%s/%s", snaps, rev);
    if (!rev[0] || strchr(rev, '/') || !cvx_is_dir(snap))
        return cvx_error("model '%s' not found: not a local directory, and no snapshot in the HuggingFace cache "
                         "(looked for %s, revision from %s; set HF_HUB_CACHE or HF_HOME, or pass --model_dir). "
                         "Nothing is downloaded.", id, snaps, ref);
    return snprintf(out, n, "%s", snap) < (int)n ? 0 : cvx_error("path too long: %s", snap);
}

int cvx_model_component(const char *model_dir_in, const char *component, const char *file, char *out, size_t n) {
    char model_dir[4096];  /* out may alias model_dir_in */
    snprintf(model_dir, sizeof model_dir, "%s", model_dir_in);
    if (cvx_path_join(out, n, model_dir, component) != 0) return -1;
    if (!cvx_is_dir(out)) return cvx_error("%s: missing component directory '%s' of model %s", out, component, model_dir);
    if (file) {
        char f[4096];
        if (cvx_path_join(f, sizeof f, out, file) != 0) return -1;
        if (!cvx_is_file(f)) return cvx_error("%s: missing (model %s)", f, model_dir);
    }
    return 0;
}
