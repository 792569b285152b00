/* Whole-file reads, atomic writes (temp file in the same directory + fsync + rename), paths. */
#include "fileio.h"
#include "error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *cvx_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { cvx_error("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); cvx_error("%s: cannot seek", path); return NULL; }
    long n = ftell(f);
    if (n < 0) { fclose(f); cvx_error("%s: cannot tell size", path); return NULL; }
    rewind(f);
    char *buf = cvx_malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f); free(buf);
        cvx_error("%s: read error", path);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

void cvx_temp_path(const char *path, char *out, size_t n) {
    snprintf(out, n, "%s.tmp.%ld", path, (long)getpid());
}

int cvx_commit_file(const char *tmp_path, const char *final_path) {
    if (rename(tmp_path, final_path) != 0) {
        int e = errno;
        unlink(tmp_path);
        return cvx_error("%s: cannot rename into place: %s", final_path, strerror(e));
    }
    return 0;
}

int cvx_write_file_atomic(const char *path, const void *buf, size_t len) {
    char tmp[4200];
    cvx_temp_path(path, tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return cvx_error("%s: cannot write: %s", path, strerror(errno));
    const char *p = buf;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd); unlink(tmp);
            return cvx_error("%s: write failed: %s", path, strerror(e));
        }
        p += w; left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        unlink(tmp);
        return cvx_error("%s: write failed: %s", path, strerror(errno));
    }
    return cvx_commit_file(tmp, path);
}

int cvx_path_join(char *out, size_t n, const char *a, const char *b) {
    int k = (a && a[0]) ? snprintf(out, n, "%s/%s", a, b) : snprintf(out, n, "%s", b);
    if (k < 0 || (size_t)k >= n) return cvx_error("path too long: %s/%s", a, b);
    return 0;
}

int cvx_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int cvx_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int cvx_mkdirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return cvx_error("path too long: %s", path);
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return cvx_error("%s: cannot create directory: %s", buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    if (!cvx_is_dir(path)) return cvx_error("%s: not a directory", path);
    return 0;
}
