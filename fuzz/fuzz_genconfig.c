/* libFuzzer target: generation_config.json read-modify-write (cvx_genconfig_update). The input is
 * the file as found on disk; the update sets two keys. Properties checked:
 *   - the file parses as an object  =>  update succeeds, the result reads back and holds the
 *     updates and (for strict JSON input) every other key of the input unchanged;
 *   - otherwise                      =>  -1, an error naming the file, and the file untouched.
 * The temp directory is on /dev/shm when it exists (each update fsyncs). */
#include "config.h"
#include "error.h"
#include "fileio.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[4096], g_path[4200];
static json_object *g_updates;

/* Same JSON value. Not json_object_equal (NaN != NaN) nor the serialized text: json-c keeps a
 * lenient number's spelling ("02e-" is read as 2.0 and written as "02", read back as the int 2). */
static int same(json_object *a, json_object *b) {
    json_type t = json_object_get_type(a), tb = json_object_get_type(b);
    /* json-c reads "02e-" as the double 2 but writes it back as "02", an int: compare numbers */
    if ((t == json_type_int || t == json_type_double) && (tb == json_type_int || tb == json_type_double) && t != tb)
        return json_object_get_double(a) == json_object_get_double(b);
    if (t != tb) return 0;
    switch (t) {
    case json_type_null: return 1;
    case json_type_boolean: return json_object_get_boolean(a) == json_object_get_boolean(b);
    case json_type_int:
        return json_object_get_int64(a) == json_object_get_int64(b) &&
               json_object_get_uint64(a) == json_object_get_uint64(b);
    case json_type_double: {
        double x = json_object_get_double(a), y = json_object_get_double(b);
        return x == y || (isnan(x) && isnan(y));
    }
    case json_type_string:
        return json_object_get_string_len(a) == json_object_get_string_len(b) &&
               memcmp(json_object_get_string(a), json_object_get_string(b), (size_t)json_object_get_string_len(a)) == 0;
    case json_type_array: {
        size_t n = json_object_array_length(a);
        if (n != json_object_array_length(b)) return 0;
        for (size_t i = 0; i < n; i++)
            if (!same(json_object_array_get_idx(a, i), json_object_array_get_idx(b, i))) return 0;
        return 1;
    }
    case json_type_object: {
        if (json_object_object_length(a) != json_object_object_length(b)) return 0;
        json_object_object_foreach(a, k, va) {
            json_object *vb;
            if (!json_object_object_get_ex(b, k, &vb) || !same(va, vb)) return 0;
        }
        return 1;
    }
    }
    return 0;
}

/* Input that json-c accepts only in its default lenient mode ("1e", "02", trailing commas,
 * comments) may legitimately change when written back ("92233720368547758070e" is read as the
 * double 9.2e19, written as the integer text, read back clamped to UINT64_MAX); the
 * keeps-every-key check applies to strict JSON. */
static int is_strict_json(const uint8_t *data, size_t size) {
    json_tokener *tok = json_tokener_new();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *o = json_tokener_parse_ex(tok, (const char *)data, (int)size);
    int ok = o && json_tokener_get_error(tok) == json_tokener_success;
    json_object_put(o);
    json_tokener_free(tok);
    return ok;
}

static void cleanup(void) {
    unlink(g_path);
    rmdir(g_dir);
    json_object_put(g_updates);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    cvx_set_verbosity(0);
    const char *tmp = cvx_is_dir("/dev/shm") && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/cvx_fuzz_genconfig.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); exit(1); }
    snprintf(g_path, sizeof g_path, "%s/generation_config.json", g_dir);
    g_updates = json_object_new_object();
    json_object_object_add(g_updates, "num_frames", json_object_new_int(49));
    json_object_object_add(g_updates, "prompt", json_object_new_string("a cat \"quoted\" / \\ \xc3\xa9"));
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(g_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) { perror(g_path); abort(); }

    cvx_config before;
    int parsed = cvx_config_parse(&before, (const char *)data, size, "before") == 0;
    cvx_clear_error();
    int rc = cvx_genconfig_update(g_path, g_updates);
    if (!parsed) {
        if (rc != -1 || !strstr(cvx_last_error(), g_path)) abort();
        size_t len;
        char *now = cvx_read_file(g_path, &len);  /* a failed update leaves the file as it was */
        if (!now || len != size || memcmp(now, data, size) != 0) abort();
        free(now);
        cvx_config_free(&before);
        return 0;
    }
    if (rc != 0) abort();
    cvx_config after;
    if (cvx_config_load(&after, g_path) != 0) abort();  /* what we wrote must read back */
    json_object_object_foreach(g_updates, ukey, uval) {
        json_object *v;
        if (!json_object_object_get_ex(after.root, ukey, &v) || !same(v, uval)) abort();
    }
    int strict = is_strict_json(data, size);
    json_object_object_foreach(before.root, key, val) {  /* unknown keys are kept */
        if (!strict) break;
        json_object *v;
        if (json_object_object_get_ex(g_updates, key, NULL)) continue;
        if (!json_object_object_get_ex(after.root, key, &v) || !same(v, val)) abort();
    }
    cvx_config_free(&after);
    cvx_config_free(&before);
    return 0;
}
