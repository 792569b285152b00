/* CogVideoXDDIMScheduler.step (eta = 0, deterministic), diffusers 0.32.2. */
#include "stage2/scheduler_ddpm.h"

#include <math.h>
#include <stdlib.h>

#include "error.h"

void ddpm_ddim_step(const ddpm_schedule *s, const float *model_output, int64_t t, const float *sample,
                         size_t n, float *prev, float *x0) {
    CVX_CHECK(s->num_inference_steps > 0 && t >= 0 && t < s->num_train_timesteps);
    double a_t = s->alphas_cumprod[t];
    double a_prev = ddpm_alpha_prev(s, ddpm_prev_timestep(s, t));
    float *p0 = x0 ? x0 : cvx_malloc(n * sizeof(float));
    ddpm_predict_x0(s, a_t, model_output, sample, n, p0);
    double a = sqrt((1.0 - a_prev) / (1.0 - a_t));
    double b = sqrt(a_prev) - sqrt(a_t) * a;
    float fa = (float)a, fb = (float)b;
    if (prev)
        for (size_t i = 0; i < n; i++) prev[i] = fa * sample[i] + fb * p0[i];
    if (!x0) free(p0);
}

/* ---- the scheduler interface: the state is one x0 scratch; nothing to checkpoint ---- */
static int ddim_init(cvx_scheduler *s, size_t n) {
    s->state = cvx_alloc_f32(n);
    return 0;
}

static void ddim_step(cvx_scheduler *s, int i, const float *model_output, const float *sample, size_t n,
                      cvx_generator *g, float *prev) {
    (void)g;
    const ddpm_schedule *d = ddpm_of(s);
    ddpm_ddim_step(d, model_output, d->timesteps[i], sample, n, prev, s->state);
}

static int ddim_save(const cvx_scheduler *s, cvx_st_writer *w, const int64_t shape[5]) { return 0; }
static int ddim_load(cvx_scheduler *s, const cvx_safetensors *st, const char *path, size_t n) { return 0; }

static const float *ddim_x0(const cvx_scheduler *s) { return s->state; }

const cvx_scheduler_type cvx_scheduler_ddim = {
    .name = "ddim",
    .class_name = "CogVideoXDDIMScheduler",
    .family = "ddpm",
    .configure = ddpm_configure,
    .free_sched = ddpm_free,
    .set_timesteps = ddpm_set_timesteps_type,
    .init = ddim_init,
    .step = ddim_step,
    .add_noise = ddpm_add_noise_type,
    .save_state = ddim_save,
    .load_state = ddim_load,
    .free_state = free,
    .x0 = ddim_x0,
};
