/* The parts of wan_transformer shared by stage2/wan_load.c (config, weights) and stage2/wan.c
 * (forward). Not an API: include wan.h elsewhere. */
#ifndef CVX_STAGE2_WAN_INTERNAL_H
#define CVX_STAGE2_WAN_INTERNAL_H

#include "wan.h"
#include "safetensors.h"
#include "transformer_load.h"

struct cvx_dist;

/* One WanAttention's projections: to_q, to_k, to_v, to_out.0 [D, D] (+ bias), and the RMSNorms
 * over the whole inner dim on q and k (weights [D], f32 copies). */
typedef cvx_attn_weights wan_attn_weights;

/* One WanTransformerBlock. */
typedef struct {
    wan_attn_weights attn1, attn2;
    const cvx_tensor *add_k_w, *add_k_b, *add_v_w, *add_v_b;   /* attn2 image keys/values (I2V) */
    float *norm_added_k;                                       /* [D] (I2V) */
    float *norm2_w, *norm2_b;                                  /* [D], NULL without cross_attn_norm */
    const cvx_tensor *ffn1_w, *ffn1_b, *ffn2_w, *ffn2_b;       /* ffn.net.0.proj, ffn.net.2 */
    float *sst;                                                /* scale_shift_table [6, D] */
} wan_block_weights;

struct wan_transformer {
    wan_config c;
    cvx_weights *w;
    int original;                      /* original Wan / ComfyUI key names */
    char prefix[32];                   /* "model.diffusion_model." or "" */
    cvx_tensor patch_w;                /* Conv3d [D, C, pt, ph, pw] viewed as [D, C·pt·ph·pw] */
    const cvx_tensor *patch_b;
    const cvx_tensor *time1_w, *time1_b, *time2_w, *time2_b, *tproj_w, *tproj_b;
    const cvx_tensor *text1_w, *text1_b, *text2_w, *text2_b;
    float *img_norm1_w, *img_norm1_b, *img_norm2_w, *img_norm2_b;   /* I2V image embedder */
    const cvx_tensor *img_ff1_w, *img_ff1_b, *img_ff2_w, *img_ff2_b;
    wan_block_weights *blocks;
    float *sst_out;                    /* scale_shift_table [2, D] of the output */
    const cvx_tensor *proj_out_w, *proj_out_b;
    /* rotary angles per axis position: cos/sin [rope_max_seq_len, head_dim/2], columns
     * [t part | h part | w part] (each axis's own table, as upstream concatenates them) */
    double *rope_cos, *rope_sin;
    /* activations, grown as needed */
    float *h, *ws, *sp_buf;
    size_t h_cap, ws_cap, sp_cap;
    int chunk_rows;
    wan_stats stats;
    cvx_ctx *ctx;
    int owns_ctx;
    struct cvx_dist *sp;
};

/* Sizes of the three rotary parts in complex pairs: t, h, w (sum head_dim/2). */
static inline void wan_rope_split(int hd, int *ct, int *ch, int *cw) {
    *ch = *cw = hd / 6;
    *ct = hd / 2 - 2 * (hd / 6);
}

#endif
