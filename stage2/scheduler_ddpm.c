/* CogVideoXDDIMScheduler / CogVideoXDPMScheduler: the DDPM noise schedule and timesteps.
 * Reproduces diffusers 0.32.2 with PyTorch 1.13 number for number (see scheduler.h). */
#include "stage2/scheduler_ddpm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "ops.h"

/* ā from the betas, the SNR shift (SD3 style) and the zero-terminal-SNR rescale.
 * scaled_linear is float64 upstream; linear / squaredcos_cap_v2 are float32 tensors, so their
 * whole schedule is float32 (cumprod accumulates in double, as torch's CPU cumprod does). */
static int build_alphas_cumprod(ddpm_schedule *s, const cvx_config *cfg) {
    const char *schedule;
    double beta_start, beta_end, shift;
    int rescale, set_alpha_to_one;
    /* defaults: the CogVideoX scheduler classes' constructor defaults */
    if (cvx_cfg_str_or(cfg, "beta_schedule", "scaled_linear", &schedule) ||
        cvx_cfg_num_or(cfg, "beta_start", 0.00085, &beta_start) || cvx_cfg_num_or(cfg, "beta_end", 0.012, &beta_end) ||
        cvx_cfg_num_or(cfg, "snr_shift_scale", 3.0, &shift) ||
        cvx_cfg_bool_or(cfg, "rescale_betas_zero_snr", 0, &rescale) ||
        cvx_cfg_bool_or(cfg, "set_alpha_to_one", 1, &set_alpha_to_one))
        return -1;
    if (cvx_cfg_has(cfg, "trained_betas"))
        return cvx_error("%s: key 'trained_betas' is not supported (expected null)", cfg->path);
    int N = s->num_train_timesteps;
    double *ac = cvx_malloc((size_t)N * sizeof(double));
    if (!strcmp(schedule, "scaled_linear")) {
        cvx_linspace_f64(pow(beta_start, 0.5), pow(beta_end, 0.5), N, 4, ac);
        double acc = 1.0;
        for (int i = 0; i < N; i++) {
            double beta = ac[i] * ac[i];
            acc *= 1.0 - beta;
            ac[i] = acc;
        }
        for (int i = 0; i < N; i++) ac[i] = ac[i] / (shift + (1.0 - shift) * ac[i]);
    } else if (!strcmp(schedule, "linear") || !strcmp(schedule, "squaredcos_cap_v2")) {
        float *b = cvx_malloc((size_t)N * sizeof(float));
        if (!strcmp(schedule, "linear")) {
            cvx_linspace_f32((float)beta_start, (float)beta_end, N, 8, b);
        } else {  /* Glide cosine schedule: python floats, stored as float32 */
            for (int i = 0; i < N; i++) {
                double t1 = (double)i / N, t2 = (double)(i + 1) / N;
                double a1 = cos((t1 + 0.008) / 1.008 * M_PI / 2), a2 = cos((t2 + 0.008) / 1.008 * M_PI / 2);
                double beta = 1.0 - (a2 * a2) / (a1 * a1);
                b[i] = (float)(beta < 0.999 ? beta : 0.999);
            }
        }
        double acc = 1.0;
        float fs = (float)shift, f1s = (float)(1.0 - shift);
        for (int i = 0; i < N; i++) {
            acc *= (double)(1.0f - b[i]);
            float a = (float)acc;
            ac[i] = (double)(a / (fs + f1s * a));
        }
        free(b);
    } else {
        free(ac);
        return cvx_error("%s: key 'beta_schedule' is \"%s\", expected \"scaled_linear\", \"linear\" or "
                         "\"squaredcos_cap_v2\"", cfg->path, schedule);
    }
    if (rescale) {  /* shift √ā so the last step is 0, scale so the first keeps its value */
        double q0 = sqrt(ac[0]), qT = sqrt(ac[N - 1]);
        double scale = q0 / (q0 - qT);
        for (int i = 0; i < N; i++) {
            double q = (sqrt(ac[i]) - qT) * scale;
            ac[i] = q * q;
        }
    }
    s->alphas_cumprod = ac;
    s->final_alpha_cumprod = set_alpha_to_one ? 1.0 : ac[0];
    return 0;
}

int ddpm_schedule_init(ddpm_schedule *s, const cvx_config *cfg) {
    memset(s, 0, sizeof(*s));
    int64_t ntrain, offset;
    const char *pred, *spacing;
    if (cvx_cfg_int_or(cfg, "num_train_timesteps", 1000, &ntrain) || cvx_cfg_int_or(cfg, "steps_offset", 0, &offset) ||
        cvx_cfg_str_or(cfg, "prediction_type", "epsilon", &pred) ||
        cvx_cfg_str_or(cfg, "timestep_spacing", "leading", &spacing))
        return -1;
    if (ntrain < 2 || ntrain > 100000)
        return cvx_error("%s: key 'num_train_timesteps' is %lld, expected 2..100000", cfg->path, (long long)ntrain);
    s->num_train_timesteps = (int)ntrain;
    s->steps_offset = (int)offset;
    if (!strcmp(pred, "v_prediction")) s->prediction_type = DDPM_PRED_V_PREDICTION;
    else if (!strcmp(pred, "epsilon")) s->prediction_type = DDPM_PRED_EPSILON;
    else if (!strcmp(pred, "sample")) s->prediction_type = DDPM_PRED_SAMPLE;
    else return cvx_error("%s: key 'prediction_type' is \"%s\", expected \"v_prediction\", \"epsilon\" or \"sample\"",
                          cfg->path, pred);
    if (!strcmp(spacing, "trailing")) s->timestep_spacing = DDPM_SPACING_TRAILING;
    else if (!strcmp(spacing, "leading")) s->timestep_spacing = DDPM_SPACING_LEADING;
    else if (!strcmp(spacing, "linspace")) s->timestep_spacing = DDPM_SPACING_LINSPACE;
    else return cvx_error("%s: key 'timestep_spacing' is \"%s\", expected \"trailing\", \"leading\" or \"linspace\"",
                          cfg->path, spacing);
    return build_alphas_cumprod(s, cfg);
}

void ddpm_schedule_free(ddpm_schedule *s) {
    free(s->alphas_cumprod);
    free(s->timesteps);
    memset(s, 0, sizeof(*s));
}

/* ---- the cvx_scheduler_type members shared by DDIM and DPM ---- */
int ddpm_configure(cvx_scheduler *s, const cvx_config *cfg) {
    ddpm_schedule *d = cvx_calloc(1, sizeof *d);
    s->sched = d;
    return ddpm_schedule_init(d, cfg);
}

void ddpm_free(void *sched) {
    if (!sched) return;
    ddpm_schedule_free(sched);
    free(sched);
}

int ddpm_set_timesteps_type(cvx_scheduler *s, int n) {
    if (s->sigmas)
        return cvx_error("explicit sigmas: %s takes none (a flow-matching scheduler does)", s->type->class_name);
    ddpm_schedule *d = ddpm_of(s);
    if (n > d->num_train_timesteps)
        return cvx_error("--num_inference_steps %d: at most num_train_timesteps %d (%s)", n, d->num_train_timesteps,
                         s->config_path);
    if (ddpm_set_timesteps(d, n)) return -1;
    s->timesteps = cvx_malloc((size_t)n * sizeof(double));
    for (int i = 0; i < n; i++) s->timesteps[i] = (double)d->timesteps[i];
    s->num_inference_steps = n;
    d->noise_dtype = s->noise_dtype;
    return 0;
}

void ddpm_add_noise_type(const cvx_scheduler *s, int i, const float *x0, const float *noise, size_t n, float *out) {
    const ddpm_schedule *d = ddpm_of(s);
    ddpm_add_noise(d, d->timesteps[i], x0, noise, n, out);
}

void ddpm_add_noise(const ddpm_schedule *s, int64_t t, const float *x0, const float *noise, size_t n, float *out) {
    CVX_CHECK(t >= 0 && t < s->num_train_timesteps);
    /* alphas_cumprod.to(float32)[t] ** 0.5 and (1 − ā) ** 0.5, float32 tensors */
    const float a = (float)s->alphas_cumprod[t], sa = sqrtf(a), sb = sqrtf(1.0f - a);
    for (size_t i = 0; i < n; i++) {
        float u = sa * x0[i], v = sb * noise[i];
        out[i] = u + v;
    }
}

/* Length of np.arange(N, 0, -N/n): ceil((0 − N) / step) in double, as numpy computes it. */
static int trailing_count(int N, int n) {
    double step = -(double)N / (double)n;
    return (int)ceil((0.0 - (double)N) / step);
}

int ddpm_set_timesteps(ddpm_schedule *s, int n) {
    int N = s->num_train_timesteps;
    if (n < 1 || n > N) return cvx_error("num_inference_steps is %d, expected 1..%d", n, N);
    int64_t *ts = cvx_malloc((size_t)n * sizeof(int64_t));
    if (s->timestep_spacing == DDPM_SPACING_LINSPACE) {
        /* np.linspace(0, N-1, n).round()[::-1]: i·step, the last value exactly N-1 */
        for (int i = 0; i < n; i++) {
            double v = n > 1 ? (i == n - 1 ? (double)(N - 1) : (double)i * ((double)(N - 1) / (n - 1))) : 0.0;
            ts[n - 1 - i] = (int64_t)nearbyint(v);
        }
    } else if (s->timestep_spacing == DDPM_SPACING_LEADING) {
        int ratio = N / n;
        for (int i = 0; i < n; i++) ts[n - 1 - i] = (int64_t)i * ratio + s->steps_offset;
    } else {
        /* np.round(np.arange(N, 0, -N/n)) - 1. numpy's arange: length ceil((0-N)/step), values
         * start + i·delta with delta = (start + step) - start. steps_offset is not applied
         * (as upstream). */
        int len = trailing_count(N, n);
        if (len != n) {
            /* numpy's float arange overshoots for these n: upstream then runs an extra step at
             * t = −1, which indexes ā[−1] = ā[N−1] and spoils the video. Refuse instead. */
            int lo = n - 1, hi = n + 1;
            while (lo > 1 && trailing_count(N, lo) != lo) lo--;
            while (hi < N && trailing_count(N, hi) != hi) hi++;
            free(ts);
            return cvx_error("num_inference_steps %d: with timestep_spacing \"trailing\" upstream (numpy arange) makes "
                             "%d timesteps, the last one -1 (a diffusers quirk that spoils the result); use %d or %d steps",
                             n, len, lo, hi);
        }
        double step = -(double)N / (double)n;
        double start = (double)N, delta = (start + step) - start;
        for (int i = 0; i < n; i++) {
            double v = i == 0 ? start : (i == 1 ? start + step : start + i * delta);
            ts[i] = (int64_t)nearbyint(v) - 1;
        }
    }
    for (int i = 0; i < n; i++)
        if (ts[i] < 0 || ts[i] >= N) {
            int64_t bad = ts[i];
            free(ts);
            return cvx_error("timestep %lld out of range 0..%d (check steps_offset)", (long long)bad, N - 1);
        }
    free(s->timesteps);
    s->timesteps = ts;
    s->num_inference_steps = n;
    return 0;
}

int64_t ddpm_prev_timestep(const ddpm_schedule *s, int64_t t) {
    return t - s->num_train_timesteps / s->num_inference_steps;
}

double ddpm_alpha_prev(const ddpm_schedule *s, int64_t prev_t) {
    return prev_t >= 0 ? s->alphas_cumprod[prev_t] : s->final_alpha_cumprod;
}

/* x0 from the model output. Coefficients f64 → f32, arithmetic f32 as upstream. */
void ddpm_predict_x0(const ddpm_schedule *s, double a_t, const float *model_output, const float *sample, size_t n,
                     float *x0) {
    float sa = (float)sqrt(a_t), sb = (float)sqrt(1.0 - a_t);
    switch (s->prediction_type) {
    case DDPM_PRED_V_PREDICTION:
        for (size_t i = 0; i < n; i++) x0[i] = sa * sample[i] - sb * model_output[i];
        break;
    case DDPM_PRED_EPSILON:
        for (size_t i = 0; i < n; i++) x0[i] = (sample[i] - sb * model_output[i]) / sa;
        break;
    case DDPM_PRED_SAMPLE:
        memcpy(x0, model_output, n * sizeof(float));
        break;
    }
}
