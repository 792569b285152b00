/* The per-step plan (plan.h). */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

void cvx_plan_init(cvx_sample_plan *pl, int n_steps, const cvx_guider *g, cvx_expert_provider *experts) {
    memset(pl, 0, sizeof *pl);
    CVX_CHECK(n_steps >= 0);
    pl->n_steps = n_steps;
    pl->steps = cvx_calloc((size_t)n_steps + 1, sizeof *pl->steps);
    for (int i = 0; i < n_steps; i++) pl->steps[i].guide = *g;
    pl->teacache_first = 1, pl->teacache_last = 1;
    pl->experts = experts;
}

void cvx_plan_free(cvx_sample_plan *pl) {
    free(pl->steps);
    memset(pl, 0, sizeof *pl);
}

void cvx_plan_switch_below(cvx_sample_plan *pl, const double *timesteps, double boundary_t, int expert,
                           const cvx_guider *g) {
    int first = 1;
    for (int i = 0; i < pl->n_steps; i++) {
        if (timesteps[i] >= boundary_t) continue;   /* upstream: t >= boundary_timestep runs `transformer` */
        pl->steps[i].expert = expert;
        pl->steps[i].guide = *g;
        pl->steps[i].cache_reset = first;
        first = 0;
    }
}

int cvx_plan_uses_cfg(const cvx_sample_plan *pl) {
    for (int i = 0; i < pl->n_steps; i++)
        if (cvx_guider_active(&pl->steps[i].guide)) return 1;
    return 0;
}

void cvx_plan_describe(const cvx_sample_plan *pl, char *buf, size_t n) {
    int multi = pl->experts && pl->experts->n > 1, resets = 0;
    for (int i = 0; i < pl->n_steps; i++) resets += pl->steps[i].cache_reset;
    buf[0] = 0;
    if (!multi && !resets) return;
    size_t len = (size_t)snprintf(buf, n, "experts");
    for (int i = 0; i < pl->n_steps && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%d", i ? "," : " ", pl->steps[i].expert);
    if (len < n) len += (size_t)snprintf(buf + len, n - len, "; resets");
    for (int i = 0, k = 0; i < pl->n_steps && len < n; i++)
        if (pl->steps[i].cache_reset) len += (size_t)snprintf(buf + len, n - len, "%s%d", k++ ? "," : " ", i);
}

static int single_acquire(cvx_expert_provider *p, int i, cvx_denoiser **out) {
    CVX_CHECK(i == 0);
    *out = p->single;
    return 0;
}
static void single_release(cvx_expert_provider *p, int i) { (void)p, (void)i; }

void cvx_single_expert(cvx_expert_provider *p, cvx_denoiser *d) {
    *p = (cvx_expert_provider){.n = 1, .acquire = single_acquire, .release = single_release, .single = d};
}

void cvx_plan_guider_window(cvx_sample_plan *pl, const cvx_guider *guider, const double window[2], double scale,
                            double rescale) {
    cvx_guider g = *guider, off = *guider;
    g.scale = scale;
    if (!g.original && fabs(g.scale - 1.0) <= 1e-9 * fmax(fabs(g.scale), 1.0)) g.scale = 1.0;   /* isclose */
    off.scale = g.original ? 0.0 : 1.0;
    if (rescale > 0) g.rescale = off.rescale = rescale;
    for (int i = 0; i < pl->n_steps; i++) pl->steps[i].guide = cvx_guider_window_has(window, i, pl->n_steps) ? g : off;
}
