/* Wan VAE encoding: the down-samplers, the encoder on one chunk of frames, the chunked driver
 * (AutoencoderKLWan._encode: frame 0 alone, then chunks of 4 with the causal caches carried) and
 * the latent distribution (DiagonalGaussianDistribution, latent_dist.c). */
#include "wan_vae.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "error.h"
#include "gemm.h"
#include "latent_dist.h"
#include "ops.h"

/* downsample3d's time_conv: (3,1,1) kernel, stride 2 in time, no padding, on x[Cin, Tin, HW]
 * -> y[Cout, (Tin − 3)/2 + 1, HW]: out[:, t] = Σ_k W_k · x[:, 2t + k] + b, three strided GEMMs
 * per output frame. */
static float *time_conv_s2(const vae_conv *c, const float *x, int Tin, size_t HW, int *T_out) {
    const int To = (Tin - 3) / 2 + 1, Cin = c->cin, Cout = c->cout;
    cvx_ctx *ctx = c->ctx;
    const double t0 = cvx_time();
    float *wpk = cvx_scratch_get(&ctx->conv_w, (size_t)3 * Cout * Cin);   // [3, Cout, Cin]
    cvx_conv_pack_weights(ctx, c->w, Cout, Cin, 3, wpk);
    float *bias = cvx_tensor_f32_dup(c->b);
    float *y = vae_fmap_get(ctx, (size_t)Cout * To * HW);                 // [Cout, To, HW]
    for (int t = 0; t < To; t++)
        for (int k = 0; k < 3; k++)
            cvx_gemm(ctx, 0, 0, Cout, (int)HW, Cin, 1.0f, wpk + (size_t)k * Cout * Cin, Cin, x + (size_t)(2 * t + k) * HW,
                     Tin * (int)HW, k ? 1.0f : 0.0f, y + (size_t)t * HW, To * (int)HW);
#pragma omp parallel for collapse(2) schedule(static)
    for (int co = 0; co < Cout; co++)
        for (int t = 0; t < To; t++) {
            float *yc = y + ((size_t)co * To + t) * HW;
            for (size_t i = 0; i < HW; i++) yc[i] += bias[co];
        }
    free(bias);
    ctx->conv_flops += 2.0 * Cout * Cin * 3 * (double)To * HW;
    ctx->conv_seconds += cvx_time() - t0;
    *T_out = To;
    return y;
}

/* WanResample downsample2d / downsample3d on x[C, *T, *H, *W] (consumed): ZeroPad2d(0,1,0,1) +
 * Conv2d 3×3 stride 2 per frame; downsample3d then, on the video's first chunk, only keeps its
 * last frame (upstream caches the chunk and uses its last frame), and on later chunks runs the
 * stride-2 time conv over [that frame, this chunk] and keeps this chunk's last frame. */
static float *wan_downsample(const wan_resample_w *r, vae_cache *cache, float *x, int *T, int *H, int *W, int first) {
    const int C = r->dim, Ho = (*H - 2) / 2 + 1, Wo = (*W - 2) / 2 + 1;
    const size_t HW = (size_t)Ho * Wo;
    cvx_ctx *ctx = r->resample.ctx;
    float *y = vae_fmap_get(ctx, (size_t)C * *T * HW);                  // [C, T, Ho, Wo]
    vae_conv2d_s2(&r->resample, x, *T, *H, *W, y);
    vae_fmap_put(ctx, x);
    *H = Ho, *W = Wo;
    if (r->mode != WAN_DOWNSAMPLE_3D) return y;
    const int Ti = *T, id = r->cache_id;
    float *last = vae_alloc((size_t)C * HW);                            // [C, 1, Ho, Wo]: this chunk's last frame
    for (int c = 0; c < C; c++) memcpy(last + (size_t)c * HW, y + ((size_t)c * Ti + Ti - 1) * HW, sizeof(float) * HW);
    if (!first) {
        CVX_CHECK(cache->buf[id] && cache->C[id] == C && cache->H[id] == Ho && cache->W[id] == Wo);
        float *in = vae_fmap_get(ctx, (size_t)C * (Ti + 1) * HW);       // [C, 1 + Ti, Ho, Wo]
        for (int c = 0; c < C; c++) {
            memcpy(in + (size_t)c * (Ti + 1) * HW, cache->buf[id] + (size_t)c * HW, sizeof(float) * HW);
            memcpy(in + ((size_t)c * (Ti + 1) + 1) * HW, y + (size_t)c * Ti * HW, sizeof(float) * Ti * HW);
        }
        vae_fmap_put(ctx, y);
        y = time_conv_s2(&r->time_conv, in, Ti + 1, HW, T);             // [C, (Ti − 2)/2 + 1, Ho, Wo]
        vae_fmap_put(ctx, in);
    }
    free(cache->buf[id]);
    cache->buf[id] = last;
    cache->C[id] = C, cache->H[id] = Ho, cache->W[id] = Wo;
    return y;
}

/* One encoder level on x[C, *T, *H, *W] (consumed): its residual blocks and down-sampler (2.1:
 * the flat down_blocks; 2.2 WanResidualDownBlock: plus AvgDown3D of the level's input over the
 * whole chunk). */
static float *wan_down_level(const wan_level_w *b, cvx_ctx *ctx, vae_cache *cache, float *x, int *T, int *H, int *W,
                             int first) {
    const int T0 = *T, H0 = *H, W0 = *W;
    float *in = b->sc_ft ? x : NULL;   /* x_copy, for the shortcut */
    for (int j = 0; j < b->num_resnets; j++) {
        float *y = wan_resblock(&b->resnets[j], cache, x, *T, *H, *W);
        if (x != in) vae_fmap_put(ctx, x);
        x = y;
    }
    if (b->resample.mode != WAN_RESAMPLE_NONE) x = wan_downsample(&b->resample, cache, x, T, H, W, first);
    if (in) {   /* residual levels have >= 1 resnet (checked at load): x is a new tensor */
        CVX_CHECK((T0 + b->sc_ft - 1) / b->sc_ft == *T && H0 / b->sc_fs == *H && W0 / b->sc_fs == *W);
        float *s = vae_fmap_get(ctx, (size_t)b->sc_out * *T * *H * *W);                     // [out, T', H', W']
        wan_avg_down3d(in, b->sc_in, b->sc_out, b->sc_ft, b->sc_fs, T0, H0, W0, s);
        cvx_add(x, s, (size_t)b->sc_out * *T * *H * *W);   // x + avg_shortcut(x_copy)
        vae_fmap_put(ctx, s), vae_fmap_put(ctx, in);
    }
    return x;
}

float *wan_encoder_forward(const wan_vae *v, vae_cache *cache, const float *x, int T, int H, int W, int first,
                           int *T_out, int *h_out, int *w_out) {
    float *h = vae_fmap_get(v->ctx, (size_t)v->enc_conv_in.cout * T * H * W);   // [C0, T, H, W]
    vae_causal_conv3d(&v->enc_conv_in, cache, x, T, H, W, h);
    for (int i = 0; i < v->cfg.n_mult; i++) h = wan_down_level(&v->down[i], v->ctx, cache, h, &T, &H, &W, first);
    h = wan_mid_block(&v->enc_mid, v->ctx, cache, h, T, H, W);
    const size_t S = (size_t)T * H * W;
    wan_rms_norm(&v->enc_norm_out, h, S, h, 1);                          // norm_out + SiLU
    float *m = vae_causal_conv3d_consume(&v->enc_conv_out, cache, h, T, H, W, NULL);   // [2z, T, h, w]; frees h
    float *q = vae_fmap_get(v->ctx, (size_t)v->quant_conv.cout * S);
    vae_conv1x1(&v->quant_conv, m, S, q);                                // quant_conv
    vae_fmap_put(v->ctx, m);
    *T_out = T, *h_out = H, *w_out = W;
    return q;
}

/* ------------------------------------------------------------------ driver */

/* Chunks of a T-frame video: 1 + (T − 1)/4 (frame 0, then frames 1+4(i−1) .. 4i). */
static int num_chunks(int T) { return 1 + (T - 1) / WAN_VAE_ENCODE_CHUNK; }

int wan_vae_encoded_shape(const wan_vae *v, int T, int H, int W, int *F, int *h, int *w) {
    if (T < 1 || H < 1 || W < 1) return cvx_error("Wan VAE encode: empty video [3, %d, %d, %d]", T, H, W);
    int later = WAN_VAE_ENCODE_CHUNK;   /* latent frames of a later chunk */
    const int H0 = H, W0 = W, pt = v->cfg.patch_size;
    /* patchify needs multiples of the patch, AvgDown3D (2.2) exact halvings at every level */
    const int mult = v->cfg.is_residual ? v->spatial_ratio : pt;
    if (H % mult || W % mult)
        return cvx_error("Wan VAE encode: %dx%d pixels, expected multiples of %d (the %s)", W, H, mult,
                         v->cfg.is_residual ? "Wan 2.2 VAE's spatial ratio" : "patch size");
    H /= pt, W /= pt;
    for (int i = 0; i < v->cfg.n_mult - 1; i++) {
        if (H < 2 || W < 2)
            return cvx_error("Wan VAE encode: %dx%d pixels are too small for %d stride-2 down-samplers", W0, H0,
                             v->cfg.n_mult - 1);
        H = (H - 2) / 2 + 1, W = (W - 2) / 2 + 1;
        if (v->down[i].resample.mode == WAN_DOWNSAMPLE_3D) later = (later + 1 - 3) / 2 + 1;
    }
    *F = 1 + (num_chunks(T) - 1) * later, *h = H, *w = W;
    return 0;
}

int wan_vae_encode(const wan_vae *v, const float *video, int T, int H, int W, float *mean, float *logvar,
                   cvx_progress *p) {
    int F, h, w;
    if (wan_vae_encoded_shape(v, T, H, W, &F, &h, &w)) return -1;
    const int z2 = 2 * v->cfg.z_dim;
    const int pt = v->cfg.patch_size;
    const size_t HW = (size_t)H * W, hw = (size_t)h * w;
    float *moments = cvx_alloc_f32((size_t)z2 * F * hw);                // [2z, F, h, w]
    vae_cache cache;
    vae_cache_init(&cache, v->enc_caches);
    int f_done = 0;
    for (int i = 0; i < num_chunks(T); i++) {
        const int s = i ? 1 + WAN_VAE_ENCODE_CHUNK * (i - 1) : 0, n = i ? WAN_VAE_ENCODE_CHUNK : 1;
        float *xb = vae_fmap_get(v->ctx, (size_t)3 * n * HW);             // [3, n, H, W]
        for (int c = 0; c < 3; c++) memcpy(xb + (size_t)c * n * HW, video + ((size_t)c * T + s) * HW, sizeof(float) * n * HW);
        if (pt > 1) {                                                     /* patchify per chunk (the same values) */
            float *xp = vae_fmap_get(v->ctx, (size_t)3 * n * HW);         // [3·p², n, H/p, W/p]
            wan_vae_patchify(xb, 3, n, H, W, pt, xp);
            vae_fmap_put(v->ctx, xb);
            xb = xp;
        }
        int to, ho, wo;
        float *m = wan_encoder_forward(v, &cache, xb, n, H / pt, W / pt, i == 0, &to, &ho, &wo);   // [2z, to, h, w]
        CVX_CHECK(ho == h && wo == w && f_done + to <= F);
        for (int c = 0; c < z2; c++)
            memcpy(moments + ((size_t)c * F + f_done) * hw, m + (size_t)c * to * hw, sizeof(float) * to * hw);
        f_done += to;
        vae_fmap_put(v->ctx, m), vae_fmap_put(v->ctx, xb);
        if (p) cvx_progress_update(p, p->done + 1);
    }
    CVX_CHECK(f_done == F);
    vae_cache_free(&cache);
    vae_latent_dist(moments, v->cfg.z_dim, (size_t)F * hw, mean, logvar, NULL);   /* logvar clamped to [−30, 20] */
    free(moments);
    return 0;
}

void wan_vae_sample(const float *mean, const float *logvar, size_t n, cvx_generator *g, float *out) {
    float *std = cvx_alloc_f32(n);
    for (size_t i = 0; i < n; i++) std[i] = expf(0.5f * logvar[i]);     /* torch.exp(0.5 * logvar) */
    vae_latent_sample(mean, std, n, g, out);
    free(std);
}
