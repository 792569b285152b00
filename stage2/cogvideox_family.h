/* CogVideoX in stage 2: the transformer behind the denoiser interface (stage2/denoiser.h), its
 * latent shape rules, the embeddings it takes, and its published TeaCache coefficients. */
#ifndef CVX_STAGE2_COGVIDEOX_FAMILY_H
#define CVX_STAGE2_COGVIDEOX_FAMILY_H

#include "safetensors.h"
#include "stage2/denoiser.h"
#include "stage2/preview.h"
#include "stage2/sampler.h"
#include "stage2/cogvideox.h"

/* The denoiser over a loaded transformer (borrowed). i2v: the input is [latents, image latents]
 * on the channel axis per frame (in.cond = the image latents, [F, C, h, w]). Free with
 * cvx_denoiser_free. */
void cogvideox_denoiser_init(cvx_denoiser *d, cogvideox_transformer *m, int i2v);

/* CogVideoXPipeline's step plan: one transformer, the request's guidance on every step that runs
 * (static, or dynamic with use_dynamic_cfg). Free with cvx_plan_free. */
void cogvideox_plan(const cvx_loop_params *p, cvx_expert_provider *experts, cvx_sample_plan *out);

/* cvx_sample_loop over a CogVideoX transformer: a denoiser made and freed around the loop; p's
 * TeaCache coefficients are replaced by `teacache` (NULL: the model's published set). */
int cogvideox_sample_loop(cogvideox_transformer *m, int i2v, cvx_scheduler *s, const cvx_loop_params *p,
                          const double *teacache, const cvx_latent_shape *shape, const float *prompt,
                          const float *negative, int L, const cvx_checkpointing *ck, cvx_step_hook hook,
                          void *hook_ctx, float *latents, cvx_sample_result *result);

/* Latent shape for a request, validating the sizes against the model first (frames 4k+1,
 * height/width multiples of vae_scale·patch_size, ...); i2v: the request is image-to-video. -1 + a clear cvx_error naming the flag. */
int cogvideox_latent_shape_for(const cogvideox_config *c, const cvx_loop_params *p, int i2v, cvx_latent_shape *out);

/* The embeddings must be [1, max_text_seq_length, text_embed_dim] F32-convertible floats, both
 * the same shape. `file` names the file in messages. */
int cogvideox_check_embeddings(const cogvideox_config *c, const cvx_tensor *prompt, const cvx_tensor *negative,
                               const char *file);

/* [1, F, C, h, w] (padding first) -> [1, C, F − pad, h, w], the stage-2 file layout. */
void cogvideox_latents_to_output(const float *latents, const cvx_latent_shape *shape, float *out);

/* The GGUF rules for CogVideoX (stage2/quantize.h): arch "cogvideox", diffusers names, patch_embed.,
 * time_embedding., norm_out., proj_out. never quantized. */
extern const struct cvx_gguf_rules cogvideox_gguf_rules;

/* The published TeaCache coefficients for a transformer config (2b: sin-cos; 5b and 5b-I2V: rotary
 * without patch_size_t; 1.5 / 1.5-I2V: patch_size_t with in = out / in = 2·out or ofs). Returns the
 * set's name ("CogVideoX-2b", ...). */
const char *cogvideox_teacache_coefficients(const cogvideox_config *c, double out[5]);

/* The latent → RGB preview table (kijai/ComfyUI-CogVideoXWrapper's) with the gain for a VAE's
 * scaling factor. */
extern const cvx_latent_rgb cogvideox_latent_rgb_5b;
void cogvideox_latent_rgb(double scaling_factor, cvx_latent_rgb *out);

/* CogVideoXImageToVideoPipeline.prepare_latents: image_latents [F, C, h, w] (allocated) = k ·
 * latent_dist.sample (mean, std [C, h, w]: the generator's first draws, in sample_dtype; k the
 * scaling factor or its inverse, a Python float times a float32 tensor) on frame 0, zeros after;
 * *init [F, C, h, w] (allocated) the noise drawn next. n = F·C·h·w. -1 + cvx_error, nothing allocated. */
int cogvideox_i2v_latents(const float *mean, const float *std, size_t chw, size_t n, float k, cvx_generator *g,
                          cvx_dtype sample_dtype, float **image_latents, float **init);

#endif
