/* Linear layers over ggml block-quantized weights (GGUF tensors, common/quant.h), read in place:
 * a quantized W is never widened whole.
 *
 * Two paths (cvx_kernels_set_qdot picks one per kernels context):
 *   dequant (default): per block of output rows, W's rows are dequantized bit-exactly as ggml's
 *       dequantize_row_* into a tile (f32, or bf16 in bf16 mode) and multiplied with the oneDNN /
 *       OpenBLAS GEMM of cvx_matmul. The result is the product with the dequantized weights: f32
 *       mode matches a model whose weights were dequantized to f32 beforehand, to GEMM rounding.
 *   int8 (opt-in, like bf16 a precision choice): activations quantized per row to int8 as ggml's
 *       vec_dot does (q8_0 blocks of 32 for Q4_0..Q8_0 weights, q8_K super-blocks of 256 for the
 *       K types), weights unpacked per tile to unsigned 8-bit codes with a float scale and offset
 *       per sub-block, integer dot products with AVX512-VNNI vpdpbusd where the CPU has it, AVX2
 *       vpmaddwd otherwise (run-time dispatch, cpu.h), f32 accumulation across sub-blocks. Off from
 *       the dequant path by the activations' int8 rounding (~1e-3 relative per product).
 * References beside both: cvx_linear_quant_ref (double accumulation over dequantized values). */
#ifndef CVX_GEMM_QUANT_H
#define CVX_GEMM_QUANT_H

#include "context.h"
#include "gemm_fast.h"
#include "safetensors.h"

typedef enum {
    CVX_QDOT_DEQUANT = 0,   /* dequantized tiles × f32/bf16 GEMM (exact to ggml's dequantization) */
    CVX_QDOT_INT8 = 1,      /* int8 activations × int8 weight codes (ggml's vec_dot arithmetic) */
} cvx_qdot;

/* Which int8 kernel runs (tests force the slower ones): best available, AVX2, scalar. */
typedef enum { CVX_Q8K_AUTO = 0, CVX_Q8K_AVX2 = 1, CVX_Q8K_SCALAR = 2 } cvx_q8_kernel;

/* The dispatch inside cvx_linear_p for W of a block type: y[M,N] = x[M,K]·Wᵀ (+ bias[N] f32, may
 * be NULL) at precision p (dequant path) or in int8 (qdot = CVX_QDOT_INT8: p does not matter).
 * kc may be NULL (then the tiles go through OpenBLAS, f32 only). 0, or -1 + cvx_error (W's row
 * not whole blocks, dtype not a block type). */
int cvx_linear_quant(cvx_kernels *kc, cvx_precision p, cvx_qdot qdot, const float *x, int M, int K,
                     const cvx_tensor *W, const float *bias, float *y);

/* Reference of both paths: qdot = CVX_QDOT_DEQUANT: Σ x·dequant(W) in double; CVX_QDOT_INT8: the
 * activations quantized as the int8 path does (cvx_q8_quantize_row), Σ dequant(x)·dequant(W) in
 * double. Same contract as cvx_linear_quant. */
int cvx_linear_quant_ref(cvx_qdot qdot, const float *x, int M, int K, const cvx_tensor *W, const float *bias,
                         float *y);

/* ---- the int8 path's pieces (common/gemm_q8.c) ---- */

/* Sub-block length of W's scales in the int8 path: 16 for Q2_K, Q3_K, Q6_K, else 32. */
int cvx_q8_group(cvx_dtype t);
/* One activation row x[K] quantized for weights of type t: q8_K (t a K type: per 256, d = max/-127,
 * codes nearest_int, ggml's quantize_row_q8_K_ref) or q8_0 (per 32, d = amax/127 rounded to f16,
 * codes roundf(x/d), quantize_row_q8_0_ref; a NaN is left out of amax). Writes q[K] int8 codes and per sub-block g of
 * cvx_q8_group(t): d[g] (the scale of its block) and ds[g] = d[g]·Σ codes of the sub-block. */
void cvx_q8_quantize_row(cvx_dtype t, const float *x, int K, int8_t *q, float *d, float *ds);
/* The same, bit for bit, with AVX2 when cpu has it (the int8 path's). */
void cvx_q8_quantize_row_fast(const cvx_cpu_features *cpu, cvx_dtype t, const float *x, int K, int8_t *q, float *d,
                              float *ds);
/* One W row of type t unpacked: u[K] unsigned codes and per sub-block g: s[g], m[g] with
 * W[k] = s[g]·u[k] + m[g] (to float rounding of m; exactly ggml's value when m = 0). */
void cvx_q8_unpack_row(cvx_dtype t, const void *row, int K, uint8_t *u, float *s, float *m);
/* Which int8 kernel this CPU runs ("avx512-vnni", "avx2", "scalar") under `force`. */
const char *cvx_q8_kernel_name(const cvx_cpu_features *cpu, cvx_q8_kernel force);
/* The int8 GEMM alone, on one thread or OpenMP's (cvx_linear_quant's int8 path with its kernel
 * chosen by cpu and force): for tests and benchmarks. */
int cvx_q8_linear(const cvx_cpu_features *cpu, cvx_q8_kernel force, const float *x, int M, int K,
                  const cvx_tensor *W, const float *bias, float *y);
/* The same into caller scratch: buf holds cvx_q8_scratch_bytes(W->dtype, M, K, omp_get_max_threads()). */
size_t cvx_q8_scratch_bytes(cvx_dtype t, int M, int K, int threads);
int cvx_q8_run(const cvx_cpu_features *cpu, cvx_q8_kernel force, const float *x, int M, int K, const cvx_tensor *W,
               const float *bias, float *y, void *buf);

#endif
