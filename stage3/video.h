/* Turning decoded video into files: upstream post-processing to 8-bit RGB, MP4 (H.264 via
 * libx264, else MPEG-4 part 2) through libavformat/libavcodec, PNG frames, a contact sheet.
 *
 * Decoded video is the VAE output of one sample, [3, T, H, W] in [-1, 1]. */
#ifndef CVX_STAGE3_VIDEO_H
#define CVX_STAGE3_VIDEO_H

#include <stdint.h>

#include "fileio.h"

/* Upstream VideoProcessor.postprocess_video: clamp(x / 2 + 0.5, 0, 1). */
static inline float video_unit(float x) {
    float v = x / 2.0f + 0.5f;
    return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
}
/* 8-bit as the pipeline's default output (numpy_to_pil): (v · 255).round() (half to even),
 * then uint8 — what export_to_video receives from frames of output_type "pil". */
uint8_t video_u8(float x);
/* Frame t of dec[3, T, H, W] as packed RGB24 [H, W, 3]. */
void video_frame_rgb(const float *dec, int T, int H, int W, int t, uint8_t *rgb);

typedef struct {
    int fps;
    int crf;          /* H.264 constant rate factor (0–51) */
    int verbose;
} video_opts;

/* Write an MP4 (H.264 yuv420p via libx264; MPEG-4 part 2 with a warning if no H.264 encoder).
 * Odd frame sizes are padded to even by repeating the last row/column. Written to a temp file
 * next to `path` and renamed into place; on failure nothing is left at `path`.
 * Returns 0, or -1 + cvx_error. *codec_out (optional) receives the encoder name used.
 * Environment CVX_VIDEO_NO_H264=1 forces the MPEG-4 fallback (for tests). */
int video_write_mp4(const char *path, const float *dec, int T, int H, int W, const video_opts *o,
                    const char **codec_out);
/* Every frame as DIR/frame_0000.png (created if missing) through libavcodec's PNG encoder. */
int video_write_pngs(const char *dir, const float *dec, int T, int H, int W);
/* One PNG with the frames in a grid (ceil(sqrt(T)) columns, 2-pixel gaps). */
int video_write_contact_sheet(const char *path, const float *dec, int T, int H, int W);
/* The same three, each file left as a temp in `set` (committed with the run's other outputs by
 * cvx_outset_commit; set NULL: each file renamed into place at once, as above). */
int video_write_mp4_set(cvx_outset *set, const char *path, const float *dec, int T, int H, int W, const video_opts *o,
                        const char **codec_out);
int video_write_pngs_set(cvx_outset *set, const char *dir, const float *dec, int T, int H, int W);
int video_write_contact_sheet_set(cvx_outset *set, const char *path, const float *dec, int T, int H, int W);

#endif
