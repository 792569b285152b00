/* Random transformers at real dimensions for the benchmarks (header-only: each bench program is
 * its own program): a diffusers `transformer/` directory (config.json + one safetensors file) with a
 * few layers of random weights at PyTorch-like init scales, written in `store` dtype and then
 * mmapped by the loaders as a real checkpoint is.
 *
 *   bm_write_cogvideox(dir, heads, layers, rope, store)   CogVideoX-2b (30 heads) / -5b (48, RoPE)
 *   bm_write_wan(dir, heads, layers, ffn_dim, store)      Wan 2.1 T2V (1.3B: 12 heads, ffn 8960)
 *   bm_write_wan_ch(dir, heads, layers, ffn_dim, C, store) the same with C latent channels (TI2V-5B: 48)
 *   bm_urand()                                            the shared xorshift64* in [-1, 1)
 *   bm_rm_dir(dir)                                        remove the files and the directory */
#ifndef CVX_BENCH_MODELS_H
#define CVX_BENCH_MODELS_H

#include "error.h"
#include "safetensors.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static uint64_t bm_rng_state = 0x9E3779B97F4A7C15ull;
static inline float bm_urand(void) {   /* xorshift64*, uniform in [-1, 1) */
    bm_rng_state ^= bm_rng_state >> 12; bm_rng_state ^= bm_rng_state << 25; bm_rng_state ^= bm_rng_state >> 27;
    return (float)((bm_rng_state * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1 << 23) - 1.0f;
}

static inline void bm_add_random(cvx_st_writer *w, cvx_dtype store, const char *name, int ndim, const int64_t *shape,
                                 float scale, float offset) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *d = malloc(sizeof(float) * n);
    if (!d) cvx_die("out of memory");
    for (size_t i = 0; i < n; i++) d[i] = offset + scale * bm_urand();
    if (cvx_stw_add_f32(w, name, store, ndim, shape, d)) cvx_die_last_error();
    free(d);
}
#define BM_ADD(name, scale, offset, ...) \
    bm_add_random(w, store, name, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__}, \
                  scale, offset)

/* The self- and cross-attention of a DiT block: `prefix`.to_q / to_k / to_v / to_out.0 .weight
 * [D, D] (scale 1/sqrt(D)) and .bias [D], then norm_q / norm_k .weight [D] (around 1). */
static inline void bm_add_attention(cvx_st_writer *w, cvx_dtype store, const char *prefix, int64_t D) {
    static const char *const proj[] = {"to_q", "to_k", "to_v", "to_out.0"};
    const float sD = 1.0f / sqrtf((float)D);
    char name[300];   /* prefix (< 256) + suffix */
    for (int k = 0; k < 4; k++) {
        snprintf(name, sizeof name, "%s.%s.weight", prefix, proj[k]);
        BM_ADD(name, sD, 0, D, D);
        snprintf(name, sizeof name, "%s.%s.bias", prefix, proj[k]);
        BM_ADD(name, 0.1f, 0, D);
    }
    snprintf(name, sizeof name, "%s.norm_q.weight", prefix);
    BM_ADD(name, 0.1f, 1, D);
    snprintf(name, sizeof name, "%s.norm_k.weight", prefix);
    BM_ADD(name, 0.1f, 1, D);
}

static inline FILE *bm_open_config(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) cvx_die("cannot write %s", path);
    return f;
}

static inline void bm_write_weights(const char *dir, cvx_st_writer *w) {
    char path[1024];
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    if (cvx_stw_write(w, path)) cvx_die_last_error();
    cvx_stw_free(w);
}

/* CogVideoXTransformer3DModel with `layers` random layers, head dim 64, text 4096, time 512. */
static inline void bm_write_cogvideox(const char *dir, int heads, int layers, int rope, cvx_dtype store) {
    int64_t D = (int64_t)heads * 64, E = 512, T = 4096, C = 16, p = 2, hd = 64;
    char name[256];
    FILE *f = bm_open_config(dir);
    fprintf(f,
            "{\"_class_name\": \"CogVideoXTransformer3DModel\", \"num_attention_heads\": %d, \"attention_head_dim\": 64,"
            " \"num_layers\": %d, \"in_channels\": 16, \"out_channels\": 16, \"text_embed_dim\": 4096,"
            " \"time_embed_dim\": 512, \"patch_size\": 2, \"sample_height\": 60, \"sample_width\": 90,"
            " \"sample_frames\": 49, \"use_rotary_positional_embeddings\": %s}\n",
            heads, layers, rope ? "true" : "false");
    fclose(f);
    cvx_st_writer *w = cvx_stw_new();
    float sD = 1.0f / sqrtf((float)D), sE = 1.0f / sqrtf((float)E);
    BM_ADD("patch_embed.proj.weight", 1.0f / sqrtf((float)(C * p * p)), 0, D, C, p, p);
    BM_ADD("patch_embed.proj.bias", 0.1f, 0, D);
    BM_ADD("patch_embed.text_proj.weight", 1.0f / sqrtf((float)T), 0, D, T);
    BM_ADD("patch_embed.text_proj.bias", 0.1f, 0, D);
    BM_ADD("time_embedding.linear_1.weight", sD, 0, E, D);
    BM_ADD("time_embedding.linear_1.bias", 0.1f, 0, E);
    BM_ADD("time_embedding.linear_2.weight", sE, 0, E, E);
    BM_ADD("time_embedding.linear_2.bias", 0.1f, 0, E);
    for (int i = 0; i < layers; i++) {
#define N_(s) (snprintf(name, sizeof name, "transformer_blocks.%d.%s", i, s), name)
        BM_ADD(N_("norm1.linear.weight"), sE, 0, 6 * D, E);
        BM_ADD(N_("norm1.linear.bias"), 0.1f, 0, 6 * D);
        BM_ADD(N_("norm1.norm.weight"), 0.1f, 1, D);
        BM_ADD(N_("norm1.norm.bias"), 0.1f, 0, D);
        BM_ADD(N_("norm2.linear.weight"), sE, 0, 6 * D, E);
        BM_ADD(N_("norm2.linear.bias"), 0.1f, 0, 6 * D);
        BM_ADD(N_("norm2.norm.weight"), 0.1f, 1, D);
        BM_ADD(N_("norm2.norm.bias"), 0.1f, 0, D);
        const char *proj[] = {"attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0"};
        for (int k = 0; k < 4; k++) {
            char nm[128];
            snprintf(nm, sizeof nm, "%s.weight", proj[k]);
            BM_ADD(N_(nm), sD, 0, D, D);
            snprintf(nm, sizeof nm, "%s.bias", proj[k]);
            BM_ADD(N_(nm), 0.1f, 0, D);
        }
        BM_ADD(N_("attn1.norm_q.weight"), 0.1f, 1, hd);
        BM_ADD(N_("attn1.norm_q.bias"), 0.1f, 0, hd);
        BM_ADD(N_("attn1.norm_k.weight"), 0.1f, 1, hd);
        BM_ADD(N_("attn1.norm_k.bias"), 0.1f, 0, hd);
        BM_ADD(N_("ff.net.0.proj.weight"), sD, 0, 4 * D, D);
        BM_ADD(N_("ff.net.0.proj.bias"), 0.1f, 0, 4 * D);
        BM_ADD(N_("ff.net.2.weight"), 0.5f * sD, 0, D, 4 * D);
        BM_ADD(N_("ff.net.2.bias"), 0.1f, 0, D);
#undef N_
    }
    BM_ADD("norm_final.weight", 0.1f, 1, D);
    BM_ADD("norm_final.bias", 0.1f, 0, D);
    BM_ADD("norm_out.linear.weight", sE, 0, 2 * D, E);
    BM_ADD("norm_out.linear.bias", 0.1f, 0, 2 * D);
    BM_ADD("norm_out.norm.weight", 0.1f, 1, D);
    BM_ADD("norm_out.norm.bias", 0.1f, 0, D);
    BM_ADD("proj_out.weight", sD, 0, p * p * C, D);
    BM_ADD("proj_out.bias", 0.1f, 0, p * p * C);
    bm_write_weights(dir, w);
}

/* WanTransformer3DModel (text-to-video) with `layers` random layers, head dim 128, text 4096,
 * freq 256, patch [1, 2, 2], C latent channels in and out (Wan 2.1 / A14B 16, TI2V-5B 48). */
static inline void bm_write_wan_ch(const char *dir, int heads, int layers, int ffn, int channels, cvx_dtype store) {
    int64_t D = (int64_t)heads * 128, T = 4096, Fq = 256, C = channels, Fd = ffn;
    char name[256];
    FILE *f = bm_open_config(dir);
    fprintf(f,
            "{\"_class_name\": \"WanTransformer3DModel\", \"num_attention_heads\": %d, \"attention_head_dim\": 128,"
            " \"num_layers\": %d, \"in_channels\": %d, \"out_channels\": %d, \"text_dim\": 4096, \"freq_dim\": 256,"
            " \"ffn_dim\": %d, \"patch_size\": [1, 2, 2], \"cross_attn_norm\": true, \"eps\": 1e-06,"
            " \"qk_norm\": \"rms_norm_across_heads\", \"rope_max_seq_len\": 1024, \"image_dim\": null,"
            " \"added_kv_proj_dim\": null}\n",
            heads, layers, channels, channels, ffn);
    fclose(f);
    cvx_st_writer *w = cvx_stw_new();
    float sD = 1.0f / sqrtf((float)D), sF = 1.0f / sqrtf((float)Fd);
    BM_ADD("patch_embedding.weight", 1.0f / sqrtf((float)(C * 4)), 0, D, C, 1, 2, 2);
    BM_ADD("patch_embedding.bias", 0.1f, 0, D);
    BM_ADD("condition_embedder.time_embedder.linear_1.weight", 1.0f / sqrtf((float)Fq), 0, D, Fq);
    BM_ADD("condition_embedder.time_embedder.linear_1.bias", 0.1f, 0, D);
    BM_ADD("condition_embedder.time_embedder.linear_2.weight", sD, 0, D, D);
    BM_ADD("condition_embedder.time_embedder.linear_2.bias", 0.1f, 0, D);
    BM_ADD("condition_embedder.time_proj.weight", sD, 0, 6 * D, D);
    BM_ADD("condition_embedder.time_proj.bias", 0.1f, 0, 6 * D);
    BM_ADD("condition_embedder.text_embedder.linear_1.weight", 1.0f / sqrtf((float)T), 0, D, T);
    BM_ADD("condition_embedder.text_embedder.linear_1.bias", 0.1f, 0, D);
    BM_ADD("condition_embedder.text_embedder.linear_2.weight", sD, 0, D, D);
    BM_ADD("condition_embedder.text_embedder.linear_2.bias", 0.1f, 0, D);
    for (int i = 0; i < layers; i++) {
#define N_(s) (snprintf(name, sizeof name, "blocks.%d.%s", i, s), name)
        bm_add_attention(w, store, N_("attn1"), D);
        bm_add_attention(w, store, N_("attn2"), D);
        BM_ADD(N_("norm2.weight"), 0.1f, 1, D);
        BM_ADD(N_("norm2.bias"), 0.1f, 0, D);
        BM_ADD(N_("ffn.net.0.proj.weight"), sD, 0, Fd, D);
        BM_ADD(N_("ffn.net.0.proj.bias"), 0.1f, 0, Fd);
        BM_ADD(N_("ffn.net.2.weight"), 0.5f * sF, 0, D, Fd);
        BM_ADD(N_("ffn.net.2.bias"), 0.1f, 0, D);
        BM_ADD(N_("scale_shift_table"), 0.1f, 0, 1, 6, D);
#undef N_
    }
    BM_ADD("scale_shift_table", 0.1f, 0, 1, 2, D);
    BM_ADD("proj_out.weight", sD, 0, C * 4, D);
    BM_ADD("proj_out.bias", 0.1f, 0, C * 4);
    bm_write_weights(dir, w);
}
static inline void bm_write_wan(const char *dir, int heads, int layers, int ffn, cvx_dtype store) {
    bm_write_wan_ch(dir, heads, layers, ffn, 16, store);
}
#undef BM_ADD

static inline void bm_rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') { snprintf(p, sizeof p, "%s/%s", dir, e->d_name); unlink(p); }
    closedir(d);
    rmdir(dir);
}

#endif
