/* Run-time CPU feature detection (x86-64; other architectures report nothing). */
#include "cpu.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long xgetbv0(void) {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
/* Linux hands out the AMX tile-data state only on request (arch_prctl ARCH_REQ_XCOMP_PERM). */
static int amx_os_permission(void) {
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
#else
static int amx_os_permission(void) { return 0; }
#endif

void cvx_cpu_detect(cvx_cpu_features *f) {
    memset(f, 0, sizeof *f);
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx) return;
    unsigned long long xcr0 = xgetbv0();
    int ymm_os = (xcr0 & 0x6) == 0x6;            /* SSE + AVX state */
    int zmm_os = (xcr0 & 0xe6) == 0xe6;          /* + opmask, ZMM_Hi256, Hi16_ZMM */
    int amx_os = (xcr0 & 0x60000) == 0x60000;    /* XTILECFG + XTILEDATA */
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    unsigned b7 = b, c7 = c, d7 = d;
    int avx2 = (b7 >> 5) & 1;
    int avx512 = ((b7 >> 16) & 1) && ((b7 >> 17) & 1) && ((b7 >> 30) & 1) && ((b7 >> 31) & 1); /* F DQ BW VL */
    __cpuid_count(7, 1, a, b, c, d);
    int bf16 = (a >> 5) & 1, avx_vnni = (a >> 4) & 1;
    int amx_bf16 = (d7 >> 22) & 1, amx_tile = (d7 >> 24) & 1;
    f->avx2 = ymm_os && avx2 && fma && f16c;
    f->avx512f = f->avx2 && zmm_os && avx512;
    f->avx512_bf16 = f->avx512f && bf16;
    f->avx512_vnni = f->avx512f && ((c7 >> 11) & 1);
    f->avx_vnni = f->avx2 && avx_vnni;
    f->amx_bf16 = f->avx512f && amx_os && amx_bf16 && amx_tile && amx_os_permission();
}
#else
void cvx_cpu_detect(cvx_cpu_features *f) { memset(f, 0, sizeof *f); }
#endif

const char *cvx_cpu_describe(const cvx_cpu_features *f, char *buf, int len) {
    snprintf(buf, (size_t)len, "%s%s%s%s%s%s", f->avx2 ? "avx2 " : "", f->avx512f ? "avx512f " : "",
             f->avx512_bf16 ? "avx512_bf16 " : "", f->amx_bf16 ? "amx_bf16 " : "",
             f->avx512_vnni ? "avx512_vnni " : "", f->avx_vnni ? "avx_vnni " : "");
    size_t n = strlen(buf);
    if (n && buf[n - 1] == ' ') buf[n - 1] = 0;
    if (!n) snprintf(buf, (size_t)len, "baseline");
    return buf;
}
