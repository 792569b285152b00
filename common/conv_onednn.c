/* kt×kh×kw 3D convolution through oneDNN's convolution primitive in bf16 (conv.h,
 * cvx_conv3d_onednn_bf16): bf16 src/weights (RNE from f32 / the stored dtype), f32 accumulation,
 * f32 dst and bias. oneDNN chooses the src/weights/dst layouts (format_tag_any); the plain
 * channel-major buffers are reordered into and out of them. Everything (engine, primitive,
 * reorders) is made per call: no cache yet. */
#include "conv.h"

#include <dnnl.h>
#include <stdint.h>
#include <stdlib.h>

#include "error.h"
#include "gemm.h"
#include "gemm_fast.h"

typedef struct {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
} onednn_env;

/* Memory for `want`, filled from `plain` (reordered when the layouts differ). *owned = the new
 * memory to destroy (NULL when `plain` itself is used). 0, or -1. */
static int to_layout(onednn_env *e, dnnl_memory_t plain, const dnnl_memory_desc_t *want, dnnl_memory_t *out,
                     dnnl_memory_t *owned) {
    const dnnl_memory_desc_t *have = NULL;
    *owned = NULL;
    if (dnnl_memory_get_memory_desc(plain, &have) != dnnl_success) return -1;
    if (dnnl_memory_desc_equal(have, want)) {
        *out = plain;
        return 0;
    }
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    int ok = dnnl_memory_create(owned, want, e->eng, DNNL_MEMORY_ALLOCATE) == dnnl_success &&
             dnnl_reorder_primitive_desc_create(&rpd, have, e->eng, want, e->eng, NULL) == dnnl_success &&
             dnnl_primitive_create(&r, rpd) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, *owned}};
        ok = dnnl_primitive_execute(r, e->stream, 2, args) == dnnl_success && dnnl_stream_wait(e->stream) == dnnl_success;
    }
    if (r) dnnl_primitive_destroy(r);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    *out = *owned;
    return ok ? 0 : -1;
}

int cvx_conv3d_onednn_bf16(cvx_ctx *ctx, const float *xp, int Cin, int Tp, int Hp, int Wp, const cvx_tensor *w,
                           const float *bias, int Cout, int kt, int kh, int kw, float *y) {
    const int To = Tp - kt + 1, Ho = Hp - kh + 1, Wo = Wp - kw + 1;
    const size_t nx = (size_t)Cin * Tp * Hp * Wp, nw = (size_t)Cout * Cin * kt * kh * kw;
    uint16_t *xb = malloc(nx * sizeof *xb), *wb = malloc(nw * sizeof *wb);
    float *wf = cvx_tensor_f32_dup(w);                                   // [Cout, Cin, kt, kh, kw]
    if (!xb || !wb) cvx_die("out of memory (oneDNN conv operands, %zu + %zu bf16)", nx, nw);
    cvx_f32_to_bf16_fast(xp, xb, nx);
    cvx_f32_to_bf16_fast(wf, wb, nw);
    free(wf);

    onednn_env e = {0};
    dnnl_memory_desc_t sd, wd, bd, dd, sd_any, wd_any, dd_any;
    dnnl_dims_t ds = {1, Cin, Tp, Hp, Wp}, dw = {Cout, Cin, kt, kh, kw}, db = {Cout}, dy = {1, Cout, To, Ho, Wo};
    dnnl_dims_t strides = {1, 1, 1}, pad = {0, 0, 0};
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t conv = NULL;
    dnnl_memory_t ms = NULL, mw = NULL, mb = NULL, md = NULL, ms2 = NULL, mw2 = NULL, md2 = NULL;
    dnnl_memory_t use_s = NULL, use_w = NULL;
    int ok = dnnl_engine_create(&e.eng, dnnl_cpu, 0) == dnnl_success &&
             dnnl_stream_create(&e.stream, e.eng, dnnl_stream_default_flags) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&sd, 5, ds, dnnl_bf16, dnnl_ncdhw) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&wd, 5, dw, dnnl_bf16, dnnl_oidhw) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&bd, 1, db, dnnl_f32, dnnl_a) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&dd, 5, dy, dnnl_f32, dnnl_ncdhw) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&sd_any, 5, ds, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&wd_any, 5, dw, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&dd_any, 5, dy, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
             dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &sd_any, &wd_any,
                                                bias ? &bd : NULL, &dd_any, strides, pad, pad) == dnnl_success &&
             dnnl_primitive_desc_create(&pd, &cd, NULL, e.eng, NULL) == dnnl_success &&
             dnnl_primitive_create(&conv, pd) == dnnl_success &&
             dnnl_memory_create(&ms, &sd, e.eng, xb) == dnnl_success &&
             dnnl_memory_create(&mw, &wd, e.eng, wb) == dnnl_success &&
             (!bias || dnnl_memory_create(&mb, &bd, e.eng, (void *)bias) == dnnl_success) &&
             dnnl_memory_create(&md, &dd, e.eng, y) == dnnl_success;
    if (ok) {   /* src and weights into the primitive's layouts */
        const dnnl_memory_desc_t *ws = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        const dnnl_memory_desc_t *ww = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        ok = ws && ww && to_layout(&e, ms, ws, &use_s, &ms2) == 0 && to_layout(&e, mw, ww, &use_w, &mw2) == 0;
    }
    if (ok) {
        const dnnl_memory_desc_t *wdst = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
        dnnl_memory_t use_d = md;
        if (!dnnl_memory_desc_equal(wdst, &dd)) {
            ok = dnnl_memory_create(&md2, wdst, e.eng, DNNL_MEMORY_ALLOCATE) == dnnl_success;
            use_d = md2;
        }
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, use_s}, {DNNL_ARG_WEIGHTS, use_w}, {DNNL_ARG_DST, use_d},
                                   {DNNL_ARG_BIAS, mb}};
        ok = ok && dnnl_primitive_execute(conv, e.stream, bias ? 4 : 3, args) == dnnl_success &&
             dnnl_stream_wait(e.stream) == dnnl_success;
        if (ok && md2) {   /* dst back to plain [Cout, To, Ho, Wo] */
            dnnl_primitive_desc_t rpd = NULL;
            dnnl_primitive_t r = NULL;
            ok = dnnl_reorder_primitive_desc_create(&rpd, wdst, e.eng, &dd, e.eng, NULL) == dnnl_success &&
                 dnnl_primitive_create(&r, rpd) == dnnl_success;
            if (ok) {
                dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, md2}, {DNNL_ARG_TO, md}};
                ok = dnnl_primitive_execute(r, e.stream, 2, ra) == dnnl_success &&
                     dnnl_stream_wait(e.stream) == dnnl_success;
            }
            if (r) dnnl_primitive_destroy(r);
            if (rpd) dnnl_primitive_desc_destroy(rpd);
        }
    }
    if (ok) cvx_flops_add(ctx, 2.0 * Cout * Cin * kt * kh * kw * (double)To * Ho * Wo);
    dnnl_memory_t mems[7] = {ms, mw, mb, md, ms2, mw2, md2};
    for (int i = 0; i < 7; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    if (conv) dnnl_primitive_destroy(conv);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (e.stream) dnnl_stream_destroy(e.stream);
    if (e.eng) dnnl_engine_destroy(e.eng);
    free(xb), free(wb);
    if (!ok) {
        cvx_error("oneDNN bf16 convolution %d->%d, kernel %dx%dx%d, input %dx%dx%d: primitive not available", Cin,
                  Cout, kt, kh, kw, Tp, Hp, Wp);
        return -1;
    }
    return 0;
}
