/* HunyuanVideo-1.5's stage-1 inputs beside the MLLM's prompt embeddings (hunyuan15_inputs.h). */
#include "stage1/hunyuan15_inputs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "model.h"
#include "resize.h"
#include "validate.h"

int hv15_mllm_load(qwen_model *q, bpe_tokenizer **tok, const char *tok_dir, const char *te_dir, const char *file,
                   cvx_ctx *ctx) {
    char cfg[4300];
    qwen_config qc;
    snprintf(cfg, sizeof cfg, "%s/config.json", te_dir);
    if (qwen_config_load(&qc, cfg)) return -1;
    if (!*tok && !(*tok = bpe_load(tok_dir))) return -1;
    if (file ? qwen_load_file(q, file, cfg, qc.num_layers - HV15_MLLM_SKIP_LAYERS, ctx)
             : qwen_load(q, te_dir, qc.num_layers - HV15_MLLM_SKIP_LAYERS, ctx))
        return -1;
    cvx_info("Qwen2.5-VL text model: %d of %d layers, hidden %d, %d heads (%d KV)", q->n_loaded, qc.num_layers,
             qc.hidden_size, qc.num_heads, qc.num_kv_heads);
    return 0;
}

int hv15_byt5_load(t5_model *m, byt5_tokenizer *tok, const char *tok_dir, const char *te_dir, const char *file,
                   cvx_ctx *ctx) {
    char cfg[4300];
    if (byt5_tokenizer_load(tok, tok_dir)) return -1;
    snprintf(cfg, sizeof cfg, "%s/config.json", te_dir);
    if (file ? t5_build_file(m, file, cfg, ctx) : t5_build(m, te_dir, ctx)) {
        byt5_tokenizer_free(tok);
        return -1;
    }
    return 0;
}

int hv15_prompt_more(const bpe_tokenizer *tok, const t5_model *byt5, const byt5_tokenizer *tok2, const char *text,
                     float *mask, float *embeds2, float *mask2) {
    enum { L = HV15_MLLM_MAX_LENGTH, C = HV15_MLLM_CROP_START, L2 = HV15_BYT5_MAX_LENGTH };
    int64_t *ids = cvx_malloc(sizeof(int64_t) * (C + L)), *m = cvx_malloc(sizeof(int64_t) * (C + L));
    int rc = hv15_mllm_tokens(tok, text, ids, m, NULL);
    if (!rc) {
        for (int k = 0; k < L; k++) mask[k] = (float)m[C + k];
        rc = hv15_byt5_prompt_embeds(byt5, tok2, text, embeds2, m);
    }
    if (!rc) {
        for (int k = 0; k < L2; k++) mask2[k] = (float)m[k];
        rc = cvx_check_finite(embeds2, (size_t)L2 * byt5->cfg.d_model, "prompt_embeds_2");
    }
    free(ids);
    free(m);
    return rc;
}

/* Python's round(x, 5): correctly rounded (glibc's printf is exact, ties to even like Python's). */
static double round5(double x) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.5f", x);
    return strtod(buf, NULL);
}

int hv15_image_bucket(int target, int patch, int ih, int iw, int *H, int *W) {
    const int n = (int)nearbyint(((double)target / patch) * ((double)target / patch));   /* round() */
    const double aspect = (double)ih / (double)iw;
    double best = INFINITY;
    *H = *W = 0;
    for (int wp = n, hp = 1; wp > 0;) {
        if ((double)(wp > hp ? wp : hp) / (wp > hp ? hp : wp) <= 4.0) {
            const int bh = wp * patch, bw = hp * patch;   /* the list's (h, w) as the caller reads it */
            const double d = round5((double)bh / (double)bw) - aspect;
            if ((aspect >= 1 ? d <= 0 : d >= 0) && fabs(d) < best) best = fabs(d), *H = bh, *W = bw;
        }
        if ((hp + 1) * wp <= n) hp++;
        else wp--;
    }
    return *H ? 0 : cvx_error("target_size %d: no bucket fits a %dx%d image", target, iw, ih);
}

void hv15_resize_and_crop(const uint8_t *rgb, int iw, int ih, int W, int H, uint8_t *out) {
    const double ratio = (double)W / H, src_ratio = (double)iw / ih;
    const int sw = ratio > src_ratio ? W : iw * H / ih, sh = ratio <= src_ratio ? H : ih * W / iw;
    uint8_t *tmp = cvx_malloc((size_t)sw * sh * 3);
    cvx_resize_lanczos_rgb8(rgb, iw, ih, tmp, sw, sh);
    const int x0 = W / 2 - sw / 2, y0 = H / 2 - sh / 2;
    memset(out, 0, (size_t)W * H * 3);
    for (int y = 0; y < H; y++) {
        const int sy = y - y0;
        if (sy < 0 || sy >= sh) continue;
        for (int x = 0; x < W; x++) {
            const int sx = x - x0;
            if (sx >= 0 && sx < sw) memcpy(out + ((size_t)y * W + x) * 3, tmp + ((size_t)sy * sw + sx) * 3, 3);
        }
    }
    free(tmp);
}

int hv15_text_load_mllm(hv15_text_encoders *e, const char *model_dir, const char *file, cvx_ctx *ctx) {
    char tok_dir[4200], te_dir[4200];
    if (e->qwen_loaded) return 0;
    if (cvx_model_component(model_dir, "tokenizer", "vocab.json", tok_dir, sizeof tok_dir) ||
        cvx_model_component(model_dir, "text_encoder", "config.json", te_dir, sizeof te_dir) ||
        hv15_mllm_load(&e->qwen, &e->tok, tok_dir, te_dir, file, ctx))
        return -1;
    e->qwen_loaded = 1;
    return 0;
}

int hv15_text_load_byt5(hv15_text_encoders *e, const char *model_dir, const char *file, cvx_ctx *ctx) {
    char tok_dir[4200], te_dir[4200];
    if (e->byt5_loaded) return 0;
    if (cvx_model_component(model_dir, "tokenizer_2", "tokenizer_config.json", tok_dir, sizeof tok_dir) ||
        cvx_model_component(model_dir, "text_encoder_2", "config.json", te_dir, sizeof te_dir) ||
        hv15_byt5_load(&e->byt5, &e->tok2, tok_dir, te_dir, file, ctx))
        return -1;
    e->byt5_loaded = 1;
    return 0;
}

void hv15_text_encoders_free(hv15_text_encoders *e) {
    if (e->qwen_loaded) qwen_free(&e->qwen);
    if (e->tok) bpe_free(e->tok);
    if (e->byt5_loaded) {
        t5_free(&e->byt5);
        byt5_tokenizer_free(&e->tok2);
    }
    memset(e, 0, sizeof *e);
}

int hv15_text_prompt_embeds(const hv15_text_encoders *e, const char *const *texts, const char *const *labels, int n,
                            float *out, cvx_progress *bar) {
    const size_t LD = (size_t)HV15_MLLM_MAX_LENGTH * e->qwen.cfg.hidden_size;
    int64_t mask[HV15_MLLM_MAX_LENGTH];
    for (int i = 0; i < n; i++) {
        if (hv15_mllm_prompt_embeds(&e->qwen, e->tok, texts[i], out + i * LD, mask) ||
            cvx_check_finite(out + i * LD, LD, "embeddings"))
            return cvx_error_prefix("%s", labels ? labels[i] : "a text");
        cvx_progress_update(bar, i + 1);
    }
    return 0;
}

int hv15_text_prompt_more(const hv15_text_encoders *e, const char *const *texts, const char *const *labels, int n,
                          float *mask, float *embeds2, float *mask2) {
    enum { L = HV15_MLLM_MAX_LENGTH, L2 = HV15_BYT5_MAX_LENGTH };
    const size_t D2 = (size_t)e->byt5.cfg.d_model;
    for (int i = 0; i < n; i++)
        if (hv15_prompt_more(e->tok, &e->byt5, &e->tok2, texts[i], mask + (size_t)i * L, embeds2 + i * L2 * D2,
                             mask2 + (size_t)i * L2))
            return cvx_error_prefix("%s", labels ? labels[i] : "a text");
    return 0;
}

uint8_t *hv15_condition_image(const uint8_t *rgb, int iw, int ih, int target, int patch, const char *name, int *H,
                              int *W) {
    if (!*H) {
        if (hv15_image_bucket(target, patch, ih, iw, H, W)) return NULL;
        cvx_info("%s: %dx%d image -> %dx%d (the closest aspect-ratio bucket of target_size %d)", name, iw, ih, *W, *H,
                 target);
    }
    uint8_t *img = cvx_malloc((size_t)*W * *H * 3);
    hv15_resize_and_crop(rgb, iw, ih, *W, *H, img);
    return img;
}
