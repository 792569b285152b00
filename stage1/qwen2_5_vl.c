/* Qwen2.5-VL text model and the Qwen2-VL chat template; see qwen2_5_vl.h and the golden_hv15
 * README section 1. */
#include "qwen2_5_vl.h"

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

static int read_config(qwen_config *c, const cvx_config *j, const char *path) {
    int64_t D, I, L, H, KV, V, hd;
    double eps, theta;
    if (cvx_cfg_int(j, "hidden_size", &D) || cvx_cfg_int(j, "intermediate_size", &I) ||
        cvx_cfg_int(j, "num_hidden_layers", &L) || cvx_cfg_int(j, "num_attention_heads", &H) ||
        cvx_cfg_int(j, "num_key_value_heads", &KV) || cvx_cfg_int(j, "vocab_size", &V) ||
        cvx_cfg_num_or(j, "rms_norm_eps", 1e-6, &eps) || cvx_cfg_num_or(j, "rope_theta", 1000000.0, &theta))
        return -1;
    const struct { const char *key; int64_t v, hi; } chk[] = {
        {"hidden_size", D, 1 << 16}, {"intermediate_size", I, 1 << 20}, {"num_hidden_layers", L, 4096},
        {"num_attention_heads", H, 4096}, {"num_key_value_heads", KV, 4096}, {"vocab_size", V, 1 << 24}};
    for (size_t i = 0; i < sizeof chk / sizeof chk[0]; i++)
        if (chk[i].v < 1 || chk[i].v > chk[i].hi)
            return cvx_error("%s: key '%s' must be an integer in [1, %lld], got %lld", path, chk[i].key,
                             (long long)chk[i].hi, (long long)chk[i].v);
    if (D % H) return cvx_error("%s: hidden_size %lld is not a multiple of num_attention_heads %lld", path, (long long)D, (long long)H);
    if (H % KV)
        return cvx_error("%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld", path,
                         (long long)H, (long long)KV);
    hd = D / H;
    if (hd % 2) return cvx_error("%s: head dim %lld (hidden_size / num_attention_heads) must be even", path, (long long)hd);
    if (!(eps > 0 && eps < 1)) return cvx_error("%s: key 'rms_norm_eps' must be in (0, 1), got %g", path, eps);
    if (!(theta > 1 && theta < 1e12)) return cvx_error("%s: key 'rope_theta' must be in (1, 1e12), got %g", path, theta);
    /* rope_scaling.mrope_section: how the half-dims split over (t, h, w); on text all three agree */
    int sec[3] = {(int)hd / 2, 0, 0};
    json_object *rs, *ms;
    if (json_object_object_get_ex(j->root, "rope_scaling", &rs) && json_object_is_type(rs, json_type_object) &&
        json_object_object_get_ex(rs, "mrope_section", &ms) && !json_object_is_type(ms, json_type_null)) {
        int ok = json_object_is_type(ms, json_type_array) && json_object_array_length(ms) == 3, sum = 0;
        for (int i = 0; ok && i < 3; i++) {
            json_object *e = json_object_array_get_idx(ms, (size_t)i);
            ok = json_object_is_type(e, json_type_int) && json_object_get_int64(e) >= 0 && json_object_get_int64(e) <= hd;
            if (ok) sum += (sec[i] = (int)json_object_get_int64(e));
        }
        if (!ok || sum != hd / 2)
            return cvx_error("%s: key 'rope_scaling.mrope_section' must be 3 non-negative integers summing to head "
                             "dim / 2 = %lld", path, (long long)hd / 2);
    }
    *c = (qwen_config){(int)D, (int)I, (int)L, (int)H, (int)KV, (int)hd, (int)V, (float)eps, theta, {sec[0], sec[1], sec[2]}};
    return 0;
}

int qwen_config_load(qwen_config *c, const char *path) {
    cvx_config cfg;
    if (cvx_config_load(&cfg, path)) return -1;
    cvx_config sub = {0};
    const cvx_config *use = &cfg;
    json_object *tc = NULL;
    if (json_object_object_get_ex(cfg.root, "text_config", &tc) && json_object_is_type(tc, json_type_object) &&
        !json_object_object_get_ex(cfg.root, "hidden_size", NULL)) {
        sub.root = tc;   /* borrowed from cfg */
        snprintf(sub.path, sizeof sub.path, "%.4000s: text_config", path);
        use = &sub;
    }
    const int rc = cvx_check_model_config(use) ? -1 : read_config(c, use, use->path);
    cvx_config_free(&cfg);
    return rc;
}

/* ---- weights ---- */

void qwen_llama_name(const char *hf, char *out, size_t n) {
    static const char *const map[][2] = {
        {"self_attn.q_proj.", "attn_q."}, {"self_attn.k_proj.", "attn_k."}, {"self_attn.v_proj.", "attn_v."},
        {"self_attn.o_proj.", "attn_output."}, {"mlp.gate_proj.", "ffn_gate."}, {"mlp.up_proj.", "ffn_up."},
        {"mlp.down_proj.", "ffn_down."}, {"input_layernorm.", "attn_norm."}, {"post_attention_layernorm.", "ffn_norm."}};
    int layer, used = 0;
    if (!strcmp(hf, "embed_tokens.weight")) snprintf(out, n, "token_embd.weight");
    else if (!strcmp(hf, "norm.weight")) snprintf(out, n, "output_norm.weight");
    else if (sscanf(hf, "layers.%d.%n", &layer, &used) == 1 && used > 0) {
        const char *rest = hf + used;
        for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
            const size_t l = strlen(map[i][0]);
            if (!strncmp(rest, map[i][0], l)) {
                snprintf(out, n, "blk.%d.%s%s", layer, map[i][1], rest + l);
                return;
            }
        }
        snprintf(out, n, "%s", hf);
    } else
        snprintf(out, n, "%s", hf);
}

static const cvx_tensor *get(const qwen_model *m, const char *name, const int64_t *shape, int ndim) {
    char n[320];
    if (m->llama_names) qwen_llama_name(name, n, sizeof n);
    else snprintf(n, sizeof n, "%s%s", m->prefix, name);
    return cvx_weights_get(m->weights, n, shape, ndim);
}

static float *get_f32(const qwen_model *m, const char *name, const int64_t *shape, int ndim) {
    const cvx_tensor *t = get(m, name, shape, ndim);
    return t ? cvx_tensor_f32_dup(t) : NULL;
}

static int load_layer(qwen_model *m, int i, qwen_layer *l) {
    const qwen_config *c = &m->cfg;
    const int64_t D = c->hidden_size, I = c->intermediate_size, Q = (int64_t)c->num_heads * c->head_dim,
                  K = (int64_t)c->num_kv_heads * c->head_dim;
    char n[256];
#define NAME(fmt) (snprintf(n, sizeof n, "layers.%d." fmt, i), n)
    if (!(l->q_w = get(m, NAME("self_attn.q_proj.weight"), CVX_SHAPE(Q, D))) ||
        !(l->q_b = get(m, NAME("self_attn.q_proj.bias"), CVX_SHAPE(Q))) ||
        !(l->k_w = get(m, NAME("self_attn.k_proj.weight"), CVX_SHAPE(K, D))) ||
        !(l->k_b = get(m, NAME("self_attn.k_proj.bias"), CVX_SHAPE(K))) ||
        !(l->v_w = get(m, NAME("self_attn.v_proj.weight"), CVX_SHAPE(K, D))) ||
        !(l->v_b = get(m, NAME("self_attn.v_proj.bias"), CVX_SHAPE(K))) ||
        !(l->o_w = get(m, NAME("self_attn.o_proj.weight"), CVX_SHAPE(D, Q))) ||
        !(l->gate = get(m, NAME("mlp.gate_proj.weight"), CVX_SHAPE(I, D))) ||
        !(l->up = get(m, NAME("mlp.up_proj.weight"), CVX_SHAPE(I, D))) ||
        !(l->down = get(m, NAME("mlp.down_proj.weight"), CVX_SHAPE(D, I))) ||
        !(l->ln_in = get_f32(m, NAME("input_layernorm.weight"), CVX_SHAPE(D))) ||
        !(l->ln_post = get_f32(m, NAME("post_attention_layernorm.weight"), CVX_SHAPE(D))))
        return -1;
#undef NAME
    return 0;
}

static int build(qwen_model *m, int max_layers, cvx_ctx *ctx) {
    const qwen_config *c = &m->cfg;
    static const char *const prefixes[] = {"", "model.", "language_model.", "model.language_model."};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        snprintf(m->prefix, sizeof m->prefix, "%s", prefixes[i]);
        char n[128];
        snprintf(n, sizeof n, "%sembed_tokens.weight", m->prefix);
        if (cvx_weights_find(m->weights, n)) break;
        m->prefix[0] = 0;
    }
    m->llama_names = !m->prefix[0] && !cvx_weights_find(m->weights, "embed_tokens.weight") &&
                     cvx_weights_find(m->weights, "token_embd.weight");
    if (!(m->embed = get(m, "embed_tokens.weight", CVX_SHAPE(-1, c->hidden_size)))) return -1;
    m->n_loaded = max_layers < 0 || max_layers > c->num_layers ? c->num_layers : max_layers;
    m->layers = cvx_calloc((size_t)m->n_loaded + 1, sizeof *m->layers);
    for (int i = 0; i < m->n_loaded; i++)
        if (load_layer(m, i, &m->layers[i])) return -1;
    if (m->n_loaded == c->num_layers && !(m->norm = get_f32(m, "norm.weight", CVX_SHAPE(c->hidden_size)))) return -1;
    m->owns_ctx = ctx == NULL;   /* set last: nothing to free on failure */
    m->ctx = ctx ? ctx : cvx_ctx_new(cvx_threads());
    return 0;
}

int qwen_load_file(qwen_model *m, const char *weights_path, const char *config_path, int max_layers, cvx_ctx *ctx) {
    memset(m, 0, sizeof *m);
    if (qwen_config_load(&m->cfg, config_path) || !(m->weights = cvx_weights_open(weights_path)) ||
        build(m, max_layers, ctx)) {
        qwen_free(m);
        return -1;
    }
    return 0;
}

int qwen_load(qwen_model *m, const char *dir, int max_layers, cvx_ctx *ctx) {
    char path[4096];
    memset(m, 0, sizeof *m);
    if (!cvx_is_dir(dir)) return cvx_error("%s: text encoder directory not found", dir);
    if (cvx_path_join(path, sizeof path, dir, "config.json")) return cvx_error("%s: path too long", dir);
    return qwen_load_file(m, dir, path, max_layers, ctx);
}

void qwen_free(qwen_model *m) {
    if (m->layers)
        for (int i = 0; i < m->n_loaded; i++) free(m->layers[i].ln_in), free(m->layers[i].ln_post);
    free(m->layers);
    free(m->norm);
    if (m->weights) cvx_weights_close(m->weights);
    if (m->owns_ctx) cvx_ctx_free(m->ctx);
    memset(m, 0, sizeof *m);
}

/* ---- blocks ---- */

void qwen_rope_tables(const qwen_config *c, int S, float *cos_t, float *sin_t) {
    const int hd = c->head_dim, half = hd / 2;
    float *inv = cvx_malloc((size_t)half * sizeof *inv);
    /* inv_freq = 1 / θ^(arange(0, hd, 2) / hd), each step in float32 */
    for (int j = 0; j < half; j++) inv[j] = 1.0f / (float)pow(c->rope_theta, (double)((float)(2 * j) / (float)hd));
    /* mrope: half-dim j takes its angle from position row t, h or w by mrope_section; on text the
     * rows are equal, so every j uses the position itself */
    for (int p = 0; p < S; p++)
        for (int j = 0; j < half; j++) {
            const float a = inv[j] * (float)p;
            const float cs = cosf(a), sn = sinf(a);
            cos_t[(size_t)p * hd + j] = cos_t[(size_t)p * hd + j + half] = cs;
            sin_t[(size_t)p * hd + j] = sin_t[(size_t)p * hd + j + half] = sn;
        }
    free(inv);
}

void qwen_scratch_alloc(qwen_scratch *s, const qwen_config *c, int S) {
    const size_t D = (size_t)c->hidden_size, Q = (size_t)c->num_heads * c->head_dim,
                 K = (size_t)c->num_kv_heads * c->head_dim, I = (size_t)c->intermediate_size;
    memset(s, 0, sizeof *s);
    s->S = S;
    s->h = cvx_alloc_f32((size_t)S * D);
    s->q = cvx_alloc_f32((size_t)S * Q);
    s->k = cvx_alloc_f32((size_t)S * K);
    s->v = cvx_alloc_f32((size_t)S * K);
    s->a = cvx_alloc_f32((size_t)S * Q);
    s->y = cvx_alloc_f32((size_t)S * D);
    s->g = cvx_alloc_f32((size_t)S * I);
    s->u = cvx_alloc_f32((size_t)S * I);
    s->bias = cvx_alloc_f32((size_t)S * S);
    s->cos = cvx_alloc_f32((size_t)S * c->head_dim);
    s->sin = cvx_alloc_f32((size_t)S * c->head_dim);
    qwen_rope_tables(c, S, s->cos, s->sin);
}

void qwen_scratch_free(qwen_scratch *s) {
    free(s->h), free(s->q), free(s->k), free(s->v), free(s->a), free(s->y), free(s->g), free(s->u);
    free(s->bias), free(s->cos), free(s->sin);
    memset(s, 0, sizeof *s);
}

void qwen_build_mask(const int64_t *mask, int S, float *bias) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < S; i++) {
        float *b = bias + (size_t)i * S;
        int any = 0;
        for (int j = 0; j < S; j++) {
            const int ok = j <= i && (!mask || mask[j]);
            b[j] = ok ? 0.0f : -INFINITY;
            any |= ok;
        }
        if (!any)   /* sdpa_mask_older_torch: causal_mask |= all(~causal_mask, -1) */
            for (int j = 0; j < S; j++) b[j] = 0.0f;
    }
}

int qwen_embed(const qwen_model *m, const int64_t *ids, int S, float *x) {
    return cvx_tensor_gather_rows(m->embed, ids, S, x);
}

/* x·cos + rotate_half(x)·sin per head, rotate_half(x) = [−x2, x1] (x1, x2 the halves). x: [S, heads·hd]. */
static void apply_rope(float *x, int S, int heads, int hd, const float *cos_t, const float *sin_t) {
    const int half = hd / 2;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < S; p++)
        for (int h = 0; h < heads; h++) {
            float *v = x + ((size_t)p * heads + h) * hd;
            const float *c = cos_t + (size_t)p * hd, *s = sin_t + (size_t)p * hd;
            for (int j = 0; j < half; j++) {
                const float x1 = v[j], x2 = v[j + half];
                v[j] = x1 * c[j] + (-x2) * s[j];
                v[j + half] = x2 * c[j + half] + x1 * s[j + half];
            }
        }
}

static void attention(const qwen_model *m, const qwen_layer *l, float *x, qwen_scratch *s) {
    const qwen_config *c = &m->cfg;
    const int S = s->S, D = c->hidden_size, H = c->num_heads, KV = c->num_kv_heads, hd = c->head_dim;
    const int Q = H * hd, K = KV * hd, rep = H / KV;
    cvx_rmsnorm(s->h, x, S, D, l->ln_in, c->rms_norm_eps);                   // [S, D]
    cvx_linear(m->ctx, s->h, S, D, l->q_w, l->q_b, s->q);                     // [S, H·hd]
    cvx_linear(m->ctx, s->h, S, D, l->k_w, l->k_b, s->k);                     // [S, KV·hd]
    cvx_linear(m->ctx, s->h, S, D, l->v_w, l->v_b, s->v);                     // [S, KV·hd]
    apply_rope(s->q, S, H, hd, s->cos, s->sin);
    apply_rope(s->k, S, KV, hd, s->cos, s->sin);
    /* GQA: query head h reads K/V head h / rep (repeat_kv), through the row strides */
    for (int h = 0; h < H; h++)
        cvx_attention_ctx(m->ctx, s->q + h * hd, Q, s->k + (h / rep) * hd, s->v + (h / rep) * hd, K, s->a + h * hd, Q,
                          S, S, 1, hd, 1.0f / sqrtf((float)hd), s->bias);
    cvx_flops_add(m->ctx, 4.0 * S * (double)S * Q);                           // q·kᵀ and p·v
    cvx_linear(m->ctx, s->a, S, Q, l->o_w, NULL, s->y);                       // [S, D]
    cvx_add(x, s->y, (size_t)S * D);
}

static void mlp(const qwen_model *m, const qwen_layer *l, float *x, qwen_scratch *s) {
    const qwen_config *c = &m->cfg;
    const int S = s->S, D = c->hidden_size, I = c->intermediate_size;
    cvx_rmsnorm(s->h, x, S, D, l->ln_post, c->rms_norm_eps);                 // [S, D]
    cvx_linear(m->ctx, s->h, S, D, l->gate, NULL, s->g);                      // [S, I]
    cvx_linear(m->ctx, s->h, S, D, l->up, NULL, s->u);                        // [S, I]
    cvx_silu(s->g, (size_t)S * I);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < (size_t)S * I; i++) s->g[i] *= s->u[i];          // silu(gate) · up
    cvx_linear(m->ctx, s->g, S, I, l->down, NULL, s->y);                      // [S, D]
    cvx_add(x, s->y, (size_t)S * D);
}

void qwen_layer_forward(const qwen_model *m, const qwen_layer *l, float *x, qwen_scratch *s) {
    attention(m, l, x, s);
    mlp(m, l, x, s);
}

int qwen_hidden_state(const qwen_model *m, const int64_t *ids, const int64_t *mask, int S, int index, float *out) {
    const qwen_config *c = &m->cfg;
    const int top = m->n_loaded == c->num_layers && m->norm ? c->num_layers : m->n_loaded;
    if (index < 0 || index > top)
        return cvx_error("qwen text model: hidden state %d requested, %d available (0 .. %d)", index, top + 1, top);
    if (S < 1) return cvx_error("qwen text model: empty sequence");
    if (qwen_embed(m, ids, S, out)) return -1;
    qwen_scratch s;
    qwen_scratch_alloc(&s, c, S);
    qwen_build_mask(mask, S, s.bias);
    const int n = index < c->num_layers ? index : c->num_layers;
    for (int l = 0; l < n; l++) qwen_layer_forward(m, &m->layers[l], out, &s);
    if (index == c->num_layers) cvx_rmsnorm(out, out, S, c->hidden_size, m->norm, c->rms_norm_eps);
    qwen_scratch_free(&s);
    return 0;
}

/* ---- chat template ---- */

char *qwen_chat_render(const char *system, const char *user) {
    static const char *const parts[] = {"<|im_start|>system\n", "<|im_end|>\n<|im_start|>user\n",
                                        "<|im_end|>\n<|im_start|>assistant\n"};
    const size_t n = strlen(parts[0]) + strlen(system) + strlen(parts[1]) + strlen(user) + strlen(parts[2]);
    char *r = cvx_malloc(n + 1);
    snprintf(r, n + 1, "%s%s%s%s%s", parts[0], system, parts[1], user, parts[2]);
    return r;
}

int qwen_chat_tokens(const bpe_tokenizer *t, const char *system, const char *user, int max_len, int64_t *ids,
                     int64_t *mask, int *n_raw) {
    const int pad = bpe_pad_id(t);
    if (pad < 0) return cvx_error("tokenizer: padding to max_length needs a pad_token; the tokenizer has none");
    char *text = qwen_chat_render(system, user);
    int64_t *all;
    int n;
    const int rc = bpe_encode(t, text, &all, &n);
    free(text);
    if (rc) return -1;
    for (int i = 0; i < max_len; i++) {
        ids[i] = i < n ? all[i] : pad;
        mask[i] = i < n;
    }
    if (n_raw) *n_raw = n;
    free(all);
    return 0;
}

/* HunyuanVideo15Pipeline.__init__'s system_message: a string continued over lines, so each
 * "N." is preceded by the 8 spaces of the source's indentation. */
const char *const hv15_system_message =
    "You are a helpful assistant. Describe the video by detailing the following aspects:         "
    "1. The main content and theme of the video.         "
    "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects.         "
    "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects.         "
    "4. background environment, light, style and atmosphere.         "
    "5. camera angles, movements, and transitions used in the video.";

int hv15_mllm_tokens(const bpe_tokenizer *t, const char *prompt, int64_t *ids, int64_t *mask, int *n_raw) {
    return qwen_chat_tokens(t, hv15_system_message, prompt && prompt[0] ? prompt : " ",
                            HV15_MLLM_CROP_START + HV15_MLLM_MAX_LENGTH, ids, mask, n_raw);
}

int hv15_mllm_prompt_embeds(const qwen_model *m, const bpe_tokenizer *t, const char *prompt, float *embeds,
                            int64_t *mask) {
    enum { C = HV15_MLLM_CROP_START, S = HV15_MLLM_CROP_START + HV15_MLLM_MAX_LENGTH };
    const int L = m->cfg.num_layers, D = m->cfg.hidden_size, index = L - HV15_MLLM_SKIP_LAYERS;
    if (index < 0) return cvx_error("qwen text model: %d layers; HunyuanVideo-1.5 reads hidden_states[-3]", L);
    if (m->n_loaded < index)
        return cvx_error("qwen text model: %d layers loaded, hidden_states[%d] needs %d", m->n_loaded, index, index);
    int64_t *ids = cvx_malloc(2 * S * sizeof *ids), *full_mask = ids + S;
    float *h = cvx_alloc_f32((size_t)S * D);
    int rc = hv15_mllm_tokens(t, prompt, ids, full_mask, NULL) || qwen_hidden_state(m, ids, full_mask, S, index, h);
    if (!rc) {
        memcpy(embeds, h + (size_t)C * D, sizeof(float) * (size_t)(S - C) * D);
        memcpy(mask, full_mask + C, sizeof(int64_t) * (S - C));
    }
    free(ids), free(h);
    return rc ? -1 : 0;
}
