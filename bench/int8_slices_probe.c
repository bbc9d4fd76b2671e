/* int8_slices_probe.c: probe. How fast are the int8 tensor-core products that an fp32
 * product split into s signed 7-bit slices per operand would need, against cuBLASLt's
 * fp32 kernels on the same problem?
 *
 * An fp32 product A B (A m x k, B k x n) with A's rows and B's columns each written as
 * 2^e (d_1 2^-6 + d_2 2^-13 + ... ) with integer digits |d| <= 64 becomes, keeping the
 * terms whose digit positions add to at most s + 1, s integer products: the one for
 * "diagonal" t sums the t pairs (A_i, B_j) with i + j = t + 1, which is one int8 product
 * over t k (slices laid side by side along k), exact in int32 while t k 64^2 < 2^31.
 * So a split into s slices costs int8 products over k + 2k + ... + sk.
 *
 * For each problem (column-major cuBLASLt terms, both operands k-contiguous: op(A) = T,
 * op(B) = N, as the int8 kernels want): the fp32 product's time (best of the heuristic's
 * candidates) and, for s = 3..6, the summed time of the s int8 products (each the best of
 * its candidates). Fresh random data, one warm-up, median of REPS runs, CUDA events.
 *
 * build: nvcc -O2 -o int8_slices_probe bench/int8_slices_probe.c -lcublasLt
 * usage: int8_slices_probe M,N,K [...] */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_check.h"

#define REPS       9
#define CANDIDATES 8
#define WS_BYTES   ((size_t)64 << 20)

static cublasLtHandle_t lt;
static cudaStream_t st;
static cudaEvent_t ev0, ev1;
static void *ws;

/* median microseconds of one product; -1 when cuBLASLt refuses the algorithm */
static float time_one(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                      cublasLtMatrixLayout_t ld, const void *alpha, const void *beta, const void *a,
                      const void *b, void *d, const cublasLtMatmulAlgo_t *algo) {
    float t[REPS];
    for (int r = -1; r < REPS; r++) {
        CK(cudaEventRecord(ev0, st));
        if (cublasLtMatmul(lt, op, alpha, a, la, b, lb, beta, d, ld, d, ld, algo, ws, WS_BYTES,
                           st) != CUBLAS_STATUS_SUCCESS)
            return -1.0f;
        CK(cudaEventRecord(ev1, st));
        CK(cudaEventSynchronize(ev1));
        if (r >= 0) CK(cudaEventElapsedTime(&t[r], ev0, ev1));
    }
    return probe_median(t, REPS) * 1000.0f;
}

/* best time of the heuristic's candidates for D (M x N) = A^T B, A stored k x M, B k x N */
static float best(int int8, int64_t M, int64_t N, int64_t K, const void *a, const void *b,
                  void *d) {
    cublasComputeType_t ct = int8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F;
    cudaDataType_t sc = int8 ? CUDA_R_32I : CUDA_R_32F, abt = int8 ? CUDA_R_8I : CUDA_R_32F;
    cudaDataType_t dt = int8 ? CUDA_R_32I : CUDA_R_32F;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CK(cublasLtMatmulDescCreate(&op, ct, sc));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CK(cublasLtMatrixLayoutCreate(&la, abt, K, M, K));
    CK(cublasLtMatrixLayoutCreate(&lb, abt, K, N, K));
    CK(cublasLtMatrixLayoutCreate(&ld, dt, M, N, M));
    cublasLtMatmulPreference_t pref;
    size_t wsb = WS_BYTES;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                            sizeof wsb));
    cublasLtMatmulHeuristicResult_t res[CANDIDATES];
    int n = 0;
    cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, CANDIDATES, res, &n);
    int32_t ai = 1, bi = 0;
    float af = 1.0f, bf = 0.0f, top = -1.0f;
    for (int i = 0; i < n; i++) {
        float us = time_one(op, la, lb, ld, int8 ? (void *)&ai : (void *)&af,
                            int8 ? (void *)&bi : (void *)&bf, a, b, d, &res[i].algo);
        if (us > 0 && (top < 0 || us < top)) top = us;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    return top;
}

/* random int8 digits in [-64, 64] (as the slices hold) */
static void *random_digits(size_t n) {
    signed char *h = malloc(n);
    void *d;
    for (size_t i = 0; i < n; i++)
        h[i] = (signed char)(rand() % 129 - 64);
    CK(cudaMalloc(&d, n));
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* random floats in [-1, 1] */
static void *random_floats(size_t n) {
    float *h = malloc(n * 4);
    void *d;
    for (size_t i = 0; i < n; i++)
        h[i] = 2.0f * (float)rand() / (float)RAND_MAX - 1.0f;
    CK(cudaMalloc(&d, n * 4));
    CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s M,N,K [...]\n", argv[0]);
        return 2;
    }
    CK(cublasLtCreate(&lt));
    CK(cudaStreamCreate(&st));
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    CK(cudaMalloc(&ws, WS_BYTES));
    printf("%-22s %10s | %10s %10s %10s %10s | int8 TOP/s at s=5\n", "M,N,K", "fp32 us", "s=3 us",
           "s=4 us", "s=5 us", "s=6 us");
    double tot32 = 0, tot[7] = {0};
    for (int i = 1; i < argc; i++) {
        long long M, N, K;
        if (sscanf(argv[i], "%lld,%lld,%lld", &M, &N, &K) != 3) {
            fprintf(stderr, "bad problem %s\n", argv[i]);
            return 2;
        }
        void *fa = random_floats((size_t)(M * K)), *fb = random_floats((size_t)(N * K));
        void *fd;
        CK(cudaMalloc(&fd, (size_t)(M * N) * 4));
        float us32 = best(0, M, N, K, fa, fb, fd);
        cudaFree(fa);
        cudaFree(fb);
        void *ia = random_digits((size_t)(M * K * 6)), *ib = random_digits((size_t)(N * K * 6));
        float diag[6], sum[7] = {0};
        for (int t = 1; t <= 6; t++)
            diag[t - 1] = best(1, M, N, K * t, ia, ib, fd);
        for (int s = 3; s <= 6; s++)
            for (int t = 1; t <= s; t++)
                sum[s] += diag[t - 1];
        double ops5 = 2.0 * M * N * K * 15;
        printf("%-22s %10.1f | %10.1f %10.1f %10.1f %10.1f | %.0f\n", argv[i], us32, sum[3], sum[4],
               sum[5], sum[6], ops5 / (sum[5] * 1e-6) / 1e12);
        tot32 += us32;
        for (int s = 3; s <= 6; s++)
            tot[s] += sum[s];
        cudaFree(ia);
        cudaFree(ib);
        cudaFree(fd);
    }
    printf("%-22s %10.1f | %10.1f %10.1f %10.1f %10.1f |\n", "sum", tot32, tot[3], tot[4], tot[5],
           tot[6]);
    return 0;
}
