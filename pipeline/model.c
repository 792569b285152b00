/* The model handle: resolve once, read the configs once, load components on first use. */
#include "pipeline/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "model.h"
#include "stage2/scheduler.h"

/* The scheduler config's type name ("ddim", "dpm"), or "" when absent or unknown (cvx_sample
 * reports it then, with the file's message). */
static void read_scheduler_name(const char *dir, char *out, size_t n) {
    char path[4200];
    cvx_config c;
    const char *cls;
    out[0] = 0;
    if (snprintf(path, sizeof path, "%s/scheduler/scheduler_config.json", dir) >= (int)sizeof path ||
        !cvx_is_file(path) || cvx_config_load(&c, path))
        return;
    if (!cvx_cfg_str(&c, "_class_name", &cls)) {
        const cvx_scheduler_type *t = cvx_scheduler_find(cls);
        if (t) snprintf(out, n, "%s", t->name);
    }
    cvx_config_free(&c);
    cvx_clear_error();
}

/* The defaults the upstream pipeline and model cards use: 1.0 = the transformer's sample size ×
 * the VAE factor at 8 fps; 1.5 (patch_size_t) = 768×1360 at 16 fps (its config's sample size is
 * not the size it is used at). Without a transformer config the 1.5 VAE is the one with
 * invert_scale_latents. */
static void fill_info(cvx_model *m) {
    cvx_model_info *i = &m->info;
    i->name = m->name;
    i->dir = m->dir;
    i->vae_scale_spatial = m->has_vae ? m->vcfg.spatial_ratio : 8;
    i->vae_scale_temporal = m->has_vae ? m->vcfg.temporal_compression_ratio : 4;
    i->vae_scaling_factor = m->has_vae ? m->vcfg.scaling_factor : 1.15258426;
    i->latent_channels = m->has_vae ? m->vcfg.latent_channels : 16;
    i->is_15 = m->has_transformer ? m->tcfg.patch_size_t > 0 : m->has_vae && m->vcfg.invert_scale_latents;
    if (m->has_transformer) {
        const cogvideox_config *c = &m->tcfg;
        i->frames = c->sample_frames;
        i->height = i->is_15 ? 768 : c->sample_height * i->vae_scale_spatial;
        i->width = i->is_15 ? 1360 : c->sample_width * i->vae_scale_spatial;
        i->text_len = c->max_text_seq_length;
        i->text_dim = c->text_embed_dim;
    }
    i->fps = i->is_15 ? 16 : 8;
    i->scheduler = m->scheduler_name[0] ? m->scheduler_name : NULL;
}

cvx_model *cvx_model_open(const cvx_model_params *p) {
    if (!p->model || !p->model[0]) {
        cvx_error("no model given");
        return NULL;
    }
    if (p->precision != CVX_PRECISION_F32 && p->precision != CVX_PRECISION_BF16) {
        cvx_error("compute precision %d is not one of f32, bf16", (int)p->precision);
        return NULL;
    }
    cvx_model *m = cvx_calloc(1, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", p->model);
    char path[4300];
    if (cvx_model_resolve(p->model, m->dir, sizeof m->dir)) goto fail;
    cvx_debug("model %s -> %s", m->name, m->dir);
    snprintf(path, sizeof path, "%s/transformer/config.json", m->dir);
    if ((m->has_transformer = cvx_is_file(path)) && cogvideox_config_load(path, &m->tcfg)) goto fail;
    snprintf(path, sizeof path, "%s/vae/config.json", m->dir);
    if ((m->has_vae = cvx_is_file(path)) && vae_config_load(&m->vcfg, path)) goto fail;
    read_scheduler_name(m->dir, m->scheduler_name, sizeof m->scheduler_name);
    fill_info(m);
    m->ctx = cvx_ctx_new(p->threads);
    if (cvx_ctx_set_precision(m->ctx, p->precision)) {
        cvx_ctx_free(m->ctx);
        goto fail;
    }
    return m;
fail:
    free(m);
    return NULL;
}

void cvx_model_close(cvx_model *m) {
    if (!m) return;
    if (m->t5_loaded) {
        t5_free(&m->t5);
        t5_tokenizer_free(&m->tok);
    }
    cogvideox_free(m->transformer);
    if (m->vae_loaded) vae_free(&m->vae);
    if (m->enc_loaded) vae_encoder_free(&m->enc);
    cvx_ctx_free(m->ctx);
    free(m);
}

const cvx_model_info *cvx_model_get_info(const cvx_model *m) { return &m->info; }
cvx_ctx *cvx_model_ctx(cvx_model *m) { return m->ctx; }

int cvx_model_load_t5(cvx_model *m) {
    if (m->t5_loaded) return 0;
    char tok_dir[4200], te_dir[4200];
    if (cvx_model_component(m->dir, "tokenizer", "spiece.model", tok_dir, sizeof tok_dir) ||
        cvx_model_component(m->dir, "text_encoder", "config.json", te_dir, sizeof te_dir))
        return -1;
    if (t5_tokenizer_load(&m->tok, tok_dir)) return -1;
    if (t5_build(&m->t5, te_dir, m->ctx)) {
        t5_tokenizer_free(&m->tok);
        return -1;
    }
    m->t5_loaded = 1;
    const t5_config *c = &m->t5.cfg;
    cvx_info("T5 encoder: %d layers, d_model %d, %d heads x %d, d_ff %d (%s)", c->num_layers, c->d_model,
             c->num_heads, c->d_kv, c->d_ff, cvx_weights_path(m->t5.weights));
    return 0;
}

int cvx_model_load_transformer(cvx_model *m) {
    if (m->transformer) return 0;
    char dir[4200];
    if (cvx_model_component(m->dir, "transformer", "config.json", dir, sizeof dir)) return -1;
    m->transformer = cogvideox_load(dir, m->ctx);
    return m->transformer ? 0 : -1;
}

int cvx_model_load_vae(cvx_model *m) {
    if (m->vae_loaded) return 0;
    char dir[4200];
    if (cvx_model_component(m->dir, "vae", "config.json", dir, sizeof dir)) return -1;
    if (vae_load(&m->vae, dir, m->ctx)) return -1;
    m->vae_loaded = 1;
    return 0;
}

void cvx_progress_begin(cvx_progress *bar, const char *label, int total, cvx_progress_fn fn, void *user) {
    cvx_progress_start_cb(bar, label, total, fn, user);
}
