/* Small file helpers: whole-file reads, atomic writes, temp files, output sets, paths, hashes.
 *
 * Every output goes to a temp file in its final directory, is fsynced, renamed over the final
 * name, then the directory is fsynced. Temp names are "<final>.tmp.<pid>.<12 hex random>",
 * created with O_EXCL|O_NOFOLLOW|O_CLOEXEC (a planted file or symlink is never followed or
 * reused). Live temps are registered so the handler of cvx_install_signal_cleanup() removes them
 * on SIGINT/SIGTERM/SIGHUP; temps of dead runs are removed by cvx_clean_stale_temps(). */
#ifndef CVX_FILEIO_H
#define CVX_FILEIO_H

#include <stddef.h>
#include <stdint.h>

/* Open an input for reading (O_RDONLY|O_CLOEXEC, blocking reads): opened O_NONBLOCK first, so a
 * FIFO or device never hangs the open, and refused unless a regular file: "PATH: a FIFO, not a
 * file". The descriptor, or -1 + cvx_error. */
int cvx_open_input(const char *path);
/* An output path must be a new name or a regular file: a symbolic link, FIFO, device, socket or
 * directory there is refused ("PATH: a symbolic link, not a regular file: ..."), never replaced.
 * cvx_temp_create (so every output) and the renames into place call it. 0 or -1 + cvx_error. */
int cvx_check_output_path(const char *path);

/* Read a whole file (NUL-terminated for convenience). NULL + cvx_error on failure. */
char *cvx_read_file(const char *path, size_t *len);
/* Write buf to path atomically: temp file in the same directory, fsync, rename, fsync dir. */
int cvx_write_file_atomic(const char *path, const void *buf, size_t len);

/* Create a new temp file next to `path` (exclusive, no symlinks, mode 0644, registered for
 * signal cleanup) and return its open descriptor (O_WRONLY|O_CLOEXEC) with its name in `out`;
 * -1 + cvx_error naming `path`. */
int cvx_temp_create(const char *path, char *out, size_t n);
/* The same for callers that open the temp by name themselves (libavformat): the file is created
 * empty and closed; its name goes to `out` (empty string on failure, with cvx_error set). */
void cvx_temp_path(const char *path, char *out, size_t n);
/* fsync the temp, rename it over final_path, fsync the directory, unregister it. On failure the
 * temp is removed and the error names final_path. */
int cvx_commit_file(const char *tmp_path, const char *final_path);
/* Remove a temp that will not be committed (and unregister it). */
void cvx_temp_discard(const char *tmp_path);

/* Install the SIGINT/SIGTERM/SIGHUP handler that unlinks every registered temp, then dies of the
 * same signal (exit status 128+sig as usual). Call once at the start of main. */
void cvx_install_signal_cleanup(void);
/* A line the handler writes to stderr first (NULL or "": none; at most 511 bytes kept). Under
 * mpirun a SIGTERM means mpirun stops the job (another rank ended first, or mpirun was
 * interrupted): the program says so itself instead of leaving only Open MPI's banner (issue 21). */
void cvx_set_signal_note(const char *line);
/* Remove "<name>.tmp.<pid>.<12 hex>" regular files in `dir` owned by this user whose pid is not
 * running. Returns how many were removed (errors are ignored: cleaning is best effort). Call it
 * while holding the directory's lock (cvx_dir_lock). */
int cvx_clean_stale_temps(const char *dir);
/* 1 if `name` (a file name, not a path) has the temp pattern; *pid gets the pid. */
int cvx_temp_name_parse(const char *name, long *pid);

/* ---- several outputs committed as a unit: every temp written first, then all renamed ----
 * A failure before cvx_outset_commit leaves every final file untouched; commit renames in the
 * order added (put the file that points at the others, e.g. generation_config.json, last). */
typedef struct {
    int n, cap;
    char **tmp;     /* [n] */
    char **final;   /* [n] */
} cvx_outset;
void cvx_outset_init(cvx_outset *s);
/* Write buf to a new temp for final_path and add it to the set. */
int cvx_outset_write(cvx_outset *s, const char *final_path, const void *buf, size_t len);
/* Add a temp the caller wrote (name from cvx_temp_create/cvx_temp_path); the set takes it over. */
int cvx_outset_add(cvx_outset *s, const char *tmp_path, const char *final_path);
/* Index of the entry for final_path, or -1 (a file updated again before the commit). */
int cvx_outset_find(const cvx_outset *s, const char *final_path);
/* Remove entry i (its temp deleted); the others keep their order. */
void cvx_outset_drop(cvx_outset *s, int i);
/* Rename every temp into place (then fsync the directories). On failure the not yet renamed
 * temps are removed. Frees the set's names either way. */
int cvx_outset_commit(cvx_outset *s);
/* Remove every temp of the set and free it (safe to call after commit or twice). */
void cvx_outset_abort(cvx_outset *s);

/* ---- content hash: XXH64 (seed 0) of a file's bytes, as 16 lowercase hex digits ----
 * Not cryptographic: it detects a data file and a config that do not belong together (a kill
 * between renames, a file copied from another run), not a forger. */
uint64_t cvx_xxh64(const void *data, size_t len, uint64_t seed);
int cvx_file_xxh64(const char *path, char hex[17]);
/* The check the next stage runs: the hash of data_path must equal `expected_hex` (the value a
 * config recorded). Error: "<data> does not belong to <config>: xxh64 X != Y recorded ...". */
int cvx_check_file_hash(const char *data_path, const char *expected_hex, const char *config_path);

int cvx_path_join(char *out, size_t n, const char *a, const char *b); /* -1 if too long */
int cvx_is_dir(const char *path);
int cvx_is_file(const char *path);
/* mkdir -p; error names the directory */
int cvx_mkdirs(const char *path);
/* fsync the directory holding `path` (after a rename). */
int cvx_fsync_parent(const char *path);

#endif
