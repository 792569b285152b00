/* JSON config files (config.json, scheduler_config.json, generation_config.json) on json-c,
 * with typed getters whose errors name the file, the key and what was expected:
 *   "vae/config.json: key 'scaling_factor' must be a number, got "abc"". */
#ifndef CVX_CONFIG_H
#define CVX_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <json-c/json.h>

typedef struct {
    json_object *root;
    char path[4096];
} cvx_config;

/* Load and parse; the root must be an object. -1 + cvx_error on failure. */
int cvx_config_load(cvx_config *c, const char *path);
/* Parse from a string (label names it in messages). */
int cvx_config_parse(cvx_config *c, const char *text, size_t len, const char *label);
void cvx_config_free(cvx_config *c);

/* Present and not null. */
int cvx_cfg_has(const cvx_config *c, const char *key);

/* Required keys: -1 + error when missing, null or of the wrong type. */
int cvx_cfg_int(const cvx_config *c, const char *key, int64_t *out);
int cvx_cfg_num(const cvx_config *c, const char *key, double *out);   /* int or double */
int cvx_cfg_bool(const cvx_config *c, const char *key, int *out);
int cvx_cfg_str(const cvx_config *c, const char *key, const char **out); /* owned by c */
/* Integer array of at most `max` entries; *n gets the count. */
int cvx_cfg_int_array(const cvx_config *c, const char *key, int64_t *out, int max, int *n);
int cvx_cfg_str_array(const cvx_config *c, const char *key, const char **out, int max, int *n);
int cvx_cfg_num_array(const cvx_config *c, const char *key, double *out, int max, int *n);   /* ints or doubles */
int cvx_cfg_bool_array(const cvx_config *c, const char *key, int *out, int max, int *n);

/* Optional keys: the default when missing or null; -1 + error only on a wrong type. */
int cvx_cfg_int_or(const cvx_config *c, const char *key, int64_t def, int64_t *out);
int cvx_cfg_num_or(const cvx_config *c, const char *key, double def, double *out);
int cvx_cfg_bool_or(const cvx_config *c, const char *key, int def, int *out);
int cvx_cfg_str_or(const cvx_config *c, const char *key, const char *def, const char **out);

/* generation_config.json: read-modify-write that keeps every key it does not set.
 * `updates` is an object whose keys replace (or add to) those in the file; the file is
 * created if absent and written atomically. Ownership of `updates` stays with the caller. */
int cvx_genconfig_update(const char *path, json_object *updates);
/* The text cvx_genconfig_update would write (NUL-terminated, *len bytes, free()), for a caller
 * that commits it with other files as one output set (fileio.h cvx_outset). NULL + cvx_error. */
char *cvx_genconfig_render(const char *path, json_object *updates, size_t *len);
/* The string `key` of the JSON file at path into out ("" when absent or null). -1 + error when the
 * file is invalid or the value is not a string. */
int cvx_genconfig_get_str(const char *path, const char *key, char *out, size_t n);

#endif
