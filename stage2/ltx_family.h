/* LTX-Video in stage 2: the transformer (stage2/ltx.h) behind the denoiser interface
 * (stage2/denoiser.h) for LTXPipeline. The loop keeps the latents unpacked [C, F, H, W] (what
 * randn_tensor draws and the stage-2 file holds; the Euler step and the guidance are element-wise,
 * so the packing upstream keeps through the loop changes no value): each forward packs them into
 * tokens [S, C], runs the transformer and unpacks the velocity. */
#ifndef CVX_STAGE2_LTX_FAMILY_H
#define CVX_STAGE2_LTX_FAMILY_H

#include "stage2/denoiser.h"
#include "stage2/ltx.h"

/* The per-branch conditioning of the LTX denoiser (in.cond points to one): the T5 output (all L
 * rows, padding included) and the tokenizer's mask for the cross-attention. */
typedef struct {
    const float *text;   /* [L, caption_channels] */
    const float *mask;   /* [L] 1 = a real token, 0 = padding */
    int L;
} ltx_text_cond;

/* The denoiser over a loaded transformer (borrowed); frame_rate gives the rotary positions'
 * temporal scale 8/frame_rate (rope_interpolation_scale). Free with cvx_denoiser_free. */
void ltx_denoiser_init(cvx_denoiser *d, ltx_transformer *m, double frame_rate);

/* LTXConditionPipeline: the latents are packed tokens [tokens, C] (the extra condition tokens
 * first; prepare's F counts their frames too: F·H·W = tokens), the rotary positions come from
 * video_coords [3, tokens] and token k's timestep is min(t, (1 − mask[k])·1000). Borrowed. */
void ltx_denoiser_set_condition(cvx_denoiser *d, const float *mask, const float *video_coords, int tokens);

/* TeaCache4LTX-Video's coefficients (np.poly1d order) for this transformer, and the set's name:
 * published for LTX-Video 0.9.1 (2B, 2048 wide), taken for every transformer up to that width; NULL
 * (out zeroed) for the 13B ones (4096 wide: none published). docs/caching.md. */
const char *ltx_teacache_coefficients(const ltx_config *c, double out[5]);

#endif
