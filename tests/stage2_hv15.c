/* HunyuanVideo15Transformer3DModel (stage2/hunyuan15.c) against the HunyuanVideo-1.5 golden cases
 * (tests/data/golden_hv15/, copied from shared/golden_hv15: transformer_t2v with an all-zero
 * image_embeds and a ByT5 mask of 0 / 11 tokens, transformer_i2v with random image embeddings):
 *   - the output (padded text rows skipped, the default) and with every text row computed;
 *   - every stored intermediate: rotary tables, time embedding, token refiner, ByT5 and image
 *     projections, patch embedding, each block's video and (reordered) text stream;
 *   - the three-piece forward gives hv15_forward's bytes; bf16 stays close (distance printed);
 *   - bad configs, missing tensors and bad inputs give one clear error. */
#include "golden_harness.h"

#include "fileio.h"
#include "lora.h"
#include "stage2/hunyuan15.h"

#define HV_DATA "tests/data/golden_hv15/"
#define TOL 1e-5

typedef struct {
    gh_case c;
    hv15_transformer *m;
    float *x, *text, *mask, *text2, *mask2, *image, *t;
    hv15_cond cond;
    int B, F, H, W, D;
    size_t n_out;
} hv_case;

static void hc_open(hv_case *h, const char *name, cvx_ctx *ctx) {
    char p[256];
    memset(h, 0, sizeof *h);
    snprintf(p, sizeof p, HV_DATA "%s", name);
    gh_open(&h->c, p);
    h->m = hv15_load(gh_path(&h->c, "model/transformer"), ctx);
    if (!h->m) fail_msg("%s", cvx_last_error());
    const hv15_config *c = hv15_get_config(h->m);
    const cvx_tensor *hs = gh_tensor(&h->c, "hidden_states"), *eh = gh_tensor(&h->c, "encoder_hidden_states");
    const cvx_tensor *eh2 = gh_tensor(&h->c, "encoder_hidden_states_2"), *im = gh_tensor(&h->c, "image_embeds");
    assert_int_equal(hs->ndim, 5);
    h->B = (int)hs->shape[0], h->F = (int)hs->shape[2], h->H = (int)hs->shape[3], h->W = (int)hs->shape[4];
    h->D = c->num_attention_heads * c->attention_head_dim;
    assert_int_equal(hs->shape[1], c->in_channels);
    h->x = cvx_tensor_f32_dup(hs);
    h->text = cvx_tensor_f32_dup(eh);
    h->mask = gh_f32(&h->c, NULL, "encoder_attention_mask");
    h->text2 = cvx_tensor_f32_dup(eh2);
    h->mask2 = gh_f32(&h->c, NULL, "encoder_attention_mask_2");
    h->image = cvx_tensor_f32_dup(im);
    h->t = gh_f32(&h->c, NULL, "timestep");
    h->cond = (hv15_cond){.text = h->text, .text_mask = h->mask, .L = (int)eh->shape[1], .text2 = h->text2,
                          .text2_mask = h->mask2, .L2 = (int)eh2->shape[1], .image = h->image,
                          .L_img = (int)im->shape[1], .timestep = h->t};
    h->n_out = (size_t)h->B * c->out_channels * h->F * h->H * h->W;
}

static void hc_close(hv_case *h) {
    hv15_free(h->m);
    free(h->x); free(h->text); free(h->mask); free(h->text2); free(h->mask2); free(h->image); free(h->t);
    gh_close(&h->c);
}

static void check_inter(hv_case *h, const char *name, const float *got, size_t n) {
    size_t nw;
    float *want = gh_f32(&h->c, &nw, "inter.%s", name);
    if (nw != n) fail_msg("%s: inter.%s has %zu values, computed %zu", h->c.name, name, nw, n);
    gh_check_rel_l2(&h->c, name, got, want, n, TOL);
    free(want);
}

/* ------------------------------------------------------------------ golden cases */

static void check_golden(const char *name, int expect_t2v) {
    hv_case h;
    hc_open(&h, name, NULL);
    const hv15_config *c = hv15_get_config(h.m);
    int B = h.B, D = h.D, hd = c->attention_head_dim;
    assert_int_equal(c->byt5_proj_dim, gh_int(gh_json(&h.c, "byt5_projection_width")));

    /* the output, padded text rows skipped */
    float *out = cvx_alloc_f32(h.n_out), *want = gh_f32(&h.c, NULL, "output");
    ASSERT_OK(hv15_forward(h.m, h.x, B, h.F, h.H, h.W, &h.cond, out));
    gh_check_rel_l2(&h.c, "output", out, want, h.n_out, TOL);

    /* the embedding parts */
    int S = h.F * h.H * h.W;
    float *cs = cvx_alloc_f32((size_t)S * hd), *sn = cvx_alloc_f32((size_t)S * hd);
    ASSERT_OK(hv15_rope_tables(c, h.F, h.H, h.W, cs, sn));
    check_inter(&h, "rope.0", cs, (size_t)S * hd);
    check_inter(&h, "rope.1", sn, (size_t)S * hd);
    free(cs); free(sn);
    float *temb = cvx_alloc_f32((size_t)B * D);
    hv15_time_embed(h.m, h.t, B, temb);
    check_inter(&h, "time_embed", temb, (size_t)B * D);
    free(temb);
    float *r = cvx_alloc_f32((size_t)B * h.cond.L * D);
    ASSERT_OK(hv15_token_refiner(h.m, h.text, h.mask, B, h.cond.L, h.t, r));
    check_inter(&h, "context_embedder", r, (size_t)B * h.cond.L * D);
    free(r);
    r = cvx_alloc_f32((size_t)B * h.cond.L2 * D);
    hv15_byt5_projection(h.m, h.text2, B * h.cond.L2, r);
    check_inter(&h, "context_embedder_2", r, (size_t)B * h.cond.L2 * D);
    free(r);
    r = cvx_alloc_f32((size_t)B * h.cond.L_img * D);
    hv15_image_projection(h.m, h.image, B * h.cond.L_img, r);
    check_inter(&h, "image_embedder", r, (size_t)B * h.cond.L_img * D);
    free(r);

    /* the pieces with every text row, against each block's streams */
    hv15_set_full_text(h.m, 1);
    hv15_fwd f;
    ASSERT_OK(hv15_forward_embed(h.m, h.x, B, h.F, h.H, h.W, &h.cond, &f));
    assert_int_equal(f.t2v, expect_t2v);
    assert_int_equal(f.S, S);
    check_inter(&h, "x_embedder", f.h, (size_t)B * S * D);
    for (int i = 0; i < c->num_layers; i++) {
        char what[64];
        hv15_forward_blocks(h.m, &f, i, 1);
        snprintf(what, sizeof what, "transformer_blocks.%d.0", i);
        check_inter(&h, what, f.h, (size_t)B * S * D);
        snprintf(what, sizeof what, "transformer_blocks.%d.1", i);
        check_inter(&h, what, f.txt, (size_t)B * f.Lt * D);
    }
    float *out2 = cvx_alloc_f32(h.n_out);
    hv15_forward_finalize(h.m, &f, out2);
    gh_check_rel_l2(&h.c, "output (pieces, all text rows)", out2, want, h.n_out, TOL);
    /* the padded rows never reach the output: the same bytes */
    gh_check_exact_f32(&h.c, "output: padded text rows computed or not", out2, out, h.n_out);
    hv15_set_full_text(h.m, 0);

    /* pieces in another split = the plain forward, byte for byte */
    ASSERT_OK(hv15_forward_embed(h.m, h.x, B, h.F, h.H, h.W, &h.cond, &f));
    hv15_forward_blocks(h.m, &f, 0, 1);
    hv15_forward_blocks(h.m, &f, 1, c->num_layers - 1);
    hv15_forward_finalize(h.m, &f, out2);
    gh_check_exact_f32(&h.c, "output (two-piece blocks)", out2, out, h.n_out);

    /* one element alone = its row of the batch (per-element masks and T2V detection) */
    if (expect_t2v) {
        hv15_cond one = h.cond;
        size_t per_out = h.n_out / B, per_in = (size_t)c->in_channels * S;
        one.text += (size_t)h.cond.L * c->text_embed_dim, one.text_mask += h.cond.L;
        one.text2 += (size_t)h.cond.L2 * c->text_embed_2_dim, one.text2_mask += h.cond.L2;
        one.image = NULL;                                                     /* NULL = zeros: T2V */
        one.timestep += 1;
        ASSERT_OK(hv15_forward(h.m, h.x + per_in, 1, h.F, h.H, h.W, &one, out2));
        gh_check_rel_l2(&h.c, "output of element 1 alone, image NULL", out2, want + per_out, per_out, TOL);
    }
    free(out); free(out2); free(want);
    print_message("  %s: %d checks\n", name, h.c.checks);
    hc_close(&h);
}

static void test_golden_t2v(void **s) { (void)s; check_golden("transformer_t2v", 1); }
static void test_golden_i2v(void **s) { (void)s; check_golden("transformer_i2v", 0); }

/* bf16 operands in the linears and attention products (f32 accumulation): close to the f32 golden
 * (the distance is printed). */
static void test_bf16(void **s) {
    (void)s;
    cvx_ctx *ctx = cvx_ctx_new(0);
    ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_BF16));
    const char *cases[] = {"transformer_t2v", "transformer_i2v"};
    for (int i = 0; i < 2; i++) {
        hv_case h;
        hc_open(&h, cases[i], ctx);
        float *out = cvx_alloc_f32(h.n_out), *want = gh_f32(&h.c, NULL, "output");
        ASSERT_OK(hv15_forward(h.m, h.x, h.B, h.F, h.H, h.W, &h.cond, out));
        double e = cvx_rel_l2(out, want, h.n_out);
        print_message("  %s bf16 vs f32 golden output            rel L2 = %.3g (bound 3e-2)\n", cases[i], e);
        assert_true(e < 3e-2 && e > 0);
        free(out), free(want);
        hc_close(&h);
    }
    cvx_ctx_free(ctx);
}

/* ------------------------------------------------------------------ errors */

static void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void test_bad_config(void **s) {
    (void)s;
    char dir[] = "/tmp/cvx_hv15_XXXXXX", cfg[256];
    assert_non_null(mkdtemp(dir));
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    hv15_config c;
    write_text(cfg, "{\"_class_name\": \"WanTransformer3DModel\"}");
    assert_int_equal(hv15_config_load(cfg, &c), -1);
    assert_non_null(strstr(cvx_last_error(), "HunyuanVideo15Transformer3DModel"));
    write_text(cfg, "{\"attention_head_dim\": 16, \"rope_axes_dim\": [4, 6, 8]}");
    assert_int_equal(hv15_config_load(cfg, &c), -1);
    assert_non_null(strstr(cvx_last_error(), "rope_axes_dim"));
    write_text(cfg, "{\"use_meanflow\": true}");
    assert_int_equal(hv15_config_load(cfg, &c), -1);
    assert_non_null(strstr(cvx_last_error(), "use_meanflow"));
    write_text(cfg, "{}");   /* upstream defaults: the real 720p/480p shape */
    ASSERT_OK(hv15_config_load(cfg, &c));
    assert_int_equal(c.in_channels, 65);
    assert_int_equal(c.num_layers, 54);
    assert_int_equal(c.num_attention_heads * c.attention_head_dim, 2048);
    assert_int_equal(c.rope_axes_dim[1], 56);
    /* a config whose weights are not there: the missing tensor named */
    char src[512];
    snprintf(src, sizeof src, "%s/model/transformer/diffusion_pytorch_model.safetensors", HV_DATA "transformer_t2v");
    write_text(cfg, "{\"in_channels\": 17, \"out_channels\": 8, \"num_attention_heads\": 2, \"attention_head_dim\": "
                    "16, \"num_layers\": 3, \"text_embed_dim\": 32, \"text_embed_2_dim\": 24, \"image_embed_dim\": 20, "
                    "\"rope_axes_dim\": [4, 6, 6]}");
    assert_null(hv15_load_file(cfg, src, NULL));
    assert_non_null(strstr(cvx_last_error(), "transformer_blocks.2."));
    write_text(cfg, "{\"in_channels\": 17, \"out_channels\": 8, \"num_attention_heads\": 2, \"attention_head_dim\": "
                    "16, \"num_layers\": 2, \"text_embed_dim\": 32, \"text_embed_2_dim\": 16, \"image_embed_dim\": 20, "
                    "\"rope_axes_dim\": [4, 6, 6]}");
    assert_null(hv15_load_file(cfg, src, NULL));
    assert_non_null(strstr(cvx_last_error(), "context_embedder_2.linear_1.weight"));
    unlink(cfg);
    rmdir(dir);
}

/* The staged files' conditioning tensors against the transformer's widths (e2e_t2v_glyph's stage-1
 * tensors): accepted as written; swapped or mis-shaped ones named in one line. */
static void test_check_conditioning(void **s) {
    (void)s;
    gh_case c;
    gh_open(&c, HV_DATA "e2e_t2v_glyph");
    hv15_config cfg;
    ASSERT_OK(hv15_config_load(gh_path(&c, "model/transformer/config.json"), &cfg));
    const cvx_tensor *e = gh_tensor(&c, "prompt_embeds"), *m = gh_tensor(&c, "prompt_embeds_mask");
    const cvx_tensor *e2 = gh_tensor(&c, "prompt_embeds_2"), *m2 = gh_tensor(&c, "prompt_embeds_mask_2");
    const cvx_tensor *ne = gh_tensor(&c, "negative_prompt_embeds");
    const char *f = "stage1_embeddings.safetensors";
    cvx_tensor ints = *e2;   /* the ByT5 rows as integers (only the header is read) */
    ints.dtype = CVX_I64;
    ASSERT_OK(hv15_check_conditioning(&cfg, "", e, m, e2, m2, NULL, f));
    ASSERT_OK(hv15_check_conditioning(&cfg, "negative_", ne, gh_tensor(&c, "negative_prompt_embeds_mask"),
                                      gh_tensor(&c, "negative_prompt_embeds_2"),
                                      gh_tensor(&c, "negative_prompt_embeds_mask_2"), NULL, f));
    struct { const cvx_tensor *e, *m, *e2, *m2, *img; const char *needle; } bad[] = {
        {e2, m, e2, m2, NULL, "'prompt_embeds' has shape [1, 256, 24], expected [1, L, 32]"},   /* ByT5 as MLLM */
        {e, m, e, m2, NULL, "'prompt_embeds_2' has shape [1, 1000, 32], expected [1, L, 24]"},  /* glyph width */
        {e, m2, e2, m2, NULL, "'prompt_embeds_mask' has shape [1, 256], expected [1, 1000]"},
        {e, m, e2, m2, e, "'image_embeds' has shape [1, 1000, 32], expected [1, L, 20]"},
        {e, m, e2, NULL, NULL, "'prompt_embeds_mask_2' is missing"},
        {e, m, &ints, m2, NULL, "'prompt_embeds_2' has dtype I64, expected a float dtype"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(hv15_check_conditioning(&cfg, "", bad[i].e, bad[i].m, bad[i].e2, bad[i].m2, bad[i].img, f),
                         -1);
        if (!strstr(cvx_last_error(), bad[i].needle) || !strstr(cvx_last_error(), f))
            fail_msg("case %zu: '%s' does not say '%s'", i, cvx_last_error(), bad[i].needle);
    }
    gh_close(&c);
}

/* The LoRA table: every linear of the forward once (unique names and aliases, the tensors the
 * forward passes to cvx_linear, shapes [out, in] + [out]). */
static void test_lora_targets(void **s) {
    (void)s;
    hv_case h;
    hc_open(&h, "transformer_t2v", NULL);
    const hv15_config *c = hv15_get_config(h.m);
    cvx_lora_target *t;
    int n = hv15_lora_targets(h.m, &t);
    assert_int_equal(n, 14 * c->num_layers + 7 * c->num_refiner_layers + 14);
    for (int i = 0; i < n; i++) {
        assert_non_null(t[i].w);
        assert_non_null(t[i].b);
        assert_int_equal(t[i].w->ndim, 2);
        assert_int_equal(t[i].b->shape[0], t[i].w->shape[0]);
        char wn[CVX_LORA_NAME + 8];
        snprintf(wn, sizeof wn, "%s.weight", t[i].name);
        assert_string_equal(t[i].w->name, wn);   /* the checkpoint's tensor of that module */
        for (int j = 0; j < i; j++) {
            assert_string_not_equal(t[i].name, t[j].name);
            if (t[i].alias[0]) assert_string_not_equal(t[i].alias, t[j].alias);
        }
    }
    assert_string_equal(t[2].name, "transformer_blocks.0.attn.to_q");
    assert_string_equal(t[2].alias, "double_blocks.0.img_attn_q");
    free(t);
    hc_close(&h);
}

static void test_bad_inputs(void **s) {
    (void)s;
    hv_case h;
    hc_open(&h, "transformer_t2v", NULL);
    float *out = cvx_alloc_f32(h.n_out);
    hv15_cond bad = h.cond;
    float *zero_mask = calloc((size_t)h.B * h.cond.L, sizeof(float));
    bad.text_mask = zero_mask;
    assert_int_equal(hv15_forward(h.m, h.x, h.B, h.F, h.H, h.W, &bad, out), -1);
    assert_non_null(strstr(cvx_last_error(), "encoder_attention_mask"));
    bad = h.cond;
    bad.text = NULL;
    assert_int_equal(hv15_forward(h.m, h.x, h.B, h.F, h.H, h.W, &bad, out), -1);
    assert_int_equal(hv15_forward(h.m, h.x, h.B, 0, h.H, h.W, &h.cond, out), -1);
    bad = h.cond;
    bad.text2 = NULL;
    assert_int_equal(hv15_forward(h.m, h.x, h.B, h.F, h.H, h.W, &bad, out), -1);
    assert_non_null(strstr(cvx_last_error(), "L2="));
    free(zero_mask);
    free(out);
    hc_close(&h);
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_t2v),
        cmocka_unit_test(test_golden_i2v),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_check_conditioning),
        cmocka_unit_test(test_lora_targets),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
