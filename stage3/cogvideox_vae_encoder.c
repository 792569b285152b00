/* CogVideoX VAE encoder: loading, the blocks (one function per upstream module), frame-batched
 * and tiled encoding (the latent distribution is latent_dist.c). The causal convolution and its caches are
 * shared ones (vae_conv.c), the tile blending and stitching is shared (vae_tiles.c). */
#include "cogvideox_vae_encoder.h"

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
#include "vae_conv.h"
#include "vae_tiles.h"

/* The encoder's norm_out is built with eps=1e-6 whatever norm_eps says (upstream). */
#define NORM_OUT_EPS 1e-6f
/* Upstream tile overlap factors (tile_overlap_factor_height / _width). */
#define TILE_OVERLAP_H (1.0 / 6.0)
#define TILE_OVERLAP_W (1.0 / 5.0)

/* ------------------------------------------------------------------ loading */

typedef vae_loader loader;   /* every conv computes through the encoder's context */

static int norm_get(loader *L, const cvx_tensor **w, const cvx_tensor **b, const char *name, int C) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s.weight", name);
    if (!(*w = cvx_weights_get(L->w, buf, CVX_SHAPE(C)))) return -1;
    snprintf(buf, sizeof buf, "%s.bias", name);
    return (*b = cvx_weights_get(L->w, buf, CVX_SHAPE(C))) ? 0 : -1;
}

static int resnet_get(loader *L, cogvideox_vae_enc_resnet_w *r, const char *name, int cin, int cout) {
    char buf[256];
    r->cin = cin, r->cout = cout;
    snprintf(buf, sizeof buf, "%s.norm1", name);
    if (norm_get(L, &r->norm1_w, &r->norm1_b, buf, cin)) return -1;
    snprintf(buf, sizeof buf, "%s.conv1.conv", name);
    if (vae_conv_get(L, &r->conv1, buf, cin, cout, 3, 3, 3, 0, 1)) return -1;
    snprintf(buf, sizeof buf, "%s.norm2", name);
    if (norm_get(L, &r->norm2_w, &r->norm2_b, buf, cout)) return -1;
    snprintf(buf, sizeof buf, "%s.conv2.conv", name);
    if (vae_conv_get(L, &r->conv2, buf, cout, cout, 3, 3, 3, 0, 1)) return -1;
    memset(&r->shortcut, 0, sizeof r->shortcut);
    r->shortcut.cache_id = -1;
    if (cin != cout) {   /* CogVideoXSafeConv3d 1×1×1 (conv_shortcut=False upstream) */
        snprintf(buf, sizeof buf, "%s.conv_shortcut", name);
        if (vae_conv_get(L, &r->shortcut, buf, cin, cout, 1, 1, 1, 0, 0)) return -1;
    }
    return 0;
}

/* The shared keys through the decoder's reader (one way to read vae/config.json), then the
 * encoder's own: in_channels, use_quant_conv, down_block_types. */
static int load_config(cogvideox_vae_encoder *e, const char *path) {
    cogvideox_vae_decoder d;
    if (cogvideox_vae_config_load(&d, path)) return -1;
    e->num_blocks = d.num_blocks;
    memcpy(e->block_out, d.block_out, sizeof e->block_out);
    e->latent_channels = d.latent_channels, e->layers_per_block = d.layers_per_block, e->groups = d.groups;
    e->norm_eps = d.norm_eps, e->scaling_factor = d.scaling_factor;
    e->temporal_levels = d.temporal_levels, e->spatial_ratio = d.spatial_ratio;
    e->sample_height = d.sample_height, e->sample_width = d.sample_width;
    e->invert_scale_latents = d.invert_scale_latents;
    cvx_config c;
    if (cvx_config_load(&c, path)) return -1;
    int64_t v;
    int nt = 0, rc = -1;
    const char *types[COGVIDEOX_VAE_MAX_BLOCKS];
    if (cvx_cfg_int_or(&c, "in_channels", 3, &v)) goto out;
    e->in_channels = (int)v;
    if (cvx_cfg_bool_or(&c, "use_quant_conv", 0, &e->use_quant_conv)) goto out;
    if (cvx_cfg_has(&c, "down_block_types")) {
        if (cvx_cfg_str_array(&c, "down_block_types", types, COGVIDEOX_VAE_MAX_BLOCKS, &nt)) goto out;
        if (nt != e->num_blocks) {
            cvx_error("%s: 'down_block_types' has %d entries, block_out_channels %d", path, nt, e->num_blocks);
            goto out;
        }
        for (int i = 0; i < nt; i++)
            if (strcmp(types[i], "CogVideoXDownBlock3D")) {
                cvx_error("%s: down_block_types[%d] is \"%s\", expected \"CogVideoXDownBlock3D\"", path, i, types[i]);
                goto out;
            }
    }
    if (e->in_channels < 1) {
        cvx_error("%s: key 'in_channels' is %d, expected >= 1", path, e->in_channels);
        goto out;
    }
    rc = 0;
out:
    cvx_config_free(&c);
    return rc;
}

int cogvideox_vae_encoder_load(cogvideox_vae_encoder *e, const char *vae_dir, cvx_ctx *ctx) {
    memset(e, 0, sizeof *e);
    e->owns_ctx = ctx == NULL;
    e->ctx = ctx ? ctx : cvx_ctx_new(cvx_threads());
    char path[4096], name[256];
    if (cvx_path_join(path, sizeof path, vae_dir, "config.json")) {
        cvx_error("%s: path too long", vae_dir);
        goto fail;
    }
    if (load_config(e, path)) goto fail;
    loader L = {.w = cvx_weights_open(vae_dir), .ctx = e->ctx, .time_pad = VAE_TIME_PAD_REPLICATE};
    if (!L.w) goto fail;
    e->weights = L.w;
    const int n = e->num_blocks, lc2 = 2 * e->latent_channels;
    if (vae_conv_get(&L, &e->conv_in, "encoder.conv_in.conv", e->in_channels, e->block_out[0], 3, 3, 3, 0, 1)) goto fail;
    int out_ch = e->block_out[0];
    for (int i = 0; i < n; i++) {
        cogvideox_vae_down_block_w *b = &e->down[i];
        int in_ch = out_ch;
        out_ch = e->block_out[i];
        b->num_resnets = e->layers_per_block;
        b->resnets = cvx_calloc((size_t)(b->num_resnets ? b->num_resnets : 1), sizeof *b->resnets);
        for (int j = 0; j < b->num_resnets; j++) {
            snprintf(name, sizeof name, "encoder.down_blocks.%d.resnets.%d", i, j);
            if (resnet_get(&L, &b->resnets[j], name, j == 0 ? in_ch : out_ch, out_ch)) goto fail;
        }
        b->has_downsampler = i < n - 1;
        b->compress_time = i < e->temporal_levels;
        b->downsampler.cache_id = -1;
        if (b->has_downsampler) {
            snprintf(name, sizeof name, "encoder.down_blocks.%d.downsamplers.0.conv", i);
            if (vae_conv_get(&L, &b->downsampler, name, out_ch, out_ch, 1, 3, 3, 1, 0)) goto fail;
        }
    }
    for (int i = 0; i < 2; i++) {   /* CogVideoXMidBlock3D num_layers=2 */
        snprintf(name, sizeof name, "encoder.mid_block.resnets.%d", i);
        if (resnet_get(&L, &e->mid[i], name, out_ch, out_ch)) goto fail;
    }
    if (norm_get(&L, &e->norm_out_w, &e->norm_out_b, "encoder.norm_out", out_ch)) goto fail;
    if (vae_conv_get(&L, &e->conv_out, "encoder.conv_out.conv", out_ch, lc2, 3, 3, 3, 0, 1)) goto fail;
    e->quant_conv.cache_id = -1;
    if (e->use_quant_conv && vae_conv_get(&L, &e->quant_conv, "quant_conv", lc2, lc2, 1, 1, 1, 0, 0)) goto fail;
    e->num_caches = L.next_cache;
    return 0;
fail:
    cogvideox_vae_encoder_free(e);
    return -1;
}

void cogvideox_vae_encoder_free(cogvideox_vae_encoder *e) {
    for (int i = 0; i < e->num_blocks; i++) free(e->down[i].resnets);
    if (e->weights) cvx_weights_close(e->weights);
    if (e->owns_ctx) cvx_ctx_free(e->ctx);
    else if (e->ctx) vae_conv_forget(e->ctx);   /* a borrowed context keeps nothing of this encoder */
    memset(e, 0, sizeof *e);
}

/* ------------------------------------------------------------------ blocks */

/* GroupNorm over the whole [C, T·H·W] batch, then SiLU (out may equal x). */
static void groupnorm_silu(const cvx_tensor *w, const cvx_tensor *b, int groups, float eps, const float *x,
                           float *out, int C, size_t S) {
    float *gw = cvx_tensor_f32_dup(w), *gb = cvx_tensor_f32_dup(b);
    cvx_groupnorm(out, x, C, S, groups, gw, gb, eps);
    cvx_silu(out, (size_t)C * S);
    free(gw), free(gb);
}

float *cogvideox_vae_enc_resnet_block(const cogvideox_vae_encoder *e, const cogvideox_vae_enc_resnet_w *r, vae_cache *cache, const float *x, int T,
                            int H, int W) {
    const size_t S = (size_t)T * H * W;
    const float eps = (float)e->norm_eps;
    float *h = vae_fmap_get(e->ctx, (size_t)r->cin * S);                           // [Cin, T, H, W]
    groupnorm_silu(r->norm1_w, r->norm1_b, e->groups, eps, x, h, r->cin, S);      // norm1 + SiLU
    float *h1 = vae_causal_conv3d_consume(&r->conv1, cache, h, T, H, W, NULL);         // [Cout, T, H, W]; frees h
    groupnorm_silu(r->norm2_w, r->norm2_b, e->groups, eps, h1, h1, r->cout, S);   // norm2 + SiLU (dropout: identity)
    float *h2 = vae_causal_conv3d_consume(&r->conv2, cache, h1, T, H, W, NULL);        // [Cout, T, H, W]; frees h1
    if (r->shortcut.w) {
        float *s = vae_fmap_get(e->ctx, (size_t)r->cout * S);                      // [Cout, T, H, W]
        vae_conv1x1(&r->shortcut, x, S, s);
        cvx_add(h2, s, (size_t)r->cout * S);
        vae_fmap_put(e->ctx, s);
    } else {
        cvx_add(h2, x, (size_t)r->cout * S);
    }
    return h2;
}

float *cogvideox_vae_downsampler(const cogvideox_vae_down_block_w *b, const float *x, int C, int *T, int *H, int *W) {
    const int Ti = *T, HW = *H * *W;
    cvx_ctx *ctx = b->downsampler.ctx;
    const float *src = x;
    float *pooled = NULL;
    int To = Ti;
    if (b->compress_time && Ti > 1) {
        /* F.avg_pool1d(kernel 2, stride 2) over frames; an odd count keeps frame 0 alone. */
        const int odd = Ti % 2, first = odd ? 1 : 0;
        To = first + (Ti - first) / 2;
        pooled = vae_fmap_get(ctx, (size_t)C * To * HW);      // [C, To, H, W]
#pragma omp parallel for collapse(2) schedule(static)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < To; t++) {
                float *d = pooled + ((size_t)c * To + t) * HW;
                if (first && t == 0) {
                    memcpy(d, x + (size_t)c * Ti * HW, sizeof(float) * HW);
                    continue;
                }
                const int s0 = first + 2 * (t - first);
                const float *a = x + ((size_t)c * Ti + s0) * HW, *bb = a + HW;
                for (int i = 0; i < HW; i++) d[i] = (a[i] + bb[i]) / 2.0f;
            }
        src = pooled;
    }
    const int Ho = (*H - 2) / 2 + 1, Wo = (*W - 2) / 2 + 1;
    float *y = vae_fmap_get(ctx, (size_t)b->downsampler.cout * To * Ho * Wo);   // [C, To, Ho, Wo]
    vae_conv2d_s2(&b->downsampler, src, To, *H, *W, y);
    vae_fmap_put(ctx, pooled);
    *T = To, *H = Ho, *W = Wo;
    return y;
}

static float *down_block(const cogvideox_vae_encoder *e, const cogvideox_vae_down_block_w *b, vae_cache *cache, float *x, int *C, int *T,
                         int *H, int *W) {
    for (int i = 0; i < b->num_resnets; i++) {
        float *y = cogvideox_vae_enc_resnet_block(e, &b->resnets[i], cache, x, *T, *H, *W);
        vae_fmap_put(e->ctx, x);
        x = y;
        *C = b->resnets[i].cout;
    }
    if (b->has_downsampler) {
        float *y = cogvideox_vae_downsampler(b, x, *C, T, H, W);
        vae_fmap_put(e->ctx, x);
        x = y;
    }
    return x;
}

float *cogvideox_vae_encoder_forward(const cogvideox_vae_encoder *e, vae_cache *cache, const float *x, int T, int H, int W, int *T_out,
                           int *h_out, int *w_out) {
    int C = e->conv_in.cout;
    float *h = vae_fmap_get(e->ctx, (size_t)C * T * H * W);          // [C0, T, H, W]
    vae_causal_conv3d(&e->conv_in, cache, x, T, H, W, h);
    for (int i = 0; i < e->num_blocks; i++) h = down_block(e, &e->down[i], cache, h, &C, &T, &H, &W);
    for (int i = 0; i < 2; i++) {                                    // mid block
        float *y = cogvideox_vae_enc_resnet_block(e, &e->mid[i], cache, h, T, H, W);
        vae_fmap_put(e->ctx, h);
        h = y;
    }
    const size_t S = (size_t)T * H * W;
    groupnorm_silu(e->norm_out_w, e->norm_out_b, e->groups, NORM_OUT_EPS, h, h, C, S);   // norm_out + SiLU
    float *m = vae_causal_conv3d_consume(&e->conv_out, cache, h, T, H, W, NULL);   // [2lc, T, h, w]; frees h
    if (e->use_quant_conv) {
        float *q = vae_fmap_get(e->ctx, (size_t)e->quant_conv.cout * S);
        vae_conv1x1(&e->quant_conv, m, S, q);
        vae_fmap_put(e->ctx, m);
        m = q;
    }
    *T_out = T, *h_out = H, *w_out = W;
    return m;
}

/* ------------------------------------------------------------------ drivers */

/* Frame batch i of F frames: [start, end). num_batches = max(F // 8, 1); the first batch
 * takes the F % 8 leftover frames (upstream _encode). */
static int num_batches(int F) { return F / COGVIDEOX_VAE_SAMPLE_FRAMES_PER_BATCH > 1 ? F / COGVIDEOX_VAE_SAMPLE_FRAMES_PER_BATCH : 1; }
static void batch_range(int F, int i, int *s, int *e) {
    const int B = COGVIDEOX_VAE_SAMPLE_FRAMES_PER_BATCH, rem = F % B;
    *s = B * i + (i == 0 ? 0 : rem);
    *e = B * (i + 1) + rem;
    if (*e > F) *e = F;
}

static int batch_latent_frames(const cogvideox_vae_encoder *e, int n) {
    for (int l = 0; l < e->temporal_levels && l < e->num_blocks - 1; l++)
        if (n > 1) n = n % 2 + n / 2;
    return n;
}

int cogvideox_vae_encoded_frames(const cogvideox_vae_encoder *e, int F) {
    int total = 0;
    for (int i = 0; i < num_batches(F); i++) {
        int s, en;
        batch_range(F, i, &s, &en);
        total += batch_latent_frames(e, en - s);
    }
    return total;
}

int cogvideox_vae_encoded_size(const cogvideox_vae_encoder *e, int n) {
    for (int i = 0; i < e->num_blocks - 1; i++) n = (n - 2) / 2 + 1;
    return n;
}

void cogvideox_vae_encode_batched(const cogvideox_vae_encoder *e, const float *x, int F, int H, int W, float *moments, cvx_progress *p) {
    const int ci = e->in_channels, mc = 2 * e->latent_channels;
    const int Tl = cogvideox_vae_encoded_frames(e, F), h = cogvideox_vae_encoded_size(e, H), w = cogvideox_vae_encoded_size(e, W);
    const size_t HW = (size_t)H * W, hw = (size_t)h * w;
    vae_cache cache;
    vae_cache_init(&cache, e->num_caches);
    int t_done = 0;
    for (int i = 0; i < num_batches(F); i++) {
        int s, en;
        batch_range(F, i, &s, &en);
        const int n = en - s;
        float *xb = vae_fmap_get(e->ctx, (size_t)ci * n * HW);   // [ci, n, H, W]
        for (int c = 0; c < ci; c++) memcpy(xb + (size_t)c * n * HW, x + ((size_t)c * F + s) * HW, sizeof(float) * n * HW);
        int to, ho, wo;
        float *m = cogvideox_vae_encoder_forward(e, &cache, xb, n, H, W, &to, &ho, &wo);   // [mc, to, h, w]
        CVX_CHECK(ho == h && wo == w && t_done + to <= Tl);
        for (int c = 0; c < mc; c++)
            memcpy(moments + ((size_t)c * Tl + t_done) * hw, m + (size_t)c * to * hw, sizeof(float) * to * hw);
        t_done += to;
        vae_fmap_put(e->ctx, m), vae_fmap_put(e->ctx, xb);
        if (p) cvx_progress_update(p, p->done + 1);
    }
    CVX_CHECK(t_done == Tl);
    vae_cache_free(&cache);
}

typedef struct {
    int tsh, tsw;           /* sample tile size */
    int oh, ow;             /* sample tile stride (overlap_height/width upstream) */
    int tlh, tlw;           /* latent tile size (tile_latent_min_height/width) */
    int bh, bw;             /* blend extents in latents */
    int lim_h, lim_w;       /* row_limit_height/width */
} tiling;

static void tiling_params(const cogvideox_vae_encoder *e, int tsh, int tsw, tiling *t) {
    t->tsh = tsh, t->tsw = tsw;
    t->oh = (int)(tsh * (1.0 - TILE_OVERLAP_H));
    t->ow = (int)(tsw * (1.0 - TILE_OVERLAP_W));
    t->tlh = (int)(tsh / (double)e->spatial_ratio);
    t->tlw = (int)(tsw / (double)e->spatial_ratio);
    t->bh = (int)(t->tlh * TILE_OVERLAP_H);
    t->bw = (int)(t->tlw * TILE_OVERLAP_W);
    t->lim_h = t->tlh - t->bh;
    t->lim_w = t->tlw - t->bw;
}

int cogvideox_vae_encode_tiling_applies(const cogvideox_vae_encoder *e, int H, int W, int tsh, int tsw) { return W > tsw || H > tsh; }

int cogvideox_vae_encode_tiling_check(const cogvideox_vae_encoder *e, int tsh, int tsw) {
    tiling t;
    tiling_params(e, tsh, tsw, &t);
    if (t.oh < 1 || t.ow < 1 || t.lim_h < 1 || t.lim_w < 1)
        return cvx_error("encoder tile %dx%d samples is too small for this VAE (spatial ratio %d)", tsw, tsh,
                         e->spatial_ratio);
    return 0;
}

int cogvideox_vae_encode_steps(const cogvideox_vae_encoder *e, int F, int H, int W, int tiled, int tsh, int tsw) {
    if (!tiled) return num_batches(F);
    tiling t;
    tiling_params(e, tsh, tsw, &t);
    if (t.oh < 1 || t.ow < 1) return num_batches(F);
    return vae_tile_count(H, t.oh) * vae_tile_count(W, t.ow) * num_batches(F);
}

/* The tiles' producer for vae_tiles_stitch: sample tile (i, j) of x, encoded. */
typedef struct {
    const cogvideox_vae_encoder *e;
    const tiling *t;
    const float *x;
    int F, H, W;
    cvx_progress *p;
} tile_src;

static float *encode_tile(void *user, int i, int j) {
    const tile_src *s = user;
    const cogvideox_vae_encoder *e = s->e;
    const int ci = e->in_channels, mc = 2 * e->latent_channels, F = s->F, H = s->H, W = s->W;
    const int tsh = s->t->tsh, tsw = s->t->tsw, si = i * s->t->oh, sj = j * s->t->ow;
    const int th = H - si < tsh ? H - si : tsh, tw = W - sj < tsw ? W - sj : tsw;
    float *xt = vae_fmap_get(e->ctx, (size_t)ci * F * th * tw);   // [ci, F, th, tw]
    for (int c = 0; c < ci; c++)
        for (int f = 0; f < F; f++)
            for (int y = 0; y < th; y++)
                memcpy(xt + (((size_t)c * F + f) * th + y) * tw, s->x + (((size_t)c * F + f) * H + si + y) * W + sj,
                       sizeof(float) * tw);
    float *o = cvx_alloc_f32((size_t)mc * cogvideox_vae_encoded_frames(e, F) * cogvideox_vae_encoded_size(e, th) * cogvideox_vae_encoded_size(e, tw));
    cogvideox_vae_encode_batched(e, xt, F, th, tw, o, s->p);   /* own batches and caches per tile */
    vae_fmap_put(e->ctx, xt);
    return o;   // [mc, Tl, h(th), w(tw)]
}

float *cogvideox_vae_encode_tiled(const cogvideox_vae_encoder *e, const float *x, int F, int H, int W, int tsh, int tsw, int *T_out,
                        int *h_out, int *w_out, cvx_progress *p) {
    const int mc = 2 * e->latent_channels, Tl = cogvideox_vae_encoded_frames(e, F);
    tiling t;
    tiling_params(e, tsh, tsw, &t);
    CVX_CHECK(t.oh >= 1 && t.ow >= 1);
    const int rows = vae_tile_count(H, t.oh), cols = vae_tile_count(W, t.ow);
    /* Every tile's output size in latents (the last row / column may be smaller). */
    int *tile_h = cvx_malloc(sizeof(int) * rows), *tile_w = cvx_malloc(sizeof(int) * cols);
    for (int i = 0; i < rows; i++) tile_h[i] = cogvideox_vae_encoded_size(e, H - i * t.oh < tsh ? H - i * t.oh : tsh);
    for (int j = 0; j < cols; j++) tile_w[j] = cogvideox_vae_encoded_size(e, W - j * t.ow < tsw ? W - j * t.ow : tsw);
    tile_src src = {e, &t, x, F, H, W, p};
    vae_tile_grid g = {rows, cols, tile_h, tile_w, mc, Tl, t.bh, t.bw, t.lim_h, t.lim_w};
    float *out = vae_tiles_stitch(&g, encode_tile, &src, h_out, w_out);   // [mc, Tl, hout, wout]
    free(tile_h), free(tile_w);
    *T_out = Tl;
    return out;
}

double cogvideox_vae_encode_estimate_peak_bytes(const cogvideox_vae_encoder *e, int F, int H, int W) {
    /* Caches: the last 2 input frames of every causal conv, at its block's resolution. */
    double caches = 0, block0_caches = 0, h = H, w = W;
    for (int i = 0; i < e->num_blocks; i++) {
        const cogvideox_vae_down_block_w *b = &e->down[i];
        for (int j = 0; j < b->num_resnets; j++) caches += 2.0 * (b->resnets[j].cin + b->resnets[j].cout) * h * w;
        if (i == 0) block0_caches = caches;
        if (b->has_downsampler) h = floor((h - 2) / 2) + 1, w = floor((w - 2) / 2) + 1;
    }
    caches += 2.0 * (4 + 1) * e->block_out[e->num_blocks - 1] * h * w;   /* mid block + conv_out */
    /* The largest live set: a block-0 ResNet conv with its input, padded input and output. */
    const double C0 = e->block_out[0], HW = (double)H * W;
    int s, en;
    batch_range(F, 0, &s, &en);
    const double first = C0 * HW * (3.0 * (en - s) + 2) + block0_caches;
    const double later = num_batches(F) > 1 ? C0 * HW * (3.0 * COGVIDEOX_VAE_SAMPLE_FRAMES_PER_BATCH + 2) + caches : 0;
    return 4.0 * ((first > later ? first : later) + (double)e->in_channels * F * HW);
}
