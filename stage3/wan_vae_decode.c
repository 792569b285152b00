/* Wan VAE decoding: the up-samplers, the decoder on one latent frame, and the drivers —
 * frame-streamed (AutoencoderKLWan._decode: one decoder call per latent frame, causal caches
 * carried) and spatially tiled (later diffusers' tiled_decode; the blending and stitching is
 * vae_tiles.c, shared with the CogVideoX VAE). */
#include "wan_vae.h"

#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "error.h"
#include "vae_tiles.h"

/* WanResample upsample2d / upsample3d on x[C, *T, *H, *W] (consumed) -> [C/2, T', 2H, 2W].
 * upsample3d: on the video's first latent frame nothing temporal happens (upstream's "Rep"
 * marker); afterwards time_conv (causal, zeros before its first use) makes 2·C channels whose
 * halves become frames 2t and 2t+1. Then nearest ×2 and Conv2d 3×3 per frame. */
static float *wan_upsample(const wan_resample_w *r, vae_cache *cache, float *x, int *T, int *H, int *W, int first) {
    const int C = r->dim;
    const size_t HW = (size_t)*H * *W;
    cvx_ctx *ctx = r->resample.ctx;
    if (r->mode == WAN_UPSAMPLE_3D && !first) {
        const int Ti = *T;
        float *y = vae_causal_conv3d_consume(&r->time_conv, cache, x, Ti, *H, *W, NULL);   // [2C, Ti, H, W]; frees x
        x = vae_fmap_get(ctx, (size_t)C * 2 * Ti * HW);                                  // [C, 2Ti, H, W]
#pragma omp parallel for collapse(2) schedule(static)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < 2 * Ti; t++)
                memcpy(x + ((size_t)c * 2 * Ti + t) * HW, y + ((size_t)((t & 1) * C + c) * Ti + (t >> 1)) * HW,
                       sizeof(float) * HW);
        vae_fmap_put(ctx, y);
        *T = 2 * Ti;
    }
    const int Ho = 2 * *H, Wo = 2 * *W, Hp = Ho + 2, Wp = Wo + 2;
    float *xp = vae_fmap_get(ctx, (size_t)C * *T * Hp * Wp);               // [C, T, Ho+2, Wo+2]
    cvx_upsample_nearest_padded(x, C, *T, *H, *W, NULL, *T, Ho, Wo, xp, *T, 0, 1, 1);
    vae_fmap_put(ctx, x);
    float *y = vae_fmap_get(ctx, (size_t)r->resample.cout * *T * Ho * Wo);   // [C/2, T, Ho, Wo]
    vae_conv_padded(&r->resample, xp, *T, Hp, Wp, y);                     // Conv2d 3×3, padding 1, per frame
    vae_fmap_put(ctx, xp);
    *H = Ho, *W = Wo;
    return y;
}

/* WanUpBlock (2.1) / WanResidualUpBlock (2.2): residual blocks, then the resampler, plus (2.2
 * up-sampling levels) DupUp3D of the block's input; consumes x. */
static float *wan_up_block(const wan_level_w *b, cvx_ctx *ctx, vae_cache *cache, float *x, int *C, int *T, int *H,
                           int *W, int first) {
    const int T0 = *T, H0 = *H, W0 = *W;
    float *in = b->sc_ft ? x : NULL;   /* x_copy, for the shortcut */
    for (int i = 0; i < b->num_resnets; i++) {
        float *y = wan_resblock(&b->resnets[i], cache, x, *T, *H, *W);
        if (x != in) vae_fmap_put(ctx, x);
        x = y;
        *C = b->resnets[i].cout;
    }
    if (b->resample.mode != WAN_RESAMPLE_NONE) {
        x = wan_upsample(&b->resample, cache, x, T, H, W, first);
        *C = b->resample.resample.cout;
    }
    if (in) {
        CVX_CHECK(*C == b->sc_out && *T == T0 * b->sc_ft - (first ? b->sc_ft - 1 : 0) && *H == H0 * b->sc_fs);
        wan_dup_up3d_add(in, b->sc_in, b->sc_out, b->sc_ft, b->sc_fs, T0, H0, W0, first, x);   // x + avg_shortcut(x_copy)
        vae_fmap_put(ctx, in);
    }
    return x;
}

float *wan_decoder_forward(const wan_vae *v, vae_cache *cache, const float *z, int h, int w, int first, int *T_out) {
    const size_t hw = (size_t)h * w;
    float *zq = vae_fmap_get(v->ctx, (size_t)v->cfg.z_dim * hw);          // [z, 1, h, w]
    vae_conv1x1(&v->post_quant_conv, z, hw, zq);                          // post_quant_conv
    int C = v->dec_conv_in.cout, T = 1, H = h, W = w;
    float *x = vae_causal_conv3d_consume(&v->dec_conv_in, cache, zq, 1, h, w, NULL);   // [C0, 1, h, w]; frees zq
    x = wan_mid_block(&v->dec_mid, v->ctx, cache, x, T, H, W);
    for (int i = 0; i < v->cfg.n_mult; i++) x = wan_up_block(&v->up[i], v->ctx, cache, x, &C, &T, &H, &W, first);
    wan_rms_norm(&v->dec_norm_out, x, (size_t)T * H * W, x, 1);          // norm_out + SiLU
    float *y = vae_causal_conv3d_consume(&v->dec_conv_out, cache, x, T, H, W, NULL);   // [out_ch, T, H, W]; frees x
    *T_out = T;
    return y;
}

/* ------------------------------------------------------------------ frame-streamed decode */

static void clamp_unit(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = x[i] < -1.0f ? -1.0f : x[i] > 1.0f ? 1.0f : x[i];   /* torch.clamp */
}

/* Latent frame k of z[zc, F, h, w] -> zk[zc, 1, h, w] (rows h0 .. h0+lh−1, columns w0 .. w0+lw−1). */
static void latent_frame(const float *z, int zc, int F, int h, int w, int k, int h0, int lh, int w0, int lw,
                         float *zk) {
    for (int c = 0; c < zc; c++)
        for (int y = 0; y < lh; y++)
            memcpy(zk + ((size_t)c * lh + y) * lw, z + (((size_t)c * F + k) * h + h0 + y) * w + w0, sizeof(float) * lw);
}

/* The decoder over every latent frame of the region (h0, lh) × (w0, lw) of z with its own caches;
 * each frame batch [out_channels, n, lh·dr, lw·dr] (dr = decoder_ratio; still patchified; a feature
 * map of v->ctx's pool) goes to emit(user, batch, t0, n), which gives it back (vae_fmap_put). */
typedef int (*batch_fn)(void *user, float *frames, int t0, int n);
static int decode_region(const wan_vae *v, const float *z, int F, int h, int w, int h0, int lh, int w0, int lw,
                         batch_fn emit, void *user, cvx_progress *p) {
    const int zc = v->cfg.z_dim;
    vae_cache cache;
    vae_cache_init(&cache, v->dec_caches);
    float *zk = cvx_alloc_f32((size_t)zc * lh * lw);   // [zc, 1, lh, lw]
    int t0 = 0, rc = 0;
    for (int k = 0; k < F && !rc; k++) {
        latent_frame(z, zc, F, h, w, k, h0, lh, w0, lw, zk);
        int n;
        float *y = wan_decoder_forward(v, &cache, zk, lh, lw, k == 0, &n);   // [out_ch, n, lh·dr, lw·dr]
        rc = emit(user, y, t0, n);
        t0 += n;
        if (p) cvx_progress_update(p, p->done + 1);
    }
    free(zk);
    vae_cache_free(&cache);
    return rc;
}

typedef struct {
    wan_vae_frames_fn cb;
    void *user;
    int clamp, H, W, patch;
    cvx_ctx *ctx;   /* the pool the batches come from */
} stream_dst;

/* A decoded batch to the caller: unpatchified (Wan 2.2), clamped. */
static int emit_to_caller(void *user, float *frames, int t0, int n) {
    stream_dst *d = user;
    if (d->patch > 1) {
        float *x = vae_fmap_get(d->ctx, (size_t)3 * n * d->H * d->W);   // [3, n, H, W]
        wan_vae_unpatchify(frames, 3, n, d->H / d->patch, d->W / d->patch, d->patch, x);
        vae_fmap_put(d->ctx, frames);
        frames = x;
    }
    if (d->clamp) clamp_unit(frames, (size_t)3 * n * d->H * d->W);
    int rc = d->cb(d->user, frames, t0, n, d->H, d->W);
    vae_fmap_put(d->ctx, frames);
    return rc;
}

/* ------------------------------------------------------------------ tiling */

void wan_vae_tiling_default(wan_vae_tiling *t) {
    /* AutoencoderKLWan.__init__ (diffusers >= 0.34): tile_sample_min 256, tile_sample_stride 192 */
    t->min_h = t->min_w = 256;
    t->stride_h = t->stride_w = 192;
}

int wan_vae_tiling_check(const wan_vae *v, const wan_vae_tiling *t) {
    const int r = v->spatial_ratio;
    const int s[4] = {t->min_h, t->min_w, t->stride_h, t->stride_w};
    for (int i = 0; i < 4; i++)
        if (s[i] < r || s[i] % r)
            return cvx_error("VAE tile %dx%d with stride %dx%d samples: every size must be a positive multiple of the "
                             "spatial ratio %d", t->min_w, t->min_h, t->stride_w, t->stride_h, r);
    if (t->stride_h > t->min_h || t->stride_w > t->min_w)
        return cvx_error("VAE tile %dx%d with stride %dx%d samples: the stride must not exceed the tile (gaps)",
                         t->min_w, t->min_h, t->stride_w, t->stride_h);
    return 0;
}

int wan_vae_tiling_applies(const wan_vae *v, int h, int w, const wan_vae_tiling *t) {
    return t && (w > t->min_w / v->spatial_ratio || h > t->min_h / v->spatial_ratio);
}

int wan_vae_decode_steps(const wan_vae *v, int F, int h, int w, const wan_vae_tiling *t) {
    if (!wan_vae_tiling_applies(v, h, w, t) || wan_vae_tiling_check(v, t)) return F;
    const int r = v->spatial_ratio;
    return F * vae_tile_count(h, t->stride_h / r) * vae_tile_count(w, t->stride_w / r);
}

typedef struct {
    const wan_vae *v;
    const wan_vae_tiling *t;
    const float *z;
    int F, h, w, T;
    cvx_progress *p;
    float *tile;       /* the tile being decoded: [out_channels, T, th, tw] (patchified samples) */
    int th, tw;
} tile_src;

static int emit_to_tile(void *user, float *frames, int t0, int n) {
    tile_src *s = user;
    const size_t f = (size_t)s->th * s->tw;
    for (int c = 0; c < s->v->cfg.out_channels; c++)
        memcpy(s->tile + ((size_t)c * s->T + t0) * f, frames + (size_t)c * n * f, sizeof(float) * n * f);
    vae_fmap_put(s->v->ctx, frames);
    return 0;
}

/* Tile (i, j): its latent region decoded over all frames, unclamped (vae_tiles_stitch's producer). */
static float *produce_tile(void *user, int i, int j) {
    tile_src *s = user;
    const int r = s->v->spatial_ratio, dr = s->v->decoder_ratio, tlh = s->t->min_h / r, tlw = s->t->min_w / r;
    const int h0 = i * (s->t->stride_h / r), w0 = j * (s->t->stride_w / r);
    const int lh = s->h - h0 < tlh ? s->h - h0 : tlh, lw = s->w - w0 < tlw ? s->w - w0 : tlw;
    s->th = lh * dr, s->tw = lw * dr;
    s->tile = cvx_alloc_f32((size_t)s->v->cfg.out_channels * s->T * s->th * s->tw);
    decode_region(s->v, s->z, s->F, s->h, s->w, h0, lh, w0, lw, emit_to_tile, s, s->p);
    return s->tile;
}

static int decode_tiled(const wan_vae *v, const float *z, int F, int h, int w, const wan_vae_tiling *t, int clamp,
                        wan_vae_frames_fn cb, void *user, cvx_progress *p) {
    const int r = v->spatial_ratio, slh = t->stride_h / r, slw = t->stride_w / r, tlh = t->min_h / r,
              tlw = t->min_w / r, T = wan_vae_decoded_frames(v, F);
    const int dr = v->decoder_ratio, pt = v->cfg.patch_size, oc = v->cfg.out_channels;
    const int rows = vae_tile_count(h, slh), cols = vae_tile_count(w, slw);
    int *tile_h = cvx_malloc(sizeof(int) * rows), *tile_w = cvx_malloc(sizeof(int) * cols);
    for (int i = 0; i < rows; i++) tile_h[i] = (h - i * slh < tlh ? h - i * slh : tlh) * dr;
    for (int j = 0; j < cols; j++) tile_w[j] = (w - j * slw < tlw ? w - j * slw : tlw) * dr;
    /* blend over min − stride samples, each tile keeps stride × stride (then [:H, :W], which
     * the checked sizes make exact); with patch_size p all of it on the patchified samples (sizes
     * / p), unpatchified after the stitch (diffusers >= 0.36 tiled_decode) */
    vae_tile_grid g = {rows, cols, tile_h, tile_w, oc, T, (t->min_h - t->stride_h) / pt, (t->min_w - t->stride_w) / pt,
                       t->stride_h / pt, t->stride_w / pt};
    tile_src src = {.v = v, .t = t, .z = z, .F = F, .h = h, .w = w, .T = T, .p = p};
    int H, W;
    float *out = vae_tiles_stitch(&g, produce_tile, &src, &H, &W);   // [oc, T, H/p, W/p]
    free(tile_h), free(tile_w);
    CVX_CHECK(H == h * dr && W == w * dr);
    if (pt > 1) {
        float *x = cvx_alloc_f32((size_t)3 * T * h * r * w * r);   // [3, T, H, W]
        wan_vae_unpatchify(out, 3, T, H, W, pt, x);
        free(out);
        out = x;
    }
    H = h * r, W = w * r;
    if (clamp) clamp_unit(out, (size_t)3 * T * H * W);                 /* after blending, as upstream */
    /* hand the frames over in the untiled decode's batches: 1, then temporal_ratio per latent frame */
    const size_t f = (size_t)H * W;
    float *batch = cvx_alloc_f32((size_t)3 * v->temporal_ratio * f);
    int rc = 0;
    for (int k = 0, t0 = 0; k < F && !rc; k++) {
        const int n = k ? v->temporal_ratio : 1;
        for (int c = 0; c < 3; c++) memcpy(batch + (size_t)c * n * f, out + ((size_t)c * T + t0) * f, sizeof(float) * n * f);
        rc = cb(user, batch, t0, n, H, W);
        t0 += n;
    }
    free(batch);
    free(out);
    return rc;
}

/* ------------------------------------------------------------------ memory estimate */

/* Bytes alive while decoding latent frames of an h×w region: every causal conv's 2 carried input
 * frames, plus the largest residual block's transient (input, padded conv input, output and the
 * new cache: C·(3n + 4) frames at its size for n frames per call; Wan 2.2: plus the level's input,
 * held for its DupUp3D shortcut). Sizes in the decoder's own (patchified) samples. */
static double region_bytes(const wan_vae *v, int h, int w) {
    double hw = (double)h * w, cached = 0, transient = 0;   /* in floats */
    int frames = 1;                                          /* per call, after the first latent frame */
    cached += (double)v->dec_conv_in.cin * hw;
    for (int i = 0; i < 2; i++) cached += (double)(v->dec_mid.res[i].conv1.cin + v->dec_mid.res[i].conv2.cin) * hw;
    for (int i = 0; i < v->cfg.n_mult; i++) {
        const wan_level_w *b = &v->up[i];
        const double held = b->sc_ft ? (double)b->sc_in * frames * hw : 0;
        for (int j = 0; j < b->num_resnets; j++) {
            const wan_resblock_w *r = &b->resnets[j];
            cached += (double)(r->conv1.cin + r->conv2.cin) * hw;
            const double t = (double)r->cout * (3.0 * frames + 4) * hw + held;
            transient = t > transient ? t : transient;
        }
        if (b->resample.mode == WAN_UPSAMPLE_3D) cached += (double)b->resample.time_conv.cin * hw, frames *= 2;
        if (b->resample.mode != WAN_RESAMPLE_NONE) hw *= 4;
    }
    cached += (double)v->dec_conv_out.cin * hw;
    return 4.0 * (2.0 * cached + transient);
}

static double conv_bytes(const vae_conv *c) { return c->w ? (double)c->w->nbytes + (c->b ? c->b->nbytes : 0) : 0; }

/* The decoder's weights as stored (mapped, touched once per latent frame). */
static double decoder_weight_bytes(const wan_vae *v) {
    double b = conv_bytes(&v->post_quant_conv) + conv_bytes(&v->dec_conv_in) + conv_bytes(&v->dec_conv_out);
    for (int i = 0; i < 2; i++) b += conv_bytes(&v->dec_mid.res[i].conv1) + conv_bytes(&v->dec_mid.res[i].conv2);
    for (int i = 0; i < v->cfg.n_mult; i++) {
        const wan_level_w *l = &v->up[i];
        for (int j = 0; j < l->num_resnets; j++)
            b += conv_bytes(&l->resnets[j].conv1) + conv_bytes(&l->resnets[j].conv2) + conv_bytes(&l->resnets[j].shortcut);
        b += conv_bytes(&l->resample.resample) + conv_bytes(&l->resample.time_conv);
    }
    return b;
}

double wan_vae_estimate_peak_bytes(const wan_vae *v, int F, int h, int w, const wan_vae_tiling *t) {
    /* + ~0.5 GB: the decoder's mapped f32 weights and the convolutions' scratch (measured:
     * 0.38 GB at a 4×4 latent, bench_wan_vae); the Wan 2.2 decoder's weights (1.1 GB in bf16,
     * 4× the 2.1 decoder's) on top (measured 2.44 GB at an 8×12 latent in bf16, bench_wan_vae
     * --wan22: this gives 1.9) */
    const double fixed = 0.5e9 + (v->cfg.is_residual ? decoder_weight_bytes(v) : 0);
    if (!wan_vae_tiling_applies(v, h, w, t)) return fixed + region_bytes(v, h, w);
    const int r = v->spatial_ratio, lh = h < t->min_h / r ? h : t->min_h / r, lw = w < t->min_w / r ? w : t->min_w / r;
    /* tiles over the whole video: the output, two tiles and the blend strips, all frames; the
     * tiles' working sets (of several shapes, one after the other) left the heap ~1.7× one tile's
     * (measured at 256/192 and 128/96: the allocator keeps freed blocks of the earlier shapes) */
    const double T = wan_vae_decoded_frames(v, F), H = (double)h * r, W = (double)w * r;
    const double held = 3.0 * T * (H * W + 2.0 * lh * r * lw * r + (t->min_h - t->stride_h) * W) * 4.0;
    return fixed + 1.7 * region_bytes(v, lh, lw) + held;
}

/* ------------------------------------------------------------------ entry points */

int wan_vae_decode_z(const wan_vae *v, const float *z, int F, int h, int w, const wan_vae_tiling *tiling, int clamp,
                     wan_vae_frames_fn cb, void *user, cvx_progress *p) {
    if (F < 1 || h < 1 || w < 1) return cvx_error("Wan VAE decode: empty latent [%d, %d, %d, %d]", v->cfg.z_dim, F, h, w);
    int rc;
    cvx_clear_error();   /* a consumer that stops may leave its reason here */
    if (wan_vae_tiling_applies(v, h, w, tiling)) {
        if (wan_vae_tiling_check(v, tiling)) return -1;
        rc = decode_tiled(v, z, F, h, w, tiling, clamp, cb, user, p);
    } else {
        stream_dst d = {cb, user, clamp, h * v->spatial_ratio, w * v->spatial_ratio, v->cfg.patch_size, v->ctx};
        rc = decode_region(v, z, F, h, w, 0, h, 0, w, emit_to_caller, &d, p);
    }
    return rc ? cvx_error_prefix("Wan VAE decode stopped by the frame consumer") : 0;
}

int wan_vae_decode(const wan_vae *v, const float *latents, int F, int h, int w, const wan_vae_tiling *tiling,
                   wan_vae_frames_fn cb, void *user, cvx_progress *p) {
    if (F < 1 || h < 1 || w < 1) return cvx_error("Wan VAE decode: empty latent [%d, %d, %d, %d]", v->cfg.z_dim, F, h, w);
    float *z = cvx_alloc_f32((size_t)v->cfg.z_dim * F * h * w);   // [z, F, h, w]
    wan_vae_unnormalize(v, latents, F, h, w, z);
    int rc = wan_vae_decode_z(v, z, F, h, w, tiling, 1, cb, user, p);
    free(z);
    return rc;
}
