/* Positional information for the CogVideoX transformer, computed exactly as diffusers 0.32.2
 * computes it: the 3D sin-cos table (CogVideoX-2b) and the 3D rotary tables (CogVideoX-5b / 1.5;
 * cogvideox_rope_tables in cogvideox.h). The timestep sinusoid is common/ops.h's. */
#ifndef CVX_STAGE2_COGVIDEOX_ROPE_H
#define CVX_STAGE2_COGVIDEOX_ROPE_H

#include "cogvideox.h"

#include "ops.h"

/* get_3d_sincos_pos_embed: table [T·gh·gw, D], token order (t, y, x); per token
 * [temporal D/4 | width-based 3D/8 | height-based 3D/8], each part [sin | cos].
 * Computed in float64, rounded to float32. -1 + cvx_error if D is not a multiple of 16. */
int cogvideox_sincos_3d(float *out, int D, int T, int gh, int gw, double spatial_scale, double temporal_scale);


/* diffusers get_resize_crop_region_for_grid((gh, gw), bw, bh): crop = (top, left, bottom, right). */
void cogvideox_crop_region(int gh, int gw, int bw, int bh, int crop[4]);

#endif
