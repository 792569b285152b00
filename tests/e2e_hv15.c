/* HunyuanVideo-1.5 text-to-video end to end through the API (cvx_encode + cvx_encode_texts_more /
 * cvx_sample / cvx_decode) on models/hunyuanvideo15-tiny-random (the golden e2e cases' model: every
 * e2e_t2v* case has the same weights; the case's guider scale and scheduler shift are passed as
 * the request's guidance_scale / flow_shift) against the golden HunyuanVideo15Pipeline runs
 * (tests/data/golden_hv15/e2e_t2v*; shared/golden_hv15 README §6): the four conditioning tensors
 * of each branch (1e-4; masks exact), the timesteps (exact), the final latents from the golden
 * conditioning and from ours (1e-4), the decoded video and the post-processed frames (1e-3). */
#include "api_harness.h"

#include <math.h>

#define MODEL "models/hunyuanvideo15-tiny-random"
#define DATA "tests/data/golden_hv15/"

static const char *const slot_names[3] = {"prompt_embeds_mask", "prompt_embeds_2", "prompt_embeds_mask_2"};

static void t2v_case(const char *name) {
    char dir[200];
    gh_case c;
    snprintf(dir, sizeof dir, DATA "%s", name);
    gh_open(&c, dir);
    json_object *call = gh_json(&c, "call"), *o;
    const char *prompt = gh_str(gh_get(call, "prompt"));
    const char *negative = json_object_object_get_ex(call, "negative_prompt", &o) && o ? gh_str(o) : NULL;
    const double guidance = gh_num(gh_get(call, "guidance_scale_in_guider"));
    const int cfg = guidance > 1;

    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = MODEL, .threads = 2});
    if (!m) fail_msg("%s: %s", MODEL, cvx_last_error());
    const cvx_model_info *info = cvx_model_get_info(m);
    assert_string_equal(info->family, "HunyuanVideo-1.5");
    assert_int_equal(info->text_len, 1000);

    /* stage 1: prompt_embeds of both branches, then the three further slots */
    cvx_embeddings emb;
    cvx_encode_params ep = {.prompt = prompt, .negative_prompt = negative};   /* None -> "" as upstream */
    if (cvx_encode(m, &ep, NULL, NULL, &emb)) fail_msg("%s", cvx_last_error());
    const char *texts[2] = {negative ? negative : "", prompt};
    cvx_cond_set more, gold_more = {0};
    if (cvx_encode_texts_more(m, texts, NULL, 2, NULL, NULL, &more)) fail_msg("%s", cvx_last_error());
    assert_int_equal(more.n, 3);
    ah_cond_set_split(&more);
    size_t n;
    float *pe = gh_f32(&c, &n, "prompt_embeds"), *ne = cfg ? gh_f32(&c, NULL, "negative_prompt_embeds") : NULL;
    assert_int_equal(n, (size_t)emb.L * emb.D);
    gh_check_rel_l2(&c, "prompt_embeds", emb.prompt, pe, n, 1e-4);
    if (cfg) gh_check_rel_l2(&c, "negative_prompt_embeds", emb.negative, ne, n, 1e-4);
    gold_more.n = 3;
    for (int k = 0; k < 3; k++) {
        const cvx_cond_tensor *t = &more.t[k];
        const size_t nk = (size_t)t->L * t->D;
        assert_string_equal(t->name, slot_names[k]);
        size_t ng;
        float *want = gh_f32(&c, &ng, "%s", t->name);
        assert_int_equal(ng, nk);
        if (t->is_mask) gh_check_exact_f32(&c, t->name, t->prompt, want, nk);
        else gh_check_rel_l2(&c, t->name, t->prompt, want, nk, 1e-4);
        float *wneg = NULL;
        if (cfg) {
            char key[64];
            snprintf(key, sizeof key, "negative_%s", t->name);
            wneg = gh_f32(&c, NULL, "%s", key);
            if (t->is_mask) gh_check_exact_f32(&c, key, t->negative, wneg, nk);
            else gh_check_rel_l2(&c, key, t->negative, wneg, nk, 1e-4);
        } else {
            wneg = calloc(nk, sizeof(float));
        }
        gold_more.t[k] = (cvx_cond_tensor){t->name, want, wneg, t->L, t->D, t->is_mask};
    }

    /* stage 2 from the golden conditioning (isolates the loop) and from ours */
    cvx_sample_params sp = cvx_sample_default_params(m);
    sp.frames = (int)gh_int(gh_get(call, "num_frames")), sp.height = (int)gh_int(gh_get(call, "height"));
    sp.width = (int)gh_int(gh_get(call, "width")), sp.num_inference_steps = (int)gh_int(gh_get(call, "num_inference_steps"));
    sp.seed = (uint64_t)gh_int(gh_get(call, "seed")), sp.guidance_scale = guidance;
    sp.flow_shift = gh_num(gh_get(call, "flow_shift_in_scheduler"));
    if (!ne) ne = calloc(n, sizeof(float));
    cvx_embeddings gold = {pe, ne, emb.L, emb.D};
    sp.cond_more = &gold_more;
    ah_step_log log = {0};
    sp.on_step = ah_log_step, sp.on_step_user = &log;
    cvx_latents lat;
    if (cvx_sample(m, &sp, &gold, NULL, NULL, &lat)) fail_msg("%s", cvx_last_error());
    sp.on_step = NULL;
    ah_check_timesteps(&c, &log);
    float *fin = gh_f32(&c, NULL, "final_latents");
    ah_check_latents(&c, "final_latents (golden conditioning)", &lat, fin);
    cvx_latents_free(&lat);
    sp.cond_more = &more;
    if (cvx_sample(m, &sp, &emb, NULL, NULL, &lat)) fail_msg("%s", cvx_last_error());
    ah_check_latents(&c, "final_latents", &lat, fin);

    /* stage 3 from the golden final latents and from ours */
    cvx_decode_params dp = {0};
    cvx_frames fr;
    ah_check_decode(&c, m, &dp, fin, &lat, &fr);
    gh_check_frames_np(&c, fr.data[0], fr.T, fr.H, fr.W, 1e-3);
    cvx_frames_free(&fr);
    free(fin), free(pe), free(ne);
    cvx_latents_free(&lat);
    cvx_embeddings_free(&emb);
    cvx_cond_set_free(&more);
    cvx_cond_set_free(&gold_more);
    cvx_model_close(m);
    gh_close(&c);
}

static void test_t2v(void **state) {
    (void)state;
    t2v_case("e2e_t2v");
}
static void test_t2v_glyph(void **state) {
    (void)state;
    t2v_case("e2e_t2v_glyph");
}
static void test_t2v_nocfg(void **state) {
    (void)state;
    t2v_case("e2e_t2v_nocfg");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t2v),
        cmocka_unit_test(test_t2v_glyph),
        cmocka_unit_test(test_t2v_nocfg),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
