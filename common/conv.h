/* Convolutions (f32) for video models: 3D/2D convolutions on a pre-padded input as GEMMs,
 * 1×1×1 convolutions, PyTorch-exact nearest up-sampling. Every fast kernel has a simple
 * reference beside it (tests/common_conv.c compares them).
 *
 * Layouts are channel-major, one sample: x[C, T, H, W] (a 2D conv is a 3D conv with kt = 1).
 *
 * The fast 3D convolution is "shifted GEMMs": the input is stored zero-padded spatially and
 * padded in time by the caller (causal padding, caches), xp[Cin, Tp, Hp, Wp]. For every tap
 * (dt, dy, dx) of the kernel, out_grid[Cout, n] += W_tap[Cout, Cin] · xp[Cin, n + off(dt,dy,dx)]
 * over the flat padded grid n — a plain row-major GEMM (K = Cin) with no im2col copy. Outputs
 * at grid positions in the padding columns/rows are garbage and dropped when the valid
 * [Cout, T, H, W] result (plus bias) is extracted. */
#ifndef CVX_CONV_H
#define CVX_CONV_H

#include <stddef.h>
#include "context.h"
#include "safetensors.h"

/* Weights [Cout, Cin, taps...] (any float dtype; taps = kt·kh·kw) widened and reordered to
 * dst[taps, Cout, Cin], the layout cvx_conv3d_padded wants. dst: taps·Cout·Cin floats. */
void cvx_conv_pack_weights(cvx_ctx *ctx, const cvx_tensor *w, int Cout, int Cin, int taps, float *dst);

/* Valid 3D convolution (stride 1, no dilation) of a pre-padded input:
 *   xp: [Cin, Tp, Hp, Wp]; wpk: [kt·kh·kw, Cout, Cin] (cvx_conv_pack_weights); bias: [Cout] or NULL
 *   y:  [Cout, Tp−kt+1, Hp−kh+1, Wp−kw+1].
 * Heavy work in cvx_gemm; uses ctx->conv_grid (at most ~64 MB) as scratch. */
void cvx_conv3d_padded(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const float *wpk, const float *bias,
                       int Cout, int kt, int kh, int kw, float *y);
/* Reference: direct loops, double accumulation, weights in their natural layout w[Cout, Cin, kt, kh, kw]. */
void cvx_conv3d_padded_ref(const float *xp, int Cin, int Tp, int Hp, int Wp, const float *w, const float *bias,
                           int Cout, int kt, int kh, int kw, float *y);

/* Winograd F(2×2, 3×3) on the spatial 3×3 part of a kt×3×3 convolution (2.25× fewer
 * multiplies; the kt time taps are summed inside the 16 GEMMs). Same input/output contract
 * as cvx_conv3d_padded with kh = kw = 3; U from cvx_conv_winograd_weights: [16, Cout, kt·Cin]
 * (G g Gᵀ, computed in double). Reference: cvx_conv3d_padded_ref. */
void cvx_conv_winograd_weights(cvx_ctx *ctx, const cvx_tensor *w, int Cout, int Cin, int kt, float *dst);
void cvx_conv3d_winograd(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const float *U, const float *bias,
                         int Cout, int kt, float *y);
/* Winograd F(4×4, 3×3): 4× fewer multiplies than direct (36 products per 16 outputs), a little
 * less accurate (6×6 transforms with coefficients up to 8). Same contract; U: [36, Cout, kt·Cin]. */
void cvx_conv_winograd4_weights(cvx_ctx *ctx, const cvx_tensor *w, int Cout, int Cin, int kt, float *dst);
void cvx_conv3d_winograd4(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const float *U, const float *bias,
                          int Cout, int kt, float *y);
/* Transformed weights held by the context (common/conv_wcache.c): the weights w [Cout, Cin, taps] of a
 * conv in the layout algo's kernel reads — CVX_CONV_DIRECT: cvx_conv_pack_weights [taps, Cout, Cin];
 * WINOGRAD2 / WINOGRAD4: cvx_conv_winograd_weights / cvx_conv_winograd4_weights (taps = 9·kt) — as f32
 * (bf16 = 0: const float *) or rounded to bf16 (bf16 = 1: const uint16_t *, RNE as every conv's
 * per-call conversion). Made on first use and held in ctx->conv_wcache until cvx_ctx_free /
 * cvx_ctx_release_scratch, keyed by the tensor (address, data, dtype, a 16-word sample of its bytes),
 * shape, layout and dtype: the same numbers the per-call transform gives, once per context instead
 * of once per call. Budget: CVX_PACK_BUDGET_MB (read when the cache is first used; 0 disables) or
 * cvx_conv_wcache_set_budget, else a quarter of the physical RAM up to 4 GiB and never past
 * MemAvailable less 4 GiB; over it, the weights are made into the context's scratch (conv_w,
 * bf16_w) on every call, valid until the next conv (one cvx_warn line names the first such weight). */
const void *cvx_conv_weights(cvx_ctx *ctx, const cvx_tensor *w, cvx_conv_algo algo, int Cout, int Cin, int kt,
                             int taps, int bf16);
/* The same weights in the layout the convolution's products read fastest: in f32 mode on the
 * fixed-chain GEMM (cvx_conv_gemm_isa ≥ 0) a cached entry holds each of its matrices (taps ×
 * [Cout, Cin], 16 | 36 × [Cout, kt·Cin]) packed as cvx_sgemm_fixed_packed's A for those tiles
 * (cvx_conv_pack_weights_gemm; *packed = 1), so no product packs its weights — also when it is
 * made per call (over the budget: transformed straight into that layout in the scratch);
 * otherwise (bf16, library f32) the layout of cvx_conv_weights (*packed = 0). */
const void *cvx_conv_weights_for(cvx_ctx *ctx, const cvx_tensor *w, cvx_conv_algo algo, int Cout, int Cin, int kt,
                                 int taps, int bf16, int *packed);
/* The tile set of ctx's f32 products (cvx_sgemm_fixed_packed's avx512 argument: 0 or 1), or −1
 * when they are not the fixed chains (bf16 mode, the benchmarks' library f32). */
int cvx_conv_gemm_isa(const cvx_ctx *ctx);
/* The n matrices of algo's layout (cvx_conv_pack_weights / _winograd_weights / _winograd4_weights;
 * n = taps, 16, 36) each packed as the A of cvx_sgemm_fixed_packed(isa, ..) (gemm.h), one after
 * the other: cvx_conv_packed_floats floats. Made a panel of output channels at a time (no
 * full-size row-major copy); the values are those of the row-major functions. */
size_t cvx_conv_packed_floats(int isa, cvx_conv_algo algo, int Cout, int Cin, int kt, int taps);
void cvx_conv_pack_weights_gemm(cvx_ctx *ctx, const cvx_tensor *w, cvx_conv_algo algo, int Cout, int Cin, int kt,
                                int taps, int isa, float *dst);
void cvx_conv_wcache_set_budget(cvx_ctx *ctx, size_t bytes);   /* 0: never cache (per-call transforms) */
size_t cvx_conv_wcache_bytes(const cvx_ctx *ctx);              /* bytes held by cached weights */
int cvx_conv_wcache_count(const cvx_ctx *ctx);                 /* weights cached */
void cvx_conv_wcache_trim(struct cvx_conv_wcache *c);   /* drop the weights (cvx_ctx_release_scratch) */
void cvx_conv_wcache_free(struct cvx_conv_wcache *c);   /* (cvx_ctx_free calls it) */
/* The algorithm cvx_conv3d_tensor runs for a kh×kw kernel over H×W output frames: shifted GEMMs
 * unless 3×3; the context's conv_algo, except that F(4×4) gives way to F(2×2) on frames of fewer
 * than CVX_WINOGRAD4_MIN_TILES 4×4 tiles (≤ 16×16 + a bit): there the F(4×4) products are
 * [Cout, kt·Cin]·[kt·Cin, a few tiles], bound by reading its 36-point weights (4× the kernel), and
 * F(2×2) (16 points) ran 2–2.3× faster per CPU-second (Cascade Lake, 2 threads: 512 channels at
 * 16×16, 1024 at 8×8); from 32×32 on F(4×4) is the faster (1.3–1.6×). */
enum { CVX_WINOGRAD4_MIN_TILES = 32 };
cvx_conv_algo cvx_conv_algo_for(const cvx_ctx *ctx, int kh, int kw, int H, int W);
/* Valid 3D convolution of a pre-padded input (contract of cvx_conv3d_padded) with the weights of
 * tensor w [Cout, Cin, kt, kh, kw] (any float dtype) through cvx_conv_algo_for's algorithm, the
 * weights in that layout and precision from cvx_conv_weights: the bits of transforming them at
 * every call and running cvx_conv3d_winograd4 / _winograd / cvx_conv3d_padded. */
void cvx_conv3d_tensor(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const cvx_tensor *w,
                       const float *bias, int Cout, int kt, int kh, int kw, float *y);
/* The same convolution through oneDNN's bf16 convolution primitive (common/conv_onednn.c): src and
 * weights w [Cout, Cin, kt, kh, kw] (any float dtype) rounded to bf16, f32 accumulation, f32 bias
 * and dst y [Cout, Tp−kt+1, Hp−kh+1, Wp−kw+1]. Without bf16 units oneDNN emulates bf16 on AVX-512
 * (correct, not faster). Primitives cached per shape and each weight reordered once into the
 * primitive's layout, held in ctx->conv_onednn (weights keyed by tensor address, data and shape)
 * until cvx_ctx_free. 0, or -1 + cvx_error when oneDNN has no such primitive.
 * Reference: cvx_conv3d_padded_ref. */
int cvx_conv3d_onednn_bf16(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const cvx_tensor *w,
                           const float *bias, int Cout, int kt, int kh, int kw, float *y);
void cvx_conv_onednn_free(struct cvx_conv_onednn *c);              /* (cvx_ctx_free calls it) */
size_t cvx_conv_onednn_bytes(const struct cvx_conv_onednn *c);    /* bytes of reordered weights held */
/* (The Winograd scratch per block of tile rows is ctx->winograd_budget floats.) */

/* 1×1×1 convolution: y[Cout, N] = w[Cout, Cin] · x[Cin, N] + bias. w f32 (widened by the caller). */
void cvx_conv1x1(cvx_ctx *ctx, const float *x, int Cin, size_t N, const float *w, const float *bias, int Cout, float *y);
void cvx_conv1x1_ref(const float *x, int Cin, size_t N, const float *w, const float *bias, int Cout, float *y);

/* Copy frames ts .. ts+n−1 of src[C, Ts, H, W] into frames t0 .. t0+n−1 of dst[C, Td, H+2ph, W+2pw]
 * with zero borders (other frames of dst are untouched). */
void cvx_pad_frames(float *dst, int Td, int t0, const float *src, int C, int Ts, int ts, int n, int H, int W, int ph,
                    int pw);

/* PyTorch's nearest source index (F.interpolate mode="nearest", size given, or scale_factor
 * when out = 2·in): min(floor(o · (float)in/out), in−1). */
int cvx_nearest_index(int o, int in_size, int out_size);
/* Nearest resize x[C, Ti, Hi, Wi] -> y[C, To, Ho, Wo] (F.interpolate(x, size=(To, Ho, Wo))). */
void cvx_upsample_nearest(const float *x, int C, int Ti, int Hi, int Wi, float *y, int To, int Ho, int Wo);
/* The same written straight into a padded conv input: y[C, Td, Ho+2ph, Wo+2pw] frames
 * t0 .. t0+To−1 (zero borders), so a nearest up-sampling followed by a padded convolution
 * never materialises the up-sampled tensor twice. Output frame t reads source frame tmap[t]
 * (tmap NULL: cvx_nearest_index(t, Ti, To)). Reference = cvx_upsample_nearest + cvx_pad_frames. */
void cvx_upsample_nearest_padded(const float *x, int C, int Ti, int Hi, int Wi, const int *tmap, int To, int Ho,
                                 int Wo, float *y, int Td, int t0, int ph, int pw);

#endif
