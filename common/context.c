/* The compute context (see context.h). */
#include "context.h"

#include <stdlib.h>

#include "error.h"
#include "gemm.h"

cvx_ctx *cvx_ctx_new(int threads) {
    cvx_ctx *ctx = cvx_calloc(1, sizeof *ctx);
    cvx_set_threads(threads);
    ctx->threads = cvx_threads();
    ctx->precision = CVX_PRECISION_F32;
    ctx->conv_algo = CVX_CONV_WINOGRAD4;
    ctx->winograd_budget = (size_t)48 << 20;
    return ctx;
}

void cvx_ctx_release_scratch(cvx_ctx *ctx) {
    cvx_scratch *all[3] = {&ctx->weights, &ctx->conv_grid, &ctx->winograd};
    for (int i = 0; i < 3; i++) {
        free(all[i]->data);
        all[i]->data = NULL;
        all[i]->cap = 0;
    }
}

void cvx_ctx_free(cvx_ctx *ctx) {
    if (!ctx) return;
    cvx_ctx_release_scratch(ctx);
    free(ctx);
}

const char *cvx_precision_name(cvx_precision p) { return p == CVX_PRECISION_BF16 ? "bf16" : "f32"; }

int cvx_ctx_set_precision(cvx_ctx *ctx, cvx_precision p) {
    if (p != CVX_PRECISION_F32)
        return cvx_error("compute precision %s is not implemented yet (only f32)", cvx_precision_name(p));
    ctx->precision = p;
    return 0;
}

float *cvx_scratch_get(cvx_scratch *s, size_t n) {
    if (s->cap < n) {
        free(s->data);
        s->data = cvx_alloc_f32(n);
        s->cap = n;
    }
    return s->data;
}
