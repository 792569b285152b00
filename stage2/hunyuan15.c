/* HunyuanVideo15Transformer3DModel forward (diffusers v0.36.0 transformer_hunyuan_video15.py),
 * f32 compute over mmapped weights; config and weights in stage2/hunyuan15_load.c.
 *
 * Layout: the video stream h [B, S, D] (tokens in (f, y, x) order) and the text stream
 * txt [B, Lt, D], Lt = L_img + L2 + L, reordered per element as upstream so that its valid rows
 * are a prefix: the joint attention of a block then runs over the S + n_valid rows [video | valid
 * text] only, and the masked-out rows get 0 from the attention (torch >= 2.5 _safe_softmax), which
 * is what upstream's m_i & m_j mask gives. Every block runs one batch element at a time. Under
 * sequence parallelism (hv15_set_sp) a rank's blocks compute its range of the video rows. */
#include "hunyuan15_internal.h"

#include "dist.h"
#include "error.h"
#include "gemm.h"
#include "ops.h"
#include "stage2/cogvideox_rope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HV15_EPS 1e-6f        /* the blocks' and the refiner's LayerNorms, the q/k RMSNorms */
#define HV15_EPS_PROJ 1e-5f   /* nn.LayerNorm defaults of the ByT5 and image projections */

/* nn.Linear through cvx_linear (at the context's precision), timed. */
static void linear(hv15_transformer *m, const float *x, int M, const hv15_linear *l, float *y) {
    double t0 = cvx_time();
    int K = (int)l->w->shape[1];
    cvx_linear(m->ctx, x, M, K, l->w, l->b, y);
    m->stats.t_linear += cvx_time() - t0;
    m->stats.flop_linear += 2.0 * M * K * (double)l->w->shape[0];
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* y = LN(x)(1 + scale) + shift over rows [n, D] (LayerNorm without affine, eps 1e-6). */
static void modulated_layernorm(float *y, const float *x, int n, int D, const float *shift, const float *scale) {
    cvx_layernorm(y, x, n, D, NULL, NULL, HV15_EPS);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        float *yr = y + (size_t)i * D;
        for (int k = 0; k < D; k++) yr[k] = yr[k] * (1.0f + scale[k]) + shift[k];
    }
}

/* h += y · gate over rows [n, D]. */
static void gated_residual(float *h, const float *y, int n, int D, const float *gate) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        float *hr = h + (size_t)i * D;
        const float *yr = y + (size_t)i * D;
        for (int k = 0; k < D; k++) hr[k] = hr[k] + yr[k] * gate[k];
    }
}

/* out [n] = lin(SiLU(e)) for one element's embedding e [D] (the AdaNorm modulations). */
static void modulation(hv15_transformer *m, const float *e, int D, const hv15_linear *lin, float *out) {
    float *s = cvx_malloc(sizeof(float) * (size_t)D);
    memcpy(s, e, sizeof(float) * (size_t)D);
    cvx_silu(s, (size_t)D);
    linear(m, s, 1, lin, out);
    free(s);
}

/* softmax(q kᵀ/√hd) v over rows [n, D] where only the first nv rows are valid: rows < nv attend
 * to keys < nv, rows >= nv get 0 (every score masked: _safe_softmax). out may be q. */
static void attention_prefix(hv15_transformer *m, const float *q, const float *k, const float *v, int n, int nv,
                             int refiner, float *out) {
    const hv15_config *c = &m->c;
    int D = c->num_attention_heads * c->attention_head_dim, hd = c->attention_head_dim;
    float scale = (float)(1.0 / sqrt((double)hd));
    double t0 = cvx_time();
    if (nv > 0) {
        if (refiner)
            cvx_attention_ctx(m->ctx, q, D, k, v, D, out, D, nv, nv, c->num_attention_heads, hd, scale, NULL);
        else
            cvx_attention_transformer(m->ctx, q, D, k, v, D, out, D, nv, nv, c->num_attention_heads, hd, scale, NULL);
    }
    if (n > nv) memset(out + (size_t)nv * D, 0, sizeof(float) * (size_t)(n - nv) * D);
    m->stats.t_attention += cvx_time() - t0;
    m->stats.flop_attention += 4.0 * nv * (double)nv * D;
}

/* ------------------------------------------------------------------ embeddings */

/* HunyuanVideo15TimeEmbedding / TimestepEmbedding: sinusoid 256 [cos | sin] → linear_1 → SiLU →
 * linear_2. out [B, D]. */
static void timestep_embedding(hv15_transformer *m, const float *t, int B, const hv15_linear *l1,
                               const hv15_linear *l2, float *out) {
    int D = m->c.num_attention_heads * m->c.attention_head_dim;
    float *sinus = cvx_malloc(sizeof(float) * (size_t)B * 256), *u = cvx_malloc(sizeof(float) * (size_t)B * D);
    cvx_timestep_sinusoid(sinus, t, B, 256, 1, 0.0);                               // [B, 256]
    linear(m, sinus, B, l1, u);                                                          // [B, D]
    cvx_silu(u, (size_t)B * D);
    linear(m, u, B, l2, out);                                                            // [B, D]
    free(sinus);
    free(u);
}

void hv15_time_embed(hv15_transformer *m, const float *timestep, int B, float *temb) {
    timestep_embedding(m, timestep, B, &m->time1, &m->time2, temb);
}

/* One HunyuanVideo15IndividualTokenRefinerBlock on one element's rows x [L, D] with the valid
 * rows idx[nv] (mask m_i & m_j: valid rows attend to valid rows, the others get 0):
 * x += to_out(attn(norm1(x)))·gate_msa; x += ff(norm2(x))·gate_mlp, ff = Linear → SiLU → Linear,
 * (gate_msa, gate_mlp) = norm_out.linear(SiLU(temb)). */
static void refiner_block(hv15_transformer *m, const hv15_refiner_block *r, float *x, int L, const int *idx, int nv,
                          const float *temb) {
    int D = m->c.num_attention_heads * m->c.attention_head_dim, Fr = 4 * D;
    float *gates = cvx_malloc(sizeof(float) * 2 * (size_t)D);
    modulation(m, temb, D, &r->ada, gates);                                              // [gate_msa | gate_mlp]
    float *n = cvx_alloc_f32((size_t)L * D), *q = cvx_alloc_f32((size_t)L * D), *k = cvx_alloc_f32((size_t)L * D);
    float *v = cvx_alloc_f32((size_t)L * D), *att = cvx_alloc_f32((size_t)L * D);
    cvx_layernorm(n, x, L, D, r->norm1_w, r->norm1_b, HV15_EPS);
    /* the valid rows first (a gather; the identity for the pipelines' right-padded masks) */
    for (int i = 0; i < nv; i++) memcpy(att + (size_t)i * D, n + (size_t)idx[i] * D, sizeof(float) * (size_t)D);
    linear(m, att, nv, &r->q, q);                                                        // [nv, D]
    linear(m, att, nv, &r->k, k);
    linear(m, att, nv, &r->v, v);
    attention_prefix(m, q, k, v, nv, nv, 1, q);                                          // [nv, D]
    memset(att, 0, sizeof(float) * (size_t)L * D);
    for (int i = 0; i < nv; i++) memcpy(att + (size_t)idx[i] * D, q + (size_t)i * D, sizeof(float) * (size_t)D);
    linear(m, att, L, &r->o, n);                                                         // [L, D]
    gated_residual(x, n, L, D, gates);
    free(q); free(k); free(v); free(att);
    float *u = cvx_alloc_f32((size_t)L * Fr);
    cvx_layernorm(n, x, L, D, r->norm2_w, r->norm2_b, HV15_EPS);
    linear(m, n, L, &r->ff1, u);                                                         // [L, 4D]
    cvx_silu(u, (size_t)L * Fr);
    linear(m, u, L, &r->ff2, n);                                                         // [L, D]
    gated_residual(x, n, L, D, gates + D);
    free(u); free(n); free(gates);
}

/* HunyuanVideo15TokenRefiner (context_embedder): pooled = Σ m_j x_j / Σ m_j; temb_r =
 * timestep_embedder(sinusoid(t)) + text_embedder(pooled) (Linear → SiLU → Linear); x = proj_in(x);
 * the refiner blocks. */
int hv15_token_refiner(hv15_transformer *m, const float *text, const float *mask, int B, int L,
                       const float *timestep, float *out) {
    const hv15_config *c = &m->c;
    int D = c->num_attention_heads * c->attention_head_dim, T = c->text_embed_dim;
    int *idx = cvx_malloc(sizeof(int) * (size_t)L * B), *nv = cvx_malloc(sizeof(int) * (size_t)B);
    for (int b = 0; b < B; b++) {
        nv[b] = 0;
        for (int j = 0; j < L; j++)
            if (mask[(size_t)b * L + j] != 0.0f) idx[(size_t)b * L + nv[b]++] = j;
        if (!nv[b]) {
            free(idx); free(nv);
            return cvx_error("transformer: encoder_attention_mask of batch element %d has no valid token (upstream "
                             "divides by the mask's sum: NaN)", b);
        }
    }
    float *pooled = cvx_malloc(sizeof(float) * (size_t)B * T), *u = cvx_malloc(sizeof(float) * (size_t)B * D);
    float *temb = cvx_malloc(sizeof(float) * (size_t)B * D), *temb_text = cvx_malloc(sizeof(float) * (size_t)B * D);
    for (int b = 0; b < B; b++) {
        double msum = 0;
        for (int j = 0; j < L; j++) msum += mask[(size_t)b * L + j];
        for (int d = 0; d < T; d++) {
            double s = 0;
            for (int j = 0; j < L; j++) s += (double)(text[((size_t)b * L + j) * T + d] * mask[(size_t)b * L + j]);
            pooled[(size_t)b * T + d] = (float)s / (float)msum;
        }
    }
    timestep_embedding(m, timestep, B, &m->ref_time1, &m->ref_time2, temb);              // [B, D]
    linear(m, pooled, B, &m->ref_text1, u);                                              // [B, D]
    cvx_silu(u, (size_t)B * D);
    linear(m, u, B, &m->ref_text2, temb_text);                                           // [B, D]
    cvx_add(temb, temb_text, (size_t)B * D);
    linear(m, text, B * L, &m->ref_proj_in, out);                                        // [B, L, D]
    for (int i = 0; i < c->num_refiner_layers; i++)
        for (int b = 0; b < B; b++)
            refiner_block(m, &m->refiner[i], out + (size_t)b * L * D, L, idx + (size_t)b * L, nv[b],
                          temb + (size_t)b * D);
    free(pooled); free(u); free(temb); free(temb_text); free(idx); free(nv);
    return 0;
}

/* HunyuanVideo15ByT5TextProjection: LN → linear_1 → GELU → linear_2 → GELU → linear_3. */
void hv15_byt5_projection(hv15_transformer *m, const float *x, int n, float *out) {
    int W2 = m->c.byt5_proj_dim, T2 = m->c.text_embed_2_dim;
    float *xn = cvx_alloc_f32((size_t)n * T2), *u = cvx_alloc_f32((size_t)n * W2), *u2 = cvx_alloc_f32((size_t)n * W2);
    cvx_layernorm(xn, x, n, T2, m->byt5_norm_w, m->byt5_norm_b, HV15_EPS_PROJ);
    linear(m, xn, n, &m->byt5_1, u);                                                     // [n, W2]
    cvx_gelu_erf(u, (size_t)n * W2);
    linear(m, u, n, &m->byt5_2, u2);                                                     // [n, W2]
    cvx_gelu_erf(u2, (size_t)n * W2);
    linear(m, u2, n, &m->byt5_3, out);                                                   // [n, D]
    free(xn); free(u); free(u2);
}

/* HunyuanVideo15ImageProjection: LN → linear_1 → GELU → linear_2 → LN. */
void hv15_image_projection(hv15_transformer *m, const float *x, int n, float *out) {
    int I = m->c.image_embed_dim, D = m->c.num_attention_heads * m->c.attention_head_dim;
    float *xn = cvx_alloc_f32((size_t)n * I), *u = cvx_alloc_f32((size_t)n * I);
    cvx_layernorm(xn, x, n, I, m->img_norm_in_w, m->img_norm_in_b, HV15_EPS_PROJ);
    linear(m, xn, n, &m->img_1, u);                                                      // [n, I]
    cvx_gelu_erf(u, (size_t)n * I);
    linear(m, u, n, &m->img_2, out);                                                     // [n, D]
    cvx_layernorm(out, out, n, D, m->img_norm_out_w, m->img_norm_out_b, HV15_EPS_PROJ);
    free(xn); free(u);
}

/* HunyuanVideo15RotaryPosEmbed: per axis (t, h, w) of dim d, get_1d_rotary_pos_embed(use_real,
 * repeat-interleaved) in float32: f_j = 1 / θ^((2j)/d), angle = pos·f_j; the axes side by side. */
int hv15_rope_tables(const hv15_config *c, int F, int H, int W, float *cos_out, float *sin_out) {
    int p = c->patch_size, pt = c->patch_size_t, hd = c->attention_head_dim;
    if (F <= 0 || H <= 0 || W <= 0 || F % pt || H % p || W % p)
        return cvx_error("transformer: latent grid %dx%dx%d (F×H×W) must be positive multiples of the patch size "
                         "[%d, %d, %d]", F, H, W, pt, p, p);
    int n[3] = {F / pt, H / p, W / p}, col = 0;
    for (int ax = 0; ax < 3; ax++) {
        int d = c->rope_axes_dim[ax];
        for (int j = 0; j < d / 2; j++) {
            float e = (float)(2 * j) / (float)d;
            float f = 1.0f / (float)pow(c->rope_theta, (double)e);
            for (int t = 0; t < n[0]; t++)
                for (int y = 0; y < n[1]; y++)
                    for (int x = 0; x < n[2]; x++) {
                        int pos = ax == 0 ? t : ax == 1 ? y : x;
                        size_t s = ((size_t)t * n[1] + y) * n[2] + x;
                        float a = (float)pos * f;
                        float cs = (float)cos((double)a), sn = (float)sin((double)a);
                        cos_out[s * hd + col + 2 * j] = cos_out[s * hd + col + 2 * j + 1] = cs;
                        sin_out[s * hd + col + 2 * j] = sin_out[s * hd + col + 2 * j + 1] = sn;
                    }
        }
        col += d;
    }
    return 0;
}

/* x_embedder: Conv3d with kernel = stride = (pt, p, p) as a linear over patches: token (f, y, x),
 * feature ((c·pt + it)·p + ih)·p + iw. One element x [C, F, H, W] → h [S, D]. */
static void patch_embedding(hv15_transformer *m, const float *x, const hv15_fwd *f, float *h) {
    const hv15_config *c = &m->c;
    int p = c->patch_size, pt = c->patch_size_t, C = c->in_channels, Kp = C * pt * p * p;
    float *patches = cvx_alloc_f32((size_t)f->S * Kp);
#pragma omp parallel for collapse(2) schedule(static)
    for (int t = 0; t < f->pf; t++)
        for (int yy = 0; yy < f->ph; yy++)
            for (int xx = 0; xx < f->pw; xx++) {
                float *row = patches + (((size_t)t * f->ph + yy) * f->pw + xx) * Kp;
                for (int ch = 0; ch < C; ch++)
                    for (int it = 0; it < pt; it++)
                        for (int ih = 0; ih < p; ih++)
                            for (int iw = 0; iw < p; iw++)
                                row[((ch * pt + it) * p + ih) * p + iw] =
                                    x[(((size_t)ch * f->F + t * pt + it) * f->H + yy * p + ih) * f->W + xx * p + iw];
            }
    double t0 = cvx_time();
    cvx_linear(m->ctx, patches, f->S, Kp, &m->patch_w, m->patch_b, h);                   // [S, D]
    m->stats.t_linear += cvx_time() - t0;
    m->stats.flop_linear += 2.0 * f->S * Kp * (double)f->D;
    free(patches);
}

/* The text stream of one element, as upstream's reordering: [valid image, valid ByT5, valid MLLM,
 * invalid image, zeros × invalid ByT5, zeros × invalid MLLM] (order kept within each part). The
 * inputs already carry their cond_type_embed rows. Returns the number of valid rows. */
static int reorder_text(int D, const float *img, int L_img, int img_valid, const float *byt5, const float *mask2,
                        int L2, const float *mllm, const float *mask, int L, float *out) {
    size_t row = 0, bytes = sizeof(float) * (size_t)D;
    int nv = 0;
#define PUT(src) (memcpy(out + row * D, (src), bytes), row++)
    if (img_valid)
        for (int j = 0; j < L_img; j++) PUT(img + (size_t)j * D), nv++;
    for (int j = 0; j < L2; j++)
        if (mask2[j] != 0.0f) PUT(byt5 + (size_t)j * D), nv++;
    for (int j = 0; j < L; j++)
        if (mask[j] != 0.0f) PUT(mllm + (size_t)j * D), nv++;
    if (!img_valid)
        for (int j = 0; j < L_img; j++) PUT(img + (size_t)j * D);
#undef PUT
    size_t zeros = (size_t)(L_img + L2 + L) - row;
    memset(out + row * D, 0, zeros * bytes);
    return nv;
}

/* ------------------------------------------------------------------ blocks */

/* Feed-forward of rows x [n, D] with modulation (shift, scale, gate): x += ff2(gelu_tanh(ff1(
 * LN(x)(1 + scale) + shift)))·gate, in pieces of rows. */
static void feed_forward(hv15_transformer *m, const hv15_linear *ff1, const hv15_linear *ff2, float *x, int n,
                         const float *mod3) {
    int D = m->c.num_attention_heads * m->c.attention_head_dim, Fd = m->ffn;
    size_t cr = min_sz(1024, (size_t)n);
    if (!cr) return;
    float *xn = cvx_alloc_f32(cr * D), *u = cvx_alloc_f32(cr * Fd);
    for (size_t i = 0; i < (size_t)n; i += cr) {
        int r = (int)min_sz(cr, (size_t)n - i);
        modulated_layernorm(xn, x + i * D, r, D, mod3, mod3 + D);
        linear(m, xn, r, ff1, u);                                                        // [r, Fd]
        cvx_gelu_tanh(u, (size_t)r * Fd);
        linear(m, u, r, ff2, xn);                                                        // [r, D]
        gated_residual(x + i * D, xn, r, D, mod3 + 2 * D);
    }
    free(xn);
    free(u);
}

/* One HunyuanVideo15TransformerBlock on element b: AdaLayerNormZero modulations of the video and
 * text streams; joint attention over [video | text] (q/k/v with bias, per-head RMSNorm, RoPE on
 * the video rows); gated residuals; the feed-forwards. */
/* The joint attention of one element under sequence parallelism: q, k, v [nr + nt, D] (this
 * rank's video rows, then the text rows, normed and rotated) → head shards [S + nt, D/p] (the video
 * rows by all-to-all, the text rows' columns of this rank's heads), the attention over the S +
 * n_valid valid rows, then back: the video rows to this rank's rows, the text rows' heads gathered
 * from every rank. Output in q. A failed exchange stops the run. */
static void joint_attention_sp(hv15_transformer *m, const hv15_fwd *f, float *q, float *k, float *v, int nt,
                               int n_valid) {
    const hv15_config *c = &m->c;
    int p = cvx_dist_size(m->sp), r = cvx_dist_rank(m->sp), heads = c->num_attention_heads, hd = c->attention_head_dim;
    int D = f->D, S = f->S, nr = f->nrows, hp = heads / p, Dh = hp * hd, N = S + nt, nv = S + n_valid;
    float *sh[3] = {m->sp_buf, m->sp_buf + (size_t)N * Dh, m->sp_buf + 2 * (size_t)N * Dh};   // [N, Dh] each
    float *src[3] = {q, k, v};
    for (int j = 0; j < 3; j++) {
        if (cvx_dist_seq_to_heads(m->sp, src[j], sh[j], S, heads, hd)) cvx_dist_die_last_error(m->sp);
        for (int t = 0; t < nt; t++)
            memcpy(sh[j] + (size_t)(S + t) * Dh, src[j] + (size_t)(nr + t) * D + (size_t)r * Dh, sizeof(float) * Dh);
    }
    double t0 = cvx_time();
    cvx_attention_transformer(m->ctx, sh[0], Dh, sh[1], sh[2], Dh, sh[0], Dh, nv, nv, hp, hd,
                              (float)(1.0 / sqrt((double)hd)), NULL);
    if (N > nv) memset(sh[0] + (size_t)nv * Dh, 0, sizeof(float) * (size_t)(N - nv) * Dh);
    m->stats.t_attention += cvx_time() - t0;
    m->stats.flop_attention += 4.0 * nv * (double)nv * Dh;
    if (cvx_dist_heads_to_seq(m->sp, sh[0], q, S, heads, hd)) cvx_dist_die_last_error(m->sp);   // [nr, D]
    if (!nt) return;
    float *all = sh[1];   /* k's shard is free now: every rank's text heads [p][nt, Dh] */
    if (cvx_dist_allgather(m->sp, sh[0] + (size_t)S * Dh, sizeof(float) * (size_t)nt * Dh, all))
        cvx_dist_die_last_error(m->sp);
    for (int j = 0; j < p; j++)
        for (int t = 0; t < nt; t++)
            memcpy(q + (size_t)(nr + t) * D + (size_t)j * Dh, all + ((size_t)j * nt + t) * Dh, sizeof(float) * Dh);
}

/* One HunyuanVideo15TransformerBlock on element b: AdaLayerNormZero modulations of the video and
 * text streams; joint attention over [video | text] (q/k/v with bias, per-head RMSNorm, RoPE on
 * the video rows); gated residuals; the feed-forwards. The video rows are this rank's (row0, nrows). */
static void hv15_block_forward(hv15_transformer *m, const hv15_block *bw, const hv15_fwd *f, int b) {
    const hv15_config *c = &m->c;
    int D = f->D, S = f->nrows, hd = c->attention_head_dim, heads = c->num_attention_heads;
    int nt = m->full_text ? f->Lt : f->n_valid[b], N = S + nt, nv = S + f->n_valid[b];
    float *hb = f->h + ((size_t)b * f->S + f->row0) * D, *tb = f->txt + (size_t)b * f->Lt * D;
    /* (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp) of each stream */
    float *mv = cvx_malloc(sizeof(float) * 12 * (size_t)D), *mt = mv + 6 * D;
    modulation(m, f->temb + (size_t)b * D, D, &bw->norm1, mv);
    modulation(m, f->temb + (size_t)b * D, D, &bw->norm1_context, mt);
    if (m->ws_cap < 4 * (size_t)N * D) {   /* kept between blocks and forwards: no fresh pages per block */
        free(m->ws);
        m->ws_cap = 4 * (size_t)N * D;
        m->ws = cvx_alloc_f32(m->ws_cap);
    }
    if (m->sp && m->sp_cap < 3 * (size_t)(f->S + nt) * (D / cvx_dist_size(m->sp))) {
        free(m->sp_buf);
        m->sp_cap = 3 * (size_t)(f->S + nt) * (D / cvx_dist_size(m->sp));
        m->sp_buf = cvx_alloc_f32(m->sp_cap);
    }
    float *xn = m->ws, *q = xn + (size_t)N * D, *k = q + (size_t)N * D, *v = k + (size_t)N * D;   // [N, D] each
    float *xt = xn + (size_t)S * D, *qt = q + (size_t)S * D, *kt = k + (size_t)S * D, *vt = v + (size_t)S * D;
    const float *rc = f->rope_cos + (size_t)f->row0 * hd, *rs = f->rope_sin + (size_t)f->row0 * hd;
    modulated_layernorm(xn, hb, S, D, mv, mv + D);                                       // [S, D]
    modulated_layernorm(xt, tb, nt, D, mt, mt + D);                                      // [nt, D]
    linear(m, xn, S, &bw->q, q);
    linear(m, xn, S, &bw->k, k);
    linear(m, xn, S, &bw->v, v);
    linear(m, xt, nt, &bw->add_q, qt);
    linear(m, xt, nt, &bw->add_k, kt);
    linear(m, xt, nt, &bw->add_v, vt);
    cvx_rmsnorm(q, q, S * heads, hd, bw->norm_q, HV15_EPS);                              // per head
    cvx_rmsnorm(k, k, S * heads, hd, bw->norm_k, HV15_EPS);
    cvx_rmsnorm(qt, qt, nt * heads, hd, bw->norm_added_q, HV15_EPS);
    cvx_rmsnorm(kt, kt, nt * heads, hd, bw->norm_added_k, HV15_EPS);
    cvx_rope_interleaved(q, S, heads, hd, D, rc, rs);
    cvx_rope_interleaved(k, S, heads, hd, D, rc, rs);
    if (m->sp) joint_attention_sp(m, f, q, k, v, nt, f->n_valid[b]);                    // [N, D]
    else attention_prefix(m, q, k, v, N, nv, 0, q);                                      // [N, D]
    linear(m, q, S, &bw->o, xn);                                                         // [S, D]
    gated_residual(hb, xn, S, D, mv + 2 * D);
    linear(m, qt, nt, &bw->add_o, xt);                                                   // [nt, D]
    gated_residual(tb, xt, nt, D, mt + 2 * D);
    feed_forward(m, &bw->ff1, &bw->ff2, hb, S, mv + 3 * D);
    feed_forward(m, &bw->ffc1, &bw->ffc2, tb, nt, mt + 3 * D);
    free(mv);
}

/* ------------------------------------------------------------------ forward */

static int all_zero(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0.0f) return 0;
    return 1;
}

int hv15_forward_embed(hv15_transformer *m, const float *x, int B, int F, int H, int W, const hv15_cond *in,
                       hv15_fwd *f) {
    const hv15_config *c = &m->c;
    int D = c->num_attention_heads * c->attention_head_dim, p = c->patch_size, pt = c->patch_size_t;
    memset(f, 0, sizeof *f);
    if (B <= 0 || F <= 0 || H <= 0 || W <= 0)
        return cvx_error("transformer: bad sizes B=%d F=%d H=%d W=%d", B, F, H, W);
    if (F % pt || H % p || W % p)
        return cvx_error("transformer: latent size %dx%dx%d (F×H×W) must be a multiple of the patch size [%d, %d, %d]",
                         F, H, W, pt, p, p);
    if (!in || !in->text || !in->text_mask || in->L <= 0 || !in->timestep)
        return cvx_error("transformer: the MLLM text embeddings, their mask and the timestep are required");
    if (in->L2 < 0 || (in->L2 > 0 && (!in->text2 || !in->text2_mask)) || in->L_img < 0 ||
        (in->image && in->L_img <= 0))
        return cvx_error("transformer: bad conditioning sizes L2=%d L_img=%d", in->L2, in->L_img);
    int pf = F / pt, ph = H / p, pw = W / p, S = pf * ph * pw, L = in->L, L2 = in->L2, Li = in->L_img;
    int Lt = Li + L2 + L;
    if (m->sp && (B != 1 || S < cvx_dist_size(m->sp)))
        return cvx_error("transformer: sequence parallelism runs one batch element of at least %d video tokens per "
                         "forward (got B=%d, %d tokens)", cvx_dist_size(m->sp), B, S);
    *f = (hv15_fwd){.B = B, .F = F, .H = H, .W = W, .pf = pf, .ph = ph, .pw = pw, .S = S, .D = D, .Lt = Lt,
                    .row0 = 0, .nrows = S};
    if (m->sp) {
        int64_t lo, hi;
        cvx_dist_split_range(S, cvx_dist_size(m->sp), cvx_dist_rank(m->sp), &lo, &hi);
        f->row0 = (int)lo, f->nrows = (int)(hi - lo);
    }
    f->t2v = !in->image || all_zero(in->image, (size_t)B * Li * c->image_embed_dim);
    f->t_start = cvx_time();

    float *mllm = cvx_alloc_f32((size_t)B * L * D);                                      // [B, L, D]
    if (hv15_token_refiner(m, in->text, in->text_mask, B, L, in->timestep, mllm)) {
        free(mllm);
        return -1;
    }
    f->temb = cvx_malloc(sizeof(float) * (size_t)B * D);                                 // [B, D]
    hv15_time_embed(m, in->timestep, B, f->temb);
    f->h = cvx_alloc_f32((size_t)B * S * D);                                             // [B, S, D]
    size_t per_in = (size_t)c->in_channels * F * H * W;
    for (int b = 0; b < B; b++) patch_embedding(m, x + b * per_in, f, f->h + (size_t)b * S * D);
    f->rope_cos = cvx_alloc_f32((size_t)S * c->attention_head_dim);
    f->rope_sin = cvx_alloc_f32((size_t)S * c->attention_head_dim);
    hv15_rope_tables(c, F, H, W, f->rope_cos, f->rope_sin);

    /* the three conditioning streams with their cond_type_embed rows (0 MLLM, 1 ByT5, 2 image);
     * T2V: image tokens · 0 + row 2 */
    float *byt5 = cvx_alloc_f32((size_t)B * L2 * D + 1), *img = cvx_alloc_f32((size_t)B * Li * D + 1);
    if (L2) hv15_byt5_projection(m, in->text2, B * L2, byt5);                           // [B, L2, D]
    if (Li && !f->t2v) hv15_image_projection(m, in->image, B * Li, img);                // [B, Li, D]
    else memset(img, 0, sizeof(float) * (size_t)B * Li * D);
    for (size_t r = 0; r < (size_t)B * L; r++) cvx_add(mllm + r * D, m->cond_type, (size_t)D);
    for (size_t r = 0; r < (size_t)B * L2; r++) cvx_add(byt5 + r * D, m->cond_type + D, (size_t)D);
    for (size_t r = 0; r < (size_t)B * Li; r++) cvx_add(img + r * D, m->cond_type + 2 * D, (size_t)D);
    f->txt = cvx_alloc_f32((size_t)B * Lt * D);                                          // [B, Lt, D]
    f->n_valid = cvx_malloc(sizeof(int) * (size_t)B);
    for (int b = 0; b < B; b++)
        f->n_valid[b] = reorder_text(D, img + (size_t)b * Li * D, Li, !f->t2v, byt5 + (size_t)b * L2 * D,
                                     L2 ? in->text2_mask + (size_t)b * L2 : NULL, L2, mllm + (size_t)b * L * D,
                                     in->text_mask + (size_t)b * L, L, f->txt + (size_t)b * Lt * D);
    free(mllm); free(byt5); free(img);
    return 0;
}

void hv15_forward_blocks(hv15_transformer *m, hv15_fwd *f, int first, int count) {
    CVX_CHECK(first >= 0 && count >= 0 && first + count <= m->c.num_layers);
    for (int i = first; i < first + count; i++)
        for (int b = 0; b < f->B; b++) hv15_block_forward(m, &m->blocks[i], f, b);
}

/* proj_out rows tok [S, P] → out [C, F, H, W]: feature ((c·pt + it)·p + ih)·p + iw of token
 * (f, y, x) → out[c, f·pt + it, y·p + ih, x·p + iw]. */
static void unpatchify(const hv15_config *c, const float *tok, const hv15_fwd *f, float *out) {
    int p = c->patch_size, pt = c->patch_size_t, Co = c->out_channels, P = Co * pt * p * p;
#pragma omp parallel for collapse(2) schedule(static)
    for (int t = 0; t < f->pf; t++)
        for (int yy = 0; yy < f->ph; yy++)
            for (int xx = 0; xx < f->pw; xx++) {
                const float *row = tok + (((size_t)t * f->ph + yy) * f->pw + xx) * P;
                for (int ch = 0; ch < Co; ch++)
                    for (int it = 0; it < pt; it++)
                        for (int ih = 0; ih < p; ih++)
                            for (int iw = 0; iw < p; iw++)
                                out[(((size_t)ch * f->F + t * pt + it) * f->H + yy * p + ih) * f->W + xx * p + iw] =
                                    row[((ch * pt + it) * p + ih) * p + iw];
            }
}

/* Sequence parallelism: every rank's proj_out rows [its rows, P] to every rank → tok [S, P]. */
static void sp_gather_rows(hv15_transformer *m, const hv15_fwd *f, const float *mine, float *tok, int P) {
    int p = cvx_dist_size(m->sp);
    size_t *plan = cvx_malloc(4 * (size_t)p * sizeof *plan);
    size_t *sc = plan, *sd = plan + p, *rc = plan + 2 * p, *rd = plan + 3 * p;   /* counts, offsets (floats) */
    for (int j = 0; j < p; j++) {
        int64_t lo, hi;
        cvx_dist_split_range(f->S, p, j, &lo, &hi);
        sc[j] = (size_t)f->nrows * P, sd[j] = 0;
        rc[j] = (size_t)(hi - lo) * P, rd[j] = (size_t)lo * P;
    }
    if (cvx_dist_alltoallv_f32(m->sp, mine, sc, sd, tok, rc, rd)) cvx_dist_die_last_error(m->sp);
    free(plan);
}

/* norm_out (AdaLayerNormContinuous: (scale, shift) = linear(SiLU(temb)), scale first), proj_out,
 * unpatchify. */
void hv15_forward_finalize(hv15_transformer *m, hv15_fwd *f, float *out) {
    const hv15_config *c = &m->c;
    int D = f->D, S = f->S, P = c->out_channels * c->patch_size_t * c->patch_size * c->patch_size;
    size_t per = (size_t)c->out_channels * f->F * f->H * f->W;
    float *e = cvx_malloc(sizeof(float) * 2 * (size_t)D), *y = cvx_alloc_f32((size_t)S * (D + P));
    float *tok = cvx_alloc_f32((size_t)S * P);
    for (int b = 0; b < f->B; b++) {
        const int nr = f->nrows;
        float *mine = m->sp ? y + (size_t)nr * D : tok;                                  // [nr, P]
        modulation(m, f->temb + (size_t)b * D, D, &m->norm_out, e);                      // [scale | shift]
        modulated_layernorm(y, f->h + ((size_t)b * S + f->row0) * D, nr, D, e + D, e);
        linear(m, y, nr, &m->proj_out, mine);
        if (m->sp) sp_gather_rows(m, f, mine, tok, P);                                   // [S, P]
        unpatchify(c, tok, f, out + (size_t)b * per);
    }
    free(e); free(y); free(tok);
    m->stats.t_total += cvx_time() - f->t_start;
    hv15_forward_abort(f);
}

void hv15_forward_abort(hv15_fwd *f) {
    free(f->h); free(f->txt); free(f->temb); free(f->rope_cos); free(f->rope_sin); free(f->n_valid);
    f->h = f->txt = f->temb = f->rope_cos = f->rope_sin = NULL;
    f->n_valid = NULL;
}

int hv15_forward(hv15_transformer *m, const float *x, int B, int F, int H, int W, const hv15_cond *cond, float *out) {
    hv15_fwd f;
    if (hv15_forward_embed(m, x, B, F, H, W, cond, &f)) return -1;
    hv15_forward_blocks(m, &f, 0, m->c.num_layers);
    hv15_forward_finalize(m, &f, out);
    return 0;
}

int hv15_sp_check(const hv15_config *c, int sp) {
    if (sp > 1 && c->num_attention_heads % sp)
        return cvx_error("--sp %d: must divide the %d attention heads of this model (sequence parallelism splits the "
                         "heads between the ranks)", sp, c->num_attention_heads);
    return 0;
}

int hv15_set_sp(hv15_transformer *m, struct cvx_dist *sp) {
    int p = sp ? cvx_dist_size(sp) : 1;
    if (hv15_sp_check(&m->c, p)) return -1;
    m->sp = p > 1 ? sp : NULL;
    return 0;
}
