/* dtype.h: element types of device buffers. A run's precision (core/precision.h) picks the
 * activation type; master weights, gradients and optimizer state stay fp32. */
#ifndef LB_GPU_DTYPE_H
#define LB_GPU_DTYPE_H

#include <stddef.h>

typedef enum {
    LB_DT_F32 = 0,
    LB_DT_F16,
    LB_DT_BF16,
} lb_gpu_dtype;

static inline size_t lb_dtype_bytes(lb_gpu_dtype t) {
    return t == LB_DT_F32 ? 4 : 2;
}
static inline const char *lb_dtype_name(lb_gpu_dtype t) {
    return t == LB_DT_F32 ? "fp32" : t == LB_DT_F16 ? "fp16" : "bf16";
}

#endif
