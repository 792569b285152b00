/* --attention int8 (SageAttention-style int8 QKᵀ, common/attention_int8.c) and int8pv (PV in int8
 * too) end to end on the golden stage-2 cases of both families, through the API: stage 2 from the
 * golden prompt embeddings in f32 with the transformer's attention in int8 (and, as the yardstick, in
 * bf16 alone and the whole bf16 precision), then the VAE in f32; relative L2 of the final latents and
 * the decoded frames vs the f32 goldens, printed per case with upstream's own bf16 distance where the
 * golden has one (README §9: e2e_2b only). Asserted: every case within TOL_INT8_LATENTS /
 * TOL_INT8_DECODED (int8pv: TOL_INT8PV_*), and on e2e_2b within upstream's bf16 distance. Also the
 * programs: --attention recorded as stage2_attention, a checkpoint made with one attention mode
 * refused by a resume with another, a bad value named. */
#include "golden_harness.h"

#include <math.h>

#include "pipeline/cogvideox.h"

/* Stated bounds (relative L2 vs the f32 golden) for int8 attention, from the values this test printed
 * (largest: final latents 8.4e-4 (e2e_5b, e2e_t2v_14b), decoded 2.0e-3 (e2e_5b)) with ~2× margin. On
 * e2e_2b: 5.7e-4 / 8.4e-4 against upstream's bf16 2.4e-2 / 5.1e-2. The golden models are tiny (head
 * dim 16, ≤ 300 tokens): attention is a small share of their error budget; tests/common_attention_int8
 * measures the op alone (7.5e-3 .. 7.9e-3 on random data). */
#define TOL_INT8_LATENTS 2e-3
#define TOL_INT8_DECODED 4e-3
/* --attention int8pv (cvx_attention_int8_pv8: PV in int8 too): from the values printed (largest: final
 * latents 3.7e-3, decoded 7.7e-3, both e2e_5b) with ~2× margin; e2e_2b 1.6e-3 / 2.1e-3, also asserted
 * within upstream's bf16 distance (2.4e-2 / 5.1e-2). About 3× int8's error, under the whole bf16
 * precision's on 2b (6.3e-3 / 1.0e-2). */
#define TOL_INT8PV_LATENTS 8e-3
#define TOL_INT8PV_DECODED 1.6e-2

typedef struct {
    const char *dir;
    int cogvideox;   /* golden latents [1, T, C, h, w] (CogVideoX) or ours [1, C, T, h, w] (Wan) */
} e2e_case;

static const e2e_case CASES[] = {
    {GOLDEN "/e2e_2b", 1},
    {GOLDEN "/e2e_5b", 1},
    {GOLDEN "/e2e_5b_dyncfg", 1},
    {"tests/data/golden_wan/e2e_t2v_1.3b", 0},
    {"tests/data/golden_wan/e2e_t2v_14b", 0},
    {"tests/data/golden_wan/e2e_t2v_nocfg", 0},
};

/* golden [1, T, C, h, w] -> ours [1, C, T, h, w] */
static float *to_ctw(const float *src, int T, int C, size_t HW) {
    float *dst = cvx_alloc_f32((size_t)T * C * HW);
    for (int f = 0; f < T; f++)
        for (int c = 0; c < C; c++) memcpy(dst + ((size_t)c * T + f) * HW, src + ((size_t)f * C + c) * HW, sizeof(float) * HW);
    return dst;
}

typedef struct {
    double lat, dec;
} dists;

/* Stage 2 from the golden embeddings at (precision, attention), stage 3 in f32; distances to the goldens. */
static dists run(gh_case *c, const e2e_case *e, cvx_precision prec, cvx_attention_mode att) {
    char model[512];
    snprintf(model, sizeof model, "%s/model", e->dir);
    json_object *call = gh_json(c, "call"), *o;
    double guidance = gh_num(gh_get(call, "guidance_scale"));
    cvx_sample_params sp = {.frames = (int)gh_int(gh_get(call, "num_frames")),
                            .height = (int)gh_int(gh_get(call, "height")),
                            .width = (int)gh_int(gh_get(call, "width")),
                            .num_inference_steps = (int)gh_int(gh_get(call, "num_inference_steps")),
                            .guidance_scale = guidance,
                            .use_dynamic_cfg = json_object_object_get_ex(call, "use_dynamic_cfg", &o) && json_object_get_boolean(o),
                            .seed = (uint64_t)gh_int(gh_get(call, "seed")), .noise_dtype = "f32"};
    size_t n;
    float *pe = gh_f32(c, &n, "prompt_embeds");
    float *ne = gh_tensor_opt(c, "negative_prompt_embeds") ? gh_f32(c, NULL, "negative_prompt_embeds")
                                                          : calloc(n, sizeof(float));
    const cvx_tensor *tp = gh_tensor(c, "prompt_embeds");
    cvx_embeddings emb = {pe, ne, (int)tp->shape[1], (int)tp->shape[2]};
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .precision = prec, .attention = att});
    if (!m) fail_msg("%s", cvx_last_error());
    cvx_latents lat;
    if (cvx_sample(m, &sp, &emb, NULL, NULL, &lat)) fail_msg("%s", cvx_last_error());
    cvx_model_close(m);
    /* stage 3 in f32 (the VAE is not what is measured) */
    m = cvx_model_open(&(cvx_model_params){.model = model, .precision = CVX_PRECISION_F32});
    if (!m) fail_msg("%s", cvx_last_error());
    cvx_decode_params dp = {.tiling = CVX_TILING_AUTO};
    cvx_frames fr;
    if (cvx_decode(m, &dp, lat.data, 1, lat.C, lat.T, lat.h, lat.w, "latents", NULL, NULL, &fr))
        fail_msg("%s", cvx_last_error());
    cvx_model_close(m);
    size_t nl, nd, hw = (size_t)lat.h * lat.w;
    float *want = gh_f32(c, &nl, "final_latents"), *dec = gh_f32(c, &nd, "decoded");
    assert_int_equal(nl, (size_t)lat.C * lat.T * hw);
    assert_int_equal(nd, (size_t)3 * fr.T * fr.H * fr.W);
    if (e->cogvideox) {
        float *t = to_ctw(want, lat.T, lat.C, hw);
        free(want);
        want = t;
    }
    dists d = {cvx_rel_l2(lat.data, want, nl), cvx_rel_l2(fr.data[0], dec, nd)};
    free(want), free(dec), free(pe), free(ne);
    cvx_latents_free(&lat);
    cvx_frames_free(&fr);
    return d;
}

static void test_goldens(void **state) {
    (void)state;
    print_message("  %-22s %-34s %-34s %-34s %s\n", "case", "int8 attention: latents / decoded",
                  "bf16 attention: latents / decoded", "bf16 precision: latents / decoded", "upstream bf16");
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const e2e_case *e = &CASES[i];
        gh_case c;
        gh_open(&c, e->dir);
        dists d8 = run(&c, e, CVX_PRECISION_F32, CVX_ATTENTION_INT8);
        dists d8pv = run(&c, e, CVX_PRECISION_F32, CVX_ATTENTION_INT8PV);
        dists d16a = run(&c, e, CVX_PRECISION_F32, CVX_ATTENTION_BF16);
        dists d16 = run(&c, e, CVX_PRECISION_BF16, CVX_ATTENTION_AUTO);
        char up[96] = "-";
        char bf[600];
        snprintf(bf, sizeof bf, "%s/expected_bf16.safetensors", e->dir);
        cvx_safetensors *g = access(bf, R_OK) == 0 ? cvx_st_open(bf) : NULL;
        const char *ml = g ? cvx_st_metadata(g, "rel_l2_same_final_latents_bf16_vs_f32") : NULL;
        const char *md = g ? cvx_st_metadata(g, "rel_l2_same_decoded_bf16_vs_f32") : NULL;
        if (ml && md) snprintf(up, sizeof up, "%.2e / %.2e", atof(ml), atof(md));
        print_message("  %-22s %.2e / %.2e %15s %.2e / %.2e %15s %.2e / %.2e %15s %s\n", strrchr(e->dir, '/') + 1,
                      d8.lat, d8.dec, "", d16a.lat, d16a.dec, "", d16.lat, d16.dec, "", up);
        print_message("  %-22s int8pv attention (PV in int8 too): %.2e / %.2e\n", "", d8pv.lat, d8pv.dec);
        assert_true(d8pv.lat > 0 && d8pv.lat <= TOL_INT8PV_LATENTS);
        assert_true(d8pv.dec <= TOL_INT8PV_DECODED);
        assert_true(d8.lat > 0 && d8.lat <= TOL_INT8_LATENTS);
        assert_true(d8.dec <= TOL_INT8_DECODED);
        if (ml && md) {   /* within upstream's own bf16 distance (issue 22: the bar for on-by-default) */
            assert_true(d8.lat <= atof(ml));
            assert_true(d8.dec <= atof(md));
            assert_true(d8pv.lat <= atof(ml));
            assert_true(d8pv.dec <= atof(md));
        }
        if (g) cvx_st_close(g);
        gh_close(&c);
    }
}

/* The program: --attention int8 recorded, a checkpoint refused by a resume in another mode, a bad value. */
static void test_cli(void **state) {
    (void)state;
    char dir[64], cmd[4096], err[4096], s1[256], s2[256], path[256];
    const char *e2e = GOLDEN "/e2e_2b";
    tu_mkdtemp(dir, sizeof dir);
    tu_program(s1, sizeof s1, "stage1");
    tu_program(s2, sizeof s2, "stage2");
    snprintf(cmd, sizeof cmd, "%s --prompt 'a panda' --model_dir %s/model --output_dir %s --precision f32 --quiet && "
             "%s --model_dir %s/model --input_dir %s --num_inference_steps 3 --precision f32 --attention int8 "
             "--frames 9 --height 48 --width 64 --stop_after_steps 1 --quiet", s1, e2e, dir, s2, e2e, dir);
    if (tu_run(cmd, err, sizeof err)) fail_msg("%s", err);
    snprintf(cmd, sizeof cmd, "%s --model_dir %s/model --input_dir %s --num_inference_steps 3 --precision f32 "
             "--frames 9 --height 48 --width 64 --resume", s2, e2e, dir);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  refused: %s", err);
    assert_non_null(strstr(err, "attention"));
    snprintf(cmd, sizeof cmd, "%s --model_dir %s/model --input_dir %s --num_inference_steps 3 --precision f32 "
             "--attention int8 --frames 9 --height 48 --width 64 --resume --quiet", s2, e2e, dir);
    if (tu_run(cmd, err, sizeof err)) fail_msg("%s", err);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    assert_non_null(strstr(buf, "\"stage2_attention\": \"int8\""));
    snprintf(cmd, sizeof cmd, "%s --model_dir %s/model --input_dir %s --attention int4", s2, e2e, dir);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  bad value: %s", err);
    assert_non_null(strstr(err, "--attention"));
    assert_non_null(strstr(err, "int4"));
    assert_non_null(strstr(err, "f32, bf16, int8 or int8pv"));
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goldens),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
