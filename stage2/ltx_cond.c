/* LTX-Video's image-to-video conditioning math (see ltx_cond.h). */
#include "ltx_cond.h"

#include "ltx_schedule.h"

#include <stdint.h>
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

void ltx_condition_video_coords(int F, int H, int W, int frame_index, double frame_rate, float *vc) {
    size_t S = (size_t)F * H * W;
    float inv = (float)(1.0 / frame_rate);
    for (int f = 0; f < F; f++)
        for (int h = 0; h < H; h++)
            for (int w = 0; w < W; w++) {
                size_t s = ((size_t)f * H + h) * W + w;
                int64_t pf = (int64_t)f * 8 + 1 - 8;
                pf = (pf < 0 ? 0 : pf) + frame_index;   /* _scale_video_ids on int64 ids */
                vc[s] = (float)pf * inv;
                vc[S + s] = (float)(h * 32);
                vc[2 * S + s] = (float)(w * 32);
            }
}

void ltx_condition_renoise(float t, const float *init, const float *noise, const float *mask, int tokens, int C,
                           float scale, float *latents) {
    float tt = t / 1000.0f, t2 = tt * tt;   /* (t / 1000.0) ** 2 on a 0-d float32 tensor */
    for (int k = 0; k < tokens; k++) {
        if (!(mask[k] > 1.0f - 1e-6f)) continue;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)k * C + c;
            latents[i] = init[i] + scale * noise[i] * t2;
        }
    }
}

void ltx_lerp(const float *start, const float *end, float weight, size_t n, float *out) {
    for (size_t i = 0; i < n; i++) {
        float d = end[i] - start[i];
        out[i] = weight < 0.5f ? start[i] + weight * d : end[i] - d * (1.0f - weight);
    }
}
