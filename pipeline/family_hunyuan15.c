/* The HunyuanVideo-1.5 family (HunyuanVideo15Pipeline text-to-video and
 * HunyuanVideo15ImageToVideoPipeline; diffusers v0.36.0): the Qwen2.5-VL MLLM prompt encoder and the
 * glyph/ByT5 encoder, for I2V the SigLIP image embeddings and the VAE-encoded first frame (stage 1),
 * HunyuanVideo15Transformer3DModel with the pipeline's explicit sigmas and the ClassifierFreeGuidance
 * guider (stage 2), AutoencoderKLHunyuanVideo15 (stage 3) — its row of the family table
 * (pipeline/family.h). The conditioning per branch is the staged pipeline's four tensors:
 * prompt_embeds [1000, D_qwen], prompt_embeds_mask [1000], prompt_embeds_2 [256, D_byt5],
 * prompt_embeds_mask_2 [256]; I2V adds stage1_conditioning.safetensors (the image's latent
 * distribution [1, C, 1, h, w] and image_embeds [1, 729, D_siglip]; the seed project's staged
 * scripts run T2V only: their stage 2 passes no image condition and zero vision states). Its
 * image-to-video conditioning is pipeline/hunyuan15_conditioning.c. */
#include "pipeline/family_hunyuan15.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "fileio.h"
#include "stage2/scheduler_flow.h"
#include "stage3/hunyuan15_vae_pipeline.h"

static hv15_state *S(const cvx_model *m) { return m->fam; }

static void *load_tr(const cvx_component_src *c, cvx_ctx *x) {
    return c->file ? hv15_load_file(c->cfg, c->file, x) : hv15_load(c->dir, x);
}
static void free_tr(void *t) { hv15_free(t); }
static int lora(void *t, cvx_lora_target **out) { return hv15_lora_targets(t, out); }
static const cvx_component PARTS[] = {{"transformer", "--transformer", offsetof(cvx_model, transformer_file), 1,
                                       "a quantized transformer file (--transformer ...gguf)", load_tr, free_tr,
                                       offsetof(hv15_state, transformer), lora}, {0}};

/* ---- the state: configs, defaults, the encoders ---- */
static int read_tcfg(const char *path, void *s) { return hv15_config_load(path, &((hv15_state *)s)->tcfg); }
static int read_vcfg(const char *path, void *s) { return hv15_vae_config_load(&((hv15_state *)s)->vcfg, path); }

/* HunyuanVideo15Pipeline's defaults: 121 frames at the 16:9 size of target_size (480×848 for the
 * 480p models, 720×1280 for 720p), 24 fps; guidance from the guider config. */
static int fill_info(cvx_model *m) {
    hv15_state *s = S(m);
    char path[4300];
    cvx_component_path(m, "guider", "guider_config.json", path, sizeof path);
    if (cvx_is_file(path)) {
        if (cvx_guider_load(path, &s->guider, s->window)) return -1;
    } else {
        /* no guider config (a bare directory): the 480p / 720p T2V checkpoints' guider */
        s->guider = (cvx_guider){.scale = 6.0, .rescale_unguided = 1};
        s->window[0] = 0.0, s->window[1] = 1.0;
    }
    cvx_model_info *i = &m->info;
    const hv15_vae_config *v = &s->vcfg;
    i->vae_scale_spatial = v->spatial_ratio;
    i->vae_scale_temporal = v->temporal_ratio;
    i->vae_scaling_factor = v->scaling_factor;
    i->latent_channels = v->latent_channels;
    const int big = m->has_denoiser_config && s->tcfg.target_size >= 960;
    i->frames = 121, i->height = big ? 720 : 480, i->width = big ? 1280 : 848, i->fps = 24;
    i->text_len = HV15_MLLM_MAX_LENGTH;
    i->text_dim = m->has_denoiser_config ? s->tcfg.text_embed_dim : 3584;
    i->guidance_scale = s->guider.scale;
    return 0;
}

static void free_more(cvx_model *m) {
    hv15_text_encoders_free(&S(m)->te);
    hv15_vae_free(S(m)->vae);
    clip_vision_free(S(m)->siglip);
}

static int load_qwen(cvx_model *m) {
    return hv15_text_load_mllm(&S(m)->te, m->dir, m->text_encoder_file[0] ? m->text_encoder_file : NULL, m->ctx);
}
static int load_byt5(cvx_model *m) {
    return hv15_text_load_byt5(&S(m)->te, m->dir, m->text_encoder_2_file[0] ? m->text_encoder_2_file : NULL, m->ctx);
}

int hv15_family_vae(cvx_model *m, int part) {
    hv15_state *s = S(m);
    if (s->vae) return hv15_vae_load_more(s->vae, part);
    cvx_component_src src;   /* a single file without vae/config.json: the defaults */
    if (cvx_component_find(m, "vae", "--vae", m->vae_file, 0, NULL, &src)) return -1;
    s->vae = src.file ? hv15_vae_load_file_parts(src.cfg[0] ? src.cfg : NULL, src.file, m->ctx, part)
                      : hv15_vae_load_parts(src.dir, m->ctx, part);
    return s->vae ? 0 : -1;
}

/* ---- stage 1 ---- */
#define HV15_STATE(key) offsetof(hv15_state, tcfg.key)
static const cvx_cond_slot cond_slots[] = {
    {"prompt_embeds", 0, "HunyuanVideo15Pipeline's MLLM length %d", "text_embed_dim %d of the transformer",
     HV15_MLLM_MAX_LENGTH, .D_at = HV15_STATE(text_embed_dim)},
    {"prompt_embeds_mask", 1, "HunyuanVideo15Pipeline's MLLM length %d", "%d", .L = HV15_MLLM_MAX_LENGTH},
    {"prompt_embeds_2", 0, "HunyuanVideo15Pipeline's ByT5 length %d", "text_embed_2_dim %d of the transformer",
     HV15_BYT5_MAX_LENGTH, .D_at = HV15_STATE(text_embed_2_dim)},
    {"prompt_embeds_mask_2", 1, "HunyuanVideo15Pipeline's ByT5 length %d", "%d", .L = HV15_BYT5_MAX_LENGTH},
    {0}};

static int text_dim(cvx_model *m) { return load_qwen(m) ? -1 : S(m)->te.qwen.cfg.hidden_size; }

/* _get_mllm_prompt_embeds: hidden_states[-3] of the chat-templated prompt, cropped. */
static int encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                        cvx_progress_fn progress, void *user, float *out) {
    if (load_qwen(m)) return -1;
    if (L != HV15_MLLM_MAX_LENGTH)
        return cvx_error("--max_sequence_length %d: HunyuanVideo15Pipeline's MLLM prompt length is %d", L,
                         HV15_MLLM_MAX_LENGTH);
    cvx_progress bar;
    cvx_progress_begin(&bar, "Qwen2.5-VL prompts", n, progress, user);
    if (hv15_text_prompt_embeds(&S(m)->te, texts, labels, n, out, &bar)) return -1;
    cvx_progress_finish(&bar);
    return 0;
}

/* prompt_embeds_mask (the template's mask, cropped), and _get_byt5_prompt_embeds' pair. */
static int encode_more(cvx_model *m, const char *const *texts, const char *const *labels, int n,
                       cvx_progress_fn progress, void *user, cvx_cond_set *out) {
    (void)progress, (void)user;
    if (load_qwen(m) || load_byt5(m)) return -1;
    enum { L = HV15_MLLM_MAX_LENGTH, L2 = HV15_BYT5_MAX_LENGTH };
    const int D2 = S(m)->te.byt5.cfg.d_model;
    out->n = 3;
    out->t[0] = (cvx_cond_tensor){"prompt_embeds_mask", cvx_alloc_f32((size_t)n * L), NULL, L, 1, 1};
    out->t[1] = (cvx_cond_tensor){"prompt_embeds_2", cvx_alloc_f32((size_t)n * L2 * D2), NULL, L2, D2, 0};
    out->t[2] = (cvx_cond_tensor){"prompt_embeds_mask_2", cvx_alloc_f32((size_t)n * L2), NULL, L2, 1, 1};
    return hv15_text_prompt_more(&S(m)->te, texts, labels, n, out->t[0].prompt, out->t[1].prompt, out->t[2].prompt);
}

/* The pipeline class decides the mode (the transformer's task_type does not: the 480p T2V
 * checkpoint says "i2v"); a directory without model_index.json takes both. */
enum { HV15_T2V_PIPELINE, HV15_I2V_PIPELINE, HV15_ANY_PIPELINE };
static int mode_kind(cvx_model *m, int arg[2]) {
    (void)arg;
    return !strcmp(m->pipeline_class, "HunyuanVideo15Pipeline")               ? HV15_T2V_PIPELINE
           : !strcmp(m->pipeline_class, "HunyuanVideo15ImageToVideoPipeline") ? HV15_I2V_PIPELINE
                                                                              : HV15_ANY_PIPELINE;
}
static const cvx_mode_rule mode_rules[] = {
    {CVX_KIND_ANY, 1 << CVX_MODE_V2V, "--video: HunyuanVideo-1.5 has no video-to-video pipeline (give an --image or "
                                      "nothing)"},
    {HV15_T2V_PIPELINE, 1 << CVX_MODE_I2V, "--image: %s is a HunyuanVideo15Pipeline (text-to-video); image-to-video "
                                           "needs a HunyuanVideo15ImageToVideoPipeline model "
                                           "(HunyuanVideo-1.5-Diffusers-*_i2v)"},
    {HV15_I2V_PIPELINE, 1 << CVX_MODE_T2V, "%s is a HunyuanVideo15ImageToVideoPipeline: give stage 1 an --image"},
    {0}};

/* ---- stage 2 ---- */
static const char *const options[] = {"--guidance_rescale", NULL};

static int check_sample(cvx_model *m, const cvx_sample_params *r) {
    const double g = r->guidance_scale;
    if (!S(m)->guider.original && g < 1.0 && fabs(g - 1.0) > 1e-9)
        return cvx_error("--guidance_scale %g: HunyuanVideo-1.5's guider would run CFG with a scale below 1 (towards "
                         "the negative prompt); not supported: give 1 to turn guidance off, or a scale above 1", g);
    if (!strcmp(r->cache, "teacache"))   /* docs/caching.md */
        return cvx_error("--cache teacache: ali-vilab/TeaCache publishes no rule for HunyuanVideo-1.5 (its "
                         "TeaCache4HunyuanVideo is for HunyuanVideo v1; docs/caching.md); use --cache fbcache or deepcache");
    if (!m->has_denoiser_config) return 0;   /* reported by the call that needs the transformer */
    return hv15_sp_check(&S(m)->tcfg, r->sp_dist ? cvx_dist_size(r->sp_dist) : 1);
}

static int sample_setup(cvx_model *m, const cvx_sample_params *p, const cvx_embeddings *emb, cvx_scheduler *sched,
                        cvx_sample_run *run) {
    if (cvx_component_load(m, PARTS, "transformer")) return -1;
    hv15_state *s = S(m);
    const hv15_config *c = hv15_get_config(s->transformer);
    cvx_loop_params *lp = &run->loop;
    const cvx_conditioning *ic = p->conditioning;
    if (cvx_check_model_mode(m, ic ? ic->mode : CVX_MODE_T2V)) return -1;
    cvx_latent_shape *sh = &run->shape;
    if (hv15_latent_shape_for(c, lp, s->vcfg.latent_channels, sh)) return -1;
    if (ic && hv15_prepare_i2v(m, c, ic, run)) return -1;
    const int N = p->num_inference_steps;
    hv15_run *r = cvx_calloc(1, sizeof *r);
    run->fam_run = r, run->fam_run_free = hv15_run_free;
    /* the pipeline's sigmas through retrieve_timesteps(sigmas=...) */
    r->sigmas = cvx_malloc(sizeof(double) * N);
    flow_linear_sigmas(N, r->sigmas);
    cvx_scheduler_set_sigmas(sched, r->sigmas, N);
    if (cvx_scheduler_set_timesteps(sched, N)) return -1;
    if (hv15_prepare_branches(p, emb, run, r->branch)) return -1;
    cvx_log_transformer("HunyuanVideo-1.5", c->num_layers, c->num_attention_heads, c->attention_head_dim, "", sched, p,
                        NULL);
    cvx_log_latents(p, sh, "");
    hv15_denoiser_init(&run->den, s->transformer);
    run->preview_rgb = (cvx_latent_rgb){0};
    cvx_sample_run_defaults(run, emb);
    /* the guider (--guidance_scale over its scale): CFG on the steps of its window, the conditional
     * branch alone on the others; --guidance_rescale over its rescale */
    cvx_plan_guider_window(&run->plan, &s->guider, s->window, p->guidance_scale, p->guidance_rescale);
    return 0;
}

/* ---- stage 3 ---- */
typedef struct {
    const hv15_vae *v;
    const hv15_vae_tiling *tl;   /* NULL: untiled */
    int T, h, w;
} hv15_decode;

static int decode_item(void *user, const float *zin, cvx_progress *bar, float **frames, int *To, int *Ho, int *Wo) {
    const hv15_decode *d = user;
    (void)To, (void)Ho, (void)Wo;
    const int rc = hv15_vae_decode_latents(d->v, d->tl, zin, d->T, d->h, d->w, frames);
    cvx_progress_update(bar, bar->done + 1);
    return rc;
}

/* untiled unless asked */
static int decode(cvx_model *m, const cvx_decode_params *p, const float *zin, int B, int C, int T, int h, int w,
                  const char *label, cvx_progress_fn progress, void *user, cvx_frames *out) {
    if (hv15_family_vae(m, VAE_PART_DECODER)) return -1;
    const hv15_vae *v = S(m)->vae;
    const hv15_vae_config *vc = hv15_vae_get_config(v);
    if (cvx_decode_check_latents(m, "the HunyuanVideo-1.5 VAE", "latent_channels", vc->latent_channels, zin, B, C, T, h,
                                 w, label))
        return -1;
    hv15_vae_tiling tl;
    hv15_vae_tiling_for(p->tile_height, p->tile_width, &tl);
    const int tiled = p->tiling == CVX_TILING_ON;
    cvx_info("decoding latents [%d, %d, %d, %d, %d] with the HunyuanVideo-1.5 VAE (%s)", B, C, T, h, w,
             tiled ? "tiled" : "untiled");
    hv15_decode d = {v, tiled ? &tl : NULL, T, h, w};
    const cvx_decode_plan plan = {decode_item, &d, 1, 1, hv15_vae_decoded_frames(v, T), h * vc->spatial_ratio,
                                  w * vc->spatial_ratio, tiled};
    return cvx_decode_items(p, &plan, zin, B, C, T, h, w, label, progress, user, out);
}

static const char *const hv15_classes[] = {"HunyuanVideo15Pipeline", "HunyuanVideo15ImageToVideoPipeline", NULL};
static const char *const hv15_components[] = {"transformer/HunyuanVideo15Transformer3DModel",
    "vae/AutoencoderKLHunyuanVideo15", "text_encoder/Qwen2_5_VLTextModel", "text_encoder_2/T5EncoderModel",
    "image_encoder/SiglipVisionModel", NULL};

const cvx_family cvx_family_hunyuan15 = {
    .name = "HunyuanVideo-1.5", .classes = hv15_classes, .component_classes = hv15_components,
    .state_size = sizeof(hv15_state), .read_denoiser_config = read_tcfg, .read_vae_config = read_vcfg,
    .fill_info = fill_info, .parts = PARTS, .free_more = free_more, .cond_slots = cond_slots, .text_dim = text_dim,
    .encode_texts = encode_texts, .encode_more = encode_more, .encode_conditioning = hv15_encode_conditioning,
    .mode_rules = mode_rules, .mode_kind = mode_kind, .options = options, .check_sample = check_sample,
    .sample_setup = sample_setup, .lora_targets = cvx_family_lora_targets, .latents_out = cvx_latents_out_copy,
    .decode = decode, .gguf_rules = &hv15_gguf_rules,
};
