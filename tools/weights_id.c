/* What a weight file would load as (weights_id.h). */
#include "tools/weights_id.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tensor `name`, also under ComfyUI's "model.diffusion_model." prefix. */
static const cvx_tensor *find(const cvx_weights *w, const char *name) {
    const cvx_tensor *t = cvx_weights_find(w, name);
    char p[256];
    if (!t && snprintf(p, sizeof p, "model.diffusion_model.%s", name) < (int)sizeof p) t = cvx_weights_find(w, p);
    return t;
}

/* Blocks named prefix + N + "." (1 + the largest N). */
static int count_blocks(const cvx_weights *w, const char *prefix) {
    int n = 0;
    size_t k = strlen(prefix);
    for (int i = 0; i < cvx_weights_count(w); i++) {
        const char *s = cvx_weights_at(w, i)->name;
        if (!strncmp(s, "model.diffusion_model.", 22)) s += 22;
        if (strncmp(s, prefix, k) || s[k] < '0' || s[k] > '9') continue;
        int b = atoi(s + k) + 1;
        if (b > n) n = b;
    }
    return n;
}

typedef struct {
    const char *family;
    int blocks, width;
    const char *variant;
} shape_row;
/* the released models' transformer shapes (their config.json: num_layers, heads × head dim) */
static const shape_row variants[] = {
    {"CogVideoX", 30, 1920, "CogVideoX-2b"},      {"CogVideoX", 42, 3072, "CogVideoX-5b / CogVideoX1.5-5b"},
    {"Wan", 30, 1536, "Wan2.1-1.3B"},             {"Wan", 40, 5120, "Wan2.1-14B"},
    {NULL, 0, 0, NULL},
};

static void transformer(weights_identity *id, const char *family, const char *names, int blocks, int width,
                        int in_ch) {
    snprintf(id->family, sizeof id->family, "%s", family);
    snprintf(id->what, sizeof id->what, "%s transformer (%s), %d blocks, width %d, %d input channels", family, names,
             blocks, width, in_ch);
    for (const shape_row *r = variants; r->family; r++)
        if (!strcmp(r->family, family) && r->blocks == blocks && r->width == width)
            snprintf(id->variant, sizeof id->variant, "%s%s", r->variant,
                     in_ch == 32 || in_ch == 36 ? " I2V" : "");
    if (!id->variant[0]) snprintf(id->variant, sizeof id->variant, "none of the released shapes (a test model?)");
}

void weights_identify(const cvx_weights *w, weights_identity *id) {
    memset(id, 0, sizeof *id);
    const cvx_tensor *t;
    if ((t = find(w, "patch_embed.proj.weight")) && find(w, "transformer_blocks.0.attn1.to_q.weight")) {
        /* CogVideoX: a conv patch embedding [D, C, p, p]; 1.5's is a linear [D, C·pt·p·p] */
        const int in_ch = t->ndim == 4 ? (int)t->shape[1] : (int)t->shape[1] / 8;
        transformer(id, "CogVideoX", "diffusers names", count_blocks(w, "transformer_blocks."), (int)t->shape[0], in_ch);
        if (t->ndim == 2) strncat(id->what, ", CogVideoX1.5 patching", sizeof id->what - strlen(id->what) - 1);
    } else if ((t = find(w, "patch_embedding.weight")) && find(w, "blocks.0.self_attn.q.weight")) {
        transformer(id, "Wan", "original names", count_blocks(w, "blocks."), (int)t->shape[0], (int)t->shape[1]);
    } else if ((t = find(w, "patch_embedding.weight")) && find(w, "blocks.0.attn1.to_q.weight")) {
        transformer(id, "Wan", "diffusers names", count_blocks(w, "blocks."), (int)t->shape[0], (int)t->shape[1]);
    } else if (find(w, "encoder.block.0.layer.0.SelfAttention.q.weight") || find(w, "enc.blk.0.attn_q.weight")) {
        const int umt5 = find(w, "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight") ||
                         find(w, "enc.blk.1.attn_rel_b.weight");
        snprintf(id->family, sizeof id->family, "%s", umt5 ? "Wan" : "CogVideoX");
        snprintf(id->what, sizeof id->what, "%s text encoder (%s names), %d blocks", umt5 ? "UMT5" : "T5 v1.1",
                 find(w, "enc.blk.0.attn_q.weight") ? "llama.cpp" : "transformers",
                 count_blocks(w, find(w, "enc.blk.0.attn_q.weight") ? "enc.blk." : "encoder.block."));
    } else if (find(w, "decoder.conv_in.conv.weight")) {
        snprintf(id->family, sizeof id->family, "CogVideoX");
        snprintf(id->what, sizeof id->what, "CogVideoX VAE (AutoencoderKLCogVideoX)");
    } else if (find(w, "decoder.conv_in.weight") && (t = find(w, "decoder.conv_in.weight")) && t->ndim == 5) {
        snprintf(id->family, sizeof id->family, "Wan");
        snprintf(id->what, sizeof id->what, "Wan VAE (AutoencoderKLWan)");
    } else if (find(w, "vision_model.embeddings.patch_embedding.weight")) {
        snprintf(id->what, sizeof id->what, "CLIP vision encoder (the I2V image encoder)");
    } else {
        for (int i = 0; i < cvx_weights_count(w); i++) {
            const char *s = cvx_weights_at(w, i)->name;
            if (strstr(s, "lora_A") || strstr(s, "lora_down") || strstr(s, "lora_B") || strstr(s, "lora_up")) {
                snprintf(id->what, sizeof id->what, "LoRA adapter (give it to stage2 --lora)");
                return;
            }
        }
        snprintf(id->what, sizeof id->what, "unknown: no component of a supported family has these names");
    }
}
