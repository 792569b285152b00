/* The buffer pool (pool.h): kept buffers handed out again, held under the in-use high-water mark. */
#include "pool.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "error.h"

struct cvx_pool_block {
    void *p;
    size_t bytes;   /* capacity */
    int used;
};

static const size_t huge_page = (size_t)2 << 20, huge_min = (size_t)8 << 20;

void cvx_pool_init(cvx_pool *pool) { memset(pool, 0, sizeof *pool); }

void *cvx_alloc_large(size_t bytes) {
    if (bytes < huge_min) return cvx_alloc_aligned_at(bytes, __FILE__, __LINE__);
    const size_t rounded = (bytes + huge_page - 1) / huge_page * huge_page;
    void *p = NULL;
    if (posix_memalign(&p, huge_page, rounded) != 0) cvx_die("out of memory allocating %zu bytes", bytes);
#ifdef MADV_HUGEPAGE
    (void)madvise(p, rounded, MADV_HUGEPAGE);   /* advice only: 4 KB pages if the kernel says no */
#endif
    return p;
}

/* Free block i back to the C library (the last block moves into its slot). */
static void pool_release(cvx_pool *pool, int i) {
    free(pool->blk[i].p);
    pool->held_bytes -= pool->blk[i].bytes;
    pool->blk[i] = pool->blk[--pool->n];
}

/* The free block to release next so that `need` more bytes fit under the mark: one too small
 * for `need` first, else the largest; -1 when none is free. */
static int pool_victim(const cvx_pool *pool, size_t need) {
    int small = -1, large = -1;
    for (int i = 0; i < pool->n; i++) {
        const struct cvx_pool_block *b = &pool->blk[i];
        if (b->used) continue;
        if (b->bytes < need) small = i;
        else if (large < 0 || b->bytes > pool->blk[large].bytes) large = i;
    }
    return small >= 0 ? small : large;
}

float *cvx_pool_get(cvx_pool *pool, size_t n) {
    size_t need = (n ? n : 1) * sizeof(float);
    int best = -1;
    for (int i = 0; i < pool->n; i++) {   /* the smallest free block that fits, at most twice the request */
        const struct cvx_pool_block *b = &pool->blk[i];
        if (!b->used && b->bytes >= need && b->bytes / 2 <= need && (best < 0 || b->bytes < pool->blk[best].bytes))
            best = i;
    }
    if (best < 0) {
        size_t bytes = need < huge_min ? need : (need + huge_page - 1) / huge_page * huge_page;
        size_t mark = pool->used_bytes + bytes > pool->mark_bytes ? pool->used_bytes + bytes : pool->mark_bytes;
        for (int v; pool->held_bytes + bytes > mark && (v = pool_victim(pool, need)) >= 0;) pool_release(pool, v);
        void *p = cvx_alloc_large(bytes);
        if (pool->n == pool->cap) {
            pool->cap = pool->cap ? 2 * pool->cap : 16;
            pool->blk = cvx_realloc(pool->blk, sizeof *pool->blk * (size_t)pool->cap);
        }
        pool->blk[pool->n] = (struct cvx_pool_block){p, bytes, 0};
        pool->held_bytes += bytes;
        best = pool->n++;
    }
    struct cvx_pool_block *b = &pool->blk[best];
    b->used = 1;
    pool->used_bytes += b->bytes;
    if (pool->used_bytes > pool->mark_bytes) pool->mark_bytes = pool->used_bytes;
    return b->p;
}

void cvx_pool_put(cvx_pool *pool, void *p) {
    if (!p) return;
    for (int i = 0; i < pool->n; i++)
        if (pool->blk[i].p == p) {
            if (!pool->blk[i].used) cvx_die("cvx_pool_put: buffer %p given back twice", p);
            pool->blk[i].used = 0;
            pool->used_bytes -= pool->blk[i].bytes;
            return;
        }
    cvx_die("cvx_pool_put: buffer %p was not handed out by this pool", p);
}

void cvx_pool_trim(cvx_pool *pool) {
    for (int i = pool->n - 1; i >= 0; i--)
        if (!pool->blk[i].used) pool_release(pool, i);
}

void cvx_pool_free(cvx_pool *pool) {
    cvx_pool_trim(pool);
    free(pool->blk);
    memset(pool, 0, sizeof *pool);
}

int cvx_pool_in_use(const cvx_pool *pool) {
    int k = 0;
    for (int i = 0; i < pool->n; i++) k += pool->blk[i].used;
    return k;
}
