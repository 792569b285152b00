/* libFuzzer target: JSON config parsing (cvx_config_parse) and every typed getter, required and
 * with defaults, on the keys the stages read plus every key the input itself holds. A getter
 * may fail (with a message naming the file and the key), never crash, leak or hit UB. */
#include "config.h"
#include "error.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile size_t g_sink;

/* Keys the stages and the tests read from config.json / scheduler_config.json /
 * generation_config.json / model_index.json / *.safetensors.index.json. */
static const char *const k_keys[] = {
    "_class_name", "_diffusers_version", "act_fn", "activation_fn", "attention_bias", "attention_head_dim",
    "beta_end", "beta_schedule", "beta_start", "block_out_channels", "clip_sample", "clip_sample_range",
    "d_ff", "d_kv", "d_model", "down_block_types", "dropout", "extra_ids", "feed_forward_proj",
    "flip_sin_to_cos", "force_upcast", "freq_shift", "in_channels", "invert_scale_latents",
    "latent_channels", "latents_mean", "latents_std", "layer_norm_epsilon", "layers_per_block", "legacy",
    "max_text_seq_length", "model_id", "norm_eps", "norm_num_groups", "num_attention_heads", "num_heads",
    "num_layers", "num_train_timesteps", "ofs_embed_dim", "out_channels", "patch_size", "patch_size_t",
    "prediction_type", "relative_attention_max_distance", "relative_attention_num_buckets",
    "rescale_betas_zero_snr", "sample_frames", "sample_height", "sample_width", "sample_max_value",
    "scaling_factor", "set_alpha_to_one", "shift_factor", "snr_shift_scale", "spatial_interpolation_scale",
    "steps_offset", "temporal_compression_ratio", "temporal_interpolation_scale", "text_embed_dim",
    "time_embed_dim", "timestep_activation_fn", "timestep_spacing", "trained_betas", "up_block_types",
    "use_learned_positional_embeddings", "use_post_quant_conv", "use_quant_conv",
    "use_rotary_positional_embeddings", "vocab_size", "weight_map", "metadata", "num_frames",
    "num_inference_steps", "guidance_scale", "seed", "prompt", "negative_prompt", "height", "width",
    "fps", "", "__metadata__",
};

/* An error must name the file (the label) and the key. */
static void check_error(int rc, const char *key) {
    if (rc == 0) return;
    if (rc != -1) abort();
    const char *msg = cvx_last_error();
    if (!strstr(msg, "fuzz.json") || (key[0] && strlen(key) < 64 && !strstr(msg, key))) abort();
}

static void exercise(const cvx_config *c, const char *key) {
    int64_t i64;
    double d;
    int b, n;
    const char *s;
    int64_t ia[16];
    const char *sa[16];

    g_sink += (size_t)cvx_cfg_has(c, key);
    int rc = cvx_cfg_int(c, key, &i64);
    check_error(rc, key);
    if (!rc) g_sink += (size_t)i64;
    rc = cvx_cfg_num(c, key, &d);
    check_error(rc, key);
    if (!rc) g_sink += (size_t)(d == d);
    rc = cvx_cfg_bool(c, key, &b);
    check_error(rc, key);
    if (!rc) g_sink += (size_t)b;
    rc = cvx_cfg_str(c, key, &s);
    check_error(rc, key);
    if (!rc) g_sink += strlen(s);

    check_error(cvx_cfg_int_or(c, key, 7, &i64), key);
    check_error(cvx_cfg_num_or(c, key, 0.5, &d), key);
    check_error(cvx_cfg_bool_or(c, key, 1, &b), key);
    rc = cvx_cfg_str_or(c, key, "default", &s);
    check_error(rc, key);
    if (!rc) g_sink += strlen(s);

    for (int max = 0; max <= 16; max += 4) {  /* exact-fit and too-small capacities */
        n = -1;
        rc = cvx_cfg_int_array(c, key, ia, max, &n);
        check_error(rc, key);
        if (!rc) { if (n < 0 || n > max) abort(); for (int k = 0; k < n; k++) g_sink += (size_t)ia[k]; }
        n = -1;
        rc = cvx_cfg_str_array(c, key, sa, max, &n);
        check_error(rc, key);
        if (!rc) { if (n < 0 || n > max) abort(); for (int k = 0; k < n; k++) g_sink += strlen(sa[k]); }
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    cvx_set_verbosity(0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cvx_config c;
    cvx_clear_error();
    if (cvx_config_parse(&c, (const char *)data, size, "fuzz.json") != 0) {
        if (!strstr(cvx_last_error(), "fuzz.json")) abort();
        cvx_config_free(&c);  /* must be safe after a failed parse */
        return 0;
    }
    for (size_t i = 0; i < sizeof k_keys / sizeof k_keys[0]; i++) exercise(&c, k_keys[i]);
    int seen = 0;
    json_object_object_foreach(c.root, key, val) {
        (void)val;
        if (++seen > 64) break;
        exercise(&c, key);
    }
    cvx_config_free(&c);
    return 0;
}
