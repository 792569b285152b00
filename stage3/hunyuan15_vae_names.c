/* AutoencoderKLHunyuanVideo15 names as users have them: the original HunyuanVideo-1.5 VAE names
 * (Tencent's vae/, ComfyUI's repackaged hunyuanvideo15_vae_fp16.safetensors) read by diffusers'
 * names, as diffusers' scripts/convert_hunyuan_video1_5_to_diffusers.py
 * (convert_hunyuan_video_15_vae_checkpoint_to_diffusers, v0.36.0) renames them: nothing but names. */
#include "hunyuan15_vae.h"

#include "error.h"

#include <stdio.h>
#include <string.h>

/* Prefixes of the name after "encoder." / "decoder.": original -> diffusers ('%d': a block index,
 * the second '%d' a resnet index). */
static const char *const MID_KEYS[][2] = {
    {"mid.block_1.", "mid_block.resnets.0."}, {"mid.block_2.", "mid_block.resnets.1."},
    {"mid.attn_1.norm.", "mid_block.attentions.0.norm."}, {"mid.attn_1.q.", "mid_block.attentions.0.to_q."},
    {"mid.attn_1.k.", "mid_block.attentions.0.to_k."}, {"mid.attn_1.v.", "mid_block.attentions.0.to_v."},
    {"mid.attn_1.proj_out.", "mid_block.attentions.0.proj_out."},
};

static int hv15_vae_rename(const char *name, char *out, size_t n, void *user) {
    (void)user;
    const char *side = !strncmp(name, "encoder.", 8) ? "encoder" : !strncmp(name, "decoder.", 8) ? "decoder" : NULL;
    if (!side) return 0;
    const char *rest = name + 8, *blocks = side[0] == 'e' ? "down" : "up";
    int i, r, used = 0;
    char pat[64];
    snprintf(pat, sizeof pat, "%s.%%d.block.%%d.%%n", blocks);
    if (sscanf(rest, pat, &i, &r, &used) == 2 && used) {
        snprintf(out, n, "%s.%s_blocks.%d.resnets.%d.%s", side, blocks, i, r, rest + used);
        return 1;
    }
    snprintf(pat, sizeof pat, "%s.%%d.%ssample.%%n", blocks, blocks);
    used = 0;
    if (sscanf(rest, pat, &i, &used) == 1 && used) {
        snprintf(out, n, "%s.%s_blocks.%d.%ssamplers.0.%s", side, blocks, i, blocks, rest + used);
        return 1;
    }
    for (size_t k = 0; k < sizeof MID_KEYS / sizeof MID_KEYS[0]; k++)
        if (!strncmp(rest, MID_KEYS[k][0], strlen(MID_KEYS[k][0]))) {
            snprintf(out, n, "%s.%s%s", side, MID_KEYS[k][1], rest + strlen(MID_KEYS[k][0]));
            return 1;
        }
    snprintf(out, n, "%s", name);   /* conv_in, norm_out, conv_out: the same */
    return 1;
}

int hv15_vae_original_layout(cvx_weights *w) {
    if (cvx_weights_find(w, "decoder.mid_block.resnets.0.norm1.gamma")) return 0;
    if (!cvx_weights_find(w, "decoder.mid.block_1.norm1.gamma"))
        return cvx_error("%s: not a HunyuanVideo-1.5 VAE checkpoint: no tensor 'decoder.mid_block.resnets.0.norm1.gamma' "
                         "(diffusers names) or 'decoder.mid.block_1.norm1.gamma' (original / ComfyUI names)",
                         cvx_weights_path(w));
    if (cvx_weights_rename(w, "original HunyuanVideo-1.5 VAE names", hv15_vae_rename, NULL)) return -1;
    cvx_info("%s: original HunyuanVideo-1.5 VAE names", cvx_weights_path(w));
    return 0;
}
