/* norm_probe.c: times the norm backward kernels alone at a training step's sizes (GPT-2
 * 16x1024: LayerNorm over 16,384 rows of 768 bf16 with the weight, bias and column-sum
 * gradients; Llama 3.2 1B 8x1024: RMSNorm over 8,192 rows of 2,048 bf16) against a
 * device-to-device copy moving the same bytes (three rows read and one written an input
 * row: a copy of twice the input's size). Random inputs; CUDA events, median of the runs.
 *
 * build: make bench (build/bench/norm_probe); to time another commit's kernels, build that
 *        commit's probes.
 * usage: norm_probe [reps]   (default 50) */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/norm.cuh"
#include "probe_check.h"

/* a device buffer of n random bf16 values (uniform in [-1, 1) times scale) */
static void *rand_bf16(size_t n, float scale) {
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        float f = scale * (2.0f * (float)rand() / (float)RAND_MAX - 1.0f);
        uint32_t u;
        memcpy(&u, &f, 4);
        h[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    void *d;
    CK(cudaMalloc(&d, n * 2));
    CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static float *rand_f32(size_t n, float lo, float hi) {
    float *h = malloc(n * 4), *d;
    for (size_t i = 0; i < n; i++)
        h[i] = lo + (hi - lo) * (float)rand() / (float)RAND_MAX;
    CK(cudaMalloc((void **)&d, n * 4));
    CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static void run(int layer, int64_t N, int C, int reps) {
    size_t n = (size_t)N * C;
    void *dres = rand_bf16(n, 1.0f), *dy = rand_bf16(n, 1.0f), *x = rand_bf16(n, 2.0f);
    void *w = rand_bf16((size_t)C, 1.0f), *big, *big2;
    float *mean = rand_f32((size_t)N, -0.1f, 0.1f), *rstd = rand_f32((size_t)N, 0.5f, 1.5f);
    float *dw, *db, *ds;
    CK(cudaMalloc((void **)&dw, (size_t)C * 4));
    CK(cudaMalloc((void **)&db, (size_t)C * 4));
    CK(cudaMalloc((void **)&ds, (size_t)C * 4));
    CK(cudaMalloc(&big, 2 * n * 2));
    CK(cudaMalloc(&big2, 2 * n * 2));
    CK(cudaMemset(big, 0x3c, 2 * n * 2));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float *t_n = malloc(sizeof(float) * reps), *t_c = malloc(sizeof(float) * reps);
    lb_err err;
    for (int i = -3; i < reps; i++) {
        CK(cudaEventRecord(a, 0));
        lb_status st = layer ? lb_norm_layernorm_backward(dres, dw, db, ds, dy, x, w, mean, rstd, N,
                                                          C, LB_DT_BF16, 0, &err)
                             : lb_norm_rmsnorm_backward(dres, dw, NULL, dy, x, w, rstd, N, C,
                                                        LB_DT_BF16, 0, &err);
        if (st != LB_OK) {
            fprintf(stderr, "norm: %s\n", err.msg);
            exit(1);
        }
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        if (i >= 0) CK(cudaEventElapsedTime(&t_n[i], a, b));
        CK(cudaEventRecord(a, 0));
        CK(cudaMemcpyAsync(big2, big, 2 * n * 2, cudaMemcpyDeviceToDevice, 0));
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        if (i >= 0) CK(cudaEventElapsedTime(&t_c[i], a, b));
    }
    float mn = probe_median(t_n, reps) * 1e3f, mc = probe_median(t_c, reps) * 1e3f;
    printf("%s backward %lld x %d bf16: %.1f us (%.2f TB/s), copy %.1f us, ratio %.2f\n",
           layer ? "LayerNorm" : "RMSNorm", (long long)N, C, mn, 4.0 * n * 2 / mn / 1e6, mc,
           mn / mc);
    cudaFree(dres), cudaFree(dy), cudaFree(x), cudaFree(w), cudaFree(big), cudaFree(big2);
    cudaFree(mean), cudaFree(rstd), cudaFree(dw), cudaFree(db), cudaFree(ds);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    srand(7);
    run(1, 16384, 768, reps);
    run(0, 8192, 2048, reps);
    return 0;
}
