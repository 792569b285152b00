/* The compute context (see context.h). */
#include "context.h"

#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <omp.h>

#include "conv.h"
#include "cpu.h"
#include "error.h"
#include "gemm_fast.h"

void cvx_set_threads(int n) {
    if (n <= 0) n = omp_get_num_procs();
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int cvx_threads(void) { return omp_get_max_threads(); }

void cvx_ctx_use(const cvx_ctx *ctx) {
    if (omp_get_max_threads() != ctx->threads) cvx_set_threads(ctx->threads);
}

static unsigned feature_bits(const cvx_cpu_features *f) {
    return (f->avx2 ? CVX_CPU_AVX2 : 0u) | (f->avx512f ? CVX_CPU_AVX512F : 0u) |
           (f->avx512_bf16 ? CVX_CPU_AVX512_BF16 : 0u) | (f->amx_bf16 ? CVX_CPU_AMX_BF16 : 0u);
}

cvx_ctx *cvx_ctx_new(int threads) {
    cvx_ctx *ctx = cvx_calloc(1, sizeof *ctx);
    cvx_set_threads(threads);
    ctx->threads = cvx_threads();
    ctx->precision = CVX_PRECISION_F32;
    ctx->conv_algo = CVX_CONV_WINOGRAD4;
    ctx->winograd_budget = (size_t)48 << 20;
    cvx_cpu_features f;
    cvx_cpu_detect(&f);
    ctx->cpu_features = feature_bits(&f);
    /* After the thread count: oneDNN's OpenMP build sizes its work by the pool it sees. */
    ctx->kernels = cvx_kernels_new();
    if (!ctx->kernels) cvx_warn("%s; matrix products run on OpenBLAS (f32 only)", cvx_last_error());
    /* CVX_ISA=avx2: act as a CPU without AVX-512 (f32 bits are the same either way: tests and
     * docs/performance.md, "f32 on any x86-64 CPU") */
    const char *isa = getenv("CVX_ISA");
    if (isa && isa[0] && strcmp(isa, "avx2")) cvx_warn("CVX_ISA='%s' is not 'avx2' (the one ISA it can force); ignored", isa);
    if (isa && !strcmp(isa, "avx2")) {
        ctx->cpu_features &= ~(unsigned)(CVX_CPU_AVX512F | CVX_CPU_AVX512_BF16 | CVX_CPU_AMX_BF16);
        if (ctx->kernels) cvx_kernels_force(ctx->kernels, CVX_KPATH_AVX2);
    }
    return ctx;
}

void cvx_ctx_release_scratch(cvx_ctx *ctx) {
    cvx_scratch *all[8] = {&ctx->weights, &ctx->conv_grid, &ctx->winograd, &ctx->bf16_w,
                           &ctx->bf16_x,  &ctx->conv_w,    &ctx->lora_u,   &ctx->conv_in};
    for (int i = 0; i < 8; i++) {
        free(all[i]->data);
        all[i]->data = NULL;
        all[i]->cap = 0;
    }
    cvx_pool_trim(&ctx->maps);
    if (ctx->kernels) cvx_kernels_trim(ctx->kernels);
    cvx_conv_wcache_trim(ctx->conv_wcache);
}

void cvx_ctx_free(cvx_ctx *ctx) {
    if (!ctx) return;
    cvx_ctx_release_scratch(ctx);
    cvx_kernels_free(ctx->kernels);
    cvx_conv_onednn_free(ctx->conv_onednn);
    cvx_conv_wcache_free(ctx->conv_wcache);
    cvx_pool_free(&ctx->maps);
    free(ctx);
}

const char *cvx_precision_name(cvx_precision p) { return p == CVX_PRECISION_BF16 ? "bf16" : "f32"; }

cvx_precision cvx_precision_auto(cvx_work work) {
    if (work == CVX_WORK_CONV) return CVX_PRECISION_F32;
    cvx_cpu_features f;
    cvx_cpu_detect(&f);
    return f.avx512_bf16 || f.amx_bf16 ? CVX_PRECISION_BF16 : CVX_PRECISION_F32;
}

int cvx_precision_parse(const char *name, cvx_work work, cvx_precision *out) {
    if (!strcmp(name, "f32") || !strcmp(name, "float32")) *out = CVX_PRECISION_F32;
    else if (!strcmp(name, "bf16") || !strcmp(name, "bfloat16")) *out = CVX_PRECISION_BF16;
    else if (!strcmp(name, "auto")) *out = cvx_precision_auto(work);
    else return cvx_error("precision '%s' is not one of f32, bf16, auto", name);
    return 0;
}

int cvx_precision_from_cli(const char *arg, cvx_work work, cvx_precision *out) {
    const char *env = getenv("CVX_PRECISION");
    const char *name = arg ? arg : env && env[0] ? env : "auto";
    if (cvx_precision_parse(name, work, out)) return cvx_error_prefix(arg ? "--precision" : "CVX_PRECISION");
    return 0;
}

int cvx_ctx_set_precision(cvx_ctx *ctx, cvx_precision p) {
    if (p != CVX_PRECISION_F32 && p != CVX_PRECISION_BF16)
        return cvx_error("compute precision %d is not one of f32, bf16", (int)p);
    if (p == CVX_PRECISION_BF16 && !ctx->kernels)
        return cvx_error("compute precision bf16 needs the oneDNN kernels, which could not start");
    /* F(4×4) Winograd's transforms (coefficients up to 5 on 6×6 patches) amplify the bf16
     * rounding of its transformed operands: measured 2.4e-2 relative L2 per conv vs 3.9e-3 for
     * F(2×2) and 2.1e-3 direct (tests/precision_bf16.c). bf16 runs 3×3 convs with F(2×2). */
    if (p == CVX_PRECISION_BF16 && ctx->conv_algo == CVX_CONV_WINOGRAD4) ctx->conv_algo = CVX_CONV_WINOGRAD2;
    ctx->precision = p;
    if (p == CVX_PRECISION_BF16 && !cvx_kernels_bf16_native(ctx->kernels) && !ctx->fallback_noted) {
        ctx->fallback_noted = 1;
        cvx_info("bf16: this CPU has no AVX512_BF16/AMX units; bf16 runs widened to f32 (same results, not faster)");
    }
    return 0;
}

void cvx_ctx_set_int8(cvx_ctx *ctx, int on) {
    if (ctx->kernels) cvx_kernels_set_qdot(ctx->kernels, on ? 1 : 0, cvx_kernels_q8_kernel(ctx->kernels));
    ctx->int8 = on ? 1 : 0;
}

static const char *const ATTENTION_NAMES[] = {"auto", "f32", "bf16", "int8", "int8pv"};

const char *cvx_attention_name(cvx_attention_mode m) {
    return m >= CVX_ATTENTION_AUTO && m <= CVX_ATTENTION_INT8PV ? ATTENTION_NAMES[m] : "?";
}

int cvx_attention_parse(const char *name, cvx_attention_mode *out) {
    for (int m = CVX_ATTENTION_AUTO; m <= CVX_ATTENTION_INT8PV; m++)
        if (!strcmp(name, ATTENTION_NAMES[m])) return *out = (cvx_attention_mode)m, 0;
    return cvx_error("attention '%s' is not one of auto, f32, bf16, int8, int8pv", name);
}

int cvx_ctx_set_attention(cvx_ctx *ctx, cvx_attention_mode mode) {
    if (mode < CVX_ATTENTION_AUTO || mode > CVX_ATTENTION_INT8PV)
        return cvx_error("attention mode %d is not one of auto, f32, bf16, int8, int8pv", (int)mode);
    if ((mode == CVX_ATTENTION_BF16 || mode >= CVX_ATTENTION_INT8) && !ctx->kernels)
        return cvx_error("attention %s needs the oneDNN kernels, which could not start", cvx_attention_name(mode));
    ctx->attention = mode;
    return 0;
}

cvx_attention_mode cvx_ctx_attention(const cvx_ctx *ctx) {
    if (ctx->attention != CVX_ATTENTION_AUTO) return ctx->attention;
    return ctx->precision == CVX_PRECISION_BF16 && ctx->kernels ? CVX_ATTENTION_BF16 : CVX_ATTENTION_F32;
}

float *cvx_scratch_get(cvx_scratch *s, size_t n) {
    if (s->cap < n) {
        free(s->data);
        s->data = cvx_alloc_f32(n);
        s->cap = n;
    }
    return s->data;
}
