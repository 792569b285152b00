/* Convolution weights in their kernels' layouts, made once per context (conv.h, cvx_conv_weights).
 *
 * A VAE runs every conv layer once per chunk of frames (and per spatial tile); transforming its
 * weights at every call (G g Gᵀ of every 3×3 kernel, then the bf16 rounding in bf16 mode) costs as
 * much as the conv itself at small latents. Here each (tensor, layout, dtype) is made on first use
 * into a buffer the context owns; the next calls read it. The numbers are those of the per-call
 * path (same functions on the same input), so the outputs are bit-identical. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conv.h"
#include "dtype.h"
#include "error.h"
#include "gemm_fast.h"
#include "weight_caches.h"

typedef struct {
    const cvx_tensor *t;
    const void *data;
    cvx_dtype dtype;
    uint64_t sample;   /* 16 words of its bytes: another weight mapped at the same address is not it */
    int algo, bf16, Cout, Cin, kt, taps;
    int packed;   /* 1 + the tile set of cvx_conv_pack_weights_gemm, or 0: row-major */
    void *buf;
    size_t bytes;
} wentry;

struct cvx_conv_wcache {
    wentry *e;
    int n, cap;
    size_t bytes, budget;
    int given;   /* budget set by the caller or CVX_PACK_BUDGET_MB: MemAvailable not consulted */
    int full;    /* over budget once: per-call transforms from then on (until trimmed) */
};

static struct cvx_conv_wcache *cache_of(cvx_ctx *ctx) {
    if (ctx->conv_wcache) return ctx->conv_wcache;
    struct cvx_conv_wcache *c = cvx_calloc(1, sizeof *c);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    /* default: a quarter of the RAM, at most 4 GiB — the decode's activations (a video VAE's causal
     * frames: 5–13 GB at 480p–720p untiled) come after the weights are cached, so the cache must
     * leave them room; the largest decoders (HunyuanVideo-1.5: ~14 GB transformed in f32) keep
     * their first layers and transform the rest per call */
    const size_t cap = (size_t)4 << 30;
    c->budget = pages > 0 && page > 0 ? (size_t)pages * (size_t)page / 4 : 0;
    if (c->budget > cap) c->budget = cap;
    const char *b = getenv("CVX_PACK_BUDGET_MB");
    if (b && b[0]) c->budget = (size_t)strtoull(b, NULL, 10) << 20, c->given = 1;
    return ctx->conv_wcache = c;
}

void cvx_conv_wcache_trim(struct cvx_conv_wcache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) free(c->e[i].buf);
    c->n = 0, c->bytes = 0, c->full = 0;
}

void cvx_conv_wcache_free(struct cvx_conv_wcache *c) {
    if (!c) return;
    cvx_conv_wcache_trim(c);
    free(c->e);
    free(c);
}

void cvx_conv_wcache_set_budget(cvx_ctx *ctx, size_t bytes) {
    struct cvx_conv_wcache *c = cache_of(ctx);
    c->budget = bytes, c->given = 1, c->full = 0;
}

size_t cvx_conv_wcache_bytes(const cvx_ctx *ctx) { return ctx->conv_wcache ? ctx->conv_wcache->bytes : 0; }
int cvx_conv_wcache_count(const cvx_ctx *ctx) { return ctx->conv_wcache ? ctx->conv_wcache->n : 0; }

/* Floats of the f32 layout: [taps, Cout, Cin] packed, [16 | 36, Cout, kt·Cin] Winograd. */
static size_t layout_floats(cvx_conv_algo algo, int Cout, int Cin, int kt, int taps) {
    const size_t n = algo == CVX_CONV_WINOGRAD4 ? 36 : algo == CVX_CONV_WINOGRAD2 ? 16 : 0;
    return n ? n * Cout * (size_t)kt * Cin : (size_t)taps * Cout * Cin;
}

/* The f32 layout of w written to dst (the per-call path's functions). */
static void make_f32(cvx_ctx *ctx, const cvx_tensor *w, cvx_conv_algo algo, int Cout, int Cin, int kt, int taps,
                     float *dst) {
    if (algo == CVX_CONV_WINOGRAD4) cvx_conv_winograd4_weights(ctx, w, Cout, Cin, kt, dst);
    else if (algo == CVX_CONV_WINOGRAD2) cvx_conv_winograd_weights(ctx, w, Cout, Cin, kt, dst);
    else cvx_conv_pack_weights(ctx, w, Cout, Cin, taps, dst);
}

/* The weights made into the context's scratch (valid until the next conv): packed for the
 * fixed-chain tiles of isa when pk (cvx_conv_pack_weights_gemm: transformed straight into the
 * packed layout in L2-sized pieces, so no product packs them again), else row-major, rounded to
 * bf16 when bf16. */
static const void *per_call(cvx_ctx *ctx, const cvx_tensor *w, cvx_conv_algo algo, int Cout, int Cin, int kt,
                            int taps, int bf16, int isa, int pk) {
    if (pk) {
        float *f = cvx_scratch_get(&ctx->conv_w, cvx_conv_packed_floats(isa, algo, Cout, Cin, kt, taps));
        cvx_conv_pack_weights_gemm(ctx, w, algo, Cout, Cin, kt, taps, isa, f);
        return f;
    }
    const size_t n = layout_floats(algo, Cout, Cin, kt, taps);
    float *f = cvx_scratch_get(&ctx->conv_w, n);
    make_f32(ctx, w, algo, Cout, Cin, kt, taps, f);
    if (!bf16) return f;
    uint16_t *b = (uint16_t *)cvx_scratch_get(&ctx->bf16_w, (n + 1) / 2);
    cvx_f32_to_bf16_fast(f, b, n);
    return b;
}

/* The entry of (w, algo, bf16, layout: isa ≥ 0 packed for those tiles, −1 row-major), made on first use;
 * one that does not fit the budget is made per call in the same layout (per_call). */
static const void *weights(cvx_ctx *ctx, const cvx_tensor *w, cvx_conv_algo algo, int Cout, int Cin, int kt, int taps,
                           int bf16, int isa, int *packed) {
    const int pk = isa >= 0 && !bf16 ? isa + 1 : 0;
    *packed = 0;
    CVX_CHECK(algo == CVX_CONV_DIRECT || taps == 9 * kt);
    struct cvx_conv_wcache *c = cache_of(ctx);
    if (!c->budget) return per_call(ctx, w, algo, Cout, Cin, kt, taps, bf16, isa, *packed = pk != 0);
    const uint64_t sample = cvx_bytes_sample(w->data, w->nbytes);
    for (int i = 0; i < c->n; i++) {
        wentry *e = &c->e[i];
        if (e->t != w || e->data != w->data || e->dtype != w->dtype || e->algo != (int)algo || e->bf16 != bf16 ||
            e->Cout != Cout || e->Cin != Cin || e->kt != kt || e->taps != taps || e->packed != pk)
            continue;
        if (e->sample == sample) {
            *packed = pk != 0;
            return e->buf;
        }
        c->bytes -= e->bytes;   /* another weight now lives at this address: make it again */
        free(e->buf);
        *e = c->e[--c->n];
        break;
    }
    if (c->full) return per_call(ctx, w, algo, Cout, Cin, kt, taps, bf16, isa, *packed = pk != 0);
    const size_t n = pk ? cvx_conv_packed_floats(isa, algo, Cout, Cin, kt, taps) : layout_floats(algo, Cout, Cin, kt, taps),
                 need = n * (bf16 ? 2 : 4);
    const size_t avail = c->given ? (size_t)-1 : cvx_mem_available(), margin = (size_t)4 << 30;
    if (c->bytes + need > c->budget || avail < margin || need > avail - margin) {
        /* per call from here on (filling the budget's rest with the later weights that fit was
         * tried: more resident memory, for one transform saved per weight and chunk) */
        char av[48] = "";
        if (avail != (size_t)-1) snprintf(av, sizeof av, ", %zu MiB available", avail >> 20);
        cvx_warn("%s: conv weight [%d, %d, %d taps] not kept transformed (%zu MiB kept, budget %zu MiB%s); "
                 "it and the conv weights after it are transformed at every call",
                 w->file ? w->file : "(conv)", Cout, Cin, taps, c->bytes >> 20, c->budget >> 20, av);
        c->full = 1;
        return per_call(ctx, w, algo, Cout, Cin, kt, taps, bf16, isa, *packed = pk != 0);
    }
    void *buf;
    if (bf16) {   /* f32 layout in the scratch, rounded once into the entry */
        float *f = cvx_scratch_get(&ctx->conv_w, n);
        make_f32(ctx, w, algo, Cout, Cin, kt, taps, f);
        buf = cvx_alloc_aligned_at(need, __FILE__, __LINE__);
        cvx_f32_to_bf16_fast(f, buf, n);
    } else if (pk) {
        buf = cvx_alloc_f32(n);
        cvx_conv_pack_weights_gemm(ctx, w, algo, Cout, Cin, kt, taps, isa, buf);
    } else {
        buf = cvx_alloc_f32(n);
        make_f32(ctx, w, algo, Cout, Cin, kt, taps, buf);
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->e = realloc(c->e, sizeof *c->e * (size_t)c->cap);
        if (!c->e) cvx_die("out of memory (conv weight cache)");
    }
    c->e[c->n++] = (wentry){w, w->data, w->dtype, sample, (int)algo, bf16, Cout, Cin, kt, taps, pk, buf, need};
    c->bytes += need;
    *packed = pk != 0;
    return buf;
}

const void *cvx_conv_weights(cvx_ctx *ctx, const cvx_tensor *w, cvx_conv_algo algo, int Cout, int Cin, int kt,
                             int taps, int bf16) {
    int packed;
    return weights(ctx, w, algo, Cout, Cin, kt, taps, bf16, -1, &packed);
}

const void *cvx_conv_weights_for(cvx_ctx *ctx, const cvx_tensor *w, cvx_conv_algo algo, int Cout, int Cin, int kt,
                                 int taps, int bf16, int *packed) {
    return weights(ctx, w, algo, Cout, Cin, kt, taps, bf16, bf16 ? -1 : cvx_conv_gemm_isa(ctx), packed);
}
