/* What the three programs do around the pipeline calls (pipeline/cvx.h): the files of a
 * run directory, its locks, the checks of generation_config.json before the long work, the
 * outputs of a stage written as one set, and the closing lines. Program-side, but library
 * code: -1 + cvx_error, no exit; a program or a test can run a stage as the programs do. */
#ifndef CVX_PIPELINE_RUN_H
#define CVX_PIPELINE_RUN_H

#include "lock.h"
#include "pipeline/cvx.h"
#include "pipeline/stage_files.h"

/* ---- the run directory ---- */

/* The file names of a run directory (docs/file-formats.md). */
#define CVX_EMBEDDINGS_FILE "stage1_embeddings.safetensors"
#define CVX_CONDITIONING_FILE "stage1_conditioning.safetensors"
#define CVX_GENCONFIG_FILE "generation_config.json"
#define CVX_LATENTS_FILE "stage2_latents.safetensors"
#define CVX_CHECKPOINT_FILE "stage2_checkpoint.safetensors"
#define CVX_PREVIEW_FILE "preview.png"
#define CVX_VIDEO_FILE "output_video.mp4"

/* The files a run directory holds (docs/file-formats.md), joined with its path. */
typedef struct {
    char embeddings[4200], conditioning[4200], genconfig[4200], latents[4200], checkpoint[4200], preview[4200];
    char video[4200];
} cvx_run_files;
/* -1 + cvx_error ("path too long: ...") when a path does not fit. */
int cvx_run_files_init(cvx_run_files *f, const char *dir);
/* The files of prompt n of a batch (stage 1 --prompts_file numbers its embeddings by line; stage 2
 * and 3 --prompt_index n): embeddings, generation_config, latents, checkpoint, preview and video
 * get "_%04d" before their extension (stage2_latents_0003.safetensors); the conditioning, one per
 * batch, keeps its name. n <= 0: unchanged. -1 + cvx_error when a path does not fit. */
int cvx_run_files_number(cvx_run_files *f, int n);

/* dir created when missing, and writable: -1 + cvx_error ("DIR: output directory is not writable"). */
int cvx_output_dir_ready(const char *dir);
/* Do a and b name the same existing directory? */
int cvx_same_dir(const char *a, const char *b);

/* One run per directory: an exclusive lock on out_dir (always with out_always, else only when
 * it is in_dir), a shared one on in_dir when it is another existing directory, and the stale
 * temps of dead runs in a locked out_dir removed. -1 + cvx_error when another run holds one. */
typedef struct {
    cvx_dir_lock *out, *in;
} cvx_run_locks;
int cvx_run_lock(cvx_run_locks *l, const char *in_dir, const char *out_dir, int out_always);
void cvx_run_unlock(cvx_run_locks *l);

/* The directory of `path` exists and is writable and `path` is no directory, checked before the
 * long work: -1 + cvx_error "PATH: cannot write WHAT: ...". */
int cvx_check_writable(const char *path, const char *what);
/* A directory the run will create files in (made when missing, with its parents): it, or its
 * nearest existing ancestor, is a writable directory. -1 + cvx_error "PATH: cannot write WHAT
 * there: ... is not a directory". */
int cvx_check_dir_writable(const char *path, const char *what);

/* A generation_config.json that may be absent (0); present, it must load and validate (fps,
 * sizes, UTF-8, hashes), and with data_path its `key` hash must match that file (the file the
 * previous stage wrote with it). -1 + cvx_error. */
int cvx_genconfig_check_file(const char *path, const char *data_path, const char *key);

/* ---- stage 1: the prompts and their files ---- */

/* The texts to encode: texts[0] the negative prompt, texts[1..n] the prompts (one, or every
 * line of a prompts file), each with its label for messages ("the prompt on line 3"). */
typedef struct {
    int n;
    const char **texts, **labels;
    const char *prompt, *prompts_file, *negative;
    cvx_prompt_item *items;   /* [n]: the prompts with their line numbers */
    cvx_prompt_item single;
    char *file_buf, (*label_buf)[64];
} cvx_prompt_set;
/* From --prompt or --prompts_file (exactly one given) and the negative prompt; every text
 * checked (UTF-8, no control characters). -1 + cvx_error naming the flag or the line. */
int cvx_prompt_set_load(cvx_prompt_set *s, const char *prompt, const char *prompts_file, const char *negative);
void cvx_prompt_set_free(cvx_prompt_set *s);

/* Stage 1's outputs in out_dir: the conditioning (cond NULL: an old one removed), the
 * embeddings emb [1 + n, L, D] and the family's further tensors (more: each t[k].prompt holds
 * [1 + n, L_k, D_k] for the same texts; NULL or n 0: none) (one file, or
 * stage1_embeddings_<line>.safetensors per line of a prompts file), generation_config.json with
 * their hash and m's precision. *first: the first embeddings file written. */
int cvx_encode_write_outputs(const char *out_dir, const cvx_prompt_set *ps, const float *emb, int L, int D,
                             const cvx_cond_set *more,
                             const char *model, const cvx_conditioning *cond, const char *source, const cvx_model *m,
                             char *first, size_t first_n);

/* ---- stage 2 ---- */

/* A stage-2 run's directories, checked before anything is written: the files of both, the
 * embeddings present; with `writer` (under MPI only rank 0 writes) out_dir made and locked (one
 * run per output directory; the input directory, if another, is not replaced while read); both
 * generation_config.json files sound, and the embeddings the ones stage 1 wrote with the input
 * one. -1 + cvx_error (locks released). */
int cvx_sample_check_dirs(const char *in_dir, const char *out_dir, int writer, cvx_run_files *in, cvx_run_files *out,
                          cvx_run_locks *locks);
/* The same for prompt n of a batch (cvx_run_files_number; n <= 0: the one-prompt files): the
 * embeddings and the outputs numbered, stage 1's generation_config.json read as it is. */
int cvx_sample_check_dirs_n(const char *in_dir, const char *out_dir, int n, int writer, cvx_run_files *in,
                            cvx_run_files *out, cvx_run_locks *locks);
/* The model of a stage-2 run: model_dir or model_id when given, else the one stage 1 recorded
 * (in_genconfig, then the embeddings file's metadata); a relative local directory made absolute
 * (recorded for stage 3, which may run elsewhere). buf holds the name. -1 + cvx_error. */
int cvx_sample_model(const char *model_dir, const char *model_id, const char *in_genconfig,
                     const cvx_safetensors *emb_file, char *buf, size_t n, const char **out);
/* Image-to-video / video-to-video: stage 1's encoded image or video in the run directory `in`
 * into *cond (cond->mean NULL: none, text-to-video). Its generation_config.json decides: mode
 * "i2v" / "v2v" needs its file (of that mode), "t2v" or none (or no config) takes none, and a
 * conditioning file the config does not list is an error; any other mode too. -1 + cvx_error. */
int cvx_sample_read_conditioning(cvx_model *m, const cvx_run_files *in, cvx_conditioning *cond);
/* Every value of the embeddings (and of `more`, may be NULL) finite: -1 + cvx_error naming the
 * tensor, index and `path`. */
int cvx_embeddings_check_finite(const cvx_embeddings *e, const cvx_cond_set *more, const char *path);
/* Stage 2's outputs: the latents in `dtype` and out's generation_config.json (stage 1's keys
 * from in_genconfig) as one set, then the precision, LoRA and cache records; the checkpoint removed. */
int cvx_sample_write_outputs(const cvx_run_files *out, const char *in_genconfig, const cvx_latents *lat,
                             const cvx_sample_params *resolved, cvx_dtype dtype, int fps, const char *model,
                             cvx_model *m);
/* The closing lines of a finished stage-2 run (the file, steps, time, cache and previews). */
void cvx_sample_report(const cvx_run_files *out, const cvx_latents *lat, const cvx_sample_params *resolved,
                       cvx_dtype dtype, double seconds);

/* ---- stage 3 ---- */

/* What stage 3 takes from the run's generation_config.json (all optional; absent: zeros). */
typedef struct {
    int present;
    long fps, frames;
    int has_model_id;
    char model_id[4096];
} cvx_decode_genconfig;
/* Reads gc_path (loaded and validated when present); when lat_path is the run directory's own
 * latents file (default_lat), its hash must be the one recorded. -1 + cvx_error. */
int cvx_decode_genconfig_read(const char *gc_path, const char *lat_path, const char *default_lat,
                              cvx_decode_genconfig *g);

/* The decoded frames as videos: sample 0 to out_path, sample b > 0 to <stem>_<b><ext>; with
 * png_dir every frame as PNG (sample_<b>/ subdirectories when B > 1), with sheet a contact
 * sheet of sample 0, with frames_out the decoder output (cvx_frames_write). All written as temps
 * and renamed only when every one is complete: on failure no file changed, no temp, no new
 * directory left. overwrite: afterwards, frame_NNNN.png files past this run's frames in png_dir
 * are removed. *codec: the encoder used. -1 + cvx_error. */
int cvx_frames_write_videos(const cvx_frames *fr, const char *out_path, int fps, int crf, int verbose,
                            const char *png_dir, const char *sheet, const char *frames_out, const char *latents_path,
                            int overwrite, const char **codec);
/* --png_dir DIR before the decode: absent or empty, or overwrite set; else -1 + cvx_error (a
 * reused directory would mix two runs' frames). */
int cvx_png_dir_check(const char *dir, int overwrite);

#endif
