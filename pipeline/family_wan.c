/* The Wan 2.1 family (WanPipeline, WanImageToVideoPipeline, WanVideoToVideoPipeline; diffusers
 * 0.33.1): prompt cleaning + UMT5-XXL (512 tokens, trimmed and zero-padded), the CLIP ViT-H image
 * encoder (I2V), WanTransformer3DModel, AutoencoderKLWan — its row of the family table
 * (pipeline/family.h). Weights come from the diffusers layout or from single files
 * (cvx_model_params.transformer_file / text_encoder_file / vae_file, ComfyUI's names too). */
#include "pipeline/components.h"
#include "pipeline/conditioning.h"
#include "pipeline/expert_set.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "stage1/clip_image_processor.h"
#include "stage1/clip_vision.h"
#include "stage1/prompt_clean.h"
#include "stage2/cache.h"
#include "stage2/wan.h"
#include "stage2/wan_family.h"
#include "stage3/wan_vae.h"

#define DEFAULT_TEXT_LEN 512         /* WanPipeline's max_sequence_length */
#define I2V_IMAGE_TOKENS 257         /* diffusers 0.33.1 splits the first 257 encoder rows off as the image's */
#define WAN_AUTO_TILING_BUDGET (12.0 * 1024 * 1024 * 1024)   /* --tiling auto: the untiled peak above this tiles */
/* UMT5-XXL: prompt_clean, the attention mask, rows past the prompt zeros (WanPipeline._get_t5_prompt_embeds) */
static const cvx_t5_style UMT5_STYLE = {.name = "UMT5", .clean = wan_prompt_clean, .masked = 1};

typedef struct {
    wan_config tcfg;                 /* transformer/config.json (when m->has_denoiser_config) */
    wan_vae_config vcfg;             /* vae/config.json, or AutoencoderKLWan's defaults */
    cvx_t5_encoder te;               /* UMT5-XXL */
    cvx_expert_set experts;          /* the transformer (A14B: two experts, one mapped at a time) */
    wan_vae *vae;
    wan_pipeline_config pc;          /* Wan 2.2's model_index.json keys: TI2V, A14B's experts */
    const wan_variant *variant;      /* the defaults of the model's variant (wan_variant_for) */
    int cond_channels, teacache_e0;  /* the run's denoiser settings (wan_denoiser_init) */
    float *ti2v_cond;                /* TI2V I2V: the image's normalised latents [C, 1, h, w] of the last run */
    clip_vision *clip;
    clip_image_processor proc;
} wan_state;

static wan_state *S(const cvx_model *m) { return m->fam; }

/* Wan-14B in bf16 is 28 GB: mmapped on a machine with less memory it would page from disk for
 * hours (cvx_weights_fit_memory refuses it with this way out) */
#define WAN_SMALLER_WEIGHTS                                                                                  \
    "a quantized file (--transformer wan2.1-t2v-14b-Q4_K_M.gguf, about 9 GB; Q8_0 about 15 GB), the 1.3B " \
    "model"

/* The transformer (A14B: each expert) from its directory or a single file with its config.json. */
static void *load_expert(const cvx_component_src *src, cvx_ctx *ctx) {
    return src->file ? (void *)wan_load_file(src->cfg, src->file, ctx) : (void *)wan_load(src->dir, ctx);
}
static void unload_expert(void *t) { wan_free(t); }
static void expert_denoiser(cvx_model *m, void *t, cvx_denoiser *d) {
    wan_denoiser_init(d, t, S(m)->cond_channels, S(m)->teacache_e0);
}
static const cvx_expert_spec EXPERTS = {"Wan 2.2 A14B", WAN_SMALLER_WEIGHTS, load_expert, unload_expert,
                                        expert_denoiser};

/* The VAE from its directory, or a single file (without vae/config.json: AutoencoderKLWan's defaults). */
static void *load_vae(const cvx_component_src *c, cvx_ctx *x) {
    return c->file ? wan_vae_load_file(c->cfg[0] ? c->cfg : NULL, c->file, x) : wan_vae_load(c->dir, x);
}
static void free_vae(void *v) { wan_vae_free(v); }
static const cvx_component PARTS[] = {
    {"vae", "--vae", offsetof(cvx_model, vae_file), 0, NULL, load_vae, free_vae, offsetof(wan_state, vae)}, {0}};

/* ---- open / close ---- */
static void fill_info(cvx_model *m) {
    wan_state *s = S(m);
    const wan_vae_config *v = &s->vcfg;
    const int experts = s->pc.boundary_ratio > 0 ? 2 : 1, i2v = s->tcfg.in_channels != s->tcfg.out_channels;
    const wan_variant *x = s->variant = wan_variant_for(v->z_dim, experts, i2v);   /* the defaults */
    cvx_model_info *i = &m->info;
    int temporal = 1;
    for (int k = 0; k < v->n_temporal; k++) temporal *= v->temperal_downsample[k] ? 2 : 1;
    i->vae_scale_spatial = v->patch_size << (v->n_mult - 1);   /* Wan 2.2 VAE: patch 2 × 8 = 16 */
    i->vae_scale_temporal = temporal;
    i->vae_scaling_factor = 1.0;   /* Wan normalises with latents_mean / latents_std instead */
    i->latent_channels = v->z_dim;
    i->frames = x->frames, i->height = x->height, i->width = x->width, i->fps = x->fps;
    i->text_len = DEFAULT_TEXT_LEN;
    i->text_dim = m->has_denoiser_config ? s->tcfg.text_dim : 4096;
    i->guidance_scale = x->guidance;
}

static int wan_open(cvx_model *m) {
    char path[4300];
    m->fam = cvx_calloc(1, sizeof(wan_state));
    cvx_component_path(m, "transformer", "config.json", path, sizeof path);
    if ((m->has_denoiser_config = cvx_is_file(path)) && wan_config_load(path, &S(m)->tcfg)) return -1;
    cvx_component_path(m, "vae", "config.json", path, sizeof path);
    m->has_vae_config = cvx_is_file(path);
    if (wan_vae_config_load(&S(m)->vcfg, m->has_vae_config ? path : NULL) || wan_pipeline_config_load(m->dir, &S(m)->pc)) return -1;
    if (!m->has_vae_config && m->vae_file[0]) m->has_vae_config = 1;   /* a single VAE file: the defaults */
    fill_info(m);
    S(m)->experts = (cvx_expert_set){&EXPERTS, S(m)->pc.boundary_ratio > 0 ? 2 : 1, NULL, 0};
    return 0;
}

static void wan_close(cvx_model *m) {
    wan_state *s = S(m);
    if (!s) return;
    cvx_t5_free(&s->te);
    cvx_expert_set_free(&s->experts);
    free(s->ti2v_cond);
    cvx_components_free(m, PARTS);
    clip_vision_free(s->clip);
    free(s);
    m->fam = NULL;
}

/* ---- stage 1: text ---- */
static int text_dim(cvx_model *m) { return cvx_t5_load(&S(m)->te, m, &UMT5_STYLE) ? -1 : S(m)->te.t5.cfg.d_model; }

static int encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                        cvx_progress_fn progress, void *user, float *out) {
    return cvx_t5_encode_texts(&S(m)->te, m, &UMT5_STYLE, texts, labels, n, L, progress, user, out);
}

/* ---- stage 1: image / video conditioning ---- */
/* T2V and V2V need a text-to-video transformer (in = out channels), I2V one with image_dim and
 * in = out + 4 + z channels; Wan 2.2 TI2V (expand_timesteps) takes text and an image. */
enum { WAN_T2V, WAN_I2V, WAN_TI2V };
static int mode_kind(cvx_model *m, int arg[2]) {
    if (!m->has_denoiser_config) return -1;   /* reported by the call that needs the transformer */
    const wan_config *c = &S(m)->tcfg;
    arg[0] = c->in_channels, arg[1] = c->image_dim;
    if (S(m)->pc.expand_timesteps) return WAN_TI2V;
    return c->image_dim > 0 || c->in_channels != c->out_channels ? WAN_I2V : WAN_T2V;
}
static const cvx_mode_rule mode_rules[] = {
    {WAN_TI2V, 1 << CVX_MODE_V2V, "%s: video-to-video is not supported for a Wan 2.2 TI2V model (expand_timesteps): "
                                  "give stage 1 an --image or nothing"},
    {WAN_T2V, 1 << CVX_MODE_I2V, "--image: %s/transformer is a text-to-video model (in_channels %d = out_channels): "
                                 "image-to-video needs an I2V checkpoint (Wan2.1-I2V-14B-480P / -720P)"},
    {WAN_I2V, ~(1u << CVX_MODE_I2V), "%s/transformer is an image-to-video model (in_channels %d, image_dim %d): give "
                                     "stage 1 an --image"},
    {0}};

/* The size checks stage 2 will make, before anything is encoded. */
static int shape_of(const void *m, const cvx_loop_params *lp, cvx_latent_shape *sh) {
    return wan_latent_shape_for(&S(m)->tcfg, lp, S(m)->vcfg.z_dim, sh);
}
static int check_size(cvx_model *m, cvx_mode mode, int frames, int height, int width) {
    (void)mode;
    cvx_latent_shape sh;
    return cvx_check_latent_size(m, frames, height, width, shape_of, m, &sh);
}

/* I2V: the video length decides the encoded condition (the image, then zero frames); TI2V: the image alone */
static int video_frames(cvx_model *m, const cvx_conditioning_params *p) {
    return p->max_frames ? p->max_frames : m->info.frames;
}
static int i2v_frames(cvx_model *m, const cvx_conditioning_params *p) {
    return S(m)->pc.expand_timesteps ? 1 : video_frames(m, p);
}
static int check(cvx_model *m, const cvx_conditioning_params *p, cvx_mode mode, int H, int W) {
    return mode == CVX_MODE_I2V && check_size(m, mode, video_frames(m, p), H, W) ? -1 : 0;
}

/* The CLIP image embeddings of the original image (WanImageToVideoPipeline.encode_image; Wan 2.2
 * I2V-A14B and TI2V have no image encoder). */
static int encode_image_clip(cvx_model *m, const cvx_rgb_frames *rgb, cvx_conditioning *out) {
    if (S(m)->tcfg.image_dim <= 0) return 0;
    if (cvx_image_encoder_load(m, "image_processor", &S(m)->proc, &S(m)->clip)) return -1;
    out->image_L = S(m)->clip->cfg.tokens, out->image_D = S(m)->clip->cfg.hidden_size;
    out->image_embeds = clip_vision_encode_rgb8(S(m)->clip, &S(m)->proc, rgb->rgb, rgb->width, rgb->height);
    return out->image_embeds ? 0 : -1;
}

/* The VAE's latent distribution of the pixels (V2V: the frames; I2V: the image, then zero frames;
 * TI2V: the image as latent frame 0). */
static int encode_vae(cvx_model *m, const cvx_conditioning_params *p, cvx_mode mode, const float *px, int T, int H,
                      int W, const char *src, cvx_progress_fn progress, void *user, cvx_conditioning *out) {
    if (cvx_component_load(m, PARTS, "vae")) return -1;
    const int ti2v = mode == CVX_MODE_I2V && S(m)->pc.expand_timesteps;
    const wan_vae *v = S(m)->vae;
    int F, h, w;
    if (wan_vae_encoded_shape(v, T, H, W, &F, &h, &w)) return -1;
    cvx_info("encoding %s: %d frame%s %dx%d with the Wan VAE%s", src, T, T == 1 ? "" : "s", W, H,
             ti2v ? " (the image as latent frame 0)" : mode == CVX_MODE_I2V ? " (the image, then zero frames)" : "");
    const size_t n = (size_t)v->cfg.z_dim * F * h * w;
    out->mean = cvx_alloc_f32(n);
    out->std = cvx_alloc_f32(n);
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae encode", wan_vae_encode_steps(T), progress, user);
    if (wan_vae_encode_dist(v, px, T, H, W, out->mean, out->std, &bar)) return -1;
    cvx_progress_finish(&bar);
    out->C = v->cfg.z_dim, out->T = F, out->h = h, out->w = w;
    out->frames = ti2v ? video_frames(m, p) : T;
    return 0;
}

static const cvx_media_encoder MEDIA = {check, check_size, i2v_frames, encode_image_clip, encode_vae};

static int encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                               cvx_conditioning *out) {
    return cvx_conditioning_encode(m, p, &MEDIA, progress, user, out);
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
    if (m->transformer_2_file[0] && !(S(m)->pc.boundary_ratio > 0))
        return cvx_error("--transformer_2 %s: %s has one transformer (transformer_2 is Wan 2.2 A14B's low-noise "
                         "expert)", m->transformer_2_file, m->dir);
    if (r->guidance_scale_2 > 0 && !(S(m)->pc.boundary_ratio > 0))
        return cvx_error("--guidance_scale_2 %g: %s has one transformer (guidance_scale_2 is Wan 2.2 A14B's low-noise "
                         "expert's)", r->guidance_scale_2, m->dir);
    int sp = r->sp_dist ? cvx_dist_size(r->sp_dist) : 1;
    return wan_sp_check(&S(m)->tcfg, sp);
}

/* WanVideoToVideoPipeline.prepare_latents: the encoder sample (the generator's first draws),
 * normalised; the noise; add_noise at the first kept step (conditioning.c's cvx_prepare_v2v). */
typedef struct {
    const wan_vae_config *cfg;
    int F, h, w;
} v2v_norm;

static void v2v_to_x0(void *user, float *sample, float *x0) {
    const v2v_norm *n = user;
    wan_latents_normalize(n->cfg, sample, n->F, n->h, n->w, x0);
}

static int prepare_v2v(cvx_model *m, const cvx_conditioning *c, const cvx_sample_params *p, cvx_scheduler *sched,
                       cvx_sample_run *run) {
    const cvx_latent_shape *sh = &run->shape;
    if (cvx_conditioning_fits(c, sh->channels, sh->frames, sh->height, sh->width, "video-to-video", "")) return -1;
    v2v_norm n = {&S(m)->vcfg, sh->frames, sh->height, sh->width};
    return cvx_prepare_v2v(c, sched, p->strength, sh->numel, &run->loop, &run->gen, &run->init, v2v_to_x0, &n);
}

/* WanImageToVideoPipeline.prepare_latents: condition = [mask (4 channels: 1 on latent frame 0),
 * the encoded image-then-zeros video (its mode, normalised)]; the noise comes from the seed in the
 * loop; the image embeddings go to both CFG branches. */
static int prepare_i2v(cvx_model *m, const cvx_conditioning *c, cvx_sample_run *run) {
    const cvx_latent_shape *sh = &run->shape;
    if (cvx_conditioning_fits(c, sh->channels, sh->frames, sh->height, sh->width, "image-to-video",
                              " (stage 1 encodes the image for a video of --frames frames: give stage 1 the same --frames)"))
        return -1;
    if (S(m)->tcfg.image_dim > 0 &&   /* Wan 2.2 I2V-A14B: no image encoder */
        (!c->image_embeds || c->image_L != I2V_IMAGE_TOKENS || c->image_D != S(m)->tcfg.image_dim))
        return cvx_error("image-to-video conditioning: image_embeds [%d, %d], the transformer expects [%d, %d]",
                         c->image_L, c->image_D, I2V_IMAGE_TOKENS, S(m)->tcfg.image_dim);
    /* [4 + z, F, h, w] */
    cvx_sample_run_i2v(run, wan_i2v_condition(&S(m)->vcfg, c->mean, sh->frames, sh->height, sh->width), c);
    return 0;
}

/* Wan 2.2 TI2V (WanPipeline / WanImageToVideoPipeline with expand_timesteps, diffusers 0.35.2):
 * per-token timesteps, t_scale 1 on every token (T2V) or first_frame_mask (I2V: 0 on latent
 * frame 0's tokens); I2V: condition = the image's latents (mode, normalised), latent frame 0 of
 * the transformer's input every step (the denoiser) and of the final latents (latents_out). */
static int prepare_ti2v(cvx_model *m, const cvx_conditioning *c, cvx_sample_run *run) {
    const cvx_latent_shape *sh = &run->shape;
    wan_state *s = S(m);
    free(s->ti2v_cond);
    s->ti2v_cond = NULL;
    if (c && (c->C != sh->channels || c->T != 1 || c->h != sh->height || c->w != sh->width))
        return cvx_error("Wan 2.2 TI2V image-to-video: conditioning latents [%d, %d, %d, %d], expected the image's "
                         "[%d, 1, %d, %d] (stage 1 of this model encodes the image alone at the video's size)",
                         c->C, c->T, c->h, c->w, sh->channels, sh->height, sh->width);
    float *t_scale = wan_ti2v_t_scale(&s->tcfg, sh->frames, sh->height, sh->width, c != NULL, &run->plan.n_t);
    run->fam_run = t_scale, run->fam_run_free = free;
    for (int i = 0; i < run->plan.n_steps; i++) run->plan.steps[i].t_scale = t_scale;
    if (c) {
        s->ti2v_cond = cvx_alloc_f32((size_t)c->C * c->h * c->w);
        wan_latents_normalize(&s->vcfg, c->mean, 1, sh->height, sh->width, s->ti2v_cond);   /* latent_dist.mode() */
        wan_denoiser_set_ti2v_condition(&run->den, s->ti2v_cond);
    }
    return 0;
}

/* The plan over the two experts: t >= boundary_ratio · num_train_timesteps the high-noise one with
 * guidance_scale, below the low-noise one with guidance_scale_2 (CFG on iff guidance_scale > 1). */
static void plan_a14b(cvx_model *m, const cvx_sample_params *p, const cvx_scheduler *sched, cvx_sample_run *run) {
    cvx_expert_set_provide(&S(m)->experts, m, run);
    const double g2 = p->guidance_scale_2 > 0 ? p->guidance_scale_2 : S(m)->variant->guidance_2;
    const double boundary_t = wan_a14b_plan(&run->plan, sched->timesteps + run->loop.t_start, &S(m)->pc,
                                            p->guidance_scale, g2);
    cvx_info("Wan 2.2 A14B: boundary t %g; guidance %g (high noise), %g (low noise)", boundary_t, p->guidance_scale,
             p->guidance_scale > 1 ? g2 : 1.0);
}

static int sample_setup(cvx_model *m, const cvx_sample_params *p, const cvx_embeddings *emb, cvx_scheduler *sched,
                        cvx_sample_run *run) {
    const int a14b = S(m)->pc.boundary_ratio > 0;
    /* A14B: the provider maps the experts in the loop */
    if (!a14b && cvx_expert_set_load_current(&S(m)->experts, m)) return -1;
    if (a14b && p->teacache_ret_steps)
        return cvx_error("--teacache_ret_steps: no TeaCache rule is published for Wan 2.2 A14B");
    if (a14b && run->loop.cache_kind == CVX_CACHE_TEACACHE && !p->teacache_coefficients)
        return cvx_error("--cache teacache: ali-vilab/TeaCache publishes coefficients for Wan 2.1 only, not Wan 2.2 A14B "
                         "(docs/caching.md); give --teacache_coefficients or use --cache fbcache or deepcache");
    const wan_config *c = &S(m)->tcfg;
    cvx_loop_params *lp = &run->loop;   /* the request and the pipeline's part filled in */
    const char *tc = wan_teacache_coefficients(c, p->height, p->width, p->teacache_ret_steps, lp->teacache_coefficients);
    if (cvx_teacache_setup(p, lp, tc != NULL, "ali-vilab/TeaCache publishes coefficients for Wan 2.1 only, not this "
                           "transformer (%d wide, %d latent channels; Wan 2.2 TI2V-5B: docs/caching.md)",
                           c->num_attention_heads * c->attention_head_dim, c->out_channels))
        return -1;
    cvx_latent_shape *sh = &run->shape;
    if (wan_latent_shape_for(c, lp, S(m)->vcfg.z_dim, sh)) return -1;
    const cvx_mode mode = p->conditioning ? p->conditioning->mode : CVX_MODE_T2V;
    cvx_log_transformer("Wan", c->num_layers, c->num_attention_heads, c->attention_head_dim,
                        c->image_dim ? ", image-to-video" : "", sched, p, NULL);
    cvx_log_latents(p, sh, "");
    if (mode == CVX_MODE_V2V) {
        if (prepare_v2v(m, p->conditioning, p, sched, run)) return -1;
    } else if (mode == CVX_MODE_I2V && !S(m)->pc.expand_timesteps && prepare_i2v(m, p->conditioning, run)) {
        return -1;
    }
    S(m)->cond_channels = mode == CVX_MODE_I2V && !S(m)->pc.expand_timesteps ? WAN_I2V_MASK_CHANNELS + sh->channels : 0;
    S(m)->teacache_e0 = a14b ? 0 : p->teacache_ret_steps;
    if (!a14b) expert_denoiser(m, S(m)->experts.resident, &run->den);
    run->preview_rgb = wan_latent_rgb;
    if (a14b) run->experts.n = 2;   /* the defaults keep the provider plan_a14b fills */
    cvx_sample_run_defaults(run, emb);
    if (p->teacache_ret_steps) run->plan.teacache_first = 5, run->plan.teacache_last = 0;   /* use_ret_steps */
    if (a14b) plan_a14b(m, p, sched, run);
    if (S(m)->pc.expand_timesteps) return prepare_ti2v(m, mode == CVX_MODE_I2V ? p->conditioning : NULL, run);
    return 0;
}

/* The loop's layout is the file's: [1, C, F, h, w]. */
static void latents_out(cvx_model *m, const cvx_latent_shape *sh, const float *latents, cvx_latents *out) {
    cvx_latents_out_copy(m, sh, latents, out);
    if (S(m)->ti2v_cond)   /* TI2V I2V: after the loop, latent frame 0 is the image's (as upstream) */
        wan_ti2v_apply_condition(latents, S(m)->ti2v_cond, sh->channels, sh->frames, sh->height, sh->width, out->data);
}

/* ---- stage 3 ---- */
typedef struct {
    const wan_vae *v;
    int T, h, w;
    const wan_vae_tiling *tl;   /* NULL: untiled */
} wan_decode;

static int decode_item(void *user, const float *z, cvx_progress *bar, float **frames, int *To, int *Ho, int *Wo) {
    const wan_decode *d = user;
    (void)To, (void)Ho, (void)Wo;
    *frames = wan_vae_decode_video(d->v, z, d->T, d->h, d->w, d->tl, bar);
    return *frames ? 0 : -1;
}

static int decode(cvx_model *m, const cvx_decode_params *p, const float *zin, int B, int C, int T, int h, int w,
                  const char *label, cvx_progress_fn progress, void *user, cvx_frames *out) {
    if (cvx_component_load(m, PARTS, "vae")) return -1;
    const wan_vae *v = S(m)->vae;
    if (cvx_decode_check_latents(m, "the Wan VAE", "z_dim", v->cfg.z_dim, zin, B, C, T, h, w, label)) return -1;
    /* auto: tiles when the untiled decode's estimated peak (flat in the frame count: the causal
     * caches and one frame's activations) is over the budget: 480x832 ~6.9 GB stays untiled as
     * upstream, 720x1280 ~15 GB tiles (~3.3 GB) */
    wan_vae_tiling tl;
    const int mode = p->tiling == CVX_TILING_ON ? 1 : p->tiling == CVX_TILING_OFF ? -1 : 0;
    const int tiled = wan_vae_plan_decode(v, mode, p->tile_height, p->tile_width, B, T, h, w, WAN_AUTO_TILING_BUDGET, &tl);
    if (tiled < 0) return -1;
    if (p->dist && cvx_dist_size(p->dist) > 1) cvx_info("Wan VAE decode: rank 0 decodes alone");
    wan_decode d = {v, T, h, w, tiled ? &tl : NULL};
    const cvx_decode_plan plan = {decode_item,  &d, wan_vae_decode_steps(v, T, h, w, d.tl), 0, wan_vae_decoded_frames(v, T),
                                  h * v->spatial_ratio, w * v->spatial_ratio, tiled};
    return cvx_decode_items(p, &plan, zin, B, C, T, h, w, label, progress, user, out);
}

/* The loaded transformer's linear layers, for LoRA adapters. */
static int lora_targets(cvx_model *m, cvx_lora_target **out) {
    if (cvx_expert_set_load_current(&S(m)->experts, m)) return -1;
    return wan_lora_targets(S(m)->experts.resident, out);
}

static const char *const wan_classes[] = {"WanPipeline", "WanImageToVideoPipeline", "WanVideoToVideoPipeline", NULL};
static const char *const wan_components[] = {"transformer/WanTransformer3DModel",
    "transformer_2/WanTransformer3DModel", "vae/AutoencoderKLWan", "text_encoder/UMT5EncoderModel",
    "image_encoder/CLIPVisionModel", "image_encoder/CLIPVisionModelWithProjection", NULL};

const cvx_family cvx_family_wan = {
    .name = "Wan", .classes = wan_classes, .component_classes = wan_components, .open = wan_open, .close = wan_close,
    .cond_slots = cond_slots, .cond_dims = cond_dims, .text_dim = text_dim, .encode_texts = encode_texts, .encode_conditioning = encode_conditioning,
    .mode_rules = mode_rules, .mode_kind = mode_kind, .options = options, .check_sample = check_sample,
    .sample_setup = sample_setup, .lora_targets = lora_targets, .latents_out = latents_out,
    .decode = decode, .gguf_rules = &wan_gguf_rules,
};
