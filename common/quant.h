/* ggml tensor types of GGUF files: one traits row per type (ggml's type_traits habit) with its
 * ggml id, block geometry and row codecs.
 *
 * A row of n values (n a multiple of `block`) is n/block blocks of `type_size` bytes back to
 * back. `to_f32_ref` is ggml's dequantize_row_* (ggml-quants.c) done with the same float32
 * operations in the same order, so it is bit-exact to ggml and to gguf-py's numpy dequantizer;
 * `to_f32` is the fast path (AVX2 where written, else the reference) and bit-identical to it.
 * `from_f32_ref` is ggml's quantize_row_*_ref (what llama-quantize runs without an imatrix), bit-exact,
 * for finite input. Block data may be at any address (read bytewise, never through a struct). */
#ifndef CVX_QUANT_H
#define CVX_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include "dtype.h"

/* ggml type ids (ggml.h enum ggml_type) of the types below. */
enum {
    CVX_GGML_F32 = 0, CVX_GGML_F16 = 1, CVX_GGML_Q4_0 = 2, CVX_GGML_Q4_1 = 3, CVX_GGML_Q5_0 = 6,
    CVX_GGML_Q5_1 = 7, CVX_GGML_Q8_0 = 8, CVX_GGML_Q2_K = 10, CVX_GGML_Q3_K = 11, CVX_GGML_Q4_K = 12,
    CVX_GGML_Q5_K = 13, CVX_GGML_Q6_K = 14, CVX_GGML_BF16 = 30,
};

typedef void (*cvx_to_f32_fn)(const void *src, float *dst, int64_t n);
typedef void (*cvx_from_f32_fn)(const float *src, void *dst, int64_t n);

typedef struct {
    cvx_dtype dtype;
    const char *name;             /* ggml's name: "F32", "Q8_0", "Q4_K", ... */
    uint32_t ggml_type;           /* CVX_GGML_* */
    int block;                    /* elements per block (1 for F32/F16/BF16) */
    int type_size;                /* bytes per block */
    cvx_to_f32_fn to_f32_ref;     /* = ggml dequantize_row_* (bit-exact) */
    cvx_to_f32_fn to_f32;         /* fast, bit-identical to to_f32_ref */
    cvx_from_f32_fn from_f32_ref; /* = ggml quantize_row_*_ref (bit-exact) */
} cvx_quant_traits;

/* Rows of the table (ordered by ggml id); i in [0, cvx_quant_count()). */
int cvx_quant_count(void);
const cvx_quant_traits *cvx_quant_at(int i);
/* The row of a ggml type id, or NULL when the type is not supported here. */
const cvx_quant_traits *cvx_quant_by_ggml(uint32_t ggml_type);
/* The row of a dtype, or NULL when ggml has no such type here (F64, I64, F8_E4M3, ...). */
const cvx_quant_traits *cvx_quant_of(cvx_dtype t);
/* ggml's name of any ggml type id, supported or not ("IQ2_XXS", "TQ1_0", ...); NULL if unknown. */
const char *cvx_ggml_type_name(uint32_t ggml_type);

/* llama.cpp's file types (general.file_type, enum llama_ftype): the mixes llama-quantize makes. */
typedef struct {
    uint32_t id;        /* LLAMA_FTYPE_* value: 1 F16, 2 Q4_0, 3 Q4_1, 7 Q8_0, 8 Q5_0, ..., 15 Q4_K_M, 32 BF16 */
    const char *name;   /* "Q4_K_M" (llama-quantize's spelling, without MOSTLY_) */
    cvx_dtype base;     /* the type most quantized tensors get (llama_model_quantize_internal) */
} cvx_ggml_ftype;
/* The row of a file type id / of a name (case-insensitive: "q4_k_m", "Q8_0"); NULL if unknown. */
const cvx_ggml_ftype *cvx_ggml_ftype_by_id(uint32_t id);
const cvx_ggml_ftype *cvx_ggml_ftype_by_name(const char *name);
/* Its name, NULL if unknown. */
const char *cvx_ggml_ftype_name(uint32_t id);
/* "Q8_0, Q4_0, ..." (every known name, for messages) into buf. */
const char *cvx_ggml_ftype_list(char *buf, size_t n);

#endif
