/* The Wan VAE tests' shared pieces (stage3_wan_vae.c for the 2.1 VAE, stage3_wan22_vae.c for the
 * 2.2 one; header-only: every test is one program): the pool-balance checks, the decoded frames
 * collected from the frame callback in order, a latent decoded into one video, a latent tile cut
 * out, and upstream's blend_v / blend_h restated for the tiled-decode references. */
#ifndef CVX_WAN_VAE_HARNESS_H
#define CVX_WAN_VAE_HARNESS_H

#include "testutil.h"
#include "stage3/wan_vae.h"

/* No feature map of the context's pool is still out (each call gave back what it took). */
static inline void assert_pool_balanced(const wan_vae *v) { assert_int_equal(cvx_pool_in_use(&v->ctx->maps), 0); }

/* The VAE freed on a borrowed context: the pool keeps nothing (vae_conv_forget trims it). */
static inline void free_and_check_pool(wan_vae *v, cvx_ctx *ctx) {
    wan_vae_free(v);
    assert_int_equal(cvx_pool_in_use(&ctx->maps), 0);
    assert_true(ctx->maps.held_bytes == 0);
    cvx_ctx_free(ctx);
}

/* The frames a decode hands out, in order, into one video. */
typedef struct {
    float *video;   /* [3, T, H, W] */
    int T, H, W;
    int next_t0, calls, batch[64];   /* batch[k]: the frame count of call k */
} wv_collect;

static inline void wv_collect_init(wv_collect *c, int T, int H, int W) {
    memset(c, 0, sizeof *c);
    c->T = T, c->H = H, c->W = W;
    c->video = cvx_alloc_f32((size_t)3 * T * H * W);
}

/* the decode's frame callback: fails the test on frames out of order or of another size */
static inline int wv_collect_frames(void *user, const float *frames, int t0, int n, int H, int W) {
    wv_collect *c = user;
    if (t0 != c->next_t0 || t0 + n > c->T || H != c->H || W != c->W) fail_msg("frames %d+%d (%dx%d) out of order", t0, n, H, W);
    const size_t f = (size_t)H * W;
    for (int ch = 0; ch < 3; ch++)
        memcpy(c->video + ((size_t)ch * c->T + t0) * f, frames + (size_t)ch * n * f, sizeof(float) * n * f);
    if (c->calls < 64) c->batch[c->calls] = n;
    c->calls++, c->next_t0 += n;
    return 0;
}

/* Decode z [zc, F, h, w] (clamp or not, tiled or not) into a new [3, T, H, W]: every frame handed
 * out, one call per latent frame (1 frame, then temporal_ratio each). */
static inline float *wv_decode_z(const wan_vae *v, const float *z, int F, int h, int w, const wan_vae_tiling *t,
                                 int clamp) {
    wv_collect c;
    wv_collect_init(&c, wan_vae_decoded_frames(v, F), h * v->spatial_ratio, w * v->spatial_ratio);
    ASSERT_OK(wan_vae_decode_z(v, z, F, h, w, t, clamp, wv_collect_frames, &c, NULL));
    assert_int_equal(c.next_t0, c.T);
    assert_int_equal(c.calls, F);
    for (int k = 0; k < F && k < 64; k++) assert_int_equal(c.batch[k], k ? v->temporal_ratio : 1);
    return c.video;
}

/* Rows i0.. and columns j0.. (lh × lw) of every frame of z [zc, F, h, w], newly allocated. */
static inline float *wv_latent_tile(const float *z, int zc, int F, int h, int w, int i0, int j0, int lh, int lw) {
    float *zt = cvx_alloc_f32((size_t)zc * F * lh * lw);
    for (int c = 0; c < zc; c++)
        for (int f = 0; f < F; f++)
            for (int y = 0; y < lh; y++)
                memcpy(zt + (((size_t)c * F + f) * lh + y) * lw, z + (((size_t)c * F + f) * h + i0 + y) * w + j0,
                       sizeof(float) * lw);
    return zt;
}

/* upstream blend_v / blend_h, literally (b modified in place) on [CT, Hx, Wx] tiles (CT: channels
 * × frames) */
static inline void wv_ref_blend_v(const float *a, int Ha, float *b, int Hb, int CT, int W, int ext) {
    ext = ext < Ha ? ext : Ha, ext = ext < Hb ? ext : Hb;
    for (int y = 0; y < ext; y++)
        for (int c = 0; c < CT; c++)
            for (int x = 0; x < W; x++) {
                float *bb = &b[((size_t)c * Hb + y) * W + x];
                *bb = a[((size_t)c * Ha + Ha - ext + y) * W + x] * (float)(1 - (double)y / ext) + *bb * (float)((double)y / ext);
            }
}
static inline void wv_ref_blend_h(const float *a, int Wa, float *b, int Wb, int CT, int H, int ext) {
    ext = ext < Wa ? ext : Wa, ext = ext < Wb ? ext : Wb;
    for (int x = 0; x < ext; x++)
        for (size_t row = 0; row < (size_t)CT * H; row++) {
            float *bb = &b[row * Wb + x];
            *bb = a[row * Wa + Wa - ext + x] * (float)(1 - (double)x / ext) + *bb * (float)((double)x / ext);
        }
}

#endif
