/* The CogVideoX family (CogVideoXPipeline, ...ImageToVideo, ...VideoToVideo; diffusers 0.32.2):
 * T5 v1.1 + the 226-token prompt, the CogVideoX transformer, AutoencoderKLCogVideoX — its row of
 * the family table (pipeline/family.h) and its state in the model handle; its image / video
 * conditioning is pipeline/cogvideox_conditioning.c. */
#include "pipeline/family_cogvideox.h"
#include "pipeline/conditioning.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "stage2/cogvideox_family.h"
#include "stage3/cogvideox_vae_pipeline.h"

/* T5 v1.1, no prompt cleaning, the encoder over the padding too (CogVideoXPipeline._get_t5_prompt_embeds) */
static const cvx_t5_style T5_STYLE = {.name = "T5"};
/* CogVideoX-5B in bf16 is 11 GB: the way out the memory check names */
#define SMALLER_WEIGHTS "a quantized file (--transformer cogvideox-5b-Q4_K_M.gguf), the 2B model"
/* --tiling auto tiles when an untiled decode would need more than this. */
#define AUTO_TILING_BUDGET (6.0 * 1024 * 1024 * 1024)

static cogvideox_state *S(const cvx_model *m) { return m->fam; }
cogvideox_state *cogvideox_state_of(cvx_model *m) { return m->family == &cvx_family_cogvideox ? m->fam : NULL; }

/* The transformer of the model directory, or its config.json with --transformer's weights (a single
 * .safetensors or a GGUF file with diffusers names). */
static void *load_tr(const cvx_component_src *c, cvx_ctx *x) {
    return c->file ? cogvideox_load_file(c->cfg, c->file, x) : cogvideox_load(c->dir, x);
}
static void free_tr(void *t) { cogvideox_free(t); }
static int lora(void *t, cvx_lora_target **out) { return cogvideox_lora_targets(t, out); }
static const cvx_component PARTS[] = {{"transformer", "--transformer", offsetof(cvx_model, transformer_file), 1,
                                       SMALLER_WEIGHTS, load_tr, free_tr, offsetof(cogvideox_state, transformer), lora},
                                      {0}};

/* ---- the state: configs, defaults, the VAE ---- */
static int read_tcfg(const char *path, void *s) { return cogvideox_config_load(path, &((cogvideox_state *)s)->tcfg); }
static int read_vcfg(const char *path, void *s) {
    return path ? cogvideox_vae_config_load(&((cogvideox_state *)s)->vcfg, path) : 0;
}

/* The defaults the upstream pipeline and model cards use: 1.0 = the transformer's sample size ×
 * the VAE factor at 8 fps; 1.5 (patch_size_t) = 768×1360 at 16 fps (its config's sample size is
 * not the size it is used at). Without a transformer config the 1.5 VAE is the one with
 * invert_scale_latents. */
static int fill_info(cvx_model *m) {
    if (m->vae_file[0])
        return cvx_error("%s: --vae %s: a single VAE file is read for Wan models; CogVideoX's VAE comes from its "
                         "diffusers directory", m->dir, m->vae_file);
    cvx_model_info *i = &m->info;
    i->vae_scale_spatial = m->has_vae_config ? S(m)->vcfg.spatial_ratio : 8;
    i->vae_scale_temporal = m->has_vae_config ? S(m)->vcfg.temporal_compression_ratio : 4;
    i->vae_scaling_factor = m->has_vae_config ? S(m)->vcfg.scaling_factor : 1.15258426;
    i->latent_channels = m->has_vae_config ? S(m)->vcfg.latent_channels : 16;
    /* CogVideoX1.5 is the transformer with patch_size_t (without one: the VAE with invert_scale_latents) */
    const int is_15 = m->has_denoiser_config ? S(m)->tcfg.patch_size_t > 0
                                             : m->has_vae_config && S(m)->vcfg.invert_scale_latents;
    if (m->has_denoiser_config) {
        const cogvideox_config *c = &S(m)->tcfg;
        i->frames = c->sample_frames;
        i->height = is_15 ? 768 : c->sample_height * i->vae_scale_spatial;
        i->width = is_15 ? 1360 : c->sample_width * i->vae_scale_spatial;
        i->text_len = c->max_text_seq_length;
        i->text_dim = c->text_embed_dim;
        i->v2v_latent_frames_multiple = c->patch_size_t > 0 ? c->patch_size_t : 1;
    }
    i->fps = is_15 ? 16 : 8;
    if (!i->text_len) i->text_len = 226;   /* CogVideoXPipeline's max_sequence_length */
    i->guidance_scale = 6.0;               /* CogVideoXPipeline.__call__'s */
    return 0;
}

static void free_more(cvx_model *m) {
    if (S(m)->vae_loaded) cogvideox_vae_free(&S(m)->vae);
    if (S(m)->enc_loaded) cogvideox_vae_encoder_free(&S(m)->enc);
}

int cogvideox_family_vae(cvx_model *m, int enc) {
    cogvideox_state *s = S(m);
    if (enc ? s->enc_loaded : s->vae_loaded) return 0;
    cvx_component_src src;
    if (cvx_component_find(m, "vae", "--vae", NULL, 0, NULL, &src) ||
        (enc ? cogvideox_vae_encoder_load(&s->enc, src.dir, m->ctx) : cogvideox_vae_load(&s->vae, src.dir, m->ctx)))
        return -1;
    *(enc ? &s->enc_loaded : &s->vae_loaded) = 1;
    return 0;
}

/* ---- stage 1 ---- */
/* T2V and V2V need a text-to-video transformer, I2V one with in_channels = 2 × out_channels */
static int mode_kind(cvx_model *m, int arg[2]) {
    if (!m->has_denoiser_config) return -1;   /* reported by the call that needs the transformer */
    arg[0] = S(m)->tcfg.in_channels, arg[1] = S(m)->tcfg.out_channels;
    return arg[0] == 2 * arg[1];   /* 1: image-to-video */
}
static const cvx_mode_rule mode_rules[] = {
    {0, 1 << CVX_MODE_I2V, "--image: %s/transformer is a text-to-video model (in_channels %d = out_channels): "
                           "image-to-video needs an I2V checkpoint (CogVideoX-5b-I2V, CogVideoX1.5-5B-I2V)"},
    {1, 1 << CVX_MODE_V2V, "--video: %s/transformer is an image-to-video model (in_channels %d = 2 × %d): "
                           "video-to-video runs on text-to-video checkpoints (CogVideoX-2b, -5b, 1.5-5B)"},
    {1, 1 << CVX_MODE_T2V, "%s/transformer is an image-to-video model (in_channels %d = 2 × %d): give stage 1 an "
                           "--image"},
    {0}};

/* ---- stage 2 ---- */
/* CogVideoXPipeline's conditioning: the T5 embeddings [1, max_text_seq_length, text_embed_dim] */
static const cvx_cond_slot cond_slots[] = {
    {"prompt_embeds", 0, "sequence length must be the transformer's max_text_seq_length %d",
     "text_embed_dim %d of the transformer", .L_at = offsetof(cogvideox_state, tcfg.max_text_seq_length),
     .D_at = offsetof(cogvideox_state, tcfg.text_embed_dim)},
    {0}};

static const char *const options[] = {"--use_dynamic_cfg", NULL};

static int check_sample(cvx_model *m, const cvx_sample_params *r) {
    int sp = r->sp_dist ? cvx_dist_size(r->sp_dist) : 1;   /* every rank finds these alike */
    return cogvideox_sp_check(&S(m)->tcfg, sp);
}

static int sample_setup(cvx_model *m, const cvx_sample_params *p, const cvx_embeddings *emb, cvx_scheduler *sched,
                        cvx_sample_run *run) {
    if (cvx_component_load(m, PARTS, "transformer")) return -1;
    const cogvideox_config *c = &S(m)->tcfg;
    cvx_loop_params *sp = &run->loop;   /* the request and the pipeline's part filled in */
    const int i2v = p->conditioning && p->conditioning->mode == CVX_MODE_I2V;
    if (p->teacache_coefficients) memcpy(sp->teacache_coefficients, p->teacache_coefficients, sizeof(double) * 5);
    else cogvideox_teacache_coefficients(c, sp->teacache_coefficients);
    cvx_latent_shape *sh = &run->shape;
    if (cogvideox_latent_shape_for(c, sp, i2v, sh)) return -1;
    cvx_log_transformer("CogVideoX", c->num_layers, c->num_attention_heads, c->attention_head_dim,
                        c->use_rotary_positional_embeddings ? ", rotary" : ", sin-cos", sched, p,
                        p->use_dynamic_cfg ? " (dynamic)" : "");
    /* the layout stage2_latents.safetensors has: [1, C, T, h, w] (the loop runs [T, C, h, w]) */
    cvx_log_latents(p, sh, sh->pad_frames ? " (the loop runs 1 padding frame more)" : "");
    if (p->conditioning) {
        cvx_prepared prep;
        if (cogvideox_prepare_conditioned(m, p->conditioning, sched, p->strength, sp, sh, &prep)) return -1;
        run->init = prep.init, run->cond = prep.image_latents, run->gen = prep.gen;
        sp->init_latents = run->init, sp->cond = run->cond, sp->init_generator = &run->gen;
    }
    cogvideox_denoiser_init(&run->den, S(m)->transformer, i2v);
    cogvideox_latent_rgb(m->info.vae_scaling_factor, &run->preview_rgb);
    cvx_sample_run_defaults(run, emb);   /* one transformer, the request's (dynamic) guidance */
    return 0;
}

static void latents_out(cvx_model *m, const cvx_latent_shape *sh, const float *latents, cvx_latents *out) {
    out->C = sh->channels, out->T = sh->frames - sh->pad_frames, out->h = sh->height, out->w = sh->width;
    out->data = cvx_alloc_f32((size_t)out->C * out->T * out->h * out->w);
    cogvideox_latents_to_output(latents, sh, out->data);   // [1, C, T, h, w]
}

/* ---- stage 3 ---- */

static int check_decode(cvx_model *m, const cvx_decode_params *p, int h, int w) {
    if (!m->has_vae_config) return 0;   /* reported by the decode, which needs the VAE */
    cogvideox_vae_decode_job job;
    return cogvideox_vae_decode_job_plan(&S(m)->vcfg, cvx_tiling_mode(p), p->tile_height, p->tile_width, 1, 1, h, w,
                                         AUTO_TILING_BUDGET, NULL, NULL, &job);
}

/* One batch item: stage 3's cogvideox_vae_decode_video (tiles spread over the ranks). */
static int decode_item(void *user, const float *z, cvx_progress *bar, float **frames, int *To, int *Ho, int *Wo) {
    const cogvideox_vae_decode_job *j = user;
    *frames = cogvideox_vae_decode_video(j->d, z, j->T, j->h, j->w, j->tiled, j->tsh, j->tsw, j->dist, To, Ho, Wo, bar);
    return 0;
}

static int decode(cvx_model *m, const cvx_decode_params *p, const float *zin, int B, int C, int T, int h, int w,
                  const char *label, cvx_progress_fn progress, void *user, cvx_frames *out) {
    if (cogvideox_family_vae(m, 0)) return -1;
    const cogvideox_vae_decoder *d = &S(m)->vae;
    if (cvx_decode_check_latents(m, "the CogVideoX VAE", "latent_channels", d->latent_channels, zin, B, C, T, h, w,
                                 label))
        return -1;
    if (d->out_channels != 3) return cvx_error("%s/vae: out_channels = %d, a video needs 3", m->dir, d->out_channels);
    cogvideox_vae_decode_job j;
    if (cogvideox_vae_decode_job_plan(d, cvx_tiling_mode(p), p->tile_height, p->tile_width, B, T, h, w, AUTO_TILING_BUDGET,
                                      p->dist, m->dir, &j))
        return -1;
    const cvx_decode_plan plan = {decode_item, &j, cogvideox_vae_decode_steps(d, T, h, w, j.tiled, j.tsh, j.tsw), 1,
                                  cogvideox_vae_output_frames(d, T), h * d->spatial_ratio, w * d->spatial_ratio,
                                  j.tiled};
    return cvx_decode_items(p, &plan, zin, B, C, T, h, w, label, progress, user, out);
}

static const char *const cog_classes[] = {"CogVideoXPipeline", "CogVideoXImageToVideoPipeline",
                                          "CogVideoXVideoToVideoPipeline", NULL};
static const char *const cog_components[] = {"transformer/CogVideoXTransformer3DModel",
    "vae/AutoencoderKLCogVideoX", "text_encoder/T5EncoderModel", NULL};

const cvx_family cvx_family_cogvideox = {
    .name = "CogVideoX", .classes = cog_classes, .component_classes = cog_components,
    .state_size = sizeof(cogvideox_state), .read_denoiser_config = read_tcfg, .read_vae_config = read_vcfg,
    .fill_info = fill_info, .parts = PARTS, .t5_style = &T5_STYLE, .t5_slot = offsetof(cogvideox_state, te),
    .free_more = free_more, .cond_slots = cond_slots, .text_dim = cvx_family_t5_text_dim,
    .encode_texts = cvx_family_t5_encode_texts, .encode_conditioning = cogvideox_encode_conditioning,
    .mode_rules = mode_rules, .mode_kind = mode_kind, .options = options, .check_sample = check_sample,
    .sample_setup = sample_setup, .lora_targets = cvx_family_lora_targets, .latents_out = latents_out,
    .decode = decode, .check_decode = check_decode, .gguf_rules = &cogvideox_gguf_rules,
};
