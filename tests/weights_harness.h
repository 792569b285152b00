/* The weights-format tests' shared fixtures (header-only: every test is one program): a checkpoint
 * quantized to a Q8_0 GGUF by a family's rules, a text encoder converted to a GGUF with llama.cpp's
 * names, a GGUF's dequantized f32 copy (the reference its numbers must reproduce), and two files'
 * tensors compared byte for byte. */
#ifndef CVX_WEIGHTS_HARNESS_H
#define CVX_WEIGHTS_HARNESS_H

#include "testutil.h"
#include "dtype.h"
#include "gguf.h"
#include "quant.h"
#include "stage2/quantize.h"

/* src (any weights cvx_weights_open reads) as a Q8_0 GGUF at dst under `rules` */
static inline void wh_quantize_q8_0(const char *src, const char *dst, const cvx_gguf_rules *rules) {
    unsigned ft;
    int pure;
    ASSERT_OK(cvx_quantize_parse_type("Q8_0", &ft, &pure));
    cvx_weights *w = cvx_weights_open(src);
    ASSERT_NONNULL(w);
    ASSERT_OK(cvx_quantize_to_gguf(w, rules, ft, pure, dst, NULL));
    cvx_weights_close(w);
}

/* The HF weights at src (a text encoder's directory) as a GGUF at dst with llama.cpp's names
 * (rename: the family's table, t5_llama_name / qwen_llama_name) and general.architecture arch. q8:
 * Q8_0 for every matrix whose rows are whole blocks except a llama name containing keep_f32 (NULL:
 * none; T5's attn_rel_b, as llama-quantize keeps it), F32 for the rest; else all F32. */
static inline void wh_write_llama_gguf(const char *src, const char *dst, const char *arch,
                                       void (*rename)(const char *hf, char *out, size_t n), int q8,
                                       const char *keep_f32) {
    cvx_weights *w = cvx_weights_open(src);
    ASSERT_NONNULL(w);
    cvx_gguf_writer *g = cvx_ggufw_new();
    ASSERT_OK(cvx_ggufw_kv_str(g, "general.architecture", arch));
    const int n = cvx_weights_count(w);
    void **data = calloc((size_t)n, sizeof *data);
    for (int i = 0; i < n; i++) {
        const cvx_tensor *t = cvx_weights_at(w, i);
        char name[128];
        rename(t->name, name, sizeof name);
        const int quantize = q8 && t->ndim == 2 && t->shape[1] % 32 == 0 && !(keep_f32 && strstr(name, keep_f32));
        const cvx_quant_traits *tr = cvx_quant_of(quantize ? CVX_Q8_0 : CVX_F32);
        float *v = cvx_tensor_f32_dup(t);
        const int64_t row = t->shape[t->ndim - 1], rows = t->numel / row;
        const size_t rb = (size_t)row / tr->block * tr->type_size;
        data[i] = cvx_malloc(rb * (size_t)rows);
        for (int64_t r = 0; r < rows; r++) tr->from_f32_ref(v + r * row, (char *)data[i] + rb * (size_t)r, row);
        free(v);
        assert_true(cvx_ggufw_tensor(g, name, t->ndim, t->shape, quantize ? CVX_Q8_0 : CVX_F32, data[i]) >= 0);
    }
    ASSERT_OK(cvx_ggufw_write(g, dst, NULL, NULL));
    cvx_ggufw_free(g);
    for (int i = 0; i < n; i++) free(data[i]);
    free(data);
    cvx_weights_close(w);
}

/* Every tensor of the GGUF (any weights) at src dequantized to F32 under its own name, written to
 * dst. */
static inline void wh_write_dequantized(const char *src, const char *dst) {
    cvx_weights *w = cvx_weights_open(src);
    ASSERT_NONNULL(w);
    cvx_st_writer *st = cvx_stw_new();
    for (int i = 0; i < cvx_weights_count(w); i++) {
        const cvx_tensor *t = cvx_weights_at(w, i);
        float *d = cvx_alloc_f32((size_t)t->numel);
        cvx_tensor_to_f32(t, d);
        ASSERT_OK(cvx_stw_add(st, t->name, CVX_F32, t->ndim, t->shape, d));
        free(d);
    }
    ASSERT_OK(cvx_stw_write(st, dst));
    cvx_stw_free(st);
    cvx_weights_close(w);
}

/* Every tensor of a and b the same bytes, the same count (the metadata may name each run's own
 * paths). */
static inline void wh_same_tensors(const char *a, const char *b) {
    cvx_safetensors *x = tu_open(a), *y = tu_open(b);
    assert_int_equal(cvx_st_count(x), cvx_st_count(y));
    for (int i = 0; i < cvx_st_count(x); i++) {
        const cvx_tensor *t = cvx_st_tensor(x, i), *u = cvx_st_find(y, t->name);
        if (!u || u->nbytes != t->nbytes || memcmp(t->data, u->data, t->nbytes))
            fail_msg("%s: tensor %s differs from %s's", b, t->name, a);
    }
    print_message("  %s: %d tensors = the directory run's\n", b, cvx_st_count(x));
    cvx_st_close(x);
    cvx_st_close(y);
}

#endif
