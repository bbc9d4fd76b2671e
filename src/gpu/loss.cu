/* loss.cu: fused softmax cross-entropy (loss.cuh). One block per row, written once and read
 * once as far as registers hold it: each thread loads its 16-byte vectors i = tid,
 * tid + blockDim, ... and keeps the first RV of them in registers. Pass 1 keeps a running
 * (max, sum of exp) over the vectors beyond RV * blockDim (loaded before any is held, so
 * several are in flight), then over the held ones, merged across the block; pass 2 writes
 * the gradient over the logits from the registers, then re-reads the vectors beyond, and
 * zeros in the padding columns [V, ld) so a product over the padded width sees no garbage.
 * RV comes from the row width: long rows run 512 threads x 8 vectors (64 registers, two
 * blocks an SM, so one block's loads overlap the other's exp work; one block of 1,024
 * holding a whole GPT-2 row was no faster). That holds 65% of a GPT-2 row (50,257 bf16)
 * and 26% of a Llama 3 row (128,256); the rest is read twice (the second time likely from
 * L2: 264 rows in flight on an H200, not 528) and is not kept in shared memory. */
#include "gpu/common.cuh"
#include "gpu/loss.cuh"

#define XENT_THREADS 512

/* Elements per 16-byte vector. Rows start 16-byte aligned when ld is a multiple of 8. */
template <typename T> struct vec16 {
    static constexpr int N = 16 / sizeof(T);
};

/* Folds vector raw into the running (m, sum) of exp(x - m). */
template <typename T> __device__ __forceinline__ void xent_online(uint4 raw, float &m, float &sum) {
    const T *e = (const T *)&raw;
    float vmax = -INFINITY;
#pragma unroll
    for (int j = 0; j < vec16<T>::N; j++) vmax = fmaxf(vmax, lb_to_f(e[j]));
    if (vmax > m) {
        sum *= __expf(m - vmax);
        m = vmax;
    }
#pragma unroll
    for (int j = 0; j < vec16<T>::N; j++) sum += __expf(lb_to_f(e[j]) - m);
}

/* Overwrites vector raw, columns c0.., with (softmax - onehot(tgt)) * dloss. */
template <typename T>
__device__ __forceinline__ void xent_grad(uint4 &raw, int c0, int tgt, float gm, float inv,
                                          float dloss) {
    T *e = (T *)&raw;
#pragma unroll
    for (int j = 0; j < vec16<T>::N; j++) {
        float p = __expf(lb_to_f(e[j]) - gm) * inv;
        e[j] = lb_from_f<T>((p - (c0 + j == tgt ? 1.0f : 0.0f)) * dloss);
    }
}

template <typename T, int RV>
__global__ void __launch_bounds__(XENT_THREADS, 2)
xent_kernel(T *logits, float *losses, const int32_t *targets, int V, int64_t ld, float dloss,
            const float *dloss_scale, int write_grad, int vec) {
    constexpr int NV = vec16<T>::N;
    __shared__ float scratch[32];
    int64_t row = blockIdx.x;
    T *x = logits + row * ld;
    int nvec = vec ? V / NV : 0; /* whole vectors inside [0, V) */
    float m = -INFINITY, sum = 0.0f;
#pragma unroll 4
    for (int i = threadIdx.x + RV * XENT_THREADS; i < nvec; i += XENT_THREADS)
        xent_online<T>(*(const uint4 *)(x + (int64_t)i * NV), m, sum);
    uint4 held[RV];
#pragma unroll
    for (int k = 0; k < RV; k++) {
        int i = threadIdx.x + k * XENT_THREADS;
        if (i < nvec) held[k] = *(const uint4 *)(x + (int64_t)i * NV);
    }
#pragma unroll
    for (int k = 0; k < RV; k++)
        if (threadIdx.x + k * XENT_THREADS < nvec) xent_online<T>(held[k], m, sum);
    for (int i = nvec * NV + threadIdx.x; i < V; i += XENT_THREADS) {
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
#pragma unroll
    for (int k = 0; k < RV; k++) {
        /* opaque to the compiler: no fp32 copies of the vector kept from pass 1 (bf16 spilled) */
        asm volatile("" : "+r"(held[k].x), "+r"(held[k].y), "+r"(held[k].z), "+r"(held[k].w));
        int i = threadIdx.x + k * XENT_THREADS;
        if (i < nvec) {
            xent_grad<T>(held[k], i * NV, tgt, gm, inv, dloss);
            *(uint4 *)(x + (int64_t)i * NV) = held[k];
        }
    }
#pragma unroll 4
    for (int i = threadIdx.x + RV * XENT_THREADS; i < nvec; i += XENT_THREADS) {
        uint4 raw = *(const uint4 *)(x + (int64_t)i * NV);
        xent_grad<T>(raw, i * NV, tgt, gm, inv, dloss);
        *(uint4 *)(x + (int64_t)i * NV) = raw;
    }
    for (int i = nvec * NV + threadIdx.x; i < V; i += XENT_THREADS) {
        float p = __expf(lb_to_f(x[i]) - gm) * inv;
        x[i] = lb_from_f<T>((p - (i == tgt ? 1.0f : 0.0f)) * dloss);
    }
    for (int64_t i = V + threadIdx.x; i < ld; i += XENT_THREADS) x[i] = lb_from_f<T>(0.0f);
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
        int vec = (uintptr_t)logits % 16 == 0 && (ld * (int64_t)sizeof(E)) % 16 == 0;
        if (V / vec16<E>::N <= XENT_THREADS * 4)
            xent_kernel<E, 4><<<(unsigned)N, XENT_THREADS, 0, s>>>(
                (E *)logits, losses, targets, V, ld, dloss, dloss_scale, dlogits_out, vec);
        else
            xent_kernel<E, 8><<<(unsigned)N, XENT_THREADS, 0, s>>>(
                (E *)logits, losses, targets, V, ld, dloss, dloss_scale, dlogits_out, vec));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_gpu_mean(float *mean, const float *x, int64_t n, cudaStream_t s,
                                 lb_err *err) {
    mean_kernel<<<1, 1024, 0, s>>>(mean, x, n);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
