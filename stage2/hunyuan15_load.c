/* HunyuanVideo15Transformer3DModel: config.json and the weights (diffusers names). The forward
 * is in stage2/hunyuan15.c. */
#include "hunyuan15_internal.h"

#include "config.h"
#include "dtype.h"
#include "error.h"
#include "fileio.h"
#include "lora.h"
#include "transformer_load.h"
#include "validate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config */

int hv15_config_load(const char *path, hv15_config *c) {
    cvx_config j;
    if (cvx_config_load(&j, path)) return -1;
    int64_t v, axes[3] = {16, 56, 56};
    const char *s;
    int rc = -1, n = 3;
    memset(c, 0, sizeof *c);
    if (cvx_cfg_str_or(&j, "_class_name", "HunyuanVideo15Transformer3DModel", &s)) goto out;
    if (strcmp(s, "HunyuanVideo15Transformer3DModel")) {
        cvx_error("%s: '_class_name' is \"%s\", expected \"HunyuanVideo15Transformer3DModel\"", path, s);
        goto out;
    }
    /* upstream's defaults (HunyuanVideo15Transformer3DModel.__init__), range-checked */
#define INT(key, def, lo, hi, dst) do { if (cvx_cfg_int_range_or(&j, key, def, lo, hi, &v)) goto out; dst = (int)v; } while (0)
    INT("in_channels", 65, 1, 4096, c->in_channels);
    INT("out_channels", 32, 1, 4096, c->out_channels);
    INT("num_attention_heads", 16, 1, 1024, c->num_attention_heads);
    INT("attention_head_dim", 128, 2, 4096, c->attention_head_dim);
    INT("num_layers", 54, 1, 1024, c->num_layers);
    INT("num_refiner_layers", 2, 0, 1024, c->num_refiner_layers);
    INT("patch_size", 1, 1, 64, c->patch_size);
    INT("patch_size_t", 1, 1, 64, c->patch_size_t);
    INT("text_embed_dim", 3584, 1, 65536, c->text_embed_dim);
    INT("text_embed_2_dim", 1472, 1, 65536, c->text_embed_2_dim);
    INT("image_embed_dim", 1152, 1, 65536, c->image_embed_dim);
    INT("target_size", 640, 1, 1 << 16, c->target_size);
#undef INT
    if (cvx_cfg_num_range_or(&j, "mlp_ratio", 4.0, 0, 64, 1, &c->mlp_ratio)) goto out;
    if (cvx_cfg_num_range_or(&j, "rope_theta", 256.0, 0, 1e12, 1, &c->rope_theta)) goto out;
    if (cvx_cfg_bool_or(&j, "use_meanflow", 0, &c->use_meanflow)) goto out;
    if (c->use_meanflow) {
        cvx_error("%s: key 'use_meanflow' is true (the MeanFlow super-resolution transformer): not supported", path);
        goto out;
    }
    if (cvx_cfg_str_or(&j, "qk_norm", "rms_norm", &s)) goto out;
    if (strcmp(s, "rms_norm")) {
        cvx_error("%s: key 'qk_norm' is \"%s\", only \"rms_norm\" is supported", path, s);
        goto out;
    }
    if (cvx_cfg_str_or(&j, "task_type", "i2v", &s)) goto out;
    if (strcmp(s, "i2v") && strcmp(s, "t2v")) {
        cvx_error("%s: key 'task_type' is \"%s\", expected \"t2v\" or \"i2v\"", path, s);
        goto out;
    }
    c->i2v = !strcmp(s, "i2v");
    if (cvx_cfg_has(&j, "rope_axes_dim") && cvx_cfg_int_array(&j, "rope_axes_dim", axes, 3, &n)) goto out;
    if (n != 3 || axes[0] < 0 || axes[1] < 0 || axes[2] < 0 || axes[0] % 2 || axes[1] % 2 || axes[2] % 2 ||
        axes[0] + axes[1] + axes[2] != c->attention_head_dim) {
        cvx_error("%s: key 'rope_axes_dim' must be 3 even integers summing to attention_head_dim = %d", path,
                  c->attention_head_dim);
        goto out;
    }
    for (int i = 0; i < 3; i++) c->rope_axes_dim[i] = (int)axes[i];
    rc = 0;
out:
    cvx_config_free(&j);
    return rc;
}

/* ------------------------------------------------------------------ load */

#define GET(dst, name, ...) do { if (!((dst) = cvx_weights_get(m->w, name, CVX_SHAPE(__VA_ARGS__)))) goto fail; } while (0)
#define GETF(dst, name, ...) do { const cvx_tensor *t_; GET(t_, name, __VA_ARGS__); (dst) = cvx_tensor_f32_dup(t_); } while (0)
/* a Linear `prefix`.weight [out, in] + .bias [out] */
#define LIN(dst, out_, in_, ...) do { char n_[256]; snprintf(n_, sizeof n_, __VA_ARGS__); size_t k_ = strlen(n_); \
        snprintf(n_ + k_, sizeof n_ - k_, ".weight"); GET((dst).w, n_, out_, in_); \
        snprintf(n_ + k_, sizeof n_ - k_, ".bias"); GET((dst).b, n_, out_); } while (0)

static int hv15_load_refiner_block(hv15_transformer *m, int i, hv15_refiner_block *r) {
    const int64_t D = (int64_t)m->c.num_attention_heads * m->c.attention_head_dim, Fr = 4 * D;
    char name[256];
#define N_(suffix) (snprintf(name, sizeof name, "context_embedder.token_refiner.refiner_blocks.%d.%s", i, suffix), name)
    GETF(r->norm1_w, N_("norm1.weight"), D);
    GETF(r->norm1_b, N_("norm1.bias"), D);
    GETF(r->norm2_w, N_("norm2.weight"), D);
    GETF(r->norm2_b, N_("norm2.bias"), D);
    LIN(r->q, D, D, "%s", N_("attn.to_q"));
    LIN(r->k, D, D, "%s", N_("attn.to_k"));
    LIN(r->v, D, D, "%s", N_("attn.to_v"));
    LIN(r->o, D, D, "%s", N_("attn.to_out.0"));
    LIN(r->ff1, Fr, D, "%s", N_("ff.net.0.proj"));
    LIN(r->ff2, D, Fr, "%s", N_("ff.net.2"));
    LIN(r->ada, 2 * D, D, "%s", N_("norm_out.linear"));
#undef N_
    return 0;
fail:
    return -1;
}

static int hv15_load_block(hv15_transformer *m, int i, hv15_block *b) {
    const int64_t D = (int64_t)m->c.num_attention_heads * m->c.attention_head_dim, hd = m->c.attention_head_dim;
    const int64_t Fd = m->ffn;
    char name[256];
#define N_(suffix) (snprintf(name, sizeof name, "transformer_blocks.%d.%s", i, suffix), name)
    LIN(b->norm1, 6 * D, D, "%s", N_("norm1.linear"));
    LIN(b->norm1_context, 6 * D, D, "%s", N_("norm1_context.linear"));
    LIN(b->q, D, D, "%s", N_("attn.to_q"));
    LIN(b->k, D, D, "%s", N_("attn.to_k"));
    LIN(b->v, D, D, "%s", N_("attn.to_v"));
    LIN(b->o, D, D, "%s", N_("attn.to_out.0"));
    LIN(b->add_q, D, D, "%s", N_("attn.add_q_proj"));
    LIN(b->add_k, D, D, "%s", N_("attn.add_k_proj"));
    LIN(b->add_v, D, D, "%s", N_("attn.add_v_proj"));
    LIN(b->add_o, D, D, "%s", N_("attn.to_add_out"));
    GETF(b->norm_q, N_("attn.norm_q.weight"), hd);
    GETF(b->norm_k, N_("attn.norm_k.weight"), hd);
    GETF(b->norm_added_q, N_("attn.norm_added_q.weight"), hd);
    GETF(b->norm_added_k, N_("attn.norm_added_k.weight"), hd);
    LIN(b->ff1, Fd, D, "%s", N_("ff.net.0.proj"));
    LIN(b->ff2, D, Fd, "%s", N_("ff.net.2"));
    LIN(b->ffc1, Fd, D, "%s", N_("ff_context.net.0.proj"));
    LIN(b->ffc2, D, Fd, "%s", N_("ff_context.net.2"));
#undef N_
    return 0;
fail:
    return -1;
}

hv15_transformer *hv15_load_file(const char *config_json, const char *weights, cvx_ctx *ctx) {
    hv15_transformer *m = cvx_calloc(1, sizeof *m);
    hv15_config *c = &m->c;
    if (hv15_config_load(config_json, c) || !(m->w = cvx_weights_open_family(weights, "hyvid", "HunyuanVideo-1.5"))) {
        free(m);
        return NULL;
    }
    m->ctx = cvx_ctx_or_new(ctx, &m->owns_ctx);
    if (hv15_original_layout(m->w, c)) goto fail;
    const int64_t D = (int64_t)c->num_attention_heads * c->attention_head_dim;
    const int64_t T = c->text_embed_dim, T2 = c->text_embed_2_dim, I = c->image_embed_dim;
    const int64_t P = (int64_t)c->out_channels * c->patch_size_t * c->patch_size * c->patch_size;
    m->ffn = (int)(D * c->mlp_ratio);   /* FeedForward: int(dim · mult) */
    const cvx_tensor *pw;
    GET(pw, "x_embedder.proj.weight", D, c->in_channels, c->patch_size_t, c->patch_size, c->patch_size);
    m->patch_w = *pw;
    m->patch_w.ndim = 2;
    m->patch_w.shape[1] = pw->numel / D;
    GET(m->patch_b, "x_embedder.proj.bias", D);
    LIN(m->time1, D, 256, "time_embed.timestep_embedder.linear_1");
    LIN(m->time2, D, D, "time_embed.timestep_embedder.linear_2");
    LIN(m->ref_time1, D, 256, "context_embedder.time_text_embed.timestep_embedder.linear_1");
    LIN(m->ref_time2, D, D, "context_embedder.time_text_embed.timestep_embedder.linear_2");
    LIN(m->ref_text1, D, T, "context_embedder.time_text_embed.text_embedder.linear_1");
    LIN(m->ref_text2, D, D, "context_embedder.time_text_embed.text_embedder.linear_2");
    LIN(m->ref_proj_in, D, T, "context_embedder.proj_in");
    m->refiner = cvx_calloc((size_t)(c->num_refiner_layers ? c->num_refiner_layers : 1), sizeof *m->refiner);
    for (int i = 0; i < c->num_refiner_layers; i++)
        if (hv15_load_refiner_block(m, i, &m->refiner[i])) goto fail;
    /* the ByT5 projection's inner width: 2048 hard-coded upstream, read from the weights */
    const cvx_tensor *l1 = cvx_weights_find(m->w, "context_embedder_2.linear_1.weight");
    if (!l1 || l1->ndim != 2 || l1->shape[1] != T2 || l1->shape[0] < 1 || l1->shape[0] > 65536) {
        cvx_error("%s: tensor 'context_embedder_2.linear_1.weight' %s, expected [W, text_embed_2_dim = %lld] "
                  "(W = 2048 in the real models)", cvx_weights_path(m->w), l1 ? "has the wrong shape" : "is missing",
                  (long long)T2);
        goto fail;
    }
    const int64_t W2 = l1->shape[0];
    c->byt5_proj_dim = (int)W2;
    GETF(m->byt5_norm_w, "context_embedder_2.norm.weight", T2);
    GETF(m->byt5_norm_b, "context_embedder_2.norm.bias", T2);
    LIN(m->byt5_1, W2, T2, "context_embedder_2.linear_1");
    LIN(m->byt5_2, W2, W2, "context_embedder_2.linear_2");
    LIN(m->byt5_3, D, W2, "context_embedder_2.linear_3");
    GETF(m->img_norm_in_w, "image_embedder.norm_in.weight", I);
    GETF(m->img_norm_in_b, "image_embedder.norm_in.bias", I);
    LIN(m->img_1, I, I, "image_embedder.linear_1");
    LIN(m->img_2, D, I, "image_embedder.linear_2");
    GETF(m->img_norm_out_w, "image_embedder.norm_out.weight", D);
    GETF(m->img_norm_out_b, "image_embedder.norm_out.bias", D);
    GETF(m->cond_type, "cond_type_embed.weight", 3, D);
    m->blocks = cvx_calloc((size_t)c->num_layers, sizeof *m->blocks);
    for (int i = 0; i < c->num_layers; i++)
        if (hv15_load_block(m, i, &m->blocks[i])) goto fail;
    LIN(m->norm_out, 2 * D, D, "norm_out.linear");
    LIN(m->proj_out, P, D, "proj_out");
    return m;
fail:
    hv15_free(m);
    return NULL;
}
#undef GET
#undef GETF
#undef LIN

hv15_transformer *hv15_load(const char *transformer_dir, cvx_ctx *ctx) {
    char path[4096];
    return cvx_dir_config_json(path, sizeof path, transformer_dir) ? NULL : hv15_load_file(path, transformer_dir, ctx);
}

void hv15_free(hv15_transformer *m) {
    if (!m) return;
    if (m->refiner)
        for (int i = 0; i < m->c.num_refiner_layers; i++) {
            hv15_refiner_block *r = &m->refiner[i];
            free(r->norm1_w); free(r->norm1_b); free(r->norm2_w); free(r->norm2_b);
        }
    if (m->blocks)
        for (int i = 0; i < m->c.num_layers; i++) {
            hv15_block *b = &m->blocks[i];
            free(b->norm_q); free(b->norm_k); free(b->norm_added_q); free(b->norm_added_k);
        }
    free(m->refiner);
    free(m->blocks);
    free(m->byt5_norm_w); free(m->byt5_norm_b);
    free(m->img_norm_in_w); free(m->img_norm_in_b); free(m->img_norm_out_w); free(m->img_norm_out_b);
    free(m->cond_type);
    free(m->ws);
    free(m->sp_buf);
    cvx_weights_close(m->w);
    if (m->owns_ctx) cvx_ctx_free(m->ctx);
    free(m);
}

/* ------------------------------------------------------------------ LoRA targets */

static void lora_add(cvx_lora_target *t, int *n, const hv15_linear *l, const char *name, const char *alias) {
    snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
    snprintf(t[*n].alias, sizeof t[*n].alias, "%s", alias);
    t[*n].w = l->w, t[*n].b = l->b;
    (*n)++;
}

int hv15_lora_targets(const hv15_transformer *m, cvx_lora_target **out) {
    const hv15_config *c = &m->c;
    int n = 0, cap = 16 + 14 * c->num_layers + 7 * c->num_refiner_layers;
    cvx_lora_target *t = cvx_calloc((size_t)cap, sizeof *t);
    char name[CVX_LORA_NAME], alias[CVX_LORA_NAME];
    /* double-stream blocks: (diffusers suffix, original suffix) */
    static const char *const blk[14][2] = {
        {"norm1.linear", "img_mod.linear"}, {"norm1_context.linear", "txt_mod.linear"},
        {"attn.to_q", "img_attn_q"}, {"attn.to_k", "img_attn_k"}, {"attn.to_v", "img_attn_v"},
        {"attn.to_out.0", "img_attn_proj"}, {"attn.add_q_proj", "txt_attn_q"}, {"attn.add_k_proj", "txt_attn_k"},
        {"attn.add_v_proj", "txt_attn_v"}, {"attn.to_add_out", "txt_attn_proj"}, {"ff.net.0.proj", "img_mlp.fc1"},
        {"ff.net.2", "img_mlp.fc2"}, {"ff_context.net.0.proj", "txt_mlp.fc1"}, {"ff_context.net.2", "txt_mlp.fc2"}};
    for (int i = 0; i < c->num_layers; i++) {
        const hv15_block *b = &m->blocks[i];
        const hv15_linear *l[14] = {&b->norm1, &b->norm1_context, &b->q, &b->k, &b->v, &b->o, &b->add_q,
                                    &b->add_k, &b->add_v, &b->add_o, &b->ff1, &b->ff2, &b->ffc1, &b->ffc2};
        for (int k = 0; k < 14; k++) {
            snprintf(name, sizeof name, "transformer_blocks.%d.%s", i, blk[k][0]);
            snprintf(alias, sizeof alias, "double_blocks.%d.%s", i, blk[k][1]);
            lora_add(t, &n, l[k], name, alias);
        }
    }
    static const char *const ref[7][2] = {{"attn.to_q", NULL}, {"attn.to_k", NULL}, {"attn.to_v", NULL},
                                          {"attn.to_out.0", "self_attn_proj"}, {"ff.net.0.proj", "mlp.fc1"},
                                          {"ff.net.2", "mlp.fc2"}, {"norm_out.linear", "adaLN_modulation.1"}};
    for (int i = 0; i < c->num_refiner_layers; i++) {
        const hv15_refiner_block *r = &m->refiner[i];
        const hv15_linear *l[7] = {&r->q, &r->k, &r->v, &r->o, &r->ff1, &r->ff2, &r->ada};
        for (int k = 0; k < 7; k++) {
            snprintf(name, sizeof name, "context_embedder.token_refiner.refiner_blocks.%d.%s", i, ref[k][0]);
            if (ref[k][1]) snprintf(alias, sizeof alias, "txt_in.individual_token_refiner.blocks.%d.%s", i, ref[k][1]);
            else alias[0] = 0;
            lora_add(t, &n, l[k], name, alias);
        }
    }
    lora_add(t, &n, &m->time1, "time_embed.timestep_embedder.linear_1", "time_in.mlp.0");
    lora_add(t, &n, &m->time2, "time_embed.timestep_embedder.linear_2", "time_in.mlp.2");
    lora_add(t, &n, &m->ref_time1, "context_embedder.time_text_embed.timestep_embedder.linear_1",
             "txt_in.t_embedder.mlp.0");
    lora_add(t, &n, &m->ref_time2, "context_embedder.time_text_embed.timestep_embedder.linear_2",
             "txt_in.t_embedder.mlp.2");
    lora_add(t, &n, &m->ref_text1, "context_embedder.time_text_embed.text_embedder.linear_1",
             "txt_in.c_embedder.linear_1");
    lora_add(t, &n, &m->ref_text2, "context_embedder.time_text_embed.text_embedder.linear_2",
             "txt_in.c_embedder.linear_2");
    lora_add(t, &n, &m->ref_proj_in, "context_embedder.proj_in", "txt_in.input_embedder");
    lora_add(t, &n, &m->byt5_1, "context_embedder_2.linear_1", "byt5_in.fc1");
    lora_add(t, &n, &m->byt5_2, "context_embedder_2.linear_2", "byt5_in.fc2");
    lora_add(t, &n, &m->byt5_3, "context_embedder_2.linear_3", "byt5_in.fc3");
    lora_add(t, &n, &m->img_1, "image_embedder.linear_1", "vision_in.proj.1");
    lora_add(t, &n, &m->img_2, "image_embedder.linear_2", "vision_in.proj.3");
    lora_add(t, &n, &m->norm_out, "norm_out.linear", "");
    lora_add(t, &n, &m->proj_out, "proj_out", "final_layer.linear");
    CVX_CHECK(n <= cap);
    *out = t;
    return n;
}

/* ------------------------------------------------------------------ conditioning tensors */

/* t: [1, n, width] float (width 0: [1, n] of any numeric dtype); *n_io: the length (set when < 0). */
static int check_rows(const char *file, const char *prefix, const char *name, const cvx_tensor *t, int width,
                      const char *what, int *n_io) {
    char got[128];
    if (!t) return cvx_error("%s: tensor '%s%s' is missing", file, prefix, name);
    cvx_shape_str(t->ndim, t->shape, got, sizeof got);
    if (width && !cvx_dtype_is_float(t->dtype))
        return cvx_error("%s: tensor '%s%s' has dtype %s, expected a float dtype", file, prefix, name,
                         cvx_dtype_name(t->dtype));
    if (t->ndim != (width ? 3 : 2) || t->shape[0] != 1 || (width && t->shape[2] != width) || t->shape[1] < 1 ||
        t->shape[1] > 1 << 20 || (*n_io >= 0 && t->shape[1] != *n_io)) {
        char want[96];
        if (width && *n_io >= 0) snprintf(want, sizeof want, "[1, %d, %d]", *n_io, width);
        else if (width) snprintf(want, sizeof want, "[1, L, %d]", width);
        else snprintf(want, sizeof want, "[1, %d]", *n_io);
        return cvx_error("%s: tensor '%s%s' has shape %s, expected %s (%s of the HunyuanVideo-1.5 transformer)", file,
                         prefix, name, got, want, what);
    }
    *n_io = (int)t->shape[1];
    return 0;
}

int hv15_check_conditioning(const hv15_config *c, const char *prefix, const cvx_tensor *embeds, const cvx_tensor *mask,
                            const cvx_tensor *embeds2, const cvx_tensor *mask2, const cvx_tensor *image,
                            const char *file) {
    int L = -1, L2 = -1, Li = -1;
    if (check_rows(file, prefix, "prompt_embeds", embeds, c->text_embed_dim, "text_embed_dim: the MLLM width", &L) ||
        check_rows(file, prefix, "prompt_embeds_mask", mask, 0, "one entry per MLLM row", &L) ||
        check_rows(file, prefix, "prompt_embeds_2", embeds2, c->text_embed_2_dim, "text_embed_2_dim: the ByT5 width",
                   &L2) ||
        check_rows(file, prefix, "prompt_embeds_mask_2", mask2, 0, "one entry per ByT5 row", &L2))
        return -1;
    if (image && check_rows(file, "", "image_embeds", image, c->image_embed_dim, "image_embed_dim: the SigLIP width",
                            &Li))
        return -1;
    return 0;
}

const hv15_config *hv15_get_config(const hv15_transformer *m) { return &m->c; }
cvx_ctx *hv15_ctx(const hv15_transformer *m) { return m->ctx; }
void hv15_set_full_text(hv15_transformer *m, int on) { m->full_text = on != 0; }
hv15_stats hv15_get_stats(const hv15_transformer *m) { return m->stats; }
void hv15_reset_stats(hv15_transformer *m) { memset(&m->stats, 0, sizeof m->stats); }
