/* Classifier-free guidance (guidance.h). */
#include "guidance.h"

#include <math.h>
#include <string.h>

#include "config.h"
#include "error.h"

void cvx_cfg_combine(const float *uncond, const float *cond, double g, size_t n, float *out) {
    const float gf = (float)g;
    for (size_t i = 0; i < n; i++) out[i] = uncond[i] + gf * (cond[i] - uncond[i]);
}

int cvx_cfg_guider_load(cvx_cfg_guider *g, const char *path) {
    cvx_config j;
    const char *s;
    int rc = -1;
    if (cvx_config_load(&j, path)) return -1;
    memset(g, 0, sizeof *g);
    if (cvx_cfg_str_or(&j, "_class_name", "ClassifierFreeGuidance", &s)) goto out;
    if (strcmp(s, "ClassifierFreeGuidance")) {
        cvx_error("%s: '_class_name' is \"%s\", only \"ClassifierFreeGuidance\" is supported", path, s);
        goto out;
    }
    if (cvx_cfg_num_or(&j, "guidance_scale", 7.5, &g->guidance_scale) ||
        cvx_cfg_num_or(&j, "guidance_rescale", 0.0, &g->guidance_rescale) ||
        cvx_cfg_num_or(&j, "start", 0.0, &g->start) || cvx_cfg_num_or(&j, "stop", 1.0, &g->stop) ||
        cvx_cfg_bool_or(&j, "use_original_formulation", 0, &g->use_original_formulation) ||
        cvx_cfg_bool_or(&j, "enabled", 1, &g->enabled))
        goto out;
    if (!isfinite(g->guidance_scale)) {
        cvx_error("%s: key 'guidance_scale' is %g, expected a finite number", path, g->guidance_scale);
        goto out;
    }
    if (g->guidance_rescale > 0.0) {
        cvx_error("%s: key 'guidance_rescale' is %g: not supported (expected 0)", path, g->guidance_rescale);
        goto out;
    }
    rc = 0;
out:
    cvx_config_free(&j);
    return rc;
}

int cvx_cfg_guider_enabled(const cvx_cfg_guider *g, int i, int n) {
    if (!g->enabled) return 0;
    if (!((int)(g->start * n) <= i && i < (int)(g->stop * n))) return 0;
    double target = g->use_original_formulation ? 0.0 : 1.0;   /* math.isclose: rel_tol 1e-9, abs_tol 0 */
    return !(fabs(g->guidance_scale - target) <= 1e-9 * fmax(fabs(g->guidance_scale), fabs(target)));
}

void cvx_cfg_guider_apply(const cvx_cfg_guider *g, int i, int n, const float *cond, const float *uncond, size_t count,
                          float *out) {
    if (!cvx_cfg_guider_enabled(g, i, n)) {
        if (out != cond) memmove(out, cond, sizeof(float) * count);
        return;
    }
    const float gf = (float)g->guidance_scale;
    for (size_t k = 0; k < count; k++) {
        const float shift = cond[k] - uncond[k];
        out[k] = (g->use_original_formulation ? cond[k] : uncond[k]) + gf * shift;
    }
}

/* unbiased standard deviation (torch.std's default correction 1), two passes in double */
static double std_of(const float *x, size_t n) {
    double mean = 0, ss = 0;
    for (size_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) ss += ((double)x[i] - mean) * ((double)x[i] - mean);
    return n > 1 ? sqrt(ss / (double)(n - 1)) : 0.0;
}

void cvx_cfg_rescale(const float *cond, double phi, size_t n, float *out) {
    if (!(phi > 0)) return;
    const double so = std_of(out, n);
    if (!(so > 0)) return;
    const float ratio = (float)(std_of(cond, n) / so), p = (float)phi, q = (float)(1.0 - phi);
    for (size_t i = 0; i < n; i++) out[i] = p * (out[i] * ratio) + q * out[i];
}
