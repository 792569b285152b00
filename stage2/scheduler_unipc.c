/* UniPCMultistepScheduler (diffusers 0.33.1) for flow matching: use_flow_sigmas,
 * prediction_type flow_prediction, predict_x0, B(h) bh2 (or bh1), solver_order ≤ 2.
 *
 * Per step i (σ = sigmas[i], α = 1 − σ, λ(σ) = ln α − ln σ, all 0-d float32 tensors upstream):
 *   m_i = x − σ_i·v                                   (convert_model_output, from the input x)
 *   corrector UniC (not on the run's first step): x ← x_{i−1}-based correction using m_i
 *   predictor UniP of order min(solver_order, N − i, lower_order_nums + 1): x → x at σ_{i+1}
 * The element-wise float32 arithmetic follows upstream's expression order and the scalars are
 * rounded as PyTorch rounds them: the golden chains and e2e loops are reproduced bit for bit. */
#include "scheduler_flow.h"

#include <math.h>
#include <string.h>

#include "error.h"

/* ---------------------------------------------------------------- config and schedule */

int flow_unipc_config(flow_scheduler *s, const cvx_config *cfg, int native, double shift_override) {
    const char *pred, *solver_type, *final_type;
    int use_flow, predict_x0, thresholding, karras, expo, beta, dyn;
    int64_t order;
    double shift;
    /* foreign config (kind override): the flow settings Wan uses are the defaults */
    if (cvx_cfg_str_or(cfg, "prediction_type", native ? "epsilon" : "flow_prediction", &pred) ||
        cvx_cfg_bool_or(cfg, "use_flow_sigmas", native ? 0 : 1, &use_flow) ||
        cvx_cfg_bool_or(cfg, "predict_x0", 1, &predict_x0) || cvx_cfg_bool_or(cfg, "thresholding", 0, &thresholding) ||
        cvx_cfg_str_or(cfg, "solver_type", "bh2", &solver_type) || cvx_cfg_int_or(cfg, "solver_order", 2, &order) ||
        cvx_cfg_bool_or(cfg, "lower_order_final", 1, &s->lower_order_final) ||
        cvx_cfg_str_or(cfg, "final_sigmas_type", "zero", &final_type) ||
        cvx_cfg_bool_or(cfg, "use_karras_sigmas", 0, &karras) || cvx_cfg_bool_or(cfg, "use_exponential_sigmas", 0, &expo) ||
        cvx_cfg_bool_or(cfg, "use_beta_sigmas", 0, &beta) || cvx_cfg_bool_or(cfg, "use_dynamic_shifting", 0, &dyn))
        return -1;
    if (cvx_cfg_has(cfg, "flow_shift") || native || !cvx_cfg_has(cfg, "shift")) {
        if (cvx_cfg_num_or(cfg, "flow_shift", 1.0, &shift)) return -1;
    } else if (cvx_cfg_num(cfg, "shift", &shift)) {
        return -1;
    }
    if (strcmp(pred, "flow_prediction") != 0)
        return cvx_error("%s: key 'prediction_type' is \"%s\", expected \"flow_prediction\" (UniPC is implemented for "
                         "flow matching only)", cfg->path, pred);
    if (!use_flow) return cvx_error("%s: key 'use_flow_sigmas' is false, expected true", cfg->path);
    if (!predict_x0) return cvx_error("%s: key 'predict_x0' is false, expected true", cfg->path);
    if (thresholding) return cvx_error("%s: key 'thresholding' is true, expected false", cfg->path);
    if (karras || expo || beta)
        return cvx_error("%s: key '%s' is true, expected false (flow sigmas only)", cfg->path,
                         karras ? "use_karras_sigmas" : expo ? "use_exponential_sigmas" : "use_beta_sigmas");
    if (dyn) return cvx_error("%s: key 'use_dynamic_shifting' is true, expected false", cfg->path);
    if (cvx_cfg_has(cfg, "solver_p")) return cvx_error("%s: key 'solver_p' is not supported (expected null)", cfg->path);
    if (order < 1 || order > FLOW_MAX_ORDER)
        return cvx_error("%s: key 'solver_order' is %lld, expected 1 or 2", cfg->path, (long long)order);
    s->solver_order = (int)order;
    /* upstream maps midpoint, heun and logrho to bh2 */
    if (!strcmp(solver_type, "bh1")) s->bh1 = 1;
    else if (strcmp(solver_type, "bh2") && strcmp(solver_type, "midpoint") && strcmp(solver_type, "heun") &&
             strcmp(solver_type, "logrho"))
        return cvx_error("%s: key 'solver_type' is \"%s\", expected \"bh1\" or \"bh2\"", cfg->path, solver_type);
    if (!strcmp(final_type, "sigma_min")) s->final_sigma_min = 1;
    else if (strcmp(final_type, "zero"))
        return cvx_error("%s: key 'final_sigmas_type' is \"%s\", expected \"zero\" or \"sigma_min\"", cfg->path,
                         final_type);
    if (!s->lower_order_final && s->solver_order > 1 && !s->final_sigma_min)
        return cvx_error("%s: key 'lower_order_final' is false with final_sigmas_type \"zero\": upstream's second-order "
                         "last step divides by λ(0) = ∞ and returns inf; expected true", cfg->path);
    if (cvx_cfg_has(cfg, "disable_corrector")) {
        int64_t dc[FLOW_MAX_DISABLED];
        if (cvx_cfg_int_array(cfg, "disable_corrector", dc, FLOW_MAX_DISABLED, &s->n_disable_corrector)) return -1;
        for (int i = 0; i < s->n_disable_corrector; i++) s->disable_corrector[i] = (int)dc[i];
    }
    if (shift_override > 0) shift = shift_override;
    if (!(shift > 0) || !isfinite(shift))
        return cvx_error("%s: key 'flow_shift' is %g, expected a positive number", cfg->path, shift);
    s->shift = shift;
    return 0;
}

/* σ = shift(1 − linspace(1, 1/T, N+1)) reversed without its last (0) entry, float64 as numpy;
 * timesteps int64(σ·T) (truncation); sigmas f32 with the final sigma appended. */
void flow_unipc_set_timesteps(flow_scheduler *s, int n) {
    const int T = s->num_train_timesteps;
    double *a = cvx_malloc((size_t)(n + 1) * sizeof(double));
    flow_np_linspace(1.0, 1.0 / T, n + 1, a);
    for (int k = 0; k <= n; k++) {
        double sg = 1.0 - a[k];
        a[k] = s->shift * sg / (1.0 + (s->shift - 1.0) * sg);
    }
    for (int i = 0; i < n; i++) {
        double sg = a[n - i];
        s->sigmas_f64[i] = sg;
        s->sigmas[i] = (float)sg;
        s->timesteps_int[i] = (int64_t)(sg * T);
        s->timesteps[i] = (float)s->timesteps_int[i];
    }
    s->sigmas[n] = s->final_sigma_min ? s->sigmas[n - 1] : 0.0f;
    free(a);
}

/* ---------------------------------------------------------------- 0-d float32 scalars */

/* log and expm1 of a 0-d float32 tensor, correctly rounded (through double): glibc's expm1f is
 * 1 ulp off PyTorch's on some of these arguments (golden chains), the correctly rounded value
 * is not. */
static float log_f32(float x) { return (float)log((double)x); }
static float expm1_f32(float x) { return (float)expm1((double)x); }

/* λ(σ) = log(α) − log(σ) with α = 1 − σ (∞ at σ = 0) */
static float lambda_of(float sigma) { return log_f32(1.0f - sigma) - log_f32(sigma); }

/* torch.linalg.solve(R, b) with R = [[1, 1], [r, 1]] in float32. PyTorch hands LAPACK the
 * row-major R, i.e. factors Rᵀ = [[1, r], [1, 1]] (column [1, 1]: no pivoting, l = 1,
 * u₁₁ = 1 − r) and solves with the transpose: ρ1 = (b2 − r·b1)/(1 − r), ρ0 = b1 − ρ1.
 * Bit-exact against the golden chains, where the textbook pivoted LU of R is not. */
static void solve_2x2(float r, float b1, float b2, float *rho0, float *rho1) {
    float u11 = 1.0f - r;
    *rho1 = (b2 - r * b1) / u11;
    *rho0 = b1 - *rho1;
}

/* The coefficients shared by UniP and UniC between σ_s0 (from) and σ_t (to). */
typedef struct {
    float c_x;      /* σ_t / σ_s0 */
    float c_m;      /* α_t · hφ1 */
    float c_b;      /* α_t · B(h) */
    float lambda_s0, h, hh, h_phi_1, B_h;
} unipc_coef;

static unipc_coef coef_between(const flow_scheduler *s, float sigma_s0, float sigma_t) {
    unipc_coef c;
    float alpha_t = 1.0f - sigma_t;
    float lambda_t = lambda_of(sigma_t);
    c.lambda_s0 = lambda_of(sigma_s0);
    c.h = lambda_t - c.lambda_s0;
    c.hh = -c.h;                              /* predict_x0 */
    c.h_phi_1 = expm1_f32(c.hh);
    c.B_h = s->bh1 ? c.hh : expm1_f32(c.hh);
    c.c_x = sigma_t / sigma_s0;
    c.c_m = alpha_t * c.h_phi_1;
    c.c_b = alpha_t * c.B_h;
    return c;
}

/* ---------------------------------------------------------------- UniP and UniC */

/* multistep_uni_p_bh_update: x (at σ_i) → prev (at σ_{i+1}); m0 = m_i, m1 = m_{i−1} (order 2). */
static void uni_p(const flow_scheduler *s, int i, int order, const float *x, const float *m0, const float *m1,
                  size_t n, float *prev) {
    unipc_coef c = coef_between(s, s->sigmas[i], s->sigmas[i + 1]);
    if (order == 2) {
        float rk = (lambda_of(s->sigmas[i - 1]) - c.lambda_s0) / c.h;
        const float rho = 0.5f;   /* upstream's simplified order-2 rhos_p */
        for (size_t j = 0; j < n; j++) {
            float xt = c.c_x * x[j] - c.c_m * m0[j];
            float d1 = (m1[j] - m0[j]) / rk;
            prev[j] = xt - c.c_b * (rho * d1);
        }
    } else {
        float zero = c.c_b * 0.0f;   /* `alpha_t * B_h * 0`: a signed zero, as upstream */
        for (size_t j = 0; j < n; j++) prev[j] = (c.c_x * x[j] - c.c_m * m0[j]) - zero;
    }
}

/* multistep_uni_c_bh_update at step i: x = last_sample (at σ_{i−1}), m_t = m_i, m0 = m_{i−1},
 * m1 = m_{i−2} (order 2) → the corrected sample at σ_i. */
static void uni_c(const flow_scheduler *s, int i, int order, const float *x, const float *m_t, const float *m0,
                  const float *m1, size_t n, float *out) {
    unipc_coef c = coef_between(s, s->sigmas[i - 1], s->sigmas[i]);
    if (order == 2) {
        float rk = (lambda_of(s->sigmas[i - 2]) - c.lambda_s0) / c.h;
        /* b_k = hφ_k·k! / B(h): hφ_1' = hφ1/hh − 1, hφ_2' = hφ_1'/hh − 1/2 */
        float phi = c.h_phi_1 / c.hh - 1.0f;
        float b1 = phi * 1.0f / c.B_h;
        phi = phi / c.hh - 0.5f;
        float b2 = phi * 2.0f / c.B_h;
        float rho0, rho1;
        solve_2x2(rk, b1, b2, &rho0, &rho1);
        for (size_t j = 0; j < n; j++) {
            float xt = c.c_x * x[j] - c.c_m * m0[j];
            float d1 = (m1[j] - m0[j]) / rk;
            float corr = rho0 * d1;
            float d1_t = m_t[j] - m0[j];
            out[j] = xt - c.c_b * (corr + rho1 * d1_t);
        }
    } else {
        const float rho = 0.5f;
        for (size_t j = 0; j < n; j++) {
            float xt = c.c_x * x[j] - c.c_m * m0[j];
            float d1_t = m_t[j] - m0[j];
            out[j] = xt - c.c_b * (0.0f + rho * d1_t);   /* corr_res = 0 (a Python int) */
        }
    }
}

static int corrector_disabled(const flow_scheduler *s, int k) {
    for (int j = 0; j < s->n_disable_corrector; j++)
        if (s->disable_corrector[j] == k) return 1;
    return 0;
}

/* UniPCMultistepScheduler.step at st->step_index. */
void flow_unipc_step(const flow_scheduler *s, flow_state *st, const float *model_output, const float *sample,
                     size_t n, float *prev) {
    const int i = st->step_index, K = s->solver_order;
    const float sigma = s->sigmas[i];
    float *m = st->scratch;                       /* m_i = x − σ·v */
    for (size_t j = 0; j < n; j++) m[j] = sample[j] - sigma * model_output[j];

    int use_corrector = i > 0 && !corrector_disabled(s, i - 1) && st->has_last_sample;
    if (use_corrector) {
        /* element-wise, so in place: last_sample becomes the corrected sample */
        uni_c(s, i, st->this_order, st->last_sample, m, st->model_outputs[K - 1],
              st->this_order == 2 ? st->model_outputs[K - 2] : NULL, n, st->last_sample);
    } else {
        memcpy(st->last_sample, sample, n * sizeof(float));
    }
    st->has_last_sample = 1;

    /* model_outputs: drop the oldest, m_i becomes the newest (pointer rotation) */
    float *oldest = st->model_outputs[0];
    for (int k = 0; k < K - 1; k++) st->model_outputs[k] = st->model_outputs[k + 1];
    st->model_outputs[K - 1] = m;
    st->scratch = oldest;

    int order = K;
    if (s->lower_order_final && s->num_inference_steps - i < order) order = s->num_inference_steps - i;
    if (st->lower_order_nums + 1 < order) order = st->lower_order_nums + 1;
    st->this_order = order;

    uni_p(s, i, order, st->last_sample, m, order == 2 ? st->model_outputs[K - 2] : NULL, n, prev);
    if (st->lower_order_nums < K) st->lower_order_nums++;
    st->x0 = m;
}
