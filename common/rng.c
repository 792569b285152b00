/* torch-exact CPU random generator and torch.randn (float32); see rng.h for what is reproduced.
 *
 * Every float operation below mirrors one instruction of PyTorch's AVX2 kernel, in the same
 * order; masks and sign flips are done on the bit patterns as the SIMD code does them. Do not
 * "simplify" expressions such as (y - ysel) or (x + tmp): with IEEE semantics they decide signed
 * zeros and which rounding happens, and the result must match PyTorch to the last bit.
 *
 * FMA: PyTorch's AVX2 kernels are built by GCC with -mavx2 -mfma and GCC's default
 * -ffp-contract=fast, so GCC fused some _mm256_mul_ps/_mm256_add_ps pairs of avx_mathfun.h into
 * vfmadd. The fused pairs are those GCC's widening_mul pass picks (walking the statements in
 * order, a product whose only use is an add/sub gets fused into it). We write exactly those as
 * fmaf() (C99: one rounding, on every platform; inlined to vfmadd on FMA hardware) and nothing
 * else is fused (the build uses -ffp-contract=off). Checked against the golden data: without the
 * fmaf()s ~1% of values are 1 ulp off; fusing the other product of a pair also breaks values. */
#include "rng.h"

#include <math.h>
#include <string.h>

#include "error.h"

#if defined(__FAST_MATH__)
#error "rng.c must not be built with -ffast-math: torch-exact noise needs IEEE float semantics"
#endif

#define MT_M 397
#define MT_MATRIX_A 0x9908b0dfu
#define MT_UMASK 0x80000000u
#define MT_LMASK 0x7fffffffu

_Static_assert(sizeof(cvx_generator) == 2536, "cvx_generator layout is saved in checkpoints");

/* ---------------------------------------------------------------- mt19937 (at::mt19937) */

void cvx_generator_seed(cvx_generator *g, uint64_t seed) {
    memset(g, 0, sizeof *g);
    g->magic = CVX_GENERATOR_MAGIC;
    g->seed = seed;
    g->state[0] = (uint32_t)(seed & 0xffffffffu);
    for (uint32_t j = 1; j < CVX_MT_N; j++)
        g->state[j] = 1812433253u * (g->state[j - 1] ^ (g->state[j - 1] >> 30)) + j;
    g->left = 1;   /* the first draw regenerates the state */
    g->next = 0;
    g->has_next_double_normal = 0;
    g->next_double_normal = 0.0;
}

static inline uint32_t mt_twist(uint32_t u, uint32_t v) {
    uint32_t mix = (u & MT_UMASK) | (v & MT_LMASK);
    return (mix >> 1) ^ ((v & 1u) ? MT_MATRIX_A : 0u);
}

static void mt_next_state(cvx_generator *g) {
    uint32_t *s = g->state;
    int i = 0;
    for (; i < CVX_MT_N - MT_M; i++) s[i] = s[i + MT_M] ^ mt_twist(s[i], s[i + 1]);
    for (; i < CVX_MT_N - 1; i++) s[i] = s[i + MT_M - CVX_MT_N] ^ mt_twist(s[i], s[i + 1]);
    s[CVX_MT_N - 1] = s[MT_M - 1] ^ mt_twist(s[CVX_MT_N - 1], s[0]);
    g->left = CVX_MT_N;
    g->next = 0;
}

static inline uint32_t mt_draw(cvx_generator *g) {
    if (--g->left == 0) mt_next_state(g);
    uint32_t y = g->state[g->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint32_t cvx_generator_random(cvx_generator *g) { return mt_draw(g); }

uint64_t cvx_generator_random64(cvx_generator *g) {
    uint32_t hi = mt_draw(g);
    uint32_t lo = mt_draw(g);
    return ((uint64_t)hi << 32) | lo;
}

int cvx_generator_validate(const cvx_generator *g) {
    if (g->magic != CVX_GENERATOR_MAGIC)
        return cvx_error("random generator state: magic 0x%016llx, expected 0x%016llx "
                         "(saved by an incompatible build)",
                         (unsigned long long)g->magic, (unsigned long long)CVX_GENERATOR_MAGIC);
    /* mt_draw reads state[next] after --left, regenerating (next = 0) when left hits 0. The
     * reachable states are the fresh seed (left 1, next 0) and, after any draw, next + left == 625
     * with 1 <= next <= 624: each draw moves one from left to next. Checking the ranges alone let
     * next = 624, left = 624 through, and the next draw read state[624..] past the array. */
    int fresh = g->left == 1 && g->next == 0;
    int drawn = g->left >= 1 && g->left <= CVX_MT_N && g->next >= 1 && g->next <= CVX_MT_N &&
                (int64_t)g->next + g->left == CVX_MT_N + 1;
    if (!fresh && !drawn)
        return cvx_error("random generator state: inconsistent indices (next %u, left %d; expected "
                         "next + left == %d, or next 0 and left 1)",
                         (unsigned)g->next, (int)g->left, CVX_MT_N + 1);
    if (g->has_next_double_normal > 1 || g->reserved != 0)
        return cvx_error("random generator state: invalid (cache flag %u, reserved %u)",
                         (unsigned)g->has_next_double_normal, (unsigned)g->reserved);
    if (g->has_next_double_normal && !isfinite(g->next_double_normal))
        return cvx_error("random generator state: cached normal is not finite");
    return 0;
}

int cvx_generator_restore(cvx_generator *g, const void *bytes, size_t n) {
    if (n != sizeof *g)
        return cvx_error("random generator state: %zu bytes, expected %zu (saved by an incompatible build)",
                         n, sizeof *g);
    cvx_generator tmp;
    memcpy(&tmp, bytes, sizeof tmp);
    if (cvx_generator_validate(&tmp)) return -1;
    *g = tmp;
    return 0;
}

/* at::uniform_real_distribution<float>(0, 1): 24 low bits of one draw, times 2^-24 (exact). */
static inline float uniform_float(cvx_generator *g) {
    return (float)(mt_draw(g) & 0xffffffu) * 0x1p-24f;
}

/* at::uniform_real_distribution<double>(0, 1): 53 low bits of random64(), times 2^-53. */
static inline double uniform_double(cvx_generator *g) {
    return (double)(cvx_generator_random64(g) & ((1ull << 53) - 1)) * 0x1p-53;
}

/* ------------------------------------------- Cephes float approximations (avx_mathfun.h) */

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Constants written as in avx_mathfun.h (decimal literals rounded to float). */
static const float C_SQRTHF = 0.707106781186547524f;
static const float C_LOG_P0 = 7.0376836292E-2f, C_LOG_P1 = -1.1514610310E-1f,
                   C_LOG_P2 = 1.1676998740E-1f, C_LOG_P3 = -1.2420140846E-1f,
                   C_LOG_P4 = 1.4249322787E-1f, C_LOG_P5 = -1.6668057665E-1f,
                   C_LOG_P6 = 2.0000714765E-1f, C_LOG_P7 = -2.4999993993E-1f,
                   C_LOG_P8 = 3.3333331174E-1f;
static const float C_LOG_Q1 = -2.12194440e-4f, C_LOG_Q2 = 0.693359375f;
static const float C_MINUS_DP1 = -0.78515625f, C_MINUS_DP2 = -2.4187564849853515625e-4f,
                   C_MINUS_DP3 = -3.77489497744594108e-8f;
static const float C_SINCOF_P0 = -1.9515295891E-4f, C_SINCOF_P1 = 8.3321608736E-3f,
                   C_SINCOF_P2 = -1.6666654611E-1f;
static const float C_COSCOF_P0 = 2.443315711809948E-005f, C_COSCOF_P1 = -1.388731625493765E-003f,
                   C_COSCOF_P2 = 4.166664568298827E-002f;
static const float C_FOPI = 1.27323954473516f;   /* 4 / pi */

/* log256_ps for one lane: natural log, NaN for x <= 0. */
static inline float cephes_logf(float x) {
    const float one = 1.0f;
    uint32_t invalid = (x <= 0.0f) ? 0xffffffffu : 0u;
    const float min_norm_pos = u2f(0x00800000u);
    x = (x > min_norm_pos) ? x : min_norm_pos;               /* _mm256_max_ps(x, min) */
    int32_t imm0 = (int32_t)(f2u(x) >> 23);
    x = u2f((f2u(x) & ~0x7f800000u) | f2u(0.5f));          /* mantissa, in [0.5, 1) */
    imm0 = imm0 - 0x7f;
    float e = (float)imm0;
    e = e + one;
    uint32_t mask = (x < C_SQRTHF) ? 0xffffffffu : 0u;
    float tmp = u2f(f2u(x) & mask);
    x = x - one;
    e = e - u2f(f2u(one) & mask);
    x = x + tmp;
    float z = x * x;
    float y = C_LOG_P0;                                       /* Horner, each step fused */
    y = fmaf(y, x, C_LOG_P1);
    y = fmaf(y, x, C_LOG_P2);
    y = fmaf(y, x, C_LOG_P3);
    y = fmaf(y, x, C_LOG_P4);
    y = fmaf(y, x, C_LOG_P5);
    y = fmaf(y, x, C_LOG_P6);
    y = fmaf(y, x, C_LOG_P7);
    y = fmaf(y, x, C_LOG_P8);
    y = y * x;
    tmp = e * C_LOG_Q1;
    y = fmaf(y, z, tmp);                                      /* y*z + e*q1: y*z comes first, fused */
    y = fmaf(-z, 0.5f, y);                                    /* y - z*0.5 */
    x = x + y;
    x = fmaf(e, C_LOG_Q2, x);                                 /* (x + y) + e*q2 */
    return u2f(f2u(x) | invalid);
}

/* sincos256_ps for one lane (valid for |x| < 8192, plenty for theta in [0, 2pi)). */
static inline void cephes_sincosf(float x, float *s, float *c) {
    uint32_t sign_bit_sin = f2u(x) & 0x80000000u;
    x = u2f(f2u(x) & 0x7fffffffu);
    float y = x * C_FOPI;
    int32_t imm2 = (int32_t)y;                                /* _mm256_cvttps_epi32 */
    imm2 = (imm2 + 1) & ~1;
    y = (float)imm2;
    int32_t imm4 = imm2;
    uint32_t swap_sign_bit_sin = ((uint32_t)imm2 & 4u) << 29;
    uint32_t poly_mask = ((imm2 & 2) == 0) ? 0xffffffffu : 0u;
    /* extended precision modular arithmetic: x = ((x - y*DP1) - y*DP2) - y*DP3, each fused */
    x = fmaf(y, C_MINUS_DP1, x);
    x = fmaf(y, C_MINUS_DP2, x);
    x = fmaf(y, C_MINUS_DP3, x);
    imm4 = imm4 - 2;
    uint32_t sign_bit_cos = (~(uint32_t)imm4 & 4u) << 29;
    sign_bit_sin ^= swap_sign_bit_sin;

    float z = x * x;                                          /* cos polynomial, 0 <= x <= pi/4 */
    float yc = C_COSCOF_P0;
    yc = fmaf(yc, z, C_COSCOF_P1);                            /* Horner, fused */
    yc = fmaf(yc, z, C_COSCOF_P2);
    yc = yc * z;
    float tmp = z * 0.5f;
    yc = fmaf(yc, z, -tmp);                                   /* (yc*z) - tmp, the first product fused */
    yc = yc + 1.0f;

    float ys = C_SINCOF_P0;                                   /* sin polynomial */
    ys = fmaf(ys, z, C_SINCOF_P1);                            /* Horner, fused */
    ys = fmaf(ys, z, C_SINCOF_P2);
    ys = ys * z;
    ys = fmaf(ys, x, x);                                      /* ys*x + x */

    float ysin2 = u2f(poly_mask & f2u(ys));                   /* _mm256_and_ps */
    float ysin1 = u2f(~poly_mask & f2u(yc));                  /* _mm256_andnot_ps */
    ys = ys - ysin2;
    yc = yc - ysin1;
    float sn = ysin1 + ysin2;
    float cs = yc + ys;
    *s = u2f(f2u(sn) ^ sign_bit_sin);
    *c = u2f(f2u(cs) ^ sign_bit_cos);
}

/* normal_fill_16_AVX2 with mean 0, std 1: 16 uniforms in place -> 16 normals. The kernel's final
 * fmadd(n, std, mean) is n*1+0, i.e. n (with -0 turned into +0), reproduced as such. */
static void normal_fill_16(float *d) {
    const float two_pi = (float)(2.0 * 3.14159265358979323846);   /* 2.0f * c10::pi<double> */
    const float minus_two = -2.0f;
    float n1[8], n2[8];
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - d[j];                               /* [0,1) -> (0,1] for log */
        float u2 = d[j + 8];
        float radius = sqrtf(minus_two * cephes_logf(u1));
        float theta = two_pi * u2;
        float sn, cs;
        cephes_sincosf(theta, &sn, &cs);
        n1[j] = radius * cs;
        n2[j] = radius * sn;
    }
    for (int j = 0; j < 8; j++) {
        d[j] = n1[j] * 1.0f + 0.0f;
        d[j + 8] = n2[j] * 1.0f + 0.0f;
    }
}

/* normal_fill_AVX2: uniforms for all, Box-Muller per 16, last 16 redrawn if n % 16 != 0. */
static void randn_vector_path(cvx_generator *g, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = uniform_float(g);
    for (size_t i = 0; i + 16 <= n; i += 16) normal_fill_16(out + i);
    if (n % 16 != 0) {
        float *tail = out + n - 16;
        for (int i = 0; i < 16; i++) tail[i] = uniform_float(g);
        normal_fill_16(tail);
    }
}

/* at::normal_distribution<double>(0, 1) with the generator's cached second sample. */
static double normal_double(cvx_generator *g) {
    if (g->has_next_double_normal) {
        g->has_next_double_normal = 0;
        return g->next_double_normal * 1.0 + 0.0;
    }
    double u1 = uniform_double(g);
    double u2 = uniform_double(g);
    double r = sqrt(-2.0 * log(1.0 - u2));   /* PyTorch 1.13 (later versions: log1p(-u2)) */
    double theta = 2.0 * 3.14159265358979323846 * u1;
    g->next_double_normal = r * sin(theta);
    g->has_next_double_normal = 1;
    double ret = r * cos(theta);
    return ret * 1.0 + 0.0;
}

void cvx_randn(cvx_generator *g, float *out, size_t n) {
    CVX_CHECK(g->magic == CVX_GENERATOR_MAGIC);
    if (n >= 16) {
        randn_vector_path(g, out, n);
    } else {
        for (size_t i = 0; i < n; i++) out[i] = (float)normal_double(g);
    }
}
