/* cvx-compare A B: two runs (or two files of runs) tensor by tensor, frame by frame and step by
 * step (tools/compare.h), a verdict against --tol as the exit status, and a PNG (tools/report.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tools/compare.h"
#include "tools/report.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: cvx-compare A B [--tol X] [--min_psnr DB] [--report OUT.png] [--frames I,J,...]\n"
        "\n"
        "Compare two runs (run directories) or two files of runs, ours or the staged TPU pipeline's:\n"
        "  - every tensor pair of the stage files both have (embeddings, conditioning, latents,\n"
        "    checkpoints, decoded frames): relative L2 (|A - B| / |B|), max |A - B|, cosine. BF16\n"
        "    is widened to F32; a CogVideoX checkpoint's [B, F, C, H, W] latents (or any 5-D tensor\n"
        "    whose axes 1 and 2 are swapped against the other side's) is read as [B, C, F, H, W];\n"
        "  - two videos (output_video.mp4, a folder of frames, --output_frames files): PSNR (RGB)\n"
        "    and SSIM (luma, 11x11 Gaussian window) per frame;\n"
        "  - two stage2_steps.json: the settings that differ, the latent norm and std after each\n"
        "    step, and the first step where they part (timesteps differ, or norm or std differ by\n"
        "    more than --tol relatively);\n"
        "  - two generation_config.json: the keys that differ (information, no verdict).\n"
        "In two run directories every file both have is compared (the checkpoints only when one run\n"
        "has no final latents).\n"
        "\n"
        "  --tol X          relative L2 a tensor pair may have, and relative norm / std difference a\n"
        "                   step may have (default 0: identical). Runs at --precision bf16 against\n"
        "                   f32 (same --noise_dtype): 0.02 for embeddings and latents, 0.04 for frames\n"
        "  --min_psnr DB    frames pass at PSNR >= DB (default 40)\n"
        "  --report F.png   one PNG: for the chosen frames A, B and a heat map of |A - B| (black equal,\n"
        "                   red, orange to white the largest difference; latent frames, channel mean,\n"
        "                   when there is no video), a plot of PSNR per frame (of relative L2 per\n"
        "                   latent frame without video) and of the latent norm after each step of\n"
        "                   both runs with the first diverging step marked\n"
        "  --frames I,J     the frames of the report (default: first, middle, last)\n"
        "  -h, --help       this text\n"
        "\n"
        "Exit status: 0 when everything compared is within the tolerances, 1 when something is\n"
        "not, 2 with one error line when A and B cannot be compared (unreadable or truncated\n"
        "file, different kinds or families, shapes that are not a layout of each other).\n");
}

static void die2(void *user, const char *msg) {
    (void)user;
    fflush(stdout);
    fprintf(stderr, "cvx-compare: error: %s\n", msg);
    exit(2);
}

static double num_arg(const char *flag, const char *v) {
    char *end;
    double x = v ? strtod(v, &end) : NAN;
    if (!v || *end || !(x >= 0)) cvx_die("%s needs a number >= 0, got '%s'", flag, v ? v : "");
    return x;
}

int main(int argc, char **argv) {
    cvx_set_program_name("cvx-compare");
    cvx_set_die_handler(die2, NULL);
    cvx_set_verbosity(0);
    const char *paths[2] = {0}, *report = NULL;
    double tol = 0, min_psnr = 40;
    int frames[16], nf = 0, np = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout), 0;
        else if (!strcmp(a, "--tol")) tol = num_arg(a, i + 1 < argc ? argv[++i] : NULL);
        else if (!strcmp(a, "--min_psnr")) min_psnr = num_arg(a, i + 1 < argc ? argv[++i] : NULL);
        else if (!strcmp(a, "--report")) {
            if (i + 1 >= argc) cvx_die("--report needs a file name");
            report = argv[++i];
        } else if (!strcmp(a, "--frames")) {
            if (i + 1 >= argc) cvx_die("--frames needs a list of frame indices (0,4,8)");
            for (char *s = argv[++i], *end; *s; s = *end ? end + 1 : end) {
                long v = strtol(s, &end, 10);
                if (end == s || (*end && *end != ',') || v < 0 || nf == 16)
                    cvx_die("--frames needs up to 16 frame indices >= 0 separated by commas, got '%s'", argv[i]);
                frames[nf++] = (int)v;
            }
        } else if (a[0] == '-' && a[1]) cvx_die("unknown option %s (see --help)", a);
        else if (np < 2) paths[np++] = a;
        else cvx_die("give two paths, A and B (a third: %s)", a);
    }
    if (np < 2) {
        usage(stderr);
        return 2;
    }
    cmp_ctx c;
    cmp_init(&c, tol, min_psnr, stdout);
    if (cmp_paths(&c, paths[0], paths[1])) cvx_die_last_error();
    printf("verdict: %s (tolerance %g, frames at >= %g dB)\n",
           c.pass ? "the same within the tolerances" : "DIFFERENT", tol, min_psnr);
    if (report) {
        if (report_write(&c, report, paths[0], paths[1], frames, nf)) cvx_die_last_error();
        printf("report: %s\n", report);
    }
    const int pass = c.pass;
    cmp_free(&c);
    return pass ? 0 : 1;
}
