/* The MPI agreement over the flag tables (issue 21): stage 2 and stage 3 parse one flag table
 * each (pipeline/args.c), and every row not marked CVX_PER_RANK is compared between the ranks
 * before any work (cvx_flags_each_agreed, pipeline/parallel.c: cvx_par_check_flags). Walks every
 * row of both tables: changing the row's value changes exactly its own entry of the agreement
 * ("--name"), unless the row is one of the listed per-rank ones, which never appear in it. A
 * flag added later is in the agreement by default (this test then checks it too); one added as
 * per rank fails here until it is listed below, on purpose. The ranks hung when --checkpoint_every
 * or --stop_after_steps differed (tests/e2e_mpi.c runs that case under mpirun). */
#include "testutil.h"
#include "pipeline/args.h"

#define MAX_ROWS CVX_ARGS_MAX_FLAGS

typedef struct {
    int n;
    char name[MAX_ROWS][80], value[MAX_ROWS][160];
} agreed_list;

static void collect(void *user, const char *name, const char *value) {
    agreed_list *l = user;
    assert_true(l->n < MAX_ROWS);
    snprintf(l->name[l->n], sizeof l->name[0], "%s", name);
    snprintf(l->value[l->n], sizeof l->value[0], "%s", value);
    l->n++;
}

/* Another value in row f's destination (or its text as given), whatever its kind. */
static void change(const cvx_flag *f) {
    switch (f->kind) {
    case CVX_FLAG_STR: *(const char **)f->dest = "__changed__"; break;
    case CVX_FLAG_BOOL: *(int *)f->dest = *(int *)f->dest == (int)f->lo ? (int)f->lo + 1 : (int)f->lo; break;
    case CVX_FLAG_INT: *(int *)f->dest = *(int *)f->dest == (int)f->lo ? (int)f->hi : (int)f->lo; break;
    case CVX_FLAG_U64: *(uint64_t *)f->dest += 1; break;
    case CVX_FLAG_NUM: *(double *)f->dest = *(double *)f->dest == f->nlo ? f->nhi : f->nlo; break;
    case CVX_FLAG_CHOICE: {
        const cvx_flag_choice *c = f->choices;
        while (c->name && c->value == *(int *)f->dest) c++;
        assert_non_null(c->name);   /* a choice table with one value could not be changed */
        *(int *)f->dest = c->value;
        break;
    }
    case CVX_FLAG_PARSE: break;   /* the parser's destination: the agreement compares the text given */
    case CVX_FLAG_HELP: break;
    }
    if (f->given) *f->given = "__given__";
}

typedef void (*table_fn)(void *args, const cvx_flag **flags);
static void stage2_table(void *args, const cvx_flag **flags) {
    cvx_stage2_args_init(args, "stage_outputs");
    *flags = ((cvx_stage2_args *)args)->flags;
}
static void stage3_table(void *args, const cvx_flag **flags) {
    cvx_stage3_args_init(args, "stage_outputs");
    *flags = ((cvx_stage3_args *)args)->flags;
}

static int listed(const char *name, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(name, *names)) return 1;
    return 0;
}

/* Every row of one program's table against the agreement; per_rank: the rows that may differ. */
static void check_table(const char *prog, table_fn table, size_t args_size, const char *const *per_rank,
                        int min_agreed) {
    void *args = calloc(1, args_size);
    const cvx_flag *flags;
    agreed_list base = {0}, got;
    table(args, &flags);
    cvx_flags_each_agreed(flags, collect, &base);
    int rows = 0, agreed = 0;
    for (int i = 0; flags[i].name; i++, rows++) {
        table(args, &flags);   /* fresh defaults for each row */
        const cvx_flag *f = &flags[i];
        const int local = f->per_rank || f->kind == CVX_FLAG_HELP;
        if (local != listed(f->name, per_rank))
            fail_msg("%s --%s is %s but %s the list of flags that may differ between ranks", prog, f->name,
                     local ? "per rank" : "agreed on", local ? "not in" : "in");
        change(f);
        memset(&got, 0, sizeof got);
        cvx_flags_each_agreed(flags, collect, &got);
        assert_int_equal(got.n, base.n);
        int differ = 0, own = 0;
        for (int k = 0; k < got.n; k++) {
            assert_string_equal(got.name[k], base.name[k]);
            if (strcmp(got.value[k], base.value[k]) != 0) {
                differ++;
                own += !strcmp(got.name[k] + 2, f->name);
            }
        }
        if (local && differ) fail_msg("%s --%s is per rank but changes the agreement", prog, f->name);
        if (!local && (differ != 1 || own != 1))
            fail_msg("%s --%s: changing it changed %d agreed entries (%d its own), expected its own alone", prog,
                     f->name, differ, own);
        agreed += !local;
    }
    print_message("  %s: %d flags, %d agreed between ranks, %d per rank\n", prog, rows, agreed, rows - agreed);
    assert_int_equal(agreed, base.n);
    assert_true(agreed >= min_agreed);
    free(args);
}

static void test_stage2_table(void **state) {
    (void)state;
    static const char *const per_rank[] = {"input_dir", "output_dir", "model_id", "model_dir", "threads", "quiet",
                                           "verbose", "help", "transformer_out", NULL};
    check_table("stage2", stage2_table, sizeof(cvx_stage2_args), per_rank, 25);
}

static void test_stage3_table(void **state) {
    (void)state;
    static const char *const per_rank[] = {"input_dir", "latents", "output_video", "model_id", "model_dir",
                                           "png_dir", "contact_sheet", "output_frames", "overwrite", "threads", "quiet",
                                           "verbose", "help", NULL};
    check_table("stage3", stage3_table, sizeof(cvx_stage3_args), per_rank, 8);
}

/* The values as parsed from a command line, and what a flag not given says. */
static void test_rendering(void **state) {
    (void)state;
    cvx_stage2_args a;
    cvx_stage2_args_init(&a, "stage_outputs");
    char *argv[] = {"stage2", "--checkpoint_every", "3", "--stop_after_steps=2", "--resume", "--seed", "7",
                    "--cache", "teacache", "--threads", "5", NULL};
    assert_int_equal(cvx_flags_parse(a.flags, 11, argv), 0);
    agreed_list l = {0};
    cvx_flags_each_agreed(a.flags, collect, &l);
    const char *want[][2] = {{"--checkpoint_every", "3"}, {"--stop_after_steps", "2"}, {"--resume", "given"},
                             {"--seed", "7"}, {"--cache", "teacache"}, {"--cache_threshold", "(unset)"},
                             {"--scheduler", "(unset)"}, {"--guidance_scale", "(not given)"}};
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        int found = 0;
        for (int k = 0; k < l.n; k++)
            if (!strcmp(l.name[k], want[w][0])) {
                found = 1;
                assert_string_equal(l.value[k], want[w][1]);
            }
        if (!found) fail_msg("%s is not in the agreement", want[w][0]);
    }
    for (int k = 0; k < l.n; k++) assert_string_not_equal(l.name[k], "--threads");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stage2_table),
        cmocka_unit_test(test_stage3_table),
        cmocka_unit_test(test_rendering),
    };
    return cmocka_run_group_tests_name("common_flags", tests, NULL, NULL);
}
