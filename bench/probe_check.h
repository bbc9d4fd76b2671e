/* probe_check.h: the one check macro of the bench/ probes (standalone programs built with
 * nvcc, not part of llmbench): CK(x) exits with the call, file and line when x (a CUDA or
 * cuBLASLt status) is not 0. */
#ifndef BENCH_PROBE_CHECK_H
#define BENCH_PROBE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                    \
    do {                                                                         \
        int e_ = (int)(x);                                                       \
        if (e_ != 0) {                                                           \
            fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, e_); \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

#endif
