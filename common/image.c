/* Image/video decoding to RGB8 with libav (see image.h). */
#include "image.h"

#include <dirent.h>
#include <errno.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "error.h"
#include "fileio.h"

/* Frames are appended to a growing buffer; all must share the first frame's size. */
static int frames_append(cvx_rgb_frames *f, const AVFrame *fr, const char *path, struct SwsContext **sws) {
    if (f->frames == 0) {
        f->width = fr->width, f->height = fr->height;
    } else if (fr->width != f->width || fr->height != f->height) {
        return cvx_error("%s: frame %d is %dx%d, expected %dx%d like the first frame", path, f->frames, fr->width,
                         fr->height, f->width, f->height);
    }
    const size_t fb = (size_t)f->width * f->height * 3;
    f->rgb = cvx_realloc(f->rgb, fb * (f->frames + 1));
    /* JPEG's full-range "yuvj" formats: the plain format with the full range said explicitly
     * (swscale deprecates the yuvj names). */
    int fmt = fr->format, full = fr->color_range == AVCOL_RANGE_JPEG;
    switch (fmt) {
    case AV_PIX_FMT_YUVJ420P: fmt = AV_PIX_FMT_YUV420P, full = 1; break;
    case AV_PIX_FMT_YUVJ422P: fmt = AV_PIX_FMT_YUV422P, full = 1; break;
    case AV_PIX_FMT_YUVJ444P: fmt = AV_PIX_FMT_YUV444P, full = 1; break;
    case AV_PIX_FMT_YUVJ440P: fmt = AV_PIX_FMT_YUV440P, full = 1; break;
    default: break;
    }
    *sws = sws_getCachedContext(*sws, fr->width, fr->height, fmt, f->width, f->height, AV_PIX_FMT_RGB24,
                                SWS_POINT | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, NULL, NULL, NULL);
    if (!*sws) return cvx_error("%s: cannot convert pixel format %s to RGB24", path, av_get_pix_fmt_name(fr->format));
    const int *coefs = sws_getCoefficients(fr->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : fr->colorspace);
    sws_setColorspaceDetails(*sws, coefs, full, sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    uint8_t *dst[4] = {f->rgb + fb * f->frames, NULL, NULL, NULL};
    int dst_stride[4] = {f->width * 3, 0, 0, 0};
    sws_scale(*sws, (const uint8_t *const *)fr->data, fr->linesize, 0, fr->height, dst, dst_stride);
    f->frames++;
    return 0;
}

/* `path` names a regular file: else -1 + one error saying what it is (a directory, a FIFO or
 * device, a symlink loop, missing), not "no such file" for all of them (issue 21). */
static int check_input_file(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return cvx_error("%s: no such file", path);
        if (errno == ELOOP) return cvx_error("%s: a loop of symbolic links, not a file", path);
        return cvx_error("%s: cannot open: %s", path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode))
        return cvx_error("%s: a directory, not an image or video file (--video takes a directory of frames, --image "
                         "one file)", path);
    if (!S_ISREG(st.st_mode))
        return cvx_error("%s: not a regular file (a %s): give an image or video file", path,
                         S_ISFIFO(st.st_mode) ? "FIFO" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "device"
                         : S_ISSOCK(st.st_mode) ? "socket" : "special file");
    return 0;
}

/* Width and height from a PNG (IHDR) or baseline/progressive JPEG (SOFn) header: the size the
 * limit refuses when libav's probe, held by max_pixels, cannot tell it. 0 when not found. */
static int header_size(const char *path, long *w, long *h) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char b[65536];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    if (n >= 24 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8) && !memcmp(b + 12, "IHDR", 4)) {
        *w = (long)b[16] << 24 | (long)b[17] << 16 | (long)b[18] << 8 | b[19];
        *h = (long)b[20] << 24 | (long)b[21] << 16 | (long)b[22] << 8 | b[23];
        return 1;
    }
    for (size_t i = 2; n >= 4 && b[0] == 0xff && b[1] == 0xd8 && i + 9 < n;) {   /* JPEG markers */
        if (b[i] != 0xff) return 0;
        const unsigned m = b[i + 1], len = (unsigned)b[i + 2] << 8 | b[i + 3];
        if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
            *h = (long)b[i + 5] << 8 | b[i + 6];
            *w = (long)b[i + 7] << 8 | b[i + 8];
            return 1;
        }
        i += 2 + len;
    }
    return 0;
}

static int too_large(const char *path, long w, long h) {
    return cvx_error("%s: %ldx%ld is %lld pixels, more than the input limit of %lld (8192x8192) per frame: "
                     "scale it down first (docs/usage.md)", path, w, h, (long long)w * h,
                     (long long)CVX_INPUT_MAX_PIXELS);
}

/* Decode up to max_frames (<= 0: all) frames of the best video stream of `path`, appending. */
static int decode_file(const char *path, int max_frames, cvx_rgb_frames *f) {
    AVFormatContext *fc = NULL;
    AVCodecContext *ctx = NULL;
    AVPacket *pkt = NULL;
    AVFrame *fr = NULL;
    struct SwsContext *sws = NULL;
    char eb[AV_ERROR_MAX_STRING_SIZE];
    const int start = f->frames;
    int rc = -1, e;
    if (check_input_file(path)) return -1;
    /* Our one-line errors say what failed; libav's own chatter only below verbose (-v -v). */
    if (av_log_get_level() > AV_LOG_FATAL && cvx_verbosity() < 2) av_log_set_level(AV_LOG_FATAL);
    if ((e = avformat_open_input(&fc, path, NULL, NULL)) < 0) {
        av_strerror(e, eb, sizeof eb);
        return cvx_error("%s: cannot open as an image or video (%s)", path, eb);
    }
    /* the pixel limit before any pixel is decoded: the probe's decoders refuse larger frames */
    char max_px[32];
    snprintf(max_px, sizeof max_px, "%lld", (long long)CVX_INPUT_MAX_PIXELS);
    AVDictionary **popts = cvx_calloc(fc->nb_streams ? fc->nb_streams : 1, sizeof *popts);
    for (unsigned i = 0; i < fc->nb_streams; i++) av_dict_set(&popts[i], "max_pixels", max_px, 0);
    e = avformat_find_stream_info(fc, popts);
    for (unsigned i = 0; i < fc->nb_streams; i++) av_dict_free(&popts[i]);
    free(popts);
    if (e < 0) {
        av_strerror(e, eb, sizeof eb);
        cvx_error("%s: cannot read stream info (%s)", path, eb);
        goto out;
    }
    const AVCodec *codec = NULL;
    int si = av_find_best_stream(fc, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (si < 0 || !codec) {
        cvx_error("%s: no decodable video/image stream", path);
        goto out;
    }
    long hdr_w, hdr_h;
    const AVCodecParameters *par = fc->streams[si]->codecpar;
    if ((long long)par->width * par->height > CVX_INPUT_MAX_PIXELS) {
        too_large(path, par->width, par->height);
        goto out;
    }
    if ((!par->width || !par->height) && header_size(path, &hdr_w, &hdr_h) && (long long)hdr_w * hdr_h > CVX_INPUT_MAX_PIXELS) {
        too_large(path, hdr_w, hdr_h);
        goto out;
    }
    ctx = avcodec_alloc_context3(codec);
    pkt = av_packet_alloc();
    fr = av_frame_alloc();
    if (!ctx || !pkt || !fr) { cvx_error("%s: out of memory", path); goto out; }
    AVDictionary *copts = NULL;
    av_dict_set(&copts, "max_pixels", max_px, 0);
    e = avcodec_parameters_to_context(ctx, fc->streams[si]->codecpar) < 0 || avcodec_open2(ctx, codec, &copts) < 0;
    av_dict_free(&copts);
    if (e) {
        cvx_error("%s: cannot open the %s decoder", path, codec->name);
        goto out;
    }
    int eof = 0;
    while (max_frames <= 0 || f->frames - start < max_frames) {
        e = avcodec_receive_frame(ctx, fr);
        if (e == 0) {
            if (frames_append(f, fr, path, &sws)) goto out;
            av_frame_unref(fr);
            continue;
        }
        if (e == AVERROR_EOF) break;
        if (e != AVERROR(EAGAIN)) {
            av_strerror(e, eb, sizeof eb);
            cvx_error("%s: decoding failed after %d frames (%s)", path, f->frames - start, eb);
            goto out;
        }
        if (eof) break;
        e = av_read_frame(fc, pkt);
        if (e == AVERROR_EOF) {
            eof = 1;
            avcodec_send_packet(ctx, NULL);   /* drain */
            continue;
        }
        if (e < 0) {
            av_strerror(e, eb, sizeof eb);
            cvx_error("%s: read error after %d frames (%s)", path, f->frames - start, eb);
            goto out;
        }
        if (pkt->stream_index == si && (e = avcodec_send_packet(ctx, pkt)) < 0 && e != AVERROR(EAGAIN)) {
            av_strerror(e, eb, sizeof eb);
            if (f->frames == start && e == AVERROR(EINVAL) && (!ctx->width || !ctx->height))   /* max_pixels */
                cvx_error("%s: cannot decode as an image or video (%s; frames larger than the input limit of %lld "
                          "pixels are refused)", path, eb, (long long)CVX_INPUT_MAX_PIXELS);
            else if (f->frames == start) cvx_error("%s: cannot decode as an image or video (%s)", path, eb);
            else cvx_error("%s: corrupt data after %d frames (%s)", path, f->frames - start, eb);
            av_packet_unref(pkt);
            goto out;
        }
        av_packet_unref(pkt);
    }
    if (f->frames == start) { cvx_error("%s: no decodable frame (0 frames)", path); goto out; }
    rc = 0;
out:
    sws_freeContext(sws);
    av_frame_free(&fr);
    av_packet_free(&pkt);
    avcodec_free_context(&ctx);
    avformat_close_input(&fc);
    return rc;
}

int cvx_image_load(const char *path, cvx_rgb_frames *out) {
    memset(out, 0, sizeof *out);
    if (decode_file(path, 1, out)) {
        cvx_rgb_frames_free(out);
        return -1;
    }
    return 0;
}

static int is_image_name(const char *n) {
    static const char *const ext[] = {".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff"};
    const char *dot = strrchr(n, '.');
    if (!dot || n[0] == '.') return 0;
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++)
        if (!strcasecmp(dot, ext[i])) return 1;
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int load_dir(const char *path, int max_frames, cvx_rgb_frames *out) {
    DIR *d = opendir(path);
    if (!d) return cvx_error("%s: cannot open directory", path);
    char **names = NULL;
    int n = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (is_image_name(de->d_name)) {
            names = cvx_realloc(names, sizeof *names * (size_t)(n + 1));
            size_t len = strlen(de->d_name) + 1;
            names[n] = cvx_malloc(len);
            memcpy(names[n++], de->d_name, len);
        }
    closedir(d);
    if (n == 0) rc = cvx_error("%s: directory holds no frame images (.png, .jpg, ...): 0 frames", path);
    else qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 0; rc == 0 && i < n && (max_frames <= 0 || i < max_frames); i++) {
        char p[4096];
        if (cvx_path_join(p, sizeof p, path, names[i])) rc = cvx_error("%s: path too long", path);
        else rc = decode_file(p, 1, out);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

int cvx_video_load(const char *path, int max_frames, cvx_rgb_frames *out) {
    memset(out, 0, sizeof *out);
    int rc = cvx_is_dir(path) ? load_dir(path, max_frames, out) : decode_file(path, max_frames, out);
    if (!rc && max_frames > 0 && out->frames < max_frames)   /* not silently fewer (issue 21) */
        rc = cvx_error("--frames %d: %s has only %d frame%s (give at most %d, or none for all)", max_frames, path,
                       out->frames, out->frames == 1 ? "" : "s", out->frames);
    if (rc) cvx_rgb_frames_free(out);
    return rc;
}

void cvx_rgb_frames_free(cvx_rgb_frames *f) {
    free(f->rgb);
    memset(f, 0, sizeof *f);
}
