/* cvx-compare --report: one PNG drawn with cairo. For each chosen frame a row of three pictures:
 * A, B and a heat map of |A − B| (black = equal, through red and orange to white = the largest
 * difference in the chosen frames, the scale beside it); under them a plot of per-frame PSNR
 * (videos; per latent frame relative L2 when only latents were compared) and, for two stage-2
 * step records, the per-step latent norms of A and B with the first diverging step marked. */
#ifndef CVX_TOOLS_REPORT_H
#define CVX_TOOLS_REPORT_H

#include "tools/compare.h"

/* frames: the frame indices to show (video frames, or latent frames), n of them (0: first,
 * middle, last). -1 + cvx_error (nothing to draw, an index out of range, cairo's error). */
int report_write(const cmp_ctx *c, const char *path, const char *name_a, const char *name_b, const int *frames,
                 int n);

#endif
