/* The family table's data (pipeline/family.h):
 * - cvx_family_for: a directory no row recognises is refused with one line (no default family);
 *   a component-only directory (the golden dirs) resolves by its transformer, else by a component
 *   one row alone lists; a T5 alone (CogVideoX's and LTX-Video's: stage 1 only) is the first row's;
 * - cvx_family_options: the stage-2 flag table, the integer options' finish, the rows' refusals and
 *   the families' option lists agree, and generation_config.json records an option as its row says
 *   (when set, the always-recorded ones always, a stale one of an earlier run nulled);
 * - cvx_decode_options (stage 3's): the flags, the given-bits, the rows' refusals; cvx_lora_flags:
 *   the LoRA flags' experts and joined list. */
#include "testutil.h"

#include <getopt.h>
#include <json-c/json.h>
#include <sys/stat.h>

#include "pipeline/args.h"
#include "pipeline/family.h"
#include "pipeline/stage_files.h"

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) fail_msg("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void expect_refused(const char *dir, const char *want) {
    char cls[256];
    assert_null(cvx_family_for(dir, cls, sizeof cls));
    print_message("  refused: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), dir));
    assert_non_null(strstr(cvx_last_error(), want));
    assert_null(strchr(cvx_last_error(), '\n'));   /* one line */
}

static void test_unrecognised_dir(void **state) {
    (void)state;
    char dir[64], sub[128], path[160];
    tu_mkdtemp(dir, sizeof dir);
    /* empty: what was looked for and the supported classes */
    expect_refused(dir, "looked for: transformer/CogVideoXTransformer3DModel");
    expect_refused(dir, "transformer/WanTransformer3DModel");
    /* a transformer of a class no row serves */
    snprintf(sub, sizeof sub, "%s/transformer", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(path, sizeof path, "%s/config.json", sub);
    write_text(path, "{\"_class_name\": \"FluxTransformer2DModel\"}");
    expect_refused(dir, "no component's config.json");
    /* a pipeline class no row serves: named with the supported ones */
    snprintf(path, sizeof path, "%s/model_index.json", dir);
    write_text(path, "{\"_class_name\": \"FluxPipeline\"}");
    char cls[256];
    assert_null(cvx_family_for(dir, cls, sizeof cls));
    assert_non_null(strstr(cvx_last_error(), "\"FluxPipeline\""));
    assert_non_null(strstr(cvx_last_error(), "CogVideoXPipeline"));
    tu_rmrf(dir);
}

static void test_component_dirs(void **state) {
    (void)state;
    static const struct {
        const char *dir, *family;
    } cases[] = {
        {"tests/data/golden/transformer_2b/model", "CogVideoX"},
        {"tests/data/golden/vae_2b/model", "CogVideoX"},
        {"tests/data/golden_wan/transformer_1.3b/model", "Wan"},
        {"tests/data/golden_wan/vae_decode/model", "Wan"},
        {"tests/data/golden_wan/umt5/model", "Wan"},
        {"tests/data/golden_wan/e2e_i2v_clip/model", "Wan"},
        {"tests/data/golden_wan22/transformer_a14b/model", "Wan"},
        {"tests/data/golden_wan22/vae22_decode/model", "Wan"},
        {"tests/data/golden_hv15/transformer_t2v/model", "HunyuanVideo-1.5"},
        {"tests/data/golden_hv15/vae_decode/model", "HunyuanVideo-1.5"},
        {"tests/data/golden_hv15/qwen_te/model", "HunyuanVideo-1.5"},
        {"tests/data/golden_hv15/byt5/model", "HunyuanVideo-1.5"},
        {"tests/data/golden_hv15/e2e_i2v_siglip/model", "HunyuanVideo-1.5"},
        {"tests/data/golden_ltx/transformer_2b/model", "LTX-Video"},
        {"tests/data/golden_ltx/vae095_decode_encode/model", "LTX-Video"},
        /* with model_index.json */
        {"models/cogvideox-tiny-random", "CogVideoX"},
        {"models/wan2.1-tiny-random", "Wan"},
        {"models/wan2.2-a14b-tiny-random", "Wan"},
        {"models/hunyuanvideo15-tiny-random", "HunyuanVideo-1.5"},
        {"models/ltx-tiny-random", "LTX-Video"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cls[256];
        const cvx_family *f = cvx_family_for(cases[i].dir, cls, sizeof cls);
        if (!f) fail_msg("%s: %s", cases[i].dir, cvx_last_error());
        print_message("  %-52s %s\n", cases[i].dir, f->name);
        assert_string_equal(f->name, cases[i].family);
    }
}

/* A T5 alone is CogVideoX's and LTX-Video's text encoder (one class; their stage 1 differ in text
 * length and mask): a directory with nothing else serves stage 1 only and is read as the first
 * row's (CogVideoX, as stage 1 always did); a model_index.json, the transformer's config or a
 * component one row alone lists (the VAE) decides. */
static void test_t5_only_dir(void **state) {
    (void)state;
    static const char *const t5_dirs[] = {"tests/data/golden/t5/model", "tests/data/golden_ltx/text/model"};
    char cls[256];
    for (int i = 0; i < 2; i++) {
        const cvx_family *f = cvx_family_for(t5_dirs[i], cls, sizeof cls);
        if (!f) fail_msg("%s: %s", t5_dirs[i], cvx_last_error());
        assert_string_equal(f->name, "CogVideoX");
    }
    /* the T5 beside a component one row alone lists, or a transformer config, or a model_index.json */
    static const struct {
        const char *comp, *file, *text, *family;
    } decide[] = {
        {"vae", "config.json", "{\"_class_name\": \"AutoencoderKLLTXVideo\"}", "LTX-Video"},
        {"transformer", "config.json", "{\"_class_name\": \"LTXVideoTransformer3DModel\"}", "LTX-Video"},
        {"vae", "config.json", "{\"_class_name\": \"AutoencoderKLCogVideoX\"}", "CogVideoX"},
        {NULL, "model_index.json", "{\"_class_name\": \"LTXPipeline\"}", "LTX-Video"},
    };
    for (size_t k = 0; k < sizeof decide / sizeof decide[0]; k++) {
        char dir[64], sub[128], path[200];
        tu_mkdtemp(dir, sizeof dir);
        snprintf(sub, sizeof sub, "%s/text_encoder", dir);
        assert_int_equal(mkdir(sub, 0755), 0);
        snprintf(path, sizeof path, "%s/config.json", sub);
        write_text(path, "{\"architectures\": [\"T5EncoderModel\"]}");
        if (decide[k].comp) {
            snprintf(sub, sizeof sub, "%s/%s", dir, decide[k].comp);
            assert_int_equal(mkdir(sub, 0755), 0);
        } else {
            snprintf(sub, sizeof sub, "%s", dir);
        }
        snprintf(path, sizeof path, "%s/%s", sub, decide[k].file);
        write_text(path, decide[k].text);
        const cvx_family *f = cvx_family_for(dir, cls, sizeof cls);
        if (!f) fail_msg("%s: %s", dir, cvx_last_error());
        assert_string_equal(f->name, decide[k].family);
        tu_rmrf(dir);
    }
}

static const cvx_flag *find_flag(const cvx_flag *flags, const char *name) {
    for (; flags->name; flags++)
        if (!strcmp(flags->name, name)) return flags;
    return NULL;
}

/* every row is a stage-2 flag whose destination is its field (an integer one: its slot, copied by
 * cvx_stage2_args_finish); every refusal row is taken by some family, every family's option is a row */
static void test_options_table(void **state) {
    (void)state;
    static cvx_stage2_args a;   /* large */
    cvx_stage2_args_init(&a, "x");
    int n = 0;
    for (const cvx_family_option *o = cvx_family_options; o->name; o++, n++) {
        const cvx_flag *f = find_flag(a.flags, o->name);
        if (!f) fail_msg("option %s: no stage-2 flag", o->name);
        if (o->type == CVX_OPTION_OWN) {   /* its own flag row and file lines: a set rule and a refusal */
            assert_non_null(o->is_set);
            assert_non_null(o->refusal);
            continue;
        }
        assert_non_null(o->key);
        assert_non_null(o->help);
        assert_non_null(strstr(o->help, o->name));
        if (o->type == CVX_OPTION_INT) assert_ptr_equal(f->dest, &a.option_int[n]);
        else assert_ptr_equal(f->dest, cvx_family_option_field(o, &a.sp));
        int taken = 0;
        for (int k = 0; cvx_families[k]; k++)
            for (int j = 0; cvx_families[k]->options && cvx_families[k]->options[j]; j++)
                taken |= !strcmp(cvx_families[k]->options[j] + 2, o->name);
        if (o->refusal && !taken) fail_msg("option %s: refused by every family", o->name);
    }
    for (int k = 0; cvx_families[k]; k++)
        for (int j = 0; cvx_families[k]->options && cvx_families[k]->options[j]; j++) {
            const char *opt = cvx_families[k]->options[j];
            int found = 0;
            for (const cvx_family_option *o = cvx_family_options; o->name; o++)
                found |= !strncmp(opt, "--", 2) && !strcmp(opt + 2, o->name);
            if (!found) fail_msg("%s lists %s, not a row of cvx_family_options", cvx_families[k]->name, opt);
        }
    char *argv[] = {"stage2", "--fps", "12", "--guidance_rescale", "0.25", "--use_dynamic_cfg",
                    "--guidance_scale_2", "3.5", NULL};
    assert_int_equal(cvx_flags_parse(a.flags, 8, argv), 0);
    cvx_stage2_args_finish(&a);
    assert_true(a.sp.frame_rate == 12.0);
    assert_true(a.sp.guidance_rescale == 0.25);
    assert_true(a.sp.guidance_scale_2 == 3.5);
    assert_int_equal(a.sp.use_dynamic_cfg, 1);
    assert_int_equal(a.sp.teacache_ret_steps, 0);
}

static json_object *load_json(const char *path) {
    json_object *j = json_object_from_file(path);
    if (!j) fail_msg("cannot read %s", path);
    return j;
}

/* generation_config.json: guidance_scale_2 when set (after guidance_scale), use_dynamic_cfg always
 * (after fps), teacache_ret_steps with TeaCache; a later run without one nulls the earlier value,
 * the cache record keeps the sample record's */
static void test_genconfig_options(void **state) {
    (void)state;
    char dir[64], gc[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(gc, sizeof gc, "%s/generation_config.json", dir);
    cvx_sample_params p = {.num_inference_steps = 2, .guidance_scale = 5, .guidance_scale_2 = 3, .seed = 1,
                           .height = 32, .width = 48, .frames = 9, .cache = "teacache", .cache_threshold = 0.2,
                           .teacache_ret_steps = 1, .guidance_rescale = 0.5, .frame_rate = 12};
    cvx_latents l = {.teacache_coefficients = {1, 2, 3, 4, 5}};
    ASSERT_OK(cvx_genconfig_record_sample(gc, NULL, &p, 12, "unipc", "m"));
    ASSERT_OK(cvx_genconfig_record_cache(gc, &p, &l));
    json_object *j = load_json(gc), *v;
    assert_true(json_object_object_get_ex(j, "guidance_scale_2", &v) && json_object_get_double(v) == 3.0);
    assert_true(json_object_object_get_ex(j, "use_dynamic_cfg", &v) && !json_object_get_boolean(v));
    assert_true(json_object_object_get_ex(j, "teacache_ret_steps", &v) && json_object_get_boolean(v));
    assert_false(json_object_object_get_ex(j, "guidance_rescale", NULL));   /* fingerprint only */
    assert_false(json_object_object_get_ex(j, "frame_rate", NULL));
    /* key order: guidance_scale_2 right after guidance_scale, use_dynamic_cfg right after fps */
    const char *prev = NULL, *after_gs = NULL, *after_fps = NULL;
    json_object_object_foreach(j, key, val) {
        (void)val;
        if (prev && !strcmp(prev, "guidance_scale")) after_gs = key;
        if (prev && !strcmp(prev, "fps")) after_fps = key;
        prev = key;
    }
    assert_string_equal(after_gs, "guidance_scale_2");
    assert_string_equal(after_fps, "use_dynamic_cfg");
    json_object_put(j);
    /* again without them: the earlier run's values are gone */
    p.guidance_scale_2 = 0, p.teacache_ret_steps = 0, p.use_dynamic_cfg = 1;
    ASSERT_OK(cvx_genconfig_record_sample(gc, NULL, &p, 12, "unipc", "m"));
    ASSERT_OK(cvx_genconfig_record_cache(gc, &p, &l));
    j = load_json(gc);
    assert_false(json_object_object_get_ex(j, "guidance_scale_2", &v) && v);
    assert_false(json_object_object_get_ex(j, "teacache_ret_steps", &v) && v);
    assert_true(json_object_object_get_ex(j, "use_dynamic_cfg", &v) && json_object_get_boolean(v));
    json_object_put(j);
    tu_rmrf(dir);
}

/* Stage 3's family options (cvx_decode_options): each row a stage-3 flag into its field, given ->
 * its decode_set bit (cvx_stage3_args_finish); the rows that list it take it, the others refuse
 * with the row's one line; --help prints each row's lines. */
static void test_decode_options_table(void **state) {
    (void)state;
    static cvx_stage3_args a;
    cvx_stage3_args_init(&a, "x");
    int bits = 0;
    for (const cvx_decode_option *o = cvx_decode_options; o->name; o++) {
        const cvx_flag *f = find_flag(a.flags, o->name);
        if (!f) fail_msg("stage-3 option %s: no flag", o->name);
        assert_ptr_equal(f->dest, (char *)&a.dp + o->offset);
        assert_non_null(o->refusal);
        assert_non_null(strstr(o->help, o->name));
        assert_int_equal(bits & o->set_bit, 0);   /* one bit each */
        bits |= o->set_bit;
    }
    char *argv[] = {"stage3", "--decode_noise_scale", "0.02", NULL};
    optind = 1;   /* getopt's state, after another test's parse */
    assert_int_equal(cvx_flags_parse(a.flags, 3, argv), 0);
    cvx_stage3_args_finish(&a);
    assert_int_equal(a.dp.decode_set, 2);
    assert_true(a.dp.decode_noise_scale == 0.02);
    /* a family whose row lists it takes it; the others refuse with the row's line */
    for (const cvx_decode_option *o = cvx_decode_options; o->name; o++) {
        const cvx_decode_params p = {.decode_set = o->set_bit};
        ASSERT_OK(cvx_family_check_decode_options(&cvx_family_ltx, &p));
        for (int k = 0; cvx_families[k]; k++) {
            if (cvx_families[k] == &cvx_family_ltx) continue;
            assert_int_equal(cvx_family_check_decode_options(cvx_families[k], &p), -1);
            assert_string_equal(cvx_last_error(), o->refusal);
        }
    }
    const cvx_decode_params none = {0};
    for (int k = 0; cvx_families[k]; k++) ASSERT_OK(cvx_family_check_decode_options(cvx_families[k], &none));
}

/* The LoRA flags (cvx_lora_flags): a stage-2 flag each; the values in the order given with their
 * experts, joined with the rows' tags (what the ranks agree on). */
static void test_lora_flags_table(void **state) {
    (void)state;
    static cvx_stage2_args a;
    cvx_stage2_args_init(&a, "x");
    for (const cvx_lora_flag *l = cvx_lora_flags; l->name; l++) {
        if (!find_flag(a.flags, l->name)) fail_msg("LoRA flag %s: no stage-2 flag", l->name);
        assert_non_null(strstr(l->help, l->name));
    }
    char *argv[] = {"stage2", "--lora_low", "b.safetensors:0.5", "--lora", "a.safetensors", "--lora_high",
                    "c.safetensors:0.7", NULL};
    optind = 1;
    assert_int_equal(cvx_flags_parse(a.flags, 7, argv), 0);
    assert_int_equal(a.loras.n, 3);
    assert_int_equal(a.loras.expert[0], 2);
    assert_int_equal(a.loras.expert[1], 0);
    assert_int_equal(a.loras.expert[2], 1);
    assert_string_equal(a.loras.path[0], "b.safetensors");
    assert_true(a.loras.spec[0].weight == 0.5 && a.loras.spec[1].weight == 1.0 && a.loras.spec[2].weight == 0.7);
    assert_string_equal(a.loras.joined, "low:b.safetensors:0.5 a.safetensors high:c.safetensors:0.7");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unrecognised_dir), cmocka_unit_test(test_component_dirs),
        cmocka_unit_test(test_t5_only_dir),
        cmocka_unit_test(test_options_table), cmocka_unit_test(test_genconfig_options),
        cmocka_unit_test(test_decode_options_table), cmocka_unit_test(test_lora_flags_table)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
