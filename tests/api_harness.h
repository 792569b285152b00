/* The end-to-end API tests' shared comparisons (header-only: every test is one program): a golden
 * case's pipeline run through cvx_sample / cvx_decode, each stage compared twice, once fed the
 * golden inputs (the error pinned to that stage) and once fed ours.
 *
 *   float *fin = gh_f32(&c, NULL, "final_latents");
 *   ah_check_latents(&c, "final_latents (golden embeddings)", &lat, fin);   // 1e-4
 *   ah_check_decode(&c, m, &dp, fin, &lat, &fr);   // decoded from fin (1e-4) and from lat (1e-3)
 *
 * and the pieces such a run is set up with: the logged timesteps against the case's
 * (ah_step_log, ah_check_timesteps) and the further conditioning's CFG pair (ah_cond_set_split).
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

/* The timesteps a run's steps took (sp.on_step = ah_log_step, sp.on_step_user = &log). */
#define AH_MAX_STEPS 64
typedef struct {
    double t[AH_MAX_STEPS];
    int n;   /* steps seen (the first AH_MAX_STEPS kept) */
} ah_step_log;

static inline void ah_log_step(void *user, const cvx_step_info *info) {
    ah_step_log *l = user;
    if (l->n < AH_MAX_STEPS) l->t[l->n] = info->timestep;
    l->n++;
}

/* The logged timesteps against the case's, exactly: the expected tensor "timesteps" where the case
 * has one, else case.json's "timesteps" array. */
static inline void ah_check_timesteps(gh_case *c, const ah_step_log *log) {
    size_t n;
    float *t = gh_tensor_opt(c, "timesteps") ? gh_f32(c, &n, "timesteps") : NULL;
    json_object *arr = t ? NULL : gh_json(c, "timesteps");
    if (!t) n = gh_len(arr);
    assert_int_equal(log->n, n);
    assert_true(log->n <= AH_MAX_STEPS);
    for (size_t i = 0; i < n; i++) {
        const double want = t ? (double)t[i] : gh_num(gh_at(arr, i));
        if (log->t[i] != want) fail_msg("%s: timestep %zu is %.9g, expected %.9g", c->name, i, log->t[i], want);
    }
    free(t);
}

/* cvx_encode_texts_more of the two texts {negative, prompt} gives each tensor's rows [2, L, D] in
 * its prompt; split them in place into the CFG pair cond_more takes: negative = row 0 (a copy),
 * prompt = row 1. Free with cvx_cond_set_free as before. */
static inline void ah_cond_set_split(cvx_cond_set *s) {
    for (int k = 0; k < s->n; k++) {
        cvx_cond_tensor *t = &s->t[k];
        const size_t nk = (size_t)t->L * t->D;
        assert_null(t->negative);
        t->negative = malloc(nk * sizeof(float));
        assert_non_null(t->negative);
        memcpy(t->negative, t->prompt, nk * sizeof(float));
        memmove(t->prompt, t->prompt + nk, nk * sizeof(float));
    }
}

#endif
