/* FlowMatchEulerDiscreteScheduler (diffusers 0.33.1) with a static shift, as diffusers'
 * convert_wan_to_diffusers.py configures it for Wan.
 *
 * The training schedule (constructor, float32 tensors): σ_train = shift(t/T) for t = T..1, so
 * σ_max = shift(1) and σ_min = shift(1/T). set_timesteps(N) (float64 numpy):
 * timesteps = linspace(σ_max·T, σ_min·T, N), σ = shift(timesteps/T) — σ_min is shifted twice —
 * then float32; the model gets the fractional float32 σ·T. step: x' = x + (σ_{i+1} − σ_i)·v. */
#include "scheduler_flow.h"

#include <math.h>
#include <string.h>

#include "error.h"

int flow_euler_config(flow_scheduler *s, const cvx_config *cfg, int native, double shift_override) {
    int dyn, invert, karras, expo, beta, stochastic;
    double shift;
    if (cvx_cfg_bool_or(cfg, "stochastic_sampling", 0, &stochastic)) return -1;
    if (stochastic) return cvx_error("%s: key 'stochastic_sampling' is true, expected false", cfg->path);
    if (cvx_cfg_bool_or(cfg, "use_dynamic_shifting", 0, &dyn) || cvx_cfg_bool_or(cfg, "invert_sigmas", 0, &invert) ||
        cvx_cfg_bool_or(cfg, "use_karras_sigmas", 0, &karras) || cvx_cfg_bool_or(cfg, "use_exponential_sigmas", 0, &expo) ||
        cvx_cfg_bool_or(cfg, "use_beta_sigmas", 0, &beta))
        return -1;
    /* a UniPC config (kind override) names the shift flow_shift */
    if (cvx_cfg_has(cfg, "shift") || native || !cvx_cfg_has(cfg, "flow_shift")) {
        if (cvx_cfg_num_or(cfg, "shift", 1.0, &shift)) return -1;
    } else if (cvx_cfg_num(cfg, "flow_shift", &shift)) {
        return -1;
    }
    if (dyn)
        return cvx_error("%s: key 'use_dynamic_shifting' is true, expected false (the resolution-dependent shift needs "
                         "`mu`, which Wan does not pass)", cfg->path);
    if (invert) return cvx_error("%s: key 'invert_sigmas' is true, expected false", cfg->path);
    if (cvx_cfg_has(cfg, "shift_terminal"))
        return cvx_error("%s: key 'shift_terminal' is not supported (expected null)", cfg->path);
    if (karras || expo || beta)
        return cvx_error("%s: key '%s' is true, expected false", cfg->path,
                         karras ? "use_karras_sigmas" : expo ? "use_exponential_sigmas" : "use_beta_sigmas");
    if (shift_override > 0) shift = shift_override;
    if (!(shift > 0) || !isfinite(shift))
        return cvx_error("%s: key 'shift' is %g, expected a positive number", cfg->path, shift);
    s->shift = shift;
    /* the constructor's float32 training schedule: its ends are all set_timesteps uses */
    const float fs = (float)shift, fs1 = (float)(shift - 1.0);
    const float t_last = 1.0f / (float)s->num_train_timesteps, t_first = 1.0f;
    s->sigma_min = (double)(fs * t_last / (1.0f + fs1 * t_last));
    s->sigma_max = (double)(fs * t_first / (1.0f + fs1 * t_first));
    return 0;
}

void flow_euler_set_timesteps(flow_scheduler *s, int n) {
    const int T = s->num_train_timesteps;
    flow_np_linspace(s->sigma_max * T, s->sigma_min * T, n, s->sigmas_f64);
    for (int i = 0; i < n; i++) {
        double sg = s->sigmas_f64[i] / T;
        sg = s->shift * sg / (1.0 + (s->shift - 1.0) * sg);
        s->sigmas_f64[i] = sg;
        s->sigmas[i] = (float)sg;
        s->timesteps[i] = s->sigmas[i] * (float)T;
    }
    s->sigmas[n] = 0.0f;
}

/* prev = x + dt·v with dt = σ_{i+1} − σ_i (float32); the x0 estimate x − σ_i·v for previews. */
void flow_euler_step(const flow_scheduler *s, flow_state *st, const float *model_output, const float *sample,
                     size_t n, float *prev) {
    const int i = st->step_index;
    const float sigma = s->sigmas[i], dt = s->sigmas[i + 1] - sigma;
    float *x0 = st->scratch;
    for (size_t j = 0; j < n; j++) {
        prev[j] = sample[j] + dt * model_output[j];
        x0[j] = sample[j] - sigma * model_output[j];
    }
    st->x0 = x0;
}
