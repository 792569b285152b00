/* The compute context: everything a heavy op needs besides its operands.
 *
 * One cvx_ctx is passed to every heavy op (cvx_linear(ctx, ...), cvx_conv3d_padded(ctx, ...))
 * and owned by whoever runs a model (a cvx_pipeline, or a test). It holds the reusable scratch
 * buffers, the FLOP counters, the thread count, the compute precision and the CPU features, so
 * that two models (two contexts) run in one process without sharing hidden state, and so the next
 * kernels plug in here: the bf16 GEMM/attention kernels are pure functions; cvx_linear and friends
 * dispatch on ctx->precision and ctx->cpu_features.
 *
 * A context is not thread-safe: one model call at a time per context (ops parallelise inside
 * with OpenMP). The thread count is the context's: every call that runs a model on it starts with
 * cvx_ctx_use(ctx), which sets the OpenMP pool of the calling thread (oneDNN and the OpenMP build
 * of OpenBLAS size their work by it), so two contexts with different counts run one after the
 * other in one process each as it would alone. */
#ifndef CVX_CONTEXT_H
#define CVX_CONTEXT_H

#include <stddef.h>

#include "pool.h"

typedef enum {
    CVX_PRECISION_F32 = 0,   /* f32 compute, f32 accumulation (upstream parity) */
    CVX_PRECISION_BF16,      /* bf16 operands, f32 accumulation in every heavy op (linears, attention
                              * products, convs); norms, softmax, scheduler, RNG stay f32 */
} cvx_precision;

/* The transformers' attention (stage 2: cvx_attention_transformer, common/gemm.h): AUTO = the
 * precision's kernel (f32 or bf16); INT8 = SageAttention-style int8 QKᵀ with bf16 PV
 * (cvx_attention_int8: opt-in, off by its measured error, docs/performance.md). */
typedef enum {
    CVX_ATTENTION_AUTO = 0,
    CVX_ATTENTION_F32,
    CVX_ATTENTION_BF16,
    CVX_ATTENTION_INT8,
    CVX_ATTENTION_INT8PV,   /* int8 QKᵀ and int8 PV (cvx_attention_int8_pv8): opt-in, larger error */
} cvx_attention_mode;

typedef struct cvx_kernels cvx_kernels;   /* common/gemm_fast.h */

/* CPU features bit set (cvx_cpu_detect, common/cpu.h; 0 = portable code only). */
enum { CVX_CPU_AVX2 = 1u << 0, CVX_CPU_AVX512F = 1u << 1, CVX_CPU_AVX512_BF16 = 1u << 2, CVX_CPU_AMX_BF16 = 1u << 3 };

/* Conv algorithm for 3×3 spatial kernels (the VAE's convolutions). */
typedef enum { CVX_CONV_DIRECT = 0, CVX_CONV_WINOGRAD2 = 2, CVX_CONV_WINOGRAD4 = 4 } cvx_conv_algo;

typedef struct {
    float *data;
    size_t cap;   /* floats */
} cvx_scratch;

typedef struct cvx_ctx {
    int threads;                 /* OpenMP/OpenBLAS threads (>= 1) */
    cvx_precision precision;
    unsigned cpu_features;       /* CVX_CPU_* bits (from cvx_cpu_detect) */
    cvx_conv_algo conv_algo;     /* default CVX_CONV_WINOGRAD4 */
    size_t winograd_budget;      /* floats of Winograd scratch per block of tile rows (default 48M) */

    /* counters (multiply-add = 2); reset by the caller when it wants a fresh count */
    double flops;                /* every GEMM an op ran through this context */
    double conv_flops;           /* VAE convolutions, direct-convolution equivalent */
    double conv_seconds;         /* wall time in VAE convolutions */

    /* scratch, grown on demand, freed by cvx_ctx_free */
    cvx_scratch weights;         /* one weight matrix widened to f32 (cvx_weight_f32) */
    cvx_scratch conv_grid;       /* shifted-GEMM output grid (cvx_conv3d_padded) */
    cvx_scratch winograd;        /* Winograd V and M tiles */
    cvx_scratch bf16_w, bf16_x;  /* bf16 mode: one conv's weights / inputs as bf16 (2 per float slot) */
    cvx_scratch conv_w;          /* one conv's packed / Winograd-transformed weights (f32) */
    cvx_scratch conv_in;         /* a VAE conv's padded input (stage3/vae_conv.c) */
    cvx_scratch lora_u;          /* LoRA: x·Aᵀ of one adapter [M, rank] (cvx_lora_apply) */
    cvx_pool maps;               /* the VAEs' feature maps, kept and handed out again (pool.h) */

    /* LoRA adapters (common/lora.h) that cvx_linear adds to the weights they target, NULL = none.
     * Borrowed: whoever attaches a set detaches it before freeing it or the model it targets. */
    const struct cvx_lora_set *lora;

    /* the GEMM kernels (oneDNN f32/bf16, primitives cached per shape; created after the thread
     * count is set). NULL only if oneDNN could not start: then f32 runs on OpenBLAS. */
    cvx_kernels *kernels;
    struct cvx_conv_onednn *conv_onednn;   /* oneDNN bf16 conv primitives + reordered weights (conv.h) */
    struct cvx_conv_wcache *conv_wcache;   /* convs' packed / Winograd-transformed weights (cvx_conv_weights) */
    int fallback_noted;          /* the "bf16 without bf16 units" note was printed */
    int int8;                    /* GGUF block-quantized weights: int8 dot products (cvx_ctx_set_int8) */
    cvx_attention_mode attention;   /* the transformers' attention kernel (cvx_ctx_set_attention) */
} cvx_ctx;

/* threads <= 0: all cores. Applies the thread count (cvx_ctx_use). */
cvx_ctx *cvx_ctx_new(int threads);
/* Make ctx's thread count the one the following ops run with (call at the start of each model
 * call; cheap). */
void cvx_ctx_use(const cvx_ctx *ctx);
/* n <= 0: all cores. The OpenMP / OpenBLAS pool of the calling thread; cvx_threads() reads it back. */
void cvx_set_threads(int n);
int cvx_threads(void);
void cvx_ctx_free(cvx_ctx *ctx);
/* Set the compute precision. bf16 also moves 3×3 convs from Winograd F(4×4) to F(2×2) (F(4×4)
 * amplifies the bf16 rounding ~6×; see context.c). bf16 on a CPU without AVX512_BF16/AMX runs the fallback path
 * (operands rounded to bf16, f32 arithmetic: same results, not faster) and says so once per
 * context (one info line). 0, or -1 + cvx_error. */
int cvx_ctx_set_precision(cvx_ctx *ctx, cvx_precision p);
const char *cvx_precision_name(cvx_precision p);
/* What "auto" means depends on the work, and is decided here only:
 *   CVX_WORK_MATMUL (text encoders, transformers: linears and attention) — bf16 when this CPU
 *     has bf16 units (AVX512_BF16 or AMX-BF16), else f32;
 *   CVX_WORK_CONV (VAEs) — f32: measured faster than bf16 there (Winograd F(4×4) in f32, F(2×2)
 *     in bf16 for accuracy: 71 s vs 90 s on the 3×30×45 decode bench, docs/performance.md).
 * See docs/performance.md "Precision". */
typedef enum { CVX_WORK_MATMUL = 0, CVX_WORK_CONV } cvx_work;
cvx_precision cvx_precision_auto(cvx_work work);
/* Command-line names: "f32" / "float32", "bf16" / "bfloat16", "auto" (resolved with
 * cvx_precision_auto for `work`). 0, or -1 + cvx_error naming the accepted values. */
int cvx_precision_parse(const char *name, cvx_work work, cvx_precision *out);
/* The programs' --precision: `arg` (the flag's value) or, when NULL, $CVX_PRECISION, else "auto".
 * 0, or -1 + cvx_error naming the flag / variable. */
int cvx_precision_from_cli(const char *arg, cvx_work work, cvx_precision *out);
/* Linears over GGUF block-quantized weights (common/gemm_quant.h): on = 1 quantizes the activations
 * to int8 per row as ggml does and multiplies with integer dot products (VNNI where present): an
 * opt-in precision like bf16, faster, off by the int8 rounding of the activations; 0 (default)
 * dequantizes tiles of weight rows into the f32/bf16 GEMM (exact to ggml's dequantized weights).
 * Other weights are not affected. Without oneDNN kernels the int8 path is not available (no-op). */
void cvx_ctx_set_int8(cvx_ctx *ctx, int on);
/* The transformers' attention kernel (default AUTO: the precision's). 0, or -1 + cvx_error (a mode
 * out of range; bf16 or int8 without the oneDNN kernels). */
int cvx_ctx_set_attention(cvx_ctx *ctx, cvx_attention_mode mode);
/* The kernel the transformers' attention runs: AUTO resolved to F32 or BF16 by the precision. */
cvx_attention_mode cvx_ctx_attention(const cvx_ctx *ctx);
/* "auto", "f32", "bf16", "int8", "int8pv" */
const char *cvx_attention_name(cvx_attention_mode m);
/* The names above; 0, or -1 + cvx_error naming the accepted values. */
int cvx_attention_parse(const char *name, cvx_attention_mode *out);
/* Free the scratch buffers (they grow again on the next use). */
void cvx_ctx_release_scratch(cvx_ctx *ctx);
/* The buffer of s, at least n floats (contents undefined). */
float *cvx_scratch_get(cvx_scratch *s, size_t n);

#endif
