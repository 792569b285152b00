/* Wan VAE blocks shared by the decoder and the encoder: WanRMS_norm, WanResidualBlock,
 * WanAttentionBlock, WanMidBlock (diffusers 0.33.1 autoencoder_kl_wan.py), on x[C, T, H, W]. */
#include "wan_vae.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gemm.h"
#include "ops.h"
#include "vecmath.h"

/* F.normalize's eps: the norm is clamped to at least this. */
#define NORMALIZE_EPS 1e-12f
/* Positions per parallel block of the channel reductions. */
#define RMS_BLOCK 512

/* The divisor of F.normalize(x, dim=channels) at positions s0 .. s0+n−1 of x[C, S]:
 * max(‖x[:, s]‖₂, eps), the sum of squares in double. */
static void channel_norms(const float *x, int C, size_t S, size_t s0, int n, float *d) {
    double acc[RMS_BLOCK];
    for (int i = 0; i < n; i++) acc[i] = 0.0;
    for (int c = 0; c < C; c++) {
        const float *xc = x + (size_t)c * S + s0;
        for (int i = 0; i < n; i++) acc[i] += (double)xc[i] * xc[i];
    }
    for (int i = 0; i < n; i++) {
        float v = (float)sqrt(acc[i]);
        d[i] = v < NORMALIZE_EPS ? NORMALIZE_EPS : v;
    }
}

void wan_rms_norm(const wan_rms_norm_w *nw, const float *x, size_t S, float *out, int silu) {
    const int C = nw->dim;
    const float scale = (float)sqrt((double)C);   /* dim**0.5, a Python float multiplied into f32 */
    float *g = cvx_tensor_f32_dup(nw->gamma);      // [C]
    const size_t nblk = (S + RMS_BLOCK - 1) / RMS_BLOCK;
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nblk; b++) {
        const size_t s0 = b * RMS_BLOCK;
        const int n = (int)(S - s0 < RMS_BLOCK ? S - s0 : RMS_BLOCK);
        float d[RMS_BLOCK];
        channel_norms(x, C, S, s0, n, d);
        for (int c = 0; c < C; c++) {
            const float *xc = x + (size_t)c * S + s0;
            float *oc = out + (size_t)c * S + s0;
            for (int i = 0; i < n; i++) oc[i] = xc[i] / d[i] * scale * g[c];   /* F.normalize(x) · scale · gamma */
            if (silu) cvx_silu_serial(oc, (size_t)n);
        }
    }
    free(g);
}

float *wan_resblock(const wan_resblock_w *r, vae_cache *cache, const float *x, int T, int H, int W) {
    const size_t S = (size_t)T * H * W;
    cvx_ctx *ctx = r->conv1.ctx;
    float *h = vae_fmap_get(ctx, (size_t)r->cin * S);                               // [Cin, T, H, W]
    wan_rms_norm(&r->norm1, x, S, h, 1);                                            // norm1 + SiLU
    float *h1 = vae_causal_conv3d_consume(&r->conv1, cache, h, T, H, W, NULL);      // [Cout, T, H, W]; frees h
    wan_rms_norm(&r->norm2, h1, S, h1, 1);                                          // norm2 + SiLU (dropout 0)
    float *h2 = vae_causal_conv3d_consume(&r->conv2, cache, h1, T, H, W, NULL);     // [Cout, T, H, W]; frees h1
    if (r->shortcut.w) {
        float *s = vae_fmap_get(ctx, (size_t)r->cout * S);                          // conv_shortcut(x)
        vae_conv1x1(&r->shortcut, x, S, s);
        cvx_add(h2, s, (size_t)r->cout * S);
        vae_fmap_put(ctx, s);
    } else {
        cvx_add(h2, x, (size_t)r->cout * S);
    }
    return h2;
}

void wan_attention_block(const wan_attn_w *a, cvx_ctx *ctx, float *x, int T, int H, int W) {
    const int C = a->dim, HW = H * W;
    const float scale = (float)(1.0 / sqrt((double)C));   /* scaled_dot_product_attention's default */
    float *n = vae_fmap_get(ctx, (size_t)C * HW);          // [C, HW]: the normed frame
    float *tok = vae_fmap_get(ctx, (size_t)HW * C);        // [HW, C]: tokens
    float *qkv = vae_fmap_get(ctx, (size_t)HW * 3 * C);    // [HW, 3C]: q | k | v per token
    float *o = vae_fmap_get(ctx, (size_t)HW * C);          // [HW, C]
    wan_rms_norm_w norm = a->norm;
    for (int t = 0; t < T; t++) {
        /* The frame's channels, norm over them (a frame is [C, HW] with row stride T·HW). */
        for (int c = 0; c < C; c++) memcpy(n + (size_t)c * HW, x + ((size_t)c * T + t) * HW, sizeof(float) * HW);
        wan_rms_norm(&norm, n, (size_t)HW, n, 0);
#pragma omp parallel for schedule(static)
        for (int s = 0; s < HW; s++)
            for (int c = 0; c < C; c++) tok[(size_t)s * C + c] = n[(size_t)c * HW + s];
        cvx_linear(ctx, tok, HW, C, &a->qkv_w, a->qkv_b, qkv);                       // to_qkv (1×1 conv)
        cvx_attention_ctx(ctx, qkv, 3 * C, qkv + C, qkv + 2 * C, 3 * C, o, C, HW, HW, 1, C, scale, NULL);
        cvx_linear(ctx, o, HW, C, &a->proj_w, a->proj_b, tok);                       // proj (1×1 conv)
#pragma omp parallel for schedule(static)
        for (int c = 0; c < C; c++) {                                                // + identity
            float *xc = x + ((size_t)c * T + t) * HW;
            for (int s = 0; s < HW; s++) xc[s] += tok[(size_t)s * C + c];
        }
    }
    vae_fmap_put(ctx, n), vae_fmap_put(ctx, tok), vae_fmap_put(ctx, qkv), vae_fmap_put(ctx, o);
}

float *wan_mid_block(const wan_mid_w *m, cvx_ctx *ctx, vae_cache *cache, float *x, int T, int H, int W) {
    float *y = wan_resblock(&m->res[0], cache, x, T, H, W);
    vae_fmap_put(ctx, x);
    wan_attention_block(&m->attn, ctx, y, T, H, W);
    x = wan_resblock(&m->res[1], cache, y, T, H, W);
    vae_fmap_put(ctx, y);
    return x;
}

/* ------------------------------------------------------------------ Wan 2.2: patches and shortcuts */

void wan_vae_patchify(const float *x, int C, int T, int H, int W, int p, float *y) {
    const int h = H / p, w = W / p;
#pragma omp parallel for collapse(2) schedule(static)
    for (int c = 0; c < C; c++)
        for (int t = 0; t < T; t++)
            for (int pw = 0; pw < p; pw++)
                for (int ph = 0; ph < p; ph++) {
                    float *yc = y + (((size_t)(c * p + pw) * p + ph) * T + t) * h * w;   // channel c·p² + pw·p + ph
                    const float *xc = x + ((size_t)c * T + t) * H * W;
                    for (int i = 0; i < h; i++)
                        for (int j = 0; j < w; j++) yc[(size_t)i * w + j] = xc[(size_t)(i * p + ph) * W + j * p + pw];
                }
}

void wan_vae_unpatchify(const float *y, int C, int T, int h, int w, int p, float *x) {
    const int H = h * p, W = w * p;
#pragma omp parallel for collapse(2) schedule(static)
    for (int c = 0; c < C; c++)
        for (int t = 0; t < T; t++)
            for (int pw = 0; pw < p; pw++)
                for (int ph = 0; ph < p; ph++) {
                    const float *yc = y + (((size_t)(c * p + pw) * p + ph) * T + t) * h * w;
                    float *xc = x + ((size_t)c * T + t) * H * W;
                    for (int i = 0; i < h; i++)
                        for (int j = 0; j < w; j++) xc[(size_t)(i * p + ph) * W + j * p + pw] = yc[(size_t)i * w + j];
                }
}

void wan_avg_down3d(const float *x, int cin, int cout, int ft, int fs, int T, int H, int W, float *y) {
    const int pad = (ft - T % ft) % ft, To = (T + pad) / ft, Ho = H / fs, Wo = W / fs;   /* zero frames in front */
    const int g = cin * ft * fs * fs / cout;                                               /* group_size */
    const size_t So = (size_t)To * Ho * Wo;                                                // y: [cout, To, Ho, Wo]
#pragma omp parallel for schedule(static)
    for (int o = 0; o < cout; o++) {
        float *yo = y + (size_t)o * So;
        for (size_t i = 0; i < So; i++) yo[i] = 0.0f;
        for (int k = o * g; k < (o + 1) * g; k++) {   /* folded channel k = ((c·ft + a)·fs + b)·fs + d, summed in order */
            const int d = k % fs, b = k / fs % fs, a = k / (fs * fs) % ft, c = k / (ft * fs * fs);
            for (int t = 0; t < To; t++) {
                const int ts = t * ft + a - pad;                                           /* < 0: a padding frame */
                if (ts < 0) continue;
                const float *xs = x + ((size_t)c * T + ts) * H * W;
                float *yt = yo + (size_t)t * Ho * Wo;
                for (int i = 0; i < Ho; i++)
                    for (int j = 0; j < Wo; j++) yt[(size_t)i * Wo + j] += xs[(size_t)(i * fs + b) * W + j * fs + d];
            }
        }
        for (size_t i = 0; i < So; i++) yo[i] /= (float)g;                                 /* mean = sum / group_size */
    }
}

void wan_dup_up3d_add(const float *x, int cin, int cout, int ft, int fs, int T, int H, int W, int first, float *y) {
    const int rep = cout * ft * fs * fs / cin, drop = first ? ft - 1 : 0;
    const int To = T * ft - drop, Ho = H * fs, Wo = W * fs;
#pragma omp parallel for schedule(static)
    for (int o = 0; o < cout; o++)
        for (int a = 0; a < ft; a++)
            for (int b = 0; b < fs; b++)
                for (int d = 0; d < fs; d++) {
                    const int c = (((o * ft + a) * fs + b) * fs + d) / rep;   /* repeat_interleave source channel */
                    for (int t = 0; t < T; t++) {
                        const int to = t * ft + a - drop;
                        if (to < 0) continue;
                        const float *xs = x + ((size_t)c * T + t) * H * W;
                        float *yt = y + ((size_t)o * To + to) * Ho * Wo;
                        for (int i = 0; i < H; i++)
                            for (int j = 0; j < W; j++) yt[(size_t)(i * fs + b) * Wo + j * fs + d] += xs[(size_t)i * W + j];
                    }
                }
}
