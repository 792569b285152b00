/* The video VAEs' convolutions (vae_conv.h): weight lookup, carried-frame caches, causal 3D
 * convolutions, 1×1×1 and stride-2 convolutions. Shared by the CogVideoX and Wan VAEs. */
#include "vae_conv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "gemm_fast.h"

float *vae_alloc(size_t n) { return cvx_alloc_large(n * sizeof(float)); }

float *vae_fmap_get(cvx_ctx *ctx, size_t n) { return cvx_pool_get(&ctx->maps, n); }
void vae_fmap_put(cvx_ctx *ctx, void *p) { cvx_pool_put(&ctx->maps, p); }

/* ------------------------------------------------------------------ loading */

const cvx_tensor *vae_loader_get(vae_loader *L, const char *name, const int64_t *shape, int ndim) {
    char buf[256];
    const char *key = L->key ? L->key(L->key_user, name, buf, sizeof buf) : name;
    if (!key) {
        cvx_error("%s: no tensor name for '%s' in this checkpoint's naming", cvx_weights_path(L->w), name);
        return NULL;
    }
    return cvx_weights_get(L->w, key, shape, ndim);
}

int vae_conv_get(vae_loader *L, vae_conv *c, const char *name, int cin, int cout, int kt, int kh, int kw, int is2d,
                 int causal) {
    char wn[256], bn[256];
    snprintf(wn, sizeof wn, "%s.weight", name);
    snprintf(bn, sizeof bn, "%s.bias", name);
    c->w = is2d ? vae_loader_get(L, wn, CVX_SHAPE(cout, cin, kh, kw)) : vae_loader_get(L, wn, CVX_SHAPE(cout, cin, kt, kh, kw));
    if (!c->w) return -1;
    c->b = vae_loader_get(L, bn, CVX_SHAPE(cout));
    if (!c->b) return -1;
    c->cin = cin, c->cout = cout, c->kt = kt, c->kh = kh, c->kw = kw;
    c->cache_id = (causal && kt > 1) ? L->next_cache++ : -1;
    c->time_pad = L->time_pad;
    c->space_replicate = L->space_replicate;
    c->ctx = L->ctx;
    return 0;
}

void vae_conv_forget(cvx_ctx *ctx) {
    cvx_conv_wcache_trim(ctx->conv_wcache);
    cvx_pool_trim(&ctx->maps);   /* the kept feature maps (the ones in use stay valid) */
}

/* ------------------------------------------------------------------ caches */

void vae_cache_init(vae_cache *c, int n) {
    c->n = n;
    c->buf = cvx_calloc((size_t)(n ? n : 1), sizeof *c->buf);
    c->C = cvx_calloc((size_t)(n ? n : 1), sizeof(int));
    c->H = cvx_calloc((size_t)(n ? n : 1), sizeof(int));
    c->W = cvx_calloc((size_t)(n ? n : 1), sizeof(int));
}

void vae_cache_reset(vae_cache *c) {
    for (int i = 0; i < c->n; i++) {
        free(c->buf[i]);
        c->buf[i] = NULL;
    }
}

void vae_cache_free(vae_cache *c) {
    vae_cache_reset(c);
    free(c->buf), free(c->C), free(c->H), free(c->W);
    memset(c, 0, sizeof *c);
}

/* ------------------------------------------------------------------ convolutions */

/* oneDNN's bf16 convolution primitive instead of Winograd F(2×2): in bf16 mode, on a CPU with bf16
 * units (AVX512_BF16 / AMX), or anywhere with $CVX_VAE_CONV=onednn (tests, benchmarks: emulated
 * bf16 there); $CVX_VAE_CONV=winograd keeps Winograd. f32 mode never takes it. */
static int vae_conv_onednn_bf16(const cvx_ctx *ctx) {
    if (ctx->precision != CVX_PRECISION_BF16 || !ctx->kernels) return 0;
    /* opt-in until it is measured against the bf16 Winograd on a CPU with bf16 units
     * (docs/performance.md): CVX_VAE_CONV=onednn */
    const char *e = getenv("CVX_VAE_CONV");
    return e && strcmp(e, "onednn") == 0;
}

void vae_conv_padded(const vae_conv *c, const float *xp, int Tp, int Hp, int Wp, float *y) {
    int taps = c->kt * c->kh * c->kw;
    cvx_ctx *ctx = c->ctx;
    double t0 = cvx_time();
    float *bias = cvx_tensor_f32_dup(c->b);                     // [Cout]
    if (vae_conv_onednn_bf16(ctx)) {
        if (cvx_conv3d_onednn_bf16(ctx, xp, c->cin, Tp, Hp, Wp, c->w, bias, c->cout, c->kt, c->kh, c->kw, y))
            cvx_die("%s", cvx_last_error());
    } else {   /* weights transformed once per context (cvx_conv_weights) */
        cvx_conv3d_tensor(ctx, xp, c->cin, Tp, Hp, Wp, c->w, bias, c->cout, c->kt, c->kh, c->kw, y);
    }
    ctx->conv_flops += 2.0 * c->cout * c->cin * taps * (double)(Tp - c->kt + 1) * (Hp - c->kh + 1) * (Wp - c->kw + 1);
    free(bias);
    ctx->conv_seconds += cvx_time() - t0;
}

void vae_conv1x1(const vae_conv *c, const float *x, size_t N, float *y) {
    float *bias = cvx_tensor_f32_dup(c->b);
    cvx_conv1x1(c->ctx, x, c->cin, N, cvx_weight_f32(c->ctx, c->w), bias, c->cout, y);   // [Cout, N]
    c->ctx->conv_flops += 2.0 * c->cout * c->cin * (double)N;
    free(bias);
}

/* Spatial borders of n padded frames [n, H+2ph, W+2pw] set to the nearest interior value (F.pad
 * mode="replicate": each coordinate clamped). */
static void replicate_borders(float *xp, int n, int H, int W, int ph, int pw) {
    const int Hp = H + 2 * ph, Wp = W + 2 * pw;
#pragma omp parallel for schedule(static)
    for (int f = 0; f < n; f++) {
        float *fr = xp + (size_t)f * Hp * Wp;
        for (int y = ph; y < ph + H; y++) {
            float *row = fr + (size_t)y * Wp;
            for (int x = 0; x < pw; x++) row[x] = row[pw], row[pw + W + x] = row[pw + W - 1];
        }
        for (int y = 0; y < ph; y++) {
            memcpy(fr + (size_t)y * Wp, fr + (size_t)ph * Wp, sizeof(float) * Wp);
            memcpy(fr + (size_t)(ph + H + y) * Wp, fr + (size_t)(ph + H - 1) * Wp, sizeof(float) * Wp);
        }
    }
}

/* The causal conv of x (read in place; `owned`, when given, is x, a feature map of the conv's
 * context pool, given back once x has been read into the padded input). The padded input is the
 * context's grow-only conv_in scratch (a decode pads every conv's input: fresh pages of that size at
 * every call cost the kernel's zeroing); an output not passed in comes from the pool. */
static float *causal_conv3d(const vae_conv *c, vae_cache *cache, const float *x, float *owned, int T, int H, int W,
                            float *y) {
    const int Cin = c->cin, kt = c->kt, ph = (c->kh - 1) / 2, pw = (c->kw - 1) / 2;
    if (kt == 1 && c->kh == 1 && c->kw == 1) {   /* conv_y / conv_b / shortcuts: no padding, cache unused upstream */
        if (!y) y = vae_fmap_get(c->ctx, (size_t)c->cout * T * H * W);
        vae_conv1x1(c, x, (size_t)T * H * W, y);
        vae_fmap_put(c->ctx, owned);
        return y;
    }
    const int Tp = T + kt - 1, Hp = H + 2 * ph, Wp = W + 2 * pw;
    float *xp = cvx_scratch_get(&c->ctx->conv_in, (size_t)Cin * Tp * Hp * Wp);   // [Cin, Tp, Hp, Wp]
    float *cached = c->cache_id >= 0 ? cache->buf[c->cache_id] : NULL;
    if (kt > 1) {
        if (cached) {
            CVX_CHECK(cache->C[c->cache_id] == Cin && cache->H[c->cache_id] == H && cache->W[c->cache_id] == W);
            cvx_pad_frames(xp, Tp, 0, cached, Cin, kt - 1, 0, kt - 1, H, W, ph, pw);
        } else if (c->time_pad == VAE_TIME_PAD_ZEROS) {
            const size_t lead = (size_t)(kt - 1) * Hp * Wp;   /* frames 0 .. kt−2 of every channel */
#pragma omp parallel for schedule(static)
            for (int ci = 0; ci < Cin; ci++) memset(xp + (size_t)ci * Tp * Hp * Wp, 0, sizeof(float) * lead);
        } else {
            for (int k = 0; k < kt - 1; k++) cvx_pad_frames(xp, Tp, k, x, Cin, T, 0, 1, H, W, ph, pw);
        }
    }
    cvx_pad_frames(xp, Tp, kt - 1, x, Cin, T, 0, T, H, W, ph, pw);
    vae_fmap_put(c->ctx, owned);
    if (c->space_replicate && (ph || pw)) replicate_borders(xp, Cin * Tp, H, W, ph, pw);
    if (c->cache_id >= 0) {
        /* Cache = last kt−1 frames of the time-padded input, taken before spatial padding (into the
         * slot's buffer when it has that size: its frames were read into xp above). */
        const int id = c->cache_id;
        float *nc = cached && cache->C[id] == Cin && cache->H[id] == H && cache->W[id] == W
                        ? cached
                        : vae_alloc((size_t)Cin * (kt - 1) * H * W);   // [Cin, kt−1, H, W]
#pragma omp parallel for collapse(2) schedule(static)
        for (int ci = 0; ci < Cin; ci++)
            for (int k = 0; k < kt - 1; k++)
                for (int yy = 0; yy < H; yy++)
                    memcpy(nc + (((size_t)ci * (kt - 1) + k) * H + yy) * W,
                           xp + (((size_t)ci * Tp + T + k) * Hp + yy + ph) * Wp + pw, sizeof(float) * W);
        if (nc != cached) free(cached);
        cache->buf[id] = nc;
        cache->C[id] = Cin, cache->H[id] = H, cache->W[id] = W;
    }
    if (!y) y = vae_fmap_get(c->ctx, (size_t)c->cout * T * H * W);
    vae_conv_padded(c, xp, Tp, Hp, Wp, y);   // [Cout, T, H, W]
    return y;
}

void vae_causal_conv3d(const vae_conv *c, vae_cache *cache, const float *x, int T, int H, int W, float *y) {
    causal_conv3d(c, cache, x, NULL, T, H, W, y);
}

float *vae_causal_conv3d_consume(const vae_conv *c, vae_cache *cache, float *x, int T, int H, int W, float *y) {
    return causal_conv3d(c, cache, x, x, T, H, W, y);
}

void vae_conv2d_s2_ref(const float *x, int Cin, int T, int H, int W, const float *w, const float *bias, int Cout,
                       float *y) {
    const int Ho = (H - 2) / 2 + 1, Wo = (W - 2) / 2 + 1;
    for (int co = 0; co < Cout; co++)
        for (int t = 0; t < T; t++)
            for (int oy = 0; oy < Ho; oy++)
                for (int ox = 0; ox < Wo; ox++) {
                    double acc = bias ? bias[co] : 0.0;
                    for (int ci = 0; ci < Cin; ci++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                int iy = 2 * oy + ky, ix = 2 * ox + kx;
                                if (iy >= H || ix >= W) continue;   /* the bottom/right zero pad */
                                acc += (double)w[((size_t)co * Cin + ci) * 9 + ky * 3 + kx] *
                                       x[(((size_t)ci * T + t) * H + iy) * W + ix];
                            }
                    y[(((size_t)co * T + t) * Ho + oy) * Wo + ox] = (float)acc;
                }
}

void vae_conv2d_s2(const vae_conv *c, const float *x, int T, int H, int W, float *y) {
    const int Cin = c->cin, Cout = c->cout, Ho = (H - 2) / 2 + 1, Wo = (W - 2) / 2 + 1;
    const size_t N = (size_t)Ho * Wo;
    const float *wpk = cvx_conv_weights(c->ctx, c->w, CVX_CONV_DIRECT, Cout, Cin, 1, 9, 0);   // [9, Cout, Cin]
    float *bias = cvx_tensor_f32_dup(c->b);
    float *xs = cvx_alloc_f32((size_t)Cin * N);               // [Cin, Ho·Wo]: one tap's strided view
    float *acc = cvx_alloc_f32((size_t)Cout * N);             // [Cout, Ho·Wo]
    const int wide = c->ctx->kernels && cvx_kernels_avx512(c->ctx->kernels);   // same bits either way
    for (int t = 0; t < T; t++) {
        for (int tap = 0; tap < 9; tap++) {
            const int ky = tap / 3, kx = tap % 3;
#pragma omp parallel for schedule(static)
            for (int ci = 0; ci < Cin; ci++)
                for (int oy = 0; oy < Ho; oy++) {
                    const int iy = 2 * oy + ky;
                    float *d = xs + (size_t)ci * N + (size_t)oy * Wo;
                    const float *s = x + (((size_t)ci * T + t) * H + iy) * W;
                    for (int ox = 0; ox < Wo; ox++) {
                        const int ix = 2 * ox + kx;
                        d[ox] = (iy < H && ix < W) ? s[ix] : 0.0f;   /* F.pad (0,1,0,1) */
                    }
                }
            cvx_sgemm_fixed_isa(wide, 0, 0, Cout, (int)N, Cin, wpk + (size_t)tap * Cout * Cin, Cin, xs, (int)N, NULL,
                                tap ? 1.0f : 0.0f, acc, (int)N);
        }
#pragma omp parallel for schedule(static)
        for (int co = 0; co < Cout; co++) {
            float *d = y + ((size_t)co * T + t) * N;
            const float *s = acc + (size_t)co * N;
            for (size_t i = 0; i < N; i++) d[i] = s[i] + bias[co];
        }
    }
    free(acc), free(xs), free(bias);
}
