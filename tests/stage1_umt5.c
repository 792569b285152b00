/* Wan's text side against upstream (golden_wan README sections 1 and 2):
 *  - T5Tokenizer on the cleaned golden prompts with max_length 512: input_ids, attention_mask,
 *    seq_lens exactly, the untruncated ids of case.json;
 *  - UMT5EncoderModel(input_ids, attention_mask): last_hidden_state of all 12 prompts (rel L2
 *    <= 1e-5), prompt0.hidden_states.{0,1,2}, the pipeline's prompt_embeds (rows past seq_len
 *    exact zeros), and the whole text path prompt -> prompt_clean -> tokens -> prompt_embeds;
 *  - the mask's semantics where the goldens do not reach (keys masked anywhere, every key
 *    masked), loading from a single file with a separate config, per-block bias detection. */
#include "golden_harness.h"

#include "stage1/prompt_clean.h"
#include "stage1/t5.h"
#include "stage1/t5_tokenizer.h"

#define TOK_CASE "tests/data/golden_wan/tokenizer"
#define UMT5_CASE "tests/data/golden_wan/umt5"
#define TE_DIR UMT5_CASE "/model/text_encoder"
#define L 512

static void test_tokenizer(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, TOK_CASE);
    t5_tokenizer tok;
    ASSERT_OK(t5_tokenizer_load(&tok, gh_path(&c, "model/tokenizer")));
    assert_int_equal(tok.vocab_size, 1300);   /* len(tokenizer): 1000 pieces + 300 extra ids */
    assert_int_equal(tok.eos_id, 1);
    assert_int_equal(tok.pad_id, 0);
    assert_true(tok.words_split);
    json_object *cleaned = gh_json(&c, "cleaned"), *prompts = gh_json(&c, "prompts"),
                *raw = gh_json(&c, "untruncated_input_ids"), *raw_len = gh_json(&c, "untruncated_lengths");
    const cvx_tensor *want_ids = gh_tensor(&c, "input_ids"), *want_mask = gh_tensor(&c, "attention_mask"),
                     *want_len = gh_tensor(&c, "seq_lens");
    const size_t n = gh_len(prompts);
    assert_int_equal(n, 12);
    assert_int_equal(want_ids->shape[1], L);
    for (size_t p = 0; p < n; p++) {
        char *text;
        ASSERT_OK(wan_prompt_clean(gh_str(gh_at(prompts, p)), &text));
        assert_string_equal(text, gh_str(gh_at(cleaned, p)));
        int64_t got[2 * L], want[2 * L];
        int n_raw;
        ASSERT_OK(t5_tokenize(&tok, text, L, got, got + L, &n_raw));
        int64_t seq_len = 0;
        for (int i = 0; i < L; i++) {
            want[i] = gh_i64_at(want_ids, p * L + (size_t)i);
            want[L + i] = gh_i64_at(want_mask, p * L + (size_t)i);
            seq_len += got[L + i];
        }
        char what[48];
        snprintf(what, sizeof what, "prompt %zu ids + mask", p);
        gh_check_exact_i64(&c, what, got, want, 2 * L);
        assert_int_equal(seq_len, gh_i64_at(want_len, p));
        assert_int_equal(n_raw, gh_int(gh_at(raw_len, p)));
        int64_t *full;
        int nf;
        ASSERT_OK(t5_tokenize_raw(&tok, text, &full, &nf));
        json_object *r = gh_at(raw, p);
        assert_int_equal(nf, (int)gh_len(r));
        for (int i = 0; i < nf; i++)
            if (full[i] != gh_int(gh_at(r, (size_t)i))) fail_msg("prompt %zu untruncated id %d differs", p, i);
        free(full);
        free(text);
    }
    /* a prompt ending in a literal </s> keeps one (the hidden set's "...start</s>"); the extra
     * ids count down from len(tokenizer) - 1 and eat the spaces around them */
    int64_t ids[L], mask[L], ids2[L], mask2[L];
    ASSERT_OK(t5_tokenize(&tok, "start</s>", L, ids, mask, NULL));
    int len = 0;
    while (len < L && mask[len]) len++;
    assert_true(len >= 2 && ids[len - 1] == 1 && ids[len - 2] != 1);
    ASSERT_OK(t5_tokenize(&tok, "a <extra_id_299>  b <extra_id_0>", L, ids, mask, NULL));
    ASSERT_OK(t5_tokenize(&tok, "a<extra_id_299>b<extra_id_0>", L, ids2, mask2, NULL));
    assert_memory_equal(ids, ids2, sizeof ids);
    int seen = 0;
    for (int i = 0; i < L; i++) seen |= (ids[i] == 1000) | (ids[i] == 1299) << 1;
    assert_int_equal(seen, 3);
    t5_tokenizer_free(&tok);
    gh_close(&c);
}

/* The golden ids, masks and seq_lens. */
typedef struct {
    int64_t *ids, *mask, seq_len[16];
    int B, D;
} golden_in;

static void load_inputs(gh_case *c, golden_in *g) {
    const cvx_tensor *ids = gh_tensor(c, "input_ids"), *mask = gh_tensor(c, "attention_mask"),
                     *lhs = gh_tensor(c, "last_hidden_state");
    g->B = (int)ids->shape[0];
    g->D = (int)lhs->shape[2];
    assert_true(g->B <= 16 && ids->shape[1] == L && mask->dtype == CVX_I64);
    g->ids = malloc(ids->nbytes);
    g->mask = malloc(mask->nbytes);
    memcpy(g->ids, ids->data, ids->nbytes);
    memcpy(g->mask, mask->data, mask->nbytes);
    for (int b = 0; b < g->B; b++) {
        g->seq_len[b] = 0;
        for (int i = 0; i < L; i++) g->seq_len[b] += g->mask[(size_t)b * L + i];
    }
}

static void test_last_hidden_state(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, UMT5_CASE);
    golden_in g;
    load_inputs(&c, &g);
    t5_model m;
    ASSERT_OK(t5_build(&m, gh_path(&c, "model/text_encoder"), NULL));
    assert_int_equal(m.cfg.per_block_bias, 1);
    assert_int_equal(m.cfg.d_model, g.D);
    const size_t per = (size_t)L * g.D;
    float *want = gh_f32(&c, NULL, "last_hidden_state"), *out = malloc(g.B * per * sizeof(float));
    for (int b = 0; b < g.B; b += 3) {   /* three prompts per call: each with its own mask */
        const int nb = g.B - b < 3 ? g.B - b : 3;
        ASSERT_OK(umt5_encode(&m, g.ids + (size_t)b * L, g.mask + (size_t)b * L, nb, L, out + b * per, NULL));
    }
    for (int b = 0; b < g.B; b++) {
        char what[48];
        snprintf(what, sizeof what, "last_hidden_state %d (seq_len %lld)", b, (long long)g.seq_len[b]);
        gh_check_rel_l2(&c, what, out + b * per, want + b * per, per, 1e-5);
    }
    /* transformers' output_hidden_states for prompt 0: embedding, block 0, final norm of block 1 */
    assert_int_equal(m.cfg.num_layers, 2);
    float *x = malloc(per * sizeof(float)), *bias = malloc((size_t)m.cfg.num_heads * L * L * sizeof(float));
    ASSERT_OK(t5_embed(&m, g.ids, L, x));
    float *hs = gh_f32(&c, NULL, "prompt0.hidden_states.0");
    gh_check_rel_l2(&c, "prompt0.hidden_states.0", x, hs, per, 0);   /* a row copy: exact */
    free(hs);
    t5_scratch s;
    t5_scratch_alloc(&s, &m.cfg, L);
    for (int l = 0; l < 2; l++) {
        t5_position_bias(&m, t5_block_bias_table(&m, &m.blocks[l]), L, bias);
        t5_layer(&m, &m.blocks[l], x, 1, L, bias, g.mask, &s);
        if (l == 1) cvx_rmsnorm(x, x, L, g.D, m.final_ln, m.cfg.eps);
        char name[48];
        snprintf(name, sizeof name, "prompt0.hidden_states.%d", l + 1);
        hs = gh_f32(&c, NULL, "%s", name);
        gh_check_rel_l2(&c, name, x, hs, per, 1e-5);
        free(hs);
    }
    assert_true(m.blocks[1].rel_bias != NULL && m.blocks[0].rel_bias == NULL);   /* block 0's is the model's */
    t5_scratch_free(&s);
    free(x), free(bias), free(out), free(want), free(g.ids), free(g.mask);
    t5_free(&m);
    gh_close(&c);
}

/* prompt_embeds: the rows of last_hidden_state up to seq_len, then exact zeros. */
static void check_prompt_embeds(gh_case *c, const float *got, const int64_t *seq_len, int B, int D, const char *how) {
    const size_t per = (size_t)L * D;
    float *want = gh_f32(c, NULL, "prompt_embeds");
    for (int b = 0; b < B; b++) {
        size_t nonzero = 0;
        for (size_t i = (size_t)seq_len[b] * D; i < per; i++) nonzero += got[b * per + i] != 0.0f || signbit(got[b * per + i]);
        for (size_t i = (size_t)seq_len[b] * D; i < per; i++) assert_true(want[b * per + i] == 0.0f);
        if (nonzero) fail_msg("%s prompt %d: %zu values past seq_len are not +0.0", how, b, nonzero);
        char what[64];
        snprintf(what, sizeof what, "%s prompt_embeds %d", how, b);
        gh_check_rel_l2(c, what, got + b * per, want + b * per, per, 1e-5);
    }
    free(want);
}

static void test_prompt_embeds(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, UMT5_CASE);
    golden_in g;
    load_inputs(&c, &g);
    t5_model m;
    ASSERT_OK(t5_build(&m, gh_path(&c, "model/text_encoder"), NULL));
    const size_t per = (size_t)L * g.D;
    float *out = malloc(g.B * per * sizeof(float));
    memset(out, 0xff, g.B * per * sizeof(float));   /* NaN: every value must be written */
    for (int b = 0; b < g.B; b += 2) {   /* prompt and negative prompt, as stage 1 pairs them */
        const int nb = g.B - b < 2 ? g.B - b : 2;
        ASSERT_OK(umt5_prompt_embeds(&m, g.ids + (size_t)b * L, g.seq_len + b, nb, L, out + b * per, NULL));
    }
    check_prompt_embeds(&c, out, g.seq_len, g.B, g.D, "pairs");
    float *one = malloc(per * sizeof(float));   /* one prompt alone: no mask at all inside */
    ASSERT_OK(umt5_prompt_embeds(&m, g.ids + 7 * (size_t)L, g.seq_len + 7, 1, L, one, NULL));
    ASSERT_REL_L2(one, out + 7 * per, per, 1e-6);
    const int64_t bad_len = 0;
    assert_int_not_equal(umt5_prompt_embeds(&m, g.ids, &bad_len, 1, L, one, NULL), 0);
    assert_non_null(strstr(cvx_last_error(), "seq_len"));
    free(one), free(out), free(g.ids), free(g.mask);
    t5_free(&m);
    gh_close(&c);
}

/* The whole text side: golden prompt -> prompt_clean -> tokenizer -> prompt_embeds. */
static void test_text_path(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, UMT5_CASE);
    json_object *prompts = gh_json(&c, "prompts");
    const int B = (int)gh_len(prompts);
    t5_tokenizer tok;
    ASSERT_OK(t5_tokenizer_load(&tok, TOK_CASE "/model/tokenizer"));
    t5_model m;
    ASSERT_OK(t5_build(&m, gh_path(&c, "model/text_encoder"), NULL));
    const int D = m.cfg.d_model;
    int64_t *ids = malloc((size_t)B * L * sizeof(int64_t)), seq_len[16];
    float *out = malloc((size_t)B * L * D * sizeof(float));
    for (int b = 0; b < B; b++) {
        char *text;
        ASSERT_OK(wan_prompt_clean(gh_str(gh_at(prompts, b)), &text));
        int64_t *row = ids + (size_t)b * L, mask[L];
        ASSERT_OK(t5_tokenize(&tok, text, L, row, mask, NULL));
        seq_len[b] = 0;
        for (int i = 0; i < L; i++) seq_len[b] += mask[i];
        assert_int_equal(seq_len[b], gh_int(gh_at(gh_json(&c, "seq_lens"), (size_t)b)));
        free(text);
    }
    ASSERT_OK(umt5_prompt_embeds(&m, ids, seq_len, B, L, out, NULL));
    check_prompt_embeds(&c, out, seq_len, B, D, "text path");
    free(ids), free(out);
    t5_free(&m);
    t5_tokenizer_free(&tok);
    gh_close(&c);
}

/* Keys masked anywhere get zero weight: the unmasked rows do not change, bit for bit, when the
 * masked tokens do. An all-ones mask is the same as none. Every key masked: finite (upstream
 * averages the values). */
static void test_mask_semantics(void **state) {
    (void)state;
    t5_model m;
    ASSERT_OK(t5_build(&m, TE_DIR, NULL));
    enum { S = 40 };
    const int D = m.cfg.d_model;
    int64_t ids[S], ids2[S], mask[S], ones[S], zeros[S];
    for (int i = 0; i < S; i++) {
        ids[i] = 5 + (i * 37) % 900;
        mask[i] = (i % 3 != 0) && i != 17;   /* masked at the start, inside and between */
        ids2[i] = mask[i] ? ids[i] : 1000 + i;
        ones[i] = 1;
        zeros[i] = 0;
    }
    float *a = malloc(S * D * sizeof(float)), *b = malloc(S * D * sizeof(float));
    ASSERT_OK(umt5_encode(&m, ids, mask, 1, S, a, NULL));
    ASSERT_OK(umt5_encode(&m, ids2, mask, 1, S, b, NULL));
    for (int i = 0; i < S; i++)
        if (mask[i]) assert_memory_equal(a + i * D, b + i * D, D * sizeof(float));
    int differ = 0;
    for (int i = 0; i < S; i++) differ |= !mask[i] && memcmp(a + i * D, b + i * D, D * sizeof(float)) != 0;
    assert_true(differ);   /* the masked rows themselves did change */
    ASSERT_OK(umt5_encode(&m, ids, ones, 1, S, a, NULL));
    ASSERT_OK(umt5_encode(&m, ids, NULL, 1, S, b, NULL));
    assert_memory_equal(a, b, S * D * sizeof(float));
    ASSERT_OK(umt5_encode(&m, ids, zeros, 1, S, a, NULL));
    for (int i = 0; i < S * D; i++) assert_true(isfinite(a[i]));
    free(a), free(b);
    t5_free(&m);
}

/* A single weights file with a separate config (ComfyUI's layout): shared.weight or
 * encoder.embed_tokens.weight; per-block biases detected without model_type, required with it. */
static void test_single_file(void **state) {
    (void)state;
    char dir[256], file[512], cfg[512], cfg_plain[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/umt5_renamed.safetensors", dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(cfg_plain, sizeof cfg_plain, "%s/config_no_type.json", dir);
    cvx_safetensors *st = tu_open(TE_DIR "/model.safetensors");
    cvx_st_writer *w = cvx_stw_new(), *w2 = cvx_stw_new();
    for (int i = 0; i < cvx_st_count(st); i++) {
        const cvx_tensor *t = cvx_st_tensor(st, i);
        const char *name = strcmp(t->name, "shared.weight") == 0 ? "encoder.embed_tokens.weight" : t->name;
        ASSERT_OK(cvx_stw_add(w, name, t->dtype, t->ndim, t->shape, t->data));
        if (!strstr(t->name, "block.1.layer.0.SelfAttention.relative_attention_bias"))
            ASSERT_OK(cvx_stw_add(w2, t->name, t->dtype, t->ndim, t->shape, t->data));
    }
    ASSERT_OK(cvx_stw_write(w, file));
    cvx_stw_free(w);
    cvx_st_close(st);
    /* the real config, and one without model_type */
    size_t n;
    char *json = cvx_read_file(TE_DIR "/config.json", &n);
    ASSERT_NONNULL(json);
    tu_write(cfg, json, n);
    char *mt = strstr(json, "\"model_type\": \"umt5\",");
    assert_non_null(mt);
    memset(mt, ' ', strlen("\"model_type\": \"umt5\","));
    tu_write(cfg_plain, json, n);
    free(json);

    t5_model a, b;
    ASSERT_OK(t5_build(&a, TE_DIR, NULL));
    ASSERT_OK(t5_build_file(&b, file, cfg_plain, NULL));
    assert_int_equal(b.cfg.per_block_bias, 1);   /* found in the weights */
    enum { S = 24 };
    const int D = a.cfg.d_model;
    int64_t ids[S];
    for (int i = 0; i < S; i++) ids[i] = 3 + i * 41;
    float *x = malloc(S * D * sizeof(float)), *y = malloc(S * D * sizeof(float));
    ASSERT_OK(t5_encode(&a, ids, 1, S, x, NULL));
    ASSERT_OK(t5_encode(&b, ids, 1, S, y, NULL));
    assert_memory_equal(x, y, S * D * sizeof(float));
    t5_free(&b);

    /* model_type umt5 but block 1 has no bias of its own: a clear error naming the tensor */
    ASSERT_OK(cvx_stw_write(w2, file));
    cvx_stw_free(w2);
    assert_int_not_equal(t5_build_file(&b, file, cfg, NULL), 0);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"));
    /* without model_type the same file is a T5: block 0's bias shared, other numbers */
    ASSERT_OK(t5_build_file(&b, file, cfg_plain, NULL));
    assert_int_equal(b.cfg.per_block_bias, 0);
    ASSERT_OK(t5_encode(&b, ids, 1, S, y, NULL));
    assert_true(memcmp(x, y, S * D * sizeof(float)) != 0);
    t5_free(&b);
    t5_free(&a);
    free(x), free(y);
    tu_rmrf(dir);
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer),       cmocka_unit_test(test_last_hidden_state),
        cmocka_unit_test(test_prompt_embeds),   cmocka_unit_test(test_text_path),
        cmocka_unit_test(test_mask_semantics),  cmocka_unit_test(test_single_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
