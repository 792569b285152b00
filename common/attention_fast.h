/* A faster multi-head attention with the same contract as cvx_attention (common/ops.h):
 * online softmax over key tiles, never the [Sq, Skv] matrix. Differences from the simple
 * version: larger tiles, an 8-wide vectorised exp / max / sum for the softmax (the scalar expf
 * cost as much as the two products), jobs over (head, query tile) on the OpenMP pool with
 * single-threaded sgemm inside. Compared against cvx_attention_ref in tests/common_attention_fast.c. */
#ifndef CVX_ATTENTION_FAST_H
#define CVX_ATTENTION_FAST_H

void cvx_attention_fast(const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out, int ld_o,
                        int Sq, int Skv, int heads, int hd, float scale, const float *bias);

/* exp of n floats in place, |rel err| < 2e-7 (Cephes polynomial, vectorised when AVX2 is on);
 * inputs below -87 give exp(-87) (no denormals). Exposed for the test. */
void cvx_exp_inplace(float *x, int n);

#endif
