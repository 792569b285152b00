/* transformers' CLIPImageProcessor (the slow, PIL-based one; transformers 4.46), as Wan 2.1
 * image-to-video applies it to the conditioning image before the CLIP vision encoder:
 *
 *   RGB8 image ─ PIL resize (filter `resample`, default BICUBIC) so the shortest edge is
 *   size.shortest_edge (the long edge int(s·long/short)), in 8 bits ─ centre crop
 *   crop_size (zero padding when the image is smaller) ─ ×rescale_factor in float64 then
 *   float32 ─ (x − mean) / std in float32 ─ channels first.
 *
 * Every setting is read from image_processor/preprocessor_config.json; absent keys take
 * CLIPImageProcessor's defaults (shortest edge 224, bicubic, crop 224, 1/255, OpenAI CLIP
 * mean/std). SiglipImageProcessor (image_processor_type; HunyuanVideo-1.5 I2V) is the same steps
 * without the crop: resize to size {height, width} (default 224 × 224), rescale, mean = std = 0.5. */
#ifndef CVX_STAGE1_CLIP_IMAGE_PROCESSOR_H
#define CVX_STAGE1_CLIP_IMAGE_PROCESSOR_H

#include <stdint.h>

#include "resize.h"

typedef struct {
    int do_resize, do_center_crop, do_rescale, do_normalize;
    int shortest_edge;        /* size {"shortest_edge": n} (or an int); 0 when size is height × width */
    int size_h, size_w;       /* size {"height", "width"} (used when shortest_edge == 0) */
    int crop_h, crop_w;       /* crop_size */
    cvx_pil_filter resample;
    double rescale_factor;
    float mean[3], std[3];    /* image_mean / image_std as float32 (numpy casts them to the image dtype) */
} clip_image_processor;

/* CLIPImageProcessor() with no arguments. */
void clip_image_processor_default(clip_image_processor *p);
/* Read preprocessor_config.json (`path` is the file, or a directory holding it). -1 + error
 * naming the file and key (unsupported filter, sizes out of range, wrong mean/std length...). */
int clip_image_processor_load(clip_image_processor *p, const char *path);

/* The size get_resize_output_image_size gives a w × h image (shortest-edge mode:
 * int(s · long / short) for the long edge, computed in double as Python does). */
void clip_image_resize_size(const clip_image_processor *p, int w, int h, int *out_w, int *out_h);
/* The output size of clip_image_preprocess for a w × h image. */
void clip_image_output_size(const clip_image_processor *p, int w, int h, int *out_w, int *out_h);

/* Preprocess one RGB8 image rgb[h][w][3] into out[3, out_h, out_w] (clip_image_output_size;
 * [3, 224, 224] for CLIP): the pixel_values the vision model takes. */
void clip_image_preprocess(const clip_image_processor *p, const uint8_t *rgb, int w, int h, float *out);

/* transformers' center_crop on RGB8: dst[ch][cw][3] = src[y + top][x + left] with
 * top = ⌊(h − ch)/2⌋, left = ⌊(w − cw)/2⌋ (floor division), 0 outside the source. */
void clip_center_crop_rgb8(const uint8_t *src, int w, int h, uint8_t *dst, int cw, int ch);

#endif
