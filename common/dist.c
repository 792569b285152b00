/* Distribution over MPI ranks: communicators, collectives, Ulysses layouts, input agreement.
 * See dist.h. Built without CVX_USE_MPI every communicator has one rank and the MPI blocks below
 * compile away: each function starts with its one-rank case, which is also what an MPI build
 * does when started without mpirun. */
#include "dist.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef CVX_USE_MPI
#include <mpi.h>
#endif

#include "error.h"
#include "fileio.h"

struct cvx_dist {
    int rank, size;              /* in this communicator */
    int world_rank, world_size;  /* for messages */
    int is_world;
    int mpi;                     /* 1: MPI is initialized and `comm` is used; 0: a world of one */
#ifdef CVX_USE_MPI
    MPI_Comm comm;
#endif
    float *scratch;              /* Ulysses packing buffer, grown on demand */
    size_t scratch_n;
};

#define NO_MPI_MSG "this build has no MPI (built with NO_MPI=1 or without libopenmpi-dev)"

/* ------------------------------------------------------------------------- MPI plumbing */

#ifdef CVX_USE_MPI
/* MPI_ERRORS_RETURN is set on the world: a failed call becomes one recorded error. */
static int mpi_fail(const cvx_dist *d, const char *call, int code) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", code);
    return cvx_error("%s failed on rank %d of %d: %s", call, d->world_rank, d->world_size, s);
}
#define MPI_TRY(d, name, call) \
    do { int code_ = (call); if (code_ != MPI_SUCCESS) return mpi_fail((d), (name), code_); } while (0)

/* MPI counts are int: large buffers go in pieces of at most 2^30 elements. */
#define MPI_PIECE ((size_t)1 << 30)

static int fits_int(size_t v, const char *what) {
    if (v <= (size_t)INT_MAX) return 0;
    return cvx_error("%s: %zu elements is more than one MPI call can move (%d)", what, v, INT_MAX);
}
#endif

/* Size of the job when a launcher started this process: >0 the size, -1 several ranks of
 * unknown count, 0 not launched (or a job of one). */
static int launcher_size(void) {
    static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof size_vars / sizeof size_vars[0]; i++) {
        const char *v = getenv(size_vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    const char *pmix_rank = getenv("PMIX_RANK");  /* srun --mpi=pmix: the size is not in the env */
    if (pmix_rank) return atoi(pmix_rank) > 0 ? -1 : 1;
    return 0;
}

static cvx_dist *dist_new(int rank, int size, int world_rank, int world_size) {
    cvx_dist *d = cvx_calloc(1, sizeof *d);
    d->rank = rank;
    d->size = size;
    d->world_rank = world_rank;
    d->world_size = world_size;
    return d;
}

/* ------------------------------------------------------------------------- build and lifetime */

int cvx_dist_built_with_mpi(void) {
#ifdef CVX_USE_MPI
    return 1;
#else
    return 0;
#endif
}

int cvx_dist_require_mpi(const char *what) {
    if (cvx_dist_built_with_mpi()) return 0;
    return cvx_error("%s: " NO_MPI_MSG, what);
}

cvx_dist *cvx_dist_init(int *argc, char ***argv) {
    int launched = launcher_size();
#ifdef CVX_USE_MPI
    if (launched == 0) {
        cvx_dist *d = dist_new(0, 1, 0, 1);
        d->is_world = 1;
        return d;
    }
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        cvx_error("MPI_Init_thread failed (started by mpirun or srun, but MPI could not start)");
        return NULL;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cvx_dist *d = dist_new(rank, size, rank, size);
    d->is_world = 1;
    d->mpi = 1;
    d->comm = MPI_COMM_WORLD;
    if (provided < MPI_THREAD_FUNNELED) {
        cvx_error("MPI provides thread level %d, FUNNELED (%d) is needed for OpenMP", provided,
                  MPI_THREAD_FUNNELED);
        cvx_dist_free(d);
        return NULL;
    }
    return d;
#else
    if (launched == -1 || launched > 1) {
        cvx_error("started as one of several MPI ranks, but " NO_MPI_MSG
                  ": every rank would compute alone; run it without mpirun or rebuild with MPI");
        return NULL;
    }
    cvx_dist *d = dist_new(0, 1, 0, 1);
    d->is_world = 1;
    return d;
#endif
}

void cvx_dist_free(cvx_dist *d) {
    if (!d) return;
#ifdef CVX_USE_MPI
    if (d->mpi) {
        if (d->is_world) {
            cvx_set_signal_note(NULL);   /* this rank's part is done: another's failure is that rank's to report */
            MPI_Finalize();
        } else {
            MPI_Comm_free(&d->comm);
        }
    }
#endif
    free(d->scratch);
    free(d);
}

int cvx_dist_rank(const cvx_dist *d) { return d->rank; }
int cvx_dist_size(const cvx_dist *d) { return d->size; }
int cvx_dist_is_root(const cvx_dist *d) { return d->rank == 0; }
int cvx_dist_world_rank(const cvx_dist *d) { return d->world_rank; }
int cvx_dist_world_size(const cvx_dist *d) { return d->world_size; }

int cvx_dist_split_grid(const cvx_dist *world, int cfg, int sp, cvx_dist **cfg_group, cvx_dist **sp_group) {
    *cfg_group = *sp_group = NULL;
    if (cfg < 1 || sp < 1 || (long long)cfg * sp != world->size)
        return cvx_error("%d CFG branch(es) × sequence parallelism %d = %lld ranks are needed, this run has %d",
                         cfg, sp, (long long)cfg * sp, world->size);
    if (!world->mpi) {
        *cfg_group = dist_new(0, 1, world->world_rank, world->world_size);
        *sp_group = dist_new(0, 1, world->world_rank, world->world_size);
        return 0;
    }
#ifdef CVX_USE_MPI
    int c = world->rank / sp, s = world->rank % sp;  /* world rank = c·sp + s */
    MPI_Comm cfg_comm, sp_comm;
    MPI_TRY(world, "MPI_Comm_split (CFG groups)", MPI_Comm_split(world->comm, s, c, &cfg_comm));
    int code = MPI_Comm_split(world->comm, c, s, &sp_comm);
    if (code != MPI_SUCCESS) {
        MPI_Comm_free(&cfg_comm);
        return mpi_fail(world, "MPI_Comm_split (sequence-parallel groups)", code);
    }
    *cfg_group = dist_new(c, cfg, world->world_rank, world->world_size);
    *sp_group = dist_new(s, sp, world->world_rank, world->world_size);
    (*cfg_group)->mpi = (*sp_group)->mpi = 1;
    (*cfg_group)->comm = cfg_comm;
    (*sp_group)->comm = sp_comm;
#endif
    return 0;
}

/* ---------------------------------------------------------------------------- collectives */

int cvx_dist_barrier(const cvx_dist *d) {
    if (d->size == 1) return 0;
#ifdef CVX_USE_MPI
    MPI_TRY(d, "MPI_Barrier", MPI_Barrier(d->comm));
#endif
    return 0;
}

int cvx_dist_bcast(const cvx_dist *d, void *buf, size_t bytes, int root) {
    if (d->size == 1) return 0;
#ifdef CVX_USE_MPI
    for (size_t off = 0; off < bytes; off += MPI_PIECE) {
        size_t n = bytes - off < MPI_PIECE ? bytes - off : MPI_PIECE;
        MPI_TRY(d, "MPI_Bcast", MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, d->comm));
    }
#endif
    return 0;
}

int cvx_dist_allreduce_sum_f32(const cvx_dist *d, float *buf, size_t n) {
    if (d->size == 1) return 0;
#ifdef CVX_USE_MPI
    for (size_t off = 0; off < n; off += MPI_PIECE) {
        size_t m = n - off < MPI_PIECE ? n - off : MPI_PIECE;
        MPI_TRY(d, "MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)m, MPI_FLOAT, MPI_SUM, d->comm));
    }
#endif
    return 0;
}

int cvx_dist_allreduce_sum_i64(const cvx_dist *d, int64_t *buf, size_t n) {
    if (d->size == 1) return 0;
#ifdef CVX_USE_MPI
    for (size_t off = 0; off < n; off += MPI_PIECE) {
        size_t m = n - off < MPI_PIECE ? n - off : MPI_PIECE;
        MPI_TRY(d, "MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)m, MPI_INT64_T, MPI_SUM, d->comm));
    }
#endif
    return 0;
}

int cvx_dist_gather(const cvx_dist *d, const void *send, size_t bytes, void *recv, int root) {
    if (d->size == 1) {
        memcpy(recv, send, bytes);
        return 0;
    }
#ifdef CVX_USE_MPI
    if (fits_int(bytes * (size_t)d->size, "MPI_Gather")) return -1;
    MPI_TRY(d, "MPI_Gather", MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root, d->comm));
#endif
    return 0;
}

int cvx_dist_gatherv(const cvx_dist *d, const void *send, const size_t *bytes_per_rank, void *recv, int root) {
    if (d->size == 1) {
        memcpy(recv, send, bytes_per_rank[0]);
        return 0;
    }
#ifdef CVX_USE_MPI
    int *counts = cvx_malloc(2 * (size_t)d->size * sizeof(int)), *displs = counts + d->size;
    size_t off = 0;
    for (int i = 0; i < d->size; i++) {
        counts[i] = (int)bytes_per_rank[i];
        displs[i] = (int)off;
        off += bytes_per_rank[i];
        if (fits_int(off, "MPI_Gatherv")) {
            free(counts);
            return -1;
        }
    }
    int code = MPI_Gatherv(send, counts[d->rank], MPI_BYTE, recv, counts, displs, MPI_BYTE, root, d->comm);
    free(counts);
    if (code != MPI_SUCCESS) return mpi_fail(d, "MPI_Gatherv", code);
#endif
    return 0;
}

int cvx_dist_allgather(const cvx_dist *d, const void *send, size_t bytes, void *recv) {
    if (d->size == 1) {
        memcpy(recv, send, bytes);
        return 0;
    }
#ifdef CVX_USE_MPI
    if (fits_int(bytes * (size_t)d->size, "MPI_Allgather")) return -1;
    MPI_TRY(d, "MPI_Allgather", MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, d->comm));
#endif
    return 0;
}

int cvx_dist_alltoallv_f32(const cvx_dist *d, const float *send, const size_t *send_counts,
                           const size_t *send_displs, float *recv, const size_t *recv_counts,
                           const size_t *recv_displs) {
    if (d->size == 1) {
        memcpy(recv + recv_displs[0], send + send_displs[0], send_counts[0] * sizeof(float));
        return 0;
    }
#ifdef CVX_USE_MPI
    int p = d->size;
    int *v = cvx_malloc(4 * (size_t)p * sizeof(int));  /* send counts, displs, recv counts, displs */
    for (int i = 0; i < p; i++) {
        if (fits_int(send_counts[i], "MPI_Alltoallv") || fits_int(send_displs[i], "MPI_Alltoallv") ||
            fits_int(recv_counts[i], "MPI_Alltoallv") || fits_int(recv_displs[i], "MPI_Alltoallv")) {
            free(v);
            return -1;
        }
        v[i] = (int)send_counts[i];
        v[p + i] = (int)send_displs[i];
        v[2 * p + i] = (int)recv_counts[i];
        v[3 * p + i] = (int)recv_displs[i];
    }
    int code = MPI_Alltoallv(send, v, v + p, MPI_FLOAT, recv, v + 2 * p, v + 3 * p, MPI_FLOAT, d->comm);
    free(v);
    if (code != MPI_SUCCESS) return mpi_fail(d, "MPI_Alltoallv", code);
#endif
    return 0;
}

/* --------------------------------------------------------------- Ulysses sequence parallelism */

void cvx_dist_split_range(int64_t n, int parts, int i, int64_t *lo, int64_t *hi) {
    *lo = n * i / parts;
    *hi = n * (i + 1) / parts;
}

void cvx_ulysses_plan(int64_t seq, int heads, int head_dim, int p, int r, int to_heads,
                      size_t *send_counts, size_t *send_displs, size_t *recv_counts, size_t *recv_displs) {
    int64_t t0, t1, h0, h1;
    cvx_dist_split_range(seq, p, r, &t0, &t1);
    cvx_dist_split_range(heads, p, r, &h0, &h1);
    size_t my_tokens = (size_t)(t1 - t0), my_width = (size_t)(h1 - h0) * (size_t)head_dim;
    size_t packed = 0;  /* running offset in the packed side (split_heads blocks) */
    for (int j = 0; j < p; j++) {
        int64_t u0, u1, g0, g1;
        cvx_dist_split_range(seq, p, j, &u0, &u1);
        cvx_dist_split_range(heads, p, j, &g0, &g1);
        size_t block_packed = my_tokens * (size_t)(g1 - g0) * (size_t)head_dim;  /* my tokens, j's heads */
        size_t block_rows = (size_t)(u1 - u0) * my_width;                        /* j's tokens, my heads */
        size_t rows_at = (size_t)u0 * my_width;
        if (to_heads) {
            send_counts[j] = block_packed, send_displs[j] = packed;
            recv_counts[j] = block_rows, recv_displs[j] = rows_at;
        } else {
            send_counts[j] = block_rows, send_displs[j] = rows_at;
            recv_counts[j] = block_packed, recv_displs[j] = packed;
        }
        packed += block_packed;
    }
}

void cvx_ulysses_split_heads(const float *rows, float *blocks, int64_t seq_r, int heads, int head_dim, int p) {
    size_t row = (size_t)heads * (size_t)head_dim;
    float *block = blocks;
    for (int j = 0; j < p; j++) {
        int64_t h0, h1;
        cvx_dist_split_range(heads, p, j, &h0, &h1);
        size_t w = (size_t)(h1 - h0) * (size_t)head_dim;  /* block j: [seq_r, w] */
        #pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < seq_r; t++)
            memcpy(block + (size_t)t * w, rows + (size_t)t * row + (size_t)h0 * (size_t)head_dim, w * sizeof(float));
        block += (size_t)seq_r * w;
    }
}

void cvx_ulysses_join_heads(const float *blocks, float *rows, int64_t seq_r, int heads, int head_dim, int p) {
    size_t row = (size_t)heads * (size_t)head_dim;
    const float *block = blocks;
    for (int j = 0; j < p; j++) {
        int64_t h0, h1;
        cvx_dist_split_range(heads, p, j, &h0, &h1);
        size_t w = (size_t)(h1 - h0) * (size_t)head_dim;
        #pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < seq_r; t++)
            memcpy(rows + (size_t)t * row + (size_t)h0 * (size_t)head_dim, block + (size_t)t * w, w * sizeof(float));
        block += (size_t)seq_r * w;
    }
}

static float *scratch(cvx_dist *d, size_t n) {
    if (d->scratch_n < n) {
        free(d->scratch);
        d->scratch = cvx_alloc_f32(n);
        d->scratch_n = n;
    }
    return d->scratch;
}

/* One Ulysses exchange: seq → heads (to_heads = 1) or back. */
static int ulysses(cvx_dist *sp, const float *in, float *out, int64_t seq, int heads, int head_dim, int to_heads) {
    int p = sp->size, r = sp->rank;
    int64_t t0, t1;
    cvx_dist_split_range(seq, p, r, &t0, &t1);
    size_t *plan = cvx_malloc(4 * (size_t)p * sizeof(size_t));
    cvx_ulysses_plan(seq, heads, head_dim, p, r, to_heads, plan, plan + p, plan + 2 * p, plan + 3 * p);
    float *packed = scratch(sp, (size_t)(t1 - t0) * (size_t)heads * (size_t)head_dim);
    int rc;
    if (to_heads) {
        cvx_ulysses_split_heads(in, packed, t1 - t0, heads, head_dim, p);
        rc = cvx_dist_alltoallv_f32(sp, packed, plan, plan + p, out, plan + 2 * p, plan + 3 * p);
    } else {
        rc = cvx_dist_alltoallv_f32(sp, in, plan, plan + p, packed, plan + 2 * p, plan + 3 * p);
        if (rc == 0) cvx_ulysses_join_heads(packed, out, t1 - t0, heads, head_dim, p);
    }
    free(plan);
    return rc;
}

int cvx_dist_seq_to_heads(cvx_dist *sp, const float *in, float *out, int64_t seq, int heads, int head_dim) {
    return ulysses(sp, in, out, seq, heads, head_dim, 1);
}

int cvx_dist_heads_to_seq(cvx_dist *sp, const float *in, float *out, int64_t seq, int heads, int head_dim) {
    return ulysses(sp, in, out, seq, heads, head_dim, 0);
}

/* --------------------------------------------------------------------- input agreement */

uint64_t cvx_dist_hash(const void *data, size_t n, uint64_t seed) {
    const unsigned char *b = data;
    uint64_t h = seed ? seed : 0xcbf29ce484222325ull;  /* FNV-1a 64 offset basis */
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static cvx_dist_input *input_push(cvx_dist_inputs *in, const char *name) {
    if (in->n == in->cap) {
        in->cap = in->cap ? 2 * in->cap : 16;
        in->items = cvx_realloc(in->items, (size_t)in->cap * sizeof *in->items);
    }
    cvx_dist_input *it = &in->items[in->n++];
    memset(it, 0, sizeof *it);
    snprintf(it->name, sizeof it->name, "%s", name);
    return it;
}

void cvx_dist_inputs_add_setting(cvx_dist_inputs *in, const char *name, const char *value) {
    cvx_dist_input *it = input_push(in, name);
    it->hash = cvx_dist_hash(value, strlen(value), 0);
    if (strlen(value) <= 60) snprintf(it->detail, sizeof it->detail, "'%s'", value);
    else snprintf(it->detail, sizeof it->detail, "'%.57s...'", value);
}

/* Hash `n` bytes of fd from `off` into h. */
static int hash_range(int fd, off_t off, size_t n, uint64_t *h) {
    char buf[1 << 16];
    while (n > 0) {
        size_t want = n < sizeof buf ? n : sizeof buf;
        ssize_t got = pread(fd, buf, want, off);
        if (got <= 0) return -1;
        *h = cvx_dist_hash(buf, (size_t)got, *h);
        off += got;
        n -= (size_t)got;
    }
    return 0;
}

void cvx_dist_inputs_add_file(cvx_dist_inputs *in, const char *name, const char *path, int whole) {
    cvx_dist_input *it = input_push(in, name);
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (!in->error[0]) snprintf(in->error, sizeof in->error, "%s: cannot open %.400s: %s", name, path, strerror(errno));
        if (fd >= 0) close(fd);
        return;
    }
    size_t size = (size_t)st.st_size, edge = (size_t)1 << 20;
    uint64_t h = cvx_dist_hash(&size, sizeof size, 0);
    int rc;
    if (whole || size <= 2 * edge) rc = hash_range(fd, 0, size, &h);
    else rc = hash_range(fd, 0, edge, &h) || hash_range(fd, (off_t)(size - edge), edge, &h);
    close(fd);
    if (rc != 0 && !in->error[0]) snprintf(in->error, sizeof in->error, "%s: cannot read %.400s", name, path);
    it->hash = h;
    snprintf(it->detail, sizeof it->detail, "%.300s (%zu bytes, %s hash %016llx)", path, size,
             whole || size <= 2 * edge ? "content" : "size + first and last MiB", (unsigned long long)h);
}

void cvx_dist_inputs_free(cvx_dist_inputs *in) {
    free(in->items);
    memset(in, 0, sizeof *in);
}

/* This rank's list against rank 0's: 0, or -1 with the first difference recorded. */
static int compare_inputs(const cvx_dist_inputs *in, const cvx_dist_input *ref, int n_ref) {
    for (int i = 0; i < in->n && i < n_ref; i++) {
        const cvx_dist_input *a = &in->items[i], *b = &ref[i];
        if (strcmp(a->name, b->name) != 0)
            return cvx_error("input %d is '%s' here but '%s' on rank 0 (different program versions?)",
                             i, a->name, b->name);
        if (a->hash != b->hash)
            return cvx_error("%s differs from rank 0: %s here, %s on rank 0", a->name, a->detail, b->detail);
    }
    /* one list is longer: name what the other rank does not read (issue 21: "17 inputs listed here
     * but 18 on rank 0" was all a --resume given to rank 0 alone said) */
    if (in->n < n_ref)
        return cvx_error("rank 0 also reads %s (%s), this rank does not (different flags or program versions?)",
                         ref[in->n].name, ref[in->n].detail);
    if (in->n > n_ref)
        return cvx_error("this rank also reads %s (%s), rank 0 does not (different flags or program versions?)",
                         in->items[n_ref].name, in->items[n_ref].detail);
    return 0;
}

int cvx_dist_check_inputs(const cvx_dist *d, const cvx_dist_inputs *in) {
    if (cvx_dist_agree(d, in->error[0] ? cvx_error("%s", in->error) : 0) != 0) return -1;
    if (d->size == 1) return 0;
    int64_t n_ref = in->n;
    if (cvx_dist_bcast(d, &n_ref, sizeof n_ref, 0) != 0) return -1;
    cvx_dist_input *ref = cvx_calloc((size_t)n_ref, sizeof *ref);
    if (d->rank == 0) memcpy(ref, in->items, (size_t)n_ref * sizeof *ref);
    if (cvx_dist_bcast(d, ref, (size_t)n_ref * sizeof *ref, 0) != 0) {
        free(ref);
        return -1;
    }
    int rc = compare_inputs(in, ref, (int)n_ref);
    free(ref);
    return cvx_dist_agree(d, rc);
}

/* ------------------------------------------------------------------------ stopping */

int cvx_dist_agree(const cvx_dist *d, int rc) {
    if (d->size == 1) return rc ? -1 : 0;
#ifdef CVX_USE_MPI
    /* min over ranks of {the failing rank (size: none), failed (1 on every rank: all failed)} */
    int mine[2] = {rc ? d->rank : d->size, rc ? 1 : 0}, first[2];
    MPI_TRY(d, "MPI_Allreduce (agreement)", MPI_Allreduce(mine, first, 2, MPI_INT, MPI_MIN, d->comm));
    if (first[0] == d->size) return 0;
    char msg[2048] = {0};
    if (d->rank == first[0] && first[1])   /* every rank failed (a bad flag, a head count): no rank to name */
        snprintf(msg, sizeof msg, "%s", cvx_last_error());
    else if (d->rank == first[0])
        snprintf(msg, sizeof msg, "rank %d of %d: %s", d->world_rank, d->world_size, cvx_last_error());
    MPI_TRY(d, "MPI_Bcast (agreement)", MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first[0], d->comm));
    msg[sizeof msg - 1] = 0;
    cvx_error("%s", msg);
    if (d->size == d->world_size) cvx_error_mark_shared();   /* every rank of the run has it */
    return -1;
#else
    return rc ? -1 : 0;
#endif
}

void cvx_dist_exit_error(cvx_dist *world) {
    cvx_set_signal_note(NULL);   /* every rank stops on this error: mpirun's SIGTERM to a slower one says nothing new */
    if (world->world_rank == 0) {
        fflush(stdout);
        fprintf(stderr, "%s: error: %s\n", cvx_program_name(), cvx_last_error());
        fflush(stderr);
    }
#ifdef CVX_USE_MPI
    if (world->mpi) MPI_Finalize();
#endif
    exit(1);
}

void cvx_dist_die(const cvx_dist *d, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    cvx_set_signal_note(NULL);
    if (d->world_size > 1)
        fprintf(stderr, "%s: error: rank %d of %d: %s\n", cvx_program_name(), d->world_rank, d->world_size, msg);
    else
        fprintf(stderr, "%s: error: %s\n", cvx_program_name(), msg);
    fflush(stderr);
#ifdef CVX_USE_MPI
    if (d->mpi) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    exit(1);
}

void cvx_dist_die_last_error(const cvx_dist *d) { cvx_dist_die(d, "%s", cvx_last_error()); }
