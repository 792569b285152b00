/* Step caching (stage2/cache.c) on the golden e2e models (e2e_2b: DDIM, sin-cos; e2e_5b: DPM,
 * rotary; 2 blocks each), run with more steps than the golden 4 so there is room to skip:
 *   - threshold 0 (both kinds) and a never-skipping setting are bit-identical to no cache;
 *   - TeaCache's e (before SiLU) equals an independent double-precision TimestepEmbedding built
 *     here from the safetensors (1e-5 relative), and the decisions equal the rule replayed here
 *     (np.poly1d by Horner, strict <, reset on compute, e_prev every step) with the published 2b/5b
 *     coefficients at 0.1/0.2/0.3;
 *   - the sampler's final latents equal, bit for bit, a reference loop written here from the
 *     exported forward pieces with its own residual bookkeeping (copies, upstream formulation),
 *     driven by those decisions (TeaCache) or by its own FBCache rule; the counts match;
 *   - kill + resume with caching, stopped right before a skipped step, is bit-identical; a
 *     checkpoint with another cache_threshold is refused;
 *   - TeaCache's e is the same bytes whatever the latents and text (2b, 5b, 1.5 with ofs): what
 *     lets every MPI rank decide alone; FBCache's row sums do not depend on the rows' grouping;
 *   - prints the rel-L2 of the final latents vs uncached at the default thresholds (docs).
 * The sampler and the reference loop run one forward of batch 1 per CFG branch (as --cfg_parallel
 * and the uncached loop do); tests/e2e_mpi.c checks the MPI layouts against one process. */
#include "cogvideox_loop_harness.h"

#include <math.h>

#include "config.h"
#include "error.h"
#include "ops.h"
#include "rng.h"
#include "safetensors.h"
#include "stage2/cache.h"
#include "stage2/sampler.h"
#include "stage2/cogvideox_family.h"
#include "stage2/scheduler_ddpm.h"
#include "stage2/cogvideox.h"

#define MAXS 64

/* The sampler with caching settings; lat receives the final latents. */
static int run(cl_case *c, int kind, double thr, const double *coeffs, const cvx_checkpointing *ck, float *lat,
               cvx_sample_result *res) {
    cvx_scheduler s;
    cl_scheduler(c, &s);
    cvx_loop_request r = c->r;
    r.cache_threshold = thr;
    cvx_loop_params p = c->p;
    p.req = &r, p.cache_kind = kind;
    int rc = cogvideox_sample_loop(c->m, 0, &s, &p, coeffs, &c->sh, c->prompt, c->negative, c->L, ck, NULL, NULL, lat, res);
    cvx_scheduler_free(&s);
    return rc;
}

/* ---- the reference loop: the exported pieces, upstream's bookkeeping with separate copies ---- */
/* One forward of batch 1 per CFG branch, as the sampler (and --cfg_parallel) runs them; one
 * decision for both. kind TEACACHE: decisions[i] given. kind FBCACHE: decisions[i] given (forced)
 * if force, else the FBCache rule with `thr` (written here: Σ per video row, rows in (branch,
 * token) order), recorded into decisions. NONE: plain. FBCache runs embed + block 0 twice per
 * branch (once for the decision, once to go on): the same bytes, no second stream to keep. */
static void ref_sample(cl_case *c, int kind, int *decisions, int force, double thr, float *lat) {
    const cogvideox_config *cf = cogvideox_get_config(c->m);
    const int n_steps = c->r.num_inference_steps, B = 2, L = c->L;
    const size_t n = c->sh.numel, Dt = (size_t)cf->text_embed_dim;
    cvx_scheduler s;
    cl_scheduler(c, &s);
    assert_int_equal(cvx_scheduler_set_timesteps(&s, n_steps), 0);
    s.type->init(&s, n);
    float *text = malloc(2 * L * Dt * sizeof(float)), *out = malloc(2 * n * sizeof(float)),
          *pred = malloc(n * sizeof(float)), *prev = malloc(n * sizeof(float));
    memcpy(text, c->negative, L * Dt * sizeof(float));
    memcpy(text + L * Dt, c->prompt, L * Dt * sizeof(float));
    cvx_generator g;
    cvx_generator_seed(&g, c->r.seed);
    cvx_randn(&g, lat, n);
    float *rc = NULL, *rs = NULL;
    if (cf->use_rotary_positional_embeddings) {
        size_t nt = (size_t)cogvideox_num_video_tokens(cf, c->sh.frames, c->sh.height, c->sh.width);
        rc = malloc(nt * cf->attention_head_dim * sizeof(float));
        rs = malloc(nt * cf->attention_head_dim * sizeof(float));
        assert_int_equal(cogvideox_rope_tables(cf, c->sh.frames, c->sh.height, c->sh.width, rc, rs), 0);
    }
    float *R = NULL, *P = NULL, *ori = NULL, *r0 = NULL;
    for (int i = 0; i < n_steps; i++) {
        int64_t t = s.timesteps[i], ts[1] = {t};
        const int F = c->sh.frames, H = c->sh.height, W = c->sh.width;
        cogvideox_fwd f;
        int compute = kind == CVX_CACHE_TEACACHE ? decisions[i] : 1;
        if (kind == CVX_CACHE_FBCACHE) {   /* block 0 of each branch, then the decision */
            for (int b = 0; b < B; b++) {
                assert_int_equal(cogvideox_forward_embed(c->m, lat, 1, F, H, W, text + b * L * Dt, L, ts, NULL, 0, rc,
                                                         rs, &f), 0);
                size_t vn = (size_t)f.N * f.D;
                if (!r0) r0 = malloc(B * vn * sizeof(float));
                float *hv = f.h + (size_t)L * f.D;
                memcpy(r0 + b * vn, hv, vn * sizeof(float));
                cogvideox_forward_blocks(c->m, &f, 0, 1);
                for (size_t k = 0; k < vn; k++) r0[b * vn + k] = hv[k] - r0[b * vn + k];
                if (b == B - 1) {
                    if (force) compute = decisions[i];
                    else if (!P) compute = 1;
                    else {
                        double a = 0, d = 0;   /* mean|r − P| / mean|P|, the counts cancel; per row, rows in order */
                        for (size_t row = 0; row < (size_t)B * f.N; row++) {
                            double ra = 0, rd = 0;
                            for (int k = 0; k < f.D; k++) {
                                size_t e = row * f.D + k;
                                ra += fabs((double)r0[e] - P[e]), rd += fabs((double)P[e]);
                            }
                            a += ra, d += rd;
                        }
                        compute = d == 0 || !(a / d <= thr);
                    }
                    decisions[i] = compute;
                    if (compute) {
                        if (!P) P = malloc(B * vn * sizeof(float));
                        memcpy(P, r0, B * vn * sizeof(float));
                    }
                }
                cogvideox_forward_abort(&f);
            }
        }
        for (int b = 0; b < B; b++) {
            assert_int_equal(cogvideox_forward_embed(c->m, lat, 1, F, H, W, text + b * L * Dt, L, ts, NULL, 0, rc, rs,
                                                     &f), 0);
            size_t hn = (size_t)f.S * f.D;
            if (!ori) ori = malloc(hn * sizeof(float)), R = malloc(B * hn * sizeof(float));
            float *Rb = R + b * hn;
            int first = kind == CVX_CACHE_FBCACHE;   /* FBCache: block 0 always runs */
            if (first) cogvideox_forward_blocks(c->m, &f, 0, 1);
            if (kind == CVX_CACHE_NONE) {
                cogvideox_forward_blocks(c->m, &f, 0, cf->num_layers);
            } else if (compute) {
                memcpy(ori, f.h, hn * sizeof(float));   /* ori_hidden_states / head_block_output */
                cogvideox_forward_blocks(c->m, &f, first, cf->num_layers - first);
                for (size_t k = 0; k < hn; k++) Rb[k] = f.h[k] - ori[k];   /* previous_residual / tail residuals */
            } else {
                for (size_t k = 0; k < hn; k++) f.h[k] += Rb[k];
            }
            cogvideox_forward_finalize(c->m, &f, out + b * n);
        }
        float gf = (float)cvx_guidance_at(c->r.guidance_scale, c->r.use_dynamic_cfg, c->r.num_inference_steps, t);
        for (size_t k = 0; k < n; k++) pred[k] = out[k] + gf * (out[n + k] - out[k]);
        s.type->step(&s, i, pred, lat, n, &g, prev);
        memcpy(lat, prev, n * sizeof(float));
    }
    free(text); free(out); free(pred); free(prev); free(rc); free(rs);
    free(R); free(P); free(ori); free(r0);
    cvx_scheduler_free(&s);
}

/* ---- the TeaCache rule, independently: e(t) in double from the weights, then the replay ---- */
static void ref_temb(cl_case *c, int64_t t, double *e) {
    const cogvideox_config *cf = cogvideox_get_config(c->m);
    int D = cf->num_attention_heads * cf->attention_head_dim, E = cf->time_embed_dim, half = D / 2;
    char p[512];
    snprintf(p, sizeof p, GOLDEN "/%s/model/transformer/diffusion_pytorch_model.safetensors", c->dir);
    cvx_safetensors *st = cvx_st_open(p);
    assert_non_null(st);
    float *w1 = cvx_tensor_f32_dup(cvx_st_find(st, "time_embedding.linear_1.weight")),
          *b1 = cvx_tensor_f32_dup(cvx_st_find(st, "time_embedding.linear_1.bias")),
          *w2 = cvx_tensor_f32_dup(cvx_st_find(st, "time_embedding.linear_2.weight")),
          *b2 = cvx_tensor_f32_dup(cvx_st_find(st, "time_embedding.linear_2.bias"));
    /* diffusers get_timestep_embedding, in float32 as torch computes it */
    float *fr = malloc(D * sizeof(float));
    for (int k = 0; k < half; k++) {
        float ex = expf(-logf(10000.0f) * (float)k / (float)(half - cf->freq_shift));
        float arg = (float)t * ex;
        fr[k] = cf->flip_sin_to_cos ? cosf(arg) : sinf(arg);
        fr[half + k] = cf->flip_sin_to_cos ? sinf(arg) : cosf(arg);
    }
    double *h1 = malloc(E * sizeof(double));
    for (int j = 0; j < E; j++) {
        double a = b1[j];
        for (int k = 0; k < D; k++) a += (double)w1[(size_t)j * D + k] * fr[k];
        h1[j] = a / (1.0 + exp(-a));
    }
    for (int j = 0; j < E; j++) {
        double a = b2[j];
        for (int k = 0; k < E; k++) a += (double)w2[(size_t)j * E + k] * h1[k];
        e[j] = a;
    }
    free(fr); free(h1); free(w1); free(b1); free(w2); free(b2);
    cvx_st_close(st);
}

/* Replay of TeaCache §1.2 on e[n_steps][E]; returns the number of near-ties (|acc − thr| < 1e-6). */
static int replay(const double *e, int E, int n_steps, const double co[5], double thr, int *dec) {
    double acc = 0;
    int ties = 0;
    for (int i = 0; i < n_steps; i++) {
        if (i == 0 || i == n_steps - 1) { dec[i] = 1; acc = 0; continue; }
        double a = 0, d = 0;
        for (int k = 0; k < E; k++) a += fabs(e[i * E + k] - e[(i - 1) * E + k]), d += fabs(e[(i - 1) * E + k]);
        double x = a / d, y = 0;
        for (int k = 0; k < 5; k++) y = y * x + co[k];   /* np.poly1d */
        acc += y;
        if (fabs(acc - thr) < 1e-6) ties++;
        if (acc < thr) dec[i] = 0;
        else { dec[i] = 1; acc = 0; }
    }
    return ties;
}

/* our e per step: row 0 of the forward's pre-SiLU embedding */
static void our_e(cl_case *c, const int64_t *ts, int n_steps, double *e) {
    const cogvideox_config *cf = cogvideox_get_config(c->m);
    size_t n = c->sh.numel, Dt = (size_t)cf->text_embed_dim;
    float *x = calloc(2 * n, sizeof(float)), *text = calloc(2 * c->L * Dt, sizeof(float));
    size_t nt = (size_t)cogvideox_num_video_tokens(cf, c->sh.frames, c->sh.height, c->sh.width);
    float *rc = calloc(nt * cf->attention_head_dim, sizeof(float)), *rs = calloc(nt * cf->attention_head_dim, sizeof(float));
    for (int i = 0; i < n_steps; i++) {
        int64_t t2[2] = {ts[i], ts[i]};
        cogvideox_fwd f;
        assert_int_equal(cogvideox_forward_embed(c->m, x, 2, c->sh.frames, c->sh.height, c->sh.width, text, c->L, t2,
                                                 NULL, 0, rc, rs, &f), 0);
        assert_memory_equal(f.emb, f.emb + f.E, f.E * sizeof(float));   /* CFG rows identical */
        for (int k = 0; k < f.E; k++) e[i * f.E + k] = f.emb[k];
        cogvideox_forward_abort(&f);
    }
    free(x); free(text); free(rc); free(rs);
}

static int count(const int *d, int n, int v) {
    int k = 0;
    for (int i = 0; i < n; i++) k += d[i] == v;
    return k;
}

/* ---- tests ---- */
static void test_rule_units(void **state) {
    (void)state;
    const double c[5] = {1, -2, 3, -4, 5};
    assert_true(cvx_poly1d(c, 2.0) == 16 - 16 + 12 - 8 + 5);
    double co[5];
    assert_int_equal(cvx_teacache_parse_coefficients("0,0,0,0,1", co), 0);
    assert_true(co[4] == 1 && co[0] == 0);
    assert_int_equal(cvx_teacache_parse_coefficients("1,2,3", co), -1);
    assert_non_null(strstr(cvx_last_error(), "--teacache_coefficients"));
    cvx_cache_kind k;
    assert_int_equal(cvx_cache_parse_kind("fbcache", &k), 0);
    assert_int_equal(k, CVX_CACHE_FBCACHE);
    assert_int_equal(cvx_cache_parse_kind("tea", &k), -1);
    /* the coefficient set from the real configs (golden copies of the real config.json files) */
    const char *cfgs[][2] = {{GOLDEN "/e2e_2b/model/transformer/config.json", "CogVideoX-2b"},
                             {GOLDEN "/transformer_5b/model/transformer/config.json", "CogVideoX-5b"},
                             {GOLDEN "/transformer_1.5/model/transformer/config.json", "CogVideoX1.5-5B"},
                             {GOLDEN "/e2e_i2v_5b/model/transformer/config.json", "CogVideoX-5b"}};
    for (int i = 0; i < 4; i++) {
        cogvideox_config cf;
        assert_int_equal(cogvideox_config_load(cfgs[i][0], &cf), 0);
        assert_string_equal(cogvideox_teacache_coefficients(&cf, co), cfgs[i][1]);
        if (i == 2) {   /* 1.5 with doubled in_channels = the I2V set; 5b-I2V keeps the 5b set */
            cf.in_channels = 2 * cf.out_channels;
            assert_string_equal(cogvideox_teacache_coefficients(&cf, co), "CogVideoX1.5-5B-I2V");
        }
        if (i == 1) {
            cf.in_channels = 2 * cf.out_channels;
            assert_string_equal(cogvideox_teacache_coefficients(&cf, co), "CogVideoX-5b");
            assert_true(co[0] == -1.53880483e+03);
        }
    }
    /* FBCache needs 2 blocks; threshold <= 0 is off */
    cvx_cache cc;
    assert_int_equal(cvx_cache_init(&cc, CVX_CACHE_FBCACHE, 0.1, NULL, 10, 1), -1);
    assert_int_equal(cvx_cache_init(&cc, CVX_CACHE_TEACACHE, 0.0, co, 10, 2), 0);
    assert_false(cvx_cache_active(&cc));
}

/* threshold 0 and never-skip settings are bit-identical to no cache */
static void identical_case(const char *dir) {
    cl_case c;
    cl_open(&c, dir, 8);
    size_t n = c.sh.numel;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    cvx_sample_result r;
    assert_int_equal(run(&c, CVX_CACHE_NONE, 0, NULL, NULL, a, &r), 0);
    for (int k = 1; k <= 2; k++) {
        assert_int_equal(run(&c, k, 0.0, NULL, NULL, b, &r), 0);
        assert_memory_equal(a, b, n * 4);
        assert_int_equal(r.cache_steps_skipped + r.cache_steps_computed, 0);
    }
    const double one[5] = {0, 0, 0, 0, 1};   /* p ≡ 1: acc = 1 >= 0.5 at every step */
    assert_int_equal(run(&c, CVX_CACHE_TEACACHE, 0.5, one, NULL, b, &r), 0);
    /* an active cache runs one forward per branch, as the uncached loop: the same bytes */
    assert_memory_equal(b, a, n * 4);
    assert_int_equal(r.cache_steps_computed, 8);
    assert_int_equal(r.cache_steps_skipped, 0);
    /* reference loop without cache == sampler, proving the reference is faithful */
    ref_sample(&c, CVX_CACHE_NONE, NULL, 0, 0, b);
    assert_memory_equal(b, a, n * 4);
    free(a); free(b);
    cl_close(&c);
    printf("  %s: threshold 0 (teacache, fbcache) and p ≡ 1 at 0.5 == no cache, bit for bit\n", dir);
}
static void test_off_identical(void **state) {
    (void)state;
    identical_case("e2e_2b");
    identical_case("e2e_5b");
}

/* Under --cfg_parallel / --sp every rank decides TeaCache on its own e: e must come from the
 * timestep (and the constant ofs) alone. Two forwards with other latents and text, same t: the
 * same e bytes, for 2b (sin-cos), 5b (rotary) and 1.5-I2V (patch_size_t, ofs_embed_dim). */
static void test_e_independent_of_inputs(void **state) {
    (void)state;
    const char *dirs[3] = {"e2e_2b", "e2e_5b", "e2e_i2v_1.5"};
    for (int d = 0; d < 3; d++) {
        char path[256];
        snprintf(path, sizeof path, GOLDEN "/%s/model/transformer", dirs[d]);
        cogvideox_transformer *m = cogvideox_load(path, NULL);
        if (!m) fail_msg("%s", cvx_last_error());
        const cogvideox_config *cf = cogvideox_get_config(m);
        int pt = cf->patch_size_t > 0 ? cf->patch_size_t : 1, F = 2 * pt, H = 4 * cf->patch_size, W = H;
        int L = cf->max_text_seq_length;
        size_t nx = (size_t)F * cf->in_channels * H * W, nt = (size_t)L * cf->text_embed_dim;
        float *x = malloc(nx * sizeof(float)), *text = malloc(nt * sizeof(float)), *e0 = NULL, *rc = NULL, *rs = NULL;
        if (cf->use_rotary_positional_embeddings) {
            size_t nv = (size_t)cogvideox_num_video_tokens(cf, F, H, W) * cf->attention_head_dim;
            rc = malloc(nv * sizeof(float)), rs = malloc(nv * sizeof(float));
            assert_int_equal(cogvideox_rope_tables(cf, F, H, W, rc, rs), 0);
        }
        cvx_generator g;
        cvx_generator_seed(&g, 7);
        int64_t t = 781;
        for (int k = 0; k < 2; k++) {
            cvx_randn(&g, x, nx);
            cvx_randn(&g, text, nt);
            cogvideox_fwd f;
            assert_int_equal(cogvideox_forward_embed(m, x, 1, F, H, W, text, L, &t, NULL, 0, rc, rs, &f), 0);
            if (!e0) e0 = malloc(f.E * sizeof(float)), memcpy(e0, f.emb, f.E * sizeof(float));
            else assert_memory_equal(e0, f.emb, f.E * sizeof(float));
            cogvideox_forward_abort(&f);
        }
        printf("  %s: e of t=%lld is the same bytes for other latents and text%s\n", dirs[d], (long long)t,
               cf->ofs_embed_dim ? " (with the ofs embedding)" : "");
        free(x); free(text); free(e0); free(rc); free(rs);
        cogvideox_free(m);
    }
}

/* FBCache's blocked rel-L1: a row's sums do not depend on which rows are summed with it (a
 * rank's share gives the bytes of the whole call), and the ratio adds rows in order. */
static void test_fbcache_row_sums(void **state) {
    (void)state;
    enum { ROWS = 26, D = 7 };
    float r[ROWS * D], P[ROWS * D];
    cvx_generator g;
    cvx_generator_seed(&g, 3);
    cvx_randn(&g, r, ROWS * D);
    cvx_randn(&g, P, ROWS * D);
    double whole[2 * ROWS], part[2 * ROWS], num = 0, den = 0, den_got;
    cvx_fbcache_row_sums(r, P, ROWS, D, whole);
    for (int lo = 0, hi; lo < ROWS; lo = hi) {   /* shares of 1, 2, 3, ... rows */
        hi = lo + 1 + lo % 4 < ROWS ? lo + 1 + lo % 4 : ROWS;
        cvx_fbcache_row_sums(r + lo * D, P + lo * D, (size_t)(hi - lo), D, part + 2 * lo);
    }
    assert_memory_equal(whole, part, sizeof whole);
    for (int i = 0; i < ROWS; i++) {
        double a = 0, b = 0;
        for (int k = 0; k < D; k++) a += fabs((double)r[i * D + k] - P[i * D + k]), b += fabs((double)P[i * D + k]);
        num += a, den += b;
    }
    assert_true(cvx_fbcache_rel(whole, ROWS, &den_got) == num / den && den_got == den);
}

/* TeaCache with p ≡ 1 at 1.5: compute, skip, compute, ..., compute (last) — sampler == reference */
static void test_teacache_known_pattern(void **state) {
    (void)state;
    const char *dirs[] = {"e2e_2b", "e2e_5b"};
    for (int d = 0; d < 2; d++) {
        cl_case c;
        const int N = 12;
        cl_open(&c, dirs[d], N);
        size_t n = c.sh.numel;
        float *a = malloc(n * 4), *b = malloc(n * 4);
        int dec[MAXS];
        for (int i = 0; i < N; i++) dec[i] = i == N - 1 || i % 2 == 0;
        const double one[5] = {0, 0, 0, 0, 1};
        cvx_sample_result r;
        assert_int_equal(run(&c, CVX_CACHE_TEACACHE, 1.5, one, NULL, a, &r), 0);
        ref_sample(&c, CVX_CACHE_TEACACHE, dec, 1, 0, b);
        assert_memory_equal(a, b, n * 4);
        assert_int_equal(r.cache_steps_computed, count(dec, N, 1));
        assert_int_equal(r.cache_steps_skipped, count(dec, N, 0));
        assert_int_equal(r.cache_blocks_skipped, 2 * count(dec, N, 0));
        printf("  %s: p ≡ 1 at 1.5: %lld computed, %lld skipped, == reference bit for bit\n", dirs[d],
               (long long)r.cache_steps_computed, (long long)r.cache_steps_skipped);
        free(a); free(b);
        cl_close(&c);
    }
}

/* real coefficients: e vs the double reference, decisions vs the replay, sampler vs reference loop */
static void teacache_real(const char *dir, int N) {
    cl_case c;
    cl_open(&c, dir, N);
    const cogvideox_config *cf = cogvideox_get_config(c.m);
    int E = cf->time_embed_dim;
    cvx_scheduler s;
    cl_scheduler(&c, &s);
    assert_int_equal(cvx_scheduler_set_timesteps(&s, N), 0);
    double *eo = malloc(N * E * sizeof(double)), *er = malloc(N * E * sizeof(double)), co[5];
    our_e(&c, ddpm_of(&s)->timesteps, N, eo);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        ref_temb(&c, s.timesteps[i], er + i * E);
        double a = 0, d = 0;
        for (int k = 0; k < E; k++) a += (eo[i * E + k] - er[i * E + k]) * (eo[i * E + k] - er[i * E + k]), d += er[i * E + k] * er[i * E + k];
        if (sqrt(a / d) > worst) worst = sqrt(a / d);
    }
    double rmin = INFINITY, rmax = 0;
    for (int i = 1; i < N; i++) {
        double a = 0, d = 0;
        for (int k = 0; k < E; k++) a += fabs(eo[i * E + k] - eo[(i - 1) * E + k]), d += fabs(eo[(i - 1) * E + k]);
        rmin = fmin(rmin, a / d), rmax = fmax(rmax, a / d);
    }
    printf("  %s: e vs double reference, worst rel L2 %.3g; rel-L1 between steps %.3g .. %.3g\n", dir, worst, rmin, rmax);
    assert_true(worst <= 1e-5);
    cogvideox_teacache_coefficients(cf, co);
    size_t n = c.sh.numel;
    float *a = malloc(n * 4), *b = malloc(n * 4), *none = malloc(n * 4);
    cvx_sample_result r;
    assert_int_equal(run(&c, CVX_CACHE_NONE, 0, NULL, NULL, none, &r), 0);
    /* the published set at the offered thresholds, and p(x) = x (a pattern that varies with e) */
    const double lin[5] = {0, 0, 0, 1, 0};
    const double *sets[6] = {co, co, co, lin, lin, lin}, thr[6] = {0.1, 0.2, 0.3, 1.0, 1.5, 2.5};
    for (int k = 0; k < 6; k++) {
        int dec[MAXS], decr[MAXS];
        replay(eo, E, N, sets[k], thr[k], dec);              /* the rule on our e */
        int ties = replay(er, E, N, sets[k], thr[k], decr);  /* the rule on the reference e */
        for (int i = 0; i < N; i++)
            if (dec[i] != decr[i] && !ties) fail_msg("%s thr %g step %d: decision %d vs reference %d", dir, thr[k], i, dec[i], decr[i]);
        assert_int_equal(run(&c, CVX_CACHE_TEACACHE, thr[k], sets[k] == co ? NULL : sets[k], NULL, a, &r), 0);
        ref_sample(&c, CVX_CACHE_TEACACHE, dec, 1, 0, b);
        assert_memory_equal(a, b, n * 4);
        assert_int_equal(r.cache_steps_computed, count(dec, N, 1));
        assert_int_equal(r.cache_steps_skipped, count(dec, N, 0));
        printf("  %s %d steps teacache %s %.1f: %lld computed, %lld skipped (== replay, ties %d); final latents rel "
               "L2 vs uncached %.3g\n", dir, N, sets[k] == co ? "published" : "p(x)=x", thr[k],
               (long long)r.cache_steps_computed, (long long)r.cache_steps_skipped, ties, cvx_rel_l2(a, none, n));
    }
    free(a); free(b); free(none); free(eo); free(er);
    cvx_scheduler_free(&s);
    cl_close(&c);
}
static void test_teacache_rule_real(void **state) {
    (void)state;
    teacache_real("e2e_2b", 4);
    teacache_real("e2e_2b", 20);
    teacache_real("e2e_5b", 4);
    teacache_real("e2e_5b", 20);
}

/* FBCache: sampler == reference loop with its own rule, at 0.05 / 0.1 / 0.2; forced pattern too */
static void fbcache_case(const char *dir, int N) {
    cl_case c;
    cl_open(&c, dir, N);
    size_t n = c.sh.numel;
    float *a = malloc(n * 4), *b = malloc(n * 4), *none = malloc(n * 4);
    cvx_sample_result r;
    assert_int_equal(run(&c, CVX_CACHE_NONE, 0, NULL, NULL, none, &r), 0);
    const double thr[3] = {0.05, 0.1, 0.2};
    for (int k = 0; k < 3; k++) {
        int dec[MAXS];
        assert_int_equal(run(&c, CVX_CACHE_FBCACHE, thr[k], NULL, NULL, a, &r), 0);
        ref_sample(&c, CVX_CACHE_FBCACHE, dec, 0, thr[k], b);
        assert_memory_equal(a, b, n * 4);
        assert_int_equal(r.cache_steps_computed, count(dec, N, 1));
        assert_int_equal(r.cache_steps_skipped, count(dec, N, 0));
        assert_int_equal(r.cache_blocks_skipped, count(dec, N, 0));   /* 2 blocks: block 1 skipped */
        printf("  %s %d steps fbcache %.2f: %lld computed, %lld skipped (== reference rule); final latents rel L2 vs "
               "uncached %.3g\n", dir, N, thr[k], (long long)r.cache_steps_computed, (long long)r.cache_steps_skipped,
               cvx_rel_l2(a, none, n));
    }
    free(a); free(b); free(none);
    cl_close(&c);
}
static void test_fbcache_rule(void **state) {
    (void)state;
    fbcache_case("e2e_2b", 4);
    fbcache_case("e2e_2b", 20);
    fbcache_case("e2e_5b", 4);
    fbcache_case("e2e_5b", 20);
}

/* kill + resume, stopped right before a skipped step */
static void resume_case(const char *dir, int kind, double thr, const double *coeffs) {
    const int N = 12;
    cl_case c;
    cl_open(&c, dir, N);
    size_t n = c.sh.numel;
    float *full = malloc(n * 4), *part = malloc(n * 4), *res = malloc(n * 4);
    int dec[MAXS];
    cvx_sample_result r;
    assert_int_equal(run(&c, kind, thr, coeffs, NULL, full, &r), 0);
    if (kind == CVX_CACHE_FBCACHE) ref_sample(&c, kind, dec, 0, thr, part);
    else for (int i = 0; i < N; i++) dec[i] = i == N - 1 || i % 2 == 0;   /* p ≡ 1 at 1.5 */
    int stop = 0;
    for (int i = 2; i < N && !stop; i++)
        if (!dec[i]) stop = i;   /* i steps done; step i (0-based) is a skipped one */
    if (!stop) fail_msg("%s %s %g: no skipped step to resume into", dir, cvx_cache_kind_name(kind), thr);
    char tmpl[] = "/tmp/cvx_cache_resume_XXXXXX", path[256];
    assert_non_null(mkdtemp(tmpl));
    snprintf(path, sizeof path, "%s/stage2_checkpoint.safetensors", tmpl);
    cvx_fingerprint fp;
    memset(&fp, 0, sizeof fp);
    cvx_fingerprint_set(&fp, "cache", "%s", cvx_cache_kind_name(kind));
    cvx_fingerprint_set(&fp, "cache_threshold", "%.17g", thr);
    cvx_checkpointing ck = {path, 1, 0, stop, &fp};
    assert_int_equal(run(&c, kind, thr, coeffs, &ck, part, &r), 0);
    assert_int_equal(r.steps_done, stop);
    ck.resume = 1, ck.stop_after_steps = 0;
    assert_int_equal(run(&c, kind, thr, coeffs, &ck, res, &r), 0);
    assert_int_equal(r.resumed_from, stop);
    assert_memory_equal(res, full, n * 4);
    assert_int_equal(r.cache_steps_computed + r.cache_steps_skipped, N);
    assert_int_equal(r.cache_steps_skipped, count(dec, N, 0));
    printf("  %s %s %g: stop after %d (next step skipped) + resume == uninterrupted, bit for bit; counts %lld/%lld\n",
           dir, cvx_cache_kind_name(kind), thr, stop, (long long)r.cache_steps_computed,
           (long long)r.cache_steps_skipped);
    /* another threshold is refused by the fingerprint */
    ck.resume = 0, ck.stop_after_steps = stop;
    assert_int_equal(run(&c, kind, thr, coeffs, &ck, part, &r), 0);
    cvx_fingerprint_set(&fp, "cache_threshold", "%.17g", thr * 2);
    ck.resume = 1, ck.stop_after_steps = 0;
    assert_int_equal(run(&c, kind, thr * 2, coeffs, &ck, res, &r), -1);
    assert_non_null(strstr(cvx_last_error(), "cache_threshold="));
    /* a checkpoint without cache state is refused when resuming with caching */
    memset(&fp, 0, sizeof fp);
    ck.resume = 0, ck.stop_after_steps = stop;
    assert_int_equal(run(&c, CVX_CACHE_NONE, 0, NULL, &ck, part, &r), 0);
    ck.resume = 1, ck.stop_after_steps = 0;
    assert_int_equal(run(&c, kind, thr, coeffs, &ck, res, &r), -1);
    assert_non_null(strstr(cvx_last_error(), "without --cache"));
    unlink(path);
    rmdir(tmpl);
    free(full); free(part); free(res);
    cl_close(&c);
}
static void test_resume(void **state) {
    (void)state;
    const double one[5] = {0, 0, 0, 0, 1};
    resume_case("e2e_2b", CVX_CACHE_TEACACHE, 1.5, one);
    resume_case("e2e_5b", CVX_CACHE_TEACACHE, 1.5, one);
    resume_case("e2e_2b", CVX_CACHE_FBCACHE, 0.2, NULL);
    resume_case("e2e_5b", CVX_CACHE_FBCACHE, 0.5, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_units),        cmocka_unit_test(test_off_identical),
        cmocka_unit_test(test_e_independent_of_inputs), cmocka_unit_test(test_fbcache_row_sums),
        cmocka_unit_test(test_teacache_known_pattern), cmocka_unit_test(test_teacache_rule_real),
        cmocka_unit_test(test_fbcache_rule),      cmocka_unit_test(test_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
