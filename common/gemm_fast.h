/* Fast matrix products in f32 or bf16 (bf16 operands, f32 accumulation and output), over
 * operands of any float storage dtype, zero-copy where the kernel can read the storage.
 *
 * Pure functions with everything explicit: the caller owns a cvx_kernels context that holds the
 * detected CPU features, the oneDNN engine/stream, the cache of oneDNN primitives (one per
 * shape+layout: creating one costs ~0.1-1 ms) and grow-only conversion scratch. No globals.
 * A context is not thread-safe: call from serial code (the kernels parallelise inside with
 * OpenMP, the same pool as OpenBLAS-openmp and our loops), or give each thread its own.
 *
 * Paths (cvx_kernels_path names them):
 *   f32  : cvx_sgemm_fixed (gemm.h) on every CPU: one FMA chain per element, k in order, so the
 *          same bits on AVX-512 ("fixed-f32-avx512": 12×32 zmm tiles) and AVX2 ("fixed-f32").
 *   bf16 : with AVX512_BF16 (or AMX-BF16): oneDNN bf16 matmul ("onednn-bf16"), operands rounded
 *          to bf16 (RNE) unless already bf16, f32 accumulate, f32 dst.
 *          without: "fallback-bf16": operands rounded to bf16 then widened to f32, f32 GEMM —
 *          the same arithmetic contract (bf16 inputs, f32 accumulation), not faster than f32.
 * Reference: cvx_matmul_ref (double accumulation; operands rounded to bf16 first in bf16 mode). */
#ifndef CVX_GEMM_FAST_H
#define CVX_GEMM_FAST_H

#include "cpu.h"
#include "dtype.h"
#include "safetensors.h"

#include <stdint.h>

#include "context.h"   /* cvx_precision */

/* Force a slower path (tests run every path on one machine). */
typedef enum {
    CVX_KPATH_AUTO = 0,      /* best available */
    CVX_KPATH_NO_BF16 = 1,   /* act as a CPU without AVX512_BF16/AMX: bf16 work widened to f32 */
    CVX_KPATH_NO_ONEDNN = 2, /* no oneDNN at all: cvx_sgemm_fixed for everything (bf16 widened) */
    CVX_KPATH_LIBRARY_F32 = 3, /* benchmarks only: oneDNN's own f32 matmul (brgemm on AVX-512, the jit
                                * sgemm with its own threading elsewhere), whose bits depend on the CPU
                                * and thread count (what cvx_sgemm_fixed costs) */
    CVX_KPATH_AVX2 = 4,      /* act as an AVX2-only CPU: no AVX-512 kernel (f32 on the AVX2 tiles,
                              * bf16 widened); env CVX_ISA=avx2 sets it on every new context */
    CVX_KPATH_ONEDNN_BF16 = 5, /* tests/benchmarks: oneDNN's bf16 matmul even without bf16 units
                                * (oneDNN 2.x emulates bf16 on AVX-512: its gemm:jit), so the
                                * "onednn-bf16" code (pre-packed weights included) runs on any AVX-512 CPU */
} cvx_kpath;

typedef struct cvx_kernels cvx_kernels;

cvx_kernels *cvx_kernels_new(void);   /* detects the CPU; NULL + cvx_error if oneDNN fails to start */
void cvx_kernels_free(cvx_kernels *kc);
const cvx_cpu_features *cvx_kernels_cpu(const cvx_kernels *kc);
void cvx_kernels_force(cvx_kernels *kc, cvx_kpath path);
/* Name of the path cvx_matmul takes at precision p: "fixed-f32", "fixed-f32-avx512", "onednn-bf16",
 * "fallback-bf16", "onednn-f32 (library)". */
const char *cvx_kernels_path(const cvx_kernels *kc, cvx_precision p);
/* 1 when the f32 kernels may run their AVX-512 variants (the CPU has avx512f, no CVX_KPATH_AVX2). */
int cvx_kernels_avx512(const cvx_kernels *kc);
/* 1 when f32 runs the fixed-chain GEMM (cvx_sgemm_fixed: every path but the forced library one). */
int cvx_kernels_f32_fixed(const cvx_kernels *kc);
/* 1 when bf16 runs on bf16 units (AVX512_BF16 or AMX); 0: bf16 is correct but widened to f32. */
int cvx_kernels_bf16_native(const cvx_kernels *kc);
/* 1 (default): bf16 products with M >= 8192 rows reorder B per call into oneDNN's blocked layout
 * (transient, one matrix); 0: always read B in place (benchmarks compare the two). */
void cvx_kernels_set_reorder(cvx_kernels *kc, int on);
/* Pre-packed linear weights (cvx_linear_p): each weight matrix W is prepared ONCE, on first use,
 * into what the GEMM reads, and kept in the context beside the mmapped file:
 *   onednn-bf16  : W as bf16 in the layout oneDNN's matmul picks for dnnl_format_tag_any (its
 *                  blocked layout on AVX512_BF16/AMX; 2 bytes/param), reordered once;
 *   fallback-bf16: W widened to f32 and rounded to bf16 (4 bytes/param), what every call converted;
 *   f32 with a bf16/f16/fp8 W: W widened to f32 (4 bytes/param), what every call converted.
 * An f32 W in f32 mode is read in place (no copy). The f32 and fallback results are bit-identical to
 * the per-call conversion (the same numbers into the same kernel). Entries are keyed by (W->data,
 * shape, dtype, path) and a 16-point sample of W's bytes, so a weight unmapped and another mapped at
 * the same address is not served a stale copy. Budget: CVX_PACK_BUDGET_MB (env, read when the context
 * is made; 0 disables) or cvx_kernels_set_pack_budget (either is taken as given); by default half the
 * physical RAM and never past /proc/meminfo's MemAvailable less 4 GiB at the time; a weight that
 * would not fit is read in place as before, and so are all after it (one cvx_warn line names it). */
void cvx_kernels_set_pack_budget(cvx_kernels *kc, size_t bytes);   /* 0: never pack */
size_t cvx_kernels_pack_bytes(const cvx_kernels *kc);              /* bytes held by packed weights */
int cvx_kernels_pack_count(const cvx_kernels *kc);   /* weights packed (or that oneDNN could not pack) */
/* Drop every packed weight (cvx_kernels_trim does too; call when the weights are closed). */
void cvx_kernels_unpack(cvx_kernels *kc);
/* Drop cached primitives, scratch and packed weights (e.g. between stages). */
void cvx_kernels_trim(cvx_kernels *kc);
/* Bytes of conversion scratch currently held (for RSS accounting in benchmarks). */
size_t cvx_kernels_scratch_bytes(const cvx_kernels *kc);
/* Grow-only scratch slot `slot` (< CVX_KERNELS_SCRATCH_SLOTS) for kernels in other files (the
 * quantized linear's tiles): at least `bytes`, 64-byte aligned, contents undefined, valid until the
 * next call for the slot or cvx_kernels_trim. */
enum { CVX_KERNELS_SCRATCH_SLOTS = 3 };
void *cvx_kernels_scratch(cvx_kernels *kc, int slot, size_t bytes);
/* Linears over GGUF block-quantized weights (gemm_quant.h): qdot = cvx_qdot (0 dequantized tiles,
 * 1 int8 dot products), q8_kernel = cvx_q8_kernel (0 best, 1 AVX2, 2 scalar: tests). */
void cvx_kernels_set_qdot(cvx_kernels *kc, int qdot, int q8_kernel);
int cvx_kernels_qdot(const cvx_kernels *kc);
int cvx_kernels_q8_kernel(const cvx_kernels *kc);

/* A matrix operand: logical [rows, cols]; element (r, c) is at data[r*ld + c] when trans = 0,
 * data[c*ld + r] when trans = 1. dtype: CVX_F32, CVX_BF16, CVX_F16 or CVX_F8_E4M3 (widened
 * exactly); data need not be aligned. */
typedef struct {
    const void *data;
    cvx_dtype dtype;
    int ld;
    int trans;
} cvx_mat;

/* C[M,N] = A[M,K] · B[K,N] (+ bias[N] if non-NULL) (+ beta · C if beta != 0), C f32 row stride ldc.
 * Returns 0, or -1 + cvx_error (unsupported dtype). */
int cvx_matmul(cvx_kernels *kc, cvx_precision p, int M, int N, int K, cvx_mat A, cvx_mat B, const float *bias,
               float beta, float *C, int ldc);
/* Reference: triple loop, double accumulation; in bf16 mode every operand element is first rounded
 * to bf16 (RNE), as the fast kernel does. Same contract as cvx_matmul. */
int cvx_matmul_ref(cvx_precision p, int M, int N, int K, cvx_mat A, cvx_mat B, const float *bias, float beta,
                   float *C, int ldc);

/* PyTorch nn.Linear, y[M,N] = x[M,K] · W[N,K]ᵀ + b[N]; W (mmapped, any float dtype) read in place
 * when the path can (bf16 W in bf16 mode, f32 W in f32 mode), else converted one matrix at a time
 * into the context's scratch; W of a GGUF block type goes to cvx_linear_quant (gemm_quant.h: tiles
 * of rows dequantized, or int8 dot products), never widened whole. b may be NULL. Returns 0, or
 * -1 + cvx_error (bad shapes/dtype). */
int cvx_linear_p(cvx_kernels *kc, cvx_precision p, const float *x, int M, int K, const cvx_tensor *W,
                 const cvx_tensor *b, float *y);

/* Row-major f32 GEMM in the shape of cvx_sgemm (alpha = 1), at precision p: the entry point for
 * common/conv.c (im2col and Winograd products) and attention_tiled.c. */
int cvx_gemm_p(cvx_kernels *kc, cvx_precision p, int trans_a, int trans_b, int M, int N, int K, const float *A,
               int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* f32 → bf16 (RNE, NaN stays NaN, identical to cvx_f32_to_bf16) and bf16-rounding in place
 * (x = (float)bf16(x)); OpenMP-parallel over chunks (scalar RNE inside). */
void cvx_f32_to_bf16_fast(const float *src, uint16_t *dst, size_t n);
void cvx_round_bf16_inplace(float *x, size_t n);

/* ---- attention in bf16 (common/attention_bf16.c) ----
 * Same call shape and layouts as cvx_attention (common/ops.h): out_h = softmax(scale·q_h k_hᵀ +
 * bias_h) v_h, but q, k, v and the probabilities p are rounded to bf16 before the two products,
 * which accumulate in f32; the online softmax (max, exp, sums, rescaling) stays f32.
 * AVX512_BF16 kernel (vdpbf16ps) when kc says bf16 is native and hd % 32 == 0; else the
 * portable version with the same rounding points. kc is only read (features, forced path). */
void cvx_attention_bf16(const cvx_kernels *kc, const float *q, int ld_q, const float *k, const float *v, int ld_kv,
                        float *out, int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias);
/* Reference: full score matrix per head, q/k/v/p rounded to bf16 at the same points, double sums. */
void cvx_attention_bf16_ref(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                            int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias);

/* ---- attention with int8 QKᵀ (common/attention_int8.c; SageAttention) ----
 * Same call shape as cvx_attention_bf16. K smoothed (its mean over the keys subtracted per head and
 * channel: exact under softmax), q and k quantised to int8 per block (128 query rows, 64 keys; per
 * head; scale absmax/127), QKᵀ by integer dot products (AVX512-VNNI vpdpbusd, AVX2 vpmaddubsw, or
 * scalar: the same integer sums, the same output bits), then the softmax and the bf16 PV of
 * cvx_attention_bf16. The QK path follows the CPU, or the q8_kernel forced with cvx_kernels_set_qdot
 * (CVX_Q8K_AVX2: no VNNI; CVX_Q8K_SCALAR); the PV path as cvx_attention_bf16. kc may be NULL (this
 * CPU's best paths). An opt-in approximation: see docs/performance.md for its measured error. */
void cvx_attention_int8(const cvx_kernels *kc, const float *q, int ld_q, const float *k, const float *v, int ld_kv,
                        float *out, int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias);
/* The QK path cvx_attention_int8 takes with kc: "avx512-vnni", "avx2" or "scalar". */
const char *cvx_attention_int8_path(const cvx_kernels *kc);
/* Reference: the same smoothing and quantisation, the same f32 scores, then the full softmax and PV in
 * double with p and v rounded to bf16 (as cvx_attention_bf16_ref). smooth_k = 0: without the K
 * smoothing (only to show what it buys: tests/common_attention_int8.c). */
void cvx_attention_int8_ref(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                            int Sq, int Skv, int heads, int hd, float scale, const float *bias, int smooth_k);
/* The same with P·V in int8 as well (SageAttention2's idea): p in u8 per row and key tile of 256
 * (scale max/255), V in s8 per head and channel (absmax/127 over the keys), products by vpdpbusd
 * (VNNI) or scalar loops (the same bits); the softmax in f32 in every path alike. Opt-in and not on any
 * default: see docs/performance.md for its speed and error. */
void cvx_attention_int8_pv8(const cvx_kernels *kc, const float *q, int ld_q, const float *k, const float *v, int ld_kv,
                            float *out, int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias);
/* Its reference: the same quantisation (p per tile against the row's global maximum), double sums. */
void cvx_attention_int8_pv8_ref(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                                int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias);

#endif
