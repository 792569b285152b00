/* HunyuanVideo-1.5's stage-1 inputs beside the MLLM's prompt embeddings (diffusers v0.36.0): the
 * prompt's further tensors (the template's attention mask, the ByT5 glyph pair) and the I2V
 * image's size bucket and crop (HunyuanVideo15ImageProcessor). */
#ifndef CVX_STAGE1_HUNYUAN15_INPUTS_H
#define CVX_STAGE1_HUNYUAN15_INPUTS_H

#include <stdint.h>

#include "stage1/bpe.h"
#include "stage1/byt5.h"
#include "stage1/glyph.h"
#include "stage1/qwen2_5_vl.h"
#include "stage1/t5.h"
#include "progress.h"

/* The MLLM: the Qwen2 tokenizer of tok_dir (*tok, loaded once) and the Qwen2.5-VL text model of
 * te_dir (or the single weights `file`, NULL: none, with te_dir's config.json) up to
 * hidden_states[-3], num_layers − HV15_MLLM_SKIP_LAYERS layers (logged). -1 + cvx_error */
int hv15_mllm_load(qwen_model *q, bpe_tokenizer **tok, const char *tok_dir, const char *te_dir, const char *file,
                   cvx_ctx *ctx);
/* The glyph encoder: ByT5's tokenizer of tok_dir and the T5 encoder of te_dir (or `file` with te_dir's
 * config.json). -1 + cvx_error, nothing held. */
int hv15_byt5_load(t5_model *m, byt5_tokenizer *tok, const char *tok_dir, const char *te_dir, const char *file,
                   cvx_ctx *ctx);

/* One prompt's tensors after prompt_embeds: prompt_embeds_mask [HV15_MLLM_MAX_LENGTH] (the chat
 * template's mask, cropped), prompt_embeds_2 [HV15_BYT5_MAX_LENGTH, d_model of byt5] and
 * prompt_embeds_mask_2 [HV15_BYT5_MAX_LENGTH] (masks as 0/1 floats). -1 + cvx_error (a non-finite
 * ByT5 row names "prompt_embeds_2"). */
int hv15_prompt_more(const bpe_tokenizer *tok, const t5_model *byt5, const byt5_tokenizer *tok2, const char *text,
                     float *mask, float *embeds2, float *mask2);

/* The two text encoders of a handle, each loaded on first use (hv15_text_load_*: 0 when loaded
 * before; the arguments as hv15_mllm_load / hv15_byt5_load). Zero-initialised = none loaded. */
typedef struct {
    bpe_tokenizer *tok;      /* tokenizer/ (Qwen2) */
    qwen_model qwen;
    int qwen_loaded;
    byt5_tokenizer tok2;     /* tokenizer_2/ (ByT5) */
    t5_model byt5;
    int byt5_loaded;
} hv15_text_encoders;
/* The MLLM (tokenizer/, text_encoder/: only the layers before hidden_states[-3]) and ByT5
 * (tokenizer_2/, text_encoder_2/) of the model directory, or the encoder's single file (NULL:
 * none) with the directory's config; loaded once. -1 + cvx_error */
int hv15_text_load_mllm(hv15_text_encoders *e, const char *model_dir, const char *file, cvx_ctx *ctx);
int hv15_text_load_byt5(hv15_text_encoders *e, const char *model_dir, const char *file, cvx_ctx *ctx);
void hv15_text_encoders_free(hv15_text_encoders *e);

/* _get_mllm_prompt_embeds of n texts (the MLLM loaded): out [n, HV15_MLLM_MAX_LENGTH, hidden_size],
 * bar (started by the caller) advanced per text. -1 + cvx_error prefixed with labels[i] ("a text"). */
int hv15_text_prompt_embeds(const hv15_text_encoders *e, const char *const *texts, const char *const *labels, int n,
                            float *out, cvx_progress *bar);

/* hv15_prompt_more of n texts (both encoders loaded): mask [n, L], embeds2 [n, L2, D2], mask2
 * [n, L2]. -1 + cvx_error prefixed with labels[i] ("a text"). */
int hv15_text_prompt_more(const hv15_text_encoders *e, const char *const *texts, const char *const *labels, int n,
                          float *mask, float *embeds2, float *mask2);

/* HunyuanVideo15ImageProcessor.calculate_default_height_width(ih, iw, target_size): the bucket of
 * generate_crop_size_list(target_size, patch) (max ratio 4) whose rounded h/w ratio is closest to
 * the image's, from the side that does not exceed it; the first on ties. -1 + cvx_error when none fits. */
int hv15_image_bucket(int target, int patch, int ih, int iw, int *H, int *W);

/* VaeImageProcessor._resize_and_crop: rgb [ih][iw][3] resized (Pillow LANCZOS) to cover W×H keeping
 * the aspect ratio, pasted centred on a black W×H image. out: [H][W][3]. */
void hv15_resize_and_crop(const uint8_t *rgb, int iw, int ih, int W, int H, uint8_t *out);

/* HunyuanVideo15ImageToVideoPipeline's image of `name`: *H × *W given, or (*H = 0) the bucket of
 * target_size (logged), then resized and cropped: [H][W][3] (allocated). NULL + cvx_error. */
uint8_t *hv15_condition_image(const uint8_t *rgb, int iw, int ih, int target, int patch, const char *name, int *H,
                              int *W);

#endif
