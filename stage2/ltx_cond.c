/* LTX-Video's image-to-video conditioning math (see ltx_cond.h). */
#include "ltx_cond.h"

#include "ltx_schedule.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "stage2/ltx_pack.h"
#include "latent_dist.h"
#include "rng_lowp.h"


void ltx_i2v_initial_latents(const float *image_latent, const float *noise, int C, int F, int h, int w,
                             float *latents, float *mask) {
    size_t hw = (size_t)h * w, S = (size_t)F * hw;
    for (size_t s = 0; s < S; s++) {
        float m = s < hw ? 1.0f : 0.0f;
        mask[s] = m;
        for (int c = 0; c < C; c++)   /* init·mask + noise·(1 − mask), float32 as upstream */
            latents[s * C + c] = image_latent[(size_t)c * hw + s % hw] * m + noise[(size_t)c * S + s] * (1.0f - m);
    }
}

void ltx_i2v_timesteps(float t, const float *mask, int S, float *out) {
    for (int s = 0; s < S; s++) out[s] = t * (1.0f - mask[s]);
}

void ltx_i2v_step(const float *sigmas, int i, const float *v, const float *x, int S, int C, int hw, float *out) {
    size_t keep = (size_t)hw * C, n = (size_t)S * C;
    memcpy(out, x, sizeof(float) * keep);
    ltx_step(sigmas, i, v + keep, x + keep, n - keep, out + keep);
}

void ltx_condition_video_coords(int F, int H, int W, int frame_index, double frame_rate, float *vc) {
    size_t S = (size_t)F * H * W;
    float inv = (float)(1.0 / frame_rate);
    for (int f = 0; f < F; f++)
        for (int h = 0; h < H; h++)
            for (int w = 0; w < W; w++) {
                size_t s = ((size_t)f * H + h) * W + w;
                int64_t pf = (int64_t)f * 8 + 1 - 8;
                pf = (pf < 0 ? 0 : pf) + frame_index;   /* _scale_video_ids on int64 ids */
                vc[s] = (float)pf * inv;
                vc[S + s] = (float)(h * 32);
                vc[2 * S + s] = (float)(w * 32);
            }
}

void ltx_condition_renoise(float t, const float *init, const float *noise, const float *mask, int tokens, int C,
                           float scale, float *latents) {
    float tt = t / 1000.0f, t2 = tt * tt;   /* (t / 1000.0) ** 2 on a 0-d float32 tensor */
    for (int k = 0; k < tokens; k++) {
        if (!(mask[k] > 1.0f - 1e-6f)) continue;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)k * C + c;
            latents[i] = init[i] + scale * noise[i] * t2;
        }
    }
}

void ltx_lerp(const float *start, const float *end, float weight, size_t n, float *out) {
    for (size_t i = 0; i < n; i++) {
        float d = end[i] - start[i];
        out[i] = weight < 0.5f ? start[i] + weight * d : end[i] - d * (1.0f - weight);
    }
}

/* latents [C, F, hw]: frames [f0, f0 + T) of every channel lerped toward cond [C, T, hw] (its
 * frames from c0 on) at `strength` */
static void lerp_frames(float *latents, int C, int F, size_t hw, int f0, const float *cond, int Tc, int c0, int T,
                        float strength) {
    for (int c = 0; c < C; c++) {
        float *x = latents + ((size_t)c * F + f0) * hw;
        ltx_lerp(x, cond + ((size_t)c * Tc + c0) * hw, strength, (size_t)T * hw, x);
    }
}

int ltx_condition_prepare(const ltx_condition *conds, int n, int C, int F, int h, int w, double frame_rate,
                          const float *latents_mean, const float *latents_std, float scaling, cvx_generator *g,
                          cvx_dtype sample_dtype, ltx_condition_run *out) {
    memset(out, 0, sizeof *out);
    const size_t hw = (size_t)h * w, S = (size_t)F * hw;
    int extra_frames = 0;
    for (int k = 0; k < n; k++) {
        const ltx_condition *c = &conds[k];
        const int end = c->frame_index == 0 ? c->T : c->T > 2 ? c->frame_index / 8 + c->T : 0;
        if (c->T < 1 || end > F)
            return cvx_error("condition %d (frame %d, %d latent frames) does not fit the video's %d latent frames", k + 1,
                             c->frame_index, c->T, F);
        if (c->frame_index > 0) extra_frames += c->T > 2 ? 2 : c->T;
    }
    out->extra = (int)(extra_frames * hw), out->tokens = (int)(out->extra + S);
    const size_t T = (size_t)out->tokens;
    float *noise = cvx_alloc_f32((size_t)C * S), *frame_mask = cvx_calloc((size_t)F, sizeof(float));
    out->latents = cvx_alloc_f32(T * C), out->mask = cvx_alloc_f32(T), out->video_coords = cvx_alloc_f32(3 * T);
    cvx_randn(g, noise, (size_t)C * S);   /* randn_tensor(shape, float32): the generator's first draw */
    int at = 0, rc = 0;   /* the next extra token */
    for (int k = 0; k < n && !rc; k++) {
        const ltx_condition *c = &conds[k];
        const size_t nc = (size_t)C * c->T * hw;
        float *lat = cvx_alloc_f32(nc);
        rc = vae_latent_sample_as(c->mean, c->std, nc, g, sample_dtype, lat);   /* retrieve_latents(generator) */
        if (rc) {
            free(lat);
            break;
        }
        ltx_normalize_latents(lat, 1, C, (size_t)c->T * hw, latents_mean, latents_std, scaling);
        if (c->frame_index == 0) {
            lerp_frames(noise, C, F, hw, 0, lat, c->T, 0, c->T, c->strength);
            for (int f = 0; f < c->T; f++) frame_mask[f] = c->strength;
        } else {
            int Tx = c->T;   /* the frames that become extra tokens */
            if (c->T > 2) {
                const int f0 = c->frame_index / 8 + 2;
                lerp_frames(noise, C, F, hw, f0, lat, c->T, 2, c->T - 2, c->strength);
                for (int f = f0; f < f0 + c->T - 2; f++) frame_mask[f] = c->strength;
                Tx = 2;
            }
            const size_t nx = (size_t)C * Tx * hw;
            float *xn = cvx_alloc_f32(nx), *xl = cvx_alloc_f32(nx), *vc = cvx_alloc_f32(3 * (size_t)Tx * hw);
            for (int ch = 0; ch < C; ch++)   /* condition_latents[:, :, :Tx] */
                memcpy(xl + (size_t)ch * Tx * hw, lat + (size_t)ch * c->T * hw, (size_t)Tx * hw * sizeof(float));
            cvx_randn(g, xn, nx);
            ltx_lerp(xn, xl, c->strength, nx, xl);
            ltx_pack_latents(xl, 1, C, Tx, h, w, out->latents + (size_t)at * C);
            ltx_condition_video_coords(Tx, h, w, c->frame_index, frame_rate, vc);
            const size_t m = (size_t)Tx * hw;
            for (int a = 0; a < 3; a++) memcpy(out->video_coords + a * T + at, vc + a * m, m * sizeof(float));
            for (size_t q = 0; q < m; q++) out->mask[at + q] = c->strength;
            at += (int)m;
            free(xn), free(xl), free(vc);
        }
        free(lat);
    }
    if (!rc) {   /* the video grid's tokens after the extra ones */
        float *vc = cvx_alloc_f32(3 * S);
        ltx_pack_latents(noise, 1, C, F, h, w, out->latents + (size_t)out->extra * C);
        ltx_condition_video_coords(F, h, w, 0, frame_rate, vc);
        for (int a = 0; a < 3; a++) memcpy(out->video_coords + a * T + out->extra, vc + a * S, S * sizeof(float));
        for (size_t s = 0; s < S; s++) out->mask[out->extra + s] = frame_mask[s / hw];
        free(vc);
    }
    free(noise), free(frame_mask);
    if (rc) ltx_condition_run_free(out);
    return rc;
}

void ltx_condition_run_free(ltx_condition_run *r) {
    free(r->latents), free(r->mask), free(r->video_coords);
    memset(r, 0, sizeof *r);
}

int ltx_i2v_prepare(const float *mean, const float *std, int C, int F, int h, int w, const float *latents_mean,
                    const float *latents_std, float scaling, cvx_generator *g, cvx_dtype sample_dtype, float **init) {
    const size_t hw = (size_t)h * w, fhw = hw * F;
    float *img = cvx_alloc_f32((size_t)C * hw), *noise = cvx_alloc_f32((size_t)C * fhw);
    int rc = vae_latent_sample_as(mean, std, (size_t)C * hw, g, sample_dtype, img);
    if (!rc) rc = cvx_randn_as(g, sample_dtype, noise, (size_t)C * fhw);
    if (!rc) {
        ltx_normalize_latents(img, 1, C, hw, latents_mean, latents_std, scaling);
        for (int ch = 0; ch < C; ch++) memcpy(noise + ch * fhw, img + ch * hw, hw * sizeof(float));
    } else {
        free(noise);
        noise = NULL;
    }
    free(img);
    *init = noise;
    return rc;
}

/* frames [t0, t0 + T) of src [C, Ttot, hw] -> dst [C, T, hw] */
static void frames_slice(const float *src, int C, int Ttot, int t0, int T, size_t hw, float *dst) {
    for (int c = 0; c < C; c++)
        memcpy(dst + (size_t)c * T * hw, src + ((size_t)c * Ttot + t0) * hw, sizeof(float) * T * hw);
}

int ltx_condition_start(const float *mean, const float *std, int T_all, const ltx_condition *items, int n, int C,
                        int F, int h, int w, double frame_rate,
                        const float *latents_mean, const float *latents_std, float scaling, cvx_generator *g,
                        cvx_dtype sample_dtype, float t0, float scale, ltx_condition_run *out, float **init) {
    *init = NULL;
    const size_t hw = (size_t)h * w;
    ltx_condition *conds = cvx_calloc((size_t)n, sizeof *conds);
    float *parts = cvx_alloc_f32((size_t)2 * C * T_all * hw);   /* each condition's mean, std contiguous */
    for (int k = 0, f0 = 0; k < n; f0 += items[k].T, k++) {
        const int T = items[k].T;
        float *m = parts + (size_t)2 * C * f0 * hw, *s = m + (size_t)C * T * hw;
        frames_slice(mean, C, T_all, f0, T, hw, m);
        frames_slice(std, C, T_all, f0, T, hw, s);
        conds[k] = (ltx_condition){m, s, T, items[k].frame_index, items[k].strength};
    }
    int rc = ltx_condition_prepare(conds, n, C, F, h, w, frame_rate, latents_mean, latents_std, scaling, g,
                                   sample_dtype, out);
    free(parts), free(conds);
    if (rc) return -1;
    const size_t numel = (size_t)out->tokens * C;
    *init = cvx_alloc_f32(numel);
    memcpy(*init, out->latents, numel * sizeof(float));
    if (scale > 0) {   /* step 0's add_noise_to_image_conditioning_latents */
        float *noise = cvx_alloc_f32(numel);
        cvx_randn(g, noise, numel);
        ltx_condition_renoise(t0, out->latents, noise, out->mask, out->tokens, C, scale, *init);
        free(noise);
    }
    return 0;
}
