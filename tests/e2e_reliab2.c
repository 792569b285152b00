/* Stage-3 outputs across runs (issue 37), beside the one-command cases of tests/e2e_bad_inputs.c:
 *   - a stage 3 that fails part way (a fake full disk: RLIMIT_FSIZE, so the contact sheet, written
 *     after the video and the frames, cannot be written) leaves the previous video and contact
 *     sheet as they were (same bytes, same inode: not replaced), no PNG directory, no temp;
 *   - --png_dir with --overwrite over an earlier, longer run's frames: this run's frames replace
 *     them and the stale ones past them are removed, other files stay; a new directory needs no flag.
 * Each test starts from a copy of the outputs of one good run of the three programs. */
#include "testutil.h"
#include "fileio.h"

#include <sys/stat.h>

static tu_good_run g_good;

static int group_setup(void **state) {
    (void)state;
    return tu_good_run_make(&g_good);
}
static int group_teardown(void **state) {
    (void)state;
    tu_rmrf(g_good.dir);
    return 0;
}

static void copy_run(char *D, size_t n) {
    char cmd[512];
    tu_mkdtemp(D, n);
    snprintf(cmd, sizeof cmd, "cp -p '%s'/* '%s'/", g_good.dir, D);
    tu_run_ok(cmd);
}

static int temps_in(const char *dir) {
    int n = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) n += cvx_temp_name_parse(e->d_name, NULL);
    closedir(d);
    return n;
}

typedef struct {
    char *data;
    size_t len;
    ino_t ino;
} file_state;

static void state_of(const char *path, file_state *s) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    s->ino = st.st_ino;
    s->data = cvx_read_file(path, &s->len);
    ASSERT_NONNULL(s->data);
}
static void assert_unchanged(const char *path, const file_state *s) {
    file_state now;
    state_of(path, &now);
    if (now.ino != s->ino || now.len != s->len || memcmp(now.data, s->data, s->len) != 0)
        fail_msg("%s was replaced by the failed run", path);
    free(now.data);
}

static void test_failed_stage3_keeps_previous(void **state) {
    (void)state;
    char D[64], cmd[8192], err[4096], video[128], sheet[128], png[128];
    copy_run(D, sizeof D);
    snprintf(video, sizeof video, "%s/output_video.mp4", D);
    snprintf(sheet, sizeof sheet, "%s/sheet.png", D);
    snprintf(png, sizeof png, "%s/png", D);
    /* the previous run: its video and contact sheet */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --contact_sheet %s", g_good.s3, D, g_good.model,
             sheet);
    tu_run_ok(cmd);
    file_state v0, s0;
    state_of(video, &v0);
    state_of(sheet, &s0);
    assert_true(s0.len > 40000);   /* the sheet (~70 KB) is larger than the limit below; the video, frames (~10 KB) not */
    /* another run (another --crf: another video) under a 32 KiB file-size limit: the video and the
     * frames fit, the sheet, written last, fails with EFBIG (SIGXFSZ ignored, so write(2) fails) */
    snprintf(cmd, sizeof cmd, "trap '' XFSZ; ulimit -f 64; %s --quiet --input_dir %s --model_dir %s --crf 40 "
             "--png_dir %s --contact_sheet %s", g_good.s3, D, g_good.model, png, sheet);
    int rc = tu_run(cmd, err, sizeof err);
    print_message("  exit %d: %s", rc, err);
    assert_int_equal(rc, 1);
    assert_int_equal(tu_count_substr(err, "error:"), 1);
    assert_non_null(strstr(err, "sheet.png"));
    assert_unchanged(video, &v0);
    assert_unchanged(sheet, &s0);
    struct stat st;
    if (stat(png, &st) == 0) fail_msg("%s left behind by the failed run", png);
    assert_int_equal(temps_in(D), 0);
    /* the same run without the limit succeeds and replaces both */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --crf 40 --png_dir %s --contact_sheet %s",
             g_good.s3, D, g_good.model, png, sheet);
    tu_run_ok(cmd);
    file_state v1;
    state_of(video, &v1);
    assert_true(v1.ino != v0.ino);   /* renamed into place */
    assert_int_equal(tu_count_entries(png), 9);
    free(v1.data);
    free(v0.data);
    free(s0.data);
    tu_rmrf(D);
}

static void test_png_dir_overwrite(void **state) {
    (void)state;
    char D[64], cmd[8192], err[4096], png[128], p[256];
    copy_run(D, sizeof D);
    snprintf(png, sizeof png, "%s/png", D);
    assert_int_equal(mkdir(png, 0755), 0);
    snprintf(p, sizeof p, "%s/frame_0030.png", png);   /* an earlier 33-frame run's */
    tu_write(p, "old", 3);
    snprintf(p, sizeof p, "%s/frame_0003.png", png);
    tu_write(p, "old", 3);
    snprintf(p, sizeof p, "%s/notes.txt", png);
    tu_write(p, "mine", 4);
    /* without --overwrite: refused (tests/e2e_bad_inputs.c), nothing written */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --output_video %s/b.mp4 --png_dir %s", g_good.s3,
             D, g_good.model, D, png);
    assert_int_equal(tu_run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "--overwrite"));
    assert_int_equal(tu_count_entries(png), 3);
    /* with it: frames 0-8 new, frame_0030 gone, notes.txt kept */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --output_video %s/b.mp4 --png_dir %s --overwrite",
             g_good.s3, D, g_good.model, D, png);
    tu_run_ok(cmd);
    assert_int_equal(tu_count_entries(png), 10);
    snprintf(p, sizeof p, "%s/frame_0030.png", png);
    struct stat st;
    assert_int_not_equal(stat(p, &st), 0);
    snprintf(p, sizeof p, "%s/frame_0003.png", png);
    assert_int_equal(stat(p, &st), 0);
    assert_true(st.st_size > 100);   /* this run's frame */
    snprintf(p, sizeof p, "%s/notes.txt", png);
    assert_int_equal(stat(p, &st), 0);
    /* a new directory: no flag needed */
    snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s --output_video %s/c.mp4 --png_dir %s/fresh",
             g_good.s3, D, g_good.model, D, D);
    tu_run_ok(cmd);
    snprintf(p, sizeof p, "%s/fresh", D);
    assert_int_equal(tu_count_entries(p), 9);
    tu_rmrf(D);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_stage3_keeps_previous),
        cmocka_unit_test(test_png_dir_overwrite),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
