/* HunyuanVideo-1.5 transformer weights as users have them (stage2/hunyuan15_load.c), on the tiny
 * golden model (tests/data/golden_hv15/transformer_t2v):
 *   - the original / ComfyUI names (hunyuanvideo1.5_*.safetensors: the refiner's fused
 *     self_attn_qkv, the final layer's (shift, scale) modulation), written here from the diffusers
 *     file by the inverse of diffusers' scripts/convert_hunyuan_video1_5_to_diffusers.py, with and
 *     without ComfyUI's "model.diffusion_model." prefix: the forward gives the diffusers-layout
 *     run's bytes;
 *   - GGUF Q8_0 with city96's "hyvid" rules (stage2/quantize.h) from both layouts: the same
 *     tensors kept / quantized by either name; each within 1e-5 of the f32 forward over the GGUF's
 *     dequantized weights; the distance to the f32 model printed and bounded (< 2e-2);
 *   - the three programs on models/hunyuanvideo15-tiny-random (the same transformer) with ComfyUI's
 *     four files made here: --text_encoder (qwen_2.5_vl_7b: "model." names), --text_encoder_2
 *     (byt5_small_glyphxl: HF T5 names), --transformer (original names, ComfyUI's prefix), --vae
 *     (the original VAE names, the conversion script read backwards): embeddings, latents and
 *     frames byte-identical to the diffusers directory's run;
 *   - bad inputs: a truncated file, another family's file, a HunyuanVideo 1.0 file, a tensor of
 *     the wrong shape in a GGUF, a fused qkv that is not 3 · hidden, a scaled-fp8 text encoder, a
 *     truncated --text_encoder_2: one clear line each, no output written. */
#include "golden_harness.h"
#include "weights_harness.h"

#include "gguf.h"
#include "stage2/hunyuan15.h"
#include "stage2/quantize.h"

#define CASE "tests/data/golden_hv15/transformer_t2v"
#define MODEL CASE "/model/transformer/"
#define PREFIX "model.diffusion_model."

/* diffusers -> original, the conversion script read backwards (prefixes; "@" = the block index) */
static const char *const TO_ORIG[][2] = {
    {"time_embed.timestep_embedder.linear_1.", "time_in.mlp.0."},
    {"time_embed.timestep_embedder.linear_2.", "time_in.mlp.2."},
    {"context_embedder.time_text_embed.timestep_embedder.linear_1.", "txt_in.t_embedder.mlp.0."},
    {"context_embedder.time_text_embed.timestep_embedder.linear_2.", "txt_in.t_embedder.mlp.2."},
    {"context_embedder.time_text_embed.text_embedder.linear_1.", "txt_in.c_embedder.linear_1."},
    {"context_embedder.time_text_embed.text_embedder.linear_2.", "txt_in.c_embedder.linear_2."},
    {"context_embedder.proj_in.", "txt_in.input_embedder."},
    {"context_embedder_2.norm.", "byt5_in.layernorm."},
    {"context_embedder_2.linear_1.", "byt5_in.fc1."},
    {"context_embedder_2.linear_2.", "byt5_in.fc2."},
    {"context_embedder_2.linear_3.", "byt5_in.fc3."},
    {"image_embedder.norm_in.", "vision_in.proj.0."},
    {"image_embedder.linear_1.", "vision_in.proj.1."},
    {"image_embedder.linear_2.", "vision_in.proj.3."},
    {"image_embedder.norm_out.", "vision_in.proj.4."},
    {"x_embedder.proj.", "img_in.proj."},
    {"cond_type_embed.", "cond_type_embedding."},
    {"proj_out.", "final_layer.linear."},
    {"norm_out.linear.", "final_layer.adaLN_modulation.1."},
    {"context_embedder.token_refiner.refiner_blocks.@.norm1.", "txt_in.individual_token_refiner.blocks.@.norm1."},
    {"context_embedder.token_refiner.refiner_blocks.@.norm2.", "txt_in.individual_token_refiner.blocks.@.norm2."},
    {"context_embedder.token_refiner.refiner_blocks.@.attn.to_out.0.", "txt_in.individual_token_refiner.blocks.@.self_attn_proj."},
    {"context_embedder.token_refiner.refiner_blocks.@.ff.net.0.proj.", "txt_in.individual_token_refiner.blocks.@.mlp.fc1."},
    {"context_embedder.token_refiner.refiner_blocks.@.ff.net.2.", "txt_in.individual_token_refiner.blocks.@.mlp.fc2."},
    {"context_embedder.token_refiner.refiner_blocks.@.norm_out.linear.", "txt_in.individual_token_refiner.blocks.@.adaLN_modulation.1."},
    {"transformer_blocks.@.norm1.linear.", "double_blocks.@.img_mod.linear."},
    {"transformer_blocks.@.norm1_context.linear.", "double_blocks.@.txt_mod.linear."},
    {"transformer_blocks.@.attn.to_q.", "double_blocks.@.img_attn_q."},
    {"transformer_blocks.@.attn.to_k.", "double_blocks.@.img_attn_k."},
    {"transformer_blocks.@.attn.to_v.", "double_blocks.@.img_attn_v."},
    {"transformer_blocks.@.attn.norm_q.", "double_blocks.@.img_attn_q_norm."},
    {"transformer_blocks.@.attn.norm_k.", "double_blocks.@.img_attn_k_norm."},
    {"transformer_blocks.@.attn.to_out.0.", "double_blocks.@.img_attn_proj."},
    {"transformer_blocks.@.attn.add_q_proj.", "double_blocks.@.txt_attn_q."},
    {"transformer_blocks.@.attn.add_k_proj.", "double_blocks.@.txt_attn_k."},
    {"transformer_blocks.@.attn.add_v_proj.", "double_blocks.@.txt_attn_v."},
    {"transformer_blocks.@.attn.norm_added_q.", "double_blocks.@.txt_attn_q_norm."},
    {"transformer_blocks.@.attn.norm_added_k.", "double_blocks.@.txt_attn_k_norm."},
    {"transformer_blocks.@.attn.to_add_out.", "double_blocks.@.txt_attn_proj."},
    {"transformer_blocks.@.ff.net.0.proj.", "double_blocks.@.img_mlp.fc1."},
    {"transformer_blocks.@.ff.net.2.", "double_blocks.@.img_mlp.fc2."},
    {"transformer_blocks.@.ff_context.net.0.proj.", "double_blocks.@.txt_mlp.fc1."},
    {"transformer_blocks.@.ff_context.net.2.", "double_blocks.@.txt_mlp.fc2."},
};

/* The original name of diffusers' `name` (the block index put where '@' is), or 0. */
static int to_orig(const char *name, char *out, size_t n) {
    for (size_t r = 0; r < sizeof TO_ORIG / sizeof TO_ORIG[0]; r++) {
        const char *pat = TO_ORIG[r][0], *at = strchr(pat, '@');
        if (!at) {
            if (strncmp(name, pat, strlen(pat))) continue;
            snprintf(out, n, "%s%s", TO_ORIG[r][1], name + strlen(pat));
            return 1;
        }
        int i, used = 0;
        if (strncmp(name, pat, (size_t)(at - pat)) || sscanf(name + (at - pat), "%d%n", &i, &used) != 1) continue;
        const char *rest = name + (at - pat) + used;
        if (strncmp(rest, at + 1, strlen(at + 1))) continue;
        const char *o = TO_ORIG[r][1], *oat = strchr(o, '@');
        snprintf(out, n, "%.*s%d%s%s", (int)(oat - o), o, i, oat + 1, rest + strlen(at + 1));
        return 1;
    }
    return 0;
}

/* The diffusers file written with the original names (prefix before each); `bad_qkv`: refiner
 * block 0's fused qkv one row short. */
static void write_original(const char *dst, const char *prefix, int bad_qkv) {
    cvx_weights *w = cvx_weights_open(MODEL "diffusion_pytorch_model.safetensors");
    ASSERT_NONNULL(w);
    cvx_st_writer *st = cvx_stw_new();
    char key[256], orig[256];
    for (int i = 0; i < cvx_weights_count(w); i++) {
        const cvx_tensor *t = cvx_weights_at(w, i);
        int blk;
        char kind[16];
        assert_int_equal(t->dtype, CVX_F32);
        if (sscanf(t->name, "context_embedder.token_refiner.refiner_blocks.%d.attn.to_%1[qkv].%15s", &blk, kind + 8,
                   kind) == 3) {
            if (kind[8] != 'q') continue;   /* q, k and v fused at q */
            const int is_bias = !strcmp(kind, "bias");
            const cvx_tensor *parts[3];
            for (int j = 0; j < 3; j++) {
                snprintf(key, sizeof key, "context_embedder.token_refiner.refiner_blocks.%d.attn.to_%c.%s", blk,
                         "qkv"[j], kind);
                ASSERT_NONNULL(parts[j] = cvx_weights_find(w, key));
            }
            int64_t shape[2] = {3 * t->shape[0] - (bad_qkv && blk == 0), t->ndim > 1 ? t->shape[1] : 0};
            char *d = cvx_malloc(3 * t->nbytes);
            for (int j = 0; j < 3; j++) memcpy(d + j * t->nbytes, parts[j]->data, t->nbytes);
            snprintf(key, sizeof key, "%stxt_in.individual_token_refiner.blocks.%d.self_attn_qkv.%s", prefix, blk,
                     is_bias ? "bias" : "weight");
            ASSERT_OK(cvx_stw_add(st, key, CVX_F32, t->ndim, shape, d));
            free(d);
            continue;
        }
        if (!to_orig(t->name, orig, sizeof orig)) fail_msg("no original name for %s", t->name);
        snprintf(key, sizeof key, "%s%s", prefix, orig);
        if (!strncmp(t->name, "norm_out.linear.", 16)) {   /* (scale, shift) -> (shift, scale) */
            char *d = cvx_malloc(t->nbytes);
            memcpy(d, (const char *)t->data + t->nbytes / 2, t->nbytes / 2);
            memcpy(d + t->nbytes / 2, t->data, t->nbytes / 2);
            ASSERT_OK(cvx_stw_add(st, key, CVX_F32, t->ndim, t->shape, d));
            free(d);
        } else {
            ASSERT_OK(cvx_stw_add(st, key, CVX_F32, t->ndim, t->shape, t->data));
        }
    }
    ASSERT_OK(cvx_stw_write(st, dst));
    cvx_stw_free(st);
    cvx_weights_close(w);
}

typedef struct {
    gh_case c;
    float *x, *text, *mask, *text2, *mask2, *image, *t;
    hv15_cond cond;
    int B, F, H, W;
    size_t n_out;
} inputs;

static void inputs_open(inputs *in) {
    memset(in, 0, sizeof *in);
    gh_open(&in->c, CASE);
    const cvx_tensor *hs = gh_tensor(&in->c, "hidden_states"), *eh = gh_tensor(&in->c, "encoder_hidden_states");
    const cvx_tensor *eh2 = gh_tensor(&in->c, "encoder_hidden_states_2"), *im = gh_tensor(&in->c, "image_embeds");
    in->B = (int)hs->shape[0], in->F = (int)hs->shape[2], in->H = (int)hs->shape[3], in->W = (int)hs->shape[4];
    in->x = cvx_tensor_f32_dup(hs);
    in->text = cvx_tensor_f32_dup(eh);
    in->mask = gh_f32(&in->c, NULL, "encoder_attention_mask");
    in->text2 = cvx_tensor_f32_dup(eh2);
    in->mask2 = gh_f32(&in->c, NULL, "encoder_attention_mask_2");
    in->image = cvx_tensor_f32_dup(im);
    in->t = gh_f32(&in->c, NULL, "timestep");
    in->cond = (hv15_cond){.text = in->text, .text_mask = in->mask, .L = (int)eh->shape[1], .text2 = in->text2,
                           .text2_mask = in->mask2, .L2 = (int)eh2->shape[1], .image = in->image,
                           .L_img = (int)im->shape[1], .timestep = in->t};
    in->n_out = (size_t)in->B * 8 * in->F * in->H * in->W;   /* out_channels 8 */
}

static void inputs_close(inputs *in) {
    free(in->x); free(in->text); free(in->mask); free(in->text2); free(in->mask2); free(in->image); free(in->t);
    gh_close(&in->c);
}

/* hv15_load_file(config, weights) and its forward; the output is allocated. */
static float *forward_of(inputs *in, const char *weights) {
    hv15_transformer *m = hv15_load_file(MODEL "config.json", weights, NULL);
    ASSERT_NONNULL(m);
    assert_int_equal(hv15_get_config(m)->out_channels, 8);
    float *out = cvx_alloc_f32(in->n_out);
    ASSERT_OK(hv15_forward(m, in->x, in->B, in->F, in->H, in->W, &in->cond, out));
    hv15_free(m);
    return out;
}

static void test_original_names(void **state) {
    (void)state;
    char dir[64], plain[128], comfy[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(plain, sizeof plain, "%s/hunyuanvideo1.5_tiny_t2v.safetensors", dir);
    snprintf(comfy, sizeof comfy, "%s/comfy_prefixed.safetensors", dir);
    write_original(plain, "", 0);
    write_original(comfy, PREFIX, 0);
    inputs in;
    inputs_open(&in);
    float *ref = forward_of(&in, MODEL);
    float *want = gh_f32(&in.c, NULL, "output");
    gh_check_rel_l2(&in.c, "output (diffusers layout)", ref, want, in.n_out, 1e-5);
    float *a = forward_of(&in, plain), *b = forward_of(&in, comfy);
    gh_check_exact_f32(&in.c, "original names = diffusers layout", a, ref, in.n_out);
    gh_check_exact_f32(&in.c, "ComfyUI prefix = diffusers layout", b, ref, in.n_out);
    free(a); free(b); free(ref); free(want);
    inputs_close(&in);
    tu_rmrf(dir);
}

static const cvx_tensor *gguf_tensor(const cvx_weights *w, const char *name) {
    for (int i = 0; i < cvx_weights_count(w); i++)
        if (!strcmp(cvx_weights_at(w, i)->name, name)) return cvx_weights_at(w, i);
    fail_msg("%s: no tensor %s", cvx_weights_path(w), name);
    return NULL;
}

static void test_gguf(void **state) {
    (void)state;
    char dir[64], orig[128], g_diff[128], g_orig[128], deq[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(orig, sizeof orig, "%s/orig.safetensors", dir);
    snprintf(g_diff, sizeof g_diff, "%s/hv15-diffusers-Q8_0.gguf", dir);
    snprintf(g_orig, sizeof g_orig, "%s/hv15-Q8_0.gguf", dir);
    snprintf(deq, sizeof deq, "%s/dequantized.safetensors", dir);
    write_original(orig, "", 0);
    wh_quantize_q8_0(MODEL "diffusion_pytorch_model.safetensors", g_diff, &hv15_gguf_rules);
    wh_quantize_q8_0(orig, g_orig, &hv15_gguf_rules);

    /* the rules: the refiner / embedders / output layer kept (F16 base), the blocks' matrices Q8_0 */
    cvx_weights *gd = cvx_weights_open(g_diff), *go = cvx_weights_open(g_orig);
    ASSERT_NONNULL(gd);
    ASSERT_NONNULL(go);
    assert_string_equal(cvx_gguf_get_str(cvx_weights_gguf(go), "general.architecture"), "hyvid");
    static const char *const pairs[][3] = {
        /* diffusers name, original name, dtype in both */
        {"transformer_blocks.0.ff.net.0.proj.weight", "double_blocks.0.img_mlp.fc1.weight", "Q8_0"},
        {"transformer_blocks.1.norm1.linear.weight", "double_blocks.1.img_mod.linear.weight", "Q8_0"},
        {"context_embedder.token_refiner.refiner_blocks.0.ff.net.0.proj.weight",
         "txt_in.individual_token_refiner.blocks.0.mlp.fc1.weight", "F16"},
        {"time_embed.timestep_embedder.linear_1.weight", "time_in.mlp.0.weight", "F16"},
        {"context_embedder.time_text_embed.timestep_embedder.linear_1.weight", "txt_in.t_embedder.mlp.0.weight", "F16"},
        {"x_embedder.proj.weight", "img_in.proj.weight", "F32"},   /* 5-D: F32 (fix_5d_tensors) */
        {"transformer_blocks.0.attn.norm_q.weight", "double_blocks.0.img_attn_q_norm.weight", "F32"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        assert_string_equal(cvx_dtype_name(gguf_tensor(gd, pairs[i][0])->dtype), pairs[i][2]);
        assert_string_equal(cvx_dtype_name(gguf_tensor(go, pairs[i][1])->dtype), pairs[i][2]);
    }
    cvx_weights_close(gd);
    cvx_weights_close(go);

    inputs in;
    inputs_open(&in);
    float *f32 = forward_of(&in, MODEL), *qd = forward_of(&in, g_diff), *qo = forward_of(&in, g_orig);
    /* each GGUF = the f32 forward over its own dequantized weights (the original-named one read
     * through the name table); the two differ only where the tiny model's q/k/v (1,024 values)
     * stay F32 unfused while the fused qkv is large enough to be F16 */
    wh_write_dequantized(g_diff, deq);
    float *ref = forward_of(&in, deq);
    gh_check_rel_l2(&in.c, "Q8_0 (diffusers names) vs f32 over its dequantized weights", qd, ref, in.n_out, 1e-5);
    free(ref);
    wh_write_dequantized(g_orig, deq);
    ref = forward_of(&in, deq);
    gh_check_rel_l2(&in.c, "Q8_0 (original names) vs f32 over its dequantized weights", qo, ref, in.n_out, 1e-5);
    const double d = cvx_rel_l2(qd, f32, in.n_out), d2 = cvx_rel_l2(qo, f32, in.n_out);
    print_message("  Q8_0 vs the f32 model: rel L2 %.3g (diffusers names), %.3g (original names)\n", d, d2);
    assert_true(d > 0 && d < 2e-2 && d2 > 0 && d2 < 2e-2);
    free(f32); free(qd); free(qo); free(ref);
    inputs_close(&in);
    tu_rmrf(dir);
}

/* hv15_load_file(weights) fails with one line holding every `want` piece. */
static void expect_error(const char *weights, const char *const *want) {
    hv15_transformer *m = hv15_load_file(MODEL "config.json", weights, NULL);
    if (m) fail_msg("%s loaded", weights);
    const char *e = cvx_last_error();
    print_message("  %s\n", e);
    assert_null(strchr(e, '\n'));
    for (; *want; want++)
        if (!strstr(e, *want)) fail_msg("error '%s' lacks '%s'", e, *want);
}

static void test_bad_inputs(void **state) {
    (void)state;
    char dir[64], p[160], q[160];
    tu_mkdtemp(dir, sizeof dir);

    /* truncated single file */
    snprintf(p, sizeof p, "%s/orig.safetensors", dir);
    write_original(p, PREFIX, 0);
    size_t n;
    char *bytes = cvx_read_file(p, &n);
    ASSERT_NONNULL(bytes);
    snprintf(q, sizeof q, "%s/truncated.safetensors", dir);
    tu_write(q, bytes, n - 4096);
    free(bytes);
    expect_error(q, (const char *const[]){"truncated.safetensors", NULL});

    /* another family's transformer */
    expect_error("tests/data/golden_ltx/transformer_2b/model/transformer",
                 (const char *const[]){"not a HunyuanVideo-1.5 transformer", "img_in.proj.weight", NULL});

    /* HunyuanVideo 1.0 names: img_in without byt5_in */
    cvx_st_writer *st = cvx_stw_new();
    const float z[4] = {0};
    ASSERT_OK(cvx_stw_add(st, "img_in.proj.weight", CVX_F32, 2, (const int64_t[]){2, 2}, z));
    snprintf(q, sizeof q, "%s/hunyuan_video_1_0.safetensors", dir);
    ASSERT_OK(cvx_stw_write(st, q));
    cvx_stw_free(st);
    expect_error(q, (const char *const[]){"HunyuanVideo 1.0", "byt5_in.fc1.weight", NULL});

    /* a fused qkv that is not 3 · hidden */
    snprintf(q, sizeof q, "%s/bad_qkv.safetensors", dir);
    write_original(q, "", 1);
    expect_error(q, (const char *const[]){"self_attn_qkv.weight", "3 · hidden", NULL});

    /* a GGUF whose tensor does not fit the config: named both ways */
    float *wide = cvx_calloc(32 * 64, sizeof *wide);
    tu_st_copy_edit(p, q, PREFIX "double_blocks.0.img_attn_q.weight", PREFIX "double_blocks.0.img_attn_q.weight",
                    CVX_F32, 2, (const int64_t[]){32, 64}, wide);
    free(wide);
    snprintf(p, sizeof p, "%s/bad_shape.gguf", dir);
    wh_quantize_q8_0(q, p, &hv15_gguf_rules);
    expect_error(p, (const char *const[]){"bad_shape.gguf", "transformer_blocks.0.attn.to_q.weight",
                                          "double_blocks.0.img_attn_q.weight", "[32, 64]", NULL});
    tu_rmrf(dir);
}


/* ------------------------------------------------------------------ the programs */

#define TINY "models/hunyuanvideo15-tiny-random"
#define PROMPT "'A sign that says \"OPEN\" on a door' --negative_prompt 'blurry'"
#define FLAGS "--num_inference_steps 2 --frames 5 --height 32 --width 48 --seed 3"

/* The original VAE name of diffusers' `name` (convert_hunyuan_video_15_vae_checkpoint_to_diffusers
 * read backwards). */
static void vae_orig(const char *name, char *out, size_t n) {
    static const char *const mid[][2] = {
        {"mid_block.resnets.0.", "mid.block_1."}, {"mid_block.resnets.1.", "mid.block_2."},
        {"mid_block.attentions.0.norm.", "mid.attn_1.norm."}, {"mid_block.attentions.0.to_q.", "mid.attn_1.q."},
        {"mid_block.attentions.0.to_k.", "mid.attn_1.k."}, {"mid_block.attentions.0.to_v.", "mid.attn_1.v."},
        {"mid_block.attentions.0.proj_out.", "mid.attn_1.proj_out."}};
    char side[8], kind[8], rest[200];
    int i, r;
    if (sscanf(name, "%7[a-z].%7[a-z]_blocks.%d.resnets.%d.%199s", side, kind, &i, &r, rest) == 5) {
        snprintf(out, n, "%s.%s.%d.block.%d.%s", side, kind, i, r, rest);
        return;
    }
    if (sscanf(name, "%7[a-z].%7[a-z]_blocks.%d.%*[a-z]samplers.0.%199s", side, kind, &i, rest) == 4) {
        snprintf(out, n, "%s.%s.%d.%ssample.%s", side, kind, i, kind, rest);
        return;
    }
    for (size_t k = 0; k < sizeof mid / sizeof mid[0]; k++) {
        const char *at = strstr(name, mid[k][0]);
        if (at) {
            snprintf(out, n, "%.*s%s%s", (int)(at - name), name, mid[k][1], at + strlen(mid[k][0]));
            return;
        }
    }
    snprintf(out, n, "%s", name);
}

/* src's tensors renamed (vae: vae_orig; else `prefix` put before each name) into dst, plus one
 * extra tensor `extra` (NULL: none). */
static void copy_renamed(const char *src, const char *dst, int vae, const char *prefix, const char *extra) {
    cvx_weights *w = cvx_weights_open(src);
    ASSERT_NONNULL(w);
    cvx_st_writer *st = cvx_stw_new();
    char key[256];
    for (int i = 0; i < cvx_weights_count(w); i++) {
        const cvx_tensor *t = cvx_weights_at(w, i);
        if (vae) vae_orig(t->name, key, sizeof key);
        else snprintf(key, sizeof key, "%s%s", prefix, t->name);
        ASSERT_OK(cvx_stw_add(st, key, t->dtype, t->ndim, t->shape, t->data));
    }
    const float one = 1;
    if (extra) ASSERT_OK(cvx_stw_add(st, extra, CVX_F32, 1, (const int64_t[]){1}, &one));
    ASSERT_OK(cvx_stw_write(st, dst));
    cvx_stw_free(st);
    cvx_weights_close(w);
}

static void test_programs(void **state) {
    (void)state;
    char dir[64], a[128], b[128], qwen[160], byt5[160], tr[160], vae[160], cmd[4000], s1[256], s2[256], s3[256], p[300],
        q[300];
    tu_program(s1, sizeof s1, "stage1");
    tu_program(s2, sizeof s2, "stage2");
    tu_program(s3, sizeof s3, "stage3");
    tu_mkdtemp(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/dir_run", dir);
    snprintf(b, sizeof b, "%s/comfy_run", dir);
    snprintf(qwen, sizeof qwen, "%s/qwen_2.5_vl_7b.safetensors", dir);
    snprintf(byt5, sizeof byt5, "%s/byt5_small_glyphxl_fp16.safetensors", dir);
    snprintf(tr, sizeof tr, "%s/hunyuanvideo1.5_720p_t2v_fp16.safetensors", dir);
    snprintf(vae, sizeof vae, "%s/hunyuanvideo15_vae_fp16.safetensors", dir);
    copy_renamed(TINY "/text_encoder/model.safetensors", qwen, 0, "model.", NULL);
    copy_renamed(TINY "/text_encoder_2/model.safetensors", byt5, 0, "", NULL);
    write_original(tr, PREFIX, 0);
    copy_renamed(TINY "/vae/diffusion_pytorch_model.safetensors", vae, 1, "", NULL);
    char flags1[400], flags2[200], flags3[200];
    snprintf(flags1, sizeof flags1, "--text_encoder %s --text_encoder_2 %s", qwen, byt5);
    snprintf(flags2, sizeof flags2, "--transformer %s", tr);
    snprintf(flags3, sizeof flags3, "--vae %s", vae);
    for (int k = 0; k < 2; k++) {
        const char *out = k ? b : a;
        snprintf(cmd, sizeof cmd, "%s --quiet --prompt " PROMPT " --model_dir " TINY " --output_dir %s %s && "
                 "%s --quiet --input_dir %s " FLAGS " %s && "
                 "%s --quiet --input_dir %s --output_video %s/v.mp4 --output_frames %s/frames.safetensors %s",
                 s1, out, k ? flags1 : "", s2, out, k ? flags2 : "", s3, out, out, out, k ? flags3 : "");
        tu_run_ok(cmd);
    }
    static const char *const outs[] = {"stage1_embeddings.safetensors", "stage2_latents.safetensors",
                                       "frames.safetensors"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", a, outs[i]);
        snprintf(q, sizeof q, "%s/%s", b, outs[i]);
        wh_same_tensors(p, q);
    }

    /* --quantize from ComfyUI's file (city96-compatible names), then that GGUF as --transformer */
    char gguf[160];
    snprintf(gguf, sizeof gguf, "%s/hunyuanvideo1.5-Q8_0.gguf", dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --model_dir " TINY " --transformer %s --quantize Q8_0 --transformer_out %s", s2,
             tr, gguf);
    tu_run_ok(cmd);
    cvx_weights *g = cvx_weights_open(gguf);
    ASSERT_NONNULL(g);
    assert_string_equal(cvx_gguf_get_str(cvx_weights_gguf(g), "general.architecture"), "hyvid");
    assert_string_equal(cvx_dtype_name(gguf_tensor(g, "double_blocks.0.img_mlp.fc1.weight")->dtype), "Q8_0");
    cvx_weights_close(g);
    snprintf(cmd, sizeof cmd, "mkdir -p %2$s/q && cp %1$s/stage1_embeddings.safetensors %1$s/generation_config.json %2$s/q/ "
             "&& %3$s --quiet --input_dir %2$s/q " FLAGS " --transformer %4$s", a, dir, s2, gguf);
    tu_run_ok(cmd);
    snprintf(p, sizeof p, "%s/stage2_latents.safetensors", a);
    snprintf(q, sizeof q, "%s/q/stage2_latents.safetensors", dir);
    cvx_safetensors *za = tu_open(p), *zq = tu_open(q);
    const cvx_tensor *ta = cvx_st_find(za, "latents"), *tq = cvx_st_find(zq, "latents");
    ASSERT_NONNULL(ta);
    ASSERT_NONNULL(tq);
    float *fa = cvx_tensor_f32_dup(ta), *fq = cvx_tensor_f32_dup(tq);
    const double dq = cvx_rel_l2(fq, fa, (size_t)ta->numel);
    print_message("  Q8_0 GGUF (from the ComfyUI file) latents vs f32: rel L2 %.3g\n", dq);
    assert_true(dq > 0 && dq < 5e-2);
    free(fa), free(fq);
    cvx_st_close(za), cvx_st_close(zq);

    /* bad text-encoder files: one line, nothing written */
    char err[4096], bad[160], out[160];
    snprintf(bad, sizeof bad, "%s/qwen_2.5_vl_7b_fp8_scaled.safetensors", dir);
    copy_renamed(TINY "/text_encoder/model.safetensors", bad, 0, "model.", "model.layers.0.mlp.down_proj.scale_weight");
    snprintf(out, sizeof out, "%s/bad_run", dir);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir " TINY " --output_dir %s --text_encoder %s", s1, out, bad);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  %s", err);
    assert_non_null(strstr(err, "scaled fp8"));
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    size_t n;
    char *bytes = cvx_read_file(byt5, &n);
    ASSERT_NONNULL(bytes);
    snprintf(bad, sizeof bad, "%s/byt5_truncated.safetensors", dir);
    tu_write(bad, bytes, n - 100);
    free(bytes);
    snprintf(cmd, sizeof cmd, "%s --quiet --prompt x --model_dir " TINY " --output_dir %s --text_encoder_2 %s", s1, out,
             bad);
    assert_int_not_equal(tu_run(cmd, err, sizeof err), 0);
    print_message("  %s", err);
    assert_non_null(strstr(err, "byt5_truncated.safetensors"));
    assert_int_equal(tu_count_substr(err, "\n"), 1);
    snprintf(p, sizeof p, "%s/stage1_embeddings.safetensors", out);
    assert_false(cvx_is_file(p));
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_original_names),
        cmocka_unit_test(test_gguf),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_programs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
