/* A faster multi-head attention with the same contract as cvx_attention (common/ops.h):
 * online softmax over key tiles, never the [Sq, Skv] matrix. Its own AVX2/FMA register-blocked
 * kernels for q·kᵀ and p·v (no sgemm packing of the small tile products), a vectorised softmax,
 * jobs over (head, block of query rows) on the OpenMP pool. Falls back to cvx_attention when
 * head_dim is not a multiple of 16 or the target lacks AVX2/FMA. Compared against
 * cvx_attention_ref in tests/common_attention_fast.c. */
#ifndef CVX_ATTENTION_FAST_H
#define CVX_ATTENTION_FAST_H

/* out may be q itself (same pointer and ld): each (head, query block) job reads only its own
 * block of q and writes the same block of out after it is done with it. */
void cvx_attention_fast(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                        int Sq, int Skv, int heads, int hd, float scale, const float *bias);

#endif
