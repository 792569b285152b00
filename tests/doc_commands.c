/* What a newcomer runs first (issue 36):
 *   - every `make run` command of the marked examples of README.md and docs/usage.md runs on the
 *     tiny models (scripts/check_doc_commands.sh maps real models to them): a documented command
 *     that fails fails this test;
 *   - the tiny models' make defaults come from their cvx_run_defaults file, not from how MODEL is
 *     spelled (models/x, models/x/, ./models/x, an absolute path), and a command-line variable
 *     wins; a model without the file gets none (make -n);
 *   - make run PROMPTS_FILE=... runs stage 1 once and stages 2 and 3 per non-blank line (make -n).
 * make runs in a clean environment (no MAKEFLAGS of a parent make). */
#include "testutil.h"

static void test_doc_commands_run(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "BUILD=%s sh scripts/check_doc_commands.sh 2>&1", tu_build_dir());
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char out[1 << 16];
    size_t k = fread(out, 1, sizeof out - 1, p);
    out[k] = 0;
    int st = pclose(p);
    fputs(out, stdout);   /* one line per command (print_message truncates) */
    fflush(stdout);
    int n = 0, failed = -1;
    const char *last = strstr(out, "doc commands: ");
    assert_non_null(last);
    assert_int_equal(sscanf(last, "doc commands: %d run, %d failed", &n, &failed), 2);
    assert_int_equal(failed, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* the marked blocks: README's quick start (1) and real models (5), usage.md's make block (6),
     * I2V/V2V (2), the batch (1), LoRA (1): a lost marker is a lost check */
    assert_true(n >= 16);
    assert_int_equal(tu_count_substr(out, "ok     "), n);   /* one "ok" line per command */
}

/* the stage-2 command of `make -n pipeline MODEL=model extra` contains want (and not not_want) */
static void expect_stage2(const char *model, const char *extra, const char *want, const char *not_want) {
    static char out[1 << 16];
    char args[1024], dir[64];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(args, sizeof args, "pipeline OUT=%s BIN=%s/bin MODEL=%s %s", dir, tu_build_dir(), model, extra);
    assert_int_equal(tu_make_n(args, out, sizeof out), 0);
    const char *s2 = strstr(out, "/bin/stage2 ");
    if (!s2) fail_msg("make -n %s: no stage 2 command in:\n%s", args, out);
    const char *eol = strchr(s2, '\n');
    char line[4096];
    snprintf(line, sizeof line, "%.*s", eol ? (int)(eol - s2) : (int)strlen(s2), s2);
    if (!strstr(line, want)) fail_msg("make -n %s: stage 2 without '%s':\n%s", args, want, line);
    if (not_want && strstr(line, not_want)) fail_msg("make -n %s: stage 2 with '%s':\n%s", args, not_want, line);
    print_message("  MODEL=%-36s %-22s -> ...%s\n", model, extra, want);
    tu_rmrf(dir);
}

static void test_tiny_defaults_any_spelling(void **state) {
    (void)state;
    char abs[PATH_MAX], abs_slash[PATH_MAX + 2];
    assert_non_null(realpath("models/wan2.1-tiny-random", abs));
    snprintf(abs_slash, sizeof abs_slash, "%s/", abs);
    const char *wan[] = {"models/wan2.1-tiny-random", "models/wan2.1-tiny-random/", "./models/wan2.1-tiny-random",
                         "./models//wan2.1-tiny-random/", abs, abs_slash};
    for (size_t i = 0; i < sizeof wan / sizeof wan[0]; i++)
        expect_stage2(wan[i], "", "--num_inference_steps 4 ", NULL),
            expect_stage2(wan[i], "", "--frames 9 --height 48 --width 64", NULL);
    const char *cog[] = {"models/cogvideox-tiny-random/", "./models/cogvideox-tiny-random"};
    for (size_t i = 0; i < 2; i++) expect_stage2(cog[i], "", "--num_inference_steps 4 ", "--frames");
    /* a variable given wins, the others still come from the file */
    expect_stage2("./models/wan2.1-tiny-random/", "STEPS=3 FRAMES=13", "--num_inference_steps 3 ", NULL);
    expect_stage2("./models/wan2.1-tiny-random/", "STEPS=3 FRAMES=13", "--frames 13 --height 48 --width 64", NULL);
    /* a model without the file: the configs' defaults (make passes no size, 50 steps) */
    expect_stage2("tests/data/golden_wan/e2e_t2v_1.3b/model", "", "--num_inference_steps 50 ", "--frames");
    /* the tiny-model note: printed when the model has the file (the recipe's test, shown by -n) */
    static char out[1 << 16];
    char dir[64], args[1024];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(args, sizeof args, "pipeline OUT=%s BIN=%s/bin MODEL=./models/cogvideox-tiny-random/", dir,
             tu_build_dir());
    assert_int_equal(tu_make_n(args, out, sizeof out), 0);
    assert_non_null(strstr(out, "[ -n \"./models/cogvideox-tiny-random//cvx_run_defaults\" ]"));
    snprintf(args, sizeof args, "pipeline OUT=%s BIN=%s/bin MODEL=/nonexistent/CogVideoX-2b", dir, tu_build_dir());
    assert_int_equal(tu_make_n(args, out, sizeof out), 0);
    assert_non_null(strstr(out, "[ -n \"\" ]"));
    tu_rmrf(dir);
}

static void test_make_batch(void **state) {
    (void)state;
    static char out[1 << 16];
    char dir[64], path[128], args[1024];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/prompts.txt", dir);
    const char *text = "a cat\n\n  \t\na dog\nthe sea\n";
    tu_write(path, text, strlen(text));
    snprintf(args, sizeof args, "pipeline OUT=%s/o BIN=%s/bin PROMPTS_FILE=%s", dir, tu_build_dir(), path);
    assert_int_equal(tu_make_n(args, out, sizeof out), 0);
    assert_int_equal(tu_count_substr(out, "/bin/stage1 "), 1);
    assert_non_null(strstr(out, "--prompts_file"));
    assert_null(strstr(out, "--prompt '"));
    /* the loop's lines, shown by -n: the prompt numbers are those of sed's non-blank lines */
    assert_non_null(strstr(out, "--prompt_index $n"));
    char cmd[512], got[64] = "";
    snprintf(cmd, sizeof cmd, "sed -n '/[^[:space:]]/=' %s | tr '\\n' ' '", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(got, sizeof got, p));
    pclose(p);
    assert_string_equal(got, "1 4 5 ");   /* what stage 1 numbers (cvx_read_prompts_file) */
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_doc_commands_run),
        cmocka_unit_test(test_tiny_defaults_any_spelling),
        cmocka_unit_test(test_make_batch),
    };
    return cmocka_run_group_tests_name("doc_commands", tests, NULL, NULL);
}
