/* AutoencoderKLHunyuanVideo15 passes: decode / encode streamed over chunks of frames (exactly
 * upstream's whole-video pass, stage3/hunyuan15_vae.h) and upstream's spatial tiling through the
 * shared stitcher (stage3/vae_tiles.h). */
#include "hunyuan15_vae_internal.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "vae_tiles.h"

void hv15_vae_tiling_default(hv15_vae_tiling *t) { *t = (hv15_vae_tiling){256, 256, 0.25}; }

int hv15_vae_decoded_frames(const hv15_vae *v, int F) { return 1 + v->c.temporal_ratio * (F - 1); }

void hv15_vae_unscale(const hv15_vae *v, const float *latents, size_t n, float *z) {
    const float s = (float)v->c.scaling_factor;
    for (size_t i = 0; i < n; i++) z[i] = latents[i] / s;
}

int hv15_vae_encoded_shape(const hv15_vae *v, int T, int H, int W, int *F, int *h, int *w) {
    const int r = v->c.spatial_ratio, tr = v->c.temporal_ratio;
    if (T < 1 || (T - 1) % tr || H < r || W < r || H % r || W % r)
        return cvx_error("vae encode: a %d×%d video of %d frames does not fit: frames must be 1 + %d·k, height and "
                         "width positive multiples of %d", H, W, T, tr, r);
    *F = (T - 1) / tr + 1, *h = H / r, *w = W / r;
    return 0;
}

/* Frames t0 .. t0+n−1 of src[C, Ts, HW] -> dst[C, n, HW] or the reverse (to_src). */
static void copy_frames(float *dst, int Td, int td, const float *src, int Ts, int ts, int n, int C, size_t HW) {
    for (int c = 0; c < C; c++)
        memcpy(dst + ((size_t)c * Td + td) * HW, src + ((size_t)c * Ts + ts) * HW, sizeof(float) * n * HW);
}

static int tiling_check(const hv15_vae *v, const hv15_vae_tiling *t) {
    const int r = v->c.spatial_ratio;
    if (t->min_h < r || t->min_w < r || t->min_h % r || t->min_w % r || !(t->overlap >= 0 && t->overlap < 1) ||
        (int)(t->min_h / r * (1 - t->overlap)) < 1 || (int)(t->min_w / r * (1 - t->overlap)) < 1)
        return cvx_error("vae tiling: tile %d×%d with overlap %g: sizes must be multiples of %d and the overlap in "
                         "[0, 1) leave a stride of at least one latent", t->min_h, t->min_w, t->overlap, r);
    return 0;
}

/* ------------------------------------------------------------------ decode */

static void decode_untiled(const hv15_vae *v, const float *z, int F, int h, int w, float *video) {
    const int lc = v->c.latent_channels, r = v->c.spatial_ratio, T = hv15_vae_decoded_frames(v, F);
    const size_t hw = (size_t)h * w, HW = hw * r * r;
    hv15_vae_run run;
    hv15_vae_run_init(&run, v->dec_caches);
    float *zf = vae_fmap_get(v->ctx, (size_t)lc * hw);
    for (int f = 0, t0 = 0; f < F; f++) {
        int n;
        copy_frames(zf, 1, 0, z, F, f, 1, lc, hw);                                // latent frame f [lc, 1, h, w]
        float *y = hv15_decoder_chunk(v, &run, zf, 1, h, w, f == 0, &n);          // [3, n, H, W]
        copy_frames(video, T, t0, y, n, 0, n, v->c.out_channels, HW);
        vae_fmap_put(v->ctx, y);
        t0 += n;
    }
    vae_fmap_put(v->ctx, zf);
    hv15_vae_run_free(&run);
}

typedef struct {
    const hv15_vae *v;
    const float *src;
    int T, h, w;            /* source frames (latent or video) and size */
    int tile_h, tile_w;     /* tile size in source units */
    int stride_h, stride_w; /* tile stride in source units */
} tile_src;

/* The source region [C, T, th, tw] of tile (i, j) (a feature map of the VAE's pool). */
static float *cut(const tile_src *s, int C, int i, int j, int *th, int *tw) {
    const int y0 = i * s->stride_h, x0 = j * s->stride_w;
    *th = s->h - y0 < s->tile_h ? s->h - y0 : s->tile_h;
    *tw = s->w - x0 < s->tile_w ? s->w - x0 : s->tile_w;
    float *t = vae_fmap_get(s->v->ctx, (size_t)C * s->T * *th * *tw);
    for (int c = 0; c < C; c++)
        for (int f = 0; f < s->T; f++)
            for (int y = 0; y < *th; y++)
                memcpy(t + (((size_t)c * s->T + f) * *th + y) * *tw,
                       s->src + (((size_t)c * s->T + f) * s->h + y0 + y) * s->w + x0, sizeof(float) * *tw);
    return t;
}

static float *produce_decoded_tile(void *user, int i, int j) {
    const tile_src *s = user;
    const int r = s->v->c.spatial_ratio;
    int th, tw;
    float *z = cut(s, s->v->c.latent_channels, i, j, &th, &tw);
    float *out = cvx_alloc_f32((size_t)s->v->c.out_channels * hv15_vae_decoded_frames(s->v, s->T) * th * r * tw * r);
    decode_untiled(s->v, z, s->T, th, tw, out);
    vae_fmap_put(s->v->ctx, z);
    return out;
}

/* Tile sizes along one axis: count tiles of `tile` every `stride` over `size`, each min(tile,
 * size − start)·scale output units. */
static int *tile_sizes(int size, int tile, int stride, int num, int den, int *count) {
    *count = vae_tile_count(size, stride);
    int *s = cvx_malloc(sizeof(int) * (size_t)*count);
    for (int i = 0; i < *count; i++) s[i] = (size - i * stride < tile ? size - i * stride : tile) * num / den;
    return s;
}

int hv15_vae_decode(const hv15_vae *v, const float *z, int F, int h, int w, const hv15_vae_tiling *t, float *video) {
    const int r = v->c.spatial_ratio;
    if (!(v->parts & VAE_PART_DECODER))
        return cvx_error("%s: vae decode: the HunyuanVideo-1.5 VAE was loaded without its decoder",
                         cvx_weights_path(v->weights));
    if (F < 1 || h < 1 || w < 1) return cvx_error("vae decode: bad latent size %d×%d×%d (F×h×w)", F, h, w);
    if (t && tiling_check(v, t)) return -1;
    const int tlh = t ? t->min_h / r : 0, tlw = t ? t->min_w / r : 0;
    if (!t || (w <= tlw && h <= tlh)) {
        decode_untiled(v, z, F, h, w, video);
        return 0;
    }
    /* upstream tiled_decode: latent tiles every int(tile·(1 − overlap)), blended over
     * int(min·overlap) samples, each keeping min − blend */
    tile_src s = {.v = v, .src = z, .T = F, .h = h, .w = w, .tile_h = tlh, .tile_w = tlw,
                  .stride_h = (int)(tlh * (1 - t->overlap)), .stride_w = (int)(tlw * (1 - t->overlap))};
    int rows, cols, *th = tile_sizes(h, tlh, s.stride_h, r, 1, &rows), *tw = tile_sizes(w, tlw, s.stride_w, r, 1, &cols);
    const int bh = (int)(t->min_h * t->overlap), bw = (int)(t->min_w * t->overlap);
    vae_tile_grid g = {rows, cols, th, tw, v->c.out_channels, hv15_vae_decoded_frames(v, F), bh, bw,
                       t->min_h - bh, t->min_w - bw};
    int H, W;
    float *out = vae_tiles_stitch(&g, produce_decoded_tile, &s, &H, &W);
    free(th), free(tw);
    CVX_CHECK(H == h * r && W == w * r);
    memcpy(video, out, sizeof(float) * (size_t)v->c.out_channels * g.T * H * W);
    free(out);
    return 0;
}

/* ------------------------------------------------------------------ encode */

static void encode_untiled(const hv15_vae *v, const float *video, int T, int H, int W, float *moments) {
    const int tr = v->c.temporal_ratio, r = v->c.spatial_ratio, M = 2 * v->c.latent_channels, C = v->c.in_channels;
    const int F = (T - 1) / tr + 1;
    const size_t HW = (size_t)H * W, hw = HW / ((size_t)r * r);
    hv15_vae_run run;
    hv15_vae_run_init(&run, v->enc_caches);
    float *xc = vae_fmap_get(v->ctx, (size_t)C * tr * HW);
    for (int t0 = 0, f0 = 0; t0 < T; f0++) {
        int n = t0 == 0 ? 1 : tr, nf;
        copy_frames(xc, n, 0, video, T, t0, n, C, HW);                            // frames t0 .. t0+n−1
        float *y = hv15_encoder_chunk(v, &run, xc, n, H, W, t0 == 0, &nf);        // [M, nf, h, w]
        CVX_CHECK(nf == 1 && f0 < F);
        copy_frames(moments, F, f0, y, nf, 0, nf, M, hw);
        vae_fmap_put(v->ctx, y);
        t0 += n;
    }
    vae_fmap_put(v->ctx, xc);
    hv15_vae_run_free(&run);
}

static float *produce_encoded_tile(void *user, int i, int j) {
    const tile_src *s = user;
    const int r = s->v->c.spatial_ratio, tr = s->v->c.temporal_ratio;
    int th, tw;
    float *x = cut(s, s->v->c.in_channels, i, j, &th, &tw);
    float *out = cvx_alloc_f32((size_t)2 * s->v->c.latent_channels * ((s->T - 1) / tr + 1) * (th / r) * (tw / r));
    encode_untiled(s->v, x, s->T, th, tw, out);
    vae_fmap_put(s->v->ctx, x);
    return out;
}

int hv15_vae_encode(const hv15_vae *v, const float *video, int T, int H, int W, const hv15_vae_tiling *t,
                    float *moments) {
    const int r = v->c.spatial_ratio;
    int F, h, w;
    if (!(v->parts & VAE_PART_ENCODER))
        return cvx_error("%s: vae encode: the HunyuanVideo-1.5 VAE was loaded without its encoder",
                         cvx_weights_path(v->weights));
    if (hv15_vae_encoded_shape(v, T, H, W, &F, &h, &w)) return -1;
    if (t && tiling_check(v, t)) return -1;
    if (!t || (W <= t->min_w && H <= t->min_h)) {
        encode_untiled(v, video, T, H, W, moments);
        return 0;
    }
    /* upstream tiled_encode: sample tiles every int(min·(1 − overlap)), blended over
     * int(min/r·overlap) latents, each keeping min/r − blend */
    const int tlh = t->min_h / r, tlw = t->min_w / r;
    tile_src s = {.v = v, .src = video, .T = T, .h = H, .w = W, .tile_h = t->min_h, .tile_w = t->min_w,
                  .stride_h = (int)(t->min_h * (1 - t->overlap)), .stride_w = (int)(t->min_w * (1 - t->overlap))};
    if (s.stride_h % r || s.stride_w % r)
        return cvx_error("vae tiling: the encoder's tile stride %d×%d must be a multiple of %d", s.stride_h,
                         s.stride_w, r);
    int rows, cols, *th = tile_sizes(H, t->min_h, s.stride_h, 1, r, &rows);
    int *tw = tile_sizes(W, t->min_w, s.stride_w, 1, r, &cols);
    const int bh = (int)(tlh * t->overlap), bw = (int)(tlw * t->overlap);
    vae_tile_grid g = {rows, cols, th, tw, 2 * v->c.latent_channels, F, bh, bw, tlh - bh, tlw - bw};
    int ho, wo;
    float *out = vae_tiles_stitch(&g, produce_encoded_tile, &s, &ho, &wo);
    free(th), free(tw);
    CVX_CHECK(ho == h && wo == w);
    memcpy(moments, out, sizeof(float) * (size_t)g.C * F * h * w);
    free(out);
    return 0;
}
