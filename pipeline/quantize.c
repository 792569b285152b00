/* cvx_model_write_gguf: the model's transformer as a GGUF file, with its family's rules
 * (pipeline/family.h gguf_rules, stage2/quantize.h). */
#include "pipeline/internal.h"

#include <stdio.h>

#include "error.h"
#include "model.h"
#include "stage2/quantize.h"

int cvx_model_write_gguf(cvx_model *m, const char *type, int pure, const char *out_path) {
    unsigned ft;
    int pure_type;
    if (!m->family->gguf_rules) return cvx_error("%s: writing a GGUF is not supported for %s models", m->dir, m->family->name);
    if (cvx_quantize_parse_type(type, &ft, &pure_type)) return -1;
    char dir[4200];
    const char *src_path = m->transformer_file;
    if (!src_path[0]) {
        if (cvx_model_component(m->dir, "transformer", "config.json", dir, sizeof dir)) return -1;
        src_path = dir;
    }
    cvx_weights *src = cvx_weights_open(src_path);
    if (!src) return -1;
    if (cvx_weights_gguf(src)) {
        cvx_weights_close(src);
        return cvx_error("%s is a GGUF file already: quantize from the F32/BF16/F16 checkpoint", src_path);
    }
    cvx_quantize_stats st;
    const double t0 = cvx_time();
    int rc = cvx_quantize_to_gguf(src, m->family->gguf_rules, ft, pure || pure_type, out_path, &st);
    if (!rc) {
        char desc[512], fallback[64] = "";
        cvx_weights *out = cvx_weights_open(out_path);   /* read back: what a reader sees */
        if (!out) rc = -1;
        else {
            if (st.fallback_f16) snprintf(fallback, sizeof fallback, ", %d K-type rows not 256-blocks: F16", st.fallback_f16);
            cvx_info("wrote %s (%s; %d of %d tensors quantized%s; %.1f -> %.1f MB) in %.1f s", out_path,
                     cvx_weights_describe(out, desc, sizeof desc), st.quantized, st.tensors, fallback,
                     st.bytes_in / 1048576.0, st.bytes_out / 1048576.0, cvx_time() - t0);
            cvx_weights_close(out);
        }
    }
    cvx_weights_close(src);
    return rc;
}
