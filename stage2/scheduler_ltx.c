/* The LTX-Video schedule as a scheduler type ("ltx"): FlowMatchEulerDiscreteScheduler the way
 * LTXPipeline / LTXImageToVideoPipeline call it (stage2/ltx_schedule.h: sigmas linspace(1, 1/N, N),
 * the dynamic shift from the latent token count for 0.9.0 / 0.9.1, the static shift for 0.9.5+),
 * or an explicit timestep list (distilled checkpoints); Euler steps. Stateless between steps. */
#include "stage2/scheduler_ltx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "stage2/ltx_cond.h"
#include "stage2/ltx_schedule.h"

typedef struct {
    ltx_sched_config cfg;
    int64_t seq_len;          /* the latent token count the dynamic shift uses (0: base_image_seq_len) */
    const double *list;       /* explicit timesteps (borrowed) or NULL */
    int n_list;
    float *sigmas;            /* [N + 1] */
    float *x0;                /* [n] the last step's x0 estimate (previews) */
    int keep_C;               /* I2V: per channel of keep_per floats, the first keep_n stay (0: none) */
    size_t keep_per, keep_n;
    /* the condition pipeline (cmask NULL: off): mask [tokens], init [tokens, C] borrowed */
    const float *cmask, *cinit;
    int tokens, C;
    float noise_scale;
    float *ptt, *tmp;         /* [tokens] per-token timesteps, [tokens, C] −v / the re-noising draw */
} ltx_sched;

static ltx_sched *ls(const cvx_scheduler *s) { return s->sched; }

static int configure(cvx_scheduler *s, const cvx_config *cfg) {
    ltx_sched *l = cvx_calloc(1, sizeof *l);
    s->sched = l;
    return ltx_sched_config_load(cfg->path, &l->cfg);
}

static void free_sched(void *p) {
    ltx_sched *l = p;
    if (!l) return;
    free(l->sigmas), free(l->ptt), free(l->tmp);
    free(l);
}

static int set_timesteps(cvx_scheduler *s, int n) {
    ltx_sched *l = ls(s);
    if (s->sigmas) return cvx_error("the ltx scheduler takes no explicit sigmas");
    if (l->list && l->n_list != n)
        return cvx_error("--timesteps gives %d values, --num_inference_steps is %d", l->n_list, n);
    float *ts = cvx_alloc_f32((size_t)n);
    free(l->sigmas);
    l->sigmas = cvx_alloc_f32((size_t)n + 1);
    int rc;
    if (l->list) {
        rc = ltx_schedule_timesteps(&l->cfg, n, l->list, l->sigmas, ts);
    } else {
        const int64_t seq = l->seq_len > 0 ? l->seq_len : l->cfg.base_image_seq_len;
        rc = ltx_schedule_sigmas(&l->cfg, n, ltx_calculate_shift(seq, &l->cfg), l->sigmas, ts);
    }
    if (!rc) {
        s->timesteps = cvx_malloc((size_t)n * sizeof(double));
        for (int i = 0; i < n; i++) s->timesteps[i] = (double)ts[i];   /* exact: float → double */
        s->num_inference_steps = n;
    }
    free(ts);
    return rc;
}

static int init(cvx_scheduler *s, size_t n) {
    s->state = cvx_calloc(n, sizeof(float));
    ls(s)->x0 = s->state;
    return 0;
}

/* LTXConditionPipeline's step (ltx_scheduler_set_condition), then the next step's re-noising */
static void step_condition(cvx_scheduler *s, int i, const float *v, const float *x, size_t n, cvx_generator *g,
                           float *prev) {
    ltx_sched *l = ls(s);
    const int N = s->num_inference_steps;
    const float t = (float)s->timesteps[i];
    CVX_CHECK(n == (size_t)l->tokens * l->C);
    ltx_per_token_timesteps(t, l->cmask, l->tokens, l->ptt);
    for (size_t k = 0; k < n; k++) l->tmp[k] = -v[k];   /* step(−noise_pred, ...) */
    ltx_step_per_token(l->sigmas, N, l->ptt, l->tmp, x, l->tokens, l->C, prev);
    ltx_condition_select(t, l->cmask, prev, x, l->tokens, l->C, prev);
    for (int k = 0; k < l->tokens; k++)   /* previews: x − σ_token·v */
        for (int c = 0; c < l->C; c++) {
            const size_t q = (size_t)k * l->C + c;
            l->x0[q] = x[q] - l->ptt[k] / 1000.0f * v[q];
        }
    if (l->noise_scale > 0 && i + 1 < N) {
        cvx_randn(g, l->tmp, n);
        ltx_condition_renoise((float)s->timesteps[i + 1], l->cinit, l->tmp, l->cmask, l->tokens, l->C, l->noise_scale,
                              prev);
    }
}

/* prev = x + (σ_{i+1} − σ_i)·v; x0 = x − σ_i·v (previews only) */
static void step(cvx_scheduler *s, int i, const float *v, const float *x, size_t n, cvx_generator *g, float *prev) {
    ltx_sched *l = ls(s);
    if (l->cmask) {
        step_condition(s, i, v, x, n, g, prev);
        return;
    }
    ltx_step(l->sigmas, i, v, x, n, prev);
    for (size_t k = 0; k < n; k++) l->x0[k] = x[k] - l->sigmas[i] * v[k];
    for (int c = 0; c < l->keep_C; c++)   /* I2V: latent frame 0 is the image's, never stepped */
        memcpy(prev + c * l->keep_per, x + c * l->keep_per, l->keep_n * sizeof(float));
}

/* flow matching's scale_noise: σ·noise + (1 − σ)·x0 */
static void add_noise(const cvx_scheduler *s, int i, const float *x0, const float *noise, size_t n, float *out) {
    const float sg = ls(s)->sigmas[i];
    for (size_t k = 0; k < n; k++) out[k] = sg * noise[k] + (1.0f - sg) * x0[k];
}

static int save_state(const cvx_scheduler *s, cvx_st_writer *w, const int64_t shape[5]) {
    (void)s, (void)w, (void)shape;
    return 0;   /* Euler keeps nothing between steps */
}

static int load_state(cvx_scheduler *s, const cvx_safetensors *f, const char *path, size_t n) {
    (void)s, (void)f, (void)path, (void)n;
    return 0;
}

static void free_state(void *st) { free(st); }

static const float *x0(const cvx_scheduler *s) { return ls(s)->x0; }

const cvx_scheduler_type cvx_scheduler_ltx = {
    .name = "ltx", .class_name = "LTXFlowMatchEuler", .family = "flow", .configure = configure,
    .free_sched = free_sched, .set_timesteps = set_timesteps, .init = init, .step = step, .add_noise = add_noise,
    .save_state = save_state, .load_state = load_state, .free_state = free_state, .x0 = x0,
};

int cvx_scheduler_is_ltx(const cvx_scheduler *s) { return s->type == &cvx_scheduler_ltx; }

void ltx_scheduler_set_seq_len(cvx_scheduler *s, int64_t seq_len) { ls(s)->seq_len = seq_len; }

void ltx_scheduler_set_list(cvx_scheduler *s, const double *timesteps, int n) {
    ls(s)->list = timesteps, ls(s)->n_list = n;
}

void ltx_scheduler_keep_first(cvx_scheduler *s, int C, size_t per_channel, size_t keep) {
    ltx_sched *l = ls(s);
    l->keep_C = C, l->keep_per = per_channel, l->keep_n = keep;
}

const float *ltx_scheduler_sigmas(const cvx_scheduler *s) { return ls(s)->sigmas; }

void ltx_scheduler_set_condition(cvx_scheduler *s, const float *mask, const float *init, int tokens, int C,
                                 float noise_scale) {
    ltx_sched *l = ls(s);
    l->cmask = mask, l->cinit = init, l->tokens = tokens, l->C = C, l->noise_scale = noise_scale;
    free(l->ptt), free(l->tmp);
    l->ptt = cvx_alloc_f32((size_t)tokens);
    l->tmp = cvx_alloc_f32((size_t)tokens * C);
}
