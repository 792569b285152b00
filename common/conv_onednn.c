/* kt×kh×kw 3D convolution through oneDNN's convolution primitive in bf16 (conv.h,
 * cvx_conv3d_onednn_bf16): bf16 src/weights, f32 accumulation, f32 bias and dst. oneDNN chooses
 * the src/weights/dst layouts (format_tag_any). Per context (ctx->conv_onednn):
 *   - one primitive per shape, with its reorders: plain f32 src -> the chosen bf16 layout (the
 *     bf16 rounding happens in this reorder), the chosen f32 dst layout -> plain y;
 *   - each weight reordered ONCE into the chosen bf16 layout, keyed by its tensor (address, data,
 *     shape, a 16-word sample of its bytes) and that layout; held until the context is freed
 *     (cvx_conv_onednn_free). */
#include "conv.h"

#include <dnnl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gemm.h"
#include "weight_caches.h"

typedef struct {
    int dims[8];   /* Cin, Cout, kt, kh, kw, Tp, Hp, Wp */
    int has_bias;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t conv, src_reorder, dst_reorder;   /* reorders NULL when the layout is plain */
    dnnl_memory_t src_blk, dst_blk;   /* the primitive's src/dst (dst: when reordered); their buffers are the
                                       * context's scratch (bf16_x, conv_grid), set per call */
    const dnnl_memory_desc_t *wei_md;                    /* owned by pd */
} conv_prim;

typedef struct {
    const cvx_tensor *t;
    const void *data;
    int dims[5];
    uint64_t sample;         /* 16 of its bytes' words: another weight mapped at the same address is not it */
    dnnl_memory_desc_t md;   /* the layout it was reordered into */
    dnnl_memory_t mem;
} conv_weight;

struct cvx_conv_onednn {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    conv_prim *prims;
    conv_weight *wts;
    int nprims, nwts;
};

static void prim_destroy(conv_prim *p) {
    if (p->conv) dnnl_primitive_destroy(p->conv);
    if (p->src_reorder) dnnl_primitive_destroy(p->src_reorder);
    if (p->dst_reorder) dnnl_primitive_destroy(p->dst_reorder);
    if (p->src_blk) dnnl_memory_destroy(p->src_blk);
    if (p->dst_blk) dnnl_memory_destroy(p->dst_blk);
    if (p->pd) dnnl_primitive_desc_destroy(p->pd);
}

void cvx_conv_onednn_free(struct cvx_conv_onednn *c) {
    if (!c) return;
    for (int i = 0; i < c->nprims; i++) prim_destroy(&c->prims[i]);
    for (int i = 0; i < c->nwts; i++) dnnl_memory_destroy(c->wts[i].mem);
    free(c->prims), free(c->wts);
    if (c->stream) dnnl_stream_destroy(c->stream);
    if (c->eng) dnnl_engine_destroy(c->eng);
    free(c);
}

size_t cvx_conv_onednn_bytes(const struct cvx_conv_onednn *c) {
    size_t n = 0;
    for (int i = 0; c && i < c->nwts; i++) n += dnnl_memory_desc_get_size(&c->wts[i].md);
    return n;
}

static struct cvx_conv_onednn *env_of(cvx_ctx *ctx) {
    if (ctx->conv_onednn) return ctx->conv_onednn;
    struct cvx_conv_onednn *c = cvx_calloc(1, sizeof *c);
    if (dnnl_engine_create(&c->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&c->stream, c->eng, dnnl_stream_default_flags) != dnnl_success) {
        cvx_conv_onednn_free(c);
        return NULL;
    }
    return ctx->conv_onednn = c;
}

/* A reorder primitive from -> to, or NULL (+ *ok = 0 on failure) when the layouts are equal. */
static dnnl_primitive_t reorder_of(dnnl_engine_t eng, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                   int *ok) {
    if (dnnl_memory_desc_equal(from, to)) return NULL;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    if (dnnl_reorder_primitive_desc_create(&rpd, from, eng, to, eng, NULL) != dnnl_success ||
        dnnl_primitive_create(&r, rpd) != dnnl_success)
        *ok = 0;
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    return r;
}

static int run_reorder(struct cvx_conv_onednn *c, dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to) {
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    return dnnl_primitive_execute(r, c->stream, 2, a) == dnnl_success && dnnl_stream_wait(c->stream) == dnnl_success;
}

static conv_prim *prim_of(struct cvx_conv_onednn *c, const int dims[8], int has_bias) {
    for (int i = 0; i < c->nprims; i++)
        if (!memcmp(c->prims[i].dims, dims, sizeof c->prims[i].dims) && c->prims[i].has_bias == has_bias)
            return &c->prims[i];
    const int Cin = dims[0], Cout = dims[1], kt = dims[2], kh = dims[3], kw = dims[4];
    const int Tp = dims[5], Hp = dims[6], Wp = dims[7];
    conv_prim p = {.has_bias = has_bias};
    memcpy(p.dims, dims, sizeof p.dims);
    dnnl_memory_desc_t sd, bd, dd, sd_any, wd_any, dd_any;
    dnnl_dims_t ds = {1, Cin, Tp, Hp, Wp}, dw = {Cout, Cin, kt, kh, kw}, db = {Cout},
                dy = {1, Cout, Tp - kt + 1, Hp - kh + 1, Wp - kw + 1}, strides = {1, 1, 1}, pad = {0, 0, 0};
    dnnl_convolution_desc_t cd;
    int ok = dnnl_memory_desc_init_by_tag(&sd, 5, ds, dnnl_f32, dnnl_ncdhw) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&bd, 1, db, dnnl_f32, dnnl_a) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&dd, 5, dy, dnnl_f32, dnnl_ncdhw) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&sd_any, 5, ds, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&wd_any, 5, dw, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&dd_any, 5, dy, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
             dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &sd_any, &wd_any,
                                                has_bias ? &bd : NULL, &dd_any, strides, pad, pad) == dnnl_success &&
             dnnl_primitive_desc_create(&p.pd, &cd, NULL, c->eng, NULL) == dnnl_success &&
             dnnl_primitive_create(&p.conv, p.pd) == dnnl_success;
    if (ok) {
        const dnnl_memory_desc_t *s = dnnl_primitive_desc_query_md(p.pd, dnnl_query_src_md, 0),
                                 *d = dnnl_primitive_desc_query_md(p.pd, dnnl_query_dst_md, 0);
        p.wei_md = dnnl_primitive_desc_query_md(p.pd, dnnl_query_weights_md, 0);
        ok = s && d && p.wei_md;
        if (ok) {   /* the src always goes through a reorder: plain f32 -> the chosen bf16 layout */
            dnnl_primitive_desc_t rpd = NULL;
            ok = dnnl_reorder_primitive_desc_create(&rpd, &sd, c->eng, s, c->eng, NULL) == dnnl_success &&
                 dnnl_primitive_create(&p.src_reorder, rpd) == dnnl_success &&
                 dnnl_memory_create(&p.src_blk, s, c->eng, DNNL_MEMORY_NONE) == dnnl_success;
            if (rpd) dnnl_primitive_desc_destroy(rpd);
        }
        if (ok) p.dst_reorder = reorder_of(c->eng, d, &dd, &ok);
        if (ok && p.dst_reorder) ok = dnnl_memory_create(&p.dst_blk, d, c->eng, DNNL_MEMORY_NONE) == dnnl_success;
    }
    if (!ok) {
        prim_destroy(&p);
        return NULL;
    }
    c->prims = realloc(c->prims, sizeof *c->prims * (size_t)(c->nprims + 1));
    if (!c->prims) cvx_die("out of memory (oneDNN conv primitives)");
    c->prims[c->nprims] = p;
    return &c->prims[c->nprims++];
}

/* The weight w [Cout, Cin, kt, kh, kw] in layout md as bf16, reordered on first use. */
static dnnl_memory_t weight_of(struct cvx_conv_onednn *c, const cvx_tensor *w, const int dims[5],
                               const dnnl_memory_desc_t *md) {
    const uint64_t sample = cvx_bytes_sample(w->data, w->nbytes);
    for (int i = 0; i < c->nwts; i++) {
        const conv_weight *e = &c->wts[i];
        if (e->t == w && e->data == w->data && e->sample == sample && !memcmp(e->dims, dims, sizeof e->dims) &&
            dnnl_memory_desc_equal(&e->md, md))
            return e->mem;
    }
    dnnl_memory_desc_t plain;
    dnnl_dims_t dw = {dims[0], dims[1], dims[2], dims[3], dims[4]};
    float *wf = cvx_tensor_f32_dup(w);   // [Cout, Cin, kt, kh, kw]
    dnnl_memory_t src = NULL, dst = NULL;
    int ok = dnnl_memory_desc_init_by_tag(&plain, 5, dw, dnnl_f32, dnnl_oidhw) == dnnl_success &&
             dnnl_memory_create(&src, &plain, c->eng, wf) == dnnl_success &&
             dnnl_memory_create(&dst, md, c->eng, DNNL_MEMORY_ALLOCATE) == dnnl_success;
    dnnl_primitive_t r = ok ? reorder_of(c->eng, &plain, md, &ok) : NULL;
    ok = ok && r && run_reorder(c, r, src, dst);   /* f32 plain -> bf16: never the same layout */
    if (r) dnnl_primitive_destroy(r);
    if (src) dnnl_memory_destroy(src);
    free(wf);
    if (!ok) {
        if (dst) dnnl_memory_destroy(dst);
        return NULL;
    }
    c->wts = realloc(c->wts, sizeof *c->wts * (size_t)(c->nwts + 1));
    if (!c->wts) cvx_die("out of memory (oneDNN conv weights)");
    c->wts[c->nwts] = (conv_weight){.t = w, .data = w->data, .sample = sample, .md = *md, .mem = dst};
    memcpy(c->wts[c->nwts].dims, dims, sizeof c->wts[c->nwts].dims);
    return c->wts[c->nwts++].mem;
}

int cvx_conv3d_onednn_bf16(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const cvx_tensor *w,
                           const float *bias, int Cout, int kt, int kh, int kw, float *y) {
    const int dims[8] = {Cin, Cout, kt, kh, kw, Tp, Hp, Wp};
    const int To = Tp - kt + 1, Ho = Hp - kh + 1, Wo = Wp - kw + 1;
    struct cvx_conv_onednn *c = env_of(ctx);
    conv_prim *p = c ? prim_of(c, dims, bias != NULL) : NULL;
    const int wdims[5] = {Cout, Cin, kt, kh, kw};
    dnnl_memory_t mw = p ? weight_of(c, w, wdims, p->wei_md) : NULL;
    int ok = mw != NULL;
    if (ok) {
        dnnl_memory_desc_t sd, bd, dd;
        dnnl_dims_t ds = {1, Cin, Tp, Hp, Wp}, db = {Cout}, dy = {1, Cout, To, Ho, Wo};
        dnnl_memory_t ms = NULL, mb = NULL, md = NULL;
        ok = dnnl_memory_desc_init_by_tag(&sd, 5, ds, dnnl_f32, dnnl_ncdhw) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&bd, 1, db, dnnl_f32, dnnl_a) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&dd, 5, dy, dnnl_f32, dnnl_ncdhw) == dnnl_success &&
             dnnl_memory_create(&ms, &sd, c->eng, (void *)xp) == dnnl_success &&
             (!bias || dnnl_memory_create(&mb, &bd, c->eng, (void *)bias) == dnnl_success) &&
             dnnl_memory_create(&md, &dd, c->eng, y) == dnnl_success;
        const dnnl_memory_desc_t *sb = NULL, *db_ = NULL;
        ok = ok && dnnl_memory_get_memory_desc(p->src_blk, &sb) == dnnl_success &&
             dnnl_memory_set_data_handle(p->src_blk, cvx_scratch_get(&ctx->bf16_x, dnnl_memory_desc_get_size(sb) / 4 + 1)) ==
                 dnnl_success;
        if (ok && p->dst_reorder)
            ok = dnnl_memory_get_memory_desc(p->dst_blk, &db_) == dnnl_success &&
                 dnnl_memory_set_data_handle(p->dst_blk,
                                             cvx_scratch_get(&ctx->conv_grid, dnnl_memory_desc_get_size(db_) / 4 + 1)) ==
                     dnnl_success;
        ok = ok && run_reorder(c, p->src_reorder, ms, p->src_blk);   // [Cin, Tp, Hp, Wp] -> bf16 blocked
        if (ok) {
            dnnl_exec_arg_t a[4] = {{DNNL_ARG_SRC, p->src_blk}, {DNNL_ARG_WEIGHTS, mw},
                                    {DNNL_ARG_DST, p->dst_reorder ? p->dst_blk : md}, {DNNL_ARG_BIAS, mb}};
            ok = dnnl_primitive_execute(p->conv, c->stream, bias ? 4 : 3, a) == dnnl_success &&
                 dnnl_stream_wait(c->stream) == dnnl_success;
        }
        if (ok && p->dst_reorder) ok = run_reorder(c, p->dst_reorder, p->dst_blk, md);   // -> y [Cout, To, Ho, Wo]
        if (ms) dnnl_memory_destroy(ms);
        if (mb) dnnl_memory_destroy(mb);
        if (md) dnnl_memory_destroy(md);
    }
    if (!ok) {
        cvx_error("oneDNN bf16 convolution %d->%d, kernel %dx%dx%d, input %dx%dx%d: primitive not available", Cin,
                  Cout, kt, kh, kw, Tp, Hp, Wp);
        return -1;
    }
    cvx_flops_add(ctx, 2.0 * Cout * Cin * kt * kh * kw * (double)To * Ho * Wo);
    return 0;
}
