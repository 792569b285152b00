/* cvx_matmul and friends: f32 on the fixed-chain GEMM (gemm_fixed.c, the same bits on every CPU),
 * oneDNN matmul primitives (bf16; f32 for the bf16 fallback) cached per shape in a caller-owned
 * context, the widen-to-f32 fallback, and the reference loop.
 * Why oneDNN: measured on a 2-core AVX512-BF16 EPYC (docs/performance.md, "bf16 kernels"), its
 * brgemm matmul reaches ~1.7× OpenBLAS in f32 and ~3.5× in bf16, reading bf16 weights in place. */
#include "gemm_fast.h"
#include "error.h"
#include "gemm.h"
#include "gemm_quant.h"
#include "weight_caches.h"

#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { CACHE_SLOTS = 64 };
/* From this many rows on, bf16 weights are reordered per call into oneDNN's blocked layout (a
 * transient copy of one matrix in the context's scratch): measured per CPU-second, blocked runs
 * ~15% faster than reading the plain [N, K] storage, which repays the reorder only when the
 * product is long (M = 17776: ~180 ms GEMM; M = 226..2432: the reorder costs more than it saves). */
enum { REORDER_MIN_M = 8192 };

typedef struct {
    int M, N, K, prec, has_bias, ldc, blocked;
    dnnl_data_type_t ta, tb;
    dnnl_dims_t sa, sb;   /* strides (2 used; the rest zero) */
    float beta;
} prim_key;

typedef struct {
    int used;
    prim_key key;
    dnnl_primitive_t prim;
    dnnl_memory_t ma, mb, mbias, mc;
    dnnl_primitive_t reorder;   /* blocked: plain B → mb_blk */
    dnnl_memory_t mb_blk;
    size_t blk_bytes;
    int sgemm_tiles;            /* f32 on oneDNN's gemm-based matmul: run as fixed_matmul instead */
} prim_slot;

typedef struct {
    void *p;
    size_t cap;
} scratch;

/* A pre-packed linear weight (gemm_fast.h, "Pre-packed linear weights"). */
enum { PACK_ONEDNN = 1, PACK_F32_ROUNDED = 2, PACK_F32 = 3 };
typedef struct {
    const void *src;        /* W->data */
    int N, K, kind;
    cvx_dtype dt;
    uint64_t sample;        /* 16 points of W's bytes: a new weight at a reused address is not a hit */
    void *buf;
    size_t bytes;
    dnnl_memory_desc_t md;  /* PACK_ONEDNN: the layout oneDNN chose for dnnl_format_tag_any */
} pack_entry;

struct cvx_kernels {
    cvx_cpu_features cpu;        /* the kernels' view: detected, AVX-512 masked off by CVX_KPATH_AVX2 */
    cvx_cpu_features detected;
    cvx_kpath force;
    int no_reorder;   /* benchmarks: never reorder B (compare with the blocked path) */
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    prim_slot slot[CACHE_SLOTS];
    int next_evict;
    scratch sa, sb, sbias, sblk;   /* converted A, converted B, f32 bias, blocked B */
    scratch ext[CVX_KERNELS_SCRATCH_SLOTS];   /* cvx_kernels_scratch (the quantized linear's tiles) */
    int qdot, q8_force;            /* quantized weights: cvx_qdot, cvx_q8_kernel (gemm_quant.h) */
    pack_entry *pk;                /* pre-packed weights */
    int npk, cap_pk, pack_full;   /* pack_full: over budget once; no more packing until unpack/new budget */
    int pack_given;                /* budget set by the caller or CVX_PACK_BUDGET_MB: MemAvailable not consulted */
    size_t pack_bytes, pack_budget;
};

static void *scratch_get(scratch *s, size_t bytes) {
    if (s->cap < bytes) {
        free(s->p);
        s->p = cvx_alloc_aligned_at(bytes, __FILE__, __LINE__);
        s->cap = bytes;
    }
    return s->p;
}

static void scratch_free(scratch *s) {
    free(s->p);
    s->p = NULL;
    s->cap = 0;
}

cvx_kernels *cvx_kernels_new(void) {
    cvx_kernels *kc = cvx_calloc(1, sizeof *kc);
    cvx_cpu_detect(&kc->detected);
    kc->cpu = kc->detected;
    if (dnnl_engine_create(&kc->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&kc->stream, kc->eng, dnnl_stream_default_flags) != dnnl_success) {
        if (kc->eng) dnnl_engine_destroy(kc->eng);
        free(kc);
        cvx_error("oneDNN: cannot create the CPU engine/stream");
        return NULL;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    kc->pack_budget = pages > 0 && page > 0 ? (size_t)pages * (size_t)page / 2 : 0;
    const char *b = getenv("CVX_PACK_BUDGET_MB");
    if (b && b[0]) {
        kc->pack_budget = (size_t)strtoull(b, NULL, 10) << 20;
        kc->pack_given = 1;
    }
    return kc;
}

static void drop_slot(prim_slot *s) {
    if (!s->used) return;
    dnnl_primitive_destroy(s->prim);
    dnnl_memory_destroy(s->ma);
    dnnl_memory_destroy(s->mb);
    if (s->mbias) dnnl_memory_destroy(s->mbias);
    dnnl_memory_destroy(s->mc);
    if (s->reorder) dnnl_primitive_destroy(s->reorder);
    if (s->mb_blk) dnnl_memory_destroy(s->mb_blk);
    memset(s, 0, sizeof *s);
}

void cvx_kernels_unpack(cvx_kernels *kc) {
    for (int i = 0; i < kc->npk; i++) free(kc->pk[i].buf);
    free(kc->pk);
    kc->pk = NULL;
    kc->npk = kc->cap_pk = 0;
    kc->pack_bytes = 0;
    kc->pack_full = 0;
}

void cvx_kernels_set_pack_budget(cvx_kernels *kc, size_t bytes) {
    kc->pack_budget = bytes;
    kc->pack_given = 1;
    kc->pack_full = 0;
}
size_t cvx_kernels_pack_bytes(const cvx_kernels *kc) { return kc->pack_bytes; }
int cvx_kernels_pack_count(const cvx_kernels *kc) { return kc->npk; }

void cvx_kernels_trim(cvx_kernels *kc) {
    cvx_kernels_unpack(kc);
    for (int i = 0; i < CACHE_SLOTS; i++) drop_slot(&kc->slot[i]);
    scratch_free(&kc->sa);
    scratch_free(&kc->sb);
    scratch_free(&kc->sbias);
    scratch_free(&kc->sblk);
    for (int i = 0; i < CVX_KERNELS_SCRATCH_SLOTS; i++) scratch_free(&kc->ext[i]);
}

void cvx_kernels_free(cvx_kernels *kc) {
    if (!kc) return;
    cvx_kernels_trim(kc);
    dnnl_stream_destroy(kc->stream);
    dnnl_engine_destroy(kc->eng);
    free(kc);
}

const cvx_cpu_features *cvx_kernels_cpu(const cvx_kernels *kc) { return &kc->cpu; }
void cvx_kernels_force(cvx_kernels *kc, cvx_kpath path) {
    kc->force = path;
    kc->cpu = kc->detected;
    if (path == CVX_KPATH_AVX2)   /* as a CPU without AVX-512 (AVX-VNNI and AVX2 stay) */
        kc->cpu.avx512f = kc->cpu.avx512_bf16 = kc->cpu.amx_bf16 = kc->cpu.avx512_vnni = 0;
}
void cvx_kernels_set_reorder(cvx_kernels *kc, int on) { kc->no_reorder = !on; }
size_t cvx_kernels_scratch_bytes(const cvx_kernels *kc) {
    size_t n = kc->sa.cap + kc->sb.cap + kc->sbias.cap + kc->sblk.cap;
    for (int i = 0; i < CVX_KERNELS_SCRATCH_SLOTS; i++) n += kc->ext[i].cap;
    return n;
}
void *cvx_kernels_scratch(cvx_kernels *kc, int slot, size_t bytes) {
    CVX_CHECK(slot >= 0 && slot < CVX_KERNELS_SCRATCH_SLOTS);
    return scratch_get(&kc->ext[slot], bytes ? bytes : 1);
}
void cvx_kernels_set_qdot(cvx_kernels *kc, int qdot, int q8_kernel) { kc->qdot = qdot, kc->q8_force = q8_kernel; }
int cvx_kernels_qdot(const cvx_kernels *kc) { return kc->qdot; }
int cvx_kernels_q8_kernel(const cvx_kernels *kc) { return kc->q8_force; }

int cvx_kernels_bf16_native(const cvx_kernels *kc) {
    return kc->force == CVX_KPATH_AUTO && (kc->cpu.avx512_bf16 || kc->cpu.amx_bf16);
}

int cvx_kernels_avx512(const cvx_kernels *kc) { return kc->cpu.avx512f; }

/* bf16 products on oneDNN's bf16 matmul: the CPU's bf16 units, or forced (oneDNN emulates). */
static int onednn_bf16(const cvx_kernels *kc) {
    return cvx_kernels_bf16_native(kc) || (kc->force == CVX_KPATH_ONEDNN_BF16 && kc->cpu.avx512f);
}

int cvx_kernels_f32_fixed(const cvx_kernels *kc) { return kc->force != CVX_KPATH_LIBRARY_F32; }

const char *cvx_kernels_path(const cvx_kernels *kc, cvx_precision p) {
    if (p == CVX_PRECISION_BF16) return onednn_bf16(kc) ? "onednn-bf16" : "fallback-bf16";
    if (!cvx_kernels_f32_fixed(kc)) return "onednn-f32 (library)";
    return cvx_kernels_avx512(kc) ? "fixed-f32-avx512" : "fixed-f32";
}

/* ---- conversions ---- */

void cvx_f32_to_bf16_fast(const float *src, uint16_t *dst, size_t n) {
    const size_t chunk = 1 << 15;
#pragma omp parallel for schedule(static) if (n > 4 * chunk)
    for (size_t c = 0; c < (n + chunk - 1) / chunk; c++) {
        size_t lo = c * chunk, len = n - lo < chunk ? n - lo : chunk;
        cvx_f32_to_bf16_n(src + lo, dst + lo, len);   /* scalar RNE */
    }
}

void cvx_round_bf16_inplace(float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 17))
    for (size_t i = 0; i < n; i++) x[i] = cvx_bf16_to_f32(cvx_f32_to_bf16(x[i]));
}

static float elem_f32(const cvx_mat *m, size_t r, size_t c) {
    size_t i = m->trans ? c * (size_t)m->ld + r : r * (size_t)m->ld + c;
    const uint16_t *h = m->data;
    switch (m->dtype) {
    case CVX_F32: return ((const float *)m->data)[i];
    case CVX_BF16: return cvx_bf16_to_f32(h[i]);
    case CVX_F8_E4M3: return cvx_f8e4m3_to_f32(((const uint8_t *)m->data)[i]);
    default: return cvx_f16_to_f32(h[i]);
    }
}

static int check_mat(const cvx_mat *m, int rows, int cols, const char *name) {
    if (m->dtype != CVX_F32 && m->dtype != CVX_BF16 && m->dtype != CVX_F16 && m->dtype != CVX_F8_E4M3)
        return cvx_error("matmul: operand %s has dtype %s, expected F32, BF16, F16 or F8_E4M3", name,
                         cvx_dtype_name(m->dtype));
    int need = m->trans ? rows : cols;
    if (m->ld < need || !m->data) return cvx_error("matmul: operand %s has ld %d < %d or no data", name, m->ld, need);
    return 0;
}

/* Copy operand m ([rows, cols] logical, its own layout kept: rows' = trans ? cols : rows, stored
 * with leading dimension ld) into a dense buffer of dtype `to` (F32 or BF16), rounding to bf16 first
 * when round_bf16. Returns the new operand. Layout is preserved so oneDNN sees the same strides. */
static cvx_mat convert_mat(const cvx_mat *m, int rows, int cols, cvx_dtype to, int round_bf16, scratch *s) {
    int outer = m->trans ? cols : rows, inner = m->trans ? rows : cols;
    size_t es = cvx_dtype_size(m->dtype);
    cvx_mat r = {NULL, to, inner, m->trans};
    void *dst = scratch_get(s, (size_t)outer * inner * cvx_dtype_size(to) + 64);
    r.data = dst;
#pragma omp parallel for schedule(static) if ((size_t)outer * inner > (1 << 16))
    for (int o = 0; o < outer; o++) {
        const unsigned char *src = (const unsigned char *)m->data + (size_t)o * m->ld * es;
        if (to == CVX_BF16) {
            uint16_t *d = (uint16_t *)dst + (size_t)o * inner;
            if (m->dtype == CVX_BF16) memcpy(d, src, (size_t)inner * 2);
            else if (m->dtype == CVX_F32) cvx_f32_to_bf16_n((const float *)src, d, (size_t)inner);
            else if (m->dtype == CVX_F8_E4M3)   /* every e4m3 value is a bf16 value: exact */
                for (int i = 0; i < inner; i++) d[i] = cvx_f32_to_bf16(cvx_f8e4m3_to_f32(src[i]));
            else
                for (int i = 0; i < inner; i++) d[i] = cvx_f32_to_bf16(cvx_f16_to_f32(((const uint16_t *)src)[i]));
        } else {
            float *d = (float *)dst + (size_t)o * inner;
            cvx_to_f32_n(m->dtype, src, d, (size_t)inner);
            if (round_bf16 && m->dtype != CVX_BF16)
                for (int i = 0; i < inner; i++) d[i] = cvx_bf16_to_f32(cvx_f32_to_bf16(d[i]));
        }
    }
    return r;
}

/* ---- reference ---- */

int cvx_matmul_ref(cvx_precision p, int M, int N, int K, cvx_mat A, cvx_mat B, const float *bias, float beta,
                   float *C, int ldc) {
    if (check_mat(&A, M, K, "A") || check_mat(&B, K, N, "B")) return -1;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                float a = elem_f32(&A, (size_t)i, (size_t)k), b = elem_f32(&B, (size_t)k, (size_t)j);
                if (p == CVX_PRECISION_BF16) {
                    a = cvx_bf16_to_f32(cvx_f32_to_bf16(a));
                    b = cvx_bf16_to_f32(cvx_f32_to_bf16(b));
                }
                acc += (double)a * b;
            }
            if (bias) acc += bias[j];
            if (beta != 0) acc += (double)beta * C[(size_t)i * ldc + j];
            C[(size_t)i * ldc + j] = (float)acc;
        }
    return 0;
}

/* ---- f32: the fixed chains ----
 * oneDNN's gemm-based matmul (its jit sgemm, on CPUs without brgemm) and OpenBLAS split the K sum
 * by thread count and pick their k order by block shape: their bits change with the threads and
 * the rows per call (MPI ranks); oneDNN's brgemm (AVX-512) keeps its own k order, not the AVX2
 * one. f32 products are cvx_sgemm_fixed (gemm_fixed.c): one FMA chain per element, the same bits
 * on every CPU, at any thread or rank count (its AVX-512 tiles where the CPU has them). */
static void fixed_matmul(const cvx_kernels *kc, int M, int N, int K, const cvx_mat *A, const cvx_mat *B,
                         const float *bias, float beta, float *C, int ldc) {
    cvx_sgemm_fixed_isa(cvx_kernels_avx512(kc), A->trans, B->trans, M, N, K, A->data, A->ld, B->data, B->ld, bias,
                        beta, C, ldc);
}

/* ---- oneDNN ---- */

static dnnl_data_type_t dnnl_dt(cvx_dtype t) { return t == CVX_BF16 ? dnnl_bf16 : dnnl_f32; }

static void strides_of(const cvx_mat *m, dnnl_dims_t s) {
    s[0] = m->trans ? 1 : m->ld;
    s[1] = m->trans ? m->ld : 1;
}

/* The cached primitive for this key, created on first use; NULL if oneDNN has no implementation. */
static prim_slot *get_prim(cvx_kernels *kc, const prim_key *key) {
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (kc->slot[i].used && !memcmp(&kc->slot[i].key, key, sizeof *key)) return &kc->slot[i];
    int i = 0;
    while (i < CACHE_SLOTS && kc->slot[i].used) i++;
    if (i == CACHE_SLOTS) {  /* full: evict round-robin */
        i = kc->next_evict;
        kc->next_evict = (kc->next_evict + 1) % CACHE_SLOTS;
        drop_slot(&kc->slot[i]);
    }
    prim_slot *s = &kc->slot[i];
    dnnl_memory_desc_t ma, mb, mb_any, mbias, mc;
    dnnl_dims_t da = {key->M, key->K}, db = {key->K, key->N}, dc = {key->M, key->N}, dbias = {1, key->N};
    dnnl_dims_t sc = {key->ldc, 1}, sbias = {key->N, 1};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_matmul_desc_t md;
    int ok = dnnl_memory_desc_init_by_strides(&ma, 2, da, key->ta, key->sa) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&mb, 2, db, key->tb, key->sb) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&mc, 2, dc, dnnl_f32, sc) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&mbias, 2, dbias, dnnl_f32, sbias) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&mb_any, 2, db, key->tb, dnnl_format_tag_any) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &ma, key->blocked ? &mb_any : &mb, key->has_bias ? &mbias : NULL, &mc) ==
                 dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && key->beta != 0)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, key->beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, kc->eng, NULL) == dnnl_success &&
         dnnl_primitive_create(&s->prim, pd) == dnnl_success;
    if (ok) {
        ok = dnnl_memory_create(&s->ma, &ma, kc->eng, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&s->mb, &mb, kc->eng, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&s->mc, &mc, kc->eng, DNNL_MEMORY_NONE) == dnnl_success &&
             (!key->has_bias || dnnl_memory_create(&s->mbias, &mbias, kc->eng, DNNL_MEMORY_NONE) == dnnl_success);
    }
    if (ok && key->blocked) {
        const dnnl_memory_desc_t *blk = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        dnnl_primitive_desc_t rpd = NULL;
        ok = blk && dnnl_reorder_primitive_desc_create(&rpd, &mb, kc->eng, blk, kc->eng, NULL) == dnnl_success &&
             dnnl_primitive_create(&s->reorder, rpd) == dnnl_success &&
             dnnl_memory_create(&s->mb_blk, blk, kc->eng, DNNL_MEMORY_NONE) == dnnl_success;
        if (ok) s->blk_bytes = dnnl_memory_desc_get_size(blk);
        if (rpd) dnnl_primitive_desc_destroy(rpd);
    }
    const char *impl = NULL;
    if (ok && key->ta == dnnl_f32 && key->tb == dnnl_f32 &&
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        s->sgemm_tiles = strncmp(impl, "gemm", 4) == 0;   /* "gemm:jit": the jit sgemm, K split by thread count */
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!ok) {
        if (s->prim) dnnl_primitive_destroy(s->prim);
        if (s->ma) dnnl_memory_destroy(s->ma);
        if (s->mb) dnnl_memory_destroy(s->mb);
        if (s->mc) dnnl_memory_destroy(s->mc);
        if (s->mbias) dnnl_memory_destroy(s->mbias);
        if (s->reorder) dnnl_primitive_destroy(s->reorder);
        if (s->mb_blk) dnnl_memory_destroy(s->mb_blk);
        memset(s, 0, sizeof *s);
        return NULL;
    }
    s->used = 1;
    s->key = *key;
    return s;
}

/* 0 on success, -1 when oneDNN has no primitive for it (caller falls back). */
static int run_dnnl(cvx_kernels *kc, cvx_precision p, int M, int N, int K, const cvx_mat *A, const cvx_mat *B,
                    const float *bias, float beta, float *C, int ldc, const pack_entry *pk) {
    prim_key key;
    memset(&key, 0, sizeof key);   /* padding too: the key is compared with memcmp */
    key.M = M; key.N = N; key.K = K; key.prec = p; key.has_bias = bias != NULL; key.ldc = ldc; key.beta = beta;
    key.blocked = p == CVX_PRECISION_BF16 && (pk || (M >= REORDER_MIN_M && !kc->no_reorder));
    key.ta = dnnl_dt(A->dtype);
    key.tb = dnnl_dt(B->dtype);
    strides_of(A, key.sa);
    strides_of(B, key.sb);
    prim_slot *s = get_prim(kc, &key);
    if (!s) return -1;
    if (pk) {   /* pre-packed: only when this shape's primitive wants the layout it was packed in */
        const dnnl_memory_desc_t *want = NULL;
        if (!s->mb_blk || dnnl_memory_get_memory_desc(s->mb_blk, &want) != dnnl_success || !want ||
            !dnnl_memory_desc_equal(want, &pk->md))
            return -1;
    }
    if (s->sgemm_tiles && kc->force != CVX_KPATH_LIBRARY_F32) {
        fixed_matmul(kc, M, N, K, A, B, bias, beta, C, ldc);
        return 0;
    }
    dnnl_memory_set_data_handle(s->ma, (void *)A->data);
    dnnl_memory_set_data_handle(s->mb, (void *)B->data);
    dnnl_memory_set_data_handle(s->mc, C);
    if (pk) dnnl_memory_set_data_handle(s->mb_blk, pk->buf);
    else if (s->reorder) {   /* B into the blocked layout, in the context's scratch (one matrix at a time) */
        dnnl_memory_set_data_handle(s->mb_blk, scratch_get(&kc->sblk, s->blk_bytes));
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, s->mb}, {DNNL_ARG_TO, s->mb_blk}};
        if (dnnl_primitive_execute(s->reorder, kc->stream, 2, ra) != dnnl_success) return -1;
    }
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, s->ma}, {DNNL_ARG_WEIGHTS, pk || s->reorder ? s->mb_blk : s->mb},
                               {DNNL_ARG_DST, s->mc}};
    int nargs = 3;
    if (bias) {
        dnnl_memory_set_data_handle(s->mbias, (void *)bias);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, s->mbias};
    }
    if (dnnl_primitive_execute(s->prim, kc->stream, nargs, args) != dnnl_success) return -1;
    dnnl_stream_wait(kc->stream);
    return 0;
}

/* b_ready: B is already what the f32 path reads (a packed f32 weight: converted, rounded in bf16 mode). */
static int matmul_impl(cvx_kernels *kc, cvx_precision p, int M, int N, int K, cvx_mat A, cvx_mat B,
                       const float *bias, float beta, float *C, int ldc, int b_ready) {
    if (check_mat(&A, M, K, "A") || check_mat(&B, K, N, "B")) return -1;
    if (M <= 0 || N <= 0) return 0;
    if (K <= 0) {   /* empty sum: C = bias + beta·C */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float *c = C + (size_t)i * ldc + j;
                *c = (beta != 0 ? beta * *c : 0.0f) + (bias ? bias[j] : 0.0f);
            }
        return 0;
    }
    if (p == CVX_PRECISION_BF16 && onednn_bf16(kc) && !b_ready) {
        /* bf16 units: every operand bf16 (stored bf16 read in place). */
        cvx_mat a = A.dtype == CVX_BF16 ? A : convert_mat(&A, M, K, CVX_BF16, 1, &kc->sa);
        cvx_mat b = B.dtype == CVX_BF16 ? B : convert_mat(&B, K, N, CVX_BF16, 1, &kc->sb);
        if (run_dnnl(kc, p, M, N, K, &a, &b, bias, beta, C, ldc, NULL) == 0) return 0;
        /* no bf16 primitive here: the f32 path below, from the original operands */
    }
    /* f32 arithmetic: operands f32, rounded to bf16 first in bf16 mode (the fallback). */
    int round = p == CVX_PRECISION_BF16;
    if (A.dtype != CVX_F32 || round) A = convert_mat(&A, M, K, CVX_F32, round, &kc->sa);
    if (!b_ready && (B.dtype != CVX_F32 || round)) B = convert_mat(&B, K, N, CVX_F32, round, &kc->sb);
    /* f32 mode: the fixed chains (CPU-independent bits). The bf16 fallback may take oneDNN's f32
     * matmul (brgemm on AVX-512: faster, its own k order); so may the benchmarks' LIBRARY_F32. */
    int library = round ? kc->force != CVX_KPATH_NO_ONEDNN : kc->force == CVX_KPATH_LIBRARY_F32;
    if (!library || run_dnnl(kc, CVX_PRECISION_F32, M, N, K, &A, &B, bias, beta, C, ldc, NULL))
        fixed_matmul(kc, M, N, K, &A, &B, bias, beta, C, ldc);
    return 0;
}

int cvx_matmul(cvx_kernels *kc, cvx_precision p, int M, int N, int K, cvx_mat A, cvx_mat B, const float *bias,
               float beta, float *C, int ldc) {
    return matmul_impl(kc, p, M, N, K, A, B, bias, beta, C, ldc, 0);
}

/* ---- pre-packed linear weights ---- */

/* Reorder Wᵀ (B = [K, N], W's plain [N, K] storage, bf16) into the layout oneDNN's matmul picks for
 * M rows; fills e->md, e->buf, e->bytes. 0, or -1 (no such primitive: the weight stays in place). */
static int pack_onednn(cvx_kernels *kc, int M, const cvx_mat *b, pack_entry *e) {
    dnnl_memory_desc_t ma, mb, mb_any, mc;
    dnnl_dims_t da = {M, e->K}, db = {e->K, e->N}, dc = {M, e->N}, sa = {e->K, 1}, sc = {e->N, 1}, sb;
    strides_of(b, sb);
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL, rpd = NULL;
    dnnl_primitive_t reorder = NULL;
    dnnl_memory_t from = NULL, to = NULL;
    int ok = dnnl_memory_desc_init_by_strides(&ma, 2, da, dnnl_bf16, sa) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&mb, 2, db, dnnl_bf16, sb) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&mc, 2, dc, dnnl_f32, sc) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&mb_any, 2, db, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &ma, &mb_any, NULL, &mc) == dnnl_success &&
             dnnl_primitive_desc_create(&pd, &md, NULL, kc->eng, NULL) == dnnl_success;
    const dnnl_memory_desc_t *blk = ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    ok = blk && dnnl_reorder_primitive_desc_create(&rpd, &mb, kc->eng, blk, kc->eng, NULL) == dnnl_success &&
         dnnl_primitive_create(&reorder, rpd) == dnnl_success;
    if (ok) {
        e->md = *blk;
        e->bytes = dnnl_memory_desc_get_size(blk);
        e->buf = cvx_alloc_aligned_at(e->bytes + 64, __FILE__, __LINE__);
        ok = dnnl_memory_create(&from, &mb, kc->eng, (void *)b->data) == dnnl_success &&
             dnnl_memory_create(&to, blk, kc->eng, e->buf) == dnnl_success;
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        ok = ok && dnnl_primitive_execute(reorder, kc->stream, 2, ra) == dnnl_success &&
             dnnl_stream_wait(kc->stream) == dnnl_success;
        if (!ok) { free(e->buf); e->buf = NULL; }
    }
    if (from) dnnl_memory_destroy(from);
    if (to) dnnl_memory_destroy(to);
    if (reorder) dnnl_primitive_destroy(reorder);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return ok ? 0 : -1;
}

/* The packed copy of W for this path, made on first use; NULL: read W in place (f32 W in f32 mode,
 * packing off, over budget, or no primitive). */
static const pack_entry *pack_for(cvx_kernels *kc, cvx_precision p, int M, const cvx_tensor *W, int N, int K) {
    int kind = p == CVX_PRECISION_BF16 ? (onednn_bf16(kc) ? PACK_ONEDNN : PACK_F32_ROUNDED)
                                       : (W->dtype == CVX_F32 ? 0 : PACK_F32);
    if (!kind || !kc->pack_budget) return NULL;
    uint64_t sample = cvx_bytes_sample(W->data, (size_t)N * K * cvx_dtype_size(W->dtype));
    for (int i = 0; i < kc->npk; i++) {
        pack_entry *e = &kc->pk[i];
        if (e->src != W->data || e->N != N || e->K != K || e->dt != W->dtype || e->kind != kind) continue;
        if (e->sample == sample) return e->buf ? e : NULL;   /* buf NULL: oneDNN could not pack it */
        kc->pack_bytes -= e->bytes;   /* another weight now lives at this address: repack */
        free(e->buf);
        *e = kc->pk[--kc->npk];
        break;
    }
    if (kc->pack_full) return NULL;
    size_t need = (size_t)N * K * (kind == PACK_ONEDNN ? 2 : 4), avail = kc->pack_given ? (size_t)-1 : cvx_mem_available();
    size_t margin = (size_t)4 << 30;   /* left for activations and the page cache */
    if (kc->pack_bytes + need > kc->pack_budget || avail < margin || need > avail - margin) {
        char av[48] = "";
        if (avail != (size_t)-1) snprintf(av, sizeof av, ", %zu MiB available", avail >> 20);
        cvx_warn("%s: weight [%d, %d] not pre-packed (%zu MiB packed, budget %zu MiB%s); "
                 "it and the weights after it are read in place",
                 W->file, N, K, kc->pack_bytes >> 20, kc->pack_budget >> 20, av);
        kc->pack_full = 1;
        return NULL;
    }
    pack_entry e = {W->data, N, K, kind, W->dtype, sample, NULL, 0, {0}};
    cvx_mat wb = {W->data, W->dtype, K, 1};
    scratch tmp = {NULL, 0};
    if (kind == PACK_ONEDNN) {
        cvx_mat b = W->dtype == CVX_BF16 ? wb : convert_mat(&wb, K, N, CVX_BF16, 1, &tmp);
        if (pack_onednn(kc, M, &b, &e)) e.buf = NULL, e.bytes = 0;   /* kept: not tried again */
        scratch_free(&tmp);
    } else {   /* the very conversion cvx_matmul makes per call: the same numbers */
        convert_mat(&wb, K, N, CVX_F32, kind == PACK_F32_ROUNDED, &tmp);
        e.buf = tmp.p;
        e.bytes = tmp.cap;
    }
    if (kc->npk == kc->cap_pk) {
        kc->cap_pk = kc->cap_pk ? 2 * kc->cap_pk : 64;
        kc->pk = cvx_realloc(kc->pk, sizeof *kc->pk * (size_t)kc->cap_pk);
    }
    kc->pk[kc->npk] = e;
    kc->pack_bytes += e.bytes;
    kc->npk++;
    return e.buf ? &kc->pk[kc->npk - 1] : NULL;
}

/* x · Wᵀ on a packed weight; -1 without an error when oneDNN's primitive for this M wants another
 * layout (the caller reads W in place). */
static int linear_packed(cvx_kernels *kc, cvx_precision p, const pack_entry *e, int M, const cvx_mat *x,
                         const float *bias, float *y) {
    if (e->kind != PACK_ONEDNN) {
        cvx_mat b = {e->buf, CVX_F32, e->K, 1};
        return matmul_impl(kc, p, M, e->N, e->K, *x, b, bias, 0.0f, y, e->N, 1);
    }
    cvx_mat a = convert_mat(x, M, e->K, CVX_BF16, 1, &kc->sa);
    cvx_mat b = {e->buf, CVX_BF16, e->K, 1};   /* only its dtype is read: the layout is e->md */
    return run_dnnl(kc, p, M, e->N, e->K, &a, &b, bias, 0.0f, y, e->N, e);
}

int cvx_gemm_p(cvx_kernels *kc, cvx_precision p, int trans_a, int trans_b, int M, int N, int K, const float *A,
               int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cvx_mat a = {A, CVX_F32, lda, trans_a}, b = {B, CVX_F32, ldb, trans_b};
    return cvx_matmul(kc, p, M, N, K, a, b, NULL, beta, C, ldc);
}

int cvx_linear_p(cvx_kernels *kc, cvx_precision p, const float *x, int M, int K, const cvx_tensor *W,
                 const cvx_tensor *b, float *y) {
    if (W->ndim != 2 || W->shape[1] != K)
        return cvx_error("%s: linear weight has %d dims / %lld columns, expected [N, %d]", W->file, W->ndim,
                         W->ndim == 2 ? (long long)W->shape[1] : -1LL, K);
    int N = (int)W->shape[0];
    const float *bias = NULL;
    if (b) {
        if (b->numel != N) return cvx_error("%s: linear bias has %lld elements, expected %d", b->file,
                                            (long long)b->numel, N);
        if (b->dtype == CVX_F32 && ((uintptr_t)b->data & 3) == 0) bias = b->data;
        else {
            float *t = scratch_get(&kc->sbias, sizeof(float) * (size_t)N);
            cvx_to_f32_n(b->dtype, b->data, t, (size_t)N);
            bias = t;
        }
    }
    if (cvx_dtype_is_quant(W->dtype))   /* GGUF block types: dequantized tiles or int8 (gemm_quant.h) */
        return cvx_linear_quant(kc, p, (cvx_qdot)kc->qdot, x, M, K, W, bias, y);
    cvx_mat xa = {x, CVX_F32, K, 0}, wb = {W->data, W->dtype, K, 1};   /* B = Wᵀ: [K, N] */
    const pack_entry *e = M > 0 && N > 0 && K > 0 && W->data ? pack_for(kc, p, M, W, N, K) : NULL;
    if (e && linear_packed(kc, p, e, M, &xa, bias, y) == 0) return 0;
    return cvx_matmul(kc, p, M, N, K, xa, wb, bias, 0.0f, y, N);
}
