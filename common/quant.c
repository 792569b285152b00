/* The ggml type traits table (one row per type) and the codecs of the element types and of the
 * 32-value block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0. Layouts: ggml-common.h block_*.
 *
 * Every codec does ggml-quants.c's float32 operations in its order, so results are bit-exact to
 * ggml's dequantize_row_* / quantize_row_*_ref. Our build never contracts a*b + c into a fused
 * multiply-add (-ffp-contract=off); ggml's reference, built by GCC for an FMA target (the golden
 * files' llama.cpp build: gcc -O2 -mavx2 -mfma, asserts on), does, in the quantizers. Those
 * contractions (read from GCC's optimized tree dump of ggml-quants.c) are written out as fmaf()
 * here, so the bytes match that llama-quantize on every compiler. The dequantizers are immune:
 * there every product a*b before an addition is exact in float32. */
#include "quant.h"
#include "error.h"
#include "quant_impl.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <strings.h>

/* ---- F32, F16, BF16 (block of 1) ---- */

static void f32_to_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f32_from_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f16_to_f32(const void *src, float *dst, int64_t n) { cvx_to_f32_n(CVX_F16, src, dst, (size_t)n); }
static void bf16_to_f32(const void *src, float *dst, int64_t n) { cvx_to_f32_n(CVX_BF16, src, dst, (size_t)n); }
static void f16_from_f32(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) qi_put_f16(d + 2 * i, src[i]);
}
/* ggml_compute_fp32_to_bf16: round to nearest even; a NaN keeps its high bits, forced quiet. */
static void bf16_from_f32(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        uint16_t h = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 64)
                                                      : (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
        d[2 * i] = (uint8_t)h;
        d[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

/* ---- Q4_0: f16 d; u8 qs[16]. Low nibbles are values 0..15, high nibbles 16..31. ---- */

static void q4_0_to_f32(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / CVX_QK; i++, b += 18, y += CVX_QK) {
        const float d = qi_f16(b);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b[2 + j] & 0x0f) - 8) * d;
            y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
        }
    }
}

static void q4_0_from_f32(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / CVX_QK; i++, b += 18, x += CVX_QK) {
        float amax = 0.0f, max = 0.0f;  /* the value of largest magnitude, sign kept */
        for (int j = 0; j < CVX_QK; j++)
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        const float d = max / -8, id = d ? 1.0f / d : 0.0f;
        qi_put_f16(b, d);
        for (int j = 0; j < 16; j++) {
            int q0 = qi_trunc(fmaf(x[j], id, 8.5f), -128, 127), q1 = qi_trunc(fmaf(x[j + 16], id, 8.5f), -128, 127);
            b[2 + j] = (uint8_t)((uint8_t)(q0 < 15 ? q0 : 15) | (uint8_t)(q1 < 15 ? q1 : 15) << 4);
        }
    }
}

/* ---- Q4_1: f16 d; f16 m; u8 qs[16]. y = q*d + m ---- */

static void q4_1_to_f32(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / CVX_QK; i++, b += 20, y += CVX_QK) {
        const float d = qi_f16(b), m = qi_f16(b + 2);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b[4 + j] & 0x0f) * d + m;
            y[j + 16] = (float)(b[4 + j] >> 4) * d + m;
        }
    }
}

static void q4_1_from_f32(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / CVX_QK; i++, b += 20, x += CVX_QK) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < CVX_QK; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 15, id = d ? 1.0f / d : 0.0f;
        qi_put_f16(b, d);
        qi_put_f16(b + 2, min);
        for (int j = 0; j < 16; j++) {
            int q0 = qi_trunc(fmaf(x[j] - min, id, 0.5f), -128, 127), q1 = qi_trunc(fmaf(x[j + 16] - min, id, 0.5f), -128, 127);
            b[4 + j] = (uint8_t)((uint8_t)(q0 < 15 ? q0 : 15) | (uint8_t)(q1 < 15 ? q1 : 15) << 4);
        }
    }
}

/* ---- Q5_0: f16 d; u8 qh[4] (u32 LE, bit j = 5th bit of value j); u8 qs[16]. y = (q - 16)*d ---- */

static void q5_0_to_f32(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / CVX_QK; i++, b += 22, y += CVX_QK) {
        const float d = qi_f16(b);
        const uint32_t qh = qi_u32(b + 2);
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) << 4 & 0x10), h1 = (int)((qh >> (j + 12)) & 0x10);
            y[j] = (float)(((b[6 + j] & 0x0f) | h0) - 16) * d;
            y[j + 16] = (float)(((b[6 + j] >> 4) | h1) - 16) * d;
        }
    }
}

static void q5_0_from_f32(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / CVX_QK; i++, b += 22, x += CVX_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < CVX_QK; j++)
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        const float d = max / -16, id = d ? 1.0f / d : 0.0f;
        qi_put_f16(b, d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = qi_trunc(fmaf(x[j], id, 16.5f), -128, 127), q1 = qi_trunc(fmaf(x[j + 16], id, 16.5f), -128, 127);
            q0 = q0 < 31 ? q0 : 31;
            q1 = q1 < 31 ? q1 : 31;
            b[6 + j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            qh |= (uint32_t)(q0 >> 4 & 1) << j | (uint32_t)(q1 >> 4 & 1) << (j + 16);
        }
        for (int k = 0; k < 4; k++) b[2 + k] = (uint8_t)(qh >> 8 * k);
    }
}

/* ---- Q5_1: f16 d; f16 m; u8 qh[4]; u8 qs[16]. y = q*d + m ---- */

static void q5_1_to_f32(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / CVX_QK; i++, b += 24, y += CVX_QK) {
        const float d = qi_f16(b), m = qi_f16(b + 2);
        const uint32_t qh = qi_u32(b + 4);
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) << 4 & 0x10), h1 = (int)((qh >> (j + 12)) & 0x10);
            y[j] = (float)((b[8 + j] & 0x0f) | h0) * d + m;
            y[j + 16] = (float)((b[8 + j] >> 4) | h1) * d + m;
        }
    }
}

static void q5_1_from_f32(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / CVX_QK; i++, b += 24, x += CVX_QK) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < CVX_QK; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 31, id = d ? 1.0f / d : 0.0f;
        qi_put_f16(b, d);
        qi_put_f16(b + 2, min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int u0 = qi_trunc(fmaf(x[j] - min, id, 0.5f), 0, 255), u1 = qi_trunc(fmaf(x[j + 16] - min, id, 0.5f), 0, 255);
            b[8 + j] = (uint8_t)((u0 & 0x0f) | (u1 & 0x0f) << 4);
            qh |= (uint32_t)(u0 >> 4 & 1) << j | (uint32_t)(u1 >> 4 & 1) << (j + 16);
        }
        for (int k = 0; k < 4; k++) b[4 + k] = (uint8_t)(qh >> 8 * k);
    }
}

/* ---- Q8_0: f16 d; i8 qs[32]. y = q*d ---- */

void cvx_q8_0_to_f32(const void *src, float *y, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / CVX_QK; i++, b += 34, y += CVX_QK) {
        const float d = qi_f16(b);
        for (int j = 0; j < CVX_QK; j++) y[j] = (float)(int8_t)b[2 + j] * d;
    }
}

static void q8_0_from_f32(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / CVX_QK; i++, b += 34, x += CVX_QK) {
        float amax = 0.0f;
        for (int j = 0; j < CVX_QK; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        qi_put_f16(b, d);
        for (int j = 0; j < CVX_QK; j++) b[2 + j] = (uint8_t)qi_trunc(roundf(x[j] * id), -128, 127);
    }
}

/* ---- the table ---- */

static const cvx_quant_traits k_traits[] = {
    {CVX_F32, "F32", CVX_GGML_F32, 1, 4, f32_to_f32, f32_to_f32, f32_from_f32},
    {CVX_F16, "F16", CVX_GGML_F16, 1, 2, f16_to_f32, f16_to_f32, f16_from_f32},
    {CVX_Q4_0, "Q4_0", CVX_GGML_Q4_0, CVX_QK, 18, q4_0_to_f32, q4_0_to_f32, q4_0_from_f32},
    {CVX_Q4_1, "Q4_1", CVX_GGML_Q4_1, CVX_QK, 20, q4_1_to_f32, q4_1_to_f32, q4_1_from_f32},
    {CVX_Q5_0, "Q5_0", CVX_GGML_Q5_0, CVX_QK, 22, q5_0_to_f32, q5_0_to_f32, q5_0_from_f32},
    {CVX_Q5_1, "Q5_1", CVX_GGML_Q5_1, CVX_QK, 24, q5_1_to_f32, q5_1_to_f32, q5_1_from_f32},
    {CVX_Q8_0, "Q8_0", CVX_GGML_Q8_0, CVX_QK, 34, cvx_q8_0_to_f32, cvx_q8_0_to_f32_fast, q8_0_from_f32},
    {CVX_Q2_K, "Q2_K", CVX_GGML_Q2_K, CVX_QK_K, 84, cvx_q2_K_to_f32, cvx_q2_K_to_f32, cvx_q2_K_from_f32},
    {CVX_Q3_K, "Q3_K", CVX_GGML_Q3_K, CVX_QK_K, 110, cvx_q3_K_to_f32, cvx_q3_K_to_f32, cvx_q3_K_from_f32},
    {CVX_Q4_K, "Q4_K", CVX_GGML_Q4_K, CVX_QK_K, 144, cvx_q4_K_to_f32, cvx_q4_K_to_f32_fast, cvx_q4_K_from_f32},
    {CVX_Q5_K, "Q5_K", CVX_GGML_Q5_K, CVX_QK_K, 176, cvx_q5_K_to_f32, cvx_q5_K_to_f32, cvx_q5_K_from_f32},
    {CVX_Q6_K, "Q6_K", CVX_GGML_Q6_K, CVX_QK_K, 210, cvx_q6_K_to_f32, cvx_q6_K_to_f32_fast, cvx_q6_K_from_f32},
    {CVX_BF16, "BF16", CVX_GGML_BF16, 1, 2, bf16_to_f32, bf16_to_f32, bf16_from_f32},
};
#define N_TRAITS ((int)(sizeof k_traits / sizeof k_traits[0]))

int cvx_quant_count(void) { return N_TRAITS; }
const cvx_quant_traits *cvx_quant_at(int i) { return i >= 0 && i < N_TRAITS ? &k_traits[i] : NULL; }

const cvx_quant_traits *cvx_quant_by_ggml(uint32_t ggml_type) {
    for (int i = 0; i < N_TRAITS; i++)
        if (k_traits[i].ggml_type == ggml_type) return &k_traits[i];
    return NULL;
}

const cvx_quant_traits *cvx_quant_of(cvx_dtype t) {
    for (int i = 0; i < N_TRAITS; i++)
        if (k_traits[i].dtype == t) return &k_traits[i];
    return NULL;
}

/* Every ggml type id (ggml.h), for messages about types this table does not support. */
static const char *const k_ggml_names[] = {
    [0] = "F32",      [1] = "F16",     [2] = "Q4_0",    [3] = "Q4_1",    [6] = "Q5_0",    [7] = "Q5_1",
    [8] = "Q8_0",     [9] = "Q8_1",    [10] = "Q2_K",   [11] = "Q3_K",   [12] = "Q4_K",   [13] = "Q5_K",
    [14] = "Q6_K",    [15] = "Q8_K",   [16] = "IQ2_XXS", [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S",
    [20] = "IQ4_NL",  [21] = "IQ3_S",  [22] = "IQ2_S",  [23] = "IQ4_XS", [24] = "I8",     [25] = "I16",
    [26] = "I32",     [27] = "I64",    [28] = "F64",    [29] = "IQ1_M",  [30] = "BF16",   [34] = "TQ1_0",
    [35] = "TQ2_0",   [39] = "MXFP4",  [40] = "NVFP4",  [41] = "Q1_0",   [42] = "Q2_0",
};

const char *cvx_ggml_type_name(uint32_t ggml_type) {
    return ggml_type < sizeof k_ggml_names / sizeof k_ggml_names[0] ? k_ggml_names[ggml_type] : NULL;
}

/* ---- llama.cpp file types (llama.h enum llama_ftype; bases from llama_model_quantize_internal) ---- */

static const cvx_ggml_ftype k_ftypes[] = {
    {0, "F32", CVX_F32},      {1, "F16", CVX_F16},       {2, "Q4_0", CVX_Q4_0},    {3, "Q4_1", CVX_Q4_1},
    {7, "Q8_0", CVX_Q8_0},    {8, "Q5_0", CVX_Q5_0},     {9, "Q5_1", CVX_Q5_1},    {10, "Q2_K", CVX_Q2_K},
    {11, "Q3_K_S", CVX_Q3_K}, {12, "Q3_K_M", CVX_Q3_K},  {13, "Q3_K_L", CVX_Q3_K}, {14, "Q4_K_S", CVX_Q4_K},
    {15, "Q4_K_M", CVX_Q4_K}, {16, "Q5_K_S", CVX_Q5_K},  {17, "Q5_K_M", CVX_Q5_K}, {18, "Q6_K", CVX_Q6_K},
    {32, "BF16", CVX_BF16},
};
#define N_FTYPES ((int)(sizeof k_ftypes / sizeof k_ftypes[0]))

const cvx_ggml_ftype *cvx_ggml_ftype_by_id(uint32_t id) {
    for (int i = 0; i < N_FTYPES; i++)
        if (k_ftypes[i].id == id) return &k_ftypes[i];
    return NULL;
}

const cvx_ggml_ftype *cvx_ggml_ftype_by_name(const char *name) {
    for (int i = 0; i < N_FTYPES; i++)
        if (!strcasecmp(k_ftypes[i].name, name)) return &k_ftypes[i];
    return NULL;
}

const char *cvx_ggml_ftype_name(uint32_t id) {
    const cvx_ggml_ftype *f = cvx_ggml_ftype_by_id(id);
    return f ? f->name : NULL;
}

const char *cvx_ggml_ftype_list(char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < N_FTYPES && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "", k_ftypes[i].name);
    return buf;
}
