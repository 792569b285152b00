/* Step caching: TeaCache and FirstBlockCache over the pieces of the transformer forward.
 * The rules are in cache.h; sources, quirks and figures in docs/caching.md. */
#include "cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "ops.h"

int cogvideox_cache_parse_kind(const char *s, cogvideox_cache_kind *out) {
    static const char *const names[] = {"none", "teacache", "fbcache"};
    for (int k = 0; k < 3; k++)
        if (!strcmp(s, names[k])) { *out = (cogvideox_cache_kind)k; return 0; }
    return cvx_error("--cache must be none, teacache or fbcache, got '%s'", s);
}

const char *cogvideox_cache_kind_name(cogvideox_cache_kind k) {
    return k == COGVIDEOX_CACHE_TEACACHE ? "teacache" : k == COGVIDEOX_CACHE_FBCACHE ? "fbcache" : "none";
}

double cogvideox_cache_default_threshold(cogvideox_cache_kind k) {
    return k == COGVIDEOX_CACHE_TEACACHE ? 0.2 : k == COGVIDEOX_CACHE_FBCACHE ? 0.05 : 0.0;
}

/* ali-vilab/TeaCache TeaCache4CogVideoX1.5/teacache_sample_video.py, coefficients_dict (as of
 * commit 0870af8, 2025-04-14); 5b-I2V has the 5b numbers. */
static const struct { const char *name; double c[5]; } teacache_sets[] = {
    {"CogVideoX-2b", {-3.10658903e+01, 2.54732368e+01, -5.92380459e+00, 1.75769064e+00, -3.61568434e-03}},
    {"CogVideoX-5b", {-1.53880483e+03, 8.43202495e+02, -1.34363087e+02, 7.97131516e+00, -5.23162339e-02}},
    {"CogVideoX1.5-5B", {2.50210439e+02, -1.65061612e+02, 3.57804877e+01, -7.81551492e-01, 3.58559703e-02}},
    {"CogVideoX1.5-5B-I2V", {1.22842302e+02, -1.04088754e+02, 2.62981677e+01, -3.06009921e-01, 3.71213220e-02}},
};

const char *cogvideox_teacache_coefficients(const cogvideox_config *c, double out[5]) {
    int k;
    if (c->patch_size_t <= 0) k = c->use_rotary_positional_embeddings ? 1 : 0;   /* 1.0: 2b sin-cos, 5b rotary */
    else k = (c->in_channels == 2 * c->out_channels || c->ofs_embed_dim) ? 3 : 2;  /* 1.5: I2V or T2V */
    memcpy(out, teacache_sets[k].c, sizeof teacache_sets[k].c);
    return teacache_sets[k].name;
}

int cogvideox_teacache_parse_coefficients(const char *s, double out[5]) {
    const char *p = s;
    for (int i = 0; i < 5; i++) {
        char *end;
        out[i] = strtod(p, &end);
        if (end == p || !isfinite(out[i]) || (i < 4 ? *end != ',' : *end != '\0'))
            return cvx_error("--teacache_coefficients must be 5 comma-separated finite numbers c0,c1,c2,c3,c4 "
                             "(highest power first), got '%s'", s);
        p = end + 1;
    }
    return 0;
}

int cogvideox_cache_init(cogvideox_cache *c, cogvideox_cache_kind kind, double threshold, const double coeffs[5],
                         int n_steps, int num_layers) {
    memset(c, 0, sizeof *c);
    c->kind = threshold > 0 ? kind : COGVIDEOX_CACHE_NONE;
    c->threshold = threshold;
    if (coeffs) memcpy(c->coeffs, coeffs, sizeof c->coeffs);
    c->n_steps = n_steps;
    c->num_layers = num_layers;
    c->last_compute = 1;
    if (c->kind == COGVIDEOX_CACHE_FBCACHE && num_layers < 2)
        return cvx_error("--cache fbcache needs a transformer with at least 2 blocks (block 0 decides, the rest are "
                         "cached), this one has %d", num_layers);
    return 0;
}

void cogvideox_cache_free(cogvideox_cache *c) {
    free(c->prev_e);
    free(c->resid);
    free(c->head_prev);
    free(c->head_cur);
    c->prev_e = c->resid = c->head_prev = c->head_cur = NULL;
}

int64_t cogvideox_cache_blocks_skipped(const cogvideox_cache *c) {
    int per = c->kind == COGVIDEOX_CACHE_TEACACHE ? c->num_layers : c->kind == COGVIDEOX_CACHE_FBCACHE ? c->num_layers - 1 : 0;
    return c->steps_skipped * per;
}

double cogvideox_poly1d(const double c[5], double x) {
    double y = 0;
    for (int i = 0; i < 5; i++) y = y * x + c[i];
    return y;
}

double cogvideox_rel_l1(const float *x, const float *prev, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += fabs((double)x[i] - (double)prev[i]);
        den += fabs((double)prev[i]);
    }
    return num / den;
}

int cogvideox_teacache_decide(cogvideox_cache *c, int step, const float *e, int E) {
    int compute;
    c->last_rel = c->last_p = NAN;
    if (step == 0 || step == c->n_steps - 1 || !c->prev_e || c->E != E) {
        compute = 1;
        c->acc = 0;
    } else {
        c->last_rel = cogvideox_rel_l1(e, c->prev_e, (size_t)E);
        c->last_p = cogvideox_poly1d(c->coeffs, c->last_rel);
        c->acc += c->last_p;
        compute = !(c->acc < c->threshold);   /* strict <, and NaN computes */
        if (compute) c->acc = 0;
    }
    if (c->force) compute = c->force(c->force_user, step);
    if (!c->prev_e || c->E != E) {
        free(c->prev_e);
        c->prev_e = cvx_alloc_f32((size_t)E);
        c->E = E;
    }
    memcpy(c->prev_e, e, sizeof(float) * (size_t)E);   /* e_prev follows every step, skipped or not */
    c->last_acc = c->acc;
    c->last_compute = compute;
    return compute;
}

int cogvideox_fbcache_decide(cogvideox_cache *c, int step, const float *r, size_t n) {
    int compute = 1;
    c->last_rel = c->last_p = NAN;
    if (c->head_prev && c->n_head == n) {
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
            num += fabs((double)r[i] - (double)c->head_prev[i]);
            den += fabs((double)c->head_prev[i]);
        }
        /* upstream: mean|r − P| / mean|P| > threshold (the counts cancel); Σ|P| == 0 computes here */
        c->last_rel = num / den;
        compute = den == 0 || c->last_rel > c->threshold;
    }
    if (c->force) compute = c->force(c->force_user, step);
    if (!c->head_prev) compute = 1;
    c->last_compute = compute;
    return compute;
}

/* -1 when a restored residual has another size than this forward's [n]. */
static int resid_check(const cogvideox_cache *c, size_t n) {
    if (c->resid && c->n_resid != n)
        return cvx_error("step cache: the cached residual has %zu values but this forward needs %zu (checkpoint of "
                         "another run?)", c->n_resid, n);
    return 0;
}

/* The residual buffer, allocated on the first computed step (the decisions compute while it is NULL). */
static void resid_alloc(cogvideox_cache *c, size_t n) {
    if (!c->resid) { c->resid = cvx_alloc_f32(n); c->n_resid = n; }
}

/* r = a − r, element-wise */
static void sub_from(float *r, const float *a, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) r[i] = a[i] - r[i];
}

/* h += r, element-wise */
static void add_to(float *h, const float *r, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) h[i] = h[i] + r[i];
}

/* TeaCache: decide on e, then run all blocks (keeping R) or add R. */
static int teacache_blocks(cogvideox_transformer *m, cogvideox_cache *c, int step, cogvideox_fwd *f) {
    size_t n = (size_t)f->B * f->S * f->D;
    if (resid_check(c, n)) return -1;
    int compute = cogvideox_teacache_decide(c, step, f->emb, f->E);   /* row 0: all CFG rows share t */
    if (!c->resid) compute = 1;   /* nothing to reuse yet (step 0 always computes anyway) */
    resid_alloc(c, n);
    if (compute) {
        memcpy(c->resid, f->h, n * sizeof(float));                                        // [B, S, D] h before
        cogvideox_forward_blocks(m, f, 0, c->num_layers);
        sub_from(c->resid, f->h, n);                                                      // R = h_after − h_before
    } else {
        add_to(f->h, c->resid, n);
    }
    return compute;
}

/* FBCache: block 0, decide on its video residual, then blocks 1.. (keeping T) or add T. */
static int fbcache_blocks(cogvideox_transformer *m, cogvideox_cache *c, int step, cogvideox_fwd *f) {
    size_t n = (size_t)f->B * f->S * f->D, nv = (size_t)f->N * f->D, nh = (size_t)f->B * nv;
    if (resid_check(c, n)) return -1;
    if (c->head_prev && c->n_head != nh)
        return cvx_error("step cache: the cached block-0 residual has %zu values but this forward needs %zu "
                         "(checkpoint of another run?)", c->n_head, nh);
    if (!c->head_cur) c->head_cur = cvx_alloc_f32(nh);
    float *X = c->head_cur;                                                               // [B, N, D]
    for (int b = 0; b < f->B; b++)
        memcpy(X + b * nv, f->h + ((size_t)b * f->S + f->L) * f->D, nv * sizeof(float));
    cogvideox_forward_blocks(m, f, 0, 1);
    for (int b = 0; b < f->B; b++) sub_from(X + b * nv, f->h + ((size_t)b * f->S + f->L) * f->D, nv);  // r
    int compute = cogvideox_fbcache_decide(c, step, X, nh);
    if (!c->resid) compute = 1;
    resid_alloc(c, n);
    if (compute) {
        c->head_cur = c->head_prev;                                                       // P ← r
        c->head_prev = X;
        c->n_head = nh;
        memcpy(c->resid, f->h, n * sizeof(float));                                        // block-0 output
        cogvideox_forward_blocks(m, f, 1, c->num_layers - 1);
        sub_from(c->resid, f->h, n);                                                      // T = h_out − h_block0
    } else {
        add_to(f->h, c->resid, n);
    }
    return compute;
}

int cogvideox_cache_forward(cogvideox_transformer *m, cogvideox_cache *c, int step, const float *x, int B, int F,
                            int H, int W, const float *text, int L, const int64_t *timestep, const float *rope_cos,
                            const float *rope_sin, float *out) {
    if (!c || !cogvideox_cache_active(c))
        return cogvideox_forward(m, x, B, F, H, W, text, L, timestep, rope_cos, rope_sin, out);
    cogvideox_fwd f;
    if (cogvideox_forward_embed(m, x, B, F, H, W, text, L, timestep, NULL, 0, rope_cos, rope_sin, &f)) return -1;
    int compute = c->kind == COGVIDEOX_CACHE_TEACACHE ? teacache_blocks(m, c, step, &f) : fbcache_blocks(m, c, step, &f);
    if (compute < 0) { cogvideox_forward_abort(&f); return -1; }
    if (compute) c->steps_computed++;
    else c->steps_skipped++;
    if (c->kind == COGVIDEOX_CACHE_TEACACHE)
        cvx_debug("teacache step %d: rel %.6g p %.6g acc %.6g -> %s", step + 1, c->last_rel, c->last_p, c->last_acc,
                  compute ? "compute" : "skip");
    else
        cvx_debug("fbcache step %d: diff %.6g -> %s", step + 1, c->last_rel, compute ? "compute" : "skip");
    cogvideox_forward_finalize(m, &f, out);
    return 0;
}

/* ---- checkpoint ---- */
int cogvideox_cache_save(const cogvideox_cache *c, cvx_st_writer *w) {
    if (!cogvideox_cache_active(c)) return 0;
    int64_t counts[2] = {c->steps_computed, c->steps_skipped}, two = 2, one = 1, n;
    int rc = cvx_stw_add(w, "cache_counts", CVX_I64, 1, &two, counts);
    rc |= cvx_stw_add(w, "teacache_acc", CVX_F64, 1, &one, &c->acc);
    if (c->prev_e) rc |= cvx_stw_add(w, "teacache_prev_e", CVX_F32, 1, (n = c->E, &n), c->prev_e);
    if (c->resid) rc |= cvx_stw_add(w, "cache_residual", CVX_F32, 1, (n = (int64_t)c->n_resid, &n), c->resid);
    if (c->head_prev)
        rc |= cvx_stw_add(w, "fbcache_head_residual", CVX_F32, 1, (n = (int64_t)c->n_head, &n), c->head_prev);
    return rc;
}

/* A 1-d tensor of `dtype` copied into a new buffer (*n its length); 0 when absent. */
static int load_vec(const cvx_safetensors *st, const char *path, const char *name, cvx_dtype dtype, size_t esz,
                    void **out, size_t *n) {
    const cvx_tensor *t = cvx_st_find(st, name);
    *out = NULL;
    if (!t) return 0;
    if (t->dtype != dtype || t->ndim != 1 || t->numel < 1)
        return cvx_error("%s: tensor '%s' must be 1-d %s (step cache state)", path, name, cvx_dtype_name(dtype));
    *n = (size_t)t->numel;
    *out = cvx_malloc(*n * esz);
    memcpy(*out, t->data, *n * esz);
    return 0;
}

int cogvideox_cache_load(cogvideox_cache *c, const cvx_safetensors *st, const char *path) {
    if (!cogvideox_cache_active(c)) return 0;
    void *counts = NULL, *acc = NULL, *e = NULL, *r = NULL, *hp = NULL;
    size_t nc = 0, na = 0, ne = 0, nr = 0, nh = 0;
    if (load_vec(st, path, "cache_counts", CVX_I64, 8, &counts, &nc) || load_vec(st, path, "teacache_acc", CVX_F64, 8, &acc, &na) ||
        load_vec(st, path, "teacache_prev_e", CVX_F32, 4, &e, &ne) || load_vec(st, path, "cache_residual", CVX_F32, 4, &r, &nr) ||
        load_vec(st, path, "fbcache_head_residual", CVX_F32, 4, &hp, &nh))
        goto fail;
    if (!counts || nc != 2 || !acc || na != 1 || !r) {
        cvx_error("%s: step cache state (cache_counts, teacache_acc, cache_residual) missing: the checkpoint was "
                  "written without --cache", path);
        goto fail;
    }
    cogvideox_cache_free(c);
    memcpy(&c->steps_computed, (int64_t *)counts, 8);
    memcpy(&c->steps_skipped, (int64_t *)counts + 1, 8);
    memcpy(&c->acc, acc, 8);
    c->prev_e = e, c->E = (int)ne;
    c->resid = r, c->n_resid = nr;
    c->head_prev = hp, c->n_head = nh;
    free(counts);
    free(acc);
    return 0;
fail:
    free(counts); free(acc); free(e); free(r); free(hp);
    return -1;
}
