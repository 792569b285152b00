/* GGUF files (ggml / llama.cpp's model format, versions 2 and 3, little-endian): zero-copy
 * mmapped reading beside safetensors.h. Every count, length, dimension, type and offset is
 * checked against the file size (overflow-safe) before use: a bad file gives one cvx_error line
 * naming the file, the key or tensor, the value and what was expected.
 *
 * Layout: "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv key/values (string key, u32 type,
 * value; strings are u64 length + bytes, arrays u32 element type + u64 count + elements);
 * n_tensors infos (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset); padding
 * to `general.alignment` (u32 power of two, default 32); the data section. Tensor offsets are
 * relative to the data section and multiples of the alignment.
 *
 * GGUF stores dims innermost first (ne[0] is the contiguous row); a tensor is exposed both ways:
 * `ne[]` as stored, and `t.shape` row-major [outer .. inner] like every cvx_tensor (a PyTorch
 * weight [out, in] has ne = [in, out] and t.shape = [out, in]). Quantized data is rows of ne[0]
 * values, ne[0] / block blocks each (quant.h). Up to CVX_MAX_DIMS dims are accepted (ggml stops at
 * 4, but city96's Wan files carry the 5-D patch_embedding.weight). */
#ifndef CVX_GGUF_H
#define CVX_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include "safetensors.h"

/* Metadata value types (gguf.h enum gguf_type). */
typedef enum {
    CVX_GGUF_U8 = 0, CVX_GGUF_I8 = 1, CVX_GGUF_U16 = 2, CVX_GGUF_I16 = 3, CVX_GGUF_U32 = 4, CVX_GGUF_I32 = 5,
    CVX_GGUF_F32 = 6, CVX_GGUF_BOOL = 7, CVX_GGUF_STRING = 8, CVX_GGUF_ARRAY = 9, CVX_GGUF_U64 = 10,
    CVX_GGUF_I64 = 11, CVX_GGUF_F64 = 12, CVX_GGUF_TYPE_COUNT
} cvx_gguf_type;

typedef struct {
    cvx_tensor t;             /* name, dtype (CVX_F32, CVX_F16, CVX_BF16, CVX_Q*), ndim, shape row-major,
                                 numel, data (into the mapping; 32-aligned in the file, may be unaligned
                                 in memory for open_memory), nbytes, file */
    uint32_t ggml_type;       /* as stored (CVX_GGML_* of quant.h) */
    int n_dims;               /* = t.ndim */
    int64_t ne[CVX_MAX_DIMS]; /* GGUF order, ne[0] innermost: ne[i] = t.shape[n_dims - 1 - i] */
    uint64_t offset;          /* relative to the data section */
} cvx_gguf_tensor;

typedef struct cvx_gguf cvx_gguf;

cvx_gguf *cvx_gguf_open(const char *path);   /* NULL + cvx_error on any problem */
/* Parse a file image in memory (not copied; must outlive the handle); `label` names it in messages. */
cvx_gguf *cvx_gguf_open_memory(const void *buf, size_t len, const char *label);
void cvx_gguf_close(cvx_gguf *g);
const char *cvx_gguf_path(const cvx_gguf *g);
uint32_t cvx_gguf_version(const cvx_gguf *g);
size_t cvx_gguf_alignment(const cvx_gguf *g);
size_t cvx_gguf_data_offset(const cvx_gguf *g);   /* byte where the data section starts */

/* ---- tensors ---- */
int cvx_gguf_tensor_count(const cvx_gguf *g);
const cvx_gguf_tensor *cvx_gguf_tensor_at(const cvx_gguf *g, int i);          /* file order; NULL if out of range */
const cvx_gguf_tensor *cvx_gguf_find(const cvx_gguf *g, const char *name);    /* NULL if absent */
/* Find `name` and check its row-major shape (a -1 entry matches any size), any type: NULL +
 * "FILE: tensor 'name' is missing" / "FILE: tensor 'name' has shape [..], expected [..]".
 * Usage: cvx_gguf_get(g, "blocks.0.ffn.0.weight", CVX_SHAPE(ffn, D)); then &gt->t is a cvx_tensor. */
const cvx_gguf_tensor *cvx_gguf_get(const cvx_gguf *g, const char *name, const int64_t *shape, int ndim);

/* ---- metadata (key/values in file order) ---- */
int cvx_gguf_kv_count(const cvx_gguf *g);
int cvx_gguf_find_key(const cvx_gguf *g, const char *key);                    /* index, or -1 */
const char *cvx_gguf_kv_key(const cvx_gguf *g, int i);
cvx_gguf_type cvx_gguf_kv_type(const cvx_gguf *g, int i);      /* CVX_GGUF_TYPE_COUNT if i is out of range */
cvx_gguf_type cvx_gguf_kv_arr_type(const cvx_gguf *g, int i);  /* element type of an array (else TYPE_COUNT) */
uint64_t cvx_gguf_kv_count_of(const cvx_gguf *g, int i);       /* elements of an array; 1 for a scalar */
const char *cvx_gguf_type_name(cvx_gguf_type t);               /* "u32", "string", "array", ... */

/* Typed getters by key: 0 with the value, or -1 + cvx_error("FILE: key 'k' has type .., expected ..")
 * when the key is missing or of another type. The integer getters accept any integer type whose
 * value fits (a u8 file_type reads as u32; -1 does not); get_f32 accepts f32 and f64. */
const char *cvx_gguf_get_str(const cvx_gguf *g, const char *key);   /* NULL on error; NUL-terminated */
int cvx_gguf_get_u32(const cvx_gguf *g, const char *key, uint32_t *out);
int cvx_gguf_get_i32(const cvx_gguf *g, const char *key, int32_t *out);
int cvx_gguf_get_u64(const cvx_gguf *g, const char *key, uint64_t *out);
int cvx_gguf_get_i64(const cvx_gguf *g, const char *key, int64_t *out);
int cvx_gguf_get_f32(const cvx_gguf *g, const char *key, float *out);
int cvx_gguf_get_bool(const cvx_gguf *g, const char *key, int *out);
/* An array: element type and count; for numeric elements *data points at them in the file (little-
 * endian, possibly unaligned), for strings *data is NULL (use cvx_gguf_get_arr_str). */
int cvx_gguf_get_arr(const cvx_gguf *g, const char *key, cvx_gguf_type *elem, uint64_t *count, const void **data);
/* Element i of a string array (NULL + cvx_error when not a string array or i out of range). */
const char *cvx_gguf_get_arr_str(const cvx_gguf *g, const char *key, uint64_t i);
/* An integer array converted to int64 (e.g. comfy.gguf.orig_shape.*): its count in *n; fails when
 * it has more than cap elements, is not of an integer type, or a u64 value exceeds INT64_MAX. */
int cvx_gguf_get_arr_i64(const cvx_gguf *g, const char *key, int64_t *out, size_t cap, size_t *n);

/* ---- writing (common/gguf_writer.c) ----
 * GGUF v3 as gguf-py's GGUFWriter lays it out: key/values in the order added, tensor infos in the
 * order added (shape given row-major, stored ne innermost first), data 32-aligned. Tensor data is
 * either given when the tensor is added (must stay valid until the write) or produced at write time
 * by `fill`, one tensor at a time, so a model of any size is written through one tensor's buffer.
 * The file goes to a temp next to `path`, renamed over it when complete. */
typedef struct cvx_gguf_writer cvx_gguf_writer;
/* Produce tensor `index`'s nbytes of data into dst: 0, or -1 + cvx_error (the write is abandoned). */
typedef int (*cvx_ggufw_fill_fn)(void *user, int index, void *dst, size_t nbytes);

cvx_gguf_writer *cvx_ggufw_new(void);
void cvx_ggufw_free(cvx_gguf_writer *w);
int cvx_ggufw_kv_str(cvx_gguf_writer *w, const char *key, const char *value);
int cvx_ggufw_kv_u32(cvx_gguf_writer *w, const char *key, uint32_t value);
int cvx_ggufw_kv_arr_i32(cvx_gguf_writer *w, const char *key, const int32_t *v, int n);
/* A tensor of a ggml type (quant.h's table: F32, F16, BF16, Q*): its index, or -1 + cvx_error (a
 * name longer than 127 bytes: city96's GGML_MAX_NAME 128, the original HunyuanVideo names reach
 * 66; a row that is not whole blocks; a name added twice). data may be NULL (then `fill` produces
 * it). */
int cvx_ggufw_tensor(cvx_gguf_writer *w, const char *name, int ndim, const int64_t *shape, cvx_dtype type,
                     const void *data);
int cvx_ggufw_count(const cvx_gguf_writer *w);
int cvx_ggufw_write(cvx_gguf_writer *w, const char *path, cvx_ggufw_fill_fn fill, void *user);

#endif
