/* Wan 2.2 end to end through the API (cvx_encode / cvx_encode_conditioning / cvx_sample /
 * cvx_decode) against the golden runs of tests/data/golden_wan22/e2e_* (README §4): TI2V-5B-style
 * text-to-video and image-to-video (per-token timesteps, the image as latent frame 0, the 2.2 VAE),
 * A14B-style text-to-video and image-to-video (two experts switched at boundary_ratio, each with its
 * guidance). Prompt embeddings (stage, 1e-4), the timestep and expert of every step (exact), the
 * final latents (stage, 1e-4; from the golden embeddings and from ours), the decoded video (1e-4 from
 * the golden latents, 1e-3 from ours) and the frames (1e-3). Then: a stop after the expert switch
 * resumed bit for bit, and the bad inputs of issue 32 (a 2.1 latent file to a 2.2 VAE, one expert
 * where two are needed, a boundary outside (0, 1)) with one clear line. */
#include "api_harness.h"

#include <math.h>
#include <sys/stat.h>

#define G22 "tests/data/golden_wan22"
#define MAX_STEPS 16

typedef struct {
    gh_case c;
    char dir[200], model[240], image[260];
    const char *prompt, *negative;
    int frames, height, width, steps, i2v;
    double guidance, guidance_2;
    uint64_t seed;
} wcase;

static void wcase_open(wcase *w, const char *name) {
    memset(w, 0, sizeof *w);
    snprintf(w->dir, sizeof w->dir, G22 "/%s", name);
    snprintf(w->model, sizeof w->model, "%s/model", w->dir);
    gh_open(&w->c, w->dir);
    json_object *call = gh_json(&w->c, "call"), *o;
    w->prompt = gh_str(gh_get(call, "prompt"));
    w->negative = gh_str(gh_get(call, "negative_prompt"));
    w->frames = (int)gh_int(gh_get(call, "num_frames"));
    w->height = (int)gh_int(gh_get(call, "height"));
    w->width = (int)gh_int(gh_get(call, "width"));
    w->steps = (int)gh_int(gh_get(call, "num_inference_steps"));
    w->guidance = gh_num(gh_get(call, "guidance_scale"));
    w->guidance_2 = json_object_object_get_ex(call, "guidance_scale_2", &o) && o ? gh_num(o) : 0;
    w->seed = (uint64_t)gh_int(gh_get(call, "seed"));
    if (json_object_object_get_ex(call, "image", &o) && o) {
        w->i2v = 1;
        snprintf(w->image, sizeof w->image, "%s/%s", w->dir, gh_str(o));
    }
}

static cvx_model *open_model(const wcase *w) {
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = w->model, .threads = 2});
    if (!m) fail_msg("%s: %s", w->model, cvx_last_error());
    assert_string_equal(cvx_model_get_info(m)->family, "Wan");
    return m;
}

/* What each step ran. */
typedef struct {
    int n;
    double t[MAX_STEPS];
    int expert[MAX_STEPS];
} steps_seen;

static void on_step(void *user, const cvx_step_info *in) {
    steps_seen *s = user;
    if (s->n < MAX_STEPS) s->t[s->n] = in->timestep, s->expert[s->n] = in->expert;
    s->n++;
}

/* The timesteps (case.json and every step{i}.timestep value) and experts per step, exactly. */
static void check_steps(wcase *w, const steps_seen *s) {
    json_object *ts = gh_json(&w->c, "timesteps"), *tr = gh_json(&w->c, "transformer_per_step");
    assert_int_equal(s->n, (int)gh_len(ts));
    for (int i = 0; i < s->n; i++) {
        if (s->t[i] != gh_num(gh_at(ts, (size_t)i)))
            fail_msg("%s: step %d timestep %g, expected %g", w->dir, i, s->t[i], gh_num(gh_at(ts, (size_t)i)));
        const int want = strcmp(gh_str(gh_at(tr, (size_t)i)), "transformer_2") == 0;
        if (s->expert[i] != want) fail_msg("%s: step %d ran expert %d, expected %d", w->dir, i, s->expert[i], want);
        /* the per-token values the transformer got (TI2V: frame 0's at 0 in I2V, else all t) */
        if (gh_tensor(&w->c, "step%d.timestep", i)->dtype != CVX_F32) continue;   /* A14B: the scalar (I64) */
        size_t n;
        float *tok = gh_f32(&w->c, &n, "step%d.timestep", i);
        for (size_t k = 0; k < n; k++)
            if (tok[k] != 0.0f && tok[k] != (float)s->t[i]) fail_msg("%s: step%d.timestep[%zu] = %g", w->dir, i, k, tok[k]);
        free(tok);
    }
}

static cvx_sample_params sample_params(const wcase *w, const cvx_conditioning *cond, steps_seen *seen) {
    return (cvx_sample_params){.frames = w->frames, .height = w->height, .width = w->width,
                               .num_inference_steps = w->steps, .guidance_scale = w->guidance,
                               .guidance_scale_2 = w->guidance_2, .seed = w->seed, .conditioning = cond,
                               .on_step = seen ? on_step : NULL, .on_step_user = seen};
}

static void e2e_case(const char *name) {
    wcase w;
    wcase_open(&w, name);
    cvx_model *m = open_model(&w);

    /* stage 1: the texts, and the image */
    cvx_embeddings emb;
    cvx_encode_params ep = {.prompt = w.prompt, .negative_prompt = w.negative};
    if (cvx_encode(m, &ep, NULL, NULL, &emb)) fail_msg("%s", cvx_last_error());
    size_t n;
    float *pe = gh_f32(&w.c, &n, "prompt_embeds"), *ne = gh_f32(&w.c, NULL, "negative_prompt_embeds");
    assert_int_equal(n, (size_t)emb.L * emb.D);
    gh_check_rel_l2(&w.c, "prompt_embeds", emb.prompt, pe, n, 1e-4);
    gh_check_rel_l2(&w.c, "negative_prompt_embeds", emb.negative, ne, n, 1e-4);
    cvx_conditioning cond, *cp = NULL;
    if (w.i2v) {
        cvx_conditioning_params cprm = {.image = w.image, .max_frames = w.frames, .height = w.height,
                                        .width = w.width};
        if (cvx_encode_conditioning(m, &cprm, NULL, NULL, &cond)) fail_msg("%s", cvx_last_error());
        assert_int_equal(cond.mode, CVX_MODE_I2V);
        cp = &cond;
        if (gh_tensor_opt(&w.c, "image_latent_mode")) {   /* TI2V: the image alone, one latent frame */
            float *mode = gh_f32(&w.c, &n, "image_latent_mode");
            assert_int_equal(n, (size_t)cond.C * cond.T * cond.h * cond.w);
            gh_check_rel_l2(&w.c, "image_latent_mode", cond.mean, mode, n, 1e-4);
            free(mode);
        }
    }

    /* stage 2 from the golden embeddings (isolates the loop), then from ours */
    steps_seen seen = {0};
    cvx_sample_params sp = sample_params(&w, cp, &seen);
    cvx_embeddings gold = {pe, ne, emb.L, emb.D};
    cvx_latents lat;
    if (cvx_sample(m, &sp, &gold, NULL, NULL, &lat)) fail_msg("%s", cvx_last_error());
    check_steps(&w, &seen);
    float *fin = gh_f32(&w.c, NULL, "final_latents");
    ah_check_latents(&w.c, "final_latents (golden embeddings)", &lat, fin);
    cvx_latents_free(&lat);
    sp.on_step = NULL;
    if (cvx_sample(m, &sp, &emb, NULL, NULL, &lat)) fail_msg("%s", cvx_last_error());
    ah_check_latents(&w.c, "final_latents", &lat, fin);

    /* stage 3 from the golden final latents and from ours */
    cvx_decode_params dp = {0};
    cvx_frames fr;
    ah_check_decode(&w.c, m, &dp, fin, &lat, &fr);
    gh_check_frames_np(&w.c, fr.data[0], fr.T, fr.H, fr.W, 1e-3);
    cvx_frames_free(&fr);
    free(fin), free(pe), free(ne);
    cvx_latents_free(&lat);
    if (cp) cvx_conditioning_free(cp);
    cvx_embeddings_free(&emb);
    cvx_model_close(m);
    gh_close(&w.c);
}

static void test_ti2v_t2v(void **s) { (void)s; e2e_case("e2e_ti2v_t2v"); }
static void test_ti2v_i2v(void **s) { (void)s; e2e_case("e2e_ti2v_i2v"); }
static void test_a14b_t2v(void **s) { (void)s; e2e_case("e2e_a14b_t2v"); }
static void test_a14b_i2v(void **s) { (void)s; e2e_case("e2e_a14b_i2v"); }

/* A14B T2V (experts H H L L L L): stopped after step 3 (one low-noise step in), resumed from the
 * checkpoint: the same final latents bit for bit as the run without a stop. */
static void test_resume_across_switch(void **state) {
    (void)state;
    wcase w;
    wcase_open(&w, "e2e_a14b_t2v");
    cvx_model *m = open_model(&w);
    size_t n;
    float *pe = gh_f32(&w.c, &n, "prompt_embeds"), *ne = gh_f32(&w.c, NULL, "negative_prompt_embeds");
    cvx_embeddings gold = {pe, ne, 512, (int)(n / 512)};
    cvx_sample_params sp = sample_params(&w, NULL, NULL);
    cvx_latents full, part, rest;
    if (cvx_sample(m, &sp, &gold, NULL, NULL, &full)) fail_msg("%s", cvx_last_error());
    char ck[] = "/tmp/cvx_wan22_ckXXXXXX";
    assert_non_null(mkdtemp(ck));
    char path[64];
    snprintf(path, sizeof path, "%s/ck.safetensors", ck);
    for (int stop = 1; stop <= 3; stop += 2) {   /* before the switch (after step 1) and after it (step 3) */
        sp.checkpoint_path = path, sp.stop_after_steps = stop, sp.resume = 0;
        if (cvx_sample(m, &sp, &gold, NULL, NULL, &part)) fail_msg("%s", cvx_last_error());
        assert_int_equal(part.steps_done, stop);
        sp.stop_after_steps = 0, sp.resume = 1;
        if (cvx_sample(m, &sp, &gold, NULL, NULL, &rest)) fail_msg("%s", cvx_last_error());
        assert_int_equal(rest.resumed_from, stop);
        assert_memory_equal(rest.data, full.data, (size_t)full.C * full.T * full.h * full.w * sizeof(float));
        cvx_latents_free(&part);
        cvx_latents_free(&rest);
    }
    unlink(path);
    rmdir(ck);
    cvx_latents_free(&full);
    free(pe), free(ne);
    cvx_model_close(m);
    gh_close(&w.c);
}

/* A LoRA on blocks.0.attn1.to_q of the tiny A14B experts (D 60, rank 4; PEFT names). */
static void write_lora(const char *path) {
    enum { R = 4, D = 60 };
    static float A[R * D], B[D * R];
    for (int i = 0; i < R * D; i++) A[i] = (float)((i * 37 % 101) - 50) / 50.0f, B[i] = (float)((i * 53 % 97) - 48) / 200.0f;
    cvx_st_writer *w = cvx_stw_new();
    const int64_t sa[2] = {R, D}, sb[2] = {D, R};
    assert_int_equal(cvx_stw_add(w, "transformer.blocks.0.attn1.to_q.lora_A.weight", CVX_F32, 2, sa, A), 0);
    assert_int_equal(cvx_stw_add(w, "transformer.blocks.0.attn1.to_q.lora_B.weight", CVX_F32, 2, sb, B), 0);
    assert_int_equal(cvx_stw_write(w, path), 0);
    cvx_stw_free(w);
}

/* One A14B T2V run with these LoRA specs: the final latents, and in *high the latents after the
 * last high-noise step (step 2 of 6, index 1). */
typedef struct {
    float *after_high;
} lora_seen;

static void keep_high(void *user, const cvx_step_info *in) {
    lora_seen *k = user;
    if (in->step != 1) return;
    assert_int_equal(in->expert, 0);
    k->after_high = malloc(in->numel * sizeof(float));
    memcpy(k->after_high, in->latents, in->numel * sizeof(float));
}

static float *lora_run(wcase *w, const cvx_embeddings *gold, const cvx_lora_spec *specs, const int *experts, int n,
                       float **high, size_t *numel) {
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = w->model, .threads = 2, .loras = specs, .n_loras = n,
                                                      .lora_experts = experts});
    if (!m) fail_msg("%s", cvx_last_error());
    lora_seen k = {0};
    cvx_sample_params sp = sample_params(w, NULL, NULL);
    sp.on_step = keep_high, sp.on_step_user = &k;
    cvx_latents lat;
    if (cvx_sample(m, &sp, gold, NULL, NULL, &lat)) fail_msg("%s", cvx_last_error());
    *numel = (size_t)lat.C * lat.T * lat.h * lat.w;
    float *fin = malloc(*numel * sizeof(float));
    memcpy(fin, lat.data, *numel * sizeof(float));
    cvx_latents_free(&lat);
    cvx_model_close(m);
    assert_non_null(k.after_high);
    *high = k.after_high;
    return fin;
}

/* --lora on both experts, --lora_high / --lora_low on one: the same file as a high + low pair is
 * --lora bit for bit; --lora_high leaves the low-noise steps' expert bare (its high-noise steps
 * are --lora's), --lora_low the high-noise ones (its high steps are the bare run's). */
static void test_lora_per_expert(void **state) {
    (void)state;
    wcase w;
    wcase_open(&w, "e2e_a14b_t2v");
    char dir[] = "/tmp/cvx_wan22_loraXXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/lora.safetensors", dir);
    write_lora(path);
    size_t n, nl;
    float *pe = gh_f32(&w.c, &n, "prompt_embeds"), *ne = gh_f32(&w.c, NULL, "negative_prompt_embeds");
    cvx_embeddings gold = {pe, ne, 512, (int)(n / 512)};
    const cvx_lora_spec spec[2] = {{path, 1.0}, {path, 1.0}};
    const int all[1] = {0}, pair[2] = {1, 2}, high[1] = {1}, low[1] = {2};
    float *h_none, *h_both, *h_pair, *h_high, *h_low;
    float *f_none = lora_run(&w, &gold, NULL, NULL, 0, &h_none, &nl),
          *f_both = lora_run(&w, &gold, spec, all, 1, &h_both, &nl),
          *f_pair = lora_run(&w, &gold, spec, pair, 2, &h_pair, &nl),
          *f_high = lora_run(&w, &gold, spec, high, 1, &h_high, &nl),
          *f_low = lora_run(&w, &gold, spec, low, 1, &h_low, &nl);
    const size_t bytes = nl * sizeof(float);
    assert_memory_equal(f_pair, f_both, bytes);
    assert_memory_not_equal(f_both, f_none, bytes);
    assert_memory_not_equal(h_both, h_none, bytes);      /* the LoRA acts on the high-noise expert */
    assert_memory_equal(h_high, h_both, bytes);
    assert_memory_not_equal(f_high, f_both, bytes);      /* ... and --lora_high not on the low-noise one */
    assert_memory_equal(h_low, h_none, bytes);
    assert_memory_not_equal(f_low, f_none, bytes);       /* --lora_low acts on the low-noise one only */
    float *bufs[] = {h_none, h_both, h_pair, h_high, h_low, f_none, f_both, f_pair, f_high, f_low};
    for (int i = 0; i < 10; i++) free(bufs[i]);
    /* --lora_high on a model of one transformer */
    wcase t;
    wcase_open(&t, "e2e_ti2v_t2v");
    cvx_model *m = cvx_model_open(
        &(cvx_model_params){.model = t.model, .threads = 1, .loras = spec, .n_loras = 1, .lora_experts = high});
    assert_non_null(m);
    cvx_sample_params sp = sample_params(&t, NULL, NULL);
    float *tpe = gh_f32(&t.c, &n, "prompt_embeds");
    cvx_embeddings tg = {tpe, tpe, 512, (int)(n / 512)};
    cvx_latents lat;
    assert_int_equal(cvx_sample(m, &sp, &tg, NULL, NULL, &lat), -1);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "--lora_high"));
    free(tpe);
    cvx_model_close(m);
    gh_close(&t.c);
    unlink(path);
    rmdir(dir);
    free(pe), free(ne);
    gh_close(&w.c);
}

/* A copy of an A14B model directory (components linked) with model_index.json's boundary_ratio
 * replaced by `boundary` and, unless `two`, no transformer_2. */
static void make_model(char *dir, const char *src, const char *boundary, int two) {
    assert_non_null(mkdtemp(dir));
    const char *comps[] = {"scheduler", "text_encoder", "tokenizer", "transformer", "transformer_2", "vae"};
    char from[1400], to[600], cwd[600];
    if (!getcwd(cwd, sizeof cwd)) fail_msg("getcwd");
    for (int i = 0; i < 6; i++) {
        if (!two && !strcmp(comps[i], "transformer_2")) continue;
        snprintf(from, sizeof from, "%s/%s/%s", cwd, src, comps[i]);
        char link[600];
        snprintf(link, sizeof link, "%s/%s", dir, comps[i]);
        assert_int_equal(symlink(from, link), 0);
    }
    snprintf(to, sizeof to, "%s/model_index.json", dir);
    FILE *f = fopen(to, "w");
    fprintf(f, "{\"_class_name\": \"WanPipeline\", \"boundary_ratio\": %s, \"expand_timesteps\": false}", boundary);
    fclose(f);
}

static void remove_model(const char *dir) {
    const char *names[] = {"scheduler", "text_encoder", "tokenizer", "transformer", "transformer_2", "vae",
                           "model_index.json"};
    char p[600];
    for (int i = 0; i < 7; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

static void expect_open_error(const char *dir, const char *needle) {
    assert_null(cvx_model_open(&(cvx_model_params){.model = dir, .threads = 1}));
    const char *e = cvx_last_error();
    print_message("  %s\n", e);
    assert_null(strchr(e, '\n'));
    if (!strstr(e, needle)) fail_msg("error '%s' does not say '%s'", e, needle);
}

static void test_bad_inputs(void **state) {
    (void)state;
    const char *src = G22 "/e2e_a14b_t2v/model";
    char d1[] = "/tmp/cvx_wan22_badXXXXXX";
    make_model(d1, src, "0.875", 0);   /* one expert where two are needed */
    expect_open_error(d1, "transformer_2");
    remove_model(d1);
    const char *bad[] = {"1.5", "0", "-0.2", "1"};
    for (int i = 0; i < 4; i++) {
        char d[] = "/tmp/cvx_wan22_badXXXXXX";
        make_model(d, src, bad[i], 1);
        expect_open_error(d, "boundary_ratio");
        remove_model(d);
    }
    /* a Wan 2.1 latent file (16 channels) to the 2.2 VAE (48) */
    wcase w;
    wcase_open(&w, "e2e_ti2v_t2v");
    cvx_model *m = open_model(&w);
    float *z = calloc((size_t)16 * 3 * 4 * 6, sizeof(float));
    cvx_decode_params dp = {0};
    cvx_frames fr;
    assert_int_equal(cvx_decode(m, &dp, z, 1, 16, 3, 4, 6, "wan21_latents.safetensors", NULL, NULL, &fr), -1);
    const char *e = cvx_last_error();
    print_message("  %s\n", e);
    assert_non_null(strstr(e, "z_dim = 48"));
    assert_non_null(strstr(e, "wan21_latents.safetensors"));
    /* --guidance_scale_2 on a model with one transformer */
    cvx_sample_params sp = sample_params(&w, NULL, NULL);
    sp.guidance_scale_2 = 2;
    size_t n;
    float *pe = gh_f32(&w.c, &n, "prompt_embeds");
    cvx_embeddings gold = {pe, pe, 512, (int)(n / 512)};
    cvx_latents lat;
    assert_int_equal(cvx_sample(m, &sp, &gold, NULL, NULL, &lat), -1);
    print_message("  %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "--guidance_scale_2"));
    free(pe);
    free(z);
    cvx_model_close(m);
    gh_close(&w.c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ti2v_t2v), cmocka_unit_test(test_ti2v_i2v),
        cmocka_unit_test(test_a14b_t2v), cmocka_unit_test(test_a14b_i2v),
        cmocka_unit_test(test_resume_across_switch), cmocka_unit_test(test_lora_per_expert),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
