/* WanTransformer3DModel forward (diffusers 0.33.1 transformer_wan.py; the per-token timesteps
 * of 0.35.2 for Wan 2.2 TI2V), f32 compute over mmapped weights; config and weights in
 * stage2/wan_load.c.
 *
 * Layout: the residual stream is h[B, S, D] over the video tokens only (text and image
 * embeddings enter through cross-attention). Every block runs one batch element at a time:
 * self-attention needs q, k, v [S, D] of the element; the row-wise parts (modulated norms,
 * projections, cross-attention, feed-forward) run in pieces of f->chunk rows or more, whatever
 * fits the scratch. Under Ulysses sequence parallelism a rank holds its token range of the one
 * element and only self-attention sees all tokens (of heads/sp heads).
 *
 * Timesteps: one per element (Wan 2.1, A14B), or one per token (Wan 2.2 TI2V's expand_timesteps:
 * upstream embeds all B·S of them, temb [B, S, D], timestep_proj [B, S, 6D]). Per-token
 * timesteps take a few distinct values (0 on an image-conditioned first frame, t elsewhere), so
 * the embedding runs once per distinct value and every token points at its row: the same
 * numbers per token as upstream's, with U rows of [6D] instead of S. */
#include "wan_internal.h"

#include "dist.h"
#include "error.h"
#include "gemm.h"
#include "ops.h"
#include "stage2/cogvideox_rope.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* nn.Linear through cvx_linear (at the context's precision), timed. */
static void linear(wan_transformer *m, const float *x, int M, int K, const cvx_tensor *W, const cvx_tensor *b,
                   float *y) {
    double t0 = cvx_time();
    cvx_linear(m->ctx, x, M, K, W, b, y);
    m->stats.t_linear += cvx_time() - t0;
    m->stats.flop_linear += 2.0 * M * K * (double)W->shape[0];
}

/* The same in f32 whatever the context's precision: upstream keeps time_embedder in f32
 * (_keep_in_fp32_modules). */
static void linear_f32(wan_transformer *m, const float *x, int M, int K, const cvx_tensor *W, const cvx_tensor *b,
                       float *y) {
    cvx_precision p = m->ctx->precision;
    m->ctx->precision = CVX_PRECISION_F32;
    linear(m, x, M, K, W, b, y);
    m->ctx->precision = p;
}

static float *grow(float **buf, size_t *cap, size_t n) {
    if (*cap < n) {
        free(*buf);
        *buf = cvx_alloc_f32(n);
        *cap = n;
    }
    return *buf;
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* ------------------------------------------------------------------ embeddings */

/* WanTimeTextImageEmbedding, time part: Timesteps(freq_dim, flip_sin_to_cos) = [cos | sin],
 * time_embedder (linear_1, SiLU, linear_2) → temb [B, D]; time_proj(SiLU(temb)) → tproj [B, 6D]. */
static void wan_time_embedding(wan_transformer *m, const float *t, int B, float *temb, float *tproj) {
    const wan_config *c = &m->c;
    int D = c->num_attention_heads * c->attention_head_dim, Fq = c->freq_dim;
    float *sinus = cvx_malloc(sizeof(float) * (size_t)B * Fq), *t1 = cvx_malloc(sizeof(float) * (size_t)B * D);
    cvx_timestep_sinusoid(sinus, t, B, Fq, 1, 0.0);                                // [B, Fq]
    linear_f32(m, sinus, B, Fq, m->time1_w, m->time1_b, t1);                             // [B, D]
    cvx_silu(t1, (size_t)B * D);
    linear_f32(m, t1, B, D, m->time2_w, m->time2_b, temb);                               // [B, D]
    memcpy(t1, temb, sizeof(float) * (size_t)B * D);
    cvx_silu(t1, (size_t)B * D);
    linear(m, t1, B, D, m->tproj_w, m->tproj_b, tproj);                                  // [B, 6D]
    free(sinus);
    free(t1);
}

/* PixArtAlphaTextProjection: linear_2(gelu_tanh(linear_1(text))) on every row (rows past the
 * prompt are zeros and become one constant vector, as upstream). ctx [rows, D]. */
static void wan_text_embedding(wan_transformer *m, const float *text, int rows, float *ctx) {
    int D = m->c.num_attention_heads * m->c.attention_head_dim;
    float *u = cvx_alloc_f32((size_t)rows * D);
    linear(m, text, rows, m->c.text_dim, m->text1_w, m->text1_b, u);                     // [rows, D]
    cvx_gelu_tanh(u, (size_t)rows * D);
    linear(m, u, rows, D, m->text2_w, m->text2_b, ctx);                                  // [rows, D]
    free(u);
}

/* WanImageEmbedding (I2V): FP32LayerNorm (eps 1e-5, affine) → Linear → GELU → Linear →
 * FP32LayerNorm. img [rows, image_dim] → ctx [rows, D]. */
static void wan_image_embedding(wan_transformer *m, const float *img, int rows, float *ctx) {
    int D = m->c.num_attention_heads * m->c.attention_head_dim, I = m->c.image_dim;
    float *a = cvx_alloc_f32((size_t)rows * I), *u = cvx_alloc_f32((size_t)rows * I);
    cvx_layernorm(a, img, rows, I, m->img_norm1_w, m->img_norm1_b, 1e-5f);              // [rows, I]
    linear(m, a, rows, I, m->img_ff1_w, m->img_ff1_b, u);                                // [rows, I]
    cvx_gelu_erf(u, (size_t)rows * I);
    linear(m, u, rows, I, m->img_ff2_w, m->img_ff2_b, ctx);                              // [rows, D]
    cvx_layernorm(ctx, ctx, rows, D, m->img_norm2_w, m->img_norm2_b, 1e-5f);
    free(a);
    free(u);
}

/* patch_embedding: Conv3d(C, D, k = stride = (pt, ph, pw)) as one GEMM per batch element:
 * token (f, y, x) gets feature ((c·pt + it)·ph + ih)·pw + iw = x[b, c, f·pt + it, y·ph + ih,
 * x·pw + iw]. h [B, S, D]; patches: scratch of S·Kp floats. */
static void wan_patch_embedding(wan_transformer *m, const float *x, const wan_fwd *f, float *patches) {
    const wan_config *c = &m->c;
    int C = c->in_channels, pt = c->patch_t, ph = c->patch_h, pw = c->patch_w, D = f->D;
    int Kp = C * pt * ph * pw, F = f->F, H = f->H, W = f->W;
    for (int b = 0; b < f->B; b++) {
        const float *xb = x + (size_t)b * C * F * H * W;                                  // [C, F, H, W]
#pragma omp parallel for collapse(2) schedule(static)
        for (int t = 0; t < f->pf; t++)
            for (int yy = 0; yy < f->ph; yy++)
                for (int xx = 0; xx < f->pw; xx++) {
                    float *row = patches + (((size_t)t * f->ph + yy) * f->pw + xx) * Kp;    // [Kp]
                    for (int ch = 0; ch < C; ch++)
                        for (int it = 0; it < pt; it++)
                            for (int ih = 0; ih < ph; ih++)
                                for (int iw = 0; iw < pw; iw++)
                                    row[((ch * pt + it) * ph + ih) * pw + iw] =
                                        xb[(((size_t)ch * F + t * pt + it) * H + yy * ph + ih) * W + xx * pw + iw];
                }
        linear(m, patches, f->S, Kp, &m->patch_w, m->patch_b, f->h + (size_t)b * f->S * D);   // [S, D]
    }
}

/* ------------------------------------------------------------------ block pieces */

/* The modulation of one element's tokens: token s reads the row mods + row(s)·stride holding
 * [shift | scale | gate | c_shift | c_scale | c_gate] (blocks, stride 6D) or [shift | scale]
 * (output head, 2D); row(s) = idx[s] with per-token timesteps, else 0 for every token. */
typedef struct {
    const float *mods;
    const int *idx;      /* [S] of the element, or NULL */
    size_t stride;
} wan_mod;

static inline const float *mod_row(const wan_mod *md, size_t tok) {
    return md->idx ? md->mods + (size_t)md->idx[tok] * md->stride : md->mods;
}

/* LN(x) (no affine) · (1 + scale) + shift over rows [n, D] holding tokens tok0 .. tok0 + n − 1
 * (FP32LayerNorm then the modulation); shift / scale: parts ks / kc of each token's row. */
static void modulated_layernorm(float *y, const float *x, int n, int D, const wan_mod *md, size_t tok0, int ks, int kc,
                                float eps) {
    cvx_layernorm(y, x, n, D, NULL, NULL, eps);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *mr = mod_row(md, tok0 + (size_t)i), *shift = mr + (size_t)ks * D, *scale = mr + (size_t)kc * D;
        float *yr = y + (size_t)i * D;
        for (int k = 0; k < D; k++) yr[k] = yr[k] * (1.0f + scale[k]) + shift[k];
    }
}

/* h += y · gate over rows [n, D] of tokens tok0 .. (gate: part kg of each token's row). */
static void gated_residual(float *h, const float *y, int n, int D, const wan_mod *md, size_t tok0, int kg) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *gate = mod_row(md, tok0 + (size_t)i) + (size_t)kg * D;
        float *hr = h + (size_t)i * D;
        const float *yr = y + (size_t)i * D;
        for (int k = 0; k < D; k++) hr[k] = hr[k] + yr[k] * gate[k];
    }
}

/* RoPE on rows [n, D] holding tokens s0 .. s0 + n − 1 of the grid: each head vector read as
 * complex pairs x[2j] + i·x[2j+1], multiplied by e^{iθ_j} in float64 and rounded to f32
 * (upstream's view_as_complex product); θ_j from the t, h or w table by j's part. */
static void wan_rope(const wan_transformer *m, float *x, int n, size_t s0, const wan_fwd *f) {
    int heads = m->c.num_attention_heads, hd = m->c.attention_head_dim, half = hd / 2, D = f->D, ct, ch, cw;
    wan_rope_split(hd, &ct, &ch, &cw);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        size_t s = s0 + (size_t)i;
        int pos[3] = {(int)(s / ((size_t)f->ph * f->pw)), (int)(s / f->pw % f->ph), (int)(s % f->pw)};
        float *row = x + (size_t)i * D;
        for (int j = 0; j < half; j++) {
            size_t at = (size_t)pos[j < ct ? 0 : j < ct + ch ? 1 : 2] * half + j;
            double c = m->rope_cos[at], sn = m->rope_sin[at];
            for (int hh = 0; hh < heads; hh++) {
                float *v = row + (size_t)hh * hd + 2 * j;
                double a = v[0], b = v[1];
                v[0] = (float)(a * c - b * sn);
                v[1] = (float)(a * sn + b * c);
            }
        }
    }
}

/* softmax(q kᵀ/√hd) v for `heads` heads of rows with stride ld: q [Sq, ld], k, v [Skv, ld] → out. */
static void attention(wan_transformer *m, const float *q, const float *k, const float *v, int Sq, int Skv, int heads,
                      int ld, float *out) {
    int hd = m->c.attention_head_dim;
    double t0 = cvx_time(), flop = 4.0 * Sq * (double)Skv * heads * hd;
    cvx_attention_transformer(m->ctx, q, ld, k, v, ld, out, ld, Sq, Skv, heads, hd, (float)(1.0 / sqrt((double)hd)), NULL);
    m->stats.t_attention += cvx_time() - t0;
    m->stats.flop_attention += flop;
    cvx_flops_add(m->ctx, flop);
}

/* attn1's core on this process's rows of one element, q, k, v [rows, D] (normed, rotated):
 * all S rows at once, or under sequence parallelism q, k, v to head shards [S, D/sp], the core,
 * and the output back to the rows. Output in q. A failed exchange stops the run. */
static void wan_self_attention_core(wan_transformer *m, float *q, float *k, float *v, const wan_fwd *f) {
    int heads = m->c.num_attention_heads, hd = m->c.attention_head_dim, D = f->D, S = f->S;
    if (!m->sp) { attention(m, q, k, v, S, S, heads, D, q); return; }
    int p = cvx_dist_size(m->sp), Dh = heads / p * hd;
    float *qh = m->sp_buf, *kh = qh + (size_t)S * Dh, *vh = kh + (size_t)S * Dh;          // [S, Dh] each
    double t0 = cvx_time();
    if (cvx_dist_seq_to_heads(m->sp, q, qh, S, heads, hd) || cvx_dist_seq_to_heads(m->sp, k, kh, S, heads, hd) ||
        cvx_dist_seq_to_heads(m->sp, v, vh, S, heads, hd))
        cvx_dist_die_last_error(m->sp);
    m->stats.t_comm += cvx_time() - t0;
    attention(m, qh, kh, vh, S, S, heads / p, Dh, qh);                                    // qh: [S, Dh]
    t0 = cvx_time();
    if (cvx_dist_heads_to_seq(m->sp, qh, q, S, heads, hd)) cvx_dist_die_last_error(m->sp);   // q: [rows, D]
    m->stats.t_comm += cvx_time() - t0;
    m->stats.bytes_sent += 4.0 * (3.0 * (double)f->nrows * (D - Dh) + (double)(S - (double)f->nrows) * Dh);
}

/* 1. Self-attention of one element on its rows hb [rows, D]: n = LN(x)(1 + scale) + shift;
 * q, k, v = to_q/k/v(n); RMSNorm over D on q and k; RoPE; attention; h += to_out(·)·gate.
 * mod: scale_shift_table + timestep_proj per token. */
static void wan_self_attention(wan_transformer *m, const wan_attn_weights *a, const wan_fwd *f, float *hb,
                               const wan_mod *mod) {
    int D = f->D, rows = (int)f->nrows;
    size_t cr = min_sz(f->chunk, (size_t)rows);
    float eps = (float)m->c.eps;
    float *q = f->ws, *k = q + (size_t)rows * D, *v = k + (size_t)rows * D, *xc = v + (size_t)rows * D;  // + [cr, D]
    for (size_t i = 0; i < (size_t)rows; i += cr) {
        int n = (int)min_sz(cr, (size_t)rows - i);
        modulated_layernorm(xc, hb + i * D, n, D, mod, f->row0 + i, 0, 1, eps);
        linear(m, xc, n, D, a->q_w, a->q_b, q + i * D);                                  // [n, D]
        linear(m, xc, n, D, a->k_w, a->k_b, k + i * D);
        linear(m, xc, n, D, a->v_w, a->v_b, v + i * D);
    }
    cvx_rmsnorm(q, q, rows, D, a->norm_q, eps);                                          // across heads
    cvx_rmsnorm(k, k, rows, D, a->norm_k, eps);
    wan_rope(m, q, rows, f->row0, f);
    wan_rope(m, k, rows, f->row0, f);
    wan_self_attention_core(m, q, k, v, f);                                              // q: [rows, D]
    for (size_t i = 0; i < (size_t)rows; i += cr) {
        int n = (int)min_sz(cr, (size_t)rows - i);
        linear(m, q + i * D, n, D, a->o_w, a->o_b, xc);                                  // [n, D]
        gated_residual(hb + i * D, xc, n, D, mod, f->row0 + i, 2);
    }
}

/* 2. Cross-attention of one element (no gate): n = norm2(x) (LayerNorm with affine, or x);
 * q = RMSNorm(to_q(n)); keys/values of the projected text (RMSNorm on k); I2V adds a second
 * attention over the image tokens (add_k_proj, norm_added_k, add_v_proj): h += to_out(a_txt + a_img). */
static void wan_cross_attention(wan_transformer *m, const wan_block_weights *bw, const wan_fwd *f, int b, float *hb) {
    const wan_attn_weights *a = &bw->attn2;
    int D = f->D, rows = (int)f->nrows, L = f->L, Li = f->ctx_img ? f->L_img : 0, heads = m->c.num_attention_heads;
    float eps = (float)m->c.eps;
    float *kt = f->ws, *vt = kt + (size_t)L * D, *ki = vt + (size_t)L * D, *vi = ki + (size_t)Li * D;   // [L|Li, D]
    float *x = vi + (size_t)Li * D;
    size_t cr = min_sz((f->ws_floats - 2 * (size_t)(L + Li) * D) / (3 * (size_t)D), (size_t)rows);
    if (m->chunk_rows) cr = min_sz(cr, f->chunk);
    float *q = x + cr * D, *oi = q + cr * D;                                             // [cr, D] each
    const float *txt = f->ctx_txt + (size_t)b * L * D;
    linear(m, txt, L, D, a->k_w, a->k_b, kt);                                            // [L, D]
    cvx_rmsnorm(kt, kt, L, D, a->norm_k, eps);
    linear(m, txt, L, D, a->v_w, a->v_b, vt);
    if (Li) {
        const float *img = f->ctx_img + (size_t)b * Li * D;
        linear(m, img, Li, D, bw->add_k_w, bw->add_k_b, ki);                             // [Li, D]
        cvx_rmsnorm(ki, ki, Li, D, bw->norm_added_k, eps);
        linear(m, img, Li, D, bw->add_v_w, bw->add_v_b, vi);
    }
    for (size_t i = 0; i < (size_t)rows; i += cr) {
        int n = (int)min_sz(cr, (size_t)rows - i);
        if (bw->norm2_w) cvx_layernorm(x, hb + i * D, n, D, bw->norm2_w, bw->norm2_b, eps);
        else memcpy(x, hb + i * D, sizeof(float) * (size_t)n * D);
        linear(m, x, n, D, a->q_w, a->q_b, q);                                           // [n, D]
        cvx_rmsnorm(q, q, n, D, a->norm_q, eps);
        if (Li) attention(m, q, ki, vi, n, Li, heads, D, oi);                            // [n, D]
        attention(m, q, kt, vt, n, L, heads, D, q);
        if (Li) cvx_add(q, oi, (size_t)n * D);
        linear(m, q, n, D, a->o_w, a->o_b, x);                                           // [n, D]
        cvx_add(hb + i * D, x, (size_t)n * D);
    }
}

/* 3. Feed-forward of one element: n = LN(x)(1 + c_scale) + c_shift; ffn.net.2(gelu_tanh(
 * ffn.net.0.proj(n))); h += ·c_gate. */
static void wan_feed_forward(wan_transformer *m, const wan_block_weights *bw, const wan_fwd *f, float *hb,
                             const wan_mod *mod) {
    int D = f->D, Fd = m->c.ffn_dim, rows = (int)f->nrows;
    size_t cr = min_sz(f->ws_floats / ((size_t)D + Fd), (size_t)rows);
    if (m->chunk_rows) cr = min_sz(cr, f->chunk);
    float *x = f->ws, *u = x + cr * D;                                                   // [cr, D], [cr, Fd]
    for (size_t i = 0; i < (size_t)rows; i += cr) {
        int n = (int)min_sz(cr, (size_t)rows - i);
        modulated_layernorm(x, hb + i * D, n, D, mod, f->row0 + i, 3, 4, (float)m->c.eps);
        linear(m, x, n, D, bw->ffn1_w, bw->ffn1_b, u);                                   // [n, Fd]
        cvx_gelu_tanh(u, (size_t)n * Fd);
        linear(m, u, n, Fd, bw->ffn2_w, bw->ffn2_b, x);                                  // [n, D]
        gated_residual(hb + i * D, x, n, D, mod, f->row0 + i, 5);
    }
}

/* One WanTransformerBlock on the rows of every batch element this process holds. */
static void wan_block(wan_transformer *m, const wan_block_weights *bw, const wan_fwd *f) {
    const size_t D6 = 6 * (size_t)f->D;
    /* (shift, scale, gate, c_shift, c_scale, c_gate) = scale_shift_table + timestep_proj: per
     * element (row b), or per distinct per-token timestep (all U rows, tokens indexing them) */
    float *mods = cvx_malloc(sizeof(float) * (f->t_row ? (size_t)f->U : 1) * D6);
    if (f->t_row)
        for (size_t i = 0; i < (size_t)f->U * D6; i++) mods[i] = bw->sst[i % D6] + f->tproj[i];
    for (int b = 0; b < f->B; b++) {
        if (!f->t_row) {
            const float *tp = f->tproj + (size_t)b * D6;
            for (size_t i = 0; i < D6; i++) mods[i] = bw->sst[i] + tp[i];
        }
        const wan_mod mod = {mods, f->t_row ? f->t_row + (size_t)b * f->S : NULL, D6};
        float *hb = f->h + ((size_t)b * f->S + f->row0) * f->D;                          // [rows, D]
        wan_self_attention(m, &bw->attn1, f, hb, &mod);
        wan_cross_attention(m, bw, f, b, hb);
        wan_feed_forward(m, bw, f, hb, &mod);
    }
    free(mods);
}

/* ------------------------------------------------------------------ output */

/* proj_out rows tok [S, P] → out [C_out, F, H, W]: token (f, y, x), feature
 * ((it·ph + ih)·pw + iw)·C_out + c (channel innermost) → out[c, f·pt + it, y·ph + ih, x·pw + iw]. */
static void wan_unpatchify(const wan_config *c, const float *tok, const wan_fwd *f, float *out) {
    int pt = c->patch_t, ph = c->patch_h, pw = c->patch_w, Co = c->out_channels, P = Co * pt * ph * pw;
    int F = f->F, H = f->H, W = f->W;
#pragma omp parallel for collapse(2) schedule(static)
    for (int t = 0; t < f->pf; t++)
        for (int yy = 0; yy < f->ph; yy++)
            for (int xx = 0; xx < f->pw; xx++) {
                const float *row = tok + (((size_t)t * f->ph + yy) * f->pw + xx) * P;       // [P]
                for (int it = 0; it < pt; it++)
                    for (int ih = 0; ih < ph; ih++)
                        for (int iw = 0; iw < pw; iw++)
                            for (int ch = 0; ch < Co; ch++)
                                out[(((size_t)ch * F + t * pt + it) * H + yy * ph + ih) * W + xx * pw + iw] =
                                    row[((it * ph + ih) * pw + iw) * Co + ch];
            }
}

/* Sequence parallelism: every rank's proj_out rows [its rows, P] to every rank → tok [S, P]. */
static void sp_gather_rows(wan_transformer *m, const wan_fwd *f, const float *mine, float *tok, int P) {
    int p = cvx_dist_size(m->sp), r = cvx_dist_rank(m->sp);
    size_t *plan = cvx_malloc(4 * (size_t)p * sizeof *plan);
    size_t *sc = plan, *sd = plan + p, *rc = plan + 2 * p, *rd = plan + 3 * p;   /* counts, offsets (floats) */
    for (int j = 0; j < p; j++) {
        int64_t lo, hi;
        cvx_dist_split_range(f->S, p, j, &lo, &hi);
        sc[j] = f->nrows * (size_t)P, sd[j] = 0;
        rc[j] = (size_t)(hi - lo) * P, rd[j] = (size_t)lo * P;
    }
    double t0 = cvx_time();
    if (cvx_dist_alltoallv_f32(m->sp, mine, sc, sd, tok, rc, rd)) cvx_dist_die_last_error(m->sp);
    m->stats.t_comm += cvx_time() - t0;
    m->stats.bytes_sent += 4.0 * (double)sc[r] * (p - 1);
    free(plan);
}

/* ------------------------------------------------------------------ forward */

/* The model's scratch for f (again before each piece: another forward's embed may have grown it). */
static void wan_scratch(wan_transformer *m, wan_fwd *f) {
    f->ws = grow(&m->ws, &m->ws_cap, f->ws_floats);
    if (m->sp) grow(&m->sp_buf, &m->sp_cap, 3 * (size_t)f->S * (f->D / cvx_dist_size(m->sp)));   // q, k, v [S, D/sp]
}

/* Per-token timesteps ts[n] -> their distinct values vals[*U] (by bit pattern, in ascending bit
 * order) and row[i] = the index of ts[i] among them. */
typedef struct {
    uint32_t bits;
    int i;
} ts_key;

static int ts_key_cmp(const void *a, const void *b) {
    const ts_key *x = a, *y = b;
    return x->bits < y->bits ? -1 : x->bits > y->bits ? 1 : x->i - y->i;
}

static float *distinct_timesteps(const float *ts, size_t n, int *row, int *U) {
    ts_key *k = cvx_malloc(sizeof *k * n);
    for (size_t i = 0; i < n; i++) memcpy(&k[i].bits, &ts[i], sizeof(float)), k[i].i = (int)i;
    qsort(k, n, sizeof *k, ts_key_cmp);
    float *vals = cvx_malloc(sizeof(float) * n);
    int u = -1;
    for (size_t i = 0; i < n; i++) {
        if (!i || k[i].bits != k[i - 1].bits) u++, vals[u] = ts[k[i].i];
        row[k[i].i] = u;
    }
    free(k);
    *U = u + 1;
    return vals;
}

static int forward_embed(wan_transformer *m, const float *x, int B, int F, int H, int W, const float *text, int L,
                         const float *image, int L_img, const float *timestep, int per_token, wan_fwd *f) {
    const wan_config *c = &m->c;
    int D = c->num_attention_heads * c->attention_head_dim;
    memset(f, 0, sizeof *f);
    if (B <= 0 || F <= 0 || H <= 0 || W <= 0 || L <= 0)
        return cvx_error("transformer: bad sizes B=%d F=%d H=%d W=%d L=%d", B, F, H, W, L);
    if (F % c->patch_t || H % c->patch_h || W % c->patch_w)
        return cvx_error("transformer: latent size %dx%dx%d (F×H×W) must be a multiple of patch_size [%d, %d, %d]", F,
                         H, W, c->patch_t, c->patch_h, c->patch_w);
    int pf = F / c->patch_t, ph = H / c->patch_h, pw = W / c->patch_w;
    if (pf > c->rope_max_seq_len || ph > c->rope_max_seq_len || pw > c->rope_max_seq_len)
        return cvx_error("transformer: the patch grid %dx%dx%d exceeds rope_max_seq_len = %d positions per axis", pf,
                         ph, pw, c->rope_max_seq_len);
    if (c->image_dim && (!image || L_img <= 0))
        return cvx_error("transformer: this is an image-to-video model (image_dim %d): image embeddings are required",
                         c->image_dim);
    if (!c->image_dim && image)
        return cvx_error("transformer: this is a text-to-video model (image_dim null; Wan 2.2 image-to-video models take "
                         "the image as latent channels): it takes no image embeddings");
    if (m->sp && B != 1)
        return cvx_error("transformer: under sequence parallelism a forward takes one batch element, got %d", B);
    if (!c->image_dim) L_img = 0;

    int S = pf * ph * pw, P = c->out_channels * c->patch_t * c->patch_h * c->patch_w;
    int Kp = c->in_channels * c->patch_t * c->patch_h * c->patch_w;
    if (m->sp && S < cvx_dist_size(m->sp))
        return cvx_error("transformer: %d tokens cannot be shared by %d sequence-parallel ranks", S,
                         cvx_dist_size(m->sp));
    int64_t s0 = 0, s1 = S;
    if (m->sp) cvx_dist_split_range(S, cvx_dist_size(m->sp), cvx_dist_rank(m->sp), &s0, &s1);
    size_t rows = (size_t)(s1 - s0), chunk = (rows + 3) / 4;
    if (chunk < 256) chunk = 256;
    if (m->chunk_rows > 0) chunk = (size_t)m->chunk_rows;
    chunk = min_sz(chunk, rows);
    /* scratch: attn1 q, k, v [rows, D] + a chunk; attn2 text/image k, v + 3 chunks; the
     * feed-forward [chunk, D + ffn]; patches [S, Kp]; the output's rows and [S, P] */
    size_t ws = (3 * rows + chunk) * D, need[4] = {2 * (size_t)(L + L_img) * D + 3 * chunk * D,
                                                  chunk * ((size_t)D + c->ffn_dim), (size_t)S * Kp,
                                                  rows * ((size_t)D + P) + (size_t)S * P};
    for (int i = 0; i < 4; i++) if (need[i] > ws) ws = need[i];
    *f = (wan_fwd){.B = B, .F = F, .H = H, .W = W, .L = L, .L_img = L_img, .pf = pf, .ph = ph, .pw = pw, .S = S,
                   .D = D, .ws_floats = ws, .chunk = chunk, .row0 = (size_t)s0, .nrows = rows};
    f->h = grow(&m->h, &m->h_cap, (size_t)B * S * D);                                    // [B, S, D]
    wan_scratch(m, f);

    f->t_start = cvx_time();
    const float *ts = timestep;   /* the timesteps embedded: one per element, or the distinct per-token ones */
    float *vals = NULL;
    f->U = B;
    if (per_token) {
        for (size_t i = 0; i < (size_t)B * S; i++)
            if (!isfinite(timestep[i]))
                return cvx_error("transformer: per-token timestep [%zu, %zu] = %g, expected a finite number",
                                 i / (size_t)S, i % (size_t)S, timestep[i]);
        f->t_row = cvx_malloc(sizeof(int) * (size_t)B * S);                              // [B, S]
        ts = vals = distinct_timesteps(timestep, (size_t)B * S, f->t_row, &f->U);
    }
    f->temb = cvx_malloc(sizeof(float) * (size_t)f->U * D);                              // [U, D]
    f->tproj = cvx_malloc(sizeof(float) * (size_t)f->U * 6 * D);                         // [U, 6, D]
    f->ctx_txt = cvx_alloc_f32((size_t)B * L * D);                                       // [B, L, D]
    wan_time_embedding(m, ts, f->U, f->temb, f->tproj);
    free(vals);
    wan_text_embedding(m, text, B * L, f->ctx_txt);
    if (L_img) {
        f->ctx_img = cvx_alloc_f32((size_t)B * L_img * D);                               // [B, L_img, D]
        wan_image_embedding(m, image, B * L_img, f->ctx_img);
    }
    wan_patch_embedding(m, x, f, f->ws);
    return 0;
}

int wan_forward_embed(wan_transformer *m, const float *x, int B, int F, int H, int W, const float *text, int L,
                      const float *image, int L_img, const float *timestep, wan_fwd *f) {
    return forward_embed(m, x, B, F, H, W, text, L, image, L_img, timestep, 0, f);
}

int wan_forward_embed_per_token(wan_transformer *m, const float *x, int B, int F, int H, int W, const float *text,
                                int L, const float *image, int L_img, const float *timestep, wan_fwd *f) {
    return forward_embed(m, x, B, F, H, W, text, L, image, L_img, timestep, 1, f);
}

void wan_forward_blocks(wan_transformer *m, wan_fwd *f, int first, int count) {
    CVX_CHECK(first >= 0 && count >= 0 && first + count <= m->c.num_layers);
    wan_scratch(m, f);
    for (int i = first; i < first + count; i++) wan_block(m, &m->blocks[i], f);
}

/* Output: (shift, scale) = scale_shift_table[2, D] + temb (no SiLU; per element or per distinct
 * per-token timestep); LN(x)(1 + scale) + shift; proj_out; unpatchify. */
void wan_forward_finalize(wan_transformer *m, wan_fwd *f, float *out) {
    const wan_config *c = &m->c;
    int D = f->D, S = f->S, rows = (int)f->nrows, P = c->out_channels * c->patch_t * c->patch_h * c->patch_w;
    size_t per = (size_t)c->out_channels * f->F * f->H * f->W;
    wan_scratch(m, f);
    const int nm = f->t_row ? f->U : 1;
    float *y = f->ws, *mods = cvx_malloc(sizeof(float) * 2 * (size_t)D * nm);          // [nm, shift | scale]
    for (int b = 0; b < f->B; b++) {
        float *tok = y + (size_t)rows * D;
        for (int u = 0; u < nm; u++) {
            const float *te = f->temb + (size_t)(f->t_row ? u : b) * D;
            for (int k = 0; k < D; k++) {
                mods[(size_t)u * 2 * D + k] = m->sst_out[k] + te[k];
                mods[(size_t)u * 2 * D + D + k] = m->sst_out[D + k] + te[k];
            }
        }
        const wan_mod md = {mods, f->t_row ? f->t_row + (size_t)b * S : NULL, 2 * (size_t)D};
        modulated_layernorm(y, f->h + ((size_t)b * S + f->row0) * D, rows, D, &md, f->row0, 0, 1, (float)c->eps);
        if (m->sp) {   /* this rank's rows, then every rank's: the same prediction everywhere */
            float *mine = tok;
            tok = mine + (size_t)rows * P;
            linear(m, y, rows, D, m->proj_out_w, m->proj_out_b, mine);                   // [rows, P]
            sp_gather_rows(m, f, mine, tok, P);                                          // [S, P]
        } else {
            linear(m, y, rows, D, m->proj_out_w, m->proj_out_b, tok);                    // [S, P]
        }
        wan_unpatchify(c, tok, f, out + (size_t)b * per);
    }
    free(mods);
    m->stats.t_total += cvx_time() - f->t_start;
    wan_forward_abort(f);
}

void wan_forward_abort(wan_fwd *f) {
    free(f->temb);
    free(f->tproj);
    free(f->ctx_txt);
    free(f->ctx_img);
    free(f->t_row);
    f->temb = f->tproj = f->ctx_txt = f->ctx_img = NULL;
    f->t_row = NULL;
}

int wan_forward(wan_transformer *m, const float *x, int B, int F, int H, int W, const float *text, int L,
                const float *image, int L_img, const float *timestep, float *out) {
    wan_fwd f;
    if (wan_forward_embed(m, x, B, F, H, W, text, L, image, L_img, timestep, &f)) return -1;
    wan_forward_blocks(m, &f, 0, m->c.num_layers);
    wan_forward_finalize(m, &f, out);
    return 0;
}

int wan_forward_per_token(wan_transformer *m, const float *x, int B, int F, int H, int W, const float *text, int L,
                          const float *image, int L_img, const float *timestep, float *out) {
    wan_fwd f;
    if (wan_forward_embed_per_token(m, x, B, F, H, W, text, L, image, L_img, timestep, &f)) return -1;
    wan_forward_blocks(m, &f, 0, m->c.num_layers);
    wan_forward_finalize(m, &f, out);
    return 0;
}

int wan_expert_is_high_noise(int64_t t, double boundary_ratio, int num_train_timesteps) {
    return (float)t >= (float)(boundary_ratio * num_train_timesteps);   /* int64 tensor >= float: in float32 */
}

int wan_boundary_check(double boundary_ratio, const char *what) {
    if (!(boundary_ratio > 0.0 && boundary_ratio < 1.0))
        return cvx_error("%s: boundary_ratio = %g, expected a number in (0, 1) (the fraction of the training timesteps "
                         "above which the high-noise expert runs)", what, boundary_ratio);
    return 0;
}

void wan_ti2v_first_frame_mask(int F, int h, int w, float *m) {
    const size_t hw = (size_t)h * w;
    for (size_t i = 0; i < (size_t)F * hw; i++) m[i] = i < hw ? 0.0f : 1.0f;   /* ones, then [:, :, 0] = 0 */
}

void wan_ti2v_apply_condition(const float *latents, const float *condition, int C, int F, int h, int w, float *out) {
    const size_t hw = (size_t)h * w;
    for (int c = 0; c < C; c++)
        for (int f = 0; f < F; f++) {
            const float m = f ? 1.0f : 0.0f, *cond = condition + (size_t)c * hw;   /* condition [C, 1, h, w] */
            const float *lat = latents + ((size_t)c * F + f) * hw;
            float *o = out + ((size_t)c * F + f) * hw;
            for (size_t i = 0; i < hw; i++) o[i] = (1.0f - m) * cond[i] + m * lat[i];   /* literally, NaNs and -0 too */
        }
}

void wan_ti2v_timesteps(int64_t t, int F, int h, int w, float *ts) {
    const int hh = (h + 1) / 2, ww = (w + 1) / 2;   /* [:, ::2, ::2] */
    const float tf = (float)t;                      /* mask (f32) · int64 scalar -> f32 */
    for (size_t i = 0; i < (size_t)F * hh * ww; i++) ts[i] = (i < (size_t)hh * ww ? 0.0f : 1.0f) * tf;
}

int wan_sp_check(const wan_config *c, int sp) {
    if (sp > 1 && c->num_attention_heads % sp)
        return cvx_error("--sp %d: must divide the %d attention heads of this model (sequence parallelism splits "
                         "the heads between the ranks)", sp, c->num_attention_heads);
    return 0;
}

int wan_set_sp(wan_transformer *m, struct cvx_dist *sp) {
    int p = sp ? cvx_dist_size(sp) : 1;
    if (wan_sp_check(&m->c, p)) return -1;
    m->sp = p > 1 ? sp : NULL;
    return 0;
}
