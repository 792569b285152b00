/* HunyuanVideo-1.5 in stage 2: the transformer behind the denoiser interface (stage2/denoiser.h)
 * and the latent shape rules of HunyuanVideo15Pipeline (diffusers v0.36.0). */
#ifndef CVX_STAGE2_HUNYUAN15_FAMILY_H
#define CVX_STAGE2_HUNYUAN15_FAMILY_H

#include "stage2/denoiser.h"
#include "stage2/hunyuan15.h"
#include "stage2/sampler.h"

/* The image tokens of the text stream: SigLIP so400m-patch14-384's (384/14)² (I2V's image_embeds;
 * T2V's zero image_embeds have the same length). */
#define HV15_IMAGE_TOKENS 729

/* One CFG branch's conditioning (in.cond points to one): the staged pipeline's four tensors of the
 * branch (masks as 0/1 floats), the image embeddings (NULL: text-to-video) and the extra input
 * channels cat[cond_latents, mask] [latent + 1, F, H, W] (NULL: zeros, text-to-video). */
typedef struct {
    const float *text, *text_mask;     /* [L, text_embed_dim], [L] */
    int L;
    const float *text2, *text2_mask;   /* [L2, text_embed_2_dim], [L2] */
    int L2;
    const float *image;                /* [L_img, image_embed_dim] or NULL */
    int L_img;
    const float *channels;             /* [latent + 1, F, H, W] or NULL */
} hv15_branch;

/* The denoiser over a loaded transformer (borrowed); in.x is the latents [C, F, H, W]. Free with
 * cvx_denoiser_free. */
void hv15_denoiser_init(cvx_denoiser *d, hv15_transformer *m);

/* prepare_cond_latents_and_mask of HunyuanVideo15ImageToVideoPipeline: cat[cond_latents, mask]
 * [C + 1, F, h, w] (allocated): the image latents' mode [C, h, w] × scaling_factor on latent frame
 * 0, zeros after; the mask 1 on frame 0. */
float *hv15_i2v_channels(const float *mean, int C, int F, int h, int w, float scaling_factor);

/* The latent shape [1, C, (frames − 1)/4 + 1, height/16, width/16] after checking frames = 4k+1 and
 * height / width multiples of vae_scale·patch. -1 + a clear cvx_error naming the flag. */
int hv15_latent_shape_for(const hv15_config *c, const cvx_loop_params *p, int latent_channels, cvx_latent_shape *out);

#endif
