/* Small file helpers: whole-file reads, atomic writes, paths. */
#ifndef CVX_FILEIO_H
#define CVX_FILEIO_H

#include <stddef.h>

/* Read a whole file (NUL-terminated for convenience). NULL + cvx_error on failure. */
char *cvx_read_file(const char *path, size_t *len);
/* Write buf to path atomically: temp file in the same directory, fsync, rename. */
int cvx_write_file_atomic(const char *path, const void *buf, size_t len);
/* Temp name next to `path` for callers that stream their own output (then rename with
 * cvx_commit_file, or unlink on failure). */
void cvx_temp_path(const char *path, char *out, size_t n);
int cvx_commit_file(const char *tmp_path, const char *final_path);

int cvx_path_join(char *out, size_t n, const char *a, const char *b); /* -1 if too long */
int cvx_is_dir(const char *path);
int cvx_is_file(const char *path);
/* mkdir -p; error names the directory */
int cvx_mkdirs(const char *path);

#endif
