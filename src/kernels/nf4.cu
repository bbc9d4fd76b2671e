/* nf4.cu: NF4 kernels (nf4.cuh). Quantising: one warp per block of 64 weights (two a lane,
 * a warp max for the absmax, one code byte a lane); the nearest code by the midpoints, in
 * the same float operations as model/nf4.c, so codes agree with the CPU's. The mean of the
 * absmax values is one 1,024-thread block summing in double; each group of 256 absmax
 * values is one block. Dequantising: a thread reads 4 code bytes and writes 8 weights. */
#include "gpu/common.cuh"
#include "kernels/nf4.cuh"

#define NF4_BLOCK 64
#define NF4_GROUP 256

__device__ __forceinline__ int nf4_nearest(float x, const lb_nf4_gpu_code &code) {
    int lo = 0, hi = 15;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        float split = 0.5f * (code.v[mid] + code.v[mid + 1]);
        if (x >= split)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static __global__ void nf4_quantize_kernel(uint8_t *codes, float *absmax, const float *w, int64_t n,
                                           lb_nf4_gpu_code code) {
    int64_t blk = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    int64_t i = blk * NF4_BLOCK + 2 * lane;
    if (blk * NF4_BLOCK >= n) return;
    float a = i < n ? w[i] : 0.0f, b = i + 1 < n ? w[i + 1] : 0.0f;
    float m = lb_warp_max(fmaxf(fabsf(a), fabsf(b)));
    /* below 2^-128 the reciprocal is infinite (0 x inf = NaN): there divide, as model/nf4.c */
    float inv = m > 0.0f ? 1.0f / m : 0.0f;
    float x = isinf(inv) ? a / m : a * inv, y = isinf(inv) ? b / m : b * inv;
    if (i < n) {
        int hi = nf4_nearest(x, code), lo = i + 1 < n ? nf4_nearest(y, code) : 0;
        codes[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    if (lane == 0) absmax[blk] = m;
}

static __global__ void nf4_mean_kernel(float *mean, const float *absmax, int64_t n) {
    __shared__ double part[1024];
    double acc = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        acc += absmax[j];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *mean = n > 0 ? (float)(part[0] / (double)n) : 0.0f;
}

static __global__ void nf4_group_kernel(int8_t *absmax_q, float *scale, const float *mean,
                                        const float *absmax, int64_t n) {
    __shared__ float red[32];
    int64_t j = blockIdx.x * (int64_t)NF4_GROUP + threadIdx.x;
    const float mu = *mean;
    float c = j < n ? absmax[j] - mu : 0.0f;
    float span = lb_block_max(fabsf(c), red);
    float sc = span / 127.0f;
    if (threadIdx.x == 0) scale[blockIdx.x] = sc;
    if (j < n) {
        float r = sc > 0.0f ? rintf(c / sc) : 0.0f;
        absmax_q[j] = (int8_t)fmaxf(-127.0f, fminf(127.0f, r));
    }
}

template <typename T>
static __global__ void nf4_dequantize_kernel(T *out, const uint32_t *codes, const int8_t *absmax_q,
                                             const float *scale, const float *mean, int64_t n8,
                                             lb_nf4_gpu_code code) {
    const float mu = *mean;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = i * 8 / NF4_BLOCK;
        /* unfused, as model/nf4.c computes it: the fp32 weights match the CPU's bit for bit */
        float am = __fadd_rn(__fmul_rn((float)absmax_q[j], scale[j / NF4_GROUP]), mu);
        uint32_t q = codes[i];
        float f[8];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t byte = (q >> (8 * k)) & 0xff; /* little-endian: byte k is elements 2k, 2k+1 */
            f[2 * k] = code.v[byte >> 4] * am;
            f[2 * k + 1] = code.v[byte & 15] * am;
        }
        lb_st8(out + i * 8, f);
    }
}

extern "C" lb_status lb_nf4_gpu_quantize(uint8_t *codes, float *absmax, const float *w, int64_t n,
                                         lb_nf4_gpu_code code, cudaStream_t s, lb_err *err) {
    int64_t blocks = (n + NF4_BLOCK - 1) / NF4_BLOCK;
    nf4_quantize_kernel<<<lb_blocks(blocks * 32, 256), 256, 0, s>>>(codes, absmax, w, n, code);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_nf4_gpu_double_quantize(int8_t *absmax_q, float *scale, float *mean,
                                                const float *absmax, int64_t n_blocks,
                                                cudaStream_t s, lb_err *err) {
    nf4_mean_kernel<<<1, 1024, 0, s>>>(mean, absmax, n_blocks);
    LB_CUDA_LAUNCH_TRY(err);
    nf4_group_kernel<<<lb_blocks(n_blocks, NF4_GROUP), NF4_GROUP, 0, s>>>(absmax_q, scale, mean,
                                                                          absmax, n_blocks);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_nf4_gpu_dequantize(void *out, lb_gpu_dtype dt, const uint8_t *codes,
                                           const int8_t *absmax_q, const float *scale,
                                           const float *mean, int64_t n, lb_nf4_gpu_code code,
                                           cudaStream_t s, lb_err *err) {
    if (n % 8 != 0 || (uintptr_t)codes % 4 != 0 || !lb_aligned16(out))
        return lb_fail(err, LB_ERR_RUNTIME,
                       "NF4 dequantisation needs a multiple of 8 weights, 4-byte aligned codes "
                       "and a 16-byte aligned output (%lld weights)",
                       (long long)n);
    LB_DISPATCH_DTYPE(dt, E,
                      nf4_dequantize_kernel<E><<<lb_grid_cap(n / 8, 256), 256, 0, s>>>(
                          (E *)out, (const uint32_t *)codes, absmax_q, scale, mean, n / 8, code));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
