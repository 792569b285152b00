/* What the per-context weight caches share (the pre-packed linears of common/gemm_fast.c, the
 * transformed conv weights of common/conv_wcache.c, the oneDNN conv weights of common/conv_onednn.c):
 * a cheap key of a weight's bytes, so that another weight mapped later at the same address is not
 * taken for it, and the memory the machine can still give, which their budgets respect. */
#ifndef CVX_WEIGHT_CACHES_H
#define CVX_WEIGHT_CACHES_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a of 16 32-bit words spread evenly over data[0 .. nbytes) (0 words when nbytes < 4). */
uint64_t cvx_bytes_sample(const void *data, size_t nbytes);

/* /proc/meminfo's MemAvailable in bytes, or SIZE_MAX when it cannot be read. */
size_t cvx_mem_available(void);

#endif
