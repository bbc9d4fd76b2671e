/* common.cuh: what every llmbench kernel file shares: element-type traits (fp32, fp16,
 * bf16 storage with fp32 arithmetic), warp and block reductions, launch helpers, and the
 * dispatch from a run-time lb_gpu_dtype to a template parameter. Internal to the .cu files of src/gpu;
 * the C-callable interfaces are the per-family .cuh headers. */
#ifndef LB_GPU_COMMON_CUH
#define LB_GPU_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gpu/check.h"
#include "gpu/dtype.h"

template <typename T> __device__ __forceinline__ float lb_to_f(T x);
template <> __device__ __forceinline__ float lb_to_f<float>(float x) { return x; }
template <> __device__ __forceinline__ float lb_to_f<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float lb_to_f<__nv_bfloat16>(__nv_bfloat16 x) {
    return __bfloat162float(x);
}

template <typename T> __device__ __forceinline__ T lb_from_f(float x);
template <> __device__ __forceinline__ float lb_from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half lb_from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 lb_from_f<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float lb_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float lb_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over a block of up to 1024 threads; every thread gets the result. `scratch` holds
 * 32 floats of shared memory; the call contains barriers. */
__device__ __forceinline__ float lb_block_sum(float v, float *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = lb_warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : 0.0f;
    return lb_warp_sum(v);
}
__device__ __forceinline__ float lb_block_max(float v, float *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = lb_warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : -INFINITY;
    return lb_warp_max(v);
}

static inline unsigned lb_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 0 ? b : 1);
}

/* Grid size for grid-stride loops: enough blocks to fill the GPU a few times over. */
static inline unsigned lb_grid_cap(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b > 132 * 16) b = 132 * 16;
    return (unsigned)(b > 0 ? b : 1);
}

/* Runs `body` with `T` bound to the element type of dtype `dt`. */
#define LB_DISPATCH_DTYPE(dt, T, ...)                                                       \
    do {                                                                                   \
        switch (dt) {                                                                      \
        case LB_DT_F32: { typedef float T; __VA_ARGS__; } break;                           \
        case LB_DT_F16: { typedef __half T; __VA_ARGS__; } break;                          \
        case LB_DT_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;                  \
        }                                                                                  \
    } while (0)

#endif
