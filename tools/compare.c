/* cvx-compare's comparisons (compare.h). */
#include "tools/compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dtype.h"
#include "error.h"
#include "fileio.h"
#include "safetensors.h"
#include "tools/metrics.h"
#include "tools/runfile.h"

void cmp_init(cmp_ctx *c, double tol, double min_psnr, FILE *out) {
    memset(c, 0, sizeof *c);
    c->tol = tol, c->min_psnr = min_psnr, c->out = out, c->pass = 1, c->first_diverging = -1;
}

void cmp_free(cmp_ctx *c) {
    free(c->t), free(c->fr), free(c->lat_a), free(c->lat_b);
    cvx_rgb_frames_free(&c->va), cvx_rgb_frames_free(&c->vb);
    cvx_steps_file_free(&c->sa), cvx_steps_file_free(&c->sb);
    memset(c, 0, sizeof *c);
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s && s[1] ? s + 1 : p;
}

static cmp_tensor *add_row(cmp_ctx *c) {
    if (c->nt == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->t = cvx_realloc(c->t, (size_t)c->cap * sizeof *c->t);
    }
    cmp_tensor *r = &c->t[c->nt++];
    memset(r, 0, sizeof *r);
    return r;
}

/* [B, F, C, H, W] → [B, C, F, H, W] (or back: the same swap of axes 1 and 2). */
static float *swap12(const float *x, const int64_t *s) {
    const int64_t B = s[0], P = s[1], Q = s[2], HW = s[3] * s[4];
    float *y = cvx_malloc((size_t)(B * P * Q * HW) * sizeof(float) + 1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t p = 0; p < P; p++)
            for (int64_t q = 0; q < Q; q++)
                memcpy(y + ((b * Q + q) * P + p) * HW, x + ((b * P + p) * Q + q) * HW, (size_t)HW * sizeof(float));
    return y;
}

static int same_shape(int n, const int64_t *a, int m, const int64_t *b) {
    if (n != m) return 0;
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static void print_row(const cmp_ctx *c, const cmp_tensor *r) {
    if (r->bytes_only) {
        fprintf(c->out, "  %-44s %-24s %s\n", r->name, r->dtypes, r->bytes_equal ? "bytes identical" : "bytes DIFFER");
        return;
    }
    fprintf(c->out, "  %-44s %-24s rel L2 %-10.3g max abs %-10.3g cosine %-12.9g %s\n", r->name, r->dtypes,
            r->d.rel_l2, r->d.max_abs, r->d.cosine, r->pass ? "ok" : "DIFFERENT");
    if (r->d.nonfinite) fprintf(c->out, "    %zu positions hold a NaN or Inf\n", r->d.nonfinite);
    if (r->layout[0]) fprintf(c->out, "    layout: %s\n", r->layout);
}

/* One tensor pair. fa/fb: the files (frames-major 5-D tensors are swapped to channels-major). */
static int cmp_tensor_pair(cmp_ctx *c, const rf_file *fa, const cvx_tensor *ta, const rf_file *fb,
                           const cvx_tensor *tb, const char *label) {
    cmp_tensor *r = add_row(c);
    snprintf(r->name, sizeof r->name, "%s", label);
    char dia[64], dib[64], sa[96], sb[96];
    const char *ia = rf_dtype_info(fa, ta->name, dia, sizeof dia), *ib = rf_dtype_info(fb, tb->name, dib, sizeof dib);
    snprintf(r->dtypes, sizeof r->dtypes, "%s%s%s%s vs %s%s%s%s", cvx_dtype_name(ta->dtype), ia ? " (" : "",
             ia ? ia : "", ia ? ")" : "", cvx_dtype_name(tb->dtype), ib ? " (" : "", ib ? ib : "", ib ? ")" : "");
    cvx_shape_str(ta->ndim, ta->shape, sa, sizeof sa), cvx_shape_str(tb->ndim, tb->shape, sb, sizeof sb);
    const int fla = cvx_dtype_to_f32_ok(ta->dtype), flb = cvx_dtype_to_f32_ok(tb->dtype);
    if (!fla || !flb) {   /* step counters, generator states: byte for byte */
        r->bytes_only = 1;
        r->bytes_equal = ta->dtype == tb->dtype && same_shape(ta->ndim, ta->shape, tb->ndim, tb->shape) &&
                         !memcmp(ta->data, tb->data, ta->nbytes);
        r->pass = r->bytes_equal;
        c->pass &= r->pass, c->compared++;
        print_row(c, r);
        return 0;
    }
    int64_t shape_a[CVX_MAX_DIMS], shape_b[CVX_MAX_DIMS];
    memcpy(shape_a, ta->shape, sizeof shape_a), memcpy(shape_b, tb->shape, sizeof shape_b);
    float *a = cvx_malloc((size_t)ta->numel * sizeof(float) + 1), *b = cvx_malloc((size_t)tb->numel * sizeof(float) + 1);
    cvx_tensor_to_f32(ta, a), cvx_tensor_to_f32(tb, b);
    const int is5 = ta->ndim == 5 && tb->ndim == 5;
    /* the loop layout of a CogVideoX checkpoint is [B, F, C, H, W]: to the file layout */
    if (is5 && fa->frames_major && !strcmp(ta->name, "latents")) {
        float *y = swap12(a, shape_a);
        free(a), a = y;
        int64_t t = shape_a[1];
        shape_a[1] = shape_a[2], shape_a[2] = t;
        snprintf(r->layout, sizeof r->layout, "A's [B, F, C, H, W] read as [B, C, F, H, W]");
    }
    if (is5 && fb->frames_major && !strcmp(tb->name, "latents")) {
        float *y = swap12(b, shape_b);
        free(b), b = y;
        int64_t t = shape_b[1];
        shape_b[1] = shape_b[2], shape_b[2] = t;
        snprintf(r->layout + strlen(r->layout), sizeof r->layout - strlen(r->layout), "%sB's [B, F, C, H, W] read as "
                 "[B, C, F, H, W]", r->layout[0] ? "; " : "");
    }
    if (!same_shape(ta->ndim, shape_a, tb->ndim, shape_b) && is5 && shape_a[1] == shape_b[2] &&
        shape_a[2] == shape_b[1] && same_shape(2, shape_a + 3, 2, shape_b + 3) && shape_a[0] == shape_b[0]) {
        /* a producer that kept the frames-major layout ([B, F, C, H, W] against [B, C, F, H, W]): that
         * side is the one without our model_family (the staged TPU pipeline's), else A */
        const int swap_b = fb->staged_tpu && !fa->staged_tpu;
        float *y = swap12(swap_b ? b : a, swap_b ? shape_b : shape_a);
        int64_t *sh = swap_b ? shape_b : shape_a, t = sh[1];
        if (swap_b) free(b), b = y;
        else free(a), a = y;
        sh[1] = sh[2], sh[2] = t;
        snprintf(r->layout, sizeof r->layout, "%s's %.40s read as [B, C, F, H, W] (axes 1 and 2 swapped)",
                 swap_b ? "B" : "A", swap_b ? sb : sa);
    }
    if (!same_shape(ta->ndim, shape_a, tb->ndim, shape_b)) {
        free(a), free(b);
        c->nt--;
        return cvx_error("%s: A (%s) has shape %s, B (%s) has %s: not the same tensor in any layout", label,
                         fa->path, sa, fb->path, sb);
    }
    cvx_diff_f32(a, b, (size_t)ta->numel, &r->d);
    r->pass = r->d.rel_l2 <= c->tol && !r->d.nonfinite;
    c->pass &= r->pass, c->compared++;
    print_row(c, r);
    if (is5 && !strcmp(ta->name, "latents") && shape_a[0] >= 1) {   /* sample 0 for the report */
        free(c->lat_a), free(c->lat_b);
        const size_t per = (size_t)(ta->numel / shape_a[0]);
        c->lat_C = (int)shape_a[1], c->lat_T = (int)shape_a[2], c->lat_H = (int)shape_a[3], c->lat_W = (int)shape_a[4];
        c->lat_a = cvx_realloc(a, per * sizeof(float)), c->lat_b = cvx_realloc(b, per * sizeof(float));
        return 0;
    }
    free(a), free(b);
    return 0;
}

static int cmp_safetensors(cmp_ctx *c, const rf_file *fa, const rf_file *fb) {
    const char *label = base_name(fb->path);
    /* latents against a checkpoint: only the latents are common */
    const int only_latents = fa->kind != fb->kind;
    int common = 0;
    for (int i = 0; i < cvx_st_count(fa->st); i++) {
        const cvx_tensor *ta = cvx_st_tensor(fa->st, i), *tb = cvx_st_find(fb->st, ta->name);
        if (only_latents && strcmp(ta->name, "latents")) continue;
        if (!tb) {
            fprintf(c->out, "  %s: tensor '%s' only in A\n", label, ta->name);
            continue;
        }
        char name[320];
        snprintf(name, sizeof name, "%.160s: %.150s", label, ta->name);
        if (cmp_tensor_pair(c, fa, ta, fb, tb, name)) return -1;
        common++;
    }
    for (int i = 0; i < cvx_st_count(fb->st); i++) {
        const cvx_tensor *tb = cvx_st_tensor(fb->st, i);
        if (!(only_latents && strcmp(tb->name, "latents")) && !cvx_st_find(fa->st, tb->name))
            fprintf(c->out, "  %s: tensor '%s' only in B\n", label, tb->name);
    }
    if (!common) return cvx_error("%s and %s have no tensor in common", fa->path, fb->path);
    return 0;
}

static int cmp_videos(cmp_ctx *c, const char *a, const char *b) {
    cvx_rgb_frames va, vb;
    if (frames_load(a, &va)) return -1;
    if (frames_load(b, &vb)) return cvx_rgb_frames_free(&va), -1;
    if (va.width != vb.width || va.height != vb.height || va.frames != vb.frames) {
        cvx_error("%s has %d frames of %dx%d, %s has %d frames of %dx%d: not comparable frame by frame", a, va.frames,
                  va.width, va.height, b, vb.frames, vb.width, vb.height);
        cvx_rgb_frames_free(&va), cvx_rgb_frames_free(&vb);
        return -1;
    }
    cvx_rgb_frames_free(&c->va), cvx_rgb_frames_free(&c->vb), free(c->fr);
    c->va = va, c->vb = vb;
    c->fr = cvx_malloc((size_t)va.frames * sizeof *c->fr);
    fprintf(c->out, "  %s: %d frames of %dx%d\n    %-6s %-10s %-8s\n", base_name(b), va.frames, va.width, va.height,
            "frame", "PSNR dB", "SSIM");
    int pass = 1;
    double worst = INFINITY;
    for (int t = 0; t < va.frames; t++) {
        cmp_frame *f = &c->fr[t];
        f->psnr = frame_psnr(cvx_frame_rgb(&va, t), cvx_frame_rgb(&vb, t), va.height, va.width);
        f->ssim = frame_ssim(cvx_frame_rgb(&va, t), cvx_frame_rgb(&vb, t), va.height, va.width);
        fprintf(c->out, "    %-6d %-10.3f %-8.5f\n", t, f->psnr, f->ssim);
        if (f->psnr < worst) worst = f->psnr;
        pass &= f->psnr >= c->min_psnr;
    }
    fprintf(c->out, "  %s: lowest PSNR %.3f dB (pass at >= %g): %s\n", base_name(b), worst, c->min_psnr,
            pass ? "ok" : "DIFFERENT");
    c->pass &= pass, c->compared++;
    return 0;
}

static int cmp_steps(cmp_ctx *c, const char *a, const char *b) {
    cvx_steps_file_free(&c->sa), cvx_steps_file_free(&c->sb);
    if (cvx_steps_read(a, &c->sa) || cvx_steps_read(b, &c->sb)) return -1;
    const cvx_steps_file *A = &c->sa, *B = &c->sb;
    c->have_steps = 1, c->first_diverging = -1, c->diverging_why[0] = 0;
    for (int i = 0; i < A->n_run; i++) {   /* the settings that differ */
        const char *vb = cvx_steps_run(B, A->run_key[i]);
        if (!vb || strcmp(vb, A->run_value[i]))
            fprintf(c->out, "  setting %s: A %s, B %s\n", A->run_key[i], A->run_value[i], vb ? vb : "(absent)");
    }
    for (int i = 0; i < B->n_run; i++)
        if (!cvx_steps_run(A, B->run_key[i]))
            fprintf(c->out, "  setting %s: A (absent), B %s\n", B->run_key[i], B->run_value[i]);
    fprintf(c->out, "    %-5s %-10s %-14s %-14s %-10s %-12s %-12s %s\n", "step", "timestep", "norm A", "norm B",
            "rel diff", "std A", "std B", "cache A/B");
    int common = 0;
    for (int i = 0; i < A->n; i++) {
        const cvx_step_entry *ea = &A->e[i], *eb = NULL;
        for (int j = 0; j < B->n; j++)
            if (B->e[j].step == ea->step) eb = &B->e[j];
        if (!eb) continue;
        common++;
        const double dn = fabs(ea->norm - eb->norm) / (eb->norm > 0 ? eb->norm : 1);
        const double ds = fabs(ea->std - eb->std) / (eb->std > 0 ? eb->std : 1);
        const int part = ea->timestep != eb->timestep || !(dn <= c->tol) || !(ds <= c->tol);
        if (part && c->first_diverging < 0) {
            c->first_diverging = ea->step;
            if (ea->timestep != eb->timestep)
                snprintf(c->diverging_why, sizeof c->diverging_why, "timestep %g vs %g", ea->timestep, eb->timestep);
            else
                snprintf(c->diverging_why, sizeof c->diverging_why, "latent norm %.9g vs %.9g (rel %.3g), std %.9g vs "
                         "%.9g (rel %.3g), tolerance %g", ea->norm, eb->norm, dn, ea->std, eb->std, ds, c->tol);
        }
        static const char *const cache[] = {"-", "skip", "comp"};
        fprintf(c->out, "    %-5d %-10g %-14.9g %-14.9g %-10.3g %-12.8g %-12.8g %s/%s%s\n", ea->step, ea->timestep,
                ea->norm, eb->norm, dn, ea->std, eb->std, cache[ea->cache + 1], cache[eb->cache + 1],
                part && c->first_diverging == ea->step ? "   <- first diverging step" : "");
    }
    if (A->n != B->n || A->n_steps != B->n_steps)
        fprintf(c->out, "  A recorded %d of %d steps, B %d of %d\n", A->n, A->n_steps, B->n, B->n_steps);
    if (!common) return cvx_error("%s and %s have no step in common", a, b);
    if (c->first_diverging >= 0)
        fprintf(c->out, "  first diverging step: %d (%s)\n", c->first_diverging, c->diverging_why);
    else
        fprintf(c->out, "  the runs agree on all %d common steps (tolerance %g)\n", common, c->tol);
    c->pass &= c->first_diverging < 0, c->compared++;
    return 0;
}

static int cmp_genconfig(cmp_ctx *c, const char *a, const char *b) {
    cvx_config ca, cb;
    if (cvx_config_load(&ca, a)) return -1;
    if (cvx_config_load(&cb, b)) return cvx_config_free(&ca), -1;
    int n = 0;
    json_object_object_foreach(ca.root, k, va) {
        json_object *vb = NULL;
        int has = json_object_object_get_ex(cb.root, k, &vb);
        if (has && json_object_equal(va, vb)) continue;
        fprintf(c->out, "  %s: %s: A %s, B %s\n", base_name(b), k, va ? json_object_get_string(va) : "null",
                has ? (vb ? json_object_get_string(vb) : "null") : "(absent)");
        n++;
    }
    json_object_object_foreach(cb.root, k2, vb2) {
        if (!json_object_object_get_ex(ca.root, k2, NULL))
            fprintf(c->out, "  %s: %s: A (absent), B %s\n", base_name(b), k2, vb2 ? json_object_get_string(vb2) : "null"), n++;
    }
    if (!n) fprintf(c->out, "  %s: the same settings\n", base_name(b));
    cvx_config_free(&ca), cvx_config_free(&cb);
    return 0;
}

static int comparable(rf_kind a, rf_kind b) {
    if (a == b) return 1;
    if ((a == RF_LATENTS && b == RF_CHECKPOINT) || (a == RF_CHECKPOINT && b == RF_LATENTS)) return 1;
    return (a == RF_VIDEO || a == RF_FRAMES) && (b == RF_VIDEO || b == RF_FRAMES);
}

static int cmp_files(cmp_ctx *c, const char *a, const char *b) {
    rf_file fa, fb;
    if (rf_open(a, &fa)) return -1;
    if (rf_open(b, &fb)) return rf_close(&fa), -1;
    int rc = -1;
    if (!comparable(fa.kind, fb.kind)) {
        cvx_error("%s is %s, %s is %s: not comparable", a, rf_kind_name(fa.kind), b, rf_kind_name(fb.kind));
        goto done;
    }
    if (fa.family[0] && fb.family[0] && strcmp(fa.family, fb.family)) {
        cvx_error("%s is of the %s family (%s), %s of the %s family (%s): files of different families", a, fa.family,
                  fa.family_from, b, fb.family, fb.family_from);
        goto done;
    }
    fprintf(c->out, "%s (%s%s%s%s) vs %s (%s%s%s%s)\n", a, rf_kind_name(fa.kind), fa.family[0] ? ", " : "", fa.family,
            fa.staged_tpu ? ", staged TPU layout" : "", b, rf_kind_name(fb.kind), fb.family[0] ? ", " : "", fb.family,
            fb.staged_tpu ? ", staged TPU layout" : "");
    switch (fa.kind) {
    case RF_GENCONFIG: rc = cmp_genconfig(c, a, b); break;
    case RF_STEPS: rc = cmp_steps(c, a, b); break;
    case RF_VIDEO: rc = cmp_videos(c, a, b); break;
    case RF_WEIGHTS: case RF_MODEL_DIR: case RF_RUN_DIR:
        rc = cvx_error("%s: %s are not compared (give stage files or run directories)", a, rf_kind_name(fa.kind));
        break;
    case RF_FRAMES:
        if (fb.kind == RF_FRAMES && (rc = cmp_safetensors(c, &fa, &fb))) break;
        rc = cmp_videos(c, a, b);
        break;
    default:
        if (fa.kind == RF_CHECKPOINT && fb.kind == RF_CHECKPOINT && fa.step != fb.step)
            fprintf(c->out, "  note: checkpoints after different steps (%d, %d)\n", fa.step, fb.step);
        rc = cmp_safetensors(c, &fa, &fb);
    }
done:
    rf_close(&fa), rf_close(&fb);
    return rc;
}

int cmp_paths(cmp_ctx *c, const char *a, const char *b) {
    const int da = cvx_is_dir(a), db = cvx_is_dir(b);
    rf_file fa, fb;
    if (!da || !db) return cmp_files(c, a, b);
    if (rf_open(a, &fa) || rf_open(b, &fb)) return -1;
    rf_close(&fa), rf_close(&fb);   /* directories hold nothing open */
    if (fa.kind != RF_RUN_DIR || fb.kind != RF_RUN_DIR) return cmp_files(c, a, b);   /* folders of frames */
    /* two run directories: each file both have, in pipeline order (the checkpoints only when
     * neither run finished: a finished run's latents say more) */
    int both_latents = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; rf_run_files[i]; i++) {
            char pa[4400], pb[4400];
            if (cvx_path_join(pa, sizeof pa, a, rf_run_files[i]) || cvx_path_join(pb, sizeof pb, b, rf_run_files[i]))
                return cvx_error("path too long");
            const int ha = cvx_is_file(pa), hb = cvx_is_file(pb);
            if (pass == 0) {
                if (!strcmp(rf_run_files[i], "stage2_latents.safetensors")) both_latents = ha && hb;
                continue;
            }
            if (ha != hb) {
                fprintf(c->out, "%s: only in %s\n", rf_run_files[i], ha ? "A" : "B");
                continue;
            }
            if (!ha || (both_latents && !strcmp(rf_run_files[i], "stage2_checkpoint.safetensors"))) continue;
            if (cmp_files(c, pa, pb)) return -1;
        }
    if (!c->compared) return cvx_error("%s and %s have no stage file in common", a, b);
    return 0;
}
