/* tf32.cu: the 3xTF32 split kernel (gpu/blas/tf32.cuh). A grid-stride loop over the matrix
 * in groups of four columns (one float4 read, two float4 writes) when the layout allows,
 * else one element per step; the rule per element is gpu/blas/tf32.h's. Memory-bound: 12
 * bytes moved per element. */
#include "gpu/blas/tf32.cuh"
#include "gpu/blas/tf32.h"
#include "gpu/common.cuh"

static __global__ void tf32_split_vec_kernel(float *hi, float *lo, int64_t ld_dst, const float *src,
                                             int64_t ld_src, int64_t rows, int64_t cols4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * cols4;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols4, c = (i - r * cols4) * 4;
        float4 x = *(const float4 *)(src + r * ld_src + c), h, l;
        lb_tf32_split(x.x, &h.x, &l.x);
        lb_tf32_split(x.y, &h.y, &l.y);
        lb_tf32_split(x.z, &h.z, &l.z);
        lb_tf32_split(x.w, &h.w, &l.w);
        *(float4 *)(hi + r * ld_dst + c) = h;
        *(float4 *)(lo + r * ld_dst + c) = l;
    }
}

static __global__ void tf32_split_kernel(float *hi, float *lo, int64_t ld_dst, const float *src,
                                         int64_t ld_src, int64_t rows, int64_t cols) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * cols;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i - r * cols;
        lb_tf32_split(src[r * ld_src + c], hi + r * ld_dst + c, lo + r * ld_dst + c);
    }
}

extern "C" lb_status lb_gpu_tf32_split(float *hi, float *lo, int64_t ld_dst, const float *src,
                                       int64_t ld_src, int64_t rows, int64_t cols, cudaStream_t s,
                                       lb_err *err) {
    if (rows <= 0 || cols <= 0) return LB_OK;
    if (cols % 4 == 0 && ld_src % 4 == 0 && ld_dst % 4 == 0 && lb_aligned16(src) &&
        lb_aligned16(hi) && lb_aligned16(lo)) {
        int64_t n = rows * (cols / 4);
        tf32_split_vec_kernel<<<lb_grid_cap(n, 256), 256, 0, s>>>(hi, lo, ld_dst, src, ld_src, rows,
                                                                  cols / 4);
    } else {
        tf32_split_kernel<<<lb_grid_cap(rows * cols, 256), 256, 0, s>>>(hi, lo, ld_dst, src, ld_src,
                                                                        rows, cols);
    }
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
