/* fp32_emulation_probe.c: does cuBLASLt's BF16x9 emulation of fp32 products
 * (CUBLAS_COMPUTE_32F_EMULATED_16BFX9) run on this GPU, how fast against plain fp32
 * (CUBLAS_COMPUTE_32F), TF32 and the 3xTF32 split, and how accurate against an fp64
 * reference? The 3xtf32 row splits each operand on the host into hi (rounded to TF32,
 * ties away) and lo = x - hi, then runs hi.hi (beta 0), hi.lo and lo.hi (beta 1) as three
 * TF32 products (llmbench's gpu/blas/matmul.c runs the two corrections as one product over 2k);
 * its time is the products only (the split, 12 bytes moved per element, is not timed).
 *
 * Shapes: the products of GPT-2 124M at 32 x 128 tokens (m = 4096 rows), forward (NT:
 * x[m,k] . W[n,k]^T) and the two backward forms (NN for the input gradient, TN for the
 * weight gradient). Data: uniform random in [-1, 1], fresh per shape. Error: max over 512
 * sampled outputs of |d - ref| / (sum_k |a_ik b_kj|), the error bound's natural scale.
 * Time: median of 15 runs between CUDA events after 3 warm-up runs; TFLOP/s is 2mnk over
 * that time (for 3xtf32 the effective rate of the fp32-accurate product).
 *
 * build: nvcc -O2 -o fp32_emulation_probe bench/fp32_emulation_probe.c -lcublasLt
 * usage: fp32_emulation_probe   (prints one table row per shape and compute type) */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_check.h"

typedef struct {
    const char *name;
    int m, n, k, ta,
        tb; /* row-major D[m,n] = op(A) op(B); ta: A stored [k,m]; tb: B stored [n,k] */
} shape;

static double now_rand(unsigned long long *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

/* x = hi + lo with hi rounded to TF32 (ties away; a finite value that would round to
 * infinity is truncated) and lo exact. */
static void split_tf32(float x, float *hi, float *lo) {
    uint32_t u, r;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) {
        *hi = x, *lo = 0.0f;
        return;
    }
    r = (u + 0x1000u) & 0xffffe000u;
    if ((r & 0x7f800000u) == 0x7f800000u) r = u & 0xffffe000u;
    memcpy(hi, &r, 4);
    *lo = x - *hi;
}

/* Runs D = sum over p < n_pass of op(A[p]) op(B[p]) (the first with beta 0, the rest adding
 * into D) with compute type ct; returns the median ms of the n_pass products, or -1 when
 * cuBLASLt offers no algorithm. */
static float run(cublasLtHandle_t lt, cublasComputeType_t ct, int emulate, const shape *s,
                 const float *const *a, const float *const *b, int n_pass, float *d, void *ws,
                 size_t ws_bytes) {
    cublasLtMatmulDesc_t op;
    CK(cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F));
    cublasLtEmulationDesc_t em = NULL;
    if (emulate) {
        CK(cublasLtEmulationDescCreate(&em));
        int32_t strategy = CUBLAS_EMULATION_STRATEGY_EAGER;
        CK(cublasLtEmulationDescSetAttribute(em, CUBLASLT_EMULATION_DESC_STRATEGY, &strategy,
                                             sizeof strategy));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, &em,
                                          sizeof em));
    }
    /* column-major: cuBLAS "A" = our B, "B" = our A */
    cublasOperation_t opa = s->tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                      opb = s->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublasLtMatrixLayout_t la, lb, ld;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, s->tb ? s->k : s->n, s->tb ? s->n : s->k,
                                  s->tb ? s->k : s->n));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, s->ta ? s->m : s->k, s->ta ? s->k : s->m,
                                  s->ta ? s->m : s->k));
    CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, s->n, s->m, s->n));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &ws_bytes, sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &h, &found);
    float med = -1.0f;
    if (hs == CUBLAS_STATUS_SUCCESS && found > 0) {
        float alpha = 1.0f, zero = 0.0f, one = 1.0f, t[15];
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        for (int r = 0; r < 18; r++) {
            if (r >= 3) CK(cudaEventRecord(e0, 0));
            for (int p = 0; p < n_pass; p++)
                CK(cublasLtMatmul(lt, op, &alpha, b[p], la, a[p], lb, p == 0 ? &zero : &one, d, ld,
                                  d, ld, &h.algo, ws, ws_bytes, 0));
            if (r >= 3) {
                CK(cudaEventRecord(e1, 0));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&t[r - 3], e0, e1));
            }
        }
        med = probe_median(t, 15);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    if (em) cublasLtEmulationDescDestroy(em);
    return med;
}

int main(void) {
    const shape shapes[] = {
        {"qkv fwd", 4096, 2304, 768, 0, 1},  {"fc fwd", 4096, 3072, 768, 0, 1},
        {"proj fwd", 4096, 768, 3072, 0, 1}, {"head fwd", 4096, 50304, 768, 0, 1},
        {"head dx", 4096, 768, 50304, 0, 0}, {"head dW", 50304, 768, 4096, 1, 0},
        {"fc dW", 3072, 768, 4096, 1, 0},
    };
    const struct {
        const char *name;
        cublasComputeType_t ct;
        int emulate, split;
    } kinds[] = {{"fp32", CUBLAS_COMPUTE_32F, 0, 0},
                 {"bf16x9", CUBLAS_COMPUTE_32F_EMULATED_16BFX9, 1, 0},
                 {"tf32", CUBLAS_COMPUTE_32F_FAST_TF32, 0, 0},
                 {"3xtf32", CUBLAS_COMPUTE_32F_FAST_TF32, 0, 1}};
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int ver = 0;
    cudaRuntimeGetVersion(&ver);
    printf("device: %s (sm_%d%d), cuBLASLt %zu, CUDA runtime %d\n", prop.name, prop.major,
           prop.minor, cublasLtGetVersion(), ver);
    cublasLtHandle_t lt;
    CK(cublasLtCreate(&lt));
    size_t ws_bytes = (size_t)64 << 20;
    void *ws;
    CK(cudaMalloc(&ws, ws_bytes));
    unsigned long long seed = 12345;
    printf("%-9s %-7s %9s %9s %10s\n", "product", "compute", "ms", "TFLOP/s", "max err");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n, nd = (size_t)s->m * s->n;
        float *ha = malloc(na * sizeof *ha), *hb = malloc(nb * sizeof *hb),
              *hd = malloc(nd * sizeof *hd);
        for (size_t j = 0; j < na; j++)
            ha[j] = (float)now_rand(&seed);
        for (size_t j = 0; j < nb; j++)
            hb[j] = (float)now_rand(&seed);
        float *da, *db, *dd, *dsplit[4]; /* a_hi, a_lo, b_hi, b_lo */
        CK(cudaMalloc((void **)&da, na * sizeof *da));
        CK(cudaMalloc((void **)&db, nb * sizeof *db));
        CK(cudaMalloc((void **)&dd, nd * sizeof *dd));
        CK(cudaMemcpy(da, ha, na * sizeof *da, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(db, hb, nb * sizeof *db, cudaMemcpyHostToDevice));
        float *tmp = malloc((na > nb ? na : nb) * 2 * sizeof *tmp);
        for (int q = 0; q < 2; q++) {
            size_t n = q == 0 ? na : nb;
            const float *src = q == 0 ? ha : hb;
            for (size_t j = 0; j < n; j++)
                split_tf32(src[j], &tmp[j], &tmp[n + j]);
            CK(cudaMalloc((void **)&dsplit[2 * q], n * sizeof(float)));
            CK(cudaMalloc((void **)&dsplit[2 * q + 1], n * sizeof(float)));
            CK(cudaMemcpy(dsplit[2 * q], tmp, n * sizeof(float), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dsplit[2 * q + 1], tmp + n, n * sizeof(float), cudaMemcpyHostToDevice));
        }
        free(tmp);
        const float *one_a[1] = {da}, *one_b[1] = {db};
        const float *three_a[3] = {dsplit[0], dsplit[0], dsplit[1]};
        const float *three_b[3] = {dsplit[2], dsplit[3], dsplit[2]};
        for (size_t kk = 0; kk < sizeof kinds / sizeof kinds[0]; kk++) {
            CK(cudaMemset(dd, 0xff, nd * sizeof *dd)); /* NaN: a product that did not run shows */
            int sp = kinds[kk].split;
            float ms = run(lt, kinds[kk].ct, kinds[kk].emulate, s, sp ? three_a : one_a,
                           sp ? three_b : one_b, sp ? 3 : 1, dd, ws, ws_bytes);
            if (ms < 0) {
                printf("%-9s %-7s %9s\n", s->name, kinds[kk].name, "no algo");
                continue;
            }
            CK(cudaMemcpy(hd, dd, nd * sizeof *hd, cudaMemcpyDeviceToHost));
            double worst = 0.0;
            for (int t = 0; t < 512; t++) {
                size_t r = (size_t)((now_rand(&seed) * 0.5 + 0.5) * (s->m - 1));
                size_t c = (size_t)((now_rand(&seed) * 0.5 + 0.5) * (s->n - 1));
                double ref = 0.0, scale = 0.0;
                for (int q = 0; q < s->k; q++) {
                    double x = s->ta ? ha[(size_t)q * s->m + r] : ha[r * s->k + q];
                    double y = s->tb ? hb[c * s->k + q] : hb[(size_t)q * s->n + c];
                    ref += x * y;
                    scale += fabs(x * y);
                }
                double e = fabs((double)hd[r * s->n + c] - ref) / scale;
                if (!(e <= worst)) worst = e; /* NaN propagates */
            }
            printf("%-9s %-7s %9.3f %9.1f %10.2e\n", s->name, kinds[kk].name, ms,
                   2.0 * s->m * s->n * s->k / (ms * 1e-3) / 1e12, worst);
        }
        cudaFree(da);
        cudaFree(db);
        cudaFree(dd);
        for (int q = 0; q < 4; q++)
            cudaFree(dsplit[q]);
        free(ha);
        free(hb);
        free(hd);
    }
    cudaFree(ws);
    cublasLtDestroy(lt);
    return 0;
}
