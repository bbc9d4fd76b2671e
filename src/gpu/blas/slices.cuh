/* slices.cuh: the device side of the int8 products' digits (gpu/blas/slices.h gives the rule):
 * cutting an fp32 operand into digit planes, and summing the planes' integer products
 * back into an fp32 result. C-callable. Not here: the products themselves
 * (gpu/blas/matmul.c). */
#ifndef LB_GPU_BLAS_SLICES_CUH
#define LB_GPU_BLAS_SLICES_CUH

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"

/* Cuts `rows` rows of k values into S = LB_SLICES digit planes. Row r of src is
 * src[r*ld + p] (p < k) when k_contig, else src[p*ld + r]. Writes dst row r (int8, stride
 * S*kp; kp >= k, a multiple of 16) as the planes side by side, digit i at [i*kp, i*kp + k)
 * (at [(S-1-i)*kp, ...) when `reversed`), zeros in [k, kp) of each, and
 * amax[r] = the bit pattern of the row's largest magnitude (NaN above infinity above the
 * finite values, as unsigned integers; lb_slice_exponent of it is the row's exponent).
 * amax must be zeroed first when !k_contig (the column path takes the maximum with
 * atomics). */
lb_status lb_gpu_slices_cut(int8_t *dst, uint32_t *amax, const float *src, int64_t ld,
                            bool k_contig, int64_t rows, int64_t k, int64_t kp, bool reversed,
                            cudaStream_t st, lb_err *err);

/* d[i*ldd + j] = alpha * 2^(ea_i + eb_j - 12 - 7(S-1)) * sum_t P_t[i*n + j] 2^(7(S-t))
 *                (+ beta * c[i*ldd + j] when c) (+ bias[j] when bias)
 * for i < m, j < n, where P_t (t = 1..S) is the int32 plane p + (t-1)*m*n and ea, eb are
 * the exponents of amax_a[i], amax_b[j]. The planes' sum is exact in int64 and rounded to
 * fp32 once; a row or column whose amax is not finite gives NaN. c may be d. */
lb_status lb_gpu_slices_combine(float *d, int64_t ldd, const int32_t *p, const uint32_t *amax_a,
                                const uint32_t *amax_b, int64_t m, int64_t n, float alpha,
                                const float *c, float beta, const float *bias, cudaStream_t st,
                                lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
