/* LTX-Video VAE names as users have them: the "vae." half of the original LTX-Video single file
 * (ltx-video-2b-v0.9*.safetensors, the 13B files; the transformer's half is stage2/ltx_names.c)
 * read by diffusers' names, as diffusers' convert_ltx_vae_checkpoint_to_diffusers converts them
 * (loaders/single_file_utils.py, v0.35.2; the same tables as scripts/convert_ltx_to_diffusers.py). */
#include "ltx_vae.h"

#include "error.h"

#include <stdio.h>
#include <string.h>

/* VAE_KEYS_RENAME_DICT in its order: str.replace rules applied one after the other. */
static const char *const VAE_KEYS[][2] = {
    {"vae.", ""},
    {"up_blocks.0", "mid_block"},
    {"up_blocks.1", "up_blocks.0"},
    {"up_blocks.2", "up_blocks.1.upsamplers.0"},
    {"up_blocks.3", "up_blocks.1"},
    {"up_blocks.4", "up_blocks.2.conv_in"},
    {"up_blocks.5", "up_blocks.2.upsamplers.0"},
    {"up_blocks.6", "up_blocks.2"},
    {"up_blocks.7", "up_blocks.3.conv_in"},
    {"up_blocks.8", "up_blocks.3.upsamplers.0"},
    {"up_blocks.9", "up_blocks.3"},
    {"down_blocks.0", "down_blocks.0"},
    {"down_blocks.1", "down_blocks.0.downsamplers.0"},
    {"down_blocks.2", "down_blocks.0.conv_out"},
    {"down_blocks.3", "down_blocks.1"},
    {"down_blocks.4", "down_blocks.1.downsamplers.0"},
    {"down_blocks.5", "down_blocks.1.conv_out"},
    {"down_blocks.6", "down_blocks.2"},
    {"down_blocks.7", "down_blocks.2.downsamplers.0"},
    {"down_blocks.8", "down_blocks.3"},
    {"down_blocks.9", "mid_block"},
    {"conv_shortcut", "conv_shortcut.conv"},
    {"res_blocks", "resnets"},
    {"norm3.norm", "norm3"},
    {"per_channel_statistics.mean-of-means", "latents_mean"},
    {"per_channel_statistics.std-of-means", "latents_std"},
};
enum { N_VAE_KEYS = sizeof VAE_KEYS / sizeof VAE_KEYS[0], UP0 = 1, DOWN0 = 11 };

/* VAE_091_RENAME_DICT / VAE_095_RENAME_DICT: dict.update() keeps the keys' places, so the decoder's
 * up_blocks.0..8 (and for 0.9.5 the encoder's down_blocks.0..8) get new targets in place; the two
 * last_* rules are appended. */
static const char *const UP_09X[9] = {"mid_block",   "up_blocks.0.upsamplers.0", "up_blocks.0",
                                      "up_blocks.1.upsamplers.0", "up_blocks.1", "up_blocks.2.upsamplers.0",
                                      "up_blocks.2", "up_blocks.3.upsamplers.0", "up_blocks.3"};
static const char *const DOWN_095[9] = {"down_blocks.0", "down_blocks.0.downsamplers.0", "down_blocks.1",
                                        "down_blocks.1.downsamplers.0", "down_blocks.2", "down_blocks.2.downsamplers.0",
                                        "down_blocks.3", "down_blocks.3.downsamplers.0", "mid_block"};
static const char *const LAST_09X[2][2] = {{"last_time_embedder", "time_embedder"},
                                           {"last_scale_shift_table", "scale_shift_table"}};

int ltx_vae_original_name(const char *name, int variant, char *out, size_t n) {
    const char *rules[N_VAE_KEYS + 2][2];
    int nr = N_VAE_KEYS;
    memcpy(rules, VAE_KEYS, sizeof VAE_KEYS);
    if (variant >= 91) {
        for (int i = 0; i < 9; i++) rules[UP0 + i][1] = UP_09X[i];
        for (int i = 0; i < 2; i++) rules[nr][0] = LAST_09X[i][0], rules[nr++][1] = LAST_09X[i][1];
    }
    if (variant >= 95)
        for (int i = 0; i < 9; i++) rules[DOWN0 + i][1] = DOWN_095[i];
    if (!strstr(name, "vae.")) return 0;
    cvx_str_replace_rules(name, (const char *const (*)[2])rules, nr, out, n);
    /* VAE_SPECIAL_KEYS_REMAP: removed */
    return !strstr(out, "per_channel_statistics.channel") && !strstr(out, "per_channel_statistics.mean-of-means") &&
           !strstr(out, "per_channel_statistics.mean-of-stds");
}

static int rename_cb(const char *name, char *out, size_t n, void *user) {
    return ltx_vae_original_name(name, *(const int *)user, out, n);
}

int ltx_vae_original_layout(cvx_weights *w) {
    if (cvx_weights_find(w, "decoder.conv_in.conv.weight")) return 0;   /* diffusers names */
    const cvx_tensor *co = cvx_weights_find(w, "vae.encoder.conv_out.conv.weight");
    if (!cvx_weights_find(w, "vae.decoder.conv_in.conv.weight") || !co)
        return cvx_error("%s: not an LTX-Video VAE checkpoint: no tensor 'decoder.conv_in.conv.weight' (diffusers "
                         "names) or 'vae.decoder.conv_in.conv.weight' and 'vae.encoder.conv_out.conv.weight' (the "
                         "original LTX-Video single file)", cvx_weights_path(w));
    /* upstream's test of the version: the encoder's conv_out input width, then the 0.9.1 decoder's key */
    int v = co->ndim >= 2 && co->shape[1] == 2048 ? 95
          : cvx_weights_find(w, "vae.decoder.last_time_embedder.timestep_embedder.linear_1.weight") ? 91 : 90;
    char label[96];
    snprintf(label, sizeof label, "the original LTX-Video VAE names (%s layout), converted as diffusers does",
             v == 95 ? "0.9.5+" : v == 91 ? "0.9.1" : "0.9.0");
    if (cvx_weights_rename(w, label, rename_cb, &v)) return -1;
    cvx_info("%s: %s", cvx_weights_path(w), label);
    return 0;
}
