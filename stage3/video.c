/* Video files through libavformat/libavcodec/libswscale: MP4 (H.264 or MPEG-4 part 2),
 * PNG frames and a contact sheet. Every file is written to a temp name and renamed. */
#include "video.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "fileio.h"

uint8_t video_u8(float x) {
    float v = video_unit(x) * 255.0f;   /* float32 product, as numpy on a float32 array */
    return (uint8_t)rintf(v);           /* np.round: half to even (default rounding mode) */
}

void video_frame_rgb(const float *dec, int T, int H, int W, int t, uint8_t *rgb) {
    const size_t HW = (size_t)H * W;
    for (int c = 0; c < 3; c++) {
        const float *p = dec + ((size_t)c * T + t) * HW;
        for (size_t i = 0; i < HW; i++) rgb[i * 3 + c] = video_u8(p[i]);
    }
}

/* libav's message for e, in a buffer of the caller's (an expression's lifetime). */
typedef struct {
    char s[AV_ERROR_MAX_STRING_SIZE];
} av_err_buf;
static const char *av_err_str(int e, av_err_buf *b) {
    av_strerror(e, b->s, sizeof b->s);
    return b->s;
}
#define av_err(e) av_err_str((e), &(av_err_buf){{0}})

/* Frame t as RGB24 [He, We, 3], the last row/column repeated when He/We exceed H/W. */
static void frame_rgb_padded(const float *dec, int T, int H, int W, int t, uint8_t *rgb, int He, int We) {
    uint8_t *tmp = cvx_malloc((size_t)H * W * 3);
    video_frame_rgb(dec, T, H, W, t, tmp);
    for (int y = 0; y < He; y++) {
        const uint8_t *src = tmp + (size_t)(y < H ? y : H - 1) * W * 3;
        uint8_t *dst = rgb + (size_t)y * We * 3;
        memcpy(dst, src, (size_t)W * 3);
        for (int x = W; x < We; x++) memcpy(dst + (size_t)x * 3, src + (size_t)(W - 1) * 3, 3);
    }
    free(tmp);
}

/* x264's frame threads: a fixed count, so that the bytes do not depend on the CPUs this process
 * may use (x264's "auto" is 1.5 × that count: a run under mpirun --bind-to core, taskset or a
 * container's CPU set would encode differently); x264 is deterministic for a given count. */
#define X264_THREADS 4

/* x264's "asm" option: the instruction sets this CPU has (what x264 would detect), without
 * AVX-512. libx264 0.164's AVX-512 code reads uninitialised memory in its macroblock-tree rate
 * control: the MP4 bytes of one input differed from run to run (5 runs, 4 files; decoded pixels
 * up to 31/255 apart) and with the heap's contents (MALLOC_PERTURB_), never without AVX-512
 * (issue 21). Names as x264_cpu_names; a name x264 does not know only loses that set. */
static void x264_asm_flags(char *buf, size_t n) {
    static const struct { const char *gcc, *x264; } sets[] = {
        {"sse", "SSE"}, {"sse2", "SSE2"}, {"ssse3", "SSE2Fast"}, {"sse3", "SSE3"}, {"ssse3", "SSSE3"},
        {"sse4.1", "SSE4.1"}, {"sse4.2", "SSE4.2"}, {"avx", "AVX"}, {"fma", "FMA3"}, {"bmi", "BMI1"},
        {"bmi2", "BMI2"}, {"avx2", "AVX2"}, {"lzcnt", "LZCNT"}};
    __builtin_cpu_init();
    size_t k = (size_t)snprintf(buf, n, "MMX2");   /* every x86-64 CPU */
    for (size_t i = 0; i < sizeof sets / sizeof sets[0] && k < n; i++) {
        int has = 0;
        /* __builtin_cpu_supports needs a literal: one comparison per name */
#define CPU_HAS(name) (!strcmp(sets[i].gcc, name) && __builtin_cpu_supports(name))
        has = CPU_HAS("sse") || CPU_HAS("sse2") || CPU_HAS("ssse3") || CPU_HAS("sse3") || CPU_HAS("sse4.1") ||
              CPU_HAS("sse4.2") || CPU_HAS("avx") || CPU_HAS("fma") || CPU_HAS("bmi") || CPU_HAS("bmi2") ||
              CPU_HAS("avx2") || CPU_HAS("lzcnt");
#undef CPU_HAS
        if (has) k += (size_t)snprintf(buf + k, n - k, ",%s", sets[i].x264);
    }
}

typedef struct {
    AVFormatContext *oc;
    AVCodecContext *ctx;
    AVStream *st;
    AVPacket *pkt;
} mp4_writer;

static int drain(mp4_writer *m, const char *path) {
    for (;;) {
        int r = avcodec_receive_packet(m->ctx, m->pkt);
        if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return 0;
        if (r < 0) return cvx_error("%s: encoding failed: %s", path, av_err(r));
        av_packet_rescale_ts(m->pkt, m->ctx->time_base, m->st->time_base);
        m->pkt->stream_index = m->st->index;
        r = av_interleaved_write_frame(m->oc, m->pkt);
        if (r < 0) return cvx_error("%s: cannot write video data: %s", path, av_err(r));
    }
}

int video_write_mp4(const char *path, const float *dec, int T, int H, int W, const video_opts *o,
                    const char **codec_out) {
    return video_write_mp4_set(NULL, path, dec, T, H, W, o, codec_out);
}

int video_write_mp4_set(cvx_outset *set, const char *path, const float *dec, int T, int H, int W, const video_opts *o,
                        const char **codec_out) {
    char tmp[4200];
    cvx_temp_path(path, tmp, sizeof tmp);
    if (!tmp[0]) return -1;   /* not a regular file there, or an unwritable directory: said */
    const int He = H + (H & 1), We = W + (W & 1);   /* yuv420p needs even sizes: pad by repeating */
    /* CVX_VIDEO_NO_H264=1 pretends no H.264 encoder exists (tests the fallback). */
    const char *no264 = getenv("CVX_VIDEO_NO_H264");
    const int allow_h264 = !(no264 && no264[0] == '1');
    const AVCodec *codec = allow_h264 ? avcodec_find_encoder_by_name("libx264") : NULL;
    if (!codec && allow_h264) codec = avcodec_find_encoder(AV_CODEC_ID_H264);
    if (!codec) {
        codec = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
        if (!codec) {
            cvx_temp_discard(tmp);
            return cvx_error("%s: neither an H.264 nor an MPEG-4 encoder is available in libavcodec", path);
        }
        cvx_warn("no H.264 encoder in this libavcodec; writing MPEG-4 part 2 instead");
    }
    av_log_set_level(o->verbose ? AV_LOG_INFO : AV_LOG_ERROR);   /* no encoder chatter on stderr */
    mp4_writer m = {0};
    AVFrame *frame = NULL;
    struct SwsContext *sws = NULL;
    uint8_t *rgb = NULL;
    int rc = -1, r, opened = 0;
    if ((r = avformat_alloc_output_context2(&m.oc, NULL, "mp4", tmp)) < 0 || !m.oc) {
        cvx_error("%s: cannot set up the MP4 muxer: %s", path, av_err(r));
        goto out;
    }
    m.ctx = avcodec_alloc_context3(codec);
    m.pkt = av_packet_alloc();
    frame = av_frame_alloc();
    if (!m.ctx || !m.pkt || !frame) { cvx_error("%s: out of memory in libavcodec", path); goto out; }
    m.ctx->width = We, m.ctx->height = He;
    m.ctx->time_base = (AVRational){1, o->fps};
    m.ctx->framerate = (AVRational){o->fps, 1};
    m.ctx->pix_fmt = AV_PIX_FMT_YUV420P;
    m.ctx->gop_size = 2 * o->fps;
    /* swscale's default RGB->YUV matrix is BT.601, limited range: tag it so players agree. */
    m.ctx->colorspace = AVCOL_SPC_SMPTE170M;
    m.ctx->color_primaries = AVCOL_PRI_SMPTE170M;
    m.ctx->color_trc = AVCOL_TRC_SMPTE170M;
    m.ctx->color_range = AVCOL_RANGE_MPEG;
    if (codec->id == AV_CODEC_ID_H264) {
        char crf[16];
        snprintf(crf, sizeof crf, "%d", o->crf);
        av_opt_set(m.ctx->priv_data, "crf", crf, 0);
        av_opt_set(m.ctx->priv_data, "preset", "medium", 0);
        if (!strcmp(codec->name, "libx264")) {   /* the same bytes from every run (see above) */
            char params[256] = "asm=";
            x264_asm_flags(params + 4, sizeof params - 4);
            av_opt_set(m.ctx->priv_data, "x264-params", params, 0);
            m.ctx->thread_count = X264_THREADS;
        }
    } else {
        m.ctx->flags |= AV_CODEC_FLAG_QSCALE;
        m.ctx->global_quality = FF_QP2LAMBDA * 3;   /* high quality fixed quantiser */
    }
    if (m.oc->oformat->flags & AVFMT_GLOBALHEADER) m.ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if ((r = avcodec_open2(m.ctx, codec, NULL)) < 0) {
        cvx_error("%s: cannot open the %s encoder: %s", path, codec->name, av_err(r));
        goto out;
    }
    m.st = avformat_new_stream(m.oc, NULL);
    if (!m.st) { cvx_error("%s: cannot add a video stream", path); goto out; }
    m.st->time_base = m.ctx->time_base;
    m.st->avg_frame_rate = m.ctx->framerate;
    if ((r = avcodec_parameters_from_context(m.st->codecpar, m.ctx)) < 0) {
        cvx_error("%s: %s", path, av_err(r));
        goto out;
    }
    if ((r = avio_open(&m.oc->pb, tmp, AVIO_FLAG_WRITE)) < 0) {
        cvx_error("%s: cannot create the output file: %s", tmp, av_err(r));
        goto out;
    }
    opened = 1;
    if ((r = avformat_write_header(m.oc, NULL)) < 0) {
        cvx_error("%s: cannot write the MP4 header: %s", path, av_err(r));
        goto out;
    }
    frame->format = AV_PIX_FMT_YUV420P, frame->width = We, frame->height = He;
    if ((r = av_frame_get_buffer(frame, 0)) < 0) { cvx_error("%s: %s", path, av_err(r)); goto out; }
    sws = sws_getContext(We, He, AV_PIX_FMT_RGB24, We, He, AV_PIX_FMT_YUV420P, SWS_BICUBIC | SWS_ACCURATE_RND, NULL,
                         NULL, NULL);
    if (!sws) { cvx_error("%s: cannot set up RGB to YUV conversion", path); goto out; }
    rgb = cvx_malloc((size_t)He * We * 3);
    for (int t = 0; t < T; t++) {
        frame_rgb_padded(dec, T, H, W, t, rgb, He, We);
        if ((r = av_frame_make_writable(frame)) < 0) { cvx_error("%s: %s", path, av_err(r)); goto out; }
        const uint8_t *src[1] = {rgb};
        int stride[1] = {We * 3};
        sws_scale(sws, src, stride, 0, He, frame->data, frame->linesize);
        frame->pts = t;
        if ((r = avcodec_send_frame(m.ctx, frame)) < 0) {
            cvx_error("%s: encoding failed: %s", path, av_err(r));
            goto out;
        }
        if (drain(&m, path)) goto out;
    }
    if ((r = avcodec_send_frame(m.ctx, NULL)) < 0) { cvx_error("%s: %s", path, av_err(r)); goto out; }
    if (drain(&m, path)) goto out;
    if ((r = av_write_trailer(m.oc)) < 0) { cvx_error("%s: cannot finish the MP4: %s", path, av_err(r)); goto out; }
    r = avio_closep(&m.oc->pb);
    opened = 0;
    if (r < 0) { cvx_error("%s: cannot close the output file: %s", tmp, av_err(r)); goto out; }
    if (set ? cvx_outset_add(set, tmp, path) : cvx_commit_file(tmp, path)) { tmp[0] = 0; goto out; }   /* temp gone */
    tmp[0] = 0;
    if (codec_out) *codec_out = codec->name;
    rc = 0;
out:
    if (opened) avio_closep(&m.oc->pb);
    if (rc && tmp[0]) cvx_temp_discard(tmp);
    free(rgb);
    sws_freeContext(sws);
    av_frame_free(&frame);
    av_packet_free(&m.pkt);
    avcodec_free_context(&m.ctx);
    avformat_free_context(m.oc);
    return rc;
}

/* One RGB24 image as PNG bytes, written atomically (or as a temp of the set). */
static int write_png(cvx_outset *set, const char *path, const uint8_t *rgb, int H, int W) {
    if (av_log_get_level() > AV_LOG_ERROR && cvx_verbosity() < 2) av_log_set_level(AV_LOG_ERROR);
    const AVCodec *codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
    if (!codec) return cvx_error("%s: libavcodec has no PNG encoder", path);
    AVCodecContext *ctx = avcodec_alloc_context3(codec);
    AVFrame *f = av_frame_alloc();
    AVPacket *pkt = av_packet_alloc();
    int rc = -1, r;
    if (!ctx || !f || !pkt) { cvx_error("%s: out of memory in libavcodec", path); goto out; }
    ctx->width = W, ctx->height = H, ctx->pix_fmt = AV_PIX_FMT_RGB24, ctx->time_base = (AVRational){1, 1};
    if ((r = avcodec_open2(ctx, codec, NULL)) < 0) { cvx_error("%s: PNG encoder: %s", path, av_err(r)); goto out; }
    f->format = AV_PIX_FMT_RGB24, f->width = W, f->height = H;
    if ((r = av_frame_get_buffer(f, 0)) < 0) { cvx_error("%s: %s", path, av_err(r)); goto out; }
    for (int y = 0; y < H; y++) memcpy(f->data[0] + (size_t)y * f->linesize[0], rgb + (size_t)y * W * 3, (size_t)W * 3);
    f->pts = 0;
    if ((r = avcodec_send_frame(ctx, f)) < 0 || (r = avcodec_receive_packet(ctx, pkt)) < 0) {
        cvx_error("%s: PNG encoding failed: %s", path, av_err(r));
        goto out;
    }
    rc = set ? cvx_outset_write(set, path, pkt->data, (size_t)pkt->size)
             : cvx_write_file_atomic(path, pkt->data, (size_t)pkt->size);
out:
    av_packet_free(&pkt);
    av_frame_free(&f);
    avcodec_free_context(&ctx);
    return rc;
}

int video_write_pngs(const char *dir, const float *dec, int T, int H, int W) {
    return video_write_pngs_set(NULL, dir, dec, T, H, W);
}

int video_write_pngs_set(cvx_outset *set, const char *dir, const float *dec, int T, int H, int W) {
    if (cvx_mkdirs(dir)) return -1;
    uint8_t *rgb = cvx_malloc((size_t)H * W * 3);
    int rc = 0;
    for (int t = 0; t < T && !rc; t++) {
        char name[64], path[4200];
        snprintf(name, sizeof name, "frame_%04d.png", t);
        if (cvx_path_join(path, sizeof path, dir, name)) rc = cvx_error("%s: path too long", dir);
        else {
            video_frame_rgb(dec, T, H, W, t, rgb);
            rc = write_png(set, path, rgb, H, W);
        }
    }
    free(rgb);
    return rc;
}

int video_write_contact_sheet(const char *path, const float *dec, int T, int H, int W) {
    return video_write_contact_sheet_set(NULL, path, dec, T, H, W);
}

int video_write_contact_sheet_set(cvx_outset *set, const char *path, const float *dec, int T, int H, int W) {
    const int cols = (int)ceil(sqrt((double)T)), rows = (T + cols - 1) / cols, gap = 2;
    /* Box-shrink by an integer factor so the sheet stays at most ~2048 pixels wide. */
    int s = 1;
    while ((W / s) * cols > 2048 && W / s > 16) s++;
    const int h = H / s, w = W / s, SH = rows * h + (rows + 1) * gap, SW = cols * w + (cols + 1) * gap;
    uint8_t *sheet = cvx_malloc((size_t)SH * SW * 3), *rgb = cvx_malloc((size_t)H * W * 3);
    memset(sheet, 32, (size_t)SH * SW * 3);   /* dark grey gaps */
    for (int t = 0; t < T; t++) {
        video_frame_rgb(dec, T, H, W, t, rgb);
        int oy = gap + (t / cols) * (h + gap), ox = gap + (t % cols) * (w + gap);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int c = 0; c < 3; c++) {
                    int acc = 0;
                    for (int dy = 0; dy < s; dy++)
                        for (int dx = 0; dx < s; dx++) acc += rgb[((size_t)(y * s + dy) * W + x * s + dx) * 3 + c];
                    sheet[((size_t)(oy + y) * SW + ox + x) * 3 + c] = (uint8_t)((acc + s * s / 2) / (s * s));
                }
    }
    int rc = write_png(set, path, sheet, SH, SW);
    free(sheet), free(rgb);
    return rc;
}
