/* Parts a family row composes instead of copying (pipeline/components.h): the memory check of a
 * component's weights (a single file or a directory of .safetensors / .gguf files), a component's
 * file path and weights, and the decode skeleton. */
#include "pipeline/components.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dist.h"
#include "error.h"
#include "fileio.h"
#include "model.h"
#include "validate.h"

/* Bytes of the .safetensors / .gguf files at `path` (a file, or a directory's files). */
static double weight_file_bytes(const char *path) {
    struct stat st;
    if (stat(path, &st)) return 0;
    if (!S_ISDIR(st.st_mode)) return (double)st.st_size;
    double total = 0;
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *dot = strrchr(e->d_name, '.');
        char f[4600];
        if (!dot || (strcmp(dot, ".safetensors") && strcmp(dot, ".gguf"))) continue;
        snprintf(f, sizeof f, "%s/%s", path, e->d_name);
        if (!stat(f, &st)) total += (double)st.st_size;
    }
    if (d) closedir(d);
    return total;
}

int cvx_weights_fit_memory(const char *path, const char *advice) {
    const double bytes = weight_file_bytes(path);
    const double mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
    const char *allow = getenv("CVX_ALLOW_LARGE_WEIGHTS");
    if (mem <= 0 || bytes < 0.85 * mem || (allow && allow[0] == '1')) return 0;
    return cvx_error("%s: the weights are %.1f GB and this machine has %.1f GB of memory: they would be read from disk "
                     "again and again for hours. Use %s, or more memory (CVX_ALLOW_LARGE_WEIGHTS=1 runs anyway)",
                     path, bytes / 1e9, mem / 1e9, advice);
}

void cvx_component_path(const cvx_model *m, const char *comp, const char *file, char *out, size_t n) {
    snprintf(out, n, "%s/%s/%s", m->dir, comp, file);
}

int cvx_component_find(const cvx_model *m, const char *comp, const char *flag, const char *file, int need_cfg,
                       const char *advice, cvx_component_src *out) {
    memset(out, 0, sizeof *out);
    if (file && file[0]) {
        out->file = file;
        snprintf(out->dir, sizeof out->dir, "%s/%s", m->dir, comp);
        cvx_component_path(m, comp, "config.json", out->cfg, sizeof out->cfg);
        if (!cvx_is_file(out->cfg)) {
            if (need_cfg)
                return cvx_error("%s %s: the model directory %s has no %s/config.json to go with it", flag, file,
                                 m->dir, comp);
            out->cfg[0] = 0;
        }
        return advice ? cvx_weights_fit_memory(file, advice) : 0;
    }
    if (cvx_model_component(m->dir, comp, "config.json", out->dir, sizeof out->dir)) return -1;
    snprintf(out->cfg, sizeof out->cfg, "%s/config.json", out->dir);
    return advice ? cvx_weights_fit_memory(out->dir, advice) : 0;
}

static const cvx_component *component_row(const cvx_component *table, const char *comp) {
    while (table->comp && strcmp(table->comp, comp)) table++;
    return table->comp ? table : NULL;
}

static void **component_slot(const cvx_model *m, const cvx_component *c) { return (void **)((char *)m->fam + c->slot); }

void *cvx_component_get(const cvx_model *m, const cvx_component *table, const char *comp) {
    const cvx_component *c = component_row(table, comp);
    return c ? *component_slot(m, c) : NULL;
}

int cvx_component_load(cvx_model *m, const cvx_component *table, const char *comp) {
    const cvx_component *c = component_row(table, comp);
    if (!c) return cvx_error("%s: no component '%s' in the family's table", m->dir, comp);   /* a row's bug */
    void **slot = component_slot(m, c);
    if (*slot) return 0;
    cvx_component_src src;
    const char *file = c->file == CVX_NO_FILE ? NULL : (const char *)m + c->file;
    if (cvx_component_find(m, c->comp, c->flag, file, c->need_cfg, c->advice, &src)) return -1;
    *slot = c->load(&src, m->ctx);
    return *slot ? 0 : -1;
}

void cvx_components_free(cvx_model *m, const cvx_component *table) {
    for (; table->comp; table++) {
        void **slot = component_slot(m, table);
        if (*slot) table->unload(*slot);
        *slot = NULL;
    }
}

void cvx_latents_out_copy(cvx_model *m, const cvx_latent_shape *sh, const float *latents, cvx_latents *out) {
    (void)m;
    out->C = sh->channels, out->T = sh->frames, out->h = sh->height, out->w = sh->width;
    out->data = cvx_alloc_f32(sh->numel);
    memcpy(out->data, latents, sh->numel * sizeof(float));
}

/* ---- the decode skeleton ---- */
int cvx_decode_check_latents(const cvx_model *m, const char *vae, const char *key, int expect_C, const float *z,
                             int B, int C, int T, int h, int w, const char *label) {
    if (C != expect_C)
        return cvx_error("%s: tensor 'latents' has %d channels (dim 1 of [B, C, T, H, W]), %s of %s expects %s = %d",
                         label, C, vae, m->dir, key, expect_C);
    if (B < 1 || T < 1 || h < 1 || w < 1) return cvx_error("%s: tensor 'latents' has an empty shape", label);
    /* a NaN/Inf (a diverged run, a damaged file) is an error naming the index, not a video of NaNs (issue 14) */
    if (cvx_check_finite(z, (size_t)B * C * T * h * w, "latents")) return cvx_error_prefix("%s", label);
    return 0;
}

int cvx_decode_items(const cvx_decode_params *p, const cvx_decode_plan *plan, const float *z, int B, int C, int T,
                     int h, int w, const char *label, cvx_progress_fn progress, void *user, cvx_frames *out) {
    out->B = B, out->T = plan->To, out->H = plan->Ho, out->W = plan->Wo, out->tiled = plan->tiled;
    out->data = cvx_calloc((size_t)B, sizeof *out->data);
    const int root = !p->dist || cvx_dist_rank(p->dist) == 0;
    cvx_progress bar;
    cvx_progress_begin(&bar, "vae decode", B * plan->steps_per_item, progress, user);
    for (int b = 0; b < B && (root || plan->all_ranks); b++) {
        int To = out->T, Ho = out->H, Wo = out->W;
        if (plan->item(plan->user, z + (size_t)b * C * T * h * w, &bar, &out->data[b], &To, &Ho, &Wo)) {
            cvx_frames_free(out);
            return cvx_error_prefix("%s", label);
        }
        if (root) out->T = To, out->H = Ho, out->W = Wo;
    }
    cvx_progress_finish(&bar);
    /* finite latents can still overflow in a damaged VAE: never encode NaN frames */
    for (int b = 0; b < B && root; b++)   /* ranks > 0 hold no frames */
        if (cvx_check_finite(out->data[b], (size_t)3 * out->T * out->H * out->W, "decoded")) {
            cvx_error_prefix("%s: sample %d", label, b);
            cvx_frames_free(out);
            return -1;
        }
    return 0;
}

int cvx_expert_paths(const cvx_model *m, int expert, char *cfg, size_t cn, char *weights, size_t wn) {
    const char *comp = expert ? "transformer_2" : "transformer", *flag = expert ? "--transformer_2" : "--transformer";
    const char *file = expert ? m->transformer_2_file : m->transformer_file;
    const char *other = expert ? m->transformer_file : m->transformer_2_file;
    const char *which = expert ? "low-noise" : "high-noise", *other_which = expert ? "high-noise" : "low-noise";
    cvx_component_path(m, comp, "config.json", cfg, cn);
    if (!cvx_is_file(cfg))
        return cvx_error("%s: no %s/config.json (the %s expert's config%s%s)", m->dir, comp, which,
                         file[0] ? ", needed beside " : "", file);
    if (file[0]) {
        snprintf(weights, wn, "%s", file);
        return 0;
    }
    snprintf(weights, wn, "%s/%s", m->dir, comp);
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/diffusion_pytorch_model.safetensors", weights);
    struct stat st;
    int has = !stat(probe, &st);
    snprintf(probe, sizeof probe, "%s/diffusion_pytorch_model.safetensors.index.json", weights);
    has = has || !stat(probe, &st);
    if (other[0] && !has)
        return cvx_error("%s: the %s expert was given as one file (%s) but not the %s one, and %s has no weights: "
                         "give it with %s FILE", other, other_which, expert ? "--transformer" : "--transformer_2", which,
                         weights, flag);
    return 0;
}

int cvx_image_encoder_load(cvx_model *m, const char *processor, clip_image_processor *proc, clip_vision **enc) {
    if (*enc) return 0;
    char dir[4200], cfg[4200];
    if (cvx_model_component(m->dir, "image_encoder", "config.json", dir, sizeof dir) ||
        cvx_model_component(m->dir, processor, "preprocessor_config.json", cfg, sizeof cfg) ||
        clip_image_processor_load(proc, cfg))
        return -1;
    *enc = clip_vision_load(dir, m->ctx);
    return *enc ? 0 : -1;
}
