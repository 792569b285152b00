/* The insides of an adapter set, shared by common/lora.c (reading the files, scales) and
 * common/lora_apply.c (the lookup, the low-rank products, fusing). Not an API: include lora.h. */
#ifndef CVX_LORA_IMPL_H
#define CVX_LORA_IMPL_H

#include "lora.h"

/* One adapter on one layer: ΔW = scale · B A, Δb = bias_scale · bias. */
typedef struct {
    const cvx_tensor *A;         /* [r, in] (NULL: a bias delta alone) */
    const cvx_tensor *B;         /* [out, r] */
    const cvx_tensor *bias;      /* [out] or NULL */
    double scale, bias_scale;
    int adapter, rank, target;
} lora_term;

struct cvx_lora_layer {
    const cvx_tensor *w, *b;     /* the base layer */
    int target;
    const lora_term *terms;      /* n_terms, in adapter order */
    int n_terms;
    int fused;
    cvx_tensor fw, fb;           /* fused: the merged copies (fb valid when has_fb) */
    void *fw_data, *fb_data;
    int has_fb;
};

struct cvx_lora_set {
    cvx_safetensors **files;
    int n_files;
    cvx_lora_target *targets;    /* a copy of the model's table */
    int n_targets;
    lora_term *terms;            /* grouped by layer */
    int n_terms;
    cvx_lora_layer *layers;
    int n_layers;
    int *slots;                  /* open addressing on the weight pointer: layer index + 1, 0 empty */
    size_t mask;
    int fused;
    size_t fused_bytes;
};

/* lora_apply.c: the lookup table and the merged copies, once s->layers is filled. 0, or -1 + cvx_error. */
int cvx_lora_build_index(cvx_lora_set *s);
int cvx_lora_fuse_all(cvx_lora_set *s);

#endif
