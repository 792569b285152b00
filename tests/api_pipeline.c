/* The pipeline API (pipeline/cogvideox.h): each call equals its stage program byte for byte,
 * two models run interleaved in one process without disturbing each other, progress callbacks,
 * errors, and the docs/api.md example program. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "pipeline/cogvideox.h"
#include "pipeline/stage_files.h"
#include "testutil.h"

#define TINY "models/cogvideox-tiny-random"
#define E2E GOLDEN "/e2e_2b/model"

typedef struct {
    cvx_embeddings emb;
    cvx_latents lat;
    cvx_frames fr;
} run_out;

/* encode -> sample -> decode on m with `scheduler`, 3 steps. */
static void run_all(cvx_model *m, const char *scheduler, run_out *o) {
    cvx_encode_params ep = {.prompt = "a panda", .negative_prompt = ""};
    cvx_sample_params sp = {.num_inference_steps = 3, .guidance_scale = 6, .seed = 42, .scheduler = scheduler};
    cvx_decode_params dp = {.tiling = CVX_TILING_AUTO};
    ASSERT_OK(cvx_encode(m, &ep, NULL, NULL, &o->emb));
    ASSERT_OK(cvx_sample(m, &sp, &o->emb, NULL, NULL, &o->lat));
    ASSERT_OK(cvx_decode(m, &dp, o->lat.data, 1, o->lat.C, o->lat.T, o->lat.h, o->lat.w, NULL, NULL, NULL, &o->fr));
}
static void free_out(run_out *o) {
    cvx_embeddings_free(&o->emb);
    cvx_latents_free(&o->lat);
    cvx_frames_free(&o->fr);
}
static void assert_same(const run_out *a, const run_out *b) {
    assert_int_equal(a->emb.L * a->emb.D, b->emb.L * b->emb.D);
    assert_memory_equal(a->emb.prompt, b->emb.prompt, sizeof(float) * a->emb.L * a->emb.D);
    assert_memory_equal(a->emb.negative, b->emb.negative, sizeof(float) * a->emb.L * a->emb.D);
    size_t nl = (size_t)a->lat.C * a->lat.T * a->lat.h * a->lat.w;
    assert_memory_equal(a->lat.data, b->lat.data, nl * sizeof(float));
    size_t nf = (size_t)3 * a->fr.T * a->fr.H * a->fr.W;
    assert_int_equal(nf, (size_t)3 * b->fr.T * b->fr.H * b->fr.W);
    assert_memory_equal(a->fr.data[0], b->fr.data[0], nf * sizeof(float));
}

/* The API gives exactly what the three programs write. */
static void check_vs_cli(const char *model, const char *scheduler) {
    char dir[64], cmd[4096], err[4096], prog[3][256];
    tu_mkdtemp(dir, sizeof dir);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "stage%d", i + 1);
        tu_program(prog[i], sizeof prog[i], name);
    }
    snprintf(cmd, sizeof cmd, "%s --prompt 'a panda' --model_dir %s --output_dir %s --quiet && "
             "%s --model_dir %s --input_dir %s --num_inference_steps 3 --scheduler %s --quiet && "
             "%s --model_dir %s --input_dir %s --output_frames %s/frames.safetensors --quiet",
             prog[0], model, dir, prog[1], model, dir, scheduler, prog[2], model, dir, dir);
    if (tu_run(cmd, err, sizeof err)) fail_msg("%s", err);

    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model});
    if (!m) fail_msg("%s", cvx_last_error());
    run_out o;
    run_all(m, scheduler, &o);
    char path[256];
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", dir);
    cvx_safetensors *st = tu_open(path);
    size_t n;
    float *e = tu_f32(st, "prompt_embeds", &n);
    assert_int_equal(n, (size_t)o.emb.L * o.emb.D);
    assert_memory_equal(e, o.emb.prompt, n * sizeof(float));
    free(e);
    cvx_st_close(st);
    snprintf(path, sizeof path, "%s/stage2_latents.safetensors", dir);
    st = tu_open(path);
    e = tu_f32(st, "latents", &n);
    assert_int_equal(n, (size_t)o.lat.C * o.lat.T * o.lat.h * o.lat.w);
    assert_memory_equal(e, o.lat.data, n * sizeof(float));
    free(e);
    cvx_st_close(st);
    snprintf(path, sizeof path, "%s/frames.safetensors", dir);
    st = tu_open(path);
    e = tu_f32(st, "decoded", &n);
    assert_int_equal(n, (size_t)3 * o.fr.T * o.fr.H * o.fr.W);
    assert_memory_equal(e, o.fr.data[0], n * sizeof(float));
    free(e);
    cvx_st_close(st);
    print_message("  %s (%s): cvx_encode/cvx_sample/cvx_decode == stage1/stage2/stage3 byte for byte\n", model,
                  scheduler);
    free_out(&o);
    cvx_model_close(m);
    tu_rmrf(dir);
}
static void test_tiny_dpm_vs_cli(void **s) { (void)s; check_vs_cli(TINY, "dpm"); }
static void test_e2e_ddim_vs_cli(void **s) { (void)s; check_vs_cli(E2E, "ddim"); }

/* Two models in one process with different thread counts and precisions (1 thread f32, 2 threads
 * bf16), their calls interleaved: each result equals a run alone, and the compute contexts
 * (threads, precision, scratch, counters) are separate. */
static void test_two_models(void **s) {
    (void)s;
    run_out alone_a, alone_b, a, b;
    const cvx_model_params pa = {.model = TINY, .threads = 1, .precision = CVX_PRECISION_F32};
    const cvx_model_params pb = {.model = E2E, .threads = 2, .precision = CVX_PRECISION_BF16};
    cvx_model *ma = cvx_model_open(&pa);
    cvx_model *mb = cvx_model_open(&pb);
    ASSERT_NONNULL(ma);
    ASSERT_NONNULL(mb);
    assert_ptr_not_equal(cvx_model_ctx(ma), cvx_model_ctx(mb));
    run_all(ma, "dpm", &alone_a);
    run_all(mb, "ddim", &alone_b);
    cvx_model_close(ma);
    cvx_model_close(mb);

    ma = cvx_model_open(&pa);
    mb = cvx_model_open(&pb);
    assert_int_equal(cvx_model_ctx(ma)->threads, 1);
    assert_int_equal(cvx_model_ctx(mb)->threads, 2);
    cvx_encode_params ep = {.prompt = "a panda", .negative_prompt = ""};
    cvx_sample_params spa = {.num_inference_steps = 3, .guidance_scale = 6, .seed = 42, .scheduler = "dpm"};
    cvx_sample_params spb = spa;
    spb.scheduler = "ddim";
    cvx_decode_params dp = {.tiling = CVX_TILING_AUTO};
    ASSERT_OK(cvx_encode(ma, &ep, NULL, NULL, &a.emb));
    ASSERT_OK(cvx_encode(mb, &ep, NULL, NULL, &b.emb));
    ASSERT_OK(cvx_sample(mb, &spb, &b.emb, NULL, NULL, &b.lat));
    assert_int_equal(cvx_threads(), 2);   /* the pool the call ran on is its model's */
    ASSERT_OK(cvx_sample(ma, &spa, &a.emb, NULL, NULL, &a.lat));
    assert_int_equal(cvx_threads(), 1);
    ASSERT_OK(cvx_decode(mb, &dp, b.lat.data, 1, b.lat.C, b.lat.T, b.lat.h, b.lat.w, NULL, NULL, NULL, &b.fr));
    double fa = cvx_model_ctx(ma)->flops, fb = cvx_model_ctx(mb)->flops;
    ASSERT_OK(cvx_decode(ma, &dp, a.lat.data, 1, a.lat.C, a.lat.T, a.lat.h, a.lat.w, NULL, NULL, NULL, &a.fr));
    assert_true(cvx_model_ctx(ma)->flops > fa);          /* a's decode counted on a's context */
    assert_true(cvx_model_ctx(mb)->flops == fb);         /* and not on b's */
    assert_same(&a, &alone_a);
    assert_same(&b, &alone_b);
    print_message("  two models interleaved == each alone; FLOPs counted per model (%.3g / %.3g)\n",
                  cvx_model_ctx(ma)->flops, cvx_model_ctx(mb)->flops);
    free_out(&a), free_out(&b), free_out(&alone_a), free_out(&alone_b);
    cvx_model_close(ma);
    cvx_model_close(mb);
}

typedef struct {
    int calls, last_done, last_total, monotonic;
} progress_log;
static void on_progress(void *user, const char *label, int done, int total) {
    progress_log *l = user;
    (void)label;
    if (l->calls && done < l->last_done && total == l->last_total) l->monotonic = 0;
    l->calls++, l->last_done = done, l->last_total = total;
}

static void test_progress_and_info(void **s) {
    (void)s;
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = TINY});
    ASSERT_NONNULL(m);
    const cvx_model_info *i = cvx_model_get_info(m);
    assert_int_equal(i->fps, 8);
    assert_int_equal(i->vae_scale_spatial, 8);
    assert_int_equal(i->vae_scale_temporal, 4);
    assert_string_equal(i->scheduler, "dpm");
    cvx_sample_params r;
    ASSERT_OK(cvx_sample_resolve(m, &(cvx_sample_params){0}, &r));
    assert_int_equal(r.num_inference_steps, 50);
    assert_int_equal(r.frames, i->frames);
    progress_log lg = {0, 0, 0, 1};
    cvx_embeddings emb;
    ASSERT_OK(cvx_encode(m, &(cvx_encode_params){.prompt = "x"}, on_progress, &lg, &emb));
    assert_true(lg.calls >= 2 && lg.monotonic && lg.last_done == lg.last_total);
    lg = (progress_log){0, 0, 0, 1};
    cvx_latents lat;
    ASSERT_OK(cvx_sample(m, &(cvx_sample_params){.num_inference_steps = 2, .guidance_scale = 1}, &emb, on_progress,
                         &lg, &lat));
    assert_int_equal(lg.last_done, 2);
    assert_int_equal(lg.last_total, 2);
    cvx_latents_free(&lat);
    cvx_embeddings_free(&emb);
    cvx_model_close(m);
}

static void test_errors(void **s) {
    (void)s;
    assert_null(cvx_model_open(&(cvx_model_params){.model = "/nonexistent/model"}));
    assert_non_null(strstr(cvx_last_error(), "nonexistent"));
    assert_null(cvx_model_open(&(cvx_model_params){.model = TINY, .precision = (cvx_precision)7}));
    assert_non_null(strstr(cvx_last_error(), "precision"));
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = TINY});
    cvx_embeddings emb;
    cvx_latents lat;
    ASSERT_OK(cvx_encode(m, &(cvx_encode_params){.prompt = "x"}, NULL, NULL, &emb));
    assert_int_equal(cvx_sample(m, &(cvx_sample_params){.frames = 10, .num_inference_steps = 1}, &emb, NULL, NULL,
                                &lat), -1);
    assert_non_null(strstr(cvx_last_error(), "--frames 10"));
    assert_int_equal(cvx_sample(m, &(cvx_sample_params){.num_inference_steps = 1, .scheduler = "euler"}, &emb, NULL,
                                NULL, &lat), -1);
    assert_non_null(strstr(cvx_last_error(), "euler"));
    cvx_embeddings_free(&emb);
    cvx_model_close(m);
}

/* The keys a stage records after its data (conditioning, precision, cache) go into the output
 * set's one pending generation_config.json: nothing changes on disk before the commit, and the
 * commit writes every key at once (a kill between two updates cannot leave half a record). */
static void test_genconfig_keys_in_one_set(void **s) {
    (void)s;
    char dir[64], gc[256];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(gc, sizeof gc, "%s/generation_config.json", dir);
    const char *before = "{\"prompt\": \"a panda\", \"stage1_precision\": \"old\", \"mode\": \"i2v\"}\n";
    tu_write(gc, before, strlen(before));
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = TINY, .precision = CVX_PRECISION_F32});
    ASSERT_NONNULL(m);
    cvx_outset set;
    cvx_outset_init(&set);
    ASSERT_OK(cvx_genconfig_record_conditioning_set(&set, gc, NULL, NULL));   /* a T2V run */
    ASSERT_OK(cvx_genconfig_record_precision_set(&set, gc, "stage1_precision", m));
    ASSERT_OK(cvx_genconfig_record_precision_set(&set, gc, "stage2_precision", m));
    assert_int_equal(set.n, 1);   /* one pending file, rendered over three times */
    size_t n;
    char *text = cvx_read_file(gc, &n);
    assert_string_equal(text, before);   /* not yet committed */
    free(text);
    ASSERT_OK(cvx_outset_commit(&set));
    char v[64];
    ASSERT_OK(cvx_genconfig_get_str(gc, "mode", v, sizeof v));
    assert_string_equal(v, "t2v");
    ASSERT_OK(cvx_genconfig_get_str(gc, "stage1_precision", v, sizeof v));
    assert_string_equal(v, "f32");
    ASSERT_OK(cvx_genconfig_get_str(gc, "stage2_precision", v, sizeof v));
    assert_string_equal(v, "f32");
    ASSERT_OK(cvx_genconfig_get_str(gc, "prompt", v, sizeof v));
    assert_string_equal(v, "a panda");
    assert_int_equal(tu_count_entries(dir), 1);   /* no temp left */
    cvx_model_close(m);
    tu_rmrf(dir);
}

/* docs/api.md's example program, built by make test. */
static void test_example_text2video(void **s) {
    (void)s;
    char dir[64], cmd[1024], err[4096], out[256];
    const char *b = getenv("BUILD");
    tu_mkdtemp(dir, sizeof dir);
    snprintf(out, sizeof out, "%s/v.mp4", dir);
    snprintf(cmd, sizeof cmd, "%s/examples/text2video %s 'a panda' %s 2 >/dev/null", b && b[0] ? b : "build", TINY,
             out);
    if (tu_run(cmd, err, sizeof err)) fail_msg("%s", err);
    struct stat sb;
    assert_int_equal(stat(out, &sb), 0);
    assert_true(sb.st_size > 1000);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_dpm_vs_cli), cmocka_unit_test(test_e2e_ddim_vs_cli),
        cmocka_unit_test(test_two_models),      cmocka_unit_test(test_progress_and_info),
        cmocka_unit_test(test_errors),          cmocka_unit_test(test_example_text2video),
        cmocka_unit_test(test_genconfig_keys_in_one_set),
    };
    cvx_set_verbosity(0);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
