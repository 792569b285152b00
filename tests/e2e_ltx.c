/* LTX-Video (LTXPipeline) end to end through the API (cvx_encode / cvx_encode_texts_more /
 * cvx_sample / cvx_decode) against the golden runs (tests/data/golden_ltx/e2e_t2v*, README §1-§5):
 * the prompt embeddings and masks (1e-4, exact), the timesteps (exact), the final latents (stage,
 * 1e-4; from the golden embeddings and from ours), the decoded video from the golden latents (1e-4)
 * and from ours (1e-3) and frames = clamp(v/2 + 0.5) (1e-3). e2e_t2v: the 0.9.0 VAE and the
 * dynamic shift; e2e_t2v_tsvae: the 0.9.5 VAE whose decode noise continues the sampler's
 * generator, guidance_rescale 0.7, frame rate 24; e2e_i2v (LTXImageToVideoPipeline: the image
 * encoded, sampled first, kept in latent frame 0). Plus foreign embeddings. */
#include "api_harness.h"

#include <math.h>

#define LTX_GOLDEN "tests/data/golden_ltx"

typedef struct {
    gh_case c;
    char dir[200], model[240];
    const char *prompt, *negative;
    int frames, height, width, steps;
    double guidance, rescale, frame_rate, decode_t, decode_s;
    int has_decode;
    uint64_t seed;
} lcase;

static void lcase_open(lcase *w, const char *name) {
    memset(w, 0, sizeof *w);
    snprintf(w->dir, sizeof w->dir, LTX_GOLDEN "/%s", name);
    /* the whole pipeline's model: pipeline_model/ where model/ holds only what the stage tests read */
    snprintf(w->model, sizeof w->model, "%s/pipeline_model", w->dir);
    if (access(w->model, F_OK) != 0) snprintf(w->model, sizeof w->model, "%s/model", w->dir);
    gh_open(&w->c, w->dir);
    json_object *call = gh_json(&w->c, "call"), *o;
    w->prompt = gh_str(gh_get(call, "prompt"));
    w->negative = json_object_object_get_ex(call, "negative_prompt", &o) && o ? gh_str(o) : "";
    w->frames = (int)gh_int(gh_get(call, "num_frames"));
    w->height = (int)gh_int(gh_get(call, "height"));
    w->width = (int)gh_int(gh_get(call, "width"));
    w->steps = (int)gh_int(gh_get(call, "num_inference_steps"));
    w->guidance = gh_num(gh_get(call, "guidance_scale"));
    w->frame_rate = gh_num(gh_get(call, "frame_rate"));
    w->rescale = json_object_object_get_ex(call, "guidance_rescale", &o) ? gh_num(o) : 0;
    if ((w->has_decode = json_object_object_get_ex(call, "decode_timestep", &o))) {
        w->decode_t = gh_num(o);
        w->decode_s = gh_num(gh_get(call, "decode_noise_scale"));
    }
    w->seed = (uint64_t)gh_int(gh_get(call, "seed"));
}

static cvx_model *open_model(const char *dir) {
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = dir, .threads = 2});
    if (!m) fail_msg("%s: %s", dir, cvx_last_error());
    return m;
}

/* I64 [1, L] → 0/1 floats */
static float *mask_f32(lcase *w, const char *name, int L) {
    const cvx_tensor *t = gh_tensor(&w->c, "%s", name);
    float *f = malloc(sizeof(float) * L);
    for (int k = 0; k < L; k++) f[k] = (float)gh_i64_at(t, k);
    return f;
}

static cvx_sample_params sample_params(const lcase *w) {
    return (cvx_sample_params){.frames = w->frames, .height = w->height, .width = w->width,
                               .num_inference_steps = w->steps, .guidance_scale = w->guidance, .seed = w->seed,
                               .guidance_rescale = w->rescale, .frame_rate = w->frame_rate};
}

static void t2v_case(const char *name) {
    lcase w;
    lcase_open(&w, name);
    cvx_model *m = open_model(w.model);
    const cvx_model_info *info = cvx_model_get_info(m);
    assert_string_equal(info->family, "LTX-Video");
    assert_int_equal(info->text_len, 128);

    /* stage 1: T5 without the mask; the masks as the second slot */
    cvx_embeddings emb;
    cvx_encode_params ep = {.prompt = w.prompt, .negative_prompt = w.negative, .max_sequence_length = 128};
    if (cvx_encode(m, &ep, NULL, NULL, &emb)) fail_msg("%s", cvx_last_error());
    size_t n;
    float *pe = gh_f32(&w.c, &n, "prompt_embeds"), *ne = gh_f32(&w.c, NULL, "negative_prompt_embeds");
    assert_int_equal(n, (size_t)emb.L * emb.D);
    gh_check_rel_l2(&w.c, "prompt_embeds", emb.prompt, pe, n, 1e-4);
    gh_check_rel_l2(&w.c, "negative_prompt_embeds", emb.negative, ne, n, 1e-4);
    const char *texts[2] = {w.negative, w.prompt};
    cvx_cond_set more;
    if (cvx_encode_texts_more(m, texts, NULL, 2, NULL, NULL, &more)) fail_msg("%s", cvx_last_error());
    assert_int_equal(more.n, 1);
    assert_int_equal(more.t[0].L, 128);
    float *pm = mask_f32(&w, "prompt_attention_mask", 128), *nm = mask_f32(&w, "negative_attention_mask", 128);
    for (int k = 0; k < 128; k++) {
        assert_true(more.t[0].prompt[k] == nm[k]);
        assert_true(more.t[0].prompt[128 + k] == pm[k]);
    }
    cvx_cond_set cs = {.n = 1};
    cs.t[0] = (cvx_cond_tensor){.name = "prompt_attention_mask", .prompt = pm, .negative = nm, .L = 128, .D = 1,
                                .is_mask = 1};

    /* stage 2 from the golden embeddings, then from ours; timesteps exact */
    cvx_sample_params sp = sample_params(&w);
    sp.cond_more = &cs;
    ah_step_log rec = {0};
    sp.on_step = ah_log_step, sp.on_step_user = &rec;
    cvx_embeddings gold = {pe, ne, emb.L, emb.D};
    cvx_latents lat;
    if (cvx_sample(m, &sp, &gold, NULL, NULL, &lat)) fail_msg("%s", cvx_last_error());
    ah_check_timesteps(&w.c, &rec);
    float *fin = gh_f32(&w.c, NULL, "final_latents");
    ah_check_latents(&w.c, "final_latents (golden embeddings)", &lat, fin);
    assert_non_null(lat.generator);
    cvx_latents_free(&lat);
    sp.on_step = NULL;
    if (cvx_sample(m, &sp, &emb, NULL, NULL, &lat)) fail_msg("%s", cvx_last_error());
    ah_check_latents(&w.c, "final_latents", &lat, fin);

    /* stage 3: the golden latents (with our generator: the same draws), then ours */
    cvx_decode_params dp = {.decode_set = w.has_decode ? 3 : 0, .decode_timestep = w.decode_t,
                            .decode_noise_scale = w.decode_s, .generator = lat.generator};
    cvx_frames fr;
    ah_check_decode(&w.c, m, &dp, fin, &lat, &fr);
    /* frames = clamp(decoded/2 + 0.5, 0, 1) against the golden uint8 frames (±1 at .5 boundaries) */
    const cvx_tensor *u8 = gh_tensor(&w.c, "frames_uint8");
    const size_t hw = (size_t)fr.H * fr.W;
    for (size_t t = 0; t < (size_t)fr.T; t++)
        for (size_t i = 0; i < hw; i++)
            for (int c = 0; c < 3; c++) {
                float v = fr.data[0][((size_t)c * fr.T + t) * hw + i] / 2.0f + 0.5f;
                v = v < 0 ? 0 : v > 1 ? 1 : v;
                const int want = ((const uint8_t *)u8->data)[(t * hw + i) * 3 + c];
                if (fabs(v * 255.0 - want) > 1.0)
                    fail_msg("%s: frame %zu pixel %zu channel %d: %g, expected %d", name, t, i, c, v * 255.0, want);
            }
    cvx_frames_free(&fr);
    if (w.has_decode) {   /* the decode noise comes from the sampler's generator: refused without it */
        dp.generator = NULL;
        assert_int_equal(cvx_decode(m, &dp, fin, 1, lat.C, lat.T, lat.h, lat.w, "final_latents", NULL, NULL, &fr),
                         -1);
        assert_non_null(strstr(cvx_last_error(), "generator"));
    }
    free(fin), free(pe), free(ne), free(pm), free(nm);
    cvx_latents_free(&lat);
    cvx_cond_set_free(&more);
    cvx_embeddings_free(&emb);
    cvx_model_close(m);
    gh_close(&w.c);
}

static void test_t2v_090(void **s) { (void)s; t2v_case("e2e_t2v"); }
static void test_t2v_tsvae(void **s) { (void)s; t2v_case("e2e_t2v_tsvae"); }

/* LTXImageToVideoPipeline: the image encoded in stage 1 (latent mean / std), its sample (the
 * generator's first draw) in latent frame 0, the noise after it; frame 0 never stepped. */
static void test_i2v(void **s) {
    (void)s;
    lcase w;
    lcase_open(&w, "e2e_i2v");
    /* the golden model with model_index.json naming LTXImageToVideoPipeline (the components are e2e_t2v's) */
    cvx_model *m = open_model(LTX_GOLDEN "/e2e_i2v/pipeline_model");
    cvx_conditioning cond;
    char img[300];
    snprintf(img, sizeof img, "%s/image.png", w.dir);
    cvx_conditioning_params cp = {.image = img, .height = w.height, .width = w.width};
    if (cvx_encode_conditioning(m, &cp, NULL, NULL, &cond)) fail_msg("%s", cvx_last_error());
    assert_int_equal(cond.T, 1);
    float *pe = gh_f32(&w.c, NULL, "prompt_embeds"), *ne = gh_f32(&w.c, NULL, "negative_prompt_embeds");
    float *pm = mask_f32(&w, "prompt_attention_mask", 128), *nm = mask_f32(&w, "negative_attention_mask", 128);
    cvx_cond_set cs = {.n = 1};
    cs.t[0] = (cvx_cond_tensor){.name = "prompt_attention_mask", .prompt = pm, .negative = nm, .L = 128, .D = 1,
                                .is_mask = 1};
    cvx_sample_params sp = sample_params(&w);
    sp.cond_more = &cs, sp.conditioning = &cond, sp.frames = w.frames;
    ah_step_log rec = {0};
    sp.on_step = ah_log_step, sp.on_step_user = &rec;
    cvx_embeddings gold = {pe, ne, 128, 32};
    cvx_latents lat;
    if (cvx_sample(m, &sp, &gold, NULL, NULL, &lat)) fail_msg("%s", cvx_last_error());
    ah_check_timesteps(&w.c, &rec);
    size_t n;
    float *fin = gh_f32(&w.c, &n, "final_latents");
    assert_int_equal(n, (size_t)lat.C * lat.T * lat.h * lat.w);
    gh_check_rel_l2(&w.c, "final_latents", lat.data, fin, n, 1e-4);
    cvx_decode_params dp = {.generator = lat.generator};
    cvx_frames fr;
    if (cvx_decode(m, &dp, lat.data, 1, lat.C, lat.T, lat.h, lat.w, "latents", NULL, NULL, &fr))
        fail_msg("%s", cvx_last_error());
    size_t nd;
    float *dec = gh_f32(&w.c, &nd, "decoded");
    assert_int_equal(nd, (size_t)3 * fr.T * fr.H * fr.W);
    gh_check_rel_l2(&w.c, "decoded", fr.data[0], dec, nd, 1e-3);
    cvx_frames_free(&fr);
    free(dec), free(fin), free(pe), free(ne), free(pm), free(nm);
    cvx_latents_free(&lat);
    cvx_conditioning_free(&cond);
    cvx_model_close(m);
    gh_close(&w.c);
}

/* The embeddings of one family to the other's model: one clear line. */
static void test_foreign_embeddings(void **s) {
    (void)s;
    lcase w;
    lcase_open(&w, "e2e_t2v");
    cvx_model *m = open_model(w.model);
    float *pe = gh_f32(&w.c, NULL, "prompt_embeds");
    cvx_embeddings gold = {pe, pe, 128, 32};
    cvx_sample_params sp = sample_params(&w);
    cvx_latents lat;
    assert_int_equal(cvx_sample(m, &sp, &gold, NULL, NULL, &lat), -1);   /* a Wan-like set: no mask */
    assert_non_null(strstr(cvx_last_error(), "2 tensors per branch, 1 given"));
    cvx_model_close(m);
    /* LTX's set (with the mask) to a Wan model */
    cvx_model *wm = open_model("tests/data/golden_wan/e2e_t2v_1.3b/model");
    float mask[128] = {0};
    cvx_cond_set cs = {.n = 1};
    cs.t[0] = (cvx_cond_tensor){.name = "prompt_attention_mask", .prompt = mask, .negative = mask, .L = 128, .D = 1,
                                .is_mask = 1};
    sp = (cvx_sample_params){.num_inference_steps = 2, .guidance_scale = -1, .cond_more = &cs, .frames = 5,
                             .height = 16, .width = 16};
    assert_int_equal(cvx_sample(wm, &sp, &gold, NULL, NULL, &lat), -1);
    assert_non_null(strstr(cvx_last_error(), "1 tensor per branch, 2 given"));
    cvx_model_close(wm);
    free(pe);
    gh_close(&w.c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t2v_090),
        cmocka_unit_test(test_t2v_tsvae),
        cmocka_unit_test(test_i2v),
        cmocka_unit_test(test_foreign_embeddings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
