/* Validation of inputs before any long computation or write; see validate.h. */
#include "validate.h"
#include "error.h"
#include "fileio.h"
#include "safetensors.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- non-finite values ---- */

size_t cvx_first_nonfinite_ref(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

/* NaN and ±Inf are exactly the floats whose 8 exponent bits are all ones. Blocks of 1024: the
 * OR-reduction vectorizes (16 floats per AVX-512 op); only a block with a hit is rescanned. */
size_t cvx_first_nonfinite(const float *x, size_t n) {
    const size_t B = 1024;
    for (size_t b = 0; b < n; b += B) {
        size_t e = b + B < n ? b + B : n;
        uint32_t hit = 0;
#pragma omp simd reduction(| : hit)
        for (size_t i = b; i < e; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            hit |= ((u & 0x7f800000u) == 0x7f800000u);
        }
        if (hit) return b + cvx_first_nonfinite_ref(x + b, e - b);
    }
    return n;
}

int cvx_check_finite(const float *x, size_t n, const char *name) {
    size_t i = cvx_first_nonfinite(x, n);
    if (i == n) return 0;
    return cvx_error("tensor '%s': non-finite value %g at index %zu (of %zu); the input is corrupt or "
                     "the computation overflowed",
                     name, (double)x[i], i, n);
}

/* ---- config numbers ---- */

static json_object *cfg_get(const cvx_config *c, const char *key) {
    json_object *v;
    if (!c->root || !json_object_object_get_ex(c->root, key, &v) || json_object_is_type(v, json_type_null)) return NULL;
    return v;
}

static int num_of(const cvx_config *c, const char *key, json_object *v, double *out) {
    if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
        return cvx_error("%s: key '%s' must be a number, got %s", c->path, key,
                         json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    *out = json_object_get_double(v);
    if (!isfinite(*out)) return cvx_error("%s: key '%s' = %g is not a finite number", c->path, key, *out);
    return 0;
}

int cvx_cfg_num_range_or(const cvx_config *c, const char *key, double def, double lo, double hi, int lo_open,
                         double *out) {
    json_object *v = cfg_get(c, key);
    double d = def;
    if (v && num_of(c, key, v, &d)) return -1;
    if (d < lo || d > hi || (lo_open && d == lo))
        return cvx_error("%s: key '%s' = %.9g is out of range: must be in %c%g, %g]", c->path, key, d,
                         lo_open ? '(' : '[', lo, hi);
    *out = d;
    return 0;
}

int cvx_cfg_int_range_or(const cvx_config *c, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *out) {
    json_object *v = cfg_get(c, key);
    int64_t k = def;
    if (v) {
        double d;
        if (num_of(c, key, v, &d)) return -1;
        if (d != floor(d)) return cvx_error("%s: key '%s' = %.9g must be an integer", c->path, key, d);
        if (d < (double)lo || d > (double)hi)
            return cvx_error("%s: key '%s' = %.17g is out of range [%" PRId64 ", %" PRId64 "]", c->path, key, d, lo, hi);
        k = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : (int64_t)d;
    }
    if (k < lo || k > hi)
        return cvx_error("%s: key '%s' = %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", c->path, key, k, lo, hi);
    *out = k;
    return 0;
}

/* Limits well above any released CogVideoX / T5 model, far below what would exhaust memory
 * before the number is even used. One table for the three model configs: the keys do not clash
 * in meaning (norm_eps is an epsilon in both the transformer and the VAE). */
typedef struct {
    const char *key;
    double lo, hi;
    int lo_open, integer;
} cfg_limit;
static const cfg_limit MODEL_LIMITS[] = {
    /* transformer */
    {"num_layers", 1, 1024, 0, 1},           {"num_attention_heads", 1, 1024, 0, 1},
    {"attention_head_dim", 1, 4096, 0, 1},   {"in_channels", 1, 4096, 0, 1},
    {"out_channels", 1, 4096, 0, 1},         {"patch_size", 1, 64, 0, 1},
    {"patch_size_t", 1, 64, 0, 1},           {"max_text_seq_length", 1, 65536, 0, 1},
    {"text_embed_dim", 1, 65536, 0, 1},      {"time_embed_dim", 1, 65536, 0, 1},
    {"sample_frames", 1, 100000, 0, 1},      {"sample_height", 1, 65536, 0, 1},
    {"sample_width", 1, 65536, 0, 1},        {"norm_eps", 0, 1, 1, 0},
    {"spatial_interpolation_scale", 0, 1e6, 1, 0}, {"temporal_interpolation_scale", 0, 1e6, 1, 0},
    {"temporal_compression_ratio", 1, 64, 0, 0}, {"freq_shift", -1e6, 1e6, 0, 0},
    {"ofs_embed_dim", 1, 65536, 0, 1},
    /* VAE */
    {"latent_channels", 1, 4096, 0, 1},      {"layers_per_block", 1, 64, 0, 1},
    {"norm_num_groups", 1, 4096, 0, 1},      {"scaling_factor", 0, 1e3, 1, 0},
    /* T5 */
    {"d_model", 1, 65536, 0, 1},             {"d_kv", 1, 65536, 0, 1},
    {"d_ff", 1, 1 << 20, 0, 1},              {"num_heads", 1, 1024, 0, 1},
    {"vocab_size", 1, 10000000, 0, 1},       {"relative_attention_num_buckets", 1, 65536, 0, 1},
    {"relative_attention_max_distance", 1, 1 << 20, 0, 1}, {"layer_norm_epsilon", 0, 1, 1, 0},
};

static int check_limits(const cvx_config *c, const cfg_limit *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!cfg_get(c, t[i].key)) continue;
        if (t[i].integer) {
            int64_t v;
            if (cvx_cfg_int_range_or(c, t[i].key, 0, (int64_t)t[i].lo, (int64_t)t[i].hi, &v)) return -1;
        } else {
            double v;
            if (cvx_cfg_num_range_or(c, t[i].key, 0, t[i].lo, t[i].hi, t[i].lo_open, &v)) return -1;
        }
    }
    return 0;
}

int cvx_check_model_config(const cvx_config *c) {
    if (check_limits(c, MODEL_LIMITS, sizeof MODEL_LIMITS / sizeof MODEL_LIMITS[0])) return -1;
    json_object *a = cfg_get(c, "block_out_channels");
    if (a && json_object_is_type(a, json_type_array)) {
        size_t n = json_object_array_length(a);
        if (n < 1 || n > 16) return cvx_error("%s: key 'block_out_channels' has %zu entries, expected 1..16", c->path, n);
        for (size_t i = 0; i < n; i++) {
            json_object *e = json_object_array_get_idx(a, i);
            double d = json_object_get_double(e);
            if (!json_object_is_type(e, json_type_int) || d < 1 || d > 65536)
                return cvx_error("%s: key 'block_out_channels'[%zu] = %s, expected an integer in [1, 65536]", c->path,
                                 i, json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN));
        }
    }
    return 0;
}

/* ---- generation_config.json ---- */

static const cfg_limit GENCONFIG_LIMITS[] = {
    {"fps", 1, 240, 0, 1},          {"frames", 1, 100000, 0, 1},
    {"num_frames", 1, 100000, 0, 1}, {"height", 1, 65536, 0, 1},
    {"width", 1, 65536, 0, 1},      {"num_inference_steps", 1, 100000, 0, 1},
    {"guidance_scale", 0, 1e6, 0, 0}, {"seed", 0, 18446744073709551615.0, 0, 0},
    {"max_sequence_length", 1, 65536, 0, 1},
};
static const char *const GENCONFIG_TEXT_KEYS[] = {"prompt", "negative_prompt", "model_id"};

int cvx_genconfig_validate(const cvx_config *gc) {
    if (check_limits(gc, GENCONFIG_LIMITS, sizeof GENCONFIG_LIMITS / sizeof GENCONFIG_LIMITS[0])) return -1;
    for (size_t i = 0; i < sizeof GENCONFIG_TEXT_KEYS / sizeof GENCONFIG_TEXT_KEYS[0]; i++) {
        json_object *v = cfg_get(gc, GENCONFIG_TEXT_KEYS[i]);
        if (!v) continue;
        if (!json_object_is_type(v, json_type_string))
            return cvx_error("%s: key '%s' must be a string", gc->path, GENCONFIG_TEXT_KEYS[i]);
        size_t bad;
        if (!cvx_utf8_valid(json_object_get_string(v), (size_t)json_object_get_string_len(v), &bad))
            return cvx_error("%s: key '%s' is not valid UTF-8 (byte %zu)", gc->path, GENCONFIG_TEXT_KEYS[i], bad);
    }
    /* content hashes recorded by the stages (fileio.h cvx_file_xxh64): 16 lowercase hex digits */
    json_object_object_foreach(gc->root, k, v) {
        size_t kl = strlen(k);
        if (kl < 6 || strcmp(k + kl - 6, "_xxh64") != 0) continue;
        if (!v || json_object_is_type(v, json_type_null)) continue;   /* invalidated by a later run (check_pair) */
        const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
        int ok = strlen(s) == 16;
        for (int i = 0; ok && i < 16; i++) ok = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
        if (!ok) return cvx_error("%s: key '%s' must be 16 hex digits (an xxh64 hash)", gc->path, k);
    }
    return 0;
}

int cvx_genconfig_check_pair(const cvx_config *gc, const char *data_path, const char *key) {
    json_object *v = NULL;
    if (gc->root && json_object_object_get_ex(gc->root, key, &v) && !v) {
        /* present and null: a later run replaced what the data file was made from (a stage-1 run
         * after stage 2 nulls stage2_latents_xxh64, cvx_genconfig_record_encode_set) */
        const char *d = strrchr(data_path, '/'), *c = strrchr(gc->path, '/');
        int stage = 0;
        if (sscanf(key, "stage%d_", &stage) != 1) stage = 0;
        char again[32] = "the stage that writes it";
        if (stage > 0) snprintf(again, sizeof again, "stage %d", stage);
        return cvx_error("%s does not belong to %s: '%s' is null there (a later run into this directory replaced "
                         "the inputs it was made from; the file is left from before): run %s again",
                         d ? d + 1 : data_path, c ? c + 1 : gc->path, key, again);
    }
    v = cfg_get(gc, key);
    if (!v) {
        /* a note, not a warning: hand-made directories and older builds are normal */
        cvx_debug("%s has no '%s' (written by an older build?): cannot check that %s belongs to it", gc->path, key,
                  data_path);
        return 0;
    }
    if (!json_object_is_type(v, json_type_string))
        return cvx_error("%s: key '%s' must be 16 hex digits (an xxh64 hash)", gc->path, key);
    if (cvx_check_file_hash(data_path, json_object_get_string(v), gc->path) == 0) return 0;
    /* a damaged file (empty, truncated) is that, not "from different runs" (issue 21): the
     * safetensors reader's own message when it cannot read it */
    const size_t len = strlen(data_path);
    char why[1024];
    snprintf(why, sizeof why, "%s", cvx_last_error());
    if (len > 12 && !strcmp(data_path + len - 12, ".safetensors")) {
        cvx_safetensors *st = cvx_st_open(data_path);
        if (!st) return -1;
        cvx_st_close(st);
    }
    return cvx_error("%s", why);
}

/* ---- text ---- */

int cvx_utf8_valid(const char *str, size_t n, size_t *bad_offset) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; min = 0x80; }
        else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; min = 0x800; }
        else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; min = 0x10000; }
        else goto bad;
        if (n - i < len) goto bad;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) goto bad;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) goto bad;
        i += len;
    }
    return 1;
bad:
    if (bad_offset) *bad_offset = i;
    return 0;
}

int cvx_check_prompt(const char *s, const char *what) {
    size_t n = strlen(s), bad;
    if (!cvx_utf8_valid(s, n, &bad))
        return cvx_error("%s is not valid UTF-8 (byte %zu is 0x%02x); save the text as UTF-8", what, bad,
                         (unsigned char)s[bad]);
    int visible = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
            return cvx_error("%s contains control character 0x%02x at byte %zu", what, c, i);
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\v' && c != '\f') visible = 1;
    }
    if (!visible) return cvx_error("%s is empty or only whitespace", what);
    return 0;
}
