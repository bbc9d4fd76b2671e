/* nf4.cuh: NF4 quantisation and dequantisation on the device (C-callable), the format of
 * model/nf4.h: blocks of 64 weights with an absmax each, two 4-bit code indices a byte
 * (the even element in the high nibble), the absmax values centred on their mean and kept
 * as int8 under one fp32 scale per 256 of them. The 16 code values come from the caller
 * (model/nf4.h's table) by value, so the table has one home.
 *
 * Quantising is two launches and a reduction (at initialisation; nothing there is timed):
 * codes and exact absmax per block, then the mean and the 8-bit absmax. Dequantising is
 * one pass that writes the working type, 8 weights a thread: it is what QLoRA's frozen
 * projections cost before each product. Not here: products on NF4 operands. */
#ifndef LB_KERNELS_NF4_CUH
#define LB_KERNELS_NF4_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

typedef struct {
    float v[16]; /* ascending code values */
} lb_nf4_gpu_code;

/* w [n] fp32 -> codes [(n + 1) / 2] and the exact absmax [ceil(n / 64)] (fp32). */
lb_status lb_nf4_gpu_quantize(uint8_t *codes, float *absmax, const float *w, int64_t n,
                              lb_nf4_gpu_code code, cudaStream_t s, lb_err *err);
/* The double quantisation of absmax [n_blocks]: *mean (device) = their mean (summed in
 * double), absmax_q [n_blocks] and scale [ceil(n_blocks / 256)] as model/nf4.h. */
lb_status lb_nf4_gpu_double_quantize(int8_t *absmax_q, float *scale, float *mean,
                                     const float *absmax, int64_t n_blocks, cudaStream_t s,
                                     lb_err *err);
/* out [n] (type dt) = code[c_i] * (absmax_q[i / 64] * scale[i / 16384] + *mean). n a
 * multiple of 8. */
lb_status lb_nf4_gpu_dequantize(void *out, lb_gpu_dtype dt, const uint8_t *codes,
                                const int8_t *absmax_q, const float *scale, const float *mean,
                                int64_t n, lb_nf4_gpu_code code, cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
