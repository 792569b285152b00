/* The Wan 2.1 family (WanPipeline, WanImageToVideoPipeline, WanVideoToVideoPipeline; diffusers
 * 0.33.1): prompt cleaning + UMT5-XXL (512 tokens, trimmed and zero-padded), the CLIP ViT-H image
 * encoder (I2V), WanTransformer3DModel, AutoencoderKLWan — its row of the family table
 * (pipeline/family.h). Weights come from the diffusers layout or from single files
 * (cvx_model_params.transformer_file / text_encoder_file / vae_file, ComfyUI's names too). */
#include "pipeline/internal.h"
#include "pipeline/conditioning.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "fileio.h"
#include "image.h"
#include "resize.h"
#include "rng_lowp.h"
#include "validate.h"
#include "stage1/clip_image_processor.h"
#include "stage1/clip_vision.h"
#include "stage1/prompt_clean.h"
#include "stage1/t5.h"
#include "stage1/t5_tokenizer.h"
#include "stage2/cache.h"
#include "stage2/wan.h"
#include "stage2/wan_family.h"
#include "stage3/latent_dist.h"
#include "stage3/wan_vae.h"

#define MAX_BATCH 4                  /* sequences per encoder pass */
#define DEFAULT_TEXT_LEN 512         /* WanPipeline's max_sequence_length */
#define DEFAULT_GUIDANCE 5.0         /* WanPipeline.__call__'s guidance_scale */
#define DEFAULT_STRENGTH 0.8         /* WanVideoToVideoPipeline.__call__'s strength */
#define I2V_IMAGE_TOKENS 257         /* diffusers 0.33.1 splits the first 257 encoder rows off as the image's */
#define MASK_CHANNELS 4
#define WAN_AUTO_TILING_BUDGET (12.0 * 1024 * 1024 * 1024)   /* --tiling auto: the untiled peak above this tiles */              /* I2V: the temporal VAE factor's frames of the first-frame mask */

typedef struct {
    wan_config tcfg;                 /* transformer/config.json (when m->has_denoiser_config) */
    wan_vae_config vcfg;             /* vae/config.json, or AutoencoderKLWan's defaults */
    int t5_loaded;
    t5_tokenizer tok;
    t5_model t5;
    wan_transformer *transformer;    /* the resident one (A14B: expert `resident`, the other unmapped) */
    wan_vae *vae;
    /* Wan 2.2 (model_index.json): TI2V's expand_timesteps (per-token timesteps, the image as latent
     * frame 0), A14B's boundary_ratio (0: one transformer) and transformer_2/config.json */
    int expand_timesteps;
    double boundary_ratio;
    int num_train_timesteps;         /* scheduler_config.json (1000): boundary_ratio's scale */
    wan_config tcfg2;
    int resident;                    /* the expert in `transformer` (0 `transformer`, 1 `transformer_2`) */
    float *ti2v_cond;                /* TI2V I2V: the image's normalised latents [C, 1, h, w] of the last run */
    clip_vision *clip;
    clip_image_processor proc;
} wan_state;

static wan_state *S(const cvx_model *m) { return m->fam; }

/* "<dir>/<component>/<file>" */
/* ---- open / close ---- */
/* The defaults of WanPipeline and the model cards: 81 frames of 480×832 at 16 fps, guidance 5. */
static void fill_info(cvx_model *m) {
    cvx_model_info *i = &m->info;
    const wan_vae_config *v = &S(m)->vcfg;
    int temporal = 1;
    for (int k = 0; k < v->n_temporal; k++) temporal *= v->temperal_downsample[k] ? 2 : 1;
    i->vae_scale_spatial = v->patch_size << (v->n_mult - 1);   /* Wan 2.2 VAE: patch 2 × 8 = 16 */
    i->vae_scale_temporal = temporal;
    i->vae_scaling_factor = 1.0;   /* Wan normalises with latents_mean / latents_std instead */
    i->latent_channels = v->z_dim;
    i->frames = 81, i->height = 480, i->width = 832, i->fps = 16;
    i->text_len = DEFAULT_TEXT_LEN;
    i->text_dim = m->has_denoiser_config ? S(m)->tcfg.text_dim : 4096;
    i->guidance_scale = DEFAULT_GUIDANCE;
    if (v->z_dim == 48)   /* Wan 2.2 TI2V-5B (docs/models.md): 121 frames of 704×1280 at 24 fps, guidance 5 */
        i->frames = 121, i->height = 704, i->width = 1280, i->fps = 24;
    if (S(m)->boundary_ratio > 0)   /* A14B (Wan2.2 configs): T2V guidance (4, 3), I2V (3.5, 3.5) */
        i->guidance_scale = m->has_denoiser_config && S(m)->tcfg.in_channels != S(m)->tcfg.out_channels ? 3.5 : 4.0;
}

/* A14B's low-noise guidance when the request gives none (T2V 3.0, I2V 3.5: the Wan 2.2 configs). */
static double default_guidance_2(cvx_model *m) {
    return S(m)->tcfg.in_channels != S(m)->tcfg.out_channels ? 3.5 : 3.0;
}

/* model_index.json's Wan 2.2 keys: expand_timesteps (TI2V-5B), boundary_ratio (A14B: in (0, 1),
 * with transformer_2/config.json beside transformer/). */
static int read_pipeline_config(cvx_model *m) {
    wan_state *s = S(m);
    char path[4300];
    snprintf(path, sizeof path, "%s/model_index.json", m->dir);
    if (!cvx_is_file(path)) return 0;
    cvx_config c;
    if (cvx_config_load(&c, path)) return -1;
    /* null (Wan 2.1, TI2V) reads as absent */
    int rc = 0, has_boundary = cvx_cfg_has(&c, "boundary_ratio") && !cvx_cfg_num(&c, "boundary_ratio", &s->boundary_ratio);
    cvx_clear_error();
    if (cvx_cfg_bool_or(&c, "expand_timesteps", 0, &s->expand_timesteps)) s->expand_timesteps = 0;
    cvx_clear_error();
    if (has_boundary) {
        rc = wan_boundary_check(s->boundary_ratio, path);
        char cfg2[4300];
        cvx_component_path(m, "transformer_2", "config.json", cfg2, sizeof cfg2);
        if (!rc && !cvx_is_file(cfg2))
            rc = cvx_error("%s: boundary_ratio %g needs two experts, but %s is missing (Wan 2.2 A14B: transformer "
                           "= high noise, transformer_2 = low noise)", path, s->boundary_ratio, cfg2);
        if (!rc) rc = wan_config_load(cfg2, &s->tcfg2);
        int64_t ntt = 1000;
        cvx_config sc;
        snprintf(path, sizeof path, "%s/scheduler/scheduler_config.json", m->dir);
        if (!rc && cvx_is_file(path) && !cvx_config_load(&sc, path)) {
            rc = cvx_cfg_int_or(&sc, "num_train_timesteps", 1000, &ntt);
            cvx_config_free(&sc);
        }
        s->num_train_timesteps = (int)ntt;
    }
    cvx_config_free(&c);
    return rc;
}

static int wan_open(cvx_model *m) {
    char path[4300];
    m->fam = cvx_calloc(1, sizeof(wan_state));
    cvx_component_path(m, "transformer", "config.json", path, sizeof path);
    if ((m->has_denoiser_config = cvx_is_file(path)) && wan_config_load(path, &S(m)->tcfg)) return -1;
    cvx_component_path(m, "vae", "config.json", path, sizeof path);
    m->has_vae_config = cvx_is_file(path);
    if (wan_vae_config_load(&S(m)->vcfg, m->has_vae_config ? path : NULL) || read_pipeline_config(m)) return -1;
    if (!m->has_vae_config && m->vae_file[0]) m->has_vae_config = 1;   /* a single VAE file: the defaults */
    fill_info(m);
    return 0;
}

static void wan_close(cvx_model *m) {
    wan_state *s = S(m);
    if (!s) return;
    if (s->t5_loaded) {
        t5_free(&s->t5);
        t5_tokenizer_free(&s->tok);
    }
    wan_free(s->transformer);
    free(s->ti2v_cond);
    wan_vae_free(s->vae);
    clip_vision_free(s->clip);
    free(s);
    m->fam = NULL;
}

static int load_text_encoder(cvx_model *m) {
    wan_state *s = S(m);
    if (s->t5_loaded) return 0;
    char tok_dir[4200], te_dir[4200], cfg[4300];
    if (cvx_model_component(m->dir, "tokenizer", "spiece.model", tok_dir, sizeof tok_dir)) return -1;
    if (t5_tokenizer_load(&s->tok, tok_dir)) return -1;
    int rc;
    if (m->text_encoder_file[0]) {
        cvx_component_path(m, "text_encoder", "config.json", cfg, sizeof cfg);
        rc = t5_build_file(&s->t5, m->text_encoder_file, cfg, m->ctx);
    } else {
        rc = cvx_model_component(m->dir, "text_encoder", "config.json", te_dir, sizeof te_dir) ||
             t5_build(&s->t5, te_dir, m->ctx);
    }
    if (rc) {
        t5_tokenizer_free(&s->tok);
        return -1;
    }
    s->t5_loaded = 1;
    const t5_config *c = &s->t5.cfg;
    cvx_info("UMT5 encoder: %d layers, d_model %d, %d heads x %d, d_ff %d", c->num_layers, c->d_model, c->num_heads,
             c->d_kv, c->d_ff);
    return 0;
}

/* Wan-14B in bf16 is 28 GB: mmapped on a machine with less memory it would page from disk for
 * hours (cvx_weights_fit_memory refuses it with this way out) */
#define WAN_SMALLER_WEIGHTS                                                                                  \
    "a quantized file (--transformer wan2.1-t2v-14b-Q4_K_M.gguf, about 9 GB; Q8_0 about 15 GB), the 1.3B " \
    "model"

/* Unmap the resident transformer (its LoRA set first: it points into the weights). */
static void unload_transformer(cvx_model *m) {
    wan_state *s = S(m);
    if (!s->transformer) return;
    if (m->ctx) m->ctx->lora = NULL;
    cvx_lora_free(m->lora);
    m->lora = NULL;
    wan_free(s->transformer);
    s->transformer = NULL;
}

static int load_expert(cvx_model *m, int expert) {
    wan_state *s = S(m);
    if (s->transformer && s->resident == expert) return 0;
    unload_transformer(m);   /* one expert resident at a time: the other is unmapped first */
    s->resident = expert;
    m->lora_expert = s->boundary_ratio > 0 ? expert + 1 : 0;   /* --lora_high / --lora_low */
    char dir[4200], cfg[4300];
    if (s->boundary_ratio > 0) {   /* A14B: each expert from its directory or its --transformer[_2] file */
        if (cvx_expert_paths(m, expert, cfg, sizeof cfg, dir, sizeof dir) ||
            cvx_weights_fit_memory(dir, WAN_SMALLER_WEIGHTS))
            return -1;
        s->transformer = wan_load_file(cfg, dir, m->ctx);
    } else if (m->transformer_file[0]) {
        cvx_component_path(m, "transformer", "config.json", cfg, sizeof cfg);
        if (!cvx_is_file(cfg))
            return cvx_error("--transformer %s: the model directory %s has no transformer/config.json to go with it",
                             m->transformer_file, m->dir);
        if (cvx_weights_fit_memory(m->transformer_file, WAN_SMALLER_WEIGHTS)) return -1;
        s->transformer = wan_load_file(cfg, m->transformer_file, m->ctx);
    } else {
        if (cvx_model_component(m->dir, "transformer", "config.json", dir, sizeof dir)) return -1;
        if (cvx_weights_fit_memory(dir, WAN_SMALLER_WEIGHTS)) return -1;
        s->transformer = wan_load(dir, m->ctx);
    }
    return s->transformer ? 0 : -1;
}

static int load_transformer(cvx_model *m) { return load_expert(m, S(m)->transformer ? S(m)->resident : 0); }

static int load_vae(cvx_model *m) {
    wan_state *s = S(m);
    if (s->vae) return 0;
    char dir[4200], cfg[4300];
    if (m->vae_file[0]) {
        cvx_component_path(m, "vae", "config.json", cfg, sizeof cfg);
        s->vae = wan_vae_load_file(cvx_is_file(cfg) ? cfg : NULL, m->vae_file, m->ctx);
    } else {
        if (cvx_model_component(m->dir, "vae", "config.json", dir, sizeof dir)) return -1;
        s->vae = wan_vae_load(dir, m->ctx);
    }
    return s->vae ? 0 : -1;
}

static int load_image_encoder(cvx_model *m) {
    wan_state *s = S(m);
    if (s->clip) return 0;
    char dir[4200], proc[4200];
    if (cvx_model_component(m->dir, "image_encoder", "config.json", dir, sizeof dir) ||
        cvx_model_component(m->dir, "image_processor", "preprocessor_config.json", proc, sizeof proc) ||
        clip_image_processor_load(&s->proc, proc))
        return -1;
    s->clip = clip_vision_load(dir, m->ctx);
    return s->clip ? 0 : -1;
}

/* ---- stage 1: text ---- */
static int text_dim(cvx_model *m) { return load_text_encoder(m) ? -1 : S(m)->t5.cfg.d_model; }

/* WanPipeline._get_t5_prompt_embeds: prompt_clean, tokenizer (max_length L, the attention mask),
 * UMT5 with the mask, rows past the prompt's length zeros. */
static int encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                        cvx_progress_fn progress, void *user, float *out) {
    if (load_text_encoder(m)) return -1;
    wan_state *s = S(m);
    const int D = s->t5.cfg.d_model, n_batches = (n + MAX_BATCH - 1) / MAX_BATCH;
    int64_t *ids = cvx_malloc((size_t)MAX_BATCH * L * sizeof *ids), *mask = cvx_malloc((size_t)L * sizeof *mask);
    int64_t seq_lens[MAX_BATCH];
    cvx_progress bar;
    cvx_progress_begin(&bar, "UMT5 layers", n_batches * s->t5.cfg.num_layers, progress, user);
    int rc = -1;
    for (int s0 = 0; s0 < n; s0 += MAX_BATCH) {
        const int nb = n - s0 < MAX_BATCH ? n - s0 : MAX_BATCH;
        for (int b = 0; b < nb; b++) {
            const char *label = labels ? labels[s0 + b] : "a text";
            char *clean;
            int n_raw, at_least;
            if (wan_prompt_clean(texts[s0 + b], &clean)) goto done;
            int trc = t5_tokenize_counted(&s->tok, clean, L, ids + (size_t)b * L, mask, &n_raw, &at_least);
            free(clean);
            if (trc) goto done;
            if (n_raw > L) t5_report_length(label, n_raw, at_least, L);
            seq_lens[b] = 0;
            for (int k = 0; k < L; k++) seq_lens[b] += mask[k];
            cvx_debug("%s: %lld tokens", label, (long long)seq_lens[b]);
        }
        if (umt5_prompt_embeds(&s->t5, ids, seq_lens, nb, L, out + (size_t)s0 * L * D, &bar)) goto done;
        for (int b = 0; b < nb; b++)
            if (cvx_check_finite(out + (size_t)(s0 + b) * L * D, (size_t)L * D, "embeddings")) {
                cvx_error_prefix("%s", labels ? labels[s0 + b] : "a text");
                goto done;
            }
    }
    cvx_progress_finish(&bar);
    rc = 0;
done:
    free(ids);
    free(mask);
    return rc;
}

/* ---- stage 1: image / video conditioning ---- */
/* T2V and V2V need a text-to-video transformer (in = out channels), I2V one with image_dim and
 * in = out + 4 + z channels. */
static int check_mode(cvx_model *m, cvx_mode mode) {
    if (!m->has_denoiser_config) return 0;   /* reported by the call that needs the transformer */
    const wan_config *c = &S(m)->tcfg;
    if (S(m)->expand_timesteps) {   /* Wan 2.2 TI2V: text- and image-to-video from the one checkpoint */
        if (mode == CVX_MODE_V2V)
            return cvx_error("%s: video-to-video is not supported for a Wan 2.2 TI2V model (expand_timesteps): give "
                             "stage 1 an --image or nothing", m->dir);
        return 0;
    }
    const int i2v_model = c->image_dim > 0 || c->in_channels != c->out_channels;
    if (mode == CVX_MODE_I2V && !i2v_model)
        return cvx_error("--image: %s/transformer is a text-to-video model (in_channels %d = out_channels): "
                         "image-to-video needs an I2V checkpoint (Wan2.1-I2V-14B-480P / -720P)", m->dir,
                         c->in_channels);
    if (mode != CVX_MODE_I2V && i2v_model)
        return cvx_error("%s/transformer is an image-to-video model (in_channels %d, image_dim %d): give stage 1 an "
                         "--image", m->dir, c->in_channels, c->image_dim);
    return 0;
}

/* The size checks stage 2 will make, before anything is encoded. */
static int check_size(cvx_model *m, int frames, int height, int width) {
    if (!m->has_denoiser_config) return 0;
    cvx_sample_params req = {.frames = frames, .height = height, .width = width, .num_inference_steps = 1};
    cvx_loop_params lp = {.req = &req, .vae_scale_spatial = m->info.vae_scale_spatial,
                          .vae_scale_temporal = m->info.vae_scale_temporal};
    cvx_latent_shape sh;
    return wan_latent_shape_for(&S(m)->tcfg, &lp, S(m)->vcfg.z_dim, &sh);
}

/* The CLIP image embeddings of the original image (WanImageToVideoPipeline.encode_image). */
static int encode_image_clip(cvx_model *m, const cvx_rgb_frames *rgb, cvx_conditioning *out) {
    if (load_image_encoder(m)) return -1;
    wan_state *s = S(m);
    int ow, oh;
    clip_image_output_size(&s->proc, rgb->width, rgb->height, &ow, &oh);
    float *px = cvx_alloc_f32((size_t)3 * ow * oh);
    clip_image_preprocess(&s->proc, rgb->rgb, rgb->width, rgb->height, px);
    out->image_L = s->clip->cfg.tokens, out->image_D = s->clip->cfg.hidden_size;
    out->image_embeds = cvx_alloc_f32((size_t)out->image_L * out->image_D);
    int rc = clip_vision_encode(s->clip, px, out->image_embeds);
    free(px);
    return rc;
}

static int encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                               cvx_conditioning *out) {
    if (!p->image == !p->video) return cvx_error("give exactly one of an image (I2V) and a video (V2V)");
    const cvx_mode mode = p->image ? CVX_MODE_I2V : CVX_MODE_V2V;
    const int H = p->height ? p->height : m->info.height, W = p->width ? p->width : m->info.width;
    if (check_mode(m, mode)) return -1;
    /* I2V: the video length decides the encoded condition (the image, then zero frames) */
    const int i2v_frames = p->max_frames ? p->max_frames : m->info.frames;
    if (mode == CVX_MODE_I2V && check_size(m, i2v_frames, H, W)) return -1;

    cvx_rgb_frames rgb;
    if (mode == CVX_MODE_I2V ? cvx_image_load(p->image, &rgb) : cvx_video_load(p->video, p->max_frames, &rgb))
        return -1;
    const char *src = p->image ? p->image : p->video;
    int rc = -1;
    float *px = NULL, *logvar = NULL;
    if (rgb.frames < 1) {
        cvx_error("%s: no frames", src);
        goto done;
    }
    const int T = mode == CVX_MODE_I2V ? (S(m)->expand_timesteps ? 1 : i2v_frames) : rgb.frames;
    if (mode == CVX_MODE_V2V && check_size(m, T, H, W)) {
        cvx_error_prefix("%s (%d frames)", src, T);
        goto done;
    }
    /* Wan 2.2 I2V-A14B and TI2V have no image encoder; TI2V encodes the image alone (one frame) */
    if (mode == CVX_MODE_I2V && S(m)->tcfg.image_dim > 0 && encode_image_clip(m, &rgb, out)) goto done;
    const int ti2v = mode == CVX_MODE_I2V && S(m)->expand_timesteps;
    if (rgb.width != W || rgb.height != H)
        cvx_info("%s: %dx%d resized to %dx%d (LANCZOS, as upstream)", src, rgb.width, rgb.height, W, H);
    /* [3, T, H, W] in [-1, 1]: V2V the frames; I2V the image then T − 1 zero frames */
    px = cvx_calloc((size_t)3 * T * H * W, sizeof(float));
    if (mode == CVX_MODE_V2V) {
        cvx_preprocess_frames(rgb.rgb, T, rgb.width, rgb.height, W, H, px);
    } else {
        float *img = cvx_alloc_f32((size_t)3 * H * W);
        cvx_preprocess_image(rgb.rgb, rgb.width, rgb.height, W, H, img);
        for (int c = 0; c < 3; c++) memcpy(px + (size_t)c * T * H * W, img + (size_t)c * H * W, sizeof(float) * H * W);
        free(img);
    }
    if (load_vae(m)) goto done;
    const wan_vae *v = S(m)->vae;
    int F, h, w;
    if (wan_vae_encoded_shape(v, T, H, W, &F, &h, &w)) goto done;
    cvx_info("encoding %s: %d frame%s %dx%d with the Wan VAE%s", src, T, T == 1 ? "" : "s", W, H,
             ti2v ? " (the image as latent frame 0)" : mode == CVX_MODE_I2V ? " (the image, then zero frames)" : "");
    const size_t n = (size_t)v->cfg.z_dim * F * h * w;
    out->mean = cvx_alloc_f32(n);
    out->std = cvx_alloc_f32(n);
    logvar = cvx_alloc_f32(n);
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae encode", 1 + (T - 1 + WAN_VAE_ENCODE_CHUNK - 1) / WAN_VAE_ENCODE_CHUNK, progress,
                       user);
    if (wan_vae_encode(v, px, T, H, W, out->mean, logvar, &bar)) goto done;
    cvx_progress_finish(&bar);
    for (size_t i = 0; i < n; i++) out->std[i] = expf(0.5f * logvar[i]);   /* torch.exp(0.5 * logvar) */
    out->mode = mode;
    out->C = v->cfg.z_dim, out->T = F, out->h = h, out->w = w;
    out->frames = ti2v ? i2v_frames : T, out->height = H, out->width = W;
    rc = 0;
done:
    if (rc) cvx_conditioning_free(out);
    free(px);
    free(logvar);
    cvx_rgb_frames_free(&rgb);
    return rc;
}

/* ---- stage 2 ---- */
/* WanPipeline's conditioning: the UMT5 embeddings, max_sequence_length (512) rows zero-padded past
 * the prompt, text_dim wide */
static const cvx_cond_slot cond_slots[] = {
    {"prompt_embeds", 0, "WanPipeline's text length %d", "text_dim %d of the Wan transformer"}, {0}};

static int cond_dims(cvx_model *m, int slot, int *L, int *D) {
    (void)slot;
    *L = m->info.text_len, *D = S(m)->tcfg.text_dim;
    return 0;
}

static const char *const options[] = {"--teacache_ret_steps", "--guidance_scale_2", NULL};

static int check_sample(cvx_model *m, const cvx_sample_params *r) {
    if (m->transformer_2_file[0] && !(S(m)->boundary_ratio > 0))
        return cvx_error("--transformer_2 %s: %s has one transformer (transformer_2 is Wan 2.2 A14B's low-noise "
                         "expert)", m->transformer_2_file, m->dir);
    if (r->guidance_scale_2 > 0 && !(S(m)->boundary_ratio > 0))
        return cvx_error("--guidance_scale_2 %g: %s has one transformer (guidance_scale_2 is Wan 2.2 A14B's low-noise "
                         "expert's)", r->guidance_scale_2, m->dir);
    int sp = r->sp_dist ? cvx_dist_size(r->sp_dist) : 1;
    return wan_sp_check(&S(m)->tcfg, sp);
}

/* A stack copy of the VAE with its config only: the (un)normalisation needs nothing else. */
static wan_vae vae_cfg_only(cvx_model *m) {
    wan_vae v;
    memset(&v, 0, sizeof v);
    v.cfg = S(m)->vcfg;
    return v;
}

/* WanVideoToVideoPipeline.prepare_latents: the encoder sample (the generator's first draws),
 * normalised; the noise; add_noise at the first kept step. */
static int prepare_v2v(cvx_model *m, const cvx_conditioning *c, cvx_scheduler *sched, cvx_sample_run *run) {
    cvx_loop_params *lp = &run->loop;
    const cvx_latent_shape *sh = &run->shape;
    if (c->C != sh->channels || c->T != sh->frames || c->h != sh->height || c->w != sh->width)
        return cvx_error("video-to-video conditioning latents [%d, %d, %d, %d] do not fit the loop's [%d, %d, %d, %d]",
                         c->C, c->T, c->h, c->w, sh->channels, sh->frames, sh->height, sh->width);
    const cvx_dtype nd = (cvx_dtype)lp->noise_dtype;
    float *sample = cvx_alloc_f32(sh->numel), *noise = cvx_alloc_f32(sh->numel);
    cvx_generator_seed(&run->gen, lp->req->seed);
    int rc = vae_latent_sample_as(c->mean, c->std, sh->numel, &run->gen, nd, sample);
    if (!rc) {
        wan_vae v = vae_cfg_only(m);
        wan_vae_normalize(&v, sample, sh->frames, sh->height, sh->width, sample);
        rc = cvx_randn_as(&run->gen, nd, noise, sh->numel);
    }
    if (!rc) {
        run->init = cvx_alloc_f32(sh->numel);
        sched->type->add_noise(sched, lp->t_start, sample, noise, sh->numel, run->init);
        cvx_info("video-to-video: runs %d of %d steps from t=%g", lp->req->num_inference_steps - lp->t_start,
                 lp->req->num_inference_steps, sched->timesteps[lp->t_start]);
        lp->init_latents = run->init, lp->init_generator = &run->gen;
    }
    free(sample);
    free(noise);
    return rc;
}

/* WanImageToVideoPipeline.prepare_latents: condition = [mask (4 channels: 1 on latent frame 0),
 * the encoded image-then-zeros video (its mode, normalised)]; the noise comes from the seed in the
 * loop; the image embeddings go to both CFG branches. */
static int prepare_i2v(cvx_model *m, const cvx_conditioning *c, cvx_sample_run *run) {
    const cvx_latent_shape *sh = &run->shape;
    if (c->C != sh->channels || c->T != sh->frames || c->h != sh->height || c->w != sh->width)
        return cvx_error("image-to-video conditioning latents [%d, %d, %d, %d] do not fit the loop's [%d, %d, %d, %d] "
                         "(stage 1 encodes the image for a video of --frames frames: give stage 1 the same --frames)",
                         c->C, c->T, c->h, c->w, sh->channels, sh->frames, sh->height, sh->width);
    if (S(m)->tcfg.image_dim > 0 &&   /* Wan 2.2 I2V-A14B: no image encoder */
        (!c->image_embeds || c->image_L != I2V_IMAGE_TOKENS || c->image_D != S(m)->tcfg.image_dim))
        return cvx_error("image-to-video conditioning: image_embeds [%d, %d], the transformer expects [%d, %d]",
                         c->image_L, c->image_D, I2V_IMAGE_TOKENS, S(m)->tcfg.image_dim);
    const size_t fhw = (size_t)sh->frames * sh->height * sh->width, hw = (size_t)sh->height * sh->width;
    run->cond = cvx_calloc((MASK_CHANNELS + (size_t)sh->channels) * fhw, sizeof(float));   // [4 + z, F, h, w]
    for (int k = 0; k < MASK_CHANNELS; k++)
        for (size_t i = 0; i < hw; i++) run->cond[k * fhw + i] = 1.0f;   /* latent frame 0 */
    wan_vae v = vae_cfg_only(m);
    wan_vae_normalize(&v, c->mean, sh->frames, sh->height, sh->width, run->cond + MASK_CHANNELS * fhw);
    if (c->image_embeds) {
        run->image_tokens = cvx_alloc_f32((size_t)c->image_L * c->image_D);
        memcpy(run->image_tokens, c->image_embeds, sizeof(float) * c->image_L * c->image_D);
    }
    run->loop.cond = run->cond;
    run->loop.image_tokens = run->image_tokens, run->loop.image_L = c->image_L;
    return 0;
}

/* Wan 2.2 TI2V (WanPipeline / WanImageToVideoPipeline with expand_timesteps, diffusers 0.35.2):
 * per-token timesteps, t_scale 1 on every token (T2V) or first_frame_mask (I2V: 0 on latent
 * frame 0's tokens); I2V: condition = the image's latents (mode, normalised), latent frame 0 of
 * the transformer's input every step (the denoiser) and of the final latents (latents_out). */
typedef struct {
    float *t_scale;   /* [S] */
} ti2v_run;

static void ti2v_run_free(void *p) {
    ti2v_run *r = p;
    if (r) free(r->t_scale);
    free(r);
}

static int prepare_ti2v(cvx_model *m, const cvx_conditioning *c, cvx_sample_run *run) {
    const cvx_latent_shape *sh = &run->shape;
    wan_state *s = S(m);
    const int S_tok = wan_num_tokens(&s->tcfg, sh->frames, sh->height, sh->width);
    ti2v_run *tr = cvx_calloc(1, sizeof *tr);
    run->fam_run = tr, run->fam_run_free = ti2v_run_free;
    tr->t_scale = cvx_alloc_f32((size_t)S_tok);
    free(s->ti2v_cond);
    s->ti2v_cond = NULL;
    if (!c) {
        for (int k = 0; k < S_tok; k++) tr->t_scale[k] = 1.0f;
    } else {
        if (c->C != sh->channels || c->T != 1 || c->h != sh->height || c->w != sh->width)
            return cvx_error("Wan 2.2 TI2V image-to-video: conditioning latents [%d, %d, %d, %d], expected the image's "
                             "[%d, 1, %d, %d] (stage 1 of this model encodes the image alone at the video's size)",
                             c->C, c->T, c->h, c->w, sh->channels, sh->height, sh->width);
        wan_ti2v_timesteps(1, sh->frames, sh->height, sh->width, tr->t_scale);   /* the mask: 0 on frame 0 */
        s->ti2v_cond = cvx_alloc_f32((size_t)c->C * c->h * c->w);
        wan_vae v = vae_cfg_only(m);
        wan_vae_normalize(&v, c->mean, 1, sh->height, sh->width, s->ti2v_cond);   /* latent_dist.mode() */
        wan_denoiser_set_ti2v_condition(&run->den, s->ti2v_cond);
    }
    for (int i = 0; i < run->plan.n_steps; i++) run->plan.steps[i].t_scale = tr->t_scale;
    run->plan.n_t = (size_t)S_tok;
    return 0;
}

/* Wan 2.2 A14B: `transformer` (expert 0, high noise) and `transformer_2` (expert 1) behind one
 * provider, one mapped at a time (acquire unmaps the other and re-attaches the LoRA set). */
typedef struct {
    cvx_model *m;
    int cond_channels;
    cvx_denoiser den;
} a14b_run;

static int a14b_acquire(cvx_expert_provider *p, int i, cvx_denoiser **out) {
    a14b_run *r = p->user;
    cvx_info("Wan 2.2 A14B: %s expert (%s)", i ? "low-noise" : "high-noise", i ? "transformer_2" : "transformer");
    const int changed = !S(r->m)->transformer || S(r->m)->resident != i;
    if (load_expert(r->m, i) || (changed && cvx_model_reattach_loras(r->m))) return -1;
    cvx_denoiser_free(&r->den);
    wan_denoiser_init(&r->den, S(r->m)->transformer, r->cond_channels, 0);
    *out = &r->den;
    return 0;
}

static void a14b_release(cvx_expert_provider *p, int i) {
    (void)i;
    unload_transformer(((a14b_run *)p->user)->m);   /* munmap: the next expert maps into the freed memory */
}

static void a14b_run_free(void *p) {
    a14b_run *r = p;
    if (r) cvx_denoiser_free(&r->den);
    free(r);
}

/* The plan over the two experts: t >= boundary_ratio · num_train_timesteps the high-noise one with
 * guidance_scale, below the low-noise one with guidance_scale_2 (CFG on iff guidance_scale > 1). */
static void plan_a14b(cvx_model *m, const cvx_sample_params *p, const cvx_scheduler *sched, cvx_sample_run *run,
                      int cond_channels) {
    a14b_run *r = cvx_calloc(1, sizeof *r);
    r->m = m, r->cond_channels = cond_channels;
    run->fam_run = r, run->fam_run_free = a14b_run_free;
    run->experts = (cvx_expert_provider){.n = 2, .acquire = a14b_acquire, .release = a14b_release, .user = r};
    const double g2 = p->guidance_scale_2 > 0 ? p->guidance_scale_2 : default_guidance_2(m);
    const cvx_guider guide2 = {.scale = p->guidance_scale > 1 ? g2 : 1.0};
    /* upstream compares the int64 timestep with the Python float in float32 */
    const double boundary_t = (float)(S(m)->boundary_ratio * S(m)->num_train_timesteps);
    cvx_plan_switch_below(&run->plan, sched->timesteps + run->loop.t_start, boundary_t, 1, &guide2);
    cvx_info("Wan 2.2 A14B: boundary t %g; guidance %g (high noise), %g (low noise)", boundary_t, p->guidance_scale,
             guide2.scale);
}

static int sample_setup(cvx_model *m, const cvx_sample_params *p, const cvx_embeddings *emb, cvx_scheduler *sched,
                        cvx_sample_run *run) {
    const int a14b = S(m)->boundary_ratio > 0;
    if (!a14b && load_transformer(m)) return -1;   /* A14B: the provider maps the experts in the loop */
    if (a14b && p->teacache_ret_steps)
        return cvx_error("--teacache_ret_steps: no TeaCache rule is published for Wan 2.2 A14B");
    if (a14b && run->loop.cache_kind == CVX_CACHE_TEACACHE && !p->teacache_coefficients)
        return cvx_error("--cache teacache: TeaCache publishes no coefficients for Wan 2.2 (A14B's two experts); give "
                         "--teacache_coefficients or use --cache fbcache");
    const wan_config *c = &S(m)->tcfg;
    cvx_loop_params *lp = &run->loop;   /* the request and the pipeline's part filled in */
    if (p->teacache_coefficients) memcpy(lp->teacache_coefficients, p->teacache_coefficients, sizeof(double) * 5);
    else if (!wan_teacache_coefficients(c, p->height, p->width, p->teacache_ret_steps, lp->teacache_coefficients) &&
             lp->cache_kind == CVX_CACHE_TEACACHE)
        return cvx_error("--cache teacache: TeaCache publishes no coefficients for this Wan transformer (%d wide, %d "
                         "latent channels); give --teacache_coefficients",
                         c->num_attention_heads * c->attention_head_dim, c->out_channels);
    cvx_latent_shape *sh = &run->shape;
    if (wan_latent_shape_for(c, lp, S(m)->vcfg.z_dim, sh)) return -1;
    const cvx_mode mode = p->conditioning ? p->conditioning->mode : CVX_MODE_T2V;
    cvx_info("Wan transformer: %d layers, %d heads x %d%s; %s scheduler, %d steps, guidance %g%s, seed %llu",
             c->num_layers, c->num_attention_heads, c->attention_head_dim, c->image_dim ? ", image-to-video" : "",
             sched->type->name, p->num_inference_steps, p->guidance_scale,
             p->guidance_scale > 1 ? "" : " (no CFG: one transformer call per step)", (unsigned long long)p->seed);
    cvx_info("video %d frames %dx%d -> latents [1, %d, %d, %d, %d]", p->frames, p->width, p->height, sh->channels,
             sh->frames, sh->height, sh->width);
    if (mode == CVX_MODE_V2V) {
        if (cvx_strength_t_start(p->num_inference_steps, p->strength, &lp->t_start) ||
            cvx_scheduler_set_timesteps(sched, p->num_inference_steps) || prepare_v2v(m, p->conditioning, sched, run))
            return -1;
    } else if (mode == CVX_MODE_I2V && !S(m)->expand_timesteps && prepare_i2v(m, p->conditioning, run)) {
        return -1;
    }
    const int cond_channels = mode == CVX_MODE_I2V && !S(m)->expand_timesteps ? MASK_CHANNELS + sh->channels : 0;
    if (!a14b) wan_denoiser_init(&run->den, S(m)->transformer, cond_channels, p->teacache_ret_steps);
    run->preview_rgb = wan_latent_rgb;
    if (a14b) run->experts.n = 2;   /* the defaults keep the provider plan_a14b fills */
    cvx_sample_run_defaults(run, emb);
    if (p->teacache_ret_steps) run->plan.teacache_first = 5, run->plan.teacache_last = 0;   /* use_ret_steps */
    if (a14b) plan_a14b(m, p, sched, run, cond_channels);
    if (S(m)->expand_timesteps) return prepare_ti2v(m, mode == CVX_MODE_I2V ? p->conditioning : NULL, run);
    return 0;
}

/* The loop's layout is the file's: [1, C, F, h, w]. */
static void latents_out(cvx_model *m, const cvx_latent_shape *sh, const float *latents, cvx_latents *out) {
    out->C = sh->channels, out->T = sh->frames, out->h = sh->height, out->w = sh->width;
    out->data = cvx_alloc_f32(sh->numel);
    if (S(m)->ti2v_cond)   /* TI2V I2V: after the loop, latent frame 0 is the image's (as upstream) */
        wan_ti2v_apply_condition(latents, S(m)->ti2v_cond, sh->channels, sh->frames, sh->height, sh->width, out->data);
    else
        memcpy(out->data, latents, sh->numel * sizeof(float));
}

/* ---- stage 3 ---- */
typedef struct {
    float *dst;   /* [3, T, H, W] */
    int T;
} frames_sink;

static int take_frames(void *user, const float *frames, int t0, int n, int H, int W) {
    frames_sink *s = user;
    const size_t hw = (size_t)H * W;
    for (int c = 0; c < 3; c++)
        memcpy(s->dst + ((size_t)c * s->T + t0) * hw, frames + (size_t)c * n * hw, sizeof(float) * n * hw);
    return 0;
}

static int decode(cvx_model *m, const cvx_decode_params *p, const float *zin, int B, int C, int T, int h, int w,
                  const char *label, cvx_progress_fn progress, void *user, cvx_frames *out) {
    if (load_vae(m)) return -1;
    const wan_vae *v = S(m)->vae;
    if (C != v->cfg.z_dim)
        return cvx_error("%s: tensor 'latents' has %d channels (dim 1 of [B, C, T, H, W]), the Wan VAE of %s expects "
                         "z_dim = %d", label, C, m->dir, v->cfg.z_dim);
    if (B < 1 || T < 1 || h < 1 || w < 1) return cvx_error("%s: tensor 'latents' has an empty shape", label);
    wan_vae_tiling tl;
    wan_vae_tiling_default(&tl);
    if (p->tile_height) tl.min_h = p->tile_height, tl.stride_h = p->tile_height * 3 / 4;
    if (p->tile_width) tl.min_w = p->tile_width, tl.stride_w = p->tile_width * 3 / 4;
    /* auto: tiles when the untiled decode's estimated peak (flat in the frame count: the causal
     * caches and one frame's activations) is over the budget: 480x832 ~6.9 GB stays untiled as
     * upstream, 720x1280 ~15 GB tiles (~3.3 GB) */
    const double untiled_peak = wan_vae_estimate_peak_bytes(v, T, h, w, NULL);
    int tiled = p->tiling == CVX_TILING_ON ? wan_vae_tiling_applies(v, h, w, &tl)
                : p->tiling == CVX_TILING_AUTO ? untiled_peak > WAN_AUTO_TILING_BUDGET && wan_vae_tiling_applies(v, h, w, &tl)
                                               : 0;
    if (tiled && wan_vae_tiling_check(v, &tl)) return -1;
    if (p->tiling == CVX_TILING_ON && !tiled)
        cvx_info("tiling on: latents %dx%d fit one tile of %dx%d samples: decoding untiled", w, h, tl.min_w, tl.min_h);
    if (tiled)
        cvx_info("decoding latents [%d, %d, %d, %d, %d] with the Wan VAE in tiles of %dx%d samples (~%.1f GB peak)", B,
                 C, T, h, w, tl.min_w, tl.min_h, wan_vae_estimate_peak_bytes(v, T, h, w, &tl) / 1e9);
    else
        cvx_info("decoding latents [%d, %d, %d, %d, %d] with the Wan VAE (untiled, ~%.1f GB estimated peak%s)", B, C, T,
                 h, w, untiled_peak / 1e9, p->tiling == CVX_TILING_OFF ? ", --tiling off" : "");
    const size_t n = (size_t)B * C * T * h * w;
    if (cvx_check_finite(zin, n, "latents")) return cvx_error_prefix("%s", label);
    const int To = wan_vae_decoded_frames(v, T);
    out->B = B, out->T = To, out->H = h * v->spatial_ratio, out->W = w * v->spatial_ratio, out->tiled = tiled;
    out->data = cvx_calloc((size_t)B, sizeof *out->data);
    const int root = !p->dist || cvx_dist_rank(p->dist) == 0;
    if (p->dist && cvx_dist_size(p->dist) > 1) cvx_info("Wan VAE decode: rank 0 decodes alone");
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae decode", B * wan_vae_decode_steps(v, T, h, w, tiled ? &tl : NULL), progress, user);
    for (int b = 0; b < B && root; b++) {
        out->data[b] = cvx_alloc_f32((size_t)3 * To * out->H * out->W);
        frames_sink sink = {out->data[b], To};
        if (wan_vae_decode(v, zin + (size_t)b * C * T * h * w, T, h, w, tiled ? &tl : NULL, take_frames, &sink,
                           &bar)) {
            cvx_frames_free(out);
            return cvx_error_prefix("%s", label);
        }
    }
    cvx_progress_finish(&bar);
    for (int b = 0; b < B && root; b++)
        if (cvx_check_finite(out->data[b], (size_t)3 * out->T * out->H * out->W, "decoded")) {
            cvx_error_prefix("%s: sample %d", label, b);
            cvx_frames_free(out);
            return -1;
        }
    return 0;
}

/* The loaded transformer's linear layers, for LoRA adapters. */
static int lora_targets(cvx_model *m, cvx_lora_target **out) {
    if (load_transformer(m)) return -1;
    return wan_lora_targets(S(m)->transformer, out);
}

static const char *const wan_classes[] = {"WanPipeline", "WanImageToVideoPipeline", "WanVideoToVideoPipeline", NULL};

const cvx_family cvx_family_wan = {
    .name = "Wan", .classes = wan_classes, .transformer_class = "WanTransformer3DModel", .open = wan_open, .close = wan_close,
    .cond_slots = cond_slots, .cond_dims = cond_dims, .text_dim = text_dim, .encode_texts = encode_texts, .encode_conditioning = encode_conditioning,
    .check_mode = check_mode, .options = options, .check_sample = check_sample,
    .sample_setup = sample_setup, .lora_targets = lora_targets, .latents_out = latents_out,
    .decode = decode, .gguf_rules = &wan_gguf_rules,
};
