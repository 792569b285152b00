/* The flow schedulers' common part: config dispatch, the schedule arrays, the per-run state, the
 * V2V start and forward process, and checkpointing (scheduler_flow.h). */
#include "scheduler_flow.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "validate.h"

static const struct {
    const char *name, *class_name;
} kinds[] = {
    [FLOW_UNIPC] = {"unipc", "UniPCMultistepScheduler"},
    [FLOW_EULER] = {"euler", "FlowMatchEulerDiscreteScheduler"},
};

int flow_kind_find(const char *name) {
    for (int k = 0; k < (int)(sizeof kinds / sizeof kinds[0]); k++)
        if (!strcmp(name, kinds[k].name) || !strcmp(name, kinds[k].class_name)) return k;
    return -1;
}

const char *flow_kind_name(flow_kind k) { return kinds[k].name; }
const char *flow_kind_class(flow_kind k) { return kinds[k].class_name; }

void flow_np_linspace(double start, double stop, int num, double *out) {
    if (num == 1) {   /* div = 0: y = [0]·delta + start */
        out[0] = start;
        return;
    }
    double step = (stop - start) / (double)(num - 1);
    for (int i = 0; i < num; i++) {
        double y = (double)i * step;
        out[i] = y + start;
    }
    out[num - 1] = stop;
}

int flow_scheduler_init(flow_scheduler *s, const cvx_config *cfg, int kind, double shift_override) {
    memset(s, 0, sizeof *s);
    const char *cls = NULL;
    if (cvx_cfg_has(cfg, "_class_name") && cvx_cfg_str(cfg, "_class_name", &cls)) return -1;
    int from_cfg = cls ? flow_kind_find(cls) : -1;
    if (kind == FLOW_FROM_CONFIG) {
        if (from_cfg < 0)
            return cvx_error("%s: key '_class_name' is %s%s%s, expected \"%s\" or \"%s\"", cfg->path, cls ? "\"" : "",
                             cls ? cls : "missing", cls ? "\"" : "", kinds[FLOW_UNIPC].class_name,
                             kinds[FLOW_EULER].class_name);
        kind = from_cfg;
    }
    CVX_CHECK(kind == FLOW_UNIPC || kind == FLOW_EULER);
    s->kind = (flow_kind)kind;
    int64_t ntrain;
    if (cvx_cfg_int_or(cfg, "num_train_timesteps", 1000, &ntrain)) return -1;
    if (ntrain < 2 || ntrain > 100000)
        return cvx_error("%s: key 'num_train_timesteps' is %lld, expected 2..100000", cfg->path, (long long)ntrain);
    s->num_train_timesteps = (int)ntrain;
    s->solver_order = 1;
    int native = from_cfg == kind;
    return kind == FLOW_UNIPC ? flow_unipc_config(s, cfg, native, shift_override)
                              : flow_euler_config(s, cfg, native, shift_override);
}

int flow_scheduler_load(flow_scheduler *s, const char *path, int kind, double shift_override) {
    cvx_config cfg;
    memset(s, 0, sizeof *s);
    if (cvx_config_load(&cfg, path)) return -1;
    int rc = flow_scheduler_init(s, &cfg, kind, shift_override);
    cvx_config_free(&cfg);
    return rc;
}

static void free_schedule(flow_scheduler *s) {
    free(s->sigmas_f64);
    free(s->sigmas);
    free(s->timesteps);
    free(s->timesteps_int);
    s->sigmas_f64 = NULL;
    s->sigmas = NULL;
    s->timesteps = NULL;
    s->timesteps_int = NULL;
    s->num_inference_steps = 0;
}

void flow_scheduler_free(flow_scheduler *s) {
    free_schedule(s);
    memset(s, 0, sizeof *s);
}

/* upstream's index_for_timestep(timesteps[i]): the second match when the value repeats */
static int index_for_timestep(const flow_scheduler *s, int i) {
    int first = -1, second = -1;
    for (int k = 0; k < s->num_inference_steps && second < 0; k++) {
        int eq = s->timesteps_int ? s->timesteps_int[k] == s->timesteps_int[i] : s->timesteps[k] == s->timesteps[i];
        if (eq) {
            if (first < 0) first = k;
            else second = k;
        }
    }
    return second >= 0 ? second : first;
}

static int check_start(const flow_scheduler *s, int i) {
    if (index_for_timestep(s, i) != i)
        return cvx_error("%d inference steps: timestep %g repeats at steps %d and %d, so upstream (%s) would start at "
                         "step %d and run past the end of its schedule; use fewer steps",
                         s->num_inference_steps, (double)s->timesteps[i], i, i + 1, kinds[s->kind].class_name, i + 1);
    return 0;
}

int flow_scheduler_set_timesteps(flow_scheduler *s, int n) {
    if (n < 1 || n > 100000) return cvx_error("num_inference_steps is %d, expected 1..100000", n);
    free_schedule(s);
    s->sigmas_f64 = cvx_malloc((size_t)n * sizeof(double));
    s->sigmas = cvx_malloc((size_t)(n + 1) * sizeof(float));
    s->timesteps = cvx_malloc((size_t)n * sizeof(float));
    if (s->kind == FLOW_UNIPC) {
        s->timesteps_int = cvx_malloc((size_t)n * sizeof(int64_t));
        flow_unipc_set_timesteps(s, n);
    } else {
        flow_euler_set_timesteps(s, n);
    }
    s->num_inference_steps = n;
    return check_start(s, 0);
}

int flow_scheduler_set_sigmas(flow_scheduler *s, int n, const double *sigmas) {
    if (s->kind != FLOW_EULER)
        return cvx_error("explicit sigmas: %s takes none here (FlowMatchEulerDiscreteScheduler does)",
                         kinds[s->kind].class_name);
    if (n < 1 || n > 100000) return cvx_error("%d explicit sigmas, expected 1..100000", n);
    free_schedule(s);
    s->sigmas_f64 = cvx_malloc((size_t)n * sizeof(double));
    s->sigmas = cvx_malloc((size_t)(n + 1) * sizeof(float));
    s->timesteps = cvx_malloc((size_t)n * sizeof(float));
    /* np.array(sigmas).astype(np.float32); shift * σ / (1 + (shift − 1) * σ) on the float32 array
     * (the Python floats taken as float32); timesteps = σ * num_train_timesteps (float32) */
    const float fs = (float)s->shift, fs1 = (float)(s->shift - 1.0), T = (float)s->num_train_timesteps;
    for (int i = 0; i < n; i++) {
        const float sg = (float)sigmas[i];
        if (!isfinite(sg) || sg < 0.0f || sg > 1.0f) {
            free_schedule(s);
            return cvx_error("explicit sigma %d is %g, expected a number in [0, 1]", i, sigmas[i]);
        }
        s->sigmas[i] = fs * sg / (1.0f + fs1 * sg);
        s->sigmas_f64[i] = (double)s->sigmas[i];
        s->timesteps[i] = s->sigmas[i] * T;
    }
    s->sigmas[n] = 0.0f;
    s->num_inference_steps = n;
    return check_start(s, 0);
}

void flow_linear_sigmas(int n, double *out) {
    double *g = cvx_malloc(sizeof(double) * (size_t)(n + 1));
    flow_np_linspace(1.0, 0.0, n + 1, g);
    memcpy(out, g, sizeof(double) * (size_t)n);
    free(g);
}

/* ---------------------------------------------------------------- per-run state */

flow_state *flow_state_new(const flow_scheduler *s, size_t n) {
    CVX_CHECK(n > 0);
    flow_state *st = cvx_calloc(1, sizeof *st);
    st->n = n;
    st->scratch = cvx_alloc_f32(n);
    if (s->kind == FLOW_UNIPC) {
        for (int k = 0; k < s->solver_order; k++) {
            st->model_outputs[k] = cvx_alloc_f32(n);
            memset(st->model_outputs[k], 0, n * sizeof(float));
        }
        st->last_sample = cvx_alloc_f32(n);
        memset(st->last_sample, 0, n * sizeof(float));
    }
    flow_state_reset(st);
    return st;
}

void flow_state_free(flow_state *st) {
    if (!st) return;
    for (int k = 0; k < FLOW_MAX_ORDER; k++) free(st->model_outputs[k]);
    free(st->last_sample);
    free(st->scratch);
    free(st);
}

void flow_state_reset(flow_state *st) {
    st->begin_index = st->step_index = 0;
    st->lower_order_nums = st->this_order = st->has_last_sample = 0;
    st->x0 = NULL;
}

int flow_begin(const flow_scheduler *s, flow_state *st, int t_start) {
    CVX_CHECK(st->step_index == st->begin_index && !st->x0);   /* before the first step */
    if (t_start < 0 || t_start >= s->num_inference_steps)
        return cvx_error("start step %d out of range 0..%d", t_start, s->num_inference_steps - 1);
    if (check_start(s, t_start)) return -1;
    st->begin_index = st->step_index = t_start;
    return 0;
}

int flow_v2v_t_start(int num_inference_steps, double strength) {
    int init = (int)(num_inference_steps * strength);   /* Python int(): truncation */
    if (init > num_inference_steps) init = num_inference_steps;
    int t = num_inference_steps - init;
    return t > 0 ? t : 0;
}

void flow_add_noise(const flow_scheduler *s, int i, const float *x0, const float *noise, size_t n, float *out) {
    CVX_CHECK(i >= 0 && i <= s->num_inference_steps);
    const float sigma = s->sigmas[i], alpha = 1.0f - sigma;
    for (size_t j = 0; j < n; j++) out[j] = alpha * x0[j] + sigma * noise[j];
}

void flow_step(const flow_scheduler *s, flow_state *st, int i, const float *model_output, const float *sample,
               size_t n, float *prev) {
    CVX_CHECK(s->num_inference_steps > 0 && n == st->n);
    CVX_CHECK(i == st->step_index && i < s->num_inference_steps);
    CVX_CHECK(prev != sample && prev != model_output);
    if (s->kind == FLOW_UNIPC) flow_unipc_step(s, st, model_output, sample, n, prev);
    else flow_euler_step(s, st, model_output, sample, n, prev);
    st->step_index++;
}

const float *flow_x0(const flow_state *st) { return st->x0; }

const float *flow_corrected_sample(const flow_scheduler *s, const flow_state *st) {
    return s->kind == FLOW_UNIPC && st->has_last_sample ? st->last_sample : NULL;
}

int flow_last_order(const flow_scheduler *s, const flow_state *st) { return s->kind == FLOW_UNIPC ? st->this_order : 1; }

/* ---------------------------------------------------------------- checkpoints */

enum { ST_KIND, ST_N, ST_BEGIN, ST_STEP, ST_LOWER, ST_ORDER, ST_HAS_LAST, ST_SOLVER_ORDER, ST_COUNT };

int flow_state_save(const flow_scheduler *s, const flow_state *st, cvx_st_writer *w, int ndim, const int64_t *shape) {
    CVX_CHECK(ndim >= 1 && ndim <= CVX_MAX_DIMS);
    int64_t v[ST_COUNT] = {s->kind, s->num_inference_steps, st->begin_index, st->step_index, st->lower_order_nums,
                           st->this_order, st->has_last_sample, s->solver_order};
    int64_t nv = ST_COUNT, ns = s->num_inference_steps + 1;
    int rc = cvx_stw_add(w, "scheduler.state", CVX_I64, 1, &nv, v);
    rc |= cvx_stw_add(w, "scheduler.sigmas", CVX_F32, 1, &ns, s->sigmas);
    if (s->kind == FLOW_UNIPC) {
        for (int k = 0; k < s->solver_order; k++) {
            char name[64];
            snprintf(name, sizeof name, "scheduler.model_outputs.%d", k);
            rc |= cvx_stw_add(w, name, CVX_F32, ndim, shape, st->model_outputs[k]);
        }
        rc |= cvx_stw_add(w, "scheduler.last_sample", CVX_F32, ndim, shape, st->last_sample);
    }
    return rc ? -1 : 0;
}

static int load_latent(const cvx_safetensors *f, const char *path, const char *name, size_t n, float *dst) {
    const cvx_tensor *t = cvx_st_find(f, name);
    if (!t || t->dtype != CVX_F32 || t->numel != (int64_t)n)
        return cvx_error("%s: tensor '%s' missing or not F32 [%zu elements] (needed by the flow scheduler)", path, name, n);
    memcpy(dst, t->data, n * sizeof(float));   /* the file's data may be unaligned */
    if (cvx_check_finite(dst, n, name)) return cvx_error_prefix("%s", path);
    return 0;
}

int flow_state_load(const flow_scheduler *s, flow_state *st, const cvx_safetensors *f, const char *path) {
    const cvx_tensor *ts = cvx_st_find(f, "scheduler.state"), *tg = cvx_st_find(f, "scheduler.sigmas");
    if (!ts || ts->dtype != CVX_I64 || ts->numel != ST_COUNT)
        return cvx_error("%s: tensor 'scheduler.state' missing or not I64 [%d]", path, ST_COUNT);
    int64_t v[ST_COUNT];
    memcpy(v, ts->data, sizeof v);
    const int N = s->num_inference_steps, K = s->solver_order;
    if (v[ST_KIND] != s->kind || v[ST_N] != N || v[ST_SOLVER_ORDER] != K)
        return cvx_error("%s: tensor 'scheduler.state' was written by %s with %lld steps and solver order %lld, this run "
                         "uses %s with %d steps and order %d", path,
                         v[ST_KIND] == FLOW_UNIPC || v[ST_KIND] == FLOW_EULER ? kinds[v[ST_KIND]].class_name : "?",
                         (long long)v[ST_N], (long long)v[ST_SOLVER_ORDER], kinds[s->kind].class_name, N, K);
    if (v[ST_BEGIN] < 0 || v[ST_BEGIN] >= N || v[ST_STEP] < v[ST_BEGIN] || v[ST_STEP] > N || v[ST_LOWER] < 0 ||
        v[ST_LOWER] > K || v[ST_ORDER] < 0 || v[ST_ORDER] > K || (v[ST_HAS_LAST] != 0 && v[ST_HAS_LAST] != 1) ||
        (s->kind == FLOW_UNIPC && v[ST_STEP] > v[ST_BEGIN] && (!v[ST_HAS_LAST] || v[ST_ORDER] < 1)))
        return cvx_error("%s: tensor 'scheduler.state' holds inconsistent values [%lld %lld %lld %lld %lld %lld %lld]",
                         path, (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3], (long long)v[4],
                         (long long)v[5], (long long)v[6]);
    if (!tg || tg->dtype != CVX_F32 || tg->numel != N + 1 || memcmp(tg->data, s->sigmas, (size_t)(N + 1) * sizeof(float)))
        return cvx_error("%s: tensor 'scheduler.sigmas' missing or not this run's schedule (another shift or step "
                         "count?)", path);
    if (s->kind == FLOW_UNIPC) {
        for (int k = 0; k < K; k++) {
            char name[64];
            snprintf(name, sizeof name, "scheduler.model_outputs.%d", k);
            if (load_latent(f, path, name, st->n, st->model_outputs[k])) return -1;
        }
        if (load_latent(f, path, "scheduler.last_sample", st->n, st->last_sample)) return -1;
    }
    st->begin_index = (int)v[ST_BEGIN];
    st->step_index = (int)v[ST_STEP];
    st->lower_order_nums = (int)v[ST_LOWER];
    st->this_order = (int)v[ST_ORDER];
    st->has_last_sample = (int)v[ST_HAS_LAST];
    /* UniPC's x0 is its newest model output; Euler keeps none between steps */
    st->x0 = s->kind == FLOW_UNIPC && st->step_index > st->begin_index ? st->model_outputs[K - 1] : NULL;
    return 0;
}
