/* norm.cu: LayerNorm and RMSNorm kernels (norm.cuh).
 *
 * Forward: one warp per row; the row is read once for the statistics (two-pass: mean,
 * then the centred sum of squares, both over values the warp re-reads from L1) and once
 * to write. Backward: one warp per row, eight warps per block over a grid-stride range of
 * rows; the weight/bias gradients of the rows a block sees are summed in shared memory
 * and added to global memory once per block. */
#include "gpu/common.cuh"
#include "gpu/norm.cuh"

#define NORM_WARPS 8

template <typename T, bool LAYER>
__global__ void norm_forward_kernel(T *out, float *mean_out, float *rstd_out, const T *inp,
                                    const T *w, const T *b, int64_t N, int C, float eps) {
    int lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * NORM_WARPS + (threadIdx.x >> 5);
    if (row >= N) return;
    const T *x = inp + row * C;
    float mean = 0.0f;
    if (LAYER) {
        float s = 0.0f;
        for (int c = lane; c < C; c += 32) s += lb_to_f(x[c]);
        mean = lb_warp_sum(s) / C;
    }
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = lb_to_f(x[c]) - mean;
        ss += d * d;
    }
    float rstd = rsqrtf(lb_warp_sum(ss) / C + eps);
    T *o = out + row * C;
    for (int c = lane; c < C; c += 32) {
        float v = (lb_to_f(x[c]) - mean) * rstd * lb_to_f(w[c]);
        if (LAYER && b) v += lb_to_f(b[c]);
        o[c] = lb_from_f<T>(v);
    }
    if (lane == 0) {
        if (LAYER) mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

template <typename T, bool LAYER>
__global__ void norm_recompute_kernel(T *out, const T *inp, const T *w, const T *b,
                                      const float *mean, const float *rstd, int64_t N, int C) {
    int64_t n = N * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = i / C;
        int c = (int)(i % C);
        float v = (lb_to_f(inp[i]) - (LAYER ? mean[row] : 0.0f)) * rstd[row] * lb_to_f(w[c]);
        if (LAYER && b) v += lb_to_f(b[c]);
        out[i] = lb_from_f<T>(v);
    }
}

template <typename T, bool LAYER>
__global__ void norm_backward_kernel(T *dinp, float *dweight, float *dbias, const T *dout,
                                     const T *inp, const T *w, const float *mean,
                                     const float *rstd, int64_t N, int C) {
    extern __shared__ float sh[]; /* dweight partials [C], then dbias partials [C] */
    float *sdw = sh, *sdb = sh + C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        sdw[c] = 0.0f;
        if (LAYER) sdb[c] = 0.0f;
    }
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t row = (int64_t)blockIdx.x * NORM_WARPS + warp; row < N;
         row += (int64_t)gridDim.x * NORM_WARPS) {
        const T *x = inp + row * C, *dy = dout + row * C;
        float mu = LAYER ? mean[row] : 0.0f, rs = rstd[row];
        float s1 = 0.0f, s2 = 0.0f; /* sum dnorm, sum dnorm * xhat */
        for (int c = lane; c < C; c += 32) {
            float xhat = (lb_to_f(x[c]) - mu) * rs;
            float dn = lb_to_f(dy[c]) * lb_to_f(w[c]);
            s1 += dn;
            s2 += dn * xhat;
        }
        s1 = lb_warp_sum(s1) / C;
        s2 = lb_warp_sum(s2) / C;
        T *dx = dinp + row * C;
        for (int c = lane; c < C; c += 32) {
            float xhat = (lb_to_f(x[c]) - mu) * rs;
            float g = lb_to_f(dy[c]);
            float dn = g * lb_to_f(w[c]);
            float d = LAYER ? (dn - s1 - xhat * s2) * rs : (dn - xhat * s2) * rs;
            dx[c] = lb_from_f<T>(lb_to_f(dx[c]) + d);
            atomicAdd(&sdw[c], g * xhat);
            if (LAYER) atomicAdd(&sdb[c], g);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        atomicAdd(&dweight[c], sdw[c]);
        if (LAYER && dbias) atomicAdd(&dbias[c], sdb[c]);
    }
}

template <typename T, bool LAYER>
static lb_status launch_backward(void *dinp, float *dw, float *db, const void *dout,
                                 const void *inp, const void *w, const float *mean,
                                 const float *rstd, int64_t N, int C, cudaStream_t s,
                                 lb_err *err) {
    size_t smem = (size_t)(LAYER ? 2 : 1) * C * sizeof(float);
    if (smem > 48 * 1024)
        LB_CUDA_TRY(err, cudaFuncSetAttribute(norm_backward_kernel<T, LAYER>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)smem));
    int64_t blocks = (N + NORM_WARPS - 1) / NORM_WARPS;
    if (blocks > 132 * 4) blocks = 132 * 4;
    norm_backward_kernel<T, LAYER><<<(unsigned)blocks, NORM_WARPS * 32, smem, s>>>(
        (T *)dinp, dw, db, (const T *)dout, (const T *)inp, (const T *)w, mean, rstd, N, C);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_gpu_layernorm_forward(void *out, float *mean, float *rstd,
                                              const void *inp, const void *weight,
                                              const void *bias, int64_t N, int C, float eps,
                                              lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    unsigned blocks = lb_blocks(N, NORM_WARPS);
    LB_DISPATCH_DTYPE(dt, E,
        norm_forward_kernel<E, true><<<blocks, NORM_WARPS * 32, 0, s>>>(
            (E *)out, mean, rstd, (const E *)inp, (const E *)weight, (const E *)bias, N, C, eps));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_gpu_rmsnorm_forward(void *out, float *rstd, const void *inp,
                                            const void *weight, int64_t N, int C, float eps,
                                            lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    unsigned blocks = lb_blocks(N, NORM_WARPS);
    LB_DISPATCH_DTYPE(dt, E,
        norm_forward_kernel<E, false><<<blocks, NORM_WARPS * 32, 0, s>>>(
            (E *)out, NULL, rstd, (const E *)inp, (const E *)weight, NULL, N, C, eps));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_gpu_layernorm_backward(void *dinp, float *dweight, float *dbias,
                                               const void *dout, const void *inp,
                                               const void *weight, const float *mean,
                                               const float *rstd, int64_t N, int C,
                                               lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    LB_DISPATCH_DTYPE(dt, E,
        LB_TRY((launch_backward<E, true>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N,
                                         C, s, err))));
    return LB_OK;
}

extern "C" lb_status lb_gpu_rmsnorm_backward(void *dinp, float *dweight, const void *dout,
                                             const void *inp, const void *weight,
                                             const float *rstd, int64_t N, int C,
                                             lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    LB_DISPATCH_DTYPE(dt, E,
        LB_TRY((launch_backward<E, false>(dinp, dweight, NULL, dout, inp, weight, NULL, rstd, N,
                                          C, s, err))));
    return LB_OK;
}

extern "C" lb_status lb_gpu_norm_recompute(void *out, const void *inp, const void *weight,
                                           const void *bias, const float *mean,
                                           const float *rstd, int64_t N, int C,
                                           lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    unsigned blocks = lb_grid_cap(N * C, 256);
    if (mean != NULL) {
        LB_DISPATCH_DTYPE(dt, E,
            norm_recompute_kernel<E, true><<<blocks, 256, 0, s>>>(
                (E *)out, (const E *)inp, (const E *)weight, (const E *)bias, mean, rstd, N, C));
    } else {
        LB_DISPATCH_DTYPE(dt, E,
            norm_recompute_kernel<E, false><<<blocks, 256, 0, s>>>(
                (E *)out, (const E *)inp, (const E *)weight, NULL, NULL, rstd, N, C));
    }
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
