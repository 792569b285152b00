/* Qwen2_5_VLTextModel as HunyuanVideo-1.5 calls it (golden_hv15 README section 1, case qwen_te/):
 *  - every hidden state (embedding, each of the 4 layers, the final norm) of prompts 0 and 1
 *    (rel L2 <= 1e-5; the embedding exactly);
 *  - prompt_embeds [12, 1000, 32] = hidden_states[-3][:, 108:] and prompt_embeds_mask through the
 *    whole text path: prompt -> chat template -> tokens -> model (rel L2 <= 1e-5 per prompt),
 *    with only the L - 2 layers the pipeline needs loaded;
 *  - the mask: causal & key padding, a fully masked row attends to every key;
 *  - a single file with a full checkpoint's "model." names gives the same bits;
 *  - a GGUF with llama.cpp's names (converted here from the golden weights): F32 gives the
 *    safetensors' bits; Q8_0 (every linear whose rows are whole blocks) stays near the golden;
 *  - the whole text side of an end-to-end case (e2e_t2v_glyph, trimmed): prompt and negative None
 *    through both encoders as the pipeline's encode_prompt -> the stored prompt_embeds(_2), masks,
 *    input ids (rel L2 <= 1e-5; ids and masks exact);
 *  - bad inputs: an id outside the table, a config whose mrope_section does not fit. */
#include "golden_harness.h"
#include "weights_harness.h"

#include "stage1/bpe.h"
#include "stage1/glyph.h"
#include "stage1/qwen2_5_vl.h"

#define TE_CASE "tests/data/golden_hv15/qwen_te"
#define TOK_DIR "tests/data/golden_hv15/tokenizer/model/tokenizer"
#define S (HV15_MLLM_CROP_START + HV15_MLLM_MAX_LENGTH)

static void test_hidden_states(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, TE_CASE);
    qwen_model m;
    ASSERT_OK(qwen_load(&m, gh_path(&c, "model/text_encoder"), -1, NULL));
    const qwen_config *cf = &m.cfg;
    assert_int_equal(cf->num_layers, 4);
    assert_int_equal(cf->num_kv_heads, 2);
    assert_int_equal(cf->mrope_section[2], 2);
    const int D = cf->hidden_size;
    const cvx_tensor *ids = gh_tensor(&c, "input_ids"), *mask = gh_tensor(&c, "attention_mask");
    const size_t per = (size_t)S * D;
    float *out = malloc(per * sizeof(float));
    for (int b = 0; b < 2; b++) {
        int64_t id[S], mk[S];
        for (int i = 0; i < S; i++) id[i] = gh_i64_at(ids, (size_t)b * S + i), mk[i] = gh_i64_at(mask, (size_t)b * S + i);
        for (int k = 0; k <= cf->num_layers; k++) {
            ASSERT_OK(qwen_hidden_state(&m, id, mk, S, k, out));
            float *want = gh_f32(&c, NULL, "prompts01.hidden_states.%d", k);
            char what[64];
            snprintf(what, sizeof what, "prompt %d hidden_states[%d]", b, k);
            gh_check_rel_l2(&c, what, out, want + b * per, per, k ? 1e-5 : 0);
            free(want);
        }
    }
    /* bad ids: one clear error */
    int64_t bad[4] = {1, 2, 5000, 3};
    assert_int_not_equal(qwen_hidden_state(&m, bad, NULL, 4, 1, out), 0);
    assert_non_null(strstr(cvx_last_error(), "token id 5000 at position 2 is outside the embedding table"));
    assert_int_not_equal(qwen_hidden_state(&m, bad, NULL, 4, 6, out), 0);
    free(out);
    qwen_free(&m);
    gh_close(&c);
}

static void test_prompt_embeds(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, TE_CASE);
    qwen_model m;
    /* the pipeline's load: only the layers before hidden_states[-3] */
    ASSERT_OK(qwen_load(&m, gh_path(&c, "model/text_encoder"), 4 - HV15_MLLM_SKIP_LAYERS, NULL));
    assert_int_equal(m.n_loaded, 2);
    assert_null(m.norm);
    bpe_tokenizer *t = bpe_load(TOK_DIR);
    ASSERT_NONNULL(t);
    const int D = m.cfg.hidden_size, N = HV15_MLLM_MAX_LENGTH;
    json_object *prompts = gh_json(&c, "prompts");
    float *want = gh_f32(&c, NULL, "prompt_embeds"), *got = malloc((size_t)N * D * sizeof(float));
    const cvx_tensor *want_mask = gh_tensor(&c, "prompt_embeds_mask");
    assert_int_equal(gh_len(prompts), 12);
    for (size_t p = 0; p < gh_len(prompts); p++) {
        int64_t mask[HV15_MLLM_MAX_LENGTH], wm[HV15_MLLM_MAX_LENGTH];
        ASSERT_OK(hv15_mllm_prompt_embeds(&m, t, gh_str(gh_at(prompts, p)), got, mask));
        for (int i = 0; i < N; i++) wm[i] = gh_i64_at(want_mask, p * N + (size_t)i);
        char what[48];
        snprintf(what, sizeof what, "prompt %zu prompt_embeds_mask", p);
        gh_check_exact_i64(&c, what, mask, wm, (size_t)N);
        snprintf(what, sizeof what, "prompt %zu prompt_embeds", p);
        gh_check_rel_l2(&c, what, got, want + p * (size_t)N * D, (size_t)N * D, 1e-5);
    }
    free(want), free(got);
    bpe_free(t);
    qwen_free(&m);
    gh_close(&c);
}

static void test_gguf(void **state) {
    (void)state;
    static const char *const pairs[][2] = {
        {"embed_tokens.weight", "token_embd.weight"},
        {"norm.weight", "output_norm.weight"},
        {"layers.0.self_attn.q_proj.bias", "blk.0.attn_q.bias"},
        {"layers.27.self_attn.o_proj.weight", "blk.27.attn_output.weight"},
        {"layers.3.mlp.gate_proj.weight", "blk.3.ffn_gate.weight"},
        {"layers.3.mlp.down_proj.weight", "blk.3.ffn_down.weight"},
        {"layers.1.input_layernorm.weight", "blk.1.attn_norm.weight"},
        {"layers.1.post_attention_layernorm.weight", "blk.1.ffn_norm.weight"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        char out[128];
        qwen_llama_name(pairs[i][0], out, sizeof out);
        assert_string_equal(out, pairs[i][1]);
    }
    gh_case c;
    gh_open(&c, TE_CASE);
    char dir[64], f32[128], q8[128], cfg[1024];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(f32, sizeof f32, "%s/te_f32.gguf", dir);
    snprintf(q8, sizeof q8, "%s/te_q8_0.gguf", dir);
    snprintf(cfg, sizeof cfg, "%s", gh_path(&c, "model/text_encoder/config.json"));
    /* Q8_0: every linear whose rows are whole blocks */
    wh_write_llama_gguf(gh_path(&c, "model/text_encoder"), f32, "qwen2vl", qwen_llama_name, 0, NULL);
    wh_write_llama_gguf(gh_path(&c, "model/text_encoder"), q8, "qwen2vl", qwen_llama_name, 1, NULL);
    bpe_tokenizer *t = bpe_load(TOK_DIR);
    ASSERT_NONNULL(t);
    const int N = HV15_MLLM_MAX_LENGTH;
    float *want = gh_f32(&c, NULL, "prompt_embeds");
    const char *prompt = gh_str(gh_at(gh_json(&c, "prompts"), 1));
    for (int k = 0; k < 2; k++) {
        qwen_model m;
        ASSERT_OK(qwen_load_file(&m, k ? q8 : f32, cfg, 2, NULL));
        assert_true(m.llama_names);
        const int D = m.cfg.hidden_size;
        float *got = malloc((size_t)N * D * sizeof(float));
        int64_t mask[HV15_MLLM_MAX_LENGTH];
        ASSERT_OK(hv15_mllm_prompt_embeds(&m, t, prompt, got, mask));
        gh_check_rel_l2(&c, k ? "prompt 1 prompt_embeds, Q8_0 GGUF" : "prompt 1 prompt_embeds, F32 GGUF", got,
                        want + (size_t)N * D, (size_t)N * D, k ? 3e-2 : 1e-5);
        free(got);
        qwen_free(&m);
    }
    free(want);
    bpe_free(t);
    tu_rmrf(dir);
    gh_close(&c);
}

/* A full checkpoint's names ("model." + the text model's, as in Qwen2_5_VLForConditionalGeneration
 * files and ComfyUI's qwen_2.5_vl_7b*.safetensors) load through qwen_load_file: the same bits. */
static void test_prefixed_names(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, TE_CASE);
    char dir[64], file[128], cfg[1024];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/qwen_2.5_vl_tiny.safetensors", dir);
    snprintf(cfg, sizeof cfg, "%s", gh_path(&c, "model/text_encoder/config.json"));
    cvx_weights *w = cvx_weights_open(gh_path(&c, "model/text_encoder"));
    ASSERT_NONNULL(w);
    cvx_st_writer *sw = cvx_stw_new();
    for (int i = 0; i < cvx_weights_count(w); i++) {
        const cvx_tensor *t = cvx_weights_at(w, i);
        char name[160];
        snprintf(name, sizeof name, "model.%s", t->name);
        ASSERT_OK(cvx_stw_add(sw, name, t->dtype, t->ndim, t->shape, t->data));
    }
    const int64_t vis[1] = {4};
    const float junk[4] = {1, 2, 3, 4};
    ASSERT_OK(cvx_stw_add(sw, "visual.blocks.0.norm1.weight", CVX_F32, 1, vis, junk));   /* ignored */
    ASSERT_OK(cvx_stw_write(sw, file));
    cvx_stw_free(sw);
    cvx_weights_close(w);
    qwen_model a, b;
    ASSERT_OK(qwen_load(&a, gh_path(&c, "model/text_encoder"), -1, NULL));
    ASSERT_OK(qwen_load_file(&b, file, cfg, -1, NULL));
    assert_string_equal(b.prefix, "model.");
    const int D = a.cfg.hidden_size;
    int64_t ids[S], mask[S];
    const cvx_tensor *ti = gh_tensor(&c, "input_ids"), *tm = gh_tensor(&c, "attention_mask");
    for (int i = 0; i < S; i++) ids[i] = gh_i64_at(ti, (size_t)i), mask[i] = gh_i64_at(tm, (size_t)i);
    float *x = malloc((size_t)S * D * sizeof(float)), *y = malloc((size_t)S * D * sizeof(float));
    ASSERT_OK(qwen_hidden_state(&a, ids, mask, S, 4, x));
    ASSERT_OK(qwen_hidden_state(&b, ids, mask, S, 4, y));
    gh_check_exact_f32(&c, "hidden_states[4], model.-prefixed file", y, x, (size_t)S * D);
    free(x), free(y);
    qwen_free(&a), qwen_free(&b);
    tu_rmrf(dir);
    gh_close(&c);
}

/* Tensor `name` of the case (I64, or F32 holding integers: the pipeline's F32 masks) equals v[n]. */
static void check_ids(gh_case *c, const char *name, const int64_t *v, size_t n) {
    const cvx_tensor *t = gh_tensor(c, "%s", name);
    assert_int_equal(t->numel, (int64_t)n);
    float *f = t->dtype == CVX_I64 ? NULL : cvx_tensor_f32_dup(t);
    for (size_t i = 0; i < n; i++)
        if ((f ? (int64_t)f[i] : gh_i64_at(t, i)) != v[i]) fail_msg("%s[%zu] differs", name, i);
    free(f);
}

static void test_e2e_text_side(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, "tests/data/golden_hv15/e2e_t2v_glyph_te");
    qwen_config qc;
    ASSERT_OK(qwen_config_load(&qc, gh_path(&c, "model/text_encoder/config.json")));
    qwen_model m;
    ASSERT_OK(qwen_load(&m, gh_path(&c, "model/text_encoder"), qc.num_layers - HV15_MLLM_SKIP_LAYERS, NULL));
    bpe_tokenizer *t = bpe_load(gh_path(&c, "model/tokenizer"));
    ASSERT_NONNULL(t);
    byt5_tokenizer bt;
    ASSERT_OK(byt5_tokenizer_load(&bt, gh_path(&c, "model/tokenizer_2")));
    t5_model t5;
    ASSERT_OK(t5_build(&t5, gh_path(&c, "model/text_encoder_2"), NULL));
    const int N = HV15_MLLM_MAX_LENGTH, D = qc.hidden_size, D2 = t5.cfg.d_model;
    json_object *neg = gh_json(&c, "call.negative_prompt");
    const char *texts[2] = {gh_str(gh_json(&c, "call.prompt")), neg ? gh_str(neg) : ""};   /* None -> "" */
    static const char *const pre[2] = {"prompt", "negative"};
    float *e = malloc((size_t)N * D * sizeof(float)), *e2 = malloc((size_t)HV15_BYT5_MAX_LENGTH * D2 * sizeof(float));
    for (int k = 0; k < 2; k++) {
        int64_t ids[S], mask[S], m2[HV15_BYT5_MAX_LENGTH];
        char name[64];
        ASSERT_OK(hv15_mllm_tokens(t, texts[k], ids, mask, NULL));
        snprintf(name, sizeof name, "%s_input_ids", pre[k]);
        check_ids(&c, name, ids, S);
        snprintf(name, sizeof name, "%s_attention_mask", pre[k]);
        check_ids(&c, name, mask, S);
        ASSERT_OK(hv15_mllm_prompt_embeds(&m, t, texts[k], e, mask));
        check_ids(&c, k ? "negative_prompt_embeds_mask" : "prompt_embeds_mask", mask, (size_t)N);   /* F32 there */
        float *want = gh_f32(&c, NULL, k ? "negative_prompt_embeds" : "prompt_embeds");
        gh_check_rel_l2(&c, k ? "negative_prompt_embeds" : "prompt_embeds", e, want, (size_t)N * D, 1e-5);
        free(want);
        ASSERT_OK(hv15_byt5_prompt_embeds(&t5, &bt, texts[k], e2, m2));
        check_ids(&c, k ? "negative_prompt_embeds_mask_2" : "prompt_embeds_mask_2", m2, HV15_BYT5_MAX_LENGTH);
        want = gh_f32(&c, NULL, k ? "negative_prompt_embeds_2" : "prompt_embeds_2");
        if (k) gh_check_exact_f32(&c, "negative_prompt_embeds_2 (no glyph text: zeros)", e2, want, (size_t)HV15_BYT5_MAX_LENGTH * D2);
        else gh_check_rel_l2(&c, "prompt_embeds_2", e2, want, (size_t)HV15_BYT5_MAX_LENGTH * D2, 1e-5);
        free(want);
    }
    free(e), free(e2);
    t5_free(&t5);
    byt5_tokenizer_free(&bt);
    bpe_free(t);
    qwen_free(&m);
    gh_close(&c);
}

static void test_mask(void **state) {
    (void)state;
    enum { n = 5 };
    float b[n * n];
    const int64_t right[n] = {1, 1, 1, 0, 0}, left[n] = {0, 0, 1, 1, 1};
    qwen_build_mask(right, n, b);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)   /* padded queries see every valid key before them */
            assert_true((b[i * n + j] == 0) == (j <= i && j < 3));
    qwen_build_mask(left, n, b);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)   /* rows 0, 1 have no allowed key: all keys */
            assert_true((b[i * n + j] == 0) == (i < 2 || (j <= i && j >= 2)));
}

static void test_bad_config(void **state) {
    (void)state;
    char dir[64], path[256];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"hidden_size\": 32, \"intermediate_size\": 48, \"num_hidden_layers\": 2, "
                      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 64, "
                      "\"rope_scaling\": {\"mrope_section\": [1, 1, 1]}}";
    tu_write(path, cfg, strlen(cfg));
    qwen_config c;
    assert_int_not_equal(qwen_config_load(&c, path), 0);
    assert_non_null(strstr(cvx_last_error(), "mrope_section"));
    cfg = "{\"hidden_size\": 32, \"intermediate_size\": 48, \"num_hidden_layers\": 2, "
          "\"num_attention_heads\": 4, \"num_key_value_heads\": 3, \"vocab_size\": 64}";
    tu_write(path, cfg, strlen(cfg));
    assert_int_not_equal(qwen_config_load(&c, path), 0);
    assert_non_null(strstr(cvx_last_error(), "num_key_value_heads"));
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hidden_states),
        cmocka_unit_test(test_prompt_embeds),
        cmocka_unit_test(test_gguf),
        cmocka_unit_test(test_prefixed_names),
        cmocka_unit_test(test_e2e_text_side),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
