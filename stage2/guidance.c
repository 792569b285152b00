/* Classifier-free guidance (guidance.h). */
#include "guidance.h"

#include <math.h>
#include <string.h>

#include <json-c/json.h>

#include "config.h"
#include "error.h"

void cvx_cfg_combine(const float *uncond, const float *cond, double g, size_t n, float *out) {
    const float gf = (float)g;
    for (size_t i = 0; i < n; i++) out[i] = uncond[i] + gf * (cond[i] - uncond[i]);
}

/* math.isclose(a, b) with the default rel_tol 1e-9, abs_tol 0 */
static int isclose(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)); }

int cvx_guider_active(const cvx_guider *g) { return g->original ? !isclose(g->scale, 0.0) : g->scale > 1.0; }

void cvx_guider_apply(const cvx_guider *g, double scale, const float *uncond, const float *cond, size_t n, float *out) {
    if (uncond) {
        const float gf = (float)scale;
        for (size_t k = 0; k < n; k++) {
            const float shift = cond[k] - uncond[k];
            out[k] = (g->original ? cond[k] : uncond[k]) + gf * shift;
        }
        cvx_cfg_rescale(cond, g->rescale, n, out);
        return;
    }
    if (out != cond) memmove(out, cond, sizeof(float) * n);
    if (g->rescale_unguided) cvx_cfg_rescale(out, g->rescale, n, out);
}

/* the keys ClassifierFreeGuidance takes; any other with a non-default value is refused */
static const char *const guider_keys[] = {"_class_name", "_diffusers_version", "guidance_scale", "guidance_rescale",
                                          "use_original_formulation", "start", "stop", "enabled", NULL};

int cvx_guider_load(const char *path, cvx_guider *g, double window[2]) {
    cvx_config j;
    const char *s;
    int rc = -1, enabled;
    if (cvx_config_load(&j, path)) return -1;
    memset(g, 0, sizeof *g);
    if (cvx_cfg_str_or(&j, "_class_name", "ClassifierFreeGuidance", &s)) goto out;
    if (strcmp(s, "ClassifierFreeGuidance")) {
        cvx_error("%s: '_class_name' is \"%s\", only \"ClassifierFreeGuidance\" is supported", path, s);
        goto out;
    }
    json_object_object_foreach(j.root, key, val) {
        int known = 0;
        for (int k = 0; guider_keys[k]; k++) known |= !strcmp(key, guider_keys[k]);
        if (!known && val && !(json_object_is_type(val, json_type_null))) {
            cvx_error("%s: key '%s' (%s) is not a ClassifierFreeGuidance setting this implementation knows", path, key,
                      json_object_to_json_string(val));
            goto out;
        }
    }
    if (cvx_cfg_num_or(&j, "guidance_scale", 7.5, &g->scale) ||
        cvx_cfg_num_or(&j, "guidance_rescale", 0.0, &g->rescale) ||
        cvx_cfg_num_or(&j, "start", 0.0, &window[0]) || cvx_cfg_num_or(&j, "stop", 1.0, &window[1]) ||
        cvx_cfg_bool_or(&j, "use_original_formulation", 0, &g->original) ||
        cvx_cfg_bool_or(&j, "enabled", 1, &enabled))
        goto out;
    if (!isfinite(g->scale)) {
        cvx_error("%s: key 'guidance_scale' is %g, expected a finite number", path, g->scale);
        goto out;
    }
    if (!(g->rescale >= 0.0 && isfinite(g->rescale))) {
        cvx_error("%s: key 'guidance_rescale' is %g, expected a finite number >= 0", path, g->rescale);
        goto out;
    }
    if (!(window[0] >= 0.0 && window[0] < 1.0)) {   /* BaseGuidance.__init__'s checks */
        cvx_error("%s: key 'start' is %g, expected 0 <= start < 1", path, window[0]);
        goto out;
    }
    if (!(window[1] >= window[0] && window[1] <= 1.0)) {
        cvx_error("%s: key 'stop' is %g, expected start (%g) <= stop <= 1", path, window[1], window[0]);
        goto out;
    }
    if (!g->original && g->scale < 1.0 && !isclose(g->scale, 1.0)) {
        cvx_error("%s: key 'guidance_scale' is %g: a scale below 1 (CFG towards the negative prompt) is not "
                  "supported (1 disables guidance)", path, g->scale);
        goto out;
    }
    if (!g->original && isclose(g->scale, 1.0)) g->scale = 1.0;   /* isclose(g, 1): no CFG, as upstream */
    if (!enabled) g->scale = g->original ? 0.0 : 1.0;
    g->rescale_unguided = 1;
    rc = 0;
out:
    cvx_config_free(&j);
    return rc;
}

int cvx_guider_window_has(const double window[2], int i, int n) {
    return (int)(window[0] * n) <= i && i < (int)(window[1] * n);
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
    const float ratio = (float)std_of(cond, n) / (float)so, p = (float)phi, q = (float)(1.0 - phi);
    for (size_t i = 0; i < n; i++) out[i] = p * (out[i] * ratio) + q * out[i];
}
