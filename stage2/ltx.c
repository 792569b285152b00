/* LTXVideoTransformer3DModel (diffusers 0.35.2 transformer_ltx.py): config, weights, rotary
 * tables and the forward, f32 compute over mmapped weights.
 *
 * The residual stream is h[B, S, D] over the video tokens; the caption enters through
 * cross-attention. Each block runs one batch element at a time (self-attention needs q, k, v of
 * all S tokens of the element); the row-wise parts run in pieces of `chunk` rows. */
#include "ltx.h"

#include "config.h"
#include "dist.h"
#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "lora.h"
#include "ops.h"
#include "safetensors.h"
#include "transformer_load.h"
#include "validate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One LTXAttention: to_q, to_k, to_v, to_out.0 (+ biases) and the RMSNorms over all heads. */
typedef cvx_attn_weights ltx_attn_weights;

typedef struct {
    ltx_attn_weights attn1, attn2;
    const cvx_tensor *ff1_w, *ff1_b, *ff2_w, *ff2_b;        /* ff.net.0.proj [4D, D], ff.net.2 [D, 4D] */
    float *sst;                                             /* scale_shift_table [6, D] */
} ltx_block_weights;

struct ltx_transformer {
    ltx_config c;
    cvx_weights *w;
    const cvx_tensor *proj_in_w, *proj_in_b;
    const cvx_tensor *t1_w, *t1_b, *t2_w, *t2_b, *tlin_w, *tlin_b;   /* time_embed */
    const cvx_tensor *cap1_w, *cap1_b, *cap2_w, *cap2_b;             /* caption_projection */
    ltx_block_weights *blocks;
    float *sst_out;                                                  /* [2, D] */
    const cvx_tensor *proj_out_w, *proj_out_b;
    int chunk_rows;
    ltx_probe_fn probe;
    void *probe_user;
    cvx_ctx *ctx;
    int owns_ctx;
    cvx_dist *sp;                   /* Ulysses sequence parallelism (NULL: off) */
    double comm_s, comm_bytes;      /* time in its exchanges, bytes this rank sent */
};

#define LTX_ROPE_THETA 10000.0
#define LTX_BASE_FRAMES 20.0f
#define LTX_BASE_HW 2048.0f

/* ------------------------------------------------------------------ config */

int ltx_config_load(const char *path, ltx_config *c) {
    cvx_config j;
    if (cvx_config_load(&j, path)) return -1;
    int64_t v;
    const char *s;
    int rc = -1, b;
    memset(c, 0, sizeof *c);
    if (cvx_cfg_str_or(&j, "_class_name", "LTXVideoTransformer3DModel", &s)) goto out;
    if (strcmp(s, "LTXVideoTransformer3DModel")) {
        cvx_error("%s: '_class_name' is \"%s\", expected \"LTXVideoTransformer3DModel\"", path, s);
        goto out;
    }
#define INT(key, def, lo, hi, dst) do { if (cvx_cfg_int_range_or(&j, key, def, lo, hi, &v)) goto out; dst = (int)v; } while (0)
    INT("in_channels", 128, 1, 65536, c->in_channels);
    INT("out_channels", c->in_channels, 1, 65536, c->out_channels);
    INT("num_attention_heads", 32, 1, 1024, c->num_attention_heads);
    INT("attention_head_dim", 64, 2, 4096, c->attention_head_dim);
    INT("num_layers", 28, 1, 1024, c->num_layers);
    INT("cross_attention_dim", 2048, 1, 1 << 20, c->cross_attention_dim);
    INT("caption_channels", 4096, 1, 1 << 20, c->caption_channels);
    INT("patch_size", 1, 1, 1, v);
    INT("patch_size_t", 1, 1, 1, v);
#undef INT
    if (cvx_cfg_num_range_or(&j, "norm_eps", 1e-6, 0, 1, 1, &c->norm_eps)) goto out;
    static const struct { const char *key, *want; } strs[] = {
        {"activation_fn", "gelu-approximate"}, {"qk_norm", "rms_norm_across_heads"}};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        if (cvx_cfg_str_or(&j, strs[i].key, strs[i].want, &s)) goto out;
        if (strcmp(s, strs[i].want)) {
            cvx_error("%s: key '%s' is \"%s\", only \"%s\" (every LTX-Video checkpoint) is supported", path,
                      strs[i].key, s, strs[i].want);
            goto out;
        }
    }
    static const struct { const char *key; int want; } bools[] = {
        {"norm_elementwise_affine", 0}, {"attention_bias", 1}, {"attention_out_bias", 1}};
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        if (cvx_cfg_bool_or(&j, bools[i].key, bools[i].want, &b)) goto out;
        if (b != bools[i].want) {
            cvx_error("%s: key '%s' is %s, only %s (every LTX-Video checkpoint) is supported", path, bools[i].key,
                      b ? "true" : "false", bools[i].want ? "true" : "false");
            goto out;
        }
    }
    int D = c->num_attention_heads * c->attention_head_dim;
    if (c->cross_attention_dim != D) {
        cvx_error("%s: key 'cross_attention_dim' = %d must equal num_attention_heads·attention_head_dim = %d (attn2 "
                  "reads the caption projected to the inner dim)", path, c->cross_attention_dim, D);
        goto out;
    }
    if (D % 2) {
        cvx_error("%s: the inner dim num_attention_heads·attention_head_dim = %d must be even (rotary pairs)", path, D);
        goto out;
    }
    rc = 0;
out:
    cvx_config_free(&j);
    return rc;
}

/* ------------------------------------------------------------------ load */

#define GET(dst, name, ...) do { if (!((dst) = cvx_weights_get(m->w, name, CVX_SHAPE(__VA_ARGS__)))) goto fail; } while (0)
#define GETF(dst, name, ...) do { const cvx_tensor *t_; GET(t_, name, __VA_ARGS__); (dst) = cvx_tensor_f32_dup(t_); } while (0)

static int ltx_load_block(ltx_transformer *m, int i, ltx_block_weights *b) {
    const int64_t D = (int64_t)m->c.num_attention_heads * m->c.attention_head_dim;
    char name[256];
#define N_(suffix) (snprintf(name, sizeof name, "transformer_blocks.%d.%s", i, suffix), name)
    if (cvx_attn_weights_load(cvx_weights_getter_plain, m->w, N_("attn1"), D, &b->attn1) ||
        cvx_attn_weights_load(cvx_weights_getter_plain, m->w, N_("attn2"), D, &b->attn2))
        return -1;
    GET(b->ff1_w, N_("ff.net.0.proj.weight"), 4 * D, D);
    GET(b->ff1_b, N_("ff.net.0.proj.bias"), 4 * D);
    GET(b->ff2_w, N_("ff.net.2.weight"), D, 4 * D);
    GET(b->ff2_b, N_("ff.net.2.bias"), D);
    GETF(b->sst, N_("scale_shift_table"), 6, D);
#undef N_
    return 0;
fail:
    return -1;
}

ltx_transformer *ltx_load_file(const char *config_json, const char *weights, cvx_ctx *ctx) {
    ltx_transformer *m = cvx_calloc(1, sizeof *m);
    ltx_config *c = &m->c;
    if (ltx_config_load(config_json, c) || !(m->w = cvx_weights_open_family(weights, "ltxv", "LTX-Video"))) {
        free(m);
        return NULL;
    }
    m->ctx = cvx_ctx_or_new(ctx, &m->owns_ctx);
    if (ltx_original_layout(m->w)) goto fail;
    const int64_t D = (int64_t)c->num_attention_heads * c->attention_head_dim, Cap = c->caption_channels;
    GET(m->proj_in_w, "proj_in.weight", D, c->in_channels);
    GET(m->proj_in_b, "proj_in.bias", D);
    GET(m->t1_w, "time_embed.emb.timestep_embedder.linear_1.weight", D, 256);
    GET(m->t1_b, "time_embed.emb.timestep_embedder.linear_1.bias", D);
    GET(m->t2_w, "time_embed.emb.timestep_embedder.linear_2.weight", D, D);
    GET(m->t2_b, "time_embed.emb.timestep_embedder.linear_2.bias", D);
    GET(m->tlin_w, "time_embed.linear.weight", 6 * D, D);
    GET(m->tlin_b, "time_embed.linear.bias", 6 * D);
    GET(m->cap1_w, "caption_projection.linear_1.weight", D, Cap);
    GET(m->cap1_b, "caption_projection.linear_1.bias", D);
    GET(m->cap2_w, "caption_projection.linear_2.weight", D, D);
    GET(m->cap2_b, "caption_projection.linear_2.bias", D);
    m->blocks = cvx_calloc((size_t)c->num_layers, sizeof *m->blocks);
    for (int i = 0; i < c->num_layers; i++)
        if (ltx_load_block(m, i, &m->blocks[i])) goto fail;
    GETF(m->sst_out, "scale_shift_table", 2, D);
    GET(m->proj_out_w, "proj_out.weight", c->out_channels, D);
    GET(m->proj_out_b, "proj_out.bias", c->out_channels);
    return m;
fail:
    ltx_free(m);
    return NULL;
}
#undef GET
#undef GETF

ltx_transformer *ltx_load(const char *dir, cvx_ctx *ctx) {
    char path[4096];
    return cvx_dir_config_json(path, sizeof path, dir) ? NULL : ltx_load_file(path, dir, ctx);
}

/* ------------------------------------------------------------------ LoRA targets */

static void lora_add(cvx_lora_target *t, int *n, const cvx_tensor *w, const cvx_tensor *b, const char *name) {
    snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
    t[*n].alias[0] = 0;   /* diffusers' LTX converter only strips "diffusion_model.": the names are the same */
    t[*n].prefix_only = 1;
    t[*n].w = w, t[*n].b = b;
    (*n)++;
}

int ltx_lora_targets(const ltx_transformer *m, cvx_lora_target **out) {
    const ltx_config *c = &m->c;
    int n = 0, cap = 8 + 10 * c->num_layers;
    cvx_lora_target *t = cvx_calloc((size_t)cap, sizeof *t);
    char name[CVX_LORA_NAME];
    static const char *const proj[4] = {"to_q", "to_k", "to_v", "to_out.0"};
    for (int i = 0; i < c->num_layers; i++) {
        const ltx_block_weights *b = &m->blocks[i];
        const ltx_attn_weights *at[2] = {&b->attn1, &b->attn2};
        for (int a = 0; a < 2; a++) {
            const cvx_tensor *w[4] = {at[a]->q_w, at[a]->k_w, at[a]->v_w, at[a]->o_w};
            const cvx_tensor *bb[4] = {at[a]->q_b, at[a]->k_b, at[a]->v_b, at[a]->o_b};
            for (int k = 0; k < 4; k++) {
                snprintf(name, sizeof name, "transformer_blocks.%d.attn%d.%s", i, a + 1, proj[k]);
                lora_add(t, &n, w[k], bb[k], name);
            }
        }
        snprintf(name, sizeof name, "transformer_blocks.%d.ff.net.0.proj", i);
        lora_add(t, &n, b->ff1_w, b->ff1_b, name);
        snprintf(name, sizeof name, "transformer_blocks.%d.ff.net.2", i);
        lora_add(t, &n, b->ff2_w, b->ff2_b, name);
    }
    lora_add(t, &n, m->proj_in_w, m->proj_in_b, "proj_in");
    lora_add(t, &n, m->t1_w, m->t1_b, "time_embed.emb.timestep_embedder.linear_1");
    lora_add(t, &n, m->t2_w, m->t2_b, "time_embed.emb.timestep_embedder.linear_2");
    lora_add(t, &n, m->tlin_w, m->tlin_b, "time_embed.linear");
    lora_add(t, &n, m->cap1_w, m->cap1_b, "caption_projection.linear_1");
    lora_add(t, &n, m->cap2_w, m->cap2_b, "caption_projection.linear_2");
    lora_add(t, &n, m->proj_out_w, m->proj_out_b, "proj_out");
    CVX_CHECK(n <= cap);
    *out = t;
    return n;
}

void ltx_free(ltx_transformer *m) {
    if (!m) return;
    if (m->blocks)
        for (int i = 0; i < m->c.num_layers; i++) {
            ltx_block_weights *b = &m->blocks[i];
            cvx_attn_weights_free(&b->attn1);
            cvx_attn_weights_free(&b->attn2);
            free(b->sst);
        }
    free(m->blocks);
    free(m->sst_out);
    cvx_weights_close(m->w);
    if (m->owns_ctx) cvx_ctx_free(m->ctx);
    free(m);
}

const ltx_config *ltx_get_config(const ltx_transformer *m) { return &m->c; }
cvx_ctx *ltx_ctx(const ltx_transformer *m) { return m->ctx; }
int ltx_set_sp(ltx_transformer *m, struct cvx_dist *sp) {
    const int p = sp ? cvx_dist_size(sp) : 1;
    if (p > 1 && m->c.num_attention_heads % p)
        return cvx_error("--sp %d: must divide the %d attention heads of this model (sequence parallelism splits the "
                         "heads between the ranks)", p, m->c.num_attention_heads);
    m->sp = p > 1 ? sp : NULL;
    return 0;
}

void ltx_comm_stats(const ltx_transformer *m, double *seconds, double *bytes_sent) {
    *seconds = m->comm_s, *bytes_sent = m->comm_bytes;
}

void ltx_set_chunking(ltx_transformer *m, int chunk_rows) { m->chunk_rows = chunk_rows > 0 ? chunk_rows : 0; }
void ltx_set_probe(ltx_transformer *m, ltx_probe_fn fn, void *user) { m->probe = fn, m->probe_user = user; }

/* ------------------------------------------------------------------ rotary positions */

void ltx_rope_coords_grid(int F, int H, int W, const float scale[3], float *coords) {
    size_t S = (size_t)F * H * W;
    for (int f = 0; f < F; f++)
        for (int h = 0; h < H; h++)
            for (int w = 0; w < W; w++) {
                size_t s = ((size_t)f * H + h) * W + w;
                /* grid · scale · patch (1) / base, float32 op by op as upstream */
                coords[s] = ((float)f * scale[0]) / LTX_BASE_FRAMES;
                coords[S + s] = ((float)h * scale[1]) / LTX_BASE_HW;
                coords[2 * S + s] = ((float)w * scale[2]) / LTX_BASE_HW;
            }
}

void ltx_rope_coords_video(const float *vc, int S, float *coords) {
    for (int s = 0; s < S; s++) {
        coords[s] = vc[s] / LTX_BASE_FRAMES;
        coords[S + s] = vc[S + s] / LTX_BASE_HW;
        coords[2 * S + s] = vc[2 * (size_t)S + s] / LTX_BASE_HW;
    }
}

void ltx_rope_tables(int D, const float *coords, int S, float *cos_out, float *sin_out) {
    int nf = D / 6, pad = D % 6;
    float *freqs = cvx_malloc(sizeof(float) * (size_t)(nf > 0 ? nf : 1));
    cvx_linspace_f32(0.0f, 1.0f, nf, 1, freqs);   /* linspace(log_θ 1, log_θ θ, D/6) */
    for (int k = 0; k < nf; k++) {
        float p = (float)pow(LTX_ROPE_THETA, (double)freqs[k]);            /* θ ** linspace, f32 */
        freqs[k] = (p * (float)M_PI) / 2.0f;                               /* · π / 2 */
    }
#pragma omp parallel for schedule(static)
    for (int s = 0; s < S; s++) {
        float *cr = cos_out + (size_t)s * D, *sr = sin_out + (size_t)s * D;
        for (int i = 0; i < pad; i++) cr[i] = 1.0f, sr[i] = 0.0f;
        for (int k = 0; k < nf; k++)
            for (int a = 0; a < 3; a++) {   /* freqs.transpose(-1, -2).flatten: k-major, axis-minor */
                float g = coords[(size_t)a * S + s] * 2.0f - 1.0f;
                float ang = freqs[k] * g;
                float cv = (float)cos((double)ang), sv = (float)sin((double)ang);
                int at = pad + 2 * (3 * k + a);
                cr[at] = cr[at + 1] = cv;
                sr[at] = sr[at + 1] = sv;
            }
    }
    free(freqs);
}

/* apply_rotary_emb over rows [n, D] (all heads at once, before the head split):
 * out[2i] = x[2i]·cos − x[2i+1]·sin, out[2i+1] = x[2i+1]·cos + x[2i]·sin (f32 as upstream). */
static void ltx_rope_apply(float *x, int n, int D, const float *cs, const float *sn) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        float *r = x + (size_t)i * D;
        const float *c = cs + (size_t)i * D, *s = sn + (size_t)i * D;
        for (int j = 0; j < D; j += 2) {
            float a = r[j], b = r[j + 1];
            float p0 = a * c[j], q0 = -b * s[j], p1 = b * c[j + 1], q1 = a * s[j + 1];
            r[j] = p0 + q0;
            r[j + 1] = p1 + q1;
        }
    }
}

/* ------------------------------------------------------------------ pieces */

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

static void probe(const ltx_transformer *m, const char *name, const float *x, size_t n) {
    if (m->probe) m->probe(m->probe_user, name, x, n);
}

/* AdaLayerNormSingle: Timesteps(256, flip_sin_to_cos, shift 0) → linear_1, SiLU, linear_2 =
 * embedded timestep emb [n, D]; temb = linear(SiLU(emb)) [n, 6D]. */
static void ltx_time_embed(ltx_transformer *m, const float *t, int n, float *temb, float *emb) {
    int D = m->c.num_attention_heads * m->c.attention_head_dim;
    float *sinus = cvx_alloc_f32((size_t)n * 256), *u = cvx_alloc_f32((size_t)n * D);
    cvx_timestep_sinusoid(sinus, t, n, 256, 1, 0.0);                           // [n, 256]
    cvx_linear(m->ctx, sinus, n, 256, m->t1_w, m->t1_b, u);                          // [n, D]
    cvx_silu(u, (size_t)n * D);
    cvx_linear(m->ctx, u, n, D, m->t2_w, m->t2_b, emb);                              // [n, D]
    memcpy(u, emb, sizeof(float) * (size_t)n * D);
    cvx_silu(u, (size_t)n * D);
    cvx_linear(m->ctx, u, n, D, m->tlin_w, m->tlin_b, temb);                         // [n, 6D]
    free(sinus);
    free(u);
}

/* PixArtAlphaTextProjection: linear_2(gelu_tanh(linear_1(text))). ctx [rows, D]. */
static void ltx_caption_projection(ltx_transformer *m, const float *text, int rows, float *ctx) {
    int D = m->c.num_attention_heads * m->c.attention_head_dim;
    float *u = cvx_alloc_f32((size_t)rows * D);
    cvx_linear(m->ctx, text, rows, m->c.caption_channels, m->cap1_w, m->cap1_b, u);  // [rows, D]
    cvx_gelu_tanh(u, (size_t)rows * D);
    cvx_linear(m->ctx, u, rows, D, m->cap2_w, m->cap2_b, ctx);                       // [rows, D]
    free(u);
}

/* The modulation (shift, scale, gate, shift_mlp, scale_mlp, gate_mlp) of token s of element b:
 * ada = scale_shift_table + temb[b, s or 0] (row `which` of 6). */
static inline float ada(const ltx_block_weights *bw, const ltx_fwd *f, int b, size_t s, int which, int k) {
    size_t row = (size_t)b * f->T + (f->T == 1 ? 0 : s);
    return bw->sst[(size_t)which * f->D + k] + f->temb[row * 6 * f->D + (size_t)which * f->D + k];
}

/* y = RMSNorm(x) (no affine, eps) · (1 + scale) + shift over rows s0 .. s0 + n − 1 of element b. */
static void ltx_modulated_rmsnorm(const ltx_transformer *m, const ltx_block_weights *bw, const ltx_fwd *f, int b,
                                  size_t s0, int n, const float *x, float *y, int shift_row) {
    int D = f->D;
    cvx_rmsnorm(y, x, n, D, NULL, (float)m->c.norm_eps);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        float *yr = y + (size_t)i * D;
        for (int k = 0; k < D; k++)
            yr[k] = yr[k] * (1.0f + ada(bw, f, b, s0 + i, shift_row + 1, k)) + ada(bw, f, b, s0 + i, shift_row, k);
    }
}

/* h += y · gate (row `gate_row` of the modulation) over rows s0 .. of element b. */
static void ltx_gated_residual(const ltx_block_weights *bw, const ltx_fwd *f, int b, size_t s0, int n, float *h,
                               const float *y, int gate_row) {
    int D = f->D;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++)
        for (int k = 0; k < D; k++)
            h[(size_t)i * D + k] += y[(size_t)i * D + k] * ada(bw, f, b, s0 + i, gate_row, k);
}

/* the attention core over `heads` heads of rows heads·head_dim wide */
static void attention_heads(ltx_transformer *m, const float *q, const float *k, const float *v, int Sq, int Skv,
                            int heads, float *out) {
    int hd = m->c.attention_head_dim, D = heads * hd;
    cvx_flops_add(m->ctx, 4.0 * Sq * (double)Skv * heads * hd);
    cvx_attention_transformer(m->ctx, q, D, k, v, D, out, D, Sq, Skv, heads, hd, (float)(1.0 / sqrt((double)hd)), NULL);
}
static void attention(ltx_transformer *m, const float *q, const float *k, const float *v, int Sq, int Skv, float *out) {
    attention_heads(m, q, k, v, Sq, Skv, m->c.num_attention_heads, out);
}

/* Self-attention of the S tokens from this rank's rows q, k, v [rn, D] (out: q). Sequence
 * parallelism: to head shards [S, D/p] (one exchange each), the core on this rank's heads, back. */
static void self_attention_core(ltx_transformer *m, ltx_fwd *f, float *q, const float *k, const float *v,
                                float *scratch) {
    if (!m->sp) {
        attention(m, q, k, v, f->S, f->S, q);
        return;
    }
    const int p = cvx_dist_size(m->sp), heads = m->c.num_attention_heads, hd = m->c.attention_head_dim;
    const size_t Sh = (size_t)f->S * (heads / p) * hd;
    float *qh = scratch, *kh = qh + Sh, *vh = kh + Sh;                               // [S, D/p] each
    const double t0 = cvx_time();
    if (cvx_dist_seq_to_heads(m->sp, q, qh, f->S, heads, hd) || cvx_dist_seq_to_heads(m->sp, k, kh, f->S, heads, hd) ||
        cvx_dist_seq_to_heads(m->sp, v, vh, f->S, heads, hd))
        cvx_dist_die_last_error(m->sp);
    m->comm_s += cvx_time() - t0;
    attention_heads(m, qh, kh, vh, f->S, f->S, heads / p, qh);
    const double t1 = cvx_time();
    if (cvx_dist_heads_to_seq(m->sp, qh, q, f->S, heads, hd)) cvx_dist_die_last_error(m->sp);
    m->comm_s += cvx_time() - t1;
    const double D = (double)f->D, Dh = D / p;   /* sent: q, k, v but this rank's heads; the output's other rows */
    m->comm_bytes += 4.0 * (3.0 * (double)f->rn * (D - Dh) + ((double)f->S - (double)f->rn) * Dh);
}

/* 1. attn1 on norm1(x)·(1 + scale) + shift: q, k, v; RMSNorm over D (eps 1e-5, affine); RoPE over D;
 * attention; h += to_out(·)·gate. hb [S, D] of element b. */
static void ltx_self_attention(ltx_transformer *m, const ltx_block_weights *bw, ltx_fwd *f, int b, float *hb) {
    const ltx_attn_weights *a = &bw->attn1;
    int D = f->D, S = f->S;
    const size_t r0 = f->r0, rn = f->rn, cr = min_sz(f->chunk, rn);
    float *q = f->ws, *k = q + (size_t)S * D, *v = k + (size_t)S * D, *xc = v + (size_t)S * D;   // + [cr, D]
    for (size_t i = 0; i < rn; i += cr) {   /* this rank's rows: q, k, v [rn, D] */
        int n = (int)min_sz(cr, rn - i);
        ltx_modulated_rmsnorm(m, bw, f, b, r0 + i, n, hb + (r0 + i) * D, xc, 0);
        cvx_linear(m->ctx, xc, n, D, a->q_w, a->q_b, q + i * D);                     // [n, D]
        cvx_linear(m->ctx, xc, n, D, a->k_w, a->k_b, k + i * D);
        cvx_linear(m->ctx, xc, n, D, a->v_w, a->v_b, v + i * D);
    }
    cvx_rmsnorm(q, q, (int)rn, D, a->norm_q, 1e-5f);                                 // across heads
    cvx_rmsnorm(k, k, (int)rn, D, a->norm_k, 1e-5f);
    ltx_rope_apply(q, (int)rn, D, f->cos + r0 * D, f->sin + r0 * D);
    ltx_rope_apply(k, (int)rn, D, f->cos + r0 * D, f->sin + r0 * D);
    self_attention_core(m, f, q, k, v, xc + cr * D);                                 // q: [rn, D]
    for (size_t i = 0; i < rn; i += cr) {
        int n = (int)min_sz(cr, rn - i);
        cvx_linear(m->ctx, q + i * D, n, D, a->o_w, a->o_b, xc);                     // [n, D]
        if (f->pr1) memcpy(f->pr1 + ((size_t)b * S + r0 + i) * D, xc, sizeof(float) * (size_t)n * D);
        ltx_gated_residual(bw, f, b, r0 + i, n, hb + (r0 + i) * D, xc, 2);
    }
}

/* 2. attn2 on the un-normalised x with the caption's keys (masked keys left out); h += to_out(·)
 * (no gate). */
static void ltx_cross_attention(ltx_transformer *m, const ltx_block_weights *bw, ltx_fwd *f, int b, float *hb) {
    const ltx_attn_weights *a = &bw->attn2;
    int D = f->D, S = f->S, L = f->L;
    size_t cr = min_sz(f->chunk, (size_t)S);
    float *kt = f->ws, *vt = kt + (size_t)L * D, *q = vt + (size_t)L * D, *o = q + cr * D;   // [L, D] ×2, [cr, D] ×2
    const float *txt = f->ctx_txt + (size_t)b * L * D, *mk = f->mask ? f->mask + (size_t)b * L : NULL;
    cvx_linear(m->ctx, txt, L, D, a->k_w, a->k_b, kt);                               // [L, D]
    cvx_rmsnorm(kt, kt, L, D, a->norm_k, 1e-5f);
    cvx_linear(m->ctx, txt, L, D, a->v_w, a->v_b, vt);
    int Lk = L;
    if (mk) {   /* keep the attended keys, in order */
        int n = 0;
        for (int j = 0; j < L; j++) n += mk[j] != 0.0f;
        if (n > 0) {
            Lk = 0;
            for (int j = 0; j < L; j++)
                if (mk[j] != 0.0f) {
                    if (Lk != j) {
                        memmove(kt + (size_t)Lk * D, kt + (size_t)j * D, sizeof(float) * D);
                        memmove(vt + (size_t)Lk * D, vt + (size_t)j * D, sizeof(float) * D);
                    }
                    Lk++;
                }
        }
    }
    for (size_t i = f->r0; i < f->r0 + f->rn; i += cr) {   /* this rank's rows */
        int n = (int)min_sz(cr, f->r0 + f->rn - i);
        cvx_linear(m->ctx, hb + i * D, n, D, a->q_w, a->q_b, q);                     // [n, D]
        cvx_rmsnorm(q, q, n, D, a->norm_q, 1e-5f);
        attention(m, q, kt, vt, n, Lk, q);
        cvx_linear(m->ctx, q, n, D, a->o_w, a->o_b, o);                              // [n, D]
        if (f->pr2) memcpy(f->pr2 + ((size_t)b * S + i) * D, o, sizeof(float) * (size_t)n * D);
        cvx_add(hb + i * D, o, (size_t)n * D);
    }
}

/* 3. Feed-forward on norm2(x)·(1 + scale_mlp) + shift_mlp: ff.net.2(gelu_tanh(ff.net.0.proj(·)));
 * h += ·gate_mlp. */
static void ltx_feed_forward(ltx_transformer *m, const ltx_block_weights *bw, ltx_fwd *f, int b, float *hb) {
    int D = f->D, S = f->S;
    size_t cr = min_sz(f->chunk, (size_t)S);
    float *x = f->ws, *u = x + cr * D;                                               // [cr, D], [cr, 4D]
    (void)S;
    for (size_t i = f->r0; i < f->r0 + f->rn; i += cr) {   /* this rank's rows */
        int n = (int)min_sz(cr, f->r0 + f->rn - i);
        ltx_modulated_rmsnorm(m, bw, f, b, i, n, hb + i * D, x, 3);
        cvx_linear(m->ctx, x, n, D, bw->ff1_w, bw->ff1_b, u);                        // [n, 4D]
        cvx_gelu_tanh(u, (size_t)n * 4 * D);
        cvx_linear(m->ctx, u, n, 4 * D, bw->ff2_w, bw->ff2_b, x);                    // [n, D]
        ltx_gated_residual(bw, f, b, i, n, hb + i * D, x, 5);
    }
}

/* ------------------------------------------------------------------ forward */

int ltx_forward_embed(ltx_transformer *m, const float *x, int B, int S, const float *text, const float *mask, int L,
                      const float *timestep, int T, const float *coords, ltx_fwd *fp) {
    const ltx_config *c = &m->c;
    int D = c->num_attention_heads * c->attention_head_dim;
    if (B <= 0 || S <= 0 || L <= 0)
        return cvx_error("ltx transformer: bad sizes B=%d S=%d L=%d", B, S, L);
    if (T != 1 && T != S)
        return cvx_error("ltx transformer: timestep must be [B, 1] or [B, S] (S = %d tokens), got [B, %d]", S, T);
    if (mask)
        for (size_t i = 0; i < (size_t)B * L; i++)
            if (mask[i] != 0.0f && mask[i] != 1.0f)
                return cvx_error("ltx transformer: encoder_attention_mask[%zu] = %g, expected 0 or 1", i, (double)mask[i]);
    if (m->sp && (B != 1 || m->probe || S < cvx_dist_size(m->sp)))
        return cvx_error("ltx transformer: sequence parallelism runs one batch element of at least %d tokens without "
                         "probes (B=%d, S=%d)", cvx_dist_size(m->sp), B, S);
    *fp = (ltx_fwd){.B = B, .S = S, .T = T, .L = L, .D = D, .coords = coords, .mask = mask, .r0 = 0, .rn = (size_t)S};
    ltx_fwd *f = fp;
    if (m->sp) {   /* this rank's rows of every row-wise part */
        int64_t lo, hi;
        cvx_dist_split_range(S, cvx_dist_size(m->sp), cvx_dist_rank(m->sp), &lo, &hi);
        f->r0 = (size_t)lo, f->rn = (size_t)(hi - lo);
    }
    f->chunk = m->chunk_rows > 0 ? (size_t)m->chunk_rows : 1024;
    size_t cr = min_sz(f->chunk, (size_t)S);
    const size_t sp_heads = m->sp ? 3 * (size_t)S * (D / cvx_dist_size(m->sp)) : 0;   /* q, k, v head shards */
    size_t need[3] = {(3 * (size_t)S + cr) * D + sp_heads, 2 * (size_t)L * D + 2 * cr * D, 5 * cr * D};
    size_t ws = need[0];
    for (int i = 1; i < 3; i++) if (need[i] > ws) ws = need[i];
    f->ws = cvx_alloc_f32(ws);
    f->h = f->h_own = cvx_alloc_f32((size_t)B * S * D);
    f->temb = cvx_alloc_f32((size_t)B * T * 6 * D);
    f->emb = cvx_alloc_f32((size_t)B * T * D);
    f->ctx_txt = cvx_alloc_f32((size_t)B * L * D);
    f->cos = cvx_alloc_f32((size_t)S * D);
    f->sin = cvx_alloc_f32((size_t)S * D);
    if (m->probe) f->pr1 = cvx_alloc_f32((size_t)B * S * D), f->pr2 = cvx_alloc_f32((size_t)B * S * D);

    if (m->probe) {   /* the rotary tables of every element, as upstream's [B, S, D] */
        float *pc = cvx_alloc_f32((size_t)B * S * D), *ps = cvx_alloc_f32((size_t)B * S * D);
        for (int b = 0; b < B; b++)
            ltx_rope_tables(D, coords + (size_t)b * 3 * S, S, pc + (size_t)b * S * D, ps + (size_t)b * S * D);
        probe(m, "rope.0", pc, (size_t)B * S * D);
        probe(m, "rope.1", ps, (size_t)B * S * D);
        free(pc);
        free(ps);
    }
    cvx_linear(m->ctx, x, B * S, c->in_channels, m->proj_in_w, m->proj_in_b, f->h);  // [B·S, D]
    probe(m, "proj_in", f->h, (size_t)B * S * D);
    ltx_time_embed(m, timestep, B * T, f->temb, f->emb);                             // [B·T, 6D], [B·T, D]
    probe(m, "time_embed.0", f->temb, (size_t)B * T * 6 * D);
    probe(m, "time_embed.1", f->emb, (size_t)B * T * D);
    ltx_caption_projection(m, text, B * L, f->ctx_txt);                             // [B·L, D]
    probe(m, "caption_projection", f->ctx_txt, (size_t)B * L * D);
    return 0;
}

void ltx_forward_blocks(ltx_transformer *m, ltx_fwd *f, int first, int count) {
    CVX_CHECK(first >= 0 && count >= 0 && first + count <= m->c.num_layers);
    const int B = f->B, S = f->S, D = f->D;
    char name[64];
    for (int i = first; i < first + count; i++) {
        const ltx_block_weights *bw = &m->blocks[i];
        for (int b = 0; b < B; b++) {
            float *hb = f->h + (size_t)b * S * D;                                    // [S, D]
            ltx_rope_tables(D, f->coords + (size_t)b * 3 * S, S, f->cos, f->sin);
            ltx_self_attention(m, bw, f, b, hb);
            ltx_cross_attention(m, bw, f, b, hb);
            ltx_feed_forward(m, bw, f, b, hb);
        }
        if (m->probe) {
            snprintf(name, sizeof name, "blocks.%d.attn1", i);
            probe(m, name, f->pr1, (size_t)B * S * D);
            snprintf(name, sizeof name, "blocks.%d.attn2", i);
            probe(m, name, f->pr2, (size_t)B * S * D);
            snprintf(name, sizeof name, "blocks.%d", i);
            probe(m, name, f->h, (size_t)B * S * D);
        }
    }
}

/* TeaCache4LTX-Video's probe: block 0's norm1(h)·(1 + scale_msa) + shift_msa, as its self-attention
 * computes it, on this rank's rows of each element. */
void ltx_forward_block0_input(ltx_transformer *m, const ltx_fwd *f, float *out) {
    for (int b = 0; b < f->B; b++)
        ltx_modulated_rmsnorm(m, &m->blocks[0], f, b, f->r0, (int)f->rn, f->h + ((size_t)b * f->S + f->r0) * f->D,
                              out + (size_t)b * f->rn * f->D, 0);                    // [rn, D]
}

/* norm_out (LayerNorm, no affine, eps 1e-6); (shift, scale) = scale_shift_table + emb, in place on
 * this rank's rows (sequence parallelism) or all */
void ltx_forward_output_norm(ltx_transformer *m, ltx_fwd *f) {
    const int B = f->B, S = f->S, T = f->T, D = f->D;
    const size_t R = m->sp ? f->rn : (size_t)B * S, hr0 = m->sp ? f->r0 : 0;
    float *hl = f->h + hr0 * D;
    cvx_layernorm(hl, hl, (int)R, D, NULL, NULL, 1e-6f);
    probe(m, "norm_out", f->h, (size_t)B * S * D);
#pragma omp parallel for schedule(static)
    for (size_t r = hr0; r < hr0 + R; r++) {
        size_t b = r / (size_t)S, s = r % (size_t)S;
        const float *e = f->emb + (b * T + (T == 1 ? 0 : s)) * D;
        float *hr = f->h + r * D;
        for (int k = 0; k < D; k++) {
            float shift = m->sst_out[k] + e[k], scale = m->sst_out[D + k] + e[k];
            hr[k] = hr[k] * (1.0f + scale) + shift;
        }
    }
    f->out_normed = 1;
}

/* the output norm (unless done), proj_out (sequence parallelism: this rank's rows, then every
 * rank's: the same prediction everywhere) */
void ltx_forward_finalize(ltx_transformer *m, ltx_fwd *f, float *out) {
    const int S = f->S, D = f->D;
    const size_t R = m->sp ? f->rn : (size_t)f->B * S, hr0 = m->sp ? f->r0 : 0;
    float *hl = f->h + hr0 * D;
    if (!f->out_normed) ltx_forward_output_norm(m, f);
    const int Co = m->c.out_channels;
    cvx_linear(m->ctx, hl, (int)R, D, m->proj_out_w, m->proj_out_b, out + hr0 * Co);  // [B·S, C_out]
    if (m->sp) {
        const int p = cvx_dist_size(m->sp);
        size_t *bytes = cvx_malloc(sizeof(size_t) * p);
        for (int j = 0; j < p; j++) {
            int64_t lo, hi;
            cvx_dist_split_range(S, p, j, &lo, &hi);
            bytes[j] = (size_t)(hi - lo) * Co * sizeof(float);
        }
        float *part = cvx_alloc_f32(f->rn * Co);
        memcpy(part, out + f->r0 * Co, f->rn * Co * sizeof(float));
        const double t0 = cvx_time();
        if (cvx_dist_gatherv(m->sp, part, bytes, out, 0) || cvx_dist_bcast(m->sp, out, (size_t)S * Co * sizeof(float), 0))
            cvx_dist_die_last_error(m->sp);
        m->comm_s += cvx_time() - t0, m->comm_bytes += (double)f->rn * Co * 4;
        free(part), free(bytes);
    }
    ltx_forward_abort(f);
}

void ltx_forward_abort(ltx_fwd *f) {
    free(f->ws); free(f->h_own); free(f->temb); free(f->emb); free(f->ctx_txt); free(f->cos); free(f->sin);
    free(f->pr1); free(f->pr2);
    *f = (ltx_fwd){0};
}

int ltx_forward(ltx_transformer *m, const float *x, int B, int S, const float *text, const float *mask, int L,
                const float *timestep, int T, const float *coords, float *out) {
    ltx_fwd f;
    if (ltx_forward_embed(m, x, B, S, text, mask, L, timestep, T, coords, &f)) return -1;
    ltx_forward_blocks(m, &f, 0, m->c.num_layers);
    ltx_forward_finalize(m, &f, out);
    return 0;
}
