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

/* HunyuanVideo15ImageProcessor.calculate_default_height_width(ih, iw, target_size): the bucket of
 * generate_crop_size_list(target_size, patch) (max ratio 4) whose rounded h/w ratio is closest to
 * the image's, from the side that does not exceed it; the first on ties. -1 + cvx_error when none fits. */
int hv15_image_bucket(int target, int patch, int ih, int iw, int *H, int *W);

/* VaeImageProcessor._resize_and_crop: rgb [ih][iw][3] resized (Pillow LANCZOS) to cover W×H keeping
 * the aspect ratio, pasted centred on a black W×H image. out: [H][W][3]. */
void hv15_resize_and_crop(const uint8_t *rgb, int iw, int ih, int W, int H, uint8_t *out);

#endif
