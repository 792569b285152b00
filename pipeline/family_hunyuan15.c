/* The HunyuanVideo-1.5 family (HunyuanVideo15Pipeline, text-to-video; diffusers v0.36.0): the
 * Qwen2.5-VL MLLM prompt encoder and the glyph/ByT5 encoder (stage 1), HunyuanVideo15Transformer3DModel
 * with the pipeline's explicit sigmas and the ClassifierFreeGuidance guider (stage 2),
 * AutoencoderKLHunyuanVideo15 (stage 3) — its row of the family table (pipeline/family.h).
 * The conditioning per branch is the staged pipeline's four tensors: prompt_embeds [1000, D_qwen],
 * prompt_embeds_mask [1000], prompt_embeds_2 [256, D_byt5], prompt_embeds_mask_2 [256]. */
#include "pipeline/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"
#include "fileio.h"
#include "validate.h"
#include "stage1/bpe.h"
#include "stage1/byt5.h"
#include "stage1/glyph.h"
#include "stage1/qwen2_5_vl.h"
#include "stage1/t5.h"
#include "stage2/guidance.h"
#include "stage2/hunyuan15.h"
#include "stage2/hunyuan15_family.h"
#include "stage2/scheduler_flow.h"
#include "stage3/hunyuan15_vae.h"

typedef struct {
    hv15_config tcfg;                /* transformer/config.json (when m->has_denoiser_config) */
    hv15_vae_config vcfg;            /* vae/config.json, or the real model's defaults */
    cvx_cfg_guider guider;           /* guider/guider_config.json (upstream defaults when absent) */
    bpe_tokenizer *tok;              /* tokenizer/ (Qwen2) */
    qwen_model qwen;
    int qwen_loaded;
    byt5_tokenizer tok2;             /* tokenizer_2/ (ByT5) */
    t5_model byt5;
    int byt5_loaded;
    hv15_transformer *transformer;
    hv15_vae *vae;
} hv15_state;

static hv15_state *S(const cvx_model *m) { return m->fam; }

/* ---- open / close ---- */
/* HunyuanVideo15Pipeline's defaults: 121 frames at the 16:9 size of target_size (480×848 for the
 * 480p models, 720×1280 for 720p), 24 fps; guidance from the guider config. */
static void fill_info(cvx_model *m) {
    cvx_model_info *i = &m->info;
    const hv15_vae_config *v = &S(m)->vcfg;
    i->vae_scale_spatial = v->spatial_ratio;
    i->vae_scale_temporal = v->temporal_ratio;
    i->vae_scaling_factor = v->scaling_factor;
    i->latent_channels = v->latent_channels;
    const int big = m->has_denoiser_config && S(m)->tcfg.target_size >= 960;
    i->frames = 121, i->height = big ? 720 : 480, i->width = big ? 1280 : 848, i->fps = 24;
    i->text_len = HV15_MLLM_MAX_LENGTH;
    i->text_dim = m->has_denoiser_config ? S(m)->tcfg.text_embed_dim : 3584;
    i->guidance_scale = S(m)->guider.guidance_scale;
}

static int hv15_open(cvx_model *m) {
    char path[4300];
    m->fam = cvx_calloc(1, sizeof(hv15_state));
    hv15_state *s = S(m);
    cvx_component_path(m, "transformer", "config.json", path, sizeof path);
    if ((m->has_denoiser_config = cvx_is_file(path)) && hv15_config_load(path, &s->tcfg)) return -1;
    cvx_component_path(m, "vae", "config.json", path, sizeof path);
    m->has_vae_config = cvx_is_file(path);
    if (hv15_vae_config_load(&s->vcfg, m->has_vae_config ? path : NULL)) return -1;
    cvx_component_path(m, "guider", "guider_config.json", path, sizeof path);
    if (cvx_is_file(path)) {
        if (cvx_cfg_guider_load(&s->guider, path)) return -1;
    } else {
        /* no guider config (a bare directory): the 480p / 720p T2V checkpoints' guider */
        s->guider = (cvx_cfg_guider){.guidance_scale = 6.0, .start = 0.0, .stop = 1.0, .enabled = 1};
    }
    if (s->guider.use_original_formulation)
        return cvx_error("%s: key 'use_original_formulation' is true: not supported", path);
    fill_info(m);
    return 0;
}

static void hv15_close(cvx_model *m) {
    hv15_state *s = S(m);
    if (!s) return;
    if (s->qwen_loaded) qwen_free(&s->qwen);
    if (s->tok) bpe_free(s->tok);
    if (s->byt5_loaded) {
        t5_free(&s->byt5);
        byt5_tokenizer_free(&s->tok2);
    }
    hv15_free(s->transformer);
    hv15_vae_free(s->vae);
    free(s);
    m->fam = NULL;
}

/* The MLLM: only the layers before hidden_states[-3] are loaded. */
static int load_qwen(cvx_model *m) {
    hv15_state *s = S(m);
    if (s->qwen_loaded) return 0;
    char tok_dir[4200], te_dir[4200], cfg[4300];
    qwen_config qc;
    if (cvx_model_component(m->dir, "tokenizer", "vocab.json", tok_dir, sizeof tok_dir) ||
        cvx_model_component(m->dir, "text_encoder", "config.json", te_dir, sizeof te_dir))
        return -1;
    snprintf(cfg, sizeof cfg, "%s/config.json", te_dir);
    if (qwen_config_load(&qc, cfg)) return -1;
    if (!s->tok && !(s->tok = bpe_load(tok_dir))) return -1;
    if (m->text_encoder_file[0] ? qwen_load_file(&s->qwen, m->text_encoder_file, cfg, qc.num_layers - HV15_MLLM_SKIP_LAYERS,
                                                 m->ctx)
                                : qwen_load(&s->qwen, te_dir, qc.num_layers - HV15_MLLM_SKIP_LAYERS, m->ctx))
        return -1;
    s->qwen_loaded = 1;
    cvx_info("Qwen2.5-VL text model: %d of %d layers, hidden %d, %d heads (%d KV)", s->qwen.n_loaded,
             qc.num_layers, qc.hidden_size, qc.num_heads, qc.num_kv_heads);
    return 0;
}

static int load_byt5(cvx_model *m) {
    hv15_state *s = S(m);
    if (s->byt5_loaded) return 0;
    char tok_dir[4200], te_dir[4200];
    if (cvx_model_component(m->dir, "tokenizer_2", "tokenizer_config.json", tok_dir, sizeof tok_dir) ||
        cvx_model_component(m->dir, "text_encoder_2", "config.json", te_dir, sizeof te_dir) ||
        byt5_tokenizer_load(&s->tok2, tok_dir))
        return -1;
    char cfg[4300];
    snprintf(cfg, sizeof cfg, "%s/config.json", te_dir);
    if (m->text_encoder_2_file[0] ? t5_build_file(&s->byt5, m->text_encoder_2_file, cfg, m->ctx)
                                  : t5_build(&s->byt5, te_dir, m->ctx)) {
        byt5_tokenizer_free(&s->tok2);
        return -1;
    }
    s->byt5_loaded = 1;
    return 0;
}

static int load_transformer(cvx_model *m) {
    hv15_state *s = S(m);
    if (s->transformer) return 0;
    char dir[4200], cfg[4300];
    if (m->transformer_file[0]) {
        cvx_component_path(m, "transformer", "config.json", cfg, sizeof cfg);
        if (!cvx_is_file(cfg))
            return cvx_error("--transformer %s: the model directory %s has no transformer/config.json to go with it",
                             m->transformer_file, m->dir);
        s->transformer = hv15_load_file(cfg, m->transformer_file, m->ctx);
    } else {
        if (cvx_model_component(m->dir, "transformer", "config.json", dir, sizeof dir)) return -1;
        if (cvx_weights_fit_memory(dir, "a quantized transformer file (--transformer ...gguf)")) return -1;
        s->transformer = hv15_load(dir, m->ctx);
    }
    return s->transformer ? 0 : -1;
}

static int load_vae(cvx_model *m) {
    hv15_state *s = S(m);
    if (s->vae) return 0;
    char dir[4200], cfg[4300];
    if (m->vae_file[0]) {
        cvx_component_path(m, "vae", "config.json", cfg, sizeof cfg);
        s->vae = hv15_vae_load_file(cvx_is_file(cfg) ? cfg : NULL, m->vae_file, m->ctx);
    } else {
        if (cvx_model_component(m->dir, "vae", "config.json", dir, sizeof dir)) return -1;
        s->vae = hv15_vae_load(dir, m->ctx);
    }
    return s->vae ? 0 : -1;
}

/* ---- stage 1 ---- */
static const cvx_cond_slot cond_slots[] = {
    {"prompt_embeds", 0, "HunyuanVideo15Pipeline's MLLM length %d", "text_embed_dim %d of the transformer"},
    {"prompt_embeds_mask", 1, "HunyuanVideo15Pipeline's MLLM length %d", "%d"},
    {"prompt_embeds_2", 0, "HunyuanVideo15Pipeline's ByT5 length %d", "text_embed_2_dim %d of the transformer"},
    {"prompt_embeds_mask_2", 1, "HunyuanVideo15Pipeline's ByT5 length %d", "%d"},
    {0}};

static int cond_dims(cvx_model *m, int slot, int *L, int *D) {
    const hv15_config *c = &S(m)->tcfg;
    *L = slot < 2 ? HV15_MLLM_MAX_LENGTH : HV15_BYT5_MAX_LENGTH;
    *D = slot == 0 ? c->text_embed_dim : slot == 2 ? c->text_embed_2_dim : 1;
    return 0;
}

static int text_dim(cvx_model *m) { return load_qwen(m) ? -1 : S(m)->qwen.cfg.hidden_size; }

/* _get_mllm_prompt_embeds: hidden_states[-3] of the chat-templated prompt, cropped. */
static int encode_texts(cvx_model *m, const char *const *texts, const char *const *labels, int n, int L,
                        cvx_progress_fn progress, void *user, float *out) {
    if (load_qwen(m)) return -1;
    hv15_state *s = S(m);
    if (L != HV15_MLLM_MAX_LENGTH)
        return cvx_error("--max_sequence_length %d: HunyuanVideo15Pipeline's MLLM prompt length is %d", L,
                         HV15_MLLM_MAX_LENGTH);
    const int D = s->qwen.cfg.hidden_size;
    int64_t mask[HV15_MLLM_MAX_LENGTH];
    cvx_progress bar;
    cvx_progress_begin(&bar, "Qwen2.5-VL prompts", n, progress, user);
    for (int i = 0; i < n; i++) {
        if (hv15_mllm_prompt_embeds(&s->qwen, s->tok, texts[i], out + (size_t)i * L * D, mask) ||
            cvx_check_finite(out + (size_t)i * L * D, (size_t)L * D, "embeddings"))
            return cvx_error_prefix("%s", labels ? labels[i] : "a text");
        cvx_progress_update(&bar, i + 1);
    }
    cvx_progress_finish(&bar);
    return 0;
}

/* prompt_embeds_mask (the template's mask, cropped), and _get_byt5_prompt_embeds' pair. */
static int encode_more(cvx_model *m, const char *const *texts, const char *const *labels, int n,
                       cvx_progress_fn progress, void *user, cvx_cond_set *out) {
    (void)progress, (void)user;
    if (load_qwen(m) || load_byt5(m)) return -1;
    hv15_state *s = S(m);
    enum { L = HV15_MLLM_MAX_LENGTH, C = HV15_MLLM_CROP_START, L2 = HV15_BYT5_MAX_LENGTH };
    const int D2 = s->byt5.cfg.d_model;
    out->n = 3;
    out->t[0] = (cvx_cond_tensor){"prompt_embeds_mask", cvx_alloc_f32((size_t)n * L), NULL, L, 1, 1};
    out->t[1] = (cvx_cond_tensor){"prompt_embeds_2", cvx_alloc_f32((size_t)n * L2 * D2), NULL, L2, D2, 0};
    out->t[2] = (cvx_cond_tensor){"prompt_embeds_mask_2", cvx_alloc_f32((size_t)n * L2), NULL, L2, 1, 1};
    int64_t *ids = cvx_malloc(sizeof(int64_t) * (C + L)), *mask = cvx_malloc(sizeof(int64_t) * (C + L));
    int rc = -1, i;
    for (i = 0; i < n; i++) {
        if (hv15_mllm_tokens(s->tok, texts[i], ids, mask, NULL)) goto fail;
        for (int k = 0; k < L; k++) out->t[0].prompt[(size_t)i * L + k] = (float)mask[C + k];
        if (hv15_byt5_prompt_embeds(&s->byt5, &s->tok2, texts[i], out->t[1].prompt + (size_t)i * L2 * D2, mask))
            goto fail;
        for (int k = 0; k < L2; k++) out->t[2].prompt[(size_t)i * L2 + k] = (float)mask[k];
        if (cvx_check_finite(out->t[1].prompt + (size_t)i * L2 * D2, (size_t)L2 * D2, "prompt_embeds_2")) goto fail;
    }
    rc = 0;
fail:
    if (rc) cvx_error_prefix("%s", labels ? labels[i] : "a text");
    free(ids);
    free(mask);
    return rc;
}

static int check_mode(cvx_model *m, cvx_mode mode) {
    if (mode != CVX_MODE_T2V)
        return cvx_error("%s: HunyuanVideo-1.5 runs text-to-video here (image-to-video and video-to-video are not "
                         "wired yet)", m->dir);
    if (m->has_denoiser_config && S(m)->tcfg.i2v)
        return cvx_error("%s/transformer is an image-to-video model (task_type i2v): not wired yet", m->dir);
    return 0;
}

/* ---- stage 2 ---- */
static int check_sample(cvx_model *m, const cvx_sample_params *r) {
    (void)m;
    if (r->sp_dist && cvx_dist_size(r->sp_dist) > 1)
        return cvx_error("--sp %d: sequence parallelism is not wired for HunyuanVideo-1.5", cvx_dist_size(r->sp_dist));
    return 0;
}

typedef struct {
    double *sigmas;          /* linspace(1, 0, N + 1)[:-1] (the scheduler borrows them) */
    hv15_branch branch[2];   /* [0] negative, [1] prompt */
} hv15_run;

static void run_free(void *p) {
    hv15_run *r = p;
    if (!r) return;
    free(r->sigmas);
    free(r);
}

/* A named tensor of the cond set (prompt or negative). */
static const float *cond_tensor(const cvx_sample_params *p, const char *name, int negative) {
    for (int k = 0; p->cond_more && k < p->cond_more->n; k++)
        if (!strcmp(p->cond_more->t[k].name, name))
            return negative ? p->cond_more->t[k].negative : p->cond_more->t[k].prompt;
    return NULL;
}

static int sample_setup(cvx_model *m, const cvx_sample_params *p, const cvx_embeddings *emb, cvx_scheduler *sched,
                        cvx_sample_run *run) {
    if (load_transformer(m)) return -1;
    hv15_state *s = S(m);
    const hv15_config *c = hv15_get_config(s->transformer);
    cvx_loop_params *lp = &run->loop;
    if (p->conditioning && p->conditioning->mode != CVX_MODE_T2V) return check_mode(m, p->conditioning->mode);
    if (c->i2v) return check_mode(m, CVX_MODE_T2V);
    cvx_latent_shape *sh = &run->shape;
    if (hv15_latent_shape_for(c, lp, s->vcfg.latent_channels, sh)) return -1;
    const int N = p->num_inference_steps;
    hv15_run *r = cvx_calloc(1, sizeof *r);
    run->fam_run = r, run->fam_run_free = run_free;
    /* the pipeline's sigmas through retrieve_timesteps(sigmas=...) */
    r->sigmas = cvx_malloc(sizeof(double) * N);
    flow_linear_sigmas(N, r->sigmas);
    cvx_scheduler_set_sigmas(sched, r->sigmas, N);
    if (cvx_scheduler_set_timesteps(sched, N)) return -1;
    for (int b = 0; b < 2; b++) {
        hv15_branch *hb = &r->branch[b];
        *hb = (hv15_branch){.text = b ? emb->prompt : emb->negative, .L = emb->L,
                            .text_mask = cond_tensor(p, "prompt_embeds_mask", !b),
                            .text2 = cond_tensor(p, "prompt_embeds_2", !b),
                            .text2_mask = cond_tensor(p, "prompt_embeds_mask_2", !b), .L2 = HV15_BYT5_MAX_LENGTH,
                            .L_img = 729};
        run->branch[b] = hb;
    }
    if (!r->branch[1].text_mask || !r->branch[1].text2 || !r->branch[1].text2_mask)
        return cvx_error("HunyuanVideo-1.5 needs prompt_embeds_mask, prompt_embeds_2 and prompt_embeds_mask_2 "
                         "beside prompt_embeds (stage 1 of this model writes them)");
    cvx_info("HunyuanVideo-1.5 transformer: %d layers, %d heads x %d; %s scheduler, %d steps, guidance %g%s, seed %llu",
             c->num_layers, c->num_attention_heads, c->attention_head_dim, sched->type->name, N, p->guidance_scale,
             p->guidance_scale > 1 ? "" : " (no CFG: one transformer call per step)", (unsigned long long)p->seed);
    cvx_info("video %d frames %dx%d -> latents [1, %d, %d, %d, %d]", p->frames, p->width, p->height, sh->channels,
             sh->frames, sh->height, sh->width);
    hv15_denoiser_init(&run->den, s->transformer);
    run->preview_rgb = (cvx_latent_rgb){0};
    cvx_sample_run_defaults(run, emb);
    /* the guider: CFG on the steps of its window (start·N <= i < stop·N) unless the scale is ~1 */
    cvx_cfg_guider g = s->guider;
    g.guidance_scale = p->guidance_scale;
    for (int i = 0; i < run->plan.n_steps; i++)
        run->plan.steps[i].guide = (cvx_guider){.scale = cvx_cfg_guider_enabled(&g, i, N) ? p->guidance_scale : 1.0};
    return 0;
}

static void latents_out(cvx_model *m, const cvx_latent_shape *sh, const float *latents, cvx_latents *out) {
    (void)m;
    out->C = sh->channels, out->T = sh->frames, out->h = sh->height, out->w = sh->width;
    out->data = cvx_alloc_f32(sh->numel);
    memcpy(out->data, latents, sh->numel * sizeof(float));
}

/* ---- stage 3 ---- */
/* latents / scaling_factor, vae.decode (untiled unless asked) */
static int decode(cvx_model *m, const cvx_decode_params *p, const float *zin, int B, int C, int T, int h, int w,
                  const char *label, cvx_progress_fn progress, void *user, cvx_frames *out) {
    if (load_vae(m)) return -1;
    const hv15_vae *v = S(m)->vae;
    const hv15_vae_config *vc = hv15_vae_get_config(v);
    if (C != vc->latent_channels)
        return cvx_error("%s: tensor 'latents' has %d channels (dim 1 of [B, C, T, H, W]), the HunyuanVideo-1.5 VAE "
                         "of %s expects latent_channels = %d", label, C, m->dir, vc->latent_channels);
    if (B < 1 || T < 1 || h < 1 || w < 1) return cvx_error("%s: tensor 'latents' has an empty shape", label);
    const size_t n = (size_t)C * T * h * w;
    if (cvx_check_finite(zin, (size_t)B * n, "latents")) return cvx_error_prefix("%s", label);
    hv15_vae_tiling tl;
    hv15_vae_tiling_default(&tl);
    if (p->tile_height) tl.min_h = p->tile_height;
    if (p->tile_width) tl.min_w = p->tile_width;
    const int tiled = p->tiling == CVX_TILING_ON;
    const int To = hv15_vae_decoded_frames(v, T);
    out->B = B, out->T = To, out->H = h * vc->spatial_ratio, out->W = w * vc->spatial_ratio, out->tiled = tiled;
    out->data = cvx_calloc((size_t)B, sizeof *out->data);
    cvx_info("decoding latents [%d, %d, %d, %d, %d] with the HunyuanVideo-1.5 VAE (%s)", B, C, T, h, w,
             tiled ? "tiled" : "untiled");
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae decode", B, progress, user);
    float *z = cvx_alloc_f32(n);
    for (int b = 0; b < B; b++) {
        hv15_vae_unscale(v, zin + (size_t)b * n, n, z);
        out->data[b] = cvx_alloc_f32((size_t)3 * To * out->H * out->W);
        if (hv15_vae_decode(v, z, T, h, w, tiled ? &tl : NULL, out->data[b]) ||
            cvx_check_finite(out->data[b], (size_t)3 * To * out->H * out->W, "decoded")) {
            free(z);
            cvx_frames_free(out);
            return cvx_error_prefix("%s: sample %d", label, b);
        }
        cvx_progress_update(&bar, b + 1);
    }
    free(z);
    cvx_progress_finish(&bar);
    return 0;
}

static int lora_targets(cvx_model *m, cvx_lora_target **out) {
    if (load_transformer(m)) return -1;
    return hv15_lora_targets(S(m)->transformer, out);
}

static const char *const hv15_classes[] = {"HunyuanVideo15Pipeline", NULL};

const cvx_family cvx_family_hunyuan15 = {
    .name = "HunyuanVideo-1.5", .classes = hv15_classes, .transformer_class = "HunyuanVideo15Transformer3DModel",
    .open = hv15_open, .close = hv15_close, .cond_slots = cond_slots, .cond_dims = cond_dims, .text_dim = text_dim,
    .encode_texts = encode_texts, .encode_more = encode_more, .check_mode = check_mode,
    .check_sample = check_sample,    .sample_setup = sample_setup, .lora_targets = lora_targets, .latents_out = latents_out, .decode = decode,
    .gguf_rules = &hv15_gguf_rules,
};
