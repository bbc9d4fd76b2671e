/* norm.cuh: LayerNorm and RMSNorm, forward and backward (C-callable).
 * Shapes and formulas as model/ref.h: N rows of C. Activations have type dt, the
 * weight and bias the working-copy type dt, statistics (mean, rstd) are fp32 [N] and kept
 * for backward. Backward ADDS into dinp (type dt: the residual-stream gradient) and into
 * the fp32 dweight, dbias (block partial sums in shared memory, then one atomicAdd per
 * block and channel). dweight, bias and dbias may be NULL (a frozen norm: no weight
 * gradient computed); mean is unused (NULL) for RMSNorm. dsum,
 * when not NULL, gets the column sums of dinp as written (fp32 [C], added the same way):
 * the bias gradient of the linear map whose output gradient is that residual gradient,
 * with no pass of its own. */
#ifndef LB_KERNELS_NORM_CUH
#define LB_KERNELS_NORM_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

/* out's rows are ldo >= C apart (columns C.. of each row are left alone) */
lb_status lb_norm_layernorm_forward(void *out, int64_t ldo, float *mean, float *rstd,
                                    const void *inp, const void *weight, const void *bias,
                                    int64_t N, int C, float eps, lb_gpu_dtype dt, cudaStream_t s,
                                    lb_err *err);
lb_status lb_norm_layernorm_backward(void *dinp, float *dweight, float *dbias, float *dsum,
                                     const void *dout, const void *inp, const void *weight,
                                     const float *mean, const float *rstd, int64_t N, int C,
                                     lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
lb_status lb_norm_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *weight,
                                  int64_t N, int C, float eps, lb_gpu_dtype dt, cudaStream_t s,
                                  lb_err *err);
lb_status lb_norm_rmsnorm_backward(void *dinp, float *dweight, float *dsum, const void *dout,
                                   const void *inp, const void *weight, const float *rstd,
                                   int64_t N, int C, lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
/* Recomputes a norm's output (rows ldo apart) from its input and saved statistics (for
 * --recompute): LayerNorm when mean != NULL, else RMSNorm. */
lb_status lb_norm_recompute(void *out, int64_t ldo, const void *inp, const void *weight,
                            const void *bias, const float *mean, const float *rstd, int64_t N,
                            int C, lb_gpu_dtype dt, cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
