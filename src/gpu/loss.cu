/* loss.cu: fused softmax cross-entropy (loss.cuh). One block per row: pass 1 keeps a
 * running (max, sum of exp) per thread over 16-byte vectors and merges them across the
 * block; pass 2 writes the gradient over the logits, and zeros in the padding columns
 * [V, ld) so a product over the padded width sees no garbage. */
#include "gpu/common.cuh"
#include "gpu/loss.cuh"

#define XENT_THREADS 512

/* Elements per 16-byte vector. Rows start 16-byte aligned when ld is a multiple of 8. */
template <typename T> struct vec16 {
    static constexpr int N = 16 / sizeof(T);
};

template <typename T>
__global__ void xent_kernel(T *logits, float *losses, const int32_t *targets, int V, int64_t ld,
                            float dloss, const float *dloss_scale, int write_grad, int vec) {
    constexpr int NV = vec16<T>::N;
    __shared__ float scratch[32];
    int64_t row = blockIdx.x;
    T *x = logits + row * ld;
    float m = -INFINITY, sum = 0.0f;
    int nvec = vec ? V / NV : 0; /* whole vectors inside [0, V) */
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        uint4 raw = *(const uint4 *)(x + (int64_t)i * NV);
        const T *e = (const T *)&raw;
        float vmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < NV; j++) vmax = fmaxf(vmax, lb_to_f(e[j]));
        if (vmax > m) {
            sum *= __expf(m - vmax);
            m = vmax;
        }
#pragma unroll
        for (int j = 0; j < NV; j++) sum += __expf(lb_to_f(e[j]) - m);
    }
    for (int i = nvec * NV + threadIdx.x; i < V; i += blockDim.x) {
        float v = lb_to_f(x[i]);
        if (v > m) {
            sum = sum * __expf(m - v) + 1.0f;
            m = v;
        } else {
            sum += __expf(v - m);
        }
    }
    float gm = lb_block_max(m, scratch);
    float gs = lb_block_sum(m == -INFINITY ? 0.0f : sum * __expf(m - gm), scratch);
    float lse = gm + logf(gs);
    int tgt = targets[row];
    float xt = lb_to_f(x[tgt]);
    __syncthreads(); /* every thread read x[tgt] before it is overwritten */
    if (threadIdx.x == 0) losses[row] = lse - xt;
    if (!write_grad) return;
    if (dloss_scale) dloss *= *dloss_scale;
    float inv = 1.0f / gs;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        uint4 raw = *(const uint4 *)(x + (int64_t)i * NV);
        T *e = (T *)&raw;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            int c = i * NV + j;
            float p = __expf(lb_to_f(e[j]) - gm) * inv;
            e[j] = lb_from_f<T>((p - (c == tgt ? 1.0f : 0.0f)) * dloss);
        }
        *(uint4 *)(x + (int64_t)i * NV) = raw;
    }
    for (int i = nvec * NV + threadIdx.x; i < V; i += blockDim.x) {
        float p = __expf(lb_to_f(x[i]) - gm) * inv;
        x[i] = lb_from_f<T>((p - (i == tgt ? 1.0f : 0.0f)) * dloss);
    }
    for (int64_t i = V + threadIdx.x; i < ld; i += blockDim.x) x[i] = lb_from_f<T>(0.0f);
}

__global__ void mean_kernel(float *mean, const float *x, int64_t n) {
    __shared__ float scratch[32];
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    s = lb_block_sum(s, scratch);
    if (threadIdx.x == 0) *mean = s / (float)n;
}

extern "C" lb_status lb_gpu_softmax_xent(void *logits, float *losses, const int32_t *targets,
                                         int64_t N, int V, int64_t ld, float dloss,
                                         const float *dloss_scale, int dlogits_out, lb_gpu_dtype dt, cudaStream_t s,
                                         lb_err *err) {
    LB_DISPATCH_DTYPE(dt, E,
        xent_kernel<E><<<(unsigned)N, XENT_THREADS, 0, s>>>(
            (E *)logits, losses, targets, V, ld, dloss, dloss_scale, dlogits_out,
            ((uintptr_t)logits % 16 == 0 && (ld * (int64_t)sizeof(E)) % 16 == 0) ? 1 : 0));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_gpu_mean(float *mean, const float *x, int64_t n, cudaStream_t s,
                                 lb_err *err) {
    mean_kernel<<<1, 1024, 0, s>>>(mean, x, n);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
