/* The programs' side of MPI (docs/distributed.md): which ranks do what, the input check, and
 * how a failed run stops. Over common/dist.h; used by stage{1,2,3}/main.c. */
#ifndef CVX_PIPELINE_PARALLEL_H
#define CVX_PIPELINE_PARALLEL_H

#include "cli.h"
#include "dist.h"
#include "pipeline/cvx.h"

/* The layout of a stage-2 run: world = cfg × sp ranks (cfg 2 with --cfg_parallel, else 1).
 * groups NULL when the run has one rank. */
typedef struct {
    cvx_dist *world, *cfg_group, *sp_group;
    int cfg, sp;
} cvx_par;

/* Start: the world (cvx_dist_init), and quiet ranks > 0 (errors only). On failure prints one
 * error and exits 1. Call first in main (MPI may rewrite argv). On several ranks, until the input
 * check (cvx_par_check_*_inputs) a cvx_die goes through an agreement with the other ranks, which
 * meet it in their next agreement (cvx_par_layout, cvx_par_agree_or_fail, the input check): an
 * error every rank finds (a bad flag) is printed once, by rank 0; one rank's names the rank. */
cvx_dist *cvx_par_start(int *argc, char ***argv);
/* For a program whose other ranks leave at once (stage 1): rank 0 goes on alone, and cvx_die
 * prints and exits as without MPI. */
void cvx_par_alone(cvx_dist *world);
/* The MPI flags of a program: refused in a build without MPI (one clear error, exit 1); the
 * world size must be cfg × sp (every rank finds the same, rank 0 prints it). */
void cvx_par_layout(cvx_par *par, cvx_dist *world, int cfg_parallel, int sp);
/* An error every rank found alike (a flag): rank 0 prints it, every rank exits 1. */
#define cvx_par_fail_alike(world) cvx_dist_exit_error(world)
void cvx_par_end(cvx_par *par);   /* frees the groups and the world (MPI_Finalize) */

/* 1 on the rank that writes outputs, checkpoints and progress (world rank 0). */
int cvx_par_writer(const cvx_dist *world);

/* After a failed call: an error every rank learned from an agreement over the world
 * (cvx_error_is_shared) is printed once by rank 0 and every rank exits 1; an error of this rank
 * alone is printed with its rank and stops every rank (MPI_Abort). One rank: cvx_die. */
_Noreturn void cvx_par_fail(cvx_dist *world);
/* Collective: continue when rc == 0 on every rank, else cvx_par_fail. */
void cvx_par_agree_or_fail(cvx_dist *world, int rc);

/* Collective input check of stage 2: the run's settings (fingerprint entries but the model's
 * path), the embeddings (whole), the transformer's config and weights (size + first and last
 * MiB), the scheduler config, and with --resume the checkpoint. A difference stops every rank
 * with one line. No-op on one rank. */
void cvx_par_check_sample_inputs(cvx_dist *world, cvx_model *m, const void *fingerprint, const char *embeddings,
                                 const char *checkpoint, const char *layout);
/* Stage 3: the latents file (whole), the VAE config and weights (its settings: cvx_par_check_flags). */
void cvx_par_check_decode_inputs(cvx_dist *world, cvx_model *m, const char *latents);

/* Collective, right after cvx_flags_parse: every flag the ranks must agree on (all rows not
 * marked CVX_PER_RANK, common/cli.h) has the same value on every rank, else every rank stops with
 * one line naming the flag and both values ("rank 1 of 2: --checkpoint_every differs from rank 0:
 * '2' here, '1' on rank 0"). A flag added to a table is agreed on unless marked otherwise, so no
 * setting that changes what the ranks do together can be forgotten (issue 21). No-op on one rank. */
void cvx_par_check_flags(cvx_dist *world, const cvx_flag *flags);

#endif
