/* Advisory directory locks on "<dir>/.lock" with flock(2); see lock.h. */
#include "lock.h"
#include "error.h"
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

struct cvx_dir_lock {
    int fd;
};

/* The processes holding a flock on the file (dev, ino), from /proc/locks (Linux): "pid 123" or
 * "pids 123, 456", with the program name of the first: the one the file records when that
 * process wrote it (rec_pid, rec_who), else /proc/PID/comm. 0 when none is found
 * (no /proc, another PID namespace). The pid a writer records in the file is no proof: a reader
 * holding the lock records none, and the recorded writer may be long gone (issue 21). */
static int lock_holders(dev_t dev, ino_t ino, long rec_pid, const char *rec_who, char *out, size_t n) {
    FILE *f = fopen("/proc/locks", "r");
    if (!f) return 0;
    char line[256];
    long pids[8];
    int k = 0;
    while (k < 8 && fgets(line, sizeof line, f)) {
        char type[16];
        long pid;
        unsigned maj, mn;
        unsigned long long inode;
        if (strstr(line, "->")) continue;   /* a waiter, not a holder */
        if (sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%llu", type, &pid, &maj, &mn, &inode) != 5) continue;
        if (strcmp(type, "FLOCK") || inode != (unsigned long long)ino || maj != major(dev) || mn != minor(dev) ||
            pid <= 0)
            continue;
        int seen = 0;
        for (int i = 0; i < k; i++) seen |= pids[i] == pid;
        if (!seen) pids[k++] = pid;
    }
    fclose(f);
    if (k == 0) return 0;
    size_t len = (size_t)snprintf(out, n, "pid%s", k > 1 ? "s" : "");
    for (int i = 0; i < k && len < n; i++) len += (size_t)snprintf(out + len, n - len, "%s %ld", i ? "," : "", pids[i]);
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/%ld/comm", pids[0]);
    FILE *c = pids[0] == rec_pid && rec_who[0] ? NULL : fopen(path, "r");
    if (c && fgets(comm, sizeof comm, c)) comm[strcspn(comm, "\n")] = 0;
    if (c) fclose(c);
    if (!strcmp(comm, "exe")) {   /* a program re-executed through /proc/self/exe: its argv[0] instead */
        char arg0[256] = "";
        snprintf(path, sizeof path, "/proc/%ld/cmdline", pids[0]);
        FILE *cl = fopen(path, "r");
        const size_t got = cl ? fread(arg0, 1, sizeof arg0 - 1, cl) : 0;
        if (cl) fclose(cl);
        arg0[got] = 0;
        const char *base = strrchr(arg0, '/');
        if (arg0[0]) snprintf(comm, sizeof comm, "%s", base ? base + 1 : arg0);
    }
    if (pids[0] == rec_pid && rec_who[0]) snprintf(comm, sizeof comm, "%s", rec_who);
    if (comm[0] && len < n) snprintf(out + len, n - len, ", %s", comm);
    return 1;
}

cvx_dir_lock *cvx_dir_lock_acquire(const char *dir, int exclusive) {
    char path[4200];
    if (cvx_path_join(path, sizeof path, dir, ".lock")) return NULL;
    /* O_NOFOLLOW: a planted symlink cannot make us truncate another file */
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && !exclusive && (errno == EACCES || errno == EROFS || errno == EPERM)) {
        /* a directory we may only read (read-only mount, someone else's): nobody can write it
         * through us either, so reading it unlocked is fine */
        cvx_dir_lock *l = cvx_calloc(1, sizeof *l);
        l->fd = -1;
        return l;
    }
    if (fd < 0) {
        cvx_error("%s: cannot create lock file: %s", path, strerror(errno));
        return NULL;
    }
    if (flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
        int e = errno;
        char buf[64] = {0}, holders[160] = "";
        ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
        long pid = 0;
        char who[32] = "";
        if (k > 0) sscanf(buf, "%ld %31s", &pid, who);
        struct stat st;
        const int found = fstat(fd, &st) == 0 && lock_holders(st.st_dev, st.st_ino, pid, who, holders, sizeof holders);
        close(fd);
        if (e != EWOULDBLOCK) {
            cvx_error("%s: cannot lock: %s", path, strerror(e));
            return NULL;
        }
        /* without /proc/locks: the recorded writer, if it still lives (a reader records none) */
        if (!found && pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM))
            snprintf(holders, sizeof holders, "pid %ld%s%s", pid, who[0] ? ", " : "", who);
        if (holders[0])
            cvx_error("%s is in use by another run (%s); wait for it to finish or use another directory", dir, holders);
        else
            cvx_error("%s is in use by another run; wait for it to finish or use another directory", dir);
        return NULL;
    }
    if (exclusive) {   /* record the holder; readers leave the writer's pid alone */
        char buf[64];
        int n = snprintf(buf, sizeof buf, "%ld %s\n", (long)getpid(), cvx_program_name());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)n, 0) != n) {
            /* the lock holds anyway; only the pid in a rival's message is lost */
        }
    }
    cvx_dir_lock *l = cvx_calloc(1, sizeof *l);
    l->fd = fd;
    return l;
}

void cvx_dir_lock_release(cvx_dir_lock *l) {
    if (!l) return;
    if (l->fd >= 0) close(l->fd);   /* closing the last descriptor releases the flock */
    free(l);
}
