/* act.cuh: element-wise kernels (C-callable): GELU-tanh and SwiGLU forward and backward,
 * the bias gradient (column sums), type conversion, constant and random fills. Formulas as
 * model/ref.h. Backward kernels OVERWRITE dinp (the model never needs to add to these
 * gradients; the selftest compares against the reference applied to zeroed buffers). */
#ifndef LB_KERNELS_ACT_CUH
#define LB_KERNELS_ACT_CUH

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

lb_status lb_act_gelu_forward(void *out, const void *inp, int64_t n, lb_gpu_dtype dt,
                              cudaStream_t s, lb_err *err);
/* dinp = gelu'(inp) * dout; dinp may alias dout. */
lb_status lb_act_gelu_backward(void *dinp, const void *inp, const void *dout, int64_t n,
                               lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
/* inp [N, 2F] (gate then up per row) -> out [N, F]. */
lb_status lb_act_swiglu_forward(void *out, const void *inp, int64_t N, int F, lb_gpu_dtype dt,
                                cudaStream_t s, lb_err *err);
/* dinp [N, 2F] = (d gate, d up) from dout [N, F]. */
lb_status lb_act_swiglu_backward(void *dinp, const void *dout, const void *inp, int64_t N, int F,
                                 lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
/* dbias[OC] (fp32) += sum over the N rows of dout [N, OC] (row stride ld). */
lb_status lb_act_bias_backward(float *dbias, const void *dout, int64_t N, int OC, int64_t ld,
                               lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
/* Attention's value-bias gradient from its output projection's bias gradient. Each row
 * of attention weights sums to 1, so a value bias reaches the attention output unchanged
 * and its gradient is the column sums of that output's gradient: dsum W for a projection
 * y = x W^T + b (W [OC, IC]) whose bias gradient dsum [OC] (fp32) is the column sums of
 * dy. dbias += dsum W, input column j (query head j / hd) adding into value entry
 * ((j / hd) / group) hd + j % hd: group query heads share a value head (1 without
 * grouped-query attention). W of type dt. */
lb_status lb_act_bias_grad_through(float *dbias, const float *dsum, const void *W, int OC, int IC,
                                   int hd, int group, lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
/* Column col of x's rows (ld apart) set to 1, the width - 1 columns after it to 0: a ones
 * column that makes a product over x's rows also sum the other operand's rows. */
lb_status lb_act_ones_column(void *x, int64_t rows, int64_t ld, int col, int width, lb_gpu_dtype dt,
                             cudaStream_t s, lb_err *err);
/* src [rows, ld] fp32, a weight gradient with its bias gradient in column cols: dw [rows,
 * cols] (type dw_type, packed) = the first cols columns (add: += them, gradient
 * accumulation), dbias[rows] (fp32) += column cols. cols a multiple of 8, ld a multiple of 4
 * above cols, src and dw 16-byte aligned. */
lb_status lb_act_split_bias_column(void *dw, lb_gpu_dtype dw_type, float *dbias, const float *src,
                                   int rows, int cols, int64_t ld, bool add, cudaStream_t s,
                                   lb_err *err);
/* out[i] = (type dt_out) in[i] for n elements (any pair of types). */
lb_status lb_act_convert(void *out, lb_gpu_dtype dt_out, const void *in, lb_gpu_dtype dt_in,
                         int64_t n, cudaStream_t s, lb_err *err);
/* acc[i] += (fp32) in[i] for n elements of type dt_in (fp32 acc). */
lb_status lb_act_accumulate(float *acc, const void *in, lb_gpu_dtype dt_in, int64_t n,
                            cudaStream_t s, lb_err *err);
/* x[0..n-1] = value (fp32). */
lb_status lb_act_fill(float *x, int64_t n, float value, cudaStream_t s, lb_err *err);
/* x[i] = std * N(0,1), a counter-based normal draw of (seed, first_index + i): the same
 * (seed, index) always gives the same value, whatever the launch shape. */
lb_status lb_act_fill_normal(float *x, int64_t n, float std, uint64_t seed, int64_t first_index,
                             cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
