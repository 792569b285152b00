/* The programs' side of MPI: see parallel.h and docs/distributed.md. */
#include "pipeline/parallel.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fileio.h"
#include "model.h"
#include "pipeline/internal.h"
#include "stage2/sampler.h"

/* cvx_die until the ranks first compare their inputs (a bad flag, a missing file): an agreement
 * with the other ranks, which meet it in their next one (cvx_par_layout, cvx_par_agree_or_fail,
 * the input check); rank 0 prints the one line, naming the rank unless every rank failed, and
 * every rank exits 1. */
static void die_agreed(void *user, const char *msg) {
    cvx_dist *world = user;
    cvx_error("%s", msg);
    cvx_dist_agree(world, -1);
    cvx_dist_exit_error(world);
}

cvx_dist *cvx_par_start(int *argc, char ***argv) {
    cvx_dist *world = cvx_dist_init(argc, argv);
    if (!world) cvx_die_last_error();
    /* MPI users expect ranks > 0 to print nothing but errors; progress is rank 0's */
    if (!cvx_par_writer(world)) cvx_set_verbosity(0);
    if (cvx_dist_world_size(world) > 1) {
        cvx_set_die_handler(die_agreed, world);
        /* mpirun ends every rank with SIGTERM when one rank ends first (a SIGKILL, a crash): one
         * line of ours besides Open MPI's banner; outputs are renamed into place whole, so what
         * was written (stage 2: the last checkpoint) stays valid */
        char note[512];
        const int stage2 = !strcmp(cvx_program_name(), "stage2");
        snprintf(note, sizeof note, "%s: error: rank %d: stopped by a signal from mpirun: another rank ended first "
                 "(killed or failed), or mpirun was interrupted; files already written stay whole%s\n",
                 cvx_program_name(), cvx_dist_world_rank(world),
                 stage2 ? " (the last checkpoint: continue with --resume)" : "");
        cvx_set_signal_note(note);
    }
    return world;
}

void cvx_par_alone(cvx_dist *world) {
    (void)world;
    cvx_set_die_handler(NULL, NULL);
}

int cvx_par_writer(const cvx_dist *world) { return cvx_dist_world_rank(world) == 0; }

void cvx_par_fail(cvx_dist *world) {
    if (cvx_dist_world_size(world) == 1) cvx_die_last_error();
    /* an error every rank learned from an agreement over the world: they stop together */
    if (cvx_error_is_shared()) cvx_dist_exit_error(world);
    cvx_dist_die_last_error(world);
}

void cvx_par_agree_or_fail(cvx_dist *world, int rc) {
    if (cvx_dist_agree(world, rc)) cvx_par_fail(world);
}

void cvx_par_layout(cvx_par *par, cvx_dist *world, int cfg_parallel, int sp) {
    memset(par, 0, sizeof *par);
    par->world = world;
    par->cfg = cfg_parallel ? 2 : 1;
    par->sp = sp > 0 ? sp : 1;
    int rc = 0;
    if (cfg_parallel) rc = cvx_dist_require_mpi("--cfg_parallel");
    if (!rc && sp > 1) rc = cvx_dist_require_mpi("--sp");
    int n = cvx_dist_world_size(world);
    if (!rc && n != par->cfg * par->sp)
        rc = cvx_error("%d MPI rank%s, but the flags ask for %d (2 with --cfg_parallel, times --sp N): start with "
                       "mpirun -np %d, or change the flags", n, n == 1 ? "" : "s", par->cfg * par->sp,
                       par->cfg * par->sp);
    if (cvx_dist_agree(world, rc)) cvx_dist_exit_error(world);   /* also meets a rank's cvx_die (die_agreed) */
    if (n > 1 && cvx_dist_split_grid(world, par->cfg, par->sp, &par->cfg_group, &par->sp_group))
        cvx_par_fail(world);
}

void cvx_par_end(cvx_par *par) {
    cvx_dist_free(par->cfg_group);
    cvx_dist_free(par->sp_group);
    cvx_dist_free(par->world);
    memset(par, 0, sizeof *par);
}

/* Every .json (whole) and .safetensors (size + ends) of a model component, by name order. */
static void add_component(cvx_dist_inputs *in, cvx_model *m, const char *component, const char *marker) {
    char dir[4200], path[4500], name[64];
    if (cvx_model_component(m->dir, component, marker, dir, sizeof dir)) {
        snprintf(in->error, sizeof in->error, "%s", cvx_last_error());
        return;
    }
    struct dirent **ents = NULL;
    int k = scandir(dir, &ents, NULL, alphasort);
    for (int i = 0; i < k; i++) {
        const char *f = ents[i]->d_name;
        size_t len = strlen(f);
        int json = len > 5 && !strcmp(f + len - 5, ".json");
        int st = len > 12 && !strcmp(f + len - 12, ".safetensors");
        if (json || st) {
            snprintf(path, sizeof path, "%s/%s", dir, f);
            snprintf(name, sizeof name, "%s/%.40s", component, f);
            cvx_dist_inputs_add_file(in, name, path, json);
        }
        free(ents[i]);
    }
    free(ents);
}

static void check(cvx_dist *world, cvx_dist_inputs *in) {
    int rc = cvx_dist_check_inputs(world, in);
    cvx_dist_inputs_free(in);
    if (rc) cvx_par_fail(world);
    /* from here the ranks run collectives that are not agreements: a rank that dies alone aborts */
    cvx_set_die_handler(NULL, NULL);
}

void cvx_par_check_sample_inputs(cvx_dist *world, cvx_model *m, const void *fingerprint, const char *embeddings,
                                 const char *checkpoint, const char *layout) {
    if (cvx_dist_world_size(world) == 1) return;   /* (no die handler on one rank) */
    const cvx_fingerprint *fp = fingerprint;
    cvx_dist_inputs in = {0};
    for (int i = 0; i < fp->n; i++)   /* the model's path may differ between machines: its files are checked */
        if (strcmp(fp->key[i], "model") != 0) cvx_dist_inputs_add_setting(&in, fp->key[i], fp->value[i]);
    cvx_dist_inputs_add_setting(&in, "ranks", layout);
    cvx_dist_inputs_add_file(&in, "embeddings", embeddings, 1);
    add_component(&in, m, "transformer", "config.json");
    add_component(&in, m, "scheduler", "scheduler_config.json");
    if (checkpoint) cvx_dist_inputs_add_file(&in, "checkpoint (--resume; every rank reads it)", checkpoint, 1);
    check(world, &in);
}

static void add_flag(void *in, const char *name, const char *value) { cvx_dist_inputs_add_setting(in, name, value); }

void cvx_par_check_flags(cvx_dist *world, const cvx_flag *flags) {
    if (cvx_dist_world_size(world) == 1) return;
    cvx_dist_inputs in = {0};
    cvx_flags_each_agreed(flags, add_flag, &in);
    const int rc = cvx_dist_check_inputs(world, &in);   /* its first agreement meets a rank's cvx_die */
    cvx_dist_inputs_free(&in);
    if (rc) cvx_par_fail(world);
}

void cvx_par_check_decode_inputs(cvx_dist *world, cvx_model *m, const char *latents) {
    if (cvx_dist_world_size(world) == 1) return;
    cvx_dist_inputs in = {0};
    cvx_dist_inputs_add_file(&in, "latents", latents, 1);
    add_component(&in, m, "vae", "config.json");
    check(world, &in);
}
