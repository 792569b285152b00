/* The parts of hv15_transformer shared by stage2/hunyuan15_load.c (config, weights) and
 * stage2/hunyuan15.c (forward). Not an API: include hunyuan15.h elsewhere. */
#ifndef CVX_STAGE2_HUNYUAN15_INTERNAL_H
#define CVX_STAGE2_HUNYUAN15_INTERNAL_H

#include "hunyuan15.h"
#include "safetensors.h"

/* nn.Linear: weight [out, in] + bias [out]. */
typedef struct {
    const cvx_tensor *w, *b;
} hv15_linear;

/* One HunyuanVideo15IndividualTokenRefinerBlock (LayerNorms with affine, f32 copies). */
typedef struct {
    float *norm1_w, *norm1_b, *norm2_w, *norm2_b;   /* [D] */
    hv15_linear q, k, v, o;                         /* attn.to_q/k/v, to_out.0 */
    hv15_linear ff1, ff2;                           /* ff.net.0.proj [F, D], ff.net.2 [D, F] */
    hv15_linear ada;                                /* norm_out.linear [2D, D] */
} hv15_refiner_block;

/* One HunyuanVideo15TransformerBlock. */
typedef struct {
    hv15_linear norm1, norm1_context;               /* AdaLayerNormZero linears [6D, D] */
    hv15_linear q, k, v, o;                         /* video: to_q/k/v, to_out.0 */
    hv15_linear add_q, add_k, add_v, add_o;         /* text: add_q/k/v_proj, to_add_out */
    float *norm_q, *norm_k, *norm_added_q, *norm_added_k;   /* per-head RMSNorm weights [head_dim] */
    hv15_linear ff1, ff2, ffc1, ffc2;               /* ff / ff_context: net.0.proj, net.2 */
} hv15_block;

struct hv15_transformer {
    hv15_config c;
    cvx_weights *w;
    cvx_tensor patch_w;                              /* x_embedder Conv3d [D, C, pt, p, p] as [D, C·pt·p·p] */
    const cvx_tensor *patch_b;
    hv15_linear time1, time2;                        /* time_embed.timestep_embedder.linear_1/2 */
    /* context_embedder (token refiner) */
    hv15_linear ref_time1, ref_time2, ref_text1, ref_text2, ref_proj_in;
    hv15_refiner_block *refiner;
    /* context_embedder_2 (ByT5 projection) */
    float *byt5_norm_w, *byt5_norm_b;
    hv15_linear byt5_1, byt5_2, byt5_3;
    /* image_embedder */
    float *img_norm_in_w, *img_norm_in_b, *img_norm_out_w, *img_norm_out_b;
    hv15_linear img_1, img_2;
    float *cond_type;                                /* cond_type_embed.weight [3, D] */
    hv15_block *blocks;
    hv15_linear norm_out, proj_out;                  /* norm_out.linear [2D, D], proj_out [P, D] */
    int ffn;                                         /* feed-forward width (blocks and refiner) */
    int full_text;
    float *ws;                                       /* the blocks' q, k, v and normed rows, grown as needed */
    size_t ws_cap;
    struct cvx_dist *sp;                             /* Ulysses sequence parallelism (borrowed), NULL: off */
    float *sp_buf;                                   /* q, k, v head shards [S + text, D/sp] each */
    size_t sp_cap;
    hv15_stats stats;
    cvx_ctx *ctx;
    int owns_ctx;
};

#endif
