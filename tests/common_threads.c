/* The same bits at any thread count (issue 22): every op family and whole tiny pipelines give
 * byte-identical outputs at 1, 2, 3 and 8 threads, in f32 and in bf16. Each run gets a fresh
 * compute context of that many threads (its OpenMP pool, its oneDNN primitives), as a run on
 * another machine would.
 *
 * Why it holds (docs/performance.md, "The same bits at any thread count"): every parallel loop
 * splits independent outputs (rows, heads × query blocks, channels, tiles) and each output is
 * summed by one thread in a fixed order; the fixed-size chunks (SiLU's 4096, the norms' rows, the
 * attention's 256/512-row query blocks and key tiles) do not depend on the thread count; oneDNN's
 * matmul splits M and N, never K (checked here on the models' shapes, also at 24 threads, as a
 * large machine would run them). bench/bench_threads does the same at the real 2b size. */
#include "testutil.h"

#include <math.h>

#include "conv.h"
#include "gemm.h"
#include "gemm_fast.h"
#include "pipeline/cogvideox.h"

static const int THREADS[] = {1, 2, 3, 8};
enum { NT = sizeof THREADS / sizeof THREADS[0] };

static uint64_t rng = 88172645463325252ull;
static float urand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}
static float *rand_buf(size_t n, float amp) {
    float *x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = amp * urand();
    return x;
}

/* The op under test: writes n floats to out on ctx (ctx's thread count is the pool's). */
typedef void (*op_fn)(cvx_ctx *ctx, const void *arg, float *out);

/* Run op at every thread count in `counts` (and precision p); all outputs must equal the first's. */
static void same_bits_at(const char *what, op_fn op, const void *arg, size_t n, cvx_precision p, const int *counts,
                         int nc) {
    float *ref = NULL;
    for (int t = 0; t < nc; t++) {
        cvx_ctx *ctx = cvx_ctx_new(counts[t]);
        ASSERT_OK(cvx_ctx_set_precision(ctx, p));
        assert_int_equal(cvx_threads(), counts[t]);
        float *out = malloc(sizeof(float) * n + 1);
        memset(out, 0x5a, sizeof(float) * n);   /* every element must be written */
        op(ctx, arg, out);
        cvx_ctx_free(ctx);
        if (!ref) {
            ref = out;
            continue;
        }
        for (size_t i = 0; i < n; i++)
            if (memcmp(&out[i], &ref[i], sizeof(float)))
                fail_msg("%s (%s): %d threads differ from %d at element %zu of %zu: %.9g vs %.9g", what,
                         cvx_precision_name(p), counts[t], counts[0], i, n, (double)out[i], (double)ref[i]);
        free(out);
    }
    free(ref);
    print_message("  %-52s %-4s same bits at %d thread counts\n", what, cvx_precision_name(p), nc);
}
static void same_bits(const char *what, op_fn op, const void *arg, size_t n, cvx_precision p) {
    same_bits_at(what, op, arg, n, p, THREADS, NT);
}
static void same_bits_both(const char *what, op_fn op, const void *arg, size_t n) {
    same_bits(what, op, arg, n, CVX_PRECISION_F32);
    same_bits(what, op, arg, n, CVX_PRECISION_BF16);
}

/* ------------------------------------------------------------------ linears and GEMMs */

typedef struct {
    int M, N, K;
    const float *x;
    cvx_tensor W, b;
} linear_arg;

static void op_linear(cvx_ctx *ctx, const void *a, float *y) {
    const linear_arg *l = a;
    cvx_linear(ctx, l->x, l->M, l->K, &l->W, &l->b, y);
}

/* nn.Linear at the models' K with their M (N cut down to keep this quick; a GEMM's threads split
 * rows and columns, so the fewer outputs per thread, the likelier a library splits K instead):
 * time embeddings and modulations (M = 1, 2), text projections (226, 512 rows, K = 4096, 10240),
 * attention projections, feed-forwards (K = 1536, 1920, 8960), proj_out (N = 64). */
static void test_linear(void **state) {
    (void)state;
    static const int shapes[][3] = {{1, 11520, 512}, {2, 9216, 1536}, {1, 512, 1920}, {226, 640, 4096},
                                    {512, 384, 4096}, {226, 256, 10240}, {1216, 384, 1920}, {300, 1792, 1536},
                                    {300, 384, 8960}, {1000, 64, 1920}};
    static const int wide[] = {1, 2, 3, 8, 24};   /* 24: a large machine's pool */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        linear_arg l = {M, N, K, rand_buf((size_t)M * K, 1.0f), {0}, {0}};
        float *w = rand_buf((size_t)N * K, 1.0f / sqrtf((float)K)), *b = rand_buf((size_t)N, 0.1f);
        uint16_t *wb = malloc(2 * (size_t)N * K);
        cvx_f32_to_bf16_n(w, wb, (size_t)N * K);
        l.W.ndim = 2, l.W.shape[0] = N, l.W.shape[1] = K, l.W.numel = (int64_t)N * K, l.W.file = "test";
        l.b.ndim = 1, l.b.shape[0] = N, l.b.numel = N, l.b.dtype = CVX_F32, l.b.data = b, l.b.file = "test";
        char what[96];
        for (int wd = 0; wd < 2; wd++) {
            l.W.dtype = wd ? CVX_BF16 : CVX_F32;
            l.W.data = wd ? (void *)wb : (void *)w;
            snprintf(what, sizeof what, "linear %dx%dx%d, %s weights", M, N, K, wd ? "bf16" : "f32");
            same_bits_at(what, op_linear, &l, (size_t)M * N, CVX_PRECISION_F32, wide, 5);
            same_bits_at(what, op_linear, &l, (size_t)M * N, CVX_PRECISION_BF16, wide, 5);
        }
        free((void *)l.x), free(w), free(b), free(wb);
    }
}

typedef struct {
    int ta, tb, M, N, K;
    const float *A, *B;
} gemm_arg;

static void op_gemm(cvx_ctx *ctx, const void *a, float *C) {
    const gemm_arg *g = a;
    cvx_gemm(ctx, g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A, g->ta ? g->M : g->K, g->B, g->tb ? g->K : g->N, 0.0f, C,
             g->N);
}

/* cvx_gemm in the four layouts (the convolutions' and the tiled attention's products). */
static void test_gemm_layouts(void **state) {
    (void)state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm_arg g = {ta, tb, 333, 257, 1100, rand_buf(333 * 1100, 1.0f), rand_buf(257 * 1100, 0.03f)};
            char what[64];
            snprintf(what, sizeof what, "gemm 333x257x1100 trans %d%d", ta, tb);
            same_bits_both(what, op_gemm, &g, 333 * 257);
            free((void *)g.A), free((void *)g.B);
        }
}

/* ------------------------------------------------------------------ attention */

typedef struct {
    int Sq, Skv, heads, hd, ld;
    const float *q, *k, *v, *bias;
} attn_arg;

static void op_attention(cvx_ctx *ctx, const void *a, float *out) {
    const attn_arg *t = a;
    cvx_attention_ctx(ctx, t->q, t->ld, t->k, t->v, t->ld, out, t->heads * t->hd, t->Sq, t->Skv, t->heads, t->hd,
                      1.0f / sqrtf((float)t->hd), t->bias);
}

/* The transformers' int8 attention (cvx_attention_int8, --attention int8). */
static void op_attention_int8(cvx_ctx *ctx, const void *a, float *out) {
    const attn_arg *t = a;
    ASSERT_OK(cvx_ctx_set_attention(ctx, CVX_ATTENTION_INT8));
    cvx_attention_transformer(ctx, t->q, t->ld, t->k, t->v, t->ld, out, t->heads * t->hd, t->Sq, t->Skv, t->heads,
                              t->hd, 1.0f / sqrtf((float)t->hd), t->bias);
}

/* Head dims of the models (64: CogVideoX, 128: Wan, 16: the tiny models, 40: the tiled f32 and
 * portable bf16 paths), several query blocks and key tiles per head, self and cross attention,
 * T5's additive bias; the same in int8 (its K means and q / k quantisation blocks per head). */
static void test_attention(void **state) {
    (void)state;
    static const int cases[][5] = {/* Sq, Skv, heads, hd, bias */
                                   {700, 700, 3, 64, 0}, {600, 1100, 2, 128, 0}, {530, 530, 3, 16, 0},
                                   {300, 300, 2, 40, 0}, {226, 226, 4, 64, 1}, {520, 77, 2, 128, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        attn_arg t = {cases[c][0], cases[c][1], cases[c][2], cases[c][3], cases[c][2] * cases[c][3] + 8, 0, 0, 0, 0};
        size_t nq = (size_t)t.Sq * t.ld, nk = (size_t)t.Skv * t.ld;
        t.q = rand_buf(nq, 2.0f), t.k = rand_buf(nk, 2.0f), t.v = rand_buf(nk, 1.0f);
        t.bias = cases[c][4] ? rand_buf((size_t)t.heads * t.Sq * t.Skv, 1.0f) : NULL;
        char what[96];
        snprintf(what, sizeof what, "attention Sq %d Skv %d heads %d hd %d%s", t.Sq, t.Skv, t.heads, t.hd,
                 t.bias ? " bias" : "");
        same_bits_both(what, op_attention, &t, (size_t)t.Sq * t.heads * t.hd);
        snprintf(what, sizeof what, "int8 attention Sq %d Skv %d heads %d hd %d%s", t.Sq, t.Skv, t.heads, t.hd,
                 t.bias ? " bias" : "");
        same_bits(what, op_attention_int8, &t, (size_t)t.Sq * t.heads * t.hd, CVX_PRECISION_F32);
        free((void *)t.q), free((void *)t.k), free((void *)t.v), free((void *)t.bias);
    }
}

/* ------------------------------------------------------------------ norms and element-wise ops */

typedef struct {
    int rows, dim;
    const float *x, *w, *b;
} rows_arg;

static void op_layernorm(cvx_ctx *ctx, const void *a, float *y) {
    const rows_arg *r = a;
    cvx_layernorm(y, r->x, r->rows, r->dim, r->w, r->b, 1e-6f);
}
static void op_rmsnorm(cvx_ctx *ctx, const void *a, float *y) {
    const rows_arg *r = a;
    cvx_rmsnorm(y, r->x, r->rows, r->dim, r->w, 1e-6f);
}
static void op_groupnorm(cvx_ctx *ctx, const void *a, float *y) {   /* [32 channels, rows·dim/32] */
    const rows_arg *r = a;
    cvx_groupnorm(y, r->x, 32, (size_t)r->rows * r->dim / 32, 8, r->w, r->b, 1e-6f);
}
static void op_softmax(cvx_ctx *ctx, const void *a, float *y) {
    const rows_arg *r = a;
    memcpy(y, r->x, sizeof(float) * (size_t)r->rows * r->dim);
    cvx_softmax_rows(y, r->rows, r->dim);
}
static void op_silu(cvx_ctx *ctx, const void *a, float *y) {
    const rows_arg *r = a;
    memcpy(y, r->x, sizeof(float) * (size_t)r->rows * r->dim);
    cvx_silu(y, (size_t)r->rows * r->dim);
}
static void op_gelu(cvx_ctx *ctx, const void *a, float *y) {
    const rows_arg *r = a;
    memcpy(y, r->x, sizeof(float) * (size_t)r->rows * r->dim);
    cvx_gelu_tanh(y, (size_t)r->rows * r->dim);
}

static void test_norms_elementwise(void **state) {
    (void)state;
    rows_arg r = {1001, 96, rand_buf(1001 * 96, 3.0f), rand_buf(96, 1.0f), rand_buf(96, 1.0f)};
    size_t n = 1001 * 96;
    same_bits("layernorm 1001x96", op_layernorm, &r, n, CVX_PRECISION_F32);
    same_bits("rmsnorm 1001x96", op_rmsnorm, &r, n, CVX_PRECISION_F32);
    same_bits("groupnorm 32 channels x 3003, 8 groups", op_groupnorm, &r, n, CVX_PRECISION_F32);
    same_bits("softmax rows 1001x96", op_softmax, &r, n, CVX_PRECISION_F32);
    same_bits("silu 96096", op_silu, &r, n, CVX_PRECISION_F32);
    same_bits("gelu (tanh) 96096", op_gelu, &r, n, CVX_PRECISION_F32);
    free((void *)r.x), free((void *)r.w), free((void *)r.b);
}

/* ------------------------------------------------------------------ convolutions */

typedef struct {
    int Cin, Cout, kt, Tp, Hp, Wp;
    const float *xp, *bias;
    cvx_tensor w;
    cvx_conv_algo algo;
} conv_arg;

static void op_conv(cvx_ctx *ctx, const void *a, float *y) {
    const conv_arg *c = a;
    int taps = c->kt * 9;
    float *pk = malloc(sizeof(float) * (size_t)36 * c->Cout * c->Cin * c->kt);
    ctx->winograd_budget = 1 << 14;   /* several blocks of tile rows */
    if (c->algo == CVX_CONV_DIRECT) {
        cvx_conv_pack_weights(ctx, &c->w, c->Cout, c->Cin, taps, pk);
        cvx_conv3d_padded(ctx, c->xp, c->Cin, c->Tp, c->Hp, c->Wp, pk, c->bias, c->Cout, c->kt, 3, 3, y);
    } else if (c->algo == CVX_CONV_WINOGRAD2) {
        cvx_conv_winograd_weights(ctx, &c->w, c->Cout, c->Cin, c->kt, pk);
        cvx_conv3d_winograd(ctx, c->xp, c->Cin, c->Tp, c->Hp, c->Wp, pk, c->bias, c->Cout, c->kt, y);
    } else {
        cvx_conv_winograd4_weights(ctx, &c->w, c->Cout, c->Cin, c->kt, pk);
        cvx_conv3d_winograd4(ctx, c->xp, c->Cin, c->Tp, c->Hp, c->Wp, pk, c->bias, c->Cout, c->kt, y);
    }
    free(pk);
}

/* kt×3×3 convolutions (the VAEs'): direct shifted GEMMs, Winograd F(2×2) and F(4×4). */
static void test_conv(void **state) {
    (void)state;
    conv_arg c = {12, 20, 3, 5, 30, 38, NULL, NULL, {0}, CVX_CONV_DIRECT};
    size_t nx = (size_t)c.Cin * c.Tp * c.Hp * c.Wp, nw = (size_t)c.Cout * c.Cin * c.kt * 9;
    c.xp = rand_buf(nx, 1.0f), c.bias = rand_buf((size_t)c.Cout, 0.1f);
    float *w = rand_buf(nw, 0.1f);
    c.w.dtype = CVX_F32, c.w.ndim = 5, c.w.shape[0] = c.Cout, c.w.shape[1] = c.Cin, c.w.shape[2] = c.kt;
    c.w.shape[3] = c.w.shape[4] = 3, c.w.numel = (int64_t)nw, c.w.data = w, c.w.file = "test";
    size_t ny = (size_t)c.Cout * (c.Tp - c.kt + 1) * (c.Hp - 2) * (c.Wp - 2);
    static const cvx_conv_algo algos[] = {CVX_CONV_DIRECT, CVX_CONV_WINOGRAD2, CVX_CONV_WINOGRAD4};
    static const char *names[] = {"conv 3x3x3 direct", "conv 3x3x3 Winograd F(2x2)", "conv 3x3x3 Winograd F(4x4)"};
    for (int a = 0; a < 3; a++) {
        c.algo = algos[a];
        same_bits_both(names[a], op_conv, &c, ny);
    }
    free((void *)c.xp), free((void *)c.bias), free(w);
}

/* ------------------------------------------------------------------ whole tiny pipelines */

typedef struct {
    const char *model;
} pipe_arg;

/* Text encoder → sampler (3 steps, CFG) → VAE decode: the embeddings, latents and frames of one
 * run, concatenated in out (sizes fixed by the model and the video size below). */
static size_t pipe_run(const pipe_arg *a, int threads, cvx_precision p, float *out) {
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = a->model, .threads = threads, .precision = p});
    ASSERT_NONNULL(m);
    cvx_encode_params ep = {.prompt = "A panda plays a guitar.", .negative_prompt = "blurry"};
    cvx_sample_params sp = {.frames = 9, .height = 32, .width = 48, .num_inference_steps = 3, .guidance_scale = 6,
                            .seed = 42};
    cvx_decode_params dp = {.tiling = CVX_TILING_AUTO};
    cvx_embeddings emb;
    cvx_latents lat;
    cvx_frames fr;
    ASSERT_OK(cvx_encode(m, &ep, NULL, NULL, &emb));
    ASSERT_OK(cvx_sample(m, &sp, &emb, NULL, NULL, &lat));
    ASSERT_OK(cvx_decode(m, &dp, lat.data, 1, lat.C, lat.T, lat.h, lat.w, NULL, NULL, NULL, &fr));
    size_t ne = (size_t)emb.L * emb.D, nl = (size_t)lat.C * lat.T * lat.h * lat.w, nf = (size_t)3 * fr.T * fr.H * fr.W;
    if (out) {
        memcpy(out, emb.prompt, sizeof(float) * ne);
        memcpy(out + ne, emb.negative, sizeof(float) * ne);
        memcpy(out + 2 * ne, lat.data, sizeof(float) * nl);
        memcpy(out + 2 * ne + nl, fr.data[0], sizeof(float) * nf);
    }
    cvx_embeddings_free(&emb), cvx_latents_free(&lat), cvx_frames_free(&fr);
    cvx_model_close(m);
    return 2 * ne + nl + nf;
}

static void op_pipeline(cvx_ctx *ctx, const void *a, float *out) {
    pipe_run(a, ctx->threads, ctx->precision, out);   /* the model opens its own context of ctx's size */
}

static void pipeline_case(const char *model) {
    pipe_arg a = {model};
    cvx_set_verbosity(0);
    size_t n = pipe_run(&a, 1, CVX_PRECISION_F32, NULL);
    char what[128];
    snprintf(what, sizeof what, "%s: embeddings, latents, frames", strrchr(model, '/') + 1);
    same_bits_both(what, op_pipeline, &a, n);
    cvx_set_verbosity(1);
}

static void test_pipeline_cogvideox(void **state) {
    (void)state;
    pipeline_case("models/cogvideox-tiny-random");
}

static void test_pipeline_wan(void **state) {
    (void)state;
    pipeline_case("models/wan2.1-tiny-random");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear),           cmocka_unit_test(test_gemm_layouts),
        cmocka_unit_test(test_attention),        cmocka_unit_test(test_norms_elementwise),
        cmocka_unit_test(test_conv),             cmocka_unit_test(test_pipeline_cogvideox),
        cmocka_unit_test(test_pipeline_wan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
