/* gemv.cuh: products of a few rows against a weight matrix that is read once, the
 * products of a decode step at small batches (C-callable):
 * y[m, n] = sum_k x[m, k] W[n, k] (+ res[m, n]) for m < M, n < OC, with x [M, K], W
 * [OC, K] and res [M, OC] row-major of one type, y of type y_type, fp32 sums.
 *
 * A warp computes one output column n for all M rows: it streams W's row n in 16-byte
 * loads, four in flight a lane, and takes x's rows from L1; the lanes' sums meet by
 * shuffles. The bound is the weights' bytes over the memory bandwidth, where cuBLASLt's
 * kernels at a handful of rows reach less of it (bench/engine_probe measures both; the
 * engine times both per product and keeps the faster). Not here: more than
 * LB_GEMV_MAX_ROWS rows, K not a multiple of 256, pointers not 16-byte aligned
 * (lb_gemv_fits says which). */
#ifndef LB_KERNELS_GEMV_CUH
#define LB_KERNELS_GEMV_CUH

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

#define LB_GEMV_MAX_ROWS 8

/* Whether lb_gemv runs this problem. */
bool lb_gemv_fits(int M, int64_t K, const void *x, const void *w, const void *res);

/* y = x W^T (+ res) as above; res may be NULL, and may not be y. LB_ERR_UNSUPPORTED where
 * lb_gemv_fits says no. */
lb_status lb_gemv(void *y, lb_gpu_dtype y_type, const void *x, const void *w, const void *res,
                  int M, int64_t K, int64_t OC, lb_gpu_dtype dt, cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
