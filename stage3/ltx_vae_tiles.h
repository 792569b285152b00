/* AutoencoderKLLTXVideo's tiled decode (diffusers 0.35.2 autoencoder_kl_ltx.py: _decode with
 * use_framewise_decoding → _temporal_tiled_decode, use_tiling → tiled_decode), over
 * ltx_vae_decode (stage3/ltx_vae.h) on sub-latents. The published decoders are not causal, so a
 * tiled decode is not the untiled one: it is upstream's tiled decode, number for number (its
 * linear blends, applied in place in upstream's order: a tile blends with its already blended
 * upper and left neighbours; in time with the previous, already blended, tile).
 *
 * Memory: the output video plus one tile's decode, one row of spatial tiles and the previous
 * temporal tile (upstream keeps every tile). */
#ifndef CVX_STAGE3_LTX_VAE_TILES_H
#define CVX_STAGE3_LTX_VAE_TILES_H

#include "progress.h"
#include "stage3/ltx_vae.h"

typedef struct {
    int spatial;                     /* enable_tiling: tiles when the latents are larger than a tile */
    int framewise;                   /* use_framewise_decoding: temporal tiles when longer than a tile */
    int min_height, min_width;       /* tile_sample_min_height / _width: pixels, multiples of 32 (512) */
    int stride_height, stride_width; /* tile_sample_stride_*: pixels, multiples of 32 (448) */
    int min_frames, stride_frames;   /* tile_sample_min_num_frames / stride: multiples of 8 (16, 8) */
} ltx_vae_tiling;

/* Upstream's sizes (512 / 448 pixels, 16 / 8 frames), both kinds on. */
void ltx_vae_tiling_default(ltx_vae_tiling *t);

/* vae.decode(z, timestep) with the tiling t (NULL: untiled, ltx_vae_decode): z[C, F, h, w] →
 * video[3, 8(F − 1) + 1, 32h, 32w]. *tiled (may be NULL): whether tiles were used. progress (may be
 * NULL): one update per decode of a tile (ltx_vae_tile_count of them; 1 untiled). -1 + cvx_error
 * for tile sizes that are not multiples of 32 (8 in time) or a stride above the tile size. */
int ltx_vae_decode_tiled(ltx_vae *v, const ltx_vae_tiling *t, const float *z, int F, int h, int w, float timestep,
                         float *video, int *tiled, cvx_progress *progress);

/* The decodes ltx_vae_decode_tiled runs for latents [F, h, w] with the tiling t (1: untiled). */
int ltx_vae_tile_count(const ltx_vae_tiling *t, int F, int h, int w);

#endif
