/* The stage1 program end to end: on the golden e2e_2b model it must write the golden
 * prompt_embeds / negative_prompt_embeds (rel L2 <= 1e-4) and a generation_config.json that
 * keeps unknown keys; --prompts_file naming; and the error table (each: non-zero exit, one
 * line on stderr, no output file left behind). Corrupt models are copies in a mkdtemp dir. */
#include "testutil.h"

#include <limits.h>
#include "config.h"
#include "fileio.h"

#include <dirent.h>
#include <json-c/json.h>

#define E2E GOLDEN "/e2e_2b"
#define SHARDED "tests/data/stage1/t5_bf16_sharded/text_encoder"

static char prog[4096];
static char prompt[1024], negative[1024];

static int setup(void **state) {
    (void)state;
    tu_program(prog, sizeof prog, "stage1");
    if (!cvx_is_file(prog)) {
        fprintf(stderr, "%s not built\n", prog);
        return -1;
    }
    cvx_config c;
    if (cvx_config_load(&c, E2E "/case.json")) return -1;
    json_object *call, *p, *n;
    if (!json_object_object_get_ex(c.root, "call", &call) || !json_object_object_get_ex(call, "prompt", &p) ||
        !json_object_object_get_ex(call, "negative_prompt", &n))
        return -1;
    snprintf(prompt, sizeof prompt, "%s", json_object_get_string(p));
    snprintf(negative, sizeof negative, "%s", json_object_get_string(n));
    cvx_config_free(&c);
    return 0;
}

/* snprintf that fails the test instead of truncating. */
#define FMT(buf, ...) \
    do { if (snprintf((buf), sizeof(buf), __VA_ARGS__) >= (int)sizeof(buf)) fail_msg("buffer too small"); } while (0)

static void sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(cmd, sizeof cmd, fmt, ap) >= (int)sizeof cmd) fail_msg("command too long");
    va_end(ap);
    if (system(cmd) != 0) fail_msg("command failed: %s", cmd);
}

static void check_embeds(const char *path, const char *want_prompt_name, const char *want_prompt_text) {
    cvx_safetensors *got = tu_open(path), *want = tu_open(E2E "/expected.safetensors");
    size_t n1, n2, n3, n4;
    float *gp = tu_f32(got, "prompt_embeds", &n1), *gn = tu_f32(got, "negative_prompt_embeds", &n2);
    float *wp = tu_f32(want, want_prompt_name, &n3), *wn = tu_f32(want, "negative_prompt_embeds", &n4);
    assert_int_equal(n1, n3);
    assert_int_equal(n2, n4);
    const cvx_tensor *t = cvx_st_find(got, "prompt_embeds");
    assert_int_equal(t->dtype, CVX_F32);
    assert_int_equal(t->ndim, 3);
    assert_int_equal(t->shape[0], 1);
    assert_int_equal(t->shape[1], 226);
    assert_int_equal(t->shape[2], 32);
    ASSERT_REL_L2(gp, wp, n1, 1e-4);
    ASSERT_REL_L2(gn, wn, n2, 1e-4);
    assert_string_equal(cvx_st_metadata(got, "prompt"), want_prompt_text);
    assert_string_equal(cvx_st_metadata(got, "negative_prompt"), negative);
    char real_model[PATH_MAX];   /* a relative model directory is recorded as its absolute path */
    assert_non_null(realpath(E2E "/model", real_model));
    assert_string_equal(cvx_st_metadata(got, "model_id"), real_model);
    /* dtype_info is a JSON string naming each tensor's compute dtype */
    json_object *di = json_tokener_parse(cvx_st_metadata(got, "dtype_info"));
    assert_non_null(di);
    json_object *v;
    assert_true(json_object_object_get_ex(di, "prompt_embeds", &v));
    assert_string_equal(json_object_get_string(v), "float32");
    assert_true(json_object_object_get_ex(di, "negative_prompt_embeds", &v));
    assert_string_equal(json_object_get_string(v), "float32");
    json_object_put(di);
    free(gp); free(gn); free(wp); free(wn);
    cvx_st_close(got);
    cvx_st_close(want);
}

static void test_golden_e2e_prompt(void **state) {
    (void)state;
    char tmp[256], out[512], cmd[8192], err[4096], p[600];
    tu_mkdtemp(tmp, sizeof tmp);
    FMT(out, "%s/out", tmp);
    sh("mkdir -p '%s' && printf '{\"foo\": [1, 2], \"prompt\": \"old\", \"seed\": 7}' > '%s/generation_config.json'",
       out, out);
    FMT(cmd, "'%s' --prompt '%s' --negative_prompt '%s' --model_dir %s/model --output_dir '%s' --quiet",
             prog, prompt, negative, E2E, out);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc != 0) fail_msg("stage1 exited %d: %s", rc, err);
    assert_string_equal(err, "");   /* --quiet */
    FMT(p, "%s/stage1_embeddings.safetensors", out);
    check_embeds(p, "prompt_embeds", prompt);
    cvx_config gc;
    FMT(p, "%s/generation_config.json", out);
    ASSERT_OK(cvx_config_load(&gc, p));
    const char *s;
    int64_t seed;
    ASSERT_OK(cvx_cfg_str(&gc, "prompt", &s));
    assert_string_equal(s, prompt);
    ASSERT_OK(cvx_cfg_str(&gc, "negative_prompt", &s));
    assert_string_equal(s, negative);
    ASSERT_OK(cvx_cfg_str(&gc, "model_id", &s));
    char real_model[PATH_MAX];   /* a relative model directory is recorded as its absolute path */
    assert_non_null(realpath(E2E "/model", real_model));
    assert_string_equal(s, real_model);
    ASSERT_OK(cvx_cfg_int(&gc, "seed", &seed));   /* unknown keys kept */
    assert_int_equal(seed, 7);
    json_object *foo;
    assert_true(json_object_object_get_ex(gc.root, "foo", &foo));
    assert_int_equal(json_object_array_length(foo), 2);
    cvx_config_free(&gc);
    assert_int_equal(tu_count_entries(out), 2);   /* no temp files left */
    tu_rmrf(tmp);
}

/* Line N of the file goes to stage1_embeddings_NNNN; empty lines are skipped. */
static void test_prompts_file(void **state) {
    (void)state;
    char tmp[256], cmd[8192], err[4096], p[600];
    tu_mkdtemp(tmp, sizeof tmp);
    FMT(p, "%s/prompts.txt", tmp);
    FILE *f = fopen(p, "w");
    fprintf(f, "%s\n\n%s\r\n", prompt, negative);
    fclose(f);
    FMT(cmd, "'%s' --prompts_file '%s/prompts.txt' --negative_prompt '%s' --model_dir %s/model "
             "--output_dir '%s/out' --threads 1", prog, tmp, negative, E2E, tmp);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc != 0) fail_msg("stage1 exited %d: %s", rc, err);
    FMT(p, "%s/out/stage1_embeddings_0001.safetensors", tmp);
    check_embeds(p, "prompt_embeds", prompt);
    FMT(p, "%s/out/stage1_embeddings_0003.safetensors", tmp);
    check_embeds(p, "negative_prompt_embeds", negative);   /* line 3 is the negative text */
    FMT(p, "%s/out/stage1_embeddings_0002.safetensors", tmp);
    assert_false(cvx_is_file(p));
    assert_int_equal(tu_count_entries(p), 0);
    FMT(p, "%s/out", tmp);
    assert_int_equal(tu_count_entries(p), 3);
    tu_rmrf(tmp);
}

/* A 40,960-word prompt: the truncation warning does not claim a length counted only as far as
 * the truncation needs ("is 1366 tokens long", issue 21) but says it is longer than the limit. */
static void test_long_prompt_warning(void **state) {
    (void)state;
    char tmp[256], cmd[8192], err[4096], p[600];
    tu_mkdtemp(tmp, sizeof tmp);
    FMT(p, "%s/long.txt", tmp);
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 40960; i++) fputs(i ? " panda" : "panda", f);
    fputc('\n', f);
    fclose(f);
    FMT(cmd, "'%s' --prompts_file '%s' --model_dir %s/model --output_dir '%s/out' --threads 1", prog, p, E2E, tmp);
    int rc = tu_run(cmd, err, sizeof err);
    print_message("  %s", err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(err, "is longer than max_sequence_length 226 tokens"));
    assert_null(strstr(err, "tokens long;"));
    tu_rmrf(tmp);
}

/* --model_id resolved in a HuggingFace cache (HF_HUB_CACHE): refs/main names the snapshot. The
 * default model (no --model_id/--model_dir) missing from the cache is one clear error. */
static void test_model_id_cache(void **state) {
    (void)state;
    char tmp[256], cmd[4096], err[4096], p[600];
    tu_mkdtemp(tmp, sizeof tmp);
    sh("mkdir -p %s/hub/models--test-org--tiny/snapshots/rev1 %s/hub/models--test-org--tiny/refs && "
       "cp -r %s/model/tokenizer %s/model/text_encoder %s/hub/models--test-org--tiny/snapshots/rev1/ && "
       "printf rev1 > %s/hub/models--test-org--tiny/refs/main", tmp, tmp, E2E, E2E, tmp, tmp);
    FMT(cmd, "HF_HUB_CACHE=%s/hub '%s' --prompt '%s' --negative_prompt '%s' --model_id test-org/tiny "
        "--output_dir %s/out --quiet", tmp, prog, prompt, negative, tmp);
    int rc = tu_run(cmd, err, sizeof err);
    if (rc != 0) fail_msg("stage1 exited %d: %s", rc, err);
    FMT(p, "%s/out/stage1_embeddings.safetensors", tmp);
    cvx_safetensors *got = tu_open(p), *want = tu_open(E2E "/expected.safetensors");
    size_t n;
    float *g = tu_f32(got, "prompt_embeds", &n), *w = tu_f32(want, "prompt_embeds", NULL);
    ASSERT_REL_L2(g, w, n, 1e-4);
    assert_string_equal(cvx_st_metadata(got, "model_id"), "test-org/tiny");
    free(g); free(w);
    cvx_st_close(got);
    cvx_st_close(want);
    /* the default model id, absent from this cache */
    FMT(cmd, "HF_HUB_CACHE=%s/hub '%s' --prompt x --output_dir %s/out2", tmp, prog, tmp);
    rc = tu_run(cmd, err, sizeof err);
    print_message("  default model not cached: exit %d: %s", rc, err);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err, "zai-org/CogVideoX-2b"));
    assert_non_null(strstr(err, "stage1: error: "));
    FMT(p, "%s/out2", tmp);
    assert_int_equal(tu_count_entries(p), 0);
    tu_rmrf(tmp);
}

static void test_help(void **state) {
    (void)state;
    char cmd[4096], err[1024];
    FMT(cmd, "'%s' --help | grep -q -- --prompts_file", prog);
    assert_int_equal(tu_run(cmd, err, sizeof err), 0);
}

/* Error table. Each case prepares <tmp>/model (a damaged copy) and runs stage1 on it. */
typedef struct {
    const char *what;
    const char *prepare;     /* shell, %1$s = tmp dir */
    const char *args;        /* extra args, %1$s = tmp dir */
    const char *expect;      /* substring of the error line */
} error_case;

#define COPY_MODEL "mkdir -p %1$s/model && cp -r " E2E "/model/tokenizer " E2E "/model/text_encoder %1$s/model/"
#define COPY_SHARDED "mkdir -p %1$s/model/text_encoder && cp -r " E2E "/model/tokenizer %1$s/model/ && cp " SHARDED "/* %1$s/model/text_encoder/"

static const error_case cases[] = {
    {"missing model dir", "true", "--model_dir %1$s/nonexistent", "nonexistent"},
    {"model dir without text encoder", "mkdir -p %1$s/model && cp -r " E2E "/model/tokenizer %1$s/model/",
     "--model_dir %1$s/model", "text_encoder"},
    {"missing tokenizer", COPY_MODEL " && rm %1$s/model/tokenizer/spiece.model", "--model_dir %1$s/model",
     "spiece.model"},
    {"corrupt tokenizer", COPY_MODEL " && printf garbage > %1$s/model/tokenizer/spiece.model",
     "--model_dir %1$s/model", "spiece.model"},
    {"missing shard", COPY_SHARDED " && rm %1$s/model/text_encoder/model-00002-of-00002.safetensors",
     "--model_dir %1$s/model", "model-00002-of-00002.safetensors"},
    {"config key missing", COPY_MODEL " && sed -i '/\"d_model\"/d' %1$s/model/text_encoder/config.json",
     "--model_dir %1$s/model", "d_model"},
    {"tensor shape mismatch vs config",
     COPY_MODEL " && sed -i 's/\"d_ff\": 48/\"d_ff\": 64/' %1$s/model/text_encoder/config.json",
     "--model_dir %1$s/model", "wi_0.weight"},
    {"truncated weights file", COPY_MODEL " && truncate -s 5000 %1$s/model/text_encoder/model.safetensors",
     "--model_dir %1$s/model", "model.safetensors"},
    {"unwritable output dir", "touch %1$s/afile", "--model_dir " E2E "/model --output_dir %1$s/afile/out", "afile"},
    {"bad --max_sequence_length", "true", "--model_dir " E2E "/model --max_sequence_length 12x", "max_sequence_length"},
    {"missing prompts file", "true", "--model_dir " E2E "/model --prompts_file %1$s/none.txt", "none.txt"},
    {"unknown option", "true", "--model_dir " E2E "/model --frobnicate", "frobnicate"},
};

static void test_error_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const error_case *c = &cases[i];
        char tmp[256], cmd[8192], args[4096], prep[4096], err[8192], out[512];
        tu_mkdtemp(tmp, sizeof tmp);
        FMT(prep, c->prepare, tmp);
        sh("%s", prep);
        FMT(args, c->args, tmp);
        FMT(out, "%s/out", tmp);
        FMT(cmd, "'%s' --prompt 'a cat' --output_dir '%s' %s", prog, out, args);
        if (strstr(args, "--output_dir")) FMT(cmd, "'%s' --prompt 'a cat' %s", prog, args);
        if (strstr(args, "--prompts_file"))
            FMT(cmd, "'%s' --output_dir '%s' %s", prog, out, args);
        int rc = tu_run(cmd, err, sizeof err);
        int lines = 0;
        for (const char *p = err; *p; p++) lines += *p == '\n';
        print_message("  %-32s exit %d: %s", c->what, rc, err);
        if (rc == 0) fail_msg("%s: exit status 0", c->what);
        if (lines != 1 || strncmp(err, "stage1: error: ", 15) != 0)
            fail_msg("%s: expected one 'stage1: error:' line on stderr, got: %s", c->what, err);
        if (!strstr(err, c->expect)) fail_msg("%s: the error does not mention '%s': %s", c->what, c->expect, err);
        if (tu_count_entries(out) != 0) fail_msg("%s: files left in %s", c->what, out);
        tu_rmrf(tmp);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_e2e_prompt),
        cmocka_unit_test(test_prompts_file),
        cmocka_unit_test(test_long_prompt_warning),
        cmocka_unit_test(test_model_id_cache),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_error_table),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
