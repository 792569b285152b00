/* The Wan 2.1 family (WanPipeline, WanImageToVideoPipeline, WanVideoToVideoPipeline; diffusers
 * 0.33.1): prompt cleaning + UMT5-XXL (512 tokens, trimmed and zero-padded), the CLIP ViT-H image
 * encoder (I2V), WanTransformer3DModel, AutoencoderKLWan — its row of the family table
 * (pipeline/family.h); its image / video conditioning is pipeline/wan_conditioning.c. Weights come
 * from the diffusers layout or from single files (cvx_model_params.transformer_file /
 * text_encoder_file / vae_file, ComfyUI's names too). */
#include "pipeline/family_wan.h"

#include <stddef.h>
#include <stdlib.h>

#include "dist.h"
#include "error.h"
#include "stage1/prompt_clean.h"
#include "stage2/cache.h"

#define DEFAULT_TEXT_LEN 512         /* WanPipeline's max_sequence_length */
#define WAN_AUTO_TILING_BUDGET (12.0 * 1024 * 1024 * 1024)   /* --tiling auto: the untiled peak above this tiles */
/* UMT5-XXL: prompt_clean, the attention mask, rows past the prompt zeros (WanPipeline._get_t5_prompt_embeds) */
static const cvx_t5_style UMT5_STYLE = {.name = "UMT5", .clean = wan_prompt_clean, .masked = 1};

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
    {"vae", "--vae", offsetof(cvx_model, vae_file), 0, NULL, load_vae, free_vae, offsetof(wan_state, vae), NULL},
    {0}};

/* ---- the state: configs, defaults ---- */
static int read_tcfg(const char *path, void *s) { return wan_config_load(path, &((wan_state *)s)->tcfg); }
static int read_vcfg(const char *path, void *s) { return wan_vae_config_load(&((wan_state *)s)->vcfg, path); }

static int fill_info(cvx_model *m) {
    wan_state *s = S(m);
    if (wan_pipeline_config_load(m->dir, &s->pc)) return -1;
    if (!m->has_vae_config && m->vae_file[0]) m->has_vae_config = 1;   /* a single VAE file: the defaults */
    const wan_vae_config *v = &s->vcfg;
    const int experts = s->pc.boundary_ratio > 0 ? 2 : 1, i2v = s->tcfg.in_channels != s->tcfg.out_channels;
    s->experts = (cvx_expert_set){&EXPERTS, experts, NULL, 0};
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
    return 0;
}

static void free_more(cvx_model *m) {
    cvx_expert_set_free(&S(m)->experts);
    free(S(m)->ti2v_cond);
    clip_vision_free(S(m)->clip);
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

/* ---- stage 2 ---- */
/* WanPipeline's conditioning: the UMT5 embeddings, max_sequence_length (512) rows zero-padded past
 * the prompt, text_dim wide */
static const cvx_cond_slot cond_slots[] = {
    {"prompt_embeds", 0, "WanPipeline's text length %d", "text_dim %d of the Wan transformer", DEFAULT_TEXT_LEN,
     .D_at = offsetof(wan_state, tcfg.text_dim)},
    {0}};

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
        if (wan_prepare_v2v(m, p->conditioning, p, sched, run)) return -1;
    } else if (mode == CVX_MODE_I2V && !S(m)->pc.expand_timesteps && wan_prepare_i2v(m, p->conditioning, run)) {
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
    if (S(m)->pc.expand_timesteps) return wan_prepare_ti2v(m, mode == CVX_MODE_I2V ? p->conditioning : NULL, run);
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
    const int tiled = wan_vae_plan_decode(v, cvx_tiling_mode(p), p->tile_height, p->tile_width, B, T, h, w, WAN_AUTO_TILING_BUDGET, &tl);
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
    .name = "Wan", .classes = wan_classes, .component_classes = wan_components, .state_size = sizeof(wan_state),
    .read_denoiser_config = read_tcfg, .read_vae_config = read_vcfg, .fill_info = fill_info, .parts = PARTS,
    .t5_style = &UMT5_STYLE, .t5_slot = offsetof(wan_state, te), .free_more = free_more, .cond_slots = cond_slots,
    .text_dim = cvx_family_t5_text_dim, .encode_texts = cvx_family_t5_encode_texts,
    .encode_conditioning = wan_encode_conditioning, .mode_rules = mode_rules, .mode_kind = mode_kind,
    .options = options, .check_sample = check_sample, .sample_setup = sample_setup, .lora_targets = lora_targets,
    .latents_out = latents_out, .decode = decode, .gguf_rules = &wan_gguf_rules,
};
