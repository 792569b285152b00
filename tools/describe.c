/* cvx-inspect's description of a path (describe.h). */
#include "tools/describe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dtype.h"
#include "error.h"
#include "fileio.h"
#include "gguf.h"
#include "image.h"
#include "safetensors.h"
#include "tensor_stats.h"
#include "pipeline/cvx.h"
#include "pipeline/steps_record.h"
#include "tools/runfile.h"
#include "tools/weights_id.h"

static json_object *jnum(double v) { return isfinite(v) ? json_object_new_double(v) : NULL; }
static json_object *jstr(const char *s) { return s ? json_object_new_string(s) : NULL; }
#define ADD(o, k, v) json_object_object_add((o), (k), (v))

static json_object *shape_json(const cvx_tensor *t) {
    json_object *a = json_object_new_array();
    for (int d = 0; d < t->ndim; d++) json_object_array_add(a, json_object_new_int64(t->shape[d]));
    return a;
}

static void add_stats(json_object *o, const cvx_stats *s) {
    ADD(o, "min", jnum(s->min)), ADD(o, "max", jnum(s->max)), ADD(o, "mean", jnum(s->mean));
    ADD(o, "std", jnum(s->std)), ADD(o, "nan", json_object_new_int64((int64_t)s->nan));
    ADD(o, "inf", json_object_new_int64((int64_t)s->inf));
}

/* One tensor: name, dtype, shape, and with stats its statistics (float-like dtypes), an integer
 * scalar's value, a byte tensor's hash. */
static json_object *tensor_json(const cvx_tensor *t, int stats, const char *dtype_info) {
    json_object *o = json_object_new_object();
    ADD(o, "name", jstr(t->name)), ADD(o, "dtype", jstr(cvx_dtype_name(t->dtype)));
    if (dtype_info) ADD(o, "dtype_info", jstr(dtype_info));
    ADD(o, "shape", shape_json(t)), ADD(o, "numel", json_object_new_int64(t->numel));
    if (stats && cvx_dtype_to_f32_ok(t->dtype)) {
        float *x = cvx_malloc((size_t)t->numel * sizeof(float) + 1);
        cvx_tensor_to_f32(t, x);
        cvx_stats s;
        cvx_stats_f32(x, (size_t)t->numel, &s);
        free(x);
        add_stats(o, &s);
    } else if (t->dtype == CVX_I64 && t->numel == 1) {
        int64_t v;
        memcpy(&v, t->data, sizeof v);
        ADD(o, "value", json_object_new_int64(v));
    } else if (stats) {
        char h[17];
        snprintf(h, sizeof h, "%016llx", (unsigned long long)cvx_xxh64(t->data, t->nbytes, 0));
        ADD(o, "xxh64", jstr(h));
    }
    return o;
}

static json_object *metadata_json(const cvx_safetensors *st) {
    json_object *m = json_object_new_object();
    for (int i = 0; i < cvx_st_metadata_count(st); i++) {
        const char *k, *v;
        cvx_st_metadata_at(st, i, &k, &v);
        ADD(m, k, jstr(v));
    }
    return m;
}

/* The file's xxh64 and whether the generation_config.json beside it records it. */
static void add_fingerprint(json_object *o, const char *path) {
    char hex[17], cfg[4200], key[300], dir[4096], rec[64];
    if (cvx_file_xxh64(path, hex)) return cvx_clear_error();
    ADD(o, "xxh64", jstr(hex));
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    const char *dot = strstr(base, ".safetensors");
    if (!dot || cvx_path_join(cfg, sizeof cfg, dir, "generation_config.json") || !cvx_is_file(cfg)) return;
    snprintf(key, sizeof key, "%.*s_xxh64", (int)(dot - base), base);
    if (cvx_genconfig_get_str(cfg, key, rec, sizeof rec) || !rec[0]) return cvx_clear_error();
    ADD(o, "generation_config_records", jstr(rec));
    ADD(o, "belongs_to_generation_config", json_object_new_boolean(!strcmp(rec, hex)));
}

static json_object *describe_stage_file(const rf_file *f) {
    json_object *o = json_object_new_object();
    const cvx_safetensors *st = f->st;
    if (f->family[0]) ADD(o, "family", jstr(f->family)), ADD(o, "family_from", jstr(f->family_from));
    if (f->mode[0]) ADD(o, "mode", jstr(f->mode));
    if (f->kind == RF_CHECKPOINT) {
        ADD(o, "steps_done", json_object_new_int(f->step)), ADD(o, "n_steps", json_object_new_int(f->n_steps));
        ADD(o, "loop_layout", jstr(f->frames_major ? "[B, F, C, H, W]" : "[B, C, F, H, W]"));
        ADD(o, "seal", jstr(cvx_st_check_seal(st, "content_xxh64") ? cvx_last_error() : "ok"));
        cvx_clear_error();
        json_object *fp = json_object_new_object();
        for (int i = 0; i < cvx_st_metadata_count(st); i++) {
            const char *k, *v;
            cvx_st_metadata_at(st, i, &k, &v);
            if (!strncmp(k, "run.", 4)) ADD(fp, k + 4, jstr(v));
        }
        ADD(o, "run", fp);
    } else if (f->n_steps) {
        ADD(o, "n_steps", json_object_new_int(f->n_steps));
    }
    if (f->staged_tpu) ADD(o, "producer", jstr("the staged TPU pipeline (dtype_info, no model_family)"));
    add_fingerprint(o, f->path);
    ADD(o, "metadata", metadata_json(st));
    json_object *ts = json_object_new_array();
    for (int i = 0; i < cvx_st_count(st); i++) {
        const cvx_tensor *t = cvx_st_tensor(st, i);
        char di[64];
        json_object_array_add(ts, tensor_json(t, 1, rf_dtype_info(f, t->name, di, sizeof di)));
    }
    ADD(o, "tensors", ts);
    return o;
}

/* Model weights (any file or directory cvx_weights_open reads). */
static json_object *describe_weights(const char *path, int stats) {
    cvx_weights *w = cvx_weights_open(path);
    if (!w) return NULL;
    json_object *o = json_object_new_object();
    char buf[512];
    ADD(o, "format", jstr(cvx_weights_describe(w, buf, sizeof buf)));
    weights_identity id;
    weights_identify(w, &id);
    ADD(o, "loads_as", jstr(id.what));
    if (id.variant[0]) ADD(o, "variant", jstr(id.variant));
    int64_t params = 0;
    json_object *ts = json_object_new_array(), *dts = json_object_new_object();
    for (int i = 0; i < cvx_weights_count(w); i++) {
        const cvx_tensor *t = cvx_weights_at(w, i);
        params += t->numel;
        json_object *c;
        const char *dn = cvx_dtype_name(t->dtype);
        if (json_object_object_get_ex(dts, dn, &c)) json_object_set_int(c, json_object_get_int(c) + 1);
        else ADD(dts, dn, json_object_new_int(1));
        json_object_array_add(ts, tensor_json(t, stats, NULL));
    }
    ADD(o, "parameters", json_object_new_int64(params));
    ADD(o, "dtypes", dts);
    const cvx_gguf *g = cvx_weights_gguf(w);
    if (g) {
        const char *a = cvx_gguf_get_str(g, "general.architecture");
        cvx_clear_error();
        if (a) ADD(o, "gguf_architecture", jstr(a));
    }
    ADD(o, "tensors", ts);
    cvx_weights_close(w);
    return o;
}

static json_object *describe_model_dir(const char *path, int stats) {
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = path, .threads = 1});
    if (!m) return NULL;
    const cvx_model_info *i = cvx_model_get_info(m);
    json_object *o = json_object_new_object();
    ADD(o, "family", jstr(i->family));
    ADD(o, "pipeline_class", jstr(i->pipeline_class));
    char buf[128];
    snprintf(buf, sizeof buf, "%d frames of %dx%d at %d fps", i->frames, i->width, i->height, i->fps);
    ADD(o, "default_video", jstr(buf));
    snprintf(buf, sizeof buf, "[%d, %d]", i->text_len, i->text_dim);
    ADD(o, "text_embeddings", jstr(buf));
    ADD(o, "latent_channels", json_object_new_int(i->latent_channels));
    ADD(o, "scheduler", jstr(i->scheduler));
    ADD(o, "guidance_scale", jnum(i->guidance_scale));
    json_object *comps = json_object_new_object();
    static const char *const names[] = {"transformer", "text_encoder", "vae", "image_encoder", NULL};
    for (int k = 0; names[k]; k++) {
        char sub[4200];
        if (cvx_path_join(sub, sizeof sub, i->dir, names[k]) || !cvx_is_dir(sub)) continue;
        json_object *c = describe_weights(sub, stats);
        if (!c) {
            c = json_object_new_object();
            ADD(c, "error", jstr(cvx_last_error()));
            cvx_clear_error();
        }
        ADD(comps, names[k], c);
    }
    ADD(o, "components", comps);
    cvx_model_close(m);
    return o;
}

static json_object *describe_genconfig(const char *path) {
    cvx_config c;
    if (cvx_config_load(&c, path)) return NULL;
    json_object *o = json_object_new_object(), *hashes = json_object_new_array();
    char dir[4096], fam[32];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    const char *model;
    if (!cvx_cfg_str(&c, "model_id", &model) && !rf_model_family(model, fam, sizeof fam) && fam[0])
        ADD(o, "family", jstr(fam)), ADD(o, "family_from", jstr("the model of its model_id"));
    cvx_clear_error();
    json_object_object_foreach(c.root, key, val) {
        size_t n = strlen(key);
        if (n < 7 || strcmp(key + n - 6, "_xxh64")) continue;
        char file[300], p[4500], hex[17];
        snprintf(file, sizeof file, "%.*s.safetensors", (int)(n - 6), key);
        json_object *h = json_object_new_object();
        ADD(h, "file", jstr(file)), ADD(h, "recorded", val ? jstr(json_object_get_string(val)) : NULL);
        if (!cvx_path_join(p, sizeof p, dir, file) && cvx_is_file(p) && !cvx_file_xxh64(p, hex)) {
            ADD(h, "actual", jstr(hex));
            ADD(h, "match", json_object_new_boolean(val && !strcmp(json_object_get_string(val), hex)));
        }
        cvx_clear_error();
        json_object_array_add(hashes, h);
    }
    ADD(o, "hashes", hashes);
    ADD(o, "config", json_object_get(c.root));
    cvx_config_free(&c);
    return o;
}

static json_object *describe_steps(const char *path) {
    cvx_steps_file s;
    if (cvx_steps_read(path, &s)) return NULL;
    json_object *o = json_object_new_object(), *run = json_object_new_object(), *a = json_object_new_array();
    ADD(o, "n_steps", json_object_new_int(s.n_steps)), ADD(o, "steps_recorded", json_object_new_int(s.n));
    for (int i = 0; i < s.n_run; i++) ADD(run, s.run_key[i], jstr(s.run_value[i]));
    ADD(o, "run", run);
    for (int i = 0; i < s.n; i++) {
        const cvx_step_entry *e = &s.e[i];
        json_object *j = json_object_new_object();
        ADD(j, "step", json_object_new_int(e->step)), ADD(j, "timestep", jnum(e->timestep));
        ADD(j, "guidance", jnum(e->guidance));
        ADD(j, "cache", e->cache < 0 ? NULL : jstr(e->cache ? "computed" : "skipped"));
        ADD(j, "latent_norm", jnum(e->norm)), ADD(j, "latent_std", jnum(e->std)), ADD(j, "seconds", jnum(e->seconds));
        json_object_array_add(a, j);
    }
    ADD(o, "steps", a);
    cvx_steps_file_free(&s);
    return o;
}

static json_object *describe_video(const char *path) {
    cvx_rgb_frames v;
    if (cvx_video_load(path, 0, &v)) return NULL;
    json_object *o = json_object_new_object(), *fr = json_object_new_array();
    ADD(o, "frames", json_object_new_int(v.frames));
    ADD(o, "width", json_object_new_int(v.width)), ADD(o, "height", json_object_new_int(v.height));
    const size_t n = (size_t)v.width * v.height * 3;
    float *x = cvx_malloc(n * sizeof(float));
    for (int t = 0; t < v.frames; t++) {
        const uint8_t *p = cvx_frame_rgb(&v, t);
        for (size_t k = 0; k < n; k++) x[k] = p[k];
        cvx_stats s;
        cvx_stats_f32(x, n, &s);
        json_object *j = json_object_new_object();
        ADD(j, "frame", json_object_new_int(t)), ADD(j, "mean", jnum(s.mean)), ADD(j, "std", jnum(s.std));
        ADD(j, "min", jnum(s.min)), ADD(j, "max", jnum(s.max));
        json_object_array_add(fr, j);
    }
    free(x);
    cvx_rgb_frames_free(&v);
    ADD(o, "frame_stats", fr);
    return o;
}

json_object *describe_path(const char *path, const describe_opts *opt) {
    rf_file f;
    if (rf_open(path, &f)) return NULL;
    json_object *o = NULL;
    switch (f.kind) {
    case RF_EMBEDDINGS: case RF_CONDITIONING: case RF_LATENTS: case RF_CHECKPOINT: case RF_FRAMES: case RF_TENSORS:
        o = describe_stage_file(&f); break;
    case RF_WEIGHTS: o = describe_weights(path, opt->weight_stats); break;
    case RF_MODEL_DIR: o = describe_model_dir(path, opt->weight_stats); break;
    case RF_GENCONFIG: o = describe_genconfig(path); break;
    case RF_STEPS: o = describe_steps(path); break;
    case RF_VIDEO: o = describe_video(path); break;
    case RF_RUN_DIR: {
        o = json_object_new_object();
        json_object *files = json_object_new_array();
        for (int i = 0; rf_run_files[i]; i++) {
            char p[4400];
            if (cvx_path_join(p, sizeof p, path, rf_run_files[i]) || !cvx_is_file(p)) continue;
            json_object *d = describe_path(p, opt);
            if (!d) {
                json_object_put(o), json_object_put(files), rf_close(&f);
                return NULL;
            }
            json_object_array_add(files, d);
        }
        ADD(o, "files", files);
        break;
    }
    }
    rf_close(&f);
    if (!o) return NULL;
    /* path and kind first in the printed object */
    json_object *r = json_object_new_object();
    ADD(r, "path", jstr(path)), ADD(r, "kind", jstr(rf_kind_name(f.kind)));
    json_object_object_foreach(o, k, v) ADD(r, k, json_object_get(v));
    json_object_put(o);
    return r;
}

/* ---- text ---- */
static const char *sval(json_object *o, const char *k) {
    json_object *v;
    return json_object_object_get_ex(o, k, &v) && v ? json_object_get_string(v) : NULL;
}

static void print_tensor(FILE *out, json_object *t, int indent) {
    json_object *v;
    char shape[160] = "[";
    json_object_object_get_ex(t, "shape", &v);
    for (size_t d = 0; d < json_object_array_length(v); d++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? ", " : "",
                 (long long)json_object_get_int64(json_object_array_get_idx(v, d)));
    strcat(shape, "]");
    fprintf(out, "%*s%-40s %-5s %-22s", indent, "", sval(t, "name"), sval(t, "dtype"), shape);
    if (sval(t, "dtype_info")) fprintf(out, " (dtype_info %s)", sval(t, "dtype_info"));
    if (json_object_object_get_ex(t, "mean", &v) || json_object_object_get_ex(t, "nan", &v)) {
        json_object *a, *b, *c, *d, *n, *i;
        json_object_object_get_ex(t, "min", &a), json_object_object_get_ex(t, "max", &b);
        json_object_object_get_ex(t, "mean", &c), json_object_object_get_ex(t, "std", &d);
        json_object_object_get_ex(t, "nan", &n), json_object_object_get_ex(t, "inf", &i);
        fprintf(out, " min %-11.5g max %-11.5g mean %-11.5g std %-11.5g", json_object_get_double(a),
                json_object_get_double(b), json_object_get_double(c), json_object_get_double(d));
        if (json_object_get_int64(n) || json_object_get_int64(i))
            fprintf(out, " NaN %lld Inf %lld", (long long)json_object_get_int64(n), (long long)json_object_get_int64(i));
    }
    if (sval(t, "value")) fprintf(out, " = %s", sval(t, "value"));
    if (sval(t, "xxh64")) fprintf(out, " xxh64 %s", sval(t, "xxh64"));
    fputc('\n', out);
}

static void print_obj(FILE *out, json_object *o, int indent) {
    json_object_object_foreach(o, k, v) {
        if (!strcmp(k, "path") || !strcmp(k, "kind")) continue;
        if (!strcmp(k, "files")) {
            for (size_t i = 0; i < json_object_array_length(v); i++) {
                fputc('\n', out);
                describe_print(out, json_object_array_get_idx(v, i));
            }
        } else if (!strcmp(k, "tensors")) {
            size_t n = json_object_array_length(v);
            fprintf(out, "%*stensors (%zu):\n", indent, "", n);
            for (size_t i = 0; i < n; i++) print_tensor(out, json_object_array_get_idx(v, i), indent + 2);
        } else if (!strcmp(k, "steps") && json_object_is_type(v, json_type_array)) {
            fprintf(out, "%*s%-5s %-10s %-9s %-9s %-20s %-20s %s\n", indent, "", "step", "timestep", "guidance",
                    "cache", "latent_norm", "latent_std", "seconds");
            for (size_t i = 0; i < json_object_array_length(v); i++) {
                json_object *e = json_object_array_get_idx(v, i);
                fprintf(out, "%*s%-5s %-10s %-9s %-9s %-20s %-20s %s\n", indent, "", sval(e, "step"),
                        sval(e, "timestep"), sval(e, "guidance"), sval(e, "cache") ? sval(e, "cache") : "-",
                        sval(e, "latent_norm"), sval(e, "latent_std"), sval(e, "seconds"));
            }
        } else if (json_object_is_type(v, json_type_object)) {
            fprintf(out, "%*s%s:\n", indent, "", k);
            print_obj(out, v, indent + 2);
        } else if (json_object_is_type(v, json_type_array)) {
            fprintf(out, "%*s%s:\n", indent, "", k);
            for (size_t i = 0; i < json_object_array_length(v); i++)
                fprintf(out, "%*s  %s\n", indent, "",
                        json_object_to_json_string_ext(json_object_array_get_idx(v, i),
                                                       JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
        } else {
            fprintf(out, "%*s%s: %s\n", indent, "", k, v ? json_object_get_string(v) : "null");
        }
    }
}

void describe_print(FILE *out, json_object *d) {
    fprintf(out, "%s: %s\n", sval(d, "path"), sval(d, "kind"));
    print_obj(out, d, 2);
}
