/* One run per output directory: an advisory lock (flock) on "<dir>/.lock".
 *
 * The writer of a directory takes it exclusive; a stage that only reads a directory may take it
 * shared, so it does not read files another run is replacing. The lock goes with the process
 * (closed on exit or kill, never stale); the file holds the holder's pid for the message:
 *   "stage_outputs is in use by another run (pid 1234, stage2); wait for it to finish or use
 *    another --output_dir". */
#ifndef CVX_LOCK_H
#define CVX_LOCK_H

typedef struct cvx_dir_lock cvx_dir_lock;

/* Take the lock without waiting. exclusive = 1 for a directory this run writes, 0 for one it
 * only reads. NULL + cvx_error naming the directory and the holder's pid when it is held. */
cvx_dir_lock *cvx_dir_lock_acquire(const char *dir, int exclusive);
/* Release and free (NULL is fine). The .lock file stays: removing it would race a new holder. */
void cvx_dir_lock_release(cvx_dir_lock *l);

#endif
