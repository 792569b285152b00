/* Pillow-exact resize of RGB8 images (see resize.h for the algorithm). */
#include "resize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#define PRECISION_BITS (32 - 8 - 2)

static double sinc(double x) {
    if (x == 0.0) return 1.0;
    x = x * M_PI;
    return sin(x) / x;
}

double cvx_lanczos3(double x) {
    if (-3.0 <= x && x < 3.0) return sinc(x) * sinc(x / 3);
    return 0.0;
}

/* The other filters of Resample.c, term for term (same constants and operation order). */
static double box_filter(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }

static double bilinear_filter(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static double hamming_filter(double x) {
    if (x < 0.0) x = -x;
    if (x == 0.0) return 1.0;
    if (x >= 1.0) return 0.0;
    x = x * M_PI;
    return sin(x) / x * (0.54f + 0.46f * cos(x));   /* float constants, as Pillow */
}

/* Keys' cubic convolution with a = −0.5 (Pillow's BICUBIC). */
static double bicubic_filter(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

int cvx_pil_filter_valid(int code) { return code >= CVX_PIL_LANCZOS && code <= CVX_PIL_HAMMING; }

const char *cvx_pil_filter_name(cvx_pil_filter f) {
    switch (f) {
    case CVX_PIL_LANCZOS: return "lanczos";
    case CVX_PIL_BILINEAR: return "bilinear";
    case CVX_PIL_BICUBIC: return "bicubic";
    case CVX_PIL_BOX: return "box";
    case CVX_PIL_HAMMING: return "hamming";
    }
    return "?";
}

double cvx_pil_filter_eval(cvx_pil_filter f, double x) {
    switch (f) {
    case CVX_PIL_LANCZOS: return cvx_lanczos3(x);
    case CVX_PIL_BILINEAR: return bilinear_filter(x);
    case CVX_PIL_BICUBIC: return bicubic_filter(x);
    case CVX_PIL_BOX: return box_filter(x);
    case CVX_PIL_HAMMING: return hamming_filter(x);
    }
    CVX_CHECK(!"unknown filter");
    return 0.0;
}

double cvx_pil_filter_support(cvx_pil_filter f) {
    switch (f) {
    case CVX_PIL_LANCZOS: return 3.0;
    case CVX_PIL_BICUBIC: return 2.0;
    case CVX_PIL_BILINEAR:
    case CVX_PIL_HAMMING: return 1.0;
    case CVX_PIL_BOX: return 0.5;
    }
    CVX_CHECK(!"unknown filter");
    return 0.0;
}

/* One axis: for each output index its first source index (bounds[2i]), tap count
 * (bounds[2i+1]) and ksize fixed-point taps (kk[i·ksize ...]). Pillow's precompute_coeffs
 * with the box (0, in_size) followed by normalize_coeffs_8bpc. Returns ksize. */
static int precompute_coeffs(int in_size, int out_size, cvx_pil_filter f, int **boundsp, int32_t **kkp) {
    const float in0 = 0.0f, in1 = (float)in_size;   /* box edges are floats in Pillow */
    double filterscale, scale;
    filterscale = scale = (double)(in1 - in0) / out_size;
    if (filterscale < 1.0) filterscale = 1.0;
    const double support = cvx_pil_filter_support(f) * filterscale;
    const int ksize = (int)ceil(support) * 2 + 1;
    double *k = cvx_malloc(sizeof(double) * (size_t)ksize);
    int32_t *kk = cvx_malloc(sizeof(int32_t) * (size_t)out_size * ksize);
    int *bounds = cvx_malloc(sizeof(int) * 2 * (size_t)out_size);
    for (int xx = 0; xx < out_size; xx++) {
        const double center = in0 + (xx + 0.5) * scale, ss = 1.0 / filterscale;
        double ww = 0.0;
        int xmin = (int)(center - support + 0.5);   /* "Round the value" (truncation toward 0) */
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        int x = 0;
        for (; x < xmax; x++) {
            double w = cvx_pil_filter_eval(f, (x + xmin - center + 0.5) * ss);
            k[x] = w;
            ww += w;
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0) k[x] /= ww;
        for (; x < ksize; x++) k[x] = 0;
        for (x = 0; x < ksize; x++)   /* normalize_coeffs_8bpc */
            kk[(size_t)xx * ksize + x] = k[x] < 0 ? (int32_t)(-0.5 + k[x] * (1 << PRECISION_BITS))
                                                  : (int32_t)(0.5 + k[x] * (1 << PRECISION_BITS));
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
    free(k);
    *boundsp = bounds;
    *kkp = kk;
    return ksize;
}

/* clip8: the arithmetic shift (floor) then clamp to 0..255, as Pillow's lookup table. */
static uint8_t clip8(int64_t ss) {
    int64_t v = ss >> PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

void cvx_resize_rgb8(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh, cvx_pil_filter f) {
    CVX_CHECK(sw >= 1 && sh >= 1 && dw >= 1 && dh >= 1 && cvx_pil_filter_valid((int)f));
    const int need_h = dw != sw, need_v = dh != sh;
    int *bv, *bh = NULL;
    int32_t *kv, *kh = NULL;
    const int ksv = precompute_coeffs(sh, dh, f, &bv, &kv);
    const int yfirst = bv[0], ylast = bv[2 * dh - 2] + bv[2 * dh - 1];   /* source rows in use */
    const uint8_t *in = src;
    int in_w = sw;
    uint8_t *tmp = NULL;
    if (need_h) {   /* horizontal pass on rows yfirst .. ylast−1 into an 8-bit image */
        const int ksh = precompute_coeffs(sw, dw, f, &bh, &kh);
        for (int i = 0; i < dh; i++) bv[2 * i] -= yfirst;
        const int rows = ylast - yfirst;
        tmp = cvx_malloc((size_t)rows * dw * 3);
#pragma omp parallel for schedule(static)
        for (int yy = 0; yy < rows; yy++) {
            const uint8_t *row = src + (size_t)(yy + yfirst) * sw * 3;
            for (int xx = 0; xx < dw; xx++) {
                const int xmin = bh[2 * xx], xmax = bh[2 * xx + 1];
                const int32_t *k = kh + (size_t)xx * ksh;
                int64_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
                for (int x = 0; x < xmax; x++) {
                    const uint8_t *p = row + (size_t)(x + xmin) * 3;
                    s0 += p[0] * (int64_t)k[x], s1 += p[1] * (int64_t)k[x], s2 += p[2] * (int64_t)k[x];
                }
                uint8_t *o = tmp + ((size_t)yy * dw + xx) * 3;
                o[0] = clip8(s0), o[1] = clip8(s1), o[2] = clip8(s2);
            }
        }
        in = tmp, in_w = dw;
    }
    if (need_v) {
#pragma omp parallel for schedule(static)
        for (int yy = 0; yy < dh; yy++) {
            const int ymin = bv[2 * yy], ymax = bv[2 * yy + 1];
            const int32_t *k = kv + (size_t)yy * ksv;
            for (int xx = 0; xx < in_w; xx++) {
                int64_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
                for (int y = 0; y < ymax; y++) {
                    const uint8_t *p = in + ((size_t)(y + ymin) * in_w + xx) * 3;
                    s0 += p[0] * (int64_t)k[y], s1 += p[1] * (int64_t)k[y], s2 += p[2] * (int64_t)k[y];
                }
                uint8_t *o = dst + ((size_t)yy * in_w + xx) * 3;
                o[0] = clip8(s0), o[1] = clip8(s1), o[2] = clip8(s2);
            }
        }
    } else {
        memcpy(dst, in, (size_t)dh * dw * 3);   /* no vertical pass: the horizontal result (or a copy) */
    }
    free(tmp), free(bh), free(kh), free(bv), free(kv);
}

void cvx_resize_lanczos_rgb8(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh) {
    cvx_resize_rgb8(src, sw, sh, dst, dw, dh, CVX_PIL_LANCZOS);
}

void cvx_preprocess_image(const uint8_t *rgb, int sw, int sh, int dw, int dh, float *out) {
    const uint8_t *img = rgb;
    uint8_t *resized = NULL;
    if (sw != dw || sh != dh) {
        resized = cvx_malloc((size_t)dw * dh * 3);
        cvx_resize_lanczos_rgb8(rgb, sw, sh, resized, dw, dh);
        img = resized;
    }
    const size_t n = (size_t)dw * dh;
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < n; i++) {
            float u = (float)img[i * 3 + c] / 255.0f;   /* np.array(img).astype(float32) / 255.0 */
            out[c * n + i] = 2.0f * u - 1.0f;           /* 2.0 * images - 1.0 */
        }
    free(resized);
}

void cvx_preprocess_frames(const uint8_t *rgb, int frames, int sw, int sh, int dw, int dh, float *out) {
    const size_t HW = (size_t)dw * dh;
    float *one = cvx_malloc(sizeof(float) * 3 * HW);   // [3, dh, dw]
    for (int t = 0; t < frames; t++) {
        cvx_preprocess_image(rgb + (size_t)t * sw * sh * 3, sw, sh, dw, dh, one);
        for (int c = 0; c < 3; c++) memcpy(out + ((size_t)c * frames + t) * HW, one + (size_t)c * HW, sizeof(float) * HW);
    }
    free(one);
}
