/* 3D sin-cos table and 3D rotary tables, number for number as diffusers
 * 0.32.2 computes them (float32 where PyTorch uses float32, float64 where numpy-style code does). */
#include "cogvideox_rope.h"
#include "error.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>

/* get_1d_sincos_pos_embed_from_grid for one position: d values [sin(pos·ω) | cos(pos·ω)],
 * ω_k = 1/10000^(k/(d/2)) in float64. */
static void sincos_1d(float *out, int d, float pos) {
    int h = d / 2;
    for (int k = 0; k < h; k++) {
        double omega = 1.0 / pow(10000.0, (double)k / (d / 2.0));
        double a = (double)pos * omega;
        out[k] = (float)sin(a);
        out[h + k] = (float)cos(a);
    }
}

int cogvideox_sincos_3d(float *out, int D, int T, int gh, int gw, double spatial_scale, double temporal_scale) {
    if (D % 16 != 0)
        return cvx_error("3D sin-cos positional embedding needs an inner dim divisible by 16, got %d", D);
    int dt = D / 4, ds = 3 * D / 8;   /* temporal part, then width part and height part of the spatial 3D/4 */
    /* positions are float32 (arange / scale in float32), the table itself float64 */
    float sscale = (float)spatial_scale, tscale = (float)temporal_scale;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++)
        for (int y = 0; y < gh; y++)
            for (int x = 0; x < gw; x++) {
                float *o = out + (((size_t)t * gh + y) * gw + x) * D;   // [D]
                sincos_1d(o, dt, (float)t / tscale);
                sincos_1d(o + dt, ds, (float)x / sscale);            /* width first ("w goes first") */
                sincos_1d(o + dt + ds, ds, (float)y / sscale);
            }
    return 0;
}

void cogvideox_crop_region(int gh, int gw, int bw, int bh, int crop[4]) {
    double r = (double)gh / gw;
    int rh, rw;
    /* Python round(): half to even, which nearbyint does in the default rounding mode */
    if (r > (double)bh / bw) { rh = bh; rw = (int)nearbyint((double)bh / gh * gw); }
    else { rw = bw; rh = (int)nearbyint((double)bw / gw * gh); }
    int top = (int)nearbyint((bh - rh) / 2.0), left = (int)nearbyint((bw - rw) / 2.0);
    crop[0] = top; crop[1] = left; crop[2] = top + rh; crop[3] = left + rw;
}

/* get_1d_rotary_pos_embed(use_real): for positions pos[n] and axis dim d, writes cos/sin
 * [n, d] (each frequency repeated twice). f_j = 1/10000^((2j)/d), all float32. */
static void rope_1d(float *cos_out, float *sin_out, const float *pos, int n, int d) {
    for (int j = 0; j < d / 2; j++) {
        float e = (float)(2 * j) / (float)d;
        float f = 1.0f / (float)pow(10000.0, (double)e);
        for (int i = 0; i < n; i++) {
            float a = pos[i] * f;
            float c = (float)cos((double)a), s = (float)sin((double)a);
            cos_out[(size_t)i * d + 2 * j] = cos_out[(size_t)i * d + 2 * j + 1] = c;
            sin_out[(size_t)i * d + 2 * j] = sin_out[(size_t)i * d + 2 * j + 1] = s;
        }
    }
}

int cogvideox_num_video_tokens(const cogvideox_config *c, int F, int H, int W) {
    int pt = c->patch_size_t > 0 ? c->patch_size_t : 1;
    return ((F + pt - 1) / pt) * (H / c->patch_size) * (W / c->patch_size);
}

int cogvideox_rope_tables(const cogvideox_config *c, int F, int H, int W, float *cos_out, float *sin_out) {
    int p = c->patch_size, pt = c->patch_size_t, hd = c->attention_head_dim;
    if (!c->use_rotary_positional_embeddings)
        return cvx_error("rotary tables requested for a model without use_rotary_positional_embeddings");
    if (F <= 0 || H <= 0 || W <= 0 || H % p || W % p)
        return cvx_error("rotary tables: latent grid %dx%dx%d must be positive with H, W multiples of patch_size %d", F,
                         H, W, p);
    if (hd % 16)
        return cvx_error("rotary embeddings need attention_head_dim divisible by 16, got %d", hd);
    int gh = H / p, gw = W / p, bh = c->sample_height / p, bw = c->sample_width / p;
    int T = pt > 0 ? (F + pt - 1) / pt : F;
    int dt = hd / 4, dh = hd / 8 * 3, dw = hd / 8 * 3;
    float *pt_ = cvx_malloc(sizeof(float) * (size_t)T), *ph = cvx_malloc(sizeof(float) * (size_t)gh),
          *pw = cvx_malloc(sizeof(float) * (size_t)gw);
    if (pt <= 0) {
        /* 1.0: crop region of the base grid; linspace(start, stop·(n−1)/n, n) (upstream's quirk) */
        int crop[4];
        cogvideox_crop_region(gh, gw, bw, bh, crop);
        cvx_linspace_f32((float)crop[0], (float)((double)crop[2] * (gh - 1) / gh), gh, 1, ph);
        cvx_linspace_f32((float)crop[1], (float)((double)crop[3] * (gw - 1) / gw), gw, 1, pw);
        cvx_linspace_f32(0.0f, (float)((double)T * (T - 1) / T), T, 1, pt_);
    } else {
        /* 1.5: integer positions, a slice of the grid of max size (sample size / p) */
        if (gh > bh || gw > bw) {
            free(pt_); free(ph); free(pw);
            return cvx_error("rotary tables: patch grid %dx%d exceeds the config's sample size grid %dx%d "
                             "(width x height: sample_width/height / patch_size)", gw, gh, bw, bh);
        }
        for (int i = 0; i < T; i++) pt_[i] = (float)i;
        for (int i = 0; i < gh; i++) ph[i] = (float)i;
        for (int i = 0; i < gw; i++) pw[i] = (float)i;
    }
    float *ct = cvx_malloc(sizeof(float) * (size_t)T * dt), *st = cvx_malloc(sizeof(float) * (size_t)T * dt);
    float *ch = cvx_malloc(sizeof(float) * (size_t)gh * dh), *sh = cvx_malloc(sizeof(float) * (size_t)gh * dh);
    float *cw = cvx_malloc(sizeof(float) * (size_t)gw * dw), *sw = cvx_malloc(sizeof(float) * (size_t)gw * dw);
    rope_1d(ct, st, pt_, T, dt);
    rope_1d(ch, sh, ph, gh, dh);
    rope_1d(cw, sw, pw, gw, dw);
    /* token (t, y, x): [t part | h part | w part] */
    for (int t = 0; t < T; t++)
        for (int y = 0; y < gh; y++)
            for (int x = 0; x < gw; x++) {
                size_t row = (((size_t)t * gh + y) * gw + x) * hd;
                for (int i = 0; i < dt; i++) {
                    cos_out[row + i] = ct[(size_t)t * dt + i];
                    sin_out[row + i] = st[(size_t)t * dt + i];
                }
                for (int i = 0; i < dh; i++) {
                    cos_out[row + dt + i] = ch[(size_t)y * dh + i];
                    sin_out[row + dt + i] = sh[(size_t)y * dh + i];
                }
                for (int i = 0; i < dw; i++) {
                    cos_out[row + dt + dh + i] = cw[(size_t)x * dw + i];
                    sin_out[row + dt + dh + i] = sw[(size_t)x * dw + i];
                }
            }
    free(pt_); free(ph); free(pw); free(ct); free(st); free(ch); free(sh); free(cw); free(sw);
    return 0;
}
