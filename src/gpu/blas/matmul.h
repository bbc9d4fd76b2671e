/* matmul.h: matrix products through cuBLASLt, described in row-major terms.
 *
 * D[m,n] = alpha * A'[m,k] B'[k,n] + beta * C[m,n] (+ bias[n]) (then the epilogue), where
 * A' is A stored row-major as [m,k] or, with trans_a, as [k,m]; likewise B' and trans_b
 * ([k,n] or [n,k]). All leading dimensions are row strides in elements. Inputs may be
 * fp32, fp16 or bf16 (A and B of one type); accumulation is always fp32; D may be fp32 even
 * for 16-bit inputs (fp32 weight gradients). How fp32 inputs are multiplied is the
 * handle's fp32 mode (lb_blas_fp32_mode below). C, when given, has D's type and stride and may be D
 * itself (that is how gradients accumulate and how the residual add fuses into a projection). The
 * wrapper maps the row-major problem onto column-major cuBLASLt by swapping the operands, and
 * caches a prepared descriptor set plus one algorithm per distinct problem (shape, types, strides,
 * epilogue, pointer alignment), so a training step sets up each shape once. With tuning on, that
 * algorithm is the fastest of the heuristic's candidates timed on the problem's first run (matmul.c
 * says how); with it off, the heuristic's first choice.
 *
 * fp32 modes: IEEE runs cuBLASLt's fp32 kernels (CUDA cores); TF32 one tensor-core pass
 * with the inputs rounded to TF32 (relative error ~1e-5 to 4e-5); 3XTF32 splits each
 * operand X into hi (X rounded to TF32) and lo = X - hi (gpu/blas/tf32.h) and runs
 * D = A_hi B_hi (with the caller's beta, C and bias), then D += A_hi B_lo + A_lo B_hi
 * (one product over 2k) as TF32 tensor-core products (A_lo B_lo, ~2^-22 relative, is
 * dropped): near-fp32 error at three TF32 products' FLOPs. The copies live in a scratch
 * buffer the caller gives the handle (lb_blas_gemm_scratch_bytes sizes it). INT8 cuts
 * each operand's rows into LB_SLICES signed 7-bit digits under a power of two
 * per row (gpu/blas/slices.h) and sums the digit products that matter as int8 tensor-core
 * products into int32, exactly: each element of D is the exact sum of the operands as
 * cut, rounded to fp32 once. A value is cut exactly when it lies within a factor
 * 2^(7 S - 25) of the largest in its row of A (column of B), else to within about
 * 2^-(7 S - 1) of that largest, so the error stays at or below fp32 rounding unless a row
 * spans a very wide range. Its scratch (digit planes and int32 products) also comes from the
 * caller. AUTO times, on a problem's first run, the IEEE product (its tuned cuBLASLt kernel) and
 * the INT8 one (TUNE_REPS runs each) and keeps the faster for that problem; with tuning
 * off, and for a problem that accumulates into D in place or whose planes would not fit
 * the scratch, IEEE.
 * The GELU epilogues are neither split nor cut: their problems run as IEEE fp32 products
 * in those modes (the model computes fp32 GELU with its own kernels, so it never asks for
 * them).
 * Not here: batched or strided-batched products, fp8. */
#ifndef LB_GPU_BLAS_MATMUL_H
#define LB_GPU_BLAS_MATMUL_H

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
} lb_blas_gemm;

typedef enum {
    LB_BLAS_FP32_IEEE = 0, /* fp32 kernels on CUDA cores */
    LB_BLAS_FP32_TF32,     /* one TF32 tensor-core pass (--tf32) */
    LB_BLAS_FP32_3XTF32,   /* hi/lo split, three TF32 passes: near-fp32 error */
    LB_BLAS_FP32_INT8,     /* int8 digit planes, exact integer sums: fp32 error or better */
    LB_BLAS_FP32_AUTO,     /* per problem the faster of IEEE and INT8, timed on its first run */
} lb_blas_fp32_mode;

#define LB_BLAS_FP32_MODE_CHOICES "auto|ieee|tf32|3xtf32|int8"

/* "ieee", "tf32", "3xtf32", "int8", "auto" */
const char *lb_blas_fp32_mode_name(lb_blas_fp32_mode m);
/* false when s is none of the names */
bool lb_blas_fp32_mode_parse(const char *s, lb_blas_fp32_mode *out);

typedef struct {
    void *workspace;             /* device memory for cuBLASLt (caller's, e.g. an arena piece) */
    size_t workspace_bytes;      /* bytes of workspace; 0 with NULL */
    lb_blas_fp32_mode fp32_mode; /* how fp32 inputs are multiplied */
    bool tune;                   /* time the heuristic's candidates on each problem's first run */
    void *split_scratch;         /* device memory for the 3XTF32 copies or the INT8 planes
                                  * (caller's) */
    size_t split_scratch_bytes;  /* bytes of split_scratch: at least lb_blas_gemm_scratch_bytes
                                  * of every fp32 problem run in fp32_mode */
} lb_blas_params;

lb_blas_params lb_blas_default_params(void);

typedef struct lb_blas lb_blas;

/* Creates the cuBLASLt handle; the device buffers in p stay the caller's. A problem that
 * needs more split scratch than p gives fails with LB_ERR_NOMEM when it runs. Caller frees
 * with lb_blas_free. */
lb_status lb_blas_init(lb_blas **out, const lb_blas_params *p, lb_err *err);
void lb_blas_free(lb_blas *h);

/* Bytes of split scratch an m x n x k fp32 problem needs in `mode`, whatever its
 * transposes: 3XTF32 hi and lo copies of both operands (rows padded to 16 bytes); INT8
 * and AUTO both operands' digit planes and the int32 products of D (or of a round of its
 * rows); 0 in the other modes. No device needed. */
size_t lb_blas_gemm_scratch_bytes(lb_blas_fp32_mode mode, int64_t m, int64_t n, int64_t k);

/* Runs g on `stream` (a cudaStream_t; NULL for the default stream). LB_ERR_UNSUPPORTED
 * when cuBLASLt has no algorithm for the combination. */
lb_status lb_blas_gemm_run(lb_blas *h, const lb_blas_gemm *g, void *stream, lb_err *err);

/* Number of distinct problems prepared so far (the heuristic cache's size). */
int lb_blas_cached(const lb_blas *h);

/* split-K and stream-K algorithms need workspace; more than 32 MiB widens their choice */
#define LB_BLAS_WORKSPACE_BYTES ((size_t)64 << 20)

#ifdef __cplusplus
}
#endif

#endif
