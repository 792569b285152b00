/* TeaCache4LTX-Video (ali-vilab/TeaCache, TeaCache4LTX-Video/teacache_ltx.py; docs/caching.md):
 *
 *   probe (golden transformer_2b, upstream's intermediates): block 0's modulated input
 *       RMSNorm(proj_in)·(1 + sst[1] + temb[1]) + sst[0] + temb[0] (rel L2 ≤ 1e-5); the residual
 *       R = norm_out(h)·(1 + scale) + shift − proj_in (≤ 1e-5); a skipped forward projects
 *       proj_in + another input's R: proj_out(proj_in[1] + R[0]) from upstream's tensors (≤ 1e-5)
 *   decisions (tiny random LTX, CFG, 10 Euler steps, three thresholds): each step's probe of both
 *       branches taken through the denoiser, the rel-L1 over the batch and upstream's rule
 *       (lines 68-79: first and last step compute, acc += poly1d(rel), skip iff acc < thresh)
 *       evaluated here give the cache's decision at every step; some skip
 *   the API (cvx_sample, 6 steps): threshold 0 and a threshold every step reaches give the
 *       uncached bytes; a skipping threshold is deterministic, differs, and resumed from a
 *       checkpoint taken right before each skipped step gives the uninterrupted bytes and counts
 *   the coefficients: published for widths up to 2048 (0.9.1), none for the 13B width. */
#include "api_harness.h"

#include "pipeline/cvx.h"
#include "stage2/cache.h"
#include "stage2/ltx.h"
#include "stage2/ltx_family.h"
#include "rng.h"

#define TOL 1e-5
#define TINY "models/ltx-tiny-random"

/* ---- the probe, the residual and the skipped forward against upstream's intermediates ---- */

/* y[o] = Σ_k W[o, k]·x[k] + b[o] in double */
static void linear_ref(const float *W, const float *bias, const float *x, int in, int out, float *y) {
    for (int o = 0; o < out; o++) {
        double s = bias[o];
        for (int k = 0; k < in; k++) s += (double)W[(size_t)o * in + k] * x[k];
        y[o] = (float)s;
    }
}

static void test_probe_golden(void **state) {
    (void)state;
    gh_case c;
    gh_open(&c, "tests/data/golden_ltx/transformer_2b");
    ltx_transformer *m = ltx_load(gh_path(&c, "model/transformer"), NULL);
    ASSERT_NONNULL(m);
    const ltx_config *cf = ltx_get_config(m);
    const int B = 2, F = (int)gh_int(gh_json(&c, "F")), H = (int)gh_int(gh_json(&c, "H")),
              W = (int)gh_int(gh_json(&c, "W")), S = F * H * W, D = cf->num_attention_heads * cf->attention_head_dim;
    const int L = (int)gh_tensor(&c, "encoder_hidden_states")->shape[1], Co = cf->out_channels;
    float *x = gh_f32(&c, NULL, "hidden_states"), *text = gh_f32(&c, NULL, "encoder_hidden_states");
    float *t = gh_f32(&c, NULL, "timestep"), *mask = malloc(sizeof(float) * B * L);
    const cvx_tensor *am = gh_tensor(&c, "encoder_attention_mask");
    for (int i = 0; i < B * L; i++) mask[i] = (float)gh_i64_at(am, (size_t)i);
    json_object *rs = gh_json(&c, "rope_interpolation_scale");
    float scale[3], *coords = malloc(sizeof(float) * B * 3 * S);
    for (int i = 0; i < 3; i++) scale[i] = (float)gh_num(gh_at(rs, (size_t)i));
    for (int b = 0; b < B; b++) ltx_rope_coords_grid(F, H, W, scale, coords + (size_t)b * 3 * S);
    /* upstream's tensors and the weights the formulas need */
    float *pin = gh_f32(&c, NULL, "inter.proj_in"), *temb = gh_f32(&c, NULL, "inter.time_embed.0");
    float *emb = gh_f32(&c, NULL, "inter.time_embed.1"), *nout = gh_f32(&c, NULL, "inter.norm_out");
    cvx_safetensors *wt = tu_open(gh_path(&c, "model/transformer/diffusion_pytorch_model.safetensors"));
    float *sst0 = cvx_tensor_f32_dup(cvx_st_find(wt, "transformer_blocks.0.scale_shift_table"));   // [6, D]
    float *sst = cvx_tensor_f32_dup(cvx_st_find(wt, "scale_shift_table"));                         // [2, D]
    float *pw = cvx_tensor_f32_dup(cvx_st_find(wt, "proj_out.weight")), *pb = cvx_tensor_f32_dup(cvx_st_find(wt, "proj_out.bias"));
    const size_t n = (size_t)B * S * D;
    float *want = malloc(sizeof(float) * n), *want_r = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {
            const float *h = pin + ((size_t)b * S + s) * D, *te = temb + (size_t)b * 6 * D, *e = emb + (size_t)b * D;
            double ms = 0;
            for (int k = 0; k < D; k++) ms += (double)h[k] * h[k];
            const double r = 1.0 / sqrt(ms / D + cf->norm_eps);
            for (int k = 0; k < D; k++) {
                size_t i = ((size_t)b * S + s) * D + k;
                /* teacache_ltx.py lines 63-67: norm1(inp)·(1 + scale_msa) + shift_msa */
                want[i] = (float)(h[k] * r * (1.0 + sst0[D + k] + te[D + k]) + sst0[k] + te[k]);
                /* lines 121-126: norm_out(h)·(1 + scale) + shift − ori_hidden_states */
                want_r[i] = (float)((double)nout[i] * (1.0 + sst[D + k] + e[k]) + sst[k] + e[k] - h[k]);
            }
        }
    ltx_fwd f;
    ASSERT_OK(ltx_forward_embed(m, x, B, S, text, mask, L, t, 1, coords, &f));
    ltx_forward_block0_input(m, &f, got);
    gh_check_rel_l2(&c, "block 0's modulated input", got, want, n, TOL);
    float *h0 = malloc(sizeof(float) * n);
    memcpy(h0, f.h, sizeof(float) * n);
    ltx_forward_blocks(m, &f, 0, cf->num_layers);
    ltx_forward_output_norm(m, &f);
    for (size_t i = 0; i < n; i++) got[i] = f.h[i] - h0[i];
    gh_check_rel_l2(&c, "residual (blocks + output norm)", got, want_r, n, TOL);
    float *out = malloc(sizeof(float) * (size_t)B * S * Co);
    ltx_forward_finalize(m, &f, out);
    float *full = gh_f32(&c, NULL, "output");
    gh_check_rel_l2(&c, "output_norm + finalize = output", out, full, (size_t)B * S * Co, TOL);
    /* a skipped forward: element b gets the other element's residual, then the projection only */
    float *R = malloc(sizeof(float) * n);
    memcpy(R, got, sizeof(float) * n);
    ASSERT_OK(ltx_forward_embed(m, x, B, S, text, mask, L, t, 1, coords, &f));
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < (size_t)S * D; i++) f.h[(size_t)b * S * D + i] += R[(size_t)(1 - b) * S * D + i];
    f.out_normed = 1;
    ltx_forward_finalize(m, &f, out);
    float *want_o = malloc(sizeof(float) * (size_t)B * S * Co), *row = malloc(sizeof(float) * D);
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {   /* teacache_ltx.py lines 86-87, 166: proj_out(hidden_states + previous_residual) */
            for (int k = 0; k < D; k++)
                row[k] = pin[((size_t)b * S + s) * D + k] + want_r[((size_t)(1 - b) * S + s) * D + k];
            linear_ref(pw, pb, row, D, Co, want_o + ((size_t)b * S + s) * Co);
        }
    gh_check_rel_l2(&c, "skipped forward: proj_out(proj_in + R)", out, want_o, (size_t)B * S * Co, TOL);
    free(x), free(text), free(t), free(mask), free(coords), free(pin), free(temb), free(emb), free(nout);
    free(sst0), free(sst), free(pw), free(pb), free(want), free(want_r), free(got), free(h0), free(out), free(full);
    free(R), free(want_o), free(row);
    cvx_st_close(wt);
    ltx_free(m);
    gh_close(&c);
}

/* ---- the decisions: upstream's rule evaluated here on the probe values of each step ---- */

#define NSTEPS 10

/* teacache_ltx.py lines 68-79 with np.poly1d(coefficients) */
typedef struct {
    double acc, thresh;
    const double *co;
} ref_rule;

static int ref_decide(ref_rule *r, int cnt, int n_steps, double rel, double *margin) {
    *margin = INFINITY;
    if (cnt == 0 || cnt == n_steps - 1) {
        r->acc = 0;
        return 1;
    }
    double p = 0;
    for (int i = 0; i < 5; i++) p = p * rel + r->co[i];
    r->acc += p;
    *margin = fabs(r->acc - r->thresh);
    if (r->acc < r->thresh) return 0;
    r->acc = 0;
    return 1;
}

/* The probe of branch j at (x, t) through the denoiser's pieces: [S, D]. */
static void probe_of(cvx_denoiser *d, const float *x, double t, const ltx_text_cond *cond, float *out) {
    cvx_denoise_input in = {.x = x, .cond = cond, .t = t};
    cvx_fwd f;
    ASSERT_OK(d->type->embed(d, &in, &f));
    d->type->teacache_input(d, &f, out);
    d->type->abort(d, &f);
}

/* One run of NSTEPS Euler steps with CFG 3 under TeaCache at `thresh`; the decisions in got[]. */
static int decisions_case(ltx_transformer *m, double thresh, int *got) {
    const int F = 2, H = 2, W = 3, S = F * H * W, L = 8;
    cvx_denoiser d;
    ltx_denoiser_init(&d, m, 25);
    ASSERT_OK(d.type->prepare(&d, F, H, W));
    const ltx_config *cf = ltx_get_config(m);
    const int D = cf->num_attention_heads * cf->attention_head_dim;
    const size_t n = d.n_latent, pn = (size_t)S * D;
    cvx_generator g;
    cvx_generator_seed(&g, 11);
    float *text = malloc(sizeof(float) * 2 * L * cf->caption_channels), *mask = malloc(sizeof(float) * 2 * L);
    float *x = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * 2 * n);
    float *X = malloc(sizeof(float) * 2 * pn), *P = malloc(sizeof(float) * 2 * pn);
    cvx_randn(&g, text, (size_t)2 * L * cf->caption_channels);
    cvx_randn(&g, x, n);
    for (int i = 0; i < 2 * L; i++) mask[i] = i % L < (i < L ? 5 : 8);   /* padding in the negative prompt */
    ltx_text_cond cond[2] = {{text, mask, L}, {text + (size_t)L * cf->caption_channels, mask + L, L}};
    const void *conds[2] = {&cond[0], &cond[1]};
    double co[5];
    assert_non_null(ltx_teacache_coefficients(cf, co));
    cvx_cache c;
    ASSERT_OK(cvx_cache_init(&c, CVX_CACHE_TEACACHE, thresh, co, NSTEPS, d.num_layers));
    cvx_cache_set_layout(&c, &(cvx_cache_layout){NULL, 2, 1, 1});
    ref_rule r = {0, thresh, co};
    int skipped = 0;
    for (int i = 0; i < NSTEPS; i++) {
        const double t = 1000.0 * (1.0 - (double)i / NSTEPS), dt = 1.0 / NSTEPS;
        for (int j = 0; j < 2; j++) probe_of(&d, x, t, &cond[j], X + j * pn);
        double num = 0, den = 0, margin;   /* mean|X − P| / mean|P| over [2, S, D] */
        for (size_t k = 0; k < 2 * pn; k++) num += fabs((double)X[k] - P[k]), den += fabs((double)P[k]);
        int want = ref_decide(&r, i, NSTEPS, i ? num / den : NAN, &margin);
        if (margin < 1e-9) fail_msg("threshold %g, step %d: acc within %g of it (pick another)", thresh, i, margin);
        memcpy(P, X, sizeof(float) * 2 * pn);
        cvx_denoise_input in = {.x = x, .t = t};
        ASSERT_OK(cvx_cache_step(&d, &c, i, &in, conds, out));
        got[i] = c.last_compute;
        if (got[i] != want)
            fail_msg("threshold %g, step %d: the cache %s, upstream's rule on rel %.9g (acc %.9g) %s", thresh, i,
                     got[i] ? "computes" : "skips", num / den, r.acc, want ? "computes" : "skips");
        skipped += !want;
        for (size_t k = 0; k < n; k++) x[k] -= (float)(dt * (out[k] + 3.0 * (out[n + k] - out[k])));
    }
    assert_int_equal(c.steps_skipped, skipped);
    assert_int_equal(c.steps_computed, NSTEPS - skipped);
    cvx_cache_free(&c);
    cvx_denoiser_free(&d);
    free(text), free(mask), free(x), free(out), free(X), free(P);
    return skipped;
}

static void test_decisions(void **state) {
    (void)state;
    ltx_transformer *m = ltx_load(TINY "/transformer", NULL);
    ASSERT_NONNULL(m);
    static const double th[] = {0.05, 0.2, 0.35};
    int got[NSTEPS], some_skip = 0, mid_compute = 0;
    for (int k = 0; k < 3; k++) {
        int s = decisions_case(m, th[k], got);
        char pat[NSTEPS + 1];
        for (int i = 0; i < NSTEPS; i++) pat[i] = got[i] ? 'C' : '-';
        pat[NSTEPS] = '\0';
        print_message("  threshold %.2f: %s (%d of %d skipped, as upstream's rule)\n", th[k], pat, s, NSTEPS);
        some_skip |= s > 0;
        for (int i = 1; i < NSTEPS - 1; i++) mid_compute |= s > 0 && got[i] && !got[i - 1];
    }
    assert_true(some_skip);     /* the rule was exercised both ways */
    assert_true(mid_compute);   /* a computed step after skipped ones: acc reached the threshold */
    ltx_free(m);
}

/* ---- through the API ---- */

#define STEPS 6
static const char *const NEG = "blurry, low quality", *const POS = "a red fox running through fresh snow";

typedef struct {
    cvx_model *m;
    cvx_embeddings emb;
    cvx_cond_set more;
    cvx_sample_params sp;
    size_t n;
    int decided[STEPS];
} fx;

static void on_step(void *user, const cvx_step_info *info) { ((fx *)user)->decided[info->step] = info->cache; }

static void fx_open(fx *x) {
    memset(x, 0, sizeof *x);
    x->m = cvx_model_open(&(cvx_model_params){.model = TINY, .threads = 2});
    if (!x->m) fail_msg("%s", cvx_last_error());
    cvx_encode_params ep = {.prompt = POS, .negative_prompt = NEG};
    ASSERT_OK(cvx_encode(x->m, &ep, NULL, NULL, &x->emb));
    const char *texts[2] = {NEG, POS};
    ASSERT_OK(cvx_encode_texts_more(x->m, texts, NULL, 2, NULL, NULL, &x->more));
    ah_cond_set_split(&x->more);
    x->sp = cvx_sample_default_params(x->m);
    x->sp.frames = 9, x->sp.height = 64, x->sp.width = 96;
    x->sp.num_inference_steps = STEPS, x->sp.seed = 7;
    x->sp.cond_more = &x->more;
    x->sp.on_step = on_step, x->sp.on_step_user = x;
}

static void fx_close(fx *x) {
    cvx_embeddings_free(&x->emb);
    cvx_cond_set_free(&x->more);
    cvx_model_close(x->m);
}

static void sample(fx *x, const cvx_sample_params *sp, cvx_latents *out) {
    if (cvx_sample(x->m, sp, &x->emb, NULL, NULL, out)) fail_msg("%s", cvx_last_error());
    x->n = (size_t)out->C * out->T * out->h * out->w;
}

static int same(const cvx_latents *a, const cvx_latents *b, size_t n) { return !memcmp(a->data, b->data, n * sizeof(float)); }

static cvx_sample_params teacache(const fx *x, double thresh) {
    cvx_sample_params sp = x->sp;
    sp.cache = "teacache", sp.cache_threshold = thresh;
    return sp;
}

static void test_api(void **state) {
    (void)state;
    fx x;
    fx_open(&x);
    cvx_latents plain, off, all, skip, again;
    sample(&x, &x.sp, &plain);
    cvx_sample_params sp = teacache(&x, 0);   /* off: the plain forward */
    sample(&x, &sp, &off);
    if (!same(&off, &plain, x.n)) fail_msg("teacache at threshold 0 differs from the uncached run");
    sp = teacache(&x, 1e-300);   /* p(rel) >= p(0) = 0.0097 > it: every step computes through the pieces */
    sample(&x, &sp, &all);
    if (!same(&all, &plain, x.n)) fail_msg("teacache computing every step differs from the uncached run");
    assert_int_equal(all.cache_steps_computed, STEPS);
    assert_int_equal(all.cache_steps_skipped, 0);
    sp = teacache(&x, 0.25);
    sample(&x, &sp, &skip);
    int decided[STEPS];
    memcpy(decided, x.decided, sizeof decided);
    sample(&x, &sp, &again);
    assert_true(skip.cache_steps_skipped >= 1);
    assert_int_equal(skip.cache_steps_computed + skip.cache_steps_skipped, STEPS);
    assert_int_equal(skip.cache_blocks_skipped, 2 * skip.cache_steps_skipped);   /* all blocks of a skipped step */
    if (same(&skip, &plain, x.n)) fail_msg("teacache skipping gave the uncached bytes");
    if (!same(&skip, &again, x.n)) fail_msg("teacache is not deterministic");
    assert_memory_equal(decided, x.decided, sizeof decided);
    print_message("  threshold 0.25: %lld of %d steps skipped, rel-L2 vs uncached %.3g\n", skip.cache_steps_skipped,
                  STEPS, cvx_rel_l2(skip.data, plain.data, x.n));
    /* stopped right before each skipped step, resumed: the uninterrupted bytes (the residual and
     * the previous probe come from the checkpoint) */
    char dir[] = "/tmp/cvx_ltxtea_ckXXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    int resumed = 0;
    for (int stop = 1; stop < STEPS; stop++) {
        if (decided[stop] != 0) continue;
        cvx_latents part, rest;
        unlink(path);   /* a fresh run */
        sp.checkpoint_path = path, sp.checkpoint_every = 1, sp.stop_after_steps = stop, sp.resume = 0;
        sample(&x, &sp, &part);
        assert_int_equal(part.steps_done, stop);
        cvx_safetensors *ck = tu_open(path);
        assert_non_null(cvx_st_find(ck, "teacache_prev_input"));
        assert_non_null(cvx_st_find(ck, "cache_residual"));
        cvx_st_close(ck);
        sp.stop_after_steps = 0, sp.resume = 1;
        sample(&x, &sp, &rest);
        assert_int_equal(rest.resumed_from, stop);
        if (!same(&rest, &skip, x.n)) fail_msg("resumed after step %d (the next skipped) differs", stop);
        assert_int_equal(rest.cache_steps_skipped, skip.cache_steps_skipped);
        assert_int_equal(rest.cache_steps_computed, skip.cache_steps_computed);
        cvx_latents_free(&part), cvx_latents_free(&rest);
        resumed++;
    }
    assert_true(resumed >= 1);
    tu_rmrf(dir);
    cvx_latents_free(&plain), cvx_latents_free(&off), cvx_latents_free(&all), cvx_latents_free(&skip);
    cvx_latents_free(&again);
    fx_close(&x);
}

/* The published set for widths up to 2048 (0.9.1's), none for the 13B width. */
static void test_coefficients(void **state) {
    (void)state;
    ltx_config c = {.num_attention_heads = 32, .attention_head_dim = 64};
    double co[5];
    const char *name = ltx_teacache_coefficients(&c, co);
    assert_non_null(name);
    assert_string_equal(name, "LTX-Video-0.9.1");
    assert_true(co[0] == 2.14700694e+01 && co[4] == 9.69274326e-03);
    c.attention_head_dim = 128;   /* 13B: 4096 wide */
    assert_null(ltx_teacache_coefficients(&c, co));
    assert_true(co[0] == 0 && co[4] == 0);
}

int main(void) {
    cvx_set_verbosity(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_golden),
        cmocka_unit_test(test_decisions),
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_coefficients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
