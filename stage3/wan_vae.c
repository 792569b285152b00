/* Wan VAE: config, the original-name key table, loading (diffusers directory or one file), and
 * the latent (un)normalisation. The blocks are wan_vae_blocks.c, decoding wan_vae_decode.c,
 * encoding wan_vae_encoder.c. */
#include "wan_vae.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "validate.h"

/* AutoencoderKLWan.__init__ defaults (diffusers 0.33.1) = the Wan 2.1 VAE; used for keys a
 * config.json does not set, and for a single weights file given without a config. */
static const int DEFAULT_DIM_MULT[4] = {1, 2, 4, 4};
static const int DEFAULT_TEMPORAL[3] = {0, 1, 1};
static const double DEFAULT_MEAN[16] = {-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                                        0.4134,  -0.0715, 0.5517,  -0.3632, -0.1922, -0.9497, 0.2503,  -0.2921};
static const double DEFAULT_STD[16] = {2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                                       3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160};

/* ------------------------------------------------------------------ config */

static int config_defaults(wan_vae_config *c) {
    memset(c, 0, sizeof *c);
    c->base_dim = c->decoder_base_dim = 96, c->z_dim = 16, c->num_res_blocks = 2, c->n_mult = 4, c->n_temporal = 3;
    c->patch_size = 1, c->in_channels = c->out_channels = 3;
    memcpy(c->dim_mult, DEFAULT_DIM_MULT, sizeof DEFAULT_DIM_MULT);
    memcpy(c->temperal_downsample, DEFAULT_TEMPORAL, sizeof DEFAULT_TEMPORAL);
    for (int i = 0; i < 16; i++) c->latents_mean[i] = (float)DEFAULT_MEAN[i], c->latents_std[i] = (float)DEFAULT_STD[i];
    return 0;
}

/* latents_mean / latents_std: z_dim numbers each (torch.tensor(list) rounds them to f32). */
static int config_stats(const cvx_config *j, const char *key, int z, float *out) {
    double v[WAN_VAE_MAX_Z];
    int n = 0;
    if (!cvx_cfg_has(j, key)) {
        if (z != 16) return cvx_error("%s: key '%s' is missing (the default has 16 entries, z_dim is %d)", j->path, key, z);
        return 0;   /* the defaults already in place */
    }
    if (cvx_cfg_num_array(j, key, v, WAN_VAE_MAX_Z, &n)) return -1;
    if (n != z) return cvx_error("%s: key '%s' has %d entries, expected z_dim = %d", j->path, key, n, z);
    for (int i = 0; i < n; i++) {
        if (!isfinite(v[i]) || (!strcmp(key, "latents_std") && v[i] == 0.0))
            return cvx_error("%s: key '%s'[%d] = %g, expected a finite%s number", j->path, key, i, v[i],
                             strcmp(key, "latents_std") ? "" : " non-zero");
        out[i] = (float)v[i];
    }
    return 0;
}

int wan_vae_config_load(wan_vae_config *c, const char *path) {
    config_defaults(c);
    if (!path) return 0;
    cvx_config j;
    if (cvx_config_load(&j, path)) return -1;
    int rc = -1, n = 0, b;
    int64_t v, mult[WAN_VAE_MAX_LEVELS];
    double scales[WAN_VAE_MAX_LEVELS];
    const char *cls;
    if (cvx_cfg_str_or(&j, "_class_name", "AutoencoderKLWan", &cls)) goto out;
    if (strcmp(cls, "AutoencoderKLWan")) {
        cvx_error("%s: key '_class_name' is \"%s\", expected \"AutoencoderKLWan\"", path, cls);
        goto out;
    }
    if (cvx_cfg_int_range_or(&j, "base_dim", 96, 1, 65536, &v)) goto out;
    c->base_dim = (int)v;
    if (cvx_cfg_int_range_or(&j, "decoder_base_dim", c->base_dim, 1, 65536, &v)) goto out;   /* diffusers >= 0.35 */
    c->decoder_base_dim = (int)v;
    if (cvx_cfg_int_range_or(&j, "z_dim", 16, 1, WAN_VAE_MAX_Z, &v)) goto out;
    c->z_dim = (int)v;
    if (cvx_cfg_int_range_or(&j, "num_res_blocks", 2, 0, 64, &v)) goto out;
    c->num_res_blocks = (int)v;
    if (cvx_cfg_has(&j, "dim_mult")) {
        if (cvx_cfg_int_array(&j, "dim_mult", mult, WAN_VAE_MAX_LEVELS, &n)) goto out;
        if (n < 1) { cvx_error("%s: key 'dim_mult' must not be empty", path); goto out; }
        for (int i = 0; i < n; i++) {
            if (mult[i] < 1 || mult[i] > 64) {
                cvx_error("%s: key 'dim_mult'[%d] = %lld, expected an integer in [1, 64]", path, i, (long long)mult[i]);
                goto out;
            }
            c->dim_mult[i] = (int)mult[i];
        }
        c->n_mult = n;
    }
    if (cvx_cfg_has(&j, "temperal_downsample") &&
        cvx_cfg_bool_array(&j, "temperal_downsample", c->temperal_downsample, WAN_VAE_MAX_LEVELS, &c->n_temporal))
        goto out;
    if (c->n_temporal < c->n_mult - 1) {
        cvx_error("%s: key 'temperal_downsample' has %d entries, expected at least len(dim_mult) - 1 = %d", path,
                  c->n_temporal, c->n_mult - 1);
        goto out;
    }
    if (cvx_cfg_has(&j, "attn_scales")) {
        if (cvx_cfg_num_array(&j, "attn_scales", scales, WAN_VAE_MAX_LEVELS, &n)) goto out;
        if (n) { cvx_error("%s: key 'attn_scales' is not empty: encoder attention blocks are not supported", path); goto out; }
    }
    if (cvx_cfg_bool_or(&j, "is_residual", 0, &b)) goto out;   /* the Wan 2.2 VAE */
    c->is_residual = b;
    if (b && c->num_res_blocks < 1) {
        cvx_error("%s: key 'num_res_blocks' is 0 with 'is_residual' true, expected at least 1", path);
        goto out;
    }
    if (cvx_cfg_int_range_or(&j, "patch_size", 1, 1, 8, &v)) goto out;   /* null: no patchification */
    c->patch_size = (int)v;
    const int64_t ch = 3 * (int64_t)c->patch_size * c->patch_size;   /* RGB, patchified */
    if (cvx_cfg_int_range_or(&j, "in_channels", ch, ch, ch, &v)) goto out;
    c->in_channels = (int)v;
    if (cvx_cfg_int_range_or(&j, "out_channels", ch, ch, ch, &v)) goto out;
    c->out_channels = (int)v;
    if (config_stats(&j, "latents_mean", c->z_dim, c->latents_mean) ||
        config_stats(&j, "latents_std", c->z_dim, c->latents_std))
        goto out;
    rc = 0;
out:
    cvx_config_free(&j);
    return rc;
}

/* ------------------------------------------------------------------ original key names */

/* The original Wan VAE's names (Wan2.1_VAE.pth, ComfyUI's wan_2.1_vae.safetensors) for the
 * diffusers ones, after diffusers' scripts/convert_wan_to_diffusers.py convert_vae. Rows are
 * prefix rewrites; `residual` rows are residual blocks whose leaf names map through RESIDUAL. */
static const struct {
    const char *diffusers, *original;
    int residual;
} KEY_PREFIXES[] = {
    {"quant_conv.", "conv1.", 0},
    {"post_quant_conv.", "conv2.", 0},
    {"encoder.conv_in.", "encoder.conv1.", 0},
    {"decoder.conv_in.", "decoder.conv1.", 0},
    {"encoder.norm_out.", "encoder.head.0.", 0},
    {"decoder.norm_out.", "decoder.head.0.", 0},
    {"encoder.conv_out.", "encoder.head.2.", 0},
    {"decoder.conv_out.", "decoder.head.2.", 0},
    {"encoder.mid_block.resnets.0.", "encoder.middle.0.", 1},
    {"encoder.mid_block.attentions.0.", "encoder.middle.1.", 0},
    {"encoder.mid_block.resnets.1.", "encoder.middle.2.", 1},
    {"decoder.mid_block.resnets.0.", "decoder.middle.0.", 1},
    {"decoder.mid_block.attentions.0.", "decoder.middle.1.", 0},
    {"decoder.mid_block.resnets.1.", "decoder.middle.2.", 1},
    /* encoder.down_blocks.K. -> encoder.downsamples.K. (same flat index, residual),
     * decoder.up_blocks.I.resnets.J. -> decoder.upsamples.(I·(num_res_blocks+2)+J). (residual),
     * decoder.up_blocks.I.upsamplers.0. -> decoder.upsamples.(I·(num_res_blocks+2)+num_res_blocks+1).:
     * computed below. */
};
static const struct {
    const char *diffusers, *original;
} RESIDUAL[] = {
    {"norm1.", "residual.0."}, {"conv1.", "residual.2."}, {"norm2.", "residual.3."},
    {"conv2.", "residual.6."}, {"conv_shortcut.", "shortcut."},
};

/* prefix + (a residual block's leaf renamed through RESIDUAL) + rest */
static const char *compose_key(const char *prefix, const char *rest, int residual, char *buf, size_t n) {
    const char *leaf = "";
    for (size_t k = 0; residual && k < sizeof RESIDUAL / sizeof RESIDUAL[0]; k++) {
        size_t pl = strlen(RESIDUAL[k].diffusers);
        if (!strncmp(rest, RESIDUAL[k].diffusers, pl)) {
            leaf = RESIDUAL[k].original, rest += pl;
            break;
        }
    }
    if ((size_t)snprintf(buf, n, "%s%s%s", prefix, leaf, rest) >= n) return NULL;
    return buf;
}

/* The Wan 2.2 VAE's original names (Wan2.2_VAE.pth, ComfyUI's wan2.2_vae.safetensors), after
 * diffusers' scripts/convert_wan_to_diffusers.py convert_vae_22: each level's blocks are nested,
 * encoder.downsamples.I.downsamples.J (J < num_res_blocks: residual block J, J = num_res_blocks:
 * the resample) and decoder.upsamples.I.upsamples.J (num_res_blocks + 1 residual blocks, then the
 * resample); the shortcuts (AvgDown3D / DupUp3D) have no weights; the other rows as in 2.1. */
static const char *original_key_22(const char *name, int nrb, char *buf, size_t n) {
    char prefix[96];
    int i, j, len = -1;
    if (sscanf(name, "decoder.up_blocks.%d.resnets.%d.%n", &i, &j, &len) == 2 && len > 0) {
        snprintf(prefix, sizeof prefix, "decoder.upsamples.%d.upsamples.%d.", i, j);
        return compose_key(prefix, name + len, 1, buf, n);
    }
    if ((len = -1, sscanf(name, "decoder.up_blocks.%d.upsampler.%n", &i, &len) == 1) && len > 0) {
        snprintf(prefix, sizeof prefix, "decoder.upsamples.%d.upsamples.%d.", i, nrb + 1);
        return compose_key(prefix, name + len, 0, buf, n);
    }
    if ((len = -1, sscanf(name, "encoder.down_blocks.%d.resnets.%d.%n", &i, &j, &len) == 2) && len > 0) {
        snprintf(prefix, sizeof prefix, "encoder.downsamples.%d.downsamples.%d.", i, j);
        return compose_key(prefix, name + len, 1, buf, n);
    }
    if ((len = -1, sscanf(name, "encoder.down_blocks.%d.downsampler.%n", &i, &len) == 1) && len > 0) {
        snprintf(prefix, sizeof prefix, "encoder.downsamples.%d.downsamples.%d.", i, nrb);
        return compose_key(prefix, name + len, 0, buf, n);
    }
    if (!strncmp(name, "decoder.up_blocks.", 18) || !strncmp(name, "encoder.down_blocks.", 20)) return NULL;
    return wan_vae_original_key(name, nrb, buf, n);
}

const char *wan_vae_original_key(const char *name, int nrb, char *buf, size_t n) {
    char prefix[96];
    const char *rest = NULL;
    int residual = 0, i, j, len = -1;
    if (sscanf(name, "decoder.up_blocks.%d.resnets.%d.%n", &i, &j, &len) == 2 && len > 0) {
        snprintf(prefix, sizeof prefix, "decoder.upsamples.%d.", i * (nrb + 2) + j);
        rest = name + len, residual = 1;
    } else if ((len = -1, sscanf(name, "decoder.up_blocks.%d.upsamplers.0.%n", &i, &len) == 1) && len > 0) {
        snprintf(prefix, sizeof prefix, "decoder.upsamples.%d.", i * (nrb + 2) + nrb + 1);
        rest = name + len;
    } else if ((len = -1, sscanf(name, "encoder.down_blocks.%d.%n", &i, &len) == 1) && len > 0) {
        snprintf(prefix, sizeof prefix, "encoder.downsamples.%d.", i);
        rest = name + len, residual = 1;   /* resample.1 / time_conv keep their names */
    } else {
        for (size_t k = 0; k < sizeof KEY_PREFIXES / sizeof KEY_PREFIXES[0] && !rest; k++) {
            size_t pl = strlen(KEY_PREFIXES[k].diffusers);
            if (strncmp(name, KEY_PREFIXES[k].diffusers, pl)) continue;
            snprintf(prefix, sizeof prefix, "%s", KEY_PREFIXES[k].original);
            rest = name + pl, residual = KEY_PREFIXES[k].residual;
        }
    }
    return rest ? compose_key(prefix, rest, residual, buf, n) : NULL;
}

const char *wan_vae_original_key_config(const wan_vae_config *c, const char *name, char *buf, size_t n) {
    return c->is_residual ? original_key_22(name, c->num_res_blocks, buf, n)
                          : wan_vae_original_key(name, c->num_res_blocks, buf, n);
}

static const char *original_key_fn(void *user, const char *name, char *buf, size_t n) {
    return wan_vae_original_key_config(user, name, buf, n);
}

/* ------------------------------------------------------------------ loading */

static int rms_get(vae_loader *L, wan_rms_norm_w *n, const char *name, int C, int images) {
    char buf[288];
    snprintf(buf, sizeof buf, "%s.gamma", name);
    n->gamma = images ? vae_loader_get(L, buf, CVX_SHAPE(C, 1, 1)) : vae_loader_get(L, buf, CVX_SHAPE(C, 1, 1, 1));
    n->dim = C;
    return n->gamma ? 0 : -1;
}

static int resblock_get(vae_loader *L, wan_resblock_w *r, const char *name, int cin, int cout) {
    char buf[256];
    r->cin = cin, r->cout = cout;
    snprintf(buf, sizeof buf, "%s.norm1", name);
    if (rms_get(L, &r->norm1, buf, cin, 0)) return -1;
    snprintf(buf, sizeof buf, "%s.conv1", name);
    if (vae_conv_get(L, &r->conv1, buf, cin, cout, 3, 3, 3, 0, 1)) return -1;
    snprintf(buf, sizeof buf, "%s.norm2", name);
    if (rms_get(L, &r->norm2, buf, cout, 0)) return -1;
    snprintf(buf, sizeof buf, "%s.conv2", name);
    if (vae_conv_get(L, &r->conv2, buf, cout, cout, 3, 3, 3, 0, 1)) return -1;
    memset(&r->shortcut, 0, sizeof r->shortcut);
    r->shortcut.cache_id = -1;
    if (cin != cout) {   /* WanCausalConv3d(in, out, 1): no padding, no cache */
        snprintf(buf, sizeof buf, "%s.conv_shortcut", name);
        if (vae_conv_get(L, &r->shortcut, buf, cin, cout, 1, 1, 1, 0, 0)) return -1;
    }
    return 0;
}

/* A 2-D [rows, cols] view of a conv weight [rows, cols, 1, 1] (for cvx_linear). */
static cvx_tensor view_2d(const cvx_tensor *t) {
    cvx_tensor v = *t;
    v.ndim = 2;
    return v;
}

static int mid_get(vae_loader *L, wan_mid_w *m, const char *name, int C) {
    char buf[256];
    vae_conv qkv, proj;
    for (int i = 0; i < 2; i++) {
        snprintf(buf, sizeof buf, "%s.resnets.%d", name, i);
        if (resblock_get(L, &m->res[i], buf, C, C)) return -1;
    }
    snprintf(buf, sizeof buf, "%s.attentions.0.norm", name);
    if (rms_get(L, &m->attn.norm, buf, C, 1)) return -1;
    snprintf(buf, sizeof buf, "%s.attentions.0.to_qkv", name);
    if (vae_conv_get(L, &qkv, buf, C, 3 * C, 1, 1, 1, 1, 0)) return -1;   /* Conv2d(C, 3C, 1) */
    snprintf(buf, sizeof buf, "%s.attentions.0.proj", name);
    if (vae_conv_get(L, &proj, buf, C, C, 1, 1, 1, 1, 0)) return -1;      /* Conv2d(C, C, 1) */
    m->attn.qkv_w = view_2d(qkv.w), m->attn.qkv_b = qkv.b;
    m->attn.proj_w = view_2d(proj.w), m->attn.proj_b = proj.b;
    m->attn.dim = C;
    return 0;
}

static int level_alloc(wan_level_w *l, int n) {
    l->num_resnets = n;
    l->resnets = cvx_calloc((size_t)(n ? n : 1), sizeof *l->resnets);
    memset(&l->resample, 0, sizeof l->resample);
    l->resample.cache_id = -1;
    return 0;
}

/* The residual levels' shortcut: AvgDown3D (down) needs in·ft·fs² divisible by out, DupUp3D (up)
 * out·ft·fs² by in (upstream asserts). */
static int shortcut_set(wan_level_w *b, int in, int out, int ft, int fs, int up, const char *label) {
    const int f = ft * fs * fs;
    if (up ? (out * f) % in : (in * f) % out)
        return cvx_error("%s: %s from %d to %d channels over %d neighbours: %d·%d is not a multiple of %d", label,
                         up ? "DupUp3D" : "AvgDown3D", in, out, f, up ? out : in, f, up ? in : out);
    b->sc_ft = ft, b->sc_fs = fs, b->sc_in = in, b->sc_out = out;
    return 0;
}

static int load_decoder(wan_vae *v, vae_loader *L) {
    const wan_vae_config *c = &v->cfg;
    const int n = c->n_mult, z = c->z_dim, res = c->is_residual;
    int dims[WAN_VAE_MAX_LEVELS + 1];
    dims[0] = c->decoder_base_dim * c->dim_mult[n - 1];
    for (int i = 0; i < n; i++) dims[i + 1] = c->decoder_base_dim * c->dim_mult[n - 1 - i];
    char name[256];
    if (vae_conv_get(L, &v->post_quant_conv, "post_quant_conv", z, z, 1, 1, 1, 0, 0)) return -1;
    if (vae_conv_get(L, &v->dec_conv_in, "decoder.conv_in", z, dims[0], 3, 3, 3, 0, 1)) return -1;
    if (mid_get(L, &v->dec_mid, "decoder.mid_block", dims[0])) return -1;
    for (int i = 0; i < n; i++) {
        wan_level_w *b = &v->up[i];
        /* 2.1 WanUpBlock: the input halved after level 0 (its up-sampler halves); 2.2 WanResidualUpBlock: not */
        int in = i > 0 && !res ? dims[i] / 2 : dims[i], out = dims[i + 1];
        const int level_in = in;
        level_alloc(b, c->num_res_blocks + 1);
        for (int j = 0; j < b->num_resnets; j++, in = out) {
            snprintf(name, sizeof name, "decoder.up_blocks.%d.resnets.%d", i, j);
            if (resblock_get(L, &b->resnets[j], name, in, out)) return -1;
        }
        if (i == n - 1) continue;
        /* temperal_upsample = temperal_downsample[::-1] (the whole list, as upstream) */
        wan_resample_w *r = &b->resample;
        const int temporal = c->temperal_downsample[c->n_temporal - 1 - i];
        r->mode = temporal ? WAN_UPSAMPLE_3D : WAN_UPSAMPLE_2D;
        r->dim = out;
        const char *up = res ? "upsampler" : "upsamplers.0";
        snprintf(name, sizeof name, "decoder.up_blocks.%d.%s.resample.1", i, up);
        if (vae_conv_get(L, &r->resample, name, out, res ? out : out / 2, 1, 3, 3, 1, 0)) return -1;
        if (r->mode == WAN_UPSAMPLE_3D) {
            snprintf(name, sizeof name, "decoder.up_blocks.%d.%s.time_conv", i, up);
            if (vae_conv_get(L, &r->time_conv, name, out, 2 * out, 3, 1, 1, 0, 1)) return -1;
            v->temporal_ratio *= 2;
        }
        snprintf(name, sizeof name, "decoder.up_blocks.%d", i);
        if (res && shortcut_set(b, level_in, out, temporal ? 2 : 1, 2, 1, name)) return -1;
    }
    if (rms_get(L, &v->dec_norm_out, "decoder.norm_out", dims[n], 0)) return -1;
    if (vae_conv_get(L, &v->dec_conv_out, "decoder.conv_out", dims[n], c->out_channels, 3, 3, 3, 0, 1)) return -1;
    v->dec_caches = L->next_cache;
    return 0;
}

static int load_encoder(wan_vae *v, vae_loader *L) {
    const wan_vae_config *c = &v->cfg;
    const int n = c->n_mult, z2 = 2 * c->z_dim, res = c->is_residual;
    int dims[WAN_VAE_MAX_LEVELS + 1], k = 0;   /* k: flat index of encoder.down_blocks (2.1) */
    dims[0] = c->base_dim;
    for (int i = 0; i < n; i++) dims[i + 1] = c->base_dim * c->dim_mult[i];
    char name[256], pre[128];
    if (vae_conv_get(L, &v->enc_conv_in, "encoder.conv_in", c->in_channels, dims[0], 3, 3, 3, 0, 1)) return -1;
    for (int i = 0; i < n; i++) {
        wan_level_w *b = &v->down[i];
        int in = dims[i], out = dims[i + 1];
        level_alloc(b, c->num_res_blocks);
        for (int j = 0; j < b->num_resnets; j++, in = out) {
            if (res) snprintf(name, sizeof name, "encoder.down_blocks.%d.resnets.%d", i, j);
            else snprintf(name, sizeof name, "encoder.down_blocks.%d", k++);
            if (resblock_get(L, &b->resnets[j], name, in, out)) return -1;
        }
        const int temporal = i < n - 1 && c->temperal_downsample[i];
        snprintf(pre, sizeof pre, "encoder.down_blocks.%d", i);
        /* WanResidualDownBlock: AvgDown3D on every level (factors 1 on the last) */
        if (res && shortcut_set(b, dims[i], out, temporal ? 2 : 1, i < n - 1 ? 2 : 1, 0, pre)) return -1;
        if (i == n - 1) continue;
        wan_resample_w *r = &b->resample;
        r->mode = temporal ? WAN_DOWNSAMPLE_3D : WAN_DOWNSAMPLE_2D;
        r->dim = out;
        if (res) snprintf(pre, sizeof pre, "encoder.down_blocks.%d.downsampler", i);
        else snprintf(pre, sizeof pre, "encoder.down_blocks.%d", k);
        snprintf(name, sizeof name, "%s.resample.1", pre);
        if (vae_conv_get(L, &r->resample, name, out, out, 1, 3, 3, 1, 0)) return -1;
        if (r->mode == WAN_DOWNSAMPLE_3D) {
            snprintf(name, sizeof name, "%s.time_conv", pre);
            if (vae_conv_get(L, &r->time_conv, name, out, out, 3, 1, 1, 0, 0)) return -1;
            r->cache_id = L->next_cache++;   /* its own rule: the last frame of the previous chunk */
        }
        k++;
    }
    if (mid_get(L, &v->enc_mid, "encoder.mid_block", dims[n])) return -1;
    if (rms_get(L, &v->enc_norm_out, "encoder.norm_out", dims[n], 0)) return -1;
    if (vae_conv_get(L, &v->enc_conv_out, "encoder.conv_out", dims[n], z2, 3, 3, 3, 0, 1)) return -1;
    if (vae_conv_get(L, &v->quant_conv, "quant_conv", z2, z2, 1, 1, 1, 0, 0)) return -1;
    v->enc_caches = L->next_cache;
    return 0;
}

/* The encoder's later chunks (4 frames) must keep >= 1 frame through every downsample3d
 * (upstream fails otherwise): n -> (n + 1 − 3)/2 + 1 with the carried frame. */
static int check_temporal(const wan_vae_config *c, const char *label) {
    int frames = WAN_VAE_ENCODE_CHUNK;
    for (int i = 0; i < c->n_mult - 1; i++) {
        if (!c->temperal_downsample[i]) continue;
        if (frames + 1 < 3)
            return cvx_error("%s: temperal_downsample has too many temporal levels for the encoder's chunks of %d "
                             "frames", label, WAN_VAE_ENCODE_CHUNK);
        frames = (frames + 1 - 3) / 2 + 1;
    }
    return 0;
}

static wan_vae *load(const char *config_json, const char *weights, cvx_ctx *ctx) {
    wan_vae *v = cvx_calloc(1, sizeof *v);
    v->owns_ctx = ctx == NULL;
    v->ctx = ctx ? ctx : cvx_ctx_new(cvx_threads());
    if (wan_vae_config_load(&v->cfg, config_json)) goto fail;
    if (check_temporal(&v->cfg, config_json ? config_json : "AutoencoderKLWan defaults")) goto fail;
    v->decoder_ratio = 1 << (v->cfg.n_mult - 1);
    v->spatial_ratio = v->cfg.patch_size * v->decoder_ratio;
    v->temporal_ratio = 1;
    v->weights = cvx_weights_open(weights);
    if (!v->weights) goto fail;
    v->original_names = cvx_weights_find(v->weights, "decoder.conv1.weight") != NULL;
    if (!v->original_names && !cvx_weights_find(v->weights, "decoder.conv_in.weight")) {
        cvx_error("%s: no tensor 'decoder.conv_in.weight' (diffusers names) or 'decoder.conv1.weight' (original Wan "
                  "names): not a Wan VAE", cvx_weights_path(v->weights));
        goto fail;
    }
    vae_loader L = {.w = v->weights, .ctx = v->ctx, .time_pad = VAE_TIME_PAD_ZEROS,
                    .key = v->original_names ? original_key_fn : NULL, .key_user = &v->cfg};
    if (load_decoder(v, &L)) goto fail;
    L.next_cache = 0;   /* the encoder's caches are a set of their own */
    if (load_encoder(v, &L)) goto fail;
    return v;
fail:
    wan_vae_free(v);
    return NULL;
}

wan_vae *wan_vae_load(const char *vae_dir, cvx_ctx *ctx) {
    char path[4096];
    if (cvx_path_join(path, sizeof path, vae_dir, "config.json")) {
        cvx_error("%s: path too long", vae_dir);
        return NULL;
    }
    return load(path, vae_dir, ctx);
}

wan_vae *wan_vae_load_file(const char *config_json, const char *weights, cvx_ctx *ctx) {
    return load(config_json, weights, ctx);
}

void wan_vae_free(wan_vae *v) {
    if (!v) return;
    for (int i = 0; i < WAN_VAE_MAX_LEVELS; i++) free(v->up[i].resnets), free(v->down[i].resnets);
    if (v->weights) cvx_weights_close(v->weights);
    if (v->owns_ctx) cvx_ctx_free(v->ctx);
    else if (v->ctx) vae_conv_forget(v->ctx);
    free(v);
}

/* ------------------------------------------------------------------ sizes and normalisation */

int wan_vae_decoded_frames(const wan_vae *v, int F) { return F < 1 ? 0 : 1 + v->temporal_ratio * (F - 1); }

void wan_vae_unnormalize(const wan_vae *v, const float *latents, int F, int h, int w, float *z) {
    const size_t per = (size_t)F * h * w;
    for (int c = 0; c < v->cfg.z_dim; c++) {
        /* latents_std = 1.0 / torch.tensor(std) (f32), then latents / latents_std + latents_mean */
        const float inv = 1.0f / v->cfg.latents_std[c], mean = v->cfg.latents_mean[c];
        const float *x = latents + c * per;
        float *o = z + c * per;
        for (size_t i = 0; i < per; i++) o[i] = x[i] / inv + mean;
    }
}

void wan_vae_normalize(const wan_vae *v, const float *x, int F, int h, int w, float *out) {
    wan_latents_normalize(&v->cfg, x, F, h, w, out);
}

void wan_latents_normalize(const wan_vae_config *cfg, const float *x, int F, int h, int w, float *out) {
    const size_t per = (size_t)F * h * w;
    for (int c = 0; c < cfg->z_dim; c++) {
        /* (x − latents_mean) · latents_std with latents_std = 1.0 / torch.tensor(std) (f32) */
        const float inv = 1.0f / cfg->latents_std[c], mean = cfg->latents_mean[c];
        const float *s = x + c * per;
        float *o = out + c * per;
        for (size_t i = 0; i < per; i++) o[i] = (s[i] - mean) * inv;
    }
}
