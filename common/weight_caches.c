/* The weight caches' shared helpers (weight_caches.h). */
#include "weight_caches.h"

#include <stdio.h>
#include <string.h>

uint64_t cvx_bytes_sample(const void *data, size_t nbytes) {
    const unsigned char *b = data;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 16 && nbytes >= 4; i++) {
        uint32_t v;
        memcpy(&v, b + (nbytes - 4) / 15 * (size_t)i, 4);
        h = (h ^ v) * 1099511628211ull;
    }
    return h;
}

size_t cvx_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return (size_t)-1;
    char line[256];
    size_t kb = (size_t)-1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb == (size_t)-1 ? kb : kb << 10;
}
