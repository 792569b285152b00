/* The weights-format tests' shared fixtures (header-only: every test is one program): a checkpoint
 * quantized to a Q8_0 GGUF by a family's rules, a GGUF's dequantized f32 copy (the reference its
 * numbers must reproduce), and two files' tensors compared byte for byte. */
#ifndef CVX_WEIGHTS_HARNESS_H
#define CVX_WEIGHTS_HARNESS_H

#include "testutil.h"
#include "dtype.h"
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
