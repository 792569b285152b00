/* Convolution weights in the layouts the conv kernels read (conv.h): the shifted-GEMM taps
 * [taps, Cout, Cin] and the Winograd F(2×2) / F(4×4) transforms G g Gᵀ [16 | 36, Cout, kt·Cin] —
 * either row-major (cvx_conv_pack_weights, cvx_conv_winograd_weights, cvx_conv_winograd4_weights)
 * or each of those n matrices [Cout, K] already packed as the A of cvx_sgemm_fixed_packed
 * (cvx_conv_pack_weights_gemm: the weight cache's f32 layout, so a product never packs its weights).
 *
 * Both run one kernel-row unit at a time: output channel co and time tap d (d < kt for Winograd;
 * the shifted-GEMM taps are one unit of taps rows) gives u[n][Cin] — row co of matrix ξ, columns
 * d·Cin .. — with the Cin kernels gathered planar, g9[9][Cin], so every step of G g Gᵀ is a loop
 * over ci (vectorised, double). (Storing each kernel's n values straight to a row-major dst touches
 * n streams a multiple of 2 KB apart, which thrashes the cache sets: measured ~40 % of a small
 * decode.) The row-major form copies the n rows to their places; the packed form transforms a
 * piece of a micro-panel (mr output channels × up to 256 input channels of one time tap) into a
 * thread's own [n][mr][256] block (in L2) and packs it, each panel written by one thread. The per-element expressions are the same in both: the same
 * values, bit for bit. */
#include "conv.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "gemm.h"

/* The transform points (rows of a unit): taps, 16 or 36. */
static int unit_rows(cvx_conv_algo algo, int taps) {
    return algo == CVX_CONV_WINOGRAD4 ? 36 : algo == CVX_CONV_WINOGRAD2 ? 16 : taps;
}

/* The weight tensor [Cout, Cin, taps] as read by the units: f32 in place (wf), or a per-element
 * dtype (bf16, f16: exact in f32) widened one output channel's piece at a time into the unit's
 * buffer — no f32 copy of the whole tensor (0.9 GB for HunyuanVideo-1.5's 8192×1024×27); block
 * types are widened whole first (cvx_weight_f32). */
typedef struct {
    const float *wf;      /* f32, [Cout, Cin, taps], or NULL: src widened per piece */
    const void *src;
    cvx_dtype dtype;
    size_t esize;
    int Cin, taps;
} wsrc;

static wsrc wsrc_of(cvx_ctx *ctx, const cvx_tensor *w, int Cin, int taps) {
    wsrc s = {NULL, w->data, w->dtype, 0, Cin, taps};
    if ((w->dtype == CVX_F32 && ((uintptr_t)w->data & 3) == 0) || cvx_dtype_block(w->dtype) != 1 ||
        !cvx_dtype_to_f32_ok(w->dtype))
        s.wf = cvx_weight_f32(ctx, w);
    else
        s.esize = cvx_dtype_block_bytes(w->dtype);
    return s;
}

/* One thread's working buffers for the unit transforms. */
typedef struct {
    float *g9, *u, *row;   /* row: [cn, taps] of one output channel (widened, or pointing into wf) */
    float *own;
    double *t;
} unit_buf;

static unit_buf unit_buf_new(int n, int Cin, int taps) {
    return (unit_buf){cvx_alloc_f32((size_t)9 * Cin), cvx_alloc_f32((size_t)n * Cin), NULL,
                      cvx_alloc_f32((size_t)Cin * taps), cvx_malloc(sizeof(double) * 18 * (size_t)Cin)};
}
static void unit_buf_free(unit_buf *b) { free(b->g9), free(b->u), free(b->own), free(b->t); }

/* b->row := w[co, ci0 .. ci0+cn−1, :] as f32 */
static void unit_load(const wsrc *w, int co, int ci0, int cn, unit_buf *b) {
    const size_t at = ((size_t)co * w->Cin + ci0) * w->taps;
    if (w->wf) {
        b->row = (float *)(w->wf + at);
        return;
    }
    cvx_to_f32_n(w->dtype, (const unsigned char *)w->src + at * w->esize, b->own, (size_t)cn * w->taps);
    b->row = b->own;
}
/* g9[k][c] = row[c, dt, k] for c < cn (the 9 spatial taps of time tap dt), row: [cn, kt, 3, 3]. */
static void gather_taps(const float *row, int cn, int kt, int dt, float *g9) {
    for (int c = 0; c < cn; c++) {
        const float *g = row + ((size_t)c * kt + dt) * 9;
        for (int k = 0; k < 9; k++) g9[(size_t)k * cn + c] = g[k];
    }
}

/* F(2×2): u[16][Cin] (row stride ldu) = G g Gᵀ, G = [1 0 0; ½ ½ ½; ½ −½ ½; 0 0 1]. */
static inline __attribute__((always_inline)) void wino2_unit(const float *g9, double *t, float *u, size_t ldu,
                                                             int Cin) {
    for (int c = 0; c < 3; c++) {   /* G g */
        const float *g0 = g9 + (size_t)c * Cin, *g1 = g9 + (size_t)(3 + c) * Cin, *g2 = g9 + (size_t)(6 + c) * Cin;
        double *t0 = t + (size_t)(0 * 3 + c) * Cin, *t1 = t + (size_t)(1 * 3 + c) * Cin,
               *t2 = t + (size_t)(2 * 3 + c) * Cin, *t3 = t + (size_t)(3 * 3 + c) * Cin;
#pragma omp simd
        for (int ci = 0; ci < Cin; ci++) {
            t0[ci] = g0[ci];
            t1[ci] = 0.5 * ((double)g0[ci] + g1[ci] + g2[ci]);
            t2[ci] = 0.5 * ((double)g0[ci] - g1[ci] + g2[ci]);
            t3[ci] = g2[ci];
        }
    }
    for (int i = 0; i < 4; i++) {   /* (G g) Gᵀ */
        const double *a = t + (size_t)(i * 3) * Cin, *b = a + Cin, *c = b + Cin;
        float *u0 = u + (size_t)(i * 4) * ldu, *u1 = u0 + ldu, *u2 = u1 + ldu, *u3 = u2 + ldu;
#pragma omp simd
        for (int ci = 0; ci < Cin; ci++) {
            u0[ci] = (float)a[ci];
            u1[ci] = (float)(0.5 * (a[ci] + b[ci] + c[ci]));
            u2[ci] = (float)(0.5 * (a[ci] - b[ci] + c[ci]));
            u3[ci] = (float)c[ci];
        }
    }
}

/* F(4×4), interpolation points 0, ±1, ±2, ∞ (Lavin & Gray): u[36][Cin] (row stride ldu) = G g Gᵀ. */
static const double WG4[6][3] = {  /* G */
    {1.0 / 4, 0, 0}, {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
    {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1},
};

static inline __attribute__((always_inline)) void wino4_unit(const float *g9, double *t, float *u, size_t ldu,
                                                             int Cin) {
    for (int i = 0; i < 6; i++)
        for (int c = 0; c < 3; c++) {   /* t = G g: [6][3][Cin] */
            const float *g0 = g9 + (size_t)c * Cin, *g1 = g9 + (size_t)(3 + c) * Cin, *g2 = g9 + (size_t)(6 + c) * Cin;
            const double w0 = WG4[i][0], w1 = WG4[i][1], w2 = WG4[i][2];
            double *ti = t + (size_t)(i * 3 + c) * Cin;
#pragma omp simd
            for (int ci = 0; ci < Cin; ci++) ti[ci] = w0 * g0[ci] + w1 * g1[ci] + w2 * g2[ci];
        }
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {   /* u = t Gᵀ */
            const double *a = t + (size_t)(i * 3) * Cin, *b = a + Cin, *c = b + Cin;
            const double w0 = WG4[j][0], w1 = WG4[j][1], w2 = WG4[j][2];
            float *uij = u + (size_t)(i * 6 + j) * ldu;
#pragma omp simd
            for (int ci = 0; ci < Cin; ci++) uij[ci] = (float)(w0 * a[ci] + w1 * b[ci] + w2 * c[ci]);
        }
}

/* The unit (co, d) of the loaded piece b->row (unit_load: output channel co, input channels
 * ci0 .. ci0+cn−1) into u [n][cn] (row stride ldu): row co of the n matrices, columns d·Cin + ci0 ..
 * (each value depends on its own kernel only). The same expressions in every build of it: the
 * AVX-512 one (unit_avx512: 8 doubles a vector) gives the same bits (no FMA contraction). */
static inline __attribute__((always_inline)) void unit_body(cvx_conv_algo algo, int cn, int kt, int taps, int d,
                                                            unit_buf *b, float *u, size_t ldu) {
    if (algo == CVX_CONV_DIRECT) {   /* u[k][c] = w[co, ci0 + c, k] */
        const float *w = b->row;
        for (int c = 0; c < cn; c++)
            for (int k = 0; k < taps; k++) u[(size_t)k * ldu + c] = w[(size_t)c * taps + k];
        return;
    }
    gather_taps(b->row, cn, kt, d, b->g9);
    if (algo == CVX_CONV_WINOGRAD4) wino4_unit(b->g9, b->t, u, ldu, cn);
    else wino2_unit(b->g9, b->t, u, ldu, cn);
}
static void unit(cvx_conv_algo algo, int cn, int kt, int taps, int d, unit_buf *b, float *u, size_t ldu) {
    unit_body(algo, cn, kt, taps, d, b, u, ldu);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) static void unit_avx512(cvx_conv_algo algo, int cn, int kt, int taps, int d,
                                                           unit_buf *b, float *u, size_t ldu) {
    unit_body(algo, cn, kt, taps, d, b, u, ldu);
}
#else
#define unit_avx512 unit
#endif

/* Row-major: the n matrices [Cout, K] (K = D·Cin, D = kt for Winograd, 1 for the taps) into dst. */
static void make_rowmajor(cvx_ctx *ctx, const cvx_tensor *w, cvx_conv_algo algo, int Cout, int Cin, int kt, int taps,
                          float *dst) {
    CVX_CHECK(w->numel == (int64_t)Cout * Cin * taps);
    const wsrc ws = wsrc_of(ctx, w, Cin, taps);
    const int n = unit_rows(algo, taps), D = algo == CVX_CONV_DIRECT ? 1 : kt;
    const size_t ld = (size_t)D * Cin;
#pragma omp parallel
    {
        unit_buf b = unit_buf_new(n, Cin, taps);
#pragma omp for schedule(static)
        for (int co = 0; co < Cout; co++) {
            unit_load(&ws, co, 0, Cin, &b);
            for (int d = 0; d < D; d++) {
                unit(algo, Cin, kt, taps, d, &b, b.u, (size_t)Cin);
                for (int xi = 0; xi < n; xi++)
                    memcpy(dst + ((size_t)xi * Cout + co) * ld + (size_t)d * Cin, b.u + (size_t)xi * Cin,
                           sizeof(float) * Cin);
            }
        }
        unit_buf_free(&b);
    }
}

void cvx_conv_pack_weights(cvx_ctx *ctx, const cvx_tensor *w, int Cout, int Cin, int taps, float *dst) {
    make_rowmajor(ctx, w, CVX_CONV_DIRECT, Cout, Cin, 1, taps, dst);
}

void cvx_conv_winograd_weights(cvx_ctx *ctx, const cvx_tensor *w, int Cout, int Cin, int kt, float *dst) {
    make_rowmajor(ctx, w, CVX_CONV_WINOGRAD2, Cout, Cin, kt, 9 * kt, dst);
}

void cvx_conv_winograd4_weights(cvx_ctx *ctx, const cvx_tensor *w, int Cout, int Cin, int kt, float *dst) {
    make_rowmajor(ctx, w, CVX_CONV_WINOGRAD4, Cout, Cin, kt, 9 * kt, dst);
}

size_t cvx_conv_packed_floats(int isa, cvx_conv_algo algo, int Cout, int Cin, int kt, int taps) {
    const int K = algo == CVX_CONV_DIRECT ? Cin : kt * Cin;
    return (size_t)unit_rows(algo, taps) * cvx_sgemm_fixed_packed_floats(isa, Cout, K);
}

void cvx_conv_pack_weights_gemm(cvx_ctx *ctx, const cvx_tensor *w, cvx_conv_algo algo, int Cout, int Cin, int kt,
                                int taps, int isa, float *dst) {
    CVX_CHECK(w->numel == (int64_t)Cout * Cin * taps && (algo == CVX_CONV_DIRECT || taps == 9 * kt));
    const wsrc ws = wsrc_of(ctx, w, Cin, taps);
    const int n = unit_rows(algo, taps), D = algo == CVX_CONV_DIRECT ? 1 : kt, K = D * Cin;
    const int mr = cvx_sgemm_fixed_packed_mr(isa, Cout), panels = (Cout + mr - 1) / mr;
    const int CB = Cin < 256 ? Cin : 256;   /* input channels per piece: [n][mr][CB] stays in L2 */
    const size_t per = cvx_sgemm_fixed_packed_floats(isa, Cout, K);   /* one packed matrix */
#pragma omp parallel
    {
        unit_buf b = unit_buf_new(n, CB, taps);
        float *blk = cvx_alloc_f32((size_t)n * mr * CB);   /* [n][mr][cn]: a piece of one panel, row-major */
#pragma omp for schedule(static)
        for (int q = 0; q < panels; q++) {
            const int c0 = q * mr, R = Cout - c0 < mr ? Cout - c0 : mr;
            for (int d = 0; d < D; d++)
                for (int ci0 = 0; ci0 < Cin; ci0 += CB) {
                    const int cn = Cin - ci0 < CB ? Cin - ci0 : CB;
                    for (int r = 0; r < R; r++) {   /* row r of the piece: blk[ξ][r][0 .. cn) */
                        unit_load(&ws, c0 + r, ci0, cn, &b);
                        (isa ? unit_avx512 : unit)(algo, cn, kt, taps, d, &b, blk + (size_t)r * cn, (size_t)mr * cn);
                    }
                    for (int xi = 0; xi < n; xi++)   /* (a parallel region nested here runs on this thread) */
                        cvx_sgemm_fixed_pack_a(isa, 0, Cout, K, c0, R, d * Cin + ci0, cn, blk + (size_t)xi * mr * cn, cn,
                                               dst + (size_t)xi * per);
                }
        }
        free(blk);
        unit_buf_free(&b);
    }
}
