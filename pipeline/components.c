/* Parts a family row composes instead of copying (pipeline/internal.h): the memory check of a
 * component's weights (a single file or a directory of .safetensors / .gguf files) and a
 * component's file path. */
#include "pipeline/internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "fileio.h"

/* Bytes of the .safetensors / .gguf files at `path` (a file, or a directory's files). */
static double weight_file_bytes(const char *path) {
    struct stat st;
    if (stat(path, &st)) return 0;
    if (!S_ISDIR(st.st_mode)) return (double)st.st_size;
    double total = 0;
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *dot = strrchr(e->d_name, '.');
        char f[4600];
        if (!dot || (strcmp(dot, ".safetensors") && strcmp(dot, ".gguf"))) continue;
        snprintf(f, sizeof f, "%s/%s", path, e->d_name);
        if (!stat(f, &st)) total += (double)st.st_size;
    }
    if (d) closedir(d);
    return total;
}

int cvx_weights_fit_memory(const char *path, const char *advice) {
    const double bytes = weight_file_bytes(path);
    const double mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
    const char *allow = getenv("CVX_ALLOW_LARGE_WEIGHTS");
    if (mem <= 0 || bytes < 0.85 * mem || (allow && allow[0] == '1')) return 0;
    return cvx_error("%s: the weights are %.1f GB and this machine has %.1f GB of memory: they would be read from disk "
                     "again and again for hours. Use %s, or more memory (CVX_ALLOW_LARGE_WEIGHTS=1 runs anyway)",
                     path, bytes / 1e9, mem / 1e9, advice);
}

void cvx_component_path(const cvx_model *m, const char *comp, const char *file, char *out, size_t n) {
    snprintf(out, n, "%s/%s/%s", m->dir, comp, file);
}

int cvx_expert_paths(const cvx_model *m, int expert, char *cfg, size_t cn, char *weights, size_t wn) {
    const char *comp = expert ? "transformer_2" : "transformer", *flag = expert ? "--transformer_2" : "--transformer";
    const char *file = expert ? m->transformer_2_file : m->transformer_file;
    const char *other = expert ? m->transformer_file : m->transformer_2_file;
    const char *which = expert ? "low-noise" : "high-noise", *other_which = expert ? "high-noise" : "low-noise";
    cvx_component_path(m, comp, "config.json", cfg, cn);
    if (!cvx_is_file(cfg))
        return cvx_error("%s: no %s/config.json (the %s expert's config%s%s)", m->dir, comp, which,
                         file[0] ? ", needed beside " : "", file);
    if (file[0]) {
        snprintf(weights, wn, "%s", file);
        return 0;
    }
    snprintf(weights, wn, "%s/%s", m->dir, comp);
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/diffusion_pytorch_model.safetensors", weights);
    struct stat st;
    int has = !stat(probe, &st);
    snprintf(probe, sizeof probe, "%s/diffusion_pytorch_model.safetensors.index.json", weights);
    has = has || !stat(probe, &st);
    if (other[0] && !has)
        return cvx_error("%s: the %s expert was given as one file (%s) but not the %s one, and %s has no weights: "
                         "give it with %s FILE", other, other_which, expert ? "--transformer" : "--transformer_2", which,
                         weights, flag);
    return 0;
}
