/* Wan 2.1 in stage 2: the transformer behind the denoiser interface (stage2/denoiser.h) and the
 * latent shape rules of WanPipeline (diffusers 0.33.1). */
#ifndef CVX_STAGE2_WAN_FAMILY_H
#define CVX_STAGE2_WAN_FAMILY_H

#include "safetensors.h"
#include "stage2/denoiser.h"
#include "stage2/plan.h"
#include "stage2/preview.h"
#include "stage2/sampler.h"
#include "stage2/wan.h"

/* The denoiser over a loaded transformer (borrowed). The input is x [C, F, H, W] followed on the
 * channel axis by in.cond when given (I2V: [mask 4 + z, F, H, W]); in.image: the CLIP image
 * embeddings [L_img, image_dim]. teacache_e0: the step cache compares timestep_proj (e0, [6, D]) instead of
 * the time embedding (e, [D]) — TeaCache4Wan2.1's use_ret_steps. Free with cvx_denoiser_free. */
void wan_denoiser_init(cvx_denoiser *d, wan_transformer *m, int cond_channels, int teacache_e0);
/* Wan 2.2 TI2V image-to-video: the transformer's input is (1 − m)·condition + m·x (latent frame 0
 * replaced by the image's latents, wan_ti2v_apply_condition); condition [C, 1, H, W] borrowed,
 * set before prepare. Per-token timesteps come with the input (in.t_tokens). */
void wan_denoiser_set_ti2v_condition(cvx_denoiser *d, const float *condition);

/* The latent shape [1, z, (frames − 1)/4 + 1, height/8, width/8] for a request, after checking
 * frames = 4k+1 and height/width multiples of vae_scale·patch (16). z: the VAE's z_dim.
 * -1 + a clear cvx_error naming the flag. */
int wan_latent_shape_for(const wan_config *c, const cvx_loop_params *p, int z_dim, cvx_latent_shape *out);

/* ComfyUI's Wan 2.1 latent → RGB factors (comfy/latent_formats.py, class Wan21, Comfy-Org/ComfyUI
 * @ 9a9a69fd), applied to the normalised (model-space) latents with gain 1. */
extern const cvx_latent_rgb wan_latent_rgb;

/* TeaCache4Wan2.1's published coefficients (ali-vilab/TeaCache, TeaCache4Wan2.1/teacache_generate.py
 * @ 8ae35034): T2V-1.3B (dim 1536), T2V-14B, I2V-14B 480P / 720P; use_ret_steps False (the rule
 * compares the time embedding e; first and last steps computed — the CogVideoX rule) or True
 * (it compares e0 = timestep_proj; the first 5 steps computed, the last not forced). The two I2V
 * checkpoints have the same config, so the run's size picks (720P from 720×1280 pixels up; the
 * script picks by the checkpoint's directory name). Returns the set's name, or NULL (out zeros)
 * for a transformer none was published for (latents of other than 16 channels, e.g. Wan 2.2
 * TI2V-5B, or a width other than 1.3B's and 14B's); Wan 2.2 A14B has 14B's config and gets its
 * set unless its row chooses otherwise. */
const char *wan_teacache_coefficients(const wan_config *c, int height, int width, int ret_steps, double out[5]);

/* model_index.json's Wan 2.2 keys (null reads as absent; no file: Wan 2.1): expand_timesteps
 * (TI2V-5B: per-token timesteps, the image as latent frame 0) and boundary_ratio (A14B: in (0, 1),
 * with transformer_2/config.json beside transformer/ and the scheduler's num_train_timesteps). */
typedef struct {
    int expand_timesteps;
    double boundary_ratio;     /* 0: one transformer */
    int num_train_timesteps;   /* scheduler/scheduler_config.json's (1000): boundary_ratio's scale */
    wan_config tcfg2;          /* transformer_2/config.json (the low-noise expert) */
} wan_pipeline_config;
/* -1 + cvx_error naming the file (a boundary out of range, transformer_2's config missing). */
int wan_pipeline_config_load(const char *model_dir, wan_pipeline_config *out);

/* The plan over A14B's two experts (stage2/plan.h): from the first of the loop's timesteps (from
 * t_start on) below boundary_ratio · num_train_timesteps (compared in float32, as upstream) the
 * low-noise expert 1 with guidance g2 (1: no CFG, when the high-noise guidance g <= 1); returns
 * the boundary timestep. */
double wan_a14b_plan(cvx_sample_plan *pl, const double *timesteps, const wan_pipeline_config *pc, double g, double g2);

/* Wan 2.2 TI2V's per-token timestep scale [*n] (n = wan_num_tokens; allocated): 1 on every token
 * (T2V), or the first-frame mask (I2V: 0 on latent frame 0's tokens, wan_ti2v_timesteps). */
float *wan_ti2v_t_scale(const wan_config *c, int F, int h, int w, int i2v, size_t *n);

/* The variants' defaults (WanPipeline, the model cards, the Wan 2.2 configs; docs/models.md). */
typedef struct {
    int z_dim, experts, i2v;       /* what a variant matches (0 / -1: any), see wan_variant_for */
    int frames, height, width, fps;
    double guidance, guidance_2;   /* guidance_2: A14B's low-noise expert's */
} wan_variant;
/* The first variant matching the VAE's z_dim, the experts (2: model_index.json's boundary_ratio)
 * and image-to-video (the transformer's in_channels != out_channels); the last row (Wan 2.1)
 * matches any. */
const wan_variant *wan_variant_for(int z_dim, int experts, int i2v);

#endif
