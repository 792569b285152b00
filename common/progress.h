/* Progress bar for long loops. On a terminal it redraws one line with step, s/it and ETA;
 * otherwise (logs, CI) it prints a plain line every few seconds and at the end. Silent in
 * quiet mode. */
#ifndef CVX_PROGRESS_H
#define CVX_PROGRESS_H

typedef struct {
    const char *label;
    int total, done;
    double t_start, t_last_print;
    int is_tty;
    int printed;
    int drawn_done;   /* `done` at the last line drawn: the final line is not repeated */
    /* cvx_progress_start_cb: report here instead of drawing (library callers) */
    void (*callback)(void *user, const char *label, int done, int total);
    void *user;
} cvx_progress;

void cvx_progress_start(cvx_progress *p, const char *label, int total);
/* The same, reporting every update (and the start and finish) to callback instead of drawing. */
void cvx_progress_start_cb(cvx_progress *p, const char *label, int total,
                           void (*callback)(void *user, const char *label, int done, int total), void *user);
void cvx_progress_update(cvx_progress *p, int done);
void cvx_progress_finish(cvx_progress *p);
/* "1h02m", "3m05s", "12.3s" */
void cvx_format_duration(double seconds, char *buf, int n);

#endif
