/* LTX-Video's schedule math (see ltx_schedule.h). numpy 1.24 promotion: a Python float with a
 * float32 array computes in float32; a float32 scalar with a Python float in float64. */
#include "ltx_schedule.h"

#include "config.h"
#include "error.h"
#include "stage2/scheduler_flow.h"
#include "validate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ltx_sched_config_load(const char *path, ltx_sched_config *c) {
    cvx_config j;
    if (cvx_config_load(&j, path)) return -1;
    int rc = -1, b;
    int64_t v;
    const char *s;
    memset(c, 0, sizeof *c);
    if (cvx_cfg_str_or(&j, "_class_name", "FlowMatchEulerDiscreteScheduler", &s)) goto out;
    if (strcmp(s, "FlowMatchEulerDiscreteScheduler")) {
        cvx_error("%s: '_class_name' is \"%s\", expected \"FlowMatchEulerDiscreteScheduler\" (LTX-Video)", path, s);
        goto out;
    }
    if (cvx_cfg_int_range_or(&j, "num_train_timesteps", 1000, 1, 1000000, &v)) goto out;
    c->num_train_timesteps = (int)v;
    if (cvx_cfg_num_range_or(&j, "shift", 1.0, 0, 1000, 1, &c->shift)) goto out;
    if (cvx_cfg_bool_or(&j, "use_dynamic_shifting", 0, &c->use_dynamic_shifting)) goto out;
    if (cvx_cfg_num_range_or(&j, "base_shift", 0.5, -100, 100, 0, &c->base_shift)) goto out;
    if (cvx_cfg_num_range_or(&j, "max_shift", 1.15, -100, 100, 0, &c->max_shift)) goto out;
    if (cvx_cfg_int_range_or(&j, "base_image_seq_len", 256, 1, INT64_C(1) << 40, &c->base_image_seq_len)) goto out;
    if (cvx_cfg_int_range_or(&j, "max_image_seq_len", 4096, 1, INT64_C(1) << 40, &c->max_image_seq_len)) goto out;
    if (cvx_cfg_num_range_or(&j, "shift_terminal", 0.0, 0, 1, 0, &c->shift_terminal)) goto out;
    if (c->shift_terminal >= 1.0) {
        cvx_error("%s: key 'shift_terminal' = %g must be below 1", path, c->shift_terminal);
        goto out;
    }
    if (c->base_image_seq_len == c->max_image_seq_len) {
        cvx_error("%s: keys 'base_image_seq_len' and 'max_image_seq_len' are both %lld (calculate_shift divides by "
                  "their difference)", path, (long long)c->max_image_seq_len);
        goto out;
    }
    static const char *const off[] = {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                                      "invert_sigmas", "stochastic_sampling"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        if (cvx_cfg_bool_or(&j, off[i], 0, &b)) goto out;
        if (b) {
            cvx_error("%s: key '%s' is true: not supported (no LTX-Video checkpoint sets it)", path, off[i]);
            goto out;
        }
    }
    if (cvx_cfg_str_or(&j, "time_shift_type", "exponential", &s)) goto out;
    if (strcmp(s, "exponential")) {
        cvx_error("%s: key 'time_shift_type' is \"%s\", only \"exponential\" is supported", path, s);
        goto out;
    }
    rc = 0;
out:
    cvx_config_free(&j);
    return rc;
}

double ltx_calculate_shift(int64_t seq_len, const ltx_sched_config *c) {
    double m = (c->max_shift - c->base_shift) / (double)(c->max_image_seq_len - c->base_image_seq_len);
    double b = c->base_shift - m * (double)c->base_image_seq_len;
    return (double)seq_len * m + b;
}

/* Steps 2-3 of set_timesteps on float32 sigmas [N]: the shift, then the stretch to the terminal. */
static void ltx_shift_sigmas(const ltx_sched_config *c, int N, double mu, float *s) {
    if (c->use_dynamic_shifting) {   /* math.exp(mu) / (math.exp(mu) + (1/t − 1) ** 1.0), float32 */
        float e = (float)exp(mu);
        for (int i = 0; i < N; i++) s[i] = e / (e + (1.0f / s[i] - 1.0f));
    } else {                         /* shift·σ / (1 + (shift − 1)·σ), float32 */
        float sh = (float)c->shift, sh1 = (float)(c->shift - 1.0);
        for (int i = 0; i < N; i++) s[i] = sh * s[i] / (1.0f + sh1 * s[i]);
    }
    if (c->shift_terminal > 0) {
        /* one_minus_z = 1 − t (float32); scale = one_minus_z[−1] / (1 − terminal) (a float32
         * scalar with a Python float: float64); 1 − one_minus_z / scale (float32) */
        float omz_last = 1.0f - s[N - 1];
        float scale = (float)((double)omz_last / (1.0 - c->shift_terminal));
        for (int i = 0; i < N; i++) s[i] = 1.0f - (1.0f - s[i]) / scale;
    }
}

int ltx_schedule_sigmas(const ltx_sched_config *c, int N, double mu, float *sigmas, float *timesteps) {
    if (N < 1 || N > 100000) return cvx_error("num_inference_steps = %d: expected 1 .. 100000", N);
    double *lin = malloc(sizeof(double) * (size_t)N);
    flow_np_linspace(1.0, 1.0 / N, N, lin);                                 // np.linspace(1, 1/N, N)
    for (int i = 0; i < N; i++) sigmas[i] = (float)lin[i];
    free(lin);
    ltx_shift_sigmas(c, N, mu, sigmas);
    float T = (float)c->num_train_timesteps;
    for (int i = 0; i < N; i++) timesteps[i] = sigmas[i] * T;
    sigmas[N] = 0.0f;
    return 0;
}

int ltx_schedule_timesteps(const ltx_sched_config *c, int N, const double *t_in, float *sigmas, float *timesteps) {
    if (N < 1 || N > 100000) return cvx_error("timesteps: %d values, expected 1 .. 100000", N);
    if (c->use_dynamic_shifting)
        return cvx_error("custom timesteps with a dynamic-shifting scheduler config: upstream needs mu there (the "
                         "0.9.5+ configs have use_dynamic_shifting false)");
    for (int i = 0; i < N; i++)
        if (!(t_in[i] >= 0 && t_in[i] <= c->num_train_timesteps))
            return cvx_error("timesteps: value %d is %g, expected one in [0, num_train_timesteps %d]", i + 1, t_in[i],
                             c->num_train_timesteps);
    for (int i = 0; i < N; i++) {
        timesteps[i] = (float)t_in[i];
        sigmas[i] = timesteps[i] / (float)c->num_train_timesteps;
    }
    ltx_shift_sigmas(c, N, 0.0, sigmas);
    sigmas[N] = 0.0f;
    return 0;
}

void ltx_linear_quadratic_schedule(int N, double threshold_noise, int linear_steps, float *sigma) {
    if (N < 2) {
        if (N == 1) sigma[0] = 1.0f;
        return;
    }
    int ls = linear_steps > 0 ? linear_steps : N / 2;
    double diff = ls - threshold_noise * N;
    int qs = N - ls;
    double qcoef = diff / (ls * (double)qs * qs);
    double lcoef = threshold_noise / ls - 2 * diff / ((double)qs * qs);
    double cst = qcoef * ((double)ls * ls);
    for (int i = 0; i < N; i++) {
        double x = i < ls ? i * threshold_noise / ls : qcoef * ((double)i * i) + lcoef * i + cst;
        sigma[i] = (float)(1.0 - x);
    }
}

void ltx_linear_quadratic_timesteps(int N, double threshold_noise, int linear_steps, float *timesteps) {
    ltx_linear_quadratic_schedule(N, threshold_noise, linear_steps, timesteps);
    for (int i = 0; i < N; i++) timesteps[i] *= 1000.0f;
}

void ltx_step(const float *sigmas, int i, const float *v, const float *x, size_t n, float *prev) {
    float dt = sigmas[i + 1] - sigmas[i];
    for (size_t k = 0; k < n; k++) prev[k] = x[k] + dt * v[k];
}

void ltx_step_per_token(const float *sigmas, int N, const float *ptt, const float *mo, const float *x, int tokens,
                        int C, float *prev) {
    for (int t = 0; t < tokens; t++) {
        float st = ptt[t] / 1000.0f, lim = st - 1e-6f, next = 0.0f;
        for (int j = 0; j <= N; j++) {
            float cand = sigmas[j] < lim ? sigmas[j] : 0.0f;                 /* lower_mask · sigmas, max */
            if (cand > next) next = cand;
        }
        float dt = st - next;
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)t * C + c;
            prev[k] = x[k] + dt * mo[k];
        }
    }
}

void ltx_per_token_timesteps(float t, const float *mask, int tokens, float *ptt) {
    for (int k = 0; k < tokens; k++) {
        float m = (1.0f - mask[k]) * 1000.0f;
        ptt[k] = t < m ? t : m;
    }
}

void ltx_condition_select(float t, const float *mask, const float *denoised, const float *x, int tokens, int C,
                          float *out) {
    float lhs = t / 1000.0f - 1e-6f;
    for (int k = 0; k < tokens; k++) {
        const float *src = lhs < 1.0f - mask[k] ? denoised : x;
        if (out != src) memmove(out + (size_t)k * C, src + (size_t)k * C, sizeof(float) * (size_t)C);
    }
}

double *ltx_timestep_list(int N, const double *given) {
    double *list = cvx_malloc((size_t)N * sizeof(double));
    if (given) {
        memcpy(list, given, (size_t)N * sizeof(double));
    } else {
        float *t = cvx_alloc_f32((size_t)N);
        ltx_linear_quadratic_timesteps(N, 0.025, 0, t);
        for (int i = 0; i < N; i++) list[i] = t[i];
        free(t);
    }
    return list;
}

float *ltx_first_frame_t_scale(size_t tokens, size_t first) {
    float *s = cvx_alloc_f32(tokens);
    for (size_t k = 0; k < tokens; k++) s[k] = k < first ? 0.0f : 1.0f;
    return s;
}
