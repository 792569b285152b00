/* Tensor element types as safetensors names them, the ggml block-quantized types of GGUF files,
 * and conversions to and from f32.
 *
 * Element types have a byte size per element. The ggml block types (CVX_Q4_0 .. CVX_Q6_K) store
 * rows as blocks of cvx_dtype_block() elements in cvx_dtype_block_bytes() bytes; their geometry
 * and codecs come from the per-type traits table of common/quant.h. A cvx_tensor of a block type
 * has the same shape/numel vocabulary as any other (elements, row-major), only nbytes differs. */
#ifndef CVX_DTYPE_H
#define CVX_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    CVX_F32, CVX_F16, CVX_BF16, CVX_F64, CVX_I64, CVX_I32, CVX_U8, CVX_BOOL,
    CVX_F8_E4M3,   /* safetensors "F8_E4M3" = torch.float8_e4m3fn (no infinities, NaN = S.1111.111) */
    /* ggml block-quantized types (GGUF files; codecs in quant.h) */
    CVX_Q4_0, CVX_Q4_1, CVX_Q5_0, CVX_Q5_1, CVX_Q8_0, CVX_Q2_K, CVX_Q3_K, CVX_Q4_K, CVX_Q5_K, CVX_Q6_K,
    CVX_DTYPE_COUNT
} cvx_dtype;

size_t cvx_dtype_size(cvx_dtype t);               /* bytes per element; 0 for block-quantized types */
const char *cvx_dtype_name(cvx_dtype t);          /* "F32", "BF16", "F8_E4M3", "Q4_K", ... */
/* A safetensors dtype name ("F32", ..., "F8_E4M3"): 0, or -1 for any other name (the ggml block
 * types are not safetensors dtypes). */
int cvx_dtype_parse(const char *name, cvx_dtype *out);
int cvx_dtype_is_float(cvx_dtype t);              /* F32, F16, BF16, F64: what the compute layers read */
int cvx_dtype_is_quant(cvx_dtype t);              /* a ggml block-quantized type */
int cvx_dtype_is_safetensors(cvx_dtype t);        /* storable in a safetensors file */
/* Decodable to f32 by cvx_to_f32_n: the float types, F8_E4M3 and the block-quantized types. */
int cvx_dtype_to_f32_ok(cvx_dtype t);
int cvx_dtype_block(cvx_dtype t);                 /* elements per block: 1 for element types */
size_t cvx_dtype_block_bytes(cvx_dtype t);        /* bytes per block (= cvx_dtype_size for element types) */
/* Bytes of n elements (n a multiple of the block) in *out: 0, or -1 when n is not a multiple of
 * the block or the size does not fit in 63 bits. */
int cvx_dtype_nbytes(cvx_dtype t, uint64_t n, uint64_t *out);

float cvx_bf16_to_f32(uint16_t h);
float cvx_f16_to_f32(uint16_t h);
uint16_t cvx_f32_to_bf16(float f);                /* round to nearest even, NaN kept NaN (as PyTorch) */
/* float32 -> IEEE binary16 bits, round to nearest even (as c10::Half(float), F16C, numpy
 * astype(float16)), subnormals and overflow to inf handled; NaN gives the quiet NaN 0x7e00 with
 * the sign kept (ggml's fp32_to_fp16). */
uint16_t cvx_f32_to_f16(float f);
/* float8_e4m3fn -> f32, exact, bit-identical to PyTorch's c10::Float8_e4m3fn (NaN 0x7f/0xff ->
 * 0x7ff00000 with the sign). */
float cvx_f8e4m3_to_f32(uint8_t b);

void cvx_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void cvx_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void cvx_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);

/* Widen n elements of any dtype with cvx_dtype_to_f32_ok at src (need not be aligned) to f32.
 * For a block-quantized type n must be a multiple of its block and src the start of a block
 * (dequantized as ggml's dequantize_row_*, quant.h). */
void cvx_to_f32_n(cvx_dtype t, const void *src, float *dst, size_t n);

#endif
