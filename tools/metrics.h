/* Frame metrics for cvx-compare: PSNR over RGB and SSIM over luma (Wang et al. 2004: 11×11
 * Gaussian window σ = 1.5, K1 = 0.01, K2 = 0.03, L = 255, the window's valid positions, the mean
 * over them; scikit-image's structural_similarity(gaussian_weights=True, use_sample_covariance=False)
 * on the BT.601 luma), and the frames of what a run wrote (a video, a folder of frames, stage 3's
 * --output_frames file) as 8-bit RGB. */
#ifndef CVX_TOOLS_METRICS_H
#define CVX_TOOLS_METRICS_H

#include <stdint.h>

#include "image.h"

/* PSNR in dB of two H×W RGB24 frames; INFINITY when they are equal. */
double frame_psnr(const uint8_t *a, const uint8_t *b, int H, int W);
/* Mean SSIM of the frames' luma (1 when equal). */
double frame_ssim(const uint8_t *a, const uint8_t *b, int H, int W);

/* The frames at path as RGB24: a video file or a folder of images (libav), or a safetensors file
 * with stage 3's `decoded` F32 [B, 3, T, H, W] (sample 0, post-processed to 8-bit as stage 3 does).
 * -1 + cvx_error. */
int frames_load(const char *path, cvx_rgb_frames *out);

#endif
