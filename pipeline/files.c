/* The files between the stages: stage1_embeddings.safetensors, stage2_latents.safetensors,
 * generation_config.json, the decoded frames (docs/file-formats.md). */
#include "pipeline/internal.h"
#include "pipeline/conditioning.h"

#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "stage2/sampler.h"
#include "validate.h"

/* ---- stage 1 ---- */

int cvx_embeddings_write(const char *path, const float *prompt, const float *negative, int L, int D,
                         const char *prompt_text, const char *negative_text, const char *model_id) {
    return cvx_embeddings_write_set(NULL, path, prompt, negative, L, D, prompt_text, negative_text, model_id);
}

int cvx_embeddings_write_set(cvx_outset *set, const char *path, const float *prompt, const float *negative, int L,
                             int D, const char *prompt_text, const char *negative_text, const char *model_id) {
    const cvx_embeddings e = {.prompt = (float *)prompt, .negative = (float *)negative, .L = L, .D = D};
    return cvx_cond_write_set(set, path, &e, NULL, prompt_text, negative_text, model_id);
}

/* One conditioning tensor of a branch: F32 [1, L, D], or a mask I64 [1, L] (D 1). */
static int add_cond(cvx_st_writer *w, const char *name, const float *x, int L, int D, int is_mask) {
    if (!is_mask) return cvx_stw_add_f32(w, name, CVX_F32, 3, (const int64_t[3]){1, L, D}, x);
    int64_t *v = cvx_malloc(sizeof(int64_t) * (size_t)(L + 1));
    for (int i = 0; i < L; i++) v[i] = x[i] != 0.0f;
    int rc = cvx_stw_add(w, name, CVX_I64, 2, (const int64_t[2]){1, L}, v);
    free(v);
    return rc;
}

int cvx_cond_write_set(cvx_outset *set, const char *path, const cvx_embeddings *e, const cvx_cond_set *more,
                       const char *prompt_text, const char *negative_text, const char *model_id) {
    cvx_st_writer *w = cvx_stw_new();
    char info[2048], neg[160];
    int rc = 0;
    size_t len = 0;
    /* per slot: the prompt's tensor, then the negative prompt's; dtype_info names them all */
    for (int i = 0; i <= (more ? more->n : 0) && !rc; i++) {
        const cvx_cond_tensor t = i ? more->t[i - 1]
                                    : (cvx_cond_tensor){"prompt_embeds", e->prompt, e->negative, e->L, e->D, 0};
        const int mask = t.is_mask;
        const char *dt = mask ? "int64" : "float32";
        snprintf(neg, sizeof neg, "negative_%s", t.name);
        rc = add_cond(w, t.name, t.prompt, t.L, t.D, mask) || add_cond(w, neg, t.negative, t.L, t.D, mask);
        len += (size_t)snprintf(info + len, sizeof info - len, "%s\"%s\": \"%s\", \"%s\": \"%s\"", i ? ", " : "{",
                                t.name, dt, neg, dt);
        CVX_CHECK(len < sizeof info - 2);
    }
    snprintf(info + len, sizeof info - len, "}");
    rc = rc || cvx_stw_metadata(w, "prompt", prompt_text) || cvx_stw_metadata(w, "negative_prompt", negative_text) ||
         cvx_stw_metadata(w, "model_id", model_id) || cvx_stw_metadata(w, "dtype_info", info) ||
         (set ? cvx_outset_stw(set, w, path) : cvx_stw_write(w, path));
    cvx_stw_free(w);
    return rc ? -1 : 0;
}

/* A slot's rule text with its "%d" replaced by v ("text_embed_dim %d of the transformer" -> "... 4096 ..."). */
static const char *rule_text(const char *rule, int v, char *buf, size_t n) {
    const char *at = strstr(rule, "%d");
    if (!at) snprintf(buf, n, "%s %d", rule, v);
    else snprintf(buf, n, "%.*s%d%s", (int)(at - rule), rule, v, at + 2);
    return buf;
}

/* A conditioning tensor of a stage-1 file as floats (a mask's integers as 0/1), checked against
 * the slot's shape rule: [1, L, D] embeddings, [1, L] a mask. */
static float *read_cond(const cvx_safetensors *st, const cvx_cond_slot *slot, const char *name, int L, int D) {
    const char *file = cvx_st_path(st);
    const cvx_tensor *t = cvx_st_find(st, name);
    char got[128], why[256];
    if (!t) {
        cvx_error("%s: tensor '%s' is missing", file, name);
        return NULL;
    }
    cvx_shape_str(t->ndim, t->shape, got, sizeof got);
    if (slot->is_mask) {
        if (t->dtype != CVX_I64 && t->dtype != CVX_I32 && t->dtype != CVX_BOOL && t->dtype != CVX_U8 &&
            !cvx_dtype_is_float(t->dtype)) {
            cvx_error("%s: tensor '%s' has dtype %s, expected an integer attention mask (I64)", file, name,
                      cvx_dtype_name(t->dtype));
            return NULL;
        }
        if (t->ndim != 2 || t->shape[0] != 1 || t->shape[1] != L) {
            cvx_error("%s: tensor '%s' has shape %s, expected [1, %d] (%s)", file, name, got, L,
                      rule_text(slot->L_rule, L, why, sizeof why));
            return NULL;
        }
        float *m = cvx_dtype_is_float(t->dtype) ? cvx_tensor_f32_dup(t) : cvx_alloc_f32((size_t)L + 1);
        const unsigned char *b = t->data;
        for (int i = 0; i < L; i++) {
            int64_t x = 0;
            int32_t y;
            if (t->dtype == CVX_I64) memcpy(&x, b + 8 * (size_t)i, 8);
            else if (t->dtype == CVX_I32) memcpy(&y, b + 4 * (size_t)i, 4), x = y;
            else if (t->dtype == CVX_BOOL || t->dtype == CVX_U8) x = b[i];
            else x = m[i] != 0.0f;
            m[i] = x != 0 ? 1.0f : 0.0f;
        }
        return m;
    }
    if (!cvx_dtype_is_float(t->dtype)) {
        cvx_error("%s: tensor '%s' has dtype %s, expected a float dtype", file, name, cvx_dtype_name(t->dtype));
        return NULL;
    }
    if (t->ndim != 3 || t->shape[0] != 1 || t->shape[2] != D) {
        cvx_error("%s: tensor '%s' has shape %s, expected [1, %d, %d] (%s: embeddings from another text encoder or "
                  "model?)", file, name, got, L, D, rule_text(slot->D_rule, D, why, sizeof why));
        return NULL;
    }
    if (t->shape[1] != L) {
        cvx_error("%s: tensor '%s' has shape %s, expected [1, %d, %d] (%s)", file, name, got, L, D,
                  rule_text(slot->L_rule, L, why, sizeof why));
        return NULL;
    }
    return cvx_tensor_f32_dup(t);
}

/* Slots [first, last) of the family's conditioning from a stage-1 file into prompt / negative. */
static int read_slots(cvx_model *m, const cvx_safetensors *st, int first, int last, cvx_cond_tensor *out) {
    const cvx_cond_slot *slots = m->family->cond_slots;
    for (int i = first; i < last; i++) {
        int L, D;
        char neg[160];
        cvx_cond_slot_dims(m, i, &L, &D);
        snprintf(neg, sizeof neg, "negative_%s", slots[i].name);
        float *p = read_cond(st, &slots[i], slots[i].name, L, D), *n = p ? read_cond(st, &slots[i], neg, L, D) : NULL;
        if (!n) {
            free(p);
            return -1;
        }
        out[i - first] = (cvx_cond_tensor){slots[i].name, p, n, L, slots[i].is_mask ? 1 : D, slots[i].is_mask};
    }
    return 0;
}

static int n_slots(const cvx_model *m) {
    CVX_CHECK(m->family->cond_slots);   /* every row declares its conditioning */
    int n = 0;
    while (m->family->cond_slots[n].name) n++;
    CVX_CHECK(n >= 1 && n <= CVX_MAX_COND_TENSORS + 1 && !strcmp(m->family->cond_slots[0].name, "prompt_embeds"));
    return n;
}

int cvx_embeddings_from_file(cvx_model *m, const cvx_safetensors *st, cvx_embeddings *out) {
    memset(out, 0, sizeof *out);
    if (!m->has_denoiser_config) {
        char dir[4200];
        return cvx_model_component(m->dir, "transformer", "config.json", dir, sizeof dir);
    }
    cvx_cond_tensor t;
    n_slots(m);
    if (read_slots(m, st, 0, 1, &t)) return -1;
    *out = (cvx_embeddings){t.prompt, t.negative, t.L, t.D};
    return 0;
}

int cvx_cond_more_from_file(cvx_model *m, const cvx_safetensors *st, cvx_cond_set *out) {
    memset(out, 0, sizeof *out);
    if (!m->has_denoiser_config) return 0;   /* cvx_embeddings_from_file reports it */
    const int n = n_slots(m) - 1;
    if (read_slots(m, st, 1, 1 + n, out->t)) {
        for (int i = 0; i < n && out->t[i].name; i++) free(out->t[i].prompt), free(out->t[i].negative);
        memset(out, 0, sizeof *out);
        return -1;
    }
    out->n = n;
    return 0;
}

int cvx_embeddings_finite(const cvx_embeddings *e, const cvx_cond_set *more) {
    char neg[160];
    if (cvx_check_finite(e->prompt, (size_t)e->L * e->D, "prompt_embeds") ||
        cvx_check_finite(e->negative, (size_t)e->L * e->D, "negative_prompt_embeds"))
        return -1;
    for (int i = 0; more && i < more->n; i++) {
        const cvx_cond_tensor *t = &more->t[i];
        snprintf(neg, sizeof neg, "negative_%s", t->name);
        if (cvx_check_finite(t->prompt, (size_t)t->L * t->D, t->name) ||
            cvx_check_finite(t->negative, (size_t)t->L * t->D, neg))
            return -1;
    }
    return 0;
}

int cvx_genconfig_put(cvx_outset *set, const char *path, json_object *upd) {
    if (!set) return cvx_genconfig_update(path, upd);
    size_t len;
    int i = cvx_outset_find(set, path);
    char *text = cvx_genconfig_render(i >= 0 ? set->tmp[i] : path, upd, &len);
    if (!text) return -1;
    cvx_outset_drop(set, i);
    int rc = cvx_outset_write(set, path, text, len);
    free(text);
    return rc;
}

int cvx_genconfig_record_encode(const char *path, const char *prompt, const char *prompts_file,
                                const char *negative, const char *model_id) {
    return cvx_genconfig_record_encode_set(NULL, path, prompt, prompts_file, negative, model_id, NULL);
}

/* Keys of the config at path (if any) that are set (not null) and not in upd: added to upd as
 * null, so that the rendered config no longer claims them. */
static int null_stale_keys(const char *path, json_object *upd, const char *const *keys, int n) {
    if (!cvx_is_file(path)) return 0;
    cvx_config gc;
    if (cvx_config_load(&gc, path)) return -1;
    for (int i = 0; i < n; i++) {
        json_object *v;
        if (json_object_object_get_ex(gc.root, keys[i], &v) && v && !json_object_object_get_ex(upd, keys[i], NULL))
            json_object_object_add(upd, keys[i], NULL);
    }
    cvx_config_free(&gc);
    return 0;
}

/* Two paths name one existing file (an input directory that is also the output one). */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int cvx_genconfig_record_encode_set(cvx_outset *set, const char *path, const char *prompt, const char *prompts_file,
                                    const char *negative, const char *model_id, const char *emb_xxh64) {
    json_object *upd = json_object_new_object();
    if (prompt) json_object_object_add(upd, "prompt", json_object_new_string(prompt));
    else json_object_object_add(upd, "prompts_file", json_object_new_string(prompts_file));
    json_object_object_add(upd, "negative_prompt", json_object_new_string(negative));
    json_object_object_add(upd, "model_id", json_object_new_string(model_id));
    if (emb_xxh64) json_object_object_add(upd, "stage1_embeddings_xxh64", json_object_new_string(emb_xxh64));
    /* an I2V/V2V input encoded in the same set */
    for (int i = 0; set && i < set->n; i++) {
        const char *slash = strrchr(set->final[i], '/'), *name = slash ? slash + 1 : set->final[i];
        char hex[17];
        if (strcmp(name, "stage1_conditioning.safetensors") != 0) continue;
        if (cvx_file_xxh64(set->tmp[i], hex)) {
            json_object_put(upd);
            return -1;
        }
        json_object_object_add(upd, "stage1_conditioning_xxh64", json_object_new_string(hex));
    }
    /* what an earlier run recorded and this one replaces: the other prompt form, the hash of a
     * file this run did not write, and the latents made from the earlier inputs (null: stage 2
     * refuses the old embeddings or conditioning, stage 3 the old latents, until run again) */
    const char *const stale[] = {"prompt", "prompts_file", "stage1_embeddings_xxh64", "stage1_conditioning_xxh64",
                                 "stage2_latents_xxh64"};
    int rc = null_stale_keys(path, upd, stale, (int)(sizeof stale / sizeof stale[0])) || cvx_genconfig_put(set, path, upd);
    json_object_put(upd);
    return rc;
}

int cvx_genconfig_record_lora_set(cvx_outset *set, const char *path, cvx_model *m) {
    json_object *upd = json_object_new_object();
    if (m->n_loras) {
        json_object *arr = json_object_new_array();
        json_object_object_add(upd, "loras", arr);
        for (int i = 0; i < m->n_loras; i++) {
            char real[PATH_MAX];
            if (cvx_model_lora_hash(m, i)) {
                json_object_put(upd);
                return -1;
            }
            if (!realpath(m->loras[i].path, real)) snprintf(real, sizeof real, "%s", m->loras[i].path);
            json_object *o = json_object_new_object();
            json_object_object_add(o, "file", json_object_new_string(real));
            json_object_object_add(o, "weight", json_object_new_double(m->loras[i].weight));
            if (m->lora_experts[i])   /* --lora_high / --lora_low */
                json_object_object_add(o, "expert", json_object_new_string(m->lora_experts[i] == 1 ? "high" : "low"));
            json_object_object_add(o, "xxh64", json_object_new_string(m->lora_xxh64[i]));
            json_object_array_add(arr, o);
        }
        json_object_object_add(upd, "lora_fuse", json_object_new_boolean(m->lora_fuse));
    }
    const char *const stale[] = {"loras", "lora_fuse"};   /* of an earlier run with LoRAs */
    int rc = null_stale_keys(path, upd, stale, 2) || cvx_genconfig_put(set, path, upd);
    json_object_put(upd);
    return rc;
}

int cvx_genconfig_record_precision(const char *path, const char *key, const cvx_model *m) {
    return cvx_genconfig_record_precision_set(NULL, path, key, m);
}
int cvx_genconfig_record_precision_set(cvx_outset *set, const char *path, const char *key, const cvx_model *m) {
    json_object *upd = json_object_new_object();
    json_object_object_add(upd, key, json_object_new_string(cvx_precision_name(m->ctx->precision)));
    if (!strcmp(key, "stage2_precision"))   /* the transformer's attention kernel beside it */
        json_object_object_add(upd, "stage2_attention", json_object_new_string(cvx_attention_name(cvx_ctx_attention(m->ctx))));
    int rc = cvx_genconfig_put(set, path, upd);
    json_object_put(upd);
    return rc;
}

/* "gguf wan Q4_K_M: 40 F32, ..." for a weights path (its header only), "" when it cannot be opened. */
static void describe_weights(const char *path, char *buf, size_t n) {
    cvx_weights *w = cvx_weights_open(path);
    buf[0] = 0;
    if (w) cvx_weights_describe(w, buf, n);
    else cvx_clear_error();
    cvx_weights_close(w);
}

static const char *weight_file_of(const cvx_model *m, const char *which) {
    return !strcmp(which, "transformer")     ? m->transformer_file
           : !strcmp(which, "transformer_2") ? m->transformer_2_file   /* Wan 2.2 A14B's low-noise expert */
           : !strcmp(which, "text_encoder")  ? m->text_encoder_file
                                             : m->vae_file;
}

int cvx_genconfig_record_weights_set(cvx_outset *set, const char *path, const char *which, const cvx_model *m) {
    const char *file = weight_file_of(m, which);
    if (!strcmp(which, "transformer_2") && !file[0]) return 0;   /* recorded only when given */
    json_object *upd = json_object_new_object();
    char key[64], real[PATH_MAX], desc[512];
    snprintf(key, sizeof key, "%s_file", which);
    if (file[0] && !realpath(file, real)) snprintf(real, sizeof real, "%s", file);
    json_object_object_add(upd, key, file[0] ? json_object_new_string(real) : NULL);
    snprintf(key, sizeof key, "%s_weights", which);
    if (file[0]) describe_weights(file, desc, sizeof desc);
    json_object_object_add(upd, key, file[0] ? json_object_new_string(desc) : NULL);
    if (!strcmp(which, "transformer")) json_object_object_add(upd, "int8_dot", json_object_new_boolean(m->ctx->int8));
    int rc = cvx_genconfig_put(set, path, upd);
    json_object_put(upd);
    return rc;
}

/* A --prompts_file: one prompt per non-empty line. */
cvx_prompt_item *cvx_read_prompts_file(const char *path, char **buf, int *count) {
    size_t len;
    *buf = cvx_read_file(path, &len);
    if (!*buf) return NULL;
    cvx_prompt_item *items = NULL;
    int n = 0, line = 0;
    for (char *p = *buf; p < *buf + len;) {
        char *nl = memchr(p, '\n', (size_t)(*buf + len - p));
        char *end = nl ? nl : *buf + len;
        line++;
        const char *nul = memchr(p, 0, (size_t)(end - p));   /* the C string would silently end there */
        if (nul) {
            cvx_error("%s line %d contains a NUL byte (at byte %ld of the line); save the prompts as UTF-8 text", path,
                      line, (long)(nul - p));
            free(items);
            free(*buf);
            *buf = NULL;
            return NULL;
        }
        *end = 0;
        if (end > p && end[-1] == '\r') end[-1] = 0;
        if (p[strspn(p, " \t\v\f\r")]) {   /* blank and whitespace-only lines are skipped */
            char what[4200];
            snprintf(what, sizeof what, "%s line %d", path, line);
            if (cvx_check_prompt(p, what)) {
                free(items);
                free(*buf);
                *buf = NULL;
                return NULL;
            }
            items = cvx_realloc(items, (size_t)(n + 1) * sizeof *items);
            items[n++] = (cvx_prompt_item){p, line};
        }
        p = end + 1;
    }
    if (n == 0) {
        free(*buf);
        *buf = NULL;
        cvx_error("%s: no prompts (every line is empty or whitespace only)", path);
        return NULL;
    }
    *count = n;
    return items;
}


/* ---- stage 2 ---- */

int cvx_recorded_model(const char *model_dir, const char *model_id, const char *gc_path, const cvx_safetensors *st,
                       char *buf, size_t n, const char **out) {
    *out = model_dir ? model_dir : model_id;
    if (*out) return 0;
    buf[0] = 0;
    if (gc_path && cvx_is_file(gc_path) && cvx_genconfig_get_str(gc_path, "model_id", buf, n)) return -1;
    const char *v = st ? cvx_st_metadata(st, "model_id") : NULL;
    *out = buf[0] ? buf : v && v[0] ? v : NULL;
    return 0;
}

/* Shortest decimal that reads back as the same double, with ".0" on integers (as Python's repr). */
static void format_double(double v, char *buf, size_t n) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eni")) strncat(buf, ".0", n - strlen(buf) - 1);
}

/* ---- the family options (cvx_family_options, pipeline/family.h): a file records a row right
 * after the generic key the row names for it, when set (or always: record_unset) ---- */
static int option_here(const cvx_family_option *o, const char *where, const char *after, const cvx_sample_params *p) {
    return where && !strcmp(where, after) && (o->record_unset || cvx_family_option_is_set(o, p));
}
/* its text in the fingerprint and the metadata: true / false, or the shortest exact number */
static void option_text(const cvx_family_option *o, const cvx_sample_params *p, char *buf, size_t n) {
    const double v = cvx_family_option_value(o, p);
    if (o->type == CVX_OPTION_BOOL) snprintf(buf, n, "%s", v != 0 ? "true" : "false");
    else format_double(v, buf, n);
}
static void fingerprint_options(cvx_fingerprint *fp, const cvx_sample_params *p, const char *after) {
    char buf[64];
    for (const cvx_family_option *o = cvx_family_options; o->name; o++)
        if (option_here(o, o->fp_after, after, p)) {
            option_text(o, p, buf, sizeof buf);
            cvx_fingerprint_set(fp, o->key, "%s", buf);
        }
}
static int metadata_options(cvx_st_writer *w, const cvx_sample_params *p, const char *after) {
    char buf[64];
    int rc = 0;
    for (const cvx_family_option *o = cvx_family_options; o->name; o++)
        if (option_here(o, o->meta_after, after, p)) {
            option_text(o, p, buf, sizeof buf);
            rc |= cvx_stw_metadata(w, o->key, buf);
        }
    return rc;
}
static void genconfig_options(json_object *upd, const cvx_sample_params *p, const char *after) {
    for (const cvx_family_option *o = cvx_family_options; o->name; o++)
        if (option_here(o, o->genconfig_after, after, p)) {
            const double v = cvx_family_option_value(o, p);
            json_object_object_add(upd, o->key, o->type == CVX_OPTION_BOOL  ? json_object_new_boolean((int)v)
                                                : o->type == CVX_OPTION_INT ? json_object_new_int((int)v)
                                                                            : json_object_new_double(v));
        }
}
/* The generation_config.json keys of the options recorded after one of `afters` that this run
 * leaves out: null when the config at path (an earlier run's) has them. */
static int null_stale_options(const char *path, json_object *upd, const char *const *afters, int n_afters) {
    const char *keys[32];
    int n = 0;
    for (const cvx_family_option *o = cvx_family_options; o->name && n < 32; o++)
        for (int i = 0; i < n_afters; i++)
            if (o->genconfig_after && !strcmp(o->genconfig_after, afters[i])) keys[n++] = o->key;
    return null_stale_keys(path, upd, keys, n);
}

/* FNV-1a 64 of a file's bytes: identifies the embeddings in the checkpoint fingerprint. */
static int hash_file(const char *path, uint64_t *out) {
    size_t len;
    char *buf = cvx_read_file(path, &len);
    if (!buf) return -1;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)buf[i]) * 0x100000001b3ull;
    free(buf);
    *out = h;
    return 0;
}

/* The shift of the model's scheduler config (UniPC "flow_shift", Euler "shift"), or 0. */
static double config_flow_shift(const cvx_model *m) {
    char path[PATH_MAX];
    cvx_config c;
    double v = 0;
    if (cvx_path_join(path, sizeof path, m->dir, "scheduler/scheduler_config.json") || cvx_config_load(&c, path)) {
        cvx_clear_error();
        return 0;
    }
    if (cvx_cfg_num_or(&c, "flow_shift", 0, &v) || (v == 0 && cvx_cfg_num_or(&c, "shift", 0, &v))) v = 0;
    cvx_config_free(&c);
    cvx_clear_error();
    return v;
}

int cvx_sample_fingerprint(cvx_model *m, const cvx_sample_params *p, const char *embeddings_path, cvx_fingerprint *fp) {
    char real_model[PATH_MAX], gbuf[64];
    uint64_t emb_hash;
    if (!realpath(m->dir, real_model)) snprintf(real_model, sizeof real_model, "%s", m->dir);
    if (hash_file(embeddings_path, &emb_hash)) return -1;
    memset(fp, 0, sizeof *fp);
    cvx_fingerprint_set(fp, "model", "%s", real_model);
    if (m->transformer_file[0]) {   /* a single transformer file instead of the directory's: its path and size */
        char real_file[PATH_MAX];
        struct stat fst;
        if (!realpath(m->transformer_file, real_file)) snprintf(real_file, sizeof real_file, "%s", m->transformer_file);
        cvx_fingerprint_set(fp, "transformer_file", "%s (%lld bytes)", real_file,
                            stat(real_file, &fst) == 0 ? (long long)fst.st_size : -1LL);
        char desc[512];   /* its format and tensor types: "gguf wan Q4_K_M: 40 F32, 9 F16, 14 Q4_K, 6 Q6_K" */
        describe_weights(m->transformer_file, desc, sizeof desc);
        cvx_fingerprint_set(fp, "transformer_weights", "%s", desc);
    }
    if (m->transformer_2_file[0]) {   /* Wan 2.2 A14B's low-noise expert from one file: its identity */
        char ident2[256];
        if (cvx_weights_identity(m->transformer_2_file, ident2, sizeof ident2)) return -1;
        cvx_fingerprint_set(fp, "transformer_2_file", "%s", ident2);
    }
    /* the transformer's weights themselves (sizes, time, header and sampled content): a model
     * changed in place is not resumed (issue 37) */
    char ident[256], tdir[PATH_MAX];
    const char *tw = m->transformer_file[0] ? m->transformer_file : tdir;
    if (!m->transformer_file[0] && cvx_path_join(tdir, sizeof tdir, m->dir, "transformer")) return -1;
    if (cvx_weights_identity(tw, ident, sizeof ident)) {   /* the load says why, with its own checks first */
        cvx_clear_error();
        snprintf(ident, sizeof ident, "(unreadable)");
    }
    cvx_fingerprint_set(fp, "transformer_identity", "%s", ident);
    if (cvx_lora_fingerprint(m, fp)) return -1;   /* LoRA files (xxh64) and weights, fused or not */
    if (m->ctx->int8) cvx_fingerprint_set(fp, "int8_dot", "true");   /* quantized weights × int8 activations */
    cvx_fingerprint_set(fp, "embeddings_fnv1a64", "%016llx", (unsigned long long)emb_hash);
    cvx_fingerprint_set(fp, "num_inference_steps", "%d", p->num_inference_steps);
    format_double(p->guidance_scale, gbuf, sizeof gbuf);
    cvx_fingerprint_set(fp, "guidance_scale", "%s", gbuf);
    fingerprint_options(fp, p, "guidance_scale");
    cvx_fingerprint_set(fp, "seed", "%llu", (unsigned long long)p->seed);
    cvx_fingerprint_set(fp, "height", "%d", p->height);
    cvx_fingerprint_set(fp, "width", "%d", p->width);
    cvx_fingerprint_set(fp, "frames", "%d", p->frames);
    cvx_fingerprint_set(fp, "scheduler", "%s", p->scheduler ? p->scheduler : "");
    fingerprint_options(fp, p, "scheduler");
    if (p->n_timesteps) {   /* explicit timesteps, each in its shortest exact form (a long list: its hash) */
        char list[1000] = "";
        for (int k = 0; k < p->n_timesteps; k++) {
            format_double(p->timesteps[k], gbuf, sizeof gbuf);
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? "," : "", gbuf);
        }
        if (strlen(list) + 1 >= sizeof list)
            snprintf(list, sizeof list, "%d values, xxh64 %016llx", p->n_timesteps,
                     (unsigned long long)cvx_xxh64(p->timesteps, (size_t)p->n_timesteps * sizeof(double), 0));
        cvx_fingerprint_set(fp, "timesteps", "%s", list);
    }
    if (p->image_cond_noise_set) {
        format_double(p->image_cond_noise_scale, gbuf, sizeof gbuf);
        cvx_fingerprint_set(fp, "image_cond_noise_scale", "%s", gbuf);
    }
    if (p->flow_shift > 0 && p->flow_shift != config_flow_shift(m)) {   /* the config's own value: the same run */
        format_double(p->flow_shift, gbuf, sizeof gbuf);
        cvx_fingerprint_set(fp, "flow_shift", "%s", gbuf);
    }
    if (p->conditioning) {   /* I2V / V2V: the encoded image or video, and V2V's strength */
        cvx_fingerprint_set(fp, "mode", "%s", cvx_mode_name(p->conditioning->mode));
        cvx_fingerprint_set(fp, "conditioning_xxh64", "%016llx",
                                  (unsigned long long)cvx_conditioning_hash(p->conditioning));
        format_double(p->strength, gbuf, sizeof gbuf);
        if (p->conditioning->mode == CVX_MODE_V2V) cvx_fingerprint_set(fp, "strength", "%s", gbuf);
    }
    cvx_fingerprint_set(fp, "precision", "%s", cvx_precision_name(m->ctx->precision));
    cvx_attention_mode att = cvx_ctx_attention(m->ctx);   /* only when not the precision's own kernel */
    if (att != (m->ctx->precision == CVX_PRECISION_BF16 ? CVX_ATTENTION_BF16 : CVX_ATTENTION_F32))
        cvx_fingerprint_set(fp, "attention", "%s", cvx_attention_name(att));
    cvx_fingerprint_set(fp, "noise_dtype", "%s", p->noise_dtype ? p->noise_dtype : "f32");
    cvx_fingerprint_set(fp, "cache", "%s", p->cache ? p->cache : "none");
    if (p->cache && !strcmp(p->cache, "deepcache")) {
        cvx_fingerprint_set(fp, "deepcache_start", "%d", p->deepcache_start);
        cvx_fingerprint_set(fp, "deepcache_end", "%d", p->deepcache_end);
        cvx_fingerprint_set(fp, "deepcache_interval", "%d", p->deepcache_interval);
    } else if (p->cache && strcmp(p->cache, "none") != 0) {
        format_double(p->cache_threshold, gbuf, sizeof gbuf);   /* shortest exact form */
        cvx_fingerprint_set(fp, "cache_threshold", "%s", gbuf);
        const double *co = p->teacache_coefficients;
        if (co) cvx_fingerprint_set(fp, "teacache_coefficients", "%.17g,%.17g,%.17g,%.17g,%.17g", co[0], co[1],
                                          co[2], co[3], co[4]);
        else cvx_fingerprint_set(fp, "teacache_coefficients", "published");
        fingerprint_options(fp, p, "teacache_coefficients");
    }
    return 0;
}

int cvx_latents_write(const char *path, const cvx_latents *l, const cvx_sample_params *p, cvx_dtype dtype,
                      const char *model_id) {
    return cvx_latents_write_set(NULL, path, l, p, dtype, model_id);
}

int cvx_latents_write_set(cvx_outset *set, const char *path, const cvx_latents *l, const cvx_sample_params *p,
                          cvx_dtype dtype, const char *model_id) {
    cvx_st_writer *w = cvx_stw_new();
    const int64_t shape[5] = {1, l->C, l->T, l->h, l->w};
    char buf[64];
    int rc = cvx_stw_add_f32(w, "latents", dtype, 5, shape, l->data);
    snprintf(buf, sizeof buf, "%d", p->frames);
    rc |= cvx_stw_metadata(w, "num_frames", buf);
    snprintf(buf, sizeof buf, "%d", p->num_inference_steps);
    rc |= cvx_stw_metadata(w, "num_inference_steps", buf);
    format_double(p->guidance_scale, buf, sizeof buf);
    rc |= cvx_stw_metadata(w, "guidance_scale", buf);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)p->seed);
    rc |= cvx_stw_metadata(w, "seed", buf);
    snprintf(buf, sizeof buf, "%d", p->height);
    rc |= cvx_stw_metadata(w, "height", buf);
    snprintf(buf, sizeof buf, "%d", p->width);
    rc |= cvx_stw_metadata(w, "width", buf);
    rc |= cvx_stw_metadata(w, "dtype_info",
                           dtype == CVX_BF16 ? "{\"latents\": \"bfloat16\"}" : "{\"latents\": \"float32\"}");
    rc |= metadata_options(w, p, "dtype_info");
    rc |= cvx_stw_metadata(w, "scheduler", l->scheduler);
    rc |= cvx_stw_metadata(w, "model_id", model_id);
    if (l->family) rc |= cvx_stw_metadata(w, "model_family", l->family);
    if (l->generator) {   /* the decode's noise continues it (LTX-Video 0.9.5+): its bytes in hex */
        const unsigned char *g = l->generator;
        char *hex = cvx_malloc(2 * sizeof(cvx_generator) + 1);
        for (size_t i = 0; i < sizeof(cvx_generator); i++) snprintf(hex + 2 * i, 3, "%02x", g[i]);
        rc |= cvx_stw_metadata(w, "generator_state", hex);
        free(hex);
    }
    rc |= cvx_stw_metadata(w, "mode", cvx_mode_name(p->conditioning ? p->conditioning->mode : CVX_MODE_T2V));
    if (p->conditioning && p->conditioning->mode == CVX_MODE_V2V) {
        format_double(p->strength, buf, sizeof buf);
        rc |= cvx_stw_metadata(w, "strength", buf);
    }
    if (!rc) rc = set ? cvx_outset_stw(set, w, path) : cvx_stw_write(w, path);
    cvx_stw_free(w);
    return rc ? -1 : 0;
}

int cvx_genconfig_record_sample(const char *out_gc, const char *in_gc, const cvx_sample_params *p, int fps,
                                const char *scheduler, const char *model_id) {
    return cvx_genconfig_record_sample_set(NULL, out_gc, in_gc, p, fps, scheduler, model_id, NULL);
}

int cvx_genconfig_record_sample_set(cvx_outset *set, const char *out_gc, const char *in_gc,
                                    const cvx_sample_params *p, int fps, const char *scheduler, const char *model_id,
                                    const char *lat_xxh64) {
    cvx_config gc;
    json_object *upd = json_object_new_object();
    /* another output dir: carry stage1's keys over (also into the config of an earlier run there,
     * whose prompt and embeddings hash would otherwise describe another input) */
    if (in_gc && cvx_is_file(in_gc) && !same_file(in_gc, out_gc)) {
        if (cvx_config_load(&gc, in_gc)) {
            json_object_put(upd);
            return -1;
        }
        json_object_object_foreach(gc.root, key, val) json_object_object_add(upd, key, json_object_get(val));
        cvx_config_free(&gc);
    }
    /* the model that made these latents (stage3 decodes with its VAE; T5 is shared by all) */
    json_object_object_add(upd, "model_id", json_object_new_string(model_id));
    json_object_object_add(upd, "num_inference_steps", json_object_new_int(p->num_inference_steps));
    json_object_object_add(upd, "guidance_scale", json_object_new_double(p->guidance_scale));
    genconfig_options(upd, p, "guidance_scale");
    json_object_object_add(upd, "seed", json_object_new_uint64(p->seed));
    json_object_object_add(upd, "height", json_object_new_int(p->height));
    json_object_object_add(upd, "width", json_object_new_int(p->width));
    json_object_object_add(upd, "frames", json_object_new_int(p->frames));
    json_object_object_add(upd, "fps", json_object_new_int(fps));
    genconfig_options(upd, p, "fps");
    json_object_object_add(upd, "scheduler", json_object_new_string(scheduler));
    if (p->conditioning && p->conditioning->mode == CVX_MODE_V2V)
        json_object_object_add(upd, "strength", json_object_new_double(p->strength));
    else json_object_object_del(upd, "strength");   /* carried from an input dir's earlier V2V run */
    if (p->flow_shift > 0) json_object_object_add(upd, "flow_shift", json_object_new_double(p->flow_shift));
    else json_object_object_del(upd, "flow_shift");
    const char *const stale[] = {"strength", "flow_shift"}, *const opts_at[] = {"guidance_scale", "fps"};
    if (null_stale_keys(out_gc, upd, stale, 2) || null_stale_options(out_gc, upd, opts_at, 2)) {   /* of an earlier run */
        json_object_put(upd);
        return -1;
    }
    if (lat_xxh64) json_object_object_add(upd, "stage2_latents_xxh64", json_object_new_string(lat_xxh64));
    json_object_object_add(upd, "noise_dtype", json_object_new_string(p->noise_dtype ? p->noise_dtype : "f32"));
    int rc = cvx_genconfig_put(set, out_gc, upd);
    json_object_put(upd);
    return rc;
}

int cvx_genconfig_record_cache(const char *out_gc, const cvx_sample_params *p, const cvx_latents *l) {
    return cvx_genconfig_record_cache_set(NULL, out_gc, p, l);
}
int cvx_genconfig_record_cache_set(cvx_outset *set, const char *out_gc, const cvx_sample_params *p,
                                   const cvx_latents *l) {
    json_object *upd = json_object_new_object();
    int on = p->cache && strcmp(p->cache, "none") != 0;
    json_object_object_add(upd, "cache", json_object_new_string(on ? p->cache : "none"));
    if (on && !strcmp(p->cache, "deepcache")) {
        json_object_object_add(upd, "deepcache_start", json_object_new_int(p->deepcache_start));
        json_object_object_add(upd, "deepcache_end", json_object_new_int(p->deepcache_end));
        json_object_object_add(upd, "deepcache_interval", json_object_new_int(p->deepcache_interval));
    } else if (on) {
        char buf[64];
        format_double(p->cache_threshold, buf, sizeof buf);
        json_object_object_add(upd, "cache_threshold", json_object_new_double_s(p->cache_threshold, buf));
        if (!strcmp(p->cache, "teacache")) {
            json_object *a = json_object_new_array();
            for (int i = 0; i < 5; i++) {
                format_double(l->teacache_coefficients[i], buf, sizeof buf);
                json_object_array_add(a, json_object_new_double_s(l->teacache_coefficients[i], buf));
            }
            json_object_object_add(upd, "teacache_coefficients", a);
            genconfig_options(upd, p, "teacache_coefficients");
        }
    }
    if (on) {
        json_object_object_add(upd, "cache_steps_computed", json_object_new_int64(l->cache_steps_computed));
        json_object_object_add(upd, "cache_steps_skipped", json_object_new_int64(l->cache_steps_skipped));
        json_object_object_add(upd, "cache_blocks_skipped", json_object_new_int64(l->cache_blocks_skipped));
    }
    /* the numbers of an earlier run's cache that this run did not set (all of them when off) */
    const char *const stale[] = {"cache_threshold", "teacache_coefficients", "cache_steps_computed",
                                 "cache_steps_skipped", "cache_blocks_skipped",
                                 "deepcache_start", "deepcache_end", "deepcache_interval"},
                      *const opts_at[] = {"teacache_coefficients"};
    int rc = null_stale_keys(out_gc, upd, stale, (int)(sizeof stale / sizeof stale[0])) ||
             null_stale_options(out_gc, upd, opts_at, 1) ||
             cvx_genconfig_put(set, out_gc, upd);
    json_object_put(upd);
    return rc;
}

/* ---- stage 3 ---- */

int cvx_latents_read(cvx_model *m, const char *path, float **z, int dims[5], long *meta_frames) {
    *z = NULL;
    cvx_safetensors *st = cvx_st_open(path);
    if (!st) return -1;
    int rc = -1;
    const cvx_tensor *lt = cvx_st_find(st, "latents");
    char shp[128];
    if (!lt) {
        cvx_error("%s: no tensor 'latents'", path);
        goto done;
    }
    cvx_shape_str(lt->ndim, lt->shape, shp, sizeof shp);
    if (!cvx_dtype_is_float(lt->dtype)) {
        cvx_error("%s: tensor 'latents' has dtype %s, expected F32, BF16 or F16", path, cvx_dtype_name(lt->dtype));
        goto done;
    }
    if (lt->ndim != 5) {
        cvx_error("%s: tensor 'latents' has shape %s (rank %d), expected rank 5 [B, C, T, H, W]", path, shp,
                  lt->ndim);
        goto done;
    }
    for (int i = 0; i < 5; i++) dims[i] = (int)lt->shape[i];
    const char *fam = cvx_st_metadata(st, "model_family");   /* absent in other programs' files: not checked */
    if (fam && strcmp(fam, m->family->name) != 0) {
        cvx_error("%s: latents of a %s model (metadata 'model_family'), but %s is a %s model: its VAE cannot decode "
                  "them (pass the model that made them with --model_dir)", path, fam, m->dir, m->family->name);
        goto done;
    }
    if (m->has_vae_config && dims[1] != m->info.latent_channels) {
        cvx_error("%s: tensor 'latents' has shape %s: %d channels (dim 1 of [B, C, T, H, W]), the VAE in %s/vae "
                  "expects latent_channels = %d", path, shp, dims[1], m->dir, m->info.latent_channels);
        goto done;
    }
    if (dims[0] < 1 || dims[2] < 1 || dims[3] < 1 || dims[4] < 1) {
        cvx_error("%s: tensor 'latents' has an empty shape %s", path, shp);
        goto done;
    }
    *z = cvx_alloc_f32((size_t)lt->numel);   // [B, C, T, h, w]
    cvx_tensor_to_f32(lt, *z);
    const char *meta = cvx_st_metadata(st, "num_frames");
    *meta_frames = meta ? atol(meta) : 0;
    rc = 0;
done:
    cvx_st_close(st);
    return rc;
}

int cvx_frames_write(cvx_outset *set, const char *path, const cvx_frames *f, const char *latents_path) {
    size_t per = (size_t)3 * f->T * f->H * f->W;
    float *all = cvx_alloc_f32(per * f->B);   // [B, 3, T, H, W]
    for (int b = 0; b < f->B; b++) memcpy(all + per * b, f->data[b], per * sizeof(float));
    cvx_st_writer *sw = cvx_stw_new();
    int rc = cvx_stw_add_f32(sw, "decoded", CVX_F32, 5, (int64_t[]){f->B, 3, f->T, f->H, f->W}, all) ||
             cvx_stw_metadata(sw, "latents", latents_path) || (set ? cvx_outset_stw(set, sw, path) : cvx_stw_write(sw, path));
    cvx_stw_free(sw);
    free(all);
    return rc ? -1 : 0;
}

int cvx_latents_read_generator(const char *path, void **gen) {
    *gen = NULL;
    cvx_safetensors *st = cvx_st_open(path);
    if (!st) return -1;
    const char *hex = cvx_st_metadata(st, "generator_state");
    int rc = 0;
    if (hex) {
        const size_t n = sizeof(cvx_generator);
        unsigned char *g = cvx_malloc(n);
        int ok = strlen(hex) == 2 * n;
        for (size_t i = 0; ok && i < n; i++) {
            unsigned v;
            ok = sscanf(hex + 2 * i, "%2x", &v) == 1;
            g[i] = (unsigned char)v;
        }
        cvx_generator tmp;
        if (ok) memcpy(&tmp, g, n);
        if (!ok || cvx_generator_validate(&tmp)) {
            free(g);
            rc = cvx_error("%s: metadata 'generator_state' is not the state of a generator (%zu hex digits expected, "
                           "as stage 2 writes it)", path, 2 * n);
        } else {
            *gen = g;
        }
    }
    cvx_st_close(st);
    return rc;
}
