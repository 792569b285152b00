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

/* The last `rows` rows of t (all it holds when it has fewer): what the tile below blends from.
 * t's buffer is freed. */
static tile_out bottom_strip(tile_out t, int C, int T, int rows) {
    if (rows > t.H) rows = t.H;
    if (rows < 0) rows = 0;
    tile_out s = {cvx_alloc_f32((size_t)C * T * (rows ? rows : 1) * t.W), rows, t.W};
    for (size_t ct = 0; ct < (size_t)C * T; ct++)
        memcpy(s.data + ct * rows * t.W, t.data + (ct * t.H + (t.H - rows)) * t.W, sizeof(float) * rows * t.W);
    free(t.data);
    return s;
}

float *vae_tiles_stitch(const vae_tile_grid *g, vae_tile_fn produce, void *user, int *H_out, int *W_out) {
    const int C = g->C, T = g->T, rows = g->rows, cols = g->cols;
    /* Output size: each tile keeps at most row_limit, as upstream (which can be more than the
     * input's size times the ratio when the tile sizes are inconsistent). */
    int Hout = 0, Wout = 0;
    for (int i = 0; i < rows; i++) Hout += g->tile_h[i] < g->keep_h ? g->tile_h[i] : g->keep_h;
    for (int j = 0; j < cols; j++) Wout += g->tile_w[j] < g->keep_w ? g->tile_w[j] : g->keep_w;
    float *out = cvx_alloc_f32((size_t)C * T * Hout * Wout);   // [C, T, Hout, Wout]
    /* Alive: per column the bottom blend_h rows of the (blended) tile above, the tile to the left
     * and the current one — blend_v / blend_h read nothing else, so the blends are unchanged. */
    tile_out *above = cvx_calloc((size_t)cols, sizeof *above), left = {0}, o;
    int y0 = 0;
    for (int i = 0; i < rows; i++) {
        int x0 = 0, kept_h = 0;
        for (int j = 0; j < cols; j++) {
            o.H = g->tile_h[i], o.W = g->tile_w[j];
            o.data = produce(user, i, j);   // [C, T, H, W]
            /* Blend with the tile above and the one to the left (both already blended). */
            if (i > 0) vae_blend_v(above[j].data, above[j].H, o.data, o.H, C, T, o.W, g->blend_h);
            if (j > 0) vae_blend_h(left.data, left.W, o.data, o.W, C, T, o.H, g->blend_w);
            const int kh = o.H < g->keep_h ? o.H : g->keep_h, kw = o.W < g->keep_w ? o.W : g->keep_w;
            for (int c = 0; c < C; c++)
                for (int f = 0; f < T; f++)
                    for (int y = 0; y < kh; y++)
                        memcpy(out + (((size_t)c * T + f) * Hout + y0 + y) * Wout + x0,
                               o.data + (((size_t)c * T + f) * o.H + y) * o.W, sizeof(float) * kw);
            x0 += kw;
            kept_h = kh;
            if (j > 0) {   /* the left tile is done: keep what the row below needs */
                free(above[j - 1].data);
                above[j - 1] = bottom_strip(left, C, T, g->blend_h);
            }
            left = o;
        }
        free(above[cols - 1].data);
        above[cols - 1] = bottom_strip(left, C, T, g->blend_h);
        left.data = NULL;
        y0 += kept_h;
    }
    for (int j = 0; j < cols; j++) free(above[j].data);
    free(above);
    *H_out = Hout, *W_out = Wout;
    return out;
}
