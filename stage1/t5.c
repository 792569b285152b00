/* T5 v1.1 encoder (transformers T5EncoderModel), golden README section 2, and UMT5
 * (UMT5EncoderModel), golden_wan README section 2.
 *
 *   x = shared[ids]                                  (no scaling)
 *   per block:  x += o(attention(rmsnorm(x)))        (no 1/sqrt(d), + relative position bias)
 *               x += wo(gelu_tanh(wi_0 h) * wi_1 h), h = rmsnorm(x)
 *   out = final_layer_norm(x)
 * T5: the position bias belongs to block 0 and is shared by all blocks. UMT5: every block has
 * its own (same buckets). CogVideoX passes no attention mask (every position, padding included,
 * attends to every other); Wan passes it: padded keys get finfo(float32).min added. */
#include "t5.h"

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

/* ---- config and weights ---- */

int t5_config_load(t5_config *c, const char *path) {
    cvx_config cfg;
    if (cvx_config_load(&cfg, path)) return -1;
    if (cvx_check_model_config(&cfg)) {   /* ranges before anything is sized from them (issue 14) */
        cvx_config_free(&cfg);
        return -1;
    }
    int64_t d_model, d_kv, heads, d_ff, layers, vocab, buckets, max_dist;
    double eps;
    const char *ff, *model_type;
    int rc = -1;
    if (cvx_cfg_int(&cfg, "d_model", &d_model) || cvx_cfg_int(&cfg, "d_kv", &d_kv) ||
        cvx_cfg_int(&cfg, "num_heads", &heads) || cvx_cfg_int(&cfg, "d_ff", &d_ff) ||
        cvx_cfg_int(&cfg, "num_layers", &layers) || cvx_cfg_int(&cfg, "vocab_size", &vocab) ||
        /* transformers' T5Config defaults for the rest */
        cvx_cfg_int_or(&cfg, "relative_attention_num_buckets", 32, &buckets) ||
        cvx_cfg_int_or(&cfg, "relative_attention_max_distance", 128, &max_dist) ||
        cvx_cfg_num_or(&cfg, "layer_norm_epsilon", 1e-6, &eps) ||
        cvx_cfg_str_or(&cfg, "feed_forward_proj", "relu", &ff) || cvx_cfg_str_or(&cfg, "model_type", "", &model_type))
        goto done;
    const struct { const char *key; int64_t v, lo; } chk[] = {
        {"d_model", d_model, 1}, {"d_kv", d_kv, 1}, {"num_heads", heads, 1}, {"d_ff", d_ff, 1},
        {"num_layers", layers, 1}, {"vocab_size", vocab, 1}, {"relative_attention_num_buckets", buckets, 4},
        {"relative_attention_max_distance", max_dist, 2}};
    for (size_t i = 0; i < sizeof chk / sizeof chk[0]; i++)
        if (chk[i].v < chk[i].lo || chk[i].v > (1 << 24)) {
            cvx_error("%s: key '%s' must be an integer in [%lld, %d], got %lld", path, chk[i].key,
                      (long long)chk[i].lo, 1 << 24, (long long)chk[i].v);
            goto done;
        }
    if (strcmp(ff, "gated-gelu") != 0) {
        cvx_error("%s: key 'feed_forward_proj' is \"%s\"; only \"gated-gelu\" (T5 v1.1) is implemented", path, ff);
        goto done;
    }
    if ((double)max_dist / (double)(buckets / 4) <= 1.0) {
        cvx_error("%s: relative_attention_max_distance %lld must exceed num_buckets/4 = %lld", path,
                  (long long)max_dist, (long long)(buckets / 4));
        goto done;
    }
    *c = (t5_config){(int)d_model, (int)d_kv, (int)heads, (int)d_ff, (int)layers, (int)vocab,
                     (int)buckets, (int)max_dist, (float)eps,
                     model_type[0] ? strcmp(model_type, "umt5") == 0 : -1};
    rc = 0;
done:
    cvx_config_free(&cfg);
    return rc;
}

/* HF name pieces -> llama.cpp's, applied in order (the reverse of ComfyUI-GGUF's T5_SD_MAP). */
static const char *const LLAMA_T5_NAMES[][2] = {
    {"encoder.", "enc."},
    {".block.", ".blk."},
    {"shared.", "token_embd."},
    {"final_layer_norm", "output_norm"},
    {"layer.0.SelfAttention.relative_attention_bias", "attn_rel_b"},
    {"layer.0.SelfAttention.q", "attn_q"},
    {"layer.0.SelfAttention.k", "attn_k"},
    {"layer.0.SelfAttention.v", "attn_v"},
    {"layer.0.SelfAttention.o", "attn_o"},
    {"layer.0.layer_norm", "attn_norm"},
    {"layer.1.DenseReluDense.wi_0", "ffn_gate"},
    {"layer.1.DenseReluDense.wi_1", "ffn_up"},
    {"layer.1.DenseReluDense.wo", "ffn_down"},
    {"layer.1.layer_norm", "ffn_norm"},
};

void t5_llama_name(const char *hf, char *out, size_t n) {
    char a[512], b[512];
    snprintf(a, sizeof a, "%s", hf);
    for (size_t i = 0; i < sizeof LLAMA_T5_NAMES / sizeof LLAMA_T5_NAMES[0]; i++) {
        const char *from = LLAMA_T5_NAMES[i][0], *to = LLAMA_T5_NAMES[i][1], *p = strstr(a, from);
        if (!p) continue;
        snprintf(b, sizeof b, "%.*s%s%s", (int)(p - a), a, to, p + strlen(from));
        snprintf(a, sizeof a, "%s", b);
    }
    snprintf(out, n, "%s", a);
}

/* The file's name of the HF tensor `name`. */
static const char *key(const t5_model *m, const char *name, char *buf, size_t n) {
    if (!m->llama_names) return name;
    t5_llama_name(name, buf, n);
    return buf;
}

static const cvx_tensor *find(const t5_model *m, const char *name) {
    char k[512];
    return cvx_weights_find(m->weights, key(m, name, k, sizeof k));
}

static const cvx_tensor *get2(const t5_model *m, const char *name, int64_t r, int64_t c) {
    char k[512];
    return cvx_weights_get(m->weights, key(m, name, k, sizeof k), CVX_SHAPE(r, c));
}

/* A small weight ([r] when c == 0, else [r, c]) widened to a fresh f32 buffer (norm weights, position bias). */
static float *get_f32(const t5_model *m, const char *name, int64_t r, int64_t c) {
    char k[512];
    const char *kk = key(m, name, k, sizeof k);
    const cvx_tensor *t = c ? cvx_weights_get(m->weights, kk, CVX_SHAPE(r, c)) : cvx_weights_get(m->weights, kk, CVX_SHAPE(r));
    return t ? cvx_tensor_f32_dup(t) : NULL;
}

#define REL_BIAS_NAME "encoder.block.%d.layer.0.SelfAttention.relative_attention_bias.weight"

int t5_build(t5_model *m, const char *dir, cvx_ctx *ctx) {
    memset(m, 0, sizeof *m);
    char path[4096];
    if (!cvx_is_dir(dir)) return cvx_error("%s: text encoder directory not found", dir);
    if (cvx_path_join(path, sizeof path, dir, "config.json")) return cvx_error("%s: path too long", dir);
    return t5_build_file(m, dir, path, ctx);
}

int t5_build_file(t5_model *m, const char *weights_path, const char *config_path, cvx_ctx *ctx) {
    memset(m, 0, sizeof *m);
    if (t5_config_load(&m->cfg, config_path)) return -1;
    t5_config *c = &m->cfg;
    const int64_t D = c->d_model, inner = (int64_t)c->num_heads * c->d_kv;
    m->weights = cvx_weights_open(weights_path);
    if (!m->weights) return -1;
    const cvx_weights *w = m->weights;
    m->llama_names = cvx_weights_find(w, "token_embd.weight") != NULL;   /* llama.cpp / city96 GGUF */
    char n[256];
    if (c->per_block_bias < 0) {   /* no model_type: UMT5 if block 1 has a bias of its own */
        snprintf(n, sizeof n, REL_BIAS_NAME, 1);
        c->per_block_bias = c->num_layers > 1 && find(m, n) != NULL;
    }

    /* T5 ties encoder.embed_tokens to shared; checkpoints store either name. */
    const char *embed_name = find(m, "shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight";
    if (!find(m, embed_name)) {
        cvx_error("%s: no token embedding (looked for 'shared.weight', 'encoder.embed_tokens.weight' and llama.cpp's "
                  "'token_embd.weight')", cvx_weights_path(w));
        goto fail;
    }
    if (!(m->embed = get2(m, embed_name, c->vocab_size, D))) goto fail;
    if (!(m->rel_bias = get_f32(m, (snprintf(n, sizeof n, REL_BIAS_NAME, 0), n), c->num_buckets, c->num_heads)))
        goto fail;
    if (!(m->final_ln = get_f32(m, "encoder.final_layer_norm.weight", D, 0))) goto fail;

    m->blocks = cvx_calloc((size_t)c->num_layers, sizeof *m->blocks);
    for (int i = 0; i < c->num_layers; i++) {
        t5_block *b = &m->blocks[i];
#define NAME(fmt) (snprintf(n, sizeof n, "encoder.block.%d.layer." fmt, i), n)
        if (!(b->q = get2(m, NAME("0.SelfAttention.q.weight"), inner, D)) ||
            !(b->k = get2(m, NAME("0.SelfAttention.k.weight"), inner, D)) ||
            !(b->v = get2(m, NAME("0.SelfAttention.v.weight"), inner, D)) ||
            !(b->o = get2(m, NAME("0.SelfAttention.o.weight"), D, inner)) ||
            !(b->ln_attn = get_f32(m, NAME("0.layer_norm.weight"), D, 0)) ||
            !(b->wi_0 = get2(m, NAME("1.DenseReluDense.wi_0.weight"), c->d_ff, D)) ||
            !(b->wi_1 = get2(m, NAME("1.DenseReluDense.wi_1.weight"), c->d_ff, D)) ||
            !(b->wo = get2(m, NAME("1.DenseReluDense.wo.weight"), D, c->d_ff)) ||
            !(b->ln_ff = get_f32(m, NAME("1.layer_norm.weight"), D, 0)))
            goto fail;
        if (i > 0 && c->per_block_bias &&
            !(b->rel_bias = get_f32(m, NAME("0.SelfAttention.relative_attention_bias.weight"), c->num_buckets,
                                    c->num_heads)))
            goto fail;
#undef NAME
    }
    m->owns_ctx = ctx == NULL;   /* set last: nothing to free on failure */
    m->ctx = ctx ? ctx : cvx_ctx_new(cvx_threads());
    return 0;
fail:
    t5_free(m);
    return -1;
}

void t5_free(t5_model *m) {
    if (m->blocks)
        for (int i = 0; i < m->cfg.num_layers; i++) {
            free(m->blocks[i].ln_attn);
            free(m->blocks[i].ln_ff);
            free(m->blocks[i].rel_bias);
        }
    free(m->blocks);
    free(m->rel_bias);
    free(m->final_ln);
    if (m->weights) cvx_weights_close(m->weights);
    if (m->owns_ctx) cvx_ctx_free(m->ctx);
    memset(m, 0, sizeof *m);
}

/* ---- relative position bias ---- */

int t5_relative_position_bucket(int rel, int num_buckets, int max_distance) {
    /* Bidirectional: half the buckets for keys after the query, half for keys before. */
    const int nb = num_buckets / 2, max_exact = nb / 2;
    int bucket = rel > 0 ? nb : 0;
    const int n = rel < 0 ? -rel : rel;
    if (n < max_exact) return bucket + n;
    /* Logarithmic buckets up to max_distance, in float32 as upstream (torch.log on a float
     * tensor, then divided by a Python float and truncated toward zero). */
    const float lg = logf((float)n / (float)max_exact) / (float)log((double)max_distance / max_exact) *
                     (float)(nb - max_exact);
    int large = max_exact + (int)lg;
    return bucket + (large < nb - 1 ? large : nb - 1);
}

const float *t5_block_bias_table(const t5_model *m, const t5_block *blk) {
    return blk->rel_bias ? blk->rel_bias : m->rel_bias;
}

void t5_position_bias(const t5_model *m, const float *table, int S, float *bias) {
    const int H = m->cfg.num_heads;
    int *bucket = cvx_malloc((size_t)(2 * S - 1) * sizeof *bucket);   /* by rel + S - 1 */
    for (int r = -(S - 1); r <= S - 1; r++)
        bucket[r + S - 1] = t5_relative_position_bucket(r, m->cfg.num_buckets, m->cfg.max_distance);
#pragma omp parallel for
    for (int h = 0; h < H; h++)
        for (int i = 0; i < S; i++)
            for (int j = 0; j < S; j++)
                bias[((size_t)h * S + i) * S + j] = table[bucket[j - i + S - 1] * H + h];   // [H, S, S]
    free(bucket);
}

/* ---- blocks ---- */

void t5_scratch_alloc(t5_scratch *s, const t5_config *c, int M) {
    const size_t D = (size_t)c->d_model, inner = (size_t)c->num_heads * c->d_kv, F = (size_t)c->d_ff;
    s->h = cvx_alloc_f32((size_t)M * D);
    s->q = cvx_alloc_f32((size_t)M * inner);
    s->k = cvx_alloc_f32((size_t)M * inner);
    s->v = cvx_alloc_f32((size_t)M * inner);
    s->a = cvx_alloc_f32((size_t)M * inner);
    s->y = cvx_alloc_f32((size_t)M * D);
    s->g = cvx_alloc_f32((size_t)M * F);
    s->u = cvx_alloc_f32((size_t)M * F);
    s->mb = s->kk = s->vv = NULL;   /* for masked sequences, on first use */
}

void t5_scratch_free(t5_scratch *s) {
    free(s->h); free(s->q); free(s->k); free(s->v); free(s->a); free(s->y); free(s->g); free(s->u);
    free(s->mb); free(s->kk); free(s->vv);
    memset(s, 0, sizeof *s);
}

static int all_ones(const int64_t *mask, int S) {
    for (int j = 0; j < S; j++)
        if (!mask[j]) return 0;
    return 1;
}

/* One sequence's attention when some of its keys are masked. Upstream adds finfo(float32).min
 * to their scores, which gives them exactly zero weight: here only the kept keys (mask 1) enter
 * the softmax, with their own bias columns. With every key masked upstream's scores are all
 * finfo.min, equal, and each query averages all the values. q, k, v, a: [S, inner]. */
static void attention_masked(const t5_model *m, const float *bias, const int64_t *mask, const float *q,
                             const float *k, const float *v, float *a, int S, t5_scratch *s) {
    const int H = m->cfg.num_heads, hd = m->cfg.d_kv, inner = H * hd;
    if (!s->mb) {
        s->mb = cvx_alloc_f32((size_t)H * S * S);
        s->kk = cvx_alloc_f32((size_t)S * inner);
        s->vv = cvx_alloc_f32((size_t)S * inner);
    }
    int nk = 0;
    for (int j = 0; j < S; j++) {
        if (!mask[j]) continue;
        memcpy(s->kk + (size_t)nk * inner, k + (size_t)j * inner, (size_t)inner * sizeof *k);
        memcpy(s->vv + (size_t)nk * inner, v + (size_t)j * inner, (size_t)inner * sizeof *v);
        for (int r = 0; r < H * S; r++) s->mb[(size_t)r * S + nk] = bias[(size_t)r * S + j];   // column j -> nk
        nk++;
    }
    if (nk == 0) {
        for (int d = 0; d < inner; d++) {
            double sum = 0;
            for (int j = 0; j < S; j++) sum += v[(size_t)j * inner + d];
            for (int i = 0; i < S; i++) a[(size_t)i * inner + d] = (float)(sum / S);
        }
        return;
    }
    for (int r = 1; r < H * S; r++)   /* rows of stride S -> contiguous [H, S, nk] */
        memmove(s->mb + (size_t)r * nk, s->mb + (size_t)r * S, (size_t)nk * sizeof *s->mb);
    cvx_attention_ctx(m->ctx, q, inner, s->kk, s->vv, inner, a, inner, S, nk, H, hd, 1.0f, s->mb);   // [S, inner]
}

/* Linear layers go through cvx_linear, which widens a bf16/f16 matrix into one reused f32
 * scratch just before its GEMM. (Stacking q|k|v and wi_0|wi_1 into single GEMMs, with or
 * without cache-sized widening blocks, measured no faster on this machine, so the plain form
 * stays.) */
void t5_attention(const t5_model *m, const t5_block *blk, float *x, int B, int S, const float *bias,
                  const int64_t *mask, t5_scratch *s) {
    const t5_config *c = &m->cfg;
    const int M = B * S, D = c->d_model, H = c->num_heads, hd = c->d_kv, inner = H * hd;
    cvx_rmsnorm(s->h, x, M, D, blk->ln_attn, c->eps);                 // [M, D]
    cvx_linear(m->ctx, s->h, M, D, blk->q, NULL, s->q);                        // [M, inner]
    cvx_linear(m->ctx, s->h, M, D, blk->k, NULL, s->k);                        // [M, inner]
    cvx_linear(m->ctx, s->h, M, D, blk->v, NULL, s->v);                        // [M, inner]
    for (int b = 0; b < B; b++) {                                      // sequences never mix
        const size_t off = (size_t)b * S * inner;
        /* T5 does not scale the scores by 1/sqrt(d_kv) (folded into its initialisation). */
        if (mask && !all_ones(mask + (size_t)b * S, S))
            attention_masked(m, bias, mask + (size_t)b * S, s->q + off, s->k + off, s->v + off, s->a + off, S, s);
        else
            cvx_attention_ctx(m->ctx, s->q + off, inner, s->k + off, s->v + off, inner, s->a + off, inner, S, S, H, hd,
                              1.0f, bias);                             // [S, inner]
    }
    cvx_flops_add(m->ctx, 4.0 * S * (double)S * hd * H * B);              // q·kᵀ and p·v
    cvx_linear(m->ctx, s->a, M, inner, blk->o, NULL, s->y);                    // [M, D]
    cvx_add(x, s->y, (size_t)M * D);
}

void t5_feed_forward(const t5_model *m, const t5_block *blk, float *x, int B, int S, t5_scratch *s) {
    const t5_config *c = &m->cfg;
    const int M = B * S, D = c->d_model, F = c->d_ff;
    const size_t n = (size_t)M * F;
    cvx_rmsnorm(s->h, x, M, D, blk->ln_ff, c->eps);                   // [M, D]
    cvx_linear(m->ctx, s->h, M, D, blk->wi_0, NULL, s->g);                     // [M, F]
    cvx_linear(m->ctx, s->h, M, D, blk->wi_1, NULL, s->u);                     // [M, F]
    cvx_gelu_tanh(s->g, n);                                            // gelu_new
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) s->g[i] *= s->u[i];                 // [M, F]
    cvx_linear(m->ctx, s->g, M, F, blk->wo, NULL, s->y);                       // [M, D]
    cvx_add(x, s->y, (size_t)M * D);
}

void t5_layer(const t5_model *m, const t5_block *blk, float *x, int B, int S, const float *bias, const int64_t *mask,
              t5_scratch *s) {
    t5_attention(m, blk, x, B, S, bias, mask, s);
    t5_feed_forward(m, blk, x, B, S, s);
}

int t5_embed(const t5_model *m, const int64_t *ids, int M, float *x) {
    return cvx_tensor_gather_rows(m->embed, ids, M, x);
}

int t5_encode(const t5_model *m, const int64_t *ids, int B, int S, float *out, cvx_progress *progress) {
    return umt5_encode(m, ids, NULL, B, S, out, progress);
}

int umt5_encode(const t5_model *m, const int64_t *ids, const int64_t *mask, int B, int S, float *out,
                cvx_progress *progress) {
    const t5_config *c = &m->cfg;
    const int M = B * S, D = c->d_model;
    float *x = out;                                                    // residual stream [M, D]
    if (t5_embed(m, ids, M, x)) return -1;
    float *bias = cvx_alloc_f32((size_t)c->num_heads * S * S);         // [H, S, S]
    t5_scratch s;
    t5_scratch_alloc(&s, c, M);
    for (int l = 0; l < c->num_layers; l++) {
        const t5_block *blk = &m->blocks[l];
        if (l == 0 || blk->rel_bias) t5_position_bias(m, t5_block_bias_table(m, blk), S, bias);
        t5_layer(m, blk, x, B, S, bias, mask, &s);
        if (progress) cvx_progress_update(progress, progress->done + 1);
    }
    cvx_rmsnorm(x, x, M, D, m->final_ln, c->eps);                      // [M, D]
    t5_scratch_free(&s);
    free(bias);
    return 0;
}

int umt5_prompt_embeds(const t5_model *m, const int64_t *ids, const int64_t *seq_lens, int B, int L, float *out,
                       cvx_progress *progress) {
    const int D = m->cfg.d_model;
    int S = 0;                                                         // the longest prompt
    for (int b = 0; b < B; b++) {
        if (seq_lens[b] < 1 || seq_lens[b] > L)
            return cvx_error("prompt %d: seq_len %lld is outside [1, %d]", b, (long long)seq_lens[b], L);
        if (seq_lens[b] > S) S = (int)seq_lens[b];
    }
    int64_t *ids_s = cvx_malloc((size_t)B * S * sizeof *ids_s), *mask = cvx_malloc((size_t)B * S * sizeof *mask);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < S; j++) {
            ids_s[(size_t)b * S + j] = ids[(size_t)b * L + j];
            mask[(size_t)b * S + j] = j < seq_lens[b];
        }
    float *h = cvx_alloc_f32((size_t)B * S * D);                       // [B, S, D]
    const int rc = umt5_encode(m, ids_s, mask, B, S, h, progress);
    if (rc == 0)
        for (int b = 0; b < B; b++) {
            const size_t keep = (size_t)seq_lens[b] * D;
            memcpy(out + (size_t)b * L * D, h + (size_t)b * S * D, keep * sizeof *out);
            memset(out + (size_t)b * L * D + keep, 0, ((size_t)L * D - keep) * sizeof *out);   // exact zeros
        }
    free(ids_s);
    free(mask);
    free(h);
    return rc;
}
