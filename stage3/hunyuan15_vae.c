/* AutoencoderKLHunyuanVideo15 (diffusers v0.36.0 autoencoder_kl_hunyuanvideo15.py): config,
 * weights and the blocks of one chunk of frames; the streaming passes and tiling are in
 * stage3/hunyuan15_vae_run.c. */
#include "hunyuan15_vae_internal.h"

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

static int ilog2(int v) {
    int k = 0;
    while ((1 << k) < v) k++;
    return k;
}

/* ------------------------------------------------------------------ config */

int hv15_vae_config_load(hv15_vae_config *c, const char *path) {
    static const int def_blocks[5] = {128, 256, 512, 1024, 1024};
    memset(c, 0, sizeof *c);
    *c = (hv15_vae_config){.in_channels = 3, .out_channels = 3, .latent_channels = 32, .n_levels = 5,
                           .layers_per_block = 2, .spatial_ratio = 16, .temporal_ratio = 4,
                           .downsample_match_channel = 1, .upsample_match_channel = 1, .scaling_factor = 1.03682};
    memcpy(c->block_out_channels, def_blocks, sizeof def_blocks);
    if (!path) return 0;
    cvx_config j;
    if (cvx_config_load(&j, path)) return -1;
    int rc = -1, n = 0;
    int64_t v, blocks[HV15_VAE_MAX_LEVELS];
    const char *s;
    if (cvx_cfg_str_or(&j, "_class_name", "AutoencoderKLHunyuanVideo15", &s)) goto out;
    if (strcmp(s, "AutoencoderKLHunyuanVideo15")) {
        cvx_error("%s: '_class_name' is \"%s\", expected \"AutoencoderKLHunyuanVideo15\"", path, s);
        goto out;
    }
#define INT(key, def, lo, hi, dst) do { if (cvx_cfg_int_range_or(&j, key, def, lo, hi, &v)) goto out; dst = (int)v; } while (0)
    INT("in_channels", 3, 1, 64, c->in_channels);
    INT("out_channels", 3, 1, 64, c->out_channels);
    INT("latent_channels", 32, 1, 1024, c->latent_channels);
    INT("layers_per_block", 2, 1, 16, c->layers_per_block);
    INT("spatial_compression_ratio", 16, 2, 128, c->spatial_ratio);
    INT("temporal_compression_ratio", 4, 1, 64, c->temporal_ratio);
#undef INT
    if (cvx_cfg_bool_or(&j, "downsample_match_channel", 1, &c->downsample_match_channel)) goto out;
    if (cvx_cfg_bool_or(&j, "upsample_match_channel", 1, &c->upsample_match_channel)) goto out;
    if (cvx_cfg_num_range_or(&j, "scaling_factor", 1.03682, 0, 1e6, 1, &c->scaling_factor)) goto out;
    if (cvx_cfg_has(&j, "block_out_channels")) {
        if (cvx_cfg_int_array(&j, "block_out_channels", blocks, HV15_VAE_MAX_LEVELS, &n)) goto out;
        for (int i = 0; i < n; i++)
            if (blocks[i] < 1 || blocks[i] > 8192) {
                cvx_error("%s: key 'block_out_channels' entry %d = %lld is out of range [1, 8192]", path, i,
                          (long long)blocks[i]);
                goto out;
            }
        c->n_levels = n;
        for (int i = 0; i < n; i++) c->block_out_channels[i] = (int)blocks[i];
    }
    int ls = ilog2(c->spatial_ratio), lt = ilog2(c->temporal_ratio);
    if ((1 << ls) != c->spatial_ratio || (1 << lt) != c->temporal_ratio || lt > ls || ls >= c->n_levels) {
        cvx_error("%s: spatial_compression_ratio %d / temporal_compression_ratio %d must be powers of two, temporal <= "
                  "spatial, with log2(spatial) < the %d levels of block_out_channels", path, c->spatial_ratio,
                  c->temporal_ratio, c->n_levels);
        goto out;
    }
    int last = c->block_out_channels[c->n_levels - 1];
    if (last % c->latent_channels || last % (2 * c->latent_channels)) {
        cvx_error("%s: block_out_channels[-1] = %d must be a multiple of 2·latent_channels = %d (the encoder's and "
                  "decoder's channel shortcuts)", path, last, 2 * c->latent_channels);
        goto out;
    }
    rc = 0;
out:
    cvx_config_free(&j);
    return rc;
}

/* ------------------------------------------------------------------ loading */

static int rms_get(vae_loader *L, wan_rms_norm_w *n, const char *name, int C) {
    char buf[320];
    snprintf(buf, sizeof buf, "%s.gamma", name);
    n->gamma = vae_loader_get(L, buf, CVX_SHAPE(C, 1, 1, 1));
    n->dim = C;
    return n->gamma ? 0 : -1;
}

/* HunyuanVideo15CausalConv3d `name` (weights under name.conv), kernel 3. */
static int cconv_get(vae_loader *L, vae_conv *c, const char *name, int cin, int cout) {
    char buf[320];
    snprintf(buf, sizeof buf, "%s.conv", name);
    return vae_conv_get(L, c, buf, cin, cout, 3, 3, 3, 0, 1);
}

static int resblock_get(vae_loader *L, wan_resblock_w *r, const char *name, int cin, int cout) {
    char buf[288];
    r->cin = cin, r->cout = cout;
#define N_(s) (snprintf(buf, sizeof buf, "%s.%s", name, s), buf)
    if (rms_get(L, &r->norm1, N_("norm1"), cin) || cconv_get(L, &r->conv1, N_("conv1"), cin, cout) ||
        rms_get(L, &r->norm2, N_("norm2"), cout) || cconv_get(L, &r->conv2, N_("conv2"), cout, cout))
        return -1;
    memset(&r->shortcut, 0, sizeof r->shortcut);
    if (cin != cout && vae_conv_get(L, &r->shortcut, N_("conv_shortcut"), cin, cout, 1, 1, 1, 0, 0)) return -1;
#undef N_
    return 0;
}

static int mid_get(vae_loader *L, hv15_vae_mid *m, const char *half, int C) {
    char buf[288];
#define N_(s) (snprintf(buf, sizeof buf, "%s.mid_block.%s", half, s), buf)
    if (resblock_get(L, &m->res[0], N_("resnets.0"), C, C) || resblock_get(L, &m->res[1], N_("resnets.1"), C, C) ||
        rms_get(L, &m->attn.norm, N_("attentions.0.norm"), C) ||
        vae_conv_get(L, &m->attn.q, N_("attentions.0.to_q"), C, C, 1, 1, 1, 0, 0) ||
        vae_conv_get(L, &m->attn.k, N_("attentions.0.to_k"), C, C, 1, 1, 1, 0, 0) ||
        vae_conv_get(L, &m->attn.v, N_("attentions.0.to_v"), C, C, 1, 1, 1, 0, 0) ||
        vae_conv_get(L, &m->attn.o, N_("attentions.0.proj_out"), C, C, 1, 1, 1, 0, 0))
        return -1;
#undef N_
    m->attn.dim = C;
    return 0;
}

/* A level's resnets (names half.blocks.i.resnets.j), cin → cout then cout → cout. */
static int level_get(vae_loader *L, hv15_vae_level *lv, const char *prefix, int nres, int cin, int cout) {
    char buf[288];
    lv->nres = nres;
    lv->res = cvx_calloc((size_t)nres, sizeof *lv->res);
    for (int j = 0; j < nres; j++) {
        snprintf(buf, sizeof buf, "%s.resnets.%d", prefix, j);
        if (resblock_get(L, &lv->res[j], buf, j ? cout : cin, cout)) return -1;
    }
    return 0;
}

static int load_decoder(hv15_vae *v, vae_loader *L) {
    const hv15_vae_config *c = &v->c;
    int n = c->n_levels, rev[HV15_VAE_MAX_LEVELS], ls = ilog2(c->spatial_ratio), lt = ilog2(c->temporal_ratio);
    for (int i = 0; i < n; i++) rev[i] = c->block_out_channels[n - 1 - i];
    if (cconv_get(L, &v->dec_in, "decoder.conv_in", c->latent_channels, rev[0])) return -1;
    if (mid_get(L, &v->dec_mid, "decoder", rev[0])) return -1;
    int in = rev[0];
    char buf[288];
    for (int i = 0; i < n; i++) {
        hv15_vae_level *lv = &v->up[i];
        snprintf(buf, sizeof buf, "decoder.up_blocks.%d", i);
        if (level_get(L, lv, buf, c->layers_per_block + 1, in, rev[i])) return -1;
        in = rev[i];
        if (i < ls || i < lt) {
            int out = c->upsample_match_channel ? rev[i + 1] : rev[i], temporal = i < lt, factor = temporal ? 8 : 4;
            if ((factor * out) % rev[i] || (temporal && (factor * out / rev[i]) % 2))
                return cvx_error("%s: decoder level %d: the upsampler's %d → %d channels do not give an integer (even "
                                 "for temporal levels) channel repeat", cvx_weights_path(v->weights), i, rev[i], out);
            lv->has_resample = 1;
            lv->rs = (hv15_vae_resample){.cin = rev[i], .cout = out, .temporal = temporal};
            snprintf(buf, sizeof buf, "decoder.up_blocks.%d.upsamplers.0.conv", i);
            if (cconv_get(L, &lv->rs.conv, buf, rev[i], out * factor)) return -1;
            in = out;
        }
    }
    if (rms_get(L, &v->dec_norm, "decoder.norm_out", rev[n - 1])) return -1;
    if (cconv_get(L, &v->dec_out, "decoder.conv_out", rev[n - 1], c->out_channels)) return -1;
    v->dec_caches = L->next_cache;
    return 0;
}

static int load_encoder(hv15_vae *v, vae_loader *L) {
    const hv15_vae_config *c = &v->c;
    const int *bo = c->block_out_channels;
    int n = c->n_levels, ls = ilog2(c->spatial_ratio), lst = ilog2(c->spatial_ratio / c->temporal_ratio);
    if (cconv_get(L, &v->enc_in, "encoder.conv_in", c->in_channels, bo[0])) return -1;
    int in = bo[0];
    char buf[288];
    for (int i = 0; i < n; i++) {
        hv15_vae_level *lv = &v->down[i];
        snprintf(buf, sizeof buf, "encoder.down_blocks.%d", i);
        if (level_get(L, lv, buf, c->layers_per_block, in, bo[i])) return -1;
        in = bo[i];
        if (i < ls) {
            int out = c->downsample_match_channel ? bo[i + 1] : bo[i], temporal = i >= lst, factor = temporal ? 8 : 4;
            if (out % factor || (factor * bo[i]) % out || (temporal && (factor * bo[i] / out) % 2))
                return cvx_error("%s: encoder level %d: the downsampler's %d → %d channels do not split into groups",
                                 cvx_weights_path(v->weights), i, bo[i], out);
            lv->has_resample = 1;
            lv->rs = (hv15_vae_resample){.cin = bo[i], .cout = out, .temporal = temporal};
            snprintf(buf, sizeof buf, "encoder.down_blocks.%d.downsamplers.0.conv", i);
            if (cconv_get(L, &lv->rs.conv, buf, bo[i], out / factor)) return -1;
            in = out;
        }
    }
    if (in != bo[n - 1])
        return cvx_error("%s: the encoder's last level gives %d channels, block_out_channels[-1] is %d",
                         cvx_weights_path(v->weights), in, bo[n - 1]);
    if (mid_get(L, &v->enc_mid, "encoder", bo[n - 1])) return -1;
    if (rms_get(L, &v->enc_norm, "encoder.norm_out", bo[n - 1])) return -1;
    if (cconv_get(L, &v->enc_out, "encoder.conv_out", bo[n - 1], 2 * c->latent_channels)) return -1;
    v->enc_caches = L->next_cache;
    return 0;
}

/* One half's tensors (a retry after a failure starts from nothing: the failed half's levels freed). */
static int load_half(hv15_vae *v, int part) {
    vae_loader L = {.w = v->weights, .ctx = v->ctx, .time_pad = VAE_TIME_PAD_REPLICATE, .space_replicate = 1};
    hv15_vae_level *lv = part == VAE_PART_DECODER ? v->up : v->down;
    for (int i = 0; i < HV15_VAE_MAX_LEVELS; i++) free(lv[i].res);
    memset(lv, 0, sizeof(hv15_vae_level) * HV15_VAE_MAX_LEVELS);
    if (part == VAE_PART_DECODER ? load_decoder(v, &L) : load_encoder(v, &L)) return -1;
    v->parts |= part;
    return 0;
}

int hv15_vae_load_more(hv15_vae *v, int parts) {
    for (int part = VAE_PART_DECODER; part <= VAE_PART_ENCODER; part <<= 1)
        if ((parts & part) && !(v->parts & part) && load_half(v, part)) return -1;
    return 0;
}

int hv15_vae_parts_loaded(const hv15_vae *v) { return v->parts; }

hv15_vae *hv15_vae_load_file_parts(const char *config_json, const char *weights, cvx_ctx *ctx, int parts) {
    CVX_CHECK(parts >= VAE_PART_DECODER && parts <= VAE_PART_BOTH);
    hv15_vae *v = cvx_calloc(1, sizeof *v);
    if (hv15_vae_config_load(&v->c, config_json)) {
        free(v);
        return NULL;
    }
    v->owns_ctx = ctx == NULL;
    v->ctx = ctx ? ctx : cvx_ctx_new(cvx_threads());
    v->weights = cvx_weights_open(weights);
    if (!v->weights || hv15_vae_original_layout(v->weights) || hv15_vae_load_more(v, parts)) {
        hv15_vae_free(v);
        return NULL;
    }
    return v;
}

hv15_vae *hv15_vae_load_file(const char *config_json, const char *weights, cvx_ctx *ctx) {
    return hv15_vae_load_file_parts(config_json, weights, ctx, VAE_PART_BOTH);
}

hv15_vae *hv15_vae_load_parts(const char *vae_dir, cvx_ctx *ctx, int parts) {
    char path[4096];
    if (cvx_path_join(path, sizeof path, vae_dir, "config.json")) {
        cvx_error("%s: path too long", vae_dir);
        return NULL;
    }
    return hv15_vae_load_file_parts(path, vae_dir, ctx, parts);
}

hv15_vae *hv15_vae_load(const char *vae_dir, cvx_ctx *ctx) { return hv15_vae_load_parts(vae_dir, ctx, VAE_PART_BOTH); }

void hv15_vae_free(hv15_vae *v) {
    if (!v) return;
    for (int i = 0; i < HV15_VAE_MAX_LEVELS; i++) free(v->up[i].res), free(v->down[i].res);
    if (v->weights) cvx_weights_close(v->weights);
    if (v->owns_ctx) cvx_ctx_free(v->ctx);
    else if (v->ctx) vae_conv_forget(v->ctx);
    free(v);
}

const hv15_vae_config *hv15_vae_get_config(const hv15_vae *v) { return &v->c; }

/* ------------------------------------------------------------------ pass state */

void hv15_vae_run_init(hv15_vae_run *r, int caches) {
    memset(r, 0, sizeof *r);
    vae_cache_init(&r->cache, caches);
}

void hv15_vae_run_free(hv15_vae_run *r) {
    vae_cache_free(&r->cache);
    free(r->k), free(r->v);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------ blocks */

/* x[C, N] -> t[N, C] and back. */
static void to_tokens(const float *x, int C, size_t N, float *t) {
#pragma omp parallel for schedule(static)
    for (size_t s = 0; s < N; s++)
        for (int c = 0; c < C; c++) t[s * C + c] = x[(size_t)c * N + s];
}

static void from_tokens(const float *t, int C, size_t N, float *x) {
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++)
        for (size_t s = 0; s < N; s++) x[(size_t)c * N + s] = t[s * C + c];
}

/* HunyuanVideo15AttnBlock on a chunk x[C, T, H, W] in place: x += proj_out(attn(norm(x))), one
 * head; a token attends to the tokens of its own and every earlier frame of the video (the
 * keys / values of earlier chunks are kept in run). */
static void attention(const hv15_vae_attn *a, cvx_ctx *ctx, hv15_vae_run *run, float *x, int T, int H, int W) {
    const int C = a->dim, HW = H * W;
    const size_t N = (size_t)T * HW;
    const float scale = (float)(1.0 / sqrt((double)C));
    float *n = vae_fmap_get(ctx, (size_t)C * N), *cm = vae_fmap_get(ctx, (size_t)C * N), *q = vae_fmap_get(ctx, N * C);
    wan_rms_norm(&a->norm, x, N, n, 0);
    if (run->rows + N > run->cap) {   /* the run's keys / values outlive the call: not from the pool */
        size_t cap = (run->rows + N) * 2;
        float *k = vae_alloc(cap * C), *v = vae_alloc(cap * C);
        if (run->rows) {
            memcpy(k, run->k, sizeof(float) * run->rows * C);
            memcpy(v, run->v, sizeof(float) * run->rows * C);
        }
        free(run->k), free(run->v);
        run->k = k, run->v = v, run->cap = cap;
    }
    vae_conv1x1(&a->q, n, N, cm);
    to_tokens(cm, C, N, q);                                                       // [N, C]
    vae_conv1x1(&a->k, n, N, cm);
    to_tokens(cm, C, N, run->k + run->rows * C);
    vae_conv1x1(&a->v, n, N, cm);
    to_tokens(cm, C, N, run->v + run->rows * C);
    for (int t = 0; t < T; t++) {
        int keys = (int)(run->rows + (size_t)(t + 1) * HW);
        float *qt = q + (size_t)t * HW * C;
        cvx_attention_ctx(ctx, qt, C, run->k, run->v, C, qt, C, HW, keys, 1, C, scale, NULL);
    }
    run->rows += N;
    from_tokens(q, C, N, n);
    vae_conv1x1(&a->o, n, N, cm);                                                 // proj_out
    cvx_add(x, cm, (size_t)C * N);
    vae_fmap_put(ctx, n), vae_fmap_put(ctx, cm), vae_fmap_put(ctx, q);
}

static float *mid_block(const hv15_vae_mid *m, cvx_ctx *ctx, hv15_vae_run *run, float *x, int T, int H, int W) {
    float *y = wan_resblock(&m->res[0], &run->cache, x, T, H, W);
    vae_fmap_put(ctx, x);
    attention(&m->attn, ctx, run, y, T, H, W);
    x = wan_resblock(&m->res[1], &run->cache, y, T, H, W);
    vae_fmap_put(ctx, y);
    return x;
}

/* The DCAE channel-to-space rearrangement, accumulated: for sub-position s = (a·2 + b)·2 + d
 * (r1 = 2) or b·2 + d (r1 = 1), out[co, f·r1 + a, 2y + b, 2x + d] (+)= src[ch(s, co), f, y, x]
 * with ch = s·A + co / B (div = 0) or (s·A + co) / B (div = 1). src [*, T, H, W] → out [Co, T·r1, 2H, 2W]. */
static void dcae_up(const float *src, int T, int H, int W, int r1, int Co, int A, int B, int div, int add, float *out) {
    const int To = T * r1, Ho = 2 * H, Wo = 2 * W;
#pragma omp parallel for collapse(2) schedule(static)
    for (int co = 0; co < Co; co++)
        for (int to = 0; to < To; to++) {
            int f = to / r1, a = to % r1;
            for (int yo = 0; yo < Ho; yo++)
                for (int xo = 0; xo < Wo; xo++) {
                    int s = (r1 == 2 ? a * 4 : 0) + (yo % 2) * 2 + xo % 2;
                    int ch = div ? (s * A + co) / B : s * A + co / B;
                    float v = src[(((size_t)ch * T + f) * H + yo / 2) * W + xo / 2];
                    float *o = out + (((size_t)co * To + to) * Ho + yo) * Wo + xo;
                    *o = add ? *o + v : v;
                }
        }
}

/* The space-to-channel rearrangement: out[s·C + c, f, y, x] = src[c, f·r1 + a, 2y + b, 2x + d]. */
static void dcae_down(const float *src, int C, int T, int H, int W, int r1, float *out) {
    const int To = T / r1, Ho = H / 2, Wo = W / 2, S = 4 * r1;
#pragma omp parallel for collapse(2) schedule(static)
    for (int s = 0; s < S; s++)
        for (int c = 0; c < C; c++) {
            int a = r1 == 2 ? s / 4 : 0, b = (s / 2) % 2, d = s % 2;
            for (int f = 0; f < To; f++)
                for (int y = 0; y < Ho; y++)
                    for (int x = 0; x < Wo; x++)
                        out[((((size_t)s * C + c) * To + f) * Ho + y) * Wo + x] =
                            src[(((size_t)c * T + f * r1 + a) * H + 2 * y + b) * W + 2 * x + d];
        }
}

/* y[co] += mean over the g channels co·g .. co·g + g − 1 of src [Co·g, N] (tensor.view(Co, g, ...).mean(dim=2)). */
static void group_mean_add(const float *src, int Co, int g, size_t N, float *y) {
#pragma omp parallel for schedule(static)
    for (int co = 0; co < Co; co++)
        for (size_t i = 0; i < N; i++) {
            float s = 0.0f;
            for (int j = 0; j < g; j++) s += src[((size_t)co * g + j) * N + i];
            y[(size_t)co * N + i] += s / (float)g;
        }
}

/* HunyuanVideo15Upsample on a chunk x[cin, T, H, W] (consumed) -> [cout, T', 2H, 2W]: temporal
 * levels double the frames except for the video's first frame (first chunk, T = 1). */
static float *upsample(const hv15_vae_resample *u, vae_cache *cache, float *x, int *T, int H, int W, int first) {
    const int cin = u->cin, cout = u->cout, factor = u->temporal ? 8 : 4, rep = factor * cout / cin;
    cvx_ctx *ctx = u->conv.ctx;
    float *h = vae_fmap_get(ctx, (size_t)cout * factor * *T * H * W);
    vae_causal_conv3d(&u->conv, cache, x, *T, H, W, h);                          // [cout·factor, T, H, W]
    int r1 = u->temporal && !first ? 2 : 1, To = *T * r1;
    float *out = vae_fmap_get(ctx, (size_t)cout * To * 4 * H * W);
    if (u->temporal && first) {          /* h_first[:, :cout] of the 2·cout packed channels; x_first repeated rep/2 */
        dcae_up(h, *T, H, W, 1, cout, 2 * cout, 1, 0, 0, out);
        dcae_up(x, *T, H, W, 1, cout, cin / 4, rep / 2, 0, 1, out);
    } else if (u->temporal) {            /* r1 = 2; shortcut: x rearranged (cin/8 channels) then repeated */
        dcae_up(h, *T, H, W, 2, cout, cout, 1, 0, 0, out);
        dcae_up(x, *T, H, W, 2, cout, cin / 8, rep, 0, 1, out);
    } else {                             /* shortcut: x repeated (cin·rep channels) then rearranged */
        dcae_up(h, *T, H, W, 1, cout, cout, 1, 0, 0, out);
        dcae_up(x, *T, H, W, 1, cout, cout, rep, 1, 1, out);
    }
    vae_fmap_put(ctx, h), vae_fmap_put(ctx, x);
    *T = To;
    return out;
}

/* HunyuanVideo15Downsample on a chunk x[cin, T, H, W] (consumed) -> [cout, T', H/2, W/2]:
 * temporal levels halve the frames except for the video's first frame. */
static float *downsample(const hv15_vae_resample *d, vae_cache *cache, float *x, int *T, int H, int W, int first) {
    const int cin = d->cin, cout = d->cout, factor = d->temporal ? 8 : 4, Q = cout / factor;
    const int g = factor * cin / cout;
    cvx_ctx *ctx = d->conv.ctx;
    float *h = vae_fmap_get(ctx, (size_t)Q * *T * H * W);
    vae_causal_conv3d(&d->conv, cache, x, *T, H, W, h);                          // [cout / factor, T, H, W]
    int r1 = d->temporal && !first ? 2 : 1, To = *T / r1;
    const size_t N = (size_t)To * (H / 2) * (W / 2);
    float *out = vae_fmap_get(ctx, (size_t)cout * N), *xd = vae_fmap_get(ctx, (size_t)cin * 4 * r1 * N);
    dcae_down(h, Q, *T, H, W, r1, out);                                           // [4·r1·Q, N]
    if (d->temporal && first)            /* h_first duplicated: cat([h_first, h_first], dim=1) */
        memcpy(out + (size_t)(cout / 2) * N, out, sizeof(float) * (size_t)(cout / 2) * N);
    dcae_down(x, cin, *T, H, W, r1, xd);                                          // [4·r1·cin, N]
    group_mean_add(xd, cout, d->temporal && first ? g / 2 : g, N, out);
    vae_fmap_put(ctx, h), vae_fmap_put(ctx, xd), vae_fmap_put(ctx, x);
    *T = To;
    return out;
}

static float *level_forward(const hv15_vae_level *lv, cvx_ctx *ctx, vae_cache *cache, float *x, int *T, int *H, int *W,
                            int first, int up) {
    for (int j = 0; j < lv->nres; j++) {
        float *y = wan_resblock(&lv->res[j], cache, x, *T, *H, *W);
        vae_fmap_put(ctx, x);
        x = y;
    }
    if (!lv->has_resample) return x;
    if (up) {
        x = upsample(&lv->rs, cache, x, T, *H, *W, first);
        *H *= 2, *W *= 2;
    } else {
        x = downsample(&lv->rs, cache, x, T, *H, *W, first);
        *H /= 2, *W /= 2;
    }
    return x;
}

float *hv15_decoder_chunk(const hv15_vae *v, hv15_vae_run *run, const float *z, int n, int h, int w, int first,
                          int *T_out) {
    const hv15_vae_config *c = &v->c;
    const int lc = c->latent_channels, C0 = c->block_out_channels[c->n_levels - 1], rep = C0 / lc;
    const size_t S = (size_t)n * h * w;
    float *x = vae_fmap_get(v->ctx, (size_t)C0 * S);
    vae_causal_conv3d(&v->dec_in, &run->cache, z, n, h, w, x);                   // conv_in
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < C0; ch++)                                               // + z.repeat_interleave(rep, dim=1)
        for (size_t i = 0; i < S; i++) x[(size_t)ch * S + i] += z[(size_t)(ch / rep) * S + i];
    x = mid_block(&v->dec_mid, v->ctx, run, x, n, h, w);
    int T = n, H = h, W = w;
    for (int i = 0; i < c->n_levels; i++) x = level_forward(&v->up[i], v->ctx, &run->cache, x, &T, &H, &W, first, 1);
    wan_rms_norm(&v->dec_norm, x, (size_t)T * H * W, x, 1);                       // norm_out + SiLU
    float *y = vae_causal_conv3d_consume(&v->dec_out, &run->cache, x, T, H, W, NULL);
    *T_out = T;
    return y;
}

float *hv15_encoder_chunk(const hv15_vae *v, hv15_vae_run *run, const float *xin, int n, int H, int W, int first,
                          int *T_out) {
    const hv15_vae_config *c = &v->c;
    const int C0 = c->block_out_channels[0], CL = c->block_out_channels[c->n_levels - 1];
    const int M = 2 * c->latent_channels;
    float *x = vae_fmap_get(v->ctx, (size_t)C0 * n * H * W);
    vae_causal_conv3d(&v->enc_in, &run->cache, xin, n, H, W, x);                 // conv_in
    int T = n;
    for (int i = 0; i < c->n_levels; i++) x = level_forward(&v->down[i], v->ctx, &run->cache, x, &T, &H, &W, first, 0);
    x = mid_block(&v->enc_mid, v->ctx, run, x, T, H, W);
    const size_t S = (size_t)T * H * W;
    float *shortcut = vae_fmap_get(v->ctx, (size_t)M * S);
    memset(shortcut, 0, sizeof(float) * (size_t)M * S);
    group_mean_add(x, M, CL / M, S, shortcut);                                   // view(M, CL/M, ...).mean(2)
    wan_rms_norm(&v->enc_norm, x, S, x, 1);                                       // norm_out + SiLU
    float *y = vae_causal_conv3d_consume(&v->enc_out, &run->cache, x, T, H, W, NULL);
    cvx_add(y, shortcut, (size_t)M * S);
    vae_fmap_put(v->ctx, shortcut);
    *T_out = T;
    return y;
}
