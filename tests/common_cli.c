/* The table-driven flag parser (common/cli.h): values land in their fields, every bad value is
 * the one error line the programs have always printed (each case runs in a child: the parser
 * exits 1 after printing the line). */
#include "testutil.h"
#include "cli.h"

#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    const char *name, *given;
    int threads, quiet, tiling, level;
    uint64_t seed;
    double scale;
} opts;

static int parse_level(const char *v, void *dest) {
    if (strcmp(v, "low") && strcmp(v, "high")) return cvx_error("--level must be low or high, got '%s'", v);
    *(int *)dest = !strcmp(v, "high");
    return 0;
}

/* Parses argv with a table of every kind; returns cvx_flags_parse's result, *o the values. */
static int parse(int argc, char **argv, opts *o) {
    static const cvx_flag_choice tilings[] = {{"auto", 0}, {"on", 1}, {"off", 2}, {0}};
    memset(o, 0, sizeof *o);
    o->threads = -7;
    const cvx_flag flags[] = {
        CVX_FLAG_STR_("name", &o->name), CVX_FLAG_INT_("threads", &o->threads, 0, 64),
        CVX_FLAG_BOOL_("quiet", &o->quiet, 3), CVX_FLAG_U64_("seed", &o->seed),
        CVX_FLAG_NUM_("scale", &o->scale, 0, 10), CVX_FLAG_CHOICE_("tiling", &o->tiling, tilings, "auto, on or off"),
        CVX_FLAG_PARSE_("level", parse_level, &o->level, &o->given), CVX_FLAG_HELP_(),
        {.name = "count", .kind = CVX_FLAG_INT, .dest = &o->threads, .lo = 0, .hi = 100, .expected = "a count"},
        {0}};
    optind = 1;
    return cvx_flags_parse(flags, argc, argv);
}

/* parse as a program would run it (its exit status and stderr: tu_fork_stderr) */
static void parse_as_prog(int argc, char **argv) {
    cvx_set_program_name("prog");
    opts o;
    parse(argc, argv, &o);
}
static int child(int argc, char **argv, char *err, size_t errn) {
    return tu_fork_stderr(parse_as_prog, argc, argv, err, errn);
}

static void test_values(void **state) {
    (void)state;
    opts o;
    char *a[] = {"prog", "--name", "x y", "--threads=4", "--quiet", "--seed", "18446744073709551615",
                 "--scale", "2.5", "--tiling", "off", "--level", "high", NULL};
    assert_int_equal(parse(13, a, &o), 0);
    assert_string_equal(o.name, "x y");
    assert_int_equal(o.threads, 4);
    assert_int_equal(o.quiet, 3);
    assert_true(o.seed == UINT64_MAX);
    assert_true(o.scale == 2.5);
    assert_int_equal(o.tiling, 2);
    assert_int_equal(o.level, 1);
    assert_string_equal(o.given, "high");
    char *b[] = {"prog", "--thr", "5", NULL};   /* unique prefixes, as getopt_long */
    assert_int_equal(parse(3, b, &o), 0);
    assert_int_equal(o.threads, 5);
    assert_null(o.name);
    char *h[] = {"prog", "--threads", "9", "--help", "--bogus", NULL};   /* --help stops parsing */
    assert_int_equal(parse(5, h, &o), 1);
    assert_int_equal(o.threads, 9);
    char *h2[] = {"prog", "-h", NULL};
    assert_int_equal(parse(2, h2, &o), 1);
}

static void test_errors(void **state) {
    (void)state;
    struct {
        char *argv[4];
        const char *want;
    } cases[] = {
        {{"prog", "--threads", "65"}, "prog: error: --threads must be an integer in [0, 64], got '65'"},
        {{"prog", "--threads", "4x"}, "--threads must be an integer in [0, 64], got '4x'"},
        {{"prog", "--count", "-1"}, "--count must be a count, got '-1'"},
        {{"prog", "--seed", "-1"}, "--seed must be a non-negative integer below 2^64, got '-1'"},
        {{"prog", "--seed", "18446744073709551616"}, "--seed must be a non-negative integer below 2^64"},
        {{"prog", "--scale", "nan"}, "--scale must be a number in [0, 10], got 'nan'"},
        {{"prog", "--tiling", "maybe"}, "--tiling must be auto, on or off, got 'maybe'"},
        {{"prog", "--level", "mid"}, "--level must be low or high, got 'mid'"},
        {{"prog", "--name", "--quiet"}, "--name needs a value (got the option '--quiet'"},
        {{"prog", "--quiet=1"}, "--quiet takes no value"},
        {{"prog", "--bogus"}, "unknown or incomplete option '--bogus' (see --help)"},
        {{"prog", "--name"}, "--name needs a value (see --help)"},
        {{"prog", "stray"}, "unexpected argument 'stray' (see --help)"},
    };
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int argc = 0;
        while (argc < 4 && cases[i].argv[argc]) argc++;
        assert_int_equal(child(argc, cases[i].argv, err, sizeof err), 1);
        if (!strstr(err, cases[i].want)) fail_msg("case %zu: got '%s', want '%s'", i, err, cases[i].want);
    }
    char *ok[] = {"prog", "--name=--quiet", NULL};   /* the explicit form is text */
    assert_int_equal(child(2, ok, err, sizeof err), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_values), cmocka_unit_test(test_errors)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
