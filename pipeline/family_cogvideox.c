/* The CogVideoX family (CogVideoXPipeline, ...ImageToVideo, ...VideoToVideo; diffusers 0.32.2):
 * T5 v1.1 + the 226-token prompt, the CogVideoX transformer, AutoencoderKLCogVideoX — its row of
 * the family table (pipeline/family.h) and its state in the model handle. */
#include "pipeline/family_cogvideox.h"
#include "pipeline/conditioning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "fileio.h"
#include "image.h"
#include "ops.h"
#include "resize.h"
#include "rng_lowp.h"
#include "validate.h"
#include "stage2/cache.h"
#include "stage2/cogvideox_family.h"

#define MAX_BATCH 4   /* sequences per encoder pass: the widened weights serve them all */
/* --tiling auto tiles when an untiled decode would need more than this. */
#define AUTO_TILING_BUDGET (6.0 * 1024 * 1024 * 1024)
/* An untiled encode estimated above this is tiled (the decoder's budget). */
#define ENCODE_TILING_BUDGET (6.0 * 1024 * 1024 * 1024)

static cogvideox_state *S(const cvx_model *m) { return m->fam; }
cogvideox_state *cogvideox_state_of(cvx_model *m) { return m->family == &cvx_family_cogvideox ? m->fam : NULL; }

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
    snprintf(path, sizeof path, "%s/transformer/config.json", m->dir);
    if ((m->has_denoiser_config = cvx_is_file(path)) && cogvideox_config_load(path, &S(m)->tcfg)) return -1;
    snprintf(path, sizeof path, "%s/vae/config.json", m->dir);
    if ((m->has_vae_config = cvx_is_file(path)) && cogvideox_vae_config_load(&S(m)->vcfg, path)) return -1;
    fill_info(m);
    return 0;
}

static void cog_close(cvx_model *m) {
    cogvideox_state *s = S(m);
    if (!s) return;
    if (s->t5_loaded) {
        t5_free(&s->t5);
        t5_tokenizer_free(&s->tok);
    }
    cogvideox_free(s->transformer);
    if (s->vae_loaded) cogvideox_vae_free(&s->vae);
    if (s->enc_loaded) cogvideox_vae_encoder_free(&s->enc);
    free(s);
    m->fam = NULL;
}

static int load_t5(cvx_model *m) {
    if (S(m)->t5_loaded) return 0;
    char tok_dir[4200], te_dir[4200];
    if (cvx_model_component(m->dir, "tokenizer", "spiece.model", tok_dir, sizeof tok_dir) ||
        cvx_model_component(m->dir, "text_encoder", "config.json", te_dir, sizeof te_dir))
        return -1;
    if (t5_tokenizer_load(&S(m)->tok, tok_dir)) return -1;
    char cfg[4300];
    snprintf(cfg, sizeof cfg, "%s/config.json", te_dir);
    if (m->text_encoder_file[0] ? t5_build_file(&S(m)->t5, m->text_encoder_file, cfg, m->ctx)
                                : t5_build(&S(m)->t5, te_dir, m->ctx)) {
        t5_tokenizer_free(&S(m)->tok);
        return -1;
    }
    S(m)->t5_loaded = 1;
    const t5_config *c = &S(m)->t5.cfg;
    cvx_info("T5 encoder: %d layers, d_model %d, %d heads x %d, d_ff %d (%s)", c->num_layers, c->d_model,
             c->num_heads, c->d_kv, c->d_ff, cvx_weights_path(S(m)->t5.weights));
    return 0;
}

/* The transformer of the model directory, or its config.json with --transformer's weights (a single
 * .safetensors or a GGUF file with diffusers names). */
static int load_transformer(cvx_model *m) {
    if (S(m)->transformer) return 0;
    char dir[4200], cfg[4300];
    if (cvx_model_component(m->dir, "transformer", "config.json", dir, sizeof dir)) return -1;
    if (m->transformer_file[0]) {
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        S(m)->transformer = cogvideox_load_file(cfg, m->transformer_file, m->ctx);
    } else {
        S(m)->transformer = cogvideox_load(dir, m->ctx);
    }
    return S(m)->transformer ? 0 : -1;
}

static int load_vae(cvx_model *m) {
    if (S(m)->vae_loaded) return 0;
    char dir[4200];
    if (cvx_model_component(m->dir, "vae", "config.json", dir, sizeof dir)) return -1;
    if (cogvideox_vae_load(&S(m)->vae, dir, m->ctx)) return -1;
    S(m)->vae_loaded = 1;
    return 0;
}


/* ---- stage 1: text ---- */
static int text_dim(cvx_model *m) { return load_t5(m) ? -1 : S(m)->t5.cfg.d_model; }

/* ids [L] of one text, padded/truncated as upstream; a warning names `label` when truncated. */
static int tokenize(const t5_tokenizer *tok, const char *text, int L, int64_t *ids, const char *label) {
    int64_t *mask = cvx_malloc((size_t)L * sizeof *mask);
    int n_raw, at_least;
    int rc = t5_tokenize_counted(tok, text, L, ids, mask, &n_raw, &at_least);
    free(mask);
    if (rc) return -1;
    t5_report_length(label, n_raw, at_least, L);
    return 0;
}

static int encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                     cvx_progress_fn progress, void *user, float *out) {
    if (load_t5(m)) return -1;
    const int D = S(m)->t5.cfg.d_model, n_batches = (n + MAX_BATCH - 1) / MAX_BATCH;
    int64_t *ids = cvx_malloc((size_t)MAX_BATCH * L * sizeof *ids);
    cvx_progress bar;
    cvx_progress_begin(&bar, "T5 layers", n_batches * S(m)->t5.cfg.num_layers, progress, user);
    int rc = -1;
    for (int s0 = 0; s0 < n; s0 += MAX_BATCH) {
        const int nb = n - s0 < MAX_BATCH ? n - s0 : MAX_BATCH;
        for (int b = 0; b < nb; b++)
            if (tokenize(&S(m)->tok, texts[s0 + b], L, ids + (size_t)b * L, labels ? labels[s0 + b] : NULL)) goto done;
        if (t5_encode(&S(m)->t5, ids, nb, L, out + (size_t)s0 * L * D, &bar)) goto done;   // [nb, L, D]
        /* a NaN here (a damaged weight) would only surface later, as a NaN video */
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
    return rc;
}


/* ---- stage 1: image / video conditioning ---- */
static int load_vae_encoder(cvx_model *m) {
    if (S(m)->enc_loaded) return 0;
    char dir[4200];
    if (cvx_model_component(m->dir, "vae", "config.json", dir, sizeof dir)) return -1;
    if (cogvideox_vae_encoder_load(&S(m)->enc, dir, m->ctx)) return -1;
    S(m)->enc_loaded = 1;
    return 0;
}

static int check_mode(cvx_model *m, cvx_mode mode) {
    if (!m->has_denoiser_config) return 0;   /* reported by the call that needs the transformer */
    const cogvideox_config *c = &S(m)->tcfg;
    const int i2v_model = c->in_channels == 2 * c->out_channels;
    if (mode == CVX_MODE_I2V && !i2v_model)
        return cvx_error("--image: %s/transformer is a text-to-video model (in_channels %d = out_channels): "
                         "image-to-video needs an I2V checkpoint (CogVideoX-5b-I2V, CogVideoX1.5-5B-I2V)",
                         m->dir, c->in_channels);
    if (mode == CVX_MODE_V2V && i2v_model)
        return cvx_error("--video: %s/transformer is an image-to-video model (in_channels %d = 2 × %d): "
                         "video-to-video runs on text-to-video checkpoints (CogVideoX-2b, -5b, 1.5-5B)",
                         m->dir, c->in_channels, c->out_channels);
    if (mode == CVX_MODE_T2V && i2v_model)
        return cvx_error("%s/transformer is an image-to-video model (in_channels %d = 2 × %d): give stage 1 an "
                         "--image", m->dir, c->in_channels, c->out_channels);
    return 0;
}

/* The latent shape the transformer will run on, checking the size (and for V2V the frame
 * count) against the model as stage 2 will: the errors come before anything is encoded. */
static int check_size(cvx_model *m, cvx_mode mode, int frames, int height, int width) {
    if (!m->has_denoiser_config) return 0;
    cvx_loop_request req = {.frames = frames, .height = height, .width = width, .num_inference_steps = 1};
    cvx_loop_params sp = {.req = &req, .vae_scale_spatial = m->info.vae_scale_spatial,
                          .vae_scale_temporal = m->info.vae_scale_temporal};
    cvx_latent_shape sh;
    if (cogvideox_latent_shape_for(&S(m)->tcfg, &sp, mode == CVX_MODE_I2V, &sh)) return -1;
    if (mode == CVX_MODE_V2V && sh.pad_frames)   /* upstream raises instead of padding */
        return cvx_error("--video: %d frames make %d latent frames, not a multiple of patch_size_t %d (CogVideoX1.5 "
                         "video-to-video): use %d or %d frames", frames, sh.frames - sh.pad_frames,
                         S(m)->tcfg.patch_size_t, frames - m->info.vae_scale_temporal,
                         frames + m->info.vae_scale_temporal);
    return 0;
}

static int encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                            cvx_conditioning *out) {
    memset(out, 0, sizeof *out);
    if (!p->image == !p->video) return cvx_error("give exactly one of an image (I2V) and a video (V2V)");
    const cvx_mode mode = p->image ? CVX_MODE_I2V : CVX_MODE_V2V;
    if (mode == CVX_MODE_I2V && p->max_frames)
        return cvx_error("--frames %d with --image: CogVideoX encodes the image alone; give the frame count to stage 2",
                         p->max_frames);
    char tdir[4200];   /* the mode and size checks read the transformer's config (not its weights) */
    if (!m->has_denoiser_config && cvx_model_component(m->dir, "transformer", "config.json", tdir, sizeof tdir))
        return cvx_error_prefix("--%s: the model's transformer config is needed to check the mode and size",
                                p->image ? "image" : "video");
    const int H = p->height ? p->height : m->info.height, W = p->width ? p->width : m->info.width;
    if (H < 1 || W < 1) return cvx_error("no --height/--width given and the model has no default size");
    if (check_mode(m, mode)) return -1;
    if (mode == CVX_MODE_I2V && check_size(m, mode, m->info.frames ? m->info.frames : 1, H, W)) return -1;

    /* decode: RGB8 frames */
    cvx_rgb_frames rgb;
    if (mode == CVX_MODE_I2V ? cvx_image_load(p->image, &rgb) : cvx_video_load(p->video, p->max_frames, &rgb))
        return -1;
    const char *src = p->image ? p->image : p->video;
    int rc = -1;
    float *px = NULL, *moments = NULL;
    if (rgb.frames < 1) {
        cvx_error("%s: no frames", src);
        goto done;
    }
    if (mode == CVX_MODE_V2V && check_size(m, mode, rgb.frames, H, W)) {
        cvx_error_prefix("%s (%d frames)", src, rgb.frames);
        goto done;
    }
    const int F = rgb.frames;
    if (rgb.width != W || rgb.height != H)
        cvx_info("%s: %dx%d resized to %dx%d (LANCZOS, as upstream)", src, rgb.width, rgb.height, W, H);
    px = cvx_alloc_f32((size_t)3 * F * H * W);   // [3, F, H, W] in [-1, 1]
    cvx_preprocess_frames(rgb.rgb, F, rgb.width, rgb.height, W, H, px);

    /* encode: frame batches, tiles when an untiled encode would be large */
    if (load_vae_encoder(m)) goto done;
    const cogvideox_vae_encoder *e = &S(m)->enc;
    const int lc = e->latent_channels, tsh = e->sample_height / 2, tsw = e->sample_width / 2;
    const double peak = cogvideox_vae_encode_estimate_peak_bytes(e, F, H, W);
    const int tiled = cogvideox_vae_encode_tiling_applies(e, H, W, tsh, tsw) && peak > ENCODE_TILING_BUDGET;
    if (tiled && cogvideox_vae_encode_tiling_check(e, tsh, tsw)) goto done;
    cvx_info("encoding %s: %d frame%s %dx%d with %s/vae%s", src, F, F == 1 ? "" : "s", W, H, m->dir,
             tiled ? " in tiles" : "");
    int T, h, w;
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae encode", cogvideox_vae_encode_steps(e, F, H, W, tiled, tsh, tsw), progress, user);
    if (tiled) {
        moments = cogvideox_vae_encode_tiled(e, px, F, H, W, tsh, tsw, &T, &h, &w, &bar);   // [2·lc, T, h, w]
    } else {
        T = cogvideox_vae_encoded_frames(e, F), h = cogvideox_vae_encoded_size(e, H), w = cogvideox_vae_encoded_size(e, W);
        moments = cvx_alloc_f32((size_t)2 * lc * T * h * w);                    // [2·lc, T, h, w]
        cogvideox_vae_encode_batched(e, px, F, H, W, moments, &bar);
    }
    cvx_progress_finish(&bar);
    const size_t S = (size_t)T * h * w;
    out->mode = mode;
    out->C = lc, out->T = T, out->h = h, out->w = w;
    out->frames = F, out->height = H, out->width = W;
    out->mean = cvx_alloc_f32((size_t)lc * S);   // [lc, T, h, w]
    out->std = cvx_alloc_f32((size_t)lc * S);
    vae_latent_dist(moments, lc, S, out->mean, NULL, out->std);
    rc = 0;
done:
    free(px);
    free(moments);
    cvx_rgb_frames_free(&rgb);
    return rc;
}


/* ---- stage 2 ---- */
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
    int t_start = 0;
    if (c->mode == CVX_MODE_V2V) {
        if (cvx_strength_t_start(sp->req->num_inference_steps, strength, &t_start) ||
            cvx_scheduler_set_timesteps(sched, sp->req->num_inference_steps))
            return -1;
    }
    /* latent_dist.sample(generator) in the encoder's [C, T, h, w] order: the generator's first
     * draws. A pipeline loaded in bf16/fp16 draws this randn and the noise below in its dtype
     * (the VAE's parameters.dtype, randn_tensor(dtype=prompt_embeds.dtype)): --noise_dtype, as T2V */
    const cvx_dtype nd = (cvx_dtype)sp->noise_dtype;
    const size_t nc = (size_t)c->C * c->T * hw;
    float *sample = cvx_alloc_f32(nc);
    cvx_generator_seed(&out->gen, sp->req->seed);
    if (vae_latent_sample_as(c->mean, c->std, nc, &out->gen, nd, sample)) {
        free(sample);
        return -1;
    }
    const double sf = m->info.vae_scaling_factor;
    out->init = cvx_alloc_f32(sh->numel);   // [F, C, h, w]
    if (c->mode == CVX_MODE_I2V) {
        /* vae_scaling_factor_image · x, or 1 / it · x (invert_scale_latents, 1.5): a python
         * float times a float32 tensor, the scalar rounded to float32 */
        const float k = (float)(S(m)->vcfg.invert_scale_latents ? 1.0 / sf : sf);
        out->image_latents = cvx_calloc(sh->numel, sizeof(float));   // [F, C, h, w]: frame 0, then zeros
        for (size_t i = 0; i < chw; i++) out->image_latents[i] = k * sample[i];
        cvx_randn_as(&out->gen, nd, out->init, sh->numel);   /* the noise, × init_noise_sigma 1.0 */
        sp->cond = out->image_latents;
    } else {
        const float k = (float)sf;   /* V2V multiplies whatever invert_scale_latents says (upstream) */
        float *x0 = cvx_alloc_f32(sh->numel), *noise = cvx_alloc_f32(sh->numel);
        for (size_t i = 0; i < nc; i++) sample[i] *= k;
        cvx_permute_fc_to_cf(sample, c->C, c->T, hw, 0, x0);   // [C, T, hw] -> [T, C, hw]
        cvx_randn_as(&out->gen, nd, noise, sh->numel);   /* nd was accepted by the sample draw above */
        sched->type->add_noise(sched, t_start, x0, noise, sh->numel, out->init);
        cvx_info("video-to-video: strength %g runs %d of %d steps from t=%g", strength,
                 sp->req->num_inference_steps - t_start, sp->req->num_inference_steps, sched->timesteps[t_start]);
        free(x0);
        free(noise);
    }
    free(sample);
    sp->init_latents = out->init;
    sp->init_generator = &out->gen;
    sp->t_start = t_start;
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
    if (load_transformer(m)) return -1;
    const cogvideox_config *c = &S(m)->tcfg;
    cvx_loop_params *sp = &run->loop;   /* the request and the pipeline's part filled in */
    const int i2v = p->conditioning && p->conditioning->mode == CVX_MODE_I2V;
    if (p->teacache_coefficients) memcpy(sp->teacache_coefficients, p->teacache_coefficients, sizeof(double) * 5);
    else cogvideox_teacache_coefficients(c, sp->teacache_coefficients);
    cvx_latent_shape *sh = &run->shape;
    if (cogvideox_latent_shape_for(c, sp, i2v, sh)) return -1;
    cvx_info("CogVideoX transformer: %d layers, %d heads x %d, %s; %s scheduler, %d steps, guidance %g%s, seed %llu",
             c->num_layers, c->num_attention_heads, c->attention_head_dim,
             c->use_rotary_positional_embeddings ? "rotary" : "sin-cos", sched->type->name, p->num_inference_steps,
             p->guidance_scale, p->use_dynamic_cfg ? " (dynamic)" : "", (unsigned long long)p->seed);
    /* the layout stage2_latents.safetensors has: [1, C, T, h, w] (the loop runs [T, C, h, w]) */
    cvx_info("video %d frames %dx%d -> latents [1, %d, %d, %d, %d]%s", p->frames, p->width, p->height, sh->channels,
             sh->frames - sh->pad_frames, sh->height, sh->width,
             sh->pad_frames ? " (the loop runs 1 padding frame more)" : "");
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
/* The tiling of a decode of h×w latents: *tiled and the tile size in samples; `why` says why a
 * decode stays untiled (for the log line). -1 + cvx_error for tile sizes that cannot give the
 * frame size (upstream's stitching makes a larger or smaller video, issue 21). */
static int plan_tiling(const cogvideox_vae_decoder *d, const cvx_decode_params *p, int h, int w, int *tiled, int *tsh,
                       int *tsw, char *why, size_t n) {
    *tsh = p->tile_height ? p->tile_height : d->sample_height / 2;
    *tsw = p->tile_width ? p->tile_width : d->sample_width / 2;
    const int applies = cogvideox_vae_tiling_applies(d, h, w, *tsh, *tsw);
    const double peak = cogvideox_vae_estimate_peak_bytes(d, h, w) / 1e9;
    *tiled = p->tiling != CVX_TILING_OFF && applies &&
             (p->tiling == CVX_TILING_ON || cogvideox_vae_estimate_peak_bytes(d, h, w) > AUTO_TILING_BUDGET);
    if (p->tiling == CVX_TILING_OFF)
        snprintf(why, n, "untiled: --tiling off; ~%.1f GB estimated peak", peak);
    else if (!applies)
        snprintf(why, n, "untiled: the latents fit in one tile of %dx%d samples; ~%.1f GB estimated peak", *tsw, *tsh,
                 peak);
    else if (!*tiled)
        snprintf(why, n, "untiled: ~%.1f GB estimated peak, under the %.0f GB above which --tiling auto tiles", peak,
                 AUTO_TILING_BUDGET / 1e9);
    else
        why[0] = 0;
    return *tiled && (cogvideox_vae_tiling_check(d, *tsh, *tsw) || cogvideox_vae_tiling_check_size(d, h, w, *tsh, *tsw)) ? -1 : 0;
}

static int check_decode(cvx_model *m, const cvx_decode_params *p, int h, int w) {
    if (!m->has_vae_config) return 0;   /* reported by the decode, which needs the VAE */
    int tiled, tsh, tsw;
    char why[160];
    return plan_tiling(&S(m)->vcfg, p, h, w, &tiled, &tsh, &tsw, why, sizeof why);
}

static int decode(cvx_model *m, const cvx_decode_params *p, const float *zin, int B, int C, int T, int h, int w,
               const char *label, cvx_progress_fn progress, void *user, cvx_frames *out) {
    if (load_vae(m)) return -1;
    const cogvideox_vae_decoder *d = &S(m)->vae;
    if (C != d->latent_channels)
        return cvx_error("%s: tensor 'latents' has %d channels (dim 1 of [B, C, T, H, W]), the VAE in %s expects "
                         "latent_channels = %d", label, C, m->dir, d->latent_channels);
    if (B < 1 || T < 1 || h < 1 || w < 1) return cvx_error("%s: tensor 'latents' has an empty shape", label);
    if (d->out_channels != 3) return cvx_error("%s/vae: out_channels = %d, a video needs 3", m->dir, d->out_channels);

    /* tiling */
    int tiled, tsh, tsw;
    char why[160];
    if (plan_tiling(d, p, h, w, &tiled, &tsh, &tsw, why, sizeof why)) return -1;
    if (tiled)
        cvx_info("decoding latents [%d, %d, %d, %d, %d] with %s/vae in tiles of %dx%d samples", B, C, T, h, w, m->dir,
                 tsw, tsh);
    else
        cvx_info("decoding latents [%d, %d, %d, %d, %d] with %s/vae (%s)", B, C, T, h, w, m->dir, why);

    /* 1 / scaling_factor * latents, as upstream. A NaN/Inf (a diverged run, a damaged file) is an
     * error naming the index, not a video of NaNs (issue 14) */
    const size_t n = (size_t)B * C * T * h * w;
    if (cvx_check_finite(zin, n, "latents")) return cvx_error_prefix("%s", label);
    float *z = cvx_alloc_f32(n);   // [B, C, T, h, w]
    const float scale = (float)(1.0 / d->scaling_factor);
    for (size_t i = 0; i < n; i++) z[i] = zin[i] * scale;

    const int To = cogvideox_vae_output_frames(d, T);
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae decode", B * cogvideox_vae_decode_steps(d, T, h, w, tiled, tsh, tsw), progress, user);
    out->B = B, out->T = To, out->H = h * d->spatial_ratio, out->W = w * d->spatial_ratio, out->tiled = tiled;
    out->data = cvx_calloc((size_t)B, sizeof *out->data);
    /* several ranks: tiles spread over them; an untiled decode is rank 0's alone */
    const int ranks = p->dist ? cvx_dist_size(p->dist) : 1, root = !p->dist || cvx_dist_rank(p->dist) == 0;
    if (ranks > 1 && !tiled) cvx_info("untiled decode: rank 0 decodes alone (tiles are what ranks share)");
    for (int b = 0; b < B; b++) {
        const float *zb = z + (size_t)b * C * T * h * w;   // [C, T, h, w]
        if (tiled) {
            int To2, H2, W2;
            out->data[b] = cogvideox_vae_decode_tiled_dist(d, zb, T, h, w, tsh, tsw, p->dist, &To2, &H2, &W2, &bar);
            if (root) out->T = To2, out->H = H2, out->W = W2;
        } else if (!root) {
            out->data[b] = NULL;
        } else {
            out->data[b] = cvx_alloc_f32((size_t)d->out_channels * To * out->H * out->W);   // [3, To, Ho, Wo]
            cogvideox_vae_decode_chunked(d, zb, T, h, w, out->data[b], &bar);
        }
    }
    cvx_progress_finish(&bar);
    free(z);
    /* finite latents can still overflow in a damaged VAE: never encode NaN frames */
    for (int b = 0; b < B && root; b++)   /* ranks > 0 hold no frames (rank 0 gathered the tiles) */
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
    .check_mode = check_mode, .options = options, .check_sample = check_sample,
    .sample_setup = sample_setup, .lora_targets = lora_targets, .latents_out = latents_out, .decode = decode,
    .check_decode = check_decode, .gguf_rules = &cogvideox_gguf_rules,
};
