/* torch.randn(shape, generator=g, dtype=bfloat16 / float16) on CPU, bit for bit (PyTorch 1.13).
 *
 * The algorithm, as PyTorch 1.13 runs it (references: pytorch v1.13 sources; line numbers of that
 * version, function names are the stable anchor):
 *
 * aten/src/ATen/native/cpu/DistributionTemplates.h
 *   normal_kernel (l.175-199): float32 with numel >= 16 goes to normal_fill_AVX2 (rng.c). Every
 *     other dtype is dispatched (AT_DISPATCH_FLOATING_TYPES_AND2(kHalf, kBFloat16)):
 *     - numel >= 16 and contiguous: normal_fill<scalar_t> (l.151-173), below;
 *     - otherwise: per element at::normal_distribution<double>(0, 1) (double Box-Muller with the
 *       cached second value, exactly cvx_randn's numel < 16 path) and static_cast<scalar_t>(double).
 *       c10::BFloat16 / c10::Half are constructed from float only, so the double is rounded to
 *       float first, then to the 16-bit type (two roundings, both to nearest even).
 *   normal_fill<scalar_t> (l.151-173):
 *     1. for every element: data[i] = at::uniform_real_distribution<scalar_t>(0, 1)(gen);
 *     2. normal_fill_16 on each full block of 16 (i = 0, 16, ... while i < size - 15);
 *     3. if size % 16 != 0: the LAST 16 elements get 16 fresh uniforms and normal_fill_16 again
 *        (overlapping the previous block, as the f32 path does).
 *   normal_fill_16<scalar_t> (l.139-149), for j in 0..7 (mean 0, std 1 as scalar_t):
 *       u1 = 1 - data[j]; u2 = data[j+8];                            (scalar_t)
 *       radius = std::sqrt(-2 * std::log(u1));                       (scalar_t)
 *       theta  = 2.0f * c10::pi<double> * u2;                        (double product -> scalar_t)
 *       data[j]   = radius * std::cos(theta) * std + mean;
 *       data[j+8] = radius * std::sin(theta) * std + mean;
 * aten/src/ATen/core/DistributionsHelper.h, uniform_real_distribution<T>::operator(): T != double
 *   takes ONE 32-bit draw (generator->random(), not random64()); aten/src/ATen/core/
 *   TransformationHelper.h, transformation::uniform_real: x = (val & MASK) * DIVISOR in
 *   dist_acctype<T> = float, MASK = 2^digits - 1, DIVISOR = 2^-digits with
 *   numeric_limits<T>::digits = 8 (BFloat16) / 11 (Half); returned as float, stored as scalar_t
 *   (exact). So a uniform is k / 256 (bf16) or k / 2048 (fp16), k = low bits of one mt19937 word.
 *
 * What the scalar_t arithmetic means differs between the two types, and that is the whole point:
 *   BFloat16: c10/util/BFloat16-inl.h defines BFloat16 op BFloat16 (and int op BFloat16) as the
 *     float operation rounded back to BFloat16, and c10/util/BFloat16-math.h (pulled in through
 *     ATen's vectorized headers) overloads std::log / std::sqrt / std::cos / std::sin for
 *     c10::BFloat16 as BFloat16(std::logf(float(a))) etc. So EVERY step is rounded to bf16:
 *       u1 = bf(1 - u); l = bf(logf(u1)); m = bf(-2 * l); radius = bf(sqrtf(m));
 *       theta = bf((float)(2pi_d * (double)u2)); c = bf(cosf(theta)); s = bf(sinf(theta));
 *       out = bf(bf(bf(radius * c) * 1) + 0)
 *   Half: PyTorch 1.13 has no std:: math overloads for c10::Half (c10/util/Half-math.h came later),
 *     so std::log(Half) resolves to std::log(float) through Half's conversion operator and
 *     radius * std::cos(theta) is Half * float = float (c10/util/Half-inl.h). Only the scalar_t
 *     variables and the store round to fp16:
 *       u1 = h(1 - u); radius = h(sqrtf(-2 * logf(u1))); theta = h((float)(2pi_d * (double)u2));
 *       out = h(radius * cosf(theta) * 1 + 0)        (FMA contraction of * 1 + 0 cannot matter)
 *   Both hypotheses were checked against the golden data (noise_lowp/, 1.1 M values per dtype):
 *   the other combination (bf16 computed in float, fp16 rounded per op) is off in ~30% of values.
 *
 * libm: logf / sinf / cosf / sqrtf are called exactly as PyTorch calls them (glibc's, the same
 * library the golden data came from). On these finite input sets (256 / 2048 possible arguments)
 * glibc's float functions are not always correctly rounded, so a different libm could differ on
 * a few values; glibc >= 2.28 on x86-64 (and other platforms sharing its generic float code) gives
 * the golden values. Built with -ffp-contract=off: no fused operation happens anywhere here. */
#include "rng_lowp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "error.h"

#if defined(__FAST_MATH__)
#error "rng_lowp.c must not be built with -ffast-math: torch-exact noise needs IEEE float semantics"
#endif

/* 2.0f * c10::pi<double>: 2.0f promoted to double, an exact doubling of pi. */
static const double TWO_PI_D = 2.0 * 3.14159265358979323846;

/* ------------------------------------------------------------------- the two scalar types */

/* Round a float to the dtype and back (the value a c10::BFloat16 / c10::Half holds). */
static inline float bf(float f) { return cvx_bf16_to_f32(cvx_f32_to_bf16(f)); }
static inline float hf(float f) { return cvx_f16_to_f32(cvx_f32_to_f16(f)); }

/* normal_fill_16<c10::BFloat16>: every operation rounded to bf16 (BFloat16-inl.h / -math.h). */
static void normal_fill_16_bf16(float *d) {
    for (int j = 0; j < 8; j++) {
        float u1 = bf(1.0f - d[j]);                        /* [0,1) -> (0,1] for log */
        float u2 = d[j + 8];
        float lg = bf(logf(u1));                           /* std::log(BFloat16) */
        float m2 = bf(-2.0f * lg);                         /* int * BFloat16 */
        float radius = bf(sqrtf(m2));                      /* std::sqrt(BFloat16) */
        float theta = bf((float)(TWO_PI_D * (double)u2));  /* double -> float -> bf16 */
        float c = bf(cosf(theta)), s = bf(sinf(theta));
        d[j] = bf(bf(bf(radius * c) * 1.0f) + 0.0f);       /* radius * cos * std + mean */
        d[j + 8] = bf(bf(bf(radius * s) * 1.0f) + 0.0f);
    }
}

/* normal_fill_16<c10::Half>: float math, fp16 only where a Half is stored. */
static void normal_fill_16_f16(float *d) {
    for (int j = 0; j < 8; j++) {
        float u1 = hf(1.0f - d[j]);
        float u2 = d[j + 8];
        float radius = hf(sqrtf(-2.0f * logf(u1)));        /* std::log(float), std::sqrt(float) */
        float theta = hf((float)(TWO_PI_D * (double)u2));
        float c = cosf(theta), s = sinf(theta);
        d[j] = hf(radius * c * 1.0f + 0.0f);
        d[j + 8] = hf(radius * s * 1.0f + 0.0f);
    }
}

/* at::uniform_real_distribution<scalar_t>(0, 1): low `digits` bits of one 32-bit draw times
 * 2^-digits (exact in float and in the 16-bit type). */
static inline float uniform_lowp(cvx_generator *g, int digits) {
    uint32_t k = cvx_generator_random(g) & ((1u << digits) - 1u);
    return (float)k * (1.0f / (float)(1u << digits));
}

/* normal_fill<scalar_t> on f32 storage: every value it holds is exactly representable in the
 * 16-bit type, so this is the same computation as torch's on scalar_t storage. */
static void normal_fill_lowp(cvx_generator *g, cvx_dtype dtype, float *d, size_t n) {
    int digits = dtype == CVX_BF16 ? 8 : 11;
    void (*fill16)(float *) = dtype == CVX_BF16 ? normal_fill_16_bf16 : normal_fill_16_f16;
    for (size_t i = 0; i < n; i++) d[i] = uniform_lowp(g, digits);
    for (size_t i = 0; i + 16 <= n; i += 16) fill16(d + i);
    if (n % 16 != 0) {                                     /* recompute the last 16 values */
        float *tail = d + n - 16;
        for (int i = 0; i < 16; i++) tail[i] = uniform_lowp(g, digits);
        fill16(tail);
    }
}

/* The whole draw into f32 storage holding 16-bit-exact values. */
static void randn_lowp_f32(cvx_generator *g, cvx_dtype dtype, float *out, size_t n) {
    if (n >= 16) {
        normal_fill_lowp(g, dtype, out, n);
    } else {
        /* normal_distribution<double> cast to float (= cvx_randn below 16), then to the dtype */
        cvx_randn(g, out, n);
        for (size_t i = 0; i < n; i++) out[i] = dtype == CVX_BF16 ? bf(out[i]) : hf(out[i]);
    }
}

static int check_dtype(cvx_dtype dtype, int allow_f32) {
    if (dtype == CVX_BF16 || dtype == CVX_F16 || (allow_f32 && dtype == CVX_F32)) return 0;
    return cvx_error("random noise: dtype %s not supported (expected %sBF16 or F16)",
                     cvx_dtype_name(dtype), allow_f32 ? "F32, " : "");
}

int cvx_randn_as(cvx_generator *g, cvx_dtype dtype, float *out, size_t n) {
    CVX_CHECK(g->magic == CVX_GENERATOR_MAGIC);
    if (check_dtype(dtype, 1) != 0) return -1;
    if (dtype == CVX_F32)
        cvx_randn(g, out, n);
    else
        randn_lowp_f32(g, dtype, out, n);
    return 0;
}

int cvx_randn_lowp(cvx_generator *g, cvx_dtype dtype, uint16_t *out, size_t n) {
    CVX_CHECK(g->magic == CVX_GENERATOR_MAGIC);
    if (check_dtype(dtype, 0) != 0) return -1;
    float *tmp = cvx_alloc_f32(n ? n : 1);
    randn_lowp_f32(g, dtype, tmp, n);
    for (size_t i = 0; i < n; i++)   /* exact: the values are representable */
        out[i] = dtype == CVX_BF16 ? cvx_f32_to_bf16(tmp[i]) : cvx_f32_to_f16(tmp[i]);
    free(tmp);
    return 0;
}

int cvx_noise_dtype_parse(const char *name, cvx_dtype *out) {
    static const struct { const char *name; cvx_dtype dtype; } names[] = {
        {"f32", CVX_F32}, {"float32", CVX_F32}, {"bf16", CVX_BF16}, {"bfloat16", CVX_BF16},
        {"fp16", CVX_F16}, {"f16", CVX_F16}, {"float16", CVX_F16},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcasecmp(name, names[i].name) == 0) {
            *out = names[i].dtype;
            return 0;
        }
    }
    return cvx_error("noise dtype '%s': expected f32, bf16 or fp16", name);
}
