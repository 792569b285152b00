/* LoRA adapters on the HunyuanVideo-1.5 transformer (the row's lora_targets) on
 * models/hunyuanvideo15-tiny-random: a small random rank-2 LoRA on three linears of different
 * kinds (a double-stream block's video to_q, another block's text-stream FF output, a token-refiner
 * block's attention output), written
 *   - with diffusers PEFT names (transformer.<module>.lora_A/B.weight), and
 *   - with ComfyUI's names (diffusion_model.double_blocks.N.img_attn_q / txt_mlp.fc2,
 *     txt_in.individual_token_refiner.blocks.N.self_attn_proj; lora_down/lora_up),
 * and checked: both name sets give the same bytes; the run equals a forward with the merged
 * weights W + w·B·A written into a copy of the checkpoint (relative L2 of the final latents
 * <= 1e-5; far from the bare run); --lora_fuse the same within 1e-5. */
#include "api_harness.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/cvx.h"
#include "safetensors.h"

#define MODEL "models/hunyuanvideo15-tiny-random"
#define R 2
#define WEIGHT 0.75

typedef struct {
    const char *diffusers, *comfy;   /* module names */
    int out, in;
    float *A, *B;                    /* [R, in], [out, R] */
} target;

static target targets[3] = {
    {"transformer_blocks.0.attn.to_q", "double_blocks.0.img_attn_q", 32, 32, NULL, NULL},
    {"transformer_blocks.1.ff_context.net.2", "double_blocks.1.txt_mlp.fc2", 32, 128, NULL, NULL},
    {"context_embedder.token_refiner.refiner_blocks.0.attn.to_out.0",
     "txt_in.individual_token_refiner.blocks.0.self_attn_proj", 32, 32, NULL, NULL},
};

static void make_factors(void) {
    unsigned s = 12345;
    for (int t = 0; t < 3; t++) {
        target *g = &targets[t];
        g->A = malloc(sizeof(float) * R * g->in);
        g->B = malloc(sizeof(float) * g->out * R);
        for (int i = 0; i < R * g->in; i++) g->A[i] = (float)((s = s * 1103515245u + 12345u) >> 8 & 0xffff) / 65536.0f - 0.5f;
        for (int i = 0; i < g->out * R; i++) g->B[i] = (float)((s = s * 1103515245u + 12345u) >> 8 & 0xffff) / 131072.0f - 0.25f;
    }
}

static void write_lora(const char *path, int comfy) {
    cvx_st_writer *w = cvx_stw_new();
    char na[256], nb[256];
    for (int t = 0; t < 3; t++) {
        target *g = &targets[t];
        const int64_t sa[2] = {R, g->in}, sb[2] = {g->out, R};
        if (comfy) {
            snprintf(na, sizeof na, "diffusion_model.%s.lora_down.weight", g->comfy);
            snprintf(nb, sizeof nb, "diffusion_model.%s.lora_up.weight", g->comfy);
        } else {
            snprintf(na, sizeof na, "transformer.%s.lora_A.weight", g->diffusers);
            snprintf(nb, sizeof nb, "transformer.%s.lora_B.weight", g->diffusers);
        }
        assert_int_equal(cvx_stw_add(w, na, CVX_F32, 2, sa, g->A), 0);
        assert_int_equal(cvx_stw_add(w, nb, CVX_F32, 2, sb, g->B), 0);
    }
    assert_int_equal(cvx_stw_write(w, path), 0);
    cvx_stw_free(w);
}

/* dir/ = the model's components linked, transformer/ a copy with W + WEIGHT·B·A */
static void write_merged(const char *dir) {
    char cmd[1024], path[512], root[512];
    if (!getcwd(root, sizeof root)) fail_msg("getcwd");
    snprintf(cmd, sizeof cmd, "for c in %s/" MODEL "/*; do ln -s $c %s/; done && rm %s/transformer && mkdir %s/transformer "
             "&& cp " MODEL "/transformer/config.json %s/transformer/", root, dir, dir, dir, dir);
    tu_run_ok(cmd);
    cvx_safetensors *st = tu_open(MODEL "/transformer/diffusion_pytorch_model.safetensors");
    cvx_st_writer *w = cvx_stw_new();
    const int n = cvx_st_count(st);
    float **bufs = calloc((size_t)n, sizeof *bufs);
    int merged = 0;
    for (int i = 0; i < n; i++) {
        const cvx_tensor *t = cvx_st_tensor(st, i);
        bufs[i] = cvx_tensor_f32_dup(t);
        for (int k = 0; k < 3; k++) {
            char wn[256];
            snprintf(wn, sizeof wn, "%s.weight", targets[k].diffusers);
            if (strcmp(t->name, wn)) continue;
            const target *g = &targets[k];
            assert_int_equal(t->shape[0], g->out);
            assert_int_equal(t->shape[1], g->in);
            for (int o = 0; o < g->out; o++)
                for (int c = 0; c < g->in; c++) {
                    double d = 0;
                    for (int r = 0; r < R; r++) d += (double)g->B[o * R + r] * g->A[r * g->in + c];
                    bufs[i][(size_t)o * g->in + c] += (float)(WEIGHT * d);
                }
            merged++;
        }
        assert_int_equal(cvx_stw_add_f32(w, t->name, CVX_F32, t->ndim, t->shape, bufs[i]), 0);
    }
    assert_int_equal(merged, 3);
    snprintf(path, sizeof path, "%s/transformer/diffusion_pytorch_model.safetensors", dir);
    assert_int_equal(cvx_stw_write(w, path), 0);
    cvx_stw_free(w);
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    cvx_st_close(st);
}

/* 2 steps of CFG on 5 frames 32×48 from the model's own stage 1; the final latents */
static float *run(const char *model, const char *lora, int fuse, size_t *numel) {
    const cvx_lora_spec spec = {lora, WEIGHT};
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = 2, .loras = lora ? &spec : NULL,
                                                      .n_loras = lora ? 1 : 0, .lora_fuse = fuse});
    if (!m) fail_msg("%s: %s", model, cvx_last_error());
    const char *texts[2] = {"blurry", "A lighthouse with the sign \"OPEN\" at dusk"};
    cvx_embeddings emb;
    cvx_cond_set more;
    if (cvx_encode(m, &(cvx_encode_params){.prompt = texts[1], .negative_prompt = texts[0]}, NULL, NULL, &emb) ||
        cvx_encode_texts_more(m, texts, NULL, 2, NULL, NULL, &more))
        fail_msg("%s", cvx_last_error());
    ah_cond_set_split(&more);
    cvx_sample_params sp = cvx_sample_default_params(m);
    sp.frames = 5, sp.height = 32, sp.width = 48, sp.num_inference_steps = 2, sp.seed = 9, sp.guidance_scale = 6;
    sp.cond_more = &more;
    cvx_latents lat;
    if (cvx_sample(m, &sp, &emb, NULL, NULL, &lat)) fail_msg("%s", cvx_last_error());
    *numel = (size_t)lat.C * lat.T * lat.h * lat.w;
    float *out = malloc(*numel * sizeof(float));
    memcpy(out, lat.data, *numel * sizeof(float));
    cvx_latents_free(&lat);
    cvx_embeddings_free(&emb);
    cvx_cond_set_free(&more);
    cvx_model_close(m);
    return out;
}

static void test_lora_names_and_merge(void **state) {
    (void)state;
    char dir[256], merged[300], pd[300], pc[300];
    tu_mkdtemp(dir, sizeof dir);
    make_factors();
    snprintf(pd, sizeof pd, "%s/lora_diffusers.safetensors", dir);
    snprintf(pc, sizeof pc, "%s/lora_comfy.safetensors", dir);
    write_lora(pd, 0);
    write_lora(pc, 1);
    snprintf(merged, sizeof merged, "%s/merged", dir);
    assert_int_equal(mkdir(merged, 0755), 0);
    write_merged(merged);
    size_t n, n2;
    float *bare = run(MODEL, NULL, 0, &n), *ld = run(MODEL, pd, 0, &n2), *lc = run(MODEL, pc, 0, &n2),
          *lf = run(MODEL, pd, 1, &n2), *mg = run(merged, NULL, 0, &n2);
    assert_memory_equal(ld, lc, n * sizeof(float));   /* the two name sets: the same adapters */
    const double e_merge = cvx_rel_l2(ld, mg, n), e_fuse = cvx_rel_l2(lf, mg, n), e_bare = cvx_rel_l2(bare, mg, n);
    print_message("  LoRA vs merged weights: rel L2 %.3g; --lora_fuse vs merged %.3g; bare vs merged %.3g\n", e_merge,
                  e_fuse, e_bare);
    assert_true(e_merge <= 1e-5);
    assert_true(e_fuse <= 1e-5);
    assert_true(e_bare > 1e-3);
    free(bare), free(ld), free(lc), free(lf), free(mg);
    for (int t = 0; t < 3; t++) free(targets[t].A), free(targets[t].B);
    tu_rmrf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lora_names_and_merge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
