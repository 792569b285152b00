/* A torch-exact random generator: PyTorch's CPU generator (at::CPUGeneratorImpl, mt19937)
 * and torch.randn for float32, bit for bit.
 *
 * Reproduces PyTorch 1.13 on an x86-64 machine with AVX2 (what the golden data was made on):
 *   g = torch.Generator('cpu').manual_seed(seed)
 *   torch.randn(shape, generator=g, dtype=torch.float32)      (C order, any shape)
 * with the generator state carrying over from one draw to the next.
 *
 * How PyTorch does it (aten/src/ATen/native/cpu/DistributionTemplates.h, normal_kernel):
 *  - numel >= 16 (contiguous float): every element first gets a uniform float in [0, 1)
 *    (24 low bits of one 32-bit mt19937 draw times 2^-24); then blocks of 16 go through
 *    Box-Muller (u1 = 1 - d[j], u2 = d[j+8], r = sqrt(-2 log u1), th = 2pi u2; d[j] = r cos th,
 *    d[j+8] = r sin th). If numel % 16 != 0 the last 16 elements are refilled with 16 fresh
 *    uniforms and transformed again (overlapping the previous block). On AVX2 the transform is
 *    normal_fill_16_AVX2, whose log/sin/cos are the Cephes-style float approximations
 *    log256_ps / sincos256_ps of ATen's avx_mathfun.h, compiled by GCC with FMA contraction.
 *    rng.c evaluates the same float operations in the same order in portable scalar C, with
 *    fmaf() exactly where GCC fused a multiply-add and no other fusion (-ffp-contract=off), so
 *    the result does not depend on this machine's SIMD, compiler choices or libm.
 *  - numel < 16: one at::normal_distribution<double> sample per element (two 64-bit uniforms
 *    with 53-bit mantissas, double Box-Muller with libm log/sin/cos, the sin half cached in the
 *    generator for the next call), cast to float.
 * A non-AVX2 PyTorch build (normal_fill with std::log/cos/sin in float) gives slightly different
 * values for numel >= 16; it is not reproduced. */
#ifndef CVX_RNG_H
#define CVX_RNG_H

#include <stddef.h>
#include <stdint.h>

#define CVX_MT_N 624
/* "CVXRNG01": identifies the layout and algorithm of cvx_generator; bump it on any change so a
 * stage-2 checkpoint written by an incompatible build is refused (cvx_generator_validate). */
#define CVX_GENERATOR_MAGIC 0x3130474E52585643ull

/* Plain old data, fixed size, no pointers: saved byte for byte into checkpoints. Treat the
 * fields as private; they mirror at::mt19937_data_pod plus the cached double normal. */
typedef struct {
    uint64_t magic;                 /* CVX_GENERATOR_MAGIC */
    uint64_t seed;                  /* value given to manual_seed (torch: g.initial_seed()) */
    uint32_t state[CVX_MT_N];       /* mt19937 state words */
    uint32_t next;                  /* index of the next state word to temper */
    int32_t left;                   /* as torch: the state is regenerated when --left reaches 0 */
    double next_double_normal;      /* cached sin half of the last double Box-Muller pair */
    uint32_t has_next_double_normal;/* 1 when next_double_normal is valid */
    uint32_t reserved;              /* zero; keeps the size a multiple of 8 */
} cvx_generator;

/* torch.Generator('cpu').manual_seed(seed): mt19937 initialised from the low 32 bits of seed
 * (torch keeps all 64 bits as initial_seed), cached normals cleared. */
void cvx_generator_seed(cvx_generator *g, uint64_t seed);

/* torch.randn(n elements, generator=g, dtype=float32) in C order; advances g exactly as torch. */
void cvx_randn(cvx_generator *g, float *out, size_t n);

/* One raw 32-bit mt19937 output (torch: generator->random()). */
uint32_t cvx_generator_random(cvx_generator *g);
/* Two draws joined high word first (torch: generator->random64()). */
uint64_t cvx_generator_random64(cvx_generator *g);

/* Check a generator loaded from a checkpoint: magic, that next/left are a state mt19937 can be
 * in (next + left == 625, or the fresh seed's 0/1), cache flag, reserved. 0, or -1 + cvx_error. */
int cvx_generator_validate(const cvx_generator *g);
/* Restore a generator from n saved bytes (a checkpoint's 'generator' tensor): size check, copy,
 * cvx_generator_validate. *g is only written on success. 0, or -1 + cvx_error. */
int cvx_generator_restore(cvx_generator *g, const void *bytes, size_t n);

#endif
