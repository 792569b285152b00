/* CogVideoX VAE decoding drivers: temporal chunks with carried caches, overlapping spatial
 * tiles (diffusers 0.32.2 AutoencoderKLCogVideoX._decode / tiled_decode; the blending and
 * stitching is vae_tiles.c, shared with the encoder). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "cogvideox_vae.h"
#include "vae_conv.h"
#include "vae_tiles.h"

/* Upstream's num_latent_frames_batch_size: a fixed constant of the model code, not config. */
#define LATENT_FRAMES_PER_CHUNK 2
/* Upstream tile overlap factors (tile_overlap_factor_height / _width). */
#define TILE_OVERLAP_H (1.0 / 6.0)
#define TILE_OVERLAP_W (1.0 / 5.0)

int cogvideox_vae_chunk_frames(const cogvideox_vae_decoder *d, int n) {
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

int cogvideox_vae_output_frames(const cogvideox_vae_decoder *d, int T) {
    int total = 0;
    for (int i = 0; i < num_chunks(T); i++) {
        int s, e;
        chunk_range(T, i, &s, &e);
        total += cogvideox_vae_chunk_frames(d, e - s);
    }
    return total;
}

void cogvideox_vae_decode_chunked(const cogvideox_vae_decoder *d, const float *z, int T, int h, int w, float *out, cvx_progress *p) {
    const int lc = d->latent_channels, oc = d->out_channels, r = d->spatial_ratio;
    const int Tout = cogvideox_vae_output_frames(d, T);
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
        float *y = cogvideox_vae_decoder_forward(d, &cache, zc, n, h, w, &to);   // [oc, to, H, W]
        for (int c = 0; c < oc; c++)
            memcpy(out + ((size_t)c * Tout + t_done) * HWo, y + (size_t)c * to * HWo, sizeof(float) * to * HWo);
        t_done += to;
        vae_fmap_put(d->ctx, y);
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

static void tiling_params(const cogvideox_vae_decoder *d, int tsh, int tsw, tiling *t) {
    t->tlh = (int)(tsh / (double)d->spatial_ratio);
    t->tlw = (int)(tsw / (double)d->spatial_ratio);
    t->oh = (int)(t->tlh * (1.0 - TILE_OVERLAP_H));
    t->ow = (int)(t->tlw * (1.0 - TILE_OVERLAP_W));
    t->bh = (int)(tsh * TILE_OVERLAP_H);
    t->bw = (int)(tsw * TILE_OVERLAP_W);
    t->lim_h = tsh - t->bh;
    t->lim_w = tsw - t->bw;
}

int cogvideox_vae_tiling_applies(const cogvideox_vae_decoder *d, int h, int w, int tsh, int tsw) {
    tiling t;
    tiling_params(d, tsh, tsw, &t);
    return w > t.tlw || h > t.tlh;
}

int cogvideox_vae_tiling_check(const cogvideox_vae_decoder *d, int tsh, int tsw) {
    tiling t;
    tiling_params(d, tsh, tsw, &t);
    if (t.oh < 1 || t.ow < 1)
        return cvx_error("tile %dx%d samples is too small for this VAE (spatial ratio %d): tiles would not advance",
                         tsw, tsh, d->spatial_ratio);
    return 0;
}

/* Samples one axis of n latents stitches to with tiles of `tile` samples (tl latents, stride o,
 * each tile keeping at most lim samples): upstream's rule. */
static long stitched_extent(int n, int tl, int o, int r, int lim) {
    long total = 0;
    for (int i = 0; i < n; i += o) {
        const int out = (n - i < tl ? n - i : tl) * r;
        total += out < lim ? out : lim;
    }
    return total;
}

int cogvideox_vae_tiled_size(const cogvideox_vae_decoder *d, int h, int w, int tsh, int tsw, long *H, long *W) {
    tiling t;
    tiling_params(d, tsh, tsw, &t);
    if (t.oh < 1 || t.ow < 1) return cogvideox_vae_tiling_check(d, tsh, tsw);
    *H = stitched_extent(h, t.tlh, t.oh, d->spatial_ratio, t.lim_h);
    *W = stitched_extent(w, t.tlw, t.ow, d->spatial_ratio, t.lim_w);
    return 0;
}

/* The tile sizes nearest to `tile` (multiples of the spatial ratio, at most 4 apart, below and
 * above) whose tiles stitch an axis of n latents to n·r samples; "" when none is near. */
static void fitting_sizes(const cogvideox_vae_decoder *d, int n, int tile, int vertical, char *buf, size_t len) {
    const int r = d->spatial_ratio;
    int below = 0, above = 0;
    for (int k = 1; k <= 64 && (!below || !above); k++) {
        const int cand[2] = {(tile / r - k + 1) * r, (tile / r + k) * r};
        for (int s = 0; s < 2; s++) {
            if (cand[s] < r || cand[s] > (1 << 16) || cand[s] == tile || (s ? above : below)) continue;
            tiling t;
            tiling_params(d, cand[s], cand[s], &t);
            const int tl = vertical ? t.tlh : t.tlw, o = vertical ? t.oh : t.ow, lim = vertical ? t.lim_h : t.lim_w;
            if (o >= 1 && stitched_extent(n, tl, o, r, lim) == (long)n * r) *(s ? &above : &below) = cand[s];
        }
    }
    if (below && above) snprintf(buf, len, "; sizes that fit: %d or %d", below, above);
    else if (below || above) snprintf(buf, len, "; a size that fits: %d", below ? below : above);
    else buf[0] = 0;
}

int cogvideox_vae_tiling_check_size(const cogvideox_vae_decoder *d, int h, int w, int tsh, int tsw) {
    long H, W;
    if (cogvideox_vae_tiled_size(d, h, w, tsh, tsw, &H, &W)) return -1;
    const int r = d->spatial_ratio;
    for (int v = 1; v >= 0; v--) {
        const long got = v ? H : W, want = (long)(v ? h : w) * r;
        if (got == want) continue;
        tiling t;
        tiling_params(d, tsh, tsw, &t);
        char fit[96];
        fitting_sizes(d, v ? h : w, v ? tsh : tsw, v, fit, sizeof fit);
        return cvx_error("--tile_sample_min_%s %d would make the video %ld pixels %s, not %ld: upstream's tiled_decode "
                         "keeps %d pixels of each tile but steps %d%s",
                         v ? "height" : "width", v ? tsh : tsw, got, v ? "high" : "wide", want,
                         v ? t.lim_h : t.lim_w, (v ? t.oh : t.ow) * r, fit);
    }
    return 0;
}

int cogvideox_vae_decode_steps(const cogvideox_vae_decoder *d, int T, int h, int w, int tiled, int tsh, int tsw) {
    if (!tiled) return num_chunks(T);
    tiling t;
    tiling_params(d, tsh, tsw, &t);
    if (t.oh < 1 || t.ow < 1) return num_chunks(T);
    int rows = vae_tile_count(h, t.oh), cols = vae_tile_count(w, t.ow);
    return rows * cols * num_chunks(T);
}

double cogvideox_vae_estimate_peak_bytes(const cogvideox_vae_decoder *d, int h, int w) {
    /* The largest live set is in the last up block's first ResNet at full resolution: its
     * input, normalised copy, padded conv input and output (first chunk: 3 latent frames),
     * plus the carried conv caches in later chunks (~15%). Calibrated on the real config:
     * 3×30×45 latent 3.85 GB, 7×30×45 4.57 GB measured (incl. 0.5 GB of f32 weights). */
    int n = d->num_blocks;
    double cin = n >= 2 ? d->block_out[1] : d->block_out[0], cout = d->block_out[0];
    double S = (double)cogvideox_vae_chunk_frames(d, 3) * h * d->spatial_ratio * w * d->spatial_ratio;
    return 1.15 * 4.0 * S * (4.0 * cin + 2.0 * cout);
}

float *cogvideox_vae_decode_tiled(const cogvideox_vae_decoder *d, const float *z, int T, int h, int w, int tsh, int tsw, int *T_out,
                        int *H_out, int *W_out, cvx_progress *p) {
    return cogvideox_vae_decode_tiled_dist(d, z, T, h, w, tsh, tsw, NULL, T_out, H_out, W_out, p);
}

/* The latent tile (i, j) of z → its decoded samples [oc, To, lh·r, lw·r] (a new buffer). */
static float *decode_tile(const cogvideox_vae_decoder *d, const tiling *t, const float *z, int T, int h, int w, int i, int j,
                          cvx_progress *p) {
    const int lc = d->latent_channels, oc = d->out_channels, r = d->spatial_ratio, To = cogvideox_vae_output_frames(d, T);
    int zi = i * t->oh, zj = j * t->ow;
    int lh = h - zi < t->tlh ? h - zi : t->tlh, lw = w - zj < t->tlw ? w - zj : t->tlw;
    float *zt = cvx_alloc_f32((size_t)lc * T * lh * lw);   // [lc, T, lh, lw]
    for (int c = 0; c < lc; c++)
        for (int f = 0; f < T; f++)
            for (int y = 0; y < lh; y++)
                memcpy(zt + (((size_t)c * T + f) * lh + y) * lw, z + (((size_t)c * T + f) * h + zi + y) * w + zj,
                       sizeof(float) * lw);
    float *o = cvx_alloc_f32((size_t)oc * To * lh * r * lw * r);
    cogvideox_vae_decode_chunked(d, zt, T, lh, lw, o, p);   /* own chunks and caches per tile */
    free(zt);
    return o;
}

/* The tiles' producer for vae_tiles_stitch: decoded here, or (several ranks) taken from the
 * gathered ones. */
typedef struct {
    const cogvideox_vae_decoder *d;
    const tiling *t;
    const float *z;
    int T, h, w;
    float **tiles;   /* NULL: decode each tile when asked */
    int cols;
    cvx_progress *p;
} tile_src;

static float *produce_tile(void *user, int i, int j) {
    const tile_src *s = user;
    return s->tiles ? s->tiles[i * s->cols + j] : decode_tile(s->d, s->t, s->z, s->T, s->h, s->w, i, j, s->p);
}

/* Tiles over ranks: decode this rank's tiles (k mod size == rank), gather them on rank 0.
 * Returns on rank 0 every tile's decoded samples (tiles[k], row-major), elsewhere NULL. */
static float **decode_tiles_dist(const cogvideox_vae_decoder *d, const tiling *t, const float *z, int T, int h, int w,
                                 int rows, int cols, cvx_dist *dist, cvx_progress *p) {
    const int np = cvx_dist_size(dist), me = cvx_dist_rank(dist), n = rows * cols;
    const size_t per_sample = (size_t)d->out_channels * cogvideox_vae_output_frames(d, T) * d->spatial_ratio * d->spatial_ratio;
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

float *cogvideox_vae_decode_tiled_dist(const cogvideox_vae_decoder *d, const float *z, int T, int h, int w, int tsh, int tsw,
                             cvx_dist *dist, int *T_out, int *H_out, int *W_out, cvx_progress *p) {
    const int oc = d->out_channels, r = d->spatial_ratio;
    tiling t;
    tiling_params(d, tsh, tsw, &t);
    CVX_CHECK(t.oh >= 1 && t.ow >= 1);
    const int rows = vae_tile_count(h, t.oh), cols = vae_tile_count(w, t.ow), To = cogvideox_vae_output_frames(d, T);
    /* Every tile's output size in samples (the last row / column may be smaller). */
    int *tile_h = cvx_malloc(sizeof(int) * rows), *tile_w = cvx_malloc(sizeof(int) * cols);
    for (int i = 0; i < rows; i++) tile_h[i] = (h - i * t.oh < t.tlh ? h - i * t.oh : t.tlh) * r;
    for (int j = 0; j < cols; j++) tile_w[j] = (w - j * t.ow < t.tlw ? w - j * t.ow : t.tlw) * r;
    float **tiles = NULL;   /* several ranks: every tile decoded up front, spread over them */
    if (dist && cvx_dist_size(dist) > 1) {
        tiles = decode_tiles_dist(d, &t, z, T, h, w, rows, cols, dist, p);
        if (!tiles) {
            free(tile_h), free(tile_w);
            *T_out = *H_out = *W_out = 0;
            return NULL;
        }
    }
    tile_src src = {d, &t, z, T, h, w, tiles, cols, p};
    vae_tile_grid g = {rows, cols, tile_h, tile_w, oc, To, t.bh, t.bw, t.lim_h, t.lim_w};
    int Hout, Wout;
    float *out = vae_tiles_stitch(&g, produce_tile, &src, &Hout, &Wout);   // [oc, To, Hout, Wout]
    free(tiles);   /* the tiles themselves were freed by the stitcher */
    free(tile_h), free(tile_w);
    *T_out = To, *H_out = Hout, *W_out = Wout;
    return out;
}
