/* torch.randn in bfloat16 / float16 on the CPU, bit for bit (PyTorch 1.13, glibc libm).
 *
 * A diffusers pipeline loaded with torch_dtype=bfloat16 (CogVideoX-5b / 1.5, the official demo) or
 * float16 (2b) draws its initial latents (prepare_latents) and the DPM scheduler's per-step noise
 * (CogVideoXDPMScheduler.step: randn_tensor(..., dtype=sample.dtype), sample = the bf16 latents) as
 *   torch.randn(shape, generator=g, dtype=torch.bfloat16 / torch.float16)
 * On CPU that is NOT the float32 draw rounded: for 16 or more values PyTorch runs a scalar
 * Box-Muller over 8- or 11-bit uniforms in the reduced type (see rng_lowp.c for the exact
 * algorithm). Below 16 values it is the float32 draw (double Box-Muller) rounded.
 * The generator state carries over exactly as torch's, so f32 and low-precision draws can be
 * mixed on one generator. */
#ifndef CVX_RNG_LOWP_H
#define CVX_RNG_LOWP_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "rng.h"

/* torch.randn(n, generator=g, dtype) for dtype CVX_BF16 or CVX_F16, C order: out[i] gets the raw
 * 16-bit pattern. Advances g as torch does. 0, or -1 + cvx_error for any other dtype. */
int cvx_randn_lowp(cvx_generator *g, cvx_dtype dtype, uint16_t *out, size_t n);

/* The same draw for dtype CVX_F32 (= cvx_randn), CVX_BF16 or CVX_F16, widened to f32 (exact):
 * what a pipeline running in `dtype` gets as latents / DPM noise, in the f32 buffers we compute
 * with. 0, or -1 + cvx_error for an unsupported dtype. */
int cvx_randn_as(cvx_generator *g, cvx_dtype dtype, float *out, size_t n);

/* Command-line names of the noise dtype: "f32" / "float32", "bf16" / "bfloat16", "fp16" / "f16" /
 * "float16". 0, or -1 + cvx_error naming the accepted values. */
int cvx_noise_dtype_parse(const char *name, cvx_dtype *out);

#endif
