/* Wan 2.2 A14B at the real size for the peak-RSS measurement of stage 2 (docs/models.md "Wan 2.2"):
 * writes two random-weight Q8_0 GGUFs laid out as city96's Wan2.2-T2V-A14B-{HighNoise,LowNoise}-Q8_0
 * (arch "wan", original names; the linears of the blocks Q8_0, the embeddings / head F16, norms,
 * biases and modulations F32: WanTransformer3DModel 40 heads × 128, ffn 13824, text 4096, freq 256,
 * 16 latent channels), a model directory whose configs say so (the tiny A14B model's scheduler,
 * tokenizer, text encoder and VAE beside them) and stage-1 files with random 512 × 4096 embeddings.
 * Then run (bench/a14b_rss.sh does):
 *   /usr/bin/time -v bin/stage2 --input_dir OUT/run --model_dir OUT/model \
 *       --transformer OUT/high.gguf --transformer_2 OUT/low.gguf --num_inference_steps 2 ...
 *
 *   bench_a14b_rss OUT_DIR [LAYERS (default 40)]  */
#include "bench_models.h"
#include "error.h"
#include "fileio.h"
#include "gguf.h"
#include "quant.h"
#include "safetensors.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D 5120
#define FFN 13824
#define TEXT 4096
#define FREQ 256
#define C 16

typedef struct {
    cvx_dtype type;
    int64_t numel;
    float scale, offset;
} spec;

static spec specs[2048];
static int nspecs;

static void add(cvx_gguf_writer *w, const char *name, cvx_dtype type, float scale, float offset, int ndim,
                const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    if (cvx_ggufw_tensor(w, name, ndim, shape, type, NULL) < 0) cvx_die_last_error();
    specs[nspecs++] = (spec){type, n, scale, offset};
}
#define ADD(name, type, scale, offset, ...) \
    add(w, name, type, scale, offset, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__})

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static inline uint64_t next64(void) {
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}

/* Random data of one tensor: Q8_0 blocks of int8 in [-127, 127] with d = scale / 127; F16 / F32
 * offset + scale · U(-1, 1). */
static int fill(void *user, int index, void *dst, size_t nbytes) {
    (void)user;
    const spec *s = &specs[index];
    unsigned char *p = dst;
    if (s->type == CVX_Q8_0) {
        const uint16_t d = cvx_f32_to_f16(s->scale / 127.0f);
        for (size_t b = 0; b + 34 <= nbytes; b += 34) {
            memcpy(p + b, &d, 2);
            for (int k = 0; k < 32; k += 8) {
                uint64_t r = next64();
                for (int j = 0; j < 8; j++) {
                    int v = (int)((r >> (8 * j)) & 0xff) - 128;
                    p[b + 2 + k + j] = (unsigned char)(int8_t)(v < -127 ? -127 : v);
                }
            }
        }
    } else {
        for (int64_t i = 0; i < s->numel; i++) {
            float v = s->offset + s->scale * bm_urand();
            if (s->type == CVX_F16) ((uint16_t *)dst)[i] = cvx_f32_to_f16(v);
            else ((float *)dst)[i] = v;
        }
    }
    return 0;
}

static void write_expert(const char *path, int layers, uint64_t seed) {
    rng ^= seed;
    bm_rng_state ^= seed;
    nspecs = 0;
    cvx_gguf_writer *w = cvx_ggufw_new();
    if (cvx_ggufw_kv_str(w, "general.architecture", "wan") || cvx_ggufw_kv_u32(w, "general.file_type", 7))
        cvx_die_last_error();
    const float lin = 0.02f, bias = 0.01f;
    ADD("patch_embedding.weight", CVX_F16, lin, 0, D, C, 1, 2, 2);
    ADD("patch_embedding.bias", CVX_F32, bias, 0, D);
    ADD("text_embedding.0.weight", CVX_F16, lin, 0, D, TEXT);
    ADD("text_embedding.0.bias", CVX_F32, bias, 0, D);
    ADD("text_embedding.2.weight", CVX_F16, lin, 0, D, D);
    ADD("text_embedding.2.bias", CVX_F32, bias, 0, D);
    ADD("time_embedding.0.weight", CVX_F16, lin, 0, D, FREQ);
    ADD("time_embedding.0.bias", CVX_F32, bias, 0, D);
    ADD("time_embedding.2.weight", CVX_F16, lin, 0, D, D);
    ADD("time_embedding.2.bias", CVX_F32, bias, 0, D);
    ADD("time_projection.1.weight", CVX_F16, lin, 0, 6 * D, D);
    ADD("time_projection.1.bias", CVX_F32, bias, 0, 6 * D);
    char n[128];
    for (int l = 0; l < layers; l++) {
        static const char *const at[2] = {"self_attn", "cross_attn"};
        static const char *const pr[4] = {"q", "k", "v", "o"};
        for (int a = 0; a < 2; a++) {
            for (int k = 0; k < 4; k++) {
                snprintf(n, sizeof n, "blocks.%d.%s.%s.weight", l, at[a], pr[k]);
                ADD(n, CVX_Q8_0, lin, 0, D, D);
                snprintf(n, sizeof n, "blocks.%d.%s.%s.bias", l, at[a], pr[k]);
                ADD(n, CVX_F32, bias, 0, D);
            }
            snprintf(n, sizeof n, "blocks.%d.%s.norm_q.weight", l, at[a]);
            ADD(n, CVX_F32, 0.1f, 1, D);
            snprintf(n, sizeof n, "blocks.%d.%s.norm_k.weight", l, at[a]);
            ADD(n, CVX_F32, 0.1f, 1, D);
        }
        snprintf(n, sizeof n, "blocks.%d.norm3.weight", l);
        ADD(n, CVX_F32, 0.1f, 1, D);
        snprintf(n, sizeof n, "blocks.%d.norm3.bias", l);
        ADD(n, CVX_F32, bias, 0, D);
        snprintf(n, sizeof n, "blocks.%d.ffn.0.weight", l);
        ADD(n, CVX_Q8_0, lin, 0, FFN, D);
        snprintf(n, sizeof n, "blocks.%d.ffn.0.bias", l);
        ADD(n, CVX_F32, bias, 0, FFN);
        snprintf(n, sizeof n, "blocks.%d.ffn.2.weight", l);
        ADD(n, CVX_Q8_0, lin * 0.5f, 0, D, FFN);
        snprintf(n, sizeof n, "blocks.%d.ffn.2.bias", l);
        ADD(n, CVX_F32, bias, 0, D);
        snprintf(n, sizeof n, "blocks.%d.modulation", l);
        ADD(n, CVX_F32, 0.02f, 0, 1, 6, D);
    }
    ADD("head.modulation", CVX_F32, 0.02f, 0, 1, 2, D);
    ADD("head.head.weight", CVX_F16, lin, 0, C * 4, D);
    ADD("head.head.bias", CVX_F32, bias, 0, C * 4);
    if (cvx_ggufw_write(w, path, fill, NULL)) cvx_die_last_error();
    cvx_ggufw_free(w);
}

static void write_text(const char *path, const char *text) {
    if (cvx_write_file_atomic(path, text, strlen(text))) cvx_die_last_error();
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUT_DIR [LAYERS]\n", argv[0]);
        return 2;
    }
    const char *out = argv[1];
    const int layers = argc > 2 ? atoi(argv[2]) : 40;
    char path[PATH_MAX + 64], tiny[PATH_MAX], cmd[3 * PATH_MAX];
    if (layers < 1 || layers > 64) cvx_die("LAYERS must be in [1, 64]");
    if (!realpath("models/wan2.2-a14b-tiny-random", tiny)) cvx_die("run from the repository root (models/wan2.2-a14b-tiny-random)");
    snprintf(path, sizeof path, "%s/model/transformer_2", out);
    if (cvx_mkdirs(path)) cvx_die_last_error();
    snprintf(path, sizeof path, "%s/model/transformer", out);
    if (cvx_mkdirs(path)) cvx_die_last_error();
    snprintf(path, sizeof path, "%s/run", out);
    if (cvx_mkdirs(path)) cvx_die_last_error();
    snprintf(cmd, sizeof cmd, "cd %s/model && for c in scheduler text_encoder tokenizer vae; do ln -sfn %s/$c $c; done && "
             "cp %s/model_index.json .", out, tiny, tiny);
    if (system(cmd)) cvx_die("%s failed", cmd);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"_class_name\": \"WanTransformer3DModel\", \"added_kv_proj_dim\": null, \"attention_head_dim\": 128, "
             "\"cross_attn_norm\": true, \"eps\": 1e-06, \"ffn_dim\": %d, \"freq_dim\": %d, \"image_dim\": null, "
             "\"in_channels\": %d, \"num_attention_heads\": 40, \"num_layers\": %d, \"out_channels\": %d, "
             "\"patch_size\": [1, 2, 2], \"qk_norm\": \"rms_norm_across_heads\", \"rope_max_seq_len\": 1024, "
             "\"text_dim\": %d}\n", FFN, FREQ, C, layers, C, TEXT);
    snprintf(path, sizeof path, "%s/model/transformer/config.json", out);
    write_text(path, cfg);
    snprintf(path, sizeof path, "%s/model/transformer_2/config.json", out);
    write_text(path, cfg);
    /* stage 1's files: random prompt embeddings (rows past a 12-token prompt zero, as UMT5's are) */
    cvx_st_writer *st = cvx_stw_new();
    float *e = calloc((size_t)512 * TEXT, sizeof *e);
    const int64_t es[3] = {1, 512, TEXT};
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < (size_t)12 * TEXT; i++) e[i] = 0.1f * bm_urand();
        if (cvx_stw_add_f32(st, k ? "negative_prompt_embeds" : "prompt_embeds", CVX_F32, 3, es, e)) cvx_die_last_error();
    }
    free(e);
    cvx_stw_metadata(st, "prompt", "random embeddings (bench_a14b_rss)");
    cvx_stw_metadata(st, "negative_prompt", "");
    snprintf(path, sizeof path, "%s/model", out);
    cvx_stw_metadata(st, "model_id", path);
    cvx_stw_metadata(st, "dtype_info", "{\"prompt_embeds\": \"float32\", \"negative_prompt_embeds\": \"float32\"}");
    snprintf(path, sizeof path, "%s/run/stage1_embeddings.safetensors", out);
    if (cvx_stw_write(st, path)) cvx_die_last_error();
    cvx_stw_free(st);
    snprintf(path, sizeof path, "%s/run/generation_config.json", out);
    write_text(path, "{\"prompt\": \"random embeddings (bench_a14b_rss)\", \"negative_prompt\": \"\", \"mode\": \"t2v\"}\n");
    for (int x = 0; x < 2; x++) {
        snprintf(path, sizeof path, "%s/%s.gguf", out, x ? "low" : "high");
        const double t0 = cvx_time();
        write_expert(path, layers, x ? 0x1234567ull : 0x89abcdefull);
        fprintf(stderr, "wrote %s (%d layers) in %.0f s\n", path, layers, cvx_time() - t0);
    }
    return 0;
}
