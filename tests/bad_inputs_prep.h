/* The preparations of tests/e2e_bad_inputs.c's table: each makes one thing wrong in D, the case's
 * copy of a good run's outputs, or in X, a scratch directory (a file, a model copy, an edited
 * config, a tampered checkpoint...). Header-only like testutil.h, included by that test alone;
 * the state they read (the good run, a lock held during a case) is defined here with them. */
#ifndef CVX_TESTS_BAD_INPUTS_PREP_H
#define CVX_TESTS_BAD_INPUTS_PREP_H

#include "testutil.h"
#include "config.h"
#include "fileio.h"
#include "lock.h"
#include "rng.h"

#include <limits.h>
#include <math.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>

static tu_good_run g_good;        /* outputs of one good run (the "previous outputs") */
static cvx_dir_lock *g_held;      /* a lock a case's preparation holds during its run */

/* ---- preparations: D is the case's copy of the good outputs, X a scratch dir ---- */
static void rehash(const char *D, const char *data_rel, const char *key);
#define EMB "stage1_embeddings.safetensors"
#define LAT "stage2_latents.safetensors"
typedef void (*prep_fn)(const char *D, const char *X);

static void model_copy(const char *X) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s/model'", g_good.model, X);
    tu_run_ok(cmd);
}
static void put(const char *dir, const char *rel, const char *text) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    tu_write(p, text, strlen(text));
}
static void truncate_file(const char *dir, const char *rel, long keep) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    assert_int_equal(truncate(p, keep), 0);
}
/* the damaged data files get their hash recorded, so that the case reaches the reader's own check */
static void p_trunc_embeddings(const char *D, const char *X) {
    (void)X;
    truncate_file(D, EMB, 100);
    rehash(D, EMB, "stage1_embeddings_xxh64");
}
static void p_no_embeddings(const char *D, const char *X) {
    (void)X;
    char p[512];
    snprintf(p, sizeof p, "%s/stage1_embeddings.safetensors", D);
    unlink(p);
}
static void p_garbage_embeddings(const char *D, const char *X) {
    (void)X;
    put(D, EMB, "not a safetensors file at all");
    rehash(D, EMB, "stage1_embeddings_xxh64");
}
static void p_renamed_tensor(const char *D, const char *X) {
    (void)X;
    char p[512];
    snprintf(p, sizeof p, "%s/stage1_embeddings.safetensors", D);
    cvx_st_writer *w = cvx_stw_new();
    float z[8] = {0};
    ASSERT_OK(cvx_stw_add_f32(w, "embeds", CVX_F32, 3, (int64_t[]){1, 2, 4}, z));
    ASSERT_OK(cvx_stw_write(w, p));
    cvx_stw_free(w);
    rehash(D, EMB, "stage1_embeddings_xxh64");
}
static void p_wrong_embed_dim(const char *D, const char *X) {
    (void)X;
    char p[512];
    snprintf(p, sizeof p, "%s/stage1_embeddings.safetensors", D);
    cvx_st_writer *w = cvx_stw_new();
    float *z = calloc(226 * 7, sizeof(float));
    ASSERT_OK(cvx_stw_add_f32(w, "prompt_embeds", CVX_F32, 3, (int64_t[]){1, 226, 7}, z));
    ASSERT_OK(cvx_stw_add_f32(w, "negative_prompt_embeds", CVX_F32, 3, (int64_t[]){1, 226, 7}, z));
    ASSERT_OK(cvx_stw_write(w, p));
    cvx_stw_free(w);
    free(z);
    rehash(D, EMB, "stage1_embeddings_xxh64");
}
static void p_trunc_latents(const char *D, const char *X) {
    (void)X;
    truncate_file(D, LAT, 64);
    rehash(D, LAT, "stage2_latents_xxh64");
}
static void p_latents_rank4(const char *D, const char *X) {
    (void)X;
    char p[512];
    snprintf(p, sizeof p, "%s/stage2_latents.safetensors", D);
    cvx_st_writer *w = cvx_stw_new();
    float z[48] = {0};
    ASSERT_OK(cvx_stw_add_f32(w, "latents", CVX_F32, 4, (int64_t[]){4, 3, 2, 2}, z));
    ASSERT_OK(cvx_stw_write(w, p));
    cvx_stw_free(w);
    rehash(D, LAT, "stage2_latents_xxh64");
}
static void p_latents_channels(const char *D, const char *X) {
    (void)X;
    char p[512];
    snprintf(p, sizeof p, "%s/stage2_latents.safetensors", D);
    cvx_st_writer *w = cvx_stw_new();
    float *z = calloc(7 * 3 * 6 * 8, sizeof(float));
    ASSERT_OK(cvx_stw_add_f32(w, "latents", CVX_F32, 5, (int64_t[]){1, 7, 3, 6, 8}, z));
    ASSERT_OK(cvx_stw_write(w, p));
    cvx_stw_free(w);
    free(z);
    rehash(D, LAT, "stage2_latents_xxh64");
}
static void p_latents_i64(const char *D, const char *X) {
    (void)X;
    char p[512];
    snprintf(p, sizeof p, "%s/stage2_latents.safetensors", D);
    cvx_st_writer *w = cvx_stw_new();
    int64_t z[4] = {0};
    ASSERT_OK(cvx_stw_add(w, "latents", CVX_I64, 5, (int64_t[]){1, 1, 1, 2, 2}, z));
    ASSERT_OK(cvx_stw_write(w, p));
    cvx_stw_free(w);
    rehash(D, LAT, "stage2_latents_xxh64");
}
static void p_model_no_tokenizer(const char *D, const char *X) {
    (void)D;
    model_copy(X);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -r '%s/model/tokenizer'", X);
    tu_run_ok(cmd);
}
static void p_model_bad_spiece(const char *D, const char *X) { (void)D; model_copy(X); put(X, "model/tokenizer/spiece.model", "garbage"); }
static void p_model_bad_t5_config(const char *D, const char *X) { (void)D; model_copy(X); put(X, "model/text_encoder/config.json", "{\"d_model\": "); }
static void p_model_t5_missing_key(const char *D, const char *X) {
    (void)D;
    model_copy(X);
    put(X, "model/text_encoder/config.json", "{\"d_kv\": 8, \"num_heads\": 4, \"d_ff\": 48, \"num_layers\": 2, \"vocab_size\": 928}");
}
static void p_model_trunc_t5(const char *D, const char *X) { (void)D; model_copy(X); truncate_file(X, "model/text_encoder/model.safetensors", 4000); }
static void p_model_trunc_transformer(const char *D, const char *X) {
    (void)D;
    model_copy(X);
    truncate_file(X, "model/transformer/diffusion_pytorch_model.safetensors", 5000);
}
static void p_model_bad_transformer_config(const char *D, const char *X) { (void)D; model_copy(X); put(X, "model/transformer/config.json", "[1, 2]"); }
static void p_model_bad_scheduler(const char *D, const char *X) {
    (void)D;
    model_copy(X);
    put(X, "model/scheduler/scheduler_config.json", "{\"_class_name\": \"EulerDiscreteScheduler\"}");
}
static void p_model_no_vae(const char *D, const char *X) {
    (void)D;
    model_copy(X);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -r '%s/model/vae'", X);
    tu_run_ok(cmd);
}
static void p_model_bad_vae_config(const char *D, const char *X) { (void)D; model_copy(X); put(X, "model/vae/config.json", "{\"block_out_channels\": \"x\"}"); }
static void p_model_trunc_vae(const char *D, const char *X) {
    (void)D;
    model_copy(X);
    truncate_file(X, "model/vae/diffusion_pytorch_model.safetensors", 3000);
}
static void p_output_is_file(const char *D, const char *X) { (void)D; put(X, "afile", "x"); }
/* {X}/mz.safetensors: the model's transformer with `<blk0>.<module>.weight` replaced by a zero
 * U8 `.Q4_0_qweight` [rows, cols] (the MinusZone layout, docs/models.md) */
static void mz_file(const char *X, const char *module, int64_t rows, int64_t cols) {
    char src[1200], dst[256], drop[128], name[128];
    snprintf(src, sizeof src, "%s/transformer/diffusion_pytorch_model.safetensors", g_good.model);
    snprintf(dst, sizeof dst, "%s/mz.safetensors", X);
    snprintf(drop, sizeof drop, "transformer_blocks.0.%s.weight", module);
    snprintf(name, sizeof name, "transformer_blocks.0.%s.Q4_0_qweight", module);
    void *zero = calloc((size_t)(rows * cols), 1);
    tu_st_copy_edit(src, dst, drop, name, CVX_U8, 2, (const int64_t[]){rows, cols}, zero);
    free(zero);
}
static void p_mz_bytes(const char *D, const char *X) { (void)D; mz_file(X, "ff.net.2", 48, 90); }   /* K 192: 108 */
static void p_mz_k48(const char *D, const char *X) { (void)D; mz_file(X, "attn1.to_q", 48, 36); }  /* K 48 */

/* a real checkpoint of this run (stopped after 1 step), optionally with its generator state
 * replaced by next = 624, left = 624 (issue 14: read past the state array) */
static void make_checkpoint(const char *D, const char *extra) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s " TU_STAGE2_SMALL " --stop_after_steps 1 %s", g_good.s2,
             D, g_good.model, extra);
    tu_run_ok(cmd);
}
/* D's checkpoint written again with metadata `key` = value (NULL: the same metadata), and sealed
 * again unless `seal` is 0 (the crafted cases must reach the reader's own checks behind the
 * content hash, issue 21) */
static void rewrite_checkpoint(const char *D, const char *key, const char *value, int seal) {
    char p[512];
    snprintf(p, sizeof p, "%s/stage2_checkpoint.safetensors", D);
    size_t n;
    char *buf = cvx_read_file(p, &n);
    assert_non_null(buf);
    cvx_safetensors *st = cvx_st_open_memory(buf, n, p);
    ASSERT_NONNULL(st);
    cvx_st_writer *w = cvx_stw_new();
    for (int i = 0; i < cvx_st_count(st); i++) {
        const cvx_tensor *t = cvx_st_tensor(st, i);
        ASSERT_OK(cvx_stw_add(w, t->name, t->dtype, t->ndim, t->shape, t->data));
    }
    for (int i = 0; i < cvx_st_metadata_count(st); i++) {
        const char *k, *v;
        cvx_st_metadata_at(st, i, &k, &v);
        if (!strcmp(k, "content_xxh64")) continue;
        ASSERT_OK(cvx_stw_metadata(w, k, key && !strcmp(k, key) ? value : v));
    }
    if (seal) ASSERT_OK(cvx_stw_seal(w, "content_xxh64"));
    ASSERT_OK(cvx_stw_write(w, p));
    cvx_stw_free(w);
    cvx_st_close(st);
    free(buf);
}
/* a real checkpoint of this run with tensor `name` changed in place by edit (its data lies inside
 * the file's bytes, written back) */
static void edit_checkpoint_tensor(const char *D, const char *name, void (*edit)(const cvx_tensor *t)) {
    make_checkpoint(D, "");
    char p[512];
    snprintf(p, sizeof p, "%s/stage2_checkpoint.safetensors", D);
    size_t n;
    char *buf = cvx_read_file(p, &n);
    assert_non_null(buf);
    cvx_safetensors *st = cvx_st_open_memory(buf, n, p);
    ASSERT_NONNULL(st);
    const cvx_tensor *t = cvx_st_find(st, name);
    assert_non_null(t);
    edit(t);
    cvx_st_close(st);
    tu_write(p, buf, n);
    free(buf);
}
static void exhaust_generator(const cvx_tensor *g) {
    assert_int_equal(g->nbytes, sizeof(cvx_generator));
    cvx_generator gen;
    memcpy(&gen, g->data, sizeof gen);
    gen.next = CVX_MT_N;
    gen.left = CVX_MT_N;
    memcpy((char *)g->data, &gen, sizeof gen);
}
static void p_checkpoint_bad_generator(const char *D, const char *X) {
    (void)X;
    edit_checkpoint_tensor(D, "generator", exhaust_generator);
    rewrite_checkpoint(D, NULL, NULL, 1);
}
/* one bit of the latents flipped, or the step set to the total: resumed with exit 0 (issue 21) */
static void flip_bit(const cvx_tensor *t) { ((unsigned char *)t->data)[13] ^= 0x01; }   /* a low mantissa bit */
static void p_checkpoint_flipped_bit(const char *D, const char *X) { (void)X; edit_checkpoint_tensor(D, "latents", flip_bit); }
static void step_to_total(const cvx_tensor *t) {
    assert_true(t->dtype == CVX_I64);
    const int64_t total = 2;   /* TU_STAGE2_SMALL's steps */
    memcpy((void *)t->data, &total, sizeof total);
}
static void p_checkpoint_step_total(const char *D, const char *X) {
    (void)X;
    edit_checkpoint_tensor(D, "step", step_to_total);
    rewrite_checkpoint(D, "steps_done", "2", 1);
}
static void p_checkpoint_v1(const char *D, const char *X) {   /* an older build's: no content hash */
    (void)X;
    make_checkpoint(D, "");
    rewrite_checkpoint(D, "format", "cogvideox.c stage2 checkpoint v1", 0);
}
static void p_checkpoint_other_seed(const char *D, const char *X) { (void)X; make_checkpoint(D, "--seed 7"); }
static void p_checkpoint_garbage(const char *D, const char *X) { (void)X; put(D, "stage2_checkpoint.safetensors", "xx"); }

/* ---- preparations that need the wiring of issue 14 ---- */
static void put_bytes(const char *dir, const char *rel, const char *bytes, size_t n) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    tu_write(p, bytes, n);
}
/* replace `from` by `to` in a text file (once; the file must hold it) */
static void edit(const char *dir, const char *rel, const char *from, const char *to) {
    char p[1024];
    size_t n;
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    char *s = cvx_read_file(p, &n);
    assert_non_null(s);
    char *at = strstr(s, from);
    if (!at) fail_msg("%s does not hold '%s'", p, from);
    size_t k = (size_t)(at - s), out_n = n - strlen(from) + strlen(to);
    char *o = malloc(out_n + 1);
    memcpy(o, s, k);
    memcpy(o + k, to, strlen(to));
    memcpy(o + k + strlen(to), at + strlen(from), n - k - strlen(from));
    tu_write(p, o, out_n);
    free(o);
    free(s);
}
/* record the current xxh64 of data_rel under key in D's generation_config.json (so that a case
 * reaches the check after the pair check) */
static void rehash(const char *D, const char *data_rel, const char *key) {
    char p[1024], gc[1024], hex[17];
    snprintf(p, sizeof p, "%s/%s", D, data_rel);
    snprintf(gc, sizeof gc, "%s/generation_config.json", D);
    ASSERT_OK(cvx_file_xxh64(p, hex));
    json_object *upd = json_object_new_object();
    json_object_object_add(upd, key, json_object_new_string(hex));
    ASSERT_OK(cvx_genconfig_update(gc, upd));
    json_object_put(upd);
}
/* element `index` of F32 tensor `name` in the safetensors file dir/rel set to v, in place */
static void poke(const char *dir, const char *rel, const char *name, size_t index, float v) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    tu_poke_f32(p, name, index, v);
}
/* X's copy of the model with one text edit (edit) or one element set (poke) */
static void model_edit(const char *X, const char *rel, const char *from, const char *to) {
    model_copy(X);
    edit(X, rel, from, to);
}
static void model_poke(const char *X, const char *rel, const char *name, size_t index, float v) {
    model_copy(X);
    poke(X, rel, name, index, v);
}
/* one element of D's data file `<stem>.safetensors` set to v, its hash `<stem>_xxh64` recorded again */
static void poke_rehashed(const char *D, const char *stem, const char *name, size_t index, float v) {
    char rel[128], key[128];
    snprintf(rel, sizeof rel, "%s.safetensors", stem);
    snprintf(key, sizeof key, "%s_xxh64", stem);
    poke(D, rel, name, index, v);
    rehash(D, rel, key);
}
static void p_s1_nul_line(const char *D, const char *X) {   /* "A panda\0 on fire": was read as "A panda" */
    (void)D;
    char p[512];
    snprintf(p, sizeof p, "%s/p.txt", X);
    tu_write(p, "A cat\nA panda\0 on fire\n", 23);
}
static void p_s1_whitespace_file(const char *D, const char *X) { (void)D; put(X, "p.txt", "   \n\t\n \r\n\n"); }
static void p_s1_bad_utf8_line(const char *D, const char *X) { (void)D; put_bytes(X, "p.txt", "a cat\n\xc3\x28 dog\n", 11); }
static void p_s1_control_line(const char *D, const char *X) { (void)D; put_bytes(X, "p.txt", "a \001cat\n", 8); }
static void p_corrupt_genconfig(const char *D, const char *X) { (void)X; put(D, "generation_config.json", "{\"prompt\": "); }
static void p_genconfig_fps(const char *D, const char *X) { (void)X; edit(D, "generation_config.json", "\"fps\": 8", "\"fps\": -8"); }
static void p_genconfig_bad_utf8(const char *D, const char *X) {
    (void)X;
    edit(D, "generation_config.json", "\"A panda\"", "\"A \xff panda\"");
}
static void p_genconfig_bad_hash(const char *D, const char *X) {
    (void)X;
    put(D, "generation_config.json", "{\"model_id\": \"x\", \"stage2_latents_xxh64\": \"not-a-hash\"}");
}
static void p_t5_layers(const char *D, const char *X) {
    (void)D;
    model_edit(X, "model/text_encoder/config.json", "\"num_layers\": 2", "\"num_layers\": 1000000000");
}
static void p_transformer_layers(const char *D, const char *X) {
    (void)D;
    model_edit(X, "model/transformer/config.json", "\"num_layers\": 2", "\"num_layers\": 1e9");
}
static void p_transformer_heads_zero(const char *D, const char *X) {
    (void)D;
    model_edit(X, "model/transformer/config.json", "\"num_attention_heads\": 3", "\"num_attention_heads\": 0");
}
static void p_vae_scaling_zero(const char *D, const char *X) {
    (void)D;
    model_edit(X, "model/vae/config.json", "\"scaling_factor\": 1.15258426", "\"scaling_factor\": 0");
}
static void p_vae_layers(const char *D, const char *X) {
    (void)D;
    model_edit(X, "model/vae/config.json", "\"layers_per_block\": 1", "\"layers_per_block\": 1000000000");
}
static void p_nan_embeddings(const char *D, const char *X) { (void)X; poke_rehashed(D, "stage1_embeddings", "prompt_embeds", 5, NAN); }
static void p_inf_negative(const char *D, const char *X) { (void)X; poke_rehashed(D, "stage1_embeddings", "negative_prompt_embeds", 77, -INFINITY); }
static void p_embeddings_other(const char *D, const char *X) {   /* valid, but not the file the config describes */
    (void)X;
    poke(D, "stage1_embeddings.safetensors", "prompt_embeds", 0, 0.5f);
}
static void p_nan_weight(const char *D, const char *X) {
    (void)D;
    model_poke(X, "model/transformer/diffusion_pytorch_model.safetensors", "proj_out.bias", 0, NAN);
}
/* a good checkpoint after step 1 with the copied model, then a NaN weight written in place (the
 * resume is refused: the model changed; the checkpoint of step 1 stays as it was) */
static void p_nan_weight_resume(const char *D, const char *X) {
    model_copy(X);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s/model " TU_STAGE2_SMALL " --stop_after_steps 1",
             g_good.s2, D, X);
    tu_run_ok(cmd);
    poke(X, "model/transformer/diffusion_pytorch_model.safetensors", "proj_out.bias", 0, NAN);
}
static void p_checkpoint_nan(const char *D, const char *X) {
    (void)X;
    make_checkpoint(D, "");
    poke(D, "stage2_checkpoint.safetensors", "latents", 9, NAN);
    rewrite_checkpoint(D, NULL, NULL, 1);
}
static void p_out_genconfig_corrupt(const char *D, const char *X) {
    (void)D;
    char p[512];
    snprintf(p, sizeof p, "%s/out", X);
    assert_int_equal(mkdir(p, 0755), 0);
    put(X, "out/generation_config.json", "{\"fps\": \"eight\", ");
}
static void p_inf_latents(const char *D, const char *X) { (void)X; poke_rehashed(D, "stage2_latents", "latents", 3, INFINITY); }
static void p_nan_latents(const char *D, const char *X) { (void)X; poke_rehashed(D, "stage2_latents", "latents", 100, NAN); }
static void p_latents_other(const char *D, const char *X) { (void)X; poke(D, "stage2_latents.safetensors", "latents", 0, 0.25f); }
static void p_nan_vae_weight(const char *D, const char *X) {
    (void)D;
    model_poke(X, "model/vae/diffusion_pytorch_model.safetensors", "decoder.conv_out.conv.bias", 1, NAN);
}
/* an image-to-video model (the golden I2V 5b) whose VAE encoder makes NaN, and its image (issue 21:
 * stage 1 wrote an all-NaN conditioning file and exited 0) */
static void p_i2v_nan_encoder(const char *D, const char *X) {
    (void)D;
    char cmd[3 * PATH_MAX], real[PATH_MAX];
    if (!realpath(GOLDEN "/e2e_i2v_5b", real)) fail_msg("no " GOLDEN "/e2e_i2v_5b");
    snprintf(cmd, sizeof cmd, "cp -r '%s/model' '%s/image.png' '%s/'", real, real, X);
    tu_run_ok(cmd);
    poke(X, "model/vae/diffusion_pytorch_model.safetensors", "encoder.conv_in.conv.weight", 4, NAN);
}
/* a V2V conditioning of the golden video (stage 1 on the case's T2V model into X) copied into D,
 * whose generation_config.json records a T2V run and no conditioning hash (issue 21: stage 2 ran
 * V2V from the file alone) */
static void p_v2v_file_in_t2v(const char *D, const char *X) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'A lake' --model_dir %s --output_dir %s/v --video %s "
             "--height 48 --width 64 && cp %s/v/stage1_conditioning.safetensors %s/", g_good.s1, g_good.model, X,
             GOLDEN "/e2e_v2v_5b/video", X, D);
    tu_run_ok(cmd);
}
static void p_mode_banana(const char *D, const char *X) { (void)X; edit(D, "generation_config.json", "\"t2v\"", "\"banana\""); }
static void p_mode_i2v_v2v_file(const char *D, const char *X) {
    p_v2v_file_in_t2v(D, X);
    edit(D, "generation_config.json", "\"t2v\"", "\"i2v\"");
}
/* ---- issue 21: messages that named the wrong cause ---- */
static void p_fifo(const char *D, const char *X) {
    (void)D;
    char p[512];
    snprintf(p, sizeof p, "%s/fifo", X);
    assert_int_equal(mkfifo(p, 0644), 0);
}
static void p_symlink_loop(const char *D, const char *X) {
    (void)D;
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/loop_a", X);
    snprintf(b, sizeof b, "%s/loop_b", X);
    assert_int_equal(symlink(b, a), 0);
    assert_int_equal(symlink(a, b), 0);
}
static void p_i2v_model(const char *D, const char *X) {
    (void)D;
    char cmd[3 * PATH_MAX], real[PATH_MAX];
    if (!realpath(GOLDEN "/e2e_i2v_5b/model", real)) fail_msg("no " GOLDEN "/e2e_i2v_5b/model");
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s/model' && mkdir '%s/images'", real, X, X);
    tu_run_ok(cmd);
}
static void p_empty_embeddings(const char *D, const char *X) { (void)X; truncate_file(D, EMB, 0); }
static void p_trunc_embeddings_hashed(const char *D, const char *X) { (void)X; truncate_file(D, EMB, 100); }
static void p_genconfig_dir(const char *D, const char *X) {
    (void)X;
    char p[512];
    snprintf(p, sizeof p, "%s/generation_config.json", D);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkdir(p, 0755), 0);
}
static void p_model_no_transformer(const char *D, const char *X) {
    (void)D;
    model_copy(X);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -r '%s/model/transformer'", X);
    tu_run_ok(cmd);
}
/* X/big.png: a PNG header of 16000x16000 pixels (and a token IDAT): refused from the header by
 * the input pixel limit, before any pixel is decoded (issue 21: 1.5 GB, 18.7 s, accepted) */
static uint32_t crc32_png(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}
static void put_chunk(FILE *f, const char *type, const unsigned char *data, uint32_t n) {
    unsigned char buf[64];
    const unsigned char len[4] = {n >> 24, n >> 16 & 255, n >> 8 & 255, n & 255};
    memcpy(buf, type, 4);
    memcpy(buf + 4, data, n);
    const uint32_t c = crc32_png(buf, n + 4);
    const unsigned char crc[4] = {c >> 24, c >> 16 & 255, c >> 8 & 255, c & 255};
    fwrite(len, 1, 4, f), fwrite(buf, 1, n + 4, f), fwrite(crc, 1, 4, f);
}
static void p_huge_png(const char *D, const char *X) {
    p_i2v_model(D, X);
    char p[512];
    snprintf(p, sizeof p, "%s/big.png", X);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fwrite("\x89PNG\r\n\x1a\n", 1, 8, f);
    const unsigned char ihdr[13] = {0, 0, 0x3e, 0x80, 0, 0, 0x3e, 0x80, 8, 2, 0, 0, 0};   /* 16000 x 16000 RGB8 */
    put_chunk(f, "IHDR", ihdr, 13);
    const unsigned char idat[8] = {0x78, 0x9c, 0x63, 0x60, 0, 0, 0, 1};
    put_chunk(f, "IDAT", idat, 8);
    put_chunk(f, "IEND", idat, 0);
    fclose(f);
}
static void p_lock(const char *D, const char *X) {
    (void)X;
    g_held = cvx_dir_lock_acquire(D, 1);
    ASSERT_NONNULL(g_held);
}
static void p_lock_input(const char *D, const char *X) {   /* a writer holds the input directory */
    p_lock(D, X);
    char p[512];
    snprintf(p, sizeof p, "%s/out", X);
    assert_int_equal(mkdir(p, 0755), 0);
}

/* stage 1 run again into the full run directory (a new prompt; then a prompts file): the
 * latents (then the single-prompt embeddings) left there belong to the earlier run */
static void p_s1_rerun(const char *D, const char *X) {
    (void)X;
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt 'A red car' --model_dir %s --output_dir %s", g_good.s1, g_good.model, D);
    tu_run_ok(cmd);
}
static void p_s1_rerun_prompts_file(const char *D, const char *X) {
    char cmd[8192];
    put(X, "p.txt", "A red car\nA blue boat\n");
    snprintf(cmd, sizeof cmd, "%s --quiet --prompts_file %s/p.txt --model_dir %s --output_dir %s", g_good.s1, X, g_good.model, D);
    tu_run_ok(cmd);
}

#endif
