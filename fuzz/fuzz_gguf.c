/* libFuzzer target: the GGUF parser (cvx_gguf_open_memory) and everything a loader may do with a
 * file that parsed. Any out-of-bounds read, leak, UB or abort is a bug: a bad file must give one
 * error naming the file (the label), never a crash.
 *
 * On success, for every tensor: the invariants of gguf.h (row-major shape = reversed ne, numel,
 * nbytes from the type traits, aligned offset, data inside the input; ASan checks its first and
 * last byte), cvx_gguf_find by name; for tensors of up to 64 Ki values, the whole tensor decoded
 * through the dtype layer (fast dequantizer) and by the reference dequantizer, which must agree
 * bit for bit, and its first row quantized back (the quantizers on arbitrary values, NaN and
 * infinities included). For every key: cvx_gguf_find_key, and every typed getter, which must
 * either succeed or fail with an error naming the file. */
#include "dtype.h"
#include "error.h"
#include "gguf.h"
#include "quant.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile unsigned char g_sink;
static volatile float g_fsink;

static void expect_named_error(int failed) {
    if (failed && strncmp(cvx_last_error(), "fuzz: ", 6) != 0) abort();
}

static void walk_tensor(const cvx_gguf *g, const cvx_gguf_tensor *gt, const unsigned char *buf, size_t size) {
    const cvx_tensor *t = &gt->t;
    if (!t->name || t->ndim != gt->n_dims || t->ndim < 0 || t->ndim > CVX_MAX_DIMS) abort();
    const cvx_quant_traits *q = cvx_quant_by_ggml(gt->ggml_type);
    if (!q || q->dtype != t->dtype) abort();
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] != gt->ne[t->ndim - 1 - d] || t->shape[d] < 0) abort();
        numel *= t->shape[d];
    }
    uint64_t nb;
    if (numel != t->numel || cvx_dtype_nbytes(t->dtype, (uint64_t)numel, &nb) || nb != t->nbytes) abort();
    if (gt->offset % cvx_gguf_alignment(g) != 0) abort();
    const unsigned char *p = t->data;
    if (p != buf + cvx_gguf_data_offset(g) + gt->offset) abort();
    if (t->nbytes > 0) {
        if (p < buf || t->nbytes > size || p > buf + size - t->nbytes) abort();
        g_sink ^= p[0];
        g_sink ^= p[t->nbytes - 1];
    }
    if (cvx_gguf_find(g, t->name) != gt || cvx_gguf_get(g, t->name, t->shape, t->ndim) != gt) abort();
    if (numel == 0 || numel > (1 << 16)) return;
    float *fast = cvx_tensor_f32_dup(t), *ref = malloc((size_t)numel * sizeof(float));
    q->to_f32_ref(t->data, ref, numel);
    if (memcmp(fast, ref, (size_t)numel * sizeof(float)) != 0) abort();  /* fast == reference */
    g_fsink += fast[0] + fast[numel - 1];
    int64_t row = t->ndim ? gt->ne[0] : 1;  /* a multiple of the block (checked at open) */
    if (row > 0) {
        unsigned char *back = malloc((size_t)(row / q->block * q->type_size));
        q->from_f32_ref(fast, back, row);
        g_sink ^= back[0];
        free(back);
    }
    free(fast);
    free(ref);
}

static void walk_kv(const cvx_gguf *g, int i) {
    const char *k = cvx_gguf_kv_key(g, i);
    if (!k || cvx_gguf_find_key(g, k) != i) abort();
    cvx_gguf_type t = cvx_gguf_kv_type(g, i);
    if ((unsigned)t >= CVX_GGUF_TYPE_COUNT || !cvx_gguf_type_name(t)) abort();
    uint32_t u32;
    int32_t i32;
    uint64_t u64, count;
    int64_t i64, arr[16];
    float f;
    int b;
    size_t n;
    cvx_gguf_type et;
    const void *data;
    expect_named_error(cvx_gguf_get_u32(g, k, &u32) != 0);
    expect_named_error(cvx_gguf_get_i32(g, k, &i32) != 0);
    expect_named_error(cvx_gguf_get_u64(g, k, &u64) != 0);
    expect_named_error(cvx_gguf_get_i64(g, k, &i64) != 0);
    expect_named_error(cvx_gguf_get_f32(g, k, &f) != 0);
    expect_named_error(cvx_gguf_get_bool(g, k, &b) != 0);
    const char *s = cvx_gguf_get_str(g, k);
    expect_named_error(s == NULL);
    if (s) g_sink ^= (unsigned char)strlen(s);
    if (t == CVX_GGUF_STRING && !s) abort();
    int arr_failed = cvx_gguf_get_arr(g, k, &et, &count, &data) != 0;
    expect_named_error(arr_failed);
    if (arr_failed != (t != CVX_GGUF_ARRAY)) abort();
    expect_named_error(cvx_gguf_get_arr_i64(g, k, arr, 16, &n) != 0);
    if (!arr_failed) {
        if (count != cvx_gguf_kv_count_of(g, i) || et != cvx_gguf_kv_arr_type(g, i)) abort();
        if (et == CVX_GGUF_STRING && count > 0) {
            const char *a = cvx_gguf_get_arr_str(g, k, 0), *z = cvx_gguf_get_arr_str(g, k, count - 1);
            if (!a || !z) abort();
            g_sink ^= (unsigned char)(strlen(a) + strlen(z));
        }
        expect_named_error(cvx_gguf_get_arr_str(g, k, count) == NULL);  /* one past the end: an error */
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    cvx_set_verbosity(0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cvx_clear_error();
    cvx_gguf *g = cvx_gguf_open_memory(data, size, "fuzz");
    if (!g) {
        expect_named_error(1);  /* every error names the file (the label) first */
        return 0;
    }
    size_t a = cvx_gguf_alignment(g);
    if (a == 0 || (a & (a - 1)) || cvx_gguf_data_offset(g) > size) abort();
    for (int i = 0; i < cvx_gguf_tensor_count(g); i++) walk_tensor(g, cvx_gguf_tensor_at(g, i), data, size);
    for (int i = 0; i < cvx_gguf_kv_count(g); i++) walk_kv(g, i);
    if (cvx_gguf_find(g, "") != NULL) g_sink ^= 1;
    cvx_clear_error();
    if (cvx_gguf_get_u32(g, "no such key \x01", &(uint32_t){0}) == 0) abort();
    expect_named_error(1);
    cvx_gguf_close(g);
    return 0;
}
