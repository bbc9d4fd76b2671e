/* common.cuh: what every llmbench kernel file shares: element-type traits (fp32, fp16,
 * bf16 storage with fp32 arithmetic), warp and block reductions, launch helpers, and the
 * dispatch from a run-time lb_gpu_dtype to a template parameter. Internal to the .cu files of
 * src/gpu; the C-callable interfaces are the per-family .cuh headers. */
#ifndef LB_GPU_COMMON_CUH
#define LB_GPU_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gpu/check.h"
#include "gpu/dtype.h"

template <typename T> __device__ __forceinline__ float lb_to_f(T x);
template <> __device__ __forceinline__ float lb_to_f<float>(float x) {
    return x;
}
template <> __device__ __forceinline__ float lb_to_f<__half>(__half x) {
    return __half2float(x);
}
template <> __device__ __forceinline__ float lb_to_f<__nv_bfloat16>(__nv_bfloat16 x) {
    return __bfloat162float(x);
}

template <typename T> __device__ __forceinline__ T lb_from_f(float x);
template <> __device__ __forceinline__ float lb_from_f<float>(float x) {
    return x;
}
template <> __device__ __forceinline__ __half lb_from_f<__half>(float x) {
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 lb_from_f<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

/* Eight consecutive elements (16-byte aligned; 32 bytes for fp32) to and from fp32. */
__device__ __forceinline__ void lb_ld8(float f[8], const float *p) {
    float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
template <typename T> __device__ __forceinline__ void lb_ld8(float f[8], const T *p) {
    uint4 raw = *(const uint4 *)p;
    const T *e = (const T *)&raw;
#pragma unroll
    for (int i = 0; i < 8; i++)
        f[i] = lb_to_f(e[i]);
}
__device__ __forceinline__ void lb_st8(float *p, const float f[8]) {
    ((float4 *)p)[0] = make_float4(f[0], f[1], f[2], f[3]);
    ((float4 *)p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}
template <typename T> __device__ __forceinline__ void lb_st8(T *p, const float f[8]) {
    uint4 raw;
    T *e = (T *)&raw;
#pragma unroll
    for (int i = 0; i < 8; i++)
        e[i] = lb_from_f<T>(f[i]);
    *(uint4 *)p = raw;
}

/* Four consecutive elements from fp32 (p aligned to four elements). */
__device__ __forceinline__ void lb_st4(float *p, const float f[4]) {
    *(float4 *)p = make_float4(f[0], f[1], f[2], f[3]);
}
template <typename T> __device__ __forceinline__ void lb_st4(T *p, const float f[4]) {
#pragma unroll
    for (int i = 0; i < 4; i++)
        p[i] = lb_from_f<T>(f[i]);
}

__device__ __forceinline__ float lb_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float lb_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
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

#define LB_LOG2E 1.4426950408889634f

/* 2^x by the special-function unit (ex2.approx: ~2 ulp, denormals flushed; __expf's
 * instruction without its multiply) */
__device__ __forceinline__ float lb_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* sqrt(x) by the special-function unit (sqrt.approx: ~1 ulp relative, no fix-up
 * sequence) */
__device__ __forceinline__ float lb_sqrt_approx(float x) {
    float y;
    asm("sqrt.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* *p += v (p 16-byte aligned, global): one four-float reduction on sm_90, four atomics
 * before */
__device__ __forceinline__ void red_add4(float *p, float4 v) {
#if __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y),
                 "f"(v.z), "f"(v.w)
                 : "memory");
#else
    atomicAdd(p, v.x);
    atomicAdd(p + 1, v.y);
    atomicAdd(p + 2, v.z);
    atomicAdd(p + 3, v.w);
#endif
}

static inline unsigned lb_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 0 ? b : 1);
}

/* whether p may be read or written 16 bytes at a time */
static inline bool lb_aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

/* Grid size for grid-stride loops: enough blocks to fill the GPU a few times over. */
static inline unsigned lb_grid_cap(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b > 132 * 16) b = 132 * 16;
    return (unsigned)(b > 0 ? b : 1);
}

/* Programmatic dependent launch (compute capability 9.0 on): a kernel launched through
 * lb_launch_pdl may start while the kernel before it in its stream is finishing, once every
 * block of that kernel has called lb_pdl_trigger (or ended). Such a kernel calls lb_pdl_wait
 * before it reads or writes anything that kernel (or an earlier one) touches, which returns
 * once that kernel has ended and its writes are visible; what comes before the wait may only
 * read memory no kernel of the stream writes (weights). Both are no-ops in a kernel launched
 * the ordinary way and on older GPUs. */
__device__ __forceinline__ void lb_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void lb_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

template <typename X> struct lb_same { typedef X type; };

/* kernel<<<grid, block, smem, s>>>(args...), programmatically dependent on the kernel before
 * it where the current device has compute capability 9.0 or more and s is a stream of the
 * caller's own (the legacy default stream synchronises with every other: launched the
 * ordinary way there). Errors as a launch's (cudaGetLastError). */
template <typename... K>
static inline void lb_launch_pdl(void (*kernel)(K...), dim3 grid, dim3 block, size_t smem,
                                 cudaStream_t s, typename lb_same<K>::type... args) {
    static int major[16];
    int dev = 0, pdl = 0;
    if (s != NULL && cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < 16) {
        if (major[dev] == 0 &&
            cudaDeviceGetAttribute(&major[dev], cudaDevAttrComputeCapabilityMajor, dev) !=
                cudaSuccess)
            major[dev] = -1;
        pdl = major[dev] >= 9;
    }
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* Runs `body` with `T` bound to the element type of dtype `dt`. */
#define LB_DISPATCH_DTYPE(dt, T, ...)                                                              \
    do {                                                                                           \
        switch (dt) {                                                                              \
        case LB_DT_F32: {                                                                          \
            typedef float T;                                                                       \
            __VA_ARGS__;                                                                           \
        } break;                                                                                   \
        case LB_DT_F16: {                                                                          \
            typedef __half T;                                                                      \
            __VA_ARGS__;                                                                           \
        } break;                                                                                   \
        case LB_DT_BF16: {                                                                         \
            typedef __nv_bfloat16 T;                                                               \
            __VA_ARGS__;                                                                           \
        } break;                                                                                   \
        }                                                                                          \
    } while (0)

#endif
