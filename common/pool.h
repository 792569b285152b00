/* A pool of big buffers that a model frees and allocates again in the same sizes — the VAEs'
 * feature maps: tens to hundreds of MB each, one or two per convolution. Freed to the C library,
 * a buffer over glibc's mmap threshold (32 MB at most) goes back to the kernel, and the next one
 * comes as fresh pages: a fault and a zeroing per page (18.7 % of the samples of an LTX-Video
 * 2×16×24 decode were in the kernel, clear_page 7.9 %). Kept here, it is handed out again.
 *
 * The rule that keeps memory where it was: the pool never holds more than the largest total
 * that was in use at once (the high-water mark). A request takes the smallest kept buffer that
 * fits and is at most twice its size; otherwise free buffers are returned to the C library
 * (those too small first) until the new buffer fits under the mark, then it is allocated — so
 * the process's peak is the peak of what was in use, as without the pool.
 *
 * Buffers of 8 MB and more are 2 MB-aligned and marked MADV_HUGEPAGE (512× fewer faults when the
 * kernel agrees). Contents are uninitialised (as malloc). Not thread-safe: call from the thread
 * that owns the pool (the ops inside may be parallel). */
#ifndef CVX_POOL_H
#define CVX_POOL_H

#include <stddef.h>

typedef struct {
    struct cvx_pool_block *blk;   /* every buffer handed out or kept */
    int n, cap;
    size_t used_bytes;            /* in use now */
    size_t held_bytes;            /* in use + kept free */
    size_t mark_bytes;            /* the most ever in use at once */
} cvx_pool;

void cvx_pool_init(cvx_pool *pool);
/* A buffer of `bytes` outside any pool, for large long-lived data (kept transformed weights, the
 * pool's own buffers): from 8 MB on 2 MB-aligned and marked MADV_HUGEPAGE, so its first touch faults
 * once per 2 MB, not per 4 KB; smaller ones 64-byte aligned. Free with free(); dies (cvx_die) when
 * memory is exhausted. */
void *cvx_alloc_large(size_t bytes);

/* n floats; dies (cvx_die) when memory is exhausted, as cvx_alloc_f32. */
float *cvx_pool_get(cvx_pool *pool, size_t n);
/* Give back a buffer of cvx_pool_get (NULL: nothing). A pointer the pool did not hand out is a
 * bug: cvx_die. */
void cvx_pool_put(cvx_pool *pool, void *p);
/* Return the kept free buffers to the C library (the ones in use stay valid). */
void cvx_pool_trim(cvx_pool *pool);
/* Trim, then drop the bookkeeping; buffers still in use are left to whoever holds them. */
void cvx_pool_free(cvx_pool *pool);
/* Buffers handed out and not yet put back (a decode that balances its gets and puts ends at 0). */
int cvx_pool_in_use(const cvx_pool *pool);

#endif
