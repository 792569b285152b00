/* Progress bar: one redrawn line on a terminal, a plain line every few seconds otherwise. */
#include "progress.h"
#include "error.h"

#include <stdio.h>
#include <unistd.h>

#define PLAIN_INTERVAL 5.0

void cvx_format_duration(double s, char *buf, int n) {
    if (s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (s < 60) snprintf(buf, (size_t)n, "%.1fs", s);
    else if (t < 3600) snprintf(buf, (size_t)n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, (size_t)n, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
}

static void draw(cvx_progress *p, int final) {
    double now = cvx_time(), el = now - p->t_start;
    char els[32], eta[32], rate[48];
    cvx_format_duration(el, els, sizeof els);
    if (p->done > 0) {
        double per = el / p->done;
        cvx_format_duration(per * (p->total - p->done), eta, sizeof eta);
        if (per >= 1 || per == 0) snprintf(rate, sizeof rate, "%.2f s/it", per);
        else snprintf(rate, sizeof rate, "%.2f it/s", 1.0 / per);
    } else {
        snprintf(eta, sizeof eta, "?");
        snprintf(rate, sizeof rate, "? s/it");
    }
    if (p->is_tty) {
        int width = 30, fill = p->total > 0 ? (int)((long)width * p->done / p->total) : width;
        char bar[64];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "\r%s [%s] %d/%d  %s  elapsed %s  ETA %s\033[K", p->label, bar, p->done, p->total, rate, els,
                final ? "0.0s" : eta);
        if (final) fputc('\n', stderr);
    } else {
        fprintf(stderr, "%s: %s %d/%d  %s  elapsed %s  ETA %s\n", cvx_program_name(), p->label, p->done, p->total,
                rate, els, final ? "0.0s" : eta);
    }
    fflush(stderr);
    p->t_last_print = now;
    p->printed = 1;
    p->drawn_done = p->done;
}

void cvx_progress_start(cvx_progress *p, const char *label, int total) {
    cvx_progress_start_cb(p, label, total, NULL, NULL);
}

void cvx_progress_start_cb(cvx_progress *p, const char *label, int total,
                           void (*callback)(void *user, const char *label, int done, int total), void *user) {
    p->callback = callback;
    p->user = user;
    p->label = label;
    p->total = total;
    p->done = 0;
    p->t_start = p->t_last_print = cvx_time();
    p->is_tty = isatty(2);
    p->printed = 0;
    p->drawn_done = -1;
    if (callback) callback(user, label, 0, total);
    else if (cvx_verbosity() >= 1 && p->is_tty) draw(p, 0);
}

void cvx_progress_update(cvx_progress *p, int done) {
    p->done = done;
    if (p->callback) {
        p->callback(p->user, p->label, done, p->total);
        return;
    }
    if (cvx_verbosity() < 1) return;
    double now = cvx_time();
    if (p->is_tty ? now - p->t_last_print >= 0.1 : now - p->t_last_print >= PLAIN_INTERVAL) draw(p, 0);
}

void cvx_progress_finish(cvx_progress *p) {
    p->done = p->total;
    if (p->callback) {
        p->callback(p->user, p->label, p->done, p->total);
        return;
    }
    if (cvx_verbosity() < 1) return;
    if (p->is_tty || !p->printed || p->drawn_done != p->done) draw(p, 1);
}
