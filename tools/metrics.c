/* Frame metrics (metrics.h). */
#include "tools/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "safetensors.h"
#include "stage3/video.h"
#include "tools/runfile.h"

double frame_psnr(const uint8_t *a, const uint8_t *b, int H, int W) {
    const size_t n = (size_t)H * W * 3;
    double se = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        se += d * d;
    }
    return se == 0 ? INFINITY : 10.0 * log10(255.0 * 255.0 / (se / (double)n));
}

static void luma(const uint8_t *rgb, int H, int W, double *y) {
    for (size_t i = 0; i < (size_t)H * W; i++)
        y[i] = 0.299 * rgb[3 * i] + 0.587 * rgb[3 * i + 1] + 0.114 * rgb[3 * i + 2];
}

/* out[(H − k + 1) × (W − k + 1)] = x filtered with the k×k separable window g (valid positions) */
static void filter_valid(const double *x, int H, int W, const double *g, int k, double *tmp, double *out) {
    const int Ho = H - k + 1, Wo = W - k + 1;
    for (int r = 0; r < H; r++)
        for (int c = 0; c < Wo; c++) {
            double s = 0;
            for (int j = 0; j < k; j++) s += g[j] * x[(size_t)r * W + c + j];
            tmp[(size_t)r * Wo + c] = s;
        }
    for (int r = 0; r < Ho; r++)
        for (int c = 0; c < Wo; c++) {
            double s = 0;
            for (int j = 0; j < k; j++) s += g[j] * tmp[(size_t)(r + j) * Wo + c];
            out[(size_t)r * Wo + c] = s;
        }
}

double frame_ssim(const uint8_t *a, const uint8_t *b, int H, int W) {
    int k = 11;
    if (H < k || W < k) k = (H < W ? H : W) | 1;   /* odd, fits */
    if (k > H || k > W) k -= 2;
    if (k < 1) return memcmp(a, b, (size_t)H * W * 3) ? 0.0 : 1.0;
    double g[11], gs = 0;
    const double sigma = 1.5;
    for (int j = 0; j < k; j++) gs += g[j] = exp(-0.5 * ((j - k / 2) * (j - k / 2)) / (sigma * sigma));
    for (int j = 0; j < k; j++) g[j] /= gs;
    const size_t n = (size_t)H * W, no = (size_t)(H - k + 1) * (W - k + 1);
    double *buf = cvx_malloc((6 * n + 5 * no) * sizeof(double));
    double *x = buf, *y = x + n, *xx = y + n, *yy = xx + n, *xy = yy + n, *t = xy + n;   /* t: the row pass */
    double *mx = t + n, *my = mx + no, *sxx = my + no, *syy = sxx + no, *sxy = syy + no;
    luma(a, H, W, x), luma(b, H, W, y);
    for (size_t i = 0; i < n; i++) xx[i] = x[i] * x[i], yy[i] = y[i] * y[i], xy[i] = x[i] * y[i];
    filter_valid(x, H, W, g, k, t, mx), filter_valid(y, H, W, g, k, t, my);
    filter_valid(xx, H, W, g, k, t, sxx), filter_valid(yy, H, W, g, k, t, syy), filter_valid(xy, H, W, g, k, t, sxy);
    const double C1 = (0.01 * 255) * (0.01 * 255), C2 = (0.03 * 255) * (0.03 * 255);
    double sum = 0;
    for (size_t i = 0; i < no; i++) {
        const double vx = sxx[i] - mx[i] * mx[i], vy = syy[i] - my[i] * my[i], cxy = sxy[i] - mx[i] * my[i];
        sum += ((2 * mx[i] * my[i] + C1) * (2 * cxy + C2)) /
               ((mx[i] * mx[i] + my[i] * my[i] + C1) * (vx + vy + C2));
    }
    free(buf);
    return sum / (double)no;
}

int frames_load(const char *path, cvx_rgb_frames *out) {
    memset(out, 0, sizeof *out);
    rf_file f;
    if (rf_open(path, &f)) return -1;
    if (f.kind == RF_VIDEO) {
        rf_close(&f);
        return cvx_video_load(path, 0, out);
    }
    const cvx_tensor *t = f.st ? cvx_st_find(f.st, "decoded") : NULL;
    if (f.kind != RF_FRAMES || !t) {
        rf_close(&f);
        return cvx_error("%s: not a video, a folder of frames or stage 3's --output_frames file", path);
    }
    const int T = (int)t->shape[2], H = (int)t->shape[3], W = (int)t->shape[4];
    const size_t per = (size_t)3 * T * H * W;
    float *dec = cvx_malloc(t->numel * sizeof(float));
    cvx_tensor_to_f32(t, dec);
    out->frames = T, out->height = H, out->width = W;
    out->rgb = cvx_malloc(per);
    for (int k = 0; k < T; k++) video_frame_rgb(dec, T, H, W, k, out->rgb + (size_t)k * H * W * 3);
    free(dec);
    rf_close(&f);
    return 0;
}
