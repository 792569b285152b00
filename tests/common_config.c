/* JSON config getters (errors name file, key, expected type, value) and the
 * generation_config.json read-modify-write that keeps unknown keys. */
#include "testutil.h"
#include "config.h"
#include "fileio.h"

static const char *k_json =
    "{\"scaling_factor\": 1.15258426, \"layers\": 3, \"as_float_int\": 2.0, \"name\": \"vae\","
    " \"flag\": true, \"nothing\": null, \"blocks\": [128, 256, 256, 512], \"types\": [\"a\", \"b\"],"
    " \"bad_num\": \"abc\", \"half\": 2.5}";

static void load(cvx_config *c) { ASSERT_OK(cvx_config_parse(c, k_json, strlen(k_json), "vae/config.json")); }

static void expect_error(int rc, const char *a, const char *b) {
    assert_int_equal(rc, -1);
    const char *e = cvx_last_error();
    print_message("  -> %s\n", e);
    assert_non_null(strstr(e, "vae/config.json"));
    if (a) assert_non_null(strstr(e, a));
    if (b) assert_non_null(strstr(e, b));
}

static void test_getters(void **state) {
    (void)state;
    cvx_config c;
    load(&c);
    int64_t i;
    double d;
    int b;
    const char *s;
    ASSERT_OK(cvx_cfg_num(&c, "scaling_factor", &d));
    assert_true(d == 1.15258426);
    ASSERT_OK(cvx_cfg_num(&c, "layers", &d));
    assert_true(d == 3.0);
    ASSERT_OK(cvx_cfg_int(&c, "layers", &i));
    assert_int_equal(i, 3);
    ASSERT_OK(cvx_cfg_int(&c, "as_float_int", &i));
    assert_int_equal(i, 2);
    ASSERT_OK(cvx_cfg_bool(&c, "flag", &b));
    assert_int_equal(b, 1);
    ASSERT_OK(cvx_cfg_str(&c, "name", &s));
    assert_string_equal(s, "vae");
    int64_t arr[8];
    int n;
    ASSERT_OK(cvx_cfg_int_array(&c, "blocks", arr, 8, &n));
    assert_int_equal(n, 4);
    assert_int_equal(arr[3], 512);
    const char *strs[4];
    ASSERT_OK(cvx_cfg_str_array(&c, "types", strs, 4, &n));
    assert_int_equal(n, 2);
    assert_string_equal(strs[1], "b");
    assert_true(cvx_cfg_has(&c, "layers"));
    assert_false(cvx_cfg_has(&c, "nothing"));   /* null counts as absent */
    assert_false(cvx_cfg_has(&c, "absent"));
    /* defaults */
    ASSERT_OK(cvx_cfg_int_or(&c, "absent", 7, &i));
    assert_int_equal(i, 7);
    ASSERT_OK(cvx_cfg_int_or(&c, "nothing", 8, &i));
    assert_int_equal(i, 8);
    ASSERT_OK(cvx_cfg_num_or(&c, "absent", 0.5, &d));
    assert_true(d == 0.5);
    ASSERT_OK(cvx_cfg_bool_or(&c, "absent", 1, &b));
    assert_int_equal(b, 1);
    ASSERT_OK(cvx_cfg_str_or(&c, "absent", "dflt", &s));
    assert_string_equal(s, "dflt");
    cvx_config_free(&c);
}

static void test_getter_errors(void **state) {
    (void)state;
    cvx_config c;
    load(&c);
    int64_t i, arr[2];
    double d;
    int b, n;
    const char *s;
    expect_error(cvx_cfg_num(&c, "bad_num", &d), "'bad_num' must be a number", "\"abc\"");
    expect_error(cvx_cfg_num(&c, "absent", &d), "'absent' is missing", "number");
    expect_error(cvx_cfg_int(&c, "half", &i), "'half' must be an integer", "2.5");
    expect_error(cvx_cfg_int(&c, "nothing", &i), "'nothing' is missing", NULL);
    expect_error(cvx_cfg_bool(&c, "layers", &b), "'layers' must be true or false", "3");
    expect_error(cvx_cfg_str(&c, "layers", &s), "'layers' must be a string", NULL);
    expect_error(cvx_cfg_int_array(&c, "name", arr, 2, &n), "array of integers", NULL);
    expect_error(cvx_cfg_int_array(&c, "blocks", arr, 2, &n), "4 entries", "at most 2");
    expect_error(cvx_cfg_int_or(&c, "name", 1, &i), "'name' must be an integer", NULL);  /* wrong type, not defaulted */
    cvx_config_free(&c);

    assert_int_equal(cvx_config_parse(&c, "{\"a\": ", 6, "x/config.json"), -1);
    assert_non_null(strstr(cvx_last_error(), "x/config.json: invalid JSON"));
    assert_int_equal(cvx_config_parse(&c, "[1]", 3, "x/config.json"), -1);
    assert_non_null(strstr(cvx_last_error(), "JSON object"));
    /* strict JSON: no trailing text, comments or trailing commas (what Python writes is what we read) */
    const char *loose[] = {"{\"a\": 2} junk", "{\"a\": 2}{\"b\": 1}", "{\"a\": 2,}", "{/*c*/\"a\": 2}", "{\"a\": 02}"};
    for (size_t k = 0; k < sizeof loose / sizeof loose[0]; k++) {
        assert_int_equal(cvx_config_parse(&c, loose[k], strlen(loose[k]), "x/config.json"), -1);
        print_message("  %-22s -> %s\n", loose[k], cvx_last_error());
    }
    /* integers out of int64 range (found by fuzzing: the double->int64 cast was undefined) */
    const char *big = "{\"a\": 1e19, \"b\": -1e300, \"c\": 18446744073709551615, \"d\": NaN}";
    ASSERT_OK(cvx_config_parse(&c, big, strlen(big), "x/config.json"));
    int64_t v;
    assert_int_equal(cvx_cfg_int(&c, "a", &v), -1);
    assert_int_equal(cvx_cfg_int(&c, "b", &v), -1);
    assert_int_equal(cvx_cfg_int(&c, "c", &v), -1);
    assert_non_null(strstr(cvx_last_error(), "64-bit range"));
    assert_int_equal(cvx_cfg_int(&c, "d", &v), -1);
    cvx_config_free(&c);
    assert_int_equal(cvx_config_load(&c, "tests/data/no-such-config.json"), -1);
    assert_non_null(strstr(cvx_last_error(), "no-such-config.json"));
}

static void test_genconfig_keeps_unknown_keys(void **state) {
    (void)state;
    char dir[256], path[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    /* created when absent */
    json_object *u = json_object_new_object();
    json_object_object_add(u, "prompt", json_object_new_string("a cat"));
    json_object_object_add(u, "model_id", json_object_new_string("zai-org/CogVideoX-2b"));
    ASSERT_OK(cvx_genconfig_update(path, u));
    json_object_put(u);
    /* a key some other tool added */
    cvx_config c;
    ASSERT_OK(cvx_config_load(&c, path));
    json_object_object_add(c.root, "my_custom_key", json_object_new_int(123));
    const char *text = json_object_to_json_string(c.root);
    ASSERT_OK(cvx_write_file_atomic(path, text, strlen(text)));
    cvx_config_free(&c);
    /* stage 2 extends it */
    u = json_object_new_object();
    json_object_object_add(u, "seed", json_object_new_int(42));
    json_object_object_add(u, "prompt", json_object_new_string("a dog"));
    ASSERT_OK(cvx_genconfig_update(path, u));
    json_object_put(u);
    ASSERT_OK(cvx_config_load(&c, path));
    const char *s;
    int64_t i;
    ASSERT_OK(cvx_cfg_str(&c, "prompt", &s));
    assert_string_equal(s, "a dog");
    ASSERT_OK(cvx_cfg_str(&c, "model_id", &s));
    assert_string_equal(s, "zai-org/CogVideoX-2b");
    ASSERT_OK(cvx_cfg_int(&c, "my_custom_key", &i));
    assert_int_equal(i, 123);
    ASSERT_OK(cvx_cfg_int(&c, "seed", &i));
    assert_int_equal(i, 42);
    cvx_config_free(&c);
    /* a corrupt file is an error, not silently replaced */
    tu_write(path, "{oops", 5);
    u = json_object_new_object();
    assert_int_equal(cvx_genconfig_update(path, u), -1);
    json_object_put(u);
    assert_non_null(strstr(cvx_last_error(), "generation_config.json"));
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_getter_errors),
        cmocka_unit_test(test_genconfig_keeps_unknown_keys),
    };
    return cmocka_run_group_tests_name("common_config", tests, NULL, NULL);
}
