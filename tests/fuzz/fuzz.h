/* fuzz.h: what every fuzz target shares: the libFuzzer entry point and an invariant check.
 *
 * A target is one tests/fuzz/fuzz_<name>.c defining LLVMFuzzerTestOneInput. It is linked
 * either with libFuzzer (clang, LB_FUZZ=ON: coverage-guided search) or with replay_main.c
 * (every compiler: the seed corpus plus seeded mutations, as a CTest test). FUZZ_CHECK
 * states what must hold of a parse, not only that it returned: a failed check prints the
 * condition and aborts, which both drivers report as a crash with the input that caused
 * it. It stays on in release builds (unlike assert). */
#ifndef LB_TESTS_FUZZ_H
#define LB_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Reads every byte of p[0..n) in a way the optimizer cannot drop, so a pointer or length
 * that runs past its allocation is reported by the sanitizers. */
static volatile uint8_t fuzz_sink;
static inline void fuzz_touch(const void *p, size_t n) {
    const uint8_t *b = p;
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        x ^= b[i];
    fuzz_sink = x;
}

#endif
