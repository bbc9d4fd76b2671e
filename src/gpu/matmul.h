/* matmul.h: matrix products through cuBLASLt, described in row-major terms.
 *
 * D[m,n] = alpha * A'[m,k] B'[k,n] + beta * C[m,n] (+ bias[n]) (then the epilogue), where
 * A' is A stored row-major as [m,k] or, with trans_a, as [k,m]; likewise B' and trans_b
 * ([k,n] or [n,k]). All leading dimensions are row strides in elements. Inputs may be
 * fp32, fp16 or bf16 (A and B of one type); accumulation is always fp32 (TF32 only when
 * the handle was created with allow_tf32); D may be fp32 even for 16-bit inputs (fp32
 * weight gradients). C, when given, has D's type and stride and may be D itself (that is
 * how gradients accumulate and how the residual add fuses into a projection).
 * The wrapper maps the row-major problem onto column-major cuBLASLt by swapping the
 * operands, and caches a prepared descriptor set plus one algorithm per distinct problem
 * (shape, types, strides, epilogue, pointer alignment), so a training step sets up each
 * shape once. With tuning on, that algorithm is the fastest of the heuristic's candidates
 * timed on the problem's first run (matmul.c says how); with it off, the heuristic's first
 * choice. Not here: batched or strided-batched products, fp8. */
#ifndef LB_GPU_MATMUL_H
#define LB_GPU_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"


typedef enum {
    LB_EPI_NONE = 0,
    LB_EPI_BIAS,          /* + bias[n] */
    LB_EPI_GELU_AUX_BIAS, /* aux = AB + bias (pre-activation); D = gelu_tanh(aux) */
    LB_EPI_DGELU,         /* D = (AB) * gelu_tanh'(aux): backward through the GELU */
} lb_gpu_epilogue;

typedef struct {
    int64_t m, n, k;
    const void *a;
    int64_t lda;
    bool trans_a;
    const void *b;
    int64_t ldb;
    bool trans_b;
    lb_gpu_dtype ab_type;
    const void *c; /* NULL: beta is ignored (treated as 0) */
    void *d;
    int64_t ldd;
    lb_gpu_dtype d_type;
    float alpha, beta;
    lb_gpu_epilogue epilogue;
    const void *bias; /* d_type elements, [n] */
    void *aux;        /* d_type, [m,n] with stride ldd */
} lb_gpu_gemm;

typedef struct lb_gpu_blas lb_gpu_blas;

/* Creates the cuBLASLt handle. workspace (device memory, owned by the caller, e.g. an
 * arena piece) may be NULL with workspace_bytes 0. tune: time the heuristic's candidates
 * on each problem's first run (that run takes longer) instead of taking its first choice.
 * Caller frees with lb_gpu_blas_free. */
lb_status lb_gpu_blas_init(lb_gpu_blas **out, void *workspace, size_t workspace_bytes,
                           bool allow_tf32, bool tune, lb_err *err);
void lb_gpu_blas_free(lb_gpu_blas *h);

/* Runs g on `stream` (a cudaStream_t; NULL for the default stream). LB_ERR_UNSUPPORTED
 * when cuBLASLt has no algorithm for the combination. */
lb_status lb_gpu_gemm_run(lb_gpu_blas *h, const lb_gpu_gemm *g, void *stream, lb_err *err);

/* Number of distinct problems prepared so far (the heuristic cache's size). */
int lb_gpu_blas_cached(const lb_gpu_blas *h);

/* split-K and stream-K algorithms need workspace; more than 32 MiB widens their choice */
#define LB_GPU_BLAS_WORKSPACE_BYTES ((size_t)64 << 20)

#ifdef __cplusplus
}
#endif

#endif
