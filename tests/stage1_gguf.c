/* T5 / UMT5 encoders from GGUF files with llama.cpp's tensor names (city96's t5-v1_1-xxl-encoder /
 * umt5-xxl-encoder files; there is no golden GGUF encoder, so the fixtures are converted here from
 * the UMT5 golden, tests/data/golden_wan/umt5, with gguf-py's TensorNameMap names):
 *   - the name table (t5_llama_name);
 *   - an F32 GGUF: the golden last_hidden_state (1e-5) and the same bytes as the HF safetensors;
 *   - a Q8_0 GGUF (token_embd and every linear whose rows are whole blocks; attn_rel_b F32, as
 *     llama-quantize keeps it): the output of a safetensors twin holding its dequantized weights;
 *   - stage1 --text_encoder FILE.gguf through the program (golden_adapters e2e_gguf_wan_q8_0's
 *     encoder converted): the golden prompt embeddings. */
#include "golden_harness.h"
#include "weights_harness.h"

#include "stage1/t5.h"

#define UMT5_CASE "tests/data/golden_wan/umt5"
#define TE_DIR UMT5_CASE "/model/text_encoder"
#define L 512

static void test_names(void **state) {
    (void)state;
    static const char *const pairs[][2] = {
        {"shared.weight", "token_embd.weight"},
        {"encoder.final_layer_norm.weight", "enc.output_norm.weight"},
        {"encoder.block.0.layer.0.SelfAttention.q.weight", "enc.blk.0.attn_q.weight"},
        {"encoder.block.11.layer.0.SelfAttention.o.weight", "enc.blk.11.attn_o.weight"},
        {"encoder.block.3.layer.0.SelfAttention.relative_attention_bias.weight", "enc.blk.3.attn_rel_b.weight"},
        {"encoder.block.0.layer.0.layer_norm.weight", "enc.blk.0.attn_norm.weight"},
        {"encoder.block.2.layer.1.DenseReluDense.wi_0.weight", "enc.blk.2.ffn_gate.weight"},
        {"encoder.block.2.layer.1.DenseReluDense.wi_1.weight", "enc.blk.2.ffn_up.weight"},
        {"encoder.block.2.layer.1.DenseReluDense.wo.weight", "enc.blk.2.ffn_down.weight"},
        {"encoder.block.2.layer.1.layer_norm.weight", "enc.blk.2.ffn_norm.weight"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char out[128];
        t5_llama_name(pairs[i][0], out, sizeof out);
        assert_string_equal(out, pairs[i][1]);
    }
}

/* The HF encoder weights of `te_dir` as a GGUF with llama.cpp names; q8: Q8_0 where rows allow
 * (attn_rel_b F32). */
static void write_llama_gguf(const char *te_dir, const char *out, int q8) {
    wh_write_llama_gguf(te_dir, out, "t5encoder", t5_llama_name, q8, "attn_rel_b");
}

/* A safetensors file with HF names holding the dequantized weights of a llama-named GGUF. */
static void write_hf_twin(const char *gguf, const char *te_dir, const char *out) {
    cvx_weights *hf = cvx_weights_open(te_dir), *g = cvx_weights_open(gguf);
    ASSERT_NONNULL(hf);
    ASSERT_NONNULL(g);
    cvx_st_writer *sw = cvx_stw_new();
    float **bufs = calloc((size_t)cvx_weights_count(hf), sizeof *bufs);
    for (int i = 0; i < cvx_weights_count(hf); i++) {
        const cvx_tensor *t = cvx_weights_at(hf, i);
        char name[128];
        t5_llama_name(t->name, name, sizeof name);
        const cvx_tensor *q = cvx_weights_find(g, name);
        ASSERT_NONNULL(q);
        bufs[i] = cvx_tensor_f32_dup(q);
        ASSERT_OK(cvx_stw_add_f32(sw, t->name, CVX_F32, t->ndim, t->shape, bufs[i]));
    }
    ASSERT_OK(cvx_stw_write(sw, out));
    cvx_stw_free(sw);
    for (int i = 0; i < cvx_weights_count(hf); i++) free(bufs[i]);
    free(bufs);
    cvx_weights_close(hf), cvx_weights_close(g);
}

static void encode_golden(const char *weights, float **out, size_t *per, int *B) {
    gh_case c;
    gh_open(&c, UMT5_CASE);
    const cvx_tensor *ids = gh_tensor(&c, "input_ids"), *mask = gh_tensor(&c, "attention_mask");
    *B = (int)ids->shape[0];
    t5_model m;
    ASSERT_OK(t5_build_file(&m, weights, TE_DIR "/config.json", NULL));
    *per = (size_t)L * m.cfg.d_model;
    *out = cvx_alloc_f32((size_t)*B * *per);
    int64_t *iv = malloc(ids->nbytes), *mv = malloc(mask->nbytes);
    memcpy(iv, ids->data, ids->nbytes), memcpy(mv, mask->data, mask->nbytes);
    for (int b = 0; b < *B; b += 4) {
        const int nb = *B - b < 4 ? *B - b : 4;
        ASSERT_OK(umt5_encode(&m, iv + (size_t)b * L, mv + (size_t)b * L, nb, L, *out + b * *per, NULL));
    }
    free(iv), free(mv);
    t5_free(&m);
    gh_close(&c);
}

static void test_umt5_gguf(void **state) {
    (void)state;
    char dir[64], f32[128], q8[128], twin[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(f32, sizeof f32, "%s/umt5-f32.gguf", dir);
    snprintf(q8, sizeof q8, "%s/umt5-Q8_0.gguf", dir);
    snprintf(twin, sizeof twin, "%s/twin.safetensors", dir);
    write_llama_gguf(TE_DIR, f32, 0);
    write_llama_gguf(TE_DIR, q8, 1);
    write_hf_twin(q8, TE_DIR, twin);

    gh_case c;
    gh_open(&c, UMT5_CASE);
    float *want = gh_f32(&c, NULL, "last_hidden_state"), *hf, *a, *b, *t;
    size_t per;
    int B;
    encode_golden(TE_DIR, &hf, &per, &B);
    encode_golden(f32, &a, &per, &B);
    gh_check_rel_l2(&c, "F32 GGUF (llama.cpp names)", a, want, (size_t)B * per, 1e-5);
    assert_memory_equal(a, hf, sizeof(float) * (size_t)B * per);
    encode_golden(q8, &b, &per, &B);
    encode_golden(twin, &t, &per, &B);
    gh_check_rel_l2(&c, "Q8_0 GGUF vs its dequantized twin", b, t, (size_t)B * per, 1e-6);
    print_message("  Q8_0 GGUF vs the f32 golden: rel L2 %.2e\n", cvx_rel_l2(b, want, (size_t)B * per));
    free(want), free(hf), free(a), free(b), free(t);
    gh_close(&c);
    tu_rmrf(dir);
}

/* stage1 --text_encoder FILE.gguf on a whole model. */
static void test_stage1_cli(void **state) {
    (void)state;
    const char *cdir = "tests/data/golden_adapters/e2e_gguf_wan_q8_0";
    char dir[64], gguf[128], cmd[2048], s1[256], path[256];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(gguf, sizeof gguf, "%s/umt5.gguf", dir);
    char te[256];
    snprintf(te, sizeof te, "%s/model/text_encoder", cdir);
    write_llama_gguf(te, gguf, 0);
    gh_case c;
    gh_open(&c, cdir);
    tu_program(s1, sizeof s1, "stage1");
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s/model --text_encoder %s --prompt '%s' --negative_prompt '' "
             "--output_dir %s", s1, cdir, gguf, gh_str(gh_json(&c, "call.prompt")), dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", dir);
    cvx_safetensors *e = tu_open(path);
    size_t n;
    float *got = tu_f32(e, "prompt_embeds", &n), *want = gh_f32(&c, NULL, "prompt_embeds");
    gh_check_max_abs(&c, "prompt_embeds (--text_encoder GGUF)", got, want, n, 1e-4);
    free(got), free(want);
    cvx_st_close(e);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    cvx_config gc;
    const char *w;
    ASSERT_OK(cvx_config_load(&gc, path));
    ASSERT_OK(cvx_cfg_str(&gc, "text_encoder_weights", &w));
    assert_non_null(strstr(w, "gguf t5encoder"));
    cvx_config_free(&gc);
    gh_close(&c);
    tu_rmrf(dir);
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_umt5_gguf),
        cmocka_unit_test(test_stage1_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
