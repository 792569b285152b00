/* LTX-Video transformer names as users have them: the original LTX-Video layout
 * (ltx-video-2b-v0.9*.safetensors, the 13B files: the transformer under "model.diffusion_model."
 * and the VAE under "vae." in one file) read by diffusers' names, and the GGUF rules of city96's
 * LTX-Video files. The VAE's half is stage3/ltx_vae_names.c. */
#include "ltx.h"

#include "error.h"
#include "stage2/quantize.h"

#include <stdio.h>
#include <string.h>

/* diffusers' convert_ltx_transformer_checkpoint_to_diffusers (loaders/single_file_utils.py, v0.35.2;
 * scripts/convert_ltx_to_diffusers.py has the same table): every key without "vae", these
 * str.replace rules in order. */
static const char *const LTX_KEYS[][2] = {
    {"model.diffusion_model.", ""}, {"patchify_proj", "proj_in"}, {"adaln_single", "time_embed"},
    {"q_norm", "norm_q"},           {"k_norm", "norm_k"},
};

static int ltx_rename(const char *name, char *out, size_t n, void *user) {
    (void)user;
    if (strstr(name, "vae")) return 0;
    cvx_str_replace_rules(name, LTX_KEYS, (int)(sizeof LTX_KEYS / sizeof LTX_KEYS[0]), out, n);
    return 1;
}

int ltx_original_layout(cvx_weights *w) {
    if (cvx_weights_find(w, "proj_in.weight")) return 0;   /* diffusers names */
    if (!cvx_weights_find(w, "model.diffusion_model.patchify_proj.weight") && !cvx_weights_find(w, "patchify_proj.weight"))
        return cvx_error("%s: not an LTX-Video transformer checkpoint: no tensor 'proj_in.weight' (diffusers names) or "
                         "'model.diffusion_model.patchify_proj.weight' (the original LTX-Video single file)",
                         cvx_weights_path(w));
    if (cvx_weights_rename(w, "the original LTX-Video names, converted as diffusers' single-file loader does",
                           ltx_rename, NULL))
        return -1;
    cvx_info("%s: original LTX-Video names", cvx_weights_path(w));
    return 0;
}

/* ---- GGUF (stage2/quantize.h) ----
 * city96's LTX-Video GGUFs: ComfyUI-GGUF tools/convert.py ModelLTXV (arch "ltxv", keys_hiprec
 * "scale_shift_table") and tools/lcpp.patch LLM_ARCH_LTXV (adaln_single., caption_projection.,
 * patchify_proj., proj_out. and scale_shift_table not quantized). Their names are the original
 * ones without "model.diffusion_model.": a diffusers-layout source is renamed back (the table above
 * read backwards), an original single file loses its prefix and its VAE ("" = left out). */
static void ltx_gguf_name(const cvx_weights *src, const char *name, char *out, size_t n) {
    static const char *const back[][2] = {
        {"proj_in", "patchify_proj"}, {"time_embed", "adaln_single"}, {"norm_q", "q_norm"}, {"norm_k", "k_norm"}};
    static const char *const strip[][2] = {{"model.diffusion_model.", ""}};
    if (cvx_weights_find(src, "proj_in.weight")) {
        cvx_str_replace_rules(name, back, 4, out, n);
        return;
    }
    if (strstr(name, "vae")) {
        if (n) out[0] = 0;
        return;
    }
    cvx_str_replace_rules(name, strip, 1, out, n);
}

static const char *const LTX_GGUF_KEEP[] = {"adaln_single.", "caption_projection.", "patchify_proj.", "proj_out.",
                                            "scale_shift_table", NULL};
static const char *const LTX_GGUF_HIPREC[] = {"scale_shift_table", NULL};
const cvx_gguf_rules ltx_gguf_rules = {"ltxv", LTX_GGUF_KEEP, LTX_GGUF_HIPREC, ltx_gguf_name};
