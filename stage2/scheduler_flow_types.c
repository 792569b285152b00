/* UniPCMultistepScheduler and FlowMatchEulerDiscreteScheduler behind the scheduler interface
 * (scheduler.h): s->sched is the flow_scheduler (scheduler_flow.h), s->state its flow_state. */
#include "stage2/scheduler.h"
#include "stage2/scheduler_flow.h"

#include <stdlib.h>

#include "error.h"

static flow_scheduler *fs_of(const cvx_scheduler *s) { return s->sched; }

static int configure(cvx_scheduler *s, const cvx_config *cfg, flow_kind kind) {
    flow_scheduler *fs = cvx_calloc(1, sizeof *fs);
    s->sched = fs;
    return flow_scheduler_init(fs, cfg, kind, s->flow_shift);   /* --flow_shift, 0 = the config's */
}
static int unipc_configure(cvx_scheduler *s, const cvx_config *cfg) { return configure(s, cfg, FLOW_UNIPC); }
static int euler_configure(cvx_scheduler *s, const cvx_config *cfg) { return configure(s, cfg, FLOW_EULER); }

static void free_sched(void *p) {
    if (!p) return;
    flow_scheduler_free(p);
    free(p);
}

static int set_timesteps(cvx_scheduler *s, int n) {
    flow_scheduler *fs = fs_of(s);
    if (s->sigmas ? flow_scheduler_set_sigmas(fs, n, s->sigmas) : flow_scheduler_set_timesteps(fs, n)) return -1;
    s->timesteps = cvx_malloc((size_t)n * sizeof(double));
    for (int i = 0; i < n; i++) s->timesteps[i] = (double)fs->timesteps[i];   /* exact: float → double */
    s->num_inference_steps = n;
    return 0;
}

static int init(cvx_scheduler *s, size_t n) {
    flow_state *st = flow_state_new(fs_of(s), n);
    s->state = st;
    return flow_begin(fs_of(s), st, s->begin);   /* V2V: the loop starts at s->begin */
}

static void step(cvx_scheduler *s, int i, const float *v, const float *x, size_t n, cvx_generator *g, float *prev) {
    (void)g;
    flow_step(fs_of(s), s->state, i, v, x, n, prev);
}

static void add_noise(const cvx_scheduler *s, int i, const float *x0, const float *noise, size_t n, float *out) {
    flow_add_noise(fs_of(s), i, x0, noise, n, out);
}

static int save_state(const cvx_scheduler *s, cvx_st_writer *w, const int64_t shape[5]) {
    return flow_state_save(fs_of(s), s->state, w, 5, shape);
}

static int load_state(cvx_scheduler *s, const cvx_safetensors *f, const char *path, size_t n) {
    (void)n;
    return flow_state_load(fs_of(s), s->state, f, path);
}

static void free_state(void *st) { flow_state_free(st); }

static const float *x0(const cvx_scheduler *s) { return flow_x0(s->state); }

const cvx_scheduler_type cvx_scheduler_unipc = {
    .name = "unipc", .class_name = "UniPCMultistepScheduler", .family = "flow", .configure = unipc_configure,
    .free_sched = free_sched, .set_timesteps = set_timesteps, .init = init, .step = step, .add_noise = add_noise,
    .save_state = save_state, .load_state = load_state, .free_state = free_state, .x0 = x0,
};

const cvx_scheduler_type cvx_scheduler_euler = {
    .name = "euler", .class_name = "FlowMatchEulerDiscreteScheduler", .family = "flow",
    .configure = euler_configure, .free_sched = free_sched, .set_timesteps = set_timesteps, .init = init,
    .step = step, .add_noise = add_noise, .save_state = save_state, .load_state = load_state,
    .free_state = free_state, .x0 = x0,
};
