/* CPU features detected at run time (cpuid + xgetbv: the instruction set AND the OS saving the
 * registers it needs), so one binary built for the AVX2 baseline uses AVX-512/BF16/AMX units
 * where they exist. Pure: fills a caller-owned struct, no cached global state. */
#ifndef CVX_CPU_H
#define CVX_CPU_H

typedef struct {
    int avx2;         /* AVX2 + FMA + F16C, YMM state enabled by the OS */
    int avx512f;      /* AVX-512 F/BW/VL/DQ, ZMM + opmask state enabled by the OS */
    int avx512_bf16;  /* vdpbf16ps, vcvtne2ps2bf16 (requires avx512f) */
    int amx_bf16;     /* AMX tiles with bf16 (requires the OS to grant tile data: see cpu.c) */
    int avx512_vnni;  /* vpdpbusd on zmm (u8 x s8 -> s32 dot products of 4; requires avx512f) */
    int avx_vnni;     /* vpdpbusd on ymm, VEX-encoded (AVX-VNNI; requires avx2) */
} cvx_cpu_features;

/* Detect this CPU's features. */
void cvx_cpu_detect(cvx_cpu_features *f);
/* "avx2 avx512f avx512_bf16" (features present, space separated) into buf; returns buf. */
const char *cvx_cpu_describe(const cvx_cpu_features *f, char *buf, int len);

#endif
