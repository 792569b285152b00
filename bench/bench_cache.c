/* TeaCache on a real schedule: steps computed / skipped per threshold, and the time per video
 * EXTRAPOLATED from per-step costs (no full forward runs here).
 *
 *   bench_cache [--steps 50] [--t_step2b S] [--t_step5b S] [--t_skip S] [--t_fixed S]
 *               [--model2b DIR] [--model5b DIR]     (diffusers model directories)
 *
 * TeaCache's decisions depend only on the timestep embedding e(t) of the model (its
 * time_embedding weights) and the schedule, so each model needs only a few tiny forwards. With no
 * model directory, the golden tiny RANDOM-weight models (tests/data/golden/e2e_{2b,5b}) are used:
 * their e(t) is nothing like a trained model's, so those counts show the machinery, not what a
 * real CogVideoX run would skip. FBCache's pattern depends on the content and is not predicted.
 *
 * Default per-step costs: a computed step at 49 frames 480×720 with CFG, from docs/performance.md
 * (bench_stage2 on this 2-core machine: 2b ≈ 23 min, 5b ≈ 62 min); a skipped step runs only the
 * embeddings, norm_out/proj_out and one add over [2, S, D] (taken as 5 s, an upper guess); t_fixed
 * = stage 1 + stage 3 (≈ 30 s + 23 min). Override them with what you measured. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "ops.h"
#include "stage2/cache.h"
#include "stage2/scheduler_ddpm.h"
#include "stage2/cogvideox_family.h"

/* e(t) [n][E] for the schedule's timesteps, from small forwards (e does not depend on x). */
static float *embeddings(cogvideox_transformer *m, const int64_t *ts, int n, int *E_out) {
    const cogvideox_config *c = cogvideox_get_config(m);
    int p = c->patch_size, pt = c->patch_size_t > 0 ? c->patch_size_t : 1, F = pt, H = p, W = p;
    int L = c->max_text_seq_length, hd = c->attention_head_dim;
    float *x = calloc((size_t)2 * F * c->in_channels * H * W, sizeof(float));
    float *text = calloc((size_t)2 * L * c->text_embed_dim, sizeof(float));
    float *rc = calloc((size_t)hd, sizeof(float)), *rs = calloc((size_t)hd, sizeof(float));
    float *e = malloc(sizeof(float) * (size_t)n * c->time_embed_dim);
    for (int i = 0; i < n; i++) {
        int64_t t2[2] = {ts[i], ts[i]};
        cogvideox_fwd f;
        if (cogvideox_forward_embed(m, x, 2, F, H, W, text, L, t2, NULL, 0, rc, rs, &f)) cvx_die_last_error();
        memcpy(e + (size_t)i * f.E, f.emb, sizeof(float) * f.E);
        cogvideox_forward_abort(&f);
    }
    *E_out = c->time_embed_dim;
    free(x); free(text); free(rc); free(rs);
    return e;
}

static void one_model(const char *label, const char *dir, int n_steps, double t_step, double t_skip, double t_fixed) {
    char tdir[4200], scfg[4200];
    snprintf(tdir, sizeof tdir, "%s/transformer", dir);
    snprintf(scfg, sizeof scfg, "%s/scheduler/scheduler_config.json", dir);
    cogvideox_transformer *m = cogvideox_load(tdir, NULL);
    cvx_scheduler s;
    if (!m || cvx_scheduler_load(&s, scfg, NULL) || cvx_scheduler_set_timesteps(&s, n_steps))
        cvx_die_last_error();
    double co[5];
    const char *set = cogvideox_teacache_coefficients(cogvideox_get_config(m), co);
    int E;
    float *e = embeddings(m, ddpm_of(&s)->timesteps, n_steps, &E);
    printf("\n%s (%s): %d steps %s, TeaCache coefficients %s\n", label, dir, n_steps, s.type->name, set);
    printf("  threshold  computed  skipped  stage-2 time (extrapolated)   video total (extrapolated)  speed-up\n");
    const double thr[] = {0, 0.1, 0.2, 0.3};
    double base = n_steps * t_step;
    for (int k = 0; k < 4; k++) {
        int computed = n_steps;
        if (thr[k] > 0) {
            cvx_cache c;
            if (cvx_cache_init(&c, CVX_CACHE_TEACACHE, thr[k], co, n_steps, 2)) cvx_die_last_error();
            computed = 0;
            for (int i = 0; i < n_steps; i++) computed += cvx_teacache_decide(&c, i, e + (size_t)i * E, E);
            cvx_cache_free(&c);
        }
        double t2 = computed * t_step + (n_steps - computed) * t_skip;
        printf("  %9.2f  %8d  %7d  %9.1f h                   %9.1f h                    %.2fx\n", thr[k], computed,
               n_steps - computed, t2 / 3600, (t2 + t_fixed) / 3600, (base + t_fixed) / (t2 + t_fixed));
    }
    free(e);
    cvx_scheduler_free(&s);
    cogvideox_free(m);
}

int main(int argc, char **argv) {
    int steps = 50;
    double t2b = 23 * 60, t5b = 62 * 60, t_skip = 5, t_fixed = 30 + 23 * 60;
    const char *m2b = "tests/data/golden/e2e_2b/model", *m5b = "tests/data/golden/e2e_5b/model";
    int random2b = 1, random5b = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) cvx_die("%s needs a value", a);
        if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--t_step2b")) t2b = atof(v);
        else if (!strcmp(a, "--t_step5b")) t5b = atof(v);
        else if (!strcmp(a, "--t_skip")) t_skip = atof(v);
        else if (!strcmp(a, "--t_fixed")) t_fixed = atof(v);
        else if (!strcmp(a, "--model2b")) m2b = v, random2b = 0;
        else if (!strcmp(a, "--model5b")) m5b = v, random5b = 0;
        else cvx_die("unknown option '%s' (see the comment at the top of bench/bench_cache.c)", a);
        i++;
    }
    cvx_set_verbosity(0);
    printf("TeaCache schedule benchmark. Times are EXTRAPOLATED: computed·t_step + skipped·t_skip (+ %.0f s for\n"
           "stages 1 and 3), with t_step 2b %.0f s, 5b %.0f s, t_skip %.0f s (49 frames 480x720, CFG, this machine's\n"
           "measured rates from docs/performance.md; pass your own with --t_step2b/--t_step5b/--t_skip).\n", t_fixed,
           t2b, t5b, t_skip);
    one_model(random2b ? "2b-style tiny RANDOM-weight model (pattern NOT representative)" : "CogVideoX-2b", m2b, steps,
              t2b, t_skip, t_fixed);
    one_model(random5b ? "5b-style tiny RANDOM-weight model (pattern NOT representative)" : "CogVideoX-5b", m5b, steps,
              t5b, t_skip, t_fixed);
    /* what the counts would be if the real models skipped as upstream reports (its only CogVideoX
     * latency table: CogVideoX1.5-5B T2V, H100, 50 steps): computed ≈ steps / ratio */
    const double ratio[3] = {465.0 / 322, 465.0 / 260, 465.0 / 204};
    printf("\nIF the real model skipped as upstream's CogVideoX1.5-5B T2V table implies (latency ratios 1.44x/1.79x/2.28x\n"
           "at 0.1/0.2/0.3 -> computed = steps / ratio; an assumption, not a measurement of 2b/5b):\n");
    printf("  threshold  computed  2b video total (extrapolated)  5b video total (extrapolated)\n");
    for (int k = 0; k < 3; k++) {
        int comp = (int)(steps / ratio[k] + 0.5);
        double v2 = comp * t2b + (steps - comp) * t_skip + t_fixed, v5 = comp * t5b + (steps - comp) * t_skip + t_fixed;
        printf("  %9.1f  %8d  %9.1f h (%.2fx)              %9.1f h (%.2fx)\n", 0.1 * (k + 1), comp, v2 / 3600,
               (steps * t2b + t_fixed) / v2, v5 / 3600, (steps * t5b + t_fixed) / v5);
    }
    return 0;
}
