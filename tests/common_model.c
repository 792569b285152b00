/* Model locator against a fake HuggingFace cache tree. */
#include "testutil.h"
#include "fileio.h"
#include "model.h"

static void test_local_dir(void **state) {
    (void)state;
    char out[4096];
    ASSERT_OK(cvx_model_resolve(GOLDEN "/e2e_2b/model", out, sizeof out));
    assert_string_equal(out, GOLDEN "/e2e_2b/model");
    ASSERT_OK(cvx_model_component(out, "transformer", "config.json", out, sizeof out));
    assert_string_equal(out, GOLDEN "/e2e_2b/model/transformer");
    assert_int_equal(cvx_model_component(GOLDEN "/e2e_2b/model", "vae", "nope.json", out, sizeof out), -1);
    assert_non_null(strstr(cvx_last_error(), "vae/nope.json"));
    assert_int_equal(cvx_model_component(GOLDEN "/t5/model", "transformer", NULL, out, sizeof out), -1);
    assert_non_null(strstr(cvx_last_error(), "transformer"));
}

static void make_snapshot(const char *cache, const char *repo, const char *rev, int with_ref) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s/snapshots/%s/transformer", cache, repo, rev);
    ASSERT_OK(cvx_mkdirs(p));
    if (with_ref) {
        snprintf(p, sizeof p, "%s/%s/refs", cache, repo);
        ASSERT_OK(cvx_mkdirs(p));
        snprintf(p, sizeof p, "%s/%s/refs/main", cache, repo);
        tu_write(p, rev, strlen(rev));
    }
}

static void test_hub_cache(void **state) {
    (void)state;
    char dir[256], cache[512], out[4096], want[1024];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(cache, sizeof cache, "%s/hub", dir);
    make_snapshot(cache, "models--zai-org--CogVideoX-2b", "abc123", 1);
    make_snapshot(cache, "models--zai-org--CogVideoX-2b", "old999", 0);  /* refs/main decides */
    make_snapshot(cache, "models--THUDM--CogVideoX-5b", "only1", 0);     /* no refs: the only snapshot */

    setenv("HF_HUB_CACHE", cache, 1);
    ASSERT_OK(cvx_model_resolve("zai-org/CogVideoX-2b", out, sizeof out));
    snprintf(want, sizeof want, "%s/models--zai-org--CogVideoX-2b/snapshots/abc123", cache);
    assert_string_equal(out, want);
    ASSERT_OK(cvx_model_resolve("THUDM/CogVideoX-5b", out, sizeof out));
    snprintf(want, sizeof want, "%s/models--THUDM--CogVideoX-5b/snapshots/only1", cache);
    assert_string_equal(out, want);

    /* HF_HOME/hub when HF_HUB_CACHE is unset; HOME/.cache/huggingface/hub last */
    unsetenv("HF_HUB_CACHE");
    setenv("HF_HOME", dir, 1);
    ASSERT_OK(cvx_model_resolve("zai-org/CogVideoX-2b", out, sizeof out));
    assert_non_null(strstr(out, "snapshots/abc123"));
    unsetenv("HF_HOME");
    char home[512], hfhub[600], cmd[1400];
    snprintf(home, sizeof home, "%s/home", dir);
    snprintf(hfhub, sizeof hfhub, "%s/.cache/huggingface", home);
    ASSERT_OK(cvx_mkdirs(hfhub));
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s/'", cache, hfhub);
    assert_int_equal(system(cmd), 0);
    const char *old_home = getenv("HOME");
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", old_home ? old_home : "");
    setenv("HOME", home, 1);
    ASSERT_OK(cvx_model_resolve("zai-org/CogVideoX-2b", out, sizeof out));
    assert_non_null(strstr(out, "/home/.cache/huggingface/hub/models--zai-org--CogVideoX-2b/snapshots/abc123"));

    /* not found: the message says where it looked and that nothing is downloaded */
    assert_int_equal(cvx_model_resolve("zai-org/CogVideoX1.5-5B", out, sizeof out), -1);
    const char *e = cvx_last_error();
    print_message("  -> %s\n", e);
    assert_non_null(strstr(e, "models--zai-org--CogVideoX1.5-5B/snapshots"));
    assert_non_null(strstr(e, "downloaded"));
    assert_int_equal(cvx_model_resolve("not-a-dir-nor-id", out, sizeof out), -1);
    assert_non_null(strstr(cvx_last_error(), "ORG/NAME"));
    assert_int_equal(cvx_model_resolve("", out, sizeof out), -1);
    if (saved[0]) setenv("HOME", saved, 1);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_dir),
        cmocka_unit_test(test_hub_cache),
    };
    return cmocka_run_group_tests_name("common_model", tests, NULL, NULL);
}
