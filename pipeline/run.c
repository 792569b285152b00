/* The programs' side of the pipeline: run directories, locks, checks, output sets (run.h). */
#include "pipeline/run.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "cli.h"
#include "progress.h"
#include "stage3/video.h"
#include "validate.h"

/* ---- the run directory ---- */

int cvx_run_files_init(cvx_run_files *f, const char *dir) {
    return cvx_path_join(f->embeddings, sizeof f->embeddings, dir, CVX_EMBEDDINGS_FILE) ||
                   cvx_path_join(f->conditioning, sizeof f->conditioning, dir, CVX_CONDITIONING_FILE) ||
                   cvx_path_join(f->genconfig, sizeof f->genconfig, dir, CVX_GENCONFIG_FILE) ||
                   cvx_path_join(f->latents, sizeof f->latents, dir, CVX_LATENTS_FILE) ||
                   cvx_path_join(f->checkpoint, sizeof f->checkpoint, dir, CVX_CHECKPOINT_FILE) ||
                   cvx_path_join(f->preview, sizeof f->preview, dir, CVX_PREVIEW_FILE) ||
                   cvx_path_join(f->video, sizeof f->video, dir, CVX_VIDEO_FILE)
               ? -1
               : 0;
}

/* path with "_%04d" inserted before the extension of its last component */
static int number_path(char *path, size_t size, int n) {
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    const size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - path) : strlen(path);
    char buf[4200];
    int k = snprintf(buf, sizeof buf, "%.*s_%04d%s", (int)stem, path, n, path + stem);
    if (k < 0 || (size_t)k >= size || (size_t)k >= sizeof buf) return cvx_error("path too long: %s", path);
    memcpy(path, buf, (size_t)k + 1);
    return 0;
}

int cvx_run_files_number(cvx_run_files *f, int n) {
    if (n <= 0) return 0;
    return number_path(f->embeddings, sizeof f->embeddings, n) || number_path(f->genconfig, sizeof f->genconfig, n) ||
                   number_path(f->latents, sizeof f->latents, n) ||
                   number_path(f->checkpoint, sizeof f->checkpoint, n) ||
                   number_path(f->preview, sizeof f->preview, n) || number_path(f->video, sizeof f->video, n)
               ? -1
               : 0;
}

int cvx_output_dir_ready(const char *dir) {
    if (cvx_mkdirs(dir)) return -1;
    if (access(dir, W_OK) != 0) return cvx_error("%s: output directory is not writable", dir);
    return 0;
}

int cvx_same_dir(const char *a, const char *b) {
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && !strcmp(ra, rb);
}

int cvx_run_lock(cvx_run_locks *l, const char *in_dir, const char *out_dir, int out_always) {
    const int same = cvx_same_dir(in_dir, out_dir);
    l->out = l->in = NULL;
    if ((same || out_always) && !(l->out = cvx_dir_lock_acquire(out_dir, 1))) return -1;
    if (!same && cvx_is_dir(in_dir) && !(l->in = cvx_dir_lock_acquire(in_dir, 0))) return -1;
    if (l->out) cvx_clean_stale_temps(out_dir);
    return 0;
}

void cvx_run_unlock(cvx_run_locks *l) {
    cvx_dir_lock_release(l->in);
    cvx_dir_lock_release(l->out);
    l->in = l->out = NULL;
}

/* 1 when nothing is at path, 0 when a regular file is, else -1 + cvx_error (a directory named
 * generation_config.json failed only when the outputs were written, after every step; issue 21). */
static int absent_or_file(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return errno == ENOENT ? 1 : cvx_error("%s: cannot read: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return cvx_error("%s: %s, not a JSON file (remove or rename it)", path,
                         S_ISDIR(st.st_mode) ? "a directory" : "a special file");
    return 0;
}

int cvx_genconfig_check_file(const char *path, const char *data_path, const char *key) {
    const int absent = absent_or_file(path);
    if (absent) return absent > 0 ? 0 : -1;
    cvx_config gc;
    if (cvx_config_load(&gc, path)) return -1;
    int rc = cvx_genconfig_validate(&gc) || (data_path && cvx_genconfig_check_pair(&gc, data_path, key));
    cvx_config_free(&gc);
    return rc ? -1 : 0;
}

/* ---- stage 1 ---- */

int cvx_prompt_set_load(cvx_prompt_set *s, const char *prompt, const char *prompts_file, const char *negative) {
    memset(s, 0, sizeof *s);
    s->prompt = prompt, s->prompts_file = prompts_file, s->negative = negative;
    s->single = (cvx_prompt_item){prompt, 0};
    s->items = &s->single, s->n = 1;
    if (prompts_file && !(s->items = cvx_read_prompts_file(prompts_file, &s->file_buf, &s->n))) return -1;
    if (prompt && cvx_check_prompt(prompt, "--prompt")) return -1;
    size_t bad;
    if (!cvx_utf8_valid(negative, strlen(negative), &bad))
        return cvx_error("--negative_prompt is not valid UTF-8 (byte %zu); give the text in UTF-8", bad);
    const int n = s->n;   /* the negative prompt first, then the prompts */
    s->texts = cvx_malloc((size_t)(n + 1) * sizeof *s->texts);
    s->labels = cvx_malloc((size_t)(n + 1) * sizeof *s->labels);
    s->label_buf = cvx_malloc((size_t)(n + 1) * sizeof *s->label_buf);
    for (int i = 0; i <= n; i++) {
        s->texts[i] = i ? s->items[i - 1].text : negative;
        if (i == 0) snprintf(s->label_buf[i], sizeof s->label_buf[i], "the negative prompt");
        else if (prompts_file)
            snprintf(s->label_buf[i], sizeof s->label_buf[i], "the prompt on line %d", s->items[i - 1].line);
        else snprintf(s->label_buf[i], sizeof s->label_buf[i], "the prompt");
        s->labels[i] = s->label_buf[i];
    }
    return 0;
}

void cvx_prompt_set_free(cvx_prompt_set *s) {
    free(s->texts), free(s->labels), free(s->label_buf);
    if (s->items != &s->single) free(s->items);
    free(s->file_buf);
    memset(s, 0, sizeof *s);
}

int cvx_encode_write_outputs(const char *out_dir, const cvx_prompt_set *ps, const float *emb, int L, int D,
                             const cvx_cond_set *more, const char *model, const cvx_conditioning *cond, const char *source, const cvx_model *m,
                             char *first, size_t first_n) {
    /* one set (embeddings, then generation_config.json with their xxh64), renamed into place
     * together; a failure before the commit leaves the previous files untouched */
    char path[4200], name[64], hex[17], gc_path[4200], cond_path[4200];
    const char *pf = ps->prompts_file;
    if (cvx_path_join(gc_path, sizeof gc_path, out_dir, CVX_GENCONFIG_FILE) ||
        cvx_path_join(cond_path, sizeof cond_path, out_dir, CVX_CONDITIONING_FILE))
        return cvx_error("%s: output path too long", out_dir);
    if (!source && cvx_is_file(cond_path) && unlink(cond_path) != 0)   /* a T2V run: no stale I2V/V2V input */
        return cvx_error("%s: cannot remove the conditioning of an earlier run: %s", cond_path, strerror(errno));
    cvx_outset set;
    cvx_outset_init(&set);
    first[0] = 0;
    for (int i = 1; i <= ps->n; i++) {
        if (pf) snprintf(name, sizeof name, "stage1_embeddings_%04d.safetensors", ps->items[i - 1].line);
        else snprintf(name, sizeof name, CVX_EMBEDDINGS_FILE);
        if (cvx_path_join(path, sizeof path, out_dir, name)) {
            cvx_outset_abort(&set);
            return cvx_error("%s: output path too long", out_dir);
        }
        /* a prompts file may have more lines than a set holds: those files are written one by one */
        /* text i's tensors, the negative prompt's (text 0) beside them */
        const cvx_embeddings e = {(float *)emb + (size_t)i * L * D, (float *)emb, L, D};
        cvx_cond_set mi = {.n = more ? more->n : 0};
        for (int k = 0; k < mi.n; k++) {
            const cvx_cond_tensor *t = &more->t[k];
            mi.t[k] = *t;
            mi.t[k].prompt = t->prompt + (size_t)i * t->L * t->D, mi.t[k].negative = t->prompt;
        }
        if (cvx_cond_write_set(pf ? NULL : &set, path, &e, &mi, ps->texts[i], ps->negative, model))
            return cvx_outset_abort(&set), -1;
        if (i == 1) snprintf(first, first_n, "%s", path);
        cvx_debug("wrote %s", path);
    }
    /* the conditioning joins the set after the embeddings (set.tmp[0]); its xxh64 goes in the config */
    if (source && cvx_conditioning_write_set(&set, cond_path, cond, source, model)) return cvx_outset_abort(&set), -1;
    if ((!pf && cvx_file_xxh64(set.tmp[0], hex)) ||
        cvx_genconfig_record_encode_set(&set, gc_path, pf ? NULL : ps->prompt, pf, ps->negative, model,
                                        pf ? NULL : hex) ||
        cvx_genconfig_record_conditioning_set(&set, gc_path, source ? cond : NULL, source) ||
        cvx_genconfig_record_precision_set(&set, gc_path, "stage1_precision", m) ||
        cvx_genconfig_record_weights_set(&set, gc_path, "text_encoder", m) || cvx_outset_commit(&set))
        return cvx_outset_abort(&set), -1;
    return 0;
}

/* ---- stage 2 ---- */

int cvx_sample_check_dirs(const char *in_dir, const char *out_dir, int writer, cvx_run_files *in, cvx_run_files *out,
                          cvx_run_locks *locks) {
    return cvx_sample_check_dirs_n(in_dir, out_dir, 0, writer, in, out, locks);
}

int cvx_sample_check_dirs_n(const char *in_dir, const char *out_dir, int n, int writer, cvx_run_files *in,
                            cvx_run_files *out, cvx_run_locks *locks) {
    locks->in = locks->out = NULL;
    if (cvx_run_files_init(in, in_dir) || cvx_run_files_init(out, out_dir))
        return cvx_error("path too long under %s or %s", in_dir, out_dir);
    char stage1_genconfig[sizeof in->genconfig];   /* one per batch: stage 1's, not numbered */
    memcpy(stage1_genconfig, in->genconfig, sizeof stage1_genconfig);
    if (cvx_run_files_number(in, n) || cvx_run_files_number(out, n)) return -1;
    memcpy(in->genconfig, stage1_genconfig, sizeof stage1_genconfig);
    if (!cvx_is_file(in->embeddings) && n > 0)
        return cvx_error("%s: input file not found (--prompt_index %d: stage1 --prompts_file writes one file per "
                         "non-blank line, numbered by its line)", in->embeddings, n);
    if (!cvx_is_file(in->embeddings))
        return cvx_error("%s: input file not found (run stage1 first, or pass --input_dir)", in->embeddings);
    if (writer && (cvx_output_dir_ready(out_dir) || cvx_run_lock(locks, in_dir, out_dir, 1)))
        return cvx_run_unlock(locks), -1;
    if (cvx_genconfig_check_file(in->genconfig, NULL, NULL) ||
        (!cvx_same_dir(in_dir, out_dir) && cvx_genconfig_check_file(out->genconfig, NULL, NULL)) ||
        cvx_genconfig_check_file(in->genconfig, in->embeddings, "stage1_embeddings_xxh64") ||
        (cvx_is_file(in->conditioning) &&
         cvx_genconfig_check_file(in->genconfig, in->conditioning, "stage1_conditioning_xxh64")))
        return cvx_run_unlock(locks), -1;
    return 0;
}

int cvx_sample_model(const char *model_dir, const char *model_id, const char *in_genconfig,
                     const cvx_safetensors *emb_file, char *buf, size_t n, const char **out) {
    char recorded[4096] = "";
    const char *model;
    if (cvx_recorded_model(model_dir, model_id, in_genconfig, emb_file, recorded, sizeof recorded, &model)) return -1;
    if (!model)
        return cvx_error("no model given and %s records no model_id: pass --model_id ORG/NAME or --model_dir DIR",
                         in_genconfig);
    if (model_dir && !cvx_is_dir(model_dir)) return cvx_error("%s: model directory not found", model_dir);
    model = cvx_model_abs(model, buf, n);
    if (model != buf) snprintf(buf, n, "%s", model);   /* recorded / metadata strings do not outlive this call */
    *out = buf;
    return 0;
}

int cvx_sample_read_conditioning(cvx_model *m, const cvx_run_files *in, cvx_conditioning *cond) {
    char mode[16] = "";
    memset(cond, 0, sizeof *cond);
    /* generation_config.json decides the mode (stage 1 records it); a conditioning file it does not
     * list is an error, not a silent switch to I2V / V2V (issue 21) */
    const int has_gc = cvx_is_file(in->genconfig), has_file = cvx_is_file(in->conditioning);
    if (has_gc && cvx_genconfig_get_str(in->genconfig, "mode", mode, sizeof mode)) return -1;
    if (mode[0] && strcmp(mode, "t2v") && strcmp(mode, "i2v") && strcmp(mode, "v2v") && strcmp(mode, "condition"))
        return cvx_error("%s: \"mode\" is \"%s\", expected \"t2v\", \"i2v\", \"v2v\" or \"condition\" (stage 1 records "
                         "it; run stage 1 again)", in->genconfig, mode);
    if ((!mode[0] || !strcmp(mode, "t2v")) && has_file) {
        if (!has_gc)
            return cvx_error("%s: no generation_config.json beside it lists it (stage 1 records the mode there): "
                             "run stage 1 again, or remove the file for a text-to-video run", in->conditioning);
        return cvx_error("%s: not listed in %s, which records %s (a text-to-video run): run stage 1 again with "
                         "--image / --video, or remove the file", in->conditioning, in->genconfig,
                         mode[0] ? "mode \"t2v\"" : "no mode");
    }
    if (!mode[0] || !strcmp(mode, "t2v")) return 0;
    if (!has_file)
        return cvx_error("%s records mode \"%s\" but %s is missing (run stage 1 again)", in->genconfig, mode,
                         in->conditioning);
    if (cvx_conditioning_read(m, in->conditioning, cond)) return -1;
    if (strcmp(cvx_mode_name(cond->mode), mode) != 0) {
        cvx_error("%s holds a %s conditioning but %s records mode \"%s\" (the pair comes from different runs; run "
                  "stage 1 again)", in->conditioning, cvx_mode_name(cond->mode), in->genconfig, mode);
        cvx_conditioning_free(cond);
        return -1;
    }
    cvx_info("%s: %s, %d frame%s %dx%d", in->conditioning,
             cond->mode == CVX_MODE_I2V ? "image-to-video" : cond->mode == CVX_MODE_COND ? "conditions" : "video-to-video",
             cond->frames,
             cond->frames == 1 ? "" : "s", cond->width, cond->height);
    return 0;
}

int cvx_embeddings_check_finite(const cvx_embeddings *e, const cvx_cond_set *more, const char *path) {
    if (cvx_embeddings_finite(e, more)) return cvx_error_prefix("%s", path);
    return 0;
}

int cvx_sample_write_outputs(const cvx_run_files *out, const char *in_genconfig, const cvx_latents *lat,
                             const cvx_sample_params *r, cvx_dtype dtype, int fps, const char *model,
                             cvx_model *m) {
    /* latents + generation_config.json (with the latents' xxh64) committed as one set */
    char hex[17];
    cvx_outset set;
    cvx_outset_init(&set);
    if (cvx_latents_write_set(&set, out->latents, lat, r, dtype, model) || cvx_file_xxh64(set.tmp[0], hex) ||
        cvx_genconfig_record_sample_set(&set, out->genconfig, in_genconfig, r, fps, lat->scheduler, model, hex) ||
        cvx_genconfig_record_precision_set(&set, out->genconfig, "stage2_precision", m) ||
        cvx_genconfig_record_lora_set(&set, out->genconfig, m) ||
        cvx_genconfig_record_weights_set(&set, out->genconfig, "transformer", m) ||
        cvx_genconfig_record_weights_set(&set, out->genconfig, "transformer_2", m) ||
        cvx_genconfig_record_cache_set(&set, out->genconfig, r, lat) || cvx_outset_commit(&set))
        return cvx_outset_abort(&set), -1;
    /* the checkpoint is stale now that the result is written */
    if (cvx_is_file(out->checkpoint) && unlink(out->checkpoint) != 0)
        cvx_warn("%s: could not delete: %s", out->checkpoint, strerror(errno));
    return 0;
}

void cvx_sample_report(const cvx_run_files *out, const cvx_latents *lat, const cvx_sample_params *r, cvx_dtype dtype,
                       double seconds) {
    char dur[32];
    cvx_format_duration(seconds, dur, sizeof dur);
    int ran = cvx_latents_steps_ran(lat);
    char steps[160];
    cvx_latents_steps_text(lat, r, steps, sizeof steps);
    cvx_info("wrote %s (latents [1, %d, %d, %d, %d] %s, %s) and %s in %s (%.2f s/step), peak RSS "
             "%.0f MB", out->latents, lat->C, lat->T, lat->h, lat->w, dtype == CVX_BF16 ? "bf16" : "f32",
             steps, out->genconfig, dur, ran > 0 ? lat->seconds / ran : 0.0, cvx_peak_rss_bytes() / 1048576.0);
    char how[64];
    if (!strcmp(r->cache, "deepcache"))
        snprintf(how, sizeof how, "deepcache %d-%d/%d", r->deepcache_start, r->deepcache_end, r->deepcache_interval);
    else
        snprintf(how, sizeof how, "%s@%g", r->cache, r->cache_threshold);
    if (strcmp(r->cache, "none") != 0)
        cvx_info("cache %s: %lld/%d steps computed, %lld skipped (%lld transformer blocks not run)", how,
                 lat->cache_steps_computed, r->num_inference_steps - lat->steps_skipped, lat->cache_steps_skipped,
                 lat->cache_blocks_skipped);
    if (lat->previews)
        cvx_info("previews: %d written to %s, %.2f s in all (%.2f s each)", lat->previews, out->preview,
                 lat->preview_seconds, lat->preview_seconds / lat->previews);
}

/* ---- stage 3 ---- */

int cvx_check_writable(const char *path, const char *what) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    const char *dir = dirname(buf);
    if (!cvx_is_dir(dir)) return cvx_error("%s: cannot write %s: directory '%s' does not exist", path, what, dir);
    if (access(dir, W_OK) != 0)
        return cvx_error("%s: cannot write %s: directory '%s' is not writable", path, what, dir);
    if (cvx_is_dir(path)) return cvx_error("%s: cannot write %s: it is a directory", path, what);
    return cvx_check_output_path(path);   /* a symlink, FIFO or device there: refused, not replaced */
}

/* "frame_NNNN.png" with N >= first (stale frames of a longer earlier run), 1 when so. */
static int stale_frame(const char *name, int first) {
    int k, len = 0;
    return sscanf(name, "frame_%4d.png%n", &k, &len) == 1 && len == 14 && (size_t)len == strlen(name) && k >= first;
}

int cvx_png_dir_check(const char *dir, int overwrite) {
    DIR *d = opendir(dir);
    if (!d) return 0;   /* new (or not a directory: cvx_check_dir_writable says so) */
    int n = 0;
    char first[256] = "";
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && n++ == 0) snprintf(first, sizeof first, "%s", e->d_name);
    closedir(d);
    if (!n || overwrite) return 0;
    return cvx_error("%s: --png_dir is not empty (%d entr%s, e.g. '%s'): frames of an earlier run would stay beside "
                     "this run's; give a new or empty directory, or --overwrite (replaces the frames there)", dir, n,
                     n == 1 ? "y" : "ies", first);
}

/* After an --overwrite run of T frames: the frame_NNNN.png files from N = T on in dir (an earlier,
 * longer run's) are removed, so the directory holds this run's frames only. */
static void remove_stale_frames(const char *dir, int T) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));)
        if (stale_frame(e->d_name, T) && unlinkat(dirfd(d), e->d_name, 0) == 0)
            cvx_info("removed %s/%s (a frame of an earlier run: --overwrite)", dir, e->d_name);
    closedir(d);
}

int cvx_check_dir_writable(const char *path, const char *what) {
    /* the directory itself, or its nearest existing ancestor (cvx_mkdirs makes the rest) */
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return cvx_error("path too long: %s", path);
    struct stat st;
    for (;;) {
        if (stat(buf, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                return cvx_error("%s: cannot write %s there: %s is not a directory", path, what,
                                 strcmp(buf, path) ? buf : "it");
            if (access(buf, W_OK) != 0) return cvx_error("%s: cannot write %s: '%s' is not writable", path, what, buf);
            return 0;
        }
        if (errno != ENOENT && errno != ENOTDIR)
            return cvx_error("%s: cannot write %s: %s: %s", path, what, buf, strerror(errno));
        char *slash = strrchr(buf, '/');
        if (!slash) return 0;   /* a relative name under the working directory, checked by the write */
        if (slash == buf) slash[1] = 0;
        else *slash = 0;
    }
}

int cvx_decode_genconfig_read(const char *gc_path, const char *lat_path, const char *default_lat,
                              cvx_decode_genconfig *g) {
    memset(g, 0, sizeof *g);
    const int absent = absent_or_file(gc_path);
    if (absent) return absent > 0 ? 0 : -1;
    g->present = 1;
    cvx_config gen;
    int64_t fps = 0, frames = 0;
    const char *model = NULL;
    char real_lat[PATH_MAX], real_default[PATH_MAX];
    if (cvx_config_load(&gen, gc_path)) return -1;
    int rc = cvx_genconfig_validate(&gen) || cvx_cfg_int_or(&gen, "fps", 0, &fps) ||
             cvx_cfg_int_or(&gen, "frames", 0, &frames) || cvx_cfg_str_or(&gen, "model_id", NULL, &model) ||
             /* the latents stage 2 wrote with this config must be the ones it describes (its xxh64) */
             (realpath(lat_path, real_lat) && realpath(default_lat, real_default) &&
              !strcmp(real_lat, real_default) && cvx_genconfig_check_pair(&gen, lat_path, "stage2_latents_xxh64"));
    g->fps = (long)fps, g->frames = (long)frames;
    g->has_model_id = model != NULL;
    snprintf(g->model_id, sizeof g->model_id, "%s", model ? model : "");
    cvx_config_free(&gen);
    return rc ? -1 : 0;
}

int cvx_frames_write_videos(const cvx_frames *fr, const char *out_path, int fps, int crf, int verbose,
                            const char *png_dir, const char *sheet, const char *frames_out, const char *latents_path,
                            int overwrite, const char **codec) {
    /* every file of the run is a temp until all are written, then all are renamed (issue 37: a
     * failure part way, a full disk, leaves the previous video, sheet and frames as they were) */
    cvx_outset set;
    cvx_outset_init(&set);
    const int made_dir = png_dir && !cvx_is_dir(png_dir);
    int rc = 0;
    for (int b = 0; b < fr->B && !rc; b++) {
        char path[4300], dir[4300];
        const char *dot = strrchr(out_path, '.');
        int ext = dot && !strchr(dot, '/'), stem = ext ? (int)(dot - out_path) : (int)strlen(out_path);
        if (b == 0) snprintf(path, sizeof path, "%s", out_path);
        else snprintf(path, sizeof path, "%.*s_%d%s", stem, out_path, b, ext ? dot : "");
        video_opts vo = {fps, crf, verbose};
        if (fr->B == 1) snprintf(dir, sizeof dir, "%s", png_dir ? png_dir : "");
        else snprintf(dir, sizeof dir, "%s/sample_%d", png_dir ? png_dir : "", b);
        rc = video_write_mp4_set(&set, path, fr->data[b], fr->T, fr->H, fr->W, &vo, codec) ||
             (png_dir && video_write_pngs_set(&set, dir, fr->data[b], fr->T, fr->H, fr->W)) ||
             (sheet && b == 0 && video_write_contact_sheet_set(&set, sheet, fr->data[0], fr->T, fr->H, fr->W));
    }
    if (!rc && frames_out) rc = cvx_frames_write(&set, frames_out, fr, latents_path);
    if (rc) cvx_outset_abort(&set);
    else rc = cvx_outset_commit(&set);
    for (int b = 0; png_dir && b < fr->B; b++) {
        char dir[4300];
        if (fr->B == 1) snprintf(dir, sizeof dir, "%s", png_dir);
        else snprintf(dir, sizeof dir, "%s/sample_%d", png_dir, b);
        if (rc && made_dir) rmdir(dir);   /* the directories this run made, empty again */
        else if (!rc && overwrite) remove_stale_frames(dir, fr->T);
    }
    if (rc && made_dir && fr->B > 1) rmdir(png_dir);
    return rc ? -1 : 0;
}
