/* CogVideoX VAE decoder: loading and the blocks, one function per upstream module.
 * Chunked and tiled decoding live in vae_decode.c. */
#include "cogvideox_vae.h"
#include "vae_conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "conv.h"
#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "ops.h"
#include "validate.h"
#include "vecmath.h"

/* SpatialNorm3D builds its GroupNorm with eps=1e-6 whatever norm_eps says (upstream). */
#define SPATIAL_NORM_EPS 1e-6f

/* ------------------------------------------------------------------ loading */

typedef vae_loader loader;

static int spatial_norm_get(loader *L, cogvideox_vae_spatial_norm_w *n, const char *name, int C, int zc) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s.norm_layer.weight", name);
    if (!(n->norm_w = cvx_weights_get(L->w, buf, CVX_SHAPE(C)))) return -1;
    snprintf(buf, sizeof buf, "%s.norm_layer.bias", name);
    if (!(n->norm_b = cvx_weights_get(L->w, buf, CVX_SHAPE(C)))) return -1;
    n->channels = C;
    snprintf(buf, sizeof buf, "%s.conv_y.conv", name);
    if (vae_conv_get(L, &n->conv_y, buf, zc, C, 1, 1, 1, 0, 1)) return -1;
    snprintf(buf, sizeof buf, "%s.conv_b.conv", name);
    return vae_conv_get(L, &n->conv_b, buf, zc, C, 1, 1, 1, 0, 1);
}

static int resnet_get(loader *L, cogvideox_vae_resnet_w *r, const char *name, int cin, int cout, int zc) {
    char buf[256];
    r->cin = cin, r->cout = cout;
    snprintf(buf, sizeof buf, "%s.norm1", name);
    if (spatial_norm_get(L, &r->norm1, buf, cin, zc)) return -1;
    snprintf(buf, sizeof buf, "%s.conv1.conv", name);
    if (vae_conv_get(L, &r->conv1, buf, cin, cout, 3, 3, 3, 0, 1)) return -1;
    snprintf(buf, sizeof buf, "%s.norm2", name);
    if (spatial_norm_get(L, &r->norm2, buf, cout, zc)) return -1;
    snprintf(buf, sizeof buf, "%s.conv2.conv", name);
    if (vae_conv_get(L, &r->conv2, buf, cout, cout, 3, 3, 3, 0, 1)) return -1;
    memset(&r->shortcut, 0, sizeof r->shortcut);
    r->shortcut.cache_id = -1;
    r->shortcut.ctx = L->ctx;
    if (cin != cout) {   /* CogVideoXSafeConv3d 1×1×1 (conv_shortcut=False upstream) */
        snprintf(buf, sizeof buf, "%s.conv_shortcut", name);
        if (vae_conv_get(L, &r->shortcut, buf, cin, cout, 1, 1, 1, 0, 0)) return -1;
    }
    return 0;
}

int cogvideox_vae_config_load(cogvideox_vae_decoder *d, const char *path) {
    cvx_config c;
    if (cvx_config_load(&c, path)) return -1;
    if (cvx_check_model_config(&c)) {   /* ranges before anything is sized from them (issue 14) */
        cvx_config_free(&c);
        return -1;
    }
    int64_t v, bo[COGVIDEOX_VAE_MAX_BLOCKS];
    int n = 0, rc = -1;
    const char *act, *types[COGVIDEOX_VAE_MAX_BLOCKS];
    int nt = 0;
    if (cvx_cfg_int_array(&c, "block_out_channels", bo, COGVIDEOX_VAE_MAX_BLOCKS, &n)) goto out;
    if (n < 1) { cvx_error("%s: key 'block_out_channels' must not be empty", path); goto out; }
    d->num_blocks = n;
    for (int i = 0; i < n; i++) d->block_out[i] = (int)bo[i];
    if (cvx_cfg_int_or(&c, "latent_channels", 16, &v)) goto out;
    d->latent_channels = (int)v;
    if (cvx_cfg_int_or(&c, "out_channels", 3, &v)) goto out;
    d->out_channels = (int)v;
    if (cvx_cfg_int_or(&c, "layers_per_block", 3, &v)) goto out;
    d->layers_per_block = (int)v;
    if (cvx_cfg_int_or(&c, "norm_num_groups", 32, &v)) goto out;
    d->groups = (int)v;
    if (cvx_cfg_num_or(&c, "norm_eps", 1e-6, &d->norm_eps)) goto out;
    if (cvx_cfg_num_or(&c, "scaling_factor", 1.15258426, &d->scaling_factor)) goto out;
    double tcr;
    if (cvx_cfg_num_or(&c, "temporal_compression_ratio", 4, &tcr)) goto out;
    d->temporal_compression_ratio = (int)tcr;
    d->temporal_levels = tcr >= 1 ? (int)floor(log2(tcr)) : 0;   /* int(np.log2(ratio)) */
    if (cvx_cfg_int_or(&c, "sample_height", 480, &v)) goto out;
    d->sample_height = (int)v;
    if (cvx_cfg_int_or(&c, "sample_width", 720, &v)) goto out;
    d->sample_width = (int)v;
    if (cvx_cfg_bool_or(&c, "use_post_quant_conv", 0, &d->use_post_quant_conv)) goto out;
    if (cvx_cfg_bool_or(&c, "invert_scale_latents", 0, &d->invert_scale_latents)) goto out;
    if (cvx_cfg_str_or(&c, "act_fn", "silu", &act)) goto out;
    if (strcmp(act, "silu") && strcmp(act, "swish")) {
        cvx_error("%s: key 'act_fn' is \"%s\", only \"silu\" is supported", path, act);
        goto out;
    }
    if (cvx_cfg_has(&c, "up_block_types")) {
        if (cvx_cfg_str_array(&c, "up_block_types", types, COGVIDEOX_VAE_MAX_BLOCKS, &nt)) goto out;
        if (nt != n) { cvx_error("%s: 'up_block_types' has %d entries, block_out_channels %d", path, nt, n); goto out; }
        for (int i = 0; i < nt; i++)
            if (strcmp(types[i], "CogVideoXUpBlock3D")) {
                cvx_error("%s: up_block_types[%d] is \"%s\", expected \"CogVideoXUpBlock3D\"", path, i, types[i]);
                goto out;
            }
    }
    if (d->latent_channels < 1 || d->out_channels < 1 || d->layers_per_block < 0 || d->groups < 1) {
        cvx_error("%s: latent_channels/out_channels/layers_per_block/norm_num_groups out of range", path);
        goto out;
    }
    for (int i = 0; i < n; i++)
        if (d->block_out[i] < 1 || d->block_out[i] % d->groups) {
            cvx_error("%s: block_out_channels[%d] = %d is not a positive multiple of norm_num_groups %d", path, i,
                      d->block_out[i], d->groups);
            goto out;
        }
    d->spatial_ratio = 1 << (n - 1);
    rc = 0;
out:
    cvx_config_free(&c);
    return rc;
}

static int load_weights(cogvideox_vae_decoder *d, const char *vae_dir, const char *path);

int cogvideox_vae_load(cogvideox_vae_decoder *d, const char *vae_dir, cvx_ctx *ctx) {
    memset(d, 0, sizeof *d);
    char path[4096];
    if (cvx_path_join(path, sizeof path, vae_dir, "config.json")) return cvx_error("%s: path too long", vae_dir);
    if (cogvideox_vae_config_load(d, path)) return -1;
    d->owns_ctx = ctx == NULL;
    d->ctx = ctx ? ctx : cvx_ctx_new(cvx_threads());
    if (load_weights(d, vae_dir, path)) {
        cogvideox_vae_free(d);
        return -1;
    }
    return 0;
}

static int load_weights(cogvideox_vae_decoder *d, const char *vae_dir, const char *path) {
    loader L = {.w = cvx_weights_open(vae_dir), .ctx = d->ctx, .time_pad = VAE_TIME_PAD_REPLICATE};
    if (!L.w) return -1;
    d->weights = L.w;
    const int n = d->num_blocks, zc = d->latent_channels;
    int rev[COGVIDEOX_VAE_MAX_BLOCKS];
    for (int i = 0; i < n; i++) rev[i] = d->block_out[n - 1 - i];
    char name[256];
    d->post_quant_conv.cache_id = -1;
    d->post_quant_conv.ctx = d->ctx;
    if (d->use_post_quant_conv) {
        /* Upstream builds it as CogVideoXSafeConv3d(out_channels, out_channels, 1). */
        if (zc != d->out_channels)
            return cvx_error("%s: use_post_quant_conv with latent_channels %d != out_channels %d is not supported "
                             "(upstream would fail too)", path, zc, d->out_channels);
        if (vae_conv_get(&L, &d->post_quant_conv, "post_quant_conv", zc, zc, 1, 1, 1, 0, 0)) return -1;
    }
    if (vae_conv_get(&L, &d->conv_in, "decoder.conv_in.conv", zc, rev[0], 3, 3, 3, 0, 1)) return -1;
    for (int i = 0; i < 2; i++) {   /* CogVideoXMidBlock3D num_layers=2 */
        snprintf(name, sizeof name, "decoder.mid_block.resnets.%d", i);
        if (resnet_get(&L, &d->mid[i], name, rev[0], rev[0], zc)) return -1;
    }
    int out_ch = rev[0];
    for (int i = 0; i < n; i++) {
        cogvideox_vae_up_block_w *b = &d->up[i];
        int in_ch = out_ch;
        out_ch = rev[i];
        b->num_resnets = d->layers_per_block + 1;
        b->resnets = cvx_calloc((size_t)b->num_resnets, sizeof *b->resnets);
        for (int j = 0; j < b->num_resnets; j++) {
            snprintf(name, sizeof name, "decoder.up_blocks.%d.resnets.%d", i, j);
            if (resnet_get(&L, &b->resnets[j], name, j == 0 ? in_ch : out_ch, out_ch, zc)) return -1;
        }
        b->has_upsampler = i < n - 1;
        b->compress_time = i < d->temporal_levels;
        b->upsampler.cache_id = -1;
        b->upsampler.ctx = d->ctx;
        if (b->has_upsampler) {
            snprintf(name, sizeof name, "decoder.up_blocks.%d.upsamplers.0.conv", i);
            if (vae_conv_get(&L, &b->upsampler, name, out_ch, out_ch, 1, 3, 3, 1, 0)) return -1;
        }
    }
    if (spatial_norm_get(&L, &d->norm_out, "decoder.norm_out", rev[n - 1], zc)) return -1;
    if (vae_conv_get(&L, &d->conv_out, "decoder.conv_out.conv", rev[n - 1], d->out_channels, 3, 3, 3, 0, 1)) return -1;
    d->num_caches = L.next_cache;
    return 0;
}

void cogvideox_vae_free(cogvideox_vae_decoder *d) {
    for (int i = 0; i < d->num_blocks; i++) free(d->up[i].resnets);
    if (d->weights) cvx_weights_close(d->weights);
    if (d->owns_ctx) cvx_ctx_free(d->ctx);
    else if (d->ctx) vae_conv_forget(d->ctx);
    memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------------------ blocks */

/* Source latent frame for feature frame t (SpatialNorm3D's resize of zq). */
static int zq_frame(int t, int Tf, int Tz) {
    if (Tf > 1 && Tf % 2 == 1) return t == 0 ? 0 : 1 + cvx_nearest_index(t - 1, Tz - 1, Tf - 1);
    return cvx_nearest_index(t, Tz, Tf);
}

void cogvideox_vae_spatial_norm(const cogvideox_vae_decoder *d, const cogvideox_vae_spatial_norm_w *n, const cogvideox_vae_zq *zq, const float *f,
                      float *out, int T, int H, int W, int silu) {
    const int C = n->channels;
    const size_t S = (size_t)T * H * W, Sz = (size_t)zq->T * zq->H * zq->W;
    /* conv_y/conv_b are 1×1×1, so they commute with the nearest resize: run them at the
     * latent resolution and index the result (same numbers, far fewer FLOPs). */
    float *zy = vae_fmap_get(d->ctx, (size_t)C * Sz), *zb = vae_fmap_get(d->ctx, (size_t)C * Sz);   // [C, Tz, h, w]
    vae_conv1x1(&n->conv_y, zq->z, Sz, zy);
    vae_conv1x1(&n->conv_b, zq->z, Sz, zb);
    float *gw = cvx_tensor_f32_dup(n->norm_w), *gb = cvx_tensor_f32_dup(n->norm_b);
    const int G = d->groups, cpg = C / G;
    float *mean = cvx_malloc(sizeof(float) * 2 * (size_t)G), *inv = mean + G;
    cvx_groupnorm_stats(f, C, S, G, SPATIAL_NORM_EPS, mean, inv);
    int *tm = cvx_malloc(sizeof(int) * (size_t)T), *ym = cvx_malloc(sizeof(int) * (size_t)H),
        *xm = cvx_malloc(sizeof(int) * (size_t)W);
    for (int t = 0; t < T; t++) tm[t] = zq_frame(t, T, zq->T);
    for (int y = 0; y < H; y++) ym[y] = cvx_nearest_index(y, zq->H, H);
    for (int x = 0; x < W; x++) xm[x] = cvx_nearest_index(x, zq->W, W);
    /* One pass: GroupNorm's affine (the same float operations as cvx_groupnorm), the zq
     * modulation, SiLU. The nearest-resized rows of zy / zb are gathered once per row. */
#pragma omp parallel
    {
        float *ry = vae_alloc((size_t)2 * W), *rb = ry + W;
#pragma omp for collapse(2) schedule(static)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < T; t++) {
                const float sc = inv[c / cpg] * gw[c], sh = gb[c] - mean[c / cpg] * sc;
                int prev = -1;
                for (int y = 0; y < H; y++) {
                    size_t zrow = (((size_t)c * zq->T + tm[t]) * zq->H + ym[y]) * zq->W;
                    if (ym[y] != prev) {
                        for (int x = 0; x < W; x++) ry[x] = zy[zrow + xm[x]], rb[x] = zb[zrow + xm[x]];
                        prev = ym[y];
                    }
                    const float *fr = f + (((size_t)c * T + t) * H + y) * W;
                    float *o = out + (((size_t)c * T + t) * H + y) * W;
#pragma omp simd
                    for (int x = 0; x < W; x++) o[x] = (fr[x] * sc + sh) * ry[x] + rb[x];
                    if (silu) cvx_silu_serial(o, W);   /* per row: this loop is the parallel one */
                }
            }
        free(ry);
    }
    free(mean), free(tm), free(ym), free(xm), free(gw), free(gb);
    vae_fmap_put(d->ctx, zy), vae_fmap_put(d->ctx, zb);
}

float *cogvideox_vae_resnet_block(const cogvideox_vae_decoder *d, const cogvideox_vae_resnet_w *r, vae_cache *cache, const cogvideox_vae_zq *zq,
                        const float *x, int T, int H, int W) {
    const size_t S = (size_t)T * H * W;
    float *h = vae_fmap_get(d->ctx, (size_t)r->cin * S);         // [Cin, T, H, W]
    cogvideox_vae_spatial_norm(d, &r->norm1, zq, x, h, T, H, W, 1);            // norm1 + SiLU
    float *h1 = vae_causal_conv3d_consume(&r->conv1, cache, h, T, H, W, NULL);   // [Cout, T, H, W]; frees h
    cogvideox_vae_spatial_norm(d, &r->norm2, zq, h1, h1, T, H, W, 1);          // norm2 + SiLU (dropout: identity)
    float *h2 = vae_causal_conv3d_consume(&r->conv2, cache, h1, T, H, W, NULL);  // [Cout, T, H, W]; frees h1
    if (r->shortcut.w) {
        float *s = vae_fmap_get(d->ctx, (size_t)r->cout * S);      // [Cout, T, H, W]
        vae_conv1x1(&r->shortcut, x, S, s);
        cvx_add(h2, s, (size_t)r->cout * S);
        vae_fmap_put(d->ctx, s);
    } else {
        cvx_add(h2, x, (size_t)r->cout * S);
    }
    return h2;
}

float *cogvideox_vae_upsampler(const cogvideox_vae_up_block_w *b, const float *x, int C, int *T, int *H, int *W) {
    const int Ti = *T, Ho = 2 * *H, Wo = 2 * *W;
    /* Time: n odd > 1 -> the first frame alone (space only), the rest ×2: 2n−1 frames;
     * n even -> ×2; n = 1 -> space only. Without compress_time: space only. */
    int To = !b->compress_time || Ti == 1 ? Ti : (Ti % 2 ? 2 * Ti - 1 : 2 * Ti);
    int *tmap = cvx_malloc(sizeof(int) * (size_t)To);
    for (int t = 0; t < To; t++) {
        if (!b->compress_time || Ti == 1) tmap[t] = t;
        else if (Ti % 2) tmap[t] = t == 0 ? 0 : 1 + ((t - 1) >> 1);
        else tmap[t] = t >> 1;
    }
    const int Hp = Ho + 2, Wp = Wo + 2;
    cvx_ctx *ctx = b->upsampler.ctx;
    float *xp = vae_fmap_get(ctx, (size_t)C * To * Hp * Wp);     // [C, To, Ho+2, Wo+2]
    cvx_upsample_nearest_padded(x, C, Ti, *H, *W, tmap, To, Ho, Wo, xp, To, 0, 1, 1);
    float *y = vae_fmap_get(ctx, (size_t)b->upsampler.cout * To * Ho * Wo);   // [C, To, Ho, Wo]
    vae_conv_padded(&b->upsampler, xp, To, Hp, Wp, y);                // Conv2d 3×3 per frame
    vae_fmap_put(ctx, xp);
    free(tmap);
    *T = To, *H = Ho, *W = Wo;
    return y;
}

float *cogvideox_vae_up_block(const cogvideox_vae_decoder *d, const cogvideox_vae_up_block_w *b, vae_cache *cache, const cogvideox_vae_zq *zq, float *x,
                    int *C, int *T, int *H, int *W) {
    for (int i = 0; i < b->num_resnets; i++) {
        float *y = cogvideox_vae_resnet_block(d, &b->resnets[i], cache, zq, x, *T, *H, *W);
        vae_fmap_put(d->ctx, x);
        x = y;
        *C = b->resnets[i].cout;
    }
    if (b->has_upsampler) {
        float *y = cogvideox_vae_upsampler(b, x, *C, T, H, W);
        vae_fmap_put(d->ctx, x);
        x = y;
    }
    return x;
}

float *cogvideox_vae_mid_block(const cogvideox_vae_decoder *d, vae_cache *cache, const cogvideox_vae_zq *zq, float *x, int T, int H, int W) {
    for (int i = 0; i < 2; i++) {
        float *y = cogvideox_vae_resnet_block(d, &d->mid[i], cache, zq, x, T, H, W);
        vae_fmap_put(d->ctx, x);
        x = y;
    }
    return x;
}

float *cogvideox_vae_decoder_forward(const cogvideox_vae_decoder *d, vae_cache *cache, const float *z, int T, int h, int w, int *T_out) {
    const size_t Sz = (size_t)T * h * w;
    float *zpq = NULL;
    if (d->use_post_quant_conv) {
        zpq = vae_fmap_get(d->ctx, (size_t)d->latent_channels * Sz);
        vae_conv1x1(&d->post_quant_conv, z, Sz, zpq);
        z = zpq;
    }
    cogvideox_vae_zq zq = {z, d->latent_channels, T, h, w};
    int C = d->conv_in.cout, H = h, W = w;
    float *x = vae_fmap_get(d->ctx, (size_t)C * Sz);             // [C0, T, h, w]
    vae_causal_conv3d(&d->conv_in, cache, z, T, h, w, x);
    x = cogvideox_vae_mid_block(d, cache, &zq, x, T, H, W);
    for (int i = 0; i < d->num_blocks; i++) x = cogvideox_vae_up_block(d, &d->up[i], cache, &zq, x, &C, &T, &H, &W);
    cogvideox_vae_spatial_norm(d, &d->norm_out, &zq, x, x, T, H, W, 1);        // norm_out + SiLU
    float *y = vae_causal_conv3d_consume(&d->conv_out, cache, x, T, H, W, NULL);   // [3, T, H, W]; frees x
    vae_fmap_put(d->ctx, zpq);
    *T_out = T;
    return y;
}
