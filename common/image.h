/* Reading images and videos into RGB8 frames through libavformat/libavcodec/libswscale:
 * a PNG/JPEG (any still-image format libav reads), a video file (any libav container/codec,
 * the first N frames), or a directory of frame images (file names sorted bytewise).
 * Conditioning inputs of image-to-video and video-to-video. */
#ifndef CVX_IMAGE_H
#define CVX_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* The largest input frame accepted, in pixels (8192 × 8192; an 8K UHD frame is 33 MP): checked
 * from the file's header, and by the decoder before it allocates a frame (libav's max_pixels),
 * so a 16000×16000 PNG of 0.8 MB is one error in milliseconds, not 1.5 GB and 19 s (issue 21).
 * docs/usage.md documents it. */
#define CVX_INPUT_MAX_PIXELS (8192LL * 8192LL)

typedef struct {
    uint8_t *rgb;        /* [frames, height, width, 3], row-major, packed */
    int frames, width, height;
} cvx_rgb_frames;

/* One image (the first frame of whatever libav decodes at `path`). 0, or -1 + cvx_error
 * naming the file ("cannot open", "no video stream", "no decodable frame", ...). */
int cvx_image_load(const char *path, cvx_rgb_frames *out);
/* The first max_frames frames (max_frames <= 0: all) of a video file, or of a directory of
 * images (*.png, *.jpg, *.jpeg, *.bmp, *.webp, *.tif, *.tiff, case-insensitive; other files
 * ignored) in sorted name order. Every frame must have the first frame's size. 0 frames is an
 * error, and so are fewer than max_frames ("--frames N: PATH has only K frames"). */
int cvx_video_load(const char *path, int max_frames, cvx_rgb_frames *out);
void cvx_rgb_frames_free(cvx_rgb_frames *f);

/* Frame t as a pointer into f->rgb. */
static inline const uint8_t *cvx_frame_rgb(const cvx_rgb_frames *f, int t) {
    return f->rgb + (size_t)t * f->height * f->width * 3;
}

#endif
