/* The LTX-Video family (LTXPipeline; diffusers 0.35.2): T5 (128 tokens, the encoder without the
 * mask, the mask to the transformer's cross-attention), LTXVideoTransformer3DModel,
 * AutoencoderKLLTXVideo (0.9.0 and the timestep-conditioned 0.9.5+ decoder) — its row of the
 * family table (pipeline/family.h). The schedule is the "ltx" scheduler (stage2/scheduler_ltx.h). */
#include "pipeline/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "fileio.h"
#include "image.h"
#include "resize.h"
#include "rng.h"
#include "rng_lowp.h"
#include "validate.h"
#include "stage1/t5.h"
#include "stage1/t5_tokenizer.h"
#include "stage2/ltx.h"
#include "stage2/ltx_family.h"
#include "stage2/ltx_pack.h"
#include "stage2/scheduler_ltx.h"
#include "stage3/latent_dist.h"
#include "stage3/ltx_vae.h"

#define MAX_BATCH 4            /* sequences per encoder pass */
#define TEXT_LEN 128           /* LTXPipeline's max_sequence_length */
#define DEFAULT_GUIDANCE 3.0   /* LTXPipeline.__call__'s guidance_scale */
#define FRAME_RATE 25          /* LTXPipeline.__call__'s frame_rate (the rotary temporal scale) */
/* the model cards' decode settings of the timestep-conditioned (0.9.5+) VAE */
#define DEFAULT_DECODE_TIMESTEP 0.05
#define DEFAULT_DECODE_NOISE_SCALE 0.025

typedef struct {
    ltx_config tcfg;           /* transformer/config.json (when m->has_denoiser_config) */
    ltx_vae_config vcfg;       /* vae/config.json (when m->has_vae_config) */
    int t5_loaded;
    t5_tokenizer tok;
    t5_model t5;
    ltx_transformer *transformer;
    ltx_vae *vae;
} ltx_state;

static ltx_state *S(const cvx_model *m) { return m->fam; }

/* ---- open / close ---- */
/* LTXPipeline's defaults: 161 frames of 512×704 at 25 fps, guidance 3. */
static int ltx_open(cvx_model *m) {
    char path[4300];
    m->fam = cvx_calloc(1, sizeof(ltx_state));
    cvx_component_path(m, "transformer", "config.json", path, sizeof path);
    if ((m->has_denoiser_config = cvx_is_file(path)) && ltx_config_load(path, &S(m)->tcfg)) return -1;
    cvx_component_path(m, "vae", "config.json", path, sizeof path);
    if ((m->has_vae_config = cvx_is_file(path)) && ltx_vae_config_load(path, &S(m)->vcfg)) return -1;
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

static void ltx_close(cvx_model *m) {
    ltx_state *s = S(m);
    if (!s) return;
    if (s->t5_loaded) {
        t5_free(&s->t5);
        t5_tokenizer_free(&s->tok);
    }
    ltx_free(s->transformer);
    ltx_vae_free(s->vae);
    free(s);
    m->fam = NULL;
}

static int load_text_encoder(cvx_model *m) {
    ltx_state *s = S(m);
    if (s->t5_loaded) return 0;
    char tok_dir[4200], te_dir[4200];
    if (cvx_model_component(m->dir, "tokenizer", "spiece.model", tok_dir, sizeof tok_dir)) return -1;
    if (t5_tokenizer_load(&s->tok, tok_dir)) return -1;
    if (cvx_model_component(m->dir, "text_encoder", "config.json", te_dir, sizeof te_dir) ||
        t5_build(&s->t5, te_dir, m->ctx)) {
        t5_tokenizer_free(&s->tok);
        return -1;
    }
    s->t5_loaded = 1;
    return 0;
}

static int load_transformer(cvx_model *m) {
    ltx_state *s = S(m);
    if (s->transformer) return 0;
    char dir[4200];
    if (cvx_model_component(m->dir, "transformer", "config.json", dir, sizeof dir)) return -1;
    if (m->transformer_file[0]) {   /* a single file (the original LTX-Video one too) with the directory's config */
        char cfg[4300];
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        s->transformer = ltx_load_file(cfg, m->transformer_file, m->ctx);
    } else {
        s->transformer = ltx_load(dir, m->ctx);
    }
    return s->transformer ? 0 : -1;
}

static int load_vae(cvx_model *m) {
    ltx_state *s = S(m);
    if (s->vae) return 0;
    char dir[4200];
    if (cvx_model_component(m->dir, "vae", "config.json", dir, sizeof dir)) return -1;
    if (m->vae_file[0]) {   /* a single file: the original LTX-Video one may be the --transformer file too */
        char cfg[4300];
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        s->vae = ltx_vae_load_file(cfg, m->vae_file, m->ctx);
    } else {
        s->vae = ltx_vae_load(dir, m->ctx);
    }
    return s->vae ? 0 : -1;
}

/* ---- stage 1 ---- */
static int text_dim(cvx_model *m) { return load_text_encoder(m) ? -1 : S(m)->t5.cfg.d_model; }

/* texts[i] -> ids [L] and the mask [L] (padding max_length, truncation; no prompt cleaning) */
static int tokenize(cvx_model *m, const char *text, const char *label, int L, int64_t *ids, int64_t *mask) {
    int n_raw, at_least;
    if (t5_tokenize_counted(&S(m)->tok, text, L, ids, mask, &n_raw, &at_least)) return -1;
    if (n_raw > L) t5_report_length(label ? label : "a text", n_raw, at_least, L);
    return 0;
}

/* LTXPipeline._get_t5_prompt_embeds: the encoder runs without the attention mask (padding rows
 * are ordinary encoder outputs). */
static int encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                        cvx_progress_fn progress, void *user, float *out) {
    if (load_text_encoder(m)) return -1;
    ltx_state *s = S(m);
    const int D = s->t5.cfg.d_model, n_batches = (n + MAX_BATCH - 1) / MAX_BATCH;
    int64_t *ids = cvx_malloc((size_t)MAX_BATCH * L * sizeof *ids), *mask = cvx_malloc((size_t)L * sizeof *mask);
    cvx_progress bar;
    cvx_progress_begin(&bar, "T5 layers", n_batches * s->t5.cfg.num_layers, progress, user);
    int rc = -1;
    for (int s0 = 0; s0 < n; s0 += MAX_BATCH) {
        const int nb = n - s0 < MAX_BATCH ? n - s0 : MAX_BATCH;
        for (int b = 0; b < nb; b++)
            if (tokenize(m, texts[s0 + b], labels ? labels[s0 + b] : NULL, L, ids + (size_t)b * L, mask)) goto done;
        if (t5_encode(&s->t5, ids, nb, L, out + (size_t)s0 * L * D, &bar)) goto done;
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

/* prompt_attention_mask [n, L] (0/1 floats): the tokenizer's mask, for the cross-attention */
static int encode_more(cvx_model *m, const char *const *texts, const char *const *labels, int n,
                       cvx_progress_fn progress, void *user, cvx_cond_set *out) {
    (void)progress, (void)user;
    if (load_text_encoder(m)) return -1;
    const int L = TEXT_LEN;
    int64_t *ids = cvx_malloc((size_t)L * sizeof *ids), *mask = cvx_malloc((size_t)L * sizeof *mask);
    float *f = cvx_alloc_f32((size_t)n * L);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = tokenize(m, texts[i], labels ? labels[i] : NULL, L, ids, mask);
        for (int k = 0; k < L && !rc; k++) f[(size_t)i * L + k] = (float)mask[k];
    }
    free(ids);
    free(mask);
    if (rc) {
        free(f);
        return -1;
    }
    out->n = 1;
    out->t[0] = (cvx_cond_tensor){.name = "prompt_attention_mask", .prompt = f, .L = L, .D = 1, .is_mask = 1};
    return 0;
}

static int check_mode(cvx_model *m, cvx_mode mode) {
    (void)m;
    if (mode == CVX_MODE_V2V) return cvx_error("LTX-Video: video-to-video is not wired (text- and image-to-video)");
    return 0;
}

/* LTXImageToVideoPipeline.prepare_latents' encoder half: the image resized to the video size,
 * [-1, 1], vae.encode(image[:, :, None]).latent_dist (mean, std; stage 2 draws the sample). */
static int encode_conditioning(cvx_model *m, const cvx_conditioning_params *p, cvx_progress_fn progress, void *user,
                               cvx_conditioning *out) {
    (void)progress, (void)user;
    if (!p->image || p->video) return cvx_error("LTX-Video conditioning: give an image (image-to-video)");
    const int H = p->height ? p->height : m->info.height, W = p->width ? p->width : m->info.width;
    int F, h, w;
    if (ltx_latent_grid(1, H, W, &F, &h, &w)) return -1;
    cvx_rgb_frames rgb;
    if (cvx_image_load(p->image, &rgb)) return -1;
    int rc = -1;
    float *px = NULL, *moments = NULL, *logvar = NULL;
    if (rgb.frames < 1) {
        cvx_error("%s: no frames", p->image);
        goto done;
    }
    if (rgb.width != W || rgb.height != H)
        cvx_info("%s: %dx%d resized to %dx%d (LANCZOS, as upstream)", p->image, rgb.width, rgb.height, W, H);
    px = cvx_alloc_f32((size_t)3 * H * W);
    cvx_preprocess_image(rgb.rgb, rgb.width, rgb.height, W, H, px);
    if (load_vae(m)) goto done;
    const int C = ltx_vae_get_config(S(m)->vae)->latent_channels;
    const size_t hw = (size_t)h * w;
    moments = cvx_alloc_f32(2 * C * hw);
    cvx_info("encoding %s: %dx%d with the LTX VAE", p->image, W, H);
    if (ltx_vae_encode(S(m)->vae, px, 1, H, W, moments)) goto done;
    out->mean = cvx_alloc_f32(C * hw), out->std = cvx_alloc_f32(C * hw), logvar = cvx_alloc_f32(C * hw);
    vae_latent_dist(moments, C, hw, out->mean, logvar, out->std);
    out->mode = CVX_MODE_I2V;
    out->C = C, out->T = 1, out->h = h, out->w = w;
    out->frames = 1, out->height = H, out->width = W;
    rc = 0;
done:
    if (rc) cvx_conditioning_free(out);
    free(px), free(moments), free(logvar);
    cvx_rgb_frames_free(&rgb);
    return rc;
}

/* ---- stage 2 ---- */
static const cvx_cond_slot cond_slots[] = {
    {"prompt_embeds", 0, "LTXPipeline's max_sequence_length %d", "caption_channels %d of the LTX transformer"},
    {"prompt_attention_mask", 1, "LTXPipeline's max_sequence_length %d", "%d"},
    {0}};

static int cond_dims(cvx_model *m, int slot, int *L, int *D) {
    *L = TEXT_LEN, *D = slot ? 1 : S(m)->tcfg.caption_channels;
    return 0;
}

static const char *const options[] = {"--guidance_rescale", NULL};

static int check_sample(cvx_model *m, const cvx_sample_params *r) {
    (void)m;
    if (r->sp_dist && cvx_dist_size(r->sp_dist) > 1) return cvx_error("--sp: not wired for LTX-Video");
    if (strcmp(r->cache, "none") != 0) return cvx_error("--cache %s: step caching is not wired for LTX-Video", r->cache);
    if (r->scheduler && strcmp(r->scheduler, cvx_scheduler_ltx.name) != 0)
        return cvx_error("--scheduler %s: LTX-Video runs its own schedule (ltx)", r->scheduler);
    return 0;
}

typedef struct {
    ltx_text_cond cond[2];   /* [0] negative, [1] prompt */
    float *t_scale;          /* I2V: [S] 0 on latent frame 0's tokens, 1 elsewhere */
} ltx_run;

static void ltx_run_free(void *p) {
    ltx_run *r = p;
    if (r) free(r->t_scale);
    free(r);
}

/* LTXImageToVideoPipeline.prepare_latents: the image latent (latent_dist.sample, the generator's
 * first draw; normalised) in latent frame 0, the noise (the second draw) elsewhere; the steps
 * leave frame 0 and its tokens get timestep 0. */
static int prepare_i2v(cvx_model *m, const cvx_conditioning *c, cvx_scheduler *sched, cvx_sample_run *run) {
    const cvx_latent_shape *sh = &run->shape;
    const int C = sh->channels;
    const size_t hw = (size_t)sh->height * sh->width, fhw = hw * sh->frames;
    if (c->C != C || c->T != 1 || c->h != sh->height || c->w != sh->width)
        return cvx_error("image-to-video conditioning latents [%d, %d, %d, %d] do not fit [%d, 1, %d, %d]", c->C, c->T,
                         c->h, c->w, C, sh->height, sh->width);
    if (load_vae(m)) return -1;
    const cvx_dtype nd = (cvx_dtype)run->loop.noise_dtype;
    float *img = cvx_alloc_f32((size_t)C * hw), *noise = cvx_alloc_f32(sh->numel);
    cvx_generator_seed(&run->gen, run->loop.req->seed);
    int rc = vae_latent_sample_as(c->mean, c->std, (size_t)C * hw, &run->gen, nd, img);
    if (!rc) rc = cvx_randn_as(&run->gen, nd, noise, sh->numel);
    if (!rc) {
        const ltx_vae *v = S(m)->vae;
        ltx_normalize_latents(img, 1, C, hw, ltx_vae_latents_mean(v), ltx_vae_latents_std(v),
                              (float)ltx_vae_get_config(v)->scaling_factor);
        run->init = noise;
        for (int ch = 0; ch < C; ch++) memcpy(noise + ch * fhw, img + ch * hw, hw * sizeof(float));
        run->loop.init_latents = run->init, run->loop.init_generator = &run->gen;
        ltx_scheduler_keep_first(sched, C, fhw, hw);
    } else {
        free(noise);
    }
    free(img);
    return rc;
}

static int sample_setup(cvx_model *m, const cvx_sample_params *p, const cvx_embeddings *emb, cvx_scheduler *sched,
                        cvx_sample_run *run) {
    if (load_transformer(m)) return -1;
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
    /* 0.9.0 / 0.9.1: mu from the latent token count (the loop sets the timesteps again: it sticks) */
    ltx_scheduler_set_seq_len(sched, (int64_t)F * H * W);
    if (cvx_scheduler_set_timesteps(sched, p->num_inference_steps)) return -1;
    cvx_info("LTX transformer: %d layers, %d heads x %d; %d steps, guidance %g%s, seed %llu", c->num_layers,
             c->num_attention_heads, c->attention_head_dim, p->num_inference_steps, p->guidance_scale,
             p->guidance_scale > 1 ? "" : " (no CFG: one transformer call per step)", (unsigned long long)p->seed);
    cvx_info("video %d frames %dx%d -> latents [1, %d, %d, %d, %d]", p->frames, p->width, p->height, sh->channels, F,
             H, W);
    const cvx_cond_set *more = p->cond_more;
    if (!more || more->n != 1 || !more->t[0].is_mask || more->t[0].L != emb->L)
        return cvx_error("the LTX conditioning needs prompt_attention_mask [%d] beside prompt_embeds", emb->L);
    ltx_run *lr = cvx_calloc(1, sizeof *lr);
    run->fam_run = lr, run->fam_run_free = ltx_run_free;
    const int i2v = p->conditioning && p->conditioning->mode == CVX_MODE_I2V;
    if (i2v && prepare_i2v(m, p->conditioning, sched, run)) return -1;
    lr->cond[0] = (ltx_text_cond){emb->negative, more->t[0].negative, emb->L};
    lr->cond[1] = (ltx_text_cond){emb->prompt, more->t[0].prompt, emb->L};
    run->branch[0] = &lr->cond[0], run->branch[1] = &lr->cond[1];
    if (!(p->frame_rate >= 0) || !isfinite(p->frame_rate))
        return cvx_error("--frame_rate %g: must be a positive number", p->frame_rate);
    ltx_denoiser_init(&run->den, S(m)->transformer, p->frame_rate > 0 ? p->frame_rate : m->info.fps);
    cvx_sample_run_defaults(run, emb);
    const size_t S_tok = (size_t)F * H * W, hw = (size_t)H * W;
    if (i2v) {   /* timestep t·(1 − mask): 0 on frame 0's tokens */
        lr->t_scale = cvx_alloc_f32(S_tok);
        for (size_t k = 0; k < S_tok; k++) lr->t_scale[k] = k < hw ? 0.0f : 1.0f;
        run->plan.n_t = S_tok;
    }
    for (int i = 0; i < run->plan.n_steps; i++) {
        run->plan.steps[i].guide.rescale = p->guidance_rescale;
        run->plan.steps[i].t_scale = lr->t_scale;
    }
    return 0;
}

static void latents_out(cvx_model *m, const cvx_latent_shape *sh, const float *latents, cvx_latents *out) {
    (void)m;
    out->C = sh->channels, out->T = sh->frames, out->h = sh->height, out->w = sh->width;
    out->data = cvx_alloc_f32(sh->numel);
    memcpy(out->data, latents, sh->numel * sizeof(float));
}

/* ---- stage 3 ---- */
/* LTXPipeline after the loop: denormalise; a timestep-conditioned VAE (0.9.5+) decodes
 * (1 − s)·z + s·noise at decode_timestep, the noise drawn from the run's generator after all its
 * draws (p->generator); frames stay unclamped here (the caller maps clamp(v/2 + 0.5)). */
static int decode(cvx_model *m, const cvx_decode_params *p, const float *zin, int B, int C, int T, int h, int w,
                  const char *label, cvx_progress_fn progress, void *user, cvx_frames *out) {
    if (load_vae(m)) return -1;
    ltx_vae *v = S(m)->vae;
    const ltx_vae_config *vc = ltx_vae_get_config(v);
    if (C != vc->latent_channels)
        return cvx_error("%s: tensor 'latents' has %d channels (dim 1 of [B, C, T, H, W]), the LTX VAE of %s expects "
                         "latent_channels = %d", label, C, m->dir, vc->latent_channels);
    if (B < 1 || T < 1 || h < 1 || w < 1) return cvx_error("%s: tensor 'latents' has an empty shape", label);
    const size_t n1 = (size_t)C * T * h * w;
    if (cvx_check_finite(zin, n1 * B, "latents")) return cvx_error_prefix("%s", label);
    const int tc = vc->timestep_conditioning;
    /* a decode_timestep without a noise scale: the scale is the timestep (upstream's None) */
    const double dt = p->decode_set & 1 ? p->decode_timestep : tc ? DEFAULT_DECODE_TIMESTEP : 0.0;
    const double ds = p->decode_set & 2 ? p->decode_noise_scale : p->decode_set & 1 ? dt
                      : tc ? DEFAULT_DECODE_NOISE_SCALE : 0.0;
    cvx_generator gen;
    if (tc) {
        if (!p->generator)
            return cvx_error("%s: the timestep-conditioned LTX VAE draws its decode noise from the sampler's "
                             "generator after the loop, and the latents come without it", label);
        memcpy(&gen, p->generator, sizeof gen);
        if (cvx_generator_validate(&gen)) return cvx_error_prefix("%s: the sampler's generator", label);
        cvx_info("LTX VAE decode: decode_timestep %g, decode_noise_scale %g", dt, ds);
    }
    const int To = 8 * (T - 1) + 1;
    out->B = B, out->T = To, out->H = 32 * h, out->W = 32 * w, out->tiled = 0;
    out->data = cvx_calloc((size_t)B, sizeof *out->data);
    const int root = !p->dist || cvx_dist_rank(p->dist) == 0;
    float *z = cvx_alloc_f32(n1 * B), *noise = tc ? cvx_alloc_f32(n1 * B) : NULL;
    memcpy(z, zin, n1 * B * sizeof(float));
    ltx_denormalize_latents(z, B, C, (size_t)T * h * w, ltx_vae_latents_mean(v), ltx_vae_latents_std(v),
                            (float)vc->scaling_factor);
    if (tc) {   /* randn_tensor(latents.shape): the whole batch at once */
        cvx_randn(&gen, noise, n1 * B);
        ltx_vae_decode_input(z, noise, n1 * B, (float)ds, z);
    }
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae decode", B, progress, user);
    int rc = 0;
    for (int b = 0; b < B && root && !rc; b++) {
        out->data[b] = cvx_alloc_f32((size_t)3 * To * out->H * out->W);
        rc = ltx_vae_decode(v, z + b * n1, T, h, w, (float)dt, out->data[b]);
        if (!rc) rc = cvx_check_finite(out->data[b], (size_t)3 * To * out->H * out->W, "decoded");
        cvx_progress_update(&bar, b + 1);
    }
    free(z);
    free(noise);
    if (rc) {
        cvx_frames_free(out);
        return cvx_error_prefix("%s", label);
    }
    cvx_progress_finish(&bar);
    return 0;
}

static int lora_targets(cvx_model *m, cvx_lora_target **out) {
    if (load_transformer(m)) return -1;
    return ltx_lora_targets(S(m)->transformer, out);
}

static const char *const ltx_classes[] = {"LTXPipeline", "LTXImageToVideoPipeline", NULL};

const cvx_family cvx_family_ltx = {
    .name = "LTX-Video", .classes = ltx_classes, .transformer_class = "LTXVideoTransformer3DModel",
    .open = ltx_open, .close = ltx_close, .cond_slots = cond_slots, .cond_dims = cond_dims, .text_dim = text_dim,
    .encode_texts = encode_texts, .encode_more = encode_more, .encode_conditioning = encode_conditioning,
    .check_mode = check_mode, .options = options, .check_sample = check_sample, .sample_setup = sample_setup,
    .lora_targets = lora_targets, .latents_out = latents_out, .decode = decode, .decode_uses_generator = 1,
    .gguf_rules = &ltx_gguf_rules,
};
