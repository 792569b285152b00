/* Convolutions as shifted GEMMs, nearest up-sampling. See conv.h for the layouts. */
#include "conv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gemm.h"
#include "gemm_fast.h"

/* bf16 mode: a conv's products read operands converted to bf16 ONCE (the weights once per conv,
 * the inputs / Winograd V once per block) instead of in every cvx_gemm_p call, where each slice
 * would be converted again for every tap / frame it takes part in. Same rounding (RNE), same
 * results. NULL / 0 in f32 mode. */
static int conv_bf16(const cvx_ctx *ctx) { return ctx->precision == CVX_PRECISION_BF16 && ctx->kernels; }

static const uint16_t *bf16_copy(cvx_scratch *s, const float *src, size_t n) {
    uint16_t *d = (uint16_t *)cvx_scratch_get(s, (n + 1) / 2);
    cvx_f32_to_bf16_fast(src, d, n);
    return d;
}

/* C[M,N] = A[M,K] · B[K,N] (+ beta·C), bf16 operands row-major, f32 accumulation; counted. */
static void gemm_bf16(cvx_ctx *ctx, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                      float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    cvx_flops_add(ctx, 2.0 * M * N * K);
    cvx_mat a = {A, CVX_BF16, lda, 0}, b = {B, CVX_BF16, ldb, 0};
    CVX_CHECK(cvx_matmul(ctx->kernels, CVX_PRECISION_BF16, M, N, K, a, b, NULL, beta, C, ldc) == 0);
}

/* A conv's weights as its products read them: f32 row-major (f), f32 with each matrix packed for
 * the fixed-chain tiles of isa (packed: cvx_conv_pack_weights_gemm; f is then that layout), or bf16
 * row-major (b; f NULL). */
typedef struct {
    const float *f;
    const uint16_t *b;
    int packed, isa;
} conv_wts;

/* C[Cout, N] (ld ldc) = beta·C + matrix i [Cout, K] of the f32 weights · B[K, N] (ld ldb): one of
 * the n matrices, packed or row-major — the same chains either way (gemm.h). */
static void wts_gemm_ld(cvx_ctx *ctx, const conv_wts *w, int i, int Cout, int N, int K, const float *B, int ldb,
                        float beta, float *C, int ldc) {
    if (w->packed) {
        if (Cout <= 0 || N <= 0) return;
        cvx_flops_add(ctx, 2.0 * Cout * N * K);
        cvx_sgemm_fixed_packed(w->isa, 0, Cout, N, K, w->f + (size_t)i * cvx_sgemm_fixed_packed_floats(w->isa, Cout, K),
                               B, ldb, NULL, beta, C, ldc);
    } else {
        cvx_gemm(ctx, 0, 0, Cout, N, K, 1.0f, w->f + (size_t)i * Cout * K, K, B, ldb, beta, C, ldc);
    }
}
static void wts_gemm(cvx_ctx *ctx, const conv_wts *w, int i, int Cout, int N, int K, const float *B, int ldb, float beta,
                     float *C) {
    wts_gemm_ld(ctx, w, i, Cout, N, K, B, ldb, beta, C, N);
}

/* Whether one product per output frame (B read in place, [kt·Cin, nt] at row stride nt) beats one
 * over all frames (B gathered): with the weights packed, a product per frame packs nothing more,
 * and skipping the gather saves writing kt copies of V — unless nt is so narrow that the tiles'
 * last column block (up to 64 wide) runs mostly empty: taken when that block wastes ≤ 1/8. */
static int products_per_frame(const conv_wts *w, int nt) {
    return w->packed && (nt + 63) / 64 * 64 * 8 <= 9 * nt;
}

int cvx_conv_gemm_isa(const cvx_ctx *ctx) {
    if (ctx->precision != CVX_PRECISION_F32) return -1;
    if (!ctx->kernels) return 0;   /* cvx_gemm: cvx_sgemm_fixed */
    if (!cvx_kernels_f32_fixed(ctx->kernels)) return -1;
    return cvx_kernels_avx512(ctx->kernels);
}

/* The Winograd products of one chunk: for each of the n transform points ξ,
 * M_ξ[Cout, T·nt] = U_ξ[Cout, kt·Cin] · B_ξ[kt·Cin, T·nt], where column block t of B_ξ is the
 * kt-frame window V_ξ[t .. t+kt−1][Cin, nt] (bf16 operands when Ub is given, else f32). f32 with
 * packed weights (products_per_frame): one product per frame reading that window in place; else one
 * product per ξ over all output frames, B_ξ materialised (a copy of kt × V_ξ), so U_ξ is packed once
 * per ξ rather than once per frame. Every element is the same FMA chain over k either way (gemm.h:
 * the chains do not depend on N), so the same bits.
 * Shared by F(2×2) (n = 16) and F(4×4) (n = 36). */
static void winograd_products(cvx_ctx *ctx, int n, int Cout, int Cin, int kt, int T, int nt, const conv_wts *w,
                              const float *V, size_t vx, float *M, size_t mx) {
    const int K = kt * Cin, N = T * nt;
    const uint16_t *Ub = w->b;
    if (Ub) {
        const uint16_t *Vb = bf16_copy(&ctx->bf16_x, V, (size_t)n * vx);
        for (int xi = 0; xi < n; xi++)
            for (int t = 0; t < T; t++)
                gemm_bf16(ctx, Cout, nt, K, Ub + (size_t)xi * Cout * K, K, Vb + (size_t)xi * vx + (size_t)t * Cin * nt,
                          nt, 0.0f, M + (size_t)xi * mx + (size_t)t * nt, N);
        return;
    }
    if (T > 1 && products_per_frame(w, nt)) {
        /* frames t .. t+kt−1 of V_ξ: rows t·Cin .. of [Tp·Cin, nt]. The n·T products are shared out
         * whole among the threads in one parallel region (each product on one thread): a region per
         * product cost a futex wake of the sleeping worker each, 11 % of an LTX decode's samples */
        cvx_flops_add(ctx, 2.0 * n * T * Cout * (double)nt * K);
        const size_t wx = cvx_sgemm_fixed_packed_floats(w->isa, Cout, K);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
        for (int xi = 0; xi < n; xi++)
            for (int t = 0; t < T; t++)
                cvx_sgemm_fixed_packed(w->isa, 0, Cout, nt, K, w->f + (size_t)xi * wx,
                                       V + (size_t)xi * vx + (size_t)t * Cin * nt, nt, NULL, 0.0f,
                                       M + (size_t)xi * mx + (size_t)t * nt, N);
        return;
    }
    float *B = T > 1 ? cvx_scratch_get(&ctx->conv_grid, (size_t)K * N) : NULL;   // [kt·Cin, T·nt]
    for (int xi = 0; xi < n; xi++) {
        const float *Vx = V + (size_t)xi * vx;   // [Tp, Cin, nt]
        if (B) {
#pragma omp parallel for schedule(static) if ((size_t)K * N > 65536)
            for (int k = 0; k < K; k++)
                for (int t = 0; t < T; t++)
                    memcpy(B + (size_t)k * N + (size_t)t * nt, Vx + ((size_t)t * Cin + k) * nt, sizeof(float) * nt);
        }
        wts_gemm(ctx, w, xi, Cout, N, K, B ? B : Vx, N, 0.0f, M + (size_t)xi * mx);
    }
}

/* The shifted-GEMM convolution with its weights w [taps, Cout, Cin] (conv_wts). */
static void conv3d_direct(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const conv_wts *w,
                          const float *bias, int Cout, int kt, int kh, int kw, float *y) {
    const uint16_t *wb = w->b;
    const int T = Tp - kt + 1, H = Hp - kh + 1, W = Wp - kw + 1;
    CVX_CHECK(T > 0 && H > 0 && W > 0);
    const size_t HWp = (size_t)Hp * Wp, chan = (size_t)Tp * HWp, HW = (size_t)H * W;
    /* Frames per GEMM group: the grid block [Cout, nt·HWp] stays under ~64 MB. */
    size_t per_frame = (size_t)Cout * HWp;
    int nt = (int)((16u << 20) / (per_frame ? per_frame : 1));
    if (nt < 1) nt = 1;
    if (nt > T) nt = T;
    float *grid = cvx_scratch_get(&ctx->conv_grid, (size_t)Cout * nt * HWp);   /* reused across calls */
    const int bf = wb != NULL;
    const uint16_t *xb = bf ? bf16_copy(&ctx->bf16_x, xp, (size_t)Cin * chan) : NULL;
    for (int t0 = 0; t0 < T; t0 += nt) {
        int n_t = T - t0 < nt ? T - t0 : nt;
        /* Grid columns up to the last valid output: reads never pass the last input frame. */
        size_t N = (size_t)(n_t - 1) * HWp + (size_t)(H - 1) * Wp + W;
        for (int dt = 0; dt < kt; dt++)
            for (int dy = 0; dy < kh; dy++)
                for (int dx = 0; dx < kw; dx++) {
                    int tap = (dt * kh + dy) * kw + dx;
                    const size_t off = (size_t)(t0 + dt) * HWp + (size_t)dy * Wp + dx;
                    const float *B = xp + off;                                                 // [Cin, N], ld chan
                    if (bf) {
                        gemm_bf16(ctx, Cout, (int)N, Cin, wb + (size_t)tap * Cout * Cin, Cin, xb + off, (int)chan,
                                  tap ? 1.0f : 0.0f, grid, (int)N);                                 // [Cout, N]
                        continue;
                    }
                    wts_gemm(ctx, w, tap, Cout, (int)N, Cin, B, (int)chan, tap ? 1.0f : 0.0f, grid);   // [Cout, N]
                }
        /* Extract the valid positions and add the bias. */
#pragma omp parallel for collapse(2) schedule(static)
        for (int co = 0; co < Cout; co++)
            for (int t = 0; t < n_t; t++) {
                float bv = bias ? bias[co] : 0.0f;
                const float *g = grid + (size_t)co * N + (size_t)t * HWp;
                float *o = y + (size_t)co * T * HW + (size_t)(t0 + t) * HW;
                for (int yy = 0; yy < H; yy++)
                    for (int xx = 0; xx < W; xx++) o[(size_t)yy * W + xx] = g[(size_t)yy * Wp + xx] + bv;
            }
    }
}

void cvx_conv3d_padded(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const float *wpk, const float *bias,
                       int Cout, int kt, int kh, int kw, float *y) {
    const conv_wts w = {wpk, conv_bf16(ctx) ? bf16_copy(&ctx->bf16_w, wpk, (size_t)kt * kh * kw * Cout * Cin) : NULL, 0, 0};
    conv3d_direct(ctx, xp, Cin, Tp, Hp, Wp, &w, bias, Cout, kt, kh, kw, y);
}

void cvx_conv3d_padded_ref(const float *xp, int Cin, int Tp, int Hp, int Wp, const float *w, const float *bias,
                           int Cout, int kt, int kh, int kw, float *y) {
    const int T = Tp - kt + 1, H = Hp - kh + 1, W = Wp - kw + 1;
#pragma omp parallel for collapse(2) schedule(static)
    for (int co = 0; co < Cout; co++)
        for (int t = 0; t < T; t++)
            for (int yy = 0; yy < H; yy++)
                for (int xx = 0; xx < W; xx++) {
                    double acc = bias ? bias[co] : 0.0;
                    for (int ci = 0; ci < Cin; ci++)
                        for (int dt = 0; dt < kt; dt++)
                            for (int dy = 0; dy < kh; dy++)
                                for (int dx = 0; dx < kw; dx++)
                                    acc += (double)w[((((size_t)co * Cin + ci) * kt + dt) * kh + dy) * kw + dx] *
                                           xp[(((size_t)ci * Tp + t + dt) * Hp + yy + dy) * Wp + xx + dx];
                    y[(((size_t)co * T + t) * H + yy) * W + xx] = (float)acc;
                }
}

void cvx_conv1x1(cvx_ctx *ctx, const float *x, int Cin, size_t N, const float *w, const float *bias, int Cout, float *y) {
    /* Column blocks keep the int GEMM sizes in range for long videos. */
    const size_t blk = (size_t)1 << 30;
    for (size_t n0 = 0; n0 < N; n0 += blk) {
        size_t n = N - n0 < blk ? N - n0 : blk;
        cvx_gemm(ctx, 0, 0, Cout, (int)n, Cin, 1.0f, w, Cin, x + n0, (int)N, 0.0f, y + n0, (int)N);
    }
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int co = 0; co < Cout; co++) {
            float *yc = y + (size_t)co * N;
            for (size_t i = 0; i < N; i++) yc[i] += bias[co];
        }
    }
}

void cvx_conv1x1_ref(const float *x, int Cin, size_t N, const float *w, const float *bias, int Cout, float *y) {
    for (int co = 0; co < Cout; co++)
        for (size_t i = 0; i < N; i++) {
            double acc = bias ? bias[co] : 0.0;
            for (int ci = 0; ci < Cin; ci++) acc += (double)w[(size_t)co * Cin + ci] * x[(size_t)ci * N + i];
            y[(size_t)co * N + i] = (float)acc;
        }
}

void cvx_pad_frames(float *dst, int Td, int t0, const float *src, int C, int Ts, int ts, int n, int H, int W, int ph,
                    int pw) {
    const int Hp = H + 2 * ph, Wp = W + 2 * pw;
#pragma omp parallel for collapse(2) schedule(static)
    for (int c = 0; c < C; c++)
        for (int t = 0; t < n; t++) {
            float *d = dst + ((size_t)c * Td + t0 + t) * Hp * Wp;
            const float *s = src + ((size_t)c * Ts + ts + t) * H * W;
            memset(d, 0, sizeof(float) * (size_t)ph * Wp);
            for (int yy = 0; yy < H; yy++) {
                float *row = d + (size_t)(yy + ph) * Wp;
                for (int k = 0; k < pw; k++) row[k] = row[pw + W + k] = 0.0f;
                memcpy(row + pw, s + (size_t)yy * W, sizeof(float) * W);
            }
            memset(d + (size_t)(ph + H) * Wp, 0, sizeof(float) * (size_t)ph * Wp);
        }
}

int cvx_nearest_index(int o, int in_size, int out_size) {
    /* PyTorch (UpSample.h nearest_idx): identity and exact 2× have fast paths; otherwise a
     * float scale in/out, floor, clamp. */
    if (out_size == in_size) return o;
    if (out_size == 2 * in_size) return o >> 1;
    float scale = (float)in_size / (float)out_size;
    int i = (int)floorf((float)o * scale);
    return i < in_size - 1 ? i : in_size - 1;
}

void cvx_upsample_nearest(const float *x, int C, int Ti, int Hi, int Wi, float *y, int To, int Ho, int Wo) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int c = 0; c < C; c++)
        for (int t = 0; t < To; t++) {
            int st = cvx_nearest_index(t, Ti, To);
            for (int yy = 0; yy < Ho; yy++) {
                int sy = cvx_nearest_index(yy, Hi, Ho);
                for (int xx = 0; xx < Wo; xx++)
                    y[(((size_t)c * To + t) * Ho + yy) * Wo + xx] =
                        x[(((size_t)c * Ti + st) * Hi + sy) * Wi + cvx_nearest_index(xx, Wi, Wo)];
            }
        }
}

void cvx_upsample_nearest_padded(const float *x, int C, int Ti, int Hi, int Wi, const int *tmap, int To, int Ho,
                                 int Wo, float *y, int Td, int t0, int ph, int pw) {
    const int Hp = Ho + 2 * ph, Wp = Wo + 2 * pw;
    int *xi = cvx_malloc(sizeof(int) * (size_t)Wo);
    for (int xx = 0; xx < Wo; xx++) xi[xx] = cvx_nearest_index(xx, Wi, Wo);
#pragma omp parallel for collapse(2) schedule(static)
    for (int c = 0; c < C; c++)
        for (int t = 0; t < To; t++) {
            int st = tmap ? tmap[t] : cvx_nearest_index(t, Ti, To);
            const float *s = x + ((size_t)c * Ti + st) * Hi * Wi;
            float *d = y + ((size_t)c * Td + t0 + t) * Hp * Wp;
            memset(d, 0, sizeof(float) * (size_t)ph * Wp);
            for (int yy = 0, prev = -1; yy < Ho; yy++) {
                const int sy = cvx_nearest_index(yy, Hi, Ho);
                float *row = d + (size_t)(yy + ph) * Wp;
                if (sy == prev) {   /* the same source row as the row above: copy it */
                    memcpy(row, row - Wp, sizeof(float) * (size_t)Wp);
                    continue;
                }
                prev = sy;
                const float *srow = s + (size_t)sy * Wi;
                for (int k = 0; k < pw; k++) row[k] = row[pw + Wo + k] = 0.0f;
                if (Wo == 2 * Wi)
                    for (int xx = 0; xx < Wi; xx++) row[pw + 2 * xx] = row[pw + 2 * xx + 1] = srow[xx];
                else
                    for (int xx = 0; xx < Wo; xx++) row[pw + xx] = srow[xi[xx]];
            }
            memset(d + (size_t)(ph + Ho) * Wp, 0, sizeof(float) * (size_t)ph * Wp);
        }
    free(xi);
}

/* ------------------------------------------------------------------ Winograd F(2×2, 3×3) */

/* How many rows of tiles fit the context's Winograd budget (per_row floats each, at most th),
 * with its Winograd scratch (transformed inputs and products of one block) grown to hold them. */
static int winograd_block_rows(cvx_ctx *ctx, size_t per_row, int th) {
    int R = (int)(ctx->winograd_budget / per_row);
    if (R < 1) R = 1;
    if (R > th) R = th;
    cvx_scratch_get(&ctx->winograd, per_row * (size_t)R);
    return R;
}

/* F(2×2) with its transformed weights w [16, Cout, kt·Cin] (conv_wts). */
static void conv3d_winograd2(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const conv_wts *w,
                             const float *bias, int Cout, int kt, float *y) {
    const int T = Tp - kt + 1, H = Hp - 2, W = Wp - 2, th = (H + 1) / 2, tw = (W + 1) / 2;
    CVX_CHECK(T > 0 && H > 0 && W > 0);
    const size_t HW = (size_t)H * W, HWp = (size_t)Hp * Wp;
    /* Tile rows per block: V [16, Cin, Tp, nt] + M [16, Cout, T, nt] within the budget. */
    const int R = winograd_block_rows(ctx, (size_t)16 * tw * ((size_t)Cin * Tp + (size_t)Cout * T), th);
    for (int i0 = 0; i0 < th; i0 += R) {
        const int r = th - i0 < R ? th - i0 : R, nt = r * tw;
        float *V = ctx->winograd.data;                                           // [16, Tp, Cin, nt]
        float *M = ctx->winograd.data + (size_t)16 * Cin * Tp * nt;              // [16, Cout, T, nt]
        const size_t vx = (size_t)Cin * Tp * nt, mx = (size_t)Cout * T * nt;
        /* Input transform Bᵀ d B of every 4×4 patch (stride 2; zero past the padded edge). */
#pragma omp parallel for collapse(2) schedule(static)
        for (int ci = 0; ci < Cin; ci++)
            for (int f = 0; f < Tp; f++) {
                const float *src = xp + ((size_t)ci * Tp + f) * HWp;
                float *v = V + ((size_t)f * Cin + ci) * nt;
                for (int ti = 0; ti < r; ti++)
                    for (int tj = 0; tj < tw; tj++) {
                        int y0 = 2 * (i0 + ti), x0 = 2 * tj;
                        float d[4][4], t[4][4];
                        for (int a = 0; a < 4; a++)
                            for (int b = 0; b < 4; b++)
                                d[a][b] = (y0 + a < Hp && x0 + b < Wp) ? src[(size_t)(y0 + a) * Wp + x0 + b] : 0.0f;
                        for (int c = 0; c < 4; c++) {
                            t[0][c] = d[0][c] - d[2][c];
                            t[1][c] = d[1][c] + d[2][c];
                            t[2][c] = d[2][c] - d[1][c];
                            t[3][c] = d[1][c] - d[3][c];
                        }
                        size_t k = (size_t)ti * tw + tj;
                        for (int a = 0; a < 4; a++) {
                            v[(size_t)(a * 4 + 0) * vx + k] = t[a][0] - t[a][2];
                            v[(size_t)(a * 4 + 1) * vx + k] = t[a][1] + t[a][2];
                            v[(size_t)(a * 4 + 2) * vx + k] = t[a][2] - t[a][1];
                            v[(size_t)(a * 4 + 3) * vx + k] = t[a][1] - t[a][3];
                        }
                    }
            }
        /* 16 independent products per output frame, the kt time taps folded into K: with V
         * frame-major, frames t..t+kt−1 of V_ξ are one [kt·Cin, nt] matrix (row stride nt):
         * M_ξ[Cout, t, nt] = U_ξ[Cout, kt·Cin] · V_ξ[t .. t+kt−1][Cin, nt]. */
        winograd_products(ctx, 16, Cout, Cin, kt, T, nt, w, V, vx, M, mx);
        /* Output transform Aᵀ m A, bias, keep the valid 2×2 outputs. */
#pragma omp parallel for collapse(2) schedule(static)
        for (int co = 0; co < Cout; co++)
            for (int t = 0; t < T; t++) {
                const float *m = M + ((size_t)co * T + t) * nt;
                float *o = y + ((size_t)co * T + t) * HW;
                float bv = bias ? bias[co] : 0.0f;
                for (int ti = 0; ti < r; ti++)
                    for (int tj = 0; tj < tw; tj++) {
                        size_t k = (size_t)ti * tw + tj;
                        float q[4][4], s[2][4];
                        for (int xi = 0; xi < 16; xi++) q[xi / 4][xi % 4] = m[(size_t)xi * mx + k];
                        for (int c = 0; c < 4; c++) {
                            s[0][c] = q[0][c] + q[1][c] + q[2][c];
                            s[1][c] = q[1][c] - q[2][c] - q[3][c];
                        }
                        int yy = 2 * (i0 + ti), xx = 2 * tj;
                        for (int a = 0; a < 2 && yy + a < H; a++) {
                            float v0 = s[a][0] + s[a][1] + s[a][2], v1 = s[a][1] - s[a][2] - s[a][3];
                            o[(size_t)(yy + a) * W + xx] = v0 + bv;
                            if (xx + 1 < W) o[(size_t)(yy + a) * W + xx + 1] = v1 + bv;
                        }
                    }
            }
    }
}

void cvx_conv3d_winograd(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const float *U, const float *bias,
                         int Cout, int kt, float *y) {
    const conv_wts w = {U, conv_bf16(ctx) ? bf16_copy(&ctx->bf16_w, U, (size_t)16 * Cout * kt * Cin) : NULL, 0, 0};
    conv3d_winograd2(ctx, xp, Cin, Tp, Hp, Wp, &w, bias, Cout, kt, y);
}

/* ------------------------------------------------------------------ Winograd F(4×4, 3×3) */
/* Interpolation points 0, ±1, ±2, ∞ (Lavin & Gray): 36 products per 16 outputs. */
/* Bᵀ = [4 0 −5 0 1 0; 0 −4 −4 1 1 0; 0 4 −4 −1 1 0; 0 −2 −1 2 1 0; 0 2 −1 −2 1 0; 0 4 0 −5 0 1],
 * Aᵀ = [1 1 1 1 1 0; 0 1 −1 2 −2 0; 0 1 1 4 4 0; 0 1 −1 8 −8 1] (written out in the transforms). */
/* The F(4×4) input transform of one plane (channel, frame) src[Hp, Wp] for tile rows i0 .. i0+r−1
 * into v (point ξ's values at v + ξ·vx, tile (ti, tj) at ti·tw + tj): Bᵀ on 6 input rows along the
 * whole row (vectorised over x), then the row split into its 4 phases x = 4·tj + k so B on each
 * patch is vectorised over tiles too. tr [6][Wx], ph [4][tw + 2], zrow [Wx] zeros (rows past the
 * padded edge). Inlined into a generic and an AVX-512 build (wino4_in_plane*: the same
 * expressions, the same bits). */
static inline __attribute__((always_inline)) void wino4_in_body(const float *src, int Hp, int Wp, int i0, int r,
                                                                int tw, size_t vx, float *v, float *tr, float *ph,
                                                                const float *zrow) {
    const int Wx = 4 * tw + 8;
    for (int ti = 0; ti < r; ti++) {
        const int y0 = 4 * (i0 + ti);
        const float *d0 = y0 + 0 < Hp ? src + (size_t)(y0 + 0) * Wp : zrow,
                    *d1 = y0 + 1 < Hp ? src + (size_t)(y0 + 1) * Wp : zrow,
                    *d2 = y0 + 2 < Hp ? src + (size_t)(y0 + 2) * Wp : zrow,
                    *d3 = y0 + 3 < Hp ? src + (size_t)(y0 + 3) * Wp : zrow,
                    *d4 = y0 + 4 < Hp ? src + (size_t)(y0 + 4) * Wp : zrow,
                    *d5 = y0 + 5 < Hp ? src + (size_t)(y0 + 5) * Wp : zrow;
        float *t0 = tr, *t1 = tr + Wx, *t2 = tr + 2 * Wx, *t3 = tr + 3 * Wx, *t4 = tr + 4 * Wx,
              *t5 = tr + 5 * Wx;
#pragma omp simd
        for (int x = 0; x < Wp; x++) {   /* Bᵀ on the 6 rows */
            float e0 = d0[x], e1 = d1[x], e2 = d2[x], e3 = d3[x], e4 = d4[x], e5 = d5[x];
            t0[x] = 4.0f * e0 - 5.0f * e2 + e4;
            t1[x] = -4.0f * (e1 + e2) + (e3 + e4);
            t2[x] = 4.0f * (e1 - e2) + (e4 - e3);
            t3[x] = -2.0f * (e1 - e3) + (e4 - e2);
            t4[x] = 2.0f * (e1 - e3) + (e4 - e2);
            t5[x] = 4.0f * e1 - 5.0f * e3 + e5;
        }
        for (int i = 0; i < 6; i++)
            for (int x = Wp; x < Wx; x++) tr[(size_t)i * Wx + x] = 0.0f;
        for (int i = 0; i < 6; i++) {
            /* the 4 phases row[4·tj + k] (one interleaved group: vectorised); phases 4
             * and 5 of tile tj are phases 0 and 1 of tile tj + 1 */
            const float *row = tr + (size_t)i * Wx;
            float *q0 = ph, *q1 = ph + (tw + 2), *q2 = ph + 2 * (tw + 2), *q3 = ph + 3 * (tw + 2);
#pragma omp simd
            for (int tj = 0; tj <= tw; tj++) {
                q0[tj] = row[4 * tj];
                q1[tj] = row[4 * tj + 1];
                q2[tj] = row[4 * tj + 2];
                q3[tj] = row[4 * tj + 3];
            }
            float *out = v + (size_t)(i * 6) * vx + (size_t)ti * tw;
            const float *p0 = q0, *p1 = q1, *p2 = q2, *p3 = q3, *p4 = q0 + 1, *p5 = q1 + 1;
#pragma omp simd
            for (int tj = 0; tj < tw; tj++) {
                float e0 = p0[tj], e1 = p1[tj], e2 = p2[tj], e3 = p3[tj], e4 = p4[tj], e5 = p5[tj];
                out[tj] = 4.0f * e0 - 5.0f * e2 + e4;
                out[vx + tj] = -4.0f * (e1 + e2) + (e3 + e4);
                out[2 * vx + tj] = 4.0f * (e1 - e2) + (e4 - e3);
                out[3 * vx + tj] = -2.0f * (e1 - e3) + (e4 - e2);
                out[4 * vx + tj] = 2.0f * (e1 - e3) + (e4 - e2);
                out[5 * vx + tj] = 4.0f * e1 - 5.0f * e3 + e5;
            }
        }
    }
}

/* The F(4×4) output transform of one output plane (channel, frame): m (point ξ at m + ξ·mx) ->
 * o[H, W] rows of tile rows i0 .. i0+r−1, plus bv: Aᵀ m A vectorised over the tiles of a row,
 * valid 4×4 outputs. s [24][tw], yv [16][tw]. */
static inline __attribute__((always_inline)) void wino4_out_body(const float *m, size_t mx, int H, int W, int i0,
                                                                 int r, int tw, float bv, float *o, float *s,
                                                                 float *yv) {
    for (int ti = 0; ti < r; ti++) {
        const float *q = m + (size_t)ti * tw;
        for (int c6 = 0; c6 < 6; c6++) {   /* s[i][c] = Σ_k Aᵀ[i][k] q[k][c] */
            const float *q0 = q + (size_t)(0 * 6 + c6) * mx, *q1 = q + (size_t)(1 * 6 + c6) * mx,
                        *q2 = q + (size_t)(2 * 6 + c6) * mx, *q3 = q + (size_t)(3 * 6 + c6) * mx,
                        *q4 = q + (size_t)(4 * 6 + c6) * mx, *q5 = q + (size_t)(5 * 6 + c6) * mx;
            float *s0 = s + (size_t)(0 * 6 + c6) * tw, *s1 = s + (size_t)(1 * 6 + c6) * tw,
                  *s2 = s + (size_t)(2 * 6 + c6) * tw, *s3 = s + (size_t)(3 * 6 + c6) * tw;
#pragma omp simd
            for (int tj = 0; tj < tw; tj++) {
                float a1 = q1[tj] + q2[tj], b1 = q1[tj] - q2[tj], a3 = q3[tj] + q4[tj],
                      b3 = q3[tj] - q4[tj];
                s0[tj] = q0[tj] + a1 + a3;
                s1[tj] = b1 + 2.0f * b3;
                s2[tj] = a1 + 4.0f * a3;
                s3[tj] = b1 + 8.0f * b3 + q5[tj];
            }
        }
        for (int i = 0; i < 4; i++) {       /* Y[i][j] = Σ_k s[i][k] A[k][j] */
            const float *c0 = s + (size_t)(i * 6 + 0) * tw, *c1 = s + (size_t)(i * 6 + 1) * tw,
                        *c2 = s + (size_t)(i * 6 + 2) * tw, *c3 = s + (size_t)(i * 6 + 3) * tw,
                        *c4 = s + (size_t)(i * 6 + 4) * tw, *c5 = s + (size_t)(i * 6 + 5) * tw;
            float *y0 = yv + (size_t)(i * 4 + 0) * tw, *y1 = yv + (size_t)(i * 4 + 1) * tw,
                  *y2 = yv + (size_t)(i * 4 + 2) * tw, *y3 = yv + (size_t)(i * 4 + 3) * tw;
#pragma omp simd
            for (int tj = 0; tj < tw; tj++) {
                float a1 = c1[tj] + c2[tj], b1 = c1[tj] - c2[tj], a3 = c3[tj] + c4[tj],
                      b3 = c3[tj] - c4[tj];
                y0[tj] = c0[tj] + a1 + a3 + bv;
                y1[tj] = b1 + 2.0f * b3 + bv;
                y2[tj] = a1 + 4.0f * a3 + bv;
                y3[tj] = b1 + 8.0f * b3 + c5[tj] + bv;
            }
        }
        const int yy = 4 * (i0 + ti);
        const int full = W / 4;   /* tiles whose 4 columns are all inside */
        for (int i = 0; i < 4 && yy + i < H; i++) {
            float *orow = o + (size_t)(yy + i) * W;
            const float *z0 = yv + (size_t)(i * 4) * tw, *z1 = z0 + tw, *z2 = z1 + tw, *z3 = z2 + tw;
#pragma omp simd
            for (int tj = 0; tj < full; tj++) {   /* one interleaved group: vectorised */
                orow[4 * tj] = z0[tj];
                orow[4 * tj + 1] = z1[tj];
                orow[4 * tj + 2] = z2[tj];
                orow[4 * tj + 3] = z3[tj];
            }
            for (int j = 0; j < 4 && 4 * full + j < W; j++) orow[4 * full + j] = z0[(size_t)j * tw + full];
        }
    }
}

static void wino4_in_plane(const float *src, int Hp, int Wp, int i0, int r, int tw, size_t vx, float *v, float *tr,
                           float *ph, const float *zrow) {
    wino4_in_body(src, Hp, Wp, i0, r, tw, vx, v, tr, ph, zrow);
}
static void wino4_out_plane(const float *m, size_t mx, int H, int W, int i0, int r, int tw, float bv, float *o,
                            float *s, float *yv) {
    wino4_out_body(m, mx, H, W, i0, r, tw, bv, o, s, yv);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) static void wino4_in_plane_avx512(const float *src, int Hp, int Wp, int i0, int r,
                                                                     int tw, size_t vx, float *v, float *tr,
                                                                     float *ph, const float *zrow) {
    wino4_in_body(src, Hp, Wp, i0, r, tw, vx, v, tr, ph, zrow);
}
__attribute__((target("avx512f"))) static void wino4_out_plane_avx512(const float *m, size_t mx, int H, int W, int i0,
                                                                      int r, int tw, float bv, float *o, float *s,
                                                                      float *yv) {
    wino4_out_body(m, mx, H, W, i0, r, tw, bv, o, s, yv);
}
#else
#define wino4_in_plane_avx512 wino4_in_plane
#define wino4_out_plane_avx512 wino4_out_plane
#endif

/* F(4×4) with its transformed weights w [36, Cout, kt·Cin] (conv_wts). */
static void conv3d_winograd4(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const conv_wts *w,
                             const float *bias, int Cout, int kt, float *y) {
    const int T = Tp - kt + 1, H = Hp - 2, W = Wp - 2, th = (H + 3) / 4, tw = (W + 3) / 4;
    CVX_CHECK(T > 0 && H > 0 && W > 0);
    const size_t HW = (size_t)H * W, HWp = (size_t)Hp * Wp;
    const int R = winograd_block_rows(ctx, (size_t)36 * tw * ((size_t)Cin * Tp + (size_t)Cout * T), th);
    const int wide = (ctx->cpu_features & CVX_CPU_AVX512F) != 0;   /* the transforms' AVX-512 build */
    for (int i0 = 0; i0 < th; i0 += R) {
        const int r = th - i0 < R ? th - i0 : R, nt = r * tw;
        float *V = ctx->winograd.data;                                           // [36, Tp, Cin, nt]
        float *M = ctx->winograd.data + (size_t)36 * Cin * Tp * nt;              // [36, Cout, T, nt]
        const size_t vx = (size_t)Cin * Tp * nt, mx = (size_t)Cout * T * nt;
        /* Input transform V = Bᵀ d B of every 6×6 patch (stride 4, zero past the padded edge). */
#pragma omp parallel
        {
            const int Wx = 4 * tw + 8;
            float *tr = cvx_alloc_f32((size_t)6 * Wx), *ph = cvx_alloc_f32((size_t)4 * (tw + 2));
            float *zrow = cvx_calloc((size_t)Wx, sizeof(float));   /* rows past the padded edge */
#pragma omp for collapse(2) schedule(static)
            for (int ci = 0; ci < Cin; ci++)
                for (int f = 0; f < Tp; f++) {
                    const float *src = xp + ((size_t)ci * Tp + f) * HWp;
                    float *v = V + ((size_t)f * Cin + ci) * nt;
                    (wide ? wino4_in_plane_avx512 : wino4_in_plane)(src, Hp, Wp, i0, r, tw, vx, v, tr, ph, zrow);
                }
            free(tr), free(ph), free(zrow);
        }
        winograd_products(ctx, 36, Cout, Cin, kt, T, nt, w, V, vx, M, mx);
        /* Output transform Y = Aᵀ m A, bias, valid 4×4 outputs. */
#pragma omp parallel
        {
            float *s = cvx_alloc_f32((size_t)24 * tw), *yv = cvx_alloc_f32((size_t)16 * tw);
#pragma omp for collapse(2) schedule(static)
            for (int co = 0; co < Cout; co++)
                for (int t = 0; t < T; t++) {
                    const float *m = M + ((size_t)co * T + t) * nt;
                    float *o = y + ((size_t)co * T + t) * HW;
                    const float bv = bias ? bias[co] : 0.0f;
                    (wide ? wino4_out_plane_avx512 : wino4_out_plane)(m, mx, H, W, i0, r, tw, bv, o, s, yv);
                }
            free(s), free(yv);
        }
    }
}

void cvx_conv3d_winograd4(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const float *U, const float *bias,
                          int Cout, int kt, float *y) {
    const conv_wts w = {U, conv_bf16(ctx) ? bf16_copy(&ctx->bf16_w, U, (size_t)36 * Cout * kt * Cin) : NULL, 0, 0};
    conv3d_winograd4(ctx, xp, Cin, Tp, Hp, Wp, &w, bias, Cout, kt, y);
}

cvx_conv_algo cvx_conv_algo_for(const cvx_ctx *ctx, int kh, int kw, int H, int W) {
    if (kh != 3 || kw != 3) return CVX_CONV_DIRECT;
    if (ctx->conv_algo == CVX_CONV_WINOGRAD4 && ((H + 3) / 4) * ((W + 3) / 4) < CVX_WINOGRAD4_MIN_TILES)
        return CVX_CONV_WINOGRAD2;
    return ctx->conv_algo;
}

void cvx_conv3d_tensor(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const cvx_tensor *w,
                       const float *bias, int Cout, int kt, int kh, int kw, float *y) {
    const cvx_conv_algo algo = cvx_conv_algo_for(ctx, kh, kw, Hp - kh + 1, Wp - kw + 1);
    const int bf = conv_bf16(ctx);
    int packed = 0;
    const void *pw = cvx_conv_weights_for(ctx, w, algo, Cout, Cin, kt, kt * kh * kw, bf, &packed);
    const conv_wts cw = {bf ? NULL : pw, bf ? pw : NULL, packed, packed ? cvx_conv_gemm_isa(ctx) : 0};
    if (algo == CVX_CONV_WINOGRAD4) conv3d_winograd4(ctx, xp, Cin, Tp, Hp, Wp, &cw, bias, Cout, kt, y);
    else if (algo == CVX_CONV_WINOGRAD2) conv3d_winograd2(ctx, xp, Cin, Tp, Hp, Wp, &cw, bias, Cout, kt, y);
    else conv3d_direct(ctx, xp, Cin, Tp, Hp, Wp, &cw, bias, Cout, kt, kh, kw, y);
}
