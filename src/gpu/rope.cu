/* rope.cu: RoPE kernels (rope.cuh). One thread per rotated pair; the angle t * inv_freq is
 * formed in fp32 and sin/cos use the accurate (range-reduced) functions, since angles
 * reach thousands of radians at long positions. */
#include "gpu/common.cuh"
#include "gpu/rope.cuh"

template <typename T>
__global__ void rope_kernel(T *qkv, const float *inv_freq, int64_t BT, int T_, int NH, int NKV,
                            int HD, float sign) {
    int half = HD / 2, heads = NH + NKV; /* rotated heads: q then k */
    int64_t n = BT * heads * half;
    int width = (NH + 2 * NKV) * HD;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int j = (int)(i % half);
        int64_t r = i / half;
        int h = (int)(r % heads);
        int64_t bt = r / heads;
        int t = (int)(bt % T_);
        float sn, cs;
        sincosf((float)t * inv_freq[j], &sn, &cs);
        sn *= sign;
        T *x = qkv + bt * width + (int64_t)h * HD;
        float a = lb_to_f(x[j]), b = lb_to_f(x[j + half]);
        x[j] = lb_from_f<T>(a * cs - b * sn);
        x[j + half] = lb_from_f<T>(b * cs + a * sn);
    }
}

static lb_status launch(void *qkv, const float *inv_freq, int B, int T, int NH, int NKV, int HD,
                        lb_gpu_dtype dt, float sign, cudaStream_t s, lb_err *err) {
    int64_t n = (int64_t)B * T * (NH + NKV) * (HD / 2);
    LB_DISPATCH_DTYPE(dt, E,
        rope_kernel<E><<<lb_grid_cap(n, 256), 256, 0, s>>>((E *)qkv, inv_freq, (int64_t)B * T, T,
                                                           NH, NKV, HD, sign));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_gpu_rope_forward(void *qkv, const float *inv_freq, int B, int T, int NH,
                                         int NKV, int HD, lb_gpu_dtype dt, cudaStream_t s,
                                         lb_err *err) {
    return launch(qkv, inv_freq, B, T, NH, NKV, HD, dt, 1.0f, s, err);
}

extern "C" lb_status lb_gpu_rope_backward(void *dqkv, const float *inv_freq, int B, int T, int NH,
                                          int NKV, int HD, lb_gpu_dtype dt, cudaStream_t s,
                                          lb_err *err) {
    return launch(dqkv, inv_freq, B, T, NH, NKV, HD, dt, -1.0f, s, err);
}
