/* Tensor element types as safetensors names them, and conversions to and from f32. */
#ifndef CVX_DTYPE_H
#define CVX_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    CVX_F32, CVX_F16, CVX_BF16, CVX_F64, CVX_I64, CVX_I32, CVX_U8, CVX_BOOL, CVX_DTYPE_COUNT
} cvx_dtype;

size_t cvx_dtype_size(cvx_dtype t);
const char *cvx_dtype_name(cvx_dtype t);          /* "F32", "BF16", ... */
int cvx_dtype_parse(const char *name, cvx_dtype *out); /* 0, or -1 for an unknown name */
int cvx_dtype_is_float(cvx_dtype t);              /* F32, F16, BF16, F64 */

float cvx_bf16_to_f32(uint16_t h);
float cvx_f16_to_f32(uint16_t h);
uint16_t cvx_f32_to_bf16(float f);                /* round to nearest even, NaN kept NaN (as PyTorch) */

void cvx_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void cvx_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void cvx_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);

/* Widen n elements of any float dtype at src (need not be aligned) to f32. */
void cvx_to_f32_n(cvx_dtype t, const void *src, float *dst, size_t n);

#endif
