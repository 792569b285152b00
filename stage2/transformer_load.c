/* What stage 2's transformer loaders share: see transformer_load.h. */
#include "transformer_load.h"

#include "error.h"
#include "fileio.h"

#include <stdio.h>
#include <stdlib.h>

const cvx_tensor *cvx_weights_getter_plain(const void *w, const char *name, const int64_t *shape, int ndim) {
    return cvx_weights_get(w, name, shape, ndim);
}

int cvx_attn_weights_load(cvx_weights_getter get, const void *user, const char *prefix, int64_t D,
                          cvx_attn_weights *a) {
    static const char *const proj[4] = {"to_q", "to_k", "to_v", "to_out.0"};
    const cvx_tensor **w[4] = {&a->q_w, &a->k_w, &a->v_w, &a->o_w}, **b[4] = {&a->q_b, &a->k_b, &a->v_b, &a->o_b};
    float **norm[2] = {&a->norm_q, &a->norm_k};
    char name[256];
    for (int k = 0; k < 4; k++) {
        snprintf(name, sizeof name, "%s.%s.weight", prefix, proj[k]);
        if (!(*w[k] = get(user, name, CVX_SHAPE(D, D)))) return -1;
        snprintf(name, sizeof name, "%s.%s.bias", prefix, proj[k]);
        if (!(*b[k] = get(user, name, CVX_SHAPE(D)))) return -1;
    }
    for (int k = 0; k < 2; k++) {
        snprintf(name, sizeof name, "%s.norm_%c.weight", prefix, k ? 'k' : 'q');
        const cvx_tensor *t = get(user, name, CVX_SHAPE(D));
        if (!t) return -1;
        *norm[k] = cvx_tensor_f32_dup(t);
    }
    return 0;
}

void cvx_attn_weights_free(cvx_attn_weights *a) {
    free(a->norm_q);
    free(a->norm_k);
}

cvx_weights *cvx_weights_open_family(const char *path, const char *arch, const char *family) {
    cvx_weights *w = cvx_weights_open(path);
    if (w && cvx_weights_check_arch(w, arch, family)) {
        cvx_weights_close(w);
        return NULL;
    }
    return w;
}

cvx_ctx *cvx_ctx_or_new(cvx_ctx *ctx, int *owns) {
    *owns = ctx == NULL;
    return ctx ? ctx : cvx_ctx_new(cvx_threads());
}

int cvx_dir_config_json(char *path, size_t n, const char *dir) {
    if (cvx_path_join(path, n, dir, "config.json")) return cvx_error("%s: path too long", dir);
    return 0;
}
