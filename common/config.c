/* Typed getters over json-c with errors that name the file, the key and what was expected. */
#include "config.h"
#include "error.h"
#include "fileio.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cvx_config_parse(cvx_config *c, const char *text, size_t len, const char *label) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", label);
    /* Strict mode: the files are written by Python's json module; anything looser (comments,
     * trailing commas, odd numbers) would be written back differently than it was read. */
    json_tokener *tok = json_tokener_new();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!root || err != json_tokener_success) {
        if (root) json_object_put(root);
        return cvx_error("%s: invalid JSON (%s)", label,
                         err == json_tokener_continue ? "unexpected end of file" : json_tokener_error_desc(err));
    }
    for (size_t i = end; i < len; i++)
        if (text[i] != ' ' && text[i] != '\n' && text[i] != '\r' && text[i] != '\t') {
            json_object_put(root);
            return cvx_error("%s: invalid JSON (unexpected text after the top-level value)", label);
        }
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return cvx_error("%s: expected a JSON object at the top level", label);
    }
    c->root = root;
    return 0;
}

int cvx_config_load(cvx_config *c, const char *path) {
    size_t len;
    memset(c, 0, sizeof *c);
    char *text = cvx_read_file(path, &len);
    if (!text) return -1;
    int rc = cvx_config_parse(c, text, len, path);
    free(text);
    return rc;
}

void cvx_config_free(cvx_config *c) {
    if (c->root) json_object_put(c->root);
    c->root = NULL;
}

static json_object *get(const cvx_config *c, const char *key) {
    json_object *v = NULL;
    if (!c->root || !json_object_object_get_ex(c->root, key, &v)) return NULL;
    return json_object_is_type(v, json_type_null) ? NULL : v;
}

int cvx_cfg_has(const cvx_config *c, const char *key) { return get(c, key) != NULL; }

static int missing(const cvx_config *c, const char *key, const char *what) {
    return cvx_error("%s: key '%s' is missing (expected %s)", c->path, key, what);
}
static int wrong(const cvx_config *c, const char *key, const char *what, json_object *v) {
    const char *s = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
    return cvx_error("%s: key '%s' must be %s, got %.80s", c->path, key, what, s);
}

static int as_int(const cvx_config *c, const char *key, json_object *v, int64_t *out) {
    if (json_object_is_type(v, json_type_int)) {
        /* json-c clamps integers beyond int64 to its limits: treat the limits as out of range */
        int64_t i = json_object_get_int64(v);
        if (i == INT64_MAX || i == INT64_MIN) return wrong(c, key, "an integer within 64-bit range", v);
        *out = i;
        return 0;
    }
    if (json_object_is_type(v, json_type_double)) {  /* 2.0 is fine, 2.5 is not */
        double d = json_object_get_double(v);
        /* range check before the cast: converting an out-of-range double is undefined */
        if (d >= -0x1p63 && d < 0x1p63 && d == (double)(int64_t)d) { *out = (int64_t)d; return 0; }
    }
    return wrong(c, key, "an integer", v);
}
static int as_num(const cvx_config *c, const char *key, json_object *v, double *out) {
    if (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)) {
        *out = json_object_get_double(v);
        return 0;
    }
    return wrong(c, key, "a number", v);
}
static int as_bool(const cvx_config *c, const char *key, json_object *v, int *out) {
    if (json_object_is_type(v, json_type_boolean)) { *out = json_object_get_boolean(v); return 0; }
    return wrong(c, key, "true or false", v);
}
static int as_str(const cvx_config *c, const char *key, json_object *v, const char **out) {
    if (json_object_is_type(v, json_type_string)) { *out = json_object_get_string(v); return 0; }
    return wrong(c, key, "a string", v);
}

int cvx_cfg_int(const cvx_config *c, const char *key, int64_t *out) {
    json_object *v = get(c, key);
    return v ? as_int(c, key, v, out) : missing(c, key, "an integer");
}
int cvx_cfg_num(const cvx_config *c, const char *key, double *out) {
    json_object *v = get(c, key);
    return v ? as_num(c, key, v, out) : missing(c, key, "a number");
}
int cvx_cfg_bool(const cvx_config *c, const char *key, int *out) {
    json_object *v = get(c, key);
    return v ? as_bool(c, key, v, out) : missing(c, key, "true or false");
}
int cvx_cfg_str(const cvx_config *c, const char *key, const char **out) {
    json_object *v = get(c, key);
    return v ? as_str(c, key, v, out) : missing(c, key, "a string");
}

int cvx_cfg_int_or(const cvx_config *c, const char *key, int64_t def, int64_t *out) {
    json_object *v = get(c, key);
    if (!v) { *out = def; return 0; }
    return as_int(c, key, v, out);
}
int cvx_cfg_num_or(const cvx_config *c, const char *key, double def, double *out) {
    json_object *v = get(c, key);
    if (!v) { *out = def; return 0; }
    return as_num(c, key, v, out);
}
int cvx_cfg_bool_or(const cvx_config *c, const char *key, int def, int *out) {
    json_object *v = get(c, key);
    if (!v) { *out = def; return 0; }
    return as_bool(c, key, v, out);
}
int cvx_cfg_str_or(const cvx_config *c, const char *key, const char *def, const char **out) {
    json_object *v = get(c, key);
    if (!v) { *out = def; return 0; }
    return as_str(c, key, v, out);
}

int cvx_cfg_int_array(const cvx_config *c, const char *key, int64_t *out, int max, int *n) {
    json_object *v = get(c, key);
    if (!v) return missing(c, key, "an array of integers");
    if (!json_object_is_type(v, json_type_array)) return wrong(c, key, "an array of integers", v);
    size_t len = json_object_array_length(v);
    if (len > (size_t)max) return cvx_error("%s: key '%s' has %zu entries, at most %d supported", c->path, key, len, max);
    for (size_t i = 0; i < len; i++)
        if (as_int(c, key, json_object_array_get_idx(v, i), &out[i]) != 0) return -1;
    *n = (int)len;
    return 0;
}

int cvx_cfg_num_array(const cvx_config *c, const char *key, double *out, int max, int *n) {
    json_object *v = get(c, key);
    if (!v) return missing(c, key, "an array of numbers");
    if (!json_object_is_type(v, json_type_array)) return wrong(c, key, "an array of numbers", v);
    size_t len = json_object_array_length(v);
    if (len > (size_t)max) return cvx_error("%s: key '%s' has %zu entries, at most %d supported", c->path, key, len, max);
    for (size_t i = 0; i < len; i++)
        if (as_num(c, key, json_object_array_get_idx(v, i), &out[i]) != 0) return -1;
    *n = (int)len;
    return 0;
}

int cvx_cfg_bool_array(const cvx_config *c, const char *key, int *out, int max, int *n) {
    json_object *v = get(c, key);
    if (!v) return missing(c, key, "an array of true/false");
    if (!json_object_is_type(v, json_type_array)) return wrong(c, key, "an array of true/false", v);
    size_t len = json_object_array_length(v);
    if (len > (size_t)max) return cvx_error("%s: key '%s' has %zu entries, at most %d supported", c->path, key, len, max);
    for (size_t i = 0; i < len; i++)
        if (as_bool(c, key, json_object_array_get_idx(v, i), &out[i]) != 0) return -1;
    *n = (int)len;
    return 0;
}

int cvx_cfg_str_array(const cvx_config *c, const char *key, const char **out, int max, int *n) {
    json_object *v = get(c, key);
    if (!v) return missing(c, key, "an array of strings");
    if (!json_object_is_type(v, json_type_array)) return wrong(c, key, "an array of strings", v);
    size_t len = json_object_array_length(v);
    if (len > (size_t)max) return cvx_error("%s: key '%s' has %zu entries, at most %d supported", c->path, key, len, max);
    for (size_t i = 0; i < len; i++)
        if (as_str(c, key, json_object_array_get_idx(v, i), &out[i]) != 0) return -1;
    *n = (int)len;
    return 0;
}

char *cvx_genconfig_render(const char *path, json_object *updates, size_t *len) {
    cvx_config c;
    json_object *root;
    if (cvx_is_file(path)) {
        if (cvx_config_load(&c, path) != 0) return NULL;
        root = c.root;
    } else {
        root = json_object_new_object();
    }
    json_object_object_foreach(updates, key, val) json_object_object_add(root, key, json_object_get(val));
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                              JSON_C_TO_STRING_NOSLASHESCAPE);
    *len = strlen(text);
    char *buf = cvx_malloc(*len + 2);
    memcpy(buf, text, *len);
    buf[(*len)++] = '\n';
    buf[*len] = 0;
    json_object_put(root);
    return buf;
}

int cvx_genconfig_update(const char *path, json_object *updates) {
    size_t len;
    char *buf = cvx_genconfig_render(path, updates, &len);
    if (!buf) return -1;
    int rc = cvx_write_file_atomic(path, buf, len);
    free(buf);
    return rc;
}

int cvx_genconfig_get_str(const char *path, const char *key, char *out, size_t n) {
    cvx_config c;
    const char *v = "";
    if (cvx_config_load(&c, path)) return -1;
    int rc = cvx_cfg_str_or(&c, key, "", &v);
    if (!rc) snprintf(out, n, "%s", v);
    cvx_config_free(&c);
    return rc;
}
