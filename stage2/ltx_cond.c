/* LTX-Video's image-to-video conditioning math (see ltx_cond.h). */
#include "ltx_cond.h"

#include "ltx_schedule.h"

#include <string.h>

void ltx_i2v_initial_latents(const float *image_latent, const float *noise, int C, int F, int h, int w,
                             float *latents, float *mask) {
    size_t hw = (size_t)h * w, S = (size_t)F * hw;
    for (size_t s = 0; s < S; s++) {
        float m = s < hw ? 1.0f : 0.0f;
        mask[s] = m;
        for (int c = 0; c < C; c++)   /* init·mask + noise·(1 − mask), float32 as upstream */
            latents[s * C + c] = image_latent[(size_t)c * hw + s % hw] * m + noise[(size_t)c * S + s] * (1.0f - m);
    }
}

void ltx_i2v_timesteps(float t, const float *mask, int S, float *out) {
    for (int s = 0; s < S; s++) out[s] = t * (1.0f - mask[s]);
}

void ltx_i2v_step(const float *sigmas, int i, const float *v, const float *x, int S, int C, int hw, float *out) {
    size_t keep = (size_t)hw * C, n = (size_t)S * C;
    memcpy(out, x, sizeof(float) * keep);
    ltx_step(sigmas, i, v + keep, x + keep, n - keep, out + keep);
}
