/* Distribution over MPI ranks (optional at build time): CFG branches, Ulysses sequence
 * parallelism around attention, VAE tiles. See docs/distributed.md.
 *
 * A cvx_dist is one communicator with its rank and size: the world (cvx_dist_init) or a group
 * split from it (cvx_dist_split_grid). Everything MPI-specific stays in dist.c; callers see ranks,
 * sizes and a few collectives on plain buffers.
 *
 * One rank, no MPI: a build without MPI (NO_MPI=1, or no libopenmpi-dev) and a program started
 * without mpirun both get a world of size 1 in which every collective is a local copy, so stage
 * code has one path. MPI_Init is only called when a launcher (mpirun, srun) started the process:
 * a singleton MPI_Init costs about a second and needs a working MPI runtime.
 *
 * Errors follow the library's rule (cvx_error, return -1). A failed collective cannot be
 * recovered across ranks: callers stop with cvx_dist_die_last_error. Two ways to stop:
 *   - cvx_dist_die: this rank alone hit a fatal error; it prints one line naming its rank and
 *     MPI_Abort()s, which makes every rank and mpirun exit non-zero.
 *   - cvx_dist_agree + cvx_dist_exit_error: every rank reaches the same check point (after reading
 *     its inputs, say); if any failed, all learn the lowest failing rank's message, rank 0 prints
 *     it, every rank finalizes and exits 1.
 * Run with `mpirun -q` so that Open MPI adds no banners to that one line. */
#ifndef CVX_DIST_H
#define CVX_DIST_H

#include <stddef.h>
#include <stdint.h>

typedef struct cvx_dist cvx_dist;

/* ------------------------------------------------------------------------- build and lifetime */

/* 1 when built with MPI (CVX_USE_MPI), else 0. */
int cvx_dist_built_with_mpi(void);
/* 0 when built with MPI; else -1 with the error "<what>: this build has no MPI (...)". For flags
 * such as --cfg_parallel and --sp that mean nothing on one rank. */
int cvx_dist_require_mpi(const char *what);

/* The world communicator. Under mpirun, initializes MPI (thread level FUNNELED: OpenMP threads
 * compute, only the main thread calls MPI) and sets MPI_ERRORS_RETURN. NULL + cvx_error when MPI
 * cannot start, or when a launcher started several ranks of a build without MPI (each would
 * believe it is alone and write the outputs). */
cvx_dist *cvx_dist_init(int *argc, char ***argv);
/* Free a group, or (the world, last) finalize MPI. NULL is ignored. */
void cvx_dist_free(cvx_dist *d);

int cvx_dist_rank(const cvx_dist *d);
int cvx_dist_size(const cvx_dist *d);
int cvx_dist_is_root(const cvx_dist *d);     /* rank 0 of this communicator */
int cvx_dist_world_rank(const cvx_dist *d);  /* the rank users see in messages */
int cvx_dist_world_size(const cvx_dist *d);

/* Split a world of cfg × sp ranks into its CFG groups (size cfg: the ranks that hold the same
 * token shard of different CFG branches) and its sequence-parallel groups (size sp: the ranks of
 * one CFG branch). World rank w = c·sp + s has CFG index c (its rank in *cfg_group) and shard
 * index s (its rank in *sp_group); an SP group is sp consecutive ranks, so that with mpirun's
 * default mapping the heavy all-to-all traffic stays within a machine. -1 + error when
 * size ≠ cfg × sp. Free both groups with cvx_dist_free. */
int cvx_dist_split_grid(const cvx_dist *world, int cfg, int sp, cvx_dist **cfg_group, cvx_dist **sp_group);

/* ---------------------------------------------------------------------------- collectives */
/* All are collective over d (every rank of d calls them, with the same sizes where it says so). */

int cvx_dist_barrier(const cvx_dist *d);
/* bytes from `root` to every rank. */
int cvx_dist_bcast(const cvx_dist *d, void *buf, size_t bytes, int root);
/* In-place element-wise sum over ranks. The order of the additions is MPI's: with more than two
 * ranks the result may differ from a sequential sum in the last bit. */
int cvx_dist_allreduce_sum_f32(const cvx_dist *d, float *buf, size_t n);
int cvx_dist_allreduce_sum_i64(const cvx_dist *d, int64_t *buf, size_t n);
/* recv (root only; size·bytes) = every rank's `bytes` of send, in rank order. */
int cvx_dist_gather(const cvx_dist *d, const void *send, size_t bytes, void *recv, int root);
/* Unequal parts: rank i sends bytes_per_rank[i] (every rank passes the same array); recv at the
 * root is their concatenation in rank order (recv may be NULL elsewhere). */
int cvx_dist_gatherv(const cvx_dist *d, const void *send, const size_t *bytes_per_rank, void *recv, int root);
/* Like cvx_dist_gather, but every rank receives (CFG: each rank gets the other branch). */
int cvx_dist_allgather(const cvx_dist *d, const void *send, size_t bytes, void *recv);
/* MPI_Alltoallv on floats with size_t counts and displacements (in floats; arrays of size(d)). */
int cvx_dist_alltoallv_f32(const cvx_dist *d, const float *send, const size_t *send_counts,
                           const size_t *send_displs, float *recv, const size_t *recv_counts,
                           const size_t *recv_displs);

/* --------------------------------------------------------------- Ulysses sequence parallelism */
/* Attention inputs and outputs are token-major rows of heads × head_dim floats. Before attention
 * each rank of an SP group holds a contiguous range of the tokens with all heads ("sequence
 * shard": [seq_r, heads·head_dim]); attention needs all tokens of some heads ("head shard":
 * [seq, heads_r·head_dim]). Rank r's ranges are cvx_dist_split_range(seq|heads, size, r). Both
 * transforms are one MPI_Alltoallv; they move floats, so they are exact. One batch element per
 * call (the CFG batch is a loop). Scratch for packing is kept in `sp` and reused. */
int cvx_dist_seq_to_heads(cvx_dist *sp, const float *in, float *out, int64_t seq, int heads, int head_dim);
int cvx_dist_heads_to_seq(cvx_dist *sp, const float *in, float *out, int64_t seq, int heads, int head_dim);

/* [lo, hi) of part i when n items are split into `parts` nearly equal contiguous parts. */
void cvx_dist_split_range(int64_t n, int parts, int i, int64_t *lo, int64_t *hi);

/* The pure layout pieces of the two transforms (no communication; tested against a reference
 * by simulating the exchange in one process). For rank r of p:
 *   seq → heads: send = split_heads(in), recv lands in `out` as is (rank j's tokens are rows
 *                [lo_j, hi_j) of out);
 *   heads → seq: send is `in` as is (rows [lo_j, hi_j) go to rank j), out = join_heads(recv).
 * cvx_ulysses_plan fills the p counts and displacements (floats) of that exchange. */
void cvx_ulysses_plan(int64_t seq, int heads, int head_dim, int p, int r, int to_heads,
                      size_t *send_counts, size_t *send_displs, size_t *recv_counts, size_t *recv_displs);
/* rows [seq_r, heads·head_dim] → p blocks, block j = [seq_r, heads_j·head_dim] (rank j's heads). */
void cvx_ulysses_split_heads(const float *rows, float *blocks, int64_t seq_r, int heads, int head_dim, int p);
/* The inverse: p blocks → rows [seq_r, heads·head_dim]. */
void cvx_ulysses_join_heads(const float *blocks, float *rows, int64_t seq_r, int heads, int head_dim, int p);

/* --------------------------------------------------------------------- input agreement */
/* Every rank must compute from the same inputs. Each rank lists what it read (files, settings)
 * as hashes; cvx_dist_check_inputs compares every rank's list with rank 0's. */
typedef struct {
    char name[64];     /* what it is ("embeddings", "seed"); compared */
    char detail[448];  /* shown when it differs: a file's path, size and hash, a setting's value */
    uint64_t hash;     /* compared */
} cvx_dist_input;

typedef struct {
    cvx_dist_input *items;
    int n, cap;
    char error[512];   /* first failure while listing (unreadable file), reported by the check */
} cvx_dist_inputs;     /* zero-initialize: cvx_dist_inputs in = {0}; */

/* A setting's value (hashed whole, shown up to 60 characters). */
void cvx_dist_inputs_add_setting(cvx_dist_inputs *in, const char *name, const char *value);
/* A file's contents, not its path (a model may sit in different directories on different
 * machines). whole = 1 hashes every byte; whole = 0 hashes the size, the first and the last MiB
 * (enough to tell different weight files apart without reading 11 GB). An unreadable file is
 * remembered and reported by cvx_dist_check_inputs, so that every rank stops together. */
void cvx_dist_inputs_add_file(cvx_dist_inputs *in, const char *name, const char *path, int whole);
void cvx_dist_inputs_free(cvx_dist_inputs *in);
/* Collective. 0 when every rank listed the same inputs; else -1 on every rank with one message
 * naming the lowest rank that differs and the first input that differs, e.g.
 * "rank 2 of 4: seed differs from rank 0: '43' here, '42' on rank 0". */
int cvx_dist_check_inputs(const cvx_dist *d, const cvx_dist_inputs *in);

/* 64-bit FNV-1a, folded over `seed` (chain calls to hash several pieces). */
uint64_t cvx_dist_hash(const void *data, size_t n, uint64_t seed);

/* ------------------------------------------------------------------------ stopping */

/* Collective: 0 when rc == 0 on every rank of d; else -1 on every rank, with the recorded error
 * (cvx_last_error) of the lowest failing rank, prefixed "rank R of N: " unless every rank failed,
 * recorded everywhere; when d spans the whole world the error is marked shared
 * (cvx_error_mark_shared: every rank knows it, they can stop together). */
int cvx_dist_agree(const cvx_dist *d, int rc);
/* After a failed cvx_dist_agree or cvx_dist_check_inputs, or an error every rank finds alike
 * (a bad flag, a wrong rank count): rank 0 prints the recorded error, every rank finalizes MPI
 * and exits 1. */
_Noreturn void cvx_dist_exit_error(cvx_dist *world);
/* This rank alone failed: print "<prog>: error: rank R of N: <msg>" and stop every rank
 * (MPI_Abort); on one rank, exit(1). */
_Noreturn void cvx_dist_die(const cvx_dist *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
_Noreturn void cvx_dist_die_last_error(const cvx_dist *d);

#endif
