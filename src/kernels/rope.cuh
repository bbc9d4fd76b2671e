/* rope.cuh: rotary position embedding on the q and k heads of a qkv tensor, in place
 * (C-callable). Layout, "rotate half" convention and the llama3-scaled frequencies as
 * model/ref.h: inv_freq [HD/2] fp32 on the device (computed once on the host by
 * lb_ref_rope_freqs). lb_rope_table turns it into the (cos, sin) table cs
 * [T][HD/2][2] (fp32, device) that the rotations read. Backward is the rotation by the
 * negative angle, also in place. Inference rotates each token to its own position inside
 * kernels/paged.cuh's KV store. */
#ifndef LB_KERNELS_ROPE_CUH
#define LB_KERNELS_ROPE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

lb_status lb_rope_table(float *cs, const float *inv_freq, int T, int HD, cudaStream_t s,
                        lb_err *err);
lb_status lb_rope_forward(void *qkv, const float *cs, int B, int T, int NH, int NKV, int HD,
                          lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
lb_status lb_rope_backward(void *dqkv, const float *cs, int B, int T, int NH, int NKV, int HD,
                           lb_gpu_dtype dt, cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
