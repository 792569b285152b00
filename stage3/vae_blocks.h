/* VAE building blocks shared by the decoder (vae.c, vae_decode.c) and the encoder
 * (vae_encoder.c). Internal to stage3. */
#ifndef CVX_STAGE3_VAE_BLOCKS_H
#define CVX_STAGE3_VAE_BLOCKS_H

#include "vae.h"

/* A feature-map buffer of n floats (free with free()). Buffers of 8 MB and more are 2 MB-aligned
 * and marked MADV_HUGEPAGE: the VAE allocates and frees tensors of hundreds of MB per conv, and
 * each fresh 4 KB page costs a fault (a fifth of the CPU time of a decode in a VM, measured);
 * with 2 MB pages 512× fewer. Same contents contract as cvx_alloc_f32 (uninitialised). */
float *vae_alloc(size_t n);

/* Weight lookup while loading a VAE half (decoder or encoder): the mapped weights, the next
 * causal-cache slot, and the context every conv computes through. */
typedef struct {
    void *w;        /* cvx_weights * */
    int next_cache;
    cvx_ctx *ctx;
} vae_loader;

/* `name`.weight [cout, cin, (kt,) kh, kw] (2-D when is2d) and `name`.bias [cout], shape-checked;
 * a causal conv with kt > 1 gets the next cache slot. -1 + cvx_error naming the tensor. */
int vae_conv_get(vae_loader *L, vae_conv *c, const char *name, int cin, int cout, int kt, int kh, int kw, int is2d,
                 int causal);

/* vae_causal_conv3d that frees its input x once copied into the padded buffer (saves one tensor
 * at the peak: callers pass an input that is dead after the conv). y == NULL: the output is
 * allocated after the input is freed (lower peak). Returns y. */
float *vae_causal_conv3d_consume(const vae_conv *c, vae_cache *cache, float *x, int T, int H, int W, float *y);

/* A 1×1×1 conv on x[cin, N] -> y[cout, N] (bias added; counted in the context's conv FLOPs). */
void vae_conv1x1(const vae_conv *c, const float *x, size_t N, float *y);

/* Linear blends of overlapping tiles along height / width, as upstream blend_v / blend_h:
 * the first `extent` rows (columns) of b[C, T, Hb, W] fade in from the last ones of
 * a[C, T, Ha, W] (b modified in place; extent clipped to both sizes). */
void vae_blend_v(const float *a, int Ha, float *b, int Hb, int C, int T, int W, int extent);
void vae_blend_h(const float *a, int Wa, float *b, int Wb, int C, int T, int H, int extent);

#endif
