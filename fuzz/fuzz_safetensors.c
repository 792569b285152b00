/* libFuzzer target: the safetensors header parser (cvx_st_open_memory) and every accessor a
 * stage uses on a file that parsed. Any out-of-bounds read, leak, UB or abort is a bug: a bad
 * file must give one error (cvx_last_error), never a crash.
 *
 * Each input is parsed twice: as is, and with its 8-byte header length rewritten to end at the
 * last '}' of the input. Mutations that grow or shrink the JSON otherwise almost always break the
 * length field first, so the second parse lets the fuzzer reach the validation of the header's
 * contents (dtype, shape, offsets, overlaps, metadata). */
#include "dtype.h"
#include "error.h"
#include "safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile unsigned char g_sink;
static volatile float g_fsink;

/* Everything a caller may do with an opened file: the data of each tensor must lie inside the
 * input buffer (ASan checks the first and last byte), names must be found again by cvx_st_find,
 * metadata must be readable. */
static void walk(const cvx_safetensors *st, const unsigned char *buf, size_t size) {
    int n = cvx_st_count(st);
    for (int i = 0; i < n; i++) {
        const cvx_tensor *t = cvx_st_tensor(st, i);
        if (!t || !t->name || t->ndim < 0 || t->ndim > CVX_MAX_DIMS) abort();
        if (t->nbytes != (size_t)t->numel * cvx_dtype_size(t->dtype)) abort();
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        if (numel != t->numel) abort();
        if (t->nbytes > 0) {
            const unsigned char *p = t->data;
            if (p < buf || p + t->nbytes > buf + size) abort();
            g_sink ^= p[0];
            g_sink ^= p[t->nbytes - 1];
        }
        /* widening, unaligned data */
        if ((cvx_dtype_is_float(t->dtype) || t->dtype == CVX_F8_E4M3) && t->numel <= 4096) {
            float *f = cvx_tensor_f32_dup(t);
            for (int64_t k = 0; k < t->numel; k++) g_fsink += f[k];
            free(f);
            float *scratch = NULL;
            size_t cap = 0;
            const float *v = cvx_tensor_f32_view(t, &scratch, &cap);
            if (t->numel > 0) g_fsink += v[0] + v[t->numel - 1];
            free(scratch);
        }
        char sb[16], big[256];
        cvx_shape_str(t->ndim, t->shape, sb, sizeof sb);      /* truncating */
        cvx_shape_str(t->ndim, t->shape, big, sizeof big);
        if (cvx_st_find(st, t->name) == NULL) abort();
    }
    if (cvx_st_find(st, "") != NULL) g_sink ^= 1;
    if (cvx_st_find(st, "__metadata__") != NULL) abort();      /* never a tensor */
    int m = cvx_st_metadata_count(st);
    for (int i = 0; i < m; i++) {
        const char *k, *v;
        cvx_st_metadata_at(st, i, &k, &v);
        if (!k || !v) abort();
        g_sink ^= (unsigned char)(strlen(k) + strlen(v));
        if (cvx_st_metadata(st, k) == NULL) abort();
    }
    if (cvx_st_metadata(st, "format") != NULL) g_sink ^= 2;
    (void)cvx_st_path(st);
}

static void parse_one(const unsigned char *buf, size_t size) {
    cvx_clear_error();
    cvx_safetensors *st = cvx_st_open_memory(buf, size, "fuzz");
    if (st) {
        walk(st, buf, size);
        cvx_st_close(st);
    } else if (strstr(cvx_last_error(), "fuzz") == NULL) {
        abort();  /* every error names the file (the label) */
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    cvx_set_verbosity(0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse_one(data, size);

    /* Second parse with the length field fixed up to end at the last '}' (see the top). */
    if (size <= 8) return 0;
    size_t end = size;
    while (end > 8 && data[end - 1] != '}') end--;
    if (end <= 8) return 0;
    uint64_t n = end - 8, stated = 0;
    for (int i = 7; i >= 0; i--) stated = stated << 8 | data[i];
    if (stated == n) return 0;
    unsigned char *copy = malloc(size);  /* exact size, so ASan sees any overread */
    memcpy(copy, data, size);
    for (int i = 0; i < 8; i++) copy[i] = (unsigned char)(n >> (8 * i));
    parse_one(copy, size);
    free(copy);
    return 0;
}
