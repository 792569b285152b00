/* The convolutions of the video VAEs (CogVideoX, Wan): weights looked up and shape-checked at
 * load, causal 3D convolutions whose last kt−1 input frames are carried from one chunk of frames
 * to the next (so a video decodes / encodes chunk by chunk with memory flat in its length), 1×1×1
 * convolutions and the (0,1,0,1)-padded stride-2 Conv2d of the down-samplers.
 *
 * Layouts are channel-major, one sample: x[C, T, H, W]. The heavy work goes through common/conv.h
 * on the conv's cvx_ctx (conv algorithm, precision, scratch, counters). */
#ifndef CVX_STAGE3_VAE_CONV_H
#define CVX_STAGE3_VAE_CONV_H

#include <stddef.h>

#include "context.h"
#include "safetensors.h"

/* The kt−1 frames a causal conv puts in front of the first chunk (no carried frames yet). */
typedef enum {
    VAE_TIME_PAD_REPLICATE = 0,   /* the first frame repeated (CogVideoXCausalConv3d) */
    VAE_TIME_PAD_ZEROS = 1,       /* zeros (WanCausalConv3d: F.pad with 2·padding zero frames in front) */
} vae_time_pad;

typedef struct {
    const cvx_tensor *w, *b;   /* [Cout, Cin, kt, kh, kw] (2D convs: [Cout, Cin, kh, kw]); bias [Cout] */
    int cin, cout, kt, kh, kw;
    int cache_id;              /* causal convs with kt > 1: slot in vae_cache; −1 otherwise */
    vae_time_pad time_pad;     /* what precedes the first chunk */
    int space_replicate;       /* spatial padding: 0 zeros (conv padding), 1 the edge values (F.pad replicate,
                                * HunyuanVideo15CausalConv3d) */
    cvx_ctx *ctx;              /* the model's compute context (set by the loader) */
} vae_conv;

/* Per-slot carried frames ([C, n, H, W] each; a causal conv keeps its last kt−1 input frames),
 * one set per decode (and per spatial tile). Slots are numbered by the loader. */
typedef struct {
    float **buf;
    int *C, *H, *W;
    int n;
} vae_cache;

void vae_cache_init(vae_cache *c, int n);
void vae_cache_reset(vae_cache *c);
void vae_cache_free(vae_cache *c);

/* Tensor-name mapping of a loader: the checkpoint's name of the tensor the model code calls
 * `name` (written to buf, returned), e.g. the original Wan names of a ComfyUI file. */
typedef const char *(*vae_key_fn)(void *user, const char *name, char *buf, size_t n);

/* Weight lookup while loading a VAE half (decoder or encoder): the mapped weights, the next
 * causal-cache slot, the context every conv computes through, the causal time padding of its
 * convs and an optional name mapping (NULL: the names as the model code spells them). */
typedef struct {
    void *w;        /* cvx_weights * */
    int next_cache;
    cvx_ctx *ctx;
    vae_time_pad time_pad;
    int space_replicate;   /* the convs' spatial padding (vae_conv.space_replicate) */
    vae_key_fn key;
    void *key_user;
} vae_loader;

/* A feature-map buffer of n floats (free with free()). Buffers of 8 MB and more are 2 MB-aligned
 * and marked MADV_HUGEPAGE: the VAE allocates and frees tensors of hundreds of MB per conv, and
 * each fresh 4 KB page costs a fault (a fifth of the CPU time of a decode in a VM, measured);
 * with 2 MB pages 512× fewer. Same contents contract as cvx_alloc_f32 (uninitialised). */
float *vae_alloc(size_t n);
/* A feature map of n floats from the context's pool (ctx->maps, common/pool.h), given back with
 * vae_fmap_put: a decode allocates and frees hundreds of them in a few sizes, and the pool hands
 * the same memory out again instead of fresh pages from the kernel. Uninitialised. Every VAE's
 * feature maps come from here; vae_alloc stays for buffers that outlive a call or are freed with
 * free() by their owner (the carried-frame caches, buffers handed to a caller). The pool keeps what
 * was given back until vae_conv_forget or the context's release. */
float *vae_fmap_get(cvx_ctx *ctx, size_t n);
void vae_fmap_put(cvx_ctx *ctx, void *p);

/* Tensor `name` (through the loader's name mapping) with its shape checked; NULL + cvx_error
 * naming the file's tensor. */
const cvx_tensor *vae_loader_get(vae_loader *L, const char *name, const int64_t *shape, int ndim);

/* `name`.weight [cout, cin, (kt,) kh, kw] (2-D when is2d) and `name`.bias [cout], shape-checked;
 * a causal conv with kt > 1 gets the next cache slot. -1 + cvx_error naming the tensor. */
int vae_conv_get(vae_loader *L, vae_conv *c, const char *name, int cin, int cout, int kt, int kh, int kw, int is2d,
                 int causal);

/* The weights closed: drop what the context keeps for them (transformed conv weights,
 * cvx_conv_weights, and the pool's free feature maps), so a context that outlives a VAE does not
 * hold copies of dead tensors.
 * The VAEs' free functions call it when their context is borrowed. */
void vae_conv_forget(cvx_ctx *ctx);

/* Valid convolution of a padded input xp[Cin, Tp, Hp, Wp] -> y[Cout, Tp−kt+1, Hp−kh+1, Wp−kw+1]
 * (bias added) with the context's conv algorithm (Winograd for 3×3 spatial kernels); weights
 * widened / transformed once per context (cvx_conv3d_tensor, cvx_conv_weights: held by the context
 * within CVX_PACK_BUDGET_MB). Counted in ctx->conv_flops/seconds. */
void vae_conv_padded(const vae_conv *c, const float *xp, int Tp, int Hp, int Wp, float *y);

/* A 1×1×1 conv on x[cin, N] -> y[cout, N] (bias added; counted in the context's conv FLOPs). */
void vae_conv1x1(const vae_conv *c, const float *x, size_t N, float *y);

/* Causal 3D convolution: time padded in front with the cached kt−1 frames (first chunk: c->time_pad),
 * cache := last kt−1 frames of that time-padded input, spatial padding (kh−1)/2, (kw−1)/2 (zeros,
 * or the edge values when c->space_replicate),
 * valid conv. y: [Cout, T, H, W] (caller-allocated). 1×1×1 convs: plain, no cache. */
void vae_causal_conv3d(const vae_conv *c, vae_cache *cache, const float *x, int T, int H, int W, float *y);
/* The same, giving its input x back to the pool once copied into the padded buffer (saves one
 * tensor at the peak: callers pass an input that is dead after the conv). x must be a feature map
 * of c->ctx's pool (vae_fmap_get), never a malloc'd buffer. y == NULL: the output is taken from that
 * pool after the input is given back (lower peak; the caller gives it back with vae_fmap_put);
 * otherwise y is the caller's. Returns y. */
float *vae_causal_conv3d_consume(const vae_conv *c, vae_cache *cache, float *x, int T, int H, int W, float *y);

/* Conv2d 3×3 stride 2 on x[Cin, T, H, W] zero-padded by one row/column at the bottom/right
 * (F.pad / ZeroPad2d (0,1,0,1)), per frame: y[Cout, T, Ho, Wo] with Ho = (H−2)/2+1,
 * Wo = (W−2)/2+1. Fast: 9 tap GEMMs per frame. The reference (direct loops, double
 * accumulation, weights w[Cout, Cin, 3, 3] f32) is for tests. */
void vae_conv2d_s2(const vae_conv *c, const float *x, int T, int H, int W, float *y);
void vae_conv2d_s2_ref(const float *x, int Cin, int T, int H, int W, const float *w, const float *bias, int Cout,
                       float *y);

#endif
