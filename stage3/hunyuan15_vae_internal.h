/* The parts of hv15_vae shared by stage3/hunyuan15_vae.c (config, weights, blocks) and
 * stage3/hunyuan15_vae_run.c (streaming decode / encode, tiling). Not an API. */
#ifndef CVX_STAGE3_HUNYUAN15_VAE_INTERNAL_H
#define CVX_STAGE3_HUNYUAN15_VAE_INTERNAL_H

#include "hunyuan15_vae.h"
#include "vae_conv.h"
#include "wan_vae.h"   /* wan_rms_norm / wan_resblock: the same RMS norm and residual block */

typedef struct {               /* HunyuanVideo15AttnBlock: one head over all tokens, frame-causal */
    wan_rms_norm_w norm;
    vae_conv q, k, v, o;       /* to_q, to_k, to_v, proj_out: 1×1×1 */
    int dim;
} hv15_vae_attn;

typedef struct {               /* HunyuanVideo15MidBlock (num_layers 1, attention on) */
    wan_resblock_w res[2];
    hv15_vae_attn attn;
} hv15_vae_mid;

typedef struct {               /* HunyuanVideo15Upsample / Downsample */
    vae_conv conv;             /* causal 3×3×3: cin → cout·factor (up) or cout / factor (down) */
    int cin, cout, temporal;
} hv15_vae_resample;

typedef struct {               /* an up block (decoder) or a down block (encoder) */
    wan_resblock_w *res;
    int nres, has_resample;
    hv15_vae_resample rs;
} hv15_vae_level;

struct hv15_vae {
    hv15_vae_config c;
    void *weights;             /* cvx_weights * */
    cvx_ctx *ctx;
    int owns_ctx;
    int parts;                 /* vae_parts loaded */
    vae_conv dec_in, dec_out;
    hv15_vae_mid dec_mid;
    hv15_vae_level up[HV15_VAE_MAX_LEVELS];
    wan_rms_norm_w dec_norm;
    int dec_caches;
    vae_conv enc_in, enc_out;
    hv15_vae_level down[HV15_VAE_MAX_LEVELS];
    hv15_vae_mid enc_mid;
    wan_rms_norm_w enc_norm;
    int enc_caches;
};

/* One pass's state: the causal convs' carried frames and the attention's keys / values so far
 * (token-major [rows, C]). */
typedef struct {
    vae_cache cache;
    float *k, *v;
    size_t rows, cap;
} hv15_vae_run;

void hv15_vae_run_init(hv15_vae_run *r, int caches);
void hv15_vae_run_free(hv15_vae_run *r);

/* The decoder on latent frames z[lc, n, h, w] of one chunk (first: it holds the video's first
 * frame, n = 1) -> [3, *T_out, h·r, w·r], a feature map of v->ctx's pool (vae_fmap_put it back). */
float *hv15_decoder_chunk(const hv15_vae *v, hv15_vae_run *run, const float *z, int n, int h, int w, int first,
                          int *T_out);
/* The encoder on video frames x[3, n, H, W] of one chunk -> moments [2·lc, *T_out, H/r, W/r], a
 * feature map of v->ctx's pool (vae_fmap_put it back). */
float *hv15_encoder_chunk(const hv15_vae *v, hv15_vae_run *run, const float *x, int n, int H, int W, int first,
                          int *T_out);

#endif
