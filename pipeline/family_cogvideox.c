/* The CogVideoX family (CogVideoXPipeline, ...ImageToVideo, ...VideoToVideo; diffusers 0.32.2):
 * T5 v1.1 + the 226-token prompt, the CogVideoX transformer, AutoencoderKLCogVideoX — its row of
 * the family table (pipeline/family.h) and its state in the model handle. */
#include "pipeline/family_cogvideox.h"
#include "pipeline/conditioning.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "ops.h"
#include "rng_lowp.h"
#include "stage2/cogvideox_family.h"
#include "stage3/cogvideox_vae_pipeline.h"

/* T5 v1.1, no prompt cleaning, the encoder over the padding too (CogVideoXPipeline._get_t5_prompt_embeds) */
static const cvx_t5_style T5_STYLE = {.name = "T5"};
/* CogVideoX-5B in bf16 is 11 GB: the way out the memory check names */
#define SMALLER_WEIGHTS "a quantized file (--transformer cogvideox-5b-Q4_K_M.gguf), the 2B model"
/* --tiling auto tiles when an untiled decode would need more than this. */
#define AUTO_TILING_BUDGET (6.0 * 1024 * 1024 * 1024)
/* An untiled encode estimated above this is tiled (the decoder's budget). */
#define ENCODE_TILING_BUDGET (6.0 * 1024 * 1024 * 1024)

static cogvideox_state *S(const cvx_model *m) { return m->fam; }
cogvideox_state *cogvideox_state_of(cvx_model *m) { return m->family == &cvx_family_cogvideox ? m->fam : NULL; }

/* The transformer of the model directory, or its config.json with --transformer's weights (a single
 * .safetensors or a GGUF file with diffusers names). */
static void *load_tr(const cvx_component_src *c, cvx_ctx *x) {
    return c->file ? cogvideox_load_file(c->cfg, c->file, x) : cogvideox_load(c->dir, x);
}
static void free_tr(void *t) { cogvideox_free(t); }
static const cvx_component PARTS[] = {{"transformer", "--transformer", offsetof(cvx_model, transformer_file), 1,
                                       SMALLER_WEIGHTS, load_tr, free_tr, offsetof(cogvideox_state, transformer)}, {0}};

/* ---- open / close / components ---- */
/* The defaults the upstream pipeline and model cards use: 1.0 = the transformer's sample size ×
 * the VAE factor at 8 fps; 1.5 (patch_size_t) = 768×1360 at 16 fps (its config's sample size is
 * not the size it is used at). Without a transformer config the 1.5 VAE is the one with
 * invert_scale_latents. */
static void fill_info(cvx_model *m) {
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
}


static int cog_open(cvx_model *m) {
    char path[4300];
    if (m->vae_file[0])
        return cvx_error("%s: --vae %s: a single VAE file is read for Wan models; CogVideoX's VAE comes from its "
                         "diffusers directory", m->dir, m->vae_file);
    m->fam = cvx_calloc(1, sizeof(cogvideox_state));
    cvx_component_path(m, "transformer", "config.json", path, sizeof path);
    if ((m->has_denoiser_config = cvx_is_file(path)) && cogvideox_config_load(path, &S(m)->tcfg)) return -1;
    cvx_component_path(m, "vae", "config.json", path, sizeof path);
    if ((m->has_vae_config = cvx_is_file(path)) && cogvideox_vae_config_load(&S(m)->vcfg, path)) return -1;
    fill_info(m);
    return 0;
}

static void cog_close(cvx_model *m) {
    cogvideox_state *s = S(m);
    if (!s) return;
    cvx_t5_free(&s->te);
    cvx_components_free(m, PARTS);
    if (s->vae_loaded) cogvideox_vae_free(&s->vae);
    if (s->enc_loaded) cogvideox_vae_encoder_free(&s->enc);
    free(s);
    m->fam = NULL;
}

/* The VAE's decoder (enc 0) or encoder (enc 1), from vae/ (a single VAE file is refused at open). */
static int load_vae(cvx_model *m, int enc) {
    cogvideox_state *s = S(m);
    if (enc ? s->enc_loaded : s->vae_loaded) return 0;
    cvx_component_src src;
    if (cvx_component_find(m, "vae", "--vae", NULL, 0, NULL, &src) ||
        (enc ? cogvideox_vae_encoder_load(&s->enc, src.dir, m->ctx) : cogvideox_vae_load(&s->vae, src.dir, m->ctx)))
        return -1;
    *(enc ? &s->enc_loaded : &s->vae_loaded) = 1;
    return 0;
}

/* ---- stage 1: text ---- */
static int text_dim(cvx_model *m) { return cvx_t5_load(&S(m)->te, m, &T5_STYLE) ? -1 : S(m)->te.t5.cfg.d_model; }

static int encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                        cvx_progress_fn progress, void *user, float *out) {
    return cvx_t5_encode_texts(&S(m)->te, m, &T5_STYLE, texts, labels, n, L, progress, user, out);
}

/* ---- stage 1: image / video conditioning ---- */
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

/* The latent shape the transformer will run on, checking the size (and for V2V the frame
 * count) against the model as stage 2 will: the errors come before anything is encoded. */
static int shape_t2v(const void *m, const cvx_loop_params *lp, cvx_latent_shape *sh) {
    return cogvideox_latent_shape_for(&S(m)->tcfg, lp, 0, sh);
}
static int shape_i2v(const void *m, const cvx_loop_params *lp, cvx_latent_shape *sh) {
    return cogvideox_latent_shape_for(&S(m)->tcfg, lp, 1, sh);
}
static int check_size(cvx_model *m, cvx_mode mode, int frames, int height, int width) {
    cvx_latent_shape sh;
    if (cvx_check_latent_size(m, frames, height, width, mode == CVX_MODE_I2V ? shape_i2v : shape_t2v, m, &sh)) return -1;
    if (mode == CVX_MODE_V2V && sh.pad_frames)   /* upstream raises instead of padding */
        return cvx_error("--video: %d frames make %d latent frames, not a multiple of patch_size_t %d (CogVideoX1.5 "
                         "video-to-video): use %d or %d frames", frames, sh.frames - sh.pad_frames,
                         S(m)->tcfg.patch_size_t, frames - m->info.vae_scale_temporal,
                         frames + m->info.vae_scale_temporal);
    return 0;
}

static int check(cvx_model *m, const cvx_conditioning_params *p, cvx_mode mode, int H, int W) {
    if (mode == CVX_MODE_I2V && p->max_frames)
        return cvx_error("--frames %d with --image: CogVideoX encodes the image alone; give the frame count to stage 2",
                         p->max_frames);
    char tdir[4200];   /* the mode and size checks read the transformer's config (not its weights) */
    if (!m->has_denoiser_config && cvx_model_component(m->dir, "transformer", "config.json", tdir, sizeof tdir))
        return cvx_error_prefix("--%s: the model's transformer config is needed to check the mode and size",
                                p->image ? "image" : "video");
    if (H < 1 || W < 1) return cvx_error("no --height/--width given and the model has no default size");
    return mode == CVX_MODE_I2V && check_size(m, mode, m->info.frames ? m->info.frames : 1, H, W) ? -1 : 0;
}

/* encode: frame batches, tiles when an untiled encode would be large */
static int encode_vae(cvx_model *m, const cvx_conditioning_params *p, cvx_mode mode, const float *px, int F, int H,
                      int W, const char *src, cvx_progress_fn progress, void *user, cvx_conditioning *out) {
    (void)p, (void)mode;
    cogvideox_vae_encode_tiles t;
    if (load_vae(m, 1) || cogvideox_vae_encode_tiles_for(&S(m)->enc, F, H, W, ENCODE_TILING_BUDGET, &t)) return -1;
    cvx_info("encoding %s: %d frame%s %dx%d with %s/vae%s", src, F, F == 1 ? "" : "s", W, H, m->dir,
             t.tiled ? " in tiles" : "");
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae encode", t.steps, progress, user);
    cogvideox_vae_encode_dist(&S(m)->enc, &t, px, F, H, W, &out->mean, &out->std, &out->T, &out->h, &out->w, &bar);
    cvx_progress_finish(&bar);
    out->C = S(m)->enc.latent_channels;
    out->frames = F;
    return 0;
}

static const cvx_media_encoder MEDIA = {check, check_size, NULL, NULL, encode_vae};

static int encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                               cvx_conditioning *out) {
    return cvx_conditioning_encode(m, p, &MEDIA, progress, user, out);
}

/* ---- stage 2 ---- */
/* V2V: the encoder sample × vae_scaling_factor (whatever invert_scale_latents says, as upstream),
 * [C, T, hw] -> the loop's [T, C, hw] */
typedef struct {
    float k;
    int C, T;
    size_t hw;
} v2v_scale;

static void v2v_to_x0(void *user, float *sample, float *x0) {
    const v2v_scale *v = user;
    for (size_t i = 0; i < (size_t)v->C * v->T * v->hw; i++) sample[i] *= v->k;
    cvx_permute_fc_to_cf(sample, v->C, v->T, v->hw, 0, x0);
}

int cogvideox_prepare_conditioned(cvx_model *m, const cvx_conditioning *c, cvx_scheduler *sched, double strength,
                                  cvx_loop_params *sp, const cvx_latent_shape *sh, cvx_prepared *out) {
    memset(out, 0, sizeof *out);
    const size_t hw = (size_t)sh->height * sh->width, chw = (size_t)sh->channels * hw;
    if (c->C != sh->channels || c->h != sh->height || c->w != sh->width)
        return cvx_error("conditioning latents [%d, %d, %d, %d] do not fit the latent grid [%d, %d, %d] "
                         "(channels, height, width)", c->C, c->T, c->h, c->w, sh->channels, sh->height, sh->width);
    if (c->mode == CVX_MODE_I2V && c->T != 1)
        return cvx_error("image-to-video conditioning has %d latent frames, expected 1", c->T);
    if (c->mode == CVX_MODE_V2V && (c->T != sh->frames || sh->pad_frames))
        return cvx_error("video-to-video conditioning has %d latent frames, the loop %d", c->T, sh->frames);
    const double sf = m->info.vae_scaling_factor;
    if (c->mode == CVX_MODE_V2V) {
        v2v_scale v = {(float)sf, c->C, c->T, hw};
        return cvx_prepare_v2v(c, sched, strength, sh->numel, sp, &out->gen, &out->init, v2v_to_x0, &v);
    }
    /* I2V: latent_dist.sample(generator), the generator's first draws (in --noise_dtype, as the
     * pipeline's dtype draws them), × vae_scaling_factor_image (or 1 / it: invert_scale_latents,
     * 1.5), then the noise × init_noise_sigma 1.0 */
    cvx_generator_seed(&out->gen, sp->req->seed);
    if (cogvideox_i2v_latents(c->mean, c->std, chw, sh->numel, (float)(S(m)->vcfg.invert_scale_latents ? 1.0 / sf : sf),
                              &out->gen, (cvx_dtype)sp->noise_dtype, &out->image_latents, &out->init))
        return -1;
    sp->cond = out->image_latents;
    sp->init_latents = out->init;
    sp->init_generator = &out->gen;
    sp->t_start = 0;
    return 0;
}


/* CogVideoXPipeline's conditioning: the T5 embeddings [1, max_text_seq_length, text_embed_dim] */
static const cvx_cond_slot cond_slots[] = {
    {"prompt_embeds", 0, "sequence length must be the transformer's max_text_seq_length %d",
     "text_embed_dim %d of the transformer"},
    {0}};

static int cond_dims(cvx_model *m, int slot, int *L, int *D) {
    (void)slot;
    *L = S(m)->tcfg.max_text_seq_length, *D = S(m)->tcfg.text_embed_dim;
    return 0;
}

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
static int tiling_mode(const cvx_decode_params *p) {
    return p->tiling == CVX_TILING_ON ? 1 : p->tiling == CVX_TILING_OFF ? -1 : 0;
}

static int check_decode(cvx_model *m, const cvx_decode_params *p, int h, int w) {
    if (!m->has_vae_config) return 0;   /* reported by the decode, which needs the VAE */
    cogvideox_vae_decode_job job;
    return cogvideox_vae_decode_job_plan(&S(m)->vcfg, tiling_mode(p), p->tile_height, p->tile_width, 1, 1, h, w,
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
    if (load_vae(m, 0)) return -1;
    const cogvideox_vae_decoder *d = &S(m)->vae;
    if (cvx_decode_check_latents(m, "the CogVideoX VAE", "latent_channels", d->latent_channels, zin, B, C, T, h, w,
                                 label))
        return -1;
    if (d->out_channels != 3) return cvx_error("%s/vae: out_channels = %d, a video needs 3", m->dir, d->out_channels);
    cogvideox_vae_decode_job j;
    if (cogvideox_vae_decode_job_plan(d, tiling_mode(p), p->tile_height, p->tile_width, B, T, h, w, AUTO_TILING_BUDGET,
                                      p->dist, m->dir, &j))
        return -1;
    const cvx_decode_plan plan = {decode_item, &j, cogvideox_vae_decode_steps(d, T, h, w, j.tiled, j.tsh, j.tsw), 1,
                                  cogvideox_vae_output_frames(d, T), h * d->spatial_ratio, w * d->spatial_ratio,
                                  j.tiled};
    return cvx_decode_items(p, &plan, zin, B, C, T, h, w, label, progress, user, out);
}

/* The loaded transformer's linear layers, for LoRA adapters. */
static int lora_targets(cvx_model *m, cvx_lora_target **out) {
    if (cvx_component_load(m, PARTS, "transformer")) return -1;
    return cogvideox_lora_targets(S(m)->transformer, out);
}

static const char *const cog_classes[] = {"CogVideoXPipeline", "CogVideoXImageToVideoPipeline",
                                          "CogVideoXVideoToVideoPipeline", NULL};
static const char *const cog_components[] = {"transformer/CogVideoXTransformer3DModel",
    "vae/AutoencoderKLCogVideoX", "text_encoder/T5EncoderModel", NULL};

const cvx_family cvx_family_cogvideox = {
    .name = "CogVideoX", .classes = cog_classes, .component_classes = cog_components,
    .open = cog_open, .close = cog_close,
    .cond_slots = cond_slots, .cond_dims = cond_dims, .text_dim = text_dim, .encode_texts = encode_texts, .encode_conditioning = encode_conditioning,
    .mode_rules = mode_rules, .mode_kind = mode_kind, .options = options, .check_sample = check_sample,
    .sample_setup = sample_setup, .lora_targets = lora_targets, .latents_out = latents_out, .decode = decode,
    .check_decode = check_decode, .gguf_rules = &cogvideox_gguf_rules,
};
