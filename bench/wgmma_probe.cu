/* wgmma_probe.cu: checks our reading of Hopper's warpgroup MMA (wgmma.mma_async, sm_90a)
 * before an attention kernel is built on it: the shared-memory matrix descriptor without
 * swizzling (start address, leading and stride byte offsets of 8x16-byte core matrices),
 * the accumulator's register layout, and the A operand from registers. Each case runs
 * one 64x64 tile over k = 64 (four m64n64k16 steps) on random bf16 data and compares with
 * a CPU product; then the first case is timed in a loop (operands resident in shared
 * memory: the instruction's own rate, not a GEMM's).
 *
 *   case ss_kk: D = A B^T, A [64][64] and B [64][64] both K-major from shared memory
 *               (the S = Q K^T of attention)
 *   case rs_mn: D = P V, P [64][64] from registers (mma.sync's A fragment layout per warp),
 *               V [64 k][64 n] N-major in shared memory (imm-trans-b = 1), the leading
 *               byte offset being the distance between core matrices adjacent along k
 *               (the O = P V of attention; with the two offsets swapped the first run on
 *               an H200 read out of bounds: an illegal address, the context lost)
 *
 * The descriptor (wg_desc), the products (wg_op) and the fences are kernels/ptx.cuh's, the
 * ones the attention backward runs.
 *
 * build: make bench (build/bench/wgmma_probe; the sm_90a code of the default architectures)
 * usage: wgmma_probe   (an sm_90 GPU; prints one line per case and one timing line; exit 1
 *                       on a failed case) */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/ptx.cuh"
#include "probe_check.h"

#define N 64 /* tile edge: M = N = K = 64 */

/* no-swizzle layout: element (row, col) of a [64 rows][64 cols] operand whose 8x8 core
 * matrices are 128 contiguous bytes (8 rows of 16 bytes); `along_col` and `along_row`
 * are the byte distances between core matrices adjacent along columns and rows */
__host__ __device__ static inline int cm_offset(int row, int col, int along_col, int along_row) {
    return (row / 8) * along_row + (col / 8) * along_col + (row % 8) * 16 + (col % 8) * 2;
}

/* Accumulator layout (assumed as mma.sync's C per warp): warp w owns rows 16w..16w+15;
 * lane 4g + q holds, for each 8-column group j, d[4j], d[4j+1] at row 16w + g, columns
 * 8j + 2q, +1, and d[4j+2], d[4j+3] at row 16w + g + 8. */
__device__ static void store_acc(float *out, const float d[8][4]) {
    int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, q = l % 4;
    for (int j = 0; j < 8; j++) {
        int r = 16 * w + g, c = 8 * j + 2 * q;
        out[r * N + c] = d[j][0], out[r * N + c + 1] = d[j][1];
        out[(r + 8) * N + c] = d[j][2], out[(r + 8) * N + c + 1] = d[j][3];
    }
}

/* ss_kk: A [m][k], B [n][k] row-major in global; D = A B^T. K-major: a core matrix is 8
 * rows x 8 k; LBO = between core matrices adjacent in k, SBO = adjacent in m (or n). */
__global__ void ss_kk_kernel(float *out, const __nv_bfloat16 *A, const __nv_bfloat16 *B, int reps) {
    __shared__ __align__(128) __nv_bfloat16 sA[N * N], sB[N * N];
    const int lbo = 128, sbo = 8 * 128; /* k-adjacent cores contiguous, 8 per row block */
    for (int i = threadIdx.x; i < N * N; i += blockDim.x) {
        int r = i / N, c = i % N;
        *(__nv_bfloat16 *)((char *)sA + cm_offset(r, c, lbo, sbo)) = A[i];
        *(__nv_bfloat16 *)((char *)sB + cm_offset(r, c, lbo, sbo)) = B[i];
    }
    fence_async_shared();
    __syncthreads();
    float d[8][4] = {};
    uint64_t da[N / 16], db[N / 16];
#pragma unroll
    for (int k = 0; k < N / 16; k++) { /* a k-step of 16 spans two core matrices */
        da[k] = wg_desc((char *)sA + k * 2 * lbo, lbo, sbo);
        db[k] = wg_desc((char *)sB + k * 2 * lbo, lbo, sbo);
    }
    wg_pin(d);
    wg_fence();
    for (int r = 0; r < reps; r++) { /* one group: the chain on d is the hardware's to pipeline */
#pragma unroll
        for (int k = 0; k < N / 16; k++)
            wg_op<__nv_bfloat16>::ss(d, da[k], db[k], r > 0 || k > 0);
    }
    wg_commit();
    wg_wait<0>();
    wg_pin(d);
    store_acc(out + (size_t)blockIdx.x * N * N, d);
}

/* rs_mn: P [m][k] row-major (to registers), V [k][n] row-major in global; D = P V. V in
 * shared memory with 8 n x 8 k core matrices (16 bytes along n); `along_n` and `along_k`
 * are the byte distances between core matrices adjacent along n and along k; the
 * descriptor gets (lbo, sbo) as given. */
__global__ void rs_mn_kernel(float *out, const __nv_bfloat16 *P, const __nv_bfloat16 *V,
                             int along_n, int along_k, int lbo, int sbo) {
    __shared__ __align__(128) __nv_bfloat16 sV[N * N];
    for (int i = threadIdx.x; i < N * N; i += blockDim.x) {
        int k = i / N, n = i % N; /* V[k][n]: a core matrix row is 8 n at one k */
        *(__nv_bfloat16 *)((char *)sV + cm_offset(k, n, along_n, along_k)) = V[i];
    }
    fence_async_shared();
    __syncthreads();
    int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, q = l % 4;
    float d[8][4] = {};
    wg_fence();
    for (int k = 0; k < N / 16; k++) {
        /* mma.sync A fragment: a0 (g, 2q..), a1 (g+8, 2q..), a2 (g, 2q+8..), a3 (g+8, 2q+8..) */
        uint32_t a[4];
        const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * q, 2 * q, 2 * q + 8, 2 * q + 8};
        for (int e = 0; e < 4; e++) {
            const __nv_bfloat16 *p = P + (16 * w + rows[e]) * N + 16 * k + cols[e];
            __nv_bfloat162 v = __halves2bfloat162(p[0], p[1]);
            a[e] = *(uint32_t *)&v;
        }
        /* a k-step of 16 rows of V: two core matrices along k (d starts at zero) */
        wg_op<__nv_bfloat16>::rs_tb(d, a, wg_desc((char *)sV + k * 2 * along_k, lbo, sbo));
    }
    wg_commit();
    wg_wait<0>();
    store_acc(out, d);
}

static float bf(float x) {
    return __bfloat162float(__float2bfloat16(x));
}

static int check(const char *name, const float *got, const float *ref) {
    double maxerr = 0.0, maxref = 0.0;
    for (int i = 0; i < N * N; i++) {
        maxerr = fmax(maxerr, fabs(got[i] - ref[i]));
        maxref = fmax(maxref, fabs(ref[i]));
    }
    int ok = maxerr <= 1e-3 * maxref;
    printf("%-32s max |err| %.3g (max |ref| %.3g): %s\n", name, maxerr, maxref,
           ok ? "pass" : "FAIL");
    return ok;
}

int main(void) {
    static float a[N * N], b[N * N], ref[N * N], got[N * N];
    static __nv_bfloat16 ha[N * N], hb[N * N];
    srand(12345);
    for (int i = 0; i < N * N; i++) {
        a[i] = bf((float)rand() / RAND_MAX * 2.0f - 1.0f);
        b[i] = bf((float)rand() / RAND_MAX * 2.0f - 1.0f);
        ha[i] = __float2bfloat16(a[i]), hb[i] = __float2bfloat16(b[i]);
    }
    __nv_bfloat16 *dA, *dB;
    float *dD;
    int blocks = 132 * 4;
    CK(cudaMalloc(&dA, sizeof ha));
    CK(cudaMalloc(&dB, sizeof hb));
    CK(cudaMalloc(&dD, sizeof(float) * N * N * blocks));
    CK(cudaMemcpy(dA, ha, sizeof ha, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, hb, sizeof hb, cudaMemcpyHostToDevice));
    int all = 1;

    for (int i = 0; i < N; i++) /* A B^T */
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < N; k++)
                s += (double)a[i * N + k] * b[j * N + k];
            ref[i * N + j] = (float)s;
        }
    ss_kk_kernel<<<1, 128>>>(dD, dA, dB, 1);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got, dD, sizeof got, cudaMemcpyDeviceToHost));
    all &= check("ss_kk (A B^T, K-major)", got, ref);

    for (int i = 0; i < N; i++) /* A B with B [k][n] */
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < N; k++)
                s += (double)a[i * N + k] * b[k * N + j];
            ref[i * N + j] = (float)s;
        }
    /* V's cores: 8 along n per 64-wide row block (128 bytes apart), 8 row blocks along k */
    const int along_n = 128, along_k = 8 * 128;
    rs_mn_kernel<<<1, 128>>>(dD, dA, dB, along_n, along_k, along_k, along_n);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got, dD, sizeof got, cudaMemcpyDeviceToHost));
    all &= check("rs_mn (P V, V N-major)", got, ref);

    /* rate: every block repeats its four k-steps `reps` times on resident operands */
    int reps = 4000;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    ss_kk_kernel<<<blocks, 128>>>(dD, dA, dB, 10);
    float ms = 0.0f, best = 1e30f;
    for (int t = 0; t < 5; t++) {
        CK(cudaEventRecord(e0));
        ss_kk_kernel<<<blocks, 128>>>(dD, dA, dB, reps);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best) best = ms;
    }
    double flop = 2.0 * N * N * N * (double)reps * blocks;
    printf("ss_kk rate: %d blocks x %d x (64x64x64): %.3f ms, %.0f TFLOP/s\n", blocks, reps, best,
           flop / best / 1e9);
    return all ? 0 : 1;
}
