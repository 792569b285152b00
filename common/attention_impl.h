/* Private to common/attention_bf16.c and common/attention_int8.c: the parts of the bf16 attention
 * kernel the int8 one shares (one copy each, in attention_bf16.c). The int8 kernel replaces only
 * the scores (integer QKᵀ); its softmax and PV are these, with the same rounding points. */
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

#endif
