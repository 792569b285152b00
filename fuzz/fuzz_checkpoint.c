/* libFuzzer target: the stage-2 checkpoint reader (stage2_checkpoint.safetensors).
 *
 * The reader itself (checkpoint_read in stage2/sampler.c) is static and reads from a path, so
 * this target runs the same sequence on the pieces it uses, from memory: cvx_st_open_memory,
 * the 'format' metadata, the content hash (cvx_st_check_seal: sorting, hashing every tensor and
 * metadata entry of an untrusted header), the run.* metadata, the 'latents' / 'step' / 'generator' /
 * 'old_pred_original_sample' tensor checks, cvx_generator_restore, then what the sampler does
 * with an accepted state: draws (a full mt19937 regeneration cycle and a randn of both paths,
 * so an index the validation let through reads out of bounds under ASan/UBSan) and the
 * non-finite check of the latents. Run shape: latents [1, 1, 2, 2, 2]; fingerprint run.seed=42. */
#include "dtype.h"
#include "error.h"
#include "rng.h"
#include "safetensors.h"
#include "validate.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT "cogvideox.c stage2 checkpoint v2"
static volatile float g_sink;

static int read_checkpoint(const cvx_safetensors *st, float *latents, float *old_x0, cvx_generator *g) {
    const char *fmt = cvx_st_metadata(st, "format");
    if (!fmt || strcmp(fmt, FORMAT) != 0) return cvx_error("not a checkpoint");
    if (cvx_st_check_seal(st, "content_xxh64")) return -1;
    const char *seed = cvx_st_metadata(st, "run.seed");
    if (!seed || strcmp(seed, "42") != 0) return cvx_error("other run");
    const int64_t shape[5] = {1, 1, 2, 2, 2};
    const cvx_tensor *tl = cvx_st_find(st, "latents"), *ts = cvx_st_find(st, "step");
    const cvx_tensor *tg = cvx_st_find(st, "generator"), *to = cvx_st_find(st, "old_pred_original_sample");
    if (!tl || tl->dtype != CVX_F32 || tl->numel != 8 || tl->ndim != 5 || memcmp(tl->shape, shape, sizeof shape) != 0)
        return cvx_error("latents");
    if (!ts || ts->dtype != CVX_I64 || ts->numel != 1) return cvx_error("step");
    int64_t step;
    memcpy(&step, ts->data, sizeof step);
    const char *meta_step = cvx_st_metadata(st, "steps_done");
    if (step < 1 || step >= 50 || !meta_step || strtoll(meta_step, NULL, 10) != step) return cvx_error("step range");
    if (!tg || tg->dtype != CVX_U8) return cvx_error("generator");
    if (cvx_generator_restore(g, tg->data, tg->nbytes)) return -1;
    if (to) {
        if (to->dtype != CVX_F32 || to->numel != 8) return cvx_error("old_pred_original_sample");
        memcpy(old_x0, to->data, 8 * sizeof(float));
        if (cvx_check_finite(old_x0, 8, "old_pred_original_sample")) return -1;
    }
    memcpy(latents, tl->data, 8 * sizeof(float));
    return cvx_check_finite(latents, 8, "latents");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cvx_clear_error();
    cvx_safetensors *st = cvx_st_open_memory(data, size, "fuzz_checkpoint");
    if (!st) {
        if (!cvx_last_error()[0]) abort();   /* every refusal carries a message */
        return 0;
    }
    float latents[8], old_x0[8], noise[40];
    cvx_generator g;
    memset(&g, 0xa5, sizeof g);
    cvx_generator before = g;
    if (read_checkpoint(st, latents, old_x0, &g) == 0) {
        for (int k = 0; k < CVX_MT_N + 3; k++) g_sink += (float)cvx_generator_random(&g);
        cvx_randn(&g, noise, 3);    /* double path, uses the cached normal */
        cvx_randn(&g, noise, 40);   /* vector path with a tail */
        for (int i = 0; i < 8; i++) g_sink += latents[i] + noise[i];
    } else {
        if (!cvx_last_error()[0]) abort();
        /* a refused generator state must leave the caller's generator untouched */
        const cvx_tensor *tg = cvx_st_find(st, "generator");
        if (tg && tg->nbytes != sizeof g && memcmp(&g, &before, sizeof g) != 0) abort();
    }
    cvx_st_close(st);
    return 0;
}
