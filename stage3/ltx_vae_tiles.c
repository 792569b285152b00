/* AutoencoderKLLTXVideo's tiled decode (see ltx_vae_tiles.h). */
#include "stage3/ltx_vae_tiles.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

void ltx_vae_tiling_default(ltx_vae_tiling *t) {
    *t = (ltx_vae_tiling){.spatial = 1, .framewise = 1, .min_height = 512, .min_width = 512, .stride_height = 448,
                          .stride_width = 448, .min_frames = 16, .stride_frames = 8};
}

/* A decoded tile [3, T, H, W]. */
typedef struct {
    float *d;
    int T, H, W;
} tile;

static int imin(int a, int b) { return a < b ? a : b; }

static int spatial_tiles(const ltx_vae_tiling *t, int h, int w);

/* one ltx_vae_decode, counted */
static int decode_one(ltx_vae *v, const float *z, int F, int h, int w, float timestep, float *out, cvx_progress *pr) {
    const int rc = ltx_vae_decode(v, z, F, h, w, timestep, out);
    if (pr && !rc) cvx_progress_update(pr, pr->done + 1);
    return rc;
}

/* z[C, F, h, w] → its sub-latents [C, nf, th, tw] from (f0, y0, x0) (allocated) */
static float *crop(const float *z, int C, int F, int h, int w, int f0, int nf, int y0, int th, int x0, int tw) {
    float *o = cvx_alloc_f32((size_t)C * nf * th * tw), *p = o;
    for (int c = 0; c < C; c++)
        for (int f = f0; f < f0 + nf; f++)
            for (int y = y0; y < y0 + th; y++, p += tw)
                memcpy(p, z + (((size_t)c * F + f) * h + y) * w + x0, (size_t)tw * sizeof(float));
    return o;
}

/* upstream's weights y/e and 1 − y/e: Python floats, cast to float32 by the tensor product */
static void weights(int y, int e, float *wa, float *wb) {
    *wa = (float)(1.0 - (double)y / e), *wb = (float)((double)y / e);
}

/* blend_v: b's rows y < e = min(a.H, b.H, extent) become a[.., a.H − e + y, :]·(1 − y/e) + b[.., y, :]·(y/e) */
static void blend_v(const tile *a, tile *b, int extent) {
    const int e = imin(imin(a->H, b->H), extent);
    CVX_CHECK(a->W == b->W && a->T == b->T);
    for (int y = 0; y < e; y++) {
        float wa, wb;
        weights(y, e, &wa, &wb);
        for (int ct = 0; ct < 3 * b->T; ct++) {
            const float *ra = a->d + ((size_t)ct * a->H + a->H - e + y) * a->W;
            float *rb = b->d + ((size_t)ct * b->H + y) * b->W;
            for (int x = 0; x < b->W; x++) rb[x] = ra[x] * wa + rb[x] * wb;
        }
    }
}

/* blend_h: b's columns x < e = min(a.W, b.W, extent) likewise from a's last e columns */
static void blend_h(const tile *a, tile *b, int extent) {
    const int e = imin(imin(a->W, b->W), extent);
    CVX_CHECK(a->H == b->H && a->T == b->T);
    for (int x = 0; x < e; x++) {
        float wa, wb;
        weights(x, e, &wa, &wb);
        for (size_t r = 0; r < (size_t)3 * b->T * b->H; r++)
            b->d[r * b->W + x] = a->d[r * a->W + a->W - e + x] * wa + b->d[r * b->W + x] * wb;
    }
}

/* blend_t: b's frames x < e = min(a.T, b.T, extent) from a's last e frames */
static void blend_t(const tile *a, tile *b, int extent) {
    const int e = imin(imin(a->T, b->T), extent);
    const size_t hw = (size_t)b->H * b->W;
    CVX_CHECK(a->H == b->H && a->W == b->W);
    for (int x = 0; x < e; x++) {
        float wa, wb;
        weights(x, e, &wa, &wb);
        for (int c = 0; c < 3; c++) {
            const float *fa = a->d + ((size_t)c * a->T + a->T - e + x) * hw;
            float *fb = b->d + ((size_t)c * b->T + x) * hw;
            for (size_t k = 0; k < hw; k++) fb[k] = fa[k] * wa + fb[k] * wb;
        }
    }
}

/* tiled_decode: spatial tiles of t->min_* pixels every t->stride_* pixels, decoded, blended with
 * the (blended) tile above and to the left, each tile's first stride × stride pixels placed, the
 * whole cropped to 32h × 32w. out [3, To, 32h, 32w]. */
static int decode_spatial(ltx_vae *v, const ltx_vae_tiling *t, const float *z, int F, int h, int w, float timestep,
                          float *out, cvx_progress *pr) {
    const int C = ltx_vae_get_config(v)->latent_channels, To = 8 * (F - 1) + 1, H = 32 * h, W = 32 * w;
    const int lmh = t->min_height / 32, lmw = t->min_width / 32, lsh = t->stride_height / 32, lsw = t->stride_width / 32;
    const int nr = (h + lsh - 1) / lsh, nc = (w + lsw - 1) / lsw;
    tile *prev = cvx_calloc((size_t)nc, sizeof *prev), *cur = cvx_calloc((size_t)nc, sizeof *cur);
    int rc = 0;
    for (int ri = 0; ri < nr && !rc; ri++) {
        const int i = ri * lsh, th = imin(lmh, h - i);
        for (int cj = 0; cj < nc && !rc; cj++) {
            const int j = cj * lsw, tw = imin(lmw, w - j);
            float *sub = crop(z, C, F, h, w, 0, F, i, th, j, tw);
            cur[cj] = (tile){cvx_alloc_f32((size_t)3 * To * 32 * th * 32 * tw), To, 32 * th, 32 * tw};
            rc = decode_one(v, sub, F, th, tw, timestep, cur[cj].d, pr);
            free(sub);
        }
        for (int cj = 0; cj < nc && !rc; cj++) {
            if (ri > 0) blend_v(&prev[cj], &cur[cj], t->min_height - t->stride_height);
            if (cj > 0) blend_h(&cur[cj - 1], &cur[cj], t->min_width - t->stride_width);
            /* tile[:, :, :, :stride_h, :stride_w] at its place, cropped to the frame */
            const int y0 = ri * t->stride_height, x0 = cj * t->stride_width;
            const int ny = imin(imin(cur[cj].H, t->stride_height), H - y0);
            const int nx = imin(imin(cur[cj].W, t->stride_width), W - x0);
            for (int ct = 0; ct < 3 * To && ny > 0 && nx > 0; ct++)
                for (int y = 0; y < ny; y++)
                    memcpy(out + ((size_t)ct * H + y0 + y) * W + x0, cur[cj].d + ((size_t)ct * cur[cj].H + y) * cur[cj].W,
                           (size_t)nx * sizeof(float));
        }
        for (int cj = 0; cj < nc; cj++) free(prev[cj].d);
        tile *sw = prev;
        prev = cur, cur = sw;
        memset(cur, 0, (size_t)nc * sizeof *cur);
    }
    for (int cj = 0; cj < nc; cj++) free(prev[cj].d), free(cur[cj].d);
    free(prev), free(cur);
    return rc;
}

/* decode one temporal tile: spatially tiled when it is larger than a tile */
static int decode_tile(ltx_vae *v, const ltx_vae_tiling *t, const float *z, int F, int h, int w, float timestep,
                       float *out, cvx_progress *pr) {
    if (spatial_tiles(t, h, w)) return decode_spatial(v, t, z, F, h, w, timestep, out, pr);
    return decode_one(v, z, F, h, w, timestep, out, pr);
}

/* _temporal_tiled_decode: tiles of min_frames/8 + 1 latent frames every stride_frames/8, each
 * after the first without its last frame, blended with the previous (blended) tile; the first
 * gives stride_frames + 1 frames, the others stride_frames. */
static int decode_temporal(ltx_vae *v, const ltx_vae_tiling *t, const float *z, int F, int h, int w, float timestep,
                           float *out, cvx_progress *pr) {
    const int C = ltx_vae_get_config(v)->latent_channels, To = 8 * (F - 1) + 1, H = 32 * h, W = 32 * w;
    const int lmf = t->min_frames / 8, lsf = t->stride_frames / 8;
    const size_t hw = (size_t)H * W;
    tile prev = {0};
    int rc = 0, pos = 0;
    for (int i = 0; i < F && !rc; i += lsf) {
        const int L = imin(lmf + 1, F - i), Td = 8 * (L - 1) + 1;
        if (i > 0 && L == 1) break;   /* one frame, dropped: nothing (upstream decodes it and keeps none) */
        float *sub = crop(z, C, F, h, w, i, L, 0, h, 0, w), *dec = cvx_alloc_f32((size_t)3 * Td * hw);
        rc = decode_tile(v, t, sub, L, h, w, timestep, dec, pr);
        free(sub);
        tile cur = {dec, Td, H, W};
        if (!rc && i > 0) {   /* decoded[:, :, :-1] */
            cur.T = Td - 1;
            for (int c = 1; c < 3; c++) memmove(dec + (size_t)c * cur.T * hw, dec + (size_t)c * Td * hw, cur.T * hw * sizeof(float));
            blend_t(&prev, &cur, t->min_frames - t->stride_frames);
        }
        const int n = imin(imin(cur.T, i > 0 ? t->stride_frames : t->stride_frames + 1), To - pos);
        for (int c = 0; c < 3 && !rc; c++)
            memcpy(out + ((size_t)c * To + pos) * hw, cur.d + (size_t)c * cur.T * hw, (size_t)n * hw * sizeof(float));
        pos += n > 0 ? n : 0;
        free(prev.d);
        prev = cur;
    }
    free(prev.d);
    if (!rc && pos != To) return cvx_error("LTX VAE temporal tiles gave %d of %d frames", pos, To);
    return rc;
}

/* the spatial tile grid's rows and columns for latents [h, w] (1 × 1: not tiled in space) */
static int spatial_tiles(const ltx_vae_tiling *t, int h, int w) {
    return t->spatial && (w > t->min_width / 32 || h > t->min_height / 32);
}

static int space_valid(const ltx_vae_tiling *t) {
    return t->min_height >= 32 && t->min_width >= 32 && t->min_height % 32 == 0 && t->min_width % 32 == 0 &&
           t->stride_height >= 32 && t->stride_width >= 32 && t->stride_height % 32 == 0 && t->stride_width % 32 == 0 &&
           t->stride_height <= t->min_height && t->stride_width <= t->min_width;
}

static int time_valid(const ltx_vae_tiling *t) {
    return t->min_frames >= 8 && t->stride_frames >= 8 && t->min_frames % 8 == 0 && t->stride_frames % 8 == 0 &&
           t->stride_frames <= t->min_frames;
}

int ltx_vae_tile_count(const ltx_vae_tiling *t, int F, int h, int w) {
    if (!t || !space_valid(t) || !time_valid(t)) return 1;
    const int per = spatial_tiles(t, h, w)
                        ? ((h + t->stride_height / 32 - 1) / (t->stride_height / 32)) *
                              ((w + t->stride_width / 32 - 1) / (t->stride_width / 32))
                        : 1;
    if (!(t->framewise && F > t->min_frames / 8)) return per;
    int n = 0;
    for (int i = 0; i < F; i += t->stride_frames / 8) {   /* decode_temporal's tiles */
        if (i > 0 && imin(t->min_frames / 8 + 1, F - i) == 1) break;
        n += per;
    }
    return n;
}

int ltx_vae_decode_tiled(ltx_vae *v, const ltx_vae_tiling *t, const float *z, int F, int h, int w, float timestep,
                         float *video, int *tiled, cvx_progress *progress) {
    if (tiled) *tiled = 0;
    if (!t) return decode_one(v, z, F, h, w, timestep, video, progress);
    if (!space_valid(t))
        return cvx_error("LTX VAE tiles %dx%d every %dx%d pixels: sizes must be multiples of 32, the stride at most the "
                         "tile", t->min_width, t->min_height, t->stride_width, t->stride_height);
    if (!time_valid(t))
        return cvx_error("LTX VAE temporal tiles of %d frames every %d: multiples of 8, the stride at most the tile",
                         t->min_frames, t->stride_frames);
    if (t->framewise && F > t->min_frames / 8) {
        if (tiled) *tiled = 1;
        return decode_temporal(v, t, z, F, h, w, timestep, video, progress);
    }
    if (spatial_tiles(t, h, w)) {
        if (tiled) *tiled = 1;
        return decode_spatial(v, t, z, F, h, w, timestep, video, progress);
    }
    return decode_one(v, z, F, h, w, timestep, video, progress);
}
