/* LTX-Video's latent layout (see ltx_pack.h). */
#include "ltx_pack.h"

#include "error.h"

int ltx_latent_grid(int frames, int height, int width, int *F, int *H, int *W) {
    if (frames < 1 || (frames - 1) % 8)
        return cvx_error("frames = %d: LTX-Video needs 8k + 1 frames (1, 9, 17, ..., 121, 161)", frames);
    if (height < 32 || width < 32 || height % 32 || width % 32)
        return cvx_error("size %dx%d (width x height): LTX-Video needs positive multiples of 32", width, height);
    *F = (frames - 1) / 8 + 1, *H = height / 32, *W = width / 32;
    return 0;
}

void ltx_pack_latents(const float *x, int B, int C, int F, int H, int W, float *out) {
    size_t S = (size_t)F * H * W;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            const float *xc = x + ((size_t)b * C + c) * S;                 // [F·H·W] of channel c
            float *ob = out + (size_t)b * S * C;
            for (size_t s = 0; s < S; s++) ob[s * C + c] = xc[s];
        }
}

void ltx_unpack_latents(const float *tokens, int B, int C, int F, int H, int W, float *out) {
    size_t S = (size_t)F * H * W;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            const float *tb = tokens + (size_t)b * S * C;
            float *oc = out + ((size_t)b * C + c) * S;
            for (size_t s = 0; s < S; s++) oc[s] = tb[s * C + c];
        }
}

void ltx_normalize_latents(float *x, int B, int C, size_t n_per, const float *mean, const float *std, float scaling) {
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            float *xc = x + ((size_t)b * C + c) * n_per;
            for (size_t i = 0; i < n_per; i++) xc[i] = (xc[i] - mean[c]) * scaling / std[c];
        }
}

void ltx_denormalize_latents(float *x, int B, int C, size_t n_per, const float *mean, const float *std, float scaling) {
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            float *xc = x + ((size_t)b * C + c) * n_per;
            for (size_t i = 0; i < n_per; i++) xc[i] = xc[i] * std[c] / scaling + mean[c];
        }
}
