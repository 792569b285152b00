/* The LTX-Video family (LTXPipeline; diffusers 0.35.2): T5 (128 tokens, the encoder without the
 * mask, the mask to the transformer's cross-attention), LTXVideoTransformer3DModel,
 * AutoencoderKLLTXVideo (0.9.0 and the timestep-conditioned 0.9.5+ decoder) — its row of the
 * family table (pipeline/family.h); its image and conditions are pipeline/ltx_conditioning.c. The
 * schedule is the "ltx" scheduler (stage2/scheduler_ltx.h). */
#include "pipeline/family_ltx.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "rng.h"
#include "validate.h"
#include "stage2/cache.h"
#include "stage2/ltx_schedule.h"
#include "stage2/ltx_pack.h"
#include "stage2/scheduler_ltx.h"
#include "stage3/ltx_vae_pipeline.h"

#define TEXT_LEN 128           /* LTXPipeline's max_sequence_length */
#define DEFAULT_GUIDANCE 3.0   /* LTXPipeline.__call__'s guidance_scale */
#define FRAME_RATE 25          /* LTXPipeline.__call__'s frame_rate (the rotary temporal scale) */

static ltx_state *S(const cvx_model *m) { return m->fam; }

/* the transformer and the VAE: their directories, or single files (the original LTX-Video one may be
 * both) with the directory's configs */
static void *load_tr(const cvx_component_src *c, cvx_ctx *x) {
    return c->file ? ltx_load_file(c->cfg, c->file, x) : ltx_load(c->dir, x);
}
static void *load_vae(const cvx_component_src *c, cvx_ctx *x) {
    return c->file ? ltx_vae_load_file(c->cfg, c->file, x) : ltx_vae_load(c->dir, x);
}
static void free_tr(void *t) { ltx_free(t); }
static void free_vae(void *v) { ltx_vae_free(v); }
static int lora(void *t, cvx_lora_target **out) { return ltx_lora_targets(t, out); }
static const cvx_component PARTS[] = {
    {"transformer", "--transformer", offsetof(cvx_model, transformer_file), 1, NULL, load_tr, free_tr,
     offsetof(ltx_state, transformer), lora},
    {"vae", "--vae", offsetof(cvx_model, vae_file), 1, NULL, load_vae, free_vae, offsetof(ltx_state, vae), NULL},
    {0}};

/* ---- the state: configs, defaults ---- */
static int read_tcfg(const char *path, void *s) { return ltx_config_load(path, &((ltx_state *)s)->tcfg); }
static int read_vcfg(const char *path, void *s) {
    return path ? ltx_vae_config_load(path, &((ltx_state *)s)->vcfg) : 0;   /* absent: no VAE config */
}

/* LTXPipeline's defaults: 161 frames of 512×704 at 25 fps, guidance 3. */
static int fill_info(cvx_model *m) {
    cvx_model_info *i = &m->info;
    i->vae_scale_spatial = 32, i->vae_scale_temporal = 8;
    i->vae_scaling_factor = m->has_vae_config ? S(m)->vcfg.scaling_factor : 1.0;
    i->latent_channels = m->has_vae_config ? S(m)->vcfg.latent_channels : 128;
    i->frames = 161, i->height = 512, i->width = 704, i->fps = FRAME_RATE;
    i->text_len = TEXT_LEN;
    i->text_dim = m->has_denoiser_config ? S(m)->tcfg.caption_channels : 4096;
    i->guidance_scale = DEFAULT_GUIDANCE;
    i->scheduler = cvx_scheduler_ltx.name;   /* the model's FlowMatchEuler config, as LTXPipeline uses it */
    return 0;
}

/* ---- stage 1 ---- */
/* LTXPipeline._get_t5_prompt_embeds: no prompt cleaning, the encoder runs without the attention mask
 * (padding rows are ordinary encoder outputs); LTXConditionPipeline's (Mochi's) passes it: a model
 * whose model_index.json names LTXConditionPipeline, or a handle that encoded conditions. */
static int masked_encoder(const cvx_model *m) { return S(m)->condition_pipeline || ltx_condition_class(m) ? 2 : 0; }
static const cvx_t5_style T5_STYLE = {.name = "T5", .masked_fn = masked_encoder};

/* prompt_attention_mask [n, L] (0/1 floats): the tokenizer's mask, for the cross-attention */
static int encode_more(cvx_model *m, const char *const *texts, const char *const *labels, int n,
                       cvx_progress_fn progress, void *user, cvx_cond_set *out) {
    (void)progress, (void)user;
    out->n = 1;
    return cvx_t5_mask_tensor(&S(m)->te, m, &T5_STYLE, "prompt_attention_mask", texts, labels, n, TEXT_LEN, &out->t[0]);
}

static const cvx_mode_rule mode_rules[] = {
    {CVX_KIND_ANY, 1 << CVX_MODE_V2V, "LTX-Video: video-to-video is not wired (text- and image-to-video)"}, {0}};

/* ---- stage 2 ---- */
static const cvx_cond_slot cond_slots[] = {
    {"prompt_embeds", 0, "LTXPipeline's max_sequence_length %d", "caption_channels %d of the LTX transformer", TEXT_LEN,
     .D_at = offsetof(ltx_state, tcfg.caption_channels)},
    {"prompt_attention_mask", 1, "LTXPipeline's max_sequence_length %d", "%d", .L = TEXT_LEN},
    {0}};

static const char *const options[] = {"--guidance_rescale", "--timesteps", "--image_cond_noise_scale", NULL};
static const char *const decode_options[] = {"--decode_timestep", "--decode_noise_scale", NULL};

static int check_sample(cvx_model *m, const cvx_sample_params *r) {
    (void)m;
    if (r->preview_every > 0 && r->conditioning && r->conditioning->mode == CVX_MODE_COND)
        return cvx_error("--preview_every: previews of the condition pipeline's packed latents are not wired");
    if (r->image_cond_noise_set && !(r->conditioning && r->conditioning->mode == CVX_MODE_COND))
        return cvx_error("--image_cond_noise_scale: re-noises the condition pipeline's conditions (give stage 1 "
                         "--condition)");
    if (r->scheduler && strcmp(r->scheduler, cvx_scheduler_ltx.name) != 0)
        return cvx_error("--scheduler %s: LTX-Video runs its own schedule (ltx)", r->scheduler);
    return 0;
}

static int sample_setup(cvx_model *m, const cvx_sample_params *p, const cvx_embeddings *emb, cvx_scheduler *sched,
                        cvx_sample_run *run) {
    if (cvx_component_load(m, PARTS, "transformer")) return -1;
    const ltx_config *c = ltx_get_config(S(m)->transformer);
    cvx_latent_shape *sh = &run->shape;
    int F, H, W;
    if (ltx_latent_grid(p->frames, p->height, p->width, &F, &H, &W)) return -1;
    if (!m->has_vae_config || S(m)->vcfg.latent_channels != c->in_channels)
        return cvx_error("%s: the VAE's latent_channels %d differ from the transformer's in_channels %d", m->dir,
                         m->has_vae_config ? S(m)->vcfg.latent_channels : -1, c->in_channels);
    if (!(p->guidance_rescale >= 0 && p->guidance_rescale <= 1))
        return cvx_error("--guidance_rescale %g: must be in [0, 1]", p->guidance_rescale);
    *sh = (cvx_latent_shape){.frames = F, .channels = c->in_channels, .height = H, .width = W,
                             .numel = (size_t)c->in_channels * F * H * W, .channels_major = 1};
    if (cvx_teacache_setup(p, &run->loop, ltx_teacache_coefficients(c, run->loop.teacache_coefficients) != NULL,
                           "TeaCache4LTX-Video publishes coefficients for LTX-Video 0.9.1 (2B) only, this transformer "
                           "is %d wide", c->num_attention_heads * c->attention_head_dim))   /* docs/caching.md */
        return -1;
    const cvx_cond_set *more = p->cond_more;
    if (!more || more->n != 1 || !more->t[0].is_mask || more->t[0].L != emb->L)
        return cvx_error("the LTX conditioning needs prompt_attention_mask [%d] beside prompt_embeds", emb->L);
    ltx_run *lr = cvx_calloc(1, sizeof *lr);
    run->fam_run = lr, run->fam_run_free = ltx_run_free;
    const cvx_mode mode = p->conditioning ? p->conditioning->mode : CVX_MODE_T2V;
    S(m)->cond_latents = mode == CVX_MODE_COND, S(m)->cond_extra_frames = 0;
    /* the schedule: explicit timesteps (--timesteps; the condition pipeline's default is
     * linear_quadratic_schedule(N)·1000), else the sigmas with 0.9.0's mu from the token count */
    const int N = p->num_inference_steps;
    if (p->n_timesteps || mode == CVX_MODE_COND) {
        lr->list = ltx_timestep_list(N, p->n_timesteps ? p->timesteps : NULL), lr->n_list = N;
        ltx_scheduler_set_list(sched, lr->list, N);
    }
    ltx_scheduler_set_seq_len(sched, (int64_t)F * H * W);   /* the loop sets the timesteps again: it sticks */
    if (cvx_scheduler_set_timesteps(sched, N)) return -1;
    cvx_log_transformer("LTX", c->num_layers, c->num_attention_heads, c->attention_head_dim, "", NULL, p, NULL);
    cvx_log_latents(p, sh, "");
    if (mode == CVX_MODE_I2V && ltx_prepare_i2v(m, p->conditioning, sched, run)) return -1;
    if (mode == CVX_MODE_COND && ltx_prepare_condition(m, p, p->conditioning, sched, run, lr)) return -1;
    lr->cond[0] = (ltx_text_cond){emb->negative, more->t[0].negative, emb->L};
    lr->cond[1] = (ltx_text_cond){emb->prompt, more->t[0].prompt, emb->L};
    run->branch[0] = &lr->cond[0], run->branch[1] = &lr->cond[1];
    if (!(p->frame_rate >= 0) || !isfinite(p->frame_rate))
        return cvx_error("--frame_rate %g: must be a positive number", p->frame_rate);
    ltx_denoiser_init(&run->den, S(m)->transformer, p->frame_rate > 0 ? p->frame_rate : m->info.fps);
    if (mode == CVX_MODE_COND) ltx_denoiser_set_condition(&run->den, lr->cr.mask, lr->cr.video_coords, lr->cr.tokens);
    cvx_sample_run_defaults(run, emb);
    const size_t S_tok = (size_t)F * H * W, hw = (size_t)H * W;
    if (mode == CVX_MODE_I2V) lr->t_scale = ltx_first_frame_t_scale(S_tok, hw), run->plan.n_t = S_tok;
    for (int i = 0; i < run->plan.n_steps; i++) {
        run->plan.steps[i].guide.rescale = p->guidance_rescale;
        run->plan.steps[i].t_scale = lr->t_scale;
    }
    return 0;
}

/* The condition pipeline's packed tokens: the extra condition tokens dropped, unpacked. */
static void latents_out(cvx_model *m, const cvx_latent_shape *sh, const float *latents, cvx_latents *out) {
    const int extra = S(m)->cond_extra_frames, C = sh->channels;
    out->C = C, out->T = sh->frames - extra, out->h = sh->height, out->w = sh->width;
    const size_t hw = (size_t)sh->height * sh->width, n = (size_t)C * out->T * hw;
    out->data = cvx_alloc_f32(n);
    if (S(m)->cond_latents) ltx_unpack_latents(latents + (size_t)extra * hw * C, 1, C, out->T, sh->height, sh->width,
                                               out->data);
    else memcpy(out->data, latents, n * sizeof(float));
}

/* ---- stage 3 ---- */
static int decode_item(void *user, const float *z, cvx_progress *bar, float **frames, int *To, int *Ho, int *Wo) {
    (void)To, (void)Ho, (void)Wo;
    return ltx_vae_decode_item(user, z, frames, bar);   /* the bar counts tiles */
}

/* LTXPipeline after the loop: denormalise; a timestep-conditioned VAE (0.9.5+) decodes
 * (1 − s)·z + s·noise at decode_timestep, the noise drawn from the run's generator after all its
 * draws (p->generator); frames stay unclamped here (the caller maps clamp(v/2 + 0.5)). */
static int decode(cvx_model *m, const cvx_decode_params *p, const float *zin, int B, int C, int T, int h, int w,
                  const char *label, cvx_progress_fn progress, void *user, cvx_frames *out) {
    if (cvx_component_load(m, PARTS, "vae")) return -1;
    ltx_vae *v = S(m)->vae;
    const ltx_vae_config *vc = ltx_vae_get_config(v);
    if (cvx_decode_check_latents(m, "the LTX VAE", "latent_channels", vc->latent_channels, zin, B, C, T, h, w, label))
        return -1;
    const size_t n = (size_t)B * C * T * h * w;
    double dt, ds;
    ltx_vae_decode_settings(vc, p->decode_set, p->decode_timestep, p->decode_noise_scale, &dt, &ds);
    cvx_generator gen;
    if (vc->timestep_conditioning) {
        if (!p->generator)
            return cvx_error("%s: the timestep-conditioned LTX VAE draws its decode noise from the sampler's "
                             "generator after the loop, and the latents come without it", label);
        memcpy(&gen, p->generator, sizeof gen);
        if (cvx_generator_validate(&gen)) return cvx_error_prefix("%s: the sampler's generator", label);
        cvx_info("LTX VAE decode: decode_timestep %g, decode_noise_scale %g", dt, ds);
    }
    /* tiles: --tiling on, or auto for a large video (upstream's sizes; a --tile_sample_min_* size
     * strides at 7/8 of it, as 448 of 512) */
    ltx_vae_tiling tiling;
    ltx_vae_tiling_for(p->tile_height, p->tile_width, &tiling);
    const int tile = p->tiling == CVX_TILING_ON || (p->tiling == CVX_TILING_AUTO && ltx_vae_tiling_auto(T, h, w));
    float *z = cvx_alloc_f32(n);
    memcpy(z, zin, n * sizeof(float));
    ltx_denormalize_latents(z, B, C, (size_t)T * h * w, ltx_vae_latents_mean(v), ltx_vae_latents_std(v),
                            (float)vc->scaling_factor);
    if (vc->timestep_conditioning) ltx_vae_add_decode_noise(z, n, (float)ds, &gen);
    ltx_vae_decode_job d = {v, tile ? &tiling : NULL, T, h, w, 0, (float)dt};
    const cvx_decode_plan plan = {decode_item, &d, ltx_vae_tile_count(d.tiling, T, h, w), 0, 8 * (T - 1) + 1, 32 * h,
                                  32 * w, 0};
    const int rc = cvx_decode_items(p, &plan, z, B, C, T, h, w, label, progress, user, out);
    free(z);
    if (!rc) out->tiled = d.tiled;
    return rc;
}

/* --tile_sample_min_height / _width: multiples of 32 pixels (one latent pixel) */
static int check_decode(cvx_model *m, const cvx_decode_params *p, int h, int w) {
    (void)m, (void)h, (void)w;
    if (p->tile_height % 32 || p->tile_width % 32)
        return cvx_error("--tile_sample_min_height %d --tile_sample_min_width %d: LTX-Video's tiles are multiples of "
                         "32 pixels", p->tile_height, p->tile_width);
    return 0;
}

static const char *const ltx_classes[] = {"LTXPipeline", "LTXImageToVideoPipeline", "LTXConditionPipeline", NULL};
static const char *const ltx_components[] = {"transformer/LTXVideoTransformer3DModel",
    "vae/AutoencoderKLLTXVideo", "text_encoder/T5EncoderModel", NULL};

const cvx_family cvx_family_ltx = {
    .name = "LTX-Video", .classes = ltx_classes, .component_classes = ltx_components, .state_size = sizeof(ltx_state),
    .read_denoiser_config = read_tcfg, .read_vae_config = read_vcfg, .fill_info = fill_info, .parts = PARTS,
    .t5_style = &T5_STYLE, .t5_slot = offsetof(ltx_state, te), .cond_slots = cond_slots,
    .text_dim = cvx_family_t5_text_dim, .encode_texts = cvx_family_t5_encode_texts, .encode_more = encode_more,
    .encode_conditioning = ltx_encode_conditioning, .mode_rules = mode_rules, .takes_conditions = 1, .options = options,
    .check_sample = check_sample, .sample_setup = sample_setup, .lora_targets = cvx_family_lora_targets,
    .latents_out = latents_out, .decode = decode, .check_decode = check_decode, .decode_uses_generator = 1,
    .decode_options = decode_options, .gguf_rules = &ltx_gguf_rules,
};
