/* The K types of ggml (super-blocks of 256 values with 6-bit or 4-bit sub-block scales):
 * dequantize_row_q{2..6}_K and quantize_row_q{2..6}_K_ref of ggml-quants.c, the same float32
 * operations in the same order, so bit-exact to ggml.
 * The quantizers' multiply-adds that GCC fuses in ggml's reference on FMA targets are explicit
 * fmaf() (see quant.c); nearest_int's argument is not fused (asserts on, as in the golden build).
 * Layouts (ggml-common.h, byte offsets):
 *   Q2_K  84: scales[16] @0 (low nibble scale, high nibble min), qs[64] @16, d @80, dmin @82
 *   Q3_K 110: hmask[32] @0, qs[64] @32, scales[12] @96 (6-bit), d @108
 *   Q4_K 144: d @0, dmin @2, scales[12] @4 (6-bit scale+min x 8), qs[128] @16
 *   Q5_K 176: d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48
 *   Q6_K 210: ql[128] @0, qh[64] @128, scales[16] (int8) @192, d @208 */
#include "quant_impl.h"

#include <math.h>
#include <stdbool.h>

#define GROUP_MAX_EPS 1e-15f
#define MAXI(a, b) ((a) > (b) ? (a) : (b))
#define MINI(a, b) ((a) < (b) ? (a) : (b))

/* ================= dequantization ================= */

void cvx_q2_K_to_f32(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / CVX_QK_K; i++, b += 84) {
        const float d = qi_f16(b + 80), min = qi_f16(b + 82);
        const uint8_t *sc = b, *q = b + 16;
        int is = 0;
        for (int h = 0; h < 2; h++, q += 32)
            for (int shift = 0; shift < 8; shift += 2)
                for (int half = 0; half < 2; half++) {
                    const uint8_t s = sc[is++];
                    const float dl = d * (float)(s & 0xf), ml = min * (float)(s >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
                }
    }
}

/* The 16 signed 6-bit scales of a Q3_K block (low 4 bits in scales[0..7], high 2 bits in
 * scales[8..11]), minus 32. */

void cvx_q3_K_to_f32(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / CVX_QK_K; i++, b += 110) {
        const float d_all = qi_f16(b + 108);
        const uint8_t *hm = b, *q = b + 32;
        int sc[16], is = 0;
        qi_q3_K_scales(b + 96, sc);
        uint8_t m = 1;
        for (int h = 0; h < 2; h++, q += 32)
            for (int shift = 0; shift < 8; shift += 2, m <<= 1)
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * (float)sc[is++];
                    for (int l = 0; l < 16; l++) {
                        const int k = l + 16 * half;
                        *y++ = dl * (float)(((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
                    }
                }
    }
}

void cvx_q4_K_to_f32(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / CVX_QK_K; i++, b += 144) {
        const float d = qi_f16(b), min = qi_f16(b + 2);
        const uint8_t *q = b + 16;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, m;
            qi_scale_min_k4(2 * c, b + 4, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            qi_scale_min_k4(2 * c + 1, b + 4, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void cvx_q5_K_to_f32(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / CVX_QK_K; i++, b += 176) {
        const float d = qi_f16(b), min = qi_f16(b + 2);
        const uint8_t *qh = b + 16, *ql = b + 48;
        uint8_t u1 = 1, u2 = 2;
        for (int c = 0; c < 4; c++, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            qi_scale_min_k4(2 * c, b + 4, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            qi_scale_min_k4(2 * c + 1, b + 4, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

void cvx_q6_K_to_f32(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / CVX_QK_K; i++, b += 210) {
        const float d = qi_f16(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
    }
}

/* ================= reference quantization (ggml quantize_row_*_ref) ================= */

/* make_qx_quants with qw = NULL: symmetric levels in [-nmax, nmax-1] (stored + nmax) and the
 * scale that minimises the error weighted by rmse_type (1: x^2). */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = qi_nearest_int(iscale * x[i]);
        l = MAXI(-nmax, MINI(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1 : rmse_type == 3 ? fabsf(x[i]) : sqrtf(fabsf(x[i]));
        sumlx = fmaf(w * x[i], (float)l, sumlx);
        suml2 = fmaf((float)l, w * l, suml2);
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -fmaf((float)is, 0.1f, (float)nmax) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = qi_nearest_int(iscale * x[i]);
            l = MAXI(-nmax, MINI(nmax - 1, l));
            float w = rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1 : rmse_type == 3 ? fabsf(x[i]) : sqrtf(fabsf(x[i]));
            sumlx = fmaf(w * x[i], (float)l, sumlx);
            suml2 = fmaf((float)l, w * l, suml2);
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = qi_nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + MAXI(-nmax, MINI(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* make_q3_quants with do_rmse: levels in [-nmax, nmax-1] refined by coordinate descent. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = qi_nearest_int(iscale * x[i]);
        l = MAXI(-nmax, MINI(nmax - 1, l));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx = fmaf(w * x[i], (float)l, sumlx);
        suml2 = fmaf((float)l, w * l, suml2);
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = fmaf(-(w * x[i]), (float)L[i], sumlx);
            if (slx > 0) {
                float sl2 = fmaf(-(float)L[i], w * L[i], suml2);
                int new_l = qi_nearest_int(x[i] * sl2 / slx);
                new_l = MAXI(-nmax, MINI(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx = fmaf(w * x[i], (float)new_l, slx);
                    sl2 = fmaf((float)new_l, w * new_l, sl2);
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* make_qkx2_quants: asymmetric levels in [0, nmax] with a min <= 0, searching nstep+1 scales
 * for the smallest weighted error (|.| when use_mad, squared otherwise). Returns the scale; the
 * negated min goes to *the_min. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x = fmaf(w, x[i], sum_x);
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = qi_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)MAXI(0, MINI(nmax, l));
        float diff = fmaf((float)L[i], scale, min) - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error = fmaf(weights[i], diff, best_error);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (fmaf((float)is, rdelta, rmin) + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = qi_nearest_int(iscale * (x[i] - min));
            l = MAXI(0, MINI(nmax, l));
            Laux[i] = (uint8_t)l;
            const float wl = weights[i] * l;
            sum_l += wl;
            sum_l2 = fmaf((float)l, wl, sum_l2);
            sum_xl = fmaf(wl, x[i], sum_xl);
        }
        float D = fmaf(sum_l2, sum_w, -(sum_l * sum_l));
        if (D > 0) {
            float this_scale = fmaf(-sum_l, sum_x, sum_xl * sum_w) / D;
            float this_min = fmaf(sum_l2, sum_x, -(sum_l * sum_xl)) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = fmaf((float)Laux[i], this_scale, this_min) - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error = fmaf(weights[i], diff, cur_error);
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; i++) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Pack 256 2-bit levels: byte l of each 32-byte group holds values l, l+32, l+64, l+96. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < CVX_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

void cvx_q2_K_from_f32(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    uint8_t L[CVX_QK_K], Laux[16];
    float weights[16], mins[16], scales[16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / CVX_QK_K; i++, b += 84, x += CVX_QK_K) {
        uint8_t *sc = b;
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; j++) sc[j] = (uint8_t)qi_nearest_int(iscale * scales[j]);
            qi_put_f16(b + 80, max_scale / q4scale);
        } else {
            for (int j = 0; j < 16; j++) sc[j] = 0;
            qi_put_f16(b + 80, 0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < 16; j++) sc[j] |= (uint8_t)((unsigned)qi_nearest_int(iscale * mins[j]) << 4);
            qi_put_f16(b + 82, max_min / q4scale);
        } else {
            qi_put_f16(b + 82, 0.f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = qi_f16(b + 80) * (float)(sc[j] & 0xf);
            if (!d) continue;
            const float dm = qi_f16(b + 82) * (float)(sc[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                int l = qi_nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)MAXI(0, MINI(3, l));
            }
        }
        pack_2bit(L, b + 16);
    }
}

void cvx_q3_K_from_f32(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    int8_t L[CVX_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / CVX_QK_K; i++, b += 110, x += CVX_QK_K) {
        uint8_t *hmask = b, *sc = b + 96;
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            float scale = fabsf(scales[j]);
            if (scale > amax) { amax = scale; max_scale = scales[j]; }
        }
        memset(sc, 0, 12);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = (int8_t)qi_nearest_int(iscale * scales[j]);
                l = MAXI(-32, MINI(31, l)) + 32;
                if (j < 8) sc[j] = (uint8_t)(l & 0xf);
                else sc[j - 8] |= (uint8_t)((l & 0xf) << 4);
                l >>= 4;
                sc[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            qi_put_f16(b + 108, 1 / iscale);
        } else {
            qi_put_f16(b + 108, 0.f);
        }
        int s6[16];
        qi_q3_K_scales(sc, s6);
        for (int j = 0; j < 16; j++) {
            float d = qi_f16(b + 108) * (float)(int8_t)s6[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = qi_nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(MAXI(-4, MINI(3, l)) + 4);
            }
        }
        /* high bit of value j goes to hmask[j % 32], bit j / 32 */
        memset(hmask, 0, 32);
        for (int j = 0; j < CVX_QK_K; j++)
            if (L[j] > 3) {
                hmask[j % 32] |= (uint8_t)(1u << (j / 32));
                L[j] -= 4;
            }
        pack_2bit((const uint8_t *)L, b + 32);
    }
}

/* The 8 scales and mins (6 bits each) of Q4_K/Q5_K into scales[12]. */
static void pack_scale_min_k4(const float *scales, const float *mins, float max_scale, float max_min, uint8_t *s) {
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)qi_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)qi_nearest_int(inv_min * mins[j]);
        ls = MINI(63, ls);
        lm = MINI(63, lm);
        if (j < 4) {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (uint8_t)((ls & 0xf) | (lm & 0xf) << 4);
            s[j - 4] |= (uint8_t)((ls >> 4) << 6);
            s[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
}

/* Q4_K (nmax 15) and Q5_K (nmax 31): per 32-value sub-block make_qkx2_quants weighted by
 * rms + |x|, then the levels again from the 6-bit scales actually stored. */
static void qk_sub_scales(const float *x, int nmax, float rmin, float rdelta, int nstep, uint8_t *L, float *scales,
                          float *mins, float *max_scale, float *max_min) {
    uint8_t Laux[32];
    float weights[32];
    *max_scale = 0;
    *max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
        if (scales[j] > *max_scale) *max_scale = scales[j];
        if (mins[j] > *max_min) *max_min = mins[j];
    }
}

static void qk_requantize(const float *x, const uint8_t *b, int nmax, uint8_t *L) {
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        qi_scale_min_k4(j, b + 4, &sc, &m);
        const float d = qi_f16(b) * (float)sc;
        if (!d) continue;
        const float dm = qi_f16(b + 2) * (float)m;
        for (int ii = 0; ii < 32; ii++) {
            int l = qi_nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)MAXI(0, MINI(nmax, l));
        }
    }
}

void cvx_q4_K_from_f32(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    uint8_t L[CVX_QK_K];
    float mins[8], scales[8], max_scale, max_min;
    for (int64_t i = 0; i < n / CVX_QK_K; i++, b += 144, x += CVX_QK_K) {
        qk_sub_scales(x, 15, -1.f, 0.1f, 20, L, scales, mins, &max_scale, &max_min);
        pack_scale_min_k4(scales, mins, max_scale, max_min, b + 4);
        qi_put_f16(b, max_scale / 63.f);
        qi_put_f16(b + 2, max_min / 63.f);
        qk_requantize(x, b, 15, L);
        uint8_t *q = b + 16;
        for (int j = 0; j < CVX_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
    }
}

void cvx_q5_K_from_f32(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    uint8_t L[CVX_QK_K];
    float mins[8], scales[8], max_scale, max_min;
    for (int64_t i = 0; i < n / CVX_QK_K; i++, b += 176, x += CVX_QK_K) {
        qk_sub_scales(x, 31, -0.5f, 0.1f, 15, L, scales, mins, &max_scale, &max_min);
        pack_scale_min_k4(scales, mins, max_scale, max_min, b + 4);
        qi_put_f16(b, max_scale / 63.f);
        qi_put_f16(b + 2, max_min / 63.f);
        qk_requantize(x, b, 31, L);
        uint8_t *qh = b + 16, *ql = b + 48, m1 = 1, m2 = 2;
        memset(qh, 0, 32);
        for (int c = 0; c < CVX_QK_K; c += 64, ql += 32, m1 <<= 2, m2 <<= 2)
            for (int j = 0; j < 32; j++) {
                int l1 = L[c + j], l2 = L[c + j + 32];
                if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
                if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
                ql[j] = (uint8_t)(l1 | l2 << 4);
            }
    }
}

void cvx_q6_K_from_f32(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    int8_t L[CVX_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / CVX_QK_K; i++, b += 210, x += CVX_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) { max_abs_scale = fabsf(scale); max_scale = scale; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(b, 0, 210);
            continue;
        }
        int8_t *sc = (int8_t *)(b + 192);
        float iscale = -128.f / max_scale;
        qi_put_f16(b + 208, 1 / iscale);
        for (int ib = 0; ib < 16; ib++) sc[ib] = (int8_t)MINI(127, qi_nearest_int(iscale * scales[ib]));
        for (int j = 0; j < 16; j++) {
            float d = qi_f16(b + 208) * (float)sc[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = qi_nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(MAXI(-32, MINI(31, l)) + 32);
            }
        }
        uint8_t *ql = b, *qh = b + 128;
        for (int j = 0; j < CVX_QK_K; j += 128, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l] & 0xf, q2 = L[j + l + 32] & 0xf, q3 = L[j + l + 64] & 0xf,
                              q4 = L[j + l + 96] & 0xf;
                ql[l] = (uint8_t)(q1 | q3 << 4);
                ql[l + 32] = (uint8_t)(q2 | q4 << 4);
                qh[l] = (uint8_t)((L[j + l] >> 4) | (L[j + l + 32] >> 4) << 2 | (L[j + l + 64] >> 4) << 4 |
                                  (L[j + l + 96] >> 4) << 6);
            }
    }
}
