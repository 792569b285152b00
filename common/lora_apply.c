/* The runtime side of an adapter set (lora.h): the lookup cvx_linear does per call (open
 * addressing on the weight pointer), the low-rank products of the unfused form and the merged
 * copies of the fused form. */
#include "lora_impl.h"

#include "error.h"
#include "gemm.h"
#include "gemm_fast.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t slot_of(const void *p, size_t mask) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 29;
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & mask;
}

int cvx_lora_build_index(cvx_lora_set *s) {
    size_t cap = 16;
    while (cap < 2 * (size_t)s->n_layers) cap *= 2;
    s->slots = cvx_calloc(cap, sizeof *s->slots);
    s->mask = cap - 1;
    for (int i = 0; i < s->n_layers; i++) {
        size_t k = slot_of(s->layers[i].w, s->mask);
        while (s->slots[k]) {
            if (s->layers[s->slots[k] - 1].w == s->layers[i].w)
                return cvx_error("LoRA targets '%s' and '%s' are the same weight tensor",
                                 s->targets[s->layers[s->slots[k] - 1].target].name, s->targets[s->layers[i].target].name);
            k = (k + 1) & s->mask;
        }
        s->slots[k] = i + 1;
    }
    return 0;
}

const cvx_lora_layer *cvx_lora_find(const cvx_lora_set *s, const cvx_tensor *W) {
    if (!s || !s->n_layers) return NULL;
    for (size_t k = slot_of(W, s->mask);; k = (k + 1) & s->mask) {
        int v = s->slots[k];
        if (!v) return NULL;
        if (s->layers[v - 1].w == W) return &s->layers[v - 1];
    }
}

void cvx_lora_fused(const cvx_lora_layer *l, const cvx_tensor **W, const cvx_tensor **b) {
    if (!l->fused) return;
    *W = &l->fw;
    if (l->has_fb) *b = &l->fb;
}

/* C[M, N] (+)= A[M, K] · Bmᵀ with Bm [N, K] a tensor of any operand dtype, at ctx's precision. */
static void product_bt(cvx_ctx *ctx, const float *A, int M, int K, const cvx_tensor *Bm, int N, float beta, float *C) {
    cvx_flops_add(ctx, 2.0 * M * N * K);
    if (ctx->kernels) {
        cvx_mat a = {A, CVX_F32, K, 0}, b = {Bm->data, Bm->dtype, K, 1};   /* Bmᵀ: [K, N] */
        CVX_CHECK(cvx_matmul(ctx->kernels, ctx->precision, M, N, K, a, b, NULL, beta, C, N) == 0);
        return;
    }
    float *w = cvx_tensor_f32_dup(Bm);   /* no oneDNN: f32 only, small matrices */
    cvx_sgemm_fixed(0, 1, M, N, K, A, K, w, K, NULL, beta, C, N);
    free(w);
}

void cvx_lora_apply(cvx_ctx *ctx, const cvx_lora_layer *l, const float *x, int M, int K, float *y) {
    if (l->fused || M <= 0) return;
    const int N = (int)l->w->shape[0];
    for (int a = 0; a < l->n_terms; a++) {
        const lora_term *t = &l->terms[a];
        if (t->A) {
            const int r = t->rank;
            const float s = (float)t->scale;
            float *u = cvx_scratch_get(&ctx->lora_u, (size_t)M * r);
            product_bt(ctx, x, M, K, t->A, r, 0.0f, u);   // u = x Aᵀ [M, r]
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < (size_t)M * r; i++) u[i] *= s;
            product_bt(ctx, u, M, r, t->B, N, 1.0f, y);   // y += u Bᵀ [M, N]
        }
        if (t->bias) {
            float *bv = cvx_tensor_f32_dup(t->bias);
            const float s = (float)t->bias_scale;
            for (int j = 0; j < N; j++) bv[j] *= s;
#pragma omp parallel for schedule(static)
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) y[(size_t)i * N + j] += bv[j];
            free(bv);
        }
    }
}

/* ------------------------------------------------------------------ fused */

/* f32 values → a new buffer in dtype d (F32 taken over, BF16 / F16 rounded to nearest even). */
static void *narrow(float *v, size_t n, cvx_dtype d) {
    if (d == CVX_F32) return v;
    uint16_t *o = cvx_malloc(n * sizeof *o);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) o[i] = d == CVX_BF16 ? cvx_f32_to_bf16(v[i]) : cvx_f32_to_f16(v[i]);
    free(v);
    return o;
}

/* W as f32 in parallel chunks (whole blocks for the block-quantized types). */
static void widen(const cvx_tensor *w, float *dst, size_t n) {
    const size_t blk = (size_t)cvx_dtype_block(w->dtype), chunk = blk * ((65536 + blk - 1) / blk);
    const size_t bytes = cvx_dtype_block_bytes(w->dtype) * (chunk / blk);
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < (n + chunk - 1) / chunk; c++) {
        size_t lo = c * chunk, len = n - lo < chunk ? n - lo : chunk;
        cvx_to_f32_n(w->dtype, (const unsigned char *)w->data + c * bytes, dst + lo, len);
    }
}

static int is_storage_float(cvx_dtype d) { return d == CVX_F32 || d == CVX_BF16 || d == CVX_F16; }

/* peft Linear.merge per adapter: W += (B @ A) · scaling with the product in f32 (get_delta_weight
 * casts bf16/f16 to f32 on CPU) and the sum in W's dtype; the bias delta scaled as in the unfused
 * forward (peft >= 0.16; 0.15.2 added it unscaled). A weight of another dtype (quantized) becomes F32. */
static int fuse_layer(cvx_lora_set *s, cvx_lora_layer *l) {
    const cvx_tensor *w = l->w;
    const int N = (int)w->shape[0], K = (int)w->shape[1];
    const size_t nk = (size_t)N * K;
    if (!cvx_dtype_to_f32_ok(w->dtype))
        return cvx_error("%s: LoRA layer '%s' has dtype %s, which cannot be fused", w->file, s->targets[l->target].name,
                         cvx_dtype_name(w->dtype));
    const cvx_dtype wd = is_storage_float(w->dtype) ? w->dtype : CVX_F32;
    float *W = cvx_malloc(nk * sizeof *W), *D = cvx_malloc(nk * sizeof *D);
    widen(w, W, nk);
    float *bsum = NULL;
    for (int a = 0; a < l->n_terms; a++) {
        const lora_term *t = &l->terms[a];
        if (t->A) {
            float *A = cvx_tensor_f32_dup(t->A), *B = cvx_tensor_f32_dup(t->B);
            /* peft's get_delta_weight: D = (B·A)·scale (the fixed chains: the same bits on every CPU) */
            cvx_sgemm_fixed(0, 0, N, K, t->rank, B, t->rank, A, K, NULL, 0.0f, D, K);
            const float sc = (float)t->scale;
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < nk; i++) D[i] *= sc;
            if (wd == CVX_F32) {
#pragma omp parallel for schedule(static)
                for (size_t i = 0; i < nk; i++) W[i] += D[i];
            } else {   /* the delta cast to W's dtype, then added in it: W = round(W + round(D)) */
                const int bf = wd == CVX_BF16;
#pragma omp parallel for schedule(static)
                for (size_t i = 0; i < nk; i++) {
                    float d = bf ? cvx_bf16_to_f32(cvx_f32_to_bf16(D[i])) : cvx_f16_to_f32(cvx_f32_to_f16(D[i]));
                    float v = W[i] + d;
                    W[i] = bf ? cvx_bf16_to_f32(cvx_f32_to_bf16(v)) : cvx_f16_to_f32(cvx_f32_to_f16(v));
                }
            }
            free(A);
            free(B);
        }
        if (t->bias) {
            if (!bsum) {
                bsum = cvx_calloc((size_t)N, sizeof *bsum);
                if (l->b) cvx_tensor_to_f32(l->b, bsum);
            }
            float *bv = cvx_tensor_f32_dup(t->bias);
            for (int j = 0; j < N; j++) bsum[j] += (float)t->bias_scale * bv[j];
            free(bv);
        }
    }
    free(D);
    l->fw = *w;
    l->fw.dtype = wd;
    l->fw.nbytes = nk * cvx_dtype_size(wd);
    l->fw.data = l->fw_data = narrow(W, nk, wd);
    s->fused_bytes += l->fw.nbytes;
    if (bsum) {
        const cvx_dtype bd = l->b && is_storage_float(l->b->dtype) ? l->b->dtype : CVX_F32;
        if (l->b) l->fb = *l->b;
        else l->fb = (cvx_tensor){.name = w->name, .ndim = 1, .shape = {N}, .numel = N, .file = w->file};
        l->fb.dtype = bd;
        l->fb.nbytes = (size_t)N * cvx_dtype_size(bd);
        l->fb.data = l->fb_data = narrow(bsum, (size_t)N, bd);
        l->has_fb = 1;
        s->fused_bytes += l->fb.nbytes;
    }
    l->fused = 1;
    return 0;
}

int cvx_lora_fuse_all(cvx_lora_set *s) {
    for (int i = 0; i < s->n_layers; i++)
        if (fuse_layer(s, &s->layers[i])) return -1;
    return 0;
}

const cvx_tensor *cvx_lora_fused_weight(const cvx_lora_set *s, const cvx_tensor *W) {
    const cvx_lora_layer *l = cvx_lora_find(s, W);
    return l && l->fused ? &l->fw : NULL;
}

const cvx_tensor *cvx_lora_fused_bias(const cvx_lora_set *s, const cvx_tensor *W) {
    const cvx_lora_layer *l = cvx_lora_find(s, W);
    return l && l->fused && l->has_fb ? &l->fb : NULL;
}
