/* LTX-Video's text path (LTXPipeline._get_t5_prompt_embeds) with our T5 tokenizer and encoder
 * against golden_ltx/text: max length 128 with padding and the attention mask, no prompt
 * cleaning, the encoder run WITHOUT the mask (t5_encode: padding rows are ordinary outputs; the
 * mask goes to the transformer's cross-attention), a truncated prompt; encode_prompt's positive,
 * negative and None → "" embeddings. Ids and masks exact; embeddings rel L2 ≤ 1e-5. */
#include "golden_harness.h"

#include "stage1/t5.h"
#include "stage1/t5_tokenizer.h"

#define TEXT "tests/data/golden_ltx/text"
#define LTX_MAX_LEN 128   /* the pipelines' max_sequence_length and the tokenizer's model_max_length */
#define TOL 1e-5

typedef struct {
    gh_case c;
    t5_tokenizer tok;
    t5_model m;
    int D;
} text_case;

static void tc_open(text_case *t) {
    memset(t, 0, sizeof *t);
    gh_open(&t->c, TEXT);
    if (t5_tokenizer_load(&t->tok, gh_path(&t->c, "model/tokenizer"))) fail_msg("%s", cvx_last_error());
    if (t5_build(&t->m, gh_path(&t->c, "model/text_encoder"), NULL)) fail_msg("%s", cvx_last_error());
    t->D = t->m.cfg.d_model;
}

static void tc_close(text_case *t) {
    t5_free(&t->m);
    t5_tokenizer_free(&t->tok);
    gh_close(&t->c);
}

/* The pipeline's embeddings of one prompt: ids, mask [128]; embeds [128, D]. */
static void prompt_embeds(text_case *t, const char *prompt, int64_t *ids, int64_t *mask, float *emb, int *n_raw) {
    ASSERT_OK(t5_tokenize(&t->tok, prompt, LTX_MAX_LEN, ids, mask, n_raw));
    ASSERT_OK(t5_encode(&t->m, ids, 1, LTX_MAX_LEN, emb, NULL));
}

static void check_ids(gh_case *c, const char *what, const int64_t *got, const cvx_tensor *want, size_t off, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != gh_i64_at(want, off + i))
            fail_msg("%s[%zu]: got %lld, want %lld", what, i, (long long)got[i], (long long)gh_i64_at(want, off + i));
    (void)c;
}

static void test_prompts(void **state) {
    (void)state;
    text_case t;
    tc_open(&t);
    json_object *prompts = gh_json(&t.c, "prompts");
    const cvx_tensor *wid = gh_tensor(&t.c, "input_ids"), *wmask = gh_tensor(&t.c, "attention_mask");
    float *want = gh_f32(&t.c, NULL, "last_hidden_state"), *masked = gh_f32(&t.c, NULL, "last_hidden_state_with_mask_NOT_USED_BY_PIPELINE");
    int64_t ids[LTX_MAX_LEN], mask[LTX_MAX_LEN];
    float *emb = malloc(sizeof(float) * LTX_MAX_LEN * t.D);
    size_t np = gh_len(prompts), per = (size_t)LTX_MAX_LEN * t.D;
    int truncated = 0;
    for (size_t i = 0; i < np; i++) {
        json_object *p = gh_at(prompts, i);
        int n_raw;
        prompt_embeds(&t, gh_str(gh_get(p, "prompt")), ids, mask, emb, &n_raw);
        char what[64];
        snprintf(what, sizeof what, "prompt %zu input_ids", i);
        check_ids(&t.c, what, ids, wid, i * LTX_MAX_LEN, LTX_MAX_LEN);
        snprintf(what, sizeof what, "prompt %zu attention_mask", i);
        check_ids(&t.c, what, mask, wmask, i * LTX_MAX_LEN, LTX_MAX_LEN);
        if (json_object_get_boolean(gh_get(p, "truncated"))) {
            assert_true(n_raw > LTX_MAX_LEN);
            truncated++;
        } else {
            assert_int_equal(n_raw, (int)gh_int(gh_get(p, "untruncated_len")));
        }
        snprintf(what, sizeof what, "prompt %zu last_hidden_state", i);
        gh_check_rel_l2(&t.c, what, emb, want + i * per, per, TOL);
        /* the pipeline's unmasked encoder is not the masked one (the trap): padding changes the rows */
        int pads = 0;
        for (int k = 0; k < LTX_MAX_LEN; k++) pads += mask[k] == 0;
        if (pads) assert_true(cvx_rel_l2(emb, masked + i * per, per) > 1e-3);
    }
    assert_int_equal(truncated, 1);
    free(emb);
    free(want);
    free(masked);
    tc_close(&t);
}

/* encode_prompt(prompt, negative_prompt) and negative None → "". */
static void test_pipeline_embeds(void **state) {
    (void)state;
    text_case t;
    tc_open(&t);
    static const struct { const char *json, *name; } rows[] = {
        {"pipeline_prompt", "pipeline.prompt"},
        {"pipeline_negative_prompt", "pipeline.negative_prompt"},
        {NULL, "pipeline.none_negative_prompt"},
    };
    int64_t ids[LTX_MAX_LEN], mask[LTX_MAX_LEN];
    float *emb = malloc(sizeof(float) * LTX_MAX_LEN * t.D);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *prompt = rows[i].json ? gh_str(gh_json(&t.c, rows[i].json)) : "";
        prompt_embeds(&t, prompt, ids, mask, emb, NULL);
        char what[96];
        snprintf(what, sizeof what, "%s_attention_mask", rows[i].name);
        check_ids(&t.c, what, mask, gh_tensor(&t.c, "%s", what), 0, LTX_MAX_LEN);
        snprintf(what, sizeof what, "%s_embeds", rows[i].name);
        float *want = gh_f32(&t.c, NULL, "%s", what);
        gh_check_rel_l2(&t.c, what, emb, want, (size_t)LTX_MAX_LEN * t.D, TOL);
        free(want);
    }
    free(emb);
    tc_close(&t);
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompts),
        cmocka_unit_test(test_pipeline_embeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
