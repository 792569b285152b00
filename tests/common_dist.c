/* common/dist: the distribution layer.
 *
 * Always: the one-rank world (what every run without mpirun gets), split ranges, the Ulysses
 * layout transforms against a pure reference with the all-to-all simulated in this process for
 * 1–5 ranks (uneven tokens and heads), input hashing, and the no-MPI refusals.
 * With an MPI build: tests/mpi/dist_ranks under `mpirun -np 2` and `-np 4` (collectives, grid
 * groups, a rank with different inputs, a missing file, a rank that aborts, a rank that is
 * killed), checking exit codes, a time limit and that stderr holds exactly the one expected line. Without MPI
 * those programs are not built, and this says so. */
#include "testutil.h"

#include "dist.h"

/* The tests run without a launcher; a stray OMPI_* variable would make init start MPI. */
static void no_launcher_env(void) {
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
    unsetenv("MV2_COMM_WORLD_SIZE");
    unsetenv("PMIX_RANK");
}

/* --------------------------------------------------------------------------- one rank */

static void test_split_range(void **state) {
    (void)state;
    for (int64_t n = 0; n <= 40; n++)
        for (int parts = 1; parts <= 7; parts++) {
            int64_t expect_lo = 0;
            for (int i = 0; i < parts; i++) {
                int64_t lo, hi;
                cvx_dist_split_range(n, parts, i, &lo, &hi);
                assert_int_equal(lo, expect_lo);                         /* contiguous */
                assert_true(hi - lo == n / parts || hi - lo == n / parts + 1);  /* balanced */
                expect_lo = hi;
            }
            assert_int_equal(expect_lo, n);                              /* complete */
        }
    int64_t lo, hi;
    cvx_dist_split_range(17776, 4, 3, &lo, &hi);  /* 2b at 49×480×720: 226 text + 17550 video tokens */
    assert_int_equal(lo, 13332);
    assert_int_equal(hi, 17776);
}

/* The reference for rank r's head shard: X[t, h0·hd : h1·hd] for every token t. */
static float *ref_head_shard(const float *x, int64_t seq, int heads, int hd, int p, int r) {
    int64_t h0, h1;
    cvx_dist_split_range(heads, p, r, &h0, &h1);
    size_t row = (size_t)heads * (size_t)hd, w = (size_t)(h1 - h0) * (size_t)hd;
    float *out = malloc((size_t)seq * w * sizeof(float) + 1);
    for (int64_t t = 0; t < seq; t++)
        for (size_t c = 0; c < w; c++) out[(size_t)t * w + c] = x[(size_t)t * row + (size_t)h0 * (size_t)hd + c];
    return out;
}

/* The all-to-all of p ranks in one process: recv[r] block j = send[j] block r. */
static void simulate_alltoallv(int p, float **send, size_t **plan, float **recv) {
    for (int r = 0; r < p; r++)
        for (int j = 0; j < p; j++) {
            size_t *pr = plan[r], *pj = plan[j];   /* counts/displs: send c, d, recv c, d */
            assert_int_equal(pj[r], pr[2 * p + j]);  /* what j sends r is what r expects from j */
            memcpy(recv[r] + pr[3 * p + j], send[j] + pj[p + r], pj[r] * sizeof(float));
        }
}

/* seq → heads → seq for p simulated ranks: head shards equal the reference, the way back is
 * the identity, bit for bit. */
static void ulysses_case(int p, int64_t seq, int heads, int hd) {
    size_t row = (size_t)heads * (size_t)hd;
    float *x = malloc((size_t)seq * row * sizeof(float) + 1);
    for (size_t i = 0; i < (size_t)seq * row; i++) x[i] = (float)i;  /* distinct, exact */
    float *in[8], *packed[8], *out[8], *back[8];
    size_t *plan_fwd[8], *plan_bwd[8];
    for (int r = 0; r < p; r++) {
        int64_t t0, t1, h0, h1;
        cvx_dist_split_range(seq, p, r, &t0, &t1);
        cvx_dist_split_range(heads, p, r, &h0, &h1);
        size_t mine = (size_t)(t1 - t0) * row;
        in[r] = x + (size_t)t0 * row;  /* sequence shard: rows t0..t1 */
        packed[r] = malloc(mine * sizeof(float) + 1);
        back[r] = malloc(mine * sizeof(float) + 1);
        out[r] = malloc((size_t)seq * (size_t)(h1 - h0) * (size_t)hd * sizeof(float) + 1);
        plan_fwd[r] = malloc(4 * (size_t)p * sizeof(size_t));
        plan_bwd[r] = malloc(4 * (size_t)p * sizeof(size_t));
        size_t *f = plan_fwd[r], *b = plan_bwd[r];
        cvx_ulysses_plan(seq, heads, hd, p, r, 1, f, f + p, f + 2 * p, f + 3 * p);
        cvx_ulysses_plan(seq, heads, hd, p, r, 0, b, b + p, b + 2 * p, b + 3 * p);
        size_t sent = 0;
        for (int j = 0; j < p; j++) sent += f[j];
        assert_int_equal(sent, mine);  /* every float of the shard leaves exactly once */
        cvx_ulysses_split_heads(in[r], packed[r], t1 - t0, heads, hd, p);
    }
    simulate_alltoallv(p, packed, plan_fwd, out);
    for (int r = 0; r < p; r++) {
        int64_t h0, h1;
        cvx_dist_split_range(heads, p, r, &h0, &h1);
        float *want = ref_head_shard(x, seq, heads, hd, p, r);
        if (memcmp(out[r], want, (size_t)seq * (size_t)(h1 - h0) * (size_t)hd * sizeof(float)) != 0)
            fail_msg("p=%d seq=%lld heads=%d hd=%d: rank %d's head shard differs from the reference", p,
                     (long long)seq, heads, hd, r);
        free(want);
    }
    simulate_alltoallv(p, out, plan_bwd, packed);  /* heads → seq sends `out` as is */
    for (int r = 0; r < p; r++) {
        int64_t t0, t1;
        cvx_dist_split_range(seq, p, r, &t0, &t1);
        cvx_ulysses_join_heads(packed[r], back[r], t1 - t0, heads, hd, p);
        if (memcmp(back[r], in[r], (size_t)(t1 - t0) * row * sizeof(float)) != 0)
            fail_msg("p=%d seq=%lld heads=%d hd=%d: rank %d's round trip differs", p, (long long)seq, heads, hd, r);
        free(packed[r]), free(back[r]), free(out[r]), free(plan_fwd[r]), free(plan_bwd[r]);
    }
    free(x);
}

static void test_ulysses_layout_simulated(void **state) {
    (void)state;
    static const int shapes[][3] = {{1, 1, 1}, {7, 2, 3}, {37, 6, 4}, {226 + 99, 30, 8}, {11, 5, 2}, {3, 4, 1}};
    int cases = 0;
    for (int p = 1; p <= 5; p++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            ulysses_case(p, shapes[s][0], shapes[s][1], shapes[s][2]);
            cases++;
        }
    print_message("  %d layouts (1-5 ranks, uneven tokens and heads) equal the reference\n", cases);
}

static void test_one_rank_world(void **state) {
    (void)state;
    no_launcher_env();
    int argc = 1;
    char *args[] = {"common_dist", NULL}, **argv = args;
    cvx_dist *w = cvx_dist_init(&argc, &argv);
    ASSERT_NONNULL(w);
    assert_int_equal(cvx_dist_rank(w), 0);
    assert_int_equal(cvx_dist_size(w), 1);
    assert_true(cvx_dist_is_root(w));
    assert_int_equal(cvx_dist_world_size(w), 1);

    cvx_dist *cg, *sg;
    assert_int_equal(cvx_dist_split_grid(w, 2, 1, &cg, &sg), -1);
    assert_non_null(strstr(cvx_last_error(), "2 CFG branch(es) × sequence parallelism 1 = 2 ranks are needed, this run has 1"));
    assert_null(cg);
    ASSERT_OK(cvx_dist_split_grid(w, 1, 1, &cg, &sg));
    assert_int_equal(cvx_dist_size(cg), 1);
    assert_int_equal(cvx_dist_size(sg), 1);

    /* Collectives are local copies. */
    float a[4] = {1, 2, 3, 4}, b[4] = {0};
    ASSERT_OK(cvx_dist_bcast(w, a, sizeof a, 0));
    ASSERT_OK(cvx_dist_allreduce_sum_f32(w, a, 4));
    assert_true(a[3] == 4.0f);
    ASSERT_OK(cvx_dist_gather(w, a, sizeof a, b, 0));
    assert_memory_equal(a, b, sizeof a);
    memset(b, 0, sizeof b);
    ASSERT_OK(cvx_dist_allgather(sg, a, sizeof a, b));
    assert_memory_equal(a, b, sizeof a);
    size_t bytes = 2 * sizeof(float);
    memset(b, 0, sizeof b);
    ASSERT_OK(cvx_dist_gatherv(cg, a, &bytes, b, 0));
    assert_true(b[1] == 2.0f && b[2] == 0.0f);
    size_t cnt = 3, sd = 1, rd = 0;
    ASSERT_OK(cvx_dist_alltoallv_f32(w, a, &cnt, &sd, b, &cnt, &rd));
    assert_true(b[0] == 2.0f && b[2] == 4.0f);

    /* Ulysses on one rank: the head shard is the whole tensor. */
    float x[6 * 8], y[6 * 8], z[6 * 8];
    for (int i = 0; i < 48; i++) x[i] = (float)i;
    ASSERT_OK(cvx_dist_seq_to_heads(sg, x, y, 6, 4, 2));
    assert_memory_equal(x, y, sizeof x);
    ASSERT_OK(cvx_dist_heads_to_seq(sg, y, z, 6, 4, 2));
    assert_memory_equal(x, z, sizeof x);

    /* Agreement on one rank passes the local result through, message untouched. */
    assert_int_equal(cvx_dist_agree(w, 0), 0);
    cvx_error("local failure");
    assert_int_equal(cvx_dist_agree(w, -1), -1);
    assert_string_equal(cvx_last_error(), "local failure");
    ASSERT_OK(cvx_dist_barrier(w));
    cvx_dist_free(sg);
    cvx_dist_free(cg);
    cvx_dist_free(w);
}

static void test_inputs(void **state) {
    (void)state;
    no_launcher_env();
    int argc = 1;
    char *args[] = {"common_dist", NULL}, **argv = args;
    cvx_dist *w = cvx_dist_init(&argc, &argv);
    ASSERT_NONNULL(w);
    char dir[64], p1[128], p2[128], p3[128];
    tu_mkdtemp(dir, sizeof dir);
    snprintf(p1, sizeof p1, "%s/a", dir), snprintf(p2, sizeof p2, "%s/b", dir), snprintf(p3, sizeof p3, "%s/c", dir);
    /* 3 MiB files: b differs from a in the middle, c at the end. */
    size_t n = 3u << 20;
    char *buf = calloc(n, 1);
    tu_write(p1, buf, n);
    buf[n / 2] = 1;
    tu_write(p2, buf, n);
    buf[n / 2] = 0, buf[n - 1] = 1;
    tu_write(p3, buf, n);
    free(buf);

    cvx_dist_inputs in = {0};
    cvx_dist_inputs_add_file(&in, "a whole", p1, 1);
    cvx_dist_inputs_add_file(&in, "b whole", p2, 1);
    cvx_dist_inputs_add_file(&in, "a edges", p1, 0);
    cvx_dist_inputs_add_file(&in, "b edges", p2, 0);
    cvx_dist_inputs_add_file(&in, "c edges", p3, 0);
    cvx_dist_inputs_add_setting(&in, "seed", "42");
    cvx_dist_inputs_add_setting(&in, "prompt", "A panda, dressed in a small red jacket, plays a guitar in a serene bamboo forest.");
    assert_int_equal(in.n, 7);
    assert_true(in.items[0].hash != in.items[1].hash);  /* whole: any byte counts */
    assert_true(in.items[2].hash == in.items[3].hash);  /* edges: the middle does not (documented) */
    assert_true(in.items[2].hash != in.items[4].hash);
    assert_non_null(strstr(in.items[0].detail, "(3145728 bytes, content hash"));
    assert_string_equal(in.items[5].detail, "'42'");
    assert_int_equal(strlen(in.items[6].detail), 62);  /* quoted, cut to 57 + "..." */
    assert_true(in.items[5].hash == cvx_dist_hash("42", 2, 0));
    assert_string_equal(in.error, "");
    ASSERT_OK(cvx_dist_check_inputs(w, &in));

    /* An unreadable file fails the check (on every rank: it goes through cvx_dist_agree). */
    cvx_dist_inputs_add_file(&in, "weights", "/nonexistent/x.safetensors", 0);
    assert_int_equal(cvx_dist_check_inputs(w, &in), -1);
    assert_string_equal(cvx_last_error(), "weights: cannot open /nonexistent/x.safetensors: No such file or directory");
    cvx_dist_inputs_free(&in);
    assert_int_equal(in.n, 0);
    tu_rmrf(dir);
    cvx_dist_free(w);
}

/* FNV-1a 64 reference values (from the FNV specification's test vectors). */
static void test_hash(void **state) {
    (void)state;
    assert_true(cvx_dist_hash("", 0, 0) == 0xcbf29ce484222325ull);
    assert_true(cvx_dist_hash("a", 1, 0) == 0xaf63dc4c8601ec8cull);
    assert_true(cvx_dist_hash("foobar", 6, 0) == 0x85944171f73967e8ull);
    assert_true(cvx_dist_hash("bar", 3, cvx_dist_hash("foo", 3, 0)) == 0x85944171f73967e8ull);  /* chains */
}

static void test_build_flavour(void **state) {
    (void)state;
#ifdef CVX_USE_MPI
    assert_int_equal(cvx_dist_built_with_mpi(), 1);
    ASSERT_OK(cvx_dist_require_mpi("--sp"));
#else
    assert_int_equal(cvx_dist_built_with_mpi(), 0);
    assert_int_equal(cvx_dist_require_mpi("--sp"), -1);
    assert_string_equal(cvx_last_error(), "--sp: this build has no MPI (built with NO_MPI=1 or without libopenmpi-dev)");
    /* Started as one of several ranks, a build without MPI refuses instead of computing alone. */
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    int argc = 1;
    char *args[] = {"common_dist", NULL}, **argv = args;
    assert_null(cvx_dist_init(&argc, &argv));
    assert_non_null(strstr(cvx_last_error(), "started as one of several MPI ranks, but this build has no MPI"));
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);  /* mpirun -np 1 is fine */
    cvx_dist *w = cvx_dist_init(&argc, &argv);
    ASSERT_NONNULL(w);
    cvx_dist_free(w);
    no_launcher_env();
#endif
}

/* ------------------------------------------------------------------- under mpirun (MPI builds) */
#ifdef CVX_USE_MPI

/* Run tests/mpi/dist_ranks MODE on np ranks; returns mpirun's exit status, stderr in err. */
static int mpirun(int np, const char *mode, char *err, size_t errn) {
    char prog[512], mr[512], cmd[1200];
    snprintf(prog, sizeof prog, "%s/tests/mpi/dist_ranks", tu_build_dir());
    if (access(prog, X_OK) != 0) fail_msg("%s is missing (make tests-build builds it in MPI builds)", prog);
    /* tu_mpirun: -q (stderr is the program's own), no leak detection in the ranks under ASan (no
     * suppression can name Open MPI's unloaded plugins; the one-rank paths above are
     * leak-checked), no CMA in Docker */
    tu_mpirun(mr, sizeof mr, np, 120);
    snprintf(cmd, sizeof cmd, "%s %s %s </dev/null", mr, prog, mode);
    double t = cvx_time();
    int rc = tu_run(cmd, err, errn);
    print_message("  mpirun -np %d dist_ranks %-14s exit %3d  %.1f s\n", np, mode, rc, cvx_time() - t);
    if (rc == 124) fail_msg("mpirun -np %d %s: timed out (a rank hangs)", np, mode);
    return rc;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Success: exit 0 and nothing on stderr. */
static void expect_clean(int np, const char *mode) {
    char err[8192];
    int rc = mpirun(np, mode, err, sizeof err);
    if (rc != 0 || err[0]) fail_msg("mpirun -np %d dist_ranks %s: exit %d, stderr:\n%s", np, mode, rc, err);
}

/* Failure: exit non-zero and exactly one stderr line, containing `want`. */
static void expect_one_error(int np, const char *mode, const char *want) {
    char err[8192];
    int rc = mpirun(np, mode, err, sizeof err);
    if (rc == 0) fail_msg("mpirun -np %d dist_ranks %s: exit 0, expected a failure", np, mode);
    if (count_lines(err) != 1 || !strstr(err, want))
        fail_msg("mpirun -np %d dist_ranks %s: expected one stderr line with '%s', got:\n%s", np, mode, want, err);
}

/* Collectives, Ulysses and every CFG × SP grid on 2 and 4 ranks (one mpirun each: a start costs
 * about a second). */
static void test_mpirun_collectives_and_grids(void **state) {
    (void)state;
    expect_clean(2, "collectives");
    expect_clean(4, "collectives");
    expect_one_error(4, "grid 2 3", "dist_ranks: error: 2 CFG branch(es) × sequence parallelism 3 = 6 ranks are "
                                    "needed, this run has 4");
}

static void test_mpirun_input_mismatch(void **state) {
    (void)state;
    expect_one_error(4, "mismatch", "dist_ranks: error: rank 1 of 4: seed differs from rank 0: '43' here, '42' on rank 0");
    expect_one_error(2, "mismatch_file", "dist_ranks: error: rank 1 of 2: embeddings differs from rank 0: /tmp/");
    expect_one_error(2, "missing",
                     "dist_ranks: error: rank 1 of 2: weights: cannot open /nonexistent/w.safetensors: No such file");
}

static void test_mpirun_rank_failure(void **state) {
    (void)state;
    expect_one_error(4, "die", "dist_ranks: error: rank 1 of 4: simulated failure");
    char err[8192];
    int rc = mpirun(4, "crash", err, sizeof err);  /* SIGKILL: no message of ours, mpirun must not hang */
    if (rc == 0) fail_msg("a rank was killed but mpirun exited 0; stderr:\n%s", err);
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_range),
        cmocka_unit_test(test_ulysses_layout_simulated),
        cmocka_unit_test(test_one_rank_world),
        cmocka_unit_test(test_inputs),
        cmocka_unit_test(test_hash),
        cmocka_unit_test(test_build_flavour),
#ifdef CVX_USE_MPI
        cmocka_unit_test(test_mpirun_collectives_and_grids),
        cmocka_unit_test(test_mpirun_input_mismatch),
        cmocka_unit_test(test_mpirun_rank_failure),
#endif
    };
    if (!cvx_dist_built_with_mpi())
        printf("common_dist: this build has no MPI: the mpirun tests (tests/mpi/) are not built or run\n");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
