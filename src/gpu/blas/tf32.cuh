/* tf32.cuh: the device side of the 3xTF32 split (gpu/blas/tf32.h gives the rule): the TF32
 * head and fp32 tail of every element of a strided fp32 matrix, written to two matrices
 * of their own stride. C-callable. Not here: the products that use them (gpu/blas/matmul.c). */
#ifndef LB_GPU_BLAS_TF32_CUH
#define LB_GPU_BLAS_TF32_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"

/* For the rows x cols matrix src (row stride ld_src elements): hi[r*ld_dst + c] and
 * lo[r*ld_dst + c] = lb_tf32_split(src[r*ld_src + c]). 16-byte accesses when cols and
 * both strides are multiples of 4 and the pointers 16-byte aligned; element by element
 * otherwise. hi and lo must not overlap src. */
lb_status lb_gpu_tf32_split(float *hi, float *lo, int64_t ld_dst, const float *src, int64_t ld_src,
                            int64_t rows, int64_t cols, cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
