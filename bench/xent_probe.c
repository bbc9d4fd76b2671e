/* xent_probe.c: times lb_loss_softmax_xent alone on logits of a training step's size (GPT-2
 * 16x1024: 16,384 rows of 50,257 bf16, rows 50,304 apart), against a device-to-device
 * copy of the same bytes (one read and one write: the floor for a kernel that reads the
 * logits once and writes their gradient once). Each run starts from the same random
 * logits (restored untimed). CUDA events, median of the runs.
 *
 * build: make bench (build/bench/xent_probe); to time another commit's kernels, build that
 *        commit's probes.
 * usage: xent_probe [N V reps]   (default 16384 50257 20) */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/loss.cuh"
#include "probe_check.h"

static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

int main(int argc, char **argv) {
    int64_t N = argc > 1 ? atoll(argv[1]) : 16384;
    int V = argc > 2 ? atoi(argv[2]) : 50257;
    int reps = argc > 3 ? atoi(argv[3]) : 20;
    int64_t ld = (V + 63) / 64 * 64;
    size_t bytes = (size_t)N * ld * 2;
    /* 64 distinct random rows (normal, sd 3, by Box-Muller), repeated down the buffer */
    int64_t pat = N < 64 ? N : 64;
    uint16_t *h = malloc((size_t)pat * ld * 2);
    int32_t *tg = malloc((size_t)N * 4);
    srand(12345);
    for (size_t i = 0; i < (size_t)pat * ld; i++) {
        double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = (rand() + 1.0) / (RAND_MAX + 2.0);
        h[i] = bf16_bits((float)(3.0 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)));
    }
    for (int64_t i = 0; i < N; i++)
        tg[i] = rand() % V;
    void *d, *pristine, *other;
    float *losses;
    int32_t *dtg;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMalloc(&pristine, bytes));
    CK(cudaMalloc(&other, bytes));
    CK(cudaMalloc((void **)&losses, (size_t)N * 4));
    CK(cudaMalloc((void **)&dtg, (size_t)N * 4));
    for (int64_t r = 0; r < N; r += pat) {
        int64_t n = N - r < pat ? N - r : pat;
        CK(cudaMemcpy((char *)pristine + (size_t)r * ld * 2, h, (size_t)n * ld * 2,
                      cudaMemcpyHostToDevice));
    }
    CK(cudaMemcpy(dtg, tg, (size_t)N * 4, cudaMemcpyHostToDevice));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float *t_x = malloc(sizeof(float) * reps), *t_c = malloc(sizeof(float) * reps);
    lb_err err;
    for (int i = -2; i < reps; i++) {
        CK(cudaMemcpy(d, pristine, bytes, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(a, 0));
        if (lb_loss_softmax_xent(d, losses, dtg, N, V, ld, 1.0f / (float)N, NULL, 1, LB_DT_BF16, 0,
                                 &err) != LB_OK) {
            fprintf(stderr, "xent: %s\n", err.msg);
            return 1;
        }
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        if (i >= 0) CK(cudaEventElapsedTime(&t_x[i], a, b));
        CK(cudaEventRecord(a, 0));
        CK(cudaMemcpyAsync(other, pristine, bytes, cudaMemcpyDeviceToDevice, 0));
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        if (i >= 0) CK(cudaEventElapsedTime(&t_c[i], a, b));
    }
    CK(cudaGetLastError());
    float mx = probe_median(t_x, reps), mc = probe_median(t_c, reps);
    printf("N %lld V %d: xent %.3f ms (%.2f TB/s), copy %.3f ms (%.2f TB/s), xent/copy %.2f\n",
           (long long)N, V, mx, 2.0 * bytes / mx / 1e9, mc, 2.0 * bytes / mc / 1e9, mx / mc);
    return 0;
}
