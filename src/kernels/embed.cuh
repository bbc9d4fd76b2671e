/* embed.cuh: token (and learned position) embeddings, forward and backward.
 * C-callable; tensors as in model/ref.h. Activations have type dt, parameters `wte`,
 * `wpe` have type dt too (the working copy), gradients are fp32. wpe may be NULL (Llama).
 * Backward accumulates into dwte with atomics (order-dependent rounding, fp32) and into
 * dwpe by a deterministic per-(t,c) loop over the batch. */
#ifndef LB_KERNELS_EMBED_CUH
#define LB_KERNELS_EMBED_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

lb_status lb_embed_forward(void *out, const int32_t *inp, const void *wte, const void *wpe, int B,
                           int T, int C, lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
/* dwte += ; dwpe += (when non-NULL). dout has type dt. */
lb_status lb_embed_backward(float *dwte, float *dwpe, const void *dout, const int32_t *inp, int B,
                            int T, int C, lb_gpu_dtype dt, cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
