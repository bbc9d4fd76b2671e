/* act.cuh: element-wise kernels (C-callable): GELU-tanh and SwiGLU forward and backward,
 * the bias gradient (column sums), type conversion, constant and random fills. Formulas as model/ref_ops.h.
 * Backward kernels OVERWRITE dinp (the model never needs to add to these gradients; the
 * selftest compares against the reference applied to zeroed buffers). */
#ifndef LB_GPU_ACT_CUH
#define LB_GPU_ACT_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"


lb_status lb_gpu_gelu_forward(void *out, const void *inp, int64_t n, lb_gpu_dtype dt,
                              cudaStream_t s, lb_err *err);
/* dinp = gelu'(inp) * dout; dinp may alias dout. */
lb_status lb_gpu_gelu_backward(void *dinp, const void *inp, const void *dout, int64_t n,
                               lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
/* inp [N, 2F] (gate then up per row) -> out [N, F]. */
lb_status lb_gpu_swiglu_forward(void *out, const void *inp, int64_t N, int F, lb_gpu_dtype dt,
                                cudaStream_t s, lb_err *err);
/* dinp [N, 2F] = (d gate, d up) from dout [N, F]. */
lb_status lb_gpu_swiglu_backward(void *dinp, const void *dout, const void *inp, int64_t N, int F,
                                 lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
/* dbias[OC] (fp32) += sum over the N rows of dout [N, OC] (row stride ld). */
lb_status lb_gpu_bias_backward(float *dbias, const void *dout, int64_t N, int OC, int64_t ld,
                               lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
/* out[i] = (type dt_out) in[i] for n elements (any pair of types). */
lb_status lb_gpu_convert(void *out, lb_gpu_dtype dt_out, const void *in, lb_gpu_dtype dt_in,
                         int64_t n, cudaStream_t s, lb_err *err);
/* x[0..n-1] = value (fp32). */
lb_status lb_gpu_fill(float *x, int64_t n, float value, cudaStream_t s, lb_err *err);
/* x[i] = std * N(0,1), a counter-based normal draw of (seed, first_index + i): the same
 * (seed, index) always gives the same value, whatever the launch shape. */
lb_status lb_gpu_fill_normal(float *x, int64_t n, float std, uint64_t seed, int64_t first_index,
                             cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
