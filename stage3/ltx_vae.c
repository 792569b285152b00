/* AutoencoderKLLTXVideo (diffusers 0.35.2 autoencoder_kl_ltx.py): config, weights, decoder and
 * encoder on whole videos (see ltx_vae.h). Feature maps are channel-major x[C, T, H, W]. */
#include "ltx_vae.h"

#include "config.h"
#include "conv.h"
#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "ops.h"
#include "safetensors.h"
#include "validate.h"
#include "vae_conv.h"
#include "vecmath.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PixArtAlphaCombinedTimestepSizeEmbeddings(dim, 0): sinusoid 256 → linear_1 → SiLU → linear_2. */
typedef struct {
    const cvx_tensor *l1_w, *l1_b, *l2_w, *l2_b;
    int dim;                                   /* 0: none */
} ltx_temb_w;

/* LTXVideoResnetBlock3d. */
typedef struct {
    int cin, cout;
    vae_conv conv1, conv2, shortcut;           /* shortcut: 1×1×1 when cin != cout */
    float *norm3_w, *norm3_b;                  /* LayerNorm over cin (affine), cin != cout */
    float *sst;                                /* scale_shift_table [4, cin] (timestep conditioning) or NULL */
} ltx_res_w;

/* A decoder up block (LTXVideoUpBlock3d). */
typedef struct {
    int has_conv_in;
    ltx_res_w conv_in;
    ltx_temb_w temb;
    int has_up, up_residual, up_factor, up_cin;   /* up-sampler on up_cin channels, stride (2, 2, 2) */
    vae_conv up_conv;
    int n_res;
    ltx_res_w *res;
} ltx_up_w;

/* An encoder down block (LTXVideoDownBlock3D / LTXVideo095DownBlock3D). */
typedef struct {
    int n_res;
    ltx_res_w *res;
    int down;                                  /* 0 none, 1 stride-2 conv, 2 LTXVideoDownsampler3d */
    int st, sh, sw, group;                     /* the down-sampler's stride and residual group size */
    vae_conv down_conv;
    int has_conv_out;
    ltx_res_w conv_out;
} ltx_down_w;

struct ltx_vae {
    ltx_vae_config c;
    cvx_weights *w;
    cvx_ctx *ctx;
    int owns_ctx;
    float *latents_mean, *latents_std;
    /* decoder */
    vae_conv dec_conv_in, dec_conv_out;
    ltx_temb_w dec_mid_temb, dec_temb;
    int dec_mid_n;
    ltx_res_w *dec_mid;
    ltx_up_w up[LTX_VAE_MAX_BLOCKS];
    float *dec_sst;                            /* [2, C] */
    float dec_tsm;                             /* timestep_scale_multiplier */
    int dec_out_ch;                            /* channels before conv_out */
    /* encoder */
    vae_conv enc_conv_in, enc_conv_out;
    ltx_down_w down[LTX_VAE_MAX_BLOCKS];
    int enc_mid_n;
    ltx_res_w *enc_mid;
    int enc_out_ch;
};

/* ------------------------------------------------------------------ config */

static int parse_bools(cvx_config *j, const char *path, const char *key, int *out, int n, int def) {
    int got = 0, tmp[LTX_VAE_MAX_BLOCKS + 1];
    for (int i = 0; i < n; i++) out[i] = def;
    if (!cvx_cfg_has(j, key)) return 0;
    if (cvx_cfg_bool_array(j, key, tmp, LTX_VAE_MAX_BLOCKS + 1, &got)) return -1;
    if (got != n) return cvx_error("%s: key '%s' has %d entries, expected %d", path, key, got, n);
    memcpy(out, tmp, sizeof(int) * (size_t)n);
    return 0;
}

static int parse_ints(cvx_config *j, const char *path, const char *key, int *out, int n, int lo, int hi) {
    int64_t tmp[LTX_VAE_MAX_BLOCKS + 1];
    int got = 0;
    if (cvx_cfg_int_array(j, key, tmp, LTX_VAE_MAX_BLOCKS + 1, &got)) return -1;
    if (n >= 0 && got != n) return cvx_error("%s: key '%s' has %d entries, expected %d", path, key, got, n);
    for (int i = 0; i < got; i++) {
        if (tmp[i] < lo || tmp[i] > hi)
            return cvx_error("%s: key '%s'[%d] = %lld, expected %d .. %d", path, key, i, (long long)tmp[i], lo, hi);
        out[i] = (int)tmp[i];
    }
    return got;
}

int ltx_vae_config_load(const char *path, ltx_vae_config *c) {
    cvx_config j;
    if (cvx_config_load(&j, path)) return -1;
    int rc = -1, n;
    int64_t v;
    const char *s, *strs[LTX_VAE_MAX_BLOCKS + 1];
    memset(c, 0, sizeof *c);
    if (cvx_cfg_str_or(&j, "_class_name", "AutoencoderKLLTXVideo", &s)) goto out;
    if (strcmp(s, "AutoencoderKLLTXVideo")) {
        cvx_error("%s: '_class_name' is \"%s\", expected \"AutoencoderKLLTXVideo\"", path, s);
        goto out;
    }
#define INT(key, def, lo, hi, dst) do { if (cvx_cfg_int_range_or(&j, key, def, lo, hi, &v)) goto out; dst = (int)v; } while (0)
    INT("in_channels", 3, 1, 64, c->in_channels);
    INT("out_channels", 3, 1, 64, c->out_channels);
    INT("latent_channels", 128, 1, 4096, c->latent_channels);
    INT("patch_size", 4, 1, 16, c->patch_size);
    INT("patch_size_t", 1, 1, 1, c->patch_size_t);
#undef INT
    if (cvx_cfg_num_range_or(&j, "resnet_norm_eps", 1e-6, 0, 1, 1, &c->resnet_norm_eps)) goto out;
    if (cvx_cfg_num_range_or(&j, "scaling_factor", 1.0, 0, 1e6, 1, &c->scaling_factor)) goto out;
    if (cvx_cfg_bool_or(&j, "timestep_conditioning", 0, &c->timestep_conditioning)) goto out;
    if (cvx_cfg_bool_or(&j, "encoder_causal", 1, &c->encoder_causal)) goto out;
    if (cvx_cfg_bool_or(&j, "decoder_causal", 0, &c->decoder_causal)) goto out;
    /* encoder */
    if ((n = parse_ints(&j, path, "block_out_channels", c->block_out_channels, -1, 1, 65536)) < 0) goto out;
    int n_types = 0;
    if (cvx_cfg_str_array(&j, "down_block_types", strs, LTX_VAE_MAX_BLOCKS, &n_types)) goto out;
    if (n_types < 1) { cvx_error("%s: key 'down_block_types' is empty", path); goto out; }
    c->down_095 = !strcmp(strs[n_types - 1], "LTXVideo095DownBlock3D");
    for (int i = 0; i < n_types; i++)
        if (strcmp(strs[i], c->down_095 ? "LTXVideo095DownBlock3D" : "LTXVideoDownBlock3D")) {
            cvx_error("%s: key 'down_block_types'[%d] is \"%s\": one kind, LTXVideoDownBlock3D or "
                      "LTXVideo095DownBlock3D, expected", path, i, strs[i]);
            goto out;
        }
    c->n_down = n - (c->down_095 ? 1 : 0);
    if (c->n_down < 1 || n_types < c->n_down) {
        cvx_error("%s: keys 'block_out_channels' (%d) and 'down_block_types' (%d) do not fit", path, n, n_types);
        goto out;
    }
    if (parse_ints(&j, path, "layers_per_block", c->layers_per_block, c->n_down + 1, 0, 64) < 0) goto out;
    if (parse_bools(&j, path, "spatio_temporal_scaling", c->spatio_temporal_scaling, c->n_down, 1)) goto out;
    for (int i = 0; i < c->n_down; i++) c->downsample_type[i] = 0;
    if (cvx_cfg_has(&j, "downsample_type")) {
        if (cvx_cfg_str_array(&j, "downsample_type", strs, LTX_VAE_MAX_BLOCKS, &n_types)) goto out;
        static const char *const kinds[4] = {"conv", "spatial", "temporal", "spatiotemporal"};
        for (int i = 0; i < c->n_down && i < n_types; i++) {
            int k = -1;
            for (int q = 0; q < 4; q++) if (!strcmp(strs[i], kinds[q])) k = q;
            if (k < 0 || (k > 0 && !c->down_095)) {
                cvx_error("%s: key 'downsample_type'[%d] is \"%s\": not supported with these down blocks", path, i,
                          strs[i]);
                goto out;
            }
            c->downsample_type[i] = k;
        }
    }
    /* decoder */
    if ((c->n_up = parse_ints(&j, path, "decoder_block_out_channels", c->decoder_block_out_channels, -1, 1, 65536)) < 1)
        goto out;
    if (parse_ints(&j, path, "decoder_layers_per_block", c->decoder_layers_per_block, c->n_up + 1, 0, 64) < 0) goto out;
    if (parse_bools(&j, path, "decoder_spatio_temporal_scaling", c->decoder_spatio_temporal_scaling, c->n_up, 1))
        goto out;
    if (parse_bools(&j, path, "upsample_residual", c->upsample_residual, c->n_up, 0)) goto out;
    for (int i = 0; i < c->n_up; i++) c->upsample_factor[i] = 1;
    if (cvx_cfg_has(&j, "upsample_factor") &&
        parse_ints(&j, path, "upsample_factor", c->upsample_factor, c->n_up, 1, 8) < 0)
        goto out;
    int inject[LTX_VAE_MAX_BLOCKS + 1];
    if (parse_bools(&j, path, "decoder_inject_noise", inject, c->n_up + 1, 0)) goto out;
    for (int i = 0; i <= c->n_up; i++)
        if (inject[i]) {
            cvx_error("%s: key 'decoder_inject_noise'[%d] is true (the 0.9.1 decoder's noise injection): not "
                      "supported", path, i);
            goto out;
        }
    rc = 0;
out:
    cvx_config_free(&j);
    return rc;
}

/* ------------------------------------------------------------------ load */

static int get_res(vae_loader *L, const char *prefix, int cin, int cout, int temb, ltx_res_w *r) {
    char n[256];
    r->cin = cin, r->cout = cout;
    snprintf(n, sizeof n, "%s.conv1.conv", prefix);
    if (vae_conv_get(L, &r->conv1, n, cin, cout, 3, 3, 3, 0, 0)) return -1;
    snprintf(n, sizeof n, "%s.conv2.conv", prefix);
    if (vae_conv_get(L, &r->conv2, n, cout, cout, 3, 3, 3, 0, 0)) return -1;
    if (cin != cout) {
        snprintf(n, sizeof n, "%s.conv_shortcut.conv", prefix);
        if (vae_conv_get(L, &r->shortcut, n, cin, cout, 1, 1, 1, 0, 0)) return -1;
        const cvx_tensor *t;
        snprintf(n, sizeof n, "%s.norm3.weight", prefix);
        if (!(t = vae_loader_get(L, n, CVX_SHAPE(cin)))) return -1;
        r->norm3_w = cvx_tensor_f32_dup(t);
        snprintf(n, sizeof n, "%s.norm3.bias", prefix);
        if (!(t = vae_loader_get(L, n, CVX_SHAPE(cin)))) return -1;
        r->norm3_b = cvx_tensor_f32_dup(t);
    }
    if (temb) {
        const cvx_tensor *t;
        snprintf(n, sizeof n, "%s.scale_shift_table", prefix);
        if (!(t = vae_loader_get(L, n, CVX_SHAPE(4, cin)))) return -1;
        r->sst = cvx_tensor_f32_dup(t);
    }
    return 0;
}

static void free_res(ltx_res_w *r) {
    free(r->norm3_w);
    free(r->norm3_b);
    free(r->sst);
}

static int get_temb(vae_loader *L, const char *prefix, int dim, ltx_temb_w *t) {
    char n[256];
    t->dim = dim;
#define T_(dst, suffix, ...) do { snprintf(n, sizeof n, "%s.time_embedder.timestep_embedder.%s", prefix, suffix); \
        if (!((dst) = vae_loader_get(L, n, CVX_SHAPE(__VA_ARGS__)))) return -1; } while (0)
    T_(t->l1_w, "linear_1.weight", dim, 256);
    T_(t->l1_b, "linear_1.bias", dim);
    T_(t->l2_w, "linear_2.weight", dim, dim);
    T_(t->l2_b, "linear_2.bias", dim);
#undef T_
    return 0;
}

static int get_res_list(vae_loader *L, const char *prefix, int n, int ch, int temb, ltx_res_w **out) {
    char p[256];
    *out = cvx_calloc((size_t)(n ? n : 1), sizeof **out);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s.resnets.%d", prefix, i);
        if (get_res(L, p, ch, ch, temb, &(*out)[i])) return -1;
    }
    return 0;
}

static int load_decoder(ltx_vae *v, vae_loader *L) {
    const ltx_vae_config *c = &v->c;
    int n = c->n_up, tc = c->timestep_conditioning, boc[LTX_VAE_MAX_BLOCKS], lpb[LTX_VAE_MAX_BLOCKS + 1];
    for (int i = 0; i < n; i++) boc[i] = c->decoder_block_out_channels[n - 1 - i];   /* reversed */
    for (int i = 0; i <= n; i++) lpb[i] = c->decoder_layers_per_block[n - i];
    int och = boc[0];
    char p[256];
    if (vae_conv_get(L, &v->dec_conv_in, "decoder.conv_in.conv", c->latent_channels, och, 3, 3, 3, 0, 0)) return -1;
    if (tc && get_temb(L, "decoder.mid_block", 4 * och, &v->dec_mid_temb)) return -1;
    v->dec_mid_n = lpb[0];
    if (get_res_list(L, "decoder.mid_block", lpb[0], och, tc, &v->dec_mid)) return -1;
    for (int i = 0; i < n; i++) {
        ltx_up_w *u = &v->up[i];
        int f = c->upsample_factor[n - 1 - i], in = och / f, out = boc[i] / f;
        snprintf(p, sizeof p, "decoder.up_blocks.%d", i);
        if (in != out) {
            if (tc)   /* upstream hands this resnet the raw timestep: no real checkpoint has it */
                return cvx_error("%s: decoder up block %d changes width with timestep_conditioning: not supported",
                                 cvx_weights_path(v->w), i);
            char q[300];
            snprintf(q, sizeof q, "%s.conv_in", p);
            u->has_conv_in = 1;
            if (get_res(L, q, in, out, 0, &u->conv_in)) return -1;
        }
        if (tc && get_temb(L, p, 4 * out, &u->temb)) return -1;
        if (c->decoder_spatio_temporal_scaling[n - 1 - i]) {
            char q[300];
            u->has_up = 1, u->up_residual = c->upsample_residual[n - 1 - i], u->up_factor = f, u->up_cin = out * f;
            snprintf(q, sizeof q, "%s.upsamplers.0.conv.conv", p);
            if (vae_conv_get(L, &u->up_conv, q, u->up_cin, u->up_cin * 8 / f, 3, 3, 3, 0, 0)) return -1;
        } else if (f != 1) {
            return cvx_error("%s: decoder up block %d has upsample_factor %d without up-sampling",
                             cvx_weights_path(v->w), i, f);
        }
        u->n_res = lpb[i + 1];
        if (get_res_list(L, p, u->n_res, out, tc, &u->res)) return -1;
        och = out;
    }
    v->dec_out_ch = och;
    if (vae_conv_get(L, &v->dec_conv_out, "decoder.conv_out.conv", och,
                     c->out_channels * c->patch_size * c->patch_size * c->patch_size_t, 3, 3, 3, 0, 0))
        return -1;
    if (tc) {
        const cvx_tensor *t;
        if (get_temb(L, "decoder", 2 * och, &v->dec_temb)) return -1;
        if (!(t = vae_loader_get(L, "decoder.scale_shift_table", CVX_SHAPE(2, och)))) return -1;
        v->dec_sst = cvx_tensor_f32_dup(t);
        /* a 0-d parameter as diffusers saves it ([1] in some conversions) */
        t = vae_loader_get(L, "decoder.timestep_scale_multiplier", NULL, 0);
        if (!t) {
            char first[512];
            snprintf(first, sizeof first, "%s", cvx_last_error());
            if (!(t = vae_loader_get(L, "decoder.timestep_scale_multiplier", CVX_SHAPE(1))))
                return cvx_error("%s (or shape [] : %s)", cvx_last_error(), first);
        }
        float *m = cvx_tensor_f32_dup(t);
        v->dec_tsm = m[0];
        free(m);
    }
    return 0;
}

static int load_encoder(ltx_vae *v, vae_loader *L) {
    const ltx_vae_config *c = &v->c;
    const int *boc = c->block_out_channels;
    int pin = c->in_channels * c->patch_size * c->patch_size * c->patch_size_t, och = boc[0];
    char p[256], q[300];
    if (vae_conv_get(L, &v->enc_conv_in, "encoder.conv_in.conv", pin, och, 3, 3, 3, 0, 0)) return -1;
    for (int i = 0; i < c->n_down; i++) {
        ltx_down_w *d = &v->down[i];
        int in = och;
        och = c->down_095 ? boc[i + 1] : (i + 1 < c->n_down ? boc[i + 1] : boc[i]);
        snprintf(p, sizeof p, "encoder.down_blocks.%d", i);
        d->n_res = c->layers_per_block[i];
        if (get_res_list(L, p, d->n_res, in, 0, &d->res)) return -1;
        if (c->spatio_temporal_scaling[i]) {
            int k = c->downsample_type[i];
            if (k == 0) {   /* LTXVideoCausalConv3d, stride (2, 2, 2), width kept */
                d->down = 1, d->st = d->sh = d->sw = 2;
                snprintf(q, sizeof q, "%s.downsamplers.0.conv", p);
                if (vae_conv_get(L, &d->down_conv, q, in, in, 3, 3, 3, 0, 0)) return -1;
            } else {        /* LTXVideoDownsampler3d: conv to out / stride, space-to-depth, + grouped mean */
                d->down = 2;
                d->st = k == 1 ? 1 : 2, d->sh = d->sw = k == 2 ? 1 : 2;
                int prod = d->st * d->sh * d->sw;
                if ((in * prod) % och || och % prod)
                    return cvx_error("%s: encoder down block %d: widths %d -> %d do not fit its stride",
                                     cvx_weights_path(v->w), i, in, och);
                d->group = in * prod / och;
                snprintf(q, sizeof q, "%s.downsamplers.0.conv.conv", p);
                if (vae_conv_get(L, &d->down_conv, q, in, och / prod, 3, 3, 3, 0, 0)) return -1;
            }
        }
        if (!c->down_095 && in != och) {
            snprintf(q, sizeof q, "%s.conv_out", p);
            d->has_conv_out = 1;
            if (get_res(L, q, in, och, 0, &d->conv_out)) return -1;
        } else if (c->down_095 && d->down != 2 && in != och) {
            return cvx_error("%s: encoder down block %d changes width %d -> %d without a down-sampler",
                             cvx_weights_path(v->w), i, in, och);
        }
    }
    v->enc_out_ch = och;
    v->enc_mid_n = c->layers_per_block[c->n_down];
    if (get_res_list(L, "encoder.mid_block", v->enc_mid_n, och, 0, &v->enc_mid)) return -1;
    if (vae_conv_get(L, &v->enc_conv_out, "encoder.conv_out.conv", och, c->latent_channels + 1, 3, 3, 3, 0, 0))
        return -1;
    return 0;
}

ltx_vae *ltx_vae_load(const char *dir, cvx_ctx *ctx) {
    char path[4096];
    if (cvx_path_join(path, sizeof path, dir, "config.json")) {
        cvx_error("%s: path too long", dir);
        return NULL;
    }
    return ltx_vae_load_file(path, dir, ctx);
}

ltx_vae *ltx_vae_load_file(const char *config_json, const char *weights, cvx_ctx *ctx) {
    ltx_vae *v = cvx_calloc(1, sizeof *v);
    if (ltx_vae_config_load(config_json, &v->c)) { free(v); return NULL; }
    if (!(v->w = cvx_weights_open(weights))) { free(v); return NULL; }
    if (ltx_vae_original_layout(v->w)) {
        cvx_weights_close(v->w);
        free(v);
        return NULL;
    }
    v->owns_ctx = ctx == NULL;
    v->ctx = ctx ? ctx : cvx_ctx_new(cvx_threads());
    vae_loader L = {.w = v->w, .ctx = v->ctx, .time_pad = VAE_TIME_PAD_REPLICATE};
    const cvx_tensor *t;
    int C = v->c.latent_channels;
    if (load_decoder(v, &L) || load_encoder(v, &L)) goto fail;
    if (!(t = vae_loader_get(&L, "latents_mean", CVX_SHAPE(C)))) goto fail;
    v->latents_mean = cvx_tensor_f32_dup(t);
    if (!(t = vae_loader_get(&L, "latents_std", CVX_SHAPE(C)))) goto fail;
    v->latents_std = cvx_tensor_f32_dup(t);
    return v;
fail:
    ltx_vae_free(v);
    return NULL;
}

void ltx_vae_free(ltx_vae *v) {
    if (!v) return;
    for (int i = 0; i < v->dec_mid_n && v->dec_mid; i++) free_res(&v->dec_mid[i]);
    free(v->dec_mid);
    for (int i = 0; i < LTX_VAE_MAX_BLOCKS; i++) {
        free_res(&v->up[i].conv_in);
        for (int k = 0; k < v->up[i].n_res && v->up[i].res; k++) free_res(&v->up[i].res[k]);
        free(v->up[i].res);
        free_res(&v->down[i].conv_out);
        for (int k = 0; k < v->down[i].n_res && v->down[i].res; k++) free_res(&v->down[i].res[k]);
        free(v->down[i].res);
    }
    for (int i = 0; i < v->enc_mid_n && v->enc_mid; i++) free_res(&v->enc_mid[i]);
    free(v->enc_mid);
    free(v->dec_sst);
    free(v->latents_mean);
    free(v->latents_std);
    cvx_weights_close(v->w);
    if (v->owns_ctx) cvx_ctx_free(v->ctx);
    else if (v->ctx) vae_conv_forget(v->ctx);
    free(v);
}

const ltx_vae_config *ltx_vae_get_config(const ltx_vae *v) { return &v->c; }
const float *ltx_vae_latents_mean(const ltx_vae *v) { return v->latents_mean; }
const float *ltx_vae_latents_std(const ltx_vae *v) { return v->latents_std; }

/* ------------------------------------------------------------------ pieces */

/* A 3D conv with LTX's time padding: causal = the first frame kt−1 times in front; else the
 * first and the last frame (kt−1)/2 times each side. Spatial zero padding k/2. y [cout, T, H, W]. */
static void ltx_conv(const vae_conv *c, const float *x, int T, int H, int W, int causal, float *y) {
    if (c->kt == 1 && c->kh == 1 && c->kw == 1) {
        vae_conv1x1(c, x, (size_t)T * H * W, y);
        return;
    }
    int kt = c->kt, ph = c->kh / 2, pw = c->kw / 2, left = causal ? kt - 1 : (kt - 1) / 2, right = kt - 1 - left;
    int Tp = T + kt - 1, Hp = H + 2 * ph, Wp = W + 2 * pw;
    float *xp = vae_fmap_get(c->ctx, (size_t)c->cin * Tp * Hp * Wp);                          // [cin, Tp, Hp, Wp]
    for (int k = 0; k < left; k++) cvx_pad_frames(xp, Tp, k, x, c->cin, T, 0, 1, H, W, ph, pw);
    cvx_pad_frames(xp, Tp, left, x, c->cin, T, 0, T, H, W, ph, pw);
    for (int k = 0; k < right; k++) cvx_pad_frames(xp, Tp, left + T + k, x, c->cin, T, T - 1, 1, H, W, ph, pw);
    vae_conv_padded(c, xp, Tp, Hp, Wp, y);
    vae_fmap_put(c->ctx, xp);
}

/* RMSNorm over the channels of x[C, N] (eps, no affine: x·rsqrt(mean_c x² + eps)), then
 * optionally y·(1 + scale_c) + shift_c and SiLU. out may equal x. */
static void ltx_channel_rms(const float *x, int C, size_t N, float eps, const float *shift, const float *scale, int silu,
                            float *out) {
#pragma omp parallel for schedule(static)
    for (size_t n0 = 0; n0 < N; n0 += 256) {
        size_t m = N - n0 < 256 ? N - n0 : 256;
        double ss[256] = {0};
        for (int c = 0; c < C; c++)
            for (size_t i = 0; i < m; i++) {
                double v = x[(size_t)c * N + n0 + i];
                ss[i] += v * v;
            }
        float r[256];
        for (size_t i = 0; i < m; i++) r[i] = (float)(1.0 / sqrt((double)((float)(ss[i] / C) + eps)));
        for (int c = 0; c < C; c++) {
            const float *xc = x + (size_t)c * N + n0;
            float *oc = out + (size_t)c * N + n0;
            for (size_t i = 0; i < m; i++) {
                float v = xc[i] * r[i];
                if (scale) v = v * (1.0f + scale[c]) + shift[c];
                oc[i] = v;
            }
            if (silu) cvx_silu_serial(oc, m);
        }
    }
}

/* nn.LayerNorm over the channels of x[C, N] (affine w, b). */
static void ltx_channel_layernorm(const float *x, int C, size_t N, float eps, const float *w, const float *b, float *out) {
#pragma omp parallel for schedule(static)
    for (size_t n0 = 0; n0 < N; n0 += 256) {
        size_t m = N - n0 < 256 ? N - n0 : 256;
        double mean[256] = {0}, var[256] = {0};
        for (int c = 0; c < C; c++)
            for (size_t i = 0; i < m; i++) mean[i] += x[(size_t)c * N + n0 + i];
        for (size_t i = 0; i < m; i++) mean[i] /= C;
        for (int c = 0; c < C; c++)
            for (size_t i = 0; i < m; i++) {
                double d = x[(size_t)c * N + n0 + i] - mean[i];
                var[i] += d * d;
            }
        for (size_t i = 0; i < m; i++) var[i] = 1.0 / sqrt(var[i] / C + eps);
        for (int c = 0; c < C; c++)
            for (size_t i = 0; i < m; i++) {
                size_t k = (size_t)c * N + n0 + i;
                out[k] = (float)((x[k] - mean[i]) * var[i]) * w[c] + b[c];
            }
    }
}

/* The time embedder: emb[dim] of the (scaled) timestep t. */
static void ltx_vae_temb(ltx_vae *v, const ltx_temb_w *tw, float t, float *emb) {
    float sinus[256], *u = cvx_alloc_f32((size_t)tw->dim);
    cvx_timestep_sinusoid(sinus, &t, 1, 256, 1, 0.0);
    cvx_linear(v->ctx, sinus, 1, 256, tw->l1_w, tw->l1_b, u);
    cvx_silu(u, (size_t)tw->dim);
    cvx_linear(v->ctx, u, 1, tw->dim, tw->l2_w, tw->l2_b, emb);
    free(u);
}

/* LTXVideoResnetBlock3d on x[cin, T, H, W] (consumed) → [cout, T, H, W]. e: the block's time
 * embedding [4·cin] (shift_1, scale_1, shift_2, scale_2 after + scale_shift_table) or NULL. */
static float *ltx_resnet(const ltx_vae *v, const ltx_res_w *r, float *x, int T, int H, int W, int causal, const float *e) {
    int ci = r->cin, co = r->cout;
    size_t N = (size_t)T * H * W;
    float *mod = NULL;
    if (r->sst) {
        mod = cvx_malloc(sizeof(float) * 4 * (size_t)ci);
        for (int i = 0; i < 4 * ci; i++) mod[i] = e[i] + r->sst[i];
    }
    float *h = vae_fmap_get(v->ctx, (size_t)ci * N), *y = vae_fmap_get(v->ctx, (size_t)co * N);
    ltx_channel_rms(x, ci, N, 1e-8f, mod, mod ? mod + ci : NULL, 1, h);
    ltx_conv(&r->conv1, h, T, H, W, causal, y);                                      // [co, N]
    ltx_channel_rms(y, co, N, 1e-8f, mod ? mod + 2 * ci : NULL, mod ? mod + 3 * ci : NULL, 1, y);
    if ((size_t)co > (size_t)ci) { vae_fmap_put(v->ctx, h); h = vae_fmap_get(v->ctx, (size_t)co * N); }
    ltx_conv(&r->conv2, y, T, H, W, causal, h);                                      // h: [co, N]
    if (r->norm3_w) {   /* shortcut: LayerNorm over cin, then the 1×1×1 conv */
        ltx_channel_layernorm(x, ci, N, (float)v->c.resnet_norm_eps, r->norm3_w, r->norm3_b, x);
        vae_conv1x1(&r->shortcut, x, N, y);                                          // y: [co, N]
        cvx_add(h, y, (size_t)co * N);
    } else {
        cvx_add(h, x, (size_t)co * N);
    }
    vae_fmap_put(v->ctx, x);
    vae_fmap_put(v->ctx, y);
    free(mod);
    return h;
}

/* Depth-to-space of y[Cd·8, T, H, W] (channel ((c·2 + a)·2 + b)·2 + d) into frames 1.. of the
 * doubled grid: out[c, 2t + a − 1, 2h + b, 2w + d] (frame −1 dropped) for out channels c < Co,
 * source channel c % Cd (the residual's channel repeat). Adds into out when acc. */
static void depth_to_space(const float *y, int Cd, int T, int H, int W, int Co, int acc, float *out) {
    int To = 2 * T - 1, Ho = 2 * H, Wo = 2 * W;
#pragma omp parallel for collapse(2) schedule(static)
    for (int c = 0; c < Co; c++)
        for (int to = 0; to < To; to++) {
            int tt = to + 1, t = tt / 2, a = tt % 2, cs = c % Cd;
            for (int ho = 0; ho < Ho; ho++) {
                int hh = ho / 2, b = ho % 2;
                float *o = out + (((size_t)c * To + to) * Ho + ho) * Wo;
                for (int wo = 0; wo < Wo; wo++) {
                    int d = wo % 2;
                    float s = y[((((size_t)((cs * 2 + a) * 2 + b) * 2 + d) * T + t) * H + hh) * W + wo / 2];
                    o[wo] = acc ? o[wo] + s : s;
                }
            }
        }
}

/* LTXVideoUpsampler3d (stride 2 on every axis) on x[Ci, T, H, W] (consumed) →
 * [Ci·8/f / 8 · ... = Ci/f, 2T − 1, 2H, 2W]. */
static float *ltx_upsample(const ltx_up_w *u, float *x, int T, int H, int W, int causal) {
    int Ci = u->up_cin, Cc = Ci * 8 / u->up_factor, Co = Cc / 8;
    float *y = vae_fmap_get(u->up_conv.ctx, (size_t)Cc * T * H * W);
    ltx_conv(&u->up_conv, x, T, H, W, causal, y);                                    // [Cc, T, H, W]
    float *out = vae_fmap_get(u->up_conv.ctx, (size_t)Co * (2 * T - 1) * 4 * H * W);
    depth_to_space(y, Co, T, H, W, Co, 0, out);
    if (u->up_residual) depth_to_space(x, Ci / 8, T, H, W, Co, 1, out);              // repeated Ci/8 channels
    vae_fmap_put(u->up_conv.ctx, x);
    vae_fmap_put(u->up_conv.ctx, y);
    return out;
}

/* ------------------------------------------------------------------ decode */

void ltx_vae_decode_input(const float *z, const float *noise, size_t n, float s, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = (1.0f - s) * z[i] + s * noise[i];
}

int ltx_vae_decode(ltx_vae *v, const float *z, int F, int h, int w, float timestep, float *video) {
    const ltx_vae_config *c = &v->c;
    if (F < 1 || h < 1 || w < 1) return cvx_error("ltx vae decode: bad latent size %dx%dx%d", F, h, w);
    int causal = c->decoder_causal, tc = c->timestep_conditioning, T = F, H = h, W = w, C = v->dec_conv_in.cout;
    float t = timestep * v->dec_tsm;                                                 // temb · timestep_scale_multiplier
    float *x = vae_fmap_get(v->ctx, (size_t)C * T * H * W);
    ltx_conv(&v->dec_conv_in, z, T, H, W, causal, x);                                // [C, F, h, w]
    int emax = v->dec_mid_temb.dim > v->dec_temb.dim ? v->dec_mid_temb.dim : v->dec_temb.dim;
    for (int b = 0; b < c->n_up; b++) if (v->up[b].temb.dim > emax) emax = v->up[b].temb.dim;
    float *e = tc ? cvx_malloc(sizeof(float) * (size_t)emax) : NULL;                 // the largest time embedding
    if (tc) ltx_vae_temb(v, &v->dec_mid_temb, t, e);
    for (int i = 0; i < v->dec_mid_n; i++) x = ltx_resnet(v, &v->dec_mid[i], x, T, H, W, causal, e);
    for (int b = 0; b < c->n_up; b++) {
        const ltx_up_w *u = &v->up[b];
        if (u->has_conv_in) x = ltx_resnet(v, &u->conv_in, x, T, H, W, causal, NULL), C = u->conv_in.cout;
        if (tc) ltx_vae_temb(v, &u->temb, t, e);
        if (u->has_up) {
            x = ltx_upsample(u, x, T, H, W, causal);
            T = 2 * T - 1, H *= 2, W *= 2, C = u->up_cin / u->up_factor;
        }
        for (int i = 0; i < u->n_res; i++) x = ltx_resnet(v, &u->res[i], x, T, H, W, causal, e);
    }
    size_t N = (size_t)T * H * W;
    float *shift = NULL, *scale = NULL;
    if (tc) {   /* (shift, scale) = time_embedder(t) + scale_shift_table [2, C] */
        ltx_vae_temb(v, &v->dec_temb, t, e);
        for (int i = 0; i < 2 * C; i++) e[i] += v->dec_sst[i];
        shift = e, scale = e + C;
    }
    ltx_channel_rms(x, C, N, 1e-8f, shift, scale, 1, x);                             // norm_out (+ mod), SiLU
    int p = c->patch_size, Co = v->dec_conv_out.cout;
    float *y = vae_fmap_get(v->ctx, (size_t)Co * N);
    ltx_conv(&v->dec_conv_out, x, T, H, W, causal, y);                               // [3·p·p, T, H, W]
    vae_fmap_put(v->ctx, x);
    free(e);
    /* unpatchify: channel (c·p + pw)·p + ph → video[c, t, h·p + ph, w·p + pw] */
    int Ho = H * p, Wo = W * p;
#pragma omp parallel for collapse(2) schedule(static)
    for (int ch = 0; ch < c->out_channels; ch++)
        for (int tt = 0; tt < T; tt++)
            for (int yy = 0; yy < Ho; yy++)
                for (int xx = 0; xx < Wo; xx++) {
                    int k = (ch * p + xx % p) * p + yy % p;
                    video[(((size_t)ch * T + tt) * Ho + yy) * Wo + xx] = y[(((size_t)k * T + tt) * H + yy / p) * W + xx / p];
                }
    vae_fmap_put(v->ctx, y);
    return 0;
}

/* ------------------------------------------------------------------ encode */

/* Space-to-depth of x[C, T, H, W] by (st, sh, sw): channel ((c·st + a)·sh + b)·sw + d of the
 * [C·st·sh·sw, T/st, H/sh, W/sw] result reads x[c, t·st + a, h·sh + b, w·sw + d]; then the mean of
 * each `group` consecutive channels (group 1: none). out [C·st·sh·sw / group, ...]; adds when acc. */
static void space_to_depth(const float *x, int C, int T, int H, int W, int st, int sh, int sw, int group, int acc,
                           float *out) {
    int To = T / st, Ho = H / sh, Wo = W / sw, Cd = C * st * sh * sw, Co = Cd / group;
#pragma omp parallel for collapse(2) schedule(static)
    for (int j = 0; j < Co; j++)
        for (int t = 0; t < To; t++)
            for (int h = 0; h < Ho; h++)
                for (int w = 0; w < Wo; w++) {
                    float s = 0.0f;
                    for (int g = 0; g < group; g++) {
                        int k = j * group + g, d = k % sw, b = k / sw % sh, a = k / (sw * sh) % st, c = k / (sw * sh * st);
                        s += x[(((size_t)c * T + t * st + a) * H + h * sh + b) * W + w * sw + d];
                    }
                    if (group > 1) s /= (float)group;
                    float *o = out + (((size_t)j * To + t) * Ho + h) * Wo + w;
                    *o = acc ? *o + s : s;
                }
}

/* One encoder down-sampler on x[C, T, H, W] (consumed); sizes updated. */
static float *ltx_downsample(const ltx_down_w *d, float *x, int C, int *T, int *H, int *W, int causal) {
    int t = *T, h = *H, w = *W;
    if (d->down == 1) {   /* causal stride-2 conv = the stride-1 conv at even positions */
        const vae_conv *cv = &d->down_conv;
        float *full = vae_fmap_get(d->down_conv.ctx, (size_t)C * t * h * w);
        ltx_conv(cv, x, t, h, w, causal, full);
        int To = (t - 1) / 2 + 1, Ho = (h - 1) / 2 + 1, Wo = (w - 1) / 2 + 1;
        float *out = vae_fmap_get(d->down_conv.ctx, (size_t)C * To * Ho * Wo);
#pragma omp parallel for collapse(2) schedule(static)
        for (int c = 0; c < C; c++)
            for (int a = 0; a < To; a++)
                for (int b = 0; b < Ho; b++)
                    for (int q = 0; q < Wo; q++)
                        out[(((size_t)c * To + a) * Ho + b) * Wo + q] = full[(((size_t)c * t + 2 * a) * h + 2 * b) * w + 2 * q];
        vae_fmap_put(d->down_conv.ctx, full);
        vae_fmap_put(d->down_conv.ctx, x);
        *T = To, *H = Ho, *W = Wo;
        return out;
    }
    /* LTXVideoDownsampler3d: frames = cat(x[:st−1], x); residual = grouped mean of the
     * space-to-depth; conv (causal, to och/prod) then space-to-depth; sum */
    int st = d->st, sh = d->sh, sw = d->sw, tp = t + st - 1, prod = st * sh * sw, Cc = d->down_conv.cout;
    int och = Cc * prod;
    float *xx = vae_fmap_get(d->down_conv.ctx, (size_t)C * tp * h * w);
    size_t fr = (size_t)h * w;
    for (int c = 0; c < C; c++) {
        memcpy(xx + (size_t)c * tp * fr, x + (size_t)c * t * fr, sizeof(float) * (size_t)(st - 1) * fr);
        memcpy(xx + ((size_t)c * tp + st - 1) * fr, x + (size_t)c * t * fr, sizeof(float) * (size_t)t * fr);
    }
    vae_fmap_put(d->down_conv.ctx, x);
    float *y = vae_fmap_get(d->down_conv.ctx, (size_t)Cc * tp * h * w), *out = vae_fmap_get(d->down_conv.ctx, (size_t)och * (tp / st) * (h / sh) * (w / sw));
    ltx_conv(&d->down_conv, xx, tp, h, w, causal, y);                                // [och/prod, tp, h, w]
    space_to_depth(y, Cc, tp, h, w, st, sh, sw, 1, 0, out);
    space_to_depth(xx, C, tp, h, w, st, sh, sw, d->group, 1, out);
    vae_fmap_put(d->down_conv.ctx, xx);
    vae_fmap_put(d->down_conv.ctx, y);
    *T = tp / st, *H = h / sh, *W = w / sw;
    return out;
}

int ltx_vae_encode(ltx_vae *v, const float *video, int T, int H, int W, float *moments) {
    const ltx_vae_config *c = &v->c;
    int p = c->patch_size, causal = c->encoder_causal, Ci = c->in_channels, lc = c->latent_channels;
    if (T < 1 || (T - 1) % 8 || H < 32 || W < 32 || H % 32 || W % 32)
        return cvx_error("ltx vae encode: video %dx%dx%d (frames x height x width): frames must be 8k + 1, sizes "
                         "multiples of 32", T, H, W);
    /* patchify: channel (c·p + pw)·p + ph ← video[c, t, h·p + ph, w·p + pw] */
    int h = H / p, w = W / p, t = T, C = Ci * p * p;
    float *x = vae_fmap_get(v->ctx, (size_t)C * t * h * w);
#pragma omp parallel for collapse(2) schedule(static)
    for (int k = 0; k < C; k++)
        for (int f = 0; f < t; f++) {
            int ch = k / (p * p), pw = k / p % p, ph = k % p;
            for (int yy = 0; yy < h; yy++)
                for (int xx = 0; xx < w; xx++)
                    x[(((size_t)k * t + f) * h + yy) * w + xx] = video[(((size_t)ch * T + f) * H + yy * p + ph) * W + xx * p + pw];
        }
    float *y = vae_fmap_get(v->ctx, (size_t)v->enc_conv_in.cout * t * h * w);
    ltx_conv(&v->enc_conv_in, x, t, h, w, causal, y);
    vae_fmap_put(v->ctx, x);
    x = y, C = v->enc_conv_in.cout;
    for (int b = 0; b < c->n_down; b++) {
        const ltx_down_w *d = &v->down[b];
        for (int i = 0; i < d->n_res; i++) x = ltx_resnet(v, &d->res[i], x, t, h, w, causal, NULL);
        if (d->down) {
            x = ltx_downsample(d, x, C, &t, &h, &w, causal);
            if (d->down == 2) C = d->down_conv.cout * d->st * d->sh * d->sw;
        }
        if (d->has_conv_out) x = ltx_resnet(v, &d->conv_out, x, t, h, w, causal, NULL), C = d->conv_out.cout;
    }
    for (int i = 0; i < v->enc_mid_n; i++) x = ltx_resnet(v, &v->enc_mid[i], x, t, h, w, causal, NULL);
    size_t N = (size_t)t * h * w;
    ltx_channel_rms(x, C, N, 1e-8f, NULL, NULL, 1, x);                               // norm_out, SiLU
    ltx_conv(&v->enc_conv_out, x, t, h, w, causal, moments);                         // [lc + 1, N]
    vae_fmap_put(v->ctx, x);
    /* the last channel repeated lc − 1 times: moments [2·lc, N] */
    for (int k = lc + 1; k < 2 * lc; k++) memcpy(moments + (size_t)k * N, moments + (size_t)lc * N, sizeof(float) * N);
    return 0;
}
