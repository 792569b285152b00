/* The one tile stitcher of the VAE: the decoder's tiled_decode and the encoder's tiled_encode
 * (diffusers 0.32.2 AutoencoderKLCogVideoX) both cut their input into overlapping tiles, run
 * each tile on its own, blend every tile with the one above and the one to the left
 * (vae_blend_v / vae_blend_h below) and keep at most row_limit of each. Only the
 * units differ (the decoder's tiles are latents and its blends samples, the encoder's the
 * other way round), so each side describes its grid in output units and produces the tiles;
 * the blending and stitching is here. Internal to stage3. */
#ifndef CVX_STAGE3_VAE_TILES_H
#define CVX_STAGE3_VAE_TILES_H

typedef struct {
    int rows, cols;         /* the tile grid, produced row-major */
    const int *tile_h;      /* [rows]: output height of the tiles in row i */
    const int *tile_w;      /* [cols]: output width of the tiles in column j */
    int C, T;               /* channels and frames of every tile's output */
    int blend_h, blend_w;   /* blend extents (upstream blend_extent), output units */
    int keep_h, keep_w;     /* row_limit_height / _width: the most rows / columns a tile keeps */
} vae_tile_grid;

/* Tile (i, j)'s output, a new cvx_alloc_f32 buffer [C, T, tile_h[i], tile_w[j]] that the
 * stitcher blends, copies out and frees. */
typedef float *(*vae_tile_fn)(void *user, int i, int j);

/* Produces the tiles of g in row-major order, blends and stitches them; returns the whole
 * output [C, T, *H_out, *W_out] (each tile keeping at most keep_h × keep_w, as upstream). Alive
 * besides the output: two tiles and, per column, the last blend_h rows of the tile above. */
float *vae_tiles_stitch(const vae_tile_grid *g, vae_tile_fn produce, void *user, int *H_out, int *W_out);

/* Linear blends of overlapping tiles along height / width, as upstream blend_v / blend_h:
 * the first `extent` rows (columns) of b[C, T, Hb, W] fade in from the last ones of
 * a[C, T, Ha, W] (b modified in place; extent clipped to both sizes). */
void vae_blend_v(const float *a, int Ha, float *b, int Hb, int C, int T, int W, int extent);
void vae_blend_h(const float *a, int Wa, float *b, int Wb, int C, int T, int H, int extent);

/* Number of tiles of stride `stride` along `size` (upstream's range(0, size, stride)). */
static inline int vae_tile_count(int size, int stride) { return (size + stride - 1) / stride; }

#endif
