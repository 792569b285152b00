/* The MPI half of the common/dist tests: run under mpirun by tests/common_dist.c (which checks
 * exit codes and stderr), one mode per run:
 *   collectives      bcast, allreduce, gather(v), allgather, all-to-all round trip and the
 *                    Ulysses transforms against a reference, then every CFG × SP grid of the world
 *   grid CFG SP      cvx_dist_split_grid: group ranks, sizes, members; Ulysses inside SP groups
 *   mismatch         the seed differs on rank 1 (and 3): every rank stops, rank 0 prints one line
 *                    naming rank 1
 *   mismatch_file    rank 1's file content differs (paths differ on every rank, and do not count)
 *   missing          rank 1 cannot open a file: every rank stops with rank 1's message
 *   die              rank 1 calls cvx_dist_die while the others wait: MPI_Abort stops them all
 *   crash            rank 1 is killed by SIGKILL while the others wait: mpirun exits non-zero
 * Built only when the build has MPI (Makefile: MPI_TEST_BINS). Prints nothing when all is well. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist.h"
#include "error.h"

/* A check that stops every rank with the failing rank's message. */
#define EXPECT(d, cond) \
    do { if (!(cond)) cvx_dist_die((d), "%s:%d: check failed: %s", __FILE__, __LINE__, #cond); } while (0)
#define OK(d, call) \
    do { if ((call) != 0) cvx_dist_die((d), "%s failed: %s", #call, cvx_last_error()); } while (0)

/* Distinct exact integers for i < 2.39 M within one tensor, so a misplaced float is caught. */
static float tag(int tensor, int64_t i) { return (float)((i * 7 + tensor) % 16777216); }

static void check_basic(cvx_dist *d) {
    int r = cvx_dist_rank(d), p = cvx_dist_size(d);
    char word[32] = {0};
    if (r == 0) snprintf(word, sizeof word, "from rank 0");
    OK(d, cvx_dist_bcast(d, word, sizeof word, 0));
    EXPECT(d, strcmp(word, "from rank 0") == 0);

    float f[3] = {(float)r, 1.0f, 0.5f * (float)r};
    OK(d, cvx_dist_allreduce_sum_f32(d, f, 3));
    EXPECT(d, f[0] == (float)(p * (p - 1) / 2) && f[1] == (float)p && f[2] == 0.5f * f[0]);
    int64_t big[2] = {(int64_t)1 << 40, r};
    OK(d, cvx_dist_allreduce_sum_i64(d, big, 2));
    EXPECT(d, big[0] == (int64_t)p << 40 && big[1] == (int64_t)p * (p - 1) / 2);

    int mine[2] = {r, 10 * r}, *all = calloc(2 * (size_t)p, sizeof(int));
    OK(d, cvx_dist_gather(d, mine, sizeof mine, r == 0 ? all : NULL, 0));
    if (r == 0)
        for (int i = 0; i < p; i++) EXPECT(d, all[2 * i] == i && all[2 * i + 1] == 10 * i);
    memset(all, 0, 2 * (size_t)p * sizeof(int));
    OK(d, cvx_dist_allgather(d, mine, sizeof mine, all));
    for (int i = 0; i < p; i++) EXPECT(d, all[2 * i] == i && all[2 * i + 1] == 10 * i);
    free(all);

    /* gatherv: rank i sends i + 1 bytes of value i (VAE tiles differ in size). */
    size_t *bytes = calloc((size_t)p, sizeof(size_t)), total = 0;
    for (int i = 0; i < p; i++) total += bytes[i] = (size_t)i + 1;
    unsigned char send[64], *recv = calloc(total, 1);
    memset(send, r, sizeof send);
    OK(d, cvx_dist_gatherv(d, send, bytes, r == 0 ? recv : NULL, 0));
    if (r == 0)
        for (size_t i = 0, k = 0; i < (size_t)p; i++)
            for (size_t b = 0; b < bytes[i]; b++, k++) EXPECT(d, recv[k] == i);
    free(recv);
    free(bytes);
    OK(d, cvx_dist_barrier(d));
}

/* All-to-all with unequal blocks (rank i sends i + j + 1 floats to rank j), there and back. */
static void check_alltoall_round_trip(cvx_dist *d) {
    int r = cvx_dist_rank(d), p = cvx_dist_size(d);
    size_t *v = calloc(4 * (size_t)p, sizeof(size_t)), *sc = v, *sd = v + p, *rc = v + 2 * p, *rd = v + 3 * p;
    size_t ns = 0, nr = 0;
    for (int j = 0; j < p; j++) {
        sc[j] = (size_t)(r + j + 1), sd[j] = ns, ns += sc[j];
        rc[j] = (size_t)(j + r + 1), rd[j] = nr, nr += rc[j];
    }
    float *a = malloc(ns * sizeof(float)), *b = malloc(nr * sizeof(float)), *c = malloc(ns * sizeof(float));
    for (size_t i = 0; i < ns; i++) a[i] = tag(r, (int64_t)i);
    OK(d, cvx_dist_alltoallv_f32(d, a, sc, sd, b, rc, rd));
    for (int j = 0; j < p; j++)  /* block j came from rank j, where it sat at offset sum_{k<r}(j+k+1) */
        for (size_t k = 0; k < rc[j]; k++) {
            size_t off = 0;
            for (int q = 0; q < r; q++) off += (size_t)(j + q + 1);
            EXPECT(d, b[rd[j] + k] == tag(j, (int64_t)(off + k)));
        }
    OK(d, cvx_dist_alltoallv_f32(d, b, rc, rd, c, sc, sd));
    EXPECT(d, memcmp(a, c, ns * sizeof(float)) == 0);
    free(a), free(b), free(c), free(v);
}

/* Ulysses on a group: the full tensor X[seq, heads·hd] (tagged by `which`) is known to all; each
 * rank starts from its token rows and must end with exactly X's columns of its heads. */
static void check_ulysses(cvx_dist *g, int which, int64_t seq, int heads, int hd) {
    int r = cvx_dist_rank(g), p = cvx_dist_size(g);
    int64_t t0, t1, h0, h1;
    cvx_dist_split_range(seq, p, r, &t0, &t1);
    cvx_dist_split_range(heads, p, r, &h0, &h1);
    size_t row = (size_t)heads * (size_t)hd, w = (size_t)(h1 - h0) * (size_t)hd;
    float *in = malloc(((size_t)(t1 - t0) * row + 1) * sizeof(float));
    float *out = malloc(((size_t)seq * w + 1) * sizeof(float));
    float *back = malloc(((size_t)(t1 - t0) * row + 1) * sizeof(float));
    for (int64_t t = t0; t < t1; t++)
        for (size_t c = 0; c < row; c++) in[(size_t)(t - t0) * row + c] = tag(which, t * (int64_t)row + (int64_t)c);
    OK(g, cvx_dist_seq_to_heads(g, in, out, seq, heads, hd));
    for (int64_t t = 0; t < seq; t++)  /* the reference: X[t, h0·hd : h1·hd] */
        for (size_t c = 0; c < w; c++)
            EXPECT(g, out[(size_t)t * w + c] == tag(which, t * (int64_t)row + h0 * hd + (int64_t)c));
    OK(g, cvx_dist_heads_to_seq(g, out, back, seq, heads, hd));
    EXPECT(g, memcmp(in, back, (size_t)(t1 - t0) * row * sizeof(float)) == 0);
    free(in), free(out), free(back);
}

static void check_collectives(cvx_dist *world) {
    check_basic(world);
    check_alltoall_round_trip(world);
    int p = cvx_dist_size(world);
    check_ulysses(world, 1, 37, 6, 4);           /* tokens not divisible by the ranks */
    check_ulysses(world, 2, 226 + 990, 30, 64);  /* 2b's heads and head size, 1 latent frame pair */
    check_ulysses(world, 3, p - 1 > 0 ? p - 1 : 1, p, 3);  /* fewer tokens than ranks */
    check_ulysses(world, 4, 11, 5, 2);           /* heads not divisible either (uneven, still exact) */
}

static void check_grid(cvx_dist *world, int cfg, int sp) {
    cvx_dist *cg, *sg;
    if (cvx_dist_split_grid(world, cfg, sp, &cg, &sg) != 0)
        cvx_dist_exit_error(world);  /* the same error on every rank: rank 0 says it once */
    int w = cvx_dist_rank(world), c = w / sp, s = w % sp;
    EXPECT(world, cvx_dist_size(cg) == cfg && cvx_dist_rank(cg) == c);
    EXPECT(world, cvx_dist_size(sg) == sp && cvx_dist_rank(sg) == s);
    EXPECT(world, cvx_dist_world_rank(sg) == w && cvx_dist_world_size(cg) == cfg * sp);
    int *members = calloc((size_t)(cfg > sp ? cfg : sp), sizeof(int));
    OK(world, cvx_dist_allgather(sg, &w, sizeof w, members));
    for (int i = 0; i < sp; i++) EXPECT(world, members[i] == c * sp + i);
    OK(world, cvx_dist_allgather(cg, &w, sizeof w, members));
    for (int i = 0; i < cfg; i++) EXPECT(world, members[i] == i * sp + s);
    free(members);
    check_ulysses(sg, 10 + c, 226 + 99, 6 * sp, 8);  /* each CFG branch its own data */
    cvx_dist_free(sg);
    cvx_dist_free(cg);
}

/* A per-rank temp file holding `text` (paths differ between ranks on purpose). */
static void temp_file(char *path, size_t n, int rank, const char *text) {
    snprintf(path, n, "/tmp/cvx_dist_ranks_%d_%d", (int)getpid(), rank);
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) cvx_die("cannot write %s", path);
}

static void check_inputs(cvx_dist *world, const char *mode) {
    int r = cvx_dist_rank(world);
    cvx_dist_inputs in = {0};
    char path[128];
    temp_file(path, sizeof path, r, r == 1 && !strcmp(mode, "mismatch_file") ? "other embeddings" : "embeddings");
    cvx_dist_inputs_add_file(&in, "embeddings", path, 1);
    if (r == 1 && !strcmp(mode, "missing")) cvx_dist_inputs_add_file(&in, "weights", "/nonexistent/w.safetensors", 0);
    else cvx_dist_inputs_add_file(&in, "weights", path, 0);
    int odd = r % 2 == 1 && !strcmp(mode, "mismatch");
    cvx_dist_inputs_add_setting(&in, "seed", odd ? (r == 1 ? "43" : "44") : "42");
    int rc = cvx_dist_check_inputs(world, &in);
    unlink(path);
    cvx_dist_inputs_free(&in);
    if (rc != 0) cvx_dist_exit_error(world);
}

int main(int argc, char **argv) {
    cvx_set_program_name(argv[0]);
    cvx_dist *world = cvx_dist_init(&argc, &argv);
    if (!world) cvx_die_last_error();
    const char *mode = argc > 1 ? argv[1] : "collectives";
    int r = cvx_dist_rank(world);
    if (!strcmp(mode, "collectives")) {
        check_collectives(world);
        for (int cfg = 1; cfg <= cvx_dist_size(world); cfg++)
            if (cvx_dist_size(world) % cfg == 0) check_grid(world, cfg, cvx_dist_size(world) / cfg);
    } else if (!strcmp(mode, "grid") && argc == 4) {
        check_grid(world, atoi(argv[2]), atoi(argv[3]));
    } else if (!strncmp(mode, "mismatch", 8) || !strcmp(mode, "missing")) {
        check_inputs(world, mode);
    } else if (!strcmp(mode, "die")) {
        if (r == 1) cvx_dist_die(world, "simulated failure");
        cvx_dist_barrier(world);
    } else if (!strcmp(mode, "crash")) {
        if (r == 1) raise(SIGKILL);
        cvx_dist_barrier(world);
    } else {
        cvx_dist_die(world, "unknown mode '%s' (collectives | grid CFG SP | mismatch | mismatch_file | "
                     "missing | die | crash)", mode);
    }
    cvx_dist_free(world);
    return 0;
}
