/* CLIP vision encoder (transformers CLIPVisionModel); see clip_vision.h and the golden
 * README section 8 (Wan I2V: image_embeds = hidden_states[-2]). */
#include "clip_vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "ops.h"
#include "validate.h"

/* ---- config ---- */

/* The keys live at the top level (CLIPVisionConfig) or under "vision_config" (CLIPConfig). */
static int read_config(clip_vision_config *c, const cvx_config *j, const char *path, int siglip) {
    int64_t D, I, L, H, C, img, p;
    double eps;
    const char *act;
    if (cvx_cfg_int(j, "hidden_size", &D) || cvx_cfg_int(j, "intermediate_size", &I) ||
        cvx_cfg_int(j, "num_hidden_layers", &L) || cvx_cfg_int(j, "num_attention_heads", &H) ||
        /* CLIPVisionConfig's / SiglipVisionConfig's defaults for the rest */
        cvx_cfg_int_or(j, "num_channels", 3, &C) || cvx_cfg_int_or(j, "image_size", 224, &img) ||
        cvx_cfg_int_or(j, "patch_size", siglip ? 16 : 32, &p) ||
        cvx_cfg_num_or(j, "layer_norm_eps", siglip ? 1e-6 : 1e-5, &eps) ||
        cvx_cfg_str_or(j, "hidden_act", siglip ? "gelu_pytorch_tanh" : "quick_gelu", &act))
        return -1;
    const struct { const char *key; int64_t v, hi; } chk[] = {
        {"hidden_size", D, 1 << 16}, {"intermediate_size", I, 1 << 18}, {"num_hidden_layers", L, 4096},
        {"num_attention_heads", H, 4096}, {"num_channels", C, 3}, {"image_size", img, 4096}, {"patch_size", p, 4096}};
    for (size_t i = 0; i < sizeof chk / sizeof chk[0]; i++)
        if (chk[i].v < 1 || chk[i].v > chk[i].hi)
            return cvx_error("%s: key '%s' must be an integer in [1, %lld], got %lld", path, chk[i].key,
                             (long long)chk[i].hi, (long long)chk[i].v);
    if (C != 3) return cvx_error("%s: key 'num_channels' is %lld; only RGB (3) is implemented", path, (long long)C);
    if (D % H) return cvx_error("%s: hidden_size %lld is not a multiple of num_attention_heads %lld", path, (long long)D, (long long)H);
    if (p > img) return cvx_error("%s: patch_size %lld exceeds image_size %lld", path, (long long)p, (long long)img);
    if (!(eps > 0 && eps < 1)) return cvx_error("%s: key 'layer_norm_eps' must be in (0, 1), got %g", path, eps);
    clip_activation a;
    if (!strcmp(act, "gelu")) a = CLIP_ACT_GELU;
    else if (!strcmp(act, "quick_gelu")) a = CLIP_ACT_QUICK_GELU;
    else if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh")) a = CLIP_ACT_GELU_TANH;
    else
        return cvx_error("%s: key 'hidden_act' is \"%s\"; supported: \"gelu\", \"quick_gelu\", \"gelu_new\", "
                         "\"gelu_pytorch_tanh\"", path, act);
    const int g = (int)(img / p);
    *c = (clip_vision_config){(int)D, (int)I, (int)L, (int)H, (int)C, (int)img, (int)p, (float)eps, a, g,
                              g * g + !siglip, siglip};
    return 0;
}

int clip_vision_config_load(clip_vision_config *c, const char *path) {
    cvx_config cfg;
    if (cvx_config_load(&cfg, path)) return -1;
    cvx_config sub = {0};
    const cvx_config *use = &cfg;
    json_object *vc = NULL, *mt = NULL;
    /* SigLIP by model_type: "siglip_vision_model", or "siglip" for a full SiglipConfig */
    const int siglip = json_object_object_get_ex(cfg.root, "model_type", &mt) && json_object_is_type(mt, json_type_string) &&
                       !strncmp(json_object_get_string(mt), "siglip", 6);
    if (json_object_object_get_ex(cfg.root, "vision_config", &vc) && json_object_is_type(vc, json_type_object)) {
        sub.root = vc;   /* borrowed from cfg */
        snprintf(sub.path, sizeof sub.path, "%.4000s: vision_config", path);
        use = &sub;
    }
    /* ranges before anything is sized from them */
    const int rc = cvx_check_model_config(use) ? -1 : read_config(c, use, use->path, siglip);
    cvx_config_free(&cfg);
    return rc;
}

/* ---- weights ---- */

/* A small weight widened to a fresh f32 buffer (norms, embeddings). */
static float *get_f32(const cvx_weights *w, const char *name, const int64_t *shape, int ndim) {
    const cvx_tensor *t = cvx_weights_get(w, name, shape, ndim);
    return t ? cvx_tensor_f32_dup(t) : NULL;
}

static int load_layer(clip_vision *m, int i, clip_vision_layer *l) {
    const cvx_weights *w = m->weights;
    const int64_t D = m->cfg.hidden_size, I = m->cfg.intermediate_size;
    char n[256];
#define NAME(fmt) (snprintf(n, sizeof n, "vision_model.encoder.layers.%d." fmt, i), n)
    if (!(l->q_w = cvx_weights_get(w, NAME("self_attn.q_proj.weight"), CVX_SHAPE(D, D))) ||
        !(l->q_b = cvx_weights_get(w, NAME("self_attn.q_proj.bias"), CVX_SHAPE(D))) ||
        !(l->k_w = cvx_weights_get(w, NAME("self_attn.k_proj.weight"), CVX_SHAPE(D, D))) ||
        !(l->k_b = cvx_weights_get(w, NAME("self_attn.k_proj.bias"), CVX_SHAPE(D))) ||
        !(l->v_w = cvx_weights_get(w, NAME("self_attn.v_proj.weight"), CVX_SHAPE(D, D))) ||
        !(l->v_b = cvx_weights_get(w, NAME("self_attn.v_proj.bias"), CVX_SHAPE(D))) ||
        !(l->o_w = cvx_weights_get(w, NAME("self_attn.out_proj.weight"), CVX_SHAPE(D, D))) ||
        !(l->o_b = cvx_weights_get(w, NAME("self_attn.out_proj.bias"), CVX_SHAPE(D))) ||
        !(l->fc1_w = cvx_weights_get(w, NAME("mlp.fc1.weight"), CVX_SHAPE(I, D))) ||
        !(l->fc1_b = cvx_weights_get(w, NAME("mlp.fc1.bias"), CVX_SHAPE(I))) ||
        !(l->fc2_w = cvx_weights_get(w, NAME("mlp.fc2.weight"), CVX_SHAPE(D, I))) ||
        !(l->fc2_b = cvx_weights_get(w, NAME("mlp.fc2.bias"), CVX_SHAPE(D))) ||
        !(l->ln1_w = get_f32(w, NAME("layer_norm1.weight"), CVX_SHAPE(D))) ||
        !(l->ln1_b = get_f32(w, NAME("layer_norm1.bias"), CVX_SHAPE(D))) ||
        !(l->ln2_w = get_f32(w, NAME("layer_norm2.weight"), CVX_SHAPE(D))) ||
        !(l->ln2_b = get_f32(w, NAME("layer_norm2.bias"), CVX_SHAPE(D))))
        return -1;
#undef NAME
    return 0;
}

clip_vision *clip_vision_load(const char *dir, cvx_ctx *ctx) {
    char path[4096];
    if (!cvx_is_dir(dir)) {
        cvx_error("%s: image encoder directory not found", dir);
        return NULL;
    }
    if (cvx_path_join(path, sizeof path, dir, "config.json")) {
        cvx_error("%s: path too long", dir);
        return NULL;
    }
    clip_vision *m = cvx_calloc(1, sizeof *m);
    if (clip_vision_config_load(&m->cfg, path) || !(m->weights = cvx_weights_open(dir))) goto fail;
    const clip_vision_config *c = &m->cfg;
    const cvx_weights *w = m->weights;
    const int64_t D = c->hidden_size, p = c->patch_size;
    const cvx_tensor *pw = cvx_weights_get(w, "vision_model.embeddings.patch_embedding.weight", CVX_SHAPE(D, c->num_channels, p, p));
    if (!pw) goto fail;
    m->patch_w = *pw;                       /* the conv as a GEMM: [D, C·p·p] */
    m->patch_w.ndim = 2;
    m->patch_w.shape[1] = pw->numel / D;
    if (!(m->pos_emb = get_f32(w, "vision_model.embeddings.position_embedding.weight", CVX_SHAPE(c->tokens, D))))
        goto fail;
    if (c->siglip ? !(m->patch_b = cvx_weights_get(w, "vision_model.embeddings.patch_embedding.bias", CVX_SHAPE(D))) ||
                        !(m->post_ln_w = get_f32(w, "vision_model.post_layernorm.weight", CVX_SHAPE(D))) ||
                        !(m->post_ln_b = get_f32(w, "vision_model.post_layernorm.bias", CVX_SHAPE(D)))
                  : !(m->class_emb = get_f32(w, "vision_model.embeddings.class_embedding", CVX_SHAPE(D))) ||
                        !(m->pre_ln_w = get_f32(w, "vision_model.pre_layrnorm.weight", CVX_SHAPE(D))) ||
                        !(m->pre_ln_b = get_f32(w, "vision_model.pre_layrnorm.bias", CVX_SHAPE(D))))
        goto fail;
    m->layers = cvx_calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
    for (int i = 0; i < c->num_hidden_layers; i++)
        if (load_layer(m, i, &m->layers[i])) goto fail;
    m->owns_ctx = ctx == NULL;   /* set last: nothing to free on failure */
    m->ctx = ctx ? ctx : cvx_ctx_new(cvx_threads());
    return m;
fail:
    clip_vision_free(m);
    return NULL;
}

void clip_vision_free(clip_vision *m) {
    if (!m) return;
    if (m->layers)
        for (int i = 0; i < m->cfg.num_hidden_layers; i++) {
            clip_vision_layer *l = &m->layers[i];
            free(l->ln1_w), free(l->ln1_b), free(l->ln2_w), free(l->ln2_b);
        }
    free(m->layers);
    free(m->class_emb), free(m->pos_emb), free(m->pre_ln_w), free(m->pre_ln_b), free(m->post_ln_w), free(m->post_ln_b);
    if (m->weights) cvx_weights_close(m->weights);
    if (m->owns_ctx) cvx_ctx_free(m->ctx);
    free(m);
}

/* ---- blocks ---- */

void clip_vision_scratch_alloc(clip_vision_scratch *s, const clip_vision_config *c) {
    const size_t S = (size_t)c->tokens, D = (size_t)c->hidden_size;
    s->h = cvx_alloc_f32(S * D);
    s->q = cvx_alloc_f32(S * D);
    s->k = cvx_alloc_f32(S * D);
    s->v = cvx_alloc_f32(S * D);
    s->a = cvx_alloc_f32(S * D);
    s->y = cvx_alloc_f32(S * D);
    s->u = cvx_alloc_f32(S * (size_t)c->intermediate_size);
    s->patches = cvx_alloc_f32((size_t)c->grid * c->grid * c->num_channels * c->patch_size * c->patch_size);
}

void clip_vision_scratch_free(clip_vision_scratch *s) {
    free(s->h), free(s->q), free(s->k), free(s->v), free(s->a), free(s->y), free(s->u), free(s->patches);
    memset(s, 0, sizeof *s);
}

void clip_activation_apply(clip_activation act, float *x, size_t n) {
    if (act == CLIP_ACT_GELU_TANH) {
        cvx_gelu_tanh(x, n);
        return;
    }
    const float alpha = (float)M_SQRT1_2;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float v = x[i];
        if (act == CLIP_ACT_GELU) x[i] = v * 0.5f * (1.0f + erff(v * alpha));   /* nn.functional.gelu (erf) */
        else x[i] = v / (1.0f + expf(-(1.702f * v)));                          /* x·sigmoid(1.702x) */
    }
}

/* embeddings: patch conv (as a GEMM over p×p patches), class token first (CLIP), + position embedding. */
void clip_vision_embeddings(const clip_vision *m, const float *pixels, float *x, clip_vision_scratch *s) {
    const clip_vision_config *c = &m->cfg;
    const int D = c->hidden_size, p = c->patch_size, g = c->grid, C = c->num_channels, img = c->image_size;
    const int K = C * p * p, N = g * g;
    /* patches[gy·g + gx, (ch·p + ky)·p + kx] = pixels[ch, gy·p + ky, gx·p + kx] (the weight's order) */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const int gy = n / g, gx = n % g;
        for (int ch = 0; ch < C; ch++)
            for (int ky = 0; ky < p; ky++)
                memcpy(s->patches + (size_t)n * K + ((size_t)ch * p + ky) * p,
                       pixels + ((size_t)ch * img + (size_t)gy * p + ky) * img + (size_t)gx * p, sizeof(float) * (size_t)p);
    }
    if (c->siglip) {
        cvx_linear(m->ctx, s->patches, N, K, &m->patch_w, m->patch_b, x);     // [N, D]
    } else {
        cvx_linear(m->ctx, s->patches, N, K, &m->patch_w, NULL, x + D);       // [N, D] after the class row
        memcpy(x, m->class_emb, sizeof(float) * (size_t)D);                   // [1, D]
    }
    cvx_add(x, m->pos_emb, (size_t)c->tokens * D);                            // [S, D]
}

void clip_attention(const clip_vision *m, const clip_vision_layer *l, float *x, clip_vision_scratch *s) {
    const clip_vision_config *c = &m->cfg;
    const int S = c->tokens, D = c->hidden_size, H = c->num_attention_heads, hd = D / H;
    cvx_layernorm(s->h, x, S, D, l->ln1_w, l->ln1_b, c->layer_norm_eps);      // [S, D]
    cvx_linear(m->ctx, s->h, S, D, l->q_w, l->q_b, s->q);                     // [S, D]
    cvx_linear(m->ctx, s->h, S, D, l->k_w, l->k_b, s->k);                     // [S, D]
    cvx_linear(m->ctx, s->h, S, D, l->v_w, l->v_b, s->v);                     // [S, D]
    cvx_attention_ctx(m->ctx, s->q, D, s->k, s->v, D, s->a, D, S, S, H, hd, (float)pow(hd, -0.5), NULL);
    cvx_flops_add(m->ctx, 4.0 * S * (double)S * D);                           // q·kᵀ and p·v
    cvx_linear(m->ctx, s->a, S, D, l->o_w, l->o_b, s->y);                     // [S, D]
    cvx_add(x, s->y, (size_t)S * D);
}

void clip_mlp(const clip_vision *m, const clip_vision_layer *l, float *x, clip_vision_scratch *s) {
    const clip_vision_config *c = &m->cfg;
    const int S = c->tokens, D = c->hidden_size, I = c->intermediate_size;
    cvx_layernorm(s->h, x, S, D, l->ln2_w, l->ln2_b, c->layer_norm_eps);      // [S, D]
    cvx_linear(m->ctx, s->h, S, D, l->fc1_w, l->fc1_b, s->u);                 // [S, I]
    clip_activation_apply(c->act, s->u, (size_t)S * I);
    cvx_linear(m->ctx, s->u, S, I, l->fc2_w, l->fc2_b, s->y);                 // [S, D]
    cvx_add(x, s->y, (size_t)S * D);
}

void clip_encoder_layer(const clip_vision *m, const clip_vision_layer *l, float *x, clip_vision_scratch *s) {
    clip_attention(m, l, x, s);
    clip_mlp(m, l, x, s);
}

int clip_vision_hidden_state(clip_vision *m, const float *pixels, int index, float *out) {
    const clip_vision_config *c = &m->cfg;
    if (index < 0 || index > c->num_hidden_layers)
        return cvx_error("clip vision: hidden state %d requested, the model has %d layers (0 .. %d)", index,
                         c->num_hidden_layers, c->num_hidden_layers);
    for (size_t i = 0, n = (size_t)c->num_channels * c->image_size * c->image_size; i < n; i++)
        if (!isfinite(pixels[i])) return cvx_error("clip vision: pixel value %zu is not finite", i);
    clip_vision_scratch s;
    clip_vision_scratch_alloc(&s, c);
    float *x = out;                                                           // residual stream [S, D]
    clip_vision_embeddings(m, pixels, x, &s);
    if (!c->siglip) cvx_layernorm(x, x, c->tokens, c->hidden_size, m->pre_ln_w, m->pre_ln_b, c->layer_norm_eps);
    for (int l = 0; l < index; l++) clip_encoder_layer(m, &m->layers[l], x, &s);
    clip_vision_scratch_free(&s);
    return 0;
}

int clip_vision_encode(clip_vision *m, const float *pixels, float *out) {
    return clip_vision_hidden_state(m, pixels, m->cfg.num_hidden_layers - 1, out);
}

int clip_vision_last_hidden_state(clip_vision *m, const float *pixels, float *out) {
    const clip_vision_config *c = &m->cfg;
    if (clip_vision_hidden_state(m, pixels, c->num_hidden_layers, out)) return -1;
    if (c->siglip) cvx_layernorm(out, out, c->tokens, c->hidden_size, m->post_ln_w, m->post_ln_b, c->layer_norm_eps);
    return 0;
}

/* An RGB8 image through the image processor, then `encode`: [tokens, hidden_size] (allocated). */
static float *encode_rgb8(clip_vision *m, const clip_image_processor *p, const uint8_t *rgb, int w, int h,
                          int (*encode)(clip_vision *m, const float *pixels, float *out)) {
    int ow, oh;
    clip_image_output_size(p, w, h, &ow, &oh);
    float *px = cvx_alloc_f32((size_t)3 * ow * oh);
    clip_image_preprocess(p, rgb, w, h, px);
    float *out = cvx_alloc_f32((size_t)m->cfg.tokens * m->cfg.hidden_size);
    const int rc = encode(m, px, out);
    free(px);
    if (rc) {
        free(out);
        return NULL;
    }
    return out;
}

float *clip_vision_encode_rgb8(clip_vision *m, const clip_image_processor *p, const uint8_t *rgb, int w, int h) {
    return encode_rgb8(m, p, rgb, w, h, clip_vision_encode);
}

float *clip_vision_last_hidden_state_rgb8(clip_vision *m, const clip_image_processor *p, const uint8_t *rgb, int w,
                                          int h) {
    return encode_rgb8(m, p, rgb, w, h, clip_vision_last_hidden_state);
}
