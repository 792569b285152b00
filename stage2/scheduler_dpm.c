/* CogVideoXDPMScheduler.step (DPM-Solver++ 2M with noise, as upstream), diffusers 0.32.2. */
#include "stage2/scheduler_ddpm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "rng_lowp.h"

int ddpm_dpm_num_draws(const ddpm_schedule *s, int has_old_x0, int64_t t) {
    return has_old_x0 && ddpm_prev_timestep(s, t) >= 0 ? 2 : 1;
}

/* λ(ā) = log √(ā / (1 − ā)), the half log-SNR. */
static double half_log_snr(double a) { return log(sqrt(a / (1.0 - a))); }

void ddpm_dpm_step_with_noise(const ddpm_schedule *s, const float *model_output, const float *old_x0,
                                   int64_t t, int64_t t_back, const float *sample, size_t n, const float *noise1,
                                   const float *noise2, float *prev, float *x0) {
    CVX_CHECK(s->num_inference_steps > 0 && t >= 0 && t < s->num_train_timesteps);
    CVX_CHECK(t_back < s->num_train_timesteps);
    int64_t prev_t = ddpm_prev_timestep(s, t);
    double a_t = s->alphas_cumprod[t];
    double a_prev = ddpm_alpha_prev(s, prev_t);
    float *p0 = x0 ? x0 : cvx_malloc(n * sizeof(float));
    ddpm_predict_x0(s, a_t, model_output, sample, n, p0);

    double lamb = half_log_snr(a_t), lamb_next = half_log_snr(a_prev);
    double h = lamb_next - lamb;
    double mult1 = sqrt((1.0 - a_prev) / (1.0 - a_t)) * exp(-h);
    double mult2 = expm1(-2.0 * h) * sqrt(a_prev);
    double mult_noise = sqrt(1.0 - a_prev) * sqrt(1.0 - exp(-2.0 * h));
    float m1 = (float)mult1, m2 = (float)mult2, mn = (float)mult_noise;

    int second_order = old_x0 && prev_t >= 0;
    if (!second_order) {  /* first step, or the last (prev_t < 0) */
        for (size_t i = 0; i < n; i++) prev[i] = (m1 * sample[i] - m2 * p0[i]) + mn * noise1[i];
    } else {
        /* h_last from the previous (larger) timestep; with t_back = -1 upstream would fail, so
         * treat a missing t_back as a programming error. */
        CVX_CHECK(t_back >= 0 && noise2);
        double lamb_back = half_log_snr(s->alphas_cumprod[t_back]);
        double r = (lamb - lamb_back) / h;
        float m3 = (float)(1.0 + 1.0 / (2.0 * r)), m4 = (float)(1.0 / (2.0 * r));
        for (size_t i = 0; i < n; i++) {
            float d = m3 * p0[i] - m4 * old_x0[i];
            prev[i] = (m1 * sample[i] - m2 * d) + mn * noise2[i];
        }
    }
    if (!x0) free(p0);
}

void ddpm_dpm_step(const ddpm_schedule *s, const float *model_output, const float *old_x0, int64_t t,
                        int64_t t_back, const float *sample, size_t n, cvx_generator *g, float *noise_scratch,
                        float *prev, float *x0) {
    /* Upstream draws noise1 unconditionally, and noise2 (the one used) for a second-order step;
     * only the last draw matters for the result, so both go to the same scratch. */
    int draws = ddpm_dpm_num_draws(s, old_x0 != NULL, t);
    for (int k = 0; k < draws; k++) CVX_CHECK(cvx_randn_as(g, (cvx_dtype)s->noise_dtype, noise_scratch, n) == 0);
    ddpm_dpm_step_with_noise(s, model_output, old_x0, t, t_back, sample, n, noise_scratch,
                                  draws == 2 ? noise_scratch : NULL, prev, x0);
}

/* ---- the scheduler interface ----
 * State: the previous step's x0 (checkpointed as "old_pred_original_sample", the name of
 * upstream's attribute), this step's x0 and the noise scratch. */
typedef struct {
    float *old_x0, *x0, *noise;
} dpm_state;

static int dpm_init(cvx_scheduler *s, size_t n) {
    dpm_state *st = cvx_calloc(1, sizeof *st);
    st->old_x0 = cvx_alloc_f32(n);
    st->x0 = cvx_alloc_f32(n);
    st->noise = cvx_alloc_f32(n);
    s->state = st;
    return 0;
}

static void dpm_free(void *state) {
    dpm_state *st = state;
    free(st->old_x0);
    free(st->x0);
    free(st->noise);
    free(st);
}

static void dpm_step(cvx_scheduler *s, int i, const float *model_output, const float *sample, size_t n,
                     cvx_generator *g, float *prev) {
    dpm_state *st = s->state;
    const ddpm_schedule *d = ddpm_of(s);
    /* old x0 from the previous step and t_back = the previous timestep (None at the first step
     * the loop runs: V2V starts at s->begin with no history, as upstream) */
    const int first = i == s->begin;
    ddpm_dpm_step(d, model_output, first ? NULL : st->old_x0, d->timesteps[i], first ? -1 : d->timesteps[i - 1],
                       sample, n, g, st->noise, prev, st->x0);
    float *tmp = st->old_x0;
    st->old_x0 = st->x0;
    st->x0 = tmp;
}

static int dpm_save(const cvx_scheduler *s, cvx_st_writer *w, const int64_t shape[5]) {
    const dpm_state *st = s->state;
    return cvx_stw_add(w, "old_pred_original_sample", CVX_F32, 5, shape, st->old_x0);
}

static int dpm_load(cvx_scheduler *s, const cvx_safetensors *f, const char *path, size_t n) {
    dpm_state *st = s->state;
    const cvx_tensor *t = cvx_st_find(f, "old_pred_original_sample");
    if (!t || t->dtype != CVX_F32 || t->numel != (int64_t)n)
        return cvx_error("%s: tensor 'old_pred_original_sample' missing or not F32 [%zu elements] (needed by the DPM "
                         "scheduler)", path, n);
    memcpy(st->old_x0, t->data, n * sizeof(float));
    return 0;
}

/* after dpm_step's swap, old_x0 holds this step's x0 */
static const float *dpm_x0(const cvx_scheduler *s) { return ((const dpm_state *)s->state)->old_x0; }

const cvx_scheduler_type cvx_scheduler_dpm = {
    .name = "dpm",
    .class_name = "CogVideoXDPMScheduler",
    .family = "ddpm",
    .configure = ddpm_configure,
    .free_sched = ddpm_free,
    .set_timesteps = ddpm_set_timesteps_type,
    .init = dpm_init,
    .step = dpm_step,
    .add_noise = ddpm_add_noise_type,
    .save_state = dpm_save,
    .load_state = dpm_load,
    .free_state = dpm_free,
    .x0 = dpm_x0,
};
