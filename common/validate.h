/* Input validation shared by the stages: non-finite tensors, config numbers out of range,
 * generation_config.json values, prompt text. Each returns 0, or -1 + one cvx_error line naming
 * the tensor / file and key / what was expected. Cheap enough to run on every input. */
#ifndef CVX_VALIDATE_H
#define CVX_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* First NaN/Inf in x[0..n): "tensor 'NAME': non-finite value nan at index 17 (of 921600)".
 * Vectorized: an OR over the exponent bits per block, the index is searched only on a hit. */
int cvx_check_finite(const float *x, size_t n, const char *name);
/* Index of the first non-finite value, or n when all are finite (the kernel of the above). */
size_t cvx_first_nonfinite(const float *x, size_t n);
/* The portable reference: a plain isfinite() loop (tests compare the two). */
size_t cvx_first_nonfinite_ref(const float *x, size_t n);

/* Range-checked config numbers: missing/null gives def (the _or forms); a value that is not
 * finite or outside [lo, hi] is an error naming the file and key:
 *   "vae/config.json: key 'scaling_factor' = 0 is out of range: must be in (0, 1000]". */
int cvx_cfg_int_range_or(const cvx_config *c, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *out);
int cvx_cfg_num_range_or(const cvx_config *c, const char *key, double def, double lo, double hi, int lo_open,
                         double *out);

/* Check every number a model config (transformer, VAE, T5 config.json) may hold against the
 * sizes a real model can have, before anything is allocated from them: num_layers 1e9 becomes
 * "…config.json: key 'num_layers' = 1000000000 is out of range [1, 1024]", not an OOM. Keys
 * absent from the file are skipped; types are left to the typed getters. */
int cvx_check_model_config(const cvx_config *c);

/* generation_config.json as written by the stages: fps > 0, frames, sizes, steps, guidance,
 * seed in range and finite; prompts valid UTF-8; hashes 16 hex digits (or null: invalidated).
 * Absent keys are fine. */
int cvx_genconfig_validate(const cvx_config *gc);

/* The pair check the next stage runs before any long computation: `key` of gc (e.g.
 * "stage2_latents_xxh64", written by the stage that wrote data_path in the same output set) must
 * equal the xxh64 of data_path: "stage2_latents.safetensors does not belong to
 * generation_config.json: xxh64 X != Y recorded there ...". A config without the key (written by
 * an older build) is accepted (a note naming the key at --verbose); the key present and null means
 * a later run of an earlier stage invalidated the file (stage 1 nulls stage2_latents_xxh64): an
 * error ending "run stage N again". */
int cvx_genconfig_check_pair(const cvx_config *gc, const char *data_path, const char *key);

/* Valid UTF-8 (no overlongs, surrogates or > U+10FFFF). *bad_offset gets the first bad byte. */
int cvx_utf8_valid(const char *s, size_t n, size_t *bad_offset);
/* A prompt given by the user: non-empty after trimming whitespace, valid UTF-8, no NUL/control
 * characters other than tab/newline. `what` names it ("--prompt", "prompts.txt line 3"). */
int cvx_check_prompt(const char *s, const char *what);

#endif
