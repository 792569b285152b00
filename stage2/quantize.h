/* Making a GGUF file from a transformer checkpoint (safetensors, F32/BF16/F16) with city96's rules
 * (ComfyUI-GGUF tools/convert.py + llama-quantize with tools/lcpp.patch + fix_5d_tensors.py), the
 * way the public Wan 2.1 GGUFs were made, so ComfyUI-GGUF, diffusers' GGUF loader and this program
 * read the result:
 *   storage (convert.py): the base type is BF16 for a BF16 tensor, else F16; an F32/BF16 tensor that
 *     is 1-D, has <= 1024 elements or matches the family's `hiprec` list is F32; a tensor with more
 *     than 4 dims is F32 and placed right after its `.bias` (fix_5d_tensors.py);
 *   quantization (llama-quantize, lcpp.patch): a 2-D tensor whose name ends in "weight" and matches
 *     none of the family's `keep` list gets the file type's base type, bumped per img_tensor_get_type
 *     (".v.weight"/".to_v.weight": Q4_K_M/Q5_K_M -> Q6_K, the first 4 of Q4_K_S -> Q5_K, Q3_K_M -> Q5_K
 *     for the first 2 then Q4_K, Q3_K_L -> Q5_K, Q2_K -> Q3_K; ".ffn.2.weight"/".ff.net.2.weight": Q4_0 ->
 *     Q4_1, Q5_0 -> Q5_1, Q4_K_S -> Q5_K, Q4_K_M/Q5_K_M -> Q6_K, Q3_K_M -> Q4_K, Q3_K_L -> Q5_K) unless
 *     `pure` (llama-quantize --pure); a K type whose rows are not whole 256-blocks falls back to F16;
 *     the values quantized are the base-stored ones (F16-rounded for an F32 source), with ggml's
 *     quantize_row_*_ref (common/quant.h);
 *   metadata: general.architecture, general.quantization_version = 2, general.file_type. */
#ifndef CVX_STAGE2_QUANTIZE_H
#define CVX_STAGE2_QUANTIZE_H

#include <stddef.h>

#include "safetensors.h"

typedef struct cvx_gguf_rules {
    const char *arch;             /* general.architecture: "wan", "cogvideox" */
    const char *const *keep;      /* name substrings never quantized (lcpp.patch), NULL-terminated */
    const char *const *hiprec;    /* name substrings stored F32 (convert.py keys_hiprec), NULL-terminated */
    /* The file's name of source tensor `name` (the "model.diffusion_model." prefix already stripped),
     * e.g. diffusers -> original Wan names; "" leaves the tensor out (the VAE in LTX-Video's
     * combined file); NULL: unchanged. */
    void (*rename)(const cvx_weights *src, const char *name, char *out, size_t n);
} cvx_gguf_rules;

/* Counts of what was written, for messages and tests. */
typedef struct {
    int tensors, quantized, fallback_f16;   /* fallback_f16: K-type rows not whole 256-blocks */
    int by_type[32];                        /* tensors per cvx_dtype */
    long long bytes_in, bytes_out;
} cvx_quantize_stats;

/* Parse a --quantize value: a llama.cpp file type as llama-quantize names it (Q8_0, Q4_K_M, Q3_K_S,
 * F16, BF16, ... any case) or a block type (q4_k, q5_k, q3_k: that type everywhere, i.e. pure, labelled
 * as the _S file type). *file_type: the LLAMA_FTYPE id, *pure set for block-type names. 0, or -1 +
 * cvx_error listing the accepted names. */
int cvx_quantize_parse_type(const char *name, unsigned *file_type, int *pure);

/* Write `out_path` from the tensors of `src` (their order; 5-D tensors moved after their bias).
 * -1 + cvx_error (unsupported source dtype, unwritable path, ...); the destination is untouched
 * then. stats may be NULL. */
int cvx_quantize_to_gguf(const cvx_weights *src, const cvx_gguf_rules *rules, unsigned file_type, int pure,
                         const char *out_path, cvx_quantize_stats *stats);

#endif
