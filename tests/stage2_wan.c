/* WanTransformer3DModel (stage2/wan.c) against the Wan golden cases (tests/data/golden_wan/,
 * copied from shared/golden_wan: transformer_1.3b, transformer_14b, and e2e_i2v_dit = e2e_i2v's
 * transformer with the tensors of its first step):
 *   - output (int64 and float timesteps), embeddings, patch embedding and every block's output,
 *     the timestep sinusoid and the rotary tables;
 *   - the three-piece forward (embed / blocks / finalize) gives wan_forward's bytes;
 *   - one I2V forward = e2e_i2v's step-0 noise_pred_cond / _uncond;
 *   - bf16 runs and stays close (the distance is printed);
 *   - single-file checkpoints with the original Wan / ComfyUI key names (with and without the
 *     "model.diffusion_model." prefix), written here from the golden weights: the same bytes;
 *     a missing or wrong-shaped tensor, bad configs and bad inputs give one clear error line;
 *   - Ulysses sequence parallelism under mpirun (this program re-run as `--sp-child`) against
 *     one process. */
#include "golden_harness.h"

#include "dist.h"
#include "fileio.h"
#include "validate.h"
#include "stage2/cogvideox_rope.h"
#include "stage2/wan.h"

#define WAN_DATA "tests/data/golden_wan/"
#define TOL 1e-5

/* ------------------------------------------------------------------ a transformer_* case */

typedef struct {
    gh_case c;
    wan_transformer *m;
    float *x, *text, t_int[2], t_float[2];
    int B, C, F, H, W, L;
    size_t n_out;
} wan_case;

static void wc_open(wan_case *w, const char *name, cvx_ctx *ctx) {
    char p[256];
    memset(w, 0, sizeof *w);
    snprintf(p, sizeof p, WAN_DATA "%s", name);
    gh_open(&w->c, p);
    w->m = wan_load(gh_path(&w->c, "model/transformer"), ctx);
    ASSERT_NONNULL(w->m);
    const cvx_tensor *hs = gh_tensor(&w->c, "hidden_states"), *eh = gh_tensor(&w->c, "encoder_hidden_states");
    const cvx_tensor *ti = gh_tensor(&w->c, "timestep"), *tf = gh_tensor(&w->c, "timestep_float");
    assert_int_equal(hs->ndim, 5);
    w->B = (int)hs->shape[0], w->C = (int)hs->shape[1], w->F = (int)hs->shape[2];
    w->H = (int)hs->shape[3], w->W = (int)hs->shape[4], w->L = (int)eh->shape[1];
    assert_true(w->B <= 2 && ti->numel == w->B && tf->numel == w->B);
    for (int b = 0; b < w->B; b++) w->t_int[b] = (float)gh_i64_at(ti, (size_t)b);   /* exact: |t| < 2^24 */
    cvx_tensor_to_f32(tf, w->t_float);
    w->x = cvx_tensor_f32_dup(hs);
    w->text = cvx_tensor_f32_dup(eh);
    w->n_out = (size_t)w->B * wan_get_config(w->m)->out_channels * w->F * w->H * w->W;
}

static void wc_close(wan_case *w) {
    wan_free(w->m);
    free(w->x);
    free(w->text);
    gh_close(&w->c);
}

static float *wc_forward(wan_case *w, wan_transformer *m, const float *t) {
    float *out = cvx_alloc_f32(w->n_out);
    ASSERT_OK(wan_forward(m, w->x, w->B, w->F, w->H, w->W, w->text, w->L, NULL, 0, t, out));
    return out;
}

/* ------------------------------------------------------------------ golden forwards */

static void check_golden(const char *name) {
    wan_case w;
    wc_open(&w, name, NULL);
    const wan_config *c = wan_get_config(w.m);
    int D = c->num_attention_heads * c->attention_head_dim;

    float *out = wc_forward(&w, w.m, w.t_int), *want = gh_f32(&w.c, NULL, "output");
    gh_check_rel_l2(&w.c, "output (int64 timestep)", out, want, w.n_out, TOL);
    free(out); free(want);
    out = wc_forward(&w, w.m, w.t_float);
    want = gh_f32(&w.c, NULL, "output_timestep_float");
    gh_check_rel_l2(&w.c, "output_timestep_float", out, want, w.n_out, TOL);
    free(out); free(want);

    /* the sinusoid (cos first) */
    float *sin_got = cvx_malloc(sizeof(float) * (size_t)w.B * c->freq_dim);
    cvx_timestep_sinusoid(sin_got, w.t_int, w.B, c->freq_dim, 1, 0.0);
    want = gh_f32(&w.c, NULL, "inter.timesteps_proj");
    gh_check_rel_l2(&w.c, "timesteps_proj", sin_got, want, (size_t)w.B * c->freq_dim, 1e-6);
    free(sin_got); free(want);

    /* the three pieces, with intermediates between them */
    wan_fwd f;
    ASSERT_OK(wan_forward_embed(w.m, w.x, w.B, w.F, w.H, w.W, w.text, w.L, NULL, 0, w.t_int, &f));
    assert_int_equal(f.S, wan_num_tokens(c, w.F, w.H, w.W));
    want = gh_f32(&w.c, NULL, "inter.condition_embedder.0");
    gh_check_rel_l2(&w.c, "temb", f.temb, want, (size_t)w.B * D, TOL);
    free(want);
    want = gh_f32(&w.c, NULL, "inter.condition_embedder.1");
    gh_check_rel_l2(&w.c, "timestep_proj", f.tproj, want, (size_t)w.B * 6 * D, TOL);
    free(want);
    want = gh_f32(&w.c, NULL, "inter.condition_embedder.2");
    gh_check_rel_l2(&w.c, "projected text", f.ctx_txt, want, (size_t)w.B * w.L * D, TOL);
    free(want);
    want = gh_f32(&w.c, NULL, "inter.patch_embedding");                                   // [B, D, S]
    float *pe = cvx_malloc(sizeof(float) * (size_t)w.B * f.S * D);                         // [B, S, D]
    for (int b = 0; b < w.B; b++)
        for (int s = 0; s < f.S; s++)
            for (int d = 0; d < D; d++) pe[((size_t)b * f.S + s) * D + d] = want[((size_t)b * D + d) * f.S + s];
    gh_check_rel_l2(&w.c, "patch_embedding", f.h, pe, (size_t)w.B * f.S * D, TOL);
    free(pe); free(want);
    for (int i = 0; i < c->num_layers; i++) {
        char what[64];
        wan_forward_blocks(w.m, &f, i, 1);
        snprintf(what, sizeof what, "inter.blocks.%d", i);
        want = gh_f32(&w.c, NULL, "%s", what);
        gh_check_rel_l2(&w.c, what, f.h, want, (size_t)w.B * f.S * D, TOL);
        free(want);
    }
    out = cvx_alloc_f32(w.n_out);
    wan_forward_finalize(w.m, &f, out);
    want = gh_f32(&w.c, NULL, "output");
    gh_check_rel_l2(&w.c, "output (three pieces)", out, want, w.n_out, TOL);
    free(out); free(want);

    /* rotary tables (float64) */
    const cvx_tensor *rc = gh_tensor(&w.c, "rotary_cos"), *rs = gh_tensor(&w.c, "rotary_sin");
    size_t n = (size_t)f.S * (c->attention_head_dim / 2);
    assert_int_equal(rc->numel, (int64_t)n);
    double *cs = cvx_malloc(sizeof(double) * 2 * n), *sn = cs + n, worst = 0;
    ASSERT_OK(wan_rope_tables(w.m, w.F, w.H, w.W, cs, sn));
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fmax(fabs(cs[i] - gh_f64_at(rc, i)), fabs(sn[i] - gh_f64_at(rs, i))));
    print_message("  %s rotary cos/sin (f64)                 max |diff| = %.3g (tol 1e-15)\n", name, worst);
    if (!(worst <= 1e-15)) fail_msg("%s: rotary tables differ by %.3g", name, worst);
    free(cs);
    wc_close(&w);
}

static void test_golden_1_3b(void **s) { (void)s; check_golden("transformer_1.3b"); }
static void test_golden_14b(void **s) { (void)s; check_golden("transformer_14b"); }

/* wan_forward = embed + blocks (in any split) + finalize, byte for byte; row chunks change no
 * more than rounding. */
static void test_pieces_and_chunks(void **s) {
    (void)s;
    wan_case w;
    wc_open(&w, "transformer_14b", NULL);
    int n = wan_get_config(w.m)->num_layers;
    float *ref = wc_forward(&w, w.m, w.t_float), *out = cvx_alloc_f32(w.n_out);
    wan_fwd f;
    ASSERT_OK(wan_forward_embed(w.m, w.x, w.B, w.F, w.H, w.W, w.text, w.L, NULL, 0, w.t_float, &f));
    wan_forward_blocks(w.m, &f, 0, 1);
    wan_forward_blocks(w.m, &f, 1, 0);
    wan_forward_blocks(w.m, &f, 1, n - 1);
    wan_forward_finalize(w.m, &f, out);
    gh_check_exact_f32(&w.c, "three pieces vs wan_forward", out, ref, w.n_out);
    /* two batch-1 forwards interleaved (the first one's h held aside) = each alone */
    const wan_config *c = wan_get_config(w.m);
    size_t per = w.n_out / 2, xin = (size_t)c->in_channels * w.F * w.H * w.W, tin = (size_t)w.L * c->text_dim;
    float *alone = cvx_alloc_f32(w.n_out);
    for (int b = 0; b < 2; b++)
        ASSERT_OK(wan_forward(w.m, w.x + b * xin, 1, w.F, w.H, w.W, w.text + b * tin, w.L, NULL, 0, w.t_float + b,
                              alone + b * per));
    wan_fwd g[2];
    ASSERT_OK(wan_forward_embed(w.m, w.x, 1, w.F, w.H, w.W, w.text, w.L, NULL, 0, w.t_float, &g[0]));
    size_t hn = (size_t)g[0].S * g[0].D;
    float *hold = cvx_alloc_f32(hn);
    memcpy(hold, g[0].h, hn * sizeof(float));
    g[0].h = hold;
    ASSERT_OK(wan_forward_embed(w.m, w.x + xin, 1, w.F, w.H, w.W, w.text + tin, w.L, NULL, 0, w.t_float + 1, &g[1]));
    for (int b = 0; b < 2; b++) wan_forward_blocks(w.m, &g[b], 0, 1);
    for (int b = 0; b < 2; b++) wan_forward_blocks(w.m, &g[b], 1, n - 1);
    for (int b = 0; b < 2; b++) wan_forward_finalize(w.m, &g[b], out + b * per);
    gh_check_exact_f32(&w.c, "two interleaved forwards vs each alone", out, alone, w.n_out);
    gh_check_rel_l2(&w.c, "batch-1 forwards vs batch 2", alone, ref, w.n_out, 1e-6);
    free(hold);
    free(alone);
    free(out);
    wan_set_chunking(w.m, 3);   /* S = 20: pieces of 3, 3, ..., 2 rows */
    out = wc_forward(&w, w.m, w.t_float);
    gh_check_rel_l2(&w.c, "chunks of 3 rows vs one", out, ref, w.n_out, 1e-6);
    float *want = gh_f32(&w.c, NULL, "output_timestep_float");
    gh_check_rel_l2(&w.c, "chunks of 3 rows vs golden", out, want, w.n_out, TOL);
    wan_stats st = wan_get_stats(w.m);
    assert_true(st.flop_linear > 0 && st.flop_attention > 0 && st.t_total > 0);
    wan_reset_stats(w.m);
    assert_true(wan_get_stats(w.m).flop_linear == 0);
    free(out); free(want); free(ref);
    wc_close(&w);
}

/* ------------------------------------------------------------------ image-to-video */

typedef struct {
    gh_case c;
    float *x, *cond, *uncond, *img, t;
    int C, F, H, W, L, Li;
    size_t n_out;
} i2v_case;

/* e2e_i2v's first step: x = cat([initial_latents, condition], dim=1), t = timesteps[0]. */
static void i2v_open(i2v_case *k) {
    memset(k, 0, sizeof *k);
    gh_open(&k->c, WAN_DATA "e2e_i2v_dit");
    const cvx_tensor *lat = gh_tensor(&k->c, "initial_latents"), *cnd = gh_tensor(&k->c, "condition");
    const cvx_tensor *pe = gh_tensor(&k->c, "prompt_embeds"), *ie = gh_tensor(&k->c, "image_embeds");
    assert_true(lat->shape[0] == 1 && cnd->shape[0] == 1);
    k->F = (int)lat->shape[2], k->H = (int)lat->shape[3], k->W = (int)lat->shape[4];
    k->C = (int)(lat->shape[1] + cnd->shape[1]);
    k->L = (int)pe->shape[1], k->Li = (int)ie->shape[1];
    k->x = cvx_malloc(sizeof(float) * (size_t)(lat->numel + cnd->numel));
    cvx_tensor_to_f32(lat, k->x);
    cvx_tensor_to_f32(cnd, k->x + lat->numel);
    k->cond = cvx_tensor_f32_dup(pe);
    k->uncond = gh_f32(&k->c, NULL, "negative_prompt_embeds");
    k->img = cvx_tensor_f32_dup(ie);
    k->t = (float)gh_int(gh_at(gh_json(&k->c, "timesteps"), 0));
    k->n_out = (size_t)lat->numel;
}

static void i2v_close(i2v_case *k) {
    free(k->x); free(k->cond); free(k->uncond); free(k->img);
    gh_close(&k->c);
}

static float *i2v_forward(i2v_case *k, wan_transformer *m, const float *text) {
    float *out = cvx_alloc_f32(k->n_out);
    ASSERT_OK(wan_forward(m, k->x, 1, k->F, k->H, k->W, text, k->L, k->img, k->Li, &k->t, out));
    return out;
}

static void test_i2v_step0(void **s) {
    (void)s;
    i2v_case k;
    i2v_open(&k);
    wan_transformer *m = wan_load(gh_path(&k.c, "model/transformer"), NULL);
    ASSERT_NONNULL(m);
    assert_int_equal(wan_get_config(m)->in_channels, k.C);
    float *out = i2v_forward(&k, m, k.cond), *want = gh_f32(&k.c, NULL, "step0.noise_pred_cond");
    gh_check_rel_l2(&k.c, "step0.noise_pred_cond", out, want, k.n_out, TOL);
    free(out); free(want);
    out = i2v_forward(&k, m, k.uncond);
    want = gh_f32(&k.c, NULL, "step0.noise_pred_uncond");
    gh_check_rel_l2(&k.c, "step0.noise_pred_uncond", out, want, k.n_out, TOL);
    free(out); free(want);
    /* an I2V model needs the image; a T2V model refuses one */
    out = cvx_alloc_f32(k.n_out);
    assert_int_equal(wan_forward(m, k.x, 1, k.F, k.H, k.W, k.cond, k.L, NULL, 0, &k.t, out), -1);
    assert_non_null(strstr(cvx_last_error(), "image embeddings are required"));
    free(out);
    wan_free(m);
    i2v_close(&k);
}

/* ------------------------------------------------------------------ bf16 */

static void test_bf16(void **s) {
    (void)s;
    cvx_ctx *ctx = cvx_ctx_new(0);
    ASSERT_OK(cvx_ctx_set_precision(ctx, CVX_PRECISION_BF16));
    const char *cases[] = {"transformer_1.3b", "transformer_14b"};
    for (int i = 0; i < 2; i++) {
        wan_case w;
        wc_open(&w, cases[i], ctx);
        float *out = wc_forward(&w, w.m, w.t_int), *want = gh_f32(&w.c, NULL, "output");
        double e = cvx_rel_l2(out, want, w.n_out);
        print_message("  %s bf16 vs f32 golden output            rel L2 = %.3g (bound 3e-2)\n", cases[i], e);
        assert_true(e < 3e-2 && e > 0);
        free(out); free(want);
        wc_close(&w);
    }
    i2v_case k;
    i2v_open(&k);
    wan_transformer *m = wan_load(gh_path(&k.c, "model/transformer"), ctx);
    ASSERT_NONNULL(m);
    float *out = i2v_forward(&k, m, k.cond), *want = gh_f32(&k.c, NULL, "step0.noise_pred_cond");
    double e = cvx_rel_l2(out, want, k.n_out);
    print_message("  e2e_i2v bf16 vs f32 noise_pred_cond          rel L2 = %.3g (bound 3e-2)\n", e);
    assert_true(e < 3e-2 && e > 0);
    assert_true(ctx->precision == CVX_PRECISION_BF16);   /* the f32 time embedder restored it */
    free(out); free(want);
    wan_free(m);
    i2v_close(&k);
    cvx_ctx_free(ctx);
}

/* ------------------------------------------------------------------ single-file checkpoints */

static void replace_all(char *s, size_t n, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to);
    for (char *p = strstr(s, from); p; p = strstr(p + tl, from)) {
        size_t rest = strlen(p + fl);
        if ((size_t)(p - s) + tl + rest + 1 > n) fail_msg("name too long: %s", s);
        memmove(p + tl, p + fl, rest + 1);
        memcpy(p, to, tl);
    }
}

/* diffusers' own conversion of original names (loaders/single_file_utils.py v0.33.1,
 * convert_wan_transformer_to_diffusers): the prefix stripped, then every replacement in order. */
static void upstream_to_diffusers(const char *orig, char *out, size_t n) {
    static const char *const R[][2] = {
        {"time_embedding.0", "condition_embedder.time_embedder.linear_1"},
        {"time_embedding.2", "condition_embedder.time_embedder.linear_2"},
        {"text_embedding.0", "condition_embedder.text_embedder.linear_1"},
        {"text_embedding.2", "condition_embedder.text_embedder.linear_2"},
        {"time_projection.1", "condition_embedder.time_proj"},
        {"cross_attn", "attn2"}, {"self_attn", "attn1"}, {".o.", ".to_out.0."}, {".q.", ".to_q."},
        {".k.", ".to_k."}, {".v.", ".to_v."}, {".k_img.", ".add_k_proj."}, {".v_img.", ".add_v_proj."},
        {".norm_k_img.", ".norm_added_k."}, {"head.modulation", "scale_shift_table"}, {"head.head", "proj_out"},
        {"modulation", "scale_shift_table"}, {"ffn.0", "ffn.net.0.proj"}, {"ffn.2", "ffn.net.2"},
        {"norm2", "norm__placeholder"}, {"norm3", "norm2"}, {"norm__placeholder", "norm3"},
        {"img_emb.proj.0", "condition_embedder.image_embedder.norm1"},
        {"img_emb.proj.1", "condition_embedder.image_embedder.ff.net.0.proj"},
        {"img_emb.proj.3", "condition_embedder.image_embedder.ff.net.2"},
        {"img_emb.proj.4", "condition_embedder.image_embedder.norm2"},
    };
    const char *pre = "model.diffusion_model.";
    snprintf(out, n, "%s", strncmp(orig, pre, strlen(pre)) ? orig : orig + strlen(pre));
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) replace_all(out, n, R[i][0], R[i][1]);
}

/* The original name of a diffusers name, as this fixture writes it (checked against the above). */
static void diffusers_to_original(const char *d, char *out, size_t n) {
    static const char *const R[][2] = {
        {"condition_embedder.time_embedder.linear_1", "time_embedding.0"},
        {"condition_embedder.time_embedder.linear_2", "time_embedding.2"},
        {"condition_embedder.text_embedder.linear_1", "text_embedding.0"},
        {"condition_embedder.text_embedder.linear_2", "text_embedding.2"},
        {"condition_embedder.time_proj", "time_projection.1"},
        {"condition_embedder.image_embedder.norm1", "img_emb.proj.0"},
        {"condition_embedder.image_embedder.ff.net.0.proj", "img_emb.proj.1"},
        {"condition_embedder.image_embedder.ff.net.2", "img_emb.proj.3"},
        {"condition_embedder.image_embedder.norm2", "img_emb.proj.4"},
        {"attn1.", "self_attn."}, {"attn2.", "cross_attn."}, {".to_out.0.", ".o."}, {".to_q.", ".q."},
        {".to_k.", ".k."}, {".to_v.", ".v."}, {".add_k_proj.", ".k_img."}, {".add_v_proj.", ".v_img."},
        {".norm_added_k.", ".norm_k_img."}, {"ffn.net.0.proj", "ffn.0"}, {"ffn.net.2", "ffn.2"},
        {".scale_shift_table", ".modulation"}, {"proj_out", "head.head"}, {".norm2.", ".norm3."},
    };
    snprintf(out, n, "%s", !strcmp(d, "scale_shift_table") ? "head.modulation" : d);
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) replace_all(out, n, R[i][0], R[i][1]);
}

/* The golden diffusers weights under original names (+ prefix) in one file; `skip` is left out,
 * `bad` gets a wrong shape. Returns the number of tensors written. */
static int write_checkpoint(const char *src, const char *dst, const char *prefix, int original, const char *skip,
                            const char *bad) {
    cvx_safetensors *st = tu_open(src);
    cvx_st_writer *wr = cvx_stw_new();
    int n = 0;
    for (int i = 0; i < cvx_st_count(st); i++) {
        const cvx_tensor *t = cvx_st_tensor(st, i);
        char o[256], back[256], name[300];
        if (original) {
            diffusers_to_original(t->name, o, sizeof o);
            upstream_to_diffusers(o, back, sizeof back);
            if (strcmp(back, t->name)) fail_msg("fixture name map: %s -> %s -> %s", t->name, o, back);
        } else {
            snprintf(o, sizeof o, "%s", t->name);
        }
        snprintf(name, sizeof name, "%s%s", prefix, o);
        if (skip && !strcmp(name, skip)) continue;
        float *v = cvx_tensor_f32_dup(t);
        int64_t flat[1] = {t->numel};
        int is_bad = bad && !strcmp(name, bad);
        ASSERT_OK(cvx_stw_add_f32(wr, name, CVX_F32, is_bad ? 1 : t->ndim, is_bad ? flat : t->shape, v));
        free(v);
        n++;
    }
    ASSERT_OK(cvx_stw_write(wr, dst));
    cvx_stw_free(wr);
    cvx_st_close(st);
    return n;
}

/* wan_load_file on original / ComfyUI names (T2V and I2V, with and without the prefix) and on a
 * diffusers single file: the same output bytes as wan_load of the diffusers directory. */
static void test_single_file_names(void **s) {
    (void)s;
    char dir[64], file[128], src[1024], cfg[1024];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/wan.safetensors", dir);
    const char *prefixes[] = {"", "model.diffusion_model.", ""};
    /* T2V: the 1.3b case */
    wan_case w;
    wc_open(&w, "transformer_1.3b", NULL);
    snprintf(src, sizeof src, "%s", gh_path(&w.c, "model/transformer/diffusion_pytorch_model.safetensors"));
    snprintf(cfg, sizeof cfg, "%s", gh_path(&w.c, "model/transformer/config.json"));
    float *ref = wc_forward(&w, w.m, w.t_int);
    for (int v = 0; v < 3; v++) {
        int original = v < 2;
        write_checkpoint(src, file, prefixes[v], original, NULL, NULL);
        wan_transformer *m = wan_load_file(cfg, file, NULL);
        ASSERT_NONNULL(m);
        assert_int_equal(wan_original_names(m), original);
        float *out = wc_forward(&w, m, w.t_int);
        gh_check_exact_f32(&w.c, original ? (v ? "original names + prefix" : "original names") : "diffusers single file",
                           out, ref, w.n_out);
        free(out);
        wan_free(m);
    }
    free(ref);
    wc_close(&w);
    /* I2V: image embedder, k_img / v_img / norm_k_img */
    i2v_case k;
    i2v_open(&k);
    snprintf(src, sizeof src, "%s", gh_path(&k.c, "model/transformer/diffusion_pytorch_model.safetensors"));
    snprintf(cfg, sizeof cfg, "%s", gh_path(&k.c, "model/transformer/config.json"));
    wan_transformer *m = wan_load(gh_path(&k.c, "model/transformer"), NULL);
    ASSERT_NONNULL(m);
    ref = i2v_forward(&k, m, k.cond);
    wan_free(m);
    write_checkpoint(src, file, "model.diffusion_model.", 1, NULL, NULL);
    m = wan_load_file(cfg, file, NULL);
    ASSERT_NONNULL(m);
    float *out = i2v_forward(&k, m, k.cond);
    gh_check_exact_f32(&k.c, "I2V original names + prefix", out, ref, k.n_out);
    free(out); free(ref);
    wan_free(m);

    /* a missing key and a wrong shape: one line naming the file's key (and the diffusers name) */
    write_checkpoint(src, file, "", 1, "blocks.1.cross_attn.k_img.bias", NULL);
    assert_null(wan_load_file(cfg, file, NULL));
    print_message("  missing key: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "tensor 'blocks.1.cross_attn.k_img.bias' is missing"));
    assert_non_null(strstr(cvx_last_error(), "'blocks.1.attn2.add_k_proj.bias'"));
    assert_null(strchr(cvx_last_error(), '\n'));
    write_checkpoint(src, file, "", 1, "head.modulation", NULL);
    assert_null(wan_load_file(cfg, file, NULL));
    assert_non_null(strstr(cvx_last_error(), "not a Wan transformer checkpoint"));
    write_checkpoint(src, file, "model.diffusion_model.", 1, NULL, "model.diffusion_model.blocks.0.cross_attn.k_img.weight");
    assert_null(wan_load_file(cfg, file, NULL));
    print_message("  wrong shape: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "tensor 'model.diffusion_model.blocks.0.cross_attn.k_img.weight' has shape "
                                             "[4096], expected [64, 64] (from the config) (diffusers name "
                                             "'blocks.0.attn2.add_k_proj.weight')"));
    i2v_close(&k);
    tu_rmrf(dir);
}

/* A diffusers directory with a wrong-shaped tensor: one line naming it, its shape and the
 * expected one. */
static void test_wrong_shape_dir(void **s) {
    (void)s;
    char dir[64], file[128], cfg[128], cmd[512];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/diffusion_pytorch_model.safetensors", dir);
    snprintf(cmd, sizeof cmd, "cp " WAN_DATA "transformer_1.3b/model/transformer/config.json %s/", dir);
    tu_run_ok(cmd);
    write_checkpoint(WAN_DATA "transformer_1.3b/model/transformer/diffusion_pytorch_model.safetensors", file, "", 0,
                     NULL, "blocks.1.ffn.net.0.proj.weight");
    assert_null(wan_load(dir, NULL));
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "tensor 'blocks.1.ffn.net.0.proj.weight' has shape [13440], expected "
                                             "[280, 48] (from the config)"));
    assert_null(strchr(cvx_last_error(), '\n'));
    /* config errors */
    static const struct { const char *json, *want; } bad[] = {
        {"{\"qk_norm\": \"rms_norm\"}", "key 'qk_norm' is \"rms_norm\", only \"rms_norm_across_heads\""},
        {"{\"qk_norm\": null}", "key 'qk_norm' is \"null\""},
        {"{\"image_dim\": 32}", "keys 'image_dim' (32) and 'added_kv_proj_dim' (0) must both be set"},
        {"{\"image_dim\": 32, \"added_kv_proj_dim\": 64, \"num_attention_heads\": 3, \"attention_head_dim\": 16}",
         "'added_kv_proj_dim' = 64 must equal num_attention_heads·attention_head_dim = 48"},
        {"{\"patch_size\": [1, 2]}", "key 'patch_size' must be 3 integers"},
        {"{\"attention_head_dim\": 15}", "'attention_head_dim' = 15 must be even"},
        {"{\"num_layers\": 100000}", "key 'num_layers' = 100000 is out of range [1, 1024]"},
        {"{\"_class_name\": \"CogVideoXTransformer3DModel\"}", "expected \"WanTransformer3DModel\""},
    };
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wan_config c;
        tu_write(cfg, bad[i].json, strlen(bad[i].json));
        assert_int_equal(wan_config_load(cfg, &c), -1);
        if (!strstr(cvx_last_error(), bad[i].want)) fail_msg("%s: got '%s'", bad[i].json, cvx_last_error());
    }
    tu_rmrf(dir);
}

static void test_forward_errors(void **s) {
    (void)s;
    wan_case w;
    wc_open(&w, "transformer_1.3b", NULL);
    float *out = cvx_alloc_f32(w.n_out), img[32] = {0};
    assert_int_equal(wan_forward(w.m, w.x, 1, w.F, w.H - 1, w.W, w.text, w.L, NULL, 0, w.t_int, out), -1);
    assert_non_null(strstr(cvx_last_error(), "must be a multiple of patch_size [1, 2, 2]"));
    assert_int_equal(wan_forward(w.m, w.x, 1, w.F, w.H, w.W, w.text, w.L, img, 1, w.t_int, out), -1);
    assert_non_null(strstr(cvx_last_error(), "text-to-video model"));
    assert_int_equal(wan_forward(w.m, w.x, 1, w.F, w.H, w.W, w.text, 0, NULL, 0, w.t_int, out), -1);
    wan_config c = *wan_get_config(w.m);
    assert_int_equal(wan_sp_check(&c, 3), 0);
    assert_int_equal(wan_sp_check(&c, 2), -1);
    assert_non_null(strstr(cvx_last_error(), "--sp 2: must divide the 3 attention heads"));
    free(out);
    wc_close(&w);
}

/* ------------------------------------------------------------------ real head_dim, real configs */

static uint64_t rng_state = 88172645463325252ull;
static float urand(void) {   /* xorshift64, uniform in [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 4503599627370496.0 - 1.0);
}

static void add_random(cvx_st_writer *wr, const char *name, const int64_t *shape, int ndim, float center, float scale) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *v = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) v[i] = center + scale * urand();
    ASSERT_OK(cvx_stw_add_f32(wr, name, CVX_F32, ndim, shape, v));
    free(v);
}
#define ADD(name, center, scale, ...) add_random(wr, name, CVX_SHAPE(__VA_ARGS__), center, scale)

/* A random 2-head model with the real head_dim 128 (rotary parts 22 / 21 / 21 pairs, the
 * AVX-512 attention kernels): the rotary table against the formula written out, f32 vs bf16. */
static void test_real_head_dim(void **s) {
    (void)s;
    char dir[64], path[128], name[128];
    tu_mkdtemp(dir, sizeof dir);
    const int64_t D = 256, C = 4, T = 8, Fq = 16, Fd = 64, P = 16;
    const char *cfg = "{\"_class_name\": \"WanTransformer3DModel\", \"num_attention_heads\": 2, "
                      "\"attention_head_dim\": 128, \"num_layers\": 1, \"in_channels\": 4, \"out_channels\": 4, "
                      "\"text_dim\": 8, \"freq_dim\": 16, \"ffn_dim\": 64, \"patch_size\": [1, 2, 2], "
                      "\"qk_norm\": \"rms_norm_across_heads\", \"cross_attn_norm\": true, \"eps\": 1e-6, "
                      "\"image_dim\": null, \"added_kv_proj_dim\": null}";
    snprintf(path, sizeof path, "%s/config.json", dir);
    tu_write(path, cfg, strlen(cfg));
    cvx_st_writer *wr = cvx_stw_new();
    float a = 0.0625f;   /* 1/√D */
    ADD("patch_embedding.weight", 0, 0.25f, D, C, 1, 2, 2);
    ADD("patch_embedding.bias", 0, 0.1f, D);
    ADD("condition_embedder.time_embedder.linear_1.weight", 0, 0.25f, D, Fq);
    ADD("condition_embedder.time_embedder.linear_1.bias", 0, 0.1f, D);
    ADD("condition_embedder.time_embedder.linear_2.weight", 0, a, D, D);
    ADD("condition_embedder.time_embedder.linear_2.bias", 0, 0.1f, D);
    ADD("condition_embedder.time_proj.weight", 0, a, 6 * D, D);
    ADD("condition_embedder.time_proj.bias", 0, 0.1f, 6 * D);
    ADD("condition_embedder.text_embedder.linear_1.weight", 0, 0.35f, D, T);
    ADD("condition_embedder.text_embedder.linear_1.bias", 0, 0.1f, D);
    ADD("condition_embedder.text_embedder.linear_2.weight", 0, a, D, D);
    ADD("condition_embedder.text_embedder.linear_2.bias", 0, 0.1f, D);
    for (int at = 1; at <= 2; at++) {
        const char *proj[] = {"to_q", "to_k", "to_v", "to_out.0"};
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "blocks.0.attn%d.%s.weight", at, proj[i]);
            ADD(name, 0, a, D, D);
            snprintf(name, sizeof name, "blocks.0.attn%d.%s.bias", at, proj[i]);
            ADD(name, 0, 0.1f, D);
        }
        snprintf(name, sizeof name, "blocks.0.attn%d.norm_q.weight", at);
        ADD(name, 1, 0.1f, D);
        snprintf(name, sizeof name, "blocks.0.attn%d.norm_k.weight", at);
        ADD(name, 1, 0.1f, D);
    }
    ADD("blocks.0.norm2.weight", 1, 0.1f, D);
    ADD("blocks.0.norm2.bias", 0, 0.1f, D);
    ADD("blocks.0.ffn.net.0.proj.weight", 0, a, Fd, D);
    ADD("blocks.0.ffn.net.0.proj.bias", 0, 0.1f, Fd);
    ADD("blocks.0.ffn.net.2.weight", 0, 0.125f, D, Fd);
    ADD("blocks.0.ffn.net.2.bias", 0, 0.1f, D);
    ADD("blocks.0.scale_shift_table", 0, a, 1, 6, D);
    ADD("scale_shift_table", 0, a, 1, 2, D);
    ADD("proj_out.weight", 0, a, P, D);
    ADD("proj_out.bias", 0, 0.1f, P);
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    ASSERT_OK(cvx_stw_write(wr, path));
    cvx_stw_free(wr);

    wan_transformer *m = wan_load(dir, NULL);
    ASSERT_NONNULL(m);
    int F = 2, H = 4, W = 6, L = 5, S = wan_num_tokens(wan_get_config(m), F, H, W);   /* grid 2 × 2 × 3 */
    assert_int_equal(S, 12);
    double *cs = malloc(sizeof(double) * 2 * 64 * S), *sn = cs + 64 * S, worst = 0;
    ASSERT_OK(wan_rope_tables(m, F, H, W, cs, sn));
    for (int t = 0; t < S; t++) {
        int pos[3] = {t / 6, t / 3 % 2, t % 3}, first[3] = {0, 22, 43}, dims[3] = {44, 42, 42};
        for (int j = 0; j < 64; j++) {
            int axis = j < 22 ? 0 : j < 43 ? 1 : 2, k = j - first[axis];
            double ang = pos[axis] / pow(10000.0, 2.0 * k / dims[axis]);
            worst = fmax(worst, fmax(fabs(cs[t * 64 + j] - cos(ang)), fabs(sn[t * 64 + j] - sin(ang))));
        }
    }
    print_message("  head_dim 128 rotary table vs the formula        max |diff| = %.3g (tol 1e-14)\n", worst);
    assert_true(worst <= 1e-14);
    free(cs);
    float *x = malloc(sizeof(float) * C * F * H * W), *text = malloc(sizeof(float) * L * T), t = 700.0f;
    for (int i = 0; i < C * F * H * W; i++) x[i] = urand();
    for (int i = 0; i < L * T; i++) text[i] = urand();
    float *o32 = cvx_alloc_f32(C * F * H * W), *o16 = cvx_alloc_f32(C * F * H * W);
    ASSERT_OK(wan_forward(m, x, 1, F, H, W, text, L, NULL, 0, &t, o32));
    ASSERT_OK(cvx_check_finite(o32, C * F * H * W, "output"));
    ASSERT_OK(cvx_ctx_set_precision(wan_ctx(m), CVX_PRECISION_BF16));
    ASSERT_OK(wan_forward(m, x, 1, F, H, W, text, L, NULL, 0, &t, o16));
    double e = cvx_rel_l2(o16, o32, C * F * H * W);
    print_message("  head_dim 128 bf16 vs f32                        rel L2 = %.3g (bound 3e-2)\n", e);
    assert_true(e > 0 && e < 3e-2);
    free(x); free(text); free(o32); free(o16);
    wan_free(m);
    tu_rmrf(dir);
}

/* The published configs (shared/golden_wan/real_configs.md) load; --sp must divide 12 / 40 heads. */
static void test_real_configs(void **s) {
    (void)s;
    static const struct { const char *json; int heads, in, image_dim, sp_ok, sp_bad; } real[] = {
        {"{\"_class_name\": \"WanTransformer3DModel\", \"added_kv_proj_dim\": null, \"attention_head_dim\": 128, "
         "\"cross_attn_norm\": true, \"eps\": 1e-06, \"ffn_dim\": 8960, \"freq_dim\": 256, \"in_channels\": 16, "
         "\"num_attention_heads\": 12, \"num_layers\": 30, \"out_channels\": 16, \"patch_size\": [1, 2, 2], "
         "\"qk_norm\": \"rms_norm_across_heads\", \"text_dim\": 4096}", 12, 16, 0, 6, 5},
        {"{\"added_kv_proj_dim\": null, \"attention_head_dim\": 128, \"cross_attn_norm\": true, \"eps\": 1e-06, "
         "\"ffn_dim\": 13824, \"freq_dim\": 256, \"in_channels\": 16, \"num_attention_heads\": 40, "
         "\"num_layers\": 40, \"out_channels\": 16, \"patch_size\": [1, 2, 2], \"qk_norm\": "
         "\"rms_norm_across_heads\", \"text_dim\": 4096, \"rope_max_seq_len\": 1024}", 40, 16, 0, 8, 3},
        {"{\"image_dim\": 1280, \"added_kv_proj_dim\": 5120, \"attention_head_dim\": 128, \"cross_attn_norm\": true, "
         "\"eps\": 1e-06, \"ffn_dim\": 13824, \"freq_dim\": 256, \"in_channels\": 36, \"num_attention_heads\": 40, "
         "\"num_layers\": 40, \"out_channels\": 16, \"patch_size\": [1, 2, 2], \"qk_norm\": "
         "\"rms_norm_across_heads\", \"text_dim\": 4096}", 40, 36, 1280, 5, 6},
    };
    char dir[64], path[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    for (size_t i = 0; i < sizeof real / sizeof real[0]; i++) {
        wan_config c;
        tu_write(path, real[i].json, strlen(real[i].json));
        ASSERT_OK(wan_config_load(path, &c));
        assert_int_equal(c.num_attention_heads, real[i].heads);
        assert_int_equal(c.in_channels, real[i].in);
        assert_int_equal(c.image_dim, real[i].image_dim);
        assert_true(c.patch_t == 1 && c.patch_h == 2 && c.patch_w == 2 && c.rope_max_seq_len == 1024);
        assert_int_equal(wan_sp_check(&c, real[i].sp_ok), 0);
        assert_int_equal(wan_sp_check(&c, real[i].sp_bad), -1);
    }
    tu_rmrf(dir);
}

/* ------------------------------------------------------------------ sequence parallelism */

/* The MPI side: `stage2_wan --sp-child CASE OUT`: every rank runs one forward per batch element
 * with wan_set_sp(world); rank 0 checks every rank returned the same bytes and writes them to OUT.
 * The e2e_i2v_dit case is run on a grid cropped to 3×6×6 latents (27 tokens: uneven shares). */
static int sp_child(int argc, char **argv) {
    cvx_set_program_name("stage2_wan");
    cvx_dist *world = cvx_dist_init(&argc, &argv);
    if (!world) cvx_die_last_error();
    const char *name = argv[2], *out_path = argv[3];
    int i2v = strstr(name, "i2v") != NULL;
    char p[512];
    snprintf(p, sizeof p, WAN_DATA "%s/model/transformer", name);
    wan_transformer *m = wan_load(p, NULL);
    if (!m || wan_set_sp(m, world)) cvx_dist_die_last_error(world);
    snprintf(p, sizeof p, WAN_DATA "%s/expected.safetensors", name);
    cvx_safetensors *st = cvx_st_open(p);
    if (!st) cvx_dist_die_last_error(world);
    const wan_config *c = wan_get_config(m);
    const cvx_tensor *hs = cvx_st_find(st, i2v ? "initial_latents" : "hidden_states");
    const cvx_tensor *eh = cvx_st_find(st, i2v ? "prompt_embeds" : "encoder_hidden_states");
    int B = (int)hs->shape[0], F = (int)hs->shape[2], H = (int)hs->shape[3], W = (int)hs->shape[4], L = (int)eh->shape[1];
    int Wc = i2v ? W - 2 : W, C = c->in_channels, Co = c->out_channels;
    float *x = cvx_tensor_f32_dup(hs), *text = cvx_tensor_f32_dup(eh), *img = NULL, t[2];
    int L_img = 0;
    if (i2v) {   /* x = cat([latents, condition]) */
        const cvx_tensor *cnd = cvx_st_find(st, "condition");
        x = cvx_realloc(x, sizeof(float) * (size_t)(hs->numel + cnd->numel));
        cvx_tensor_to_f32(cnd, x + hs->numel);
        const cvx_tensor *ie = cvx_st_find(st, "image_embeds");
        img = cvx_tensor_f32_dup(ie);
        L_img = (int)ie->shape[1];
        cvx_config cj;   /* the first step's timestep */
        int64_t ts[16];
        int nts;
        snprintf(p, sizeof p, WAN_DATA "%s/case.json", name);
        if (cvx_config_load(&cj, p) || cvx_cfg_int_array(&cj, "timesteps", ts, 16, &nts)) cvx_dist_die_last_error(world);
        t[0] = (float)ts[0];
        cvx_config_free(&cj);
    } else {
        const cvx_tensor *tf = cvx_st_find(st, "timestep_float");
        cvx_tensor_to_f32(tf, t);
    }
    size_t n_in = (size_t)C * F * H * Wc, n_out = (size_t)Co * F * H * Wc;
    float *xin = cvx_malloc(sizeof(float) * n_in), *out = cvx_malloc(sizeof(float) * n_out * B);
    for (int b = 0; b < B; b++) {
        for (size_t r = 0; r < (size_t)C * F * H; r++)   /* crop the width */
            memcpy(xin + r * Wc, x + (size_t)b * C * F * H * W + r * W, sizeof(float) * Wc);
        if (wan_forward(m, xin, 1, F, H, Wc, text + (size_t)b * L * c->text_dim, L, img, L_img, t + b,
                        out + (size_t)b * n_out))
            cvx_dist_die_last_error(world);
    }
    int r = cvx_dist_rank(world), np = cvx_dist_size(world);
    size_t bytes = sizeof(float) * n_out * B;
    float *all = r == 0 ? cvx_malloc(bytes * np) : NULL;
    if (cvx_dist_gather(world, out, bytes, all, 0)) cvx_dist_die_last_error(world);
    if (r == 0) {
        for (int j = 1; j < np; j++)
            if (memcmp(all, all + (size_t)j * n_out * B, bytes)) cvx_dist_die(world, "rank %d returned other bytes", j);
        FILE *fo = fopen(out_path, "wb");
        if (!fo || fwrite(out, 1, bytes, fo) != bytes) cvx_dist_die(world, "cannot write %s", out_path);
        fclose(fo);
    }
    free(all); free(x); free(xin); free(out); free(text); free(img);
    cvx_st_close(st);
    wan_free(m);
    cvx_dist_free(world);
    return 0;
}

#ifdef CVX_USE_MPI
/* One process (this one, the same per-element calls as the child, under --sp-child with
 * 1 rank) against np ranks. */
static void sp_case(const char *name, int np) {
    char dir[64], one[128], many[128], self[512], mr[512], cmd[1600], err[8192];
    tu_mkdtemp(dir, sizeof dir);
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(k > 0);
    self[k] = 0;
    snprintf(one, sizeof one, "%s/one.bin", dir);
    snprintf(many, sizeof many, "%s/many.bin", dir);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 %s --sp-child %s %s", self, name, one);
    tu_run_ok(cmd);
    tu_mpirun(mr, sizeof mr, np, 120);
    snprintf(cmd, sizeof cmd, "%s %s --sp-child %s %s </dev/null", mr, self, name, many);
    double t0 = cvx_time();
    int rc = tu_run(cmd, err, sizeof err);
    print_message("  mpirun -np %d %s: exit %d, %.1f s\n", np, name, rc, cvx_time() - t0);
    if (rc != 0 || err[0]) fail_msg("mpirun -np %d --sp-child %s: exit %d, stderr:\n%s", np, name, rc, err);
    size_t n1 = 0, n2 = 0;
    char *a = cvx_read_file(one, &n1), *b = cvx_read_file(many, &n2);
    ASSERT_NONNULL(a);
    ASSERT_NONNULL(b);
    assert_true(n1 == n2 && n1 % sizeof(float) == 0);
    double e = cvx_rel_l2((const float *)b, (const float *)a, n1 / sizeof(float));
    print_message("  %s: sp %d vs one process                 rel L2 = %.3g (tol 1e-6)%s\n", name, np, e,
                  memcmp(a, b, n1) ? "" : ", bit-identical");
    if (!(e <= 1e-6)) fail_msg("%s: sp %d differs from one process: rel L2 %.3g", name, np, e);
    free(a);
    free(b);
    tu_rmrf(dir);
}

static void test_sp(void **s) {
    (void)s;
    sp_case("transformer_1.3b", 3);   /* 3 heads: one per rank, 36 tokens */
    sp_case("e2e_i2v_dit", 2);        /* 4 heads, I2V, 27 tokens: 14 + 13 */
    sp_case("e2e_i2v_dit", 4);        /* one head per rank: 7, 7, 7, 6 */
}
#endif

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--sp-child")) return sp_child(argc, argv);
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_1_3b),
        cmocka_unit_test(test_golden_14b),
        cmocka_unit_test(test_pieces_and_chunks),
        cmocka_unit_test(test_i2v_step0),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_single_file_names),
        cmocka_unit_test(test_wrong_shape_dir),
        cmocka_unit_test(test_forward_errors),
        cmocka_unit_test(test_real_head_dim),
        cmocka_unit_test(test_real_configs),
#ifdef CVX_USE_MPI
        cmocka_unit_test(test_sp),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
