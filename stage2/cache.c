/* Step caching: TeaCache, FirstBlockCache and DeepCache over the pieces of the transformer forward.
 * The rules are in cache.h; sources, quirks and figures in docs/caching.md. */
#include "cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "ops.h"

int cvx_cache_parse_kind(const char *s, cvx_cache_kind *out) {
    static const char *const names[] = {"none", "teacache", "fbcache", "deepcache"};
    for (int k = 0; k < 4; k++)
        if (!strcmp(s, names[k])) { *out = (cvx_cache_kind)k; return 0; }
    return cvx_error("--cache must be none, teacache, fbcache or deepcache, got '%s'", s);
}

const char *cvx_cache_kind_name(cvx_cache_kind k) {
    return k == CVX_CACHE_TEACACHE ? "teacache" : k == CVX_CACHE_FBCACHE ? "fbcache"
                                  : k == CVX_CACHE_DEEPCACHE ? "deepcache" : "none";
}

double cvx_cache_default_threshold(cvx_cache_kind k) {
    return k == CVX_CACHE_TEACACHE ? 0.2 : k == CVX_CACHE_FBCACHE ? 0.05 : 0.0;
}

int cvx_teacache_parse_coefficients(const char *s, double out[5]) {
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

int cvx_cache_init(cvx_cache *c, cvx_cache_kind kind, double threshold, const double coeffs[5],
                         int n_steps, int num_layers) {
    memset(c, 0, sizeof *c);
    c->kind = threshold > 0 || kind == CVX_CACHE_DEEPCACHE ? kind : CVX_CACHE_NONE;
    c->threshold = threshold;
    if (coeffs) memcpy(c->coeffs, coeffs, sizeof c->coeffs);
    c->n_steps = n_steps;
    c->num_layers = num_layers;
    c->last_compute = 1;
    c->first_computed = 1, c->last_computed = 1;
    c->dc_start = CVX_DEEPCACHE_START, c->dc_end = CVX_DEEPCACHE_END, c->dc_interval = CVX_DEEPCACHE_INTERVAL;
    c->lay = (cvx_cache_layout){NULL, 1, 1, 1};
    c->lnb = 1;
    return num_layers ? cvx_cache_use_layers(c, num_layers) : 0;
}

int cvx_cache_use_layers(cvx_cache *c, int num_layers) {
    c->num_layers = num_layers;
    if (c->kind == CVX_CACHE_FBCACHE && num_layers < 2)
        return cvx_error("--cache fbcache needs a transformer with at least 2 blocks (block 0 decides, the rest are "
                         "cached), this one has %d", num_layers);
    if (c->kind == CVX_CACHE_DEEPCACHE && num_layers < 2)
        return cvx_error("--cache deepcache needs a transformer with at least 2 blocks (the streams before the last "
                         "are kept), this one has %d", num_layers);
    return 0;
}

int cvx_cache_set_deepcache(cvx_cache *c, int start, int end, int interval) {
    if (start < 0) return cvx_error("--deepcache_start must be >= 0, got %d", start);
    if (end < start) return cvx_error("--deepcache_end %d must be >= --deepcache_start %d", end, start);
    if (interval < 1) return cvx_error("--deepcache_interval must be >= 1, got %d", interval);
    c->dc_start = start, c->dc_end = end, c->dc_interval = interval;
    return 0;
}

int cvx_deepcache_full_step(const cvx_cache *c, int step) {
    return step < c->dc_start || step >= c->dc_end || (step - c->dc_start) % c->dc_interval == 0;
}

void cvx_cache_free(cvx_cache *c) {
    free(c->prev_e);
    free(c->resid);
    free(c->head_prev);
    free(c->head_cur);
    free(c->hold);
    free(c->sums);
    free(c->aux);
    c->prev_e = c->resid = c->head_prev = c->head_cur = c->hold = c->aux = NULL;
    c->sums = NULL;
}

void cvx_cache_reset(cvx_cache *c) {
    cvx_cache_free(c);
    c->acc = 0;
    c->E = 0;
    c->n_resid = c->n_head = c->n_aux = 0;
    c->A = 0;
    c->global = 0;
    c->S = c->L = c->N = c->D = 0;   /* the next forward sets this rank's share again */
}

int64_t cvx_cache_blocks_skipped(const cvx_cache *c) {
    int per = c->kind == CVX_CACHE_TEACACHE ? c->num_layers : c->kind != CVX_CACHE_NONE ? c->num_layers - 1 : 0;
    return c->steps_skipped * per;
}

double cvx_poly1d(const double c[5], double x) {
    double y = 0;
    for (int i = 0; i < 5; i++) y = y * x + c[i];
    return y;
}

double cvx_rel_l1(const float *x, const float *prev, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += fabs((double)x[i] - (double)prev[i]);
        den += fabs((double)prev[i]);
    }
    return num / den;
}

void cvx_cache_set_teacache_window(cvx_cache *c, int first, int last) {
    c->first_computed = first, c->last_computed = last;
}

int cvx_teacache_rule(cvx_cache *c, int step, int have_prev, double rel) {
    int compute;
    c->last_rel = c->last_p = NAN;
    if (step < c->first_computed || step >= c->n_steps - c->last_computed || !have_prev) {
        compute = 1;
        c->acc = 0;
    } else {
        c->last_rel = rel;
        c->last_p = cvx_poly1d(c->coeffs, rel);
        c->acc += c->last_p;
        compute = !(c->acc < c->threshold);   /* strict <, and NaN computes */
        if (compute) c->acc = 0;
    }
    if (c->force) compute = c->force(c->force_user, step);
    c->last_acc = c->acc;
    c->last_compute = compute;
    return compute;
}

int cvx_teacache_decide(cvx_cache *c, int step, const float *e, int E) {
    const int have = c->prev_e && c->E == E;
    const int compute = cvx_teacache_rule(c, step, have, have ? cvx_rel_l1(e, c->prev_e, (size_t)E) : NAN);
    if (!have) {
        free(c->prev_e);
        c->prev_e = cvx_alloc_f32((size_t)E);
        c->E = E;
    }
    memcpy(c->prev_e, e, sizeof(float) * (size_t)E);   /* e_prev follows every step, skipped or not */
    return compute;
}

void cvx_fbcache_row_sums(const float *r, const float *P, size_t rows, int D, double *sums) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < rows; i++) {   /* each row in order: the same bytes for any thread count */
        const float *ri = r + i * D, *pi = P + i * D;
        double num = 0, den = 0;
        for (int k = 0; k < D; k++) {
            num += fabs((double)ri[k] - (double)pi[k]);
            den += fabs((double)pi[k]);
        }
        sums[2 * i] = num, sums[2 * i + 1] = den;
    }
}

double cvx_fbcache_rel(const double *sums, size_t rows, double *den_out) {
    double num = 0, den = 0;
    for (size_t i = 0; i < rows; i++) num += sums[2 * i], den += sums[2 * i + 1];
    *den_out = den;
    return num / den;
}

int cvx_fbcache_decide(cvx_cache *c, int step, int have_prev, double rel, double den) {
    int compute = 1;
    c->last_rel = c->last_p = NAN;
    if (have_prev) {
        /* upstream: mean|r − P| / mean|P| > threshold (the counts cancel); Σ|P| == 0 computes here */
        c->last_rel = rel;
        compute = den == 0 || rel > c->threshold;
    }
    if (c->force) compute = c->force(c->force_user, step);
    if (!have_prev) compute = 1;
    c->last_compute = compute;
    return compute;
}

/* ---- how the batch is spread over the ranks ---- */
static int my_rank(const cvx_cache *c) { return c->lay.group ? cvx_dist_rank(c->lay.group) : 0; }

/* Rank w's branches [*b0, *b0 + *nb); with S known, its token rows rows[0..1] and video rows rows[2..3]. */
static void share_of(const cvx_cache *c, int w, int *b0, int *nb, int64_t rows[4]) {
    int ci = w / c->lay.sp, si = w % c->lay.sp;
    *b0 = c->lay.cfg > 1 ? ci : 0;
    *nb = c->lay.cfg > 1 ? 1 : c->lay.n_branches;
    if (!rows) return;
    cvx_dist_split_range(c->S, c->lay.sp, si, &rows[0], &rows[1]);
    rows[2] = rows[0] < c->L ? c->L : rows[0];
    rows[3] = rows[1] < rows[2] ? rows[2] : rows[1];
}

void cvx_cache_set_layout(cvx_cache *c, const cvx_cache_layout *lay) {
    c->lay = *lay;
    if (!c->lay.group || cvx_dist_size(c->lay.group) < 2) c->lay.group = NULL, c->lay.cfg = c->lay.sp = 1;
    CVX_CHECK(c->lay.n_branches >= 1 && c->lay.n_branches <= 2 && c->lay.cfg >= 1 && c->lay.sp >= 1);
    CVX_CHECK(!c->lay.group || cvx_dist_size(c->lay.group) == c->lay.cfg * c->lay.sp);
    CVX_CHECK(c->lay.cfg == 1 || c->lay.cfg == c->lay.n_branches);
    share_of(c, my_rank(c), &c->lb0, &c->lnb, NULL);
}

/* Between the whole batch [B, rows, D] and a share [nb, hi − lo, D] of it (branches b0.., rows lo..hi). */
static void share_copy(float *whole, float *share, int64_t rows, int b0, int nb, int64_t lo, int64_t hi, int D,
                       int to_whole) {
    size_t n = (size_t)(hi - lo) * D;
    for (int j = 0; j < nb; j++) {
        float *w = whole + ((size_t)(b0 + j) * rows + lo) * D, *s = share + j * n;
        memcpy(to_whole ? w : s, to_whole ? s : w, n * sizeof(float));
    }
}

/* The rows [*lo, *hi) of `per` that rank w holds of the residual (head 0: [B, S, D]), the block-0
 * residual (head 1: [B, N, D]) or DeepCache's aux stream (head 2: [B, A, D]: whole on every rank,
 * sent by the first of each SP group). */
static void head_rows(const cvx_cache *c, int w, int head, int *b0, int *nb, int64_t *lo, int64_t *hi, int64_t *per) {
    int64_t rows[4];
    share_of(c, w, b0, nb, rows);
    *per = head == 0 ? c->S : head == 1 ? c->N : c->A;
    *lo = head == 0 ? rows[0] : head == 1 ? rows[2] - c->L : 0;
    *hi = head == 0 ? rows[1] : head == 1 ? rows[3] - c->L : w % c->lay.sp == 0 ? c->A : 0;
}

/* The whole batch of one of the heads above from every rank's share, returned at rank 0 (NULL
 * elsewhere). A failed exchange stops the run (cvx_dist_die). */
static float *gather_whole(const cvx_cache *c, const float *share, int head) {
    int p = cvx_dist_size(c->lay.group), b0, nb;
    size_t *bytes = cvx_malloc(sizeof(size_t) * p), total = 0;
    int64_t lo, hi, per;
    for (int w = 0; w < p; w++) {
        head_rows(c, w, head, &b0, &nb, &lo, &hi, &per);
        bytes[w] = (size_t)nb * (size_t)(hi - lo) * c->D * sizeof(float);
        total += bytes[w];
    }
    int root = my_rank(c) == 0;
    float *recv = root ? cvx_alloc_f32(total / sizeof(float) + 1) : NULL, *whole = NULL;
    if (cvx_dist_gatherv(c->lay.group, share, bytes, recv, 0)) cvx_dist_die_last_error(c->lay.group);
    if (root) {
        whole = cvx_alloc_f32((size_t)c->lay.n_branches * per * c->D + 1);            // [B, per, D]
        size_t off = 0;
        for (int w = 0; w < p; w++) {
            head_rows(c, w, head, &b0, &nb, &lo, &hi, &per);
            share_copy(whole, recv + off, per, b0, nb, lo, hi, c->D, 1);
            off += bytes[w] / sizeof(float);
        }
    }
    free(recv);
    free(bytes);
    return whole;
}

/* This rank's rows from the first forward's sizes; a checkpoint's whole batch cut to its share. */
static int setup_share(cvx_cache *c, const cvx_fwd *f) {
    if (c->S != f->S || c->L != f->L || c->D != f->D) {
        int64_t rows[4];
        c->S = f->S, c->L = f->L, c->N = f->N, c->D = f->D;
        share_of(c, my_rank(c), &c->lb0, &c->lnb, rows);
        c->r0 = rows[0], c->r1 = rows[1], c->v0 = rows[2], c->v1 = rows[3];
        CVX_CHECK(f->row0 == (size_t)c->r0 && f->nrows == (size_t)(c->r1 - c->r0));
    }
    c->A = f->A;
    if (!c->global) return 0;
    size_t B = (size_t)c->lay.n_branches, D = (size_t)c->D;
    if (c->resid && c->n_resid != B * c->S * D)
        return cvx_error("step cache: the checkpoint's residual has %zu values but this run needs %zu = %zu x %d x "
                         "%zu (checkpoint of another run?)", c->n_resid, B * c->S * D, B, c->S, D);
    if (c->head_prev && c->n_head != B * c->N * D)
        return cvx_error("step cache: the checkpoint's block-0 residual has %zu values but this run needs %zu "
                         "(checkpoint of another run?)", c->n_head, B * c->N * D);
    if (c->aux && c->n_aux != B * c->A * D)
        return cvx_error("step cache: the checkpoint's kept aux stream has %zu values but this run needs %zu "
                         "(checkpoint of another run?)", c->n_aux, B * c->A * D);
    if (c->resid) {
        size_t n = (size_t)c->lnb * (c->r1 - c->r0) * D;
        float *mine = cvx_alloc_f32(n + 1);                                                // [lnb, r1 − r0, D]
        share_copy(c->resid, mine, c->S, c->lb0, c->lnb, c->r0, c->r1, c->D, 0);
        free(c->resid);
        c->resid = mine, c->n_resid = n;
    }
    if (c->head_prev) {
        size_t n = (size_t)c->lnb * (c->v1 - c->v0) * D;
        float *mine = cvx_alloc_f32(n + 1);                                                // [lnb, v1 − v0, D]
        share_copy(c->head_prev, mine, c->N, c->lb0, c->lnb, c->v0 - c->L, c->v1 - c->L, c->D, 0);
        free(c->head_prev);
        c->head_prev = mine, c->n_head = n;
    }
    if (c->aux) {
        size_t n = (size_t)c->lnb * c->A * D;
        float *mine = cvx_alloc_f32(n + 1);                                                // [lnb, A, D]
        share_copy(c->aux, mine, c->A, c->lb0, c->lnb, 0, c->A, c->D, 0);
        free(c->aux);
        c->aux = mine, c->n_aux = n;
    }
    c->global = 0;
    return 0;
}

/* -1 when a residual has another size than this step's share [n]. */
static int resid_check(const cvx_cache *c, size_t n) {
    if (c->resid && c->n_resid != n)
        return cvx_error("step cache: the cached residual has %zu values but this forward needs %zu (checkpoint of "
                         "another run?)", c->n_resid, n);
    return 0;
}

/* The residual buffer, allocated on the first computed step (the decisions compute while it is NULL). */
static void resid_alloc(cvx_cache *c, size_t n) {
    if (!c->resid) { c->resid = cvx_alloc_f32(n + 1); c->n_resid = n; }
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

/* The inputs of one step and where its outputs go. */
typedef struct {
    cvx_denoise_input in;                /* the step's input; branch j's conditioning is conds[j] */
    const void *const *conds;
    size_t out_n;                        /* per branch: the output's floats */
    float *out;
} step_io;

static int embed(cvx_denoiser *m, const step_io *io, int j, cvx_fwd *f) {
    cvx_denoise_input in = io->in;
    in.cond = io->conds[j];
    return m->type->embed(m, &in, f);
}

/* TeaCache: per branch, embed; the first decides on e (row 0: it depends on t alone, so every
 * branch and every rank sees the same); then all blocks (keeping R) or R added. */
static int teacache_step(cvx_denoiser *m, cvx_cache *c, int step, const step_io *io) {
    int compute = 1;
    for (int j = 0; j < c->lnb; j++) {
        cvx_fwd f;
        if (embed(m, io, j, &f)) return -1;
        if (setup_share(c, &f) || resid_check(c, (size_t)c->lnb * (c->r1 - c->r0) * f.D)) {
            m->type->abort(m, &f);
            return -1;
        }
        size_t n = (size_t)(c->r1 - c->r0) * f.D;
        if (j == 0) {
            compute = cvx_teacache_decide(c, step, f.emb, f.E);
            if (!c->resid) compute = 1;   /* nothing to reuse yet (step 0 always computes anyway) */
            resid_alloc(c, n * c->lnb);
        }
        float *h = f.h + (size_t)c->r0 * f.D, *R = c->resid + j * n;                    // [r1 − r0, D] each
        if (compute) {
            memcpy(R, h, n * sizeof(float));                                               // h before the blocks
            m->type->blocks(m, &f, 0, c->num_layers);
            sub_from(R, h, n);                                                             // R = h_after − h_before
        } else {
            add_to(h, R, n);
        }
        m->type->finalize(m, &f, io->out + j * io->out_n);
    }
    return compute;
}

/* Σ|X − P| / Σ|P| over the whole batch's video rows, X = head_cur and P = head_prev (this rank's
 * share [lnb, v1 − v0, D] of each): the row sums of the share, every rank's gathered (fixed-size
 * parts: lnb · ⌈S/sp⌉ rows), added in (branch, token) order. *den: Σ|P|. */
static double batch_rel(cvx_cache *c, double *den) {
    size_t B = (size_t)c->lay.n_branches, N = (size_t)c->N, vr = (size_t)(c->v1 - c->v0);
    size_t maxr = (size_t)(c->S + c->lay.sp - 1) / c->lay.sp, part = 2 * (size_t)c->lnb * maxr;
    int p = c->lay.group ? cvx_dist_size(c->lay.group) : 1;
    if (!c->sums) c->sums = cvx_malloc(sizeof(double) * (2 * B * N + part * (p + 1)));
    double *all = c->sums, *send = all + 2 * B * N, *recv = send + part;              // [B, N, 2], parts
    if (!c->lay.group) {   /* one process: the share is the whole batch, in order */
        cvx_fbcache_row_sums(c->head_cur, c->head_prev, c->lnb * vr, c->D, all);
    } else {
        memset(send, 0, part * sizeof(double));   /* rows past this rank's: sent, not read */
        cvx_fbcache_row_sums(c->head_cur, c->head_prev, c->lnb * vr, c->D, send);
        if (cvx_dist_allgather(c->lay.group, send, part * sizeof(double), recv)) cvx_dist_die_last_error(c->lay.group);
        for (int w = 0; w < p; w++) {
            int b0, nb;
            int64_t rows[4];
            share_of(c, w, &b0, &nb, rows);
            size_t n = (size_t)(rows[3] - rows[2]);
            for (int j = 0; j < nb; j++)
                memcpy(all + 2 * ((b0 + j) * N + (size_t)(rows[2] - c->L)), recv + w * part + 2 * j * n,
                       2 * n * sizeof(double));
        }
    }
    return cvx_fbcache_rel(all, B * N, den);
}

/* FBCache's rule on this step's block-0 residual X (head_cur) against P (head_prev). */
static int fbcache_rule(cvx_cache *c, int step) {
    if (!c->head_prev) return cvx_fbcache_decide(c, step, 0, NAN, 0);
    double den, rel = batch_rel(c, &den);
    return cvx_fbcache_decide(c, step, 1, rel, den);
}

/* -1 when head_prev has another size than this step's share [lnb, v1 − v0, D]. */
static int head_check(const cvx_cache *c, size_t vn) {
    if (c->head_prev && c->n_head != c->lnb * vn)
        return cvx_error("step cache: the cached %s has %zu values but this forward needs %zu (checkpoint of another "
                         "run?)", c->kind == CVX_CACHE_TEACACHE ? "previous TeaCache input" : "block-0 residual",
                         c->n_head, c->lnb * vn);
    return 0;
}

/* Branch j's stream moved to c->hold when another branch follows (a model may keep one h). */
static void hold_branch(cvx_cache *c, int j, cvx_fwd *f) {
    if (j + 1 >= c->lnb) return;
    size_t hn = (size_t)c->S * c->D;
    if (!c->hold) c->hold = cvx_alloc_f32(hn);
    memcpy(c->hold, f->h, hn * sizeof(float));                                           // [S, D]
    f->h = c->hold;
}

/* The start of a probe step's branch j (TeaCache on a probe, FBCache): embed (nf counts the
 * branches to abort on failure), the shared rows, n / vn = the residual's and the probe's floats,
 * the buffers, the first branch's stream held. */
static int branch_begin(cvx_denoiser *m, cvx_cache *c, const step_io *io, int j, cvx_fwd *f, int *nf, size_t *n,
                        size_t *vn) {
    if (embed(m, io, j, f)) return -1;
    (*nf)++;
    if (setup_share(c, f)) return -1;
    *n = (size_t)(c->r1 - c->r0) * c->D, *vn = (size_t)(c->v1 - c->v0) * c->D;
    if (resid_check(c, c->lnb * *n) || head_check(c, *vn)) return -1;
    if (!c->head_cur) c->head_cur = cvx_alloc_f32(c->lnb * *vn + 1);
    hold_branch(c, j, f);
    return 0;
}

/* TeaCache on the family's probe (TeaCache4LTX-Video): per branch, embed and the probe X
 * (head_cur); the rule on Σ|X − P| / Σ|P| over the whole batch, P = the previous step's X
 * (head_prev); per branch, the blocks and the output norm (keeping R = h_normed − h_embedded) or
 * R added in their place; the projection. X becomes P every step, skipped or not. */
static int teacache_probe_step(cvx_denoiser *m, cvx_cache *c, int step, const step_io *io) {
    cvx_fwd f[2];
    int nf = 0;
    size_t n = 0, vn = 0;
    for (int j = 0; j < c->lnb; j++) {
        if (branch_begin(m, c, io, j, &f[j], &nf, &n, &vn)) goto fail;
        m->type->teacache_input(m, &f[j], c->head_cur + j * vn);                       // [v1 − v0, D]
    }
    double den = 0, rel = c->head_prev ? batch_rel(c, &den) : NAN;
    int compute = cvx_teacache_rule(c, step, c->head_prev != NULL, rel);
    if (!c->resid) compute = 1;
    resid_alloc(c, c->lnb * n);
    for (int j = 0; j < c->lnb; j++) {
        float *h = f[j].h + (size_t)c->r0 * c->D, *R = c->resid + j * n;                // [r1 − r0, D]
        if (compute) {
            memcpy(R, h, n * sizeof(float));                                               // h after embed
            m->type->blocks(m, &f[j], 0, c->num_layers);
            m->type->output_norm(m, &f[j]);
            sub_from(R, h, n);                                                             // R = h_normed − h_embed
        } else {
            add_to(h, R, n);
            f[j].out_normed = 1;
        }
        m->type->finalize(m, &f[j], io->out + j * io->out_n);
    }
    float *t = c->head_prev;   /* P ← X */
    c->head_prev = c->head_cur, c->n_head = c->lnb * vn;
    c->head_cur = t;
    return compute;
fail:
    for (int k = 0; k < nf; k++) m->type->abort(m, &f[k]);
    return -1;
}

/* FBCache: per branch, embed and block 0 (the model has one h: the first branch's stream waits
 * in c->hold); decide on the whole batch; per branch, blocks 1.. (keeping T) or T added. */
static int fbcache_step(cvx_denoiser *m, cvx_cache *c, int step, const step_io *io) {
    cvx_fwd f[2];
    int nf = 0;
    size_t n = 0, vn = 0;
    for (int j = 0; j < c->lnb; j++) {
        if (branch_begin(m, c, io, j, &f[j], &nf, &n, &vn)) goto fail;
        float *X = c->head_cur + j * vn, *hv = f[j].h + (size_t)c->v0 * c->D;           // [v1 − v0, D]
        memcpy(X, hv, vn * sizeof(float));
        m->type->blocks(m, &f[j], 0, 1);
        sub_from(X, hv, vn);                                                               // r
    }
    int compute = fbcache_rule(c, step);
    if (!c->resid) compute = 1;
    resid_alloc(c, c->lnb * n);
    for (int j = 0; j < c->lnb; j++) {
        float *h = f[j].h + (size_t)c->r0 * c->D, *T = c->resid + j * n;                // [r1 − r0, D]
        if (compute) {
            memcpy(T, h, n * sizeof(float));                                               // block-0 output
            m->type->blocks(m, &f[j], 1, c->num_layers - 1);
            sub_from(T, h, n);                                                             // T = h_out − h_block0
        } else {
            add_to(h, T, n);
        }
        m->type->finalize(m, &f[j], io->out + j * io->out_n);
    }
    if (compute) {   /* P ← r */
        float *t = c->head_prev;
        c->head_prev = c->head_cur, c->n_head = c->lnb * vn;
        c->head_cur = t;
    }
    return compute;
fail:
    for (int k = 0; k < nf; k++) m->type->abort(m, &f[k]);
    return -1;
}

/* -1 when the kept streams have other sizes than this forward's share. */
static int deepcache_check(const cvx_cache *c, const cvx_fwd *f) {
    size_t na = (size_t)c->lnb * f->A * f->D;
    if (resid_check(c, (size_t)c->lnb * (c->r1 - c->r0) * f->D)) return -1;
    if (c->aux && c->n_aux != na)
        return cvx_error("step cache: the kept aux stream has %zu values but this forward needs %zu (checkpoint of "
                         "another run?)", c->n_aux, na);
    return 0;
}

/* DeepCache: per branch, embed; a full step runs blocks 0 .. n−2, keeps h (this rank's rows) and
 * aux, runs block n−1; a cached step puts the kept streams in place of the embedded ones and runs
 * block n−1 only (the embedding's time signal is the current step's). The decision depends on the
 * step index alone: the same on every rank and branch. */
static int deepcache_step(cvx_denoiser *m, cvx_cache *c, int step, const step_io *io) {
    int full = 1, last = c->num_layers - 1;
    for (int j = 0; j < c->lnb; j++) {
        cvx_fwd f;
        if (embed(m, io, j, &f)) return -1;
        if (setup_share(c, &f) || deepcache_check(c, &f)) {
            m->type->abort(m, &f);
            return -1;
        }
        size_t n = (size_t)(c->r1 - c->r0) * f.D, na = (size_t)f.A * f.D;   /* per branch: kept rows, aux */
        if (j == 0) {
            full = cvx_deepcache_full_step(c, step);
            if (c->force) full = c->force(c->force_user, step);
            if (!c->resid || (na && !c->aux)) full = 1;   /* nothing kept yet (after a reset, say) */
            resid_alloc(c, n * c->lnb);
            if (na && !c->aux) c->aux = cvx_alloc_f32(c->lnb * na + 1), c->n_aux = c->lnb * na;
            c->last_compute = full;
        }
        float *h = f.h + (size_t)c->r0 * f.D, *kept = c->resid + j * n, *kept_aux = na ? c->aux + j * na : NULL;
        if (full) {
            m->type->blocks(m, &f, 0, last);
            memcpy(kept, h, n * sizeof(float));                                            // [r1 − r0, D]
            if (na) memcpy(kept_aux, f.aux, na * sizeof(float));                           // [A, D]
        } else {
            memcpy(h, kept, n * sizeof(float));
            if (na) memcpy(f.aux, kept_aux, na * sizeof(float));
        }
        m->type->blocks(m, &f, last, 1);
        m->type->finalize(m, &f, io->out + j * io->out_n);
    }
    return full;
}

int cvx_cache_step(cvx_denoiser *m, cvx_cache *c, int step, const cvx_denoise_input *in, const void *const *conds,
                   float *out) {
    step_io io = {*in, conds, m->n_out, out};
    if (!cvx_cache_active(c)) {
        /* One forward per CFG branch, not one batch of two: a GEMM's rows can depend on the batch's
         * row count (OpenBLAS's kernel choice, the feed-forward's row chunks), and computing the
         * branches alike here is what makes --cfg_parallel bit-identical to one process
         * (docs/distributed.md). */
        for (int j = 0; j < c->lnb; j++) {
            cvx_denoise_input bj = *in;
            bj.cond = conds[j];
            if (m->type->forward(m, &bj, out + j * io.out_n)) return -1;
        }
        return 0;
    }
    int compute = c->kind == CVX_CACHE_TEACACHE ? (m->type->teacache_input ? teacache_probe_step(m, c, step, &io)
                                                                            : teacache_step(m, c, step, &io))
                  : c->kind == CVX_CACHE_FBCACHE ? fbcache_step(m, c, step, &io) : deepcache_step(m, c, step, &io);
    if (compute < 0) return -1;
    if (compute) c->steps_computed++;
    else c->steps_skipped++;
    if (c->kind == CVX_CACHE_TEACACHE)
        cvx_debug("teacache step %d: rel %.6g p %.6g acc %.6g -> %s", step + 1, c->last_rel, c->last_p, c->last_acc,
                  compute ? "compute" : "skip");
    else if (c->kind == CVX_CACHE_FBCACHE)
        cvx_debug("fbcache step %d: diff %.6g -> %s", step + 1, c->last_rel, compute ? "compute" : "skip");
    else
        cvx_debug("deepcache step %d: %s", step + 1, compute ? "full (streams kept)" : "last block on the kept streams");
    return 0;
}

/* ---- checkpoint ---- */
/* The checkpoint's name of resid: DeepCache keeps a stream, the others a residual. */
static const char *resid_name(const cvx_cache *c) {
    return c->kind == CVX_CACHE_DEEPCACHE ? "deepcache_stream" : "cache_residual";
}
/* ... and of head_prev: FBCache's block-0 residual, or the previous TeaCache probe (TeaCache4LTX-Video). */
static const char *head_name(const cvx_cache *c) {
    return c->kind == CVX_CACHE_TEACACHE ? "teacache_prev_input" : "fbcache_head_residual";
}

int cvx_cache_save(cvx_cache *c, cvx_st_writer *w) {
    if (!cvx_cache_active(c)) return 0;
    const float *resid = c->resid, *head = c->head_prev, *aux = c->aux;
    size_t nr = c->n_resid, nh = c->n_head, na = c->n_aux;
    float *gr = NULL, *gh = NULL, *ga = NULL;
    if (c->lay.group && !c->global) {   /* the shares to rank 0, in the one-process layout */
        size_t B = (size_t)c->lay.n_branches;
        if (resid) gr = gather_whole(c, resid, 0), nr = B * c->S * c->D;
        if (head) gh = gather_whole(c, head, 1), nh = B * c->N * c->D;
        if (aux) ga = gather_whole(c, aux, 2), na = B * c->A * c->D;
        resid = gr, head = gh, aux = ga;
    }
    if (!w || my_rank(c) != 0) { free(gr); free(gh); free(ga); return 0; }   /* the other ranks: sent */
    int64_t counts[2] = {c->steps_computed, c->steps_skipped}, two = 2, one = 1, n;
    int rc = cvx_stw_add(w, "cache_counts", CVX_I64, 1, &two, counts);
    rc |= cvx_stw_add(w, "teacache_acc", CVX_F64, 1, &one, &c->acc);
    if (c->prev_e) rc |= cvx_stw_add(w, "teacache_prev_e", CVX_F32, 1, (n = c->E, &n), c->prev_e);
    if (resid) rc |= cvx_stw_add(w, resid_name(c), CVX_F32, 1, (n = (int64_t)nr, &n), resid);
    if (head) rc |= cvx_stw_add(w, head_name(c), CVX_F32, 1, (n = (int64_t)nh, &n), head);
    if (aux) rc |= cvx_stw_add(w, "deepcache_aux", CVX_F32, 1, (n = (int64_t)na, &n), aux);
    free(gr);
    free(gh);
    free(ga);
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

int cvx_cache_load(cvx_cache *c, const cvx_safetensors *st, const char *path) {
    if (!cvx_cache_active(c)) return 0;
    void *counts = NULL, *acc = NULL, *e = NULL, *r = NULL, *hp = NULL, *ax = NULL;
    size_t nc = 0, na = 0, ne = 0, nr = 0, nh = 0, nx = 0;
    if (load_vec(st, path, "cache_counts", CVX_I64, 8, &counts, &nc) || load_vec(st, path, "teacache_acc", CVX_F64, 8, &acc, &na) ||
        load_vec(st, path, "teacache_prev_e", CVX_F32, 4, &e, &ne) || load_vec(st, path, resid_name(c), CVX_F32, 4, &r, &nr) ||
        load_vec(st, path, head_name(c), CVX_F32, 4, &hp, &nh) ||
        load_vec(st, path, "deepcache_aux", CVX_F32, 4, &ax, &nx))
        goto fail;
    if (!counts || nc != 2 || !acc || na != 1 || !r) {
        cvx_error("%s: step cache state (cache_counts, teacache_acc, %s) missing: the checkpoint was written without "
                  "--cache %s", path, resid_name(c), cvx_cache_kind_name(c->kind));
        goto fail;
    }
    cvx_cache_free(c);
    memcpy(&c->steps_computed, (int64_t *)counts, 8);
    memcpy(&c->steps_skipped, (int64_t *)counts + 1, 8);
    memcpy(&c->acc, acc, 8);
    c->prev_e = e, c->E = (int)ne;
    c->resid = r, c->n_resid = nr;
    c->head_prev = hp, c->n_head = nh;
    c->aux = ax, c->n_aux = nx;
    c->global = 1;   /* cut to this rank's share at the next step */
    free(counts);
    free(acc);
    return 0;
fail:
    free(counts); free(acc); free(e); free(r); free(hp); free(ax);
    return -1;
}
