/* Reading LoRA files: key formats, the mapping onto a model's linear layers and the scales
 * diffusers 0.33.1 + peft 0.15.2 apply (lora.h). The products and the fusing are in lora_apply.c.
 *
 * Upstream rules followed here:
 *   diffusers loaders/peft.py load_lora_adapter + utils/peft_utils.py get_peft_kwargs: r = the most
 *     common rank, lora_alpha = the rank of the first lora_B key (state-dict order; safetensors'
 *     load_file gives sorted keys); scaling = lora_alpha / r_module · adapter weight (peft
 *     LoraLayer.update_layer / set_scale); diffusers >= 0.34 uses the file's lora_adapter_metadata
 *     as the LoraConfig instead (_create_lora_config).
 *   diffusers v0.35.2 lora_conversion_utils.py _convert_non_diffusers_wan_lora_to_diffusers and
 *     _convert_musubi_wan_lora_to_diffusers: original / kohya names, alpha / rank folded into the
 *     weights, diff_b as lora_B.bias, norm .diff/.diff_b dropped, other .diff keys not applied,
 *     time_projection keys dropped when the file has no time_projection weights. */
#include "lora_impl.h"

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "validate.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { KIND_DIFFUSERS, KIND_ORIGINAL, KIND_KOHYA, KIND_BARE };   /* key prefix: transformer. / diffusion_model. / lora_unet_ / none */
enum { ROLE_A, ROLE_B, ROLE_BIAS, ROLE_ALPHA, ROLE_DIFF, ROLE_DORA };
enum { SHOW = 4 };   /* keys named in a message */

static const struct {
    const char *suffix;
    int role;
} SUFFIXES[] = {
    {".lora_A.weight", ROLE_A},   {".lora_down.weight", ROLE_A}, {".lora.down.weight", ROLE_A},
    {".lora_B.weight", ROLE_B},   {".lora_up.weight", ROLE_B},   {".lora.up.weight", ROLE_B},
    {".lora_B.bias", ROLE_BIAS},  {".diff_b", ROLE_BIAS},        {".alpha", ROLE_ALPHA},
    {".diff", ROLE_DIFF},         {".dora_scale", ROLE_DORA},
};
static const char *const TEXT_ENCODER_PREFIXES[] = {"text_encoder.", "text_encoder_2.", "text_model.", "lora_te_",
                                                    "lora_te1_", "lora_te2_", "te.", "cond_stage_model."};
/* Families whose key names say which model a LoRA was made for (the error for a wrong one). */
static const struct {
    const char *needle, *family;
} FAMILY_HINTS[] = {
    {"transformer_blocks.", "CogVideoX (or another DiT with transformer_blocks)"}, {"self_attn.", "Wan 2.1"},
    {"cross_attn.", "Wan 2.1"}, {"ffn.net.", "Wan 2.1"}, {"double_blocks", "Flux / HunyuanVideo"},
    {"single_blocks", "Flux / HunyuanVideo"}, {"down_blocks", "a Stable Diffusion UNet"},
    {"input_blocks", "a Stable Diffusion UNet"}, {"blocks_", "Wan 2.1"}, {"blocks.", "Wan 2.1"},
};

/* One module of the file: the keys of one adapted layer. */
typedef struct {
    char name[CVX_LORA_NAME];    /* after the prefix; kohya: with '_' for '.' */
    int kind;
    const cvx_tensor *A, *B, *bias, *alpha;
    int target;                  /* index into the targets, -1: none */
} lmod;

typedef struct {
    const char *keys[SHOW];
    int n;
} keylist;

static void keylist_add(keylist *l, const char *k) {
    if (l->n < SHOW) l->keys[l->n] = k;
    l->n++;
}

static void keylist_str_max(const keylist *l, int max, char *buf, size_t n) {
    buf[0] = 0;
    for (int i = 0; i < l->n && i < max; i++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s'%s'", i ? ", " : "", l->keys[i]);
    if (l->n > max) snprintf(buf + strlen(buf), n - strlen(buf), ", ...");
}
static void keylist_str(const keylist *l, char *buf, size_t n) { keylist_str_max(l, SHOW, buf, n); }

static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
static int ends_with(const char *s, const char *x) {
    size_t a = strlen(s), b = strlen(x);
    return a >= b && strcmp(s + a - b, x) == 0;
}
static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int cvx_lora_spec_parse(const char *arg, char *path, size_t path_n, double *weight) {
    *weight = 1.0;
    if (!arg || !arg[0]) return cvx_error("--lora needs a file (FILE or FILE:WEIGHT)");
    const char *colon = strrchr(arg, ':');
    size_t len = strlen(arg);
    struct stat st;
    if (colon && stat(arg, &st) != 0) {   /* not a file as a whole: FILE:WEIGHT */
        char *end;
        const double w = strtod(colon + 1, &end);
        const size_t flen = (size_t)(colon - arg);
        char file[4096];
        if (colon[1] && *end == 0 && isfinite(w)) *weight = w, len = flen;
        else if (flen > 0 && flen < sizeof file && (memcpy(file, arg, flen), file[flen] = 0, stat(file, &st) == 0))
            return cvx_error("--lora %s: the weight '%s' after ':' is not a finite number (expected FILE:WEIGHT, "
                             "e.g. %s:0.8)", arg, colon + 1, file);
    }
    if (len == 0) return cvx_error("--lora %s: no file before the weight", arg);
    if (len >= path_n) return cvx_error("--lora %s: path too long", arg);
    memcpy(path, arg, len);
    path[len] = 0;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return cvx_error("--lora %s: %s is a directory, expected a LoRA .safetensors file", arg, path);
    return 0;
}

/* ------------------------------------------------------------------ keys → modules */

static lmod *find_or_add(lmod **mods, int *n, int *cap, const char *name, size_t len, int kind) {
    for (int i = 0; i < *n; i++)
        if ((*mods)[i].kind == kind && strlen((*mods)[i].name) == len && !strncmp((*mods)[i].name, name, len))
            return &(*mods)[i];
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *mods = cvx_realloc(*mods, sizeof **mods * (size_t)*cap);
    }
    lmod *m = &(*mods)[(*n)++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%.*s", (int)len, name);
    m->kind = kind;
    m->target = -1;
    return m;
}

typedef struct {
    lmod *mods;
    int n, cap;
    keylist unknown, not_applied, text;
    int has_time_projection_weight;
} parsed;

/* Sort one key of the file into its module and role. -1 + cvx_error (DoRA, a name too long). */
static int parse_key(parsed *p, const cvx_tensor *t, const char *file) {
    const char *k = t->name, *rest = k;
    int kind = KIND_BARE;
    for (size_t i = 0; i < sizeof TEXT_ENCODER_PREFIXES / sizeof *TEXT_ENCODER_PREFIXES; i++)
        if (starts_with(k, TEXT_ENCODER_PREFIXES[i])) {
            keylist_add(&p->text, k);
            return 0;
        }
    if (starts_with(k, "transformer.")) kind = KIND_DIFFUSERS, rest = k + 12;
    else if (starts_with(k, "model.diffusion_model.")) kind = KIND_ORIGINAL, rest = k + 22;
    else if (starts_with(k, "diffusion_model.")) kind = KIND_ORIGINAL, rest = k + 16;
    else if (starts_with(k, "lora_unet_")) kind = KIND_KOHYA, rest = k + 10;
    if (strstr(rest, "lora_magnitude_vector"))
        return cvx_error("%s: key '%s' is a DoRA magnitude vector: DoRA adapters are not supported", file, k);
    int role = -1;
    size_t len = 0;
    for (size_t i = 0; i < sizeof SUFFIXES / sizeof *SUFFIXES && role < 0; i++)
        if (ends_with(rest, SUFFIXES[i].suffix)) role = SUFFIXES[i].role, len = strlen(rest) - strlen(SUFFIXES[i].suffix);
    if (role < 0 || len == 0) {
        keylist_add(&p->unknown, k);
        return 0;
    }
    if (len >= CVX_LORA_NAME) return cvx_error("%s: key '%s' is too long", file, k);
    if (role == ROLE_DORA || role == ROLE_DIFF) {   /* diffusers applies neither (dora_scale: filtered with a warning) */
        keylist_add(&p->not_applied, k);
        return 0;
    }
    /* the converter drops norm diffs ("just zeroed values") */
    const char *norm = strstr(rest, "norm");
    if (kind == KIND_ORIGINAL && role == ROLE_BIAS && norm && (size_t)(norm - rest) < len) {
        keylist_add(&p->not_applied, k);
        return 0;
    }
    if (kind == KIND_ORIGINAL && starts_with(rest, "time_projection") && (role == ROLE_A || role == ROLE_B))
        p->has_time_projection_weight = 1;
    lmod *m = find_or_add(&p->mods, &p->n, &p->cap, rest, len, kind);
    const cvx_tensor **slot = role == ROLE_A ? &m->A : role == ROLE_B ? &m->B : role == ROLE_BIAS ? &m->bias : &m->alpha;
    if (*slot) return cvx_error("%s: keys '%s' and '%s' name the same part of layer '%s'", file, (*slot)->name, k, m->name);
    *slot = t;
    return 0;
}

/* "a.b.c" with '_' for '.' (kohya names). */
static void underscored(const char *s, char *out, size_t n) {
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++) out[i] = s[i] == '.' ? '_' : s[i];
    out[i] = 0;
}

/* The target of a module (-1: none); kind becomes the semantics the match implies. */
static int match_target(lmod *m, const cvx_lora_target *t, int nt) {
    char u[CVX_LORA_NAME];
    for (int i = 0; i < nt; i++) {
        if (m->kind == KIND_KOHYA) {
            underscored(t[i].name, u, sizeof u);
            if (!strcmp(m->name, u)) return i;
            underscored(t[i].alias, u, sizeof u);
            if (t[i].alias[0] && !strcmp(m->name, u)) return i;
            continue;
        }
        if (m->kind != KIND_ORIGINAL && !strcmp(m->name, t[i].name)) {
            if (m->kind == KIND_BARE) m->kind = KIND_DIFFUSERS;
            return i;
        }
        if (m->kind != KIND_DIFFUSERS && t[i].alias[0] && !strcmp(m->name, t[i].alias)) {
            m->kind = KIND_ORIGINAL;   /* original names: the converter's semantics */
            return i;
        }
        if (m->kind == KIND_ORIGINAL && !strcmp(m->name, t[i].name)) {
            if (t[i].prefix_only) m->kind = KIND_DIFFUSERS;
            return i;
        }
    }
    return -1;
}

/* ------------------------------------------------------------------ lora_adapter_metadata */

typedef struct {
    int present, use_rslora;
    double r, lora_alpha;
    json_object *root, *rank_pattern, *alpha_pattern;
} lmeta;

/* peft get_pattern_key: a pattern key matches the module itself or a dotted suffix of it (a
 * leading '^' anchors at the start). The value of the first matching key, or def. */
static double pattern_value(json_object *pat, const char *module, double def) {
    if (!pat || !json_object_is_type(pat, json_type_object)) return def;
    json_object_object_foreach(pat, key, val) {
        const char *k = key[0] == '^' ? key + 1 : key;
        size_t a = strlen(module), b = strlen(k);
        if (!strcmp(module, k) || (key[0] != '^' && a > b && module[a - b - 1] == '.' && !strcmp(module + a - b, k)))
            return json_object_get_double(val);
    }
    return def;
}

static int read_metadata(const cvx_safetensors *st, const char *file, lmeta *md) {
    memset(md, 0, sizeof *md);
    const char *raw = cvx_st_metadata(st, "lora_adapter_metadata");
    if (!raw) return 0;
    md->root = json_tokener_parse(raw);
    if (!md->root || !json_object_is_type(md->root, json_type_object)) {
        if (md->root) json_object_put(md->root);
        md->root = NULL;
        return cvx_error("%s: metadata 'lora_adapter_metadata' is not a JSON object", file);
    }
    md->r = 8, md->lora_alpha = 8;   /* peft LoraConfig defaults */
    json_object_object_foreach(md->root, key, val) {
        if (!starts_with(key, "transformer.")) continue;
        md->present = 1;
        const char *f = key + 12;
        if (!strcmp(f, "r")) md->r = json_object_get_double(val);
        else if (!strcmp(f, "lora_alpha")) md->lora_alpha = json_object_get_double(val);
        else if (!strcmp(f, "rank_pattern")) md->rank_pattern = val;
        else if (!strcmp(f, "alpha_pattern")) md->alpha_pattern = val;
        else if (!strcmp(f, "use_rslora")) md->use_rslora = json_object_get_boolean(val);
        else if (!strcmp(f, "use_dora") && json_object_get_boolean(val))
            return cvx_error("%s: lora_adapter_metadata says use_dora: DoRA adapters are not supported", file);
    }
    if (md->present && !(md->r > 0))
        return cvx_error("%s: lora_adapter_metadata 'transformer.r' must be positive, got %g", file, md->r);
    return 0;
}

/* ------------------------------------------------------------------ checks and scales */

static int is_operand(const cvx_tensor *t) { return t->dtype == CVX_F32 || t->dtype == CVX_BF16 || t->dtype == CVX_F16; }

/* Every value of a LoRA tensor finite: "FILE: tensor 'NAME': non-finite value nan at index 3 (of 40)". */
static int check_finite_tensor(const cvx_tensor *t, const char *file) {
    float *v = cvx_alloc_f32((size_t)t->numel);
    cvx_tensor_to_f32(t, v);
    int rc = cvx_check_finite(v, (size_t)t->numel, t->name);
    free(v);
    if (rc) cvx_error_prefix("%s", file);
    return rc;
}

/* Shapes and values of a matched module against its layer. */
static int check_module(const lmod *m, const cvx_lora_target *t, const char *file, const char *family) {
    const int64_t out = t->w->shape[0], in = t->w->shape[1];
    char s[96];
    if (!m->A != !m->B)
        return cvx_error("%s: layer '%s' has %s but no %s", file, m->name, m->A ? m->A->name : m->B->name,
                         m->A ? "lora_B / lora_up" : "lora_A / lora_down");
    if (m->A) {
        if (!is_operand(m->A) || !is_operand(m->B))
            return cvx_error("%s: tensor '%s' has dtype %s, expected F32, BF16 or F16", file,
                             (is_operand(m->A) ? m->B : m->A)->name, cvx_dtype_name((is_operand(m->A) ? m->B : m->A)->dtype));
        if (m->A->ndim != 2 || m->A->shape[1] != in || m->A->shape[0] < 1)
            return cvx_error("%s: tensor '%s' has shape %s, but %s layer '%s' takes %lld inputs (expected [rank, %lld]: a "
                             "LoRA for another model size?)", file, m->A->name,
                             cvx_shape_str(m->A->ndim, m->A->shape, s, sizeof s), family, t->name, (long long)in,
                             (long long)in);
        if (m->B->ndim != 2 || m->B->shape[0] != out || m->B->shape[1] != m->A->shape[0])
            return cvx_error("%s: tensor '%s' has shape %s, expected [%lld, %lld] (%s layer '%s' has %lld outputs, "
                             "rank %lld from lora_A)", file, m->B->name, cvx_shape_str(m->B->ndim, m->B->shape, s, sizeof s),
                             (long long)out, (long long)m->A->shape[0], family, t->name, (long long)out,
                             (long long)m->A->shape[0]);
    }
    if (m->bias && (!is_operand(m->bias) || m->bias->numel != out))
        return cvx_error("%s: tensor '%s' (bias delta) has %lld elements of %s, expected %lld F32/BF16/F16", file,
                         m->bias->name, (long long)m->bias->numel, cvx_dtype_name(m->bias->dtype), (long long)out);
    if (m->alpha && (m->alpha->numel != 1 || !cvx_dtype_is_float(m->alpha->dtype)))
        return cvx_error("%s: tensor '%s' (alpha) must be one float, has %lld elements of %s", file, m->alpha->name,
                         (long long)m->alpha->numel, cvx_dtype_name(m->alpha->dtype));
    /* a NaN/Inf delta would only show as wrong latents (or a late "diverged"): named here */
    const cvx_tensor *ts[4] = {m->A, m->B, m->bias, m->alpha};
    for (int i = 0; i < 4; i++)
        if (ts[i] && check_finite_tensor(ts[i], file)) return -1;
    return 0;
}

static double alpha_of(const cvx_tensor *t) {
    float v;
    cvx_tensor_to_f32(t, &v);
    return v;
}

static int rank_of(const lmod *m) { return m->A ? (int)m->A->shape[0] : 0; }

/* peft's lora_alpha for the file without metadata: the rank of the first lora_B key in the state
 * dict diffusers builds (sorted keys; converted files: the converter's order = the targets'). */
static int first_rank(const lmod *mods, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        const lmod *m = &mods[i];
        if (!m->B || m->target < 0) continue;
        if (best < 0) { best = i; continue; }
        const lmod *b = &mods[best];
        int conv_m = m->kind != KIND_DIFFUSERS, conv_b = b->kind != KIND_DIFFUSERS;
        if (conv_m != conv_b ? conv_m < conv_b
                             : conv_m ? m->target < b->target : strcmp(m->B->name, b->B->name) < 0)
            best = i;
    }
    if (best < 0) {   /* bias deltas only: rank irrelevant */
        return 1;
    }
    return rank_of(&mods[best]);
}

/* The most common rank (get_peft_kwargs' r, the rank of a module with a bias delta alone). */
static int common_rank(const lmod *mods, int n) {
    int best = 0, best_count = 0;
    for (int i = 0; i < n; i++) {
        int r = rank_of(&mods[i]), c = 0;
        if (!r || mods[i].target < 0) continue;
        for (int j = 0; j < n; j++) c += mods[j].target >= 0 && rank_of(&mods[j]) == r;
        if (c > best_count) best = r, best_count = c;
    }
    return best ? best : 1;
}

/* ------------------------------------------------------------------ one file */

typedef struct {
    lora_term *terms;
    int n, cap;
} termvec;

static void terms_push(termvec *v, lora_term t) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 64;
        v->terms = cvx_realloc(v->terms, sizeof *v->terms * (size_t)v->cap);
    }
    v->terms[v->n++] = t;
}

static const char *family_hint(const lmod *mods, int n) {
    for (size_t h = 0; h < sizeof FAMILY_HINTS / sizeof *FAMILY_HINTS; h++)
        for (int i = 0; i < n; i++)
            if (strstr(mods[i].name, FAMILY_HINTS[h].needle)) return FAMILY_HINTS[h].family;
    return NULL;
}

static const char *format_name(int kind) {
    return kind == KIND_ORIGINAL ? "original / ComfyUI" : kind == KIND_KOHYA ? "kohya / musubi" : "diffusers / PEFT";
}

static int load_file(const cvx_lora_spec *spec, int adapter, cvx_safetensors *st, const cvx_lora_target *targets,
                     int nt, const char *family, termvec *out) {
    const char *file = spec->path;
    parsed p = {0};
    lmeta md = {0};
    int rc = -1;
    char buf[1024];
    for (int i = 0; i < cvx_st_count(st); i++)
        if (parse_key(&p, cvx_st_tensor(st, i), file)) goto done;
    if (read_metadata(st, file, &md)) goto done;
    /* match; keys that stay unused */
    int matched = 0, total = 0;
    keylist unmatched = p.unknown;
    for (int i = 0; i < p.n; i++) {
        lmod *m = &p.mods[i];
        if (m->kind == KIND_ORIGINAL && starts_with(m->name, "time_projection") && !p.has_time_projection_weight) {
            keylist_add(&p.not_applied, m->bias ? m->bias->name : m->name);   /* AccVideo: bias deltas alone */
            continue;
        }
        if (!m->A && !m->B && !m->bias) {   /* an .alpha alone */
            keylist_add(&unmatched, m->alpha->name);
            continue;
        }
        total++;
        if ((m->target = match_target(m, targets, nt)) < 0) {
            keylist_add(&unmatched, m->A ? m->A->name : m->B ? m->B->name : m->bias->name);
            continue;
        }
        if (check_module(m, &targets[m->target], file, family)) goto done;
        if (m->kind == KIND_DIFFUSERS && m->alpha) {   /* diffusers reads no alpha of its own format */
            keylist_add(&p.not_applied, m->alpha->name);
            m->alpha = NULL;
        }
        matched++;
    }
    if (total == 0) {
        cvx_error("%s: no LoRA layers in this file (%d keys%s)", file, cvx_st_count(st),
                  p.text.n ? ", only text-encoder ones" : "");
        goto done;
    }
    if (matched == 0) {
        const char *hint = family_hint(p.mods, p.n);
        keylist_str_max(&unmatched, 2, buf, sizeof buf);
        cvx_error("%s: none of its %d LoRA layers is a layer of this %s transformer (%s): %s%s%s", file, total, family,
                  buf, hint ? "a LoRA for " : "not a LoRA for this model", hint ? hint : "", hint ? "?" : "");
        goto done;
    }
    /* scales */
    const int r_first = first_rank(p.mods, p.n), r_common = common_rank(p.mods, p.n);
    int rmin = 1 << 30, rmax = 0, kind = -1, folded = 0;
    for (int i = 0; i < p.n; i++) {
        lmod *m = &p.mods[i];
        if (m->target < 0) continue;
        const int r = m->A ? rank_of(m) : r_common;
        double lora_alpha = r_first, rr = r;
        if (md.present) {
            lora_alpha = pattern_value(md.alpha_pattern, targets[m->target].name, md.lora_alpha);
            rr = pattern_value(md.rank_pattern, targets[m->target].name, md.r);
            if (m->A && rr != r) {
                cvx_error("%s: lora_adapter_metadata gives layer '%s' rank %g, its lora_A has rank %d", file,
                          targets[m->target].name, rr, r);
                goto done;
            }
        }
        const double scaling = spec->weight * lora_alpha / (md.use_rslora ? sqrt(rr) : rr);
        double fold = 1.0;
        if (m->alpha && m->A && (m->kind == KIND_ORIGINAL || m->kind == KIND_KOHYA)) {
            fold = alpha_of(m->alpha) / (double)r;
            folded = 1;
        }
        if (m->A) rmin = r < rmin ? r : rmin, rmax = r > rmax ? r : rmax;
        kind = kind < 0 ? m->kind : kind;
        terms_push(out, (lora_term){.A = m->A, .B = m->B, .bias = m->bias, .scale = fold * scaling,
                                    .bias_scale = scaling, .adapter = adapter, .rank = m->A ? r : 0,
                                    .target = m->target});
    }
    /* messages */
    char ranks[48];
    if (rmax == 0) snprintf(ranks, sizeof ranks, "bias deltas only");
    else if (rmin == rmax) snprintf(ranks, sizeof ranks, "rank %d", rmin);
    else snprintf(ranks, sizeof ranks, "ranks %d-%d", rmin, rmax);
    cvx_info("LoRA %s (weight %g): %d layer%s of the %s transformer, %s, %s keys%s%s", base_name(file), spec->weight,
             matched, matched == 1 ? "" : "s", family, ranks, format_name(kind), folded ? ", alpha/rank folded" : "",
             md.present ? ", lora_adapter_metadata" : "");
    if (unmatched.n) {
        keylist_str(&unmatched, buf, sizeof buf);
        cvx_warn("%s: %d key%s match no layer of the %s transformer and %s ignored: %s", file, unmatched.n,
                 unmatched.n == 1 ? "" : "s", family, unmatched.n == 1 ? "is" : "are", buf);
    }
    if (p.text.n) {
        keylist_str(&p.text, buf, sizeof buf);
        cvx_info("%s: %d text-encoder key%s ignored (transformer LoRAs only; the text encoder runs unchanged): %s", file,
                 p.text.n, p.text.n == 1 ? "" : "s", buf);
    }
    if (p.not_applied.n) {
        keylist_str(&p.not_applied, buf, sizeof buf);
        cvx_info("%s: %d key%s not applied, as diffusers does not apply them (full-weight .diff, norm .diff/.diff_b, "
                 "dora_scale, .alpha of diffusers keys): %s", file, p.not_applied.n, p.not_applied.n == 1 ? "" : "s", buf);
    }
    rc = 0;
done:
    free(p.mods);
    if (md.root) json_object_put(md.root);
    return rc;
}

/* ------------------------------------------------------------------ the set */

static int cmp_term(const void *a, const void *b) {
    const lora_term *x = a, *y = b;
    if (x->target != y->target) return x->target < y->target ? -1 : 1;
    return x->adapter < y->adapter ? -1 : x->adapter > y->adapter;
}

/* 1 when the file begins with GGUF's magic. */
static int starts_gguf(const char *path) {
    char m[4];
    const int fd = cvx_open_input(path);
    if (fd < 0) return cvx_clear_error(), 0;   /* cvx_st_open says why */
    const ssize_t n = read(fd, m, 4);
    close(fd);
    return n == 4 && !memcmp(m, "GGUF", 4);
}

cvx_lora_set *cvx_lora_load(const cvx_lora_spec *specs, int n, const cvx_lora_target *targets, int n_targets,
                            const char *family, int fuse) {
    cvx_lora_set *s = cvx_calloc(1, sizeof *s);
    s->files = cvx_calloc((size_t)(n > 0 ? n : 1), sizeof *s->files);
    s->targets = cvx_malloc(sizeof *targets * (size_t)(n_targets > 0 ? n_targets : 1));
    memcpy(s->targets, targets, sizeof *targets * (size_t)n_targets);
    s->n_targets = n_targets;
    s->fused = fuse;
    termvec tv = {0};
    for (int i = 0; i < n; i++) {
        if (starts_gguf(specs[i].path)) {   /* else the safetensors reader's "header length ..." */
            cvx_error("--lora %s: a GGUF file; LoRA adapters are read from .safetensors files (diffusers / PEFT, "
                      "Kijai, kohya keys)", specs[i].path);
            goto fail;
        }
        if (!(s->files[i] = cvx_st_open(specs[i].path))) {
            cvx_error_prefix("--lora");
            goto fail;
        }
        s->n_files = i + 1;
        if (!isfinite(specs[i].weight)) {
            cvx_error("--lora %s: weight %g is not a finite number", specs[i].path, specs[i].weight);
            goto fail;
        }
        if (load_file(&specs[i], i, s->files[i], s->targets, n_targets, family, &tv)) goto fail;
    }
    /* terms grouped by layer (qsort is not stable: the comparison orders adapters too) */
    if (tv.n) qsort(tv.terms, (size_t)tv.n, sizeof *tv.terms, cmp_term);
    s->terms = tv.terms, s->n_terms = tv.n;
    s->layers = cvx_calloc((size_t)(tv.n ? tv.n : 1), sizeof *s->layers);
    for (int i = 0; i < tv.n;) {
        int j = i;
        while (j < tv.n && tv.terms[j].target == tv.terms[i].target) j++;
        cvx_lora_layer *l = &s->layers[s->n_layers++];
        l->target = tv.terms[i].target;
        l->w = s->targets[l->target].w;
        l->b = s->targets[l->target].b;
        l->terms = &tv.terms[i];
        l->n_terms = j - i;
        i = j;
    }
    if (cvx_lora_build_index(s)) goto fail;
    if (fuse && cvx_lora_fuse_all(s)) goto fail;
    return s;
fail:
    if (!s->terms) free(tv.terms);
    cvx_lora_free(s);
    return NULL;
}

void cvx_lora_free(cvx_lora_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_layers; i++) {
        free(s->layers[i].fw_data);
        free(s->layers[i].fb_data);
    }
    for (int i = 0; i < s->n_files; i++) cvx_st_close(s->files[i]);
    free(s->files);
    free(s->targets);
    free(s->terms);
    free(s->layers);
    free(s->slots);
    free(s);
}

int cvx_lora_term_count(const cvx_lora_set *s) { return s ? s->n_terms : 0; }
int cvx_lora_layer_count(const cvx_lora_set *s) { return s ? s->n_layers : 0; }
int cvx_lora_is_fused(const cvx_lora_set *s) { return s && s->fused; }
size_t cvx_lora_fused_bytes(const cvx_lora_set *s) { return s ? s->fused_bytes : 0; }

void cvx_lora_term_at(const cvx_lora_set *s, int i, cvx_lora_term_info *out) {
    CVX_CHECK(i >= 0 && i < s->n_terms);
    const lora_term *t = &s->terms[i];
    *out = (cvx_lora_term_info){.module = s->targets[t->target].name, .adapter = t->adapter, .rank = t->rank,
                                .scale = t->scale, .bias_scale = t->bias_scale, .has_bias = t->bias != NULL};
}
