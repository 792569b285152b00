/* decode: latents -> frames (AutoencoderKLCogVideoX.decode as CogVideoXPipeline calls it). */
#include "pipeline/internal.h"

#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "validate.h"

void cvx_frames_free(cvx_frames *f) {
    for (int b = 0; f->data && b < f->B; b++) free(f->data[b]);
    free(f->data);
    memset(f, 0, sizeof *f);
}

int cvx_decode_check(cvx_model *m, const cvx_decode_params *p, int h, int w) {
    if (cvx_family_check_decode_options(m->family, p)) return -1;   /* a stage-3 option the row does not take */
    return m->family->check_decode ? m->family->check_decode(m, p, h, w) : 0;
}

int cvx_decode(cvx_model *m, const cvx_decode_params *p, const float *zin, int B, int C, int T, int h, int w,
               const char *label, cvx_progress_fn progress, void *user, cvx_frames *out) {
    memset(out, 0, sizeof *out);
    if (!label) label = "latents";
    if (cvx_family_check_decode_options(m->family, p)) return -1;
    cvx_ctx_use(m->ctx);
    return m->family->decode(m, p, zin, B, C, T, h, w, label, progress, user, out);
}
