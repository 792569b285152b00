/* safetensors files: zero-copy mmapped reading, sharded checkpoints, atomic writing.
 *
 * Format: u64 little-endian header length N, N bytes of JSON
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
 * then the data section. Everything in the header is validated before use. */
#ifndef CVX_SAFETENSORS_H
#define CVX_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "dtype.h"
#include "fileio.h"

#define CVX_MAX_DIMS 8

typedef struct {
    const char *name;
    cvx_dtype dtype;
    int ndim;
    int64_t shape[CVX_MAX_DIMS];
    int64_t numel;
    const void *data;     /* points into the mmapped file; may be unaligned */
    size_t nbytes;
    const char *file;     /* path of the file it lives in, for messages */
} cvx_tensor;

/* ---- one file ---- */
typedef struct cvx_safetensors cvx_safetensors;

cvx_safetensors *cvx_st_open(const char *path);     /* NULL + cvx_error on any problem */
/* Parse a file image already in memory (not copied; must outlive the handle). `label` names it
 * in messages. Used by tests and the fuzzer. */
cvx_safetensors *cvx_st_open_memory(const void *buf, size_t len, const char *label);
void cvx_st_close(cvx_safetensors *st);
int cvx_st_count(const cvx_safetensors *st);
const cvx_tensor *cvx_st_tensor(const cvx_safetensors *st, int i); /* in header order */
const cvx_tensor *cvx_st_find(const cvx_safetensors *st, const char *name);  /* NULL if absent */
const char *cvx_st_path(const cvx_safetensors *st);
/* __metadata__ entries (string values only, as the format demands). */
const char *cvx_st_metadata(const cvx_safetensors *st, const char *key);  /* NULL if absent */
int cvx_st_metadata_count(const cvx_safetensors *st);
void cvx_st_metadata_at(const cvx_safetensors *st, int i, const char **key, const char **value);

/* ---- a model's weights: one lookup table over a single file or a sharded checkpoint ----
 * `path` may be a .safetensors file, a *.safetensors.index.json (weight_map), a GGUF file (by its
 * magic "GGUF", common/gguf.h: tensors of ggml block types are exposed in place, dtype CVX_Q*,
 * for cvx_linear; a `comfy.gguf.orig_shape.<name>` key restores a reshaped tensor's shape), or a
 * directory holding exactly one of: an index.json, or one .safetensors file.
 * In safetensors files, a U8 `<module>.Q4_0_qweight` [out, in/32·18] (or `.Q8_0_qweight`, 34
 * bytes per 32), the layout of MinusZone's / Kijai's CogVideoX *_GGUF_Q4_0.safetensors, is shown
 * as `<module>.weight` [out, in] of dtype CVX_Q4_0 (CVX_Q8_0), its bytes in place; the qweight's
 * own name is not found. ComfyUI's scaled fp8 weights (`<module>.weight` F8_E4M3 with a
 * `<module>.scale_weight`) are found as F32 `<module>.weight`: fp8 × scale (weights.c open_scaled_fp8). */
typedef struct cvx_weights cvx_weights;
typedef struct cvx_gguf cvx_gguf;

cvx_weights *cvx_weights_open(const char *path);
void cvx_weights_close(cvx_weights *w);
const cvx_tensor *cvx_weights_find(const cvx_weights *w, const char *name); /* NULL if absent */
/* Find `name` and check its shape (a -1 entry matches any size); float dtypes, F8_E4M3 and the
 * GGUF block types (which only cvx_linear, cvx_weight_f32, cvx_tensor_to_f32 and friends read,
 * widened one matrix at a time), nothing else (ints, bools).
 * Missing or mismatching: NULL + "FILE: tensor 'name' has shape [..], expected [..]" (a qweight
 * view: the file's tensor name, its bytes and the bytes the expected shape needs).
 * Usage: cvx_weights_get(w, "proj.weight", CVX_SHAPE(D, K)). */
const cvx_tensor *cvx_weights_get(const cvx_weights *w, const char *name, const int64_t *shape, int ndim);
#define CVX_SHAPE(...) ((const int64_t[]){__VA_ARGS__}), (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
int cvx_weights_count(const cvx_weights *w);
const char *cvx_weights_path(const cvx_weights *w);
/* Tensor i in [0, cvx_weights_count) (shards in order, each in header order; GGUF in file order). */
const cvx_tensor *cvx_weights_at(const cvx_weights *w, int i);
/* The GGUF file behind w (its metadata), NULL for safetensors. */
const cvx_gguf *cvx_weights_gguf(const cvx_weights *w);
/* One line for logs and records: "gguf wan Q4_K_M: 40 F32, 9 F16, 14 Q4_K, 6 Q6_K" (the file's
 * general.architecture and general.file_type when present), "safetensors: 400 BF16". */
const char *cvx_weights_describe(const cvx_weights *w, char *buf, size_t n);

/* The identity of the weights at path (a file or a model directory, as cvx_weights_open) for a
 * resumed run to check them against, in one line: "2 files, 123456 bytes, modified
 * 1764357062.123456789, content xxh64 <16 hex>" (the newest modification time of the files; the
 * hash chains each file's size, its header — the bytes before the tensor data — and its whole bytes
 * up to 16 MiB, else 64 blocks of 4 KiB spread over the data: a few hundred KiB read whatever the
 * size). 0, or -1 + cvx_error. */
int cvx_weights_identity(const char *path, char *out, size_t n);

/* A GGUF's general.architecture, when present, must be `arch` ("wan", "cogvideox"): else -1 +
 * cvx_error "FILE: general.architecture is 'X', expected 'wan': not a Wan transformer GGUF".
 * Safetensors files and GGUFs without the key: 0. */
int cvx_weights_check_arch(const cvx_weights *w, const char *arch, const char *family);

/* ---- a file whose names are not the model code's (a converted layout: original / ComfyUI names) ----
 * After cvx_weights_rename, cvx_weights_find / _get take the model code's names only: file tensor i
 * (cvx_weights_at order) is known as the name rename() writes to out when it returns 1, and hidden
 * when it returns 0 (another component's tensors in a combined file, tensors handled below).
 * `label` ("original LTX-Video names") ends the missing-tensor message; shape messages name the
 * file's tensor too. cvx_weights_at / _count still list the file's own tensors. 0, or -1 +
 * cvx_error when two file tensors get one name. */
int cvx_weights_rename(cvx_weights *w, const char *label, int (*rename)(const char *name, char *out, size_t n, void *user),
                       void *user);
/* After cvx_weights_rename: `name` is rows [row0, row0 + rows) of src's first dimension, in place
 * (a fused qkv's q), or src's dtype and shape over `data` (src->nbytes malloc'ed bytes, owned by w
 * from now on, freed on error too). 0, or -1 + cvx_error (the name is taken). Adds move the table:
 * make them all before looking anything up. */
int cvx_weights_add_rows(cvx_weights *w, const char *name, const cvx_tensor *src, int64_t row0, int64_t rows);

/* An embedding lookup: rows ids[0..n) of t ([vocab, D], any decodable dtype, D = t->shape[1]) widened to f32
 * into x [n, D]. An id outside [0, vocab) or a row that is not whole quantization blocks is an error
 * (one line naming the tensor's file), nothing written. */
int cvx_tensor_gather_rows(const cvx_tensor *t, const int64_t *ids, int n, float *x);
int cvx_weights_add_data(cvx_weights *w, const char *name, const cvx_tensor *src, void *data);
/* Python's chained str.replace over rules {from, to} in order (the key tables of diffusers'
 * converters): every occurrence of rules[0][0] replaced, then of rules[1][0] in the result, ...
 * Names up to 511 bytes. */
void cvx_str_replace_rules(const char *in, const char *const (*rules)[2], int nrules, char *out, size_t n);

/* Helpers for printing shapes in messages: writes "[1, 226, 4096]". */
const char *cvx_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* Copy a tensor's values widened to f32 into dst (numel floats). Dtypes with cvx_dtype_to_f32_ok
 * only (float, F8_E4M3, and the block-quantized types of GGUF tensors, dequantized). */
void cvx_tensor_to_f32(const cvx_tensor *t, float *dst);
/* Newly allocated f32 copy (free with free()). For small tensors: biases, norms. */
float *cvx_tensor_f32_dup(const cvx_tensor *t);
/* f32 view without a copy when the tensor is aligned F32; otherwise widened into *scratch
 * (grown with realloc as needed; caller frees it once at the end). */
const float *cvx_tensor_f32_view(const cvx_tensor *t, float **scratch, size_t *scratch_cap);

/* ---- content seal ----
 * A file that must not be used once changed (stage 2's checkpoint) carries the xxh64 of its
 * content in metadata `key` (16 hex digits): every tensor in name order (name, dtype name, rank
 * and shape as int64, the data bytes) and every other metadata entry in key order (key, value),
 * each string with its NUL, chained through the hash's seed from 0. */
typedef struct {
    const char *name;
    cvx_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
    size_t nbytes;
} cvx_seal_tensor;
typedef struct {
    const char *key, *value;
} cvx_seal_meta;
/* The hash of the content above (sorts both arrays in place); metadata entry `skip` left out. */
uint64_t cvx_seal_hash(cvx_seal_tensor *t, int nt, cvx_seal_meta *m, int nm, const char *skip);
/* 0 when st's content hashes to its metadata `key`; -1 + cvx_error naming the file when the key
 * is missing ("has no content hash") or differs ("was changed or damaged after it was written"). */
int cvx_st_check_seal(const cvx_safetensors *st, const char *key);

/* ---- writing ---- */
typedef struct cvx_st_writer cvx_st_writer;

cvx_st_writer *cvx_stw_new(void);
void cvx_stw_free(cvx_st_writer *w);
/* Add a tensor (the data is copied). dtype is the storage dtype of `data`. */
int cvx_stw_add(cvx_st_writer *w, const char *name, cvx_dtype dtype, int ndim, const int64_t *shape,
                const void *data);
/* Add f32 data stored as `store` (F32 or BF16, narrowed with round-to-nearest-even). */
int cvx_stw_add_f32(cvx_st_writer *w, const char *name, cvx_dtype store, int ndim, const int64_t *shape,
                    const float *data);
int cvx_stw_metadata(cvx_st_writer *w, const char *key, const char *value);
/* Sets metadata `key` to the content hash of everything added so far (the seal above; call last). */
int cvx_stw_seal(cvx_st_writer *w, const char *key);
/* Write to a new temp next to `path` (cvx_temp_create), fsync, rename over `path`, fsync dir. */
int cvx_stw_write(cvx_st_writer *w, const char *path);
/* Write and fsync the temp only; its name goes to tmp (commit with cvx_commit_file). */
int cvx_stw_write_temp(cvx_st_writer *w, const char *path, char *tmp, size_t tmp_size);
/* Write the temp and add it to an output set (fileio.h), committed with the set's other files. */
int cvx_outset_stw(cvx_outset *s, cvx_st_writer *w, const char *final_path);

#endif
