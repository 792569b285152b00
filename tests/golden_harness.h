/* The one golden-case loader of the tests (issue 9), header-only like testutil.h because every
 * test is one program: open tests/data/golden/<case>/ (case.json + expected.safetensors +
 * model/), typed access to its tensors and case.json values, and the counted parity checks
 * (relative L2, max |diff|, bit-exact) every golden comparison goes through.
 *
 *   gh_case c;
 *   gh_open(&c, "transformer_2b");                    // or a path containing '/'
 *   float *x = gh_f32(&c, NULL, "%s.latents", "f3");   // fails the test when missing
 *   int64_t seed = gh_int(gh_json(&c, "call.seed"));   // dotted path into case.json
 *   gh_check_rel_l2(&c, "output", got, x, n, 1e-5);
 *   gh_close(&c);
 *
 * Missing files, tensors or keys fail the running cmocka test with the case and name. */
#ifndef CVX_GOLDEN_HARNESS_H
#define CVX_GOLDEN_HARNESS_H

#include "testutil.h"

#include <math.h>
#include <json-c/json.h>

#include "config.h"

typedef struct {
    char name[256];        /* as given to gh_open */
    char dir[512];         /* tests/data/golden/<case> */
    char path[1024];       /* last gh_path result */
    cvx_safetensors *st;   /* expected.safetensors (NULL if the case has none) */
    cvx_config cj;         /* case.json (cj.root NULL if the case has none) */
    int checks;            /* parity checks passed on this case */
} gh_case;

/* "<dir>/<rel>" (valid until the next gh_path call on this case). */
static inline const char *gh_path(gh_case *c, const char *rel) {
    if (snprintf(c->path, sizeof c->path, "%s/%s", c->dir, rel) >= (int)sizeof c->path)
        fail_msg("golden path too long: %s/%s", c->dir, rel);
    return c->path;
}

/* Open case `name` (a directory under tests/data/golden, or any path containing '/'). */
static inline void gh_open(gh_case *c, const char *name) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    if (strchr(name, '/')) snprintf(c->dir, sizeof c->dir, "%s", name);
    else snprintf(c->dir, sizeof c->dir, GOLDEN "/%s", name);
    if (access(gh_path(c, "expected.safetensors"), R_OK) == 0) {
        c->st = cvx_st_open(c->path);
        if (!c->st) fail_msg("golden case %s: %s", c->name, cvx_last_error());
    }
    if (access(gh_path(c, "case.json"), R_OK) == 0 && cvx_config_load(&c->cj, c->path))
        fail_msg("golden case %s: %s", c->name, cvx_last_error());
    if (!c->st && !c->cj.root) fail_msg("golden case %s: no expected.safetensors or case.json in %s", c->name, c->dir);
}

static inline void gh_close(gh_case *c) {
    if (c->st) cvx_st_close(c->st);
    if (c->cj.root) cvx_config_free(&c->cj);
    c->st = NULL;
    c->cj.root = NULL;
}

/* ---------------------------------------------------------------- tensors of expected.safetensors */

static inline const cvx_tensor *gh_vtensor_opt(const gh_case *c, const char *fmt, va_list ap) {
    char name[256];
    vsnprintf(name, sizeof name, fmt, ap);
    if (!c->st) fail_msg("golden case %s has no expected.safetensors (wanted '%s')", c->name, name);
    return cvx_st_find(c->st, name);
}

/* Tensor by printf-style name, NULL when absent. */
static inline const cvx_tensor *gh_tensor_opt(const gh_case *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const cvx_tensor *t = gh_vtensor_opt(c, fmt, ap);
    va_end(ap);
    return t;
}

/* Tensor by printf-style name; fails the test when absent. */
static inline const cvx_tensor *gh_tensor(const gh_case *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const cvx_tensor *t = gh_vtensor_opt(c, fmt, ap);
    va_end(ap);
    if (!t) {
        char name[256];
        va_start(ap, fmt);
        vsnprintf(name, sizeof name, fmt, ap);
        va_end(ap);
        fail_msg("golden case %s: no tensor '%s' in expected.safetensors", c->name, name);
    }
    return t;
}

/* A tensor as newly allocated f32 (numel in *n when n is non-NULL); fails when absent. */
static inline float *gh_f32(const gh_case *c, size_t *n, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const cvx_tensor *t = gh_tensor(c, "%s", name);
    if (n) *n = (size_t)t->numel;
    return cvx_tensor_f32_dup(t);
}

/* Same, NULL when absent. */
static inline float *gh_f32_opt(const gh_case *c, const char *name) {
    const cvx_tensor *t = gh_tensor_opt(c, "%s", name);
    return t ? cvx_tensor_f32_dup(t) : NULL;
}

/* Element i of an I64 / F64 tensor (unaligned-safe). */
static inline int64_t gh_i64_at(const cvx_tensor *t, size_t i) {
    if (t->dtype != CVX_I64) fail_msg("tensor %s: dtype is not I64", t->name);
    int64_t v;
    memcpy(&v, (const char *)t->data + 8 * i, 8);
    return v;
}
static inline double gh_f64_at(const cvx_tensor *t, size_t i) {
    if (t->dtype != CVX_F64) fail_msg("tensor %s: dtype is not F64", t->name);
    double v;
    memcpy(&v, (const char *)t->data + 8 * i, 8);
    return v;
}

/* ---------------------------------------------------------------- case.json values */

/* Member `key` of object `o`; fails when absent. */
static inline json_object *gh_get(json_object *o, const char *key) {
    json_object *v = NULL;
    if (!o || !json_object_object_get_ex(o, key, &v)) fail_msg("case.json: missing key '%s'", key);
    return v;
}

/* case.json value at a dotted path ("call.seed"); fails when absent. */
static inline json_object *gh_json(const gh_case *c, const char *dotted) {
    if (!c->cj.root) fail_msg("golden case %s has no case.json (wanted '%s')", c->name, dotted);
    json_object *o = c->cj.root;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", dotted);
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save)) o = gh_get(o, k);
    return o;
}

static inline int64_t gh_int(json_object *o) { return json_object_get_int64(o); }
static inline double gh_num(json_object *o) { return json_object_get_double(o); }
static inline const char *gh_str(json_object *o) { return json_object_get_string(o); }
static inline size_t gh_len(json_object *arr) { return json_object_array_length(arr); }
static inline json_object *gh_at(json_object *arr, size_t i) { return json_object_array_get_idx(arr, i); }

/* Product of a JSON shape array. */
static inline size_t gh_numel(json_object *shape) {
    size_t n = 1;
    for (size_t i = 0; i < gh_len(shape); i++) n *= (size_t)gh_int(gh_at(shape, i));
    return n;
}

/* The pipelines' frames (output_type "np") of decoded frames [3, T, H·W] in [-1, 1]:
 * clamp(x/2 + 0.5, 0, 1) laid out [T, H·W, 3], newly allocated. */
static inline float *gh_frames_np(const float *d, int64_t T, int64_t HW) {
    float *post = malloc(sizeof(float) * (size_t)(3 * T * HW));
    for (int64_t c = 0; c < 3; c++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t p = 0; p < HW; p++) {
                float v = d[(c * T + t) * HW + p] * 0.5f + 0.5f;
                post[(t * HW + p) * 3 + c] = v < 0 ? 0 : v > 1 ? 1 : v;
            }
    return post;
}

/* ---------------------------------------------------------------- counted parity checks */

/* f32 relative L2 error ≤ tol (printed either way). */
static inline void gh_check_rel_l2(gh_case *c, const char *what, const float *got, const float *want, size_t n,
                                   double tol) {
    double e = cvx_rel_l2(got, want, n);
    print_message("  %s %-36s rel L2 = %.3g (tol %.0e)\n", c->name, what, e, tol);
    if (!(e <= tol)) fail_msg("%s %s: relative L2 error %.3g > %.0e", c->name, what, e, tol);
    c->checks++;
}

/* max |got − want| ≤ tol over f32 values. */
static inline void gh_check_max_abs(gh_case *c, const char *what, const float *got, const float *want, size_t n,
                                    double tol) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)got[i] - want[i]));
    print_message("  %s %-36s max |diff| = %.3g (tol %.0e)\n", c->name, what, m, tol);
    if (!(m <= tol)) fail_msg("%s %s: max |diff| %.3g > %.0e", c->name, what, m, tol);
    c->checks++;
}

/* Bit-exact f32 values (first differences and the mismatch count printed). */
static inline void gh_check_exact_f32(gh_case *c, const char *what, const float *got, const float *want, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            if (bad < 5) print_message("  %s[%zu]: got %.9g, want %.9g\n", what, i, (double)got[i], (double)want[i]);
            bad++;
        }
    print_message("  %s %-36s %zu values, %zu mismatches\n", c->name, what, n, bad);
    if (bad) fail_msg("%s %s: %zu of %zu values differ", c->name, what, bad, n);
    c->checks++;
}

/* Decoded frames [3, T, H, W] in [-1, 1] against the case's frames_np [1, T, H, W, 3]
 * (gh_frames_np of them): the same count and relative L2 <= tol. */
static inline void gh_check_frames_np(gh_case *c, const float *frames, int64_t T, int64_t H, int64_t W, double tol) {
    size_t n;
    float *want = gh_f32(c, &n, "frames_np");
    assert_int_equal(n, (size_t)(3 * T * H * W));
    float *got = gh_frames_np(frames, T, H * W);
    gh_check_rel_l2(c, "frames_np", got, want, n, tol);
    free(got);
    free(want);
}

/* Golden F32 tensor `name` equals got[0..n) bit for bit and has exactly n values. */
static inline void gh_expect_exact(gh_case *c, const char *name, const float *got, size_t n) {
    const cvx_tensor *t = gh_tensor(c, "%s", name);
    assert_int_equal(t->dtype, CVX_F32);
    if ((size_t)t->numel != n) fail_msg("%s %s: golden has %zu values, we have %zu", c->name, name, (size_t)t->numel, n);
    float *want = cvx_tensor_f32_dup(t);
    gh_check_exact_f32(c, name, got, want, n);
    free(want);
}

/* Integer sequences (token ids, timesteps) equal exactly. */
static inline void gh_check_exact_i64(gh_case *c, const char *what, const int64_t *got, const int64_t *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s %s[%zu]: got %lld, want %lld", c->name, what, i, (long long)got[i], (long long)want[i]);
    print_message("  %s %-36s %zu values exact\n", c->name, what, n);
    c->checks++;
}

/* A scalar condition that is a parity check (e.g. a float64 sum within 1e-9 relative). */
static inline void gh_check_true(gh_case *c, const char *what, int ok) {
    if (!ok) fail_msg("%s %s: check failed", c->name, what);
    c->checks++;
}

/* ---------------------------------------------------------------- typed view: a transformer forward case */

/* Inputs and output of one transformer forward (transformer_* cases): hidden_states
 * [B, F, C, H, W], encoder_hidden_states [B, L, D], timestep I64 [B], output, the pipeline's
 * rotary tables when stored, and `ofs` (tensor or case.json number) of an I2V-style case. */
typedef struct {
    float *x, *text, *out, *cos, *sin, *ofs;
    int64_t t[16];
    int B, F, C, H, W, L, n_ofs;
} gh_forward;

static inline void gh_forward_load(gh_case *c, gh_forward *g) {
    memset(g, 0, sizeof *g);
    const cvx_tensor *hs = gh_tensor(c, "hidden_states"), *eh = gh_tensor(c, "encoder_hidden_states"),
                     *ts = gh_tensor(c, "timestep");
    assert_int_equal(hs->ndim, 5);
    g->B = (int)hs->shape[0]; g->F = (int)hs->shape[1]; g->C = (int)hs->shape[2];
    g->H = (int)hs->shape[3]; g->W = (int)hs->shape[4]; g->L = (int)eh->shape[1];
    assert_true(g->B <= 16 && ts->numel == g->B && ts->dtype == CVX_I64);
    for (int i = 0; i < g->B; i++) g->t[i] = gh_i64_at(ts, (size_t)i);
    g->x = cvx_tensor_f32_dup(hs);
    g->text = cvx_tensor_f32_dup(eh);
    g->out = gh_f32_opt(c, "output");
    g->cos = gh_f32_opt(c, "image_rotary_emb_cos");
    g->sin = gh_f32_opt(c, "image_rotary_emb_sin");
    const cvx_tensor *o = gh_tensor_opt(c, "ofs");
    if (o) {
        g->n_ofs = (int)o->numel;
        g->ofs = malloc(sizeof(float) * (size_t)g->n_ofs);
        if (o->dtype == CVX_I64)
            for (int i = 0; i < g->n_ofs; i++) g->ofs[i] = (float)gh_i64_at(o, (size_t)i);
        else cvx_tensor_to_f32(o, g->ofs);
    } else if (c->cj.root) {
        double v;
        if (cvx_cfg_has(&c->cj, "ofs") && !cvx_cfg_num(&c->cj, "ofs", &v)) {
            g->n_ofs = 1;
            g->ofs = malloc(sizeof(float));
            g->ofs[0] = (float)v;
        }
    }
}

static inline void gh_forward_free(gh_forward *g) {
    free(g->x); free(g->text); free(g->out); free(g->cos); free(g->sin); free(g->ofs);
    memset(g, 0, sizeof *g);
}

/* ---------------------------------------------------------------- typed view: an end-to-end case's call */

/* The pipeline call of an e2e_* case (case.json "call"). */
typedef struct {
    int frames, height, width, num_inference_steps, use_dynamic_cfg;
    double guidance_scale;
    uint64_t seed;
} gh_call;

static inline gh_call gh_call_of(const gh_case *c) {
    json_object *call = gh_json(c, "call");
    gh_call k;
    k.frames = (int)gh_int(gh_get(call, "num_frames"));
    k.height = (int)gh_int(gh_get(call, "height"));
    k.width = (int)gh_int(gh_get(call, "width"));
    k.num_inference_steps = (int)gh_int(gh_get(call, "num_inference_steps"));
    k.guidance_scale = gh_num(gh_get(call, "guidance_scale"));
    k.use_dynamic_cfg = json_object_get_boolean(gh_get(call, "use_dynamic_cfg"));
    k.seed = (uint64_t)gh_int(gh_get(call, "seed"));
    return k;
}

#endif
