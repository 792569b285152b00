/* cvx-compare --report (report.h), drawn with cairo. */
#include "tools/report.h"

#include <cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fileio.h"

#define PANEL 256      /* picture width in the report (pixels) */
#define GAP 12
#define CHART_H 220

/* The pictures of one frame: A and B as RGB24 and |A − B| as one value per pixel. */
typedef struct {
    int W, H;
    uint8_t *a, *b;     /* [H, W, 3] */
    float *d;           /* [H, W] */
} pics;

/* Heat colour of v in [0, 1]: black, dark red, orange, yellow, white. */
static void heat(double v, double *r, double *g, double *b) {
    v = v < 0 ? 0 : v > 1 ? 1 : v;
    *r = v < 0.4 ? v / 0.4 : 1.0;
    *g = v < 0.4 ? 0 : v < 0.8 ? (v - 0.4) / 0.4 : 1.0;
    *b = v < 0.8 ? 0 : (v - 0.8) / 0.2;
}

static cairo_surface_t *rgb_surface(const uint8_t *rgb, int W, int H) {
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    cairo_surface_flush(s);
    unsigned char *p = cairo_image_surface_get_data(s);
    const int stride = cairo_image_surface_get_stride(s);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const uint8_t *q = rgb + ((size_t)y * W + x) * 3;
            ((uint32_t *)(p + (size_t)y * stride))[x] = (uint32_t)q[0] << 16 | (uint32_t)q[1] << 8 | q[2];
        }
    cairo_surface_mark_dirty(s);
    return s;
}

static cairo_surface_t *heat_surface(const float *d, int W, int H, double dmax) {
    uint8_t *rgb = cvx_malloc((size_t)W * H * 3);
    for (size_t i = 0; i < (size_t)W * H; i++) {
        double r, g, b;
        heat(dmax > 0 ? d[i] / dmax : 0, &r, &g, &b);
        rgb[3 * i] = (uint8_t)lround(255 * r), rgb[3 * i + 1] = (uint8_t)lround(255 * g);
        rgb[3 * i + 2] = (uint8_t)lround(255 * b);
    }
    cairo_surface_t *s = rgb_surface(rgb, W, H);
    free(rgb);
    return s;
}

static void text(cairo_t *cr, double x, double y, double size, const char *s) {
    cairo_set_font_size(cr, size);
    cairo_move_to(cr, x, y);
    cairo_show_text(cr, s);
}

/* A picture scaled to PANEL wide (nearest neighbour: pixels stay visible). */
static void put(cairo_t *cr, cairo_surface_t *s, int W, int H, double x, double y) {
    const double k = (double)PANEL / W;
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_scale(cr, k, k);
    cairo_set_source_surface(cr, s, 0, 0);
    cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
    cairo_rectangle(cr, 0, 0, W, H);
    cairo_fill(cr);
    cairo_restore(cr);
    (void)H;
}

/* The pictures of frame t: video frames, or latent frame t (the channel mean, grey over
 * [−m, m], m the largest |value| of either side). */
static void frame_pics(const cmp_ctx *c, int t, double lat_m, pics *p) {
    if (c->fr) {
        p->W = c->va.width, p->H = c->va.height;
        const size_t n = (size_t)p->W * p->H;
        p->a = cvx_malloc(n * 3), p->b = cvx_malloc(n * 3), p->d = cvx_malloc(n * sizeof(float));
        memcpy(p->a, cvx_frame_rgb(&c->va, t), n * 3), memcpy(p->b, cvx_frame_rgb(&c->vb, t), n * 3);
        for (size_t i = 0; i < n; i++)
            p->d[i] = (fabsf((float)p->a[3 * i] - p->b[3 * i]) + fabsf((float)p->a[3 * i + 1] - p->b[3 * i + 1]) +
                       fabsf((float)p->a[3 * i + 2] - p->b[3 * i + 2])) / 3.0f;
        return;
    }
    p->W = c->lat_W, p->H = c->lat_H;
    const size_t n = (size_t)p->W * p->H, plane = (size_t)c->lat_T * n;
    p->a = cvx_malloc(n * 3), p->b = cvx_malloc(n * 3), p->d = cvx_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        double sa = 0, sb = 0, sd = 0;
        for (int ch = 0; ch < c->lat_C; ch++) {
            const float va = c->lat_a[ch * plane + (size_t)t * n + i], vb = c->lat_b[ch * plane + (size_t)t * n + i];
            sa += va, sb += vb, sd += fabsf(va - vb);
        }
        sa /= c->lat_C, sb /= c->lat_C;
        const uint8_t ga = (uint8_t)lround(255 * (0.5 + 0.5 * sa / lat_m)), gb = (uint8_t)lround(255 * (0.5 + 0.5 * sb / lat_m));
        memset(p->a + 3 * i, ga, 3), memset(p->b + 3 * i, gb, 3);
        p->d[i] = (float)(sd / c->lat_C);
    }
}

typedef struct {
    const double *y;
    int n;
    double r, g, b;
    const char *label;
} series;

/* A line chart of series over x = 0 .. n − 1 in the box (x, y, w, h); mark >= 0 draws a vertical
 * line there. Non-finite values (PSNR of equal frames) are drawn at the top, as "inf". */
static void chart(cairo_t *cr, double x, double y, double w, double h, const char *title, const char *xlabel,
                  const series *s, int ns, int mark, const char *mark_label) {
    double lo = INFINITY, hi = -INFINITY;
    int n = 0, inf = 0;
    for (int k = 0; k < ns; k++) {
        if (s[k].n > n) n = s[k].n;
        for (int i = 0; i < s[k].n; i++) {
            if (!isfinite(s[k].y[i])) { inf = 1; continue; }
            if (s[k].y[i] < lo) lo = s[k].y[i];
            if (s[k].y[i] > hi) hi = s[k].y[i];
        }
    }
    if (!isfinite(lo)) lo = 0, hi = 1;
    if (hi - lo < 1e-12 * (fabs(hi) + 1)) lo -= 0.5 * (fabs(lo) + 1e-3), hi += 0.5 * (fabs(hi) + 1e-3);
    const double pad = 0.08 * (hi - lo);
    lo -= pad, hi += pad;
    const double px = x + 64, py = y + 24, pw = w - 80, ph = h - 56;
    cairo_set_source_rgb(cr, 0, 0, 0);
    text(cr, x + 4, y + 14, 13, title);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, px, py, pw, ph);
    cairo_stroke(cr);
    char buf[64];
    for (int k = 0; k <= 4; k++) {   /* y ticks */
        const double v = lo + (hi - lo) * k / 4, yy = py + ph - ph * k / 4;
        snprintf(buf, sizeof buf, "%.5g", v);
        text(cr, x + 2, yy + 4, 10, buf);
    }
    const int nx = n > 1 ? n - 1 : 1;
    for (int i = 0; i < n; i += (n > 12 ? n / 12 : 1)) {   /* x ticks */
        snprintf(buf, sizeof buf, "%d", i);
        text(cr, px + pw * i / nx - 3, py + ph + 14, 10, buf);
    }
    text(cr, px + pw / 2 - 20, py + ph + 28, 11, xlabel);
    if (inf) text(cr, px + pw - 150, py - 4, 10, "points at the top: inf (equal)");
    if (mark >= 0) {
        const double mx = px + pw * mark / nx;
        cairo_set_source_rgb(cr, 0.85, 0, 0);
        cairo_move_to(cr, mx, py), cairo_line_to(cr, mx, py + ph);
        cairo_stroke(cr);
        text(cr, mx + 4, py + 14, 11, mark_label);
    }
    for (int k = 0; k < ns; k++) {
        cairo_set_source_rgb(cr, s[k].r, s[k].g, s[k].b);
        cairo_set_line_width(cr, k ? 1.5 : 3);   /* A wide under B: equal lines stay visible */
        for (int i = 0; i < s[k].n; i++) {
            const double v = isfinite(s[k].y[i]) ? s[k].y[i] : hi;
            const double xx = px + pw * (n > 1 ? (double)i / nx : 0.5), yy = py + ph - ph * (v - lo) / (hi - lo);
            if (i) cairo_line_to(cr, xx, yy);
            else cairo_move_to(cr, xx, yy);
        }
        cairo_stroke(cr);
        for (int i = 0; i < s[k].n; i++) {
            const double v = isfinite(s[k].y[i]) ? s[k].y[i] : hi;
            cairo_arc(cr, px + pw * (n > 1 ? (double)i / nx : 0.5), py + ph - ph * (v - lo) / (hi - lo), k ? 2.5 : 4, 0,
                      2 * M_PI);
            cairo_fill(cr);
        }
        text(cr, px + 8 + 110 * k, py + ph - 8, 11, s[k].label);
    }
}

int report_write(const cmp_ctx *c, const char *path, const char *name_a, const char *name_b, const int *frames_in,
                 int n) {
    const int have_pics = c->fr || c->lat_a;
    if (!have_pics && !c->have_steps)
        return cvx_error("--report %s: nothing to draw (no video, latents or step records were compared)", path);
    const int T = c->fr ? c->va.frames : c->lat_T;
    int frames[16];
    if (n <= 0 && have_pics) {
        frames[0] = 0, frames[1] = T / 2, frames[2] = T - 1;
        n = T >= 3 ? 3 : T;
        if (T == 2) frames[1] = 1;
    } else {
        if (n > 16) return cvx_error("--frames: at most 16 frames, got %d", n);
        for (int i = 0; i < n; i++) {
            if (have_pics && (frames_in[i] < 0 || frames_in[i] >= T))
                return cvx_error("--frames: frame %d is out of range (%s has %d %s)", frames_in[i], name_a, T,
                                 c->fr ? "frames" : "latent frames");
            frames[i] = frames_in[i];
        }
    }
    if (!have_pics) n = 0;
    /* the pictures first: the heat scale is the largest difference over the chosen frames */
    pics p[16];
    double dmax = 0, lat_m = 1e-6;
    if (c->lat_a && !c->fr)
        for (size_t i = 0; i < (size_t)c->lat_C * c->lat_T * c->lat_H * c->lat_W; i++)
            lat_m = fmax(lat_m, fmax(fabsf(c->lat_a[i]), fabsf(c->lat_b[i])));
    for (int i = 0; i < n; i++) {
        frame_pics(c, frames[i], lat_m, &p[i]);
        for (size_t k = 0; k < (size_t)p[i].W * p[i].H; k++) dmax = fmax(dmax, p[i].d[k]);
    }
    const int ph = n ? (int)lround((double)PANEL * p[0].H / p[0].W) : 0;
    const int width = GAP + 3 * (PANEL + GAP) + 90, n_charts = (have_pics ? 1 : 0) + (c->have_steps ? 1 : 0);
    const int height = 70 + n * (ph + 28) + n_charts * (CHART_H + GAP) + GAP;
    cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
    cairo_t *cr = cairo_create(surf);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_source_rgb(cr, 0, 0, 0);
    char buf[1200];
    snprintf(buf, sizeof buf, "A: %s", name_a);
    text(cr, GAP, 20, 12, buf);
    snprintf(buf, sizeof buf, "B: %s", name_b);
    text(cr, GAP, 36, 12, buf);
    snprintf(buf, sizeof buf, "verdict: %s%s", c->pass ? "the same within the tolerances" : "DIFFERENT",
             c->have_steps && c->first_diverging >= 0 ? "" : "");
    if (c->have_steps && c->first_diverging >= 0)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " (first diverging step %d)", c->first_diverging);
    text(cr, GAP, 54, 12, buf);
    double y = 70;
    for (int i = 0; i < n; i++) {
        static const char *const head[] = {"A", "B", "|A - B|"};
        for (int k = 0; k < 3; k++) {
            snprintf(buf, sizeof buf, "%s, %s %d%s", head[k], c->fr ? "frame" : "latent frame", frames[i],
                     c->fr ? "" : " (channel mean)");
            cairo_set_source_rgb(cr, 0, 0, 0);
            text(cr, GAP + k * (PANEL + GAP), y + 14, 11, buf);
            cairo_surface_t *s = k == 2 ? heat_surface(p[i].d, p[i].W, p[i].H, dmax)
                                        : rgb_surface(k ? p[i].b : p[i].a, p[i].W, p[i].H);
            put(cr, s, p[i].W, p[i].H, GAP + k * (PANEL + GAP), y + 20);
            cairo_surface_destroy(s);
        }
        y += ph + 28;
    }
    if (n) {   /* the heat scale */
        const double bx = GAP + 3 * (PANEL + GAP), by = 90, bh = n * (ph + 28) - 40;
        for (int k = 0; k < 100; k++) {
            double r, g, b;
            heat(1 - k / 99.0, &r, &g, &b);
            cairo_set_source_rgb(cr, r, g, b);
            cairo_rectangle(cr, bx, by + bh * k / 100, 16, bh / 100 + 1);
            cairo_fill(cr);
        }
        cairo_set_source_rgb(cr, 0, 0, 0);
        snprintf(buf, sizeof buf, "%.3g", dmax);
        text(cr, bx + 20, by + 8, 10, buf);
        text(cr, bx + 20, by + bh, 10, "0");
        text(cr, bx - 4, by - 8, 10, c->fr ? "|A-B| (8-bit)" : "|A-B|");
    }
    y += GAP;
    const double cw = width - 2 * GAP;
    if (have_pics) {
        double *ya = cvx_malloc((size_t)T * sizeof(double));
        if (c->fr) {
            for (int t = 0; t < T; t++) ya[t] = c->fr[t].psnr;
            chart(cr, GAP, y, cw, CHART_H, "PSNR of B against A per frame (dB)", "frame",
                  &(series){ya, T, 0.1, 0.3, 0.8, "PSNR"}, 1, -1, NULL);
        } else {
            const size_t hw = (size_t)c->lat_H * c->lat_W, plane = (size_t)c->lat_T * hw;
            for (int t = 0; t < T; t++) {
                double d2 = 0, b2 = 0;
                for (int ch = 0; ch < c->lat_C; ch++)
                    for (size_t i = 0; i < hw; i++) {
                        const double va = c->lat_a[ch * plane + t * hw + i], vb = c->lat_b[ch * plane + t * hw + i];
                        d2 += (va - vb) * (va - vb), b2 += vb * vb;
                    }
                ya[t] = b2 > 0 ? sqrt(d2 / b2) : sqrt(d2);
            }
            chart(cr, GAP, y, cw, CHART_H, "relative L2 of A against B per latent frame", "latent frame",
                  &(series){ya, T, 0.1, 0.3, 0.8, "rel L2"}, 1, -1, NULL);
        }
        free(ya);
        y += CHART_H + GAP;
    }
    if (c->have_steps) {
        const int na = c->sa.n, nb = c->sb.n, off = c->sa.n ? c->sa.e[0].step : 0;
        double *ya = cvx_malloc(((size_t)na + 1) * sizeof(double)), *yb = cvx_malloc(((size_t)nb + 1) * sizeof(double));
        for (int i = 0; i < na; i++) ya[i] = c->sa.e[i].norm;
        for (int i = 0; i < nb; i++) yb[i] = c->sb.e[i].norm;
        char mark[64];
        snprintf(mark, sizeof mark, "first diverging step %d", c->first_diverging);
        chart(cr, GAP, y, cw, CHART_H, "latent norm after each step (stage2_steps.json)", "step",
              (series[]){{ya, na, 0.1, 0.3, 0.8, "A"}, {yb, nb, 0.9, 0.5, 0.0, "B"}}, 2,
              c->first_diverging >= 0 ? c->first_diverging - off : -1, mark);
        free(ya), free(yb);
    }
    for (int i = 0; i < n; i++) free(p[i].a), free(p[i].b), free(p[i].d);
    cairo_destroy(cr);
    char tmp[4200];
    int rc = 0;
    cairo_status_t st = cairo_surface_status(surf);
    if (st == CAIRO_STATUS_SUCCESS) {   /* written to a temp beside it, renamed into place */
        cvx_temp_path(path, tmp, sizeof tmp);
        if (!tmp[0]) {
            cairo_surface_destroy(surf);
            return cvx_error_prefix("--report");
        }
        st = cairo_surface_write_to_png(surf, tmp);
        if (st == CAIRO_STATUS_SUCCESS) rc = cvx_commit_file(tmp, path);
        else cvx_temp_discard(tmp);
    }
    if (st != CAIRO_STATUS_SUCCESS) rc = cvx_error("--report %s: cairo: %s", path, cairo_status_to_string(st));
    cairo_surface_destroy(surf);
    return rc;
}
