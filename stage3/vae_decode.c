/* CogVideoX VAE decoding drivers: temporal chunks with carried caches, overlapping spatial
 * tiles with linear blending (diffusers 0.32.2 AutoencoderKLCogVideoX._decode / tiled_decode). */
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "vae.h"
#include "vae_blocks.h"

/* Upstream's num_latent_frames_batch_size: a fixed constant of the model code, not config. */
#define LATENT_FRAMES_PER_CHUNK 2
/* Upstream tile overlap factors (tile_overlap_factor_height / _width). */
#define TILE_OVERLAP_H (1.0 / 6.0)
#define TILE_OVERLAP_W (1.0 / 5.0)

int vae_chunk_frames(const vae_decoder *d, int n) {
    for (int l = 0; l < d->temporal_levels && l < d->num_blocks - 1; l++)
        n = n == 1 ? 1 : (n % 2 ? 2 * n - 1 : 2 * n);
    return n;
}

/* Chunk i of a T-frame latent: [start, end). num_batches = max(T // 2, 1); the first chunk
 * takes the odd frame (3 frames), a 1-frame latent is one chunk. */
static int num_chunks(int T) { return T / LATENT_FRAMES_PER_CHUNK > 1 ? T / LATENT_FRAMES_PER_CHUNK : 1; }
static void chunk_range(int T, int i, int *s, int *e) {
    int rem = T % LATENT_FRAMES_PER_CHUNK;
    *s = LATENT_FRAMES_PER_CHUNK * i + (i == 0 ? 0 : rem);
    *e = LATENT_FRAMES_PER_CHUNK * (i + 1) + rem;
    if (*e > T) *e = T;
}

int vae_output_frames(const vae_decoder *d, int T) {
    int total = 0;
    for (int i = 0; i < num_chunks(T); i++) {
        int s, e;
        chunk_range(T, i, &s, &e);
        total += vae_chunk_frames(d, e - s);
    }
    return total;
}

void vae_decode_chunked(const vae_decoder *d, const float *z, int T, int h, int w, float *out, cvx_progress *p) {
    const int lc = d->latent_channels, oc = d->out_channels, r = d->spatial_ratio;
    const int Tout = vae_output_frames(d, T);
    const size_t HWo = (size_t)h * r * w * r;
    vae_cache cache;
    vae_cache_init(&cache, d->num_caches);
    int t_done = 0;
    for (int i = 0; i < num_chunks(T); i++) {
        int s, e;
        chunk_range(T, i, &s, &e);
        int n = e - s;
        float *zc = cvx_alloc_f32((size_t)lc * n * h * w);   // [lc, n, h, w]
        for (int c = 0; c < lc; c++)
            memcpy(zc + (size_t)c * n * h * w, z + ((size_t)c * T + s) * h * w, sizeof(float) * (size_t)n * h * w);
        int to;
        float *y = vae_decoder_forward(d, &cache, zc, n, h, w, &to);   // [oc, to, H, W]
        for (int c = 0; c < oc; c++)
            memcpy(out + ((size_t)c * Tout + t_done) * HWo, y + (size_t)c * to * HWo, sizeof(float) * to * HWo);
        t_done += to;
        free(y);
        free(zc);
        if (p) cvx_progress_update(p, p->done + 1);
    }
    CVX_CHECK(t_done == Tout);
    vae_cache_free(&cache);
}

/* ------------------------------------------------------------------ tiling */

typedef struct {
    int tlh, tlw;           /* latent tile size */
    int oh, ow;             /* latent tile stride (overlap_height/width upstream) */
    int bh, bw;             /* blend extents in samples */
    int lim_h, lim_w;       /* row_limit_height/width */
} tiling;

static void tiling_params(const vae_decoder *d, int tsh, int tsw, tiling *t) {
    t->tlh = (int)(tsh / (double)d->spatial_ratio);
    t->tlw = (int)(tsw / (double)d->spatial_ratio);
    t->oh = (int)(t->tlh * (1.0 - TILE_OVERLAP_H));
    t->ow = (int)(t->tlw * (1.0 - TILE_OVERLAP_W));
    t->bh = (int)(tsh * TILE_OVERLAP_H);
    t->bw = (int)(tsw * TILE_OVERLAP_W);
    t->lim_h = tsh - t->bh;
    t->lim_w = tsw - t->bw;
}

int vae_tiling_applies(const vae_decoder *d, int h, int w, int tsh, int tsw) {
    tiling t;
    tiling_params(d, tsh, tsw, &t);
    return w > t.tlw || h > t.tlh;
}

int vae_tiling_check(const vae_decoder *d, int tsh, int tsw) {
    tiling t;
    tiling_params(d, tsh, tsw, &t);
    if (t.oh < 1 || t.ow < 1)
        return cvx_error("tile %dx%d samples is too small for this VAE (spatial ratio %d): tiles would not advance",
                         tsh, tsw, d->spatial_ratio);
    return 0;
}

int vae_decode_steps(const vae_decoder *d, int T, int h, int w, int tiled, int tsh, int tsw) {
    if (!tiled) return num_chunks(T);
    tiling t;
    tiling_params(d, tsh, tsw, &t);
    if (t.oh < 1 || t.ow < 1) return num_chunks(T);
    int rows = (h + t.oh - 1) / t.oh, cols = (w + t.ow - 1) / t.ow;
    return rows * cols * num_chunks(T);
}

double vae_estimate_peak_bytes(const vae_decoder *d, int h, int w) {
    /* The largest live set is in the last up block's first ResNet at full resolution: its
     * input, normalised copy, padded conv input and output (first chunk: 3 latent frames),
     * plus the carried conv caches in later chunks (~15%). Calibrated on the real config:
     * 3×30×45 latent 3.85 GB, 7×30×45 4.57 GB measured (incl. 0.5 GB of f32 weights). */
    int n = d->num_blocks;
    double cin = n >= 2 ? d->block_out[1] : d->block_out[0], cout = d->block_out[0];
    double S = (double)vae_chunk_frames(d, 3) * h * d->spatial_ratio * w * d->spatial_ratio;
    return 1.15 * 4.0 * S * (4.0 * cin + 2.0 * cout);
}

void vae_blend_v(const float *a, int Ha, float *b, int Hb, int C, int T, int W, int extent) {
    if (extent > Ha) extent = Ha;
    if (extent > Hb) extent = Hb;
    for (int c = 0; c < C; c++)
        for (int t = 0; t < T; t++)
            for (int y = 0; y < extent; y++) {
                float wa = (float)(1.0 - (double)y / extent), wb = (float)((double)y / extent);
                const float *ar = a + (((size_t)c * T + t) * Ha + (Ha - extent + y)) * W;
                float *br = b + (((size_t)c * T + t) * Hb + y) * W;
                for (int x = 0; x < W; x++) br[x] = ar[x] * wa + br[x] * wb;
            }
}

void vae_blend_h(const float *a, int Wa, float *b, int Wb, int C, int T, int H, int extent) {
    if (extent > Wa) extent = Wa;
    if (extent > Wb) extent = Wb;
    for (int x = 0; x < extent; x++) {
        float wa = (float)(1.0 - (double)x / extent), wb = (float)((double)x / extent);
        for (size_t row = 0; row < (size_t)C * T * H; row++)
            b[row * Wb + x] = a[row * Wa + (Wa - extent + x)] * wa + b[row * Wb + x] * wb;
    }
}

typedef struct {
    float *data;   /* [oc, T', Ht, Wt] */
    int H, W;
} tile_out;

float *vae_decode_tiled(const vae_decoder *d, const float *z, int T, int h, int w, int tsh, int tsw, int *T_out,
                        int *H_out, int *W_out, cvx_progress *p) {
    return vae_decode_tiled_dist(d, z, T, h, w, tsh, tsw, NULL, T_out, H_out, W_out, p);
}

/* The latent tile (i, j) of z → its decoded samples [oc, To, lh·r, lw·r] (a new buffer). */
static float *decode_tile(const vae_decoder *d, const tiling *t, const float *z, int T, int h, int w, int i, int j,
                          cvx_progress *p) {
    const int lc = d->latent_channels, oc = d->out_channels, r = d->spatial_ratio, To = vae_output_frames(d, T);
    int zi = i * t->oh, zj = j * t->ow;
    int lh = h - zi < t->tlh ? h - zi : t->tlh, lw = w - zj < t->tlw ? w - zj : t->tlw;
    float *zt = cvx_alloc_f32((size_t)lc * T * lh * lw);   // [lc, T, lh, lw]
    for (int c = 0; c < lc; c++)
        for (int f = 0; f < T; f++)
            for (int y = 0; y < lh; y++)
                memcpy(zt + (((size_t)c * T + f) * lh + y) * lw, z + (((size_t)c * T + f) * h + zi + y) * w + zj,
                       sizeof(float) * lw);
    float *o = cvx_alloc_f32((size_t)oc * To * lh * r * lw * r);
    vae_decode_chunked(d, zt, T, lh, lw, o, p);   /* own chunks and caches per tile */
    free(zt);
    return o;
}

/* Tiles over ranks: decode this rank's tiles (k mod size == rank), gather them on rank 0.
 * Returns on rank 0 every tile's decoded samples (tiles[k], row-major), elsewhere NULL. */
static float **decode_tiles_dist(const vae_decoder *d, const tiling *t, const float *z, int T, int h, int w,
                                 int rows, int cols, cvx_dist *dist, cvx_progress *p) {
    const int np = cvx_dist_size(dist), me = cvx_dist_rank(dist), n = rows * cols;
    const size_t per_sample = (size_t)d->out_channels * vae_output_frames(d, T) * d->spatial_ratio * d->spatial_ratio;
    size_t *tile_bytes = cvx_calloc((size_t)n, sizeof(size_t)), *rank_bytes = cvx_calloc((size_t)np, sizeof(size_t));
    for (int k = 0; k < n; k++) {
        int i = k / cols, j = k % cols, zi = i * t->oh, zj = j * t->ow;
        int lh = h - zi < t->tlh ? h - zi : t->tlh, lw = w - zj < t->tlw ? w - zj : t->tlw;
        tile_bytes[k] = per_sample * (size_t)lh * lw * sizeof(float);
        rank_bytes[k % np] += tile_bytes[k];
    }
    char *mine = cvx_malloc(rank_bytes[me] + 1), *at = mine;   /* this rank's tiles, in k order */
    for (int k = me; k < n; k += np) {
        float *o = decode_tile(d, t, z, T, h, w, k / cols, k % cols, p);
        memcpy(at, o, tile_bytes[k]);
        at += tile_bytes[k];
        free(o);
    }
    size_t total = 0;
    for (int r = 0; r < np; r++) total += rank_bytes[r];
    char *all = me == 0 ? cvx_malloc(total + 1) : NULL;
    if (cvx_dist_gatherv(dist, mine, rank_bytes, all, 0)) cvx_dist_die_last_error(dist);
    free(mine);
    float **tiles = NULL;
    if (me == 0) {   /* rank r's part holds its tiles k = r, r + np, ... in that order */
        tiles = cvx_calloc((size_t)n, sizeof *tiles);
        size_t off = 0;
        for (int r = 0; r < np; r++)
            for (int k = r; k < n; k += np) {
                tiles[k] = cvx_alloc_f32(tile_bytes[k] / sizeof(float));
                memcpy(tiles[k], all + off, tile_bytes[k]);
                off += tile_bytes[k];
            }
    }
    free(all);
    free(tile_bytes);
    free(rank_bytes);
    return tiles;
}

float *vae_decode_tiled_dist(const vae_decoder *d, const float *z, int T, int h, int w, int tsh, int tsw,
                             cvx_dist *dist, int *T_out, int *H_out, int *W_out, cvx_progress *p) {
    const int oc = d->out_channels, r = d->spatial_ratio;
    tiling t;
    tiling_params(d, tsh, tsw, &t);
    CVX_CHECK(t.oh >= 1 && t.ow >= 1);
    const int rows = (h + t.oh - 1) / t.oh, cols = (w + t.ow - 1) / t.ow, To = vae_output_frames(d, T);
    /* Output size: each tile keeps at most row_limit samples, as upstream (which can be more
     * than 8× the latent when the tile sizes are inconsistent). */
    int Hout = 0, Wout = 0;
    for (int i = 0; i < rows; i++) {
        int th = (h - i * t.oh < t.tlh ? h - i * t.oh : t.tlh) * r;
        Hout += th < t.lim_h ? th : t.lim_h;
    }
    for (int j = 0; j < cols; j++) {
        int tw = (w - j * t.ow < t.tlw ? w - j * t.ow : t.tlw) * r;
        Wout += tw < t.lim_w ? tw : t.lim_w;
    }
    float **tiles = NULL;   /* several ranks: every tile decoded up front, spread over them */
    if (dist && cvx_dist_size(dist) > 1) {
        tiles = decode_tiles_dist(d, &t, z, T, h, w, rows, cols, dist, p);
        if (!tiles) {
            *T_out = *H_out = *W_out = 0;
            return NULL;
        }
    }
    float *out = cvx_alloc_f32((size_t)oc * To * Hout * Wout);   // [oc, To, Hout, Wout]
    tile_out *prev = cvx_calloc((size_t)cols, sizeof *prev), *cur = cvx_calloc((size_t)cols, sizeof *cur);
    int y0 = 0;
    for (int i = 0; i < rows; i++) {
        int x0 = 0, kept_h = 0;
        for (int j = 0; j < cols; j++) {
            int zi = i * t.oh, zj = j * t.ow;
            int lh = h - zi < t.tlh ? h - zi : t.tlh, lw = w - zj < t.tlw ? w - zj : t.tlw;
            tile_out *o = &cur[j];
            o->H = lh * r, o->W = lw * r;
            o->data = tiles ? tiles[i * cols + j] : decode_tile(d, &t, z, T, h, w, i, j, p);   // [oc, To, H, W]
            /* Blend with the tile above and the one to the left (both already blended). */
            if (i > 0) vae_blend_v(prev[j].data, prev[j].H, o->data, o->H, oc, To, o->W, t.bh);
            if (j > 0) vae_blend_h(cur[j - 1].data, cur[j - 1].W, o->data, o->W, oc, To, o->H, t.bw);
            int kh = o->H < t.lim_h ? o->H : t.lim_h, kw = o->W < t.lim_w ? o->W : t.lim_w;
            for (int c = 0; c < oc; c++)
                for (int f = 0; f < To; f++)
                    for (int y = 0; y < kh; y++)
                        memcpy(out + (((size_t)c * To + f) * Hout + y0 + y) * Wout + x0,
                               o->data + (((size_t)c * To + f) * o->H + y) * o->W, sizeof(float) * kw);
            x0 += kw;
            kept_h = kh;
        }
        for (int j = 0; j < cols; j++) {
            free(prev[j].data);
            prev[j] = cur[j];
            cur[j].data = NULL;
        }
        y0 += kept_h;
    }
    for (int j = 0; j < cols; j++) free(prev[j].data);
    free(tiles);   /* the tiles themselves were freed as prev/cur */
    free(prev);
    free(cur);
    *T_out = To, *H_out = Hout, *W_out = Wout;
    return out;
}
