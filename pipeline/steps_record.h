/* stage2_steps.json: what each step of a stage-2 run did, so that two runs compare step by step
 * (tools/cvx-compare names the first step where they part; docs/debugging.md).
 *
 *   {"format": "cogvideox.c stage2 steps v1", "n_steps": 4,
 *    "run": {"seed": "42", "precision": "f32", ...},        the run's fingerprint (stage2/sampler.h)
 *    "steps": [{"step": 0, "timestep": 999, "guidance": 6, "cache": null | "computed" | "skipped",
 *               "latent_norm": .., "latent_mean": .., "latent_std": .., "latent_min": ..,
 *               "latent_max": .., "seconds": ..}, ...]}
 *
 * step counts the loop's steps from 0; the latent statistics are over the latents after the step
 * (cvx_stats_f32: L2 norm, population std). The file is rewritten (atomically) after every step,
 * so an interrupted run leaves the steps it made; a resumed run keeps the record's steps before
 * the checkpoint's (when the record belongs to the same run settings) and replaces the rest. */
#ifndef CVX_PIPELINE_STEPS_RECORD_H
#define CVX_PIPELINE_STEPS_RECORD_H

#include "pipeline/cvx.h"
#include "stage2/sampler.h"

#define CVX_STEPS_FORMAT "cogvideox.c stage2 steps v1"

typedef struct cvx_steps_record cvx_steps_record;

/* The record's path beside the run's latents file: <dir>/stage2_latents[SUFFIX].safetensors ->
 * <dir>/stage2_steps[SUFFIX].json (a numbered batch file keeps its number). -1 + cvx_error when
 * too long. */
int cvx_steps_record_path(const char *latents_path, char *out, size_t n);

/* A record to `path`; resume: keep the steps the file at path already has before the first step
 * this run makes (read then: nothing is read or written before the first step). fp (may be NULL): the
 * run's settings, stored as "run"; a record of other settings is not continued. */
cvx_steps_record *cvx_steps_record_new(const char *path, int resume, const cvx_fingerprint *fp);
/* The cvx_sample_params.on_step callback (user = the record): adds the step, rewrites the file. */
void cvx_steps_record_on_step(void *user, const cvx_step_info *info);
/* Frees it; 0, or -1 + cvx_error when a write failed (the first failure is also warned at once). */
int cvx_steps_record_free(cvx_steps_record *r);

/* ---- reading ---- */
typedef struct {
    int step, cache;          /* cache: 1 computed, 0 skipped, -1 none */
    double timestep, guidance, norm, mean, std, min, max, seconds;
} cvx_step_entry;

typedef struct {
    int n_steps, n;           /* steps of the run, entries recorded (in step order) */
    cvx_step_entry *e;
    int n_run;                /* the run's settings */
    char (*run_key)[48];
    char (*run_value)[1024];
} cvx_steps_file;

/* -1 + cvx_error naming the file and the key when it is not such a record. */
int cvx_steps_read(const char *path, cvx_steps_file *out);
void cvx_steps_file_free(cvx_steps_file *f);
/* The value of run setting `key`, NULL when absent. */
const char *cvx_steps_run(const cvx_steps_file *f, const char *key);

#endif
