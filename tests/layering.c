/* The layering rule (docs/architecture.md): model code includes common/ and its own stage only.
 * Every source and header of stage1/ stage2/ stage3/ (but the programs: main.c and their
 * usage.h) and common/ is read; an #include "..." of pipeline/ (the API and its files) or of
 * another stage is a violation, named with its file and line. */
#include "testutil.h"

#include <dirent.h>

static int is_source(const char *name) {
    size_t n = strlen(name);
    return (n > 2 && (!strcmp(name + n - 2, ".c") || !strcmp(name + n - 2, ".h"))) ||
           (n > 3 && (!strcmp(name + n - 3, ".cc") || !strcmp(name + n - 3, ".hh")));
}

/* the violations of one file: its quoted includes against its folder's allowed prefixes */
static int check_file(const char *dir, const char *name) {
    char path[512], line[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot read %s", path);
    int bad = 0, ln = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (strncmp(p, "#include", 8) != 0) continue;
        const char *q = strchr(p + 8, '"');
        if (!q) continue;   /* <system> */
        q++;
        const char *inc = q;
        while (!strncmp(inc, "../", 3)) inc += 3;
        int violation = !strncmp(inc, "pipeline/", 9);
        for (int s = 1; s <= 3; s++) {
            char other[16];
            snprintf(other, sizeof other, "stage%d/", s);
            if (!strncmp(inc, other, 7) && strncmp(dir, other, 6) != 0) violation = 1;
        }
        if (violation) {
            const char *e = strchr(q, '"');
            print_message("  %s:%d includes \"%.*s\" (model code: common/ and its own stage only)\n", path, ln,
                          e ? (int)(e - q) : (int)strlen(q), q);
            bad++;
        }
    }
    fclose(f);
    return bad;
}

static void test_layering(void **state) {
    (void)state;
    const char *dirs[] = {"common", "stage1", "stage2", "stage3"};
    int files = 0, bad = 0;
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        DIR *dp = opendir(dirs[d]);
        if (!dp) fail_msg("cannot list %s", dirs[d]);
        for (struct dirent *e; (e = readdir(dp));) {
            if (!is_source(e->d_name)) continue;
            if (strcmp(dirs[d], "common") != 0 && (!strcmp(e->d_name, "main.c") || !strcmp(e->d_name, "usage.h")))
                continue;   /* the programs: above the API */
            files++;
            bad += check_file(dirs[d], e->d_name);
        }
        closedir(dp);
    }
    print_message("  %d files read, %d includes across layers\n", files, bad);
    assert_true(files > 100);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_layering)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
