/* Private to common/attention*.c: the parts of the bf16 attention kernel the int8 one shares (one
 * copy each, in attention_bf16.c; the int8 kernel replaces only the scores (integer QKᵀ), its
 * softmax and PV are these, with the same rounding points), and the bf16 attention of CPUs
 * without bf16 units on the f32 kernels (attention.c). */
#ifndef CVX_ATTENTION_IMPL_H
#define CVX_ATTENTION_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* Rows per group at most: CVX_ATTN_GROUP on the portable path, 6 on the AVX512-BF16 one. */
enum { CVX_ATTN_GROUP = 48, CVX_ATTN_GROUP_FAST = 6 };

/* vp[j/2][c] = (v[j,c], v[j+1,c]) as bf16 pairs (RNE) for the nkp (a multiple of 32) keys of a tile,
 * zero past nk; v row j at v + j·ld_kv; row: 2·hd bf16 of staging. */
void cvx_attn_pack_v_tile(const float *v, int ld_kv, int nk, int nkp, int hd, uint32_t *vp, uint16_t *row);

/* The online softmax (base 2) and PV of a group of ns rows against one key tile of nk keys (nkp: nk
 * rounded up to 32): s [ns][nkp] holds the rows' scores already in base 2 (scale·log2 e folded in);
 * bias (NULL: none) row r at bias + r·ld_bias, in base e. Updates the rows' maxima m, sums l and the
 * accumulator acc [ns][hd] (first: the first key tile, acc not read); p rounded to bf16 into pp
 * (ns·nkp/2 pairs), PV against vp (cvx_attn_pack_v_tile). fast (AVX512-BF16, hd % 32 = 0, ns ≤ 6):
 * vdpbf16ps, and at the last tile (last) it writes out = acc / l itself; else the portable products
 * and cvx_attn_finish writes out. */
void cvx_attn_softmax_pv(int fast, int ns, float *s, int nk, int nkp, int first, int last, const float *bias,
                         size_t ld_bias, float *m, float *l, uint32_t *pp, const uint32_t *vp, int hd, float *acc,
                         float *out, int ld_o);
/* out[i] = acc[i] / l[i] for nq rows (nothing when fast: the last tile wrote out). */
void cvx_attn_finish(int fast, int nq, const float *l, const float *acc, int hd, float *out, int ld_o);

/* x[i] = (float)bf16(x[i]) for i < n (RNE, NaN kept NaN: cvx_f32_to_bf16), on the calling thread. */
void cvx_attn_round_bf16_row(float *x, int n);

/* cvx_attention_bf16's contract (q, k, v rounded to bf16, f32 scores, softmax and sums, p rounded to
 * bf16 for PV, f32 accumulation) on the f32 kernels of cvx_attention_isa (attention.c; AVX-512 ones
 * when avx512): q and the packed k / v tiles rounded as they are copied, p after the row sum. The path
 * of CPUs without bf16 units (products of bf16 values are exact in f32: nothing is gained by a pairwise
 * bf16 layout there). hd % 16 == 0; built with AVX2/FMA only. */
void cvx_attn_f32_bf16(int avx512, const float *q, int ld_q, const float *k, const float *v, int ld_kv, float *out,
                       int ld_o, int Sq, int Skv, int heads, int hd, float scale, const float *bias);

#endif
