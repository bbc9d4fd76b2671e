/* probe_check.h: the one check macro of the bench/ probes (standalone programs built with
 * nvcc or cc, not part of llmbench): CK(x) exits with the call, file and line when x (a
 * CUDA or cuBLASLt status) is not 0; probe_median(t, n) sorts n timings and returns the
 * middle one. */
#ifndef BENCH_PROBE_CHECK_H
#define BENCH_PROBE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        int e_ = (int)(x);                                                                         \
        if (e_ != 0) {                                                                             \
            fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, e_);                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int probe_cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static inline float probe_median(float *t, int n) {
    qsort(t, (size_t)n, sizeof(float), probe_cmp_float);
    return t[n / 2];
}

#endif
