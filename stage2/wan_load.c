/* WanTransformer3DModel: config.json, the weights (diffusers or original Wan / ComfyUI key
 * names, one mapping table) and the rotary tables. The forward is in stage2/wan.c. */
#include "wan_internal.h"

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "lora.h"
#include "validate.h"
#include "quantize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config */

int wan_config_load(const char *path, wan_config *c) {
    cvx_config j;
    if (cvx_config_load(&j, path)) return -1;
    int64_t v, patch[3] = {1, 2, 2};
    const char *s;
    int rc = -1, n = 3;
    memset(c, 0, sizeof *c);
    if (cvx_cfg_str_or(&j, "_class_name", "WanTransformer3DModel", &s)) goto out;
    if (strcmp(s, "WanTransformer3DModel")) {
        cvx_error("%s: '_class_name' is \"%s\", expected \"WanTransformer3DModel\"", path, s);
        goto out;
    }
    /* keys with upstream's defaults (WanTransformer3DModel.__init__), each range-checked before
     * anything is sized from it */
#define INT(key, def, lo, hi, dst) do { if (cvx_cfg_int_range_or(&j, key, def, lo, hi, &v)) goto out; dst = (int)v; } while (0)
    INT("num_attention_heads", 40, 1, 1024, c->num_attention_heads);
    INT("attention_head_dim", 128, 2, 4096, c->attention_head_dim);
    INT("num_layers", 40, 1, 1024, c->num_layers);
    INT("in_channels", 16, 1, 4096, c->in_channels);
    INT("out_channels", c->in_channels, 1, 4096, c->out_channels);   /* null: in_channels */
    INT("text_dim", 4096, 1, 65536, c->text_dim);
    INT("freq_dim", 256, 2, 65536, c->freq_dim);
    INT("ffn_dim", 13824, 1, 1 << 20, c->ffn_dim);
    INT("rope_max_seq_len", 1024, 1, 1 << 20, c->rope_max_seq_len);
    if (cvx_cfg_has(&j, "image_dim")) INT("image_dim", 0, 1, 65536, c->image_dim);
    if (cvx_cfg_has(&j, "added_kv_proj_dim")) INT("added_kv_proj_dim", 0, 1, 1 << 20, c->added_kv_proj_dim);
#undef INT
    if (cvx_cfg_has(&j, "patch_size") && cvx_cfg_int_array(&j, "patch_size", patch, 3, &n)) goto out;
    if (n != 3 || patch[0] < 1 || patch[1] < 1 || patch[2] < 1 || patch[0] > 64 || patch[1] > 64 || patch[2] > 64) {
        cvx_error("%s: key 'patch_size' must be 3 integers in [1, 64] (t, h, w)", path);
        goto out;
    }
    c->patch_t = (int)patch[0], c->patch_h = (int)patch[1], c->patch_w = (int)patch[2];
    if (cvx_cfg_bool_or(&j, "cross_attn_norm", 1, &c->cross_attn_norm)) goto out;
    if (cvx_cfg_num_range_or(&j, "eps", 1e-6, 0, 1, 1, &c->eps)) goto out;
    if (cvx_cfg_str_or(&j, "qk_norm", "rms_norm_across_heads", &s)) goto out;
    json_object *qk = NULL;
    if (json_object_object_get_ex(j.root, "qk_norm", &qk) && !qk) s = "null";   /* explicit null: no norm upstream */
    if (strcmp(s, "rms_norm_across_heads")) {
        cvx_error("%s: key 'qk_norm' is \"%s\", only \"rms_norm_across_heads\" (Wan 2.1) is supported", path, s);
        goto out;
    }
    if (c->attention_head_dim % 2) {
        cvx_error("%s: key 'attention_head_dim' = %d must be even (rotary pairs)", path, c->attention_head_dim);
        goto out;
    }
    if (!c->image_dim != !c->added_kv_proj_dim) {
        cvx_error("%s: keys 'image_dim' (%d) and 'added_kv_proj_dim' (%d) must both be set (image-to-video) or both "
                  "null (text-to-video)", path, c->image_dim, c->added_kv_proj_dim);
        goto out;
    }
    int D = c->num_attention_heads * c->attention_head_dim;
    if (c->added_kv_proj_dim && c->added_kv_proj_dim != D) {
        cvx_error("%s: key 'added_kv_proj_dim' = %d must equal num_attention_heads·attention_head_dim = %d (the image "
                  "embedder's output feeds add_k_proj)", path, c->added_kv_proj_dim, D);
        goto out;
    }
    rc = 0;
out:
    cvx_config_free(&j);
    return rc;
}

/* ------------------------------------------------------------------ key names */

/* The one mapping between diffusers names and the original Wan / ComfyUI names, as diffusers'
 * single-file loader converts them (loaders/single_file_utils.py convert_wan_transformer_to_diffusers;
 * the original norm3 is diffusers' norm2, the cross-attention's LayerNorm). Prefixes of the name
 * after "blocks.N." (block = 1) or of the whole name (block = 0); names not listed are the same
 * in both (patch_embedding.*). */
static const struct {
    int block;
    const char *diffusers, *original;
} WAN_KEYS[] = {
    {0, "condition_embedder.time_embedder.linear_1.", "time_embedding.0."},
    {0, "condition_embedder.time_embedder.linear_2.", "time_embedding.2."},
    {0, "condition_embedder.time_proj.", "time_projection.1."},
    {0, "condition_embedder.text_embedder.linear_1.", "text_embedding.0."},
    {0, "condition_embedder.text_embedder.linear_2.", "text_embedding.2."},
    {0, "condition_embedder.image_embedder.norm1.", "img_emb.proj.0."},
    {0, "condition_embedder.image_embedder.ff.net.0.proj.", "img_emb.proj.1."},
    {0, "condition_embedder.image_embedder.ff.net.2.", "img_emb.proj.3."},
    {0, "condition_embedder.image_embedder.norm2.", "img_emb.proj.4."},
    {0, "scale_shift_table", "head.modulation"},
    {0, "proj_out.", "head.head."},
    {1, "attn1.to_q.", "self_attn.q."},
    {1, "attn1.to_k.", "self_attn.k."},
    {1, "attn1.to_v.", "self_attn.v."},
    {1, "attn1.to_out.0.", "self_attn.o."},
    {1, "attn1.norm_q.", "self_attn.norm_q."},
    {1, "attn1.norm_k.", "self_attn.norm_k."},
    {1, "attn2.to_q.", "cross_attn.q."},
    {1, "attn2.to_k.", "cross_attn.k."},
    {1, "attn2.to_v.", "cross_attn.v."},
    {1, "attn2.to_out.0.", "cross_attn.o."},
    {1, "attn2.norm_q.", "cross_attn.norm_q."},
    {1, "attn2.norm_k.", "cross_attn.norm_k."},
    {1, "attn2.add_k_proj.", "cross_attn.k_img."},
    {1, "attn2.add_v_proj.", "cross_attn.v_img."},
    {1, "attn2.norm_added_k.", "cross_attn.norm_k_img."},
    {1, "norm2.", "norm3."},
    {1, "ffn.net.0.proj.", "ffn.0."},
    {1, "ffn.net.2.", "ffn.2."},
    {1, "scale_shift_table", "modulation"},
};

void wan_original_name(const char *dname, char *out, size_t n) {
    int blk = -1, used = 0;
    if (sscanf(dname, "blocks.%d.%n", &blk, &used) < 1 || used == 0) blk = -1, used = 0;
    const char *rest = dname + used;
    for (size_t i = 0; i < sizeof WAN_KEYS / sizeof WAN_KEYS[0]; i++) {
        size_t k = strlen(WAN_KEYS[i].diffusers);
        if (WAN_KEYS[i].block != (blk >= 0) || strncmp(rest, WAN_KEYS[i].diffusers, k)) continue;
        snprintf(out, n, "%.*s%s%s", used, dname, WAN_KEYS[i].original, rest + k);
        return;
    }
    snprintf(out, n, "%s", dname);
}

/* The file's name of the tensor diffusers calls `dname`. */
static void wan_key(const wan_transformer *m, const char *dname, char *out, size_t n) {
    size_t k = (size_t)snprintf(out, n, "%s", m->prefix);
    if (k >= n) return;
    if (m->original) wan_original_name(dname, out + k, n - k);
    else snprintf(out + k, n - k, "%s", dname);
}

/* ------------------------------------------------------------------ GGUF (stage2/quantize.h) */

/* Diffusers names -> the original ones city96's Wan GGUFs use; original names stay. */
static void wan_gguf_name(const cvx_weights *src, const char *name, char *out, size_t n) {
    if (cvx_weights_find(src, "scale_shift_table")) wan_original_name(name, out, n);
    else snprintf(out, n, "%s", name);
}

/* ComfyUI-GGUF convert.py ModelWan and lcpp.patch LLM_ARCH_WAN. */
static const char *const WAN_GGUF_KEEP[] = {"modulation.", "patch_embedding.", "text_embedding.", "time_projection.",
                                            "time_embedding.", "img_emb.", "head.", NULL};
static const char *const WAN_GGUF_HIPREC[] = {".modulation", NULL};
const cvx_gguf_rules wan_gguf_rules = {"wan", WAN_GGUF_KEEP, WAN_GGUF_HIPREC, wan_gguf_name};

/* Which names the file uses, from the output modulation every Wan checkpoint has. */
static int wan_detect_names(wan_transformer *m) {
    static const struct { const char *key, *prefix; int original; } probes[] = {
        {"scale_shift_table", "", 0},
        {"head.modulation", "", 1},
        {"model.diffusion_model.head.modulation", "model.diffusion_model.", 1},
    };
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++)
        if (cvx_weights_find(m->w, probes[i].key)) {
            m->original = probes[i].original;
            snprintf(m->prefix, sizeof m->prefix, "%s", probes[i].prefix);
            return 0;
        }
    return cvx_error("%s: not a Wan transformer checkpoint: no tensor 'scale_shift_table' (diffusers names) or "
                     "'head.modulation' (original Wan / ComfyUI names)", cvx_weights_path(m->w));
}

/* The tensor diffusers calls `dname`, shape-checked; NULL + cvx_error naming the file's key (and
 * the diffusers name when they differ). */
static const cvx_tensor *wan_get(const wan_transformer *m, const char *dname, const int64_t *shape, int ndim) {
    char key[256];
    wan_key(m, dname, key, sizeof key);
    const cvx_tensor *t = cvx_weights_get(m->w, key, shape, ndim);
    if (!t && strcmp(key, dname)) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", cvx_last_error());
        cvx_error("%s (diffusers name '%s')", msg, dname);
    }
    return t;
}

/* ------------------------------------------------------------------ load */

#define GET(dst, name, ...) do { if (!((dst) = wan_get(m, name, CVX_SHAPE(__VA_ARGS__)))) goto fail; } while (0)
#define GETF(dst, name, ...) do { const cvx_tensor *t_; GET(t_, name, __VA_ARGS__); (dst) = cvx_tensor_f32_dup(t_); } while (0)

/* wan_get as a cvx_weights_getter */
static const cvx_tensor *wan_getter(const void *m, const char *dname, const int64_t *shape, int ndim) {
    return wan_get(m, dname, shape, ndim);
}

static int wan_load_block(wan_transformer *m, int i, wan_block_weights *b) {
    const wan_config *c = &m->c;
    const int64_t D = (int64_t)c->num_attention_heads * c->attention_head_dim, Fd = c->ffn_dim;
    char name[256];
#define N_(suffix) (snprintf(name, sizeof name, "blocks.%d.%s", i, suffix), name)
    if (cvx_attn_weights_load(wan_getter, m, N_("attn1"), D, &b->attn1) ||
        cvx_attn_weights_load(wan_getter, m, N_("attn2"), D, &b->attn2))
        return -1;
    if (c->added_kv_proj_dim) {
        int64_t A = c->added_kv_proj_dim;
        GET(b->add_k_w, N_("attn2.add_k_proj.weight"), D, A);
        GET(b->add_k_b, N_("attn2.add_k_proj.bias"), D);
        GET(b->add_v_w, N_("attn2.add_v_proj.weight"), D, A);
        GET(b->add_v_b, N_("attn2.add_v_proj.bias"), D);
        GETF(b->norm_added_k, N_("attn2.norm_added_k.weight"), D);
    }
    if (c->cross_attn_norm) {
        GETF(b->norm2_w, N_("norm2.weight"), D);
        GETF(b->norm2_b, N_("norm2.bias"), D);
    }
    GET(b->ffn1_w, N_("ffn.net.0.proj.weight"), Fd, D);
    GET(b->ffn1_b, N_("ffn.net.0.proj.bias"), Fd);
    GET(b->ffn2_w, N_("ffn.net.2.weight"), D, Fd);
    GET(b->ffn2_b, N_("ffn.net.2.bias"), D);
    GETF(b->sst, N_("scale_shift_table"), 1, 6, D);
#undef N_
    return 0;
fail:
    return -1;
}

/* Per-axis rotary angles (get_1d_rotary_pos_embed, float64, theta 10000): for axis dim d and
 * pair k < d/2, freq = 1 / 10000^(2k/d) and angle(p) = p·freq; the columns of the three axes
 * side by side, cos and sin of each. */
static void wan_build_rope(wan_transformer *m) {
    int hd = m->c.attention_head_dim, half = hd / 2, P = m->c.rope_max_seq_len, ct, ch, cw;
    wan_rope_split(hd, &ct, &ch, &cw);
    m->rope_cos = cvx_malloc(sizeof(double) * (size_t)P * half);
    m->rope_sin = cvx_malloc(sizeof(double) * (size_t)P * half);
    for (int j = 0; j < half; j++) {
        int k = j < ct ? j : j < ct + ch ? j - ct : j - ct - ch;
        int d = 2 * (j < ct ? ct : j < ct + ch ? ch : cw);
        double freq = 1.0 / pow(10000.0, (double)(2 * k) / (double)d);
        for (int p = 0; p < P; p++) {
            double a = (double)p * freq;
            m->rope_cos[(size_t)p * half + j] = cos(a);
            m->rope_sin[(size_t)p * half + j] = sin(a);
        }
    }
}

wan_transformer *wan_load_file(const char *config_json, const char *weights, cvx_ctx *ctx) {
    wan_transformer *m = cvx_calloc(1, sizeof *m);
    wan_config *c = &m->c;
    if (wan_config_load(config_json, c) || !(m->w = cvx_weights_open_family(weights, "wan", "Wan"))) {
        free(m);
        return NULL;
    }
    m->ctx = cvx_ctx_or_new(ctx, &m->owns_ctx);
    if (wan_detect_names(m)) goto fail;
    const int64_t D = (int64_t)c->num_attention_heads * c->attention_head_dim, Fq = c->freq_dim, T = c->text_dim;
    const int64_t P = (int64_t)c->out_channels * c->patch_t * c->patch_h * c->patch_w;
    const cvx_tensor *pw;
    GET(pw, "patch_embedding.weight", D, c->in_channels, c->patch_t, c->patch_h, c->patch_w);
    m->patch_w = *pw;
    m->patch_w.ndim = 2;
    m->patch_w.shape[1] = pw->numel / D;
    GET(m->patch_b, "patch_embedding.bias", D);
    GET(m->time1_w, "condition_embedder.time_embedder.linear_1.weight", D, Fq);
    GET(m->time1_b, "condition_embedder.time_embedder.linear_1.bias", D);
    GET(m->time2_w, "condition_embedder.time_embedder.linear_2.weight", D, D);
    GET(m->time2_b, "condition_embedder.time_embedder.linear_2.bias", D);
    GET(m->tproj_w, "condition_embedder.time_proj.weight", 6 * D, D);
    GET(m->tproj_b, "condition_embedder.time_proj.bias", 6 * D);
    GET(m->text1_w, "condition_embedder.text_embedder.linear_1.weight", D, T);
    GET(m->text1_b, "condition_embedder.text_embedder.linear_1.bias", D);
    GET(m->text2_w, "condition_embedder.text_embedder.linear_2.weight", D, D);
    GET(m->text2_b, "condition_embedder.text_embedder.linear_2.bias", D);
    if (c->image_dim) {
        int64_t I = c->image_dim;
        GETF(m->img_norm1_w, "condition_embedder.image_embedder.norm1.weight", I);
        GETF(m->img_norm1_b, "condition_embedder.image_embedder.norm1.bias", I);
        GET(m->img_ff1_w, "condition_embedder.image_embedder.ff.net.0.proj.weight", I, I);
        GET(m->img_ff1_b, "condition_embedder.image_embedder.ff.net.0.proj.bias", I);
        GET(m->img_ff2_w, "condition_embedder.image_embedder.ff.net.2.weight", D, I);
        GET(m->img_ff2_b, "condition_embedder.image_embedder.ff.net.2.bias", D);
        GETF(m->img_norm2_w, "condition_embedder.image_embedder.norm2.weight", D);
        GETF(m->img_norm2_b, "condition_embedder.image_embedder.norm2.bias", D);
    }
    m->blocks = cvx_calloc((size_t)c->num_layers, sizeof *m->blocks);
    for (int i = 0; i < c->num_layers; i++)
        if (wan_load_block(m, i, &m->blocks[i])) goto fail;
    GETF(m->sst_out, "scale_shift_table", 1, 2, D);
    GET(m->proj_out_w, "proj_out.weight", P, D);
    GET(m->proj_out_b, "proj_out.bias", P);
    wan_build_rope(m);
    return m;
fail:
    wan_free(m);
    return NULL;
}
#undef GET
#undef GETF

wan_transformer *wan_load(const char *transformer_dir, cvx_ctx *ctx) {
    char path[4096];
    return cvx_dir_config_json(path, sizeof path, transformer_dir) ? NULL : wan_load_file(path, transformer_dir, ctx);
}

void wan_free(wan_transformer *m) {
    if (!m) return;
    if (m->blocks)
        for (int i = 0; i < m->c.num_layers; i++) {
            wan_block_weights *b = &m->blocks[i];
            cvx_attn_weights_free(&b->attn1);
            cvx_attn_weights_free(&b->attn2);
            free(b->norm_added_k); free(b->norm2_w); free(b->norm2_b); free(b->sst);
        }
    free(m->blocks);
    free(m->img_norm1_w); free(m->img_norm1_b); free(m->img_norm2_w); free(m->img_norm2_b);
    free(m->sst_out); free(m->rope_cos); free(m->rope_sin);
    free(m->h); free(m->ws); free(m->sp_buf);
    cvx_weights_close(m->w);
    if (m->owns_ctx) cvx_ctx_free(m->ctx);
    free(m);
}

/* ------------------------------------------------------------------ LoRA targets */

/* One linear layer for the LoRA table: its diffusers module name and, from the name table, the
 * original one. */
static void lora_add(cvx_lora_target *t, int *n, const cvx_tensor *w, const cvx_tensor *b, const char *name) {
    char tensor[CVX_LORA_NAME + 8], orig[CVX_LORA_NAME + 8];
    snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
    snprintf(tensor, sizeof tensor, "%s.weight", name);
    wan_original_name(tensor, orig, sizeof orig);
    orig[strlen(orig) - 7] = 0;   /* drop ".weight" */
    snprintf(t[*n].alias, sizeof t[*n].alias, "%.*s", (int)sizeof t[*n].alias - 1, orig);
    t[*n].w = w, t[*n].b = b;
    (*n)++;
}

/* In the order of diffusers' converter of original-name LoRAs (per block attn1, attn2, image
 * keys, ffn; then the embedders and the head): its first layer's rank is peft's lora_alpha. */
int wan_lora_targets(const wan_transformer *m, cvx_lora_target **out) {
    const wan_config *c = &m->c;
    int n = 0, cap = 8 + 12 * c->num_layers;
    cvx_lora_target *t = cvx_calloc((size_t)cap, sizeof *t);
    char name[CVX_LORA_NAME];
    static const char *const proj[4] = {"to_q", "to_k", "to_v", "to_out.0"};
    for (int i = 0; i < c->num_layers; i++) {
        const wan_block_weights *b = &m->blocks[i];
        const wan_attn_weights *at[2] = {&b->attn1, &b->attn2};
        for (int a = 0; a < 2; a++) {
            const cvx_tensor *w[4] = {at[a]->q_w, at[a]->k_w, at[a]->v_w, at[a]->o_w};
            const cvx_tensor *bb[4] = {at[a]->q_b, at[a]->k_b, at[a]->v_b, at[a]->o_b};
            for (int k = 0; k < 4; k++) {
                snprintf(name, sizeof name, "blocks.%d.attn%d.%s", i, a + 1, proj[k]);
                lora_add(t, &n, w[k], bb[k], name);
            }
        }
        if (c->added_kv_proj_dim) {
            snprintf(name, sizeof name, "blocks.%d.attn2.add_k_proj", i);
            lora_add(t, &n, b->add_k_w, b->add_k_b, name);
            snprintf(name, sizeof name, "blocks.%d.attn2.add_v_proj", i);
            lora_add(t, &n, b->add_v_w, b->add_v_b, name);
        }
        snprintf(name, sizeof name, "blocks.%d.ffn.net.0.proj", i);
        lora_add(t, &n, b->ffn1_w, b->ffn1_b, name);
        snprintf(name, sizeof name, "blocks.%d.ffn.net.2", i);
        lora_add(t, &n, b->ffn2_w, b->ffn2_b, name);
    }
    lora_add(t, &n, m->tproj_w, m->tproj_b, "condition_embedder.time_proj");
    lora_add(t, &n, m->proj_out_w, m->proj_out_b, "proj_out");
    lora_add(t, &n, m->text1_w, m->text1_b, "condition_embedder.text_embedder.linear_1");
    lora_add(t, &n, m->text2_w, m->text2_b, "condition_embedder.text_embedder.linear_2");
    lora_add(t, &n, m->time1_w, m->time1_b, "condition_embedder.time_embedder.linear_1");
    lora_add(t, &n, m->time2_w, m->time2_b, "condition_embedder.time_embedder.linear_2");
    if (c->image_dim) {
        lora_add(t, &n, m->img_ff1_w, m->img_ff1_b, "condition_embedder.image_embedder.ff.net.0.proj");
        lora_add(t, &n, m->img_ff2_w, m->img_ff2_b, "condition_embedder.image_embedder.ff.net.2");
    }
    CVX_CHECK(n <= cap);
    *out = t;
    return n;
}

const wan_config *wan_get_config(const wan_transformer *m) { return &m->c; }
cvx_ctx *wan_ctx(const wan_transformer *m) { return m->ctx; }
int wan_original_names(const wan_transformer *m) { return m->original; }
void wan_set_chunking(wan_transformer *m, int chunk_rows) { m->chunk_rows = chunk_rows > 0 ? chunk_rows : 0; }
wan_stats wan_get_stats(const wan_transformer *m) { return m->stats; }
void wan_reset_stats(wan_transformer *m) { memset(&m->stats, 0, sizeof m->stats); }

/* ------------------------------------------------------------------ rotary tables */

int wan_num_tokens(const wan_config *c, int F, int H, int W) {
    return (F / c->patch_t) * (H / c->patch_h) * (W / c->patch_w);
}

int wan_rope_tables(const wan_transformer *m, int F, int H, int W, double *cos_out, double *sin_out) {
    const wan_config *c = &m->c;
    int pf = F / c->patch_t, ph = H / c->patch_h, pw = W / c->patch_w, half = c->attention_head_dim / 2, ct, ch, cw;
    if (pf > c->rope_max_seq_len || ph > c->rope_max_seq_len || pw > c->rope_max_seq_len)
        return cvx_error("transformer: the patch grid %dx%dx%d exceeds rope_max_seq_len = %d positions per axis", pf,
                         ph, pw, c->rope_max_seq_len);
    wan_rope_split(c->attention_head_dim, &ct, &ch, &cw);
    for (int f = 0; f < pf; f++)
        for (int y = 0; y < ph; y++)
            for (int x = 0; x < pw; x++) {
                size_t s = ((size_t)f * ph + y) * pw + x;
                for (int j = 0; j < half; j++) {
                    int p = j < ct ? f : j < ct + ch ? y : x;
                    cos_out[s * half + j] = m->rope_cos[(size_t)p * half + j];
                    sin_out[s * half + j] = m->rope_sin[(size_t)p * half + j];
                }
            }
    return 0;
}
