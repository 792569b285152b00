/* stage2_steps.json (steps_record.h): written after every step, read by tools/cvx-compare. */
#include "pipeline/steps_record.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "tensor_stats.h"

struct cvx_steps_record {
    char path[4096];
    json_object *root, *steps;   /* root owns steps */
    int resume, has_fp, started, failed;
};

static json_object *run_object(const cvx_fingerprint *fp) {
    json_object *run = json_object_new_object();
    for (int i = 0; fp && i < fp->n; i++)
        json_object_object_add(run, fp->key[i], json_object_new_string(fp->value[i]));
    return run;
}

int cvx_steps_record_path(const char *latents_path, char *out, size_t n) {
    const char *slash = strrchr(latents_path, '/'), *base = slash ? slash + 1 : latents_path;
    const size_t dir = (size_t)(base - latents_path), len = strlen(base), pre = strlen("stage2_latents"),
                 ext = strlen(".safetensors");
    const int numbered = len >= pre + ext && !strncmp(base, "stage2_latents", pre) &&
                         !strcmp(base + len - ext, ".safetensors");
    const int k = snprintf(out, n, "%.*sstage2_steps%.*s.json", (int)dir, latents_path,
                           numbered ? (int)(len - pre - ext) : 0, numbered ? base + pre : "");
    return k < 0 || (size_t)k >= n ? cvx_error("%s: path too long", latents_path) : 0;
}

cvx_steps_record *cvx_steps_record_new(const char *path, int resume, const cvx_fingerprint *fp) {
    cvx_steps_record *r = cvx_calloc(1, sizeof *r);
    if (snprintf(r->path, sizeof r->path, "%s", path) >= (int)sizeof r->path) {
        free(r);
        return cvx_error("%s: path too long", path), NULL;
    }
    r->resume = resume, r->has_fp = fp != NULL;
    r->root = json_object_new_object();
    json_object_object_add(r->root, "format", json_object_new_string(CVX_STEPS_FORMAT));
    json_object_object_add(r->root, "n_steps", json_object_new_int(0));
    json_object_object_add(r->root, "run", run_object(fp));
    r->steps = json_object_new_array();
    json_object_object_add(r->root, "steps", r->steps);
    return r;
}

/* A resumed run, at its first step (the checkpoint was accepted): the earlier record's steps
 * before this one, when it is a record of these settings. */
static void continue_record(cvx_steps_record *r, int first_step) {
    if (!cvx_is_file(r->path)) return;
    cvx_config c;
    json_object *old_steps, *old_run, *run = NULL;
    if (cvx_config_load(&c, r->path) || !json_object_object_get_ex(c.root, "steps", &old_steps) ||
        !json_object_is_type(old_steps, json_type_array)) {
        cvx_warn("%s: not a steps record; it is replaced by this run's steps", r->path);
        cvx_config_free(&c);
        return;
    }
    json_object_object_get_ex(r->root, "run", &run);
    if (r->has_fp && (!json_object_object_get_ex(c.root, "run", &old_run) || !json_object_equal(old_run, run))) {
        cvx_warn("%s belongs to a run of other settings; the resumed run's record starts at its checkpoint", r->path);
    } else {
        for (size_t i = 0; i < json_object_array_length(old_steps); i++) {
            json_object *e = json_object_array_get_idx(old_steps, i), *v;
            if (!json_object_object_get_ex(e, "step", &v) || json_object_get_int(v) >= first_step) break;
            json_object_array_add(r->steps, json_object_get(e));
        }
    }
    cvx_config_free(&c);
    if ((int)json_object_array_length(r->steps) < first_step)
        cvx_warn("%s: steps %zu to %d are not in the record (the run that made the checkpoint left none)", r->path,
                 json_object_array_length(r->steps), first_step - 1);
}

static json_object *num(double v) { return isfinite(v) ? json_object_new_double(v) : NULL; }

static int write_record(cvx_steps_record *r) {
    const char *s = json_object_to_json_string_ext(r->root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE);
    char *buf = cvx_malloc(strlen(s) + 2);
    size_t n = (size_t)sprintf(buf, "%s\n", s);
    int rc = cvx_write_file_atomic(r->path, buf, n);
    free(buf);
    return rc;
}

void cvx_steps_record_on_step(void *user, const cvx_step_info *in) {
    cvx_steps_record *r = user;
    if (r->failed) return;
    if (!r->started) {
        r->started = 1;
        if (r->resume) continue_record(r, in->step);
    }
    cvx_stats st;
    cvx_stats_f32(in->latents, in->numel, &st);
    json_object *e = json_object_new_object();
    json_object_object_add(e, "step", json_object_new_int(in->step));
    json_object_object_add(e, "timestep", num(in->timestep));
    json_object_object_add(e, "guidance", num(in->guidance));
    json_object_object_add(e, "cache", in->cache < 0 ? NULL : json_object_new_string(in->cache ? "computed" : "skipped"));
    json_object_object_add(e, "latent_norm", num(st.l2));
    json_object_object_add(e, "latent_mean", num(st.mean));
    json_object_object_add(e, "latent_std", num(st.std));
    json_object_object_add(e, "latent_min", num(st.min));
    json_object_object_add(e, "latent_max", num(st.max));
    json_object_object_add(e, "seconds", num(in->seconds));
    json_object_array_add(r->steps, e);
    json_object_object_add(r->root, "n_steps", json_object_new_int(in->n_steps));
    if (write_record(r)) {
        r->failed = 1;
        cvx_warn("the per-step record is not written any more: %s", cvx_last_error());
    }
}

int cvx_steps_record_free(cvx_steps_record *r) {
    if (!r) return 0;
    int failed = r->failed;
    json_object_put(r->root);
    free(r);
    return failed ? cvx_error("the per-step record could not be written") : 0;
}

/* ---- reading ---- */
static int get_num(json_object *e, const char *key, double *out) {
    json_object *v;
    *out = NAN;
    if (!json_object_object_get_ex(e, key, &v) || !v) return 0;   /* absent / null: NaN */
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int)) return -1;
    *out = json_object_get_double(v);
    return 0;
}

int cvx_steps_read(const char *path, cvx_steps_file *f) {
    memset(f, 0, sizeof *f);
    cvx_config c;
    if (cvx_config_load(&c, path)) return -1;
    const char *fmt;
    int64_t n_steps;
    json_object *steps, *run;
    if (cvx_cfg_str(&c, "format", &fmt) || cvx_cfg_int(&c, "n_steps", &n_steps)) goto bad;
    if (strcmp(fmt, CVX_STEPS_FORMAT) != 0) {
        cvx_error("%s: key 'format' is '%s', expected '%s'", path, fmt, CVX_STEPS_FORMAT);
        goto bad;
    }
    if (!json_object_object_get_ex(c.root, "steps", &steps) || !json_object_is_type(steps, json_type_array)) {
        cvx_error("%s: key 'steps' must be an array", path);
        goto bad;
    }
    f->n_steps = (int)n_steps;
    f->n = (int)json_object_array_length(steps);
    f->e = cvx_calloc((size_t)f->n + 1, sizeof *f->e);
    for (int i = 0; i < f->n; i++) {
        json_object *e = json_object_array_get_idx(steps, i), *v;
        cvx_step_entry *o = &f->e[i];
        const char *cache = NULL;
        if (!json_object_is_type(e, json_type_object) || !json_object_object_get_ex(e, "step", &v) ||
            !json_object_is_type(v, json_type_int) || get_num(e, "timestep", &o->timestep) ||
            get_num(e, "guidance", &o->guidance) || get_num(e, "latent_norm", &o->norm) ||
            get_num(e, "latent_mean", &o->mean) || get_num(e, "latent_std", &o->std) ||
            get_num(e, "latent_min", &o->min) || get_num(e, "latent_max", &o->max) ||
            get_num(e, "seconds", &o->seconds)) {
            cvx_error("%s: steps[%d] is not a step entry (step, timestep, guidance, latent_norm, ... numbers)", path, i);
            goto bad;
        }
        o->step = json_object_get_int(v);
        if (o->step != (i ? f->e[i - 1].step + 1 : o->step) || o->step < 0) {
            cvx_error("%s: steps[%d] has step %d, expected %d (steps in order)", path, i, o->step,
                      i ? f->e[i - 1].step + 1 : 0);
            goto bad;
        }
        o->cache = json_object_object_get_ex(e, "cache", &v) && v && (cache = json_object_get_string(v))
                       ? strcmp(cache, "skipped") != 0 : -1;
    }
    if (json_object_object_get_ex(c.root, "run", &run) && json_object_is_type(run, json_type_object)) {
        int n = json_object_object_length(run), k = 0;
        f->run_key = cvx_calloc((size_t)n + 1, sizeof *f->run_key);
        f->run_value = cvx_calloc((size_t)n + 1, sizeof *f->run_value);
        json_object_object_foreach(run, key, val) {
            snprintf(f->run_key[k], sizeof f->run_key[k], "%s", key);
            snprintf(f->run_value[k], sizeof f->run_value[k], "%s", val ? json_object_get_string(val) : "null");
            k++;
        }
        f->n_run = k;
    }
    cvx_config_free(&c);
    return 0;
bad:
    cvx_config_free(&c);
    cvx_steps_file_free(f);
    return -1;
}

void cvx_steps_file_free(cvx_steps_file *f) {
    free(f->e), free(f->run_key), free(f->run_value);
    memset(f, 0, sizeof *f);
}

const char *cvx_steps_run(const cvx_steps_file *f, const char *key) {
    for (int i = 0; i < f->n_run; i++)
        if (!strcmp(f->run_key[i], key)) return f->run_value[i];
    return NULL;
}
