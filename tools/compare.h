/* cvx-compare's comparison of two runs or two files (tools/cvx_compare.c prints it, report.c
 * draws it): every tensor pair (relative L2, max abs, cosine; layouts matched), the frames of two
 * videos (PSNR, SSIM per frame), two stage-2 step records (per-step latent norms, the first step
 * where they part), the settings that differ. */
#ifndef CVX_TOOLS_COMPARE_H
#define CVX_TOOLS_COMPARE_H

#include <stdio.h>

#include "image.h"
#include "tensor_stats.h"
#include "pipeline/steps_record.h"

typedef struct {
    char name[320];          /* "stage2_latents.safetensors: latents" */
    char dtypes[96];         /* "F32 vs BF16 (dtype_info bfloat16)" */
    char layout[96];         /* how the layouts were matched, "" when they are the same */
    int bytes_only;          /* integer / byte tensors: compared byte for byte */
    int bytes_equal;
    cvx_diff d;
    int pass;
} cmp_tensor;

typedef struct {
    double psnr, ssim;
} cmp_frame;

typedef struct {
    /* settings */
    double tol;              /* relative L2 (and step norm / std) tolerance */
    double min_psnr;         /* frames pass at PSNR >= this (dB) */
    FILE *out;               /* the printed report (stdout) */
    /* results */
    cmp_tensor *t;
    int nt, cap;
    int pass;                /* every comparison within the tolerances */
    int compared;            /* comparisons made (0: nothing in common) */
    /* videos (the last pair compared): both sides as RGB24, per-frame metrics */
    cvx_rgb_frames va, vb;
    cmp_frame *fr;
    /* latents (the last pair, [C, T, H, W] channels-major, both sides): the report's pictures
     * when there is no video */
    float *lat_a, *lat_b;
    int lat_C, lat_T, lat_H, lat_W;
    /* step records */
    int have_steps;
    cvx_steps_file sa, sb;
    int first_diverging;     /* loop step, -1 when they agree on every common step */
    char diverging_why[256];
} cmp_ctx;

void cmp_init(cmp_ctx *c, double tol, double min_psnr, FILE *out);
void cmp_free(cmp_ctx *c);
/* Compare A and B (files or run directories): prints, accumulates into c. -1 + cvx_error when
 * they cannot be compared (unreadable, different kinds or families, shapes that are not a layout
 * of each other). */
int cmp_paths(cmp_ctx *c, const char *a, const char *b);

#endif
