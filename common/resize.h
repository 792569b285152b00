/* Image resizing exactly as Pillow's Image.resize((w, h), filter) on RGB8, and diffusers'
 * VaeImageProcessor.preprocess normalisation to [-1, 1].
 *
 * Pillow (src/libImaging/Resample.c, ImagingResampleInner): separable, the horizontal pass
 * first into an 8-bit intermediate image (only the source rows the vertical pass reads), then
 * the vertical pass; each pass is skipped when that size does not change. Per output pixel the
 * filter window is centred at (x + 0.5)·scale, its support stretched by the downscale factor
 * (antialiasing), taps normalised to sum 1 in double, then rounded to 22-bit fixed point
 * (PRECISION_BITS = 32 − 8 − 2); the integer sum starts at 2^21 (rounding) and is clipped to
 * 0..255 after an arithmetic shift. The filters are Pillow's: LANCZOS (a = 3, support 3),
 * BICUBIC (Keys a = −0.5, support 2), BILINEAR (triangle, 1), BOX (0.5), HAMMING (1). */
#ifndef CVX_RESIZE_H
#define CVX_RESIZE_H

#include <stdint.h>

/* Pillow's resampling filters, numbered as PIL.Image.Resampling (NEAREST = 0 is not a
 * convolution filter and is not supported here). */
typedef enum {
    CVX_PIL_LANCZOS = 1,
    CVX_PIL_BILINEAR = 2,
    CVX_PIL_BICUBIC = 3,
    CVX_PIL_BOX = 4,
    CVX_PIL_HAMMING = 5,
} cvx_pil_filter;

/* 1 when `code` (a PIL.Image.Resampling value, e.g. a preprocessor_config.json "resample")
 * names a filter cvx_resize_rgb8 implements. */
int cvx_pil_filter_valid(int code);
/* "lanczos", "bicubic", ... (for messages). */
const char *cvx_pil_filter_name(cvx_pil_filter f);
/* The filter's kernel and support (for tests). */
double cvx_pil_filter_eval(cvx_pil_filter f, double x);
double cvx_pil_filter_support(cvx_pil_filter f);

/* Resize src[sh][sw][3] to dst[dh][dw][3] (both RGB8, row-major, packed) with Pillow's filter f.
 * Sizes ≥ 1. Same size: a plain copy (Pillow returns a copy). */
void cvx_resize_rgb8(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh, cvx_pil_filter f);
/* cvx_resize_rgb8 with CVX_PIL_LANCZOS (diffusers' VaeImageProcessor default). */
void cvx_resize_lanczos_rgb8(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh);

/* VaeImageProcessor.preprocess on an RGB8 image: resize to dw×dh with cvx_resize_lanczos_rgb8
 * when the size differs, then x/255 → 2x − 1 in float32 as numpy/torch compute it.
 * out: [3, dh, dw] (channel-major, as the [1, 3, H, W] tensor upstream). */
void cvx_preprocess_image(const uint8_t *rgb, int sw, int sh, int dw, int dh, float *out);

/* VideoProcessor.preprocess_video on F frames (RGB8, each sw×sh, packed one after another as
 * in cvx_rgb_frames): every frame as cvx_preprocess_image, out: [3, F, dh, dw] (the [1, 3, F, H, W]
 * pixels the VAE encoder takes). */
void cvx_preprocess_frames(const uint8_t *rgb, int frames, int sw, int sh, int dw, int dh, float *out);

/* Pillow's Lanczos filter sinc(x)·sinc(x/3) on [−3, 3) (exposed for tests). */
double cvx_lanczos3(double x);

#endif
