/* Whole-file reads, atomic writes, temp files and their cleanup, output sets, paths, XXH64. */
#include "fileio.h"
#include "error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* What a file-system node that is not a regular file is, for messages. */
static const char *node_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISLNK(m) ? "a symbolic link"
         : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket"
         : "a special file";
}

int cvx_open_input(const char *path) {
    /* O_NONBLOCK: opening a FIFO with no writer (or some devices) would wait forever */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return cvx_error("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        close(fd);
        return cvx_error("%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cvx_error("%s: %s, not a file", path, node_kind(st.st_mode));
    }
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int cvx_check_output_path(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode)) return 0;   /* a new name, or a file to replace */
    return cvx_error("%s: %s, not a regular file: an output is never written over one (give a new name or a "
                     "regular file)", path, node_kind(st.st_mode));
}

char *cvx_read_file(const char *path, size_t *len) {
    /* a directory opens (and "is" LONG_MAX bytes long), a FIFO blocks the open: say what it is */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        cvx_error("%s: %s, not a file", path, node_kind(st.st_mode));
        return NULL;
    }
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

/* ---- the live-temp registry ----
 * THE ONE EXCEPTION to "no mutable globals in library code": a signal handler can only reach
 * process-wide state. Kept tiny and async-signal-safe: fixed slots (no malloc), a slot's path is
 * written before its `used` flag is set and the flag is cleared before the slot is reused, the
 * handler only reads flags and calls unlink(2), signal(2) and raise(3). Only the main thread
 * registers temps (outputs are written outside parallel regions). A full registry only loses
 * signal cleanup for the extra temps; cvx_clean_stale_temps still removes them later. */
#define TEMP_SLOTS 128   /* an output set may hold a PNG per frame */
#define TEMP_PATH_MAX 4200
static volatile sig_atomic_t g_temp_used[TEMP_SLOTS];
static char g_temp_path[TEMP_SLOTS][TEMP_PATH_MAX];

static void temp_register(const char *path) {
    if (strlen(path) >= TEMP_PATH_MAX) return;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < TEMP_SLOTS; i++) {
            if (g_temp_used[i]) continue;
            strcpy(g_temp_path[i], path);
            /* the handler may run on any thread: the path must be visible before the flag */
            atomic_thread_fence(memory_order_seq_cst);
            g_temp_used[i] = 1;
            return;
        }
        /* full: free slots whose temp is gone (a caller removed it without cvx_temp_discard) */
        struct stat st;
        for (int i = 0; i < TEMP_SLOTS; i++)
            if (g_temp_used[i] && lstat(g_temp_path[i], &st) != 0) g_temp_used[i] = 0;
    }
}

static void temp_unregister(const char *path) {
    for (int i = 0; i < TEMP_SLOTS; i++)
        if (g_temp_used[i] && strcmp(g_temp_path[i], path) == 0) g_temp_used[i] = 0;
}

/* The handler's note (cvx_set_signal_note): part of the same exception, written before a
 * program starts its work and only read (by write(2)) in the handler. */
static char g_signal_note[512];
static volatile sig_atomic_t g_signal_note_len;

void cvx_set_signal_note(const char *line) {
    g_signal_note_len = 0;
    atomic_thread_fence(memory_order_seq_cst);
    size_t n = line ? strlen(line) : 0;
    if (n >= sizeof g_signal_note) n = sizeof g_signal_note - 1;
    if (n) memcpy(g_signal_note, line, n);
    atomic_thread_fence(memory_order_seq_cst);
    g_signal_note_len = (sig_atomic_t)n;
}

static void on_fatal_signal(int sig) {
    if (g_signal_note_len > 0 && write(2, g_signal_note, (size_t)g_signal_note_len) < 0) {
        /* nothing to do: the cleanup below matters more */
    }
    for (int i = 0; i < TEMP_SLOTS; i++)
        if (g_temp_used[i]) unlink(g_temp_path[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

void cvx_install_signal_cleanup(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGHUP);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* ---- temp files ---- */

int cvx_temp_create(const char *path, char *out, size_t n) {
    if (cvx_check_output_path(path)) {   /* every output passes here first (issue 37) */
        if (n) out[0] = 0;
        return -1;
    }
    for (int attempt = 0; attempt < 16; attempt++) {
        unsigned char r[6];
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {   /* no entropy: time and address */
            uint64_t x = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)out << 16) ^ (uint64_t)clock() ^
                         ((uint64_t)attempt << 40);
            for (int i = 0; i < 6; i++) r[i] = (unsigned char)(x >> (8 * i));
        }
        int k = snprintf(out, n, "%s.tmp.%ld.%02x%02x%02x%02x%02x%02x", path, (long)getpid(), r[0], r[1], r[2], r[3],
                         r[4], r[5]);
        if (k < 0 || (size_t)k >= n) {
            if (n) out[0] = 0;
            return cvx_error("%s: path too long for a temp file", path);
        }
        /* registered before it exists: a signal between open(2) and the registration would leave
         * it behind (the name holds our pid, so a failed open never makes the handler remove
         * another process's file) */
        temp_register(out);
        int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) return fd;
        int e = errno;
        temp_unregister(out);
        if (e != EEXIST) {
            out[0] = 0;
            return cvx_error("%s: cannot create a temp file in its directory: %s", path, strerror(e));
        }
    }
    out[0] = 0;
    return cvx_error("%s: cannot create a unique temp file", path);
}

void cvx_temp_path(const char *path, char *out, size_t n) {
    int fd = cvx_temp_create(path, out, n);
    if (fd >= 0) close(fd);
}

void cvx_temp_discard(const char *tmp_path) {
    if (!tmp_path || !tmp_path[0]) return;
    unlink(tmp_path);
    temp_unregister(tmp_path);
}

int cvx_fsync_parent(const char *path) {
    char dir[TEMP_PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else return cvx_error("%s: path too long", path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return cvx_error("%s: cannot open directory to sync it: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    /* some filesystems refuse fsync on a directory (EINVAL): the rename is then as durable as it gets */
    if (rc != 0 && e != EINVAL) return cvx_error("%s: cannot sync directory: %s", dir, strerror(e));
    return 0;
}

/* fsync a temp by name (it may have been written by another library through its own handle). */
static int fsync_path(const char *tmp_path, const char *final_path) {
    int fd = open(tmp_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return cvx_error("%s: cannot reopen temp file %s: %s", final_path, tmp_path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0) return cvx_error("%s: cannot sync to disk: %s", final_path, strerror(e));
    return 0;
}

int cvx_commit_file(const char *tmp_path, const char *final_path) {
    if (!tmp_path[0]) return -1;   /* cvx_temp_path failed; its error stands */
    if (fsync_path(tmp_path, final_path) || cvx_check_output_path(final_path)) { cvx_temp_discard(tmp_path); return -1; }
    if (rename(tmp_path, final_path) != 0) {
        int e = errno;
        cvx_temp_discard(tmp_path);
        return cvx_error("%s: cannot rename into place: %s", final_path, strerror(e));
    }
    temp_unregister(tmp_path);
    return cvx_fsync_parent(final_path);
}

static int write_fd(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* buf -> new fsynced temp for path; its name in tmp. */
static int write_temp(const char *path, const void *buf, size_t len, char *tmp, size_t n) {
    int fd = cvx_temp_create(path, tmp, n);
    if (fd < 0) return -1;
    if (write_fd(fd, buf, len) != 0 || fsync(fd) != 0) {
        int e = errno;
        close(fd);
        cvx_temp_discard(tmp);
        return cvx_error("%s: write failed: %s", path, strerror(e));
    }
    if (close(fd) != 0) {
        int e = errno;
        cvx_temp_discard(tmp);
        return cvx_error("%s: write failed: %s", path, strerror(e));
    }
    return 0;
}

int cvx_write_file_atomic(const char *path, const void *buf, size_t len) {
    char tmp[TEMP_PATH_MAX];
    if (write_temp(path, buf, len, tmp, sizeof tmp)) return -1;
    if (cvx_check_output_path(path)) { cvx_temp_discard(tmp); return -1; }
    if (rename(tmp, path) != 0) {
        int e = errno;
        cvx_temp_discard(tmp);
        return cvx_error("%s: cannot rename into place: %s", path, strerror(e));
    }
    temp_unregister(tmp);
    return cvx_fsync_parent(path);
}

/* ---- stale temps ---- */

int cvx_temp_name_parse(const char *name, long *pid) {
    size_t len = strlen(name);
    if (len < 1 + 5 + 1 + 1 + 12) return 0;
    const char *hex = name + len - 12;
    for (int i = 0; i < 12; i++)
        if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f'))) return 0;
    if (hex[-1] != '.') return 0;
    const char *d = hex - 1;   /* the '.' before the random part; digits of the pid before it */
    const char *p = d;
    while (p > name && p[-1] >= '0' && p[-1] <= '9') p--;
    if (p == d || d - p > 10) return 0;
    if (p - name < 6 || strncmp(p - 5, ".tmp.", 5) != 0 || p - 5 == name) return 0;
    long v = 0;
    for (const char *q = p; q < d; q++) v = v * 10 + (*q - '0');
    if (v <= 0) return 0;
    if (pid) *pid = v;
    return 1;
}

int cvx_clean_stale_temps(const char *dir) {
    DIR *dp = opendir(dir);
    if (!dp) return 0;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL) {
        long pid;
        if (!cvx_temp_name_parse(de->d_name, &pid)) continue;
        if (pid == (long)getpid()) continue;
        /* kill(pid, 0): ESRCH = no such process. EPERM means it exists (another user's): keep. */
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        struct stat st;
        if (fstatat(dirfd(dp), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) continue;
        if (unlinkat(dirfd(dp), de->d_name, 0) == 0) {
            cvx_info("removed %s/%s (temp file of a run that died, pid %ld)", dir, de->d_name, pid);
            removed++;
        }
    }
    closedir(dp);
    return removed;
}

/* ---- output sets ---- */

void cvx_outset_init(cvx_outset *s) { memset(s, 0, sizeof *s); }

int cvx_outset_add(cvx_outset *s, const char *tmp_path, const char *final_path) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->tmp = cvx_realloc(s->tmp, (size_t)s->cap * sizeof *s->tmp);
        s->final = cvx_realloc(s->final, (size_t)s->cap * sizeof *s->final);
    }
    s->tmp[s->n] = strdup(tmp_path);
    s->final[s->n] = strdup(final_path);
    if (!s->tmp[s->n] || !s->final[s->n]) cvx_check_failed(__FILE__, __LINE__, "strdup");
    s->n++;
    return 0;
}

int cvx_outset_write(cvx_outset *s, const char *final_path, const void *buf, size_t len) {
    char tmp[TEMP_PATH_MAX];
    if (write_temp(final_path, buf, len, tmp, sizeof tmp)) return -1;
    return cvx_outset_add(s, tmp, final_path);
}

static void outset_free(cvx_outset *s) {
    for (int i = 0; i < s->n; i++) { free(s->tmp[i]); free(s->final[i]); }
    free(s->tmp), free(s->final);
    memset(s, 0, sizeof *s);
}

int cvx_outset_find(const cvx_outset *s, const char *final_path) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->final[i], final_path) == 0) return i;
    return -1;
}

void cvx_outset_drop(cvx_outset *s, int i) {
    if (i < 0 || i >= s->n) return;
    cvx_temp_discard(s->tmp[i]);
    free(s->tmp[i]), free(s->final[i]);
    for (int j = i; j + 1 < s->n; j++) s->tmp[j] = s->tmp[j + 1], s->final[j] = s->final[j + 1];
    s->n--;
}

void cvx_outset_abort(cvx_outset *s) {
    for (int i = 0; i < s->n; i++) cvx_temp_discard(s->tmp[i]);
    outset_free(s);
}

int cvx_outset_commit(cvx_outset *s) {
    /* the temps were fsynced when written (cvx_outset_write, cvx_stw_write_temp) or are synced
     * here (temps written by other libraries); nothing is renamed before all are on disk */
    for (int i = 0; i < s->n; i++)
        if (fsync_path(s->tmp[i], s->final[i]) || cvx_check_output_path(s->final[i])) { cvx_outset_abort(s); return -1; }
    for (int i = 0; i < s->n; i++) {
        if (rename(s->tmp[i], s->final[i]) != 0) {
            int e = errno;
            cvx_error("%s: cannot rename into place: %s", s->final[i], strerror(e));
            for (int j = i; j < s->n; j++) cvx_temp_discard(s->tmp[j]);
            outset_free(s);
            return -1;
        }
        temp_unregister(s->tmp[i]);
    }
    int rc = 0;
    for (int i = 0; i < s->n && rc == 0; i++) rc = cvx_fsync_parent(s->final[i]);
    outset_free(s);
    return rc;
}

/* ---- XXH64 (Yann Collet's xxHash, 64-bit, as specified in xxhash.h / doc/xxhash_spec.md) ---- */

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t rd64(const unsigned char *p) {   /* little-endian */
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t xxh_round(uint64_t acc, uint64_t in) { return rotl64(acc + in * P2, 31) * P1; }
static inline uint64_t xxh_merge(uint64_t acc, uint64_t v) { return (acc ^ xxh_round(0, v)) * P1 + P4; }

uint64_t cvx_xxh64(const void *data, size_t len, uint64_t seed) {
    const unsigned char *p = data, *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        for (; end - p >= 32; p += 32) {
            v1 = xxh_round(v1, rd64(p));
            v2 = xxh_round(v2, rd64(p + 8));
            v3 = xxh_round(v3, rd64(p + 16));
            v4 = xxh_round(v4, rd64(p + 24));
        }
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xxh_merge(h, v1);
        h = xxh_merge(h, v2);
        h = xxh_merge(h, v3);
        h = xxh_merge(h, v4);
    } else {
        h = seed + P5;
    }
    h += (uint64_t)len;
    for (; end - p >= 8; p += 8) h = rotl64(h ^ xxh_round(0, rd64(p)), 27) * P1 + P4;
    if (end - p >= 4) { h = rotl64(h ^ (uint64_t)rd32(p) * P1, 23) * P2 + P3; p += 4; }
    for (; p < end; p++) h = rotl64(h ^ (uint64_t)*p * P5, 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

int cvx_file_xxh64(const char *path, char hex[17]) {
    size_t len;
    char *buf = cvx_read_file(path, &len);
    if (!buf) return -1;
    snprintf(hex, 17, "%016llx", (unsigned long long)cvx_xxh64(buf, len, 0));
    free(buf);
    return 0;
}

int cvx_check_file_hash(const char *data_path, const char *expected_hex, const char *config_path) {
    char got[17];
    if (cvx_file_xxh64(data_path, got)) return -1;
    if (!expected_hex || strcmp(got, expected_hex) != 0) {
        const char *d = strrchr(data_path, '/'), *c = strrchr(config_path, '/');
        return cvx_error("%s does not belong to %s: xxh64 %s != %s recorded there (the pair comes from different "
                         "runs; re-run the stage that wrote them)",
                         d ? d + 1 : data_path, c ? c + 1 : config_path, got, expected_hex ? expected_hex : "(none)");
    }
    return 0;
}

/* ---- paths ---- */

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
