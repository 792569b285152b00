/* A CogVideoX golden end-to-end case (tests/data/golden/e2e_*) set up for stage 2's loop
 * (header-only: every test is one program): its transformer, the request of its call, the latent
 * shape, its stored prompt embeddings and its scheduler.
 *
 *   cl_case c;
 *   cl_open(&c, "e2e_2b", 8);          // 8 steps (0: the case's)
 *   cvx_scheduler s;
 *   cl_scheduler(&c, &s);
 *   ... cvx_sample(c.m, &c.p, ...) with c.prompt / c.negative [c.L, D] ...
 *   cl_close(&c);
 */
#ifndef CVX_COGVIDEOX_LOOP_HARNESS_H
#define CVX_COGVIDEOX_LOOP_HARNESS_H

#include "golden_harness.h"

#include "stage2/sampler.h"
#include "stage2/cogvideox_family.h"
#include "stage2/cogvideox.h"

typedef struct {
    const char *dir;
    gh_case g;                   /* the golden case (one loader: tests/golden_harness.h) */
    cogvideox_transformer *m;
    cvx_loop_request r;          /* the case's call; p.req points here */
    cvx_loop_params p;
    cvx_latent_shape sh;
    float *prompt, *negative;    /* [L, D] each, checked against the transformer */
    int L;
} cl_case;

/* Case dir (under tests/data/golden) with `steps` inference steps (0: the call's). */
static inline void cl_open(cl_case *c, const char *dir, int steps) {
    memset(c, 0, sizeof(*c));
    c->dir = dir;
    gh_open(&c->g, dir);
    if (!(c->m = cogvideox_load(gh_path(&c->g, "model/transformer"), NULL))) fail_msg("%s", cvx_last_error());
    gh_call k = gh_call_of(&c->g);
    c->p.req = &c->r;
    c->r.frames = k.frames;
    c->r.height = k.height;
    c->r.width = k.width;
    c->r.num_inference_steps = steps ? steps : k.num_inference_steps;
    c->r.guidance_scale = k.guidance_scale;
    c->r.use_dynamic_cfg = k.use_dynamic_cfg;
    c->r.seed = k.seed;
    c->p.vae_scale_spatial = 8;
    c->p.vae_scale_temporal = 4;
    const cogvideox_config *cfg = cogvideox_get_config(c->m);
    if (cogvideox_latent_shape_for(cfg, &c->p, 0, &c->sh)) fail_msg("%s", cvx_last_error());
    const cvx_tensor *tp = gh_tensor(&c->g, "prompt_embeds"), *tn = gh_tensor(&c->g, "negative_prompt_embeds");
    if (cogvideox_check_embeddings(cfg, tp, tn, "expected.safetensors")) fail_msg("%s", cvx_last_error());
    c->L = (int)tp->shape[1];
    c->prompt = cvx_tensor_f32_dup(tp);
    c->negative = cvx_tensor_f32_dup(tn);
}

static inline void cl_close(cl_case *c) {
    free(c->prompt);
    free(c->negative);
    cogvideox_free(c->m);
    gh_close(&c->g);
}

/* the case's model/scheduler into s */
static inline void cl_scheduler(cl_case *c, cvx_scheduler *s) {
    if (cvx_scheduler_load(s, gh_path(&c->g, "model/scheduler/scheduler_config.json"), NULL))
        fail_msg("%s", cvx_last_error());
}

#endif
