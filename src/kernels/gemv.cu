/* gemv.cu: products of a few rows against weights read once (gemv.cuh). */
#include "gpu/common.cuh"
#include "kernels/gemv.cuh"

#define GEMV_WARPS  8
#define GEMV_UNROLL 4

template <typename T, typename Y, int M>
static __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_kernel(Y *__restrict__ y, const T *__restrict__ x, const T *__restrict__ w,
                const T *__restrict__ res, int64_t K, int64_t OC) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t n = (int64_t)blockIdx.x * GEMV_WARPS + warp;
    if (n >= OC) return;
    constexpr int E = 16 / sizeof(T); /* elements a 16-byte load */
    const T *wr = w + n * K;
    const int iters = (int)(K / (32 * E));
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; m++)
        acc[m] = 0.0f;
    for (int it = 0; it < iters; it += GEMV_UNROLL) {
        uint4 wv[GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++)
            if (it + u < iters)
                wv[u] = __ldg((const uint4 *)(wr + (int64_t)(it + u) * 32 * E + lane * E));
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            if (it + u >= iters) break;
            const int64_t k = (int64_t)(it + u) * 32 * E + lane * E;
            const T *we = (const T *)&wv[u];
#pragma unroll
            for (int m = 0; m < M; m++) {
                const uint4 xv = *(const uint4 *)(x + m * K + k);
                const T *xe = (const T *)&xv;
#pragma unroll
                for (int j = 0; j < E; j++)
                    acc[m] += lb_to_f(we[j]) * lb_to_f(xe[j]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < M; m++)
        acc[m] = lb_warp_sum(acc[m]);
    if (lane == 0)
#pragma unroll
        for (int m = 0; m < M; m++)
            y[m * OC + n] = lb_from_f<Y>(acc[m] + (res ? lb_to_f(res[m * OC + n]) : 0.0f));
}

extern "C" bool lb_gemv_fits(int M, int64_t K, const void *x, const void *w, const void *res) {
    return M >= 1 && M <= LB_GEMV_MAX_ROWS && K % 256 == 0 && lb_aligned16(x) && lb_aligned16(w) &&
           (res == NULL || lb_aligned16(res));
}

template <typename T, typename Y>
static void launch(Y *y, const T *x, const T *w, const T *res, int M, int64_t K, int64_t OC,
                   cudaStream_t s) {
    const unsigned grid = (unsigned)((OC + GEMV_WARPS - 1) / GEMV_WARPS);
#define GEMV_ROWS(R)                                                                               \
    case R: gemv_kernel<T, Y, R><<<grid, GEMV_WARPS * 32, 0, s>>>(y, x, w, res, K, OC); break
    switch (M) {
        GEMV_ROWS(1);
        GEMV_ROWS(2);
        GEMV_ROWS(3);
        GEMV_ROWS(4);
        GEMV_ROWS(5);
        GEMV_ROWS(6);
        GEMV_ROWS(7);
        GEMV_ROWS(8);
    }
#undef GEMV_ROWS
}

extern "C" lb_status lb_gemv(void *y, lb_gpu_dtype y_type, const void *x, const void *w,
                             const void *res, int M, int64_t K, int64_t OC, lb_gpu_dtype dt,
                             cudaStream_t s, lb_err *err) {
    if (!lb_gemv_fits(M, K, x, w, res))
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "gemv runs 1 to %d rows, K a multiple of 256 and 16-byte aligned operands "
                       "(asked: %d rows, K %lld)",
                       LB_GEMV_MAX_ROWS, M, (long long)K);
    if (y_type == LB_DT_F32)
        LB_DISPATCH_DTYPE(
            dt, T,
            launch<T, float>((float *)y, (const T *)x, (const T *)w, (const T *)res, M, K, OC, s));
    else if (y_type == dt)
        LB_DISPATCH_DTYPE(
            dt, T, launch<T, T>((T *)y, (const T *)x, (const T *)w, (const T *)res, M, K, OC, s));
    else
        return lb_fail(err, LB_ERR_UNSUPPORTED, "gemv writes fp32 or the inputs' type");
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
