/* The end-to-end API tests' shared comparisons (header-only: every test is one program): a golden
 * case's pipeline run through cvx_sample / cvx_decode, each stage compared twice, once fed the
 * golden inputs (the error pinned to that stage) and once fed ours.
 *
 *   float *fin = gh_f32(&c, NULL, "final_latents");
 *   ah_check_latents(&c, "final_latents (golden embeddings)", &lat, fin);   // 1e-4
 *   ah_check_decode(&c, m, &dp, fin, &lat, &fr);   // decoded from fin (1e-4) and from lat (1e-3)
 *   gh_check_frames_np(&c, fr.data[0], fr.T, fr.H, fr.W, 1e-3);
 */
#ifndef CVX_API_HARNESS_H
#define CVX_API_HARNESS_H

#include "golden_harness.h"
#include "pipeline/cvx.h"

/* lat against the case's final_latents fin: the same count and relative L2 <= 1e-4 (printed as
 * `what`). */
static inline void ah_check_latents(gh_case *c, const char *what, const cvx_latents *lat, const float *fin) {
    const size_t n = (size_t)gh_tensor(c, "final_latents")->numel;
    assert_int_equal(n, (size_t)lat->C * lat->T * lat->h * lat->w);
    gh_check_rel_l2(c, what, lat->data, fin, n, 1e-4);
}

/* Stage 3 twice: from the golden final latents fin ("decoded (golden latents)", relative L2 <= 1e-4
 * against the case's decoded) and from ours in lat ("decoded", <= 1e-3); our frames into *fr. */
static inline void ah_check_decode(gh_case *c, cvx_model *m, const cvx_decode_params *dp, const float *fin,
                                   const cvx_latents *lat, cvx_frames *fr) {
    if (cvx_decode(m, dp, fin, 1, lat->C, lat->T, lat->h, lat->w, "final_latents", NULL, NULL, fr))
        fail_msg("%s", cvx_last_error());
    size_t nd;
    float *dec = gh_f32(c, &nd, "decoded");
    assert_int_equal(nd, (size_t)3 * fr->T * fr->H * fr->W);
    gh_check_rel_l2(c, "decoded (golden latents)", fr->data[0], dec, nd, 1e-4);
    cvx_frames_free(fr);
    if (cvx_decode(m, dp, lat->data, 1, lat->C, lat->T, lat->h, lat->w, "latents", NULL, NULL, fr))
        fail_msg("%s", cvx_last_error());
    gh_check_rel_l2(c, "decoded", fr->data[0], dec, nd, 1e-3);
    free(dec);
}

#endif
