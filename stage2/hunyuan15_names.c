/* HunyuanVideo-1.5 transformer names as users have them: the original names (Tencent's checkpoints,
 * ComfyUI's repackaged hunyuanvideo1.5_*.safetensors) read by diffusers' names, and the GGUF rules of
 * city96's files. The loader is stage2/hunyuan15_load.c. */
#include "hunyuan15.h"

#include "error.h"
#include "stage2/quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ original names */

/* The original HunyuanVideo-1.5 names (Tencent's checkpoints, and ComfyUI's repackaged
 * hunyuanvideo1.5_*.safetensors that stable-diffusion.cpp reads too; with or without the
 * "model.diffusion_model." prefix) -> diffusers', as scripts/convert_hunyuan_video1_5_to_diffusers.py
 * (diffusers v0.36.0) converts them: prefixes of the whole name (blk 0), of the name after
 * "txt_in.individual_token_refiner.blocks.N." (blk 1) or after "double_blocks.N." (blk 2). Two
 * tensors are not renames (hv15_original_layout): the refiner's fused self_attn_qkv (split in three
 * by rows) and final_layer.adaLN_modulation.1 (its shift and scale halves swapped). */
static const struct {
    int blk;
    const char *orig, *diff;
} HV15_KEYS[] = {
    {0, "time_in.mlp.0.", "time_embed.timestep_embedder.linear_1."},
    {0, "time_in.mlp.2.", "time_embed.timestep_embedder.linear_2."},
    {0, "txt_in.t_embedder.mlp.0.", "context_embedder.time_text_embed.timestep_embedder.linear_1."},
    {0, "txt_in.t_embedder.mlp.2.", "context_embedder.time_text_embed.timestep_embedder.linear_2."},
    {0, "txt_in.c_embedder.linear_1.", "context_embedder.time_text_embed.text_embedder.linear_1."},
    {0, "txt_in.c_embedder.linear_2.", "context_embedder.time_text_embed.text_embedder.linear_2."},
    {0, "txt_in.input_embedder.", "context_embedder.proj_in."},
    {0, "byt5_in.layernorm.", "context_embedder_2.norm."},
    {0, "byt5_in.fc1.", "context_embedder_2.linear_1."},
    {0, "byt5_in.fc2.", "context_embedder_2.linear_2."},
    {0, "byt5_in.fc3.", "context_embedder_2.linear_3."},
    {0, "vision_in.proj.0.", "image_embedder.norm_in."},
    {0, "vision_in.proj.1.", "image_embedder.linear_1."},
    {0, "vision_in.proj.3.", "image_embedder.linear_2."},
    {0, "vision_in.proj.4.", "image_embedder.norm_out."},
    {0, "img_in.proj.", "x_embedder.proj."},
    {0, "cond_type_embedding.", "cond_type_embed."},
    {0, "final_layer.linear.", "proj_out."},
    {1, "norm1.", "norm1."},
    {1, "norm2.", "norm2."},
    {1, "self_attn_proj.", "attn.to_out.0."},
    {1, "mlp.fc1.", "ff.net.0.proj."},
    {1, "mlp.fc2.", "ff.net.2."},
    {1, "adaLN_modulation.1.", "norm_out.linear."},
    {2, "img_mod.linear.", "norm1.linear."},
    {2, "txt_mod.linear.", "norm1_context.linear."},
    {2, "img_attn_q.", "attn.to_q."},
    {2, "img_attn_k.", "attn.to_k."},
    {2, "img_attn_v.", "attn.to_v."},
    {2, "img_attn_q_norm.", "attn.norm_q."},
    {2, "img_attn_k_norm.", "attn.norm_k."},
    {2, "img_attn_proj.", "attn.to_out.0."},
    {2, "txt_attn_q.", "attn.add_q_proj."},
    {2, "txt_attn_k.", "attn.add_k_proj."},
    {2, "txt_attn_v.", "attn.add_v_proj."},
    {2, "txt_attn_q_norm.", "attn.norm_added_q."},
    {2, "txt_attn_k_norm.", "attn.norm_added_k."},
    {2, "txt_attn_proj.", "attn.to_add_out."},
    {2, "img_mlp.fc1.", "ff.net.0.proj."},
    {2, "img_mlp.fc2.", "ff.net.2."},
    {2, "txt_mlp.fc1.", "ff_context.net.0.proj."},
    {2, "txt_mlp.fc2.", "ff_context.net.2."},
};

#define HV15_COMFY_PREFIX "model.diffusion_model."

/* cvx_weights_rename's callback: *user is the file's prefix ("" or HV15_COMFY_PREFIX). */
static int hv15_rename(const char *name, char *out, size_t n, void *user) {
    const char *prefix = user;
    const size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl)) return 0;
    name += pl;
    int i = -1, used = 0, blk = 0;
    char head[64];
    if (sscanf(name, "txt_in.individual_token_refiner.blocks.%d.%n", &i, &used) == 1 && used) blk = 1;
    else if (sscanf(name, "double_blocks.%d.%n", &i, &used) == 1 && used) blk = 2;
    else used = 0;
    if (blk == 1) snprintf(head, sizeof head, "context_embedder.token_refiner.refiner_blocks.%d.", i);
    else if (blk == 2) snprintf(head, sizeof head, "transformer_blocks.%d.", i);
    else head[0] = 0;
    const char *rest = name + used;
    for (size_t k = 0; k < sizeof HV15_KEYS / sizeof HV15_KEYS[0]; k++) {
        const size_t ol = strlen(HV15_KEYS[k].orig);
        if (HV15_KEYS[k].blk != blk || strncmp(rest, HV15_KEYS[k].orig, ol)) continue;
        snprintf(out, n, "%s%s%s", head, HV15_KEYS[k].diff, rest + ol);
        return 1;
    }
    return 0;
}

/* `orig` (+ the prefix) of the file, before renaming; NULL + cvx_error when missing. */
static const cvx_tensor *hv15_file_tensor(const cvx_weights *w, const char *prefix, const char *orig) {
    char key[256];
    snprintf(key, sizeof key, "%s%s", prefix, orig);
    const cvx_tensor *t = cvx_weights_find(w, key);
    if (!t) cvx_error("%s: tensor '%s' is missing (original HunyuanVideo-1.5 names)", cvx_weights_path(w), key);
    return t;
}

/* The names the file uses: diffusers' (nothing to do), or the original ones, renamed and the two
 * converted tensors added (see HV15_KEYS). */
int hv15_original_layout(cvx_weights *w, const hv15_config *c) {
    static const char *const probes[] = {"", HV15_COMFY_PREFIX};
    const char *prefix = NULL;
    char key[128];
    if (cvx_weights_find(w, "x_embedder.proj.weight")) return 0;
    for (int i = 0; i < 2 && !prefix; i++) {
        snprintf(key, sizeof key, "%simg_in.proj.weight", probes[i]);
        if (cvx_weights_find(w, key)) prefix = probes[i];
    }
    if (!prefix)
        return cvx_error("%s: not a HunyuanVideo-1.5 transformer checkpoint: no tensor 'x_embedder.proj.weight' "
                         "(diffusers names) or 'img_in.proj.weight' (original / ComfyUI names)", cvx_weights_path(w));
    snprintf(key, sizeof key, "%sbyt5_in.fc1.weight", prefix);
    if (!cvx_weights_find(w, key))
        return cvx_error("%s: original HunyuanVideo names without the ByT5 projection '%s': a HunyuanVideo 1.0 "
                         "checkpoint? HunyuanVideo-1.5 is needed", cvx_weights_path(w), key);
    const int R = c->num_refiner_layers;
    const cvx_tensor **qkv = cvx_calloc((size_t)(2 * R + 1), sizeof *qkv), *ada[2];
    int rc = -1;
    for (int i = 0; i < R; i++)
        for (int k = 0; k < 2; k++) {
            snprintf(key, sizeof key, "txt_in.individual_token_refiner.blocks.%d.self_attn_qkv.%s", i, k ? "bias" : "weight");
            if (!(qkv[2 * i + k] = hv15_file_tensor(w, prefix, key))) goto out;
            if (qkv[2 * i + k]->shape[0] % 3) {
                char got[96];
                cvx_error("%s: tensor '%s%s' has shape %s: its first dimension is not 3 · hidden (q, k, v)",
                          cvx_weights_path(w), prefix, key, cvx_shape_str(qkv[2 * i + k]->ndim, qkv[2 * i + k]->shape,
                                                                           got, sizeof got));
                goto out;
            }
        }
    for (int k = 0; k < 2; k++) {
        snprintf(key, sizeof key, "final_layer.adaLN_modulation.1.%s", k ? "bias" : "weight");
        if (!(ada[k] = hv15_file_tensor(w, prefix, key))) goto out;
        if (ada[k]->shape[0] % 2) {
            cvx_error("%s: tensor '%s%s': its first dimension is odd, expected 2 · hidden (shift, scale)",
                      cvx_weights_path(w), prefix, key);
            goto out;
        }
    }
    if (cvx_weights_rename(w, "original HunyuanVideo-1.5 names", hv15_rename, (void *)prefix)) goto out;
    static const char *const qkv_names[3] = {"to_q", "to_k", "to_v"};
    for (int i = 0; i < R; i++)
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 3; j++) {
                const cvx_tensor *t = qkv[2 * i + k];
                snprintf(key, sizeof key, "context_embedder.token_refiner.refiner_blocks.%d.attn.%s.%s", i,
                         qkv_names[j], k ? "bias" : "weight");
                if (cvx_weights_add_rows(w, key, t, j * (t->shape[0] / 3), t->shape[0] / 3)) goto out;
            }
    /* AdaLayerNormContinuous: diffusers' (scale, shift) = the original's (shift, scale) halves swapped */
    for (int k = 0; k < 2; k++) {
        const size_t half = ada[k]->nbytes / 2;
        char *d = cvx_malloc(ada[k]->nbytes);
        memcpy(d, (const char *)ada[k]->data + half, half);
        memcpy(d + half, ada[k]->data, half);
        if (cvx_weights_add_data(w, k ? "norm_out.linear.bias" : "norm_out.linear.weight", ada[k], d)) goto out;
    }
    cvx_info("%s: original HunyuanVideo-1.5 names%s", cvx_weights_path(w), *prefix ? " (ComfyUI's prefix)" : "");
    rc = 0;
out:
    free(qkv);
    return rc;
}

/* ------------------------------------------------------------------ GGUF (stage2/quantize.h) */

/* city96's rules for this model family (ComfyUI-GGUF tools/convert.py ModelHyVid, arch "hyvid", no
 * keys_hiprec; tools/lcpp.patch LLM_ARCH_HYVID: txt_in., img_in., time_in., vector_in., guidance_in.
 * and final_layer. not quantized). A file with the original names keeps them (what ComfyUI-GGUF and
 * sd.cpp read); a diffusers-layout source keeps diffusers' names, the same modules kept by their
 * diffusers names (the token refiner and its embedders, the patch embedding, the time embedding,
 * the output layer), read back by this program. */
static const char *const HV15_GGUF_KEEP[] = {"txt_in.", "img_in.", "time_in.", "vector_in.", "guidance_in.",
                                             "final_layer.", "context_embedder.", "x_embedder.", "time_embed.",
                                             "norm_out.", "proj_out.", NULL};
const cvx_gguf_rules hv15_gguf_rules = {"hyvid", HV15_GGUF_KEEP, NULL, NULL};
