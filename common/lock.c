/* Advisory directory locks on "<dir>/.lock" with flock(2); see lock.h. */
#include "lock.h"
#include "error.h"
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

struct cvx_dir_lock {
    int fd;
};

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
        char buf[64] = {0};
        ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
        close(fd);
        if (e != EWOULDBLOCK) {
            cvx_error("%s: cannot lock: %s", path, strerror(e));
            return NULL;
        }
        long pid = 0;
        char who[32] = "";
        if (k > 0) sscanf(buf, "%ld %31s", &pid, who);
        if (pid > 0)
            cvx_error("%s is in use by another run (pid %ld%s%s); wait for it to finish or use another directory", dir,
                      pid, who[0] ? ", " : "", who);
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
