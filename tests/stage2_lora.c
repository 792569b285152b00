/* LoRA adapters on the transformers (common/lora.h, cvx_linear) against the golden LoRA cases
 * (tests/data/golden_lora/<cogvideox|wan>, copied from shared/golden_lora; diffusers 0.33.1 +
 * peft 0.15.2 on tiny models):
 *   - every run of case.json (adapter weights via set_adapters, fused at several lora_scale) of
 *     every LoRA file (diffusers keys, rank 4/8, a mixed-rank file, lora_adapter_metadata; Wan:
 *     diffusers, original lora_A/B, ComfyUI/Kijai lora_down/up + alpha, diff_b bias deltas):
 *     transformer output within 1e-5 (rel L2), and clearly off output_base (the LoRA acts);
 *   - the scale applied per layer equals keymap.<lora>.json's (peft scaling × converter folds);
 *   - the fused weights (and biases) equal diffusers' fused.<lora>.s<s>.* (1e-6);
 *   - Wan: the diffusers-converted state dict (<lora>.converted.safetensors, alpha folded into the
 *     weights) gives the raw file's output;
 *   - bf16: the LoRA adds no bf16 error beyond the base model's own (distance printed).
 * lora_adapter_metadata: we follow diffusers >= 0.34 (scaling = metadata lora_alpha / r, the
 * case's alpha_semantics_w1.0); the golden's w/fused runs are 0.33.1's, which ignores the metadata:
 * they are reproduced with the weight scaled by r / lora_alpha. */
#include "golden_harness.h"

#include "lora.h"
#include "stage2/cogvideox.h"
#include "stage2/wan.h"

#define LORA_DATA "tests/data/golden_lora/"
#define TOL 1e-5          /* transformer output, rel L2 (README: ~1e-5) */
#define TOL_FUSED_W 1e-6  /* fused weights, max abs */
#define TOL_SCALE 1e-12   /* per-layer scale vs keymap, relative */

/* ------------------------------------------------------------------ one case: model + inputs */

typedef struct {
    gh_case c;
    int wan;
    cogvideox_transformer *cog;
    wan_transformer *wm;
    cvx_ctx *ctx;
    cvx_lora_target *targets;
    int n_targets;
    float *x, *text, *cos, *sin, tf[16];
    int64_t ti[16];
    int B, F, H, W, L;
    size_t n_out;
} lcase;

static void lc_open(lcase *k, const char *name, cvx_precision prec) {
    char p[256];
    memset(k, 0, sizeof *k);
    snprintf(p, sizeof p, LORA_DATA "%s", name);
    gh_open(&k->c, p);
    k->ctx = cvx_ctx_new(2);
    ASSERT_OK(cvx_ctx_set_precision(k->ctx, prec));
    k->wan = strcmp(name, "wan") == 0;
    const cvx_tensor *hs = gh_tensor(&k->c, "hidden_states"), *eh = gh_tensor(&k->c, "encoder_hidden_states");
    const cvx_tensor *ts = gh_tensor(&k->c, "timestep");
    assert_int_equal(hs->ndim, 5);
    k->B = (int)hs->shape[0], k->L = (int)eh->shape[1];
    assert_true(k->B <= 16 && ts->numel == k->B);
    k->x = cvx_tensor_f32_dup(hs);
    k->text = cvx_tensor_f32_dup(eh);
    k->n_out = (size_t)hs->numel;   /* out_channels = in_channels in both cases */
    if (k->wan) {   /* [B, C, F, H, W], float timesteps */
        k->F = (int)hs->shape[2], k->H = (int)hs->shape[3], k->W = (int)hs->shape[4];
        cvx_tensor_to_f32(ts, k->tf);
        k->wm = wan_load(gh_path(&k->c, "model/transformer"), k->ctx);
        ASSERT_NONNULL(k->wm);
        k->n_targets = wan_lora_targets(k->wm, &k->targets);
    } else {        /* [B, F, C, H, W], int64 timesteps, the pipeline's rotary tables */
        k->F = (int)hs->shape[1], k->H = (int)hs->shape[3], k->W = (int)hs->shape[4];
        for (int b = 0; b < k->B; b++) k->ti[b] = gh_i64_at(ts, (size_t)b);
        k->cos = gh_f32_opt(&k->c, "image_rotary_emb_cos");
        k->sin = gh_f32_opt(&k->c, "image_rotary_emb_sin");
        k->cog = cogvideox_load(gh_path(&k->c, "model/transformer"), k->ctx);
        ASSERT_NONNULL(k->cog);
        k->n_targets = cogvideox_lora_targets(k->cog, &k->targets);
    }
    assert_true(k->n_targets > 0);
}

static void lc_close(lcase *k) {
    if (k->wan) wan_free(k->wm);
    else cogvideox_free(k->cog);
    cvx_ctx_free(k->ctx);
    free(k->targets); free(k->x); free(k->text); free(k->cos); free(k->sin);
    gh_close(&k->c);
}

static float *lc_forward(lcase *k) {
    float *out = cvx_alloc_f32(k->n_out);
    if (k->wan) ASSERT_OK(wan_forward(k->wm, k->x, k->B, k->F, k->H, k->W, k->text, k->L, NULL, 0, k->tf, out));
    else ASSERT_OK(cogvideox_forward(k->cog, k->x, k->B, k->F, k->H, k->W, k->text, k->L, k->ti, k->cos, k->sin, out));
    return out;
}

/* The set of one file at weight w, attached to the case's context (NULL on failure). */
static cvx_lora_set *lc_attach(lcase *k, const char *file, double w, int fuse) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", k->c.dir, file);
    cvx_lora_spec spec = {path, w};
    cvx_lora_set *s = cvx_lora_load(&spec, 1, k->targets, k->n_targets, k->wan ? "Wan" : "CogVideoX", fuse);
    k->ctx->lora = s;
    return s;
}

static void lc_detach(lcase *k, cvx_lora_set *s) {
    k->ctx->lora = NULL;
    cvx_lora_free(s);
}

/* The weight diffusers 0.33.1's runs correspond to in our (metadata-reading) semantics. */
static double meta_factor(json_object *lora) {
    json_object *md;
    if (!json_object_object_get_ex(lora, "lora_adapter_metadata", &md) || !md) return 1.0;
    double r = gh_num(gh_get(md, "transformer.r")), a = gh_num(gh_get(md, "transformer.lora_alpha"));
    return r / a;
}

/* ------------------------------------------------------------------ every run of case.json */

static void check_runs(const char *name) {
    lcase k;
    lc_open(&k, name, CVX_PRECISION_F32);
    float *base = lc_forward(&k), *want_base = gh_f32(&k.c, NULL, "output_base");
    gh_check_rel_l2(&k.c, "output_base (no LoRA)", base, want_base, k.n_out, TOL);
    json_object *loras = gh_json(&k.c, "loras");
    int runs = 0;
    for (size_t i = 0; i < gh_len(loras); i++) {
        json_object *lora = gh_at(loras, i);
        const char *lname = gh_str(gh_get(lora, "name")), *file = gh_str(gh_get(lora, "file"));
        const double factor = meta_factor(lora);
        json_object_object_foreach(gh_get(lora, "runs"), key, val) {
            (void)val;
            char prefix[160], what[256];
            snprintf(prefix, sizeof prefix, "output.%s.", lname);
            assert_true(strncmp(key, prefix, strlen(prefix)) == 0);
            const char *run = key + strlen(prefix);
            double w;
            int fuse = 0;
            if (strstr(run, "_peft")) continue;   /* peft 0.15.2's unscaled merged bias: informational (README) */
            if (sscanf(run, "alpha_semantics_w%lf", &w) == 1) {
                /* diffusers >= 0.34's reading of lora_adapter_metadata: ours */
            } else if (sscanf(run, "fused%lf", &w) == 1) {
                fuse = 1, w *= factor;
            } else if (sscanf(run, "w%lf", &w) == 1) {
                w *= factor;
            } else {
                fail_msg("%s: unknown run '%s'", k.c.name, key);
            }
            cvx_lora_set *s = lc_attach(&k, file, w, fuse);
            ASSERT_NONNULL(s);
            float *out = lc_forward(&k), *want = gh_f32(&k.c, NULL, "%s", key);
            snprintf(what, sizeof what, "%s (weight %g%s)", key, w, fuse ? ", fused" : "");
            gh_check_rel_l2(&k.c, what, out, want, k.n_out, TOL);
            /* the LoRA's effect is far above the tolerance: a wrong scale cannot pass */
            double effect = cvx_rel_l2(want_base, want, k.n_out);
            snprintf(what, sizeof what, "%s moves the output (rel L2 %.2g vs base)", key, effect);
            gh_check_true(&k.c, what, effect > 100 * TOL);
            lc_detach(&k, s);
            free(out), free(want);
            runs++;
        }
    }
    print_message("  %s: %d LoRA runs\n", k.c.name, runs);
    assert_true(runs >= 4 * (int)gh_len(loras) - 1);
    free(base), free(want_base);
    lc_close(&k);
}

static void test_cogvideox_runs(void **state) { (void)state; check_runs("cogvideox"); }
static void test_wan_runs(void **state) { (void)state; check_runs("wan"); }

/* ------------------------------------------------------------------ per-layer scales (keymap) */

/* Our scale of `module` in set s (adapter 0), or NAN. */
static double scale_of(const cvx_lora_set *s, const char *module, int bias) {
    for (int i = 0; i < cvx_lora_term_count(s); i++) {
        cvx_lora_term_info t;
        cvx_lora_term_at(s, i, &t);
        if (!strcmp(t.module, module)) return bias ? t.bias_scale : t.scale;
    }
    return NAN;
}

static void check_keymaps(const char *name) {
    lcase k;
    lc_open(&k, name, CVX_PRECISION_F32);
    json_object *loras = gh_json(&k.c, "loras");
    int checked = 0;
    for (size_t i = 0; i < gh_len(loras); i++) {
        json_object *lora = gh_at(loras, i);
        const char *lname = gh_str(gh_get(lora, "name")), *file = gh_str(gh_get(lora, "file"));
        const double factor = meta_factor(lora);
        char km[256];
        snprintf(km, sizeof km, "keymap.%s.json", lname);
        cvx_config j;
        ASSERT_OK(cvx_config_load(&j, gh_path(&k.c, km)));
        json_object *entries = gh_get(j.root, "entries");
        json_object *settings = gh_get(gh_at(entries, 0), "scaling");
        json_object_object_foreach(settings, setting, sv) {
            (void)sv;
            double w;
            if (sscanf(setting, "alpha_semantics_w%lf", &w) != 1) {
                ASSERT_OK(sscanf(setting, "w%lf", &w) != 1);
                w *= factor;
            }
            cvx_lora_set *s = lc_attach(&k, file, w, 0);
            ASSERT_NONNULL(s);
            assert_int_equal(cvx_lora_layer_count(s), (int)gh_len(entries));
            for (size_t e = 0; e < gh_len(entries); e++) {
                json_object *ent = gh_at(entries, e), *eff;
                const char *module = gh_str(gh_get(ent, "module"));
                double peft = gh_num(gh_get(gh_get(gh_get(ent, "scaling"), setting), "scaling"));
                double want = json_object_object_get_ex(ent, "effective_scale", &eff)
                                  ? gh_num(gh_get(eff, setting)) : peft;   /* Wan: folds × scaling */
                double got = scale_of(s, module, 0), got_b = scale_of(s, module, 1);
                if (!(fabs(got - want) <= TOL_SCALE * fabs(want)) || !(fabs(got_b - peft) <= TOL_SCALE * fabs(peft)))
                    fail_msg("%s %s %s: scale %.17g (bias %.17g), keymap %.17g (peft scaling %.17g)", k.c.name,
                             lname, module, got, got_b, want, peft);
                checked++;
            }
            lc_detach(&k, s);
        }
        cvx_config_free(&j);
    }
    print_message("  %s: %d per-layer scales as keymap.*.json\n", k.c.name, checked);
    assert_true(checked > 0);
    lc_close(&k);
}

static void test_cogvideox_keymaps(void **state) { (void)state; check_keymaps("cogvideox"); }
static void test_wan_keymaps(void **state) { (void)state; check_keymaps("wan"); }

/* ------------------------------------------------------------------ fused weights */

static const cvx_lora_target *target_named(const lcase *k, const char *module) {
    for (int i = 0; i < k->n_targets; i++)
        if (!strcmp(k->targets[i].name, module)) return &k->targets[i];
    return NULL;
}

static void check_fused_weights(const char *name) {
    lcase k;
    lc_open(&k, name, CVX_PRECISION_F32);
    json_object *loras = gh_json(&k.c, "loras");
    int checked = 0;
    for (size_t i = 0; i < gh_len(loras); i++) {
        json_object *lora = gh_at(loras, i);
        const char *lname = gh_str(gh_get(lora, "name")), *file = gh_str(gh_get(lora, "file"));
        char prefix[160];
        snprintf(prefix, sizeof prefix, "fused.%s.s", lname);
        cvx_lora_set *s = NULL;
        for (int t = 0; t < cvx_st_count(k.c.st); t++) {
            const cvx_tensor *g = cvx_st_tensor(k.c.st, t);
            if (strncmp(g->name, prefix, strlen(prefix))) continue;
            char *end;
            double sc = strtod(g->name + strlen(prefix), &end);
            char module[CVX_LORA_NAME];
            snprintf(module, sizeof module, "%s", end + 1);
            int is_bias = strcmp(module + strlen(module) - 5, ".bias") == 0;
            module[strlen(module) - (is_bias ? 5 : 7)] = 0;
            if (!s) ASSERT_NONNULL(s = lc_attach(&k, file, sc * meta_factor(lora), 1));
            const cvx_lora_target *tg = target_named(&k, module);
            if (!tg) fail_msg("%s: no target '%s'", k.c.name, module);
            const cvx_tensor *f = is_bias ? cvx_lora_fused_bias(s, tg->w) : cvx_lora_fused_weight(s, tg->w);
            if (!f) fail_msg("%s: '%s' not fused", k.c.name, g->name);
            float *got = cvx_tensor_f32_dup(f), *want = cvx_tensor_f32_dup(g);
            assert_int_equal(f->numel, g->numel);
            gh_check_max_abs(&k.c, g->name, got, want, (size_t)g->numel, TOL_FUSED_W);
            free(got), free(want);
            checked++;
        }
        if (s) lc_detach(&k, s);
    }
    print_message("  %s: %d fused tensors\n", k.c.name, checked);
    assert_true(checked > 0);
    lc_close(&k);
}

static void test_cogvideox_fused_weights(void **state) { (void)state; check_fused_weights("cogvideox"); }
static void test_wan_fused_weights(void **state) { (void)state; check_fused_weights("wan"); }

/* ------------------------------------------------------------------ Wan: converted = raw */

static void test_wan_converted_files(void **state) {
    (void)state;
    lcase k;
    lc_open(&k, "wan", CVX_PRECISION_F32);
    json_object *loras = gh_json(&k.c, "loras"), *conv;
    int checked = 0;
    for (size_t i = 0; i < gh_len(loras); i++) {
        json_object *lora = gh_at(loras, i);
        if (!json_object_object_get_ex(lora, "converted_file", &conv)) continue;
        const char *lname = gh_str(gh_get(lora, "name"));
        cvx_lora_set *s = lc_attach(&k, gh_str(conv), 1.0, 0);   /* diffusers keys, alpha already folded */
        ASSERT_NONNULL(s);
        float *out = lc_forward(&k), *want = gh_f32(&k.c, NULL, "output.%s.w1.0", lname);
        char what[256];
        snprintf(what, sizeof what, "%s (diffusers-converted file)", gh_str(conv));
        gh_check_rel_l2(&k.c, what, out, want, k.n_out, TOL);
        lc_detach(&k, s);
        free(out), free(want);
        checked++;
    }
    assert_true(checked >= 2);
    lc_close(&k);
}

/* ------------------------------------------------------------------ bf16 */

/* bf16 compute: each LoRA's w1.0 output no farther from the f32 golden than the base model's own
 * bf16 output is from output_base (× 2, and at least 1e-2), unfused and fused. */
static void check_bf16(const char *name) {
    lcase k;
    lc_open(&k, name, CVX_PRECISION_BF16);
    float *base = lc_forward(&k), *want_base = gh_f32(&k.c, NULL, "output_base");
    const double d_base = cvx_rel_l2(base, want_base, k.n_out), tol = fmax(2 * d_base, 1e-2);
    print_message("  %s bf16: base vs f32 golden rel L2 %.3g\n", k.c.name, d_base);
    json_object *loras = gh_json(&k.c, "loras");
    for (size_t i = 0; i < gh_len(loras); i++) {
        json_object *lora = gh_at(loras, i);
        const char *lname = gh_str(gh_get(lora, "name")), *file = gh_str(gh_get(lora, "file"));
        for (int fuse = 0; fuse < 2; fuse++) {
            cvx_lora_set *s = lc_attach(&k, file, meta_factor(lora), fuse);
            ASSERT_NONNULL(s);
            float *out = lc_forward(&k), *want = gh_f32(&k.c, NULL, "output.%s.w1.0", lname);
            double d = cvx_rel_l2(out, want, k.n_out);
            print_message("  %s bf16 %-28s %s rel L2 %.3g (tol %.3g)\n", k.c.name, lname, fuse ? "fused  " : "unfused", d,
                          tol);
            if (!(d <= tol)) fail_msg("%s bf16 %s: rel L2 %.3g > %.3g", k.c.name, lname, d, tol);
            lc_detach(&k, s);
            free(out), free(want);
        }
    }
    free(base), free(want_base);
    lc_close(&k);
}

static void test_cogvideox_bf16(void **state) { (void)state; check_bf16("cogvideox"); }
static void test_wan_bf16(void **state) { (void)state; check_bf16("wan"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cogvideox_runs),         cmocka_unit_test(test_wan_runs),
        cmocka_unit_test(test_cogvideox_keymaps),      cmocka_unit_test(test_wan_keymaps),
        cmocka_unit_test(test_cogvideox_fused_weights), cmocka_unit_test(test_wan_fused_weights),
        cmocka_unit_test(test_wan_converted_files),    cmocka_unit_test(test_cogvideox_bf16),
        cmocka_unit_test(test_wan_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
