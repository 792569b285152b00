/* Communication costs at CogVideoX sizes (docs/distributed.md). Not a test: run it by hand,
 *   mpirun -q --oversubscribe -np 2 build/tests/mpi/comm_bench [reps]
 * Rank 0 prints one line per case: median and best time per call, and bandwidth as the bytes
 * one rank sends per call divided by the median time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef int (*op_fn)(cvx_dist *d, void *ctx);

/* Time `op` reps times (after one warm-up), every rank in step; rank 0 prints. */
static void bench(cvx_dist *d, const char *name, double sent_bytes, int reps, op_fn op, void *ctx) {
    double *t = calloc((size_t)reps, sizeof(double));
    if (op(d, ctx) != 0) cvx_dist_die_last_error(d);
    for (int i = 0; i < reps; i++) {
        if (cvx_dist_barrier(d) != 0) cvx_dist_die_last_error(d);
        double t0 = cvx_time();
        if (op(d, ctx) != 0) cvx_dist_die_last_error(d);
        t[i] = cvx_time() - t0;
    }
    double *all = calloc((size_t)reps * (size_t)cvx_dist_size(d), sizeof(double));
    if (cvx_dist_gather(d, t, (size_t)reps * sizeof(double), all, 0) != 0) cvx_dist_die_last_error(d);
    if (cvx_dist_is_root(d)) {
        for (int i = 0; i < reps; i++)  /* per repetition, the slowest rank */
            for (int r = 1; r < cvx_dist_size(d); r++)
                if (all[(size_t)r * (size_t)reps + (size_t)i] > all[i]) all[i] = all[(size_t)r * (size_t)reps + (size_t)i];
        qsort(all, (size_t)reps, sizeof(double), cmp_double);
        double med = all[reps / 2], best = all[0];
        printf("%-44s %10.0f B  median %9.3f ms  best %9.3f ms  %7.2f GB/s\n", name, sent_bytes, 1e3 * med,
               1e3 * best, sent_bytes / med / 1e9);
        fflush(stdout);
    }
    free(all);
    free(t);
}

typedef struct {
    float *a, *b;
    size_t n;           /* floats */
    int64_t seq;        /* Ulysses */
    int heads, head_dim;
} bufs;

static int op_allgather(cvx_dist *d, void *ctx) {
    bufs *x = ctx;
    return cvx_dist_allgather(d, x->a, x->n * sizeof(float), x->b);
}
static int op_allreduce(cvx_dist *d, void *ctx) {
    bufs *x = ctx;
    return cvx_dist_allreduce_sum_f32(d, x->a, x->n);
}
static int op_bcast(cvx_dist *d, void *ctx) {
    bufs *x = ctx;
    return cvx_dist_bcast(d, x->a, x->n * sizeof(float), 0);
}
static int op_seq_to_heads(cvx_dist *d, void *ctx) {
    bufs *x = ctx;
    return cvx_dist_seq_to_heads(d, x->a, x->b, x->seq, x->heads, x->head_dim);
}
static int op_heads_to_seq(cvx_dist *d, void *ctx) {
    bufs *x = ctx;
    return cvx_dist_heads_to_seq(d, x->b, x->a, x->seq, x->heads, x->head_dim);
}
/* The raw exchange of seq_to_heads without the packing copy (equal blocks). */
static int op_alltoall_raw(cvx_dist *d, void *ctx) {
    bufs *x = ctx;
    int p = cvx_dist_size(d);
    size_t v[4 * 64], block = x->n / (size_t)p;
    for (int j = 0; j < p; j++) v[j] = v[2 * p + j] = block, v[p + j] = v[3 * p + j] = (size_t)j * block;
    return cvx_dist_alltoallv_f32(d, x->a, v, v + p, x->b, v + 2 * p, v + 3 * p);
}

int main(int argc, char **argv) {
    cvx_set_program_name(argv[0]);
    cvx_dist *d = cvx_dist_init(&argc, &argv);
    if (!d) cvx_die_last_error();
    int reps = argc > 1 ? atoi(argv[1]) : 20, p = cvx_dist_size(d);
    if (p > 64) cvx_dist_die(d, "at most 64 ranks");
    if (cvx_dist_is_root(d)) printf("comm_bench: %d ranks, %d repetitions\n", p, reps);

    /* Latency and the CFG exchange of the noise prediction: 2b at 49×480×720, latent
     * [13, 16, 60, 90] f32 = 4.49 MB; plus sizes around it. */
    static const size_t sizes[] = {2, 16384, 262144, 13 * 16 * 60 * 90, 4 * 13 * 16 * 60 * 90};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        bufs x = {cvx_alloc_f32(sizes[s] * (size_t)p), cvx_alloc_f32(sizes[s] * (size_t)p), sizes[s], 0, 0, 0};
        memset(x.a, 0, sizes[s] * (size_t)p * sizeof(float));
        char name[96];
        double bytes = (double)sizes[s] * 4.0;
        snprintf(name, sizeof name, "allgather %zu floats (CFG exchange)", sizes[s]);
        bench(d, name, bytes, reps, op_allgather, &x);
        snprintf(name, sizeof name, "allreduce %zu floats", sizes[s]);
        bench(d, name, bytes, reps, op_allreduce, &x);
        snprintf(name, sizeof name, "bcast %zu floats", sizes[s]);
        bench(d, name, bytes, reps, op_bcast, &x);
        free(x.a), free(x.b);
    }

    /* Ulysses at 2b 49×480×720: 17776 tokens (226 text + 17550 video) × 30 heads × 64. One rank
     * sends (p−1)/p of its shard of 17776·1920/p floats. */
    bufs u = {0};
    u.seq = 17776, u.heads = 30, u.head_dim = 64;
    u.n = (size_t)u.seq * 1920 / (size_t)p + 1920;
    u.a = cvx_alloc_f32(u.n), u.b = cvx_alloc_f32((size_t)u.seq * 1920);
    memset(u.a, 0, u.n * sizeof(float));
    double sent = (double)u.seq * 1920.0 * 4.0 / p * (p - 1) / p;
    bench(d, "Ulysses seq->heads 17776x1920 (2b)", sent, reps, op_seq_to_heads, &u);
    bench(d, "Ulysses heads->seq 17776x1920 (2b)", sent, reps, op_heads_to_seq, &u);
    u.n = (size_t)u.seq * 1920 / (size_t)p / (size_t)p * (size_t)p;
    bench(d, "alltoallv alone, same bytes", sent, reps, op_alltoall_raw, &u);
    free(u.a), free(u.b);
    cvx_dist_free(d);
    return 0;
}
