/* The scheduler table and the generic part of every scheduler (scheduler.h). */
#include "stage2/scheduler.h"
#include "stage2/scheduler_ltx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

const cvx_scheduler_type *const cvx_schedulers[] = {&cvx_scheduler_ddim, &cvx_scheduler_dpm, &cvx_scheduler_unipc,
                                                    &cvx_scheduler_euler, NULL};

void cvx_scheduler_names(char *buf, size_t cap, const char *sep) {
    buf[0] = 0;
    for (int i = 0; cvx_schedulers[i]; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? sep : "", cvx_schedulers[i]->name);
}

const cvx_scheduler_type *cvx_scheduler_by_flag(const char *name) {
    for (int i = 0; cvx_schedulers[i]; i++)
        if (!strcmp(name, cvx_schedulers[i]->name)) return cvx_schedulers[i];
    char names[256];
    cvx_scheduler_names(names, sizeof names, ", ");
    cvx_error("--scheduler must be one of %s, got '%s'", names, name);
    return NULL;
}

const cvx_scheduler_type *cvx_scheduler_find(const char *name) {
    /* a family's own schedule (LTX-Video's "ltx", its model info's scheduler): not a --scheduler choice */
    if (!strcmp(name, cvx_scheduler_ltx.name)) return &cvx_scheduler_ltx;
    for (int i = 0; cvx_schedulers[i]; i++)
        if (!strcmp(name, cvx_schedulers[i]->name) || !strcmp(name, cvx_schedulers[i]->class_name))
            return cvx_schedulers[i];
    char list[512] = "";
    for (int i = 0; cvx_schedulers[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s or %s", i ? ", " : "",
                 cvx_schedulers[i]->name, cvx_schedulers[i]->class_name);
    cvx_error("unknown scheduler '%s' (expected %s)", name, list);
    return NULL;
}

static int init_shift(cvx_scheduler *s, const cvx_config *cfg, const cvx_scheduler_type *override, double shift) {
    memset(s, 0, sizeof(*s));
    s->flow_shift = shift;
    snprintf(s->config_path, sizeof s->config_path, "%s", cfg->path);
    const char *cls = NULL;
    const cvx_scheduler_type *own = NULL;
    if (!cvx_cfg_has(cfg, "_class_name") && override) {
        s->type = override;
    } else {
        if (cvx_cfg_str(cfg, "_class_name", &cls)) return -1;
        if (!(own = cvx_scheduler_find(cls))) {
            if (!override) {
                char names[256];
                cvx_scheduler_names(names, sizeof names, "|");
                return cvx_error_prefix("%s: key '_class_name' (or pass --scheduler %s)", cfg->path, names);
            }
            cvx_clear_error();
        }
        s->type = override ? override : own;
    }
    /* a DDPM scheduler on a flow-matching model (or the reverse) has no meaning: refuse */
    if (own && strcmp(own->family, s->type->family) != 0)
        return cvx_error("--scheduler %s: the model's scheduler is %s (%s); %s is not one of its kind", s->type->name,
                         own->name, cls, s->type->name);
    if (shift > 0 && strcmp(s->type->family, "flow") != 0)
        return cvx_error("--flow_shift %g: the %s scheduler has no flow shift (it is for the flow-matching schedulers "
                         "of Wan: unipc, euler)", shift, s->type->name);
    if (s->type->configure(s, cfg) == 0) return 0;
    if (s->sched) s->type->free_sched(s->sched);   /* a refused config leaves nothing allocated */
    s->sched = NULL;
    return -1;
}

int cvx_scheduler_init(cvx_scheduler *s, const cvx_config *cfg, const cvx_scheduler_type *override) {
    return init_shift(s, cfg, override, 0);
}

int cvx_scheduler_load_shift(cvx_scheduler *s, const char *path, const cvx_scheduler_type *override, double flow_shift) {
    cvx_config cfg;
    memset(s, 0, sizeof(*s));
    if (cvx_config_load(&cfg, path)) return -1;
    int rc = init_shift(s, &cfg, override, flow_shift);
    cvx_config_free(&cfg);
    return rc;
}

int cvx_scheduler_load(cvx_scheduler *s, const char *path, const cvx_scheduler_type *override) {
    return cvx_scheduler_load_shift(s, path, override, 0);
}

void cvx_scheduler_free(cvx_scheduler *s) {
    if (s->state && s->type) s->type->free_state(s->state);
    if (s->sched && s->type) s->type->free_sched(s->sched);
    free(s->timesteps);
    memset(s, 0, sizeof(*s));
}

int cvx_scheduler_set_timesteps(cvx_scheduler *s, int n) {
    free(s->timesteps);
    s->timesteps = NULL;
    s->num_inference_steps = 0;
    s->begin = 0;
    if (s->sigmas && n != s->n_sigmas)
        return cvx_error("%d inference steps with %d explicit sigmas: the counts must agree", n, s->n_sigmas);
    return s->type->set_timesteps(s, n);
}

void cvx_scheduler_set_sigmas(cvx_scheduler *s, const double *sigmas, int n_sigmas) {
    s->sigmas = sigmas, s->n_sigmas = sigmas ? n_sigmas : 0;
}

int cvx_strength_t_start(int n, double strength, int *t_start) {
    if (!(strength > 0.0 && strength <= 1.0))
        return cvx_error("--strength %g: must be in (0, 1] (the share of the denoising steps that run)", strength);
    int init_timestep = (int)(n * strength) < n ? (int)(n * strength) : n;   /* min(int(n·strength), n) */
    if (init_timestep < 1)
        return cvx_error("--strength %g with --num_inference_steps %d runs no step (int(%d × %g) = 0): raise either",
                         strength, n, n, strength);
    *t_start = n - init_timestep > 0 ? n - init_timestep : 0;
    return 0;
}
