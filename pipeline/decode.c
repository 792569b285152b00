/* decode: latents -> frames (AutoencoderKLCogVideoX.decode as CogVideoXPipeline calls it). */
#include "pipeline/internal.h"

#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "validate.h"

/* --tiling auto tiles when an untiled decode would need more than this. */
#define AUTO_TILING_BUDGET (6.0 * 1024 * 1024 * 1024)

void cvx_frames_free(cvx_frames *f) {
    for (int b = 0; f->data && b < f->B; b++) free(f->data[b]);
    free(f->data);
    memset(f, 0, sizeof *f);
}

int cvx_decode(cvx_model *m, const cvx_decode_params *p, const float *zin, int B, int C, int T, int h, int w,
               const char *label, cvx_progress_fn progress, void *user, cvx_frames *out) {
    memset(out, 0, sizeof *out);
    if (!label) label = "latents";
    cvx_ctx_use(m->ctx);
    return m->family->decode(m, p, zin, B, C, T, h, w, label, progress, user, out);
}
