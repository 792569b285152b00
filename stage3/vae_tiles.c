/* Overlapping-tile blending and stitching, shared by the VAE decoder and encoder (vae_tiles.h). */
#include "vae_tiles.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

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
    float *data;   /* [C, T, H, W] */
    int H, W;
} tile_out;

float *vae_tiles_stitch(const vae_tile_grid *g, vae_tile_fn produce, void *user, int *H_out, int *W_out) {
    const int C = g->C, T = g->T, rows = g->rows, cols = g->cols;
    /* Output size: each tile keeps at most row_limit, as upstream (which can be more than the
     * input's size times the ratio when the tile sizes are inconsistent). */
    int Hout = 0, Wout = 0;
    for (int i = 0; i < rows; i++) Hout += g->tile_h[i] < g->keep_h ? g->tile_h[i] : g->keep_h;
    for (int j = 0; j < cols; j++) Wout += g->tile_w[j] < g->keep_w ? g->tile_w[j] : g->keep_w;
    float *out = cvx_alloc_f32((size_t)C * T * Hout * Wout);   // [C, T, Hout, Wout]
    tile_out *prev = cvx_calloc((size_t)cols, sizeof *prev), *cur = cvx_calloc((size_t)cols, sizeof *cur);
    int y0 = 0;
    for (int i = 0; i < rows; i++) {
        int x0 = 0, kept_h = 0;
        for (int j = 0; j < cols; j++) {
            tile_out *o = &cur[j];
            o->H = g->tile_h[i], o->W = g->tile_w[j];
            o->data = produce(user, i, j);   // [C, T, H, W]
            /* Blend with the tile above and the one to the left (both already blended). */
            if (i > 0) vae_blend_v(prev[j].data, prev[j].H, o->data, o->H, C, T, o->W, g->blend_h);
            if (j > 0) vae_blend_h(cur[j - 1].data, cur[j - 1].W, o->data, o->W, C, T, o->H, g->blend_w);
            const int kh = o->H < g->keep_h ? o->H : g->keep_h, kw = o->W < g->keep_w ? o->W : g->keep_w;
            for (int c = 0; c < C; c++)
                for (int f = 0; f < T; f++)
                    for (int y = 0; y < kh; y++)
                        memcpy(out + (((size_t)c * T + f) * Hout + y0 + y) * Wout + x0,
                               o->data + (((size_t)c * T + f) * o->H + y) * o->W, sizeof(float) * kw);
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
    free(prev), free(cur);
    *H_out = Hout, *W_out = Wout;
    return out;
}
