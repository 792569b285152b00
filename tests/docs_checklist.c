/* docs/architecture.md "Add a model family" names every place a family touches: each path it
 * names in backquotes exists (a `<family>` placeholder: at least one file matches). */
#include "testutil.h"

#include <ctype.h>
#include <glob.h>
#include <sys/stat.h>

/* A backquoted span that names a file or folder: path characters only, and a folder part, a file
 * extension the project uses, or the Makefile. */
static int names_path(const char *s) {
    if (!s[0] || s[0] == '.' || s[0] == '/') return 0;
    for (const char *c = s; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr("_.-/<>*", *c)) return 0;
    size_t n = strlen(s);
    const char *ext[] = {".c", ".h", ".md", ".sh", ".json"};
    if (strchr(s, '/') || !strcmp(s, "Makefile")) return 1;
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (n > strlen(ext[i]) && !strcmp(s + n - strlen(ext[i]), ext[i])) return 1;
    return 0;
}

/* `<...>` placeholders become `*`; the pattern must match something */
static int path_exists(const char *s) {
    char pat[512];
    size_t k = 0;
    int wild = 0;
    for (const char *c = s; *c && k < sizeof pat - 2; c++) {
        if (*c == '<') {
            const char *e = strchr(c, '>');
            if (!e) return 0;
            pat[k++] = '*', c = e, wild = 1;
        } else {
            wild |= *c == '*';
            pat[k++] = *c;
        }
    }
    pat[k] = 0;
    if (!wild) {
        struct stat st;
        return stat(pat, &st) == 0;
    }
    glob_t g;
    int found = glob(pat, GLOB_MARK, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return found;
}

static void test_family_checklist(void **state) {
    (void)state;
    size_t len;
    char *doc = cvx_read_file("docs/architecture.md", &len);
    ASSERT_NONNULL(doc);
    char *start = strstr(doc, "\n### Add a model family\n");
    assert_non_null(start);
    start += 1;
    char *end = strstr(start + 4, "\n### ");
    if (end) *end = 0;
    int checked = 0, missing = 0;
    for (char *p = strchr(start, '`'); p; p = strchr(p + 1, '`')) {
        char *q = strchr(p + 1, '`');
        if (!q) break;
        *q = 0;
        if (names_path(p + 1)) {
            checked++;
            if (!path_exists(p + 1)) {
                print_message("  docs/architecture.md \"Add a model family\" names %s: no such file\n", p + 1);
                missing++;
            }
        }
        p = q;
    }
    print_message("  %d paths named, %d missing\n", checked, missing);
    assert_true(checked >= 20);   /* the list was found and read */
    assert_int_equal(missing, 0);
    free(doc);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_family_checklist)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
