/* CogVideoXTransformer3DModel (diffusers 0.32.2), f32 compute over mmapped weights.
 *
 * Layout: the residual stream of the whole CFG batch is one matrix h[B·S, D], S = L + N
 * (L text tokens first, then N video tokens, as upstream concatenates them), so every linear
 * layer is one GEMM over M = B·S rows. For long videos the attention part runs one batch
 * element at a time and norm1/to_out/feed-forward in row chunks: the activations are h plus
 * q, k, v of one element and a chunk (CogVideoX-5b at 49 frames 480×720: 0.44 + 0.71 GB, plus
 * cvx_linear's 0.15 GB widening scratch) next to the mmapped weights. */
#include "cogvideox.h"
#include "cogvideox_rope.h"
#include "config.h"
#include "dist.h"
#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "lora.h"
#include "ops.h"
#include "validate.h"
#include "safetensors.h"
#include "vecmath.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Up to this many rows (B·S) the attention runs on the whole batch at once and the FF in one
 * chunk; above it, one batch element at a time with row chunks (memory). */
enum { STACK_ROWS = 16384 };

typedef struct {
    const cvx_tensor *norm1_lin_w, *norm1_lin_b, *norm2_lin_w, *norm2_lin_b;
    const cvx_tensor *to_q_w, *to_q_b, *to_k_w, *to_k_b, *to_v_w, *to_v_b, *to_out_w, *to_out_b;
    const cvx_tensor *ff1_w, *ff1_b, *ff2_w, *ff2_b;
    float *norm1_w, *norm1_b, *norm2_w, *norm2_b;     /* [D] each, NULL without affine */
    float *norm_q_w, *norm_q_b, *norm_k_w, *norm_k_b; /* [head_dim] */
} cogvideox_layer;

struct cogvideox_transformer {
    cogvideox_config c;
    cvx_weights *w;
    cvx_tensor patch_proj_w;                       /* viewed as [D, C·p·p(·pt)] */
    const cvx_tensor *patch_proj_b, *text_proj_w, *text_proj_b;
    const cvx_tensor *time_lin1_w, *time_lin1_b, *time_lin2_w, *time_lin2_b;
    const cvx_tensor *ofs_lin1_w, *ofs_lin1_b, *ofs_lin2_w, *ofs_lin2_b;
    const cvx_tensor *pos_embedding;               /* learned [1, L + N_sample, D] or NULL */
    cogvideox_layer *layers;
    float *norm_final_w, *norm_final_b, *norm_out_w, *norm_out_b;
    const cvx_tensor *norm_out_lin_w, *norm_out_lin_b, *proj_out_w, *proj_out_b;
    /* cached sin-cos table for the last grid */
    float *pos_table;
    int pos_T, pos_gh, pos_gw;
    /* activations, grown as needed */
    float *h, *ws;
    size_t h_cap, ws_cap;
    int stack_rows, chunk_rows;                    /* see cogvideox_set_chunking */
    cogvideox_stats stats;
    cvx_ctx *ctx;                                  /* compute context (borrowed unless owns_ctx) */
    int owns_ctx;
    cvx_dist *sp;                                  /* Ulysses group (borrowed), NULL: one process */
    float *sp_buf;                                 /* q, k, v head shards [S, D/sp] each */
    size_t sp_cap;
};

cvx_ctx *cogvideox_ctx(const cogvideox_transformer *m) { return m->ctx; }

void cogvideox_set_chunking(cogvideox_transformer *m, int stack_rows, int chunk_rows) {
    m->stack_rows = stack_rows;
    m->chunk_rows = chunk_rows;
}

cogvideox_stats cogvideox_get_stats(const cogvideox_transformer *m) { return m->stats; }
void cogvideox_reset_stats(cogvideox_transformer *m) { memset(&m->stats, 0, sizeof m->stats); }

/* nn.Linear through cvx_linear (bf16/f16 weights widened one matrix at a time), timed. */
static void linear(cogvideox_transformer *m, const float *x, int M, int K, const cvx_tensor *W, const cvx_tensor *b,
                   float *y) {
    double t0 = cvx_time();
    cvx_linear(m->ctx, x, M, K, W, b, y);
    m->stats.t_linear += cvx_time() - t0;
    m->stats.flop_linear += 2.0 * M * K * (double)W->shape[0];
}

const cogvideox_config *cogvideox_get_config(const cogvideox_transformer *m) { return &m->c; }

/* ------------------------------------------------------------------ config */

int cogvideox_config_load(const char *path, cogvideox_config *c) {
    cvx_config j;
    if (cvx_config_load(&j, path)) return -1;
    if (cvx_check_model_config(&j)) {   /* ranges before anything is sized from them (issue 14) */
        cvx_config_free(&j);
        return -1;
    }
    int64_t v;
    double d;
    const char *s;
    int rc = -1;
#define REQ_INT(key, dst) do { if (cvx_cfg_int(&j, key, &v)) goto out; dst = (int)v; } while (0)
#define OPT_INT(key, def, dst) do { if (cvx_cfg_int_or(&j, key, def, &v)) goto out; dst = (int)v; } while (0)
#define OPT_BOOL(key, def, dst) do { if (cvx_cfg_bool_or(&j, key, def, &dst)) goto out; } while (0)
#define OPT_NUM(key, def, dst) do { if (cvx_cfg_num_or(&j, key, def, &d)) goto out; dst = d; } while (0)
    memset(c, 0, sizeof *c);
    REQ_INT("num_attention_heads", c->num_attention_heads);
    REQ_INT("attention_head_dim", c->attention_head_dim);
    REQ_INT("num_layers", c->num_layers);
    REQ_INT("in_channels", c->in_channels);
    OPT_INT("out_channels", c->in_channels, c->out_channels);
    OPT_INT("text_embed_dim", 4096, c->text_embed_dim);
    OPT_INT("time_embed_dim", 512, c->time_embed_dim);
    OPT_INT("patch_size", 2, c->patch_size);
    OPT_INT("patch_size_t", 0, c->patch_size_t);
    OPT_INT("sample_height", 60, c->sample_height);
    OPT_INT("sample_width", 90, c->sample_width);
    OPT_INT("sample_frames", 49, c->sample_frames);
    OPT_INT("temporal_compression_ratio", 4, c->temporal_compression_ratio);
    OPT_INT("max_text_seq_length", 226, c->max_text_seq_length);
    OPT_BOOL("use_rotary_positional_embeddings", 0, c->use_rotary_positional_embeddings);
    OPT_BOOL("use_learned_positional_embeddings", 0, c->use_learned_positional_embeddings);
    OPT_INT("ofs_embed_dim", 0, c->ofs_embed_dim);
    OPT_BOOL("flip_sin_to_cos", 1, c->flip_sin_to_cos);
    OPT_INT("freq_shift", 0, c->freq_shift);
    OPT_NUM("norm_eps", 1e-5, c->norm_eps);
    OPT_NUM("spatial_interpolation_scale", 1.875, c->spatial_interpolation_scale);
    OPT_NUM("temporal_interpolation_scale", 1.0, c->temporal_interpolation_scale);
    OPT_BOOL("attention_bias", 1, c->attention_bias);
    OPT_BOOL("norm_elementwise_affine", 1, c->norm_elementwise_affine);
    OPT_BOOL("patch_bias", 1, c->patch_bias);
    if (cvx_cfg_str_or(&j, "activation_fn", "gelu-approximate", &s)) goto out;
    if (strcmp(s, "gelu-approximate")) {
        cvx_error("%s: key 'activation_fn' is \"%s\", only \"gelu-approximate\" is supported", path, s);
        goto out;
    }
    if (cvx_cfg_str_or(&j, "timestep_activation_fn", "silu", &s)) goto out;
    if (strcmp(s, "silu")) {
        cvx_error("%s: key 'timestep_activation_fn' is \"%s\", only \"silu\" is supported", path, s);
        goto out;
    }
#undef REQ_INT
#undef OPT_INT
#undef OPT_BOOL
#undef OPT_NUM
    struct { const char *key; int val; } pos[] = {
        {"num_attention_heads", c->num_attention_heads}, {"attention_head_dim", c->attention_head_dim},
        {"num_layers", c->num_layers}, {"in_channels", c->in_channels}, {"out_channels", c->out_channels},
        {"text_embed_dim", c->text_embed_dim}, {"time_embed_dim", c->time_embed_dim},
        {"patch_size", c->patch_size}, {"sample_height", c->sample_height}, {"sample_width", c->sample_width},
        {"sample_frames", c->sample_frames}, {"temporal_compression_ratio", c->temporal_compression_ratio},
        {"max_text_seq_length", c->max_text_seq_length}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].val <= 0) { cvx_error("%s: key '%s' must be a positive integer, got %d", path, pos[i].key, pos[i].val); goto out; }
    if (c->patch_size_t < 0 || c->ofs_embed_dim < 0) {
        cvx_error("%s: keys 'patch_size_t' and 'ofs_embed_dim' must be null or positive", path);
        goto out;
    }
    if (!(c->norm_eps > 0)) { cvx_error("%s: key 'norm_eps' must be positive, got %g", path, c->norm_eps); goto out; }
    int D = c->num_attention_heads * c->attention_head_dim;
    if (!c->use_rotary_positional_embeddings && c->use_learned_positional_embeddings) {
        cvx_error("%s: use_learned_positional_embeddings without use_rotary_positional_embeddings is rejected "
                  "upstream (no such checkpoint)", path);
        goto out;
    }
    if (!c->use_rotary_positional_embeddings && D % 16) {
        cvx_error("%s: sin-cos positional embeddings need num_attention_heads·attention_head_dim divisible by 16, got %d",
                  path, D);
        goto out;
    }
    if (c->use_rotary_positional_embeddings && c->attention_head_dim % 16) {
        cvx_error("%s: rotary embeddings need 'attention_head_dim' divisible by 16, got %d", path,
                  c->attention_head_dim);
        goto out;
    }
    if (c->ofs_embed_dim && c->ofs_embed_dim != c->time_embed_dim) {
        cvx_error("%s: 'ofs_embed_dim' (%d) must equal 'time_embed_dim' (%d): the two embeddings are added", path,
                  c->ofs_embed_dim, c->time_embed_dim);
        goto out;
    }
    rc = 0;
out:
    cvx_config_free(&j);
    return rc;
}

/* ------------------------------------------------------------------ load */

#define GET(dst, name, ...) do { if (!((dst) = cvx_weights_get(m->w, name, CVX_SHAPE(__VA_ARGS__)))) goto fail; } while (0)
#define GETF(dst, name, n) do { const cvx_tensor *t_; GET(t_, name, n); (dst) = cvx_tensor_f32_dup(t_); } while (0)

cogvideox_transformer *cogvideox_load(const char *transformer_dir, cvx_ctx *ctx) {
    char path[4096];
    if (cvx_path_join(path, sizeof path, transformer_dir, "config.json")) { cvx_error("path too long"); return NULL; }
    return cogvideox_load_file(path, transformer_dir, ctx);
}

cogvideox_transformer *cogvideox_load_file(const char *config_json, const char *weights, cvx_ctx *ctx) {
    char name[256];
    cogvideox_transformer *m = cvx_calloc(1, sizeof *m);
    cogvideox_config *c = &m->c;
    if (cogvideox_config_load(config_json, c)) { free(m); return NULL; }
    if (!(m->w = cvx_weights_open(weights))) { free(m); return NULL; }
    if (cvx_weights_check_arch(m->w, "cogvideox", "CogVideoX") ||
        (!cvx_weights_find(m->w, "patch_embed.proj.weight") &&
         cvx_error("%s: not a CogVideoX transformer checkpoint: no tensor 'patch_embed.proj.weight' (diffusers names)",
                   cvx_weights_path(m->w)))) {
        cvx_weights_close(m->w);
        free(m);
        return NULL;
    }
    m->owns_ctx = ctx == NULL;
    m->ctx = ctx ? ctx : cvx_ctx_new(cvx_threads());
    const int64_t D = (int64_t)c->num_attention_heads * c->attention_head_dim, E = c->time_embed_dim,
                  hd = c->attention_head_dim, p = c->patch_size, C = c->in_channels;
    const int64_t P = p * p * c->out_channels * (c->patch_size_t > 0 ? c->patch_size_t : 1);
    m->layers = cvx_calloc((size_t)c->num_layers, sizeof *m->layers);

    /* patch embedding: Conv2d [D, C, p, p] (1.0) or Linear [D, C·pt·p·p] (1.5), both used as a GEMM */
    const cvx_tensor *pw;
    if (c->patch_size_t > 0) {
        GET(pw, "patch_embed.proj.weight", D, C * c->patch_size_t * p * p);
        /* diffusers 0.32.2 always creates this bias (ignoring patch_bias): optional here */
        if (cvx_weights_find(m->w, "patch_embed.proj.bias")) GET(m->patch_proj_b, "patch_embed.proj.bias", D);
    } else {
        GET(pw, "patch_embed.proj.weight", D, C, p, p);
        if (c->patch_bias) GET(m->patch_proj_b, "patch_embed.proj.bias", D);
    }
    m->patch_proj_w = *pw;
    m->patch_proj_w.ndim = 2;
    m->patch_proj_w.shape[1] = pw->numel / D;
    GET(m->text_proj_w, "patch_embed.text_proj.weight", D, c->text_embed_dim);
    GET(m->text_proj_b, "patch_embed.text_proj.bias", D);
    if (c->use_learned_positional_embeddings) {
        int64_t n = (int64_t)(c->sample_height / p) * (c->sample_width / p) *
                    ((c->sample_frames - 1) / c->temporal_compression_ratio + 1);
        GET(m->pos_embedding, "patch_embed.pos_embedding", 1, c->max_text_seq_length + n, D);
    }
    GET(m->time_lin1_w, "time_embedding.linear_1.weight", E, D);
    GET(m->time_lin1_b, "time_embedding.linear_1.bias", E);
    GET(m->time_lin2_w, "time_embedding.linear_2.weight", E, E);
    GET(m->time_lin2_b, "time_embedding.linear_2.bias", E);
    if (c->ofs_embed_dim) {
        int64_t O = c->ofs_embed_dim;
        GET(m->ofs_lin1_w, "ofs_embedding.linear_1.weight", O, O);
        GET(m->ofs_lin1_b, "ofs_embedding.linear_1.bias", O);
        GET(m->ofs_lin2_w, "ofs_embedding.linear_2.weight", O, O);
        GET(m->ofs_lin2_b, "ofs_embedding.linear_2.bias", O);
    }
    for (int i = 0; i < c->num_layers; i++) {
        cogvideox_layer *ly = &m->layers[i];
#define N_(suffix) (snprintf(name, sizeof name, "transformer_blocks.%d.%s", i, suffix), name)
        GET(ly->norm1_lin_w, N_("norm1.linear.weight"), 6 * D, E);
        GET(ly->norm1_lin_b, N_("norm1.linear.bias"), 6 * D);
        GET(ly->norm2_lin_w, N_("norm2.linear.weight"), 6 * D, E);
        GET(ly->norm2_lin_b, N_("norm2.linear.bias"), 6 * D);
        if (c->norm_elementwise_affine) {
            GETF(ly->norm1_w, N_("norm1.norm.weight"), D);
            GETF(ly->norm1_b, N_("norm1.norm.bias"), D);
            GETF(ly->norm2_w, N_("norm2.norm.weight"), D);
            GETF(ly->norm2_b, N_("norm2.norm.bias"), D);
        }
        GET(ly->to_q_w, N_("attn1.to_q.weight"), D, D);
        GET(ly->to_k_w, N_("attn1.to_k.weight"), D, D);
        GET(ly->to_v_w, N_("attn1.to_v.weight"), D, D);
        if (c->attention_bias) {
            GET(ly->to_q_b, N_("attn1.to_q.bias"), D);
            GET(ly->to_k_b, N_("attn1.to_k.bias"), D);
            GET(ly->to_v_b, N_("attn1.to_v.bias"), D);
        }
        GET(ly->to_out_w, N_("attn1.to_out.0.weight"), D, D);
        GET(ly->to_out_b, N_("attn1.to_out.0.bias"), D);
        GETF(ly->norm_q_w, N_("attn1.norm_q.weight"), hd);
        GETF(ly->norm_q_b, N_("attn1.norm_q.bias"), hd);
        GETF(ly->norm_k_w, N_("attn1.norm_k.weight"), hd);
        GETF(ly->norm_k_b, N_("attn1.norm_k.bias"), hd);
        GET(ly->ff1_w, N_("ff.net.0.proj.weight"), 4 * D, D);
        GET(ly->ff1_b, N_("ff.net.0.proj.bias"), 4 * D);
        GET(ly->ff2_w, N_("ff.net.2.weight"), D, 4 * D);
        GET(ly->ff2_b, N_("ff.net.2.bias"), D);
#undef N_
    }
    if (c->norm_elementwise_affine) {
        GETF(m->norm_final_w, "norm_final.weight", D);
        GETF(m->norm_final_b, "norm_final.bias", D);
        GETF(m->norm_out_w, "norm_out.norm.weight", D);
        GETF(m->norm_out_b, "norm_out.norm.bias", D);
    }
    GET(m->norm_out_lin_w, "norm_out.linear.weight", 2 * D, E);
    GET(m->norm_out_lin_b, "norm_out.linear.bias", 2 * D);
    GET(m->proj_out_w, "proj_out.weight", P, D);
    GET(m->proj_out_b, "proj_out.bias", P);
    return m;
fail:
    cogvideox_free(m);
    return NULL;
}
#undef GET
#undef GETF

/* The linear layers LoRA adapters may target (common/lora.h), by diffusers module name. */
int cogvideox_lora_targets(const cogvideox_transformer *m, cvx_lora_target **out) {
    const cogvideox_config *c = &m->c;
    int n = 0, cap = 8 + 8 * c->num_layers;
    cvx_lora_target *t = cvx_calloc((size_t)cap, sizeof *t);
#define ADD(W, B, ...) do { snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__); t[n].w = (W); t[n].b = (B); n++; } while (0)
    if (c->patch_size_t > 0) ADD(&m->patch_proj_w, m->patch_proj_b, "patch_embed.proj");   /* 1.5: a Linear */
    ADD(m->text_proj_w, m->text_proj_b, "patch_embed.text_proj");
    ADD(m->time_lin1_w, m->time_lin1_b, "time_embedding.linear_1");
    ADD(m->time_lin2_w, m->time_lin2_b, "time_embedding.linear_2");
    if (c->ofs_embed_dim) {
        ADD(m->ofs_lin1_w, m->ofs_lin1_b, "ofs_embedding.linear_1");
        ADD(m->ofs_lin2_w, m->ofs_lin2_b, "ofs_embedding.linear_2");
    }
    for (int i = 0; i < c->num_layers; i++) {
        const cogvideox_layer *ly = &m->layers[i];
        ADD(ly->norm1_lin_w, ly->norm1_lin_b, "transformer_blocks.%d.norm1.linear", i);
        ADD(ly->to_q_w, ly->to_q_b, "transformer_blocks.%d.attn1.to_q", i);
        ADD(ly->to_k_w, ly->to_k_b, "transformer_blocks.%d.attn1.to_k", i);
        ADD(ly->to_v_w, ly->to_v_b, "transformer_blocks.%d.attn1.to_v", i);
        ADD(ly->to_out_w, ly->to_out_b, "transformer_blocks.%d.attn1.to_out.0", i);
        ADD(ly->norm2_lin_w, ly->norm2_lin_b, "transformer_blocks.%d.norm2.linear", i);
        ADD(ly->ff1_w, ly->ff1_b, "transformer_blocks.%d.ff.net.0.proj", i);
        ADD(ly->ff2_w, ly->ff2_b, "transformer_blocks.%d.ff.net.2", i);
    }
    ADD(m->norm_out_lin_w, m->norm_out_lin_b, "norm_out.linear");
    ADD(m->proj_out_w, m->proj_out_b, "proj_out");
#undef ADD
    CVX_CHECK(n <= cap);
    *out = t;
    return n;
}

void cogvideox_free(cogvideox_transformer *m) {
    if (!m) return;
    if (m->layers)
        for (int i = 0; i < m->c.num_layers; i++) {
            cogvideox_layer *ly = &m->layers[i];
            free(ly->norm1_w); free(ly->norm1_b); free(ly->norm2_w); free(ly->norm2_b);
            free(ly->norm_q_w); free(ly->norm_q_b); free(ly->norm_k_w); free(ly->norm_k_b);
        }
    free(m->layers);
    free(m->norm_final_w); free(m->norm_final_b); free(m->norm_out_w); free(m->norm_out_b);
    free(m->pos_table); free(m->h); free(m->ws); free(m->sp_buf);
    cvx_weights_close(m->w);
    if (m->owns_ctx) cvx_ctx_free(m->ctx);
    free(m);
}

/* ------------------------------------------------------------------ blocks */

/* Timesteps → TimestepEmbedding (linear_1, SiLU, linear_2), plus the ofs embedding when the
 * model has one. temb [B, E]. */
static void cogvideox_time_embedding(cogvideox_transformer *m, const int64_t *timestep, int B, const float *ofs,
                                     int n_ofs, float *temb) {
    const cogvideox_config *c = &m->c;
    int D = c->num_attention_heads * c->attention_head_dim, E = c->time_embed_dim;
    float *t = cvx_malloc(sizeof(float) * (size_t)B);
    float *freq = cvx_malloc(sizeof(float) * (size_t)B * D), *t1 = cvx_malloc(sizeof(float) * (size_t)B * E);
    for (int b = 0; b < B; b++) t[b] = (float)timestep[b];
    cvx_timestep_sinusoid(freq, t, B, D, c->flip_sin_to_cos, c->freq_shift);   // [B, D]
    linear(m, freq, B, D, m->time_lin1_w, m->time_lin1_b, t1);                       // [B, E]
    cvx_silu(t1, (size_t)B * E);
    linear(m, t1, B, E, m->time_lin2_w, m->time_lin2_b, temb);                       // [B, E]
    if (c->ofs_embed_dim) {
        int O = c->ofs_embed_dim;
        float *of = cvx_malloc(sizeof(float) * (size_t)n_ofs * O), *o1 = cvx_malloc(sizeof(float) * (size_t)n_ofs * O),
              *o2 = cvx_malloc(sizeof(float) * (size_t)n_ofs * O);
        cvx_timestep_sinusoid(of, ofs, n_ofs, O, c->flip_sin_to_cos, c->freq_shift);   // [n_ofs, O]
        linear(m, of, n_ofs, O, m->ofs_lin1_w, m->ofs_lin1_b, o1);                         // [n_ofs, O]
        cvx_silu(o1, (size_t)n_ofs * O);
        linear(m, o1, n_ofs, O, m->ofs_lin2_w, m->ofs_lin2_b, o2);                         // [n_ofs, O]
        for (int b = 0; b < B; b++)
            for (int i = 0; i < E; i++) temb[(size_t)b * E + i] += o2[(size_t)(n_ofs == 1 ? 0 : b) * O + i];
        free(of); free(o1); free(o2);
    }
    free(t); free(freq); free(t1);
}

/* Video patches + text projection into h[B, S, D] (text first), plus the positional
 * embedding of the sin-cos / learned models. patches: scratch of B·N·Kp floats. */
static int cogvideox_patch_embed(cogvideox_transformer *m, const float *x, int B, int F, int H, int W,
                                 const float *text, int L, float *h, float *patches) {
    const cogvideox_config *c = &m->c;
    int D = c->num_attention_heads * c->attention_head_dim, C = c->in_channels, p = c->patch_size;
    int pt = c->patch_size_t > 0 ? c->patch_size_t : 1, gh = H / p, gw = W / p, T = F / pt;
    int N = T * gh * gw, S = L + N, Kp = C * pt * p * p;
    /* patches[b, (t, y, x), ((c·pt + it)·p + ih)·p + iw] = x[b, t·pt + it, c, y·p + ih, x·p + iw] */
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int y = 0; y < gh; y++)
                for (int xx = 0; xx < gw; xx++) {
                    float *row = patches + ((((size_t)b * T + t) * gh + y) * gw + xx) * Kp;   // [Kp]
                    for (int ch = 0; ch < C; ch++)
                        for (int it = 0; it < pt; it++)
                            for (int ih = 0; ih < p; ih++)
                                for (int iw = 0; iw < p; iw++)
                                    row[((ch * pt + it) * p + ih) * p + iw] =
                                        x[((((size_t)b * F + t * pt + it) * C + ch) * H + y * p + ih) * W + xx * p + iw];
                }
    for (int b = 0; b < B; b++) {
        float *hb = h + (size_t)b * S * D;                                                     // [S, D]
        linear(m, text + (size_t)b * L * c->text_embed_dim, L, c->text_embed_dim, m->text_proj_w, m->text_proj_b,
                   hb);                                                                        // [L, D]
        linear(m, patches + (size_t)b * N * Kp, N, Kp, &m->patch_proj_w, m->patch_proj_b, hb + (size_t)L * D);  // [N, D]
    }
    if (c->use_rotary_positional_embeddings && !c->use_learned_positional_embeddings) return 0;
    /* positional embedding over [text; video]; the text part is zero for the sin-cos table */
    int pre_frames = (F - 1) * c->temporal_compression_ratio + 1;
    const float *learned = NULL;
    float *learned_f32 = NULL;
    if (c->use_learned_positional_embeddings) {   /* (H, W equal the sample size: checked in forward) */
        if (pre_frames == c->sample_frames) {
            if (m->pos_embedding->shape[1] != S)
                return cvx_error("learned positional embedding covers %lld tokens, the sequence has %d",
                                 (long long)m->pos_embedding->shape[1], S);
            learned = learned_f32 = cvx_tensor_f32_dup(m->pos_embedding);                    // [S, D]
        }
    }
    if (learned) {
#pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int s = 0; s < S; s++)
                for (int i = 0; i < D; i++) h[((size_t)b * S + s) * D + i] += learned[(size_t)s * D + i];
        free(learned_f32);
        return 0;
    }
    /* sin-cos table of the actual grid (upstream recomputes it whenever the size differs from the
     * config's; same formula, so it only depends on the grid). Cached across steps. */
    if (!m->pos_table || m->pos_T != T || m->pos_gh != gh || m->pos_gw != gw) {
        free(m->pos_table);
        m->pos_table = cvx_alloc_f32((size_t)N * D);
        if (cogvideox_sincos_3d(m->pos_table, D, T, gh, gw, c->spatial_interpolation_scale,
                                c->temporal_interpolation_scale)) {
            free(m->pos_table); m->pos_table = NULL;
            return -1;
        }
        m->pos_T = T; m->pos_gh = gh; m->pos_gw = gw;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int n = 0; n < N; n++)
            for (int i = 0; i < D; i++) h[((size_t)b * S + L + n) * D + i] += m->pos_table[(size_t)n * D + i];
    return 0;
}

/* CogVideoXLayerNormZero on rows [r0, r0 + rows) of h[B·S, D]: LN(x)·(1 + scale) + shift with
 * the video (shift, scale) or text (e_shift, e_scale) part of mod[B, 6D] by the row's position.
 * The gates are applied by gated_residual. */
static void cogvideox_layernorm_zero(float *y, const float *x, size_t r0, int rows, int S, int L, int D,
                                     const float *mod, const float *w, const float *b, float eps) {
    cvx_layernorm(y, x, rows, D, w, b, eps);                                           // [rows, D]
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++) {
        size_t r = r0 + i;
        int bi = (int)(r / S), text = (int)(r % S) < L;
        const float *shift = mod + (size_t)bi * 6 * D + (text ? 3 * D : 0), *scale = shift + D;
        float *yr = y + (size_t)i * D;
        for (int k = 0; k < D; k++) yr[k] = yr[k] * (1.0f + scale[k]) + shift[k];
    }
}

/* h[r] += gate · y[r] with the video gate or the text e_gate of mod[B, 6D]. */
static void gated_residual(float *h, const float *y, size_t r0, int rows, int S, int L, int D, const float *mod) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++) {
        size_t r = r0 + i;
        int bi = (int)(r / S), text = (int)(r % S) < L;
        const float *gate = mod + (size_t)bi * 6 * D + (text ? 5 * D : 2 * D);
        float *hr = h + (size_t)i * D;
        const float *yr = y + (size_t)i * D;
        for (int k = 0; k < D; k++) hr[k] = hr[k] + gate[k] * yr[k];
    }
}

/* softmax(q kᵀ/√hd) v of one batch element over its S tokens, for `heads` heads of hd floats in
 * rows of stride ld (all heads, or this rank's share under sequence parallelism), after RoPE on
 * the video rows; the output over q. */
static void attention_core(cogvideox_transformer *m, float *q, float *k, const float *v, int S, int L, int heads,
                           int ld, const float *rope_cos, const float *rope_sin) {
    int hd = m->c.attention_head_dim;
    if (rope_cos) {
        cvx_rope_interleaved(q + (size_t)L * ld, S - L, heads, hd, ld, rope_cos, rope_sin);         // video rows [N, ld]
        cvx_rope_interleaved(k + (size_t)L * ld, S - L, heads, hd, ld, rope_cos, rope_sin);
    }
    double t0 = cvx_time(), flop = 4.0 * S * (double)S * heads * hd;
    cvx_attention_transformer(m->ctx, q, ld, k, v, ld, q, ld, S, S, heads, hd, (float)(1.0 / sqrt((double)hd)), NULL);
    m->stats.t_attention += cvx_time() - t0;
    m->stats.flop_attention += flop;
    cvx_flops_add(m->ctx, flop);
}

/* Joint self-attention core over [text; video] of nb batch elements (rows nb·S), in place:
 * q, k, v [rows, D] projected in; per-head LayerNorm on q and k, RoPE on the video rows,
 * softmax(q kᵀ/√hd) v out in q (heads concatenated; cvx_attention may write over q). */
static void cogvideox_attention(cogvideox_transformer *m, const cogvideox_layer *ly, float *q, float *k, const float *v,
                                int nb, int S, int L, const float *rope_cos, const float *rope_sin) {
    const cogvideox_config *c = &m->c;
    int heads = c->num_attention_heads, hd = c->attention_head_dim, D = heads * hd, rows = nb * S;
    cvx_layernorm(q, q, rows * heads, hd, ly->norm_q_w, ly->norm_q_b, 1e-6f);           // [rows·heads, hd]
    cvx_layernorm(k, k, rows * heads, hd, ly->norm_k_w, ly->norm_k_b, 1e-6f);           // [rows·heads, hd]
    for (int b = 0; b < nb; b++)
        attention_core(m, q + (size_t)b * S * D, k + (size_t)b * S * D, v + (size_t)b * S * D, S, L, heads, D,
                       rope_cos, rope_sin);                                              // [S, D] per element
}

/* The same under Ulysses sequence parallelism, on this rank's `rows` tokens of one batch element
 * (q, k, v [rows, D]): the per-head norms on its rows, then q, k, v to head shards (all S tokens
 * of heads/sp heads: [S, D/sp]), the core, and the output back to its rows in q. A failed
 * exchange cannot be recovered on the other ranks: it stops the run (cvx_dist_die). */
static void cogvideox_attention_sp(cogvideox_transformer *m, const cogvideox_layer *ly, float *q, float *k,
                                   const float *v, int rows, int S, int L, const float *rope_cos, const float *rope_sin) {
    const cogvideox_config *c = &m->c;
    int heads = c->num_attention_heads, hd = c->attention_head_dim, p = cvx_dist_size(m->sp), Dh = heads / p * hd;
    cvx_layernorm(q, q, rows * heads, hd, ly->norm_q_w, ly->norm_q_b, 1e-6f);           // [rows·heads, hd]
    cvx_layernorm(k, k, rows * heads, hd, ly->norm_k_w, ly->norm_k_b, 1e-6f);           // [rows·heads, hd]
    float *qh = m->sp_buf, *kh = qh + (size_t)S * Dh, *vh = kh + (size_t)S * Dh;        // [S, Dh] each
    double t0 = cvx_time();
    if (cvx_dist_seq_to_heads(m->sp, q, qh, S, heads, hd) || cvx_dist_seq_to_heads(m->sp, k, kh, S, heads, hd) ||
        cvx_dist_seq_to_heads(m->sp, v, vh, S, heads, hd))
        cvx_dist_die_last_error(m->sp);
    m->stats.t_comm += cvx_time() - t0;
    attention_core(m, qh, kh, vh, S, L, heads / p, Dh, rope_cos, rope_sin);              // qh: [S, Dh]
    t0 = cvx_time();
    if (cvx_dist_heads_to_seq(m->sp, qh, q, S, heads, hd)) cvx_dist_die_last_error(m->sp);   // q: [rows, D]
    m->stats.t_comm += cvx_time() - t0;
    /* sent: 3 × its rows' other heads, then the other ranks' rows of its heads */
    m->stats.bytes_sent += 4.0 * (3.0 * rows * (heads * hd - Dh) + (double)(S - rows) * Dh);
}

/* FeedForward: Linear(D → 4D), GELU(tanh), Linear(4D → D). x [rows, D] in, u [rows, 4D] scratch,
 * y [rows, D] out (may alias x). */
static void cogvideox_feed_forward(cogvideox_transformer *m, const cogvideox_layer *ly, const float *x, int rows, int D,
                                   float *u, float *y) {
    linear(m, x, rows, D, ly->ff1_w, ly->ff1_b, u);                                    // [rows, 4D]
    cvx_gelu_tanh(u, (size_t)rows * 4 * D);   /* = 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))) */
    linear(m, u, rows, 4 * D, ly->ff2_w, ly->ff2_b, y);                                // [rows, D]
}

/* One CogVideoXBlock on the rows of h[B·S, D] this process holds: all of them, or under
 * sequence parallelism its token range of the one batch element (f->row0, f->nrows). */
static void cogvideox_block(cogvideox_transformer *m, const cogvideox_layer *ly, const cogvideox_fwd *f) {
    const cogvideox_config *c = &m->c;
    int D = c->num_attention_heads * c->attention_head_dim, E = c->time_embed_dim;
    int B = f->B, S = f->S, L = f->L, G = f->stacked ? B : 1;
    float eps = (float)c->norm_eps, *h = f->h, *ws = f->ws;
    size_t ws_floats = f->ws_floats;
    float *mod1 = cvx_malloc(sizeof(float) * (size_t)B * 6 * D), *mod2 = cvx_malloc(sizeof(float) * (size_t)B * 6 * D);
    linear(m, f->temb, B, E, ly->norm1_lin_w, ly->norm1_lin_b, mod1);                  // [B, 6D]
    linear(m, f->temb, B, E, ly->norm2_lin_w, ly->norm2_lin_b, mod2);                  // [B, 6D]

    /* attention on G batch elements at a time (sequence parallel: this rank's rows of the one
     * element): q, k, v [rows, D] plus a chunk buffer xc [cr, D] for norm1's output and to_out's */
    for (int b0 = 0; b0 < B; b0 += G) {
        int nb = B - b0 < G ? B - b0 : G, rows = m->sp ? (int)f->nrows : nb * S;
        size_t r0 = m->sp ? f->row0 : (size_t)b0 * S, cr = ws_floats / D - 3 * (size_t)rows;
        if (cr > (size_t)rows) cr = rows;
        float *q = ws, *k = q + (size_t)rows * D, *v = k + (size_t)rows * D, *xc = v + (size_t)rows * D;
        for (size_t i = 0; i < (size_t)rows; i += cr) {
            int n = (int)((size_t)rows - i < cr ? (size_t)rows - i : cr);
            cogvideox_layernorm_zero(xc, h + (r0 + i) * D, r0 + i, n, S, L, D, mod1, ly->norm1_w, ly->norm1_b, eps);
            linear(m, xc, n, D, ly->to_q_w, ly->to_q_b, q + i * D);                   // [n, D]
            linear(m, xc, n, D, ly->to_k_w, ly->to_k_b, k + i * D);                   // [n, D]
            linear(m, xc, n, D, ly->to_v_w, ly->to_v_b, v + i * D);                   // [n, D]
        }
        if (m->sp) cogvideox_attention_sp(m, ly, q, k, v, rows, S, L, f->rope_cos, f->rope_sin);   // q: [rows, D]
        else cogvideox_attention(m, ly, q, k, v, nb, S, L, f->rope_cos, f->rope_sin);             // q: [rows, D]
        for (size_t i = 0; i < (size_t)rows; i += cr) {
            int n = (int)((size_t)rows - i < cr ? (size_t)rows - i : cr);
            linear(m, q + i * D, n, D, ly->to_out_w, ly->to_out_b, xc);                // [n, D]
            gated_residual(h + (r0 + i) * D, xc, r0 + i, n, S, L, D, mod1);
        }
    }

    /* feed-forward over the [text; video] rows in chunks that fit the scratch (x [c, D] + u [c, 4D]) */
    size_t first = f->row0, end = f->row0 + f->nrows, chunk = ws_floats / (5 * (size_t)D);
    if (chunk > f->nrows) chunk = f->nrows;
    for (size_t r0 = first; r0 < end; r0 += chunk) {
        int rows = (int)(end - r0 < chunk ? end - r0 : chunk);
        float *x = ws, *u = ws + (size_t)rows * D;                                          // [rows, D], [rows, 4D]
        cogvideox_layernorm_zero(x, h + r0 * D, r0, rows, S, L, D, mod2, ly->norm2_w, ly->norm2_b, eps);
        cogvideox_feed_forward(m, ly, x, rows, D, u, x);
        gated_residual(h + r0 * D, x, r0, rows, S, L, D, mod2);
    }
    free(mod1);
    free(mod2);
}

/* norm_final then norm_out (AdaLayerNorm, [shift, scale] = chunk2, shift first) on the video
 * tokens of h[B, S, D] → y[B, N, D]. */
static void cogvideox_norm_out(cogvideox_transformer *m, const float *h, const float *temb_silu, int B, int S,
                               int L, float *y) {
    const cogvideox_config *c = &m->c;
    int D = c->num_attention_heads * c->attention_head_dim, E = c->time_embed_dim, N = S - L;
    float eps = (float)c->norm_eps;
    float *mod = cvx_malloc(sizeof(float) * (size_t)B * 2 * D);
    linear(m, temb_silu, B, E, m->norm_out_lin_w, m->norm_out_lin_b, mod);              // [B, 2D]
    for (int b = 0; b < B; b++) {
        float *yb = y + (size_t)b * N * D;                                                 // [N, D]
        cvx_layernorm(yb, h + ((size_t)b * S + L) * D, N, D, m->norm_final_w, m->norm_final_b, eps);
        cvx_layernorm(yb, yb, N, D, m->norm_out_w, m->norm_out_b, eps);
        const float *shift = mod + (size_t)b * 2 * D, *scale = shift + D;
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            for (int k = 0; k < D; k++) yb[(size_t)n * D + k] = yb[(size_t)n * D + k] * (1.0f + scale[k]) + shift[k];
    }
    free(mod);
}

/* proj_out rows [B, N, P] → out [B, F, C_out, H, W]: token (t, y, x), feature
 * ((c·pt + it)·p + ih)·p + iw → out[b, t·pt + it, c, y·p + ih, x·p + iw] (pt = 1 for 1.0). */
static void cogvideox_unpatchify(const cogvideox_config *c, const float *tok, int B, int F, int H, int W, float *out) {
    int p = c->patch_size, pt = c->patch_size_t > 0 ? c->patch_size_t : 1, Co = c->out_channels;
    int gh = H / p, gw = W / p, T = F / pt, P = Co * pt * p * p;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int y = 0; y < gh; y++)
                for (int x = 0; x < gw; x++) {
                    const float *row = tok + ((((size_t)b * T + t) * gh + y) * gw + x) * P;   // [P]
                    for (int ch = 0; ch < Co; ch++)
                        for (int it = 0; it < pt; it++)
                            for (int ih = 0; ih < p; ih++)
                                for (int iw = 0; iw < p; iw++)
                                    out[((((size_t)b * F + t * pt + it) * Co + ch) * H + y * p + ih) * W + x * p + iw] =
                                        row[((ch * pt + it) * p + ih) * p + iw];
                }
}

/* ------------------------------------------------------------------ forward */

static float *grow(float **buf, size_t *cap, size_t n) {
    if (*cap < n) {
        free(*buf);
        *buf = cvx_alloc_f32(n);
        *cap = n;
    }
    return *buf;
}

/* forward, piece 1: checks, scratch, the time(+ofs) embedding (kept before and after SiLU) and
 * the patch (+ positional) embedding into f->h. */
int cogvideox_forward_embed(cogvideox_transformer *m, const float *x, int B, int F, int H, int W, const float *text,
                            int L, const int64_t *timestep, const float *ofs, int n_ofs, const float *rope_cos,
                            const float *rope_sin, cogvideox_fwd *f) {
    const cogvideox_config *c = &m->c;
    int D = c->num_attention_heads * c->attention_head_dim, E = c->time_embed_dim, p = c->patch_size;
    int pt = c->patch_size_t > 0 ? c->patch_size_t : 1;
    memset(f, 0, sizeof *f);
    if (B <= 0 || F <= 0 || H <= 0 || W <= 0 || L <= 0)
        return cvx_error("transformer: bad sizes B=%d F=%d H=%d W=%d L=%d", B, F, H, W, L);
    if (H % p || W % p)
        return cvx_error("transformer: latent height %d and width %d must be multiples of patch_size %d", H, W, p);
    if (F % pt)
        return cvx_error("transformer: %d latent frames is not a multiple of patch_size_t %d (the pipeline pads)", F, pt);
    if (!c->use_rotary_positional_embeddings || c->use_learned_positional_embeddings)
        if (L != c->max_text_seq_length)
            return cvx_error("transformer: positional embeddings need exactly max_text_seq_length = %d text tokens, "
                             "got %d", c->max_text_seq_length, L);
    if (c->use_learned_positional_embeddings && (H != c->sample_height || W != c->sample_width))
        return cvx_error("transformer: this model has learned positional embeddings: the latent size must be the "
                         "config's %dx%d (width x height), got %dx%d", c->sample_width, c->sample_height, W, H);
    if (c->use_rotary_positional_embeddings && (!rope_cos || !rope_sin))
        return cvx_error("transformer: this model uses rotary embeddings: rope tables are required");
    if (c->ofs_embed_dim && ofs && n_ofs != 1 && n_ofs != B)
        return cvx_error("transformer: ofs must have 1 or B=%d values, got %d", B, n_ofs);
    float ofs_default = 2.0f;   /* CogVideoX I2V pipelines pass ofs = 2.0 */
    if (c->ofs_embed_dim && !ofs) { ofs = &ofs_default; n_ofs = 1; }

    if (m->sp && B != 1)
        return cvx_error("transformer: under sequence parallelism a forward takes one batch element, got %d", B);

    int N = cogvideox_num_video_tokens(c, F, H, W), S = L + N;
    int Kp = c->in_channels * pt * p * p, P = c->out_channels * pt * p * p;
    /* the rows of h the blocks compute here: all B·S, or this rank's token range (Ulysses) */
    int64_t s0 = 0, s1 = (int64_t)B * S;
    if (m->sp) cvx_dist_split_range(S, cvx_dist_size(m->sp), cvx_dist_rank(m->sp), &s0, &s1);
    size_t rows = (size_t)(s1 - s0), elem_rows = m->sp ? rows : (size_t)S;
    /* scratch: stacked batch: q, k, v, xc and the FF's [rows, D] + [rows, 4D] in one chunk;
     * long sequences: q, k, v of one batch element plus S/4-row chunks (FF: 0.65·S rows). */
    int stacked = rows <= (size_t)(m->stack_rows > 0 ? m->stack_rows : STACK_ROWS);
    size_t cr = m->chunk_rows > 0 ? (size_t)m->chunk_rows : (size_t)(S + 3) / 4;
    size_t ws_floats = stacked ? 5 * rows * D : (3 * elem_rows + cr) * D;
    size_t need = (size_t)B * N * (size_t)(D + P);
    if ((size_t)B * N * Kp > need) need = (size_t)B * N * Kp;
    if (need > ws_floats) ws_floats = need;
    *f = (cogvideox_fwd){.B = B, .F = F, .H = H, .W = W, .L = L, .N = N, .S = S, .D = D, .E = E,
                         .rope_cos = rope_cos, .rope_sin = rope_sin, .stacked = stacked, .ws_floats = ws_floats,
                         .row0 = (size_t)s0, .nrows = rows};
    f->h = grow(&m->h, &m->h_cap, (size_t)B * S * D);                                     // [B, S, D]
    f->ws = grow(&m->ws, &m->ws_cap, ws_floats);
    if (m->sp) grow(&m->sp_buf, &m->sp_cap, 3 * (size_t)S * (D / cvx_dist_size(m->sp)));  // q, k, v [S, D/sp]

    f->t_start = cvx_time();
    f->temb = cvx_malloc(sizeof(float) * (size_t)B * E);                                  // [B, E]
    f->emb = cvx_malloc(sizeof(float) * (size_t)B * E);                                   // [B, E]
    cogvideox_time_embedding(m, timestep, B, ofs, n_ofs, f->temb);
    memcpy(f->emb, f->temb, sizeof(float) * (size_t)B * E);   /* before SiLU: TeaCache's `emb` */
    cvx_silu(f->temb, (size_t)B * E);   /* every consumer (norm1, norm2, norm_out) takes silu(temb) */

    if (cogvideox_patch_embed(m, x, B, F, H, W, text, L, f->h, f->ws)) { cogvideox_forward_abort(f); return -1; }
    return 0;
}

/* forward, piece 2: blocks first .. first + count − 1 on f->h. */
void cogvideox_forward_blocks(cogvideox_transformer *m, cogvideox_fwd *f, int first, int count) {
    CVX_CHECK(first >= 0 && count >= 0 && first + count <= m->c.num_layers);
    for (int i = first; i < first + count; i++)
        cogvideox_block(m, &m->layers[i], f);
}

/* Sequence parallelism, after the blocks: every rank of the group receives the video rows of h
 * the others computed (one all-to-all sending each rank's rows to all), so that norm_out,
 * proj_out and the prediction are computed alike, on all N rows, by every rank. */
static void sp_gather_video_rows(cogvideox_transformer *m, cogvideox_fwd *f) {
    int p = cvx_dist_size(m->sp), r = cvx_dist_rank(m->sp);
    size_t D = (size_t)f->D, *plan = cvx_malloc(4 * (size_t)p * sizeof *plan);
    size_t *sc = plan, *sd = plan + p, *rc = plan + 2 * p, *rd = plan + 3 * p;   /* counts, offsets (floats) */
    int64_t lo[2], hi[2];   /* [0]: this rank's video rows, [1]: rank j's */
    for (int j = -1; j < p; j++) {
        int w = j < 0 ? 0 : 1;
        cvx_dist_split_range(f->S, p, j < 0 ? r : j, &lo[w], &hi[w]);
        if (lo[w] < f->L) lo[w] = f->L;   /* text rows are not needed after the blocks */
        if (hi[w] < lo[w]) hi[w] = lo[w];
        if (j < 0) continue;
        sc[j] = (size_t)(hi[0] - lo[0]) * D, sd[j] = 0;
        rc[j] = (size_t)(hi[1] - lo[1]) * D, rd[j] = (size_t)lo[1] * D;
    }
    float *mine = f->ws;   /* a copy: MPI's send and receive buffers must not overlap */
    memcpy(mine, f->h + (size_t)lo[0] * D, sc[r] * sizeof(float));                      // [its video rows, D]
    double t0 = cvx_time();
    if (cvx_dist_alltoallv_f32(m->sp, mine, sc, sd, f->h, rc, rd)) cvx_dist_die_last_error(m->sp);
    m->stats.t_comm += cvx_time() - t0;
    m->stats.bytes_sent += 4.0 * (double)sc[r] * (p - 1);
    free(plan);
}

/* forward, piece 3: norm_final + norm_out, proj_out and unpatchify into out; frees f. */
void cogvideox_forward_finalize(cogvideox_transformer *m, cogvideox_fwd *f, float *out) {
    const cogvideox_config *c = &m->c;
    int B = f->B, N = f->N, D = f->D;
    float *y = f->ws, *tok = f->ws + (size_t)B * N * D;                                   // [B, N, D], [B, N, P]
    if (m->sp) sp_gather_video_rows(m, f);   /* every rank of the group: the same prediction */
    cogvideox_norm_out(m, f->h, f->temb, B, f->S, f->L, y);
    linear(m, y, B * N, D, m->proj_out_w, m->proj_out_b, tok);                          // [B·N, P]
    cogvideox_unpatchify(c, tok, B, f->F, f->H, f->W, out);                               // [B, F, C_out, H, W]
    m->stats.t_total += cvx_time() - f->t_start;
    cogvideox_forward_abort(f);
}

int cogvideox_sp_check(const cogvideox_config *c, int sp) {
    if (sp > 1 && c->num_attention_heads % sp)
        return cvx_error("--sp %d: must divide the %d attention heads of this model (sequence parallelism splits "
                         "the heads between the ranks)", sp, c->num_attention_heads);
    return 0;
}

int cogvideox_set_sp(cogvideox_transformer *m, cvx_dist *sp) {
    int p = sp ? cvx_dist_size(sp) : 1;
    if (cogvideox_sp_check(&m->c, p)) return -1;
    m->sp = p > 1 ? sp : NULL;
    return 0;
}

void cogvideox_forward_abort(cogvideox_fwd *f) {
    free(f->temb);
    free(f->emb);
    f->temb = f->emb = NULL;
}

int cogvideox_forward_ex(cogvideox_transformer *m, const float *x, int B, int F, int H, int W, const float *text,
                         int L, const int64_t *timestep, const float *ofs, int n_ofs, const float *rope_cos,
                         const float *rope_sin, float *out) {
    cogvideox_fwd f;
    if (cogvideox_forward_embed(m, x, B, F, H, W, text, L, timestep, ofs, n_ofs, rope_cos, rope_sin, &f)) return -1;
    cogvideox_forward_blocks(m, &f, 0, m->c.num_layers);
    cogvideox_forward_finalize(m, &f, out);
    return 0;
}

int cogvideox_forward(cogvideox_transformer *m, const float *x, int B, int F, int H, int W, const float *text, int L,
                      const int64_t *timestep, const float *rope_cos, const float *rope_sin, float *out) {
    return cogvideox_forward_ex(m, x, B, F, H, W, text, L, timestep, NULL, 0, rope_cos, rope_sin, out);
}
